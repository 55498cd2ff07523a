package fabric

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// Flags the receive calls with a flags argument take. FI_TRANSMIT_COMPLETE
// and FI_DELIVERY_COMPLETE on a receive ask for no more than xdpfab does
// anyway (a receive completes once its data is in the buffer); FI_MORE is
// a hint. fi_recvmsg's FI_CLAIM and FI_DISCARD need FI_BUFFERED_RECV,
// which xdpfab does not offer; fi_trecvmsg's are the peek family.
const (
	recvMsgFlags  = fi.COMPLETION | fi.MORE | fi.MULTI_RECV | fi.TRANSMIT_COMPLETE | fi.DELIVERY_COMPLETE
	trecvMsgFlags = fi.COMPLETION | fi.MORE | fi.PEEK | fi.CLAIM | fi.DISCARD | fi.TRANSMIT_COMPLETE |
		fi.DELIVERY_COMPLETE
)

// Recv is fi_recv: post buf for the next message from src (FI_ADDR_UNSPEC:
// any peer; the source counts only with FI_DIRECTED_RECV in EPAttr.Caps).
// It fails with FI_EAGAIN when RxSize receives are posted or the receive
// CQ has no room. On a receive CQ bound with FI_SELECTIVE_COMPLETION it
// completes successfully only with fi.COMPLETION in EPAttr.OpFlags; a
// truncated receive always completes (FI_ETRUNC).
func (ep *Endpoint) Recv(buf []byte, desc mr.Desc, src fi.Addr, context any) error {
	if err := ep.checkLocal(desc, buf, fi.RECV); err != nil {
		return fmt.Errorf("recv: %w", err)
	}
	return wrap("recv", ep.postRecv(buf, nil, matchSpec{src: src}, context, ep.recvFlags()))
}

// RecvV is fi_recvv: one message scattered over up to IovLimit buffers.
func (ep *Endpoint) RecvV(iov [][]byte, desc []mr.Desc, src fi.Addr, context any) error {
	if err := ep.checkRecvIOV(iov, desc); err != nil {
		return fmt.Errorf("recvv: %w", err)
	}
	flags := ep.recvFlags()
	if flags&fi.MULTI_RECV != 0 && len(iov) != 1 {
		return fmt.Errorf("recvv: FI_MULTI_RECV (rx op_flags) takes one buffer, not %d: %w", len(iov), fi.EINVAL)
	}
	return wrap("recvv", ep.postRecv(nil, iov, matchSpec{src: src}, context, flags))
}

// recvFlags are the flags of fi_recv and fi_recvv: the op flags, with
// FI_MULTI_RECV when rx_attr.op_flags has it.
func (ep *Endpoint) recvFlags() fi.Flags {
	return ep.attr.OpFlags | ep.attr.RxOpFlags&fi.MULTI_RECV
}

// RecvMsg is fi_recvmsg. Flags: fi.COMPLETION, fi.MORE, fi.TRANSMIT_COMPLETE
// and fi.MULTI_RECV: one buffer (a single iovec) takes message after
// message, each completion's Buf showing where it landed, until less than
// FI_OPT_MIN_MULTI_RECV is left; the completion that releases the buffer
// carries fi.MULTI_RECV (and is written even under
// FI_SELECTIVE_COMPLETION).
func (ep *Endpoint) RecvMsg(msg *Msg, flags fi.Flags) error {
	if msg == nil {
		return fmt.Errorf("recvmsg: nil msg: %w", fi.EINVAL)
	}
	if flags&^recvMsgFlags != 0 {
		return fmt.Errorf("recvmsg: flags %#x: %w", uint64(flags&^recvMsgFlags), fi.EBADFLAGS)
	}
	if err := ep.checkRecvIOV(msg.MsgIOV, msg.Desc); err != nil {
		return fmt.Errorf("recvmsg: %w", err)
	}
	if flags&fi.MULTI_RECV != 0 && len(msg.MsgIOV) != 1 {
		return fmt.Errorf("recvmsg: FI_MULTI_RECV takes one buffer, not %d: %w", len(msg.MsgIOV), fi.EINVAL)
	}
	return wrap("recvmsg", ep.postRecv(nil, msg.MsgIOV, matchSpec{src: msg.Addr}, msg.Context, flags))
}

// checkRecvIOV validates a receive's iovecs (checkVec: at most IovLimit,
// descriptors none or one per iovec) and FI_MR_LOCAL's registrations.
func (ep *Endpoint) checkRecvIOV(iov [][]byte, desc []mr.Desc) error {
	if _, err := checkVec(iov, desc); err != nil {
		return err
	}
	return ep.checkLocalVec(desc, iov, fi.RECV)
}

// rxReady checks that the endpoint takes receives.
func (ep *Endpoint) rxReady() error {
	if !ep.open.Load() {
		return fmt.Errorf("endpoint not enabled: %w", fi.EOPBADSTATE)
	}
	if ep.rx.cq == nil {
		return fmt.Errorf("no receive CQ bound: %w", fi.ENOCQ)
	}
	return nil
}

// postRecv posts a receive of one buffer (iov nil) or of iov: it takes
// the oldest unexpected message it accepts, or joins the posted queue.
func (ep *Endpoint) postRecv(one []byte, iov [][]byte, spec matchSpec, ctx any, flags fi.Flags) error {
	if err := ep.rxReady(); err != nil {
		return err
	}
	r := &ep.rx
	r.mu.Lock()
	if r.closed { // Close ran since the check above
		r.mu.Unlock()
		return fmt.Errorf("endpoint closed: %w", fi.EOPBADSTATE)
	}
	if r.posted.n+r.tposted.n >= r.max {
		r.mu.Unlock()
		return fi.EAGAIN
	}
	if err := r.cq.reserve(); err != nil {
		r.mu.Unlock()
		return err
	}
	r.slots++
	pr := r.newRecv()
	pr.spec, pr.ctx = spec, ctx
	pr.wantComp = !r.sel || flags&fi.COMPLETION != 0
	if iov == nil {
		pr.iov[0], pr.niov, pr.size = one, 1, len(one)
	} else {
		pr.niov = copy(pr.iov[:], iov)
		for _, b := range iov {
			pr.size += len(b)
		}
	}
	if flags&fi.MULTI_RECV != 0 {
		pr.multi, pr.min = true, r.minMultiRecv
		kick := r.drainMulti(ep, pr)
		r.mu.Unlock()
		if kick {
			ep.kickCtl()
		}
		return nil
	}
	m := r.findUnexpected(&pr.spec)
	if m == nil {
		r.postedQueue(spec.tagged).push(pr)
		r.mu.Unlock()
		return nil
	}
	rndv := m.rndv
	d, fin, _ := r.take(ep, m, pr)
	r.mu.Unlock()
	if rndv {
		ep.kickCtl()
	}
	if fin {
		r.complete(&d)
	}
	return nil
}

// drainMulti fills the new multi-recv buffer pr with the unexpected
// messages it accepts until it is released, and queues it if it is not.
// It reports whether CTSs were queued. r.mu is held.
func (r *receiver) drainMulti(ep *Endpoint, pr *postedRecv) (kick bool) {
	for !pr.released {
		m := r.findUnexpected(&pr.spec)
		if m == nil {
			break
		}
		rndv := m.rndv
		d, fin, ok := r.take(ep, m, pr)
		if !ok {
			break // no CQ room for another message: it stays unexpected
		}
		kick = kick || rndv
		if fin {
			freed := d.flags&fi.MULTI_RECV != 0
			r.complete(&d)
			if freed {
				return kick
			}
		}
	}
	if !pr.released {
		r.postedQueue(pr.spec.tagged).push(pr)
	}
	return kick
}
