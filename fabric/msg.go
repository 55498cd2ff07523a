package fabric

import (
	"fmt"

	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// Msg is struct fi_msg: the message of fi_sendmsg and fi_recvmsg. Addr is
// the destination (send) or the source to receive from (receive,
// FI_ADDR_UNSPEC: any); Data is sent with FI_REMOTE_CQ_DATA.
type Msg struct {
	MsgIOV  [][]byte
	Desc    []mr.Desc // nil, or one per MsgIOV entry
	Addr    fi.Addr
	Context any
	Data    uint64
}

// Per-call flags of fi_sendmsg. Everything else is FI_EBADFLAGS: xdpfab
// never ignores a flag that asks for something it does not do
// (FI_MULTICAST, FI_MATCH_COMPLETE, FI_COMMIT_COMPLETE, FI_CLAIM, ...).
const sendMsgFlags = fi.COMPLETION | fi.MORE | fi.INJECT | fi.FENCE | fi.REMOTE_CQ_DATA |
	fi.INJECT_COMPLETE | fi.TRANSMIT_COMPLETE | fi.DELIVERY_COMPLETE

// Per-call flags of fi_recvmsg. FI_TRANSMIT_COMPLETE and
// FI_DELIVERY_COMPLETE ask for no more than xdpfab does anyway (a receive
// completes once its data is in the buffer); FI_MORE is a hint.
// FI_MULTI_RECV is the multi-receive path's (see recvMsgNotYet); FI_CLAIM
// and FI_DISCARD need FI_BUFFERED_RECV, which xdpfab does not offer.
const recvMsgFlags = fi.COMPLETION | fi.MORE | fi.TRANSMIT_COMPLETE | fi.DELIVERY_COMPLETE

// scratchKeep bounds the gather buffer an op slot keeps between
// operations: vectors up to this size are gathered with no allocation once
// warm; larger ones into a buffer of their own, freed with the operation.
const scratchKeep = 64 << 10

// checkVec checks an iovec array and its descriptors: at most IovLimit
// entries (iov_limit), and desc either empty or one per entry.
func checkVec(iov [][]byte, desc []mr.Desc) (int, error) {
	if len(iov) > IovLimit {
		return 0, fmt.Errorf("%d iovecs > iov_limit %d: %w", len(iov), IovLimit, fi.EINVAL)
	}
	if len(desc) != 0 && len(desc) < len(iov) {
		return 0, fmt.Errorf("%d descriptors for %d iovecs: %w", len(desc), len(iov), fi.EINVAL)
	}
	n := 0
	for _, b := range iov {
		n += len(b)
	}
	return n, nil
}

// checkLocalVec is checkLocal for each entry of an iovec array.
func (ep *Endpoint) checkLocalVec(desc []mr.Desc, iov [][]byte, access fi.Flags) error {
	for i, b := range iov {
		var d mr.Desc
		if i < len(desc) {
			d = desc[i]
		}
		if err := ep.checkLocal(d, b, access); err != nil {
			return fmt.Errorf("iovec %d: %w", i, err)
		}
	}
	return nil
}

// gather returns the n bytes of iov as one slice: the buffer itself when
// there is one, else a copy in the op's scratch buffer (or, past
// scratchKeep, in a buffer of the operation's own).
func (o *txOp) gather(iov [][]byte, n int) []byte {
	switch len(iov) {
	case 0:
		return nil
	case 1:
		return iov[0]
	}
	dst := o.buffer(n)
	off := 0
	for _, b := range iov {
		off += copy(dst[off:], b)
	}
	return dst
}

// buffer returns n bytes of scratch for the op.
func (o *txOp) buffer(n int) []byte {
	if n > scratchKeep {
		return make([]byte, n)
	}
	if cap(o.scratch) < n {
		o.scratch = make([]byte, max(n, 4096))
	}
	return o.scratch[:n]
}

// sendArgs is an fi_msg without the context, which travels apart (see
// atomicArgs).
type sendArgs struct {
	iov  [][]byte
	desc []mr.Desc
	dest fi.Addr
	data uint64
	// inject marks fi_inject and fi_injectdata: no completion, and no
	// descriptor to check (the buffer is copied before return).
	inject bool
}

// send is the one path behind the vector and msg forms of fi_msg(3)'s
// sends: a vector is gathered into one message.
func (ep *Endpoint) send(call string, a *sendArgs, ctx any, flags fi.Flags) error {
	n, err := checkVec(a.iov, a.desc)
	if err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	if err := checkMsgSize(call, n); err != nil {
		return err
	}
	if flags&fi.INJECT != 0 && n > ep.size.injectSize {
		return fmt.Errorf("%s: inject of %d bytes > inject_size %d: %w", call, n, ep.size.injectSize, fi.EMSGSIZE)
	}
	if !a.inject {
		if err := ep.checkLocalVec(a.desc, a.iov, fi.SEND); err != nil {
			return fmt.Errorf("%s: %w", call, err)
		}
	}
	r := reliable.Request{Opcode: wire.OpMsg, Data: a.data}
	o, err := ep.begin(&r, a.dest, flags, cntrSend, fi.SEND|fi.MSG, ctx, a.inject)
	if err != nil {
		return wrap(call, err)
	}
	r.Payload = o.gather(a.iov, n)
	return wrap(call, ep.submit(o, &r))
}

// SendV is fi_sendv: the buffers of iov, in order, as one message.
// iov holds at most IovLimit buffers (FI_EINVAL otherwise); desc is nil or
// one descriptor per buffer (FI_MR_LOCAL).
func (ep *Endpoint) SendV(iov [][]byte, desc []mr.Desc, dest fi.Addr, context any) error {
	a := sendArgs{iov: iov, desc: desc, dest: dest}
	return ep.send("sendv", &a, context, ep.attr.OpFlags)
}

// SendMsg is fi_sendmsg. flags replace the endpoint's default op flags:
// fi.REMOTE_CQ_DATA sends msg.Data, fi.COMPLETION asks for a completion
// on a CQ bound with FI_SELECTIVE_COMPLETION, fi.INJECT (at most
// InjectSize bytes) frees the buffers at return, fi.FENCE waits for the
// earlier operations to the peer, fi.MORE lets the datapath hold the
// message for the next one; fi.INJECT_COMPLETE, fi.TRANSMIT_COMPLETE and
// fi.DELIVERY_COMPLETE are all met by xdpfab's delivery completion (see
// Completion levels in the package doc). Other flags: FI_EBADFLAGS.
func (ep *Endpoint) SendMsg(msg *Msg, flags fi.Flags) error {
	if msg == nil {
		return fmt.Errorf("sendmsg: nil msg: %w", fi.EINVAL)
	}
	if flags&^sendMsgFlags != 0 {
		return fmt.Errorf("sendmsg: flags %#x: %w", uint64(flags&^sendMsgFlags), fi.EBADFLAGS)
	}
	a := sendArgs{iov: msg.MsgIOV, desc: msg.Desc, dest: msg.Addr, data: msg.Data}
	return ep.send("sendmsg", &a, msg.Context, flags)
}

// InjectData is fi_injectdata: Inject with remote CQ data.
func (ep *Endpoint) InjectData(buf []byte, data uint64, dest fi.Addr) error {
	iov := [1][]byte{buf}
	a := sendArgs{iov: iov[:], dest: dest, data: data, inject: true}
	return ep.send("injectdata", &a, nil, fi.INJECT|fi.REMOTE_CQ_DATA)
}

// RecvV is fi_recvv: post the buffers of iov (at most IovLimit) to be
// filled in order by the next message from src (FI_ADDR_UNSPEC: any).
// The completion's Len is the message's length; Buf is the first buffer's
// part of it.
func (ep *Endpoint) RecvV(iov [][]byte, desc []mr.Desc, src fi.Addr, context any) error {
	return ep.recvVec("recvv", iov, desc, src, context, ep.attr.OpFlags&fi.COMPLETION)
}

// RecvMsg is fi_recvmsg: RecvV with per-call flags (fi.COMPLETION,
// fi.MORE, fi.TRANSMIT_COMPLETE, fi.DELIVERY_COMPLETE). Other flags fail
// with FI_EBADFLAGS.
func (ep *Endpoint) RecvMsg(msg *Msg, flags fi.Flags) error {
	if msg == nil {
		return fmt.Errorf("recvmsg: nil msg: %w", fi.EINVAL)
	}
	if err := recvMsgNotYet(flags); err != nil {
		return fmt.Errorf("recvmsg: %w", err)
	}
	if flags&^recvMsgFlags != 0 {
		return fmt.Errorf("recvmsg: flags %#x: %w", uint64(flags&^recvMsgFlags), fi.EBADFLAGS)
	}
	return ep.recvVec("recvmsg", msg.MsgIOV, msg.Desc, msg.Addr, msg.Context, flags)
}

// recvMsgNotYet refuses the receive flags whose paths are not in this
// file: FI_MULTI_RECV belongs to the multi-receive buffers.
func recvMsgNotYet(flags fi.Flags) error {
	if flags&fi.MULTI_RECV != 0 {
		return fmt.Errorf("FI_MULTI_RECV: %w", fi.EOPNOTSUPP)
	}
	return nil
}

func (ep *Endpoint) recvVec(call string, iov [][]byte, desc []mr.Desc, src fi.Addr, ctx any, flags fi.Flags) error {
	if _, err := checkVec(iov, desc); err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	if err := ep.checkLocalVec(desc, iov, fi.RECV); err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	return wrap(call, ep.postRecv(iov, src, ctx, flags))
}

// recvIOV is the buffers a posted receive fills, held by value so that a
// caller's iovec array does not escape (no allocation per receive).
type recvIOV struct {
	bufs [IovLimit][]byte
	n    int
	size int // bytes in all
}

func (v *recvIOV) set(iov [][]byte) {
	v.n = copy(v.bufs[:], iov)
	v.size = 0
	for _, b := range iov {
		v.size += len(b)
	}
}

// first is the first buffer (nil for none): what a completion's Buf
// points into.
func (v *recvIOV) first() []byte {
	if v.n == 0 {
		return nil
	}
	return v.bufs[0]
}

// place copies p to offset off of the message, across the buffers;
// what falls past their end is dropped (truncation).
func (v *recvIOV) place(off int, p []byte) {
	for i := 0; i < v.n && len(p) > 0; i++ {
		b := v.bufs[i]
		if off >= len(b) {
			off -= len(b)
			continue
		}
		k := copy(b[off:], p)
		p = p[k:]
		off = 0
	}
}
