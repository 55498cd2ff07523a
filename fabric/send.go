package fabric

import (
	"fmt"

	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// msgMeta is what a send carries besides its data: a tag (tagged sends)
// and remote CQ data (sent with fi.REMOTE_CQ_DATA in the flags).
type msgMeta struct {
	tagged bool
	tag    uint64
	data   uint64
}

// sendMsg is every message send, tagged or not: one buffer (iov nil, desc
// its descriptor) or up to IovLimit (descs theirs, or nil). A message
// longer than the eager limit goes by rendezvous; others, and every
// FI_INJECT send, at once (several iovecs gathered into the op's scratch
// buffer first). injectCall marks fi_inject and fi_tinject(data): no
// completion, no descriptor.
func (ep *Endpoint) sendMsg(call string, one []byte, iov [][]byte, desc mr.Desc, descs []mr.Desc, dest fi.Addr,
	meta msgMeta, flags fi.Flags, ctx any, injectCall bool) error {
	total := len(one)
	if iov != nil {
		n, err := checkVec(iov, descs)
		if err != nil {
			return fmt.Errorf("%s: %w", call, err)
		}
		total = n
	}
	if err := checkMsgSize(call, total); err != nil {
		return err
	}
	inject := injectCall || flags&fi.INJECT != 0
	if inject && total > ep.size.injectSize {
		return fmt.Errorf("%s: %d bytes > inject_size %d: %w", call, total, ep.size.injectSize, fi.EMSGSIZE)
	}
	if !injectCall {
		var err error
		if iov == nil {
			err = ep.checkLocal(desc, one, fi.SEND)
		} else {
			err = ep.checkLocalVec(descs, iov, fi.SEND)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", call, err)
		}
	}
	cqFlags := fi.SEND | fi.MSG
	r := reliable.Request{Opcode: wire.OpMsg, Data: meta.data}
	if meta.tagged {
		cqFlags = fi.SEND | fi.TAGGED
		r.AtomicOp, r.RKey = wire.MsgTagged, meta.tag
	}
	if !inject && total > ep.eagerLimit {
		return wrap(call, ep.sendRndv(&r, one, iov, total, dest, flags, cqFlags, ctx))
	}
	if len(iov) <= 1 {
		if len(iov) == 1 {
			one = iov[0]
		}
		r.Payload = one
		return wrap(call, ep.post(&r, dest, flags, cntrSend, cqFlags, ctx, injectCall))
	}
	o, err := ep.begin(&r, dest, flags, cntrSend, cqFlags, ctx, injectCall)
	if err != nil {
		return wrap(call, err)
	}
	r.Payload = o.gather(iov, total)
	return wrap(call, ep.submit(o, &r))
}
