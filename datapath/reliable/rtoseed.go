package reliable

import (
	"sync/atomic"
	"time"
)

// The first timeout of a new peer. RFC 6298 starts a peer without an RTT
// sample at a conservative timeout (1 s for TCP); the engine's
// RetryInitial (1 ms) is rather a floor, meant for a quiet network, and a
// loaded endpoint's round trip is longer: 10,000 initiators with 64
// fetch-adds in flight against one target see 2-3 ms (issue 17). A new
// peer's first packets then each expired once or twice before the
// backed-off timeout passed the round trip and the first unretransmitted
// answer gave a sample: 10,000 peers with 60 operations each sent 5 % more
// packets than needed, and the target answered every duplicate from its
// cache.
//
// What the endpoint already measured is the better first guess: a peer
// with no sample yet starts at the RTO estimate (srtt + 4 rttvar) of the
// engine's last sample from any peer, or, for an engine that has none
// (one of many endpoints a process opens), of the last sample any engine
// in the process took, clamped to the engine's RetryInitial..RetryMax.
// Queueing in the process (its receive poller, its scheduler) is what
// lengthens the round trip to every peer, so that is where the estimate
// is kept. The estimate is the measured one, before any engine's clamps,
// so engines with different timeouts do not shape each other's. A guess
// that is too long only delays recovering a lost first packet (fast
// retransmit and later samples are unaffected); one too short costs what
// it did before: spurious retransmissions, answered from the cache, never
// executed twice. A peer whose address the process already has an
// estimate of (destrto.go: samples any engine took to it) starts from that
// instead: it is the same path's.

// processRTO is the RTO estimate, in ns, of the process's latest RTT
// sample (0: none yet). It is updated only when it moves by more than an
// eighth, so that engines on several threads do not write its cache line
// on every response.
var processRTO atomic.Int64

// noteRTO records est, the unclamped RTO estimate of a fresh sample, as
// the engine's and the process's. e.mu is held.
func (e *Engine) noteRTO(est int64) {
	e.rtoEst = est
	if old := processRTO.Load(); est-old > old/8 || old-est > old/8 {
		processRTO.Store(est)
	}
}

// initialRTO is the timeout of packets to a peer that has given no RTT
// sample yet. e.mu is held.
func (e *Engine) initialRTO() time.Duration {
	est := e.rtoEst
	if est == 0 {
		est = processRTO.Load()
	}
	return min(max(time.Duration(est), e.cfg.RetryInitial), e.cfg.RetryMax)
}
