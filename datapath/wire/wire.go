// Package wire is the one Go definition of xdpfab's datapath packet format,
// documented byte by byte in docs/protocol.md.
//
// A packet is a UDP payload made of a fixed 40-byte common header, then
// NumOps fixed-size descriptors (48-byte op descriptors in a request,
// 16-byte response descriptors in a response), then the payloads of the ops
// in descriptor order. Fixed sizes at fixed offsets let the XDP program find
// each op's rkey, remote address, length and wanted access with a bounded
// loop and no parsing of payload bytes. All multi-byte fields are
// little-endian. The first byte is Magic and the second Version, so foreign
// UDP traffic is recognised by two compares.
//
// Encoding writes into caller-provided buffers (Builder, Header.Put) and
// decoding fills a caller-provided Packet whose payloads alias the input, so
// neither allocates. Decode validates everything the receiver relies on:
// magic, version, type, op counts, per-op lengths against the packet length,
// opcode/access consistency, reserved fields zero.
package wire

import (
	"encoding/binary"
	"errors"
)

// Format constants.
const (
	Magic   = 0xFB // first byte of every xdpfab packet
	Version = 1    // wire version this package speaks

	HeaderLen   = 40 // common header
	OpDescLen   = 48 // request op descriptor
	RespDescLen = 16 // response descriptor

	// MaxOps bounds the descriptors in one packet (and the XDP program's loop).
	MaxOps = 16
	// MaxPacketLen is the largest UDP payload (IPv4, 65535 - 20 - 8).
	MaxPacketLen = 65507
)

// Type is the packet type (header byte 2).
type Type uint8

// Packet types.
const (
	TypeReq  Type = 1 // request: NumOps op descriptors + payloads
	TypeResp Type = 2 // response to the request with the same Seq: NumOps response descriptors + payloads
	TypeAck  Type = 3 // receive state only (Ack/Sack), no descriptors
)

func (t Type) String() string {
	switch t {
	case TypeReq:
		return "REQ"
	case TypeResp:
		return "RESP"
	case TypeAck:
		return "ACK"
	}
	return "type?"
}

// Header flags (header byte 3).
const (
	// HdrRetransmit marks a retransmitted request: the target's response
	// to it carries no HdrOriginal.
	HdrRetransmit uint8 = 1 << 0
	// HdrHeld marks a response to a request the target had to hold until an
	// earlier one arrived, so its round trip is no RTT sample.
	HdrHeld uint8 = 1 << 1
	// HdrLost marks a response to a retransmitted request the target
	// delivered before but whose response it no longer caches: the request
	// executed exactly once, its results are gone, every op carries
	// FI_ENODATA. It is never executed again.
	HdrLost uint8 = 1 << 2
	// HdrAnswers marks a request that also answers requests its receiver
	// sent: Answered of them, the receiver's session AnsweredSession, the
	// last AnsweredSeq, were delivered and every op of them succeeded with
	// no response bytes (what their responses would have said). A
	// delayed acknowledgement riding on the reverse direction's data, as
	// TCP's: a message ping-pong costs two frames per round trip, not four.
	// On an ACK it marks a gathered acknowledgement: the ACK answers
	// Answered of the receiver's requests ending at its Seq (its Session
	// the receiver's), in place of that many such responses (one frame per
	// receive batch instead of one per request packet). REQ and ACK only;
	// see Header.Answer.
	HdrAnswers uint8 = 1 << 3
	// HdrOriginal marks a response the target made executing the
	// request's first transmission (one without HdrRetransmit, not held
	// behind a missing one) and sends for the first time: it is not a
	// replay from the target's cache, so it answers the original. An
	// initiator that retransmitted the request meanwhile knows the
	// retransmission was spurious and that the round trip since the first
	// transmission is a true RTT sample (Eifel, RFC 3522). RESP only;
	// answers (HdrAnswers) stand for responses with it.
	HdrOriginal  uint8 = 1 << 4
	hdrFlagsMask       = HdrRetransmit | HdrHeld | HdrLost | HdrAnswers | HdrOriginal
)

// Opcode is the operation an op descriptor asks for.
type Opcode uint8

// Opcodes.
const (
	OpMsg           Opcode = 1 // send/recv data (segmented; Addr = byte offset, Count = message length; see MsgProto)
	OpRMAWrite      Opcode = 2 // write payload at RKey/Addr
	OpRMARead       Opcode = 3 // read RespLen bytes at RKey/Addr
	OpAtomic        Opcode = 4 // fi_atomic: payload = operand
	OpFetchAtomic   Opcode = 5 // fi_fetch_atomic: payload = operand, response = old values
	OpCompareAtomic Opcode = 6 // fi_compare_atomic: payload = operand then compare, response = old values
	opMax           Opcode = 7
)

// NumOpcodes bounds the opcodes: arrays indexed by Opcode have this length.
const NumOpcodes = int(opMax)

var opNames = [opMax]string{"op?", "MSG", "RMA_WRITE", "RMA_READ", "ATOMIC", "FETCH_ATOMIC", "COMPARE_ATOMIC"}

func (o Opcode) String() string {
	if o < opMax {
		return opNames[o]
	}
	return "op?"
}

// Valid reports whether o is an opcode of this wire version.
func (o Opcode) Valid() bool { return o > 0 && o < opMax }

// Access bits: the remote access an op needs on the target region (the
// XDP program compares them with the MR's FI_REMOTE_READ/FI_REMOTE_WRITE).
const (
	AccessRead  uint8 = 1 << 0
	AccessWrite uint8 = 1 << 1
)

// Access returns the access bits an opcode requires; MSG needs none.
func (o Opcode) Access() uint8 {
	switch o {
	case OpRMAWrite, OpAtomic:
		return AccessWrite
	case OpRMARead:
		return AccessRead
	case OpFetchAtomic, OpCompareAtomic:
		return AccessRead | AccessWrite
	}
	return 0
}

// Op descriptor flags.
const (
	OpFence   uint16 = 1 << 0 // posted with FI_FENCE
	OpFirst   uint16 = 1 << 1 // first segment of the user operation
	OpLast    uint16 = 1 << 2 // last segment of the user operation
	OpCQData  uint16 = 1 << 3 // Data carries remote CQ data (FI_REMOTE_CQ_DATA)
	opMaskAll        = OpFence | OpFirst | OpLast | OpCQData
)

// Header is the 40-byte common header at offset 0 of the UDP payload.
//
// Seq, Ack and Sack are interpreted per Type; see docs/protocol.md.
type Header struct {
	Type    Type
	Flags   uint8
	NumOps  uint16
	SrcEP   uint32 // sender's endpoint id
	DstEP   uint32 // receiver's endpoint id
	AuthKey uint32 // auth key id the request is made under (0 = none)
	Session uint32 // initiator incarnation the sequence space belongs to
	Seq     uint32 // REQ: packet sequence number; RESP: Seq of the answered request; ACK with HdrAnswers: the last one answered
	Ack     uint32 // REQ: lowest Seq still awaiting a response; RESP/ACK: next Seq the target will deliver
	Sack    uint64 // RESP/ACK: bit i set = request Ack+1+i is held by the target; REQ with HdrAnswers: see Answer
	// Answered is, in a REQ or ACK with HdrAnswers, how many of the
	// receiver's requests it answers (1..65535; header bytes 6..7,
	// otherwise 0).
	Answered uint16
}

// Answer returns what a REQ or ACK with HdrAnswers answers: the
// receiver's requests last-n+1..last of its session, all delivered, every
// op a success without response bytes. A REQ carries session and last in
// its Sack field (unused in requests), an ACK in Session and Seq (its Sack
// is the target's selective ack, as in any ACK). n is 0 for any other
// packet.
func (h *Header) Answer() (session, last uint32, n int) {
	if h.Flags&HdrAnswers == 0 {
		return 0, 0, 0
	}
	switch h.Type {
	case TypeReq:
		return uint32(h.Sack), uint32(h.Sack >> 32), int(h.Answered)
	case TypeAck:
		return h.Session, h.Seq, int(h.Answered)
	}
	return 0, 0, 0
}

// PutAnswer makes the encoded request b answer n (1..65535) of its
// receiver's requests, session's last-n+1..last (see HdrAnswers).
func PutAnswer(b []byte, session, last uint32, n uint16) {
	b[3] |= HdrAnswers
	le.PutUint16(b[6:], n)
	le.PutUint64(b[32:], uint64(session)|uint64(last)<<32)
}

// ClearAnswer takes the answers out of the encoded request b (a
// retransmission answers nothing: what it answered may be stale by now).
func ClearAnswer(b []byte) {
	b[3] &^= HdrAnswers
	le.PutUint16(b[6:], 0)
	le.PutUint64(b[32:], 0)
}

// Put writes h into b[:HeaderLen]. b must be at least HeaderLen long.
func (h *Header) Put(b []byte) {
	_ = b[HeaderLen-1]
	b[0] = Magic
	b[1] = Version
	b[2] = uint8(h.Type)
	b[3] = h.Flags
	le.PutUint16(b[4:], h.NumOps)
	le.PutUint16(b[6:], h.Answered)
	le.PutUint32(b[8:], h.SrcEP)
	le.PutUint32(b[12:], h.DstEP)
	le.PutUint32(b[16:], h.AuthKey)
	le.PutUint32(b[20:], h.Session)
	le.PutUint32(b[24:], h.Seq)
	le.PutUint32(b[28:], h.Ack)
	le.PutUint64(b[32:], h.Sack)
}

// PutAck rewrites only the Ack and Sack fields of an encoded header, so a
// cached response can carry fresh receive state when it is resent.
func PutAck(b []byte, ack uint32, sack uint64) {
	le.PutUint32(b[28:], ack)
	le.PutUint64(b[32:], sack)
}

// Decode errors. Each is a distinct drop reason.
var (
	ErrShort    = errors.New("wire: packet shorter than header")
	ErrMagic    = errors.New("wire: not an xdpfab packet")
	ErrVersion  = errors.New("wire: unsupported version")
	ErrType     = errors.New("wire: unknown packet type")
	ErrNumOps   = errors.New("wire: op count out of range")
	ErrLength   = errors.New("wire: lengths do not match packet size")
	ErrOpcode   = errors.New("wire: unknown opcode")
	ErrReserved = errors.New("wire: reserved field or flag set")
)

// parse decodes and validates the header part of b.
func (h *Header) parse(b []byte) error {
	if len(b) < HeaderLen {
		if len(b) >= 1 && b[0] != Magic {
			return ErrMagic
		}
		return ErrShort
	}
	if b[0] != Magic {
		return ErrMagic
	}
	if b[1] != Version {
		return ErrVersion
	}
	h.Type = Type(b[2])
	h.Flags = b[3]
	h.NumOps = le.Uint16(b[4:])
	h.SrcEP = le.Uint32(b[8:])
	h.DstEP = le.Uint32(b[12:])
	h.AuthKey = le.Uint32(b[16:])
	h.Session = le.Uint32(b[20:])
	h.Seq = le.Uint32(b[24:])
	h.Ack = le.Uint32(b[28:])
	h.Sack = le.Uint64(b[32:])
	h.Answered = le.Uint16(b[6:])
	if h.Flags&^hdrFlagsMask != 0 {
		return ErrReserved
	}
	// Bytes 6..7 count the answers of a REQ or ACK with HdrAnswers; 0
	// otherwise.
	if answers := h.Flags&HdrAnswers != 0; answers != (h.Answered != 0) || answers && h.Type == TypeResp {
		return ErrReserved
	}
	if h.Flags&HdrOriginal != 0 && h.Type != TypeResp {
		return ErrReserved
	}
	switch h.Type {
	case TypeReq, TypeResp:
		if h.NumOps == 0 || h.NumOps > MaxOps {
			return ErrNumOps
		}
	case TypeAck:
		if h.NumOps != 0 {
			return ErrNumOps
		}
		if len(b) != HeaderLen {
			return ErrLength
		}
	default:
		return ErrType
	}
	return nil
}

// OpDesc is a 48-byte request op descriptor.
type OpDesc struct {
	Opcode   Opcode
	Access   uint8  // AccessRead|AccessWrite the op needs; must equal Opcode.Access()
	Datatype uint8  // enum fi_datatype (atomics); MSG: MsgProto
	AtomicOp uint8  // enum fi_op (atomics); MSG: message flags (MsgTagged)
	Flags    uint16 // OpFence, OpFirst, OpLast, OpCQData
	Len      uint32 // payload bytes of this op in this packet
	RespLen  uint32 // response bytes wanted (RMA_READ, FETCH/COMPARE_ATOMIC), else 0
	RKey     uint64 // remote key (RMA, atomics); MSG: tag (MsgTagged) or RndvKey (MsgData)
	Addr     uint64 // remote address (RMA, atomics); byte offset in the message (MSG)
	Data     uint64 // remote CQ data when OpCQData is set
	Count    uint32 // atomics: element count; MSG: total message length
}

func (d *OpDesc) put(b []byte) {
	_ = b[OpDescLen-1]
	b[0] = uint8(d.Opcode)
	b[1] = d.Access
	b[2] = d.Datatype
	b[3] = d.AtomicOp
	le.PutUint16(b[4:], d.Flags)
	le.PutUint16(b[6:], 0)
	le.PutUint32(b[8:], d.Len)
	le.PutUint32(b[12:], d.RespLen)
	le.PutUint64(b[16:], d.RKey)
	le.PutUint64(b[24:], d.Addr)
	le.PutUint64(b[32:], d.Data)
	le.PutUint32(b[40:], d.Count)
	le.PutUint32(b[44:], 0)
}

func (d *OpDesc) parse(b []byte) error {
	_ = b[OpDescLen-1]
	d.Opcode = Opcode(b[0])
	d.Access = b[1]
	d.Datatype = b[2]
	d.AtomicOp = b[3]
	d.Flags = le.Uint16(b[4:])
	d.Len = le.Uint32(b[8:])
	d.RespLen = le.Uint32(b[12:])
	d.RKey = le.Uint64(b[16:])
	d.Addr = le.Uint64(b[24:])
	d.Data = le.Uint64(b[32:])
	d.Count = le.Uint32(b[40:])
	if !d.Opcode.Valid() {
		return ErrOpcode
	}
	if d.Access != d.Opcode.Access() || d.Flags&^opMaskAll != 0 ||
		le.Uint16(b[6:]) != 0 || le.Uint32(b[44:]) != 0 {
		return ErrReserved
	}
	if d.RespLen > MaxPacketLen {
		return ErrLength
	}
	if d.Opcode == OpMsg {
		return d.checkMsg()
	}
	return nil
}

// RespDesc is a 16-byte response descriptor: the outcome of one op of the
// answered request. A non-zero Errno is the NAK of that op.
type RespDesc struct {
	Opcode Opcode // echo of the request op's opcode
	Errno  uint32 // fi.Errno value, 0 = success
	Len    uint32 // response payload bytes (read data, fetched values)
}

func (d *RespDesc) put(b []byte) {
	_ = b[RespDescLen-1]
	b[0] = uint8(d.Opcode)
	b[1], b[2], b[3] = 0, 0, 0
	le.PutUint32(b[4:], d.Errno)
	le.PutUint32(b[8:], d.Len)
	le.PutUint32(b[12:], 0)
}

func (d *RespDesc) parse(b []byte) error {
	_ = b[RespDescLen-1]
	d.Opcode = Opcode(b[0])
	d.Errno = le.Uint32(b[4:])
	d.Len = le.Uint32(b[8:])
	if !d.Opcode.Valid() {
		return ErrOpcode
	}
	if b[1]|b[2]|b[3] != 0 || le.Uint32(b[12:]) != 0 {
		return ErrReserved
	}
	return nil
}

// Packet is a decoded packet. Decode fills it without allocating; payloads
// alias the decoded buffer, so a Packet is valid only as long as that buffer.
type Packet struct {
	Header
	Ops   [MaxOps]OpDesc   // TypeReq: Ops[:NumOps]
	Resps [MaxOps]RespDesc // TypeResp: Resps[:NumOps]
	off   [MaxOps]uint32
	buf   []byte
}

// Payload returns the payload bytes of op i (request or response).
func (p *Packet) Payload(i int) []byte {
	var n uint32
	if p.Type == TypeReq {
		n = p.Ops[i].Len
	} else {
		n = p.Resps[i].Len
	}
	return p.buf[p.off[i] : p.off[i]+n : p.off[i]+n]
}

// DecodeHeader parses and validates only the common header of b, for a
// packet whose tail may be cut off (the copy of a sent datagram that an
// ICMP error carries back is truncated).
func DecodeHeader(b []byte, h *Header) error {
	return h.parse(b)
}

// Decode parses b into p, validating it completely. On error p's contents
// are unspecified.
func Decode(b []byte, p *Packet) error {
	if err := p.Header.parse(b); err != nil {
		return err
	}
	if len(b) > MaxPacketLen {
		return ErrLength
	}
	p.buf = b
	n := int(p.NumOps)
	var dlen int
	switch p.Type {
	case TypeReq:
		dlen = OpDescLen
	case TypeResp:
		dlen = RespDescLen
	default:
		return nil
	}
	off := HeaderLen + n*dlen
	if off > len(b) {
		return ErrLength
	}
	for i := 0; i < n; i++ {
		d := b[HeaderLen+i*dlen:]
		var l uint32
		if p.Type == TypeReq {
			if err := p.Ops[i].parse(d); err != nil {
				return err
			}
			l = p.Ops[i].Len
		} else {
			if err := p.Resps[i].parse(d); err != nil {
				return err
			}
			l = p.Resps[i].Len
		}
		if uint64(l) > uint64(len(b)-off) {
			return ErrLength
		}
		p.off[i] = uint32(off)
		off += int(l)
	}
	if off != len(b) {
		return ErrLength
	}
	return nil
}

// ErrNoRoom is returned by Builder when an op does not fit the buffer.
var ErrNoRoom = errors.New("wire: op does not fit in packet")

// Builder encodes a request or response into a caller-provided buffer one
// op at a time. Descriptors stay at their fixed offsets: adding an op moves
// the payload area up by one descriptor.
type Builder struct {
	buf  []byte // the whole buffer; cap is the packet size limit
	hdr  Header
	dlen int
	plen int // payload bytes so far
}

// Reset starts a packet of h.Type in buf (its full capacity is usable).
// h.NumOps is ignored; Add counts ops.
func (b *Builder) Reset(buf []byte, h Header) {
	b.buf = buf[:cap(buf)]
	b.hdr = h
	b.hdr.NumOps = 0
	b.plen = 0
	if h.Type == TypeResp {
		b.dlen = RespDescLen
	} else {
		b.dlen = OpDescLen
	}
}

// NumOps returns the ops added so far.
func (b *Builder) NumOps() int { return int(b.hdr.NumOps) }

// Room returns the payload bytes one more op could carry.
func (b *Builder) Room() int {
	if int(b.hdr.NumOps) >= MaxOps {
		return -1
	}
	return len(b.buf) - HeaderLen - (int(b.hdr.NumOps)+1)*b.dlen - b.plen
}

func (b *Builder) grow(l int) (dst []byte, err error) {
	if b.Room() < l {
		return nil, ErrNoRoom
	}
	dend := HeaderLen + int(b.hdr.NumOps)*b.dlen
	copy(b.buf[dend+b.dlen:], b.buf[dend:dend+b.plen])
	b.hdr.NumOps++
	b.plen += l
	return b.buf[dend : dend+b.dlen], nil
}

// AddOp appends a request op whose payload is p1 followed by p2 (either may
// be empty). d.Len and d.Access are set from the payload and opcode.
func (b *Builder) AddOp(d OpDesc, p1, p2 []byte) error {
	d.Len = uint32(len(p1) + len(p2))
	d.Access = d.Opcode.Access()
	dst, err := b.grow(int(d.Len))
	if err != nil {
		return err
	}
	d.put(dst)
	end := HeaderLen + int(b.hdr.NumOps)*b.dlen + b.plen
	copy(b.buf[end-len(p1)-len(p2):], p1)
	copy(b.buf[end-len(p2):], p2)
	return nil
}

// AddResp appends a response descriptor and returns the slice its payload
// of d.Len bytes must be written to.
func (b *Builder) AddResp(d RespDesc) ([]byte, error) {
	dst, err := b.grow(int(d.Len))
	if err != nil {
		return nil, err
	}
	d.put(dst)
	end := HeaderLen + int(b.hdr.NumOps)*b.dlen + b.plen
	return b.buf[end-int(d.Len) : end], nil
}

// SetLastResult sets the outcome of the last response added: its errno and
// its payload length n (at most the length reserved by AddResp), for
// handlers that fail or return fewer bytes than reserved.
func (b *Builder) SetLastResult(n int, errno uint32) {
	i := int(b.hdr.NumOps) - 1
	d := b.buf[HeaderLen+i*b.dlen:]
	le.PutUint32(d[4:], errno)
	old := int(le.Uint32(d[8:]))
	if n >= 0 && n < old {
		le.PutUint32(d[8:], uint32(n))
		b.plen -= old - n
	}
}

// Finish writes the header and returns the encoded packet.
func (b *Builder) Finish() []byte {
	b.hdr.Put(b.buf)
	return b.buf[:HeaderLen+int(b.hdr.NumOps)*b.dlen+b.plen]
}

// EncodeAck writes an ACK packet into buf and returns it.
func EncodeAck(buf []byte, h Header) []byte {
	h.Type = TypeAck
	h.NumOps = 0
	h.Put(buf)
	return buf[:HeaderLen]
}

// EncodeAnswersAck writes into buf an ACK that answers n (1..65535) of its
// receiver's requests, session's last-n+1..last (HdrAnswers), with the
// receive state ack and sack, and returns it. h gives the endpoints and
// auth key; its other fields are set here.
func EncodeAnswersAck(buf []byte, h Header, session, last, ack uint32, sack uint64, n uint16) []byte {
	h.Flags = HdrAnswers
	h.Answered = n
	h.Session, h.Seq, h.Ack, h.Sack = session, last, ack, sack
	return EncodeAck(buf, h)
}

var le = binary.LittleEndian
