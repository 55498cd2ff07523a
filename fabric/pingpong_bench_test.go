package fabric_test

import (
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// pipeTransport hands what one endpoint sends straight to the other's
// Receive, as AF_XDP on veth does inside the sender's kick, without the
// kick: a benchmark over it measures the per-message work of both
// endpoints (fabric, engine) without the kernel's, which on this machine
// moves more between runs than that work weighs. Received packets point
// into the pipe's slots (zero-copy, valid until the next Receive, as the
// AF_XDP transport's point into the UMEM) and carry the metadata the XDP
// program gives (sender resolved in the AV). The UDP socket it wraps only
// gives the endpoint its address; nothing is sent on it.
type pipeTransport struct {
	datapath.Transport
	peer *pipeTransport
	meta datapath.Meta // what the peer's XDP program would say of our frames

	mu         sync.Mutex
	slots      [][]byte // a ring of received datagrams
	head, tail int      // tail-head of them queued
}

const pipeSlots = 64

func newPipePair(tb testing.TB) (*pipeTransport, *pipeTransport) {
	open := func() *pipeTransport {
		u, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
		require.NoError(tb, err)
		p := &pipeTransport{Transport: u, meta: datapath.NoMeta, slots: make([][]byte, pipeSlots)}
		for i := range p.slots {
			p.slots[i] = make([]byte, 0, 9000)
		}
		return p
	}
	a, b := open(), open()
	a.peer, b.peer = b, a
	return a, b
}

// Send queues pkts at the peer; a full ring drops, as a full AF_XDP RX
// ring would.
func (p *pipeTransport) Send(pkts []datapath.Packet) error {
	q := p.peer
	q.mu.Lock()
	for i := range pkts {
		if q.tail-q.head == len(q.slots) {
			break
		}
		s := &q.slots[q.tail%len(q.slots)]
		*s = append((*s)[:0], pkts[i].Buf...)
		q.tail++
	}
	q.mu.Unlock()
	return nil
}

func (p *pipeTransport) Receive(pkts []datapath.Packet, wait bool) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	from := p.peer.LocalAddr()
	n := 0
	for n < len(pkts) && p.head < p.tail {
		pkts[n] = datapath.Packet{Buf: p.slots[p.head%len(p.slots)], Addr: from, Meta: p.peer.meta}
		p.head++
		n++
	}
	return n, nil
}

func (p *pipeTransport) BatchSize() int { return 16 }

// BenchmarkTaggedPingPongPipe: the tagged ping-pong of `xdpfab bench`
// (a TRecv for the pong, a TInject of the ping, the target answering
// with a TInject to a receive it reposts), both endpoints in manual
// progress over a pipeTransport, one goroutine playing both. ns/msg is
// the user-space work per message, sender and receiver together: what a
// veth round trip spends beside its two kicks, halved. allocs/op must stay
// 0.
func BenchmarkTaggedPingPongPipe(b *testing.B) {
	ta, tb := newPipePair(b)
	manual := fabric.DomainAttr{Progress: fabric.ProgressManual}
	c, t := taggedPair(b, sideOpts{dom: manual, ep: fabric.EPAttr{Transport: ta}},
		sideOpts{dom: manual, ep: fabric.EPAttr{Transport: tb}})
	// The XDP program resolves the sender in the receiver's AV.
	ta.meta = datapath.Meta{FIAddr: t.peer, Verdict: datapath.VerdictAccepted}
	tb.meta = datapath.Meta{FIAddr: c.peer, Verdict: datapath.VerdictAccepted}
	const tagPing, tagPong = 1, 2
	ping, pong := make([]byte, 16), make([]byte, 8)
	rping, rpong := make([]byte, 64), make([]byte, 64)
	var comp [1]fabric.CQEntry
	read := func(cq *fabric.CQ) {
		for {
			n, err := cq.Read(comp[:])
			if n == 1 {
				return
			}
			if !errors.Is(err, fi.EAGAIN) {
				b.Fatalf("completion: %v", err)
			}
		}
	}
	require.NoError(b, t.ep.TRecv(rping, mr.Desc{}, fi.AddrUnspec, tagPing, 0, opCtx))
	round := func() {
		if err := c.ep.TRecv(rpong, mr.Desc{}, fi.AddrUnspec, tagPong, 0, opCtx); err != nil {
			b.Fatal(err)
		}
		if err := c.ep.TInject(ping, c.peer, tagPing); err != nil {
			b.Fatal(err)
		}
		read(t.rxCQ)
		if err := t.ep.TRecv(rping, mr.Desc{}, fi.AddrUnspec, tagPing, 0, opCtx); err != nil {
			b.Fatal(err)
		}
		if err := t.ep.TInject(pong, t.peer, tagPong); err != nil {
			b.Fatal(err)
		}
		read(c.rxCQ)
	}
	for range 1000 { // pools, timers, the peers' windows warm
		round()
	}
	// On a machine other work loads, the wall clock counts the time
	// this thread waits for a core; its own CPU time does not.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/msg")
	b.ReportMetric(float64(threadCPU(b)-cpu0)/float64(2*b.N), "cpu-ns/msg")
}

// threadCPU is the calling thread's CPU time, user and system, in ns.
func threadCPU(tb testing.TB) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
