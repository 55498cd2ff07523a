package reliable

import (
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// SharedTarget is a second executor of a peer's requests that shares the
// peer's target state with the engine: the XDP program, which executes
// atomics on kernel-resident regions and answers them itself
// (docs/xdp-atomics.md). The state — session, next sequence number to
// deliver, responses of recent deliveries — has one owner at a time, and
// only the owner delivers, so a sequence number runs once whichever side
// runs it, also when a session moves between them mid-stream.
//
// The engine owns a peer's state from its creation. After a batch in
// which Wants was true for one of the peer's requests, and if it holds no
// out-of-order request, the engine Releases the state (session and next)
// to the other executor. The next request of the peer that reaches the
// engine (the other executor hands up what it does not deliver) makes it
// Claim the state back first: next says how far the other executor got,
// and the engine continues from there. A retransmission of a request the
// other executor delivered is answered with the values Fetched returns,
// in the response the engine would have built (every op succeeded: the
// other executor delivers only requests whose every op it executes).
// Forget drops the other executor's copy when the engine drops the peer.
//
// The methods are called from the receive side only, one at a time.
type SharedTarget interface {
	// Wants reports whether the other executor could deliver a request
	// like pk.
	Wants(pk *wire.Packet) bool
	// Release hands the peer's state to the other executor: it may
	// deliver requests of session from next on.
	Release(p Peer, session, next uint32) error
	// Claim takes the state back and returns the next sequence number the
	// other executor reached (at least the one Release gave). An error
	// means the state could not be taken: nothing may execute.
	Claim(p Peer) (next uint32, err error)
	// Fetched copies into dst the values the other executor returned for
	// request seq of session, which it delivered; ok is false when it
	// does not know them.
	Fetched(p Peer, session, seq uint32, dst []byte) (n int, ok bool)
	// Forget drops the other executor's state of the peer.
	Forget(p Peer)
}

// shareState is an rxPeer's side of SharedTarget.
type shareState struct {
	released bool // the other executor owns the state
	offered  bool // in Engine.rxOffer
	known    bool // the other executor has a state for the peer (Forget it)
}

// offerShared queues rp for release after the batch.
func (e *Engine) offerShared(rp *rxPeer) {
	if !rp.share.offered {
		rp.share.offered = true
		e.rxOffer = append(e.rxOffer, rp)
	}
}

// releaseShared hands the offered peers' states to the other executor,
// those holding no out-of-order request (only the engine holds them).
// After the batch's responses are flushed. rxMu is held.
func (e *Engine) releaseShared() {
	for i, rp := range e.rxOffer {
		e.rxOffer[i] = nil
		rp.share.offered = false
		if rp.share.released || e.rxPeers.get(rp.peer) != rp || rp.win.anyHeld() {
			continue
		}
		rp.share.known = true
		if err := e.cfg.Shared.Release(rp.peer, rp.session, rp.win.next); err == nil {
			rp.share.released = true
		}
	}
	e.rxOffer = e.rxOffer[:0]
}

// claimShared takes rp's state back from the other executor and moves the
// window to where it got; false (counted) if it cannot, and the request
// is dropped unexecuted: its retransmission tries again.
func (e *Engine) claimShared(rp *rxPeer) bool {
	next, err := e.cfg.Shared.Claim(rp.peer)
	if err != nil {
		e.stats.drop(DropSharedClaim)
		return false
	}
	rp.share.released = false
	if d := next - rp.win.next; d != 0 && int32(d) > 0 {
		rp.win.reset(next) // nothing was held when it was released
	}
	return true
}

// fetchShared answers pk, a retransmission of a request the other
// executor delivered, with the response execute would have built from
// the values the other executor returned (in scratch space: it is not
// cached, the other executor keeps the values); false if the other
// executor does not know it.
func (e *Engine) fetchShared(rp *rxPeer, pk *wire.Packet) bool {
	if e.cfg.Shared == nil || !rp.share.known {
		return false
	}
	var vals [256]byte
	n, ok := e.cfg.Shared.Fetched(rp.peer, rp.session, pk.Seq, vals[:])
	if !ok {
		return false
	}
	want := 0
	for i := 0; i < int(pk.NumOps); i++ {
		want += int(pk.Ops[i].RespLen)
	}
	if want != n {
		return false
	}
	b := &e.rxBld
	b.Reset(e.rxScratch(wire.HeaderLen+int(pk.NumOps)*wire.RespDescLen+want), wire.Header{Type: wire.TypeResp,
		SrcEP: e.cfg.EndpointID, DstEP: pk.SrcEP, AuthKey: pk.AuthKey, Session: pk.Session, Seq: pk.Seq,
		Ack: rp.win.next, Sack: rp.win.sack()})
	off := 0
	for i := 0; i < int(pk.NumOps); i++ {
		d := &pk.Ops[i]
		dst, err := b.AddResp(wire.RespDesc{Opcode: d.Opcode, Errno: uint32(fi.SUCCESS), Len: d.RespLen})
		if err != nil {
			return false // unreachable: sized to fit
		}
		off += copy(dst, vals[off:off+int(d.RespLen)])
	}
	e.queueRx(b.Finish(), rp.peer.Addr)
	return true
}

// forgetShared drops the other executor's copy of rp's state.
func (e *Engine) forgetShared(rp *rxPeer) {
	if e.cfg.Shared != nil && rp.share.known {
		e.cfg.Shared.Forget(rp.peer)
		rp.share = shareState{}
	}
}
