package veth

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// BenchmarkVethTagged measures tagged messages between the namespaces,
// per transport case, next to their untagged and kernel UDP references
// in the same run:
//
//	Msg8B         8-byte untagged sends, 64 in flight: msgs/s
//	TMsg8B        8-byte tagged sends, 64 in flight, wildcard receives: msgs/s
//	UDPPingPong   8 bytes over two kernel UDP sockets, one in flight: ns/op
//	              is half a round trip
//	TPingPong     8-byte tagged ping-pong: ns/op is half a round trip
//	T1MiB         1 MiB tagged sends (rendezvous), 8 in flight: MB/s
//
// Run: go test -run '^$' -bench VethTagged -benchtime 3s ./tests/veth/
func BenchmarkVethTagged(b *testing.B) {
	testenv.RequirePriv(b)
	for _, tc := range transportCases {
		b.Run(tc.name, func(b *testing.B) {
			tn := newNet(b, tc, netOpts{})
			a, t := tn.nodes[sideA][0], tn.target()
			b.Run("Msg8B", func(b *testing.B) { msgRate(b, a, t, false) })
			b.Run("TMsg8B", func(b *testing.B) { msgRate(b, a, t, true) })
			b.Run("UDPPingPong", func(b *testing.B) { udpPingPong(b, tn) })
			b.Run("TPingPong", func(b *testing.B) { taggedPingPong(b, a, t) })
			b.Run("T1MiB", func(b *testing.B) { taggedBandwidth(b, a, t) })
		})
	}
}

// msgRate sends b.N 8-byte messages from a to t, 64 in flight, t keeping
// 256 receives posted and reposting each as it completes; a sender stays
// within the posted receives of the receiver (flow control: the rest
// would pile up as unexpected messages).
func msgRate(b *testing.B, a, t *node, tagged bool) {
	const depth, posted = 64, 256
	rbufs := make([][]byte, posted)
	ctxs := make([]any, posted)
	post := func(i int) error {
		if tagged {
			return t.ep.TRecv(rbufs[i], mr.Desc{}, fi.AddrUnspec, 0, ^uint64(0), ctxs[i])
		}
		return t.ep.Recv(rbufs[i], mr.Desc{}, fi.AddrUnspec, ctxs[i])
	}
	for i := range rbufs {
		rbufs[i], ctxs[i] = make([]byte, 8), i
		if err := post(i); err != nil {
			b.Fatal(err)
		}
	}
	msg := []byte("8 bytes!")
	sctx := make([]any, depth)
	for i := range sctx {
		sctx[i] = i
	}
	var got atomic.Int64
	recvd := make(chan error, 1)
	b.ResetTimer()
	go func() {
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
				if err := post(c.Context.(int)); err != nil {
					recvd <- err
					return
				}
				got.Add(1)
			}
		}
		recvd <- nil
	}()
	sent := 0
	send := func(slot int) error {
		for deadline := time.Now().Add(compTimeout); int64(sent)-got.Load() >= posted; {
			if time.Now().After(deadline) {
				return fmt.Errorf("receiver stuck at %d of %d sent: %w", got.Load(), sent, fi.ETIMEDOUT)
			}
			runtime.Gosched()
		}
		var err error
		if tagged {
			err = a.ep.TSend(msg, mr.Desc{}, a.peers[0], uint64(slot), sctx[slot])
		} else {
			err = a.ep.Send(msg, mr.Desc{}, a.peers[0], sctx[slot])
		}
		if err == nil {
			sent++
		}
		return err
	}
	bn := &benchNet{a: a, b: t}
	bn.pipeline(b, a.txCQ, b.N, depth, send)
	if err := <-recvd; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	for i := range rbufs { // leave nothing posted for the next phase
		if err := t.ep.Cancel(ctxs[i]); err != nil {
			b.Fatal(err)
		}
	}
	drain(b, t.rxCQ, posted)
}

// drain reads n entries, successes or errors, from cq.
func drain(b *testing.B, cq *fabric.CQ, n int) {
	comps := make([]fabric.CQEntry, 64)
	deadline := time.Now().Add(compTimeout)
	for n > 0 {
		k, err := cq.SRead(comps, 100)
		if errors.Is(err, fi.EAVAIL) {
			if _, err := cq.ReadErr(0); err == nil {
				n--
			}
			continue
		}
		n -= k
		if time.Now().After(deadline) {
			b.Fatalf("%d entries not drained", n)
		}
	}
}

// taggedPingPong: a sends 8 bytes tagged 1, t answers tagged 2; ns/op is
// half the round trip.
func taggedPingPong(b *testing.B, a, t *node) {
	ping, pong := make([]byte, 8), make([]byte, 8)
	comps := make([]fabric.CQEntry, 2)
	bn := &benchNet{a: a, b: t}
	done := make(chan error, 1)
	b.ResetTimer()
	go func() {
		for range b.N {
			if err := t.ep.TRecv(ping, mr.Desc{}, fi.AddrUnspec, 1, 0, nil); err != nil {
				done <- err
				return
			}
			bn.readComps(b, t.rxCQ, comps[:1])
			if err := t.ep.TInject(ping, t.peers[0], 2); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range b.N {
		if err := a.ep.TRecv(pong, mr.Desc{}, fi.AddrUnspec, 2, 0, nil); err != nil {
			b.Fatal(err)
		}
		if err := a.ep.TInject(pong, a.peers[0], 1); err != nil {
			b.Fatal(err)
		}
		bn.readComps(b, a.rxCQ, comps[:1])
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/half-rtt")
}

// udpPingPong is the kernel's reference: two UDP sockets between the
// namespaces bouncing 8 bytes, with blocking reads.
func udpPingPong(b *testing.B, tn *testNet) {
	var ca, cb *net.UDPConn
	open := func(s side) *net.UDPConn {
		var c *net.UDPConn
		do(b, tn.ns[s], func() error {
			var err error
			c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(tn.addr(s), 0)))
			return err
		})
		b.Cleanup(func() { c.Close() })
		return c
	}
	ca, cb = open(sideA), open(sideB)
	toB := cb.LocalAddr().(*net.UDPAddr).AddrPort()
	done := make(chan error, 1)
	b.ResetTimer()
	go func() {
		buf := make([]byte, 64)
		for range b.N {
			_ = cb.SetReadDeadline(time.Now().Add(compTimeout))
			n, from, err := cb.ReadFromUDPAddrPort(buf)
			if err != nil {
				done <- err
				return
			}
			if _, err := cb.WriteToUDPAddrPort(buf[:n], from); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	msg, buf := []byte("8 bytes!"), make([]byte, 64)
	for range b.N {
		if _, err := ca.WriteToUDPAddrPort(msg, toB); err != nil {
			b.Fatal(err)
		}
		_ = ca.SetReadDeadline(time.Now().Add(compTimeout))
		if _, _, err := ca.ReadFromUDPAddrPort(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/half-rtt")
}

// taggedBandwidth sends b.N 1 MiB tagged messages, 8 in flight, each to a
// receive t reposts.
func taggedBandwidth(b *testing.B, a, t *node) {
	const size, depth = 1 << 20, 8
	rbufs := make([][]byte, depth)
	ctxs := make([]any, depth)
	for i := range rbufs {
		rbufs[i], ctxs[i] = make([]byte, size), i
		if err := t.ep.TRecv(rbufs[i], mr.Desc{}, fi.AddrUnspec, 0, ^uint64(0), ctxs[i]); err != nil {
			b.Fatal(err)
		}
	}
	msg := pattern(size, 1)
	b.SetBytes(size)
	recvd := make(chan error, 1)
	b.ResetTimer()
	go func() {
		comps := make([]fabric.CQEntry, depth)
		bn := &benchNet{a: a, b: t}
		for got := 0; got < b.N; {
			n := bn.readComps(b, t.rxCQ, comps)
			for _, c := range comps[:n] {
				got++
				if err := t.ep.TRecv(rbufs[c.Context.(int)], mr.Desc{}, fi.AddrUnspec, 0, ^uint64(0), c.Context); err != nil {
					recvd <- err
					return
				}
			}
		}
		recvd <- nil
	}()
	sctx := make([]any, depth)
	for i := range sctx {
		sctx[i] = i
	}
	bn := &benchNet{a: a, b: t}
	bn.pipeline(b, a.txCQ, b.N, depth, func(slot int) error {
		return a.ep.TSend(msg, mr.Desc{}, a.peers[0], 5, sctx[slot])
	})
	if err := <-recvd; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	for i := range ctxs {
		if err := t.ep.Cancel(ctxs[i]); err != nil {
			b.Fatal(err)
		}
	}
	drain(b, t.rxCQ, depth)
}
