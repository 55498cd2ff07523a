package fabric

import (
	"fmt"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// IOC is struct fi_ioc: a buffer of Count elements of the atomic datatype.
type IOC struct {
	Buf   []byte
	Count int
}

// RMAIOC is struct fi_rma_ioc: Count elements at Addr in the peer's region
// Key.
type RMAIOC struct {
	Addr  uint64
	Count int
	Key   uint64
}

// MsgAtomic is struct fi_msg_atomic.
type MsgAtomic struct {
	MsgIOV   []IOC
	Desc     []mr.Desc
	Addr     fi.Addr
	RMAIOV   []RMAIOC // xdpfab's rma_iov_limit is 1
	Datatype fatomic.Datatype
	Op       fatomic.Op
	Context  any
	Data     uint64
}

// RMAIovLimit is rma_iov_limit: one remote target range per call.
const RMAIovLimit = 1

// IovLimit is iov_limit for the vectored atomic calls.
const IovLimit = 8

// opFlagsAllowed are the per-call flags the *Msg calls accept.
const opFlagsAllowed = fi.COMPLETION | fi.MORE | fi.INJECT | fi.FENCE | fi.REMOTE_CQ_DATA |
	fi.DELIVERY_COMPLETE | fi.TRANSMIT_COMPLETE | fi.INJECT_COMPLETE

// post validates the endpoint state, takes an op slot (and a CQ slot) and
// submits r: begin then submit. kind is the counter kind the op advances;
// cqFlags the completion's flags; injectCall marks the fi_inject_* calls,
// which generate no completion. It returns FI_EAGAIN when TxSize
// operations are outstanding or the CQ has no room for another completion.
func (ep *Endpoint) post(r *reliable.Request, dest fi.Addr, flags fi.Flags, kind int, cqFlags fi.Flags, ctx any, injectCall bool) error {
	o, err := ep.begin(r, dest, flags, kind, cqFlags, ctx, injectCall)
	if err != nil {
		return err
	}
	return ep.submit(o, r)
}

// begin is the first half of post: checks, and an op slot for the
// operation, with r's peer and flags filled in. The caller may fill the
// op's scratch buffers before submit; on its own errors it must call
// ep.abort(o).
//
// injectCall is true for fi_inject, fi_inject_write and fi_inject_atomic,
// which behave "as if the FI_INJECT transfer flag were set, and
// FI_COMPLETION were not": they never generate a completion, not even
// an error one, and reserve no CQ slot. FI_INJECT passed as a flag (to
// the *Msg calls or in EPAttr.OpFlags) only lets the caller reuse the
// source buffers at return; completions follow the usual rules.
func (ep *Endpoint) begin(r *reliable.Request, dest fi.Addr, flags fi.Flags, kind int, cqFlags fi.Flags, ctx any, injectCall bool) (*txOp, error) {
	if flags&^opFlagsAllowed != 0 {
		return nil, fmt.Errorf("%w: flags %#x", fi.EBADFLAGS, uint64(flags&^opFlagsAllowed))
	}
	ep.mu.Lock()
	if !ep.enabled || ep.closed {
		ep.mu.Unlock()
		return nil, fmt.Errorf("endpoint not enabled: %w", fi.EOPBADSTATE)
	}
	cq, sel, avb, keys := ep.txCQ, ep.txSel, ep.av, ep.authKeys
	if len(ep.freeOps) == 0 {
		ep.mu.Unlock()
		return nil, fi.EAGAIN
	}
	idx := ep.freeOps[len(ep.freeOps)-1]
	ep.freeOps = ep.freeOps[:len(ep.freeOps)-1]
	// A CQ slot from the credits when there are some (cq_credits.go):
	// no CQ lock for this post.
	credit := cq != nil && !injectCall && ep.txCredits > 0
	if credit {
		ep.txCredits--
	}
	ep.mu.Unlock()

	o := &ep.ops[idx]
	ap, keyH, ok := avb.AddrPortAuthKey(dest)
	if !ok {
		ep.freeOpCredit(o, cq, credit)
		return nil, fmt.Errorf("destination %v not in the AV: %w", dest, fi.EADDRNOTAVAIL)
	}
	digest, ok := ep.presentedDigest(keys, keyH)
	if !ok {
		ep.freeOpCredit(o, cq, credit)
		return nil, fmt.Errorf("destination %v is bound to auth key %#x, inserted after the endpoint was enabled: %w",
			dest, uint64(keyH), fi.EACCES)
	}
	// Field by field, not *o = txOp{...}: that zeroed the whole op, its
	// result iovecs included, on every post. A free op has no result
	// iovecs (finishOp and abort clear them) and keeps its scratch.
	o.idx, o.ctx, o.cqFlags, o.cntr, o.dest, o.cq = idx, ctx, cqFlags, kind, dest, cq
	o.reserved, o.result, o.nres, o.elemSize, o.rndv = false, nil, 0, 0, false
	// A completion is written unless the CQ is selective and the op did
	// not ask for one; the inject calls never generate one. Errors always
	// do when a CQ is bound, so a slot is reserved whenever a CQ is.
	o.wantComp = cq != nil && !injectCall && (!sel || flags&fi.COMPLETION != 0)
	if cq != nil && !injectCall {
		if !credit {
			if err := ep.reserveTx(cq); err != nil {
				ep.freeOp(o)
				return nil, err
			}
		}
		o.reserved = true
	}
	r.Peer = reliable.Peer{Addr: ap, EP: endpointID}
	r.AuthKey = digest
	r.Flags = flags & (fi.MORE | fi.FENCE | fi.INJECT | fi.REMOTE_CQ_DATA)
	// A pointer in an interface is stored as is: no allocation per op.
	r.Context = o
	return o, nil
}

// presentedDigest returns the digest of the authorization key a request
// to an AV entry bound to auth key handle keyH (fi.AddrNotAvail: none)
// presents, as the wire header's auth_key: the entry's key when it has
// one, else the domain's (xdpfab models no per-endpoint ep_attr.auth_key).
// keys are the endpoint's, from Enable (ep.authKeys). An entry bound to a
// key the endpoint was not enabled against (inserted later, which
// fi_av_insert_auth_key says does not propagate to enabled endpoints) has
// no digest here: ok is false.
func (ep *Endpoint) presentedDigest(keys map[fi.Addr]uint32, keyH fi.Addr) (digest uint32, ok bool) {
	if keyH == fi.AddrNotAvail {
		return ep.dom.authDigest, true
	}
	digest, ok = keys[keyH]
	return digest, ok
}

// submit hands r, prepared by begin, to the engine. The engine's error
// means the request was not accepted and will never execute or complete
// (reliable.Engine.Submit), so the op is released at once; an accepted one
// is released by onComplete, exactly once.
func (ep *Endpoint) submit(o *txOp, r *reliable.Request) error {
	// ep.eng is set before enabled under ep.mu and never changes after;
	// begin saw enabled under ep.mu, so reading it here is ordered.
	if err := ep.eng.Submit(r); err != nil {
		ep.abort(o)
		return err
	}
	return nil
}

// freeOpCredit frees an op refused before it reserved a CQ slot, and gives
// back to cq the credit begin took for it, if any.
func (ep *Endpoint) freeOpCredit(o *txOp, cq *CQ, credit bool) {
	ep.freeOp(o)
	if credit {
		cq.unreserve()
	}
}

func (ep *Endpoint) freeOp(o *txOp) {
	ep.mu.Lock()
	ep.freeOps = append(ep.freeOps, o.idx)
	ep.mu.Unlock()
}

// abort releases an op that was never submitted, or that the engine did
// not accept.
func (ep *Endpoint) abort(o *txOp) {
	if o.reserved {
		o.cq.unreserve()
	}
	o.ctx, o.result = nil, nil
	clear(o.resultV[:o.nres])
	o.nres = 0
	ep.freeOp(o)
}

// onComplete turns the engine's completions into CQ entries and counter
// updates: of the user's operations, and of the requests the rendezvous
// protocol makes (rendezvous.go).
func (ep *Endpoint) onComplete(c reliable.Completion) {
	ep.completeOne(c)
	if ep.ctlPending.Load() > 0 {
		ep.kickCtl()
	}
}

// completeOne is onComplete without the control queue's kick, which
// onCompleteBatch makes once per batch.
func (ep *Endpoint) completeOne(c reliable.Completion) {
	switch x := c.Context.(type) {
	case *txOp:
		if x.rndv {
			ep.rtsDone(x, c.Err)
		} else {
			ep.finishOp(x, c.Err, c.Len)
		}
	case *rndvSend:
		ep.pushDone(x, c.Err)
	case *rxMsg:
		ep.rx.ctsDone(x, c.Err)
	}
}

// finishOp writes the CQ entry or error entry and counter updates the op
// asked for, and frees it. The op slot goes back before the entry is
// queued (as opBatch.flush does): an application that reads the entry and
// posts again at once finds its slot free, never FI_EAGAIN from an
// operation it already saw complete.
func (ep *Endpoint) finishOp(o *txOp, errno fi.Errno, n int) {
	var cntr *Cntr
	if o.cntr >= 0 {
		cntr = ep.enabledCntr[o.cntr]
	}
	if errno == fi.SUCCESS && o.nres > 0 {
		scatter(o.resultV[:o.nres], o.result, o.elemSize)
	}
	// What the entry needs, read before the slot can be taken again.
	cq, ctx, flags, dest := o.cq, o.ctx, o.cqFlags, o.dest
	wantComp, reserved := o.wantComp, o.reserved
	o.ctx, o.result = nil, nil
	clear(o.resultV[:o.nres])
	o.nres = 0
	ep.freeOp(o)
	if errno == fi.SUCCESS {
		if cntr != nil {
			cntr.Add(1)
		}
		if wantComp {
			e := CQEntry{Context: ctx, Flags: flags, Len: n}
			cq.complete(&e, dest, true)
		} else if reserved {
			cq.unreserve()
		}
		return
	}
	if cntr != nil {
		cntr.AddErr(1)
	}
	if reserved {
		e := CQErrEntry{CQEntry: CQEntry{Context: ctx, Flags: flags}, Err: errno,
			ProvErrno: int(errno), Src: dest}
		cq.completeErr(&e, true)
	}
}

// scatter copies the gathered result back into the caller's result
// iovecs: Count elements of size bytes into each, nothing past them.
func scatter(iov []IOC, from []byte, size int) {
	for _, v := range iov {
		from = from[copy(v.Buf[:v.Count*size], from):]
	}
}

// checkMsgSize enforces max_msg_size for messages and RMA.
func checkMsgSize(call string, n int) error {
	if n > MaxMsgSize {
		return fmt.Errorf("%s: %d bytes > max_msg_size %d: %w", call, n, MaxMsgSize, fi.EMSGSIZE)
	}
	return nil
}

// Send is fi_send. Messages longer than the eager limit go by rendezvous
// (see rendezvous.go).
func (ep *Endpoint) Send(buf []byte, desc mr.Desc, dest fi.Addr, context any) error {
	return ep.sendMsg("send", buf, nil, desc, nil, dest, msgMeta{}, ep.attr.OpFlags, context, false)
}

// SendData is fi_senddata: Send with remote CQ data, which the receive
// completion reports in Data with FI_REMOTE_CQ_DATA set.
func (ep *Endpoint) SendData(buf []byte, desc mr.Desc, data uint64, dest fi.Addr, context any) error {
	return ep.sendMsg("senddata", buf, nil, desc, nil, dest, msgMeta{data: data},
		ep.attr.OpFlags|fi.REMOTE_CQ_DATA, context, false)
}

// Inject is fi_inject: buf (at most ep.InjectSize() bytes) is copied
// before the call returns and no completion is generated.
func (ep *Endpoint) Inject(buf []byte, dest fi.Addr) error {
	return ep.sendMsg("inject", buf, nil, mr.Desc{}, nil, dest, msgMeta{}, fi.INJECT, nil, true)
}

// Write is fi_write: buf into the peer's region key at addr.
func (ep *Endpoint) Write(buf []byte, desc mr.Desc, dest fi.Addr, addr, key uint64, context any) error {
	iov, d := [1][]byte{buf}, [1]mr.Desc{desc}
	a := rmaArgs{iov: iov[:], desc: d[:], peer: dest, addr: addr, key: key, rlen: -1}
	return ep.rmaWrite("write", &a, context, ep.attr.OpFlags)
}

// InjectWrite is fi_inject_write: buf (at most ep.InjectSize() bytes) is
// copied before the call returns and no completion is generated. It takes
// no descriptor, so FI_MR_LOCAL does not apply to buf.
func (ep *Endpoint) InjectWrite(buf []byte, dest fi.Addr, addr, key uint64) error {
	iov := [1][]byte{buf}
	a := rmaArgs{iov: iov[:], peer: dest, addr: addr, key: key, rlen: -1, inject: true}
	return ep.rmaWrite("inject_write", &a, nil, fi.INJECT)
}

// Read is fi_read: len(buf) bytes from the peer's region key at addr.
func (ep *Endpoint) Read(buf []byte, desc mr.Desc, src fi.Addr, addr, key uint64, context any) error {
	if err := checkMsgSize("read", len(buf)); err != nil {
		return err
	}
	if err := ep.checkLocal(desc, buf, fi.READ); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	r := reliable.Request{Opcode: wire.OpRMARead, Result: buf, RKey: key, Addr: addr}
	return wrap("read", ep.post(&r, src, ep.attr.OpFlags, cntrRead, fi.RMA|fi.READ, context, false))
}

func wrap(call string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", call, err)
}

// checkLocal enforces FI_MR_LOCAL: local buffers need a descriptor of a
// region covering them with the access the operation needs.
func (ep *Endpoint) checkLocal(desc mr.Desc, buf []byte, access fi.Flags) error {
	if ep.dom.mrs.Mode()&mr.ModeLocal == 0 || len(buf) == 0 {
		return nil
	}
	return ep.dom.mrs.CheckLocal(desc, buf, access)
}
