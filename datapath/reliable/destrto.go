package reliable

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Round-trip estimates shared by destination address, like TCP's
// per-destination metrics. A process that opens many endpoints towards
// one target (10,000 initiators, issue 17) gives each engine's peer one
// sample per round trip at best, one in 10,000 of the process's: its own
// estimator (rto.go) sees one sample per round, so rttvar follows each
// sample by a quarter and the spread of the round trips (the target and
// the process's poller serving 10,000 peers in turn) is never learnt.
// Most of such a peer's timeouts were spurious: 81-99 % of 4,000-9,000
// retransmissions in 600,000 operations, the answer arriving after the
// timer. The round trip is a property of the path and of the queues at
// both ends, which all engines of the process that talk to the same
// address share, so every sample any of them takes also goes into that
// address's estimator here; as a single busy peer's, its rounds are
// dense and its rttvar is the largest deviation of the last round trip.
//
// A peer whose own last round had fewer than denseRound samples (or
// that has not finished one) sends with the larger of its own timeout
// and the address's; a dense peer (a window of requests in flight) keeps
// its own, so the sharing changes nothing for the single busy peer and
// cannot delay its recovery of a loss. For a sparse peer the shared
// timeout is what the single peer's would be: the recovery of a real loss
// waits about as long as the single peer's timer, the spurious timeouts
// from an unlearnt spread go. A spurious timeout's floor (rto.go) is
// shared too: what stalls one engine's answers (the process's scheduling)
// stalls the others'.
//
// Addresses map to a fixed table of destSlots entries (no allocation,
// no growth); an entry belongs to the address that last sampled it, and
// one not sampled for destStale is free for another: two busy addresses
// in one slot take turns and their peers fall back to their own
// estimates. Engines update an entry under a TryLock (a sample lost to
// another engine's update costs nothing); the timeout they read is
// published separately, rewritten only when it moves by an eighth, so
// that the engines' sends do not miss in cache on each other's samples.

const (
	destSlots = 256 // power of two
	// destStale is how long an address's estimate holds without a sample.
	destStale = int64(time.Second)
)

// destRTO is one address's shared estimate.
type destRTO struct {
	// Written under mu, on every sample.
	mu      sync.Mutex
	est     rtoEstimator
	roundAt int64 // engine clock when the current round began
	_       [64]byte
	// Published for the engines' sends: key of the owning address, its
	// timeout (ns, unclamped: srtt + 4 rttvar, at least the floor) and
	// the time of the sample that last wrote it.
	key atomic.Uint64
	rto atomic.Int64
	at  atomic.Int64
	_   [64 - 24]byte
}

var destRTOs [destSlots]destRTO

// destKey is addr's key in the table: nonzero, and its low bits index it.
func destKey(addr netip.AddrPort) uint64 {
	b := addr.Addr().As16()
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	h = (h ^ uint64(addr.Port())) * 1099511628211
	h ^= h >> 29
	return h | 1<<63
}

func destOf(key uint64) *destRTO { return &destRTOs[key&(destSlots-1)] }

// destSample takes a round-trip sample rtt (ns) to the address of key at
// now; spurious: the sample is a first transmission's answer that came
// after its timer fired (rto.go).
func destSample(key uint64, rtt, now int64, spurious bool) {
	d := destOf(key)
	if !d.mu.TryLock() {
		return
	}
	if k := d.key.Load(); k != key {
		if k != 0 && now-d.at.Load() < destStale {
			d.mu.Unlock()
			return // another address's, still in use
		}
		d.est, d.roundAt = rtoEstimator{}, 0
		d.rto.Store(0)
		d.at.Store(now)
		d.key.Store(key)
	}
	r := &d.est
	r.sample(rtt)
	if spurious {
		r.spurious(rtt, now)
	}
	// A round is a smoothed round trip of time: the many peers' samples
	// have no common sequence numbers to end it by.
	if !r.started || now-d.roundAt >= r.srtt {
		if r.started {
			r.endRound(now)
		}
		r.started, d.roundAt, r.mdevMax = true, now, r.mdev
	}
	est := max(r.srtt+4*r.rttvar, r.floor)
	if old := d.rto.Load(); est-old > old/8 || old-est > old/8 {
		d.rto.Store(est)
	}
	if now-d.at.Load() > destStale/8 {
		d.at.Store(now)
	}
	d.mu.Unlock()
}

// destTimeout returns the shared timeout estimate (ns) of the address of
// key at now, 0 if there is none.
func destTimeout(key uint64, now int64) int64 {
	d := destOf(key)
	if d.key.Load() != key || now-d.at.Load() >= destStale {
		return 0
	}
	return d.rto.Load()
}

// sendTimeout is the timeout of a packet sent to p at now. e.mu is held.
func (e *Engine) sendTimeout(p *txPeer, now int64) time.Duration {
	if p.est.dense {
		return max(p.rto, e.cfg.RetryInitial)
	}
	shared := time.Duration(destTimeout(p.destKey, now))
	if p.est.srtt == 0 {
		// No sample from this peer yet: start from what the process
		// measured to its address, else what the endpoint measured to
		// others (rtoseed.go). p.rto may be a backed-off one.
		if shared == 0 {
			return max(p.rto, e.initialRTO())
		}
		return max(p.rto, min(max(shared, e.cfg.RetryInitial), e.cfg.RetryMax))
	}
	return max(p.rto, min(max(shared, e.cfg.RetryInitial), e.cfg.RetryMax))
}
