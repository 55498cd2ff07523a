package fabric

import (
	"fmt"

	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// RMAIov is struct fi_rma_iov: Len bytes at Addr in the peer's region Key.
type RMAIov struct {
	Addr uint64
	Len  int
	Key  uint64
}

// MsgRMA is struct fi_msg_rma: the local buffers MsgIOV (at most IovLimit)
// and the remote range RMAIOV (exactly RMAIovLimit, one) of fi_writemsg
// and fi_readmsg. The local buffers hold as many bytes as the remote range
// (FI_EINVAL otherwise). Data is sent with FI_REMOTE_CQ_DATA (writes).
type MsgRMA struct {
	MsgIOV  [][]byte
	Desc    []mr.Desc // nil, or one per MsgIOV entry
	Addr    fi.Addr
	RMAIOV  []RMAIov
	Context any
	Data    uint64
}

// Per-call flags of fi_writemsg (as fi_sendmsg's) and fi_readmsg, which
// sends no data (FI_REMOTE_CQ_DATA, FI_INJECT: FI_EBADFLAGS).
const (
	writeMsgFlags = sendMsgFlags
	readMsgFlags  = fi.COMPLETION | fi.MORE | fi.FENCE |
		fi.INJECT_COMPLETE | fi.TRANSMIT_COMPLETE | fi.DELIVERY_COMPLETE
)

// rmaArgs is an fi_msg_rma without the context (see atomicArgs).
type rmaArgs struct {
	iov       [][]byte
	desc      []mr.Desc
	peer      fi.Addr
	addr, key uint64
	rlen      int // the remote range's length, -1: the local buffers'
	data      uint64
	// inject marks fi_inject_write and fi_inject_writedata: no
	// completion, no descriptor to check.
	inject bool
}

// msgRMAArgs unpacks an fi_msg_rma: rma_iov_limit is 1.
func msgRMAArgs(call string, msg *MsgRMA) (rmaArgs, error) {
	if msg == nil {
		return rmaArgs{}, fmt.Errorf("%s: nil msg: %w", call, fi.EINVAL)
	}
	if len(msg.RMAIOV) != RMAIovLimit {
		return rmaArgs{}, fmt.Errorf("%s: %d remote iovecs (rma_iov_limit %d): %w", call, len(msg.RMAIOV), RMAIovLimit, fi.EINVAL)
	}
	r := msg.RMAIOV[0]
	if r.Len < 0 {
		return rmaArgs{}, fmt.Errorf("%s: remote length %d: %w", call, r.Len, fi.EINVAL)
	}
	return rmaArgs{iov: msg.MsgIOV, desc: msg.Desc, peer: msg.Addr, addr: r.Addr, key: r.Key, rlen: r.Len, data: msg.Data}, nil
}

// checkRMA checks the local side of an RMA call and returns its length.
func (ep *Endpoint) checkRMA(call string, a *rmaArgs, access fi.Flags) (int, error) {
	n, err := checkVec(a.iov, a.desc)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", call, err)
	}
	if a.rlen >= 0 && a.rlen != n {
		return 0, fmt.Errorf("%s: %d local bytes for a remote range of %d: %w", call, n, a.rlen, fi.EINVAL)
	}
	if err := checkMsgSize(call, n); err != nil {
		return 0, err
	}
	if !a.inject {
		if err := ep.checkLocalVec(a.desc, a.iov, access); err != nil {
			return 0, fmt.Errorf("%s: %w", call, err)
		}
	}
	return n, nil
}

// rmaWrite is the one path behind fi_write, fi_writev, fi_writemsg,
// fi_writedata, fi_inject_write and fi_inject_writedata.
func (ep *Endpoint) rmaWrite(call string, a *rmaArgs, ctx any, flags fi.Flags) error {
	n, err := ep.checkRMA(call, a, fi.WRITE)
	if err != nil {
		return err
	}
	if flags&fi.INJECT != 0 && n > ep.size.injectSize {
		return fmt.Errorf("%s: inject of %d bytes > inject_size %d: %w", call, n, ep.size.injectSize, fi.EMSGSIZE)
	}
	// Count tells the target the whole transfer's length so that it can
	// check the range before the first segment lands (see HandleRequest).
	r := reliable.Request{Opcode: wire.OpRMAWrite, RKey: a.key, Addr: a.addr, Data: a.data, Count: uint32(n)}
	o, err := ep.begin(&r, a.peer, flags, cntrWrite, fi.RMA|fi.WRITE, ctx, a.inject)
	if err != nil {
		return wrap(call, err)
	}
	r.Payload = o.gather(a.iov, n)
	return wrap(call, ep.submit(o, &r))
}

// rmaRead is the one path behind fi_readv and fi_readmsg: several local
// buffers are read into the op's scratch buffer and scattered into them
// when the read completes.
func (ep *Endpoint) rmaRead(call string, a *rmaArgs, ctx any, flags fi.Flags) error {
	n, err := ep.checkRMA(call, a, fi.READ)
	if err != nil {
		return err
	}
	r := reliable.Request{Opcode: wire.OpRMARead, RKey: a.key, Addr: a.addr}
	o, err := ep.begin(&r, a.peer, flags, cntrRead, fi.RMA|fi.READ, ctx, false)
	if err != nil {
		return wrap(call, err)
	}
	switch len(a.iov) {
	case 0:
	case 1:
		r.Result = a.iov[0]
	default:
		r.Result = o.buffer(n)
		o.result, o.elemSize = r.Result, 1
		for i, b := range a.iov {
			o.resultV[i] = IOC{Buf: b, Count: len(b)}
		}
		o.nres = len(a.iov)
	}
	return wrap(call, ep.submit(o, &r))
}

// WriteV is fi_writev: the buffers of iov (at most IovLimit), in order,
// to the peer's region key at addr.
func (ep *Endpoint) WriteV(iov [][]byte, desc []mr.Desc, dest fi.Addr, addr, key uint64, context any) error {
	a := rmaArgs{iov: iov, desc: desc, peer: dest, addr: addr, key: key, rlen: -1}
	return ep.rmaWrite("writev", &a, context, ep.attr.OpFlags)
}

// WriteMsg is fi_writemsg. flags are fi_sendmsg's (see SendMsg): with
// fi.REMOTE_CQ_DATA the target's receive CQ gets a completion with
// FI_RMA|FI_REMOTE_WRITE|FI_REMOTE_CQ_DATA and msg.Data, consuming no
// posted receive; fi.INJECT (at most InjectSize bytes) frees the buffers
// at return, and the write still completes.
func (ep *Endpoint) WriteMsg(msg *MsgRMA, flags fi.Flags) error {
	if flags&^writeMsgFlags != 0 {
		return fmt.Errorf("writemsg: flags %#x: %w", uint64(flags&^writeMsgFlags), fi.EBADFLAGS)
	}
	a, err := msgRMAArgs("writemsg", msg)
	if err != nil {
		return err
	}
	return ep.rmaWrite("writemsg", &a, msg.Context, flags)
}

// WriteData is fi_writedata: Write with remote CQ data, reported at the
// target as WriteMsg with fi.REMOTE_CQ_DATA describes.
func (ep *Endpoint) WriteData(buf []byte, desc mr.Desc, data uint64, dest fi.Addr, addr, key uint64, context any) error {
	iov, d := [1][]byte{buf}, [1]mr.Desc{desc}
	a := rmaArgs{iov: iov[:], desc: d[:], peer: dest, addr: addr, key: key, rlen: -1, data: data}
	return ep.rmaWrite("writedata", &a, context, ep.attr.OpFlags|fi.REMOTE_CQ_DATA)
}

// InjectWriteData is fi_inject_writedata: InjectWrite with remote CQ data.
func (ep *Endpoint) InjectWriteData(buf []byte, data uint64, dest fi.Addr, addr, key uint64) error {
	iov := [1][]byte{buf}
	a := rmaArgs{iov: iov[:], peer: dest, addr: addr, key: key, rlen: -1, data: data, inject: true}
	return ep.rmaWrite("inject_writedata", &a, nil, fi.INJECT|fi.REMOTE_CQ_DATA)
}

// ReadV is fi_readv: the peer's region key from addr into the buffers of
// iov (at most IovLimit), in order.
func (ep *Endpoint) ReadV(iov [][]byte, desc []mr.Desc, src fi.Addr, addr, key uint64, context any) error {
	a := rmaArgs{iov: iov, desc: desc, peer: src, addr: addr, key: key, rlen: -1}
	return ep.rmaRead("readv", &a, context, ep.attr.OpFlags&^fi.INJECT)
}

// ReadMsg is fi_readmsg, with readv's buffers and per-call flags
// (fi.COMPLETION, fi.MORE, fi.FENCE and the completion levels;
// FI_REMOTE_CQ_DATA and FI_INJECT, which apply to writes, fail with
// FI_EBADFLAGS).
func (ep *Endpoint) ReadMsg(msg *MsgRMA, flags fi.Flags) error {
	if flags&^readMsgFlags != 0 {
		return fmt.Errorf("readmsg: flags %#x: %w", uint64(flags&^readMsgFlags), fi.EBADFLAGS)
	}
	a, err := msgRMAArgs("readmsg", msg)
	if err != nil {
		return err
	}
	return ep.rmaRead("readmsg", &a, msg.Context, flags)
}
