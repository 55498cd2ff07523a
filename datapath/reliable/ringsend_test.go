package reliable

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/lossy"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// ringChain is bench peers' load on initiators whose transports use the
// ring sender (udp.Options.RingSend): total fetch-adds, inflight at a
// time, operation j on initiator j mod n, each completion posting the
// next operation from the shared poller's goroutine, where the ring
// sender holds the sends of a round.
type ringChain struct {
	inis    []*Engine
	udps    []*udp.Transport
	peer    Peer
	total   int
	issued  atomic.Int64
	done    atomic.Int64
	values  []uint64 // fetched value + 1 by operation
	opOf    []int64  // by slot
	results [][]byte // by slot
	errOnce sync.Once
	err     error
	finish  chan struct{}
}

func (l *ringChain) submit(slot int) {
	j := l.issued.Add(1) - 1
	if j >= int64(l.total) {
		return
	}
	l.opOf[slot] = j
	r := Request{Peer: l.peer, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(1), Result: l.results[slot], Count: 1, Context: slot}
	if err := l.inis[int(j)%len(l.inis)].Submit(&r); err != nil {
		l.fail(err)
	}
}

func (l *ringChain) fail(err error) { l.errOnce.Do(func() { l.err = err; close(l.finish) }) }

func (l *ringChain) onComplete(c Completion) {
	slot := c.Context.(int)
	if c.Err != fi.SUCCESS {
		l.fail(fmt.Errorf("operation %d: %v", l.opOf[slot], c.Err))
		return
	}
	l.values[l.opOf[slot]] = binary.LittleEndian.Uint64(l.results[slot]) + 1
	if l.done.Add(1) == int64(l.total) {
		l.fail(nil)
		return
	}
	l.submit(slot)
}

// runRingChain runs the load with n initiators opened by open (their
// transports with RingSend) against a target on the shared poller, loss
// the share of datagrams lost, duplicated and reordered both ways, and
// checks every fetch-add executed exactly once and that the ring sender
// carried the initiators' requests.
func runRingChain(t *testing.T, open func(t testing.TB, target bool) *udp.Transport, loss float64, n, total, inflight int) {
	checkPollerStops(t)
	wrap := func(u *udp.Transport, seed uint64) datapath.Transport {
		if loss == 0 {
			return u
		}
		w, err := lossy.Wrap(u, lossy.Config{Seed: seed, Loss: loss, Duplicate: loss, Reorder: loss, MaxPacket: 9000})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	tgt := newTestTarget(8)
	cfg := Config{SharedPoll: true, RetryInitial: 5 * time.Millisecond}
	target := newEngine(t, wrap(open(t, true), 1), withEP(cfg, 100), tgt, nil)
	l := &ringChain{peer: Peer{target.LocalAddr(), 100}, total: total, values: make([]uint64, total),
		opOf: make([]int64, inflight), results: make([][]byte, inflight), finish: make(chan struct{})}
	for i := range l.results {
		l.results[i] = make([]byte, 8)
	}
	for i := range n {
		u := open(t, false)
		c := withEP(cfg, 1)
		c.MaxOps = inflight
		c.CoalesceAt = -1 // a packet per operation, as bench peers
		c.Handler, c.OnComplete = nil, l.onComplete
		e, err := New(wrap(u, uint64(i)+2), c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		l.inis, l.udps = append(l.inis, e), append(l.udps, u)
	}
	for s := range inflight {
		l.submit(s)
	}
	select {
	case <-l.finish:
	case <-time.After(2 * time.Minute):
		t.Fatalf("stuck: %d of %d completed", l.done.Load(), total)
	}
	if l.err != nil {
		t.Fatal(l.err)
	}
	seen := make([]bool, total)
	for j, v := range l.values {
		if v == 0 || v > uint64(total) || seen[v-1] {
			t.Fatalf("operation %d fetched %d: lost, out of range or duplicated", j, int64(v)-1)
		}
		seen[v-1] = true
	}
	tgt.mu.Lock()
	counter := tgt.counter
	tgt.mu.Unlock()
	if counter != uint64(total) {
		t.Fatalf("counter %d, want %d", counter, total)
	}
	var ring, sent, ringRx, rcvd uint64
	for _, u := range l.udps {
		s := u.Stats()
		ring, sent = ring+s.TxRing, sent+s.TxPackets
		ringRx, rcvd = ringRx+s.RxRing, rcvd+s.RxPackets
	}
	t.Logf("%d initiators, %d fetch-adds, loss %v: the ring sent %d of the initiators' %d datagrams and received %d of %d",
		n, total, loss, ring, sent, ringRx, rcvd)
	if ring < sent/2 || ringRx < rcvd/2 {
		t.Fatalf("the ring sender carried %d of %d datagrams sent, %d of %d received", ring, sent, ringRx, rcvd)
	}
}

// openRing opens an initiator's transport with the ring sender (the
// target's without: its sends are per batch already).
func openRing(t testing.TB, target bool) *udp.Transport {
	t.Helper()
	u, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{SharedPoll: true, RingSend: !target})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestRingSendExactlyOnce: 300 initiators whose completions post the next
// operation on another initiator's socket, their sends batched by the
// ring sender, complete every fetch-add exactly once, lossless and with
// 5 % loss, duplication and reordering both ways.
func TestRingSendExactlyOnce(t *testing.T) {
	for _, loss := range []float64{0, 0.05} {
		t.Run(fmt.Sprintf("loss%v", loss), func(t *testing.T) {
			runRingChain(t, openRing, loss, 300, 6000, 64)
		})
	}
}

// TestVethRingSendExactlyOnce: the same across a veth pair between two
// namespaces (initiators in one, the target in the other; one ring sender
// serves sockets of either), 1,000 initiators.
func TestVethRingSendExactlyOnce(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	testenv.NewVeth(t, a, b, testenv.VethOptions{})
	open := func(tb testing.TB, target bool) *udp.Transport {
		ns, addr := a, "10.200.0.1:0"
		if target {
			ns, addr = b, "10.200.0.2:0"
		}
		var u *udp.Transport
		if err := ns.Do(func() (err error) {
			u, err = udp.Listen(netip.MustParseAddrPort(addr), udp.Options{SharedPoll: true, RingSend: !target})
			return err
		}); err != nil {
			tb.Fatal(err)
		}
		return u
	}
	runRingChain(t, open, 0, 1000, 10000, 64)
}

// TestRingSendRefused: a peer whose port is closed fails pending requests
// with FI_ECONNREFUSED on an engine whose transport uses the ring sender:
// the ring's receive meets the socket's pending ICMP error and leaves the
// bounced datagram on the error queue for Receive.
func TestRingSendRefused(t *testing.T) {
	testRefusedOnSharedPoll(t, func(target bool) datapath.Transport { return openRing(t, target) })
}
