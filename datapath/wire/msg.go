package wire

// Messages (opcode MSG) come in four protocol kinds, carried in the
// descriptor's datatype byte, which only atomics otherwise use; the
// atomic_op byte carries message flags. Both are 0 in an untagged eager
// message, the only kind wire version 1 had at first, so those packets
// are unchanged. The XDP program vets MSG ops by opcode and access alone
// (access 0), so none of this needs its attention.
//
//   - MsgEager: the message itself, cut into segments (Addr = offset,
//     Count = total length, FIRST/LAST flags).
//   - MsgRTS: ready-to-send of a rendezvous message, one op whose payload
//     is an RTS (RTSLen bytes): the message's length and the sender's
//     handle for it. The data follows only once the receiver has matched it.
//   - MsgCTS: clear-to-send, from the receiver back to the sender, one op
//     whose payload is a CTS (CTSLen bytes): the sender's handle, the
//     receiver's handle and how many bytes to push.
//   - MsgData: rendezvous data pushed after a CTS, segmented like an
//     eager message; RKey = RndvKey(receiver handle, base offset).
//
// With MsgTagged (eager and RTS only) RKey carries the message's tag.

// MsgProto is the protocol kind of a MSG op (the datatype byte).
type MsgProto uint8

// Message protocol kinds.
const (
	MsgEager    MsgProto = 0
	MsgRTS      MsgProto = 1
	MsgCTS      MsgProto = 2
	MsgData     MsgProto = 3
	msgProtoMax MsgProto = 4
)

func (p MsgProto) String() string {
	switch p {
	case MsgEager:
		return "EAGER"
	case MsgRTS:
		return "RTS"
	case MsgCTS:
		return "CTS"
	case MsgData:
		return "DATA"
	}
	return "proto?"
}

// Message flags (the atomic_op byte of a MSG op).
const (
	// MsgTagged marks a tagged message (fi_tsend and friends): RKey is
	// its tag. Only MsgEager and MsgRTS ops carry it.
	MsgTagged  uint8 = 1 << 0
	msgFlagAll       = MsgTagged
)

// MsgProto returns the protocol kind of a MSG op.
func (d *OpDesc) MsgProto() MsgProto { return MsgProto(d.Datatype) }

// MsgFlags returns the message flags of a MSG op.
func (d *OpDesc) MsgFlags() uint8 { return d.AtomicOp }

// checkMsg validates the MSG-specific fields of a decoded descriptor.
func (d *OpDesc) checkMsg() error {
	p := d.MsgProto()
	if p >= msgProtoMax || d.AtomicOp&^msgFlagAll != 0 || d.RespLen != 0 {
		return ErrReserved
	}
	if d.AtomicOp&MsgTagged != 0 && p != MsgEager && p != MsgRTS {
		return ErrReserved
	}
	if p != MsgData && p != MsgEager && d.RKey != 0 && d.AtomicOp&MsgTagged == 0 {
		return ErrReserved // RTS without tag and CTS have no key
	}
	return nil
}

// Control payload sizes.
const (
	RTSLen = 16
	CTSLen = 16
)

// RTS is the payload of a MsgRTS op.
type RTS struct {
	Len    uint64 // the message's total length
	Handle uint64 // the sender's handle, echoed in the CTS
}

// Put writes r into b[:RTSLen].
func (r *RTS) Put(b []byte) {
	_ = b[RTSLen-1]
	le.PutUint64(b[0:], r.Len)
	le.PutUint64(b[8:], r.Handle)
}

// Parse decodes an RTS payload; anything but RTSLen bytes is ErrLength.
func (r *RTS) Parse(b []byte) error {
	if len(b) != RTSLen {
		return ErrLength
	}
	r.Len = le.Uint64(b[0:])
	r.Handle = le.Uint64(b[8:])
	return nil
}

// CTS is the payload of a MsgCTS op.
type CTS struct {
	Handle uint64 // the sender's handle from the RTS
	Recv   uint32 // the receiver's handle, which MsgData ops name in RKey
	Accept uint32 // bytes the sender is to push (at most the message length)
}

// Put writes c into b[:CTSLen].
func (c *CTS) Put(b []byte) {
	_ = b[CTSLen-1]
	le.PutUint64(b[0:], c.Handle)
	le.PutUint32(b[8:], c.Recv)
	le.PutUint32(b[12:], c.Accept)
}

// Parse decodes a CTS payload; anything but CTSLen bytes is ErrLength.
func (c *CTS) Parse(b []byte) error {
	if len(b) != CTSLen {
		return ErrLength
	}
	c.Handle = le.Uint64(b[0:])
	c.Recv = le.Uint32(b[8:])
	c.Accept = le.Uint32(b[12:])
	return nil
}

// RndvKey is the RKey of a MsgData op: the receiver's handle in the low 32
// bits, the byte offset in the message where this push starts in the high
// 32 (a push's segments add their own offset, Addr).
func RndvKey(recv uint32, base uint32) uint64 { return uint64(base)<<32 | uint64(recv) }

// SplitRndvKey is the inverse of RndvKey.
func SplitRndvKey(k uint64) (recv uint32, base uint32) { return uint32(k), uint32(k >> 32) }
