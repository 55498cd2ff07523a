package reliable

import (
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// A refusal is an ICMP port unreachable for one of our requests, held for
// one batch before it fails the peer. The kernel reports a pending socket
// error before the datagrams queued ahead of it (udp_recvmsg checks
// sock_error first), so the response a target sent just before it closed
// can wait behind the ICMP of a retransmission that reached its closed
// port: failing at once would report FI_ECONNREFUSED for an operation the
// target executed and answered. A refusal therefore fails the peer only
// once the next batch has been read (which holds what was queued, or the
// ICMP of the next retransmission) and the bounced request is still
// unanswered in the same session. The next batch may hold only more ICMPs
// (retransmissions keep bouncing while the socket error is reported first
// again), so a refusal waits for a batch that read datagrams, or at most
// refusalGrace.
type refusal struct {
	peer    Peer
	session uint32
	seq     uint32
	at      int64 // engine clock when noted
}

// refusalGrace bounds how long a refusal waits for a batch with datagrams.
const refusalGrace = int64(10 * time.Millisecond)

// maxRefusals bounds the refusals a batch keeps: one per peer suffices
// (failPeer fails all of a peer's requests), so more are dropped.
const maxRefusals = 16

// refusals are a batch's refusals (rxMu confines them to the receiving
// goroutine).
type refusals struct {
	n    int
	seen int // ICMPs in the batch, counted or not
	list [maxRefusals]refusal
}

func (r *refusals) add(f refusal) {
	for i := 0; i < r.n; i++ {
		if r.list[i].peer == f.peer && r.list[i].session == f.session {
			if int32(f.seq-r.list[i].seq) < 0 {
				r.list[i].seq = f.seq // the oldest bounced request decides
			}
			r.list[i].at = min(r.list[i].at, f.at) // and the first noting
			return
		}
	}
	if r.n < maxRefusals {
		r.list[r.n] = f
		r.n++
	}
}

// noteUnreachable records a bounced request of ours for the next batch.
// rxMu is held.
func (e *Engine) noteUnreachable(pkt *datapath.Packet) {
	// ICMP carries back only the start of the datagram: the header will do.
	d := &e.rxDec.Header
	if wire.DecodeHeader(pkt.Buf, d) != nil || d.Type != wire.TypeReq || d.SrcEP != e.cfg.EndpointID {
		return // a response we sent to a vanished initiator, or not ours
	}
	e.refusedNew.seen++
	e.refusedNew.add(refusal{peer: Peer{pkt.Addr, d.DstEP}, session: d.Session, seq: d.Seq, at: e.now()})
	e.refusing = e.refused.n + e.refusedNew.n
}

// applyRefusals fails the peers of earlier batches' refusals whose
// bounced request is still unanswered, once this batch read datagrams
// (drained reports whether it read what was queued) or the refusal is
// older than refusalGrace: nobody listens at the peer's address any more,
// so its pending requests fail with FI_ECONNREFUSED. The others, and this
// batch's refusals, wait for a later batch. rxMu and e.mu are held.
func (e *Engine) applyRefusals(out *[]Completion, drained bool) {
	now := e.now()
	next := e.refusedNew
	next.seen = 0
	for i := 0; i < e.refused.n; i++ {
		f := &e.refused.list[i]
		p := e.peers[f.peer]
		if p == nil || p.session != f.session || int32(f.seq-p.base) < 0 || int32(f.seq-p.nextSeq) >= 0 {
			continue // a new session, or answered meanwhile
		}
		if s := p.slot(f.seq); s == nil || s.seq != f.seq {
			continue // answered (out of order)
		}
		if !drained && now-f.at < refusalGrace {
			next.add(*f)
			continue
		}
		e.stats.peersRefused.Add(1)
		e.failPeer(p, fi.ECONNREFUSED, out)
	}
	e.refused, e.refusedNew = next, refusals{}
	e.refusing = e.refused.n
}
