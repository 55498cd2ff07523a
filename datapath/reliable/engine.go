// Package reliable is xdpfab's reliability engine: exactly-once,
// in-order request/response delivery over an unreliable datagram
// datapath.Transport, in the manner of libfabric's rxd provider.
//
// Model. An Engine owns one transport and one local endpoint id. As an
// initiator it takes Requests (Submit), cuts large ones into segments that
// each fit one packet, packs small ones together, and sends them to the
// peer — (IP:port, endpoint id) — numbered with per-peer sequence numbers.
// As a target it delivers each peer's requests to its Handler strictly in
// sequence order, answers each request packet with one response packet
// (per-op errno and data), and keeps each response until the initiator
// acknowledges it so a retransmitted request is answered from the cache
// and never executed twice. Completions are reported through
// Config.OnComplete (or Config.OnCompleteBatch, a batch at a time).
//
// Provider choices, documented here because libfabric leaves them to us:
//
//   - Ordering: all requests to one peer execute at the target in posting
//     order (RAW, WAR, WAW for RMA and atomics, and SAS for messages).
//   - FI_FENCE: a fenced request is not transmitted until every earlier
//     request to the same peer has completed.
//   - FI_MORE: requests posted with MORE are held and packed into as few
//     packets as possible; the next request without MORE (or Flush) sends
//     them, and so does the timer after Config.MoreHold should that request
//     never come, so a forgotten FI_MORE delays but never strands requests.
//     Requests also share packets when they queue behind a full window
//     and, with Config.CoalesceAt packets already in flight, when Submit
//     leaves them for the receive side to pack at the next response (or
//     until a reader assists or drives the engine, which sends them at
//     once: it waits for completions, so nothing more is coming; held.go),
//     and likewise after a response completed several ops, whose reposts
//     a reader's return sends together (held.go).
//   - FI_INJECT: Payload and Compare are copied before Submit returns (at
//     most Config.InjectSize bytes together); the caller may reuse them at
//     once. Result, an output buffer, is unaffected: it stays the caller's
//     and is written until the completion. Without INJECT, Payload,
//     Compare and Result must stay valid and unmodified until the
//     completion.
//   - Response timing: a request is answered in the batch that delivered
//     it, except when that batch delivered a message or completed a
//     request of ours: then its responses are sent after the batch's
//     completions, together with the next request Submit sends (one
//     transport send for both, the request first), or at the start of the
//     next batch, or by a timer run within RetryInitial, whichever comes
//     first (deferRx). A deferred response that says only "delivered,
//     succeeded" (a message's, a write's) rides on that request
//     (wire.HdrAnswers, answers.go: a delayed acknowledgement, as TCP's)
//     instead of travelling as a packet of its own. A ping-pong thus
//     costs one send and one datagram per message. The other such
//     responses of a batch go out as one ACK per run of consecutive
//     requests of a peer (gathered acknowledgements, answers.go), not a
//     packet per request packet.
//   - Flow control: at most Config.Window packets in flight per peer and
//     Config.MaxOps requests outstanding per engine; beyond that Submit
//     fails with FI_EAGAIN. Nothing queues without bound.
//   - Acceptance: an error from Submit means the request was not accepted:
//     it never executes and never completes. An accepted request completes
//     exactly once; a transport Send that fails after acceptance is
//     treated as a lost datagram (its packets' retransmission timers resend
//     them) and counted in Stats.TxErrors, never reported to the caller.
//   - Retransmission: per-packet timers starting at the peer's RTO, which
//     is srtt+4*rttvar (RFC 6298, with rttvar the largest deviation of the
//     last round trip, not of the last sample) but never below
//     RetryInitial (1 ms, as rxd) nor below a floor learnt from spurious
//     timeouts: a response to the first transmission of a packet that was
//     retransmitted (wire.HdrOriginal, Eifel) raises it to twice that
//     round trip, and it decays over about a second (rto.go). Each expiry
//     doubles the timeout up to RetryMax (200 ms), for the peer's later
//     packets too until one is answered unretransmitted (or a spurious
//     timeout is detected), and one timer pass resends at most 8 packets
//     per peer, those overdue longest, so a scheduling stall does not turn
//     into a retransmission storm; the rest stay due for the next pass
//     about a round trip later, all of them resent within about an RTO
//     (never pushed back behind the packets just resent, which would
//     starve a gap). A peer that has answered nothing since a packet went
//     out gets one packet per timeout (a probe; the other due packets wait
//     behind its deadline, and fall due at once if the answer that ends
//     the silence shows a loss), and a spurious timeout gives the packets
//     in flight that were never resent the lifted timeout from then
//     (silence.go). Every sample also goes into an estimate the process
//     keeps per destination address, shared by all its engines (like TCP's
//     per-destination metrics): a peer whose last round trip gave fewer
//     than 4 samples (one of 10,000 endpoints' peers with an operation in
//     flight now and then) sends with the larger of its own timeout and
//     its address's, which has learnt the spread its own few samples
//     cannot (destrto.go); a peer with no sample yet starts from its
//     address's, else the endpoint's (else the process's) latest sample
//     from another peer (rtoseed.go). Fast retransmit: a
//     selective ack showing a gap, or a response to a request 3 or more
//     newer than an unanswered one (the target answers in order), resends
//     the missing packet at once.
//   - Unreachable peer: after MaxRetries (20) retransmissions of a packet
//     without an answer every pending request to that peer completes with
//     FI_ETIMEDOUT, and the next request starts a new session. When the
//     transport reports an ICMP port unreachable for a request
//     (datapath.VerdictUnreachable: the peer's host is up but nothing
//     listens) they complete with FI_ECONNREFUSED at once. Close
//     completes whatever is still pending with FI_ECANCELED.
//   - Path checks: from a packet's PathCheckRetries-th retransmission on,
//     if the peer has answered nothing since the packet was first sent,
//     each timer pass that retransmits to the peer tells a transport
//     implementing datapath.PathChecker that the peer's address looks
//     dead, once per pass, so a transport that picks next hops itself
//     re-verifies them long before the peer is declared unreachable. A
//     peer that keeps answering other packets has a working path: its
//     losses are the retransmissions' business.
//   - Admission: Config.Admit (the fabric layer's AV lookup) decides which
//     sources may open a session; others are dropped and counted. A new
//     session is accepted only at sequence numbers 1..Window, and never
//     one the peer has left: the target remembers a peer's last 4 sessions
//     (and, after ForgetPeer, for as long as a packet can still be
//     retransmitted), so a late packet of an old session is dropped as
//     stale instead of restarting it and executing again. When MaxPeers
//     target states exist, one idle for twice the retry budget is evicted
//     to make room; otherwise the new source is dropped (counted; see
//     Memory below).
//   - Cancellation: FI_ECANCELED (Close, ForgetPeer) means the initiator
//     stopped tracking the request. One not yet sent never executes; one
//     already on the wire may still execute at the target, at most once.
//
// Memory. A peer costs what it has in flight or cached, not Window ×
// MaxPacket: an idle peer is a few hundred bytes on either side (a target
// state: session, replay window bitmap, retired sessions, list heads; an
// initiator state: session, a ring of slot pointers grown by doubling as
// packets go in flight, at most 8 × Window bytes), and every buffer is
// sized to its packet from a pool per engine side shared by all peers
// (pool.go: size classes 1.5× apart, 64 B to 64 KiB).
//
//   - Initiator: a request packet in flight keeps a buffer of its size
//     (a fetch-add, 96 bytes, takes a 96-byte buffer) until it is
//     answered; flow control (Window, MaxOps) bounds them.
//   - Target: a response is cached at its own size (a fetch-add's is 64
//     bytes) until the initiator acknowledges it, which every request
//     does for everything below its Ack field (the initiator's lowest
//     unanswered sequence number): a peer's cache holds what is in flight,
//     and a peer that stops leaves its last few responses until nobody
//     has asked for them for a whole retry budget (RetryMax ×
//     (MaxRetries+1); a replay from the cache starts the age over), when
//     no initiator can ask again and they are released
//     (Stats.CacheAged). Requests that arrive ahead of a missing one are
//     held, each at its own size.
//   - Budget: cached responses and held requests together take at most
//     Config.CacheBytes (32 MiB), held requests at most half of it. The
//     budget never evicts a response the initiator has not acknowledged:
//     the wire says which ones it has (the Ack of its requests) and no
//     more, and one whose answers keep getting lost (heavy loss, or a
//     loaded initiator whose timers run late) may be asked for long
//     after RetryMax. When a response does not fit, the request is not
//     executed and dropped (DropCacheFull): back-pressure, which the
//     initiator's retransmission timer turns into a retry. Room comes
//     back as initiators acknowledge (their next request, or the
//     retransmission of the dropped one, carries the Ack) and as
//     responses age out. A request that does not fit the held share is
//     dropped the same way, as if lost. Back-pressure never loses or
//     repeats an operation: a dropped request did not execute and is
//     resent. Its cost: when the budget is taken by the unacknowledged
//     last responses of peers that stopped sending, new requests wait
//     until those age out, and an initiator whose own retry budget is
//     shorter than that fails them with FI_ETIMEDOUT (not executed, or
//     executed once, as any timeout): size CacheBytes for the peers ×
//     what each keeps in flight.
//   - Aged responses: the replay window still records that the request
//     executed (everything below its next sequence number did, exactly
//     once), so a retransmission of it is never executed again. If the
//     initiator acknowledged the response already, the duplicate is
//     stale and dropped; otherwise (an initiator configured to retry
//     longer than this target's retry budget) the target answers with
//     the response-lost status (wire.HdrLost, counted in
//     Stats.ResponsesLost) and the initiator completes the request's ops
//     with FI_ENODATA (Stats.ResultsLost): the operation took effect once
//     at the target, but its results (fetched values, read data) and its
//     status are unknown.
//   - Peers: at most Config.MaxPeers (16384) target states; a new source
//     beyond that evicts the state idle longest (found in amortized
//     constant time, peerlru.go; the order lags activity by an eighth
//     of the retry budget) if it has been idle for twice the retry
//     budget, and is dropped (DropPeerTableFull, back-pressure)
//     otherwise. Stats.CacheBytes,
//     TargetPeers and TxBytes report the use.
//
// Concurrency: Submit and Flush may be called from any goroutine. The
// receive goroutine (or, with Config.ManualProgress, the caller of
// Progress) runs the target side (Handler calls) and response processing;
// the process's one timer goroutine (timers.go), shared by every engine,
// retransmits. Handler and OnComplete are called from those goroutines
// without engine locks held, so they may call Submit, but must not block
// for long: they stall the datapath (a timer-run OnComplete, every
// engine's timers in the process).
package reliable

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/epoch"
)

// Peer identifies the other side: its transport address and endpoint id.
// The fabric layer maps fi_addr to Peer.
type Peer struct {
	Addr netip.AddrPort
	EP   uint32
}

func (p Peer) String() string { return fmt.Sprintf("%v/ep%d", p.Addr, p.EP) }

// Request is one operation to submit. The engine copies the struct; the
// byte slices are the caller's (see FI_INJECT in the package doc).
type Request struct {
	Peer    Peer
	AuthKey uint32
	Opcode  wire.Opcode
	// Flags: fi.MORE, fi.FENCE, fi.INJECT, fi.REMOTE_CQ_DATA; others ignored.
	Flags    fi.Flags
	RKey     uint64
	Addr     uint64 // remote address (RMA, atomics)
	Data     uint64 // remote CQ data, sent with fi.REMOTE_CQ_DATA
	Datatype uint8  // enum fi_datatype
	AtomicOp uint8  // enum fi_op
	Count    uint32 // atomics: element count
	// Payload is the data to send (MSG, RMA_WRITE) or the atomic operand.
	Payload []byte
	// Compare holds COMPARE_ATOMIC's compare values (sent after Payload).
	Compare []byte
	// Result receives RMA_READ data or the old values of FETCH/COMPARE
	// atomics; its length is the number of bytes wanted.
	Result  []byte
	Context any
}

// Completion reports the outcome of one Request.
type Completion struct {
	Context any
	Peer    Peer
	Opcode  wire.Opcode
	// Len is the bytes moved: Payload bytes for MSG/RMA_WRITE/ATOMIC,
	// Result bytes received for RMA_READ and FETCH/COMPARE.
	Len int
	// Err is FI_SUCCESS or the first error: a target's NAK (the errno its
	// handler returned), FI_ETIMEDOUT, or FI_ECANCELED at Close.
	Err fi.Errno
}

// Incoming is one request op handed to the target's Handler. It and its
// Payload are valid only during the HandleRequest call.
type Incoming struct {
	Peer    Peer
	AuthKey uint32
	Meta    datapath.Meta // what the transport vetted (NoMeta for UDP)
	Op      wire.OpDesc   // the op descriptor as sent
	Payload []byte
}

// Handler executes requests at the target. HandleRequest writes at most
// len(resp) bytes of response (read data, old atomic values) into resp and
// returns how many, or an errno that is sent back as the op's NAK. Each
// request is handed over exactly once, in the peer's posting order.
type Handler interface {
	HandleRequest(in *Incoming, resp []byte) (n int, errno fi.Errno)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(in *Incoming, resp []byte) (int, fi.Errno)

// HandleRequest calls f.
func (f HandlerFunc) HandleRequest(in *Incoming, resp []byte) (int, fi.Errno) { return f(in, resp) }

// Config configures New. Zero values take the defaults.
//
// The fields every Submit reads come first, in one cache line of the
// Engine (with thousands of endpoints a Submit finds its engine out of
// cache; TestEngineHotLayout).
type Config struct {
	EndpointID uint32

	Window       int           // packets in flight per peer, power of two, 64..4096 (256)
	MaxPacket    int           // UDP payload bytes per packet (1472: a 1500 MTU over IPv4; use 1452 for IPv6)
	InjectSize   int           // largest FI_INJECT payload (256)
	RetryInitial time.Duration // first retransmission timeout (1 ms)
	RetryMax     time.Duration // backoff cap (200 ms)
	// CoalesceAt: when this many packets to a peer are in flight, Submit
	// leaves new requests queued for the receive side to pack together
	// when the next response arrives, or MoreHold after, or when a reader
	// assists (Assist, Poll) or drives (Progress) the engine (2; negative
	// disables, also the hold after a response that completed several
	// ops, held.go). It trades a little latency under load for far fewer
	// packets; a ping-pong (one request in flight, answered alone) is
	// never delayed. Packets, not bytes, are what a software
	// datapath pays for: on veth with AF_XDP, 64 fetch-adds in flight ran
	// at 0.31 packets per op and 468 k ops/s with 16, at 0.084 packets
	// per op and 1.09 M ops/s with 2 (BenchmarkVeth, busy-poll).
	CoalesceAt int
	// MoreHold bounds how long requests posted with FI_MORE wait for the
	// request without it that should follow at once, and how long
	// coalescing (CoalesceAt) leaves requests queued for the next
	// response (200 µs).
	MoreHold   time.Duration
	MaxOps     int // requests outstanding per engine (4096)
	MaxPeers   int // target-side peer states (16384; see "Memory" in the package doc)
	MaxRetries int // retransmissions before a peer is unreachable (20)
	// CacheBytes bounds the target's buffers for responses the initiators
	// have not acknowledged and for requests held out of order (at most
	// half of it), shared by all peers (32 MiB; see "Memory" in the
	// package doc). At least 4 MaxPacket.
	CacheBytes int
	// BusyPoll makes the receive goroutine poll instead of blocking while
	// traffic flows (it blocks after 200 µs without packets): lower
	// latency, one core spinning (it only pays with a core to spare).
	BusyPoll bool
	// Handler executes incoming requests; nil answers every op with
	// FI_EOPNOTSUPP.
	Handler Handler
	// OnComplete receives every completion. Required unless
	// OnCompleteBatch is set.
	OnComplete func(Completion)
	// OnCompleteBatch, if set, receives the completions instead of
	// OnComplete, all those a received batch (a timer run, Close,
	// ForgetPeer) finished in one call, oldest first: a consumer that
	// takes a lock per completion (a CQ, its op pool) takes it once per
	// call instead. The slice is the engine's; it is valid only during
	// the call.
	OnCompleteBatch func([]Completion)
	// Admit decides whether a source may open a session (nil admits all).
	Admit func(p Peer, meta datapath.Meta) bool
	// Epochs, when set, is the epoch domain the Handler's lock-free reads
	// are announced in (mr's recycled regions): the receive side
	// registers a reader, online from the start of each received batch
	// to its end and offline otherwise, so an idle engine holds no
	// reclamation back. The Handler must keep nothing it reached past its
	// batch.
	Epochs *epoch.Domain

	// Shared, if set, is a second executor that may deliver some of a
	// peer's requests from the same sequence space (shared.go): the XDP
	// program serving atomics on kernel-resident regions.
	Shared SharedTarget
	// ManualProgress starts no receive goroutine: the caller drives the
	// receive side with Progress (FI_PROGRESS_MANUAL), saving a goroutine
	// hand-off per completion. Retransmission timers still run on their own.
	ManualProgress bool
	// SharedPoll receives on the process's shared poller (polled.go)
	// instead of a receive goroutine of the engine's own, where the
	// transport allows it (datapath.ReadyNotifier or
	// datapath.SharedPollable; else the engine keeps its goroutine): for
	// processes with thousands of endpoints.
	// Not with ManualProgress or BusyPoll; the engine cannot be assisted
	// (BeginAssist reports false).
	SharedPoll bool
}

func (c *Config) setDefaults() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Window, 256)
	def(&c.MaxPacket, 1472)
	def(&c.MaxOps, 4096)
	def(&c.InjectSize, 256)
	def(&c.MaxPeers, 16384)
	def(&c.CacheBytes, 32<<20)
	def(&c.MaxRetries, 20)
	def(&c.CoalesceAt, 2)
	if c.RetryInitial == 0 {
		c.RetryInitial = time.Millisecond
	}
	if c.MoreHold == 0 {
		c.MoreHold = 200 * time.Microsecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 200 * time.Millisecond
	}
	switch {
	case c.OnComplete == nil && c.OnCompleteBatch == nil:
		return fmt.Errorf("reliable: OnComplete is required: %w", fi.EINVAL)
	case c.Window < 64 || c.Window > 4096 || c.Window&(c.Window-1) != 0:
		return fmt.Errorf("reliable: window %d not a power of two in 64..4096: %w", c.Window, fi.EINVAL)
	case c.MaxPacket < 256 || c.MaxPacket > wire.MaxPacketLen:
		return fmt.Errorf("reliable: max packet %d out of range 256..%d: %w", c.MaxPacket, wire.MaxPacketLen, fi.EINVAL)
	case c.MaxOps < 1 || c.MaxOps > 1<<20 || c.InjectSize < 0 || c.MaxPeers < 1 || c.MaxRetries < 1:
		return fmt.Errorf("reliable: config out of range: %w", fi.EINVAL)
	case c.CacheBytes < 4*classSize(classOf(c.MaxPacket)):
		return fmt.Errorf("reliable: cache bytes %d below 4 packets of %d: %w", c.CacheBytes, c.MaxPacket, fi.EINVAL)
	case c.MoreHold < 0:
		return fmt.Errorf("reliable: negative MoreHold %v: %w", c.MoreHold, fi.EINVAL)
	case c.RetryInitial <= 0 || c.RetryMax < c.RetryInitial:
		return fmt.Errorf("reliable: retry timeouts %v..%v: %w", c.RetryInitial, c.RetryMax, fi.EINVAL)
	case c.SharedPoll && (c.ManualProgress || c.BusyPoll):
		return fmt.Errorf("reliable: SharedPoll with manual progress or busy polling: %w", fi.EINVAL)
	case c.InjectSize > c.MaxPacket-wire.HeaderLen-wire.OpDescLen:
		return fmt.Errorf("reliable: inject size %d exceeds one packet: %w", c.InjectSize, fi.EINVAL)
	}
	return nil
}

// backoff returns the timeout after rto expired once more.
func backoff(rto, max time.Duration) time.Duration {
	if rto *= 2; rto > max {
		rto = max
	}
	return rto
}

// op is one submitted request. It is exactly three cache lines
// (TestEngineHotLayout), so that in the line-aligned ops array Submit's
// store and a completion touch three lines of a cold op, not four.
type op struct {
	req     opRequest
	peer    *txPeer
	next    int32 // queue link
	pending int32 // packets carrying this op not yet answered
	active  bool
	started bool // first segment packed
	packed  bool // every segment packed
	total   int  // bytes to segment: Payload (MSG, RMA_WRITE) or Result (RMA_READ); atomics 0
	sent    int  // bytes packed so far
	got     int  // Result bytes received
	err     fi.Errno
}

// opRequest is an op's copy of its Request without the Peer, which
// op.peer has: with it an op took four cache lines, without it three
// (TestEngineHotLayout), each a miss when a Submit finds its engine cold.
type opRequest struct {
	AuthKey  uint32
	Opcode   wire.Opcode
	Datatype uint8
	AtomicOp uint8
	Count    uint32
	Flags    fi.Flags
	RKey     uint64
	Addr     uint64
	Data     uint64
	Payload  []byte
	Compare  []byte
	Result   []byte
	Context  any
}

func opRequestOf(r *Request) opRequest {
	return opRequest{AuthKey: r.AuthKey, Opcode: r.Opcode, Datatype: r.Datatype, AtomicOp: r.AtomicOp, Count: r.Count,
		Flags: r.Flags, RKey: r.RKey, Addr: r.Addr, Data: r.Data, Payload: r.Payload, Compare: r.Compare,
		Result: r.Result, Context: r.Context}
}

type segRef struct {
	op      int32
	off     int // offset of the segment in Payload / Result
	respLen int // response bytes expected
}

// txSlot is one request packet in flight, kept for retransmission. Slots
// and their buffers (sized to the packet) come from pools shared by every
// peer of the engine and go back when the packet is answered.
type txSlot struct {
	seq      uint32
	buf      []byte // from Engine.txPool, whole; the packet is buf[:n]
	n        int
	deadline int64 // engine-clock ns
	sentAt   int64 // first transmission, for RTT samples
	rto      time.Duration
	retries  int
	fastRetx bool
	nsegs    int
	segs     [wire.MaxOps]segRef
	_        [40]byte // to 512 bytes: its size class keeps it line-aligned
}

// reset zeroes s for reuse, writing only the lines its packet used: a
// slot spans eight lines, a fetch-add's packet one segment of them, and
// with thousands of engines the others are out of cache.
func (s *txSlot) reset() {
	clear(s.segs[:s.nsegs])
	s.seq, s.buf, s.n, s.deadline, s.sentAt, s.rto, s.retries, s.fastRetx, s.nsegs = 0, nil, 0, 0, 0, 0, 0, false, 0
}

// txPeer is the initiator state for one peer. Guarded by Engine.mu.
type txPeer struct {
	// The fields Submit reads or writes first, in the struct's first two
	// lines and the estimator's first words (TestTxPeerHotLayout): with
	// thousands of endpoints each Submit finds its peer out of cache.
	peer    Peer
	session uint32
	nextSeq uint32 // next sequence number to send
	base    uint32 // lowest sequence number not yet answered
	qhead   int32  // ops with segments not yet packed, FIFO
	qtail   int32
	active  int32 // p's position in Engine.active, -1 when not there
	// slots are the packets in flight, a ring by seq (nil: answered),
	// grown by doubling as the span base..nextSeq needs, up to Window.
	slots    []*txSlot
	inflight int32 // ops fully packed, not completed
	moreOpen bool  // the last op queued had FI_MORE
	// deferred: timeouts pushed other packets behind the probe (see
	// probeSeq below).
	deferred bool
	rto      time.Duration // initial timeout of new packets
	destKey  uint64        // the address's key in the shared estimates (destrto.go)
	est      rtoEstimator  // round trips and the timeout they give (rto.go)

	// Coalescing, FI_MORE, path checks and silence (cold unless used).

	// refill is Engine.heldPass+1 while a response that completed
	// several of p's ops has not been followed by a reader's sendHeld
	// (held.go): Submit then holds like coalescing.
	refill uint64
	// heldFrom is when coalescing first left ops queued that are still
	// queued (engine clock; 0: none, always without coalescing).
	heldFrom int64
	moreFrom int64 // engine clock when moreOpen was set
	heard    int64 // engine clock of the last response matched (path checks)
	// probeSeq is the packet a timeout resent first while the peer was
	// silent, probeAt when (engine clock; a probe is out while probeAt >
	// heard), deferred whether timeouts pushed other packets behind it
	// (silence.go).
	probeSeq uint32
	probeAt  int64
	_        [32]byte // to 256 bytes: its size class keeps it line-aligned
}

// slot returns the packet in flight at seq's ring position, or nil. Only
// seqs in base..nextSeq are unique to their position: callers asking for
// another check s.seq.
func (p *txPeer) slot(seq uint32) *txSlot {
	if len(p.slots) == 0 {
		return nil
	}
	return p.slots[seq&uint32(len(p.slots)-1)]
}

// rxPeer is the target state for one peer. Confined to the receive
// goroutine. It is a few hundred bytes; what the peer has in flight lives
// in the endpoint's rxStore. With thousands of peers a request finds its
// state out of cache, and each line more is a miss more: the fields a
// request in order reads or writes are in the first two cache lines
// (TestRxPeerHotLayout), the replay window's bitmap after them, read only
// while requests are held out of order (replayWindow.nheld), and the
// eviction list's links and the retired sessions last.
type rxPeer struct {
	peer    Peer
	session uint32
	// acked is the highest Ack the peer's requests carried: it has the
	// responses to every request below it.
	acked uint32
	held  entList // out-of-order requests, in rxStore, by seq
	cache entList // responses not yet acknowledged, in rxStore, by seq

	win        replayWindow
	lastActive int64 // engine clock of the last request
	// lruAt is when the state last moved to the front of Engine.rxLRU
	// (peerlru.go: the order lags activity by up to lruLag).
	lruAt   int64
	share   shareState // with Config.Shared (shared.go)
	needAck bool

	winBits [4]uint64 // win's bitmap, for windows up to 256
	// lruPrev and lruNext link Engine.rxLRU.
	lruPrev, lruNext *rxPeer
	// retired are the peer's sessions that this state left for a newer
	// one, newest first: their late packets are stale, not a restart.
	retired retiredSessions
}

// retiredSessions remembers the last few sessions of a peer that ended
// (the initiator started a new one, or ForgetPeer dropped the state). A
// late retransmission of a retired session inside its first window would
// otherwise pass for a new session and execute, after the initiator had
// completed (or cancelled) it: a duplicate, or a cancelled op run. 0 is
// no session (initiators never use it).
type retiredSessions [4]uint32

func (r *retiredSessions) add(s uint32) {
	copy(r[1:], r[:len(r)-1])
	r[0] = s
}

func (r *retiredSessions) has(s uint32) bool {
	return s != 0 && slices.Contains(r[:], s)
}

// tomb is what the target keeps of a peer whose state ForgetPeer dropped:
// its sessions, until no retransmission of them can still arrive.
type tomb struct {
	sessions retiredSessions
	until    int64 // engine clock
}

// Engine is one endpoint's reliability engine over a transport.
//
// Layout: with thousands of endpoints in a process (one engine each) an
// operation finds its engine out of cache, and every cache line of it the
// operation touches is a miss (and, with the engines spread over the heap,
// a page walk). The fields a Submit uses are in cfg's first line, the
// lines from tr to the receive state, and the first line of the counters
// (hintSubmit hints exactly those); a received response's follow, up to
// the end of the per-operation counters (hintHot, which the poller's
// Prefetch uses, hints them all); what other paths use (the target's
// decoders, refusals, the timer run's and Close's state) comes after.
// TestEngineHotLayout holds the fields to those lines.
type Engine struct {
	cfg Config
	tr  datapath.Transport

	// Submit's state (see Layout above).

	mu     sync.Mutex // guards the initiator state below
	closed bool
	// timerArm: the timer scheduler has a deadline to watch (timers.go),
	// and it is timerNext.
	timerArm bool
	// rxDeferred: rxOut holds a batch's responses, deferred past its end
	// (see deferRx). Set and cleared with rxMu held; read without.
	rxDeferred atomic.Bool
	// held: coalescing left requests queued since the last sendHeld
	// (held.go). Set with mu held.
	held     atomic.Bool
	lastPeer *txPeer // the entry of peers found last (nil after its removal): most traffic goes to one peer
	ops      []op
	freeOps  []int32
	// active are the peers that had requests queued or in flight since
	// the last timer run: the ones expire looks at, so an endpoint with
	// thousands of idle peers does not scan them every millisecond.
	active []*txPeer
	// heldPass counts sendHeld's passes under mu (txPeer.refill).
	heldPass  uint64
	timerNext int64
	tmWhen    int64             // guarded by timers.mu: the heap entry's deadline
	tmIndex   int               // guarded by timers.mu: the heap position, -1 if none
	txq       []datapath.Packet // initiator packets built, to send before mu is released
	// Initiator buffers: request packets are built in txBuild and kept in
	// a slot buffer of their size from txPool (see buildPacket). Buffers
	// freed while txq may point at them wait in txLater until it is sent.
	txPool    *bufPool
	txBuild   []byte
	txLater   [][]byte
	freeSlots []*txSlot
	// txBytesShown is what stats.txBytes holds: flushLocked stores only a
	// change, since an atomic store is a locked instruction on amd64 and
	// flushLocked runs on every Submit.
	txBytesShown int64

	// A received response's state besides the above. Only the goroutine
	// holding rxMu (the receive goroutine, or a Progress caller) touches
	// the receive state.

	rxMu    sync.Mutex
	batchMu sync.Mutex // held from a received batch to its flushed responses (see Close)
	// onPoller: the shared poller runs the receive side (set before it
	// may, unlike polled).
	onPoller bool
	// rxMsgs: the batch executed a message op (a receive may have
	// completed, to which the application may answer at once).
	rxMsgs bool
	// rxHold: the batch being processed executed a message, or is about
	// to execute a request that carried answers, so its responses may be
	// deferred: complete leaves the timer armed.
	rxHold    atomic.Bool
	forgetSet atomic.Bool // forget is non-empty
	peers     map[Peer]*txPeer
	// tally, while set (&tallyBuf), counts successful completions for
	// the counters, added to them once per response (stats.go). mu.
	tally   *doneTally
	reader  *epoch.Reader // Config.Epochs' reader (nil: none)
	rxPkts  []datapath.Packet
	rxCompl []Completion
	// rxNow is the clock read once as the batch being processed came in
	// (progressLocked): its steps (RTT samples, cached responses' ages,
	// expiry, the deferred responses' timer) use it instead of reading
	// the clock each, 4-5 reads a message on a ping-pong's path. The
	// packets arrived before it; a batch lasts microseconds.
	rxNow int64
	store *rxStore // their cached responses and held requests
	// The gauges' last stored values (showRxGauges).
	cacheBytesShown, targetPeersShown int64
	rxPeers                           rxPeerTable
	// refusing is refused.n+refusedNew.n: whether a batch has refusals
	// to apply (refused.go), read per batch without their cold lines.
	refusing int
	// rxDelivered is how many completions the last batch delivered
	// (receiveLoop reads it with rxMu still held).
	rxDelivered int
	// polled removes the engine from the shared poller (Config.SharedPoll:
	// an rxpoll.Registration's Remove, or a datapath.ReadyNotifier's
	// stop), nil when it has a receive goroutine. A func: one word, as
	// the *rxpoll.Registration it was, since an interface here (two
	// words) moved every field below by 8 bytes for engines that never
	// use it (docs/performance-history.md, "Many peers, brought back").
	polled   func()
	tallyBuf doneTally
	stats    counters // its per-operation counters first (stats.go), Submit's in its first line
	// rxDec is the received packet decoded: its header and first
	// descriptors follow the lines above.
	rxDec wire.Packet

	// The rest: other paths' state.

	paths  datapath.PathChecker // tr, when it implements it
	rtoEst int64                // unclamped RTO estimate (ns) of the last RTT sample from any peer, 0 before one (rtoseed.go)
	txBoth []datapath.Packet    // txq and deferred responses sent together (sendDeferredLocked)
	forget []Peer               // target states ForgetPeer asked to drop (the receive side drops them)
	rxLRU  peerLRU              // rxPeers by activity
	tombs  map[Peer]tomb        // peers ForgetPeer dropped, see tomb
	rxOut  []datapath.Packet    // target-side packets (responses, acks) queued for sending
	// injectBufs are FI_INJECT copies' buffers by op index, made on
	// first use (out of op, which they would push past three lines).
	injectBufs [][]byte
	rxDec2     wire.Packet
	rxAns      wire.Packet // a response an answering request stands for (answers.go)
	rxIn       Incoming
	rxBld      wire.Builder
	rxAcks     []*rxPeer
	// ansRuns and ansBuf are gatherAnswers' scratch: the runs of simple
	// responses it found, and the ACKs that replace them until flushRx.
	ansRuns []answerRun
	ansBuf  []byte
	rxOffer []*rxPeer // peers to hand to Config.Shared after the batch
	// refused are the previous batch's ICMP port unreachables, refusedNew
	// this batch's (refused.go).
	refused, refusedNew refusals
	ackBuf              []byte

	// Readers assisting the receive goroutine (BeginAssist), and when the
	// last one ended (e.now()).
	assisters   atomic.Int32
	lastAssist  atomic.Int64
	lastPoll    atomic.Int64 // the last Poll (e.now()): see pollSpinGap
	assistTimer *time.Timer  // receiveLoop's

	pollMu  sync.Mutex
	pollBuf []unix.PollFd // guarded by pollMu: see pollFDsLocked

	// Timers (timers.go): the process's timer goroutine runs this
	// engine's deadlines under tmRun, which Close takes to wait for a run.
	tmRun   sync.Mutex
	tmCompl []Completion // the timer run's completions, guarded by tmRun

	done chan struct{}
	wg   sync.WaitGroup
}

// New starts an engine on tr: its receive goroutine (unless
// ManualProgress), and its timers on the process's timer goroutine
// (timers.go). The engine owns tr and closes it in Close.
func New(tr datapath.Transport, cfg Config) (*Engine, error) {
	if tr == nil {
		return nil, fmt.Errorf("reliable: nil transport: %w", fi.EINVAL)
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg: cfg, tr: tr, tmIndex: -1,
		peers:   make(map[Peer]*txPeer),
		ops:     make([]op, cfg.MaxOps),
		freeOps: make([]int32, cfg.MaxOps),
		rxPeers: newRxPeerTable(),
		store:   newRxStore(cfg.CacheBytes, cfg.MaxPacket),
		tombs:   make(map[Peer]tomb),
		done:    make(chan struct{}),
		ackBuf:  make([]byte, 0, 64*wire.HeaderLen),
		ansRuns: make([]answerRun, 0, tr.BatchSize()),
		ansBuf:  make([]byte, 0, tr.BatchSize()*wire.HeaderLen),
		pollBuf: make([]unix.PollFd, 0, 8),
	}
	if cfg.Epochs != nil {
		e.reader = cfg.Epochs.NewReader()
	}
	for i := range e.freeOps {
		e.freeOps[i] = int32(cfg.MaxOps - 1 - i)
	}
	e.paths, _ = tr.(datapath.PathChecker)
	e.txPool = newBufPool(0, 1<<20)
	e.txBuild, _ = e.txPool.get(cfg.MaxPacket)
	batch := tr.BatchSize()
	e.rxPkts = make([]datapath.Packet, batch)
	for i := range e.rxPkts {
		e.rxPkts[i].Buf = make([]byte, cfg.MaxPacket)
	}
	e.rxOut = make([]datapath.Packet, 0, batch)
	e.txq = make([]datapath.Packet, 0, batch)
	e.txBoth = make([]datapath.Packet, 0, 2*batch)
	timers.register()
	if cfg.SharedPoll {
		if err := e.joinPoller(); err != nil {
			timers.unregister(e)
			return nil, err
		}
	}
	if !cfg.ManualProgress && e.polled == nil {
		e.lastAssist.Store(-int64(time.Hour)) // never assisted
		e.lastPoll.Store(-int64(time.Hour))
		e.assistTimer = time.NewTimer(time.Hour)
		e.assistTimer.Stop()
		e.wg.Add(1)
		go e.receiveLoop()
	}
	return e, nil
}

func (e *Engine) now() int64 { return monoNow() }

// LocalAddr is the transport's bound address.
func (e *Engine) LocalAddr() netip.AddrPort { return e.tr.LocalAddr() }

// MaxSegment is the most payload bytes one request packet carries.
func (e *Engine) MaxSegment() int { return e.cfg.MaxPacket - wire.HeaderLen - wire.OpDescLen }

func newSession() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		if s := binary.LittleEndian.Uint32(b[:]); s != 0 {
			return s
		}
	}
}

// Submit posts r. It returns FI_EAGAIN when MaxOps requests are
// outstanding, FI_EINVAL for a malformed request, FI_EMSGSIZE for an atomic
// or inject that does not fit one packet, FI_ESHUTDOWN after Close. An
// error means r was not accepted and never executes or completes; once
// accepted, r completes exactly once through OnComplete, also when the
// transport fails to send it (its retransmission timer resends it; the
// failure is counted in Stats.TxErrors).
func (e *Engine) Submit(r *Request) error {
	manyEngines := openEngines.Load() > spareBuildEngines
	if manyEngines {
		e.hintSubmit() // with thousands of endpoints, e is cold (Engine's Layout)
	}
	if r == nil || !r.Peer.Addr.IsValid() || !r.Opcode.Valid() {
		return fmt.Errorf("reliable submit: bad request: %w", fi.EINVAL)
	}
	total := 0
	single := e.MaxSegment()
	switch r.Opcode {
	case wire.OpMsg, wire.OpRMAWrite:
		total = len(r.Payload)
	case wire.OpRMARead:
		total = len(r.Result)
	case wire.OpAtomic:
		if len(r.Result) != 0 || len(r.Compare) != 0 {
			return fmt.Errorf("reliable submit: ATOMIC takes no result or compare: %w", fi.EINVAL)
		}
	case wire.OpFetchAtomic, wire.OpCompareAtomic:
		if (r.Opcode == wire.OpCompareAtomic) != (len(r.Compare) > 0) {
			return fmt.Errorf("reliable submit: compare values only with COMPARE_ATOMIC: %w", fi.EINVAL)
		}
		if len(r.Result) > e.cfg.MaxPacket-wire.HeaderLen-wire.RespDescLen {
			return fmt.Errorf("reliable submit: atomic result %d bytes: %w", len(r.Result), fi.EMSGSIZE)
		}
	}
	if r.Opcode >= wire.OpAtomic && len(r.Payload)+len(r.Compare) > single {
		return fmt.Errorf("reliable submit: atomic operands %d bytes: %w", len(r.Payload)+len(r.Compare), fi.EMSGSIZE)
	}
	// FI_INJECT copies the constant buffers, Payload and Compare; Result
	// is an output buffer, which the flag leaves to the caller.
	inject := r.Flags&fi.INJECT != 0
	if inject && len(r.Payload)+len(r.Compare) > e.cfg.InjectSize {
		return fmt.Errorf("reliable submit: inject of %d bytes (max %d): %w",
			len(r.Payload)+len(r.Compare), e.cfg.InjectSize, fi.EMSGSIZE)
	}

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return fmt.Errorf("reliable submit: %w", fi.ESHUTDOWN)
	}
	if len(e.freeOps) == 0 {
		e.stats.eagain.Add(1)
		e.mu.Unlock()
		return fmt.Errorf("reliable submit: %d requests outstanding: %w", e.cfg.MaxOps, fi.EAGAIN)
	}
	if manyEngines {
		e.hintOp(e.lastPeer)
	}
	p := e.txPeerOf(r.Peer)
	if p == nil {
		p = &txPeer{peer: r.Peer, session: newSession(), nextSeq: 1, base: 1, qhead: -1, qtail: -1, active: -1, destKey: destKey(r.Peer.Addr)}
		e.peers[r.Peer] = p
	}
	if p.active < 0 {
		p.active = int32(len(e.active))
		e.active = append(e.active, p)
	}
	idx := e.freeOps[len(e.freeOps)-1]
	e.freeOps = e.freeOps[:len(e.freeOps)-1]
	e.stats.submitted.Add(1)
	o := &e.ops[idx]
	*o = op{req: opRequestOf(r), peer: p, next: -1, active: true, total: total}
	if inject {
		if e.injectBufs == nil {
			e.injectBufs = make([][]byte, len(e.ops))
		}
		buf := e.injectBufs[idx]
		if buf == nil {
			buf = make([]byte, e.cfg.InjectSize)
			e.injectBufs[idx] = buf
		}
		n := copy(buf, r.Payload)
		copy(buf[n:], r.Compare)
		o.req.Payload = buf[:n:n]
		o.req.Compare = buf[n : n+len(r.Compare)]
	}
	if p.qtail >= 0 {
		e.ops[p.qtail].next = idx
	} else {
		p.qhead = idx
	}
	p.qtail = idx
	more := r.Flags&fi.MORE != 0
	if more && !p.moreOpen {
		p.moreFrom = e.now()
		e.armTimer(p.moreFrom + int64(e.cfg.MoreHold))
	}
	p.moreOpen = more
	// Coalescing: with many packets already in flight the next response
	// (the ack clock) is near; leave the op queued so the receive side
	// packs everything queued by then into as few packets as possible.
	// The same after a response completed several ops, until a reader
	// comes back (held.go): the application is reposting them.
	if e.cfg.CoalesceAt <= 0 || int(p.nextSeq-p.base) < e.cfg.CoalesceAt && p.refill != e.heldPass+1 {
		e.pump(p)
	} else if p.heldFrom == 0 && !more {
		// The ack clock may stall (a peer not scheduled answers late,
		// and the timeout may be long, rto.go): the ops go out by
		// MoreHold at the latest.
		p.heldFrom = e.now()
		e.armTimer(p.heldFrom + int64(e.cfg.MoreHold))
		e.held.Store(true)
	}
	// Accepted: a send that fails now is the retransmission timer's
	// business (the packets are in their slots with deadlines), not the
	// caller's, who must not see an error for a request that executes.
	e.flushLocked()
	e.mu.Unlock()
	return nil
}

// txPeerOf returns the initiator state of peer, or nil. It spares the map
// lookup (hashing a Peer) when the peer is the one found last. e.mu is held.
func (e *Engine) txPeerOf(peer Peer) *txPeer {
	if p := e.lastPeer; p != nil && p.peer == peer {
		return p
	}
	p := e.peers[peer]
	if p != nil {
		e.lastPeer = p
	}
	return p
}

// Flush sends requests held back by FI_MORE to peer. It fails only after
// Close (FI_ESHUTDOWN); a send that fails is left to the retransmission
// timers, as in Submit.
func (e *Engine) Flush(peer Peer) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("reliable flush: %w", fi.ESHUTDOWN)
	}
	if p := e.peers[peer]; p != nil {
		p.moreOpen = false
		e.pump(p)
	}
	e.flushLocked()
	return nil
}

// ForgetPeer drops all state about peer, as when its address leaves the
// address vector (fi_av_remove): requests still pending to it complete with
// FI_ECANCELED, the next request to it starts a new session, and its
// target-side state (replay window, response cache) is released by the
// receive side before it processes another packet. A forgotten peer that
// keeps sending is a new source again (subject to Admit); one that was
// mid-session gets no answers until its requests time out and it starts a
// new session.
func (e *Engine) ForgetPeer(peer Peer) {
	var out []Completion
	e.mu.Lock()
	if p := e.peers[peer]; p != nil {
		e.failPeer(p, fi.ECANCELED, &out)
		e.deactivate(p)
		delete(e.peers, peer)
		if e.lastPeer == p {
			e.lastPeer = nil
		}
	}
	e.forget = append(e.forget, peer)
	e.forgetSet.Store(true)
	e.mu.Unlock()
	e.deliver(&out)
}

// dropForgotten releases target states ForgetPeer named. rxMu is held.
func (e *Engine) dropForgotten() {
	e.mu.Lock()
	for _, p := range e.forget {
		if rp := e.rxPeers.get(p); rp != nil {
			t := tomb{sessions: rp.retired, until: e.now() + e.retryBudget()}
			t.sessions.add(rp.session)
			e.bury(p, t)
			e.dropRxPeer(rp)
		}
	}
	e.forget = e.forget[:0]
	e.forgetSet.Store(false)
	e.mu.Unlock()
}

// bury records t for p, bounded by MaxPeers tombs: expired ones go first,
// and when all are live the new one is not kept (its late packets then
// meet the ordinary first-window rule). rxMu is held.
func (e *Engine) bury(p Peer, t tomb) {
	if len(e.tombs) >= e.cfg.MaxPeers {
		now := e.now()
		for k, old := range e.tombs {
			if old.until <= now {
				delete(e.tombs, k)
			}
		}
		if len(e.tombs) >= e.cfg.MaxPeers {
			return
		}
	}
	e.tombs[p] = t
}

// flushLocked sends the queued initiator packets, with the responses a
// receive batch deferred (deferRx) if the receive side is free. e.mu is
// held.
// showRxGauges stores the receive side's gauges, only what changed: a
// locked instruction each on amd64, and this runs per received batch.
// rxMu is held.
func (e *Engine) showRxGauges() {
	if n := int64(e.store.pool.inUse); n != e.cacheBytesShown {
		e.cacheBytesShown = n
		e.stats.cacheBytes.Store(n)
	}
	if n := int64(e.rxPeers.len()); n != e.targetPeersShown {
		e.targetPeersShown = n
		e.stats.targetPeers.Store(n)
	}
}

func (e *Engine) flushLocked() {
	if e.rxDeferred.Load() && e.rxMu.TryLock() {
		// rxMu after mu inverts the receive side's order (rxMu, then mu):
		// TryLock never waits, and a receive side that holds rxMu sends
		// what it deferred itself before it blocks (progressLocked).
		e.sendDeferredLocked()
		e.rxMu.Unlock()
	}
	if len(e.txq) > 0 {
		e.send(e.txq)
		clear(e.txq)
		e.txq = e.txq[:0]
	}
	for i, b := range e.txLater {
		e.txPool.put(b)
		e.txLater[i] = nil
	}
	e.txLater = e.txLater[:0]
	if n := int64(e.txPool.inUse - len(e.txBuild)); n != e.txBytesShown { // txBuild is scratch
		e.txBytesShown = n
		e.stats.txBytes.Store(n)
	}
}

// newSlot returns a free slot for p's packet seq (p.nextSeq), placed in
// p's ring. e.mu is held.
func (e *Engine) newSlot(p *txPeer, seq uint32) *txSlot {
	if int(seq-p.base) >= len(p.slots) {
		n := min(max(8, 2*len(p.slots)), e.cfg.Window)
		ring := make([]*txSlot, n)
		for q := p.base; q != seq; q++ {
			if s := p.slot(q); s != nil && s.seq == q {
				ring[q&uint32(n-1)] = s
			}
		}
		p.slots = ring
	}
	var s *txSlot
	if k := len(e.freeSlots); k > 0 {
		s = e.freeSlots[k-1]
		e.freeSlots[k-1] = nil
		e.freeSlots = e.freeSlots[:k-1]
	} else {
		s = new(txSlot)
	}
	p.slots[seq&uint32(len(p.slots)-1)] = s
	return s
}

// freeSlot returns p's slot s (answered, or its peer failed) and its
// buffer to the pools. e.mu is held.
func (e *Engine) freeSlot(p *txPeer, s *txSlot) {
	p.slots[s.seq&uint32(len(p.slots)-1)] = nil
	if len(e.txq) > 0 {
		e.txLater = append(e.txLater, s.buf) // a retransmission of it may be queued
	} else {
		e.txPool.put(s.buf)
	}
	s.reset()
	e.freeSlots = append(e.freeSlots, s)
}

// send hands pkts to the transport. A failure is counted, never returned:
// every packet the engine sends is either a request in a slot with a
// retransmission deadline, or a response or ack that the initiator's
// timer asks for again (and gets from the response cache), so what a
// failed send carried is sent again like a lost datagram.
func (e *Engine) send(pkts []datapath.Packet) {
	if err := e.tr.Send(pkts); err != nil {
		e.stats.txErrors.Add(1)
	}
}

// armTimer makes sure the engine's timers run by deadline (timers.go).
// e.mu is held.
func (e *Engine) armTimer(deadline int64) {
	if e.timerArm && e.timerNext <= deadline {
		return
	}
	e.timerArm, e.timerNext = true, deadline
	timers.arm(e, deadline)
}

func (e *Engine) queueTx(buf []byte, addr netip.AddrPort) {
	e.txq = append(e.txq, datapath.Packet{Buf: buf, Addr: addr})
	if len(e.txq) == cap(e.txq) {
		e.flushLocked()
	}
}

// pump packs queued ops of p into packets while the window allows.
func (e *Engine) pump(p *txPeer) {
	W := uint32(e.cfg.Window)
	for p.qhead >= 0 && !p.moreOpen && p.nextSeq-p.base < W {
		head := &e.ops[p.qhead]
		if head.req.Flags&fi.FENCE != 0 && !head.started && p.inflight > 0 {
			return // fenced: wait for earlier ops to complete
		}
		e.buildPacket(p)
	}
	if p.qhead < 0 && e.cfg.CoalesceAt > 0 {
		p.heldFrom = 0 // nothing left queued (only coalescing sets it: spare its line otherwise)
	}
}

// buildPacket packs ops from the head of p's queue into one packet and
// queues it for sending. The head op always makes progress.
func (e *Engine) buildPacket(p *txPeer) {
	seq := p.nextSeq
	s := e.newSlot(p, seq)
	// A small packet is built in the process's spare build buffer when no
	// other engine is building in it (with thousands of engines the
	// engine's own is out of cache; the spare is warm), else in txBuild,
	// and so is one that starts with bulk data (the slot takes txBuild).
	// With few engines open their own buffers stay warm, and the spare's
	// two atomic swaps a packet are the cost (spareBuildEngines).
	var spare *buildBuffer
	if h := &e.ops[p.qhead]; openEngines.Load() > spareBuildEngines && (h.total-h.sent <= e.cfg.MaxPacket/4 ||
		h.req.Opcode != wire.OpMsg && h.req.Opcode != wire.OpRMAWrite) {
		spare = spareBuild.Swap(nil)
	}
	build := e.txBuild
	if spare != nil {
		build = spare.buf
	}
	var bb wire.Builder // on the stack: an engine's own would be cold
	b := &bb
	b.Reset(build[:e.cfg.MaxPacket:e.cfg.MaxPacket], wire.Header{Type: wire.TypeReq, SrcEP: e.cfg.EndpointID, DstEP: p.peer.EP,
		AuthKey: e.ops[p.qhead].req.AuthKey, Session: p.session, Seq: seq, Ack: p.base})
	s.nsegs = 0
	respRoom := e.cfg.MaxPacket - wire.HeaderLen
	for p.qhead >= 0 && b.NumOps() < wire.MaxOps {
		idx := p.qhead
		o := &e.ops[idx]
		r := &o.req
		if b.NumOps() > 0 && (r.AuthKey != e.ops[s.segs[0].op].req.AuthKey ||
			(r.Flags&fi.FENCE != 0 && !o.started)) {
			break
		}
		room := b.Room()
		respRoom -= wire.RespDescLen
		d := wire.OpDesc{Opcode: r.Opcode, Datatype: r.Datatype, AtomicOp: r.AtomicOp,
			RKey: r.RKey, Addr: r.Addr, Count: r.Count}
		if r.Flags&fi.REMOTE_CQ_DATA != 0 {
			d.Flags |= wire.OpCQData
			d.Data = r.Data
		}
		var p1, p2 []byte
		seg := 0
		switch r.Opcode {
		case wire.OpMsg, wire.OpRMAWrite:
			seg = min(o.total-o.sent, room)
			if seg < o.total-o.sent && b.NumOps() > 0 && seg < minSplit {
				seg = -1 // start the segment in a fresh packet
			}
			p1 = r.Payload[o.sent : o.sent+max(seg, 0)]
			if r.Opcode == wire.OpMsg {
				d.Addr = uint64(o.sent)
				d.Count = uint32(o.total)
			} else {
				d.Addr += uint64(o.sent)
			}
		case wire.OpRMARead:
			seg = min(o.total-o.sent, respRoom)
			if room < 0 || (seg < o.total-o.sent && b.NumOps() > 0 && seg < minSplit) {
				seg = -1
			}
			d.Addr += uint64(o.sent)
			d.RespLen = uint32(max(seg, 0))
		default: // atomics: all or nothing
			p1, p2 = r.Payload, r.Compare
			if len(p1)+len(p2) > room || len(r.Result) > respRoom {
				seg = -1
			}
			d.RespLen = uint32(len(r.Result))
		}
		if seg < 0 || (room < 0) {
			if b.NumOps() == 0 {
				panic("reliable: head op does not fit an empty packet") // Submit's checks make this unreachable
			}
			break
		}
		if !o.started {
			d.Flags |= wire.OpFirst
			if r.Flags&fi.FENCE != 0 {
				d.Flags |= wire.OpFence
			}
		}
		if err := b.AddOp(d, p1, p2); err != nil {
			break
		}
		respRoom -= int(d.RespLen)
		s.segs[s.nsegs] = segRef{op: idx, off: o.sent, respLen: int(d.RespLen)}
		s.nsegs++
		o.started = true
		o.pending++
		if r.Opcode == wire.OpMsg || r.Opcode == wire.OpRMAWrite || r.Opcode == wire.OpRMARead {
			o.sent += seg
		}
		if r.Opcode < wire.OpAtomic && o.sent < o.total {
			break // packet full; the rest of this op goes in the next one
		}
		// Op fully packed: mark its last descriptor and dequeue it.
		o.packed = true
		p.inflight++
		p.qhead = o.next
		if p.qhead < 0 {
			p.qtail = -1
		}
		o.next = -1
		e.markLast(build, b.NumOps()-1)
		if p.qhead >= 0 && e.ops[p.qhead].req.Flags&fi.FENCE != 0 {
			break
		}
	}
	pkt := b.Finish()
	// The slot keeps the packet in a buffer of its size: a copy of a small
	// one, the build buffer itself (replaced from the pool) for a large
	// one built in txBuild, so bulk data is not copied twice.
	if spare == nil && len(pkt) > e.cfg.MaxPacket/2 {
		s.buf = e.txBuild
		e.txBuild, _ = e.txPool.get(e.cfg.MaxPacket)
	} else {
		s.buf, _ = e.txPool.get(len(pkt))
		copy(s.buf, pkt)
	}
	if spare != nil {
		spareBuild.Store(spare)
	}
	s.seq, s.n = seq, len(pkt)
	s.sentAt = e.now()
	s.rto = e.sendTimeout(p, s.sentAt)
	s.retries, s.fastRetx = 0, false
	s.deadline = s.sentAt + int64(s.rto)
	e.armTimer(s.deadline)
	p.nextSeq++
	e.stats.txRequests.Add(1)
	e.queueTx(s.buf[:s.n], p.peer.Addr)
}

// spareBuild is the process's spare build buffer (buildPacket), nil while
// an engine builds in it. Of the largest packet size, never in a pool.
var spareBuild atomic.Pointer[buildBuffer]

type buildBuffer struct{ buf []byte }

// openEngines counts the process's open engines (timerSched.register,
// unregister). buildPacket uses the spare build buffer, and Submit hints
// the engine's lines (hintSubmit, hintOp), only above spareBuildEngines:
// with few engines their lines stay warm and the hints are work per
// message for nothing (about 20 ns of a ping-pong message's 1 µs). A
// round number well above what an MPI rank or a
// benchmark opens and well below bench peers' 10,000, not a measured
// crossover.
var openEngines atomic.Int32

const spareBuildEngines = 64

func init() { spareBuild.Store(&buildBuffer{buf: make([]byte, wire.MaxPacketLen)}) }

// markLast sets OpLast in descriptor i of an encoded request being built.
func (e *Engine) markLast(buf []byte, i int) {
	f := buf[wire.HeaderLen+i*wire.OpDescLen+4:]
	binary.LittleEndian.PutUint16(f, binary.LittleEndian.Uint16(f)|wire.OpLast)
}

// complete finishes op idx and queues its completion on out. e.mu is held.
func (e *Engine) complete(idx int32, err fi.Errno, out *[]Completion) {
	o := &e.ops[idx]
	n := o.got
	switch o.req.Opcode {
	case wire.OpMsg, wire.OpRMAWrite, wire.OpAtomic:
		n = len(o.req.Payload)
	}
	if err == fi.SUCCESS {
		err = o.err
	}
	*out = append(*out, Completion{Context: o.req.Context, Peer: o.peer.peer, Opcode: o.req.Opcode, Len: n, Err: err})
	if e.tally != nil && err == fi.SUCCESS {
		e.tally.add(o.req.Opcode)
	} else {
		e.stats.opDone(o.req.Opcode, err)
	}
	if o.packed {
		o.peer.inflight--
	}
	*o = op{next: -1}
	e.freeOps = append(e.freeOps, idx)
	if len(e.freeOps) == len(e.ops) && e.timerArm && !e.rxHold.Load() && !e.rxDeferred.Load() {
		// Nothing outstanding, so no packet in flight and none held by
		// FI_MORE: no deadline to watch until the next Submit. Taking the
		// engine out of the timer heap now spares the timer goroutine a
		// wake-up for nothing (one per request for an endpoint that
		// talks to a peer now and then, as most of thousands do). Not
		// while the receive side may defer responses (rxHold) or has
		// (rxDeferred): they need a timer run, and disarming here to arm
		// again in deferRx would cost a ping-pong a timer-heap update and
		// a timer-goroutine wake-up per message.
		e.timerArm = false
		timers.disarm(e)
	}
}

func (e *Engine) deliver(out *[]Completion) {
	if f := e.cfg.OnCompleteBatch; f != nil {
		if len(*out) > 0 {
			f(*out)
			clear(*out)
			*out = (*out)[:0]
		}
		return
	}
	for i := range *out {
		e.cfg.OnComplete((*out)[i])
		(*out)[i] = Completion{}
	}
	*out = (*out)[:0]
}

// failPeer completes every op to p with err and restarts p's session.
// e.mu is held.
func (e *Engine) failPeer(p *txPeer, err fi.Errno, out *[]Completion) {
	for i := range e.ops {
		if e.ops[i].active && e.ops[i].peer == p {
			e.complete(int32(i), err, out)
		}
	}
	for _, s := range p.slots {
		if s != nil {
			e.freeSlot(p, s)
		}
	}
	p.session = newSession()
	p.nextSeq, p.base = 1, 1
	p.qhead, p.qtail = -1, -1
	p.inflight = 0
	p.moreOpen = false
	p.heldFrom = 0
	p.est, p.rto = rtoEstimator{}, 0
	p.probeAt, p.deferred = 0, false
}

// handleResponse processes a RESP or ACK from the target. e.mu is held.
func (e *Engine) handleResponse(pk *wire.Packet, src netip.AddrPort, out *[]Completion) {
	if pk.DstEP != e.cfg.EndpointID {
		e.stats.drop(DropWrongEndpoint)
		return
	}
	p := e.txPeerOf(Peer{src, pk.SrcEP})
	if p == nil || pk.Session != p.session {
		e.stats.drop(DropStaleResponse)
		return
	}
	if pk.Type == wire.TypeResp {
		e.matchResponse(p, pk, out)
	} else if pk.Flags&wire.HdrAnswers != 0 {
		e.handleAnswers(pk, src, out) // a gathered acknowledgement (gatherAnswers)
	}
	// Fast retransmit: the target holds later packets but misses Ack.
	if pk.Sack != 0 && pk.Ack-p.base < p.nextSeq-p.base {
		if s := p.slot(pk.Ack); s != nil && s.seq == pk.Ack && !s.fastRetx {
			s.fastRetx = true
			e.stats.fastRetransmits.Add(1)
			e.retransmit(p, s)
		}
	}
	e.pump(p)
}

func (e *Engine) matchResponse(p *txPeer, pk *wire.Packet, out *[]Completion) {
	seq := pk.Seq
	if seq-p.base >= p.nextSeq-p.base {
		e.stats.drop(DropStaleResponse)
		return
	}
	s := p.slot(seq)
	if s == nil || s.seq != seq {
		e.stats.drop(DropStaleResponse) // answered already (duplicate response)
		return
	}
	if int(pk.NumOps) != s.nsegs {
		e.stats.drop(DropBadResponse)
		return
	}
	for i := 0; i < s.nsegs; i++ {
		ref := &s.segs[i]
		if pk.Resps[i].Opcode != e.ops[ref.op].req.Opcode || int(pk.Resps[i].Len) > ref.respLen {
			e.stats.drop(DropBadResponse)
			return
		}
	}
	e.stats.rxResponses.Add(1)
	if pk.Flags&wire.HdrLost != 0 {
		e.stats.resultsLost.Add(1) // its ops carry FI_ENODATA
	}
	now := e.rxNow // matchResponse runs in a receive batch
	e.endSilence(p, s, pk.Flags, now)
	p.heard = now
	// Karn's rule, plus: a request the target held behind a lost one
	// (HdrHeld) is no sample, its wait was not round-trip time. A
	// response to the first transmission (HdrOriginal) of a packet
	// retransmitted meanwhile is one: the retransmission was spurious
	// (rto.go).
	sampled, spurious := false, false
	switch {
	case pk.Flags&wire.HdrHeld != 0:
	case s.retries == 0 && !s.fastRetx:
		p.est.sample(now - s.sentAt)
		destSample(p.destKey, now-s.sentAt, now, false)
		sampled = true
	case pk.Flags&wire.HdrOriginal != 0:
		e.stats.spuriousRetransmits.Add(1)
		p.est.sample(now - s.sentAt)
		if s.retries > 0 {
			p.est.spurious(now-s.sentAt, now) // a timeout, not a fast retransmit (reordering)
			spurious = true
		}
		destSample(p.destKey, now-s.sentAt, now, s.retries > 0)
		sampled = true
	}
	done := 0
	e.tally = &e.tallyBuf // the response's completions count once (stats.go)
	for i := 0; i < s.nsegs; i++ {
		ref := &s.segs[i]
		o := &e.ops[ref.op]
		rd := &pk.Resps[i]
		if rd.Errno != 0 && o.err == fi.SUCCESS {
			o.err = fi.Errno(rd.Errno)
		}
		if rd.Len > 0 {
			o.got += copy(o.req.Result[ref.off:], pk.Payload(i))
		}
		o.pending--
		if o.pending == 0 && o.packed {
			e.complete(ref.op, fi.SUCCESS, out)
			done++
		}
	}
	e.tally = nil
	e.tallyBuf.flush(&e.stats)
	if done >= refillAt && e.readerReturns(now) {
		p.refill = e.heldPass + 1
		e.held.Store(true)
	}
	e.freeSlot(p, s)
	for p.base != p.nextSeq && p.slot(p.base) == nil {
		p.base++
	}
	p.est.advance(p.base, p.nextSeq, now)
	if sampled {
		// A true sample: the timeout of the next packets follows the
		// estimate again, undoing a backoff (RFC 6298 5.7, see expire).
		p.rto = p.est.timeout(e.cfg.RetryInitial, e.cfg.RetryMax)
		e.noteRTO(p.est.srtt + 4*p.est.rttvar)
		e.stats.srtt.Store(p.est.srtt)
	}
	if spurious {
		p.extendDeadlines(now + int64(p.rto))
	}
	// The target answers in order: a request reorderThresh or more below
	// the one just answered that is still unanswered lost its response (or
	// its request); resend it now rather than at its timer.
	if d := seq - p.base; d >= reorderThresh && d < p.nextSeq-p.base {
		for q := p.base; q != seq-reorderThresh+1; q++ {
			if o := p.slot(q); o != nil && !o.fastRetx {
				o.fastRetx = true
				e.stats.fastRetransmits.Add(1)
				e.retransmit(p, o)
			}
		}
	}
}

// PathCheckRetries is how many retransmissions of one packet, with no
// answer from the peer meanwhile, make the engine ask the transport to
// check its path to the peer (see the package doc): with the 1 ms initial
// timeout, about 7 ms of silence.
const PathCheckRetries = 3

// retxBurst bounds timer-driven retransmissions per peer per timer pass.
const retxBurst = 8

// lateDue says which of p's due packets a timer pass resends: those due
// before late, and the first lateEq (in sequence order) due at late, at
// most retxBurst in all, the ones overdue longest. With no more than
// retxBurst due, late is now and lateEq covers them all. e.mu is held.
func (p *txPeer) lateDue(now int64) (late int64, lateEq, due int) {
	var oldest [retxBurst]int64 // the earliest deadlines due, ascending
	n := 0
	for seq := p.base; seq != p.nextSeq; seq++ {
		s := p.slot(seq)
		if s == nil || s.deadline > now {
			continue
		}
		due++
		if n == retxBurst && s.deadline >= oldest[n-1] {
			continue
		}
		i := min(n, retxBurst-1)
		for ; i > 0 && oldest[i-1] > s.deadline; i-- {
			oldest[i] = oldest[i-1]
		}
		oldest[i] = s.deadline
		n = min(n+1, retxBurst)
	}
	if due <= retxBurst {
		return now, due, due
	}
	late = oldest[retxBurst-1]
	lateEq = retxBurst
	for _, d := range oldest {
		if d < late {
			lateEq--
		}
	}
	return late, lateEq, due
}

// retxPace is how long the due packets a timer pass left (left of them)
// wait for the next: about a round trip, for the burst's answers to come
// back (they acknowledge much of the rest), but short enough that the
// passes get through all of them within about an RTO, as their timers
// asked: with a round trip inflated by load or loss (hundreds of ms) and
// a full window due, a round trip per pass would leave the last of them
// unsent for many RTOs, past the target's retry budget, which then no
// longer has their responses. Never below minRetxPace.
func (p *txPeer) retxPace(left int, retryInitial time.Duration) int64 {
	pace := max(p.est.srtt, int64(retryInitial))
	if spread := int64(p.rto) * retxBurst / int64(max(left, 1)); spread < pace {
		pace = spread
	}
	return max(pace, int64(minRetxPace))
}

// minRetxPace bounds how often a peer's timer passes come while packets
// are left due: 8 packets per 50 µs at most.
const minRetxPace = 50 * time.Microsecond

// reorderThresh is how far responses may be reordered before a missing one
// counts as lost (TCP's duplicate-ack threshold).
const reorderThresh = 3

// retransmit resends slot s with a fresh Ack field. e.mu is held.
func (e *Engine) retransmit(p *txPeer, s *txSlot) {
	s.buf[3] |= wire.HdrRetransmit
	if s.buf[3]&wire.HdrAnswers != 0 {
		// What the first transmission answered was answered then, or
		// its initiator asks again and gets the cached responses.
		wire.ClearAnswer(s.buf)
	}
	binary.LittleEndian.PutUint32(s.buf[28:], p.base)
	e.stats.retransmits.Add(1)
	e.queueTx(s.buf[:s.n], p.peer.Addr)
}

// deactivate takes p off the active list. e.mu is held.
func (e *Engine) deactivate(p *txPeer) {
	i := int(p.active)
	if i < 0 {
		return
	}
	last := len(e.active) - 1
	if i != last {
		e.active[i] = e.active[last]
		e.active[i].active = int32(i)
	}
	e.active[last] = nil
	e.active = e.active[:last]
	p.active = -1
}

// expire handles due timers and returns the earliest pending deadline, or
// 0 when nothing is in flight. e.mu is held.
func (e *Engine) expire(out *[]Completion) int64 {
	now := e.now()
	var next int64
	// Backwards: deactivate moves the last peer, already seen, into i.
	for i := len(e.active) - 1; i >= 0; i-- {
		p := e.active[i]
		due := false
		pathChecked := false
		// At most retxBurst resends per pass: a stall (often our own
		// scheduling) expires many packets at once, and the answers to
		// the first few (with gap detection) sort out the rest without
		// a storm. The burst goes to the packets overdue longest
		// (lateDue), and the rest stay due for the next pass, about a
		// round trip later (retxPace). Taking the lowest sequence numbers
		// instead, and pushing the rest by their RTO, starves a gap:
		// once timeouts reach RetryMax the resent and the pushed fall
		// due together, the same low packets take every burst, and a
		// lost one higher up is never resent while the target holds
		// everything behind it (nothing is answered; its cached
		// responses age out).
		late, lateEq, ndue := p.lateDue(now)
		var pace int64 // when the next pass comes for the packets left due
		if ndue > retxBurst {
			pace = now + p.retxPace(ndue-retxBurst, e.cfg.RetryInitial)
		}
		for seq := p.base; seq != p.nextSeq; seq++ {
			s := p.slot(seq)
			if s == nil {
				continue
			}
			due = due || s.deadline <= now
			if s.deadline <= now && (s.deadline > late || s.deadline == late && lateEq == 0) {
				// Left for the next pass.
				if next == 0 || pace < next {
					next = pace
				}
				continue
			}
			if s.deadline <= now {
				if s.deadline == late {
					lateEq--
				}
				if p.deferBehindProbe(s, now, e.cfg.RetryMax) {
					if next == 0 || s.deadline < next {
						next = s.deadline
					}
					continue
				}
				if s.retries >= e.cfg.MaxRetries {
					e.stats.peersUnreachable.Add(1)
					e.failPeer(p, fi.ETIMEDOUT, out)
					break
				}
				s.retries++
				s.rto = backoff(s.rto, e.cfg.RetryMax)
				s.deadline = now + int64(s.rto)
				// RFC 6298 (5.5, 5.7): the backed-off timeout holds for
				// the peer's new packets too until one is answered
				// without retransmission (Karn). Otherwise, when the
				// round trip outgrows the timeout (a new peer's first
				// packets under queueing), every packet is retransmitted
				// spuriously and none ever gives a sample to learn from.
				p.rto = max(p.rto, s.rto)
				s.fastRetx = false
				e.retransmit(p, s)
				p.noteTimeout(s, now)
				if s.retries >= PathCheckRetries && p.heard < s.sentAt && e.paths != nil && !pathChecked {
					pathChecked = true
					e.paths.CheckPath(p.peer.Addr)
				}
			}
			if next == 0 || s.deadline < next {
				next = s.deadline
			}
		}
		if p.moreOpen {
			if held := p.moreFrom + int64(e.cfg.MoreHold); held > now {
				if next == 0 || held < next {
					next = held
				}
			} else {
				p.moreOpen = false // the request without FI_MORE never came
				due = true
			}
		}
		// Requests left queued by coalescing go out at the latest
		// MoreHold after the first was left, or when a timer of the peer
		// expires (its response may be lost), or now if nothing is in
		// flight to bring a response. Only at deadlines: pumping whenever
		// Submit arms a timer would split what coalescing is gathering.
		if p.heldFrom != 0 {
			if held := p.heldFrom + int64(e.cfg.MoreHold); held > now {
				if next == 0 || held < next {
					next = held
				}
			} else {
				p.heldFrom = 0
				due = true
			}
		}
		if due || p.nextSeq == p.base {
			e.pump(p)
		}
		if p.nextSeq == p.base && p.qhead < 0 && !p.moreOpen {
			e.deactivate(p) // idle: nothing for the timers until its next Submit
		}
	}
	if next != 0 && next <= now {
		next = now + 1
	}
	return next
}

// receiveLoop is the receive goroutine (auto progress).
func (e *Engine) receiveLoop() {
	defer e.wg.Done()
	var lastActive int64
	for {
		// BusyPoll spins only while traffic is hot (busyPollSpin since the
		// last packet) and blocks otherwise, so an idle engine burns no core.
		if d := e.standDown(); d > 0 {
			// CQ readers receive for this goroutine (Assist, Poll) and
			// sleep on the transport's descriptors themselves; look again
			// when they may have stopped: assistHold after the last
			// reader's poll, not later.
			e.assistTimer.Reset(d)
			select {
			case <-e.assistTimer.C:
			case <-e.done:
				return
			}
			continue
		}
		wait := !e.cfg.BusyPoll || e.now()-lastActive > int64(busyPollSpin)
		e.rxMu.Lock()
		n, err := e.progressLocked(wait)
		delivered := e.rxDelivered
		e.rxMu.Unlock()
		if err != nil {
			select {
			case <-e.done:
				return
			default:
			}
			e.stats.rxErrors.Add(1)
			time.Sleep(time.Millisecond)
			continue
		}
		if n > 0 {
			e.stats.receiverBatches.Add(1)
			if e.cfg.BusyPoll {
				lastActive = e.now()
			}
		}
		// Yield before the next, possibly blocking, receive when the batch
		// delivered completions: a goroutine they woke (a CQ reader) sits
		// in this P's runnext and would otherwise wait for another thread
		// to steal it (a cross-CPU wake-up) while this one blocks in
		// poll(2). Only then when blocking: Gosched also wakes an idle
		// thread (wakep), which spins on the other core, and a target's
		// batches, which complete nothing, paid that thread wake-up per
		// request (sched_wakeup call graphs of `xdpfab bench serve`). A
		// busy-polling loop yields on every round, or it would keep its
		// P from other goroutines until preempted.
		if e.cfg.BusyPoll || (n > 0 && delivered > 0) {
			runtime.Gosched()
		}
	}
}

// assistHold is how long the receive goroutine leaves the transport to
// readers after the last one polled (Poll) or stopped assisting
// (EndAssist). A reader that stops reading, as a passive one-sided target
// that computes does, leaves what arrives waiting at most this long: the
// receive goroutine sleeps until assistHold after the last poll
// (standDown) and then receives again (FI_PROGRESS_AUTO). While readers
// keep polling it wakes once per assistHold to look, one thread wake-up
// per millisecond against one per packet. Much shorter holds make the
// wake-ups and the hand-backs frequent: a reader spinning on a loaded
// 2-core VM is descheduled for whole time slices (0.75-3 ms), and every
// gap longer than the hold hands the transport back to the goroutine,
// which then competes with the reader again until its next batch (the
// first packet after the hand-back costs a thread wake-up). Much longer
// ones delay a passive target's peers by as much once its application
// stops polling.
const assistHold = time.Millisecond

// standDown is how long from now the receive goroutine leaves the
// transport to readers: assistHold while one assists (BeginAssist), what
// is left of assistHold since the last Poll or EndAssist, 0 when that has
// passed (the receive goroutine receives again).
func (e *Engine) standDown() time.Duration {
	if e.assisters.Load() > 0 {
		return assistHold
	}
	left := e.lastAssist.Load() + int64(assistHold) - e.now()
	if left <= 0 {
		return 0
	}
	return time.Duration(left)
}

// BeginAssist announces a goroutine that waits for this engine's
// completions and will call Assist, sleeping on PollFDs in between, for an
// engine with auto progress and without BusyPoll; EndAssist ends it. While
// a reader assists, and assistHold after, the receive goroutine does not
// receive: the packet that completes the reader's operation wakes the
// reader's thread, which processes it itself, instead of the receive
// goroutine's, which would then have to wake the reader (a second
// cross-thread wake-up per completion). It reports false, and EndAssist
// must not be called, when the engine cannot be assisted (manual progress,
// BusyPoll, a transport that cannot be polled).
func (e *Engine) BeginAssist() bool {
	if e.cfg.ManualProgress || e.cfg.BusyPoll || e.polled != nil {
		return false
	}
	if !e.pollable() {
		return false
	}
	e.assisters.Add(1)
	return true
}

// EndAssist ends a BeginAssist.
func (e *Engine) EndAssist() {
	e.lastAssist.Store(e.now())
	e.assisters.Add(-1)
}

// Assist processes one batch of what the transport has received, without
// waiting, if no other goroutine is receiving for the engine at the
// moment; it returns the packets processed. For readers between
// BeginAssist and EndAssist, and for Progress callers of manual engines
// alike it must not be called from OnComplete or the Handler.
func (e *Engine) Assist() int {
	e.sendHeld() // the reader waits for completions (held.go)
	if !e.rxMu.TryLock() {
		return 0
	}
	n, _ := e.progressLocked(false)
	e.rxMu.Unlock()
	return n
}

// Poll is Assist for a reader that polls the engine's completions without
// waiting (an fi_cq_read that found its CQ empty, in a loop, under auto
// progress): it counts as assisting for assistHold, so the receive
// goroutine leaves the transport to such readers (once the batch it may
// be waiting for has come), and processes one batch if no other
// goroutine is receiving at the moment, never waiting for one that is.
// Only a Poll within pollSpinGap of the previous one stands the receive
// goroutine down (a reader polling in a loop), not a single look. A
// reader that spins on its CQ then receives its completions itself,
// without the receive goroutine's wake-up per packet (libfabric's rxd
// and rxm progress this way); one that stops reading leaves arriving
// packets to the receive goroutine again within about assistHold (twice
// it at worst). It does nothing for manual progress (Progress) and
// BusyPoll engines.
func (e *Engine) Poll() int {
	if e.cfg.ManualProgress || e.cfg.BusyPoll {
		return 0
	}
	now := e.now()
	if now-e.lastPoll.Load() < int64(pollSpinGap) {
		e.lastAssist.Store(now) // a reader spinning: stand the receive goroutine down
	}
	e.lastPoll.Store(now) // a plain store: concurrent pollers may lose one, which only delays the stand-down
	return e.Assist()
}

// pollSpinGap is how close two Polls must come for the receive goroutine
// to stand down: a reader spinning on an empty CQ polls every microsecond
// or so (between messages, a few microseconds), while one that looks
// once (an MPI passive target testing a request between computations)
// must not leave its peers' packets to nobody for assistHold.
const pollSpinGap = 100 * time.Microsecond

// busyPollSpin is how long a BusyPoll receive goroutine keeps polling after
// the last packet before it blocks again.
const busyPollSpin = 200 * time.Microsecond

// PollFDs appends the descriptors that become readable when the
// transport has datagrams for Progress (datapath.Pollable); ok is false
// when the transport cannot be waited for that way. For engines with
// Config.ManualProgress: a goroutine that found nothing to progress can
// sleep in poll(2) on them. It must leave poll(2) before Close.
func (e *Engine) PollFDs(dst []unix.PollFd) ([]unix.PollFd, bool) {
	e.pollMu.Lock()
	defer e.pollMu.Unlock()
	fds, ok := e.pollFDsLocked()
	if ok {
		dst = append(dst, fds...)
	}
	return dst, ok
}

// pollable reports whether the transport can be waited for with poll(2)
// now (PollFDs ok).
func (e *Engine) pollable() bool {
	e.pollMu.Lock()
	_, ok := e.pollFDsLocked()
	e.pollMu.Unlock()
	return ok
}

// pollFDsLocked asks the transport for its descriptors in e.pollBuf: a
// buffer passed through the datapath.Pollable interface escapes to the
// heap, so a caller's stack array would cost an allocation per blocked
// read. e.pollMu is held; the result is valid until it is released.
func (e *Engine) pollFDsLocked() ([]unix.PollFd, bool) {
	p, ok := e.tr.(datapath.Pollable)
	if !ok {
		return nil, false
	}
	fds, ok := p.PollFDs(e.pollBuf[:0])
	e.pollBuf = fds[:0] // keep what the transport grew
	return fds, ok
}

// Progress runs the receive side once for an engine with
// Config.ManualProgress: it takes one batch from the transport (waiting for
// one if wait is set), executes incoming requests, matches responses and
// delivers their completions from the calling goroutine. It returns the
// packets processed; FI_ESHUTDOWN after Close. OnComplete and the Handler
// must not call Progress.
func (e *Engine) Progress(wait bool) (int, error) {
	if !e.cfg.ManualProgress {
		return 0, fmt.Errorf("reliable progress: engine has auto progress: %w", fi.EOPBADSTATE)
	}
	e.sendHeld() // the caller waits for completions (held.go)
	n, err := e.progress(wait)
	if err != nil {
		return 0, fmt.Errorf("reliable progress: %w", err)
	}
	return n, nil
}

// spareRx is the process's spare receive buffer (progressLocked), nil
// while a polled engine's batch uses it: on the shared poller engines
// take turns, so one warm buffer serves them all. Nothing refers to a
// received packet's bytes after its batch (held requests and responses
// are copied into the rxStore, results into the caller's buffers).
var spareRx atomic.Pointer[rxBuffer]

type rxBuffer struct{ buf []byte }

func init() { spareRx.Store(&rxBuffer{buf: make([]byte, wire.MaxPacketLen)}) }

// giveBackRx puts the engine's own buffer back where the spare ended up
// (a transport may reorder a batch's packets, lossy does) and returns
// the spare.
func (e *Engine) giveBackRx(spare *rxBuffer, own []byte) {
	for i := range e.rxPkts { // the first, unless reordered
		if b := e.rxPkts[i].Buf; cap(b) > 0 && &b[:1][0] == &spare.buf[0] {
			e.rxPkts[i].Buf = own
			break
		}
	}
	spareRx.Store(spare)
}

// progress receives and processes one batch. rxMu confines the receive
// state to one goroutine at a time.
func (e *Engine) progress(wait bool) (int, error) {
	e.rxMu.Lock()
	defer e.rxMu.Unlock()
	return e.progressLocked(wait)
}

// progressLocked is progress with e.rxMu held.
func (e *Engine) progressLocked(wait bool) (int, error) {
	if e.rxDeferred.Load() {
		// The last batch's responses, deferred: out before this caller
		// possibly blocks in Receive, and before a new batch queues more.
		e.batchMu.Lock()
		e.flushRx()
		e.batchMu.Unlock()
	}
	// The transport receives into the buffers' whole capacity
	// (datapath.Packet): no need to reslice them here, which with
	// thousands of engines would touch a batch of cold packets each time.
	// On the shared poller the first packet goes into the process's spare
	// receive buffer, warm where the engine's own is not (spareRx).
	if e.onPoller && !wait {
		if spare := spareRx.Swap(nil); spare != nil {
			own := e.rxPkts[0].Buf
			e.rxPkts[0].Buf = spare.buf[:e.cfg.MaxPacket:e.cfg.MaxPacket]
			defer e.giveBackRx(spare, own)
		}
	}
	n, err := e.tr.Receive(e.rxPkts, wait)
	if e.forgetSet.Load() {
		e.dropForgotten()
	}
	if err != nil || n == 0 {
		return 0, err
	}
	e.rxNow = e.now()
	// The Handler may reach recycled objects from here to the batch's
	// end: two stores per batch, none per packet.
	e.reader.Quiesce()
	defer e.reader.Offline()
	// Held until the batch's responses are flushed, so Close never shuts
	// the transport between executing a request and answering it.
	e.batchMu.Lock()
	defer e.batchMu.Unlock()
	locked := false
	for i := 0; i < n; i++ {
		pkt := &e.rxPkts[i]
		d := &e.rxDec
		if pkt.Meta.Verdict == datapath.VerdictUnreachable {
			e.noteUnreachable(pkt) // applied after the next batch (refused.go)
			continue
		}
		if err := wire.Decode(pkt.Buf, d); err != nil {
			e.stats.drop(dropReasonOf(err))
			continue
		}
		if d.Type == wire.TypeReq {
			if d.Flags&wire.HdrAnswers != 0 {
				// The answers first: they are to earlier requests of ours.
				if !locked {
					e.mu.Lock()
					locked = true
				}
				// The request they ride on is executed next and its
				// response may be deferred (deferRx): an inject they
				// complete leaves the timer armed (complete), instead of
				// taking it out of the timer heap for deferRx to put it
				// back, two heap updates a ping-pong message.
				e.rxHold.Store(true)
				e.handleAnswers(d, pkt.Addr, &e.rxCompl)
			}
			if locked {
				e.flushLocked()
				e.mu.Unlock()
				locked = false
			}
			e.handleRequest(d, pkt)
			continue
		}
		if !locked {
			e.mu.Lock()
			locked = true
		}
		e.handleResponse(d, pkt.Addr, &e.rxCompl)
	}
	if e.refusing > 0 {
		if !locked {
			e.mu.Lock()
			locked = true
		}
		// A batch with datagrams, short of full, has read what was
		// queued ahead of the ICMPs noted before it.
		e.applyRefusals(&e.rxCompl, n < len(e.rxPkts) && e.refusedNew.seen < n)
	}
	if locked {
		e.flushLocked()
		e.mu.Unlock()
	}
	e.sendAcks()
	// Responses older than the retry budget: no initiator asks for them
	// again (a peer gone idle leaves its last few unacknowledged).
	if k := e.store.expire(e.rxNow-e.retryBudget(), 64); k > 0 {
		e.stats.cacheAged.Add(uint64(k))
	}
	e.deferRx()
	e.releaseShared()
	e.showRxGauges()
	e.rxDelivered = len(e.rxCompl)
	e.deliver(&e.rxCompl)
	return n, nil
}

// deferRx ends a batch's target side: it sends the batch's responses, or
// leaves them queued when the batch completed something the application
// may answer at once (a message delivered, an initiator completion): the
// completions are delivered first, and the responses go out in one Send
// with whatever the application submits next (flushLocked), else at the
// start of the next batch (progressLocked: at once for the receive
// goroutine and a reader still waiting), else with the engine's next
// timer run, within RetryInitial (a manual-progress application that
// stops reading, or readers that stopped assisting, still get their
// peers answered). A request-response exchange (a tagged ping-pong) then
// pays one transport send per message instead of two, and its initiator
// one wake-up instead of two: the response to a message travels with the
// answer. The timer stays armed across such exchanges (see complete), so
// deferring costs no timer-heap update per message. rxMu is held.
func (e *Engine) deferRx() {
	msgs := e.rxMsgs
	e.rxMsgs = false
	if len(e.rxOut) == 0 || len(e.rxOffer) > 0 || (!msgs && len(e.rxCompl) == 0) {
		// Nothing to wait for, or peers to release to the other
		// executor, which must follow the flushed responses.
		e.flushRx()
		e.rxHold.Store(false)
		return
	}
	e.rxDeferred.Store(true)
	e.rxHold.Store(false)
	e.mu.Lock()
	if !e.timerArm {
		e.armTimer(e.rxNow + int64(e.cfg.RetryInitial))
	}
	e.mu.Unlock()
}

// sendDeferredLocked sends the deferred responses together with the
// queued initiator packets, requests first: the peer may process the
// first packet of a batch before the next arrives (on veth each frame is
// received as it is transmitted), and the request is what its reader
// waits for (the pong of a ping-pong), while the response only completes
// an inject. rxMu and mu are held.
func (e *Engine) sendDeferredLocked() {
	if !e.rxDeferred.Load() {
		return
	}
	e.foldAnswers()
	e.gatherAnswers()
	both := append(append(e.txBoth, e.txq...), e.rxOut...)
	clear(e.txq)
	e.txq = e.txq[:0]
	clear(e.rxOut)
	e.rxOut = e.rxOut[:0]
	e.send(both)
	clear(both)
	e.txBoth = both[:0]
	e.flushRx()
}

// Close stops the engine: it lets a received batch finish and send its
// responses, closes the transport, waits for the goroutines, and completes
// every pending request with FI_ECANCELED. It must not be called from a
// Handler or OnComplete (it waits for the batch that is calling them).
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	close(e.done)
	if e.polled != nil {
		e.polled() // waits for a batch the poller is running
	}
	// Let a batch being processed finish and send its responses: a request
	// the handler executed is answered, not left to the initiator's timer.
	e.batchMu.Lock()
	for e.rxDeferred.Load() {
		// Responses a batch deferred: send them first. Their holder may
		// be waiting for batchMu to send them itself.
		if e.rxMu.TryLock() {
			e.flushRx()
			e.rxMu.Unlock()
			break
		}
		e.batchMu.Unlock()
		runtime.Gosched()
		e.batchMu.Lock()
	}
	err := e.tr.Close()
	e.batchMu.Unlock()
	e.wg.Wait()
	// No timer run after this: one under way finishes (it found the
	// engine open) before Close completes what is left.
	timers.unregister(e)
	e.tmRun.Lock()
	e.tmRun.Unlock() //nolint:staticcheck // an empty critical section: waiting for a run
	e.rxMu.Lock()
	e.rxPeers.each(e.forgetShared)
	e.reader.Close() // no batch runs any more
	e.rxMu.Unlock()
	var out []Completion
	e.mu.Lock()
	for i := range e.opsBound() {
		if e.ops[i].active {
			e.complete(int32(i), fi.ECANCELED, &out)
		}
	}
	e.mu.Unlock()
	e.deliver(&out)
	return err
}

// opsBound returns a bound below which every active op lies; mu held. The
// free stack starts as MaxOps-1 ... 0 (0 on top) and is LIFO, so its
// bottom entries still holding their first values name ops that are free
// (most never used). Close looks below the bound only: reading the whole
// array (MaxOps ops, about 1 MB by default) faulted in hundreds of pages
// an engine with a few operations in flight never touched, at every close.
func (e *Engine) opsBound() int {
	n := len(e.ops)
	j := 0
	for j < len(e.freeOps) && e.freeOps[j] == int32(n-1-j) {
		j++
	}
	return n - j
}

// minSplit is the smallest segment worth starting an op in a packet that
// already carries others; below it the op starts a fresh packet. Small, so
// bulk data fills packets to the brim and equal-size runs go out as GSO.
const minSplit = 64
