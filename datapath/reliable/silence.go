package reliable

import (
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
)

// Timeouts of a slow or silent peer.
//
// A timeout says little when nothing at all came back from the peer since
// the packet went out: the peer may be descheduled or busy sending a
// window of its own (on two shared cores, a 4 KiB-write window of 192
// frames each way kept both processes in their sends for 5-10 ms while
// the first pages of their AF_XDP frames trapped to the hypervisor), or
// the path may be down. Resending every packet that falls due then (a
// window's worth, retxBurst a pass) multiplies the traffic the silent
// peer must work through, all of it spurious in the first case, and
// recovers nothing sooner in the second. TCP resends one segment per
// timeout and waits for it to be answered; so does the engine while a
// peer is silent: the first packet a timeout resends is the probe (a
// lower one resent later takes its place: a target holding what follows a
// gap answers nothing until the gap is filled), and
// until a response comes, later timeouts resend only the probe (backing
// off as before; its retries decide when the peer is unreachable) and
// push the other due packets of that silence to the probe's deadline. The
// response that ends the silence decides: a fresh response to a packet
// the timer resent, or a replay from the cache (no wire.HdrOriginal), is
// a loss, and the pushed packets fall due at once; an answer to a first
// transmission (the peer was slow) leaves them pushed, their own answers
// being on the way. A peer that answers anything is not silent, and its
// packets time out one by one as before.
//
// A spurious timeout (rto.go) shows that the peer's round trip outgrew the
// timeout, which the estimator then lifts (RFC 4015) for new packets; the
// packets already in flight that were never resent get the lifted timeout
// too, counted from now (extendDeadlines): they went out with the short
// one, and a peer that answers in order, late, answers them after the one
// that timed out, each a little later (TCP's single timer, restarted by
// each acknowledgement of new data, RFC 6298 5.3, gives the same). A
// real loss among them is still found by the gaps in the answers
// (fast retransmission) or, at the latest, by the lifted timeout.

// deferBehindProbe reports whether a timeout of s, due at now, waits for
// p's probe instead of resending s, and pushes s's deadline to the
// probe's if so: to its deadline, or when the probe is due itself (a pass
// may reach it after s, lateDue), to about the deadline its resending will
// give it (retryMax bounds the backoff). e.mu is held.
func (p *txPeer) deferBehindProbe(s *txSlot, now int64, retryMax time.Duration) bool {
	if p.heard >= s.sentAt || p.probeAt <= p.heard || s.seq == p.probeSeq {
		return false // the peer answered since s went out, or no probe is out
	}
	if s.seq-p.base < p.probeSeq-p.base {
		// s precedes the probe: a target holding what follows a gap
		// answers nothing until the gap is filled, so a packet below
		// the probe is never pushed behind it (it becomes the probe,
		// noteTimeout).
		return false
	}
	ps := p.slot(p.probeSeq)
	if ps == nil || ps.seq != p.probeSeq {
		return false
	}
	if ps.deadline > now {
		s.deadline = ps.deadline
	} else {
		s.deadline = now + int64(backoff(ps.rto, retryMax))
	}
	p.deferred = true
	return true
}

// noteTimeout records a timer retransmission of s at now: the probe of a
// silence when none is out, or when s precedes it (the probe is always
// the lowest packet resent in the silence). e.mu is held.
func (p *txPeer) noteTimeout(s *txSlot, now int64) {
	if p.heard < s.sentAt && (p.probeAt <= p.heard || s.seq-p.base < p.probeSeq-p.base) {
		p.probeSeq, p.probeAt = s.seq, now
	}
}

// endSilence handles a response from p to s, the first since its probe,
// if packets were pushed behind it: when the response shows a loss, they
// fall due now. e.mu is held.
func (e *Engine) endSilence(p *txPeer, s *txSlot, flags uint8, now int64) {
	if !p.deferred || p.probeAt <= p.heard {
		return
	}
	if s.retries == 0 && !s.fastRetx || flags&wire.HdrOriginal != 0 {
		// The peer was slow, not lossy. The pushed packets keep the
		// probe's deadline; their answers should come first.
		p.deferred = false
		return
	}
	p.deferred = false
	due := false
	for seq := p.base; seq != p.nextSeq; seq++ {
		if o := p.slot(seq); o != nil && o.seq == seq && o.sentAt < p.probeAt && o.deadline > now {
			o.deadline = now
			due = true
		}
	}
	if due {
		e.armTimer(now)
	}
}

// extendDeadlines gives p's packets in flight that were never resent the
// deadline at, where theirs is earlier. e.mu is held.
func (p *txPeer) extendDeadlines(at int64) {
	for seq := p.base; seq != p.nextSeq; seq++ {
		if o := p.slot(seq); o != nil && o.seq == seq && o.retries == 0 && !o.fastRetx && o.deadline < at {
			o.deadline = at
		}
	}
}
