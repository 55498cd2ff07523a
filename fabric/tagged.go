package fabric

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// Tagged messages (fi_tagged(3)). A tagged message carries a 64-bit tag
// (all 64 bits significant; mem_tag_format FI_TAG_GENERIC) that the receiver matches
// against its tagged receives: send_tag & ^ignore == recv_tag & ^ignore,
// the oldest posted receive first (match.go). Tagged and untagged
// messages use separate queues on both sides of the match, and apart
// from the tag a tagged message is a message: eager or rendezvous by
// size, with the same ordering, flags, truncation and completions, which
// carry fi.TAGGED instead of fi.MSG and, on receive, the tag.

// MsgTagged is struct fi_msg_tagged.
type MsgTagged struct {
	MsgIOV  [][]byte
	Desc    []mr.Desc
	Addr    fi.Addr
	Tag     uint64
	Ignore  uint64 // receives: tag bits that need not match
	Context any
	Data    uint64 // remote CQ data, sent with fi.REMOTE_CQ_DATA
}

// TSend is fi_tsend.
func (ep *Endpoint) TSend(buf []byte, desc mr.Desc, dest fi.Addr, tag uint64, context any) error {
	return ep.sendMsg("tsend", buf, nil, desc, nil, dest, msgMeta{tagged: true, tag: tag}, ep.attr.OpFlags, context, false)
}

// TSendV is fi_tsendv: one message gathered from up to IovLimit buffers.
func (ep *Endpoint) TSendV(iov [][]byte, desc []mr.Desc, dest fi.Addr, tag uint64, context any) error {
	if iov == nil {
		iov = [][]byte{}
	}
	return ep.sendMsg("tsendv", nil, iov, mr.Desc{}, desc, dest, msgMeta{tagged: true, tag: tag}, ep.attr.OpFlags, context, false)
}

// TSendMsg is fi_tsendmsg. Flags: fi.REMOTE_CQ_DATA (send msg.Data),
// fi.COMPLETION, fi.MORE, fi.INJECT (at most ep.InjectSize() bytes),
// fi.INJECT_COMPLETE, fi.TRANSMIT_COMPLETE, fi.DELIVERY_COMPLETE and
// fi.FENCE, as for the other transmit calls.
func (ep *Endpoint) TSendMsg(msg *MsgTagged, flags fi.Flags) error {
	if msg == nil {
		return fmt.Errorf("tsendmsg: nil msg: %w", fi.EINVAL)
	}
	iov := msg.MsgIOV
	if iov == nil {
		iov = [][]byte{}
	}
	return ep.sendMsg("tsendmsg", nil, iov, mr.Desc{}, msg.Desc, msg.Addr,
		msgMeta{tagged: true, tag: msg.Tag, data: msg.Data}, flags, msg.Context, false)
}

// TInject is fi_tinject: buf (at most ep.InjectSize() bytes) is copied
// before the call returns and no completion is generated.
func (ep *Endpoint) TInject(buf []byte, dest fi.Addr, tag uint64) error {
	return ep.sendMsg("tinject", buf, nil, mr.Desc{}, nil, dest, msgMeta{tagged: true, tag: tag}, fi.INJECT, nil, true)
}

// TSendData is fi_tsenddata: TSend with remote CQ data.
func (ep *Endpoint) TSendData(buf []byte, desc mr.Desc, data uint64, dest fi.Addr, tag uint64, context any) error {
	return ep.sendMsg("tsenddata", buf, nil, desc, nil, dest, msgMeta{tagged: true, tag: tag, data: data},
		ep.attr.OpFlags|fi.REMOTE_CQ_DATA, context, false)
}

// TInjectData is fi_tinjectdata: TInject with remote CQ data.
func (ep *Endpoint) TInjectData(buf []byte, data uint64, dest fi.Addr, tag uint64) error {
	return ep.sendMsg("tinjectdata", buf, nil, mr.Desc{}, nil, dest, msgMeta{tagged: true, tag: tag, data: data},
		fi.INJECT|fi.REMOTE_CQ_DATA, nil, true)
}

// TRecv is fi_trecv: post buf for the next tagged message whose tag
// matches tag outside the ignore bits, from src (FI_ADDR_UNSPEC: any; the
// source counts only with FI_DIRECTED_RECV). Completions carry
// fi.RECV|fi.TAGGED, the message's tag and length; like Recv otherwise.
func (ep *Endpoint) TRecv(buf []byte, desc mr.Desc, src fi.Addr, tag, ignore uint64, context any) error {
	if err := ep.checkLocal(desc, buf, fi.RECV); err != nil {
		return fmt.Errorf("trecv: %w", err)
	}
	spec := matchSpec{src: src, tag: tag, ignore: ignore, tagged: true}
	return wrap("trecv", ep.postRecv(buf, nil, spec, context, ep.attr.OpFlags))
}

// TRecvV is fi_trecvv.
func (ep *Endpoint) TRecvV(iov [][]byte, desc []mr.Desc, src fi.Addr, tag, ignore uint64, context any) error {
	if err := ep.checkRecvIOV(iov, desc); err != nil {
		return fmt.Errorf("trecvv: %w", err)
	}
	if iov == nil {
		iov = [][]byte{}
	}
	spec := matchSpec{src: src, tag: tag, ignore: ignore, tagged: true}
	return wrap("trecvv", ep.postRecv(nil, iov, spec, context, ep.attr.OpFlags))
}

// TRecvMsg is fi_trecvmsg. Flags: fi.COMPLETION, fi.MORE,
// fi.TRANSMIT_COMPLETE, and the peek family (peek.go): fi.PEEK (report
// the oldest matching message without receiving it, or an FI_ENOMSG error
// entry), fi.PEEK|fi.CLAIM (and reserve it for a later fi.CLAIM receive
// with the same context), fi.PEEK|fi.DISCARD (and drop it), fi.CLAIM
// (receive the message claimed with this context), fi.CLAIM|fi.DISCARD
// (drop it).
func (ep *Endpoint) TRecvMsg(msg *MsgTagged, flags fi.Flags) error {
	if msg == nil {
		return fmt.Errorf("trecvmsg: nil msg: %w", fi.EINVAL)
	}
	if flags&^trecvMsgFlags != 0 {
		return fmt.Errorf("trecvmsg: flags %#x: %w", uint64(flags&^trecvMsgFlags), fi.EBADFLAGS)
	}
	iov := msg.MsgIOV
	if flags&fi.DISCARD == 0 { // FI_DISCARD ignores the buffers
		if err := ep.checkRecvIOV(iov, msg.Desc); err != nil {
			return fmt.Errorf("trecvmsg: %w", err)
		}
	} else {
		iov = nil
	}
	if iov == nil {
		iov = [][]byte{}
	}
	spec := matchSpec{src: msg.Addr, tag: msg.Tag, ignore: msg.Ignore, tagged: true}
	if flags&(fi.PEEK|fi.CLAIM) != 0 {
		return wrap("trecvmsg", ep.peek(iov, spec, msg.Context, flags))
	}
	if flags&fi.DISCARD != 0 {
		return fmt.Errorf("trecvmsg: FI_DISCARD without FI_PEEK or FI_CLAIM: %w", fi.EINVAL)
	}
	return wrap("trecvmsg", ep.postRecv(nil, iov, spec, msg.Context, flags))
}
