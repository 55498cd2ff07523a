package reliable

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// DropReason says why a received packet was discarded.
type DropReason int

// Drop reasons, one counter each.
const (
	DropNotOurs       DropReason = iota // wrong magic or shorter than a header
	DropVersion                         // unsupported wire version
	DropMalformed                       // bad type, op count, lengths or reserved fields
	DropOpcode                          // unknown opcode
	DropWrongEndpoint                   // addressed to another endpoint id
	DropUnknownSource                   // Admit refused the source
	DropPeerTableFull                   // MaxPeers target states in use
	DropStaleSession                    // foreign session outside a session's first window
	DropTooOld                          // sequence number older than the response cache
	DropTooFar                          // sequence number beyond the window
	DropDuplicateHeld                   // duplicate of a request already held out of order
	DropStaleResponse                   // response or ack for nothing in flight (late duplicate)
	DropBadResponse                     // response not matching the request it answers
	DropSharedClaim                     // the shared target state could not be claimed (Config.Shared): nothing executed
	DropCacheFull                       // no room in Config.CacheBytes for its response or to hold it: not executed, resent by the initiator
	NumDropReasons
)

var dropNames = [NumDropReasons]string{"not-ours", "version", "malformed", "opcode", "wrong-endpoint",
	"unknown-source", "peer-table-full", "stale-session", "too-old", "too-far", "duplicate-held",
	"stale-response", "bad-response", "shared-claim", "cache-full"}

func (r DropReason) String() string {
	if r >= 0 && r < NumDropReasons {
		return dropNames[r]
	}
	return "drop?"
}

func dropReasonOf(err error) DropReason {
	switch {
	case errors.Is(err, wire.ErrMagic), errors.Is(err, wire.ErrShort):
		return DropNotOurs
	case errors.Is(err, wire.ErrVersion):
		return DropVersion
	case errors.Is(err, wire.ErrOpcode):
		return DropOpcode
	}
	return DropMalformed
}

type counters struct {
	// First the ones every operation of an initiator writes, in the
	// lines after the engine's per-operation state (Engine's Layout).
	//
	// Ops submitted (Stats.InFlight is this less the completions in
	// opsDone: a completion then costs one locked add, not two). Gauges,
	// stored where they change so a reader needs no lock: the smoothed
	// round-trip time (ns) of the peer sampled last; bytes of request
	// packets in flight.
	submitted   atomic.Uint64
	srtt        atomic.Int64
	txBytes     atomic.Int64
	txRequests  atomic.Uint64
	rxResponses atomic.Uint64
	// Per-operation counters (metrics): completions by opcode, failed
	// ones by opcode, and those that timed out.
	opsDone   [wire.NumOpcodes]atomic.Uint64
	opsFailed [wire.NumOpcodes]atomic.Uint64
	timeouts  atomic.Uint64

	drops               [NumDropReasons]atomic.Uint64
	retransmits         atomic.Uint64
	fastRetransmits     atomic.Uint64
	spuriousRetransmits atomic.Uint64
	delivered           atomic.Uint64
	held                atomic.Uint64
	replayedFromCache   atomic.Uint64
	acksSent            atomic.Uint64
	answersSent         atomic.Uint64
	sessionResets       atomic.Uint64
	peersUnreachable    atomic.Uint64
	peersEvicted        atomic.Uint64
	peersRefused        atomic.Uint64
	eagain              atomic.Uint64
	rxErrors            atomic.Uint64
	txErrors            atomic.Uint64
	cacheAged           atomic.Uint64
	responsesLost       atomic.Uint64
	resultsLost         atomic.Uint64
	receiverBatches     atomic.Uint64

	// Memory gauges of the target, stored once per batch: bytes of its
	// pool in use, its peer states.
	cacheBytes  atomic.Int64
	targetPeers atomic.Int64
}

func (c *counters) drop(r DropReason) { c.drops[r].Add(1) }

// Stats is a snapshot of an engine's counters.
type Stats struct {
	Drops           [NumDropReasons]uint64 // indexed by DropReason
	TxRequests      uint64                 // request packets sent (first transmissions)
	Retransmits     uint64                 // request packets resent (timer or fast)
	FastRetransmits uint64                 // of which triggered by a selective ack
	// SpuriousRetransmits counts packets retransmitted whose first
	// transmission was answered (wire.HdrOriginal): the retransmission
	// was not needed (rto.go).
	SpuriousRetransmits uint64
	RxResponses         uint64 // responses matched to a request in flight
	Delivered           uint64 // request packets executed by the handler
	Held                uint64 // request packets held for in-order delivery
	ReplayedFromCache   uint64 // duplicate requests answered from the response cache
	AcksSent            uint64
	// AnswersSent counts responses that did not go out as packets of
	// their own: a request to the same peer carried them (wire.HdrAnswers,
	// answers.go).
	AnswersSent      uint64
	SessionResets    uint64
	PeersUnreachable uint64 // peers declared unreachable (ops failed with FI_ETIMEDOUT)
	PeersEvicted     uint64 // idle target-side peer states dropped for a new peer
	PeersRefused     uint64 // peers whose port was unreachable (ops failed with FI_ECONNREFUSED)
	EAgain           uint64 // Submits refused with FI_EAGAIN
	RxErrors         uint64 // transport receive errors
	// TxErrors counts transport Send calls that failed. What they carried
	// is sent again like a lost datagram (a request by its retransmission
	// timer, a response when the initiator asks again); Submit never
	// reports them.
	TxErrors uint64
	// CacheAged counts cached responses released unacknowledged after the
	// retry budget (RetryMax × (MaxRetries+1)) without being asked for:
	// no initiator asks then. ResponsesLost counts the duplicates of such
	// requests answered with the response-lost status anyway (never
	// executed again: an initiator retrying longer than this target's
	// budget); ResultsLost the response-lost answers an initiator
	// received (their ops completed with FI_ENODATA). The budget
	// (Config.CacheBytes) never releases a response unacknowledged: it
	// pushes back (Drops[DropCacheFull]). See "Memory" in the package doc.
	CacheAged     uint64
	ResponsesLost uint64
	ResultsLost   uint64
	// ReceiverBatches counts the receive batches with packets that the
	// receive goroutine processed (auto progress); readers that assist
	// or poll the engine (Assist, Poll) process the others. While an
	// application thread polls the engine's CQ it stays near zero: the
	// receive goroutine stands down (Engine.Poll).
	ReceiverBatches uint64
	// CacheBytes is the target's buffer bytes in use for cached responses
	// and held requests, TargetPeers its peer states, TxBytes the
	// initiator's buffer bytes of request packets in flight (gauges, as
	// of the last batch).
	CacheBytes  int64
	TargetPeers int64
	TxBytes     int64

	// Ops are the requests completed, by opcode (wire.Opcode); OpErrors
	// the part of them that completed with an error (a NAK, a timeout,
	// cancellation), Timeouts those that failed with FI_ETIMEDOUT.
	Ops      [wire.NumOpcodes]uint64
	OpErrors [wire.NumOpcodes]uint64
	Timeouts uint64
	// InFlight is the requests submitted and not completed yet.
	InFlight int64
	// SRTT is the smoothed round-trip time (RFC 6298) of the peer whose
	// response was sampled last; 0 before the first sample.
	SRTT time.Duration
}

// TotalOps sums Ops.
func (s *Stats) TotalOps() uint64 {
	var n uint64
	for _, v := range s.Ops {
		n += v
	}
	return n
}

// DuplicatesSuppressed is how many duplicate request packets the target
// kept from executing twice: answered from the response cache, dropped as
// already held, or too old to answer.
func (s *Stats) DuplicatesSuppressed() uint64 {
	return s.ReplayedFromCache + s.Drops[DropDuplicateHeld] + s.Drops[DropTooOld]
}

// PacketsPerOp is the request packets sent, retransmissions included, per
// completed request (0 before the first completion): below 1 when
// requests share packets, above when they are segmented or resent.
func (s *Stats) PacketsPerOp() float64 {
	ops := s.TotalOps()
	if ops == 0 {
		return 0
	}
	return float64(s.TxRequests+s.Retransmits) / float64(ops)
}

// TotalDrops sums the drop counters.
func (s *Stats) TotalDrops() uint64 {
	var n uint64
	for _, d := range s.Drops {
		n += d
	}
	return n
}

// opDone counts a completion of an op with opcode op and error err.
func (c *counters) opDone(op wire.Opcode, err fi.Errno) {
	if int(op) >= len(c.opsDone) {
		return
	}
	c.opsDone[op].Add(1)
	if err != fi.SUCCESS {
		c.opsFailed[op].Add(1)
		if err == fi.ETIMEDOUT {
			c.timeouts.Add(1)
		}
	}
}

// doneTally counts successful completions by opcode for opsDone, added
// to them in one atomic add per opcode per response instead of one per
// completion: locked instructions are what the
// completion path pays most for on a VM (perf, 16 fetch-adds per
// response).
type doneTally struct {
	n   [wire.NumOpcodes]uint64
	sum int64
}

func (t *doneTally) add(op wire.Opcode) {
	if int(op) < len(t.n) {
		t.n[op]++
		t.sum++
	}
}

// flush adds the tally to c and clears it.
func (t *doneTally) flush(c *counters) {
	if t.sum == 0 {
		return
	}
	for op, n := range t.n {
		if n != 0 {
			c.opsDone[op].Add(n)
			t.n[op] = 0
		}
	}
	t.sum = 0
}

// Stats returns the engine's counters. It takes no lock: every counter is
// an atomic the datapath updates where the event happens, so a reader
// (metrics, `xdpfab stats`) never stalls it.
func (e *Engine) Stats() Stats {
	c := &e.stats
	s := Stats{TxRequests: c.txRequests.Load(), Retransmits: c.retransmits.Load(),
		FastRetransmits: c.fastRetransmits.Load(), SpuriousRetransmits: c.spuriousRetransmits.Load(), RxResponses: c.rxResponses.Load(),
		Delivered: c.delivered.Load(), Held: c.held.Load(), ReplayedFromCache: c.replayedFromCache.Load(),
		AcksSent: c.acksSent.Load(), AnswersSent: c.answersSent.Load(), SessionResets: c.sessionResets.Load(),
		PeersUnreachable: c.peersUnreachable.Load(), PeersEvicted: c.peersEvicted.Load(),
		PeersRefused: c.peersRefused.Load(), EAgain: c.eagain.Load(), RxErrors: c.rxErrors.Load(),
		TxErrors: c.txErrors.Load(), Timeouts: c.timeouts.Load(),
		SRTT: time.Duration(c.srtt.Load()), CacheAged: c.cacheAged.Load(),
		ResponsesLost: c.responsesLost.Load(), ResultsLost: c.resultsLost.Load(), ReceiverBatches: c.receiverBatches.Load(),
		CacheBytes: c.cacheBytes.Load(), TargetPeers: c.targetPeers.Load(), TxBytes: c.txBytes.Load()}
	for i := range s.Drops {
		s.Drops[i] = c.drops[i].Load()
	}
	var done uint64
	for i := range s.Ops {
		s.Ops[i] = c.opsDone[i].Load()
		s.OpErrors[i] = c.opsFailed[i].Load()
		done += s.Ops[i]
	}
	// After the completions: every op they count was submitted before,
	// so the difference is never negative.
	s.InFlight = int64(c.submitted.Load() - done)
	return s
}
