package veth

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// BenchmarkVeth measures the datapath between the namespaces, per
// transport case and progress mode (the endpoints' receive goroutines
// blocking in the kernel, or spinning with DomainAttr.BusyPoll):
//
//	FetchAddLatency  one uint64 fetch-add in flight: ns/op is the round
//	                 trip; p50-us and p99-us its percentiles
//	FetchAddRate     64 fetch-adds in flight: ops/s
//	Msg8B            8-byte sends, 64 in flight, receives reposted: msgs/s
//	Write4K          4 KiB RMA writes, 16 in flight: MB/s
//
// Run: go test -run '^$' -bench Veth -benchtime 3s ./tests/veth/
func BenchmarkVeth(b *testing.B) {
	testenv.RequirePriv(b)
	for _, tc := range transportCases {
		b.Run(tc.name, func(b *testing.B) {
			for _, busy := range []bool{false, true} {
				b.Run(map[bool]string{false: "blocking", true: "busypoll"}[busy], func(b *testing.B) {
					tn := newNet(b, tc, netOpts{domain: func(a *fabric.DomainAttr) { a.BusyPoll = busy }})
					bn := &benchNet{a: tn.nodes[sideA][0], b: tn.target()}
					b.Run("FetchAddLatency", bn.fetchAddLatency)
					b.Run("FetchAddRate", bn.fetchAddRate)
					b.Run("Msg8B", bn.msg8B)
					b.Run("Write4K", bn.write4K)
				})
			}
		})
	}
}

// benchNet is the initiator and target of one benchmark network.
type benchNet struct {
	a, b *node
	// rbufs are the target's receive buffers, posted once; every
	// completed receive is reposted, so all stay posted between runs.
	rbufs [][]byte
}

// readComps reads at least one completion from cq into comps, failing on
// an error completion or after compTimeout. It blocks in SRead in both
// progress modes: with DomainAttr.BusyPoll the endpoints' receive
// goroutines spin, and a third spinner would only compete with them for
// the cores.
func (bn *benchNet) readComps(b *testing.B, cq *fabric.CQ, comps []fabric.CQEntry) int {
	deadline := time.Now().Add(compTimeout)
	for {
		n, err := cq.SRead(comps, 100)
		switch {
		case err == nil:
			return n
		case err == fi.EAGAIN:
			// The CQ returns the bare errno; comparing it directly keeps
			// the loop free of errors.Is, whose fi.Errno.Is allocates.
		case errors.Is(err, fi.EAVAIL):
			e, _ := cq.ReadErr(0)
			b.Fatalf("error completion %v (ctx %v)", e.Err, e.Context)
		default:
			b.Fatal(err)
		}
		if time.Now().After(deadline) {
			b.Fatalf("no completion within %v", compTimeout)
		}
	}
}

func (bn *benchNet) fetchAddLatency(b *testing.B) {
	a := bn.a
	key := bn.b.region.Key()
	result := make([]byte, 8)
	comps := make([]fabric.CQEntry, 1)
	lat := make([]time.Duration, 0, min(b.N, 1<<20))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if err := a.ep.FetchAtomic(one, 1, mr.Desc{}, result, mr.Desc{}, a.peers[0], 0, key, fatomic.UINT64, fatomic.SUM, nil); err != nil {
			b.Fatal(err)
		}
		bn.readComps(b, a.txCQ, comps)
		if i < cap(lat) {
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-us")
}

// reportRetransmits returns a function reporting the initiator's
// retransmissions per operation since the call (on a lossless veth every
// one is spurious: a timeout shorter than the queueing delay) and its
// request packets per operation (below 1 when requests share packets).
func (bn *benchNet) reportRetransmits(b *testing.B) func() {
	before := bn.a.ep.Stats()
	return func() {
		b.StopTimer()
		after := bn.a.ep.Stats()
		b.ReportMetric(float64(after.Retransmits-before.Retransmits)/float64(b.N), "retx/op")
		b.ReportMetric(float64(after.TxRequests-before.TxRequests)/float64(b.N), "pkts/op")
	}
}

func (bn *benchNet) fetchAddRate(b *testing.B) {
	w := fetchAdds{n: bn.a, peer: bn.a.peers[0], key: bn.b.region.Key(), total: b.N, depth: 64, timeout: 5 * time.Minute}
	defer bn.reportRetransmits(b)()
	b.ResetTimer()
	if _, err := w.run(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// pipeline keeps depth operations posted by post(slot) in flight until n
// have completed on cq.
func (bn *benchNet) pipeline(b *testing.B, cq *fabric.CQ, n, depth int, post func(slot int) error) {
	posted := 0
	postSlot := func(slot int) {
		for {
			err := post(slot)
			if err == nil {
				posted++
				return
			}
			if !errors.Is(err, fi.EAGAIN) {
				b.Fatal(err)
			}
		}
	}
	for slot := 0; slot < depth && posted < n; slot++ {
		postSlot(slot)
	}
	comps := make([]fabric.CQEntry, depth)
	for done := 0; done < n; {
		k := bn.readComps(b, cq, comps)
		for _, c := range comps[:k] {
			done++
			if posted < n {
				postSlot(c.Context.(int))
			}
		}
	}
}

func (bn *benchNet) msg8B(b *testing.B) {
	const depth, posted = 64, 256
	a, t := bn.a, bn.b
	msg := []byte("8 bytes!")
	if bn.rbufs == nil {
		bn.rbufs = make([][]byte, posted)
		for i := range bn.rbufs {
			bn.rbufs[i] = make([]byte, 8)
			if err := t.ep.Recv(bn.rbufs[i], mr.Desc{}, fi.AddrUnspec, i); err != nil {
				b.Fatal(err)
			}
		}
	}
	rbufs := bn.rbufs
	recvd := make(chan error, 1)
	var got atomic.Int64 // messages received so far
	defer bn.reportRetransmits(b)()
	b.ResetTimer()
	go func() {
		// The target reposts each receive as it completes.
		comps := make([]fabric.CQEntry, posted)
		deadline := time.Now().Add(5 * time.Minute)
		for got.Load() < int64(b.N) {
			n, err := t.rxCQ.SRead(comps, 100)
			if err == fi.EAGAIN && time.Now().Before(deadline) {
				continue
			}
			if err != nil {
				recvd <- fmt.Errorf("receive %d of %d: %w", got.Load(), b.N, err)
				return
			}
			for _, c := range comps[:n] {
				if err := t.ep.Recv(rbufs[c.Context.(int)], mr.Desc{}, fi.AddrUnspec, c.Context); err != nil {
					recvd <- err
					return
				}
				got.Add(1)
			}
		}
		recvd <- nil
	}()
	// Flow control: a sender may not run more than the posted receives
	// ahead of the receiver, or its messages pile up as unexpected ones
	// and, past fabric.MaxUnexpectedMsgs, fail with FI_ENORX, as RDM
	// allows. (With busy polling the receiving goroutine is the slowest.)
	sent := 0
	bn.pipeline(b, a.txCQ, b.N, depth, func(slot int) error {
		for deadline := time.Now().Add(compTimeout); int64(sent)-got.Load() >= posted; {
			if time.Now().After(deadline) {
				return fmt.Errorf("receiver stuck at %d of %d sent: %w", got.Load(), sent, fi.ETIMEDOUT)
			}
			runtime.Gosched()
		}
		if err := a.ep.Send(msg, mr.Desc{}, a.peers[0], slot); err != nil {
			return err
		}
		sent++
		return nil
	})
	if err := <-recvd; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func (bn *benchNet) write4K(b *testing.B) {
	const size, depth = 4096, 16
	a := bn.a
	key := bn.b.region.Key()
	data := pattern(size, 1)
	b.SetBytes(size)
	defer bn.reportRetransmits(b)()
	b.ResetTimer()
	bn.pipeline(b, a.txCQ, b.N, depth, func(slot int) error {
		return a.ep.Write(data, mr.Desc{}, a.peers[0], uint64(slot*size), key, slot)
	})
}
