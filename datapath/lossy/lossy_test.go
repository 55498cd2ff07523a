package lossy

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/fi"
)

func pair(t *testing.T) (*udp.Transport, *udp.Transport) {
	a, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// send pushes n numbered packets through a wrapper with cfg and returns the
// sequence numbers received in arrival order.
func send(t *testing.T, cfg Config, n int) ([]uint32, Stats) {
	a, b := pair(t)
	w, err := Wrap(a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(buf, uint32(i))
		if err := w.Send([]datapath.Packet{{Buf: buf, Addr: b.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		if i%32 == 31 {
			time.Sleep(time.Millisecond) // stay well inside the socket buffer
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	rx := make([]datapath.Packet, 64)
	for i := range rx {
		rx[i].Buf = make([]byte, 64)
	}
	var got []uint32
	// Everything sent is already queued on b's socket (loopback delivers
	// during the send); read until it is empty and the reordered stragglers
	// have had 200 ms, however late this goroutine gets to run.
	deadline := time.Now().Add(200 * time.Millisecond)
	for {
		k, err := b.Receive(rx, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rx[:k] {
			{
				v := binary.LittleEndian.Uint32(p.Buf)
				got = append(got, v)
			}
		}
		if k == 0 {
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	return got, w.Stats()
}

func TestRates(t *testing.T) {
	const n = 4000
	got, st := send(t, Config{Seed: 1, Loss: 0.05, Duplicate: 0.05, Reorder: 0.05}, n)
	seen := map[uint32]int{}
	inversions := 0
	for i, v := range got {
		seen[v]++
		if i > 0 && v < got[i-1] {
			inversions++
		}
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	lost := n - len(seen)
	t.Logf("lost %d dup %d inversions %d stats %+v", lost, dups, inversions, st)
	if lost < n/50 || lost > n/10 || dups < n/50 || dups > n/10 || inversions < n/50 {
		t.Fatalf("rates off: lost %d dup %d inversions %d of %d", lost, dups, inversions, n)
	}
	if int(st.Dropped) != lost || int(st.Duplicated) != dups {
		t.Fatalf("stats %+v disagree with observed lost %d dup %d", st, lost, dups)
	}
}

func TestDeterministic(t *testing.T) {
	cfg := Config{Seed: 42, Loss: 0.2}
	a, _ := send(t, cfg, 500)
	b, _ := send(t, cfg, 500)
	if len(a) != len(b) {
		t.Fatalf("same seed, different outcome: %d vs %d packets", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, packet %d differs", i)
		}
	}
}

func TestBadRates(t *testing.T) {
	a, _ := pair(t)
	for _, c := range []Config{{Loss: -0.1}, {Duplicate: 1.5}} {
		if _, err := Wrap(a, c); !errors.Is(err, fi.EINVAL) {
			t.Fatalf("%+v: %v", c, err)
		}
	}
}

// TestFailSends: the next n Send calls fail with the given error and send
// nothing; the one after goes through.
func TestFailSends(t *testing.T) {
	a, b := pair(t)
	w, err := Wrap(a, Config{})
	if err != nil {
		t.Fatal(err)
	}
	pkt := []datapath.Packet{{Buf: []byte("x"), Addr: b.LocalAddr()}}
	w.FailSends(2, fi.ENOBUFS)
	for i := range 2 {
		if err := w.Send(pkt); !errors.Is(err, fi.ENOBUFS) {
			t.Fatalf("send %d: %v, want FI_ENOBUFS", i, err)
		}
	}
	if err := w.Send(pkt); err != nil {
		t.Fatal(err)
	}
	rx := []datapath.Packet{{Buf: make([]byte, 64)}}
	if n, err := b.Receive(rx, true); err != nil || n != 1 {
		t.Fatalf("receive: %d %v", n, err)
	}
	if n, _ := b.Receive(rx, false); n != 0 {
		t.Fatal("a failed send went out")
	}
	if st := w.Stats(); st.Failed != 2 || st.Dropped != 2 || st.Sent != 1 {
		t.Fatalf("stats %+v", st)
	}
}
