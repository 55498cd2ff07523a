package reliable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/rxpoll"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// openSharedPoll opens a UDP transport for the shared poller: its socket
// outside Go's netpoller (udp.Options.SharedPoll).
func openSharedPoll(t testing.TB, _ bool) *udp.Transport {
	t.Helper()
	u, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{SharedPoll: true})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// plain is the netOpts of a lossless transport for the shared poller.
var plain = netOpts{open: openSharedPoll}

// checkPollerStops fails the test if the shared poller outlives the
// test's engines (registered before them, so it runs after their Close).
func checkPollerStops(t *testing.T) {
	t.Cleanup(func() {
		if rxpoll.Running() {
			t.Errorf("shared poller still running after every engine closed")
		}
	})
}

// TestSharedPollExactlyOnce: engines on the shared poller (the target and
// 4 initiators in one process, all on one poller goroutine) complete every
// fetch-add exactly once, lossless and with 5 % loss, duplication and
// reordering; nothing outlives them.
func TestSharedPollExactlyOnce(t *testing.T) {
	for _, rate := range []float64{0, 0.05} {
		t.Run(fmt.Sprintf("loss%v", rate), func(t *testing.T) {
			checkGoroutines(t)
			checkPollerStops(t)
			o := netOpts{loss: rate, dup: rate, reorder: rate, seed: 17, cfg: Config{SharedPoll: true}, open: openSharedPoll}
			s := fetchAddRun(t, o, 4, 5000, 64)
			if !rxpoll.Running() {
				t.Fatal("engines with SharedPoll did not use the shared poller")
			}
			if rate > 0 && s.ReplayedFromCache+s.Drops[DropDuplicateHeld]+s.Drops[DropTooOld] == 0 {
				t.Fatal("impairment produced no duplicates at the target: test did not exercise replay")
			}
		})
	}
}

// TestSharedPollManyEngines: 200 initiators in one process on the shared
// poller start no goroutine each, and their fetch-adds, all in flight at
// once, complete exactly once.
func TestSharedPollManyEngines(t *testing.T) {
	checkGoroutines(t)
	checkPollerStops(t)
	const n, each = 200, 5
	tgt := newTestTarget(8)
	target := newEngine(t, listenTransport(t, plain, 0), Config{EndpointID: 2, SharedPoll: true}, tgt, nil)
	peer := Peer{target.LocalAddr(), 2}
	c := newCompletions()
	g0 := runtime.NumGoroutine()
	inis := make([]*Engine, n)
	for i := range inis {
		inis[i] = newEngine(t, listenTransport(t, plain, 0), Config{EndpointID: 1, SharedPoll: true, MaxOps: each}, nil, c)
	}
	if g := runtime.NumGoroutine() - g0; g >= n/2 {
		t.Fatalf("%d engines on the shared poller started %d goroutines", n, g)
	}
	results := make([][]byte, n*each)
	for i := range results {
		results[i] = make([]byte, 8)
		submitRetry(t, inis[i%n], &Request{Peer: peer, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(1),
			Result: results[i], Count: 1, Context: i})
	}
	seen := make([]bool, n*each)
	for range results {
		cp := c.wait(t, 10*time.Second)
		if cp.Err != 0 {
			t.Fatalf("completion %+v", cp)
		}
		v := binary.LittleEndian.Uint64(results[cp.Context.(int)])
		if v >= uint64(len(seen)) || seen[v] {
			t.Fatalf("fetched value %d duplicated or out of range", v)
		}
		seen[v] = true
	}
	tgt.mu.Lock()
	defer tgt.mu.Unlock()
	if tgt.counter != uint64(n*each) {
		t.Fatalf("counter %d, want %d", tgt.counter, n*each)
	}
}

// TestSharedPollRefused: a peer whose port is closed fails pending
// requests with FI_ECONNREFUSED on an engine served by the shared poller:
// the ICMP error reaches it as EPOLLERR (ErrorReady) and the error queue.
func TestSharedPollRefused(t *testing.T) {
	testRefusedOnSharedPoll(t, func(bool) datapath.Transport { return listenTransport(t, plain, 0) })
}

// testRefusedOnSharedPoll closes a target served by the shared poller and
// checks that the initiator's next request fails with FI_ECONNREFUSED;
// open makes each side's transport (target true for the target's).
func testRefusedOnSharedPoll(t *testing.T, open func(target bool) datapath.Transport) {
	checkGoroutines(t)
	checkPollerStops(t)
	cfg := Config{RetryInitial: time.Millisecond, RetryMax: 8 * time.Millisecond, MaxRetries: 6, SharedPoll: true}
	c := newCompletions()
	target := newEngine(t, open(true), withEP(cfg, 2), newTestTarget(1<<10), nil)
	ini := newEngine(t, open(false), withEP(cfg, 1), nil, c)
	peer := Peer{target.LocalAddr(), 2}
	exchangeLive(t, ini, c, peer, "hi")
	target.Close()
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(1), Result: make([]byte, 8)}); err != nil {
		t.Fatal(err)
	}
	if cp := c.wait(t, 5*time.Second); cp.Err != fi.ECONNREFUSED {
		t.Fatalf("completion %+v, want FI_ECONNREFUSED", cp)
	}
	if s := ini.Stats(); s.PeersRefused == 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestSharedPollConfig: SharedPoll with manual progress or busy polling
// is refused; an engine on the poller cannot be assisted.
func TestSharedPollConfig(t *testing.T) {
	for _, cfg := range []Config{{SharedPoll: true, ManualProgress: true}, {SharedPoll: true, BusyPoll: true}} {
		cfg.OnComplete = func(Completion) {}
		tr := listenTransport(t, plain, 0)
		if _, err := New(tr, cfg); err == nil || !errors.Is(err, fi.EINVAL) {
			t.Fatalf("%+v: %v, want FI_EINVAL", cfg, err)
		}
		tr.Close()
	}
	checkPollerStops(t)
	e := newEngine(t, listenTransport(t, plain, 0), Config{SharedPoll: true}, nil, nil)
	if e.BeginAssist() {
		t.Fatal("an engine on the shared poller accepted an assisting reader")
	}
}

// TestSharedPollSteadyStateAllocs: once warm, a round trip between two
// engines on the shared poller allocates nothing (as
// TestSteadyStateAllocs for engines with their own receive goroutine).
func TestSharedPollSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; make test runs the allocation guards without it")
	}
	checkPollerStops(t)
	c := newCompletions()
	target := newEngine(t, listenTransport(t, plain, 0), Config{EndpointID: 2, SharedPoll: true}, newTestTarget(4096), nil)
	ini := newEngine(t, listenTransport(t, plain, 0), Config{EndpointID: 1, SharedPoll: true}, nil, c)
	peer := Peer{target.LocalAddr(), 2}
	res := make([]byte, 8)
	reqs := []Request{
		{Peer: peer, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(1), Result: res, Count: 1},
		{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Payload: make([]byte, 3000)},
		{Peer: peer, Opcode: wire.OpRMARead, RKey: 1, Result: make([]byte, 3000)},
		{Peer: peer, Opcode: wire.OpMsg, Payload: make([]byte, 8), Flags: fi.INJECT},
	}
	run := func() {
		for i := range reqs {
			if err := ini.Submit(&reqs[i]); err != nil {
				t.Fatal(err)
			}
			if cp := <-c.ch; cp.Err != 0 {
				t.Fatal(cp.Err)
			}
		}
	}
	for i := 0; i < 300; i++ {
		run()
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for i := 0; i < 50; i++ {
		run()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 500; i++ {
		run()
	}
	runtime.ReadMemStats(&after)
	// The count is the whole process's: with other packages' tests on the
	// cores (make test's guard pass), the runtime's own allocations for
	// contended mutexes and sync.Pool refills after a goroutine moved
	// between Ps reach about one per twenty requests. One allocation per
	// request or per packet is 2000 or more.
	if n := after.Mallocs - before.Mallocs; n >= 200 {
		t.Fatalf("%d allocations in 2000 requests", n)
	}
}
