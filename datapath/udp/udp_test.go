package udp

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/fi"
)

func listen(t testing.TB, addr string) *Transport {
	t.Helper()
	tr, err := Listen(netip.MustParseAddrPort(addr), Options{Batch: 16, SharedPoll: testSharedPoll})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func rxBufs(n, size int) []datapath.Packet {
	p := make([]datapath.Packet, n)
	for i := range p {
		p[i].Buf = make([]byte, size)
	}
	return p
}

func receiveAll(t *testing.T, tr *Transport, want int) []datapath.Packet {
	var got []datapath.Packet
	rx := rxBufs(16, 2048)
	for len(got) < want {
		n, err := tr.Receive(rx, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rx[:n] {
			got = append(got, datapath.Packet{Buf: append([]byte{}, p.Buf...), Addr: p.Addr, Meta: p.Meta})
		}
	}
	return got
}

func TestBatchRoundTrip(t *testing.T) {
	for _, fam := range []struct{ a, b string }{{"127.0.0.1:0", "127.0.0.1:0"}, {"[::1]:0", "[::1]:0"}} {
		a, b := listen(t, fam.a), listen(t, fam.b)
		tx := make([]datapath.Packet, 40) // more than one batch
		for i := range tx {
			tx[i] = datapath.Packet{Buf: bytes.Repeat([]byte{byte(i)}, i+1), Addr: b.LocalAddr()}
		}
		if err := a.Send(tx); err != nil {
			t.Fatal(err)
		}
		got := receiveAll(t, b, len(tx))
		for i, p := range got {
			if !bytes.Equal(p.Buf, tx[i].Buf) || p.Addr != a.LocalAddr() || p.Meta != datapath.NoMeta {
				t.Fatalf("%s packet %d: %v from %v meta %+v", fam.a, i, p.Buf, p.Addr, p.Meta)
			}
		}
		if s := b.Stats(); s.RxPackets != 40 {
			t.Fatalf("stats %+v", s)
		}
	}
}

func TestTruncatedDropped(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	if err := a.Send([]datapath.Packet{{Buf: make([]byte, 3000), Addr: b.LocalAddr()}, {Buf: []byte("ok"), Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	got := receiveAll(t, b, 1)
	if string(got[0].Buf) != "ok" || b.Stats().RxTruncated != 1 {
		t.Fatalf("got %q, stats %+v", got[0].Buf, b.Stats())
	}
}

func TestNonBlockingAndClose(t *testing.T) {
	b := listen(t, "127.0.0.1:0")
	rx := rxBufs(4, 100)
	if n, err := b.Receive(rx, false); n != 0 || err != nil {
		t.Fatalf("empty poll: %d %v", n, err)
	}
	done := make(chan error)
	go func() {
		_, err := b.Receive(rx, true)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, datapath.ErrClosed) || !errors.Is(err, fi.ESHUTDOWN) {
			t.Fatalf("receive after close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake Receive")
	}
	if err := b.Send([]datapath.Packet{{Buf: []byte("x"), Addr: b.LocalAddr()}}); !errors.Is(err, datapath.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

func TestBadArgs(t *testing.T) {
	if _, err := Listen(netip.AddrPort{}, Options{}); !errors.Is(err, fi.EINVAL) {
		t.Fatalf("invalid addr: %v", err)
	}
	if _, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{Batch: 5000}); !errors.Is(err, fi.EINVAL) {
		t.Fatalf("batch: %v", err)
	}
	a := listen(t, "127.0.0.1:0")
	// An IPv6 destination on an IPv4 socket is dropped, not an error.
	if err := a.Send([]datapath.Packet{{Buf: []byte("x"), Addr: netip.MustParseAddrPort("[2001:db8::1]:9")}}); err != nil || a.Stats().TxErrors != 1 {
		t.Fatalf("v6 dst on v4 socket: %v %+v", err, a.Stats())
	}
}

func TestZeroAllocs(t *testing.T) {
	a, b := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	tx := []datapath.Packet{{Buf: make([]byte, 64), Addr: b.LocalAddr()}}
	rx := rxBufs(16, 2048)
	n := testing.AllocsPerRun(200, func() {
		if err := a.Send(tx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Receive(rx, true); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("%v allocs per send+receive", n)
	}
}

// BenchmarkPingPong is the kernel-UDP round trip the engine is measured against.
func BenchmarkPingPong(b *testing.B) {
	x, y := listen(b, "127.0.0.1:0"), listen(b, "127.0.0.1:0")
	go func() {
		rx := rxBufs(16, 2048)
		for {
			n, err := y.Receive(rx, true)
			if err != nil {
				return
			}
			for i := 0; i < n; i++ {
				rx[i].Buf = rx[i].Buf[:len(rx[i].Buf)]
			}
			_ = y.Send(rx[:n])
			for i := range rx {
				rx[i].Buf = rx[i].Buf[:cap(rx[i].Buf)]
			}
		}
	}()
	tx := []datapath.Packet{{Buf: make([]byte, 64), Addr: y.LocalAddr()}}
	rx := rxBufs(16, 2048)
	b.ReportAllocs()
	for b.Loop() {
		_ = x.Send(tx)
		if _, err := x.Receive(rx, true); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPortUnreachable: a datagram to a closed port comes back from the
// error queue as a VerdictUnreachable packet (the sent bytes, the destination).
func TestPortUnreachable(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		a, gone := listen(t, addr), listen(t, addr)
		dst := gone.LocalAddr()
		gone.Close()
		if err := a.Send([]datapath.Packet{{Buf: []byte("to nobody"), Addr: dst}}); err != nil {
			t.Fatal(err)
		}
		rx := rxBufs(4, 2048)
		deadline := time.Now().Add(5 * time.Second)
		var got []datapath.Packet
		for len(got) == 0 && time.Now().Before(deadline) {
			n, err := a.Receive(rx, false)
			if err != nil {
				t.Fatal(err)
			}
			got = rx[:n]
			if n == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		if len(got) != 1 || got[0].Meta.Verdict != datapath.VerdictUnreachable || got[0].Addr != dst || string(got[0].Buf) != "to nobody" {
			t.Fatalf("%s: got %+v", addr, got)
		}
		if a.Stats().Unreachable != 1 {
			t.Fatalf("stats %+v", a.Stats())
		}
	}
}

// TestGSORuns: runs of equal-size datagrams (and a shorter tail) to one
// peer go out as GSO messages and arrive as the same datagrams.
func TestGSORuns(t *testing.T) {
	for _, disable := range []bool{false, true} {
		a, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{DisableGSO: disable})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, c := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
		var tx []datapath.Packet
		for i := 0; i < 30; i++ {
			size, dst := 1400, b.LocalAddr()
			switch {
			case i == 9 || i == 29:
				size = 700 // shorter tail of a run
			case i >= 15 && i < 18:
				dst = c.LocalAddr() // interleaved other peer
			}
			tx = append(tx, datapath.Packet{Buf: bytes.Repeat([]byte{byte(i)}, size), Addr: dst})
		}
		if err := a.Send(tx); err != nil {
			t.Fatal(err)
		}
		got := receiveAll(t, b, 27)
		gotC := receiveAll(t, c, 3)
		var want []datapath.Packet
		for _, p := range tx {
			if p.Addr == b.LocalAddr() {
				want = append(want, p)
			}
		}
		for i := range want {
			if !bytes.Equal(got[i].Buf, want[i].Buf) {
				t.Fatalf("gso=%v: datagram %d: %d bytes of %d", !disable, i, len(got[i].Buf), got[i].Buf[0])
			}
		}
		for i, p := range gotC {
			if p.Buf[0] != byte(15+i) || len(p.Buf) != 1400 {
				t.Fatalf("other peer datagram %d", i)
			}
		}
		if !disable && a.gsoOff.Load() {
			t.Fatal("the kernel refused UDP GSO on loopback")
		}
		if s := a.Stats(); s.TxPackets != 30 || s.TxErrors != 0 {
			t.Fatalf("gso=%v stats %+v", !disable, s)
		}
	}
}
