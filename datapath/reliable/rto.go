package reliable

import "time"

// Retransmission timeout. One estimator per initiator peer (txPeer.est)
// turns round-trip samples into the timeout of the peer's next packets.
//
// RFC 6298 (srtt + 4·rttvar, Karn's rule) assumes about one sample per
// round trip. The engine samples every answered packet: a window of 4 KiB
// writes gives ~190 samples per round trip, and each one shrinks rttvar by
// a quarter, so the spread of a burst (its first packet answered in 50 µs,
// its last in 1.5 ms) was forgotten within the burst and the next burst's
// tail timed out. As Linux's tcp_rtt_estimator, the deviation the timeout
// uses (rttvar) is the largest per-sample deviation (mdev) of the last
// round trip, and it decays towards it by a quarter per round trip, not
// per sample. A round ends when every packet in flight at its start is
// answered.
//
// Spurious timeouts (Eifel, RFC 3522 and 4015). On a loaded host the peer
// may not run for milliseconds: its answers come late, not never, and a
// timeout then resends packets that arrive and are executed once already
// (the target answers the duplicate from its cache). The target marks a
// response to a first transmission (wire.HdrOriginal, which a replay from
// its cache does not carry), so an initiator whose first response to a
// retransmitted packet carries it knows the retransmission was spurious,
// and that the round trip since the first transmission is a true sample
// (Karn's rule excludes only responses that may answer the
// retransmission). It then (RFC 4015) lifts srtt to at least that round
// trip and rttvar to half of it, which undoes the backoff the timeout
// applied to the peer's next packets, and raises a floor under the timeout
// to twice the round trip that outlasted it: the scheduling delays that
// cause such timeouts come again, and a timeout that fires at each costs a
// duplicate packet, its execution check and its answer every time. The
// floor decays by an eighth per floorDecay of time without a spurious
// timeout (checked at round ends): how often the peer stalls is a matter
// of the hosts' load, not of how many round trips go by (a window of 4
// KiB writes is one round trip of a few hundred microseconds), so a floor
// decaying per round trip was gone before the next stall. A transient
// stall is forgotten in about a second. A real loss is recovered by fast
// retransmission (a gap in the target's selective ack, or answers to
// three later packets), so the floor delays only the recovery of a loss
// at the tail of a burst, by at most twice the longest stall seen lately
// (TCP's minimum timeout is 200 ms).

// rtoEstimator is one peer's round-trip estimate. All times are ns.
type rtoEstimator struct {
	// dense and srtt first: a peer's Submit reads them (sendTimeout), and
	// txPeer keeps them in a line with its other per-Submit fields.
	// dense: the last round ended had at least denseRound samples
	// (destrto.go).
	dense bool
	// The current round ends when the peer's lowest unanswered sequence
	// number reaches roundEnd (the next sequence number when it began);
	// started: a round is under way.
	started  bool
	roundEnd uint32
	srtt     int64 // smoothed round trip (0: no sample yet)
	mdev     int64 // smoothed mean deviation, updated per sample
	mdevMax  int64 // the largest mdev of the current round
	rttvar   int64 // the deviation the timeout uses (see above)
	// floor is the least timeout, learnt from spurious timeouts;
	// floorAt is when it last rose or decayed (engine clock).
	floor, floorAt int64
	// roundSamples counts the current round's samples.
	roundSamples uint32
}

// floorDecay is how long the floor of the timeout stays before an eighth
// of it goes (a half-life of about 5.2 of them).
const floorDecay = 50 * time.Millisecond

// sample takes one round-trip sample rtt.
func (r *rtoEstimator) sample(rtt int64) {
	rtt = max(rtt, 1)
	r.roundSamples++
	if r.srtt == 0 {
		r.srtt, r.mdev = rtt, rtt/2
		r.mdevMax, r.rttvar = r.mdev, r.mdev
		return
	}
	d := rtt - r.srtt
	r.srtt += d / 8
	if d < 0 {
		d = -d
		if d > r.mdev {
			// A sample far below the average (the first packets of a
			// burst) says little about the tail: it moves mdev by an
			// eighth of what a late one would (tcp_rtt_estimator).
			d = r.mdev + (d-r.mdev)/8
		}
	}
	r.mdev += (d - r.mdev) / 4
	r.mdevMax = max(r.mdevMax, r.mdev)
	r.rttvar = max(r.rttvar, r.mdevMax)
}

// advance notes that the peer's lowest unanswered sequence number is now
// base, nextSeq the next to be sent, at now; it ends the round when base
// reached the round's end (every packet sent before the round began is
// answered) and starts the next one.
func (r *rtoEstimator) advance(base, nextSeq uint32, now int64) {
	if r.started && int32(base-r.roundEnd) < 0 {
		return
	}
	if r.started {
		r.endRound(now)
	}
	r.started = true
	r.roundEnd = nextSeq
	r.mdevMax = r.mdev
	r.roundSamples = 0
}

// endRound ends a round at now: rttvar decays towards the round's largest
// deviation, the floor by an eighth per floorDecay, and the round's
// samples tell whether they were too few to measure its spread (sparse).
func (r *rtoEstimator) endRound(now int64) {
	if r.mdevMax < r.rttvar {
		r.rttvar -= (r.rttvar - r.mdevMax) / 4
	}
	if r.floor > 0 && now-r.floorAt >= int64(floorDecay) {
		r.floor -= r.floor / 8
		r.floorAt = now
	}
	r.dense = r.roundSamples >= denseRound
}

// denseRound is the least number of samples in a round from which a
// peer's own spread is trusted alone (destrto.go).
const denseRound = 4

// spurious applies the response to a spurious timeout (RFC 4015): the
// first transmission of a packet that timed out was answered after rtt,
// at now. The caller has taken rtt as a sample.
func (r *rtoEstimator) spurious(rtt, now int64) {
	r.srtt = max(r.srtt, rtt)
	r.rttvar = max(r.rttvar, rtt/2)
	r.floor = max(r.floor, 2*rtt)
	r.floorAt = now
}

// timeout returns the retransmission timeout of the peer's next packets,
// within lo..hi.
func (r *rtoEstimator) timeout(lo, hi time.Duration) time.Duration {
	rto := max(time.Duration(r.srtt+4*r.rttvar), time.Duration(r.floor), lo)
	return min(rto, hi)
}
