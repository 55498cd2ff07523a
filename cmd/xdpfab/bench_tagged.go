package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// The tagged phases of bench run: 8 B tagged sends at --depth in flight
// (to compare with the untagged send phase), a tagged ping-pong one in
// flight (to compare with the UDP ping-pong), and 1 MiB tagged sends, 8 in
// flight, which go by rendezvous. The top four bits of a tag say what the
// target does with the message; the target keeps receives posted for each
// kind besides its untagged ones.
const (
	benchTagRate   = 0 << 60 // counted
	benchTagPing   = 1 << 60 // answered with benchTagPong; the payload is the sender's name (fi_getname)
	benchTagBulk   = 2 << 60 // counted
	benchTagPong   = 3 << 60
	benchTagIgnore = 1<<60 - 1 // a receive takes any tag of its kind

	benchBulkSize  = 1 << 20
	benchBulkRecvs = 8 // 1 MiB receives posted, and sends in flight
	// benchRxSize is the target's rx size: the untagged and tagged 8 B
	// receives, the bulk ones and the ping's.
	benchRxSize = 2*benchRecvs + benchBulkRecvs + 1
)

// benchTaggedTarget is the target's tagged receives and ping peers.
type benchTaggedTarget struct {
	rate  [][]byte
	bulk  [][]byte
	ping  []byte
	pong  []byte
	peers map[string]fi.Addr // ping senders inserted into the AV, by name
}

func (t *benchTarget) openTagged() {
	tt := &t.tagged
	tt.rate = make([][]byte, benchRecvs)
	for i := range tt.rate {
		tt.rate[i] = make([]byte, benchMsgSize)
	}
	tt.bulk = make([][]byte, benchBulkRecvs)
	for i := range tt.bulk {
		tt.bulk[i] = make([]byte, benchBulkSize)
	}
	tt.ping, tt.pong = make([]byte, 64), make([]byte, benchMsgSize)
	tt.peers = map[string]fi.Addr{}
}

// Receive i of the target: untagged [0, benchRecvs), tagged 8 B
// [benchRecvs, 2*benchRecvs), bulk, then the ping's.
func (t *benchTarget) pingIdx() int { return 2*benchRecvs + benchBulkRecvs }

// repost posts receive i again.
func (t *benchTarget) repost(i int) error {
	tt := &t.tagged
	switch {
	case i < benchRecvs:
		return t.ep.Recv(t.bufs[i], mr.Desc{}, fi.AddrUnspec, t.ctxs[i])
	case i < 2*benchRecvs:
		return t.ep.TRecv(tt.rate[i-benchRecvs], mr.Desc{}, fi.AddrUnspec, benchTagRate, benchTagIgnore, t.ctxs[i])
	case i < t.pingIdx():
		return t.ep.TRecv(tt.bulk[i-2*benchRecvs], mr.Desc{}, fi.AddrUnspec, benchTagBulk, benchTagIgnore, t.ctxs[i])
	}
	return t.ep.TRecv(tt.ping, mr.Desc{}, fi.AddrUnspec, benchTagPing, benchTagIgnore, t.ctxs[i])
}

// pong answers a ping of n bytes: its payload names the sender, which is
// inserted into the AV the first time (the target accepts unknown peers,
// but can only answer those in its AV).
func (t *benchTarget) pong(n int) error {
	tt := &t.tagged
	name := tt.ping[:min(n, len(tt.ping))]
	fa, ok := tt.peers[string(name)]
	if !ok {
		out := make([]fi.Addr, 1)
		if _, err := t.av.Insert([][]byte{append([]byte(nil), name...)}, out, 0, nil); err != nil {
			return fmt.Errorf("ping from %x: %w", name, err)
		}
		fa = out[0]
		tt.peers[string(name)] = fa
	}
	for {
		err := t.ep.TInject(tt.pong, fa, benchTagPong)
		if !errors.Is(err, fi.EAGAIN) {
			return err
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// taggedPhase is one of the tagged phases for runPhases.
type taggedPhase struct {
	name string
	dst  **phaseResult
	run  func() (*phaseResult, error)
}

func (c *benchClient) taggedPhases(rep *benchReport, phase time.Duration,
	pipe func(name string, depth, opBytes int, batch bool, post func(int, bool) error) func() (*phaseResult, error)) []taggedPhase {
	msg := make([]byte, benchMsgSize)
	tsend := func(slot int, _ bool) error {
		return c.ep.TSend(msg, mr.Desc{}, c.peer, benchTagRate|uint64(slot), c.ctxs[slot])
	}
	bulk := make([]byte, benchBulkSize)
	for i := range bulk {
		bulk[i] = byte(i)
	}
	tbulk := func(slot int, _ bool) error {
		return c.ep.TSend(bulk, mr.Desc{}, c.peer, benchTagBulk, c.ctxs[slot])
	}
	rate := fmt.Sprintf("tagged send %d B, %d in flight", benchMsgSize, c.o.depth)
	pp := "tagged ping-pong, 1 in flight"
	bw := fmt.Sprintf("tagged send %d MiB, %d in flight", benchBulkSize>>20, benchBulkRecvs)
	return []taggedPhase{
		{rate, &rep.TaggedSendRate, pipe(rate, c.o.depth, benchMsgSize, false, tsend)},
		{pp, &rep.TaggedPingPong, func() (*phaseResult, error) { return c.taggedPingPong(pp, phase) }},
		{bw, &rep.TaggedBandwidth, pipe(bw, min(c.o.depth, benchBulkRecvs), benchBulkSize, false, tbulk)},
	}
}

// taggedPingPong sends pings (its name, for the target to answer) and
// waits for each pong, for at most dur and --count round trips.
func (c *benchClient) taggedPingPong(name string, dur time.Duration) (*phaseResult, error) {
	me := c.ep.GetName()
	pong := make([]byte, benchMsgSize)
	var samples []time.Duration
	start := time.Now()
	deadline := start.Add(dur)
	c.progress.begin(name, start)
	var stopErr error
	var ops uint64
	for ops < c.o.count {
		now := time.Now()
		if now.After(deadline) {
			break
		}
		select {
		case <-c.done:
			stopErr = errInterrupted
		default:
		}
		if stopErr != nil {
			break
		}
		if err := c.ep.TRecv(pong, mr.Desc{}, fi.AddrUnspec, benchTagPong, 0, c.ctxs[0]); err != nil {
			return nil, err
		}
		if err := c.ep.TInject(me, c.peer, benchTagPing); err != nil {
			return nil, err
		}
		_, failed, err := c.reap(c.comps[:1])
		if err != nil {
			return nil, err
		}
		if failed != nil {
			return nil, fmt.Errorf("tagged ping-pong: %w", failed.Err)
		}
		samples = append(samples, time.Since(now))
		ops++
		if ops%64 == 0 {
			c.progress.update(ops, time.Now())
		}
	}
	secs := time.Since(start).Seconds()
	return &phaseResult{Ops: ops, OpBytes: len(me), Depth: 1, Seconds: secs, OpsPerSec: float64(ops) / secs,
		BytesPerSec: float64(ops) * float64(len(me)) / secs, Latency: latencyOf(samples)}, stopErr
}

// taggedRows prints the tagged phases' rows.
func taggedRows(r *benchReport, row func(name string, p *phaseResult, unit, extra string), rtt func(*phaseResult) string) {
	row(fmt.Sprintf("tagged send %d B, %d in flight", benchMsgSize, r.Depth), r.TaggedSendRate, "msgs/s", "")
	row("tagged ping-pong, 1 in flight", r.TaggedPingPong, "ops/s", rtt(r.TaggedPingPong))
	bw := ""
	if p := r.TaggedBandwidth; p != nil {
		bw = fmt.Sprintf("%sB/s (%.2f Gbit/s)", si(p.BytesPerSec), p.BytesPerSec*8/1e9)
	}
	row(fmt.Sprintf("tagged send %d MiB, %d in flight", benchBulkSize>>20, benchBulkRecvs), r.TaggedBandwidth, "msgs/s", bw)
}

// taggedRatios prints the tagged figures against their references.
func taggedRatios(w io.Writer, r *benchReport) {
	if t, s := r.TaggedSendRate, r.SendRate; t != nil && s != nil && s.OpsPerSec > 0 {
		fmt.Fprintf(w, "  tagged send rate = %.2f× untagged send rate\n", t.OpsPerSec/s.OpsPerSec)
	}
	if t, u := r.TaggedPingPong, r.UDPPingPong; t != nil && u != nil && t.Latency != nil && u.Latency != nil {
		fmt.Fprintf(w, "  tagged ping-pong round trip p50 = %.2f× UDP ping-pong p50\n", t.Latency.P50/u.Latency.P50)
	}
}
