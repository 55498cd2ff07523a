package udp

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/rxpoll"
	"github.com/xdpfab/xdpfab/fi"
)

func listenRing(t testing.TB) *Transport { return listenRingAt(t, "127.0.0.1:0") }

func listenRingAt(t testing.TB, addr string) *Transport {
	t.Helper()
	tr, err := Listen(netip.MustParseAddrPort(addr), Options{Batch: 16, SharedPoll: true, RingSend: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// checkRingClosed fails the test if the process's ring sender outlives
// the transports that used it (registered before them: runs after their
// Close).
func checkRingClosed(t *testing.T) {
	t.Cleanup(func() {
		ringMu.Lock()
		defer ringMu.Unlock()
		if ringShared != nil {
			t.Errorf("ring sender still open after its transports closed")
		}
		if len(leaked) > 0 {
			t.Errorf("a ring sender closed with slots in use")
		}
	})
}

func ringSubmits() uint64 {
	ringMu.Lock()
	s := ringShared
	ringMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.submits
}

// handlerFunc runs f on the shared poller when the registration is ready.
type handlerFunc func(events uint32)

func (f handlerFunc) Ready(events uint32) { f(events) }

// inRound runs f in a round of the shared poller's handlers: a trigger
// datagram makes a socket registered with the poller ready, and its
// handler drains it and calls f. It returns when f has returned (the
// round ends right after).
func inRound(t *testing.T, f func()) {
	t.Helper()
	trig := listen(t, "127.0.0.1:0")
	done := make(chan struct{})
	var once sync.Once
	fd, _ := trig.PollFD()
	rx := rxBufs(4, 64)
	reg, err := rxpoll.Register(fd, handlerFunc(func(uint32) {
		if n, _ := trig.Receive(rx, false); n > 0 {
			once.Do(func() { f(); close(done) })
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Remove()
	if err := trig.Send([]datapath.Packet{{Buf: []byte("go"), Addr: trig.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the poller never ran the handler")
	}
}

// TestRingSendHeldForRound: what two ring transports send in a round of
// the shared poller is held until the round ends (the destination has
// nothing while the handler runs), then arrives from each transport's own
// address, both in one io_uring submission; a datagram too large for a
// slot goes out at once.
func TestRingSendHeldForRound(t *testing.T) {
	checkRingClosed(t)
	a, b := listenRing(t), listenRing(t)
	c := listen(t, "127.0.0.1:0")
	big := bytes.Repeat([]byte{7}, ringSlotBytes+1)
	var during int
	var sendErr error
	var before uint64
	inRound(t, func() {
		before = ringSubmits()
		sendErr = errors.Join(a.Send([]datapath.Packet{{Buf: []byte("from a"), Addr: c.LocalAddr()}}),
			b.Send([]datapath.Packet{{Buf: []byte("from b"), Addr: c.LocalAddr()}, {Buf: big, Addr: c.LocalAddr()}}))
		rx := rxBufs(4, 4096)
		for { // the large one only
			n, err := c.Receive(rx, false)
			if err != nil || n == 0 {
				break
			}
			for _, p := range rx[:n] {
				if !bytes.Equal(p.Buf, big) {
					t.Errorf("received %q during the round", p.Buf)
				}
				during++
			}
		}
	})
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	if during != 1 {
		t.Fatalf("%d datagrams during the round, want the large one", during)
	}
	got := receiveAll(t, c, 2)
	from := map[string]netip.AddrPort{}
	for _, p := range got {
		from[string(p.Buf)] = p.Addr
	}
	if from["from a"] != a.LocalAddr() || from["from b"] != b.LocalAddr() {
		t.Fatalf("got %v, want from a %v and from b %v", from, a.LocalAddr(), b.LocalAddr())
	}
	if n := ringSubmits() - before; n != 1 {
		t.Fatalf("%d submissions for the round's datagrams, want 1", n)
	}
	if sa, sb := a.Stats(), b.Stats(); sa.TxRing != 1 || sb.TxRing != 1 || sb.TxPackets != 2 {
		t.Fatalf("stats a %+v b %+v", sa, sb)
	}
}

// TestRingSendOutsideRound: outside a round Send sends at once.
func TestRingSendOutsideRound(t *testing.T) {
	checkRingClosed(t)
	a := listenRing(t)
	c := listen(t, "127.0.0.1:0")
	if err := a.Send([]datapath.Packet{{Buf: []byte("now"), Addr: c.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if got := receiveAll(t, c, 1); string(got[0].Buf) != "now" || got[0].Addr != a.LocalAddr() {
		t.Fatalf("got %q from %v", got[0].Buf, got[0].Addr)
	}
	if s := a.Stats(); s.TxRing != 0 || s.TxPackets != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRingSendCloseSubmits: a transport closed in the round it sent in
// has its held datagram sent by Close (before its socket goes), and a
// Send after Close fails with ErrClosed; the last transport's Close
// closes the ring sender.
func TestRingSendCloseSubmits(t *testing.T) {
	checkRingClosed(t)
	a := listenRing(t)
	c := listen(t, "127.0.0.1:0")
	var sendErr, closedErr error
	inRound(t, func() {
		sendErr = a.Send([]datapath.Packet{{Buf: []byte("last"), Addr: c.LocalAddr()}})
		a.Close()
		closedErr = a.Send([]datapath.Packet{{Buf: []byte("late"), Addr: c.LocalAddr()}})
	})
	if sendErr != nil || !errors.Is(closedErr, datapath.ErrClosed) {
		t.Fatalf("send %v, after close %v", sendErr, closedErr)
	}
	if got := receiveAll(t, c, 1); string(got[0].Buf) != "last" {
		t.Fatalf("got %q", got[0].Buf)
	}
}

// TestRingSendNeedsSharedPoll: RingSend without SharedPoll is refused.
func TestRingSendNeedsSharedPoll(t *testing.T) {
	_, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{RingSend: true})
	if !errors.Is(err, fi.EINVAL) {
		t.Fatalf("%v, want FI_EINVAL", err)
	}
}

// TestRingSendZeroAllocs: once warm, a round of the ring sender (a
// datagram received through it, datagrams held and submitted) allocates
// nothing.
func TestRingSendZeroAllocs(t *testing.T) {
	checkRingClosed(t)
	a, b := listenRing(t), listenRing(t)
	c := listen(t, "127.0.0.1:0")
	tx := []datapath.Packet{{Buf: make([]byte, 64), Addr: c.LocalAddr()}, {Buf: make([]byte, 64), Addr: c.LocalAddr()}}
	rx := rxBufs(16, 2048)
	s := a.ring
	ready := []int{a.fd}
	in := []datapath.Packet{{Buf: make([]byte, 64), Addr: a.LocalAddr()}}
	arx := rxBufs(4, 2048)
	round := func() {
		if err := c.Send(in); err != nil { // on loopback, queued on a's socket by the time Send returns
			t.Fatal(err)
		}
		s.RoundStart(ready)
		if n, err := a.Receive(arx, false); n != 1 || err != nil {
			t.Fatalf("received %d: %v", n, err)
		}
		if err := errors.Join(a.Send(tx), b.Send(tx[:1])); err != nil {
			t.Fatal(err)
		}
		s.RoundEnd()
		for got := 0; got < 3; {
			n, err := c.Receive(rx, true)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	for range 100 {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%v allocations per round", n)
	}
	if s := a.Stats(); s.TxRing < 300 || s.RxRing < 300 {
		t.Fatalf("stats %+v: the ring did not send", s)
	}
}

// TestRingReceive: a ring transport's socket reported ready in a round has
// its datagram received by the ring at the round's start, and its
// handler's Receive hands it over (from the sender's address, counted in
// RxRing); a second datagram queued behind it comes too (in the next
// round, or with it through recvmmsg: TestRingReceiveLooksWhenAgain); one
// larger than the caller's buffer is dropped and counted.
func TestRingReceive(t *testing.T) {
	checkRingClosed(t)
	a := listenRing(t)
	c := listen(t, "127.0.0.1:0")
	fd, _ := a.PollFD()
	type got struct {
		n    int
		pkts []datapath.Packet
		err  error
	}
	results := make(chan got, 8)
	rx := rxBufs(4, 64)
	reg, err := rxpoll.Register(fd, handlerFunc(func(uint32) {
		n, err := a.Receive(rx, false)
		g := got{n: n, err: err}
		for _, p := range rx[:n] {
			g.pkts = append(g.pkts, datapath.Packet{Buf: append([]byte(nil), p.Buf...), Addr: p.Addr})
		}
		results <- g
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Remove()
	next := func() got {
		select {
		case g := <-results:
			return g
		case <-time.After(5 * time.Second):
			t.Fatal("the handler did not run")
			return got{}
		}
	}
	if err := c.Send([]datapath.Packet{{Buf: []byte("one"), Addr: a.LocalAddr()}, {Buf: []byte("two"), Addr: a.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	var all []datapath.Packet
	for len(all) < 2 {
		g := next()
		if g.err != nil {
			t.Fatal(g.err)
		}
		all = append(all, g.pkts...)
	}
	if len(all) != 2 || string(all[0].Buf) != "one" || string(all[1].Buf) != "two" || all[0].Addr != c.LocalAddr() {
		t.Fatalf("received %v", all)
	}
	if s := a.Stats(); s.RxRing == 0 || s.RxPackets != 2 {
		t.Fatalf("stats %+v", s)
	}
	if err := c.Send([]datapath.Packet{{Buf: bytes.Repeat([]byte{1}, 100), Addr: a.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats().RxTruncated == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a datagram larger than the buffer was not dropped: %+v", a.Stats())
		}
		select {
		case g := <-results:
			if g.n > 0 {
				t.Fatalf("received %v", g.pkts)
			}
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestRingReceiveLooksWhenAgain: after the ring's datagram Receive looks
// for more with recvmmsg only when the round before received from the
// socket too: a socket that was not in the last round hands over the
// ring's one datagram (the rest stays queued for the next round), one
// received from in consecutive rounds drains what is queued.
func TestRingReceiveLooksWhenAgain(t *testing.T) {
	checkRingClosed(t)
	a := listenRing(t)
	c := listen(t, "127.0.0.1:0")
	s := a.ring
	ready := []int{a.fd}
	rx := rxBufs(4, 64)
	send := func(k int) {
		t.Helper()
		for range k {
			if err := c.Send([]datapath.Packet{{Buf: []byte("x"), Addr: a.LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	round := func(want int) {
		t.Helper()
		s.RoundStart(ready)
		n, err := a.Receive(rx, false)
		s.RoundEnd()
		if n != want || err != nil {
			t.Fatalf("received %d (%v), want %d", n, err, want)
		}
	}
	without := func() { s.RoundStart(nil); s.RoundEnd() } // a round without a's socket
	send(3)
	without()
	round(1) // the ring's one: a was not in the round before
	round(2) // consecutive: the ring's one and the look's
	send(2)
	without()
	round(1)
	round(1)
	if st := a.Stats(); st.RxPackets != 5 || st.RxRing != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRingIPv6: over IPv6 the ring sends from the transport's address in
// a round and receives with the sender's address.
func TestRingIPv6(t *testing.T) {
	checkRingClosed(t)
	a := listenRingAt(t, "[::1]:0")
	c := listen(t, "[::1]:0")
	var sendErr error
	inRound(t, func() { sendErr = a.Send([]datapath.Packet{{Buf: []byte("v6"), Addr: c.LocalAddr()}}) })
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	got := receiveAll(t, c, 1)
	if string(got[0].Buf) != "v6" || got[0].Addr != a.LocalAddr() || a.Stats().TxRing != 1 {
		t.Fatalf("got %q from %v (a is %v), stats %+v", got[0].Buf, got[0].Addr, a.LocalAddr(), a.Stats())
	}
	if err := c.Send([]datapath.Packet{{Buf: []byte("back"), Addr: a.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	fd, _ := a.PollFD()
	back := make(chan datapath.Packet, 1)
	rx := rxBufs(4, 64)
	reg, err := rxpoll.Register(fd, handlerFunc(func(uint32) {
		if n, _ := a.Receive(rx, false); n > 0 {
			select {
			case back <- datapath.Packet{Buf: append([]byte(nil), rx[0].Buf...), Addr: rx[0].Addr}:
			default:
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Remove()
	select {
	case p := <-back:
		if string(p.Buf) != "back" || p.Addr != c.LocalAddr() || a.Stats().RxRing != 1 {
			t.Fatalf("got %q from %v, stats %+v", p.Buf, p.Addr, a.Stats())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing received")
	}
}
