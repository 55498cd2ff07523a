package reliable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// pair starts a target engine with tgt as handler and an initiator engine.
func pair(t *testing.T, o netOpts, tgt Handler) (ini *Engine, c *completions, target *Engine) {
	t.Helper()
	c = newCompletions()
	target = newEngine(t, listenSide(t, o, o.seed+1, true), withEP(o.cfg, 2), tgt, nil)
	ini = newEngine(t, listenTransport(t, o, o.seed+2), withEP(o.cfg, 1), nil, c)
	return ini, c, target
}

func withEP(c Config, ep uint32) Config { c.EndpointID = ep; return c }

func TestEveryOpcode(t *testing.T) {
	checkGoroutines(t)
	tgt := newTestTarget(4096)
	ini, c, target := pair(t, netOpts{}, tgt)
	peer := Peer{target.LocalAddr(), 2}
	res := make([]byte, 12)
	old := make([]byte, 8)
	steps := []struct {
		r       Request
		wantLen int
		check   func() error
	}{
		{Request{Opcode: wire.OpRMAWrite, RKey: 1, Addr: 10, Payload: []byte("hello")}, 5, func() error {
			if string(tgt.mem[10:15]) != "hello" {
				return fmt.Errorf("mem %q", tgt.mem[10:15])
			}
			return nil
		}},
		{Request{Opcode: wire.OpRMARead, RKey: 1, Addr: 100, Result: res}, 12, func() error {
			if string(res) != "remote bytes" {
				return fmt.Errorf("read %q", res)
			}
			return nil
		}},
		{Request{Opcode: wire.OpAtomic, RKey: 1, Payload: le64(5), Count: 1}, 8, nil},
		{Request{Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(3), Result: old, Count: 1}, 8, func() error {
			if v := binary.LittleEndian.Uint64(old); v != 5 {
				return fmt.Errorf("fetched %d", v)
			}
			return nil
		}},
		{Request{Opcode: wire.OpCompareAtomic, RKey: 1, Payload: le64(100), Compare: le64(8), Result: old, Count: 1}, 8, func() error {
			if v := binary.LittleEndian.Uint64(old); v != 8 || tgt.counter != 100 {
				return fmt.Errorf("compare fetched %d, counter %d", v, tgt.counter)
			}
			return nil
		}},
		{Request{Opcode: wire.OpMsg, Payload: []byte("a message")}, 9, nil},
	}
	tgt.mu.Lock()
	copy(tgt.mem[100:], "remote bytes")
	tgt.mu.Unlock()
	for i, s := range steps {
		s.r.Peer, s.r.Context = peer, i
		if err := ini.Submit(&s.r); err != nil {
			t.Fatalf("%v: %v", s.r.Opcode, err)
		}
		cp := c.wait(t, 5*time.Second)
		if cp.Err != 0 || cp.Context != i || cp.Len != s.wantLen || cp.Opcode != s.r.Opcode || cp.Peer != peer {
			t.Fatalf("%v: completion %+v", s.r.Opcode, cp)
		}
		if s.check != nil {
			tgt.mu.Lock()
			err := s.check()
			tgt.mu.Unlock()
			if err != nil {
				t.Fatalf("%v: %v", s.r.Opcode, err)
			}
		}
	}
	if m := <-tgt.done; string(m) != "a message" {
		t.Fatalf("msg %q", m)
	}
}

// TestNAK: an errno returned by the handler completes the op with it.
func TestNAK(t *testing.T) {
	tgt := newTestTarget(64)
	ini, c, target := pair(t, netOpts{}, tgt)
	peer := Peer{target.LocalAddr(), 2}
	for _, r := range []Request{
		{Peer: peer, Opcode: wire.OpRMAWrite, RKey: badKey, Payload: []byte("x")},
		{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Addr: 60, Payload: []byte("too long")},
		{Peer: peer, Opcode: wire.OpRMARead, RKey: 1, Addr: 1 << 40, Result: make([]byte, 1)},
	} {
		if err := ini.Submit(&r); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []fi.Errno{fi.EACCES, fi.EINVAL, fi.EINVAL} {
		if cp := c.wait(t, 5*time.Second); cp.Err != want {
			t.Fatalf("completion %+v, want %v", cp, want)
		}
	}
	// No handler at all: FI_EOPNOTSUPP.
	c2 := newCompletions()
	bare := newEngine(t, listenTransport(t, netOpts{}, 0), Config{EndpointID: 3}, nil, nil)
	e := newEngine(t, listenTransport(t, netOpts{}, 0), Config{EndpointID: 4}, nil, c2)
	if err := e.Submit(&Request{Peer: Peer{bare.LocalAddr(), 3}, Opcode: wire.OpMsg}); err != nil {
		t.Fatal(err)
	}
	if cp := c2.wait(t, 5*time.Second); cp.Err != fi.EOPNOTSUPP {
		t.Fatalf("no handler: %+v", cp)
	}
}

func TestSubmitErrors(t *testing.T) {
	ini, _, target := pair(t, netOpts{cfg: Config{MaxOps: 2}}, newTestTarget(64))
	peer := Peer{target.LocalAddr(), 2}
	cases := []struct {
		r    *Request
		want error
	}{
		{nil, fi.EINVAL},
		{&Request{Opcode: wire.OpMsg}, fi.EINVAL},
		{&Request{Peer: peer, Opcode: 99}, fi.EINVAL},
		{&Request{Peer: peer, Opcode: wire.OpAtomic, Result: make([]byte, 8)}, fi.EINVAL},
		{&Request{Peer: peer, Opcode: wire.OpFetchAtomic, Compare: make([]byte, 8)}, fi.EINVAL},
		{&Request{Peer: peer, Opcode: wire.OpAtomic, Payload: make([]byte, 2000)}, fi.EMSGSIZE},
		{&Request{Peer: peer, Opcode: wire.OpMsg, Flags: fi.INJECT, Payload: make([]byte, 257)}, fi.EMSGSIZE},
	}
	for i, c := range cases {
		if err := ini.Submit(c.r); !errors.Is(err, c.want) {
			t.Errorf("case %d: %v, want %v", i, err, c.want)
		}
	}
	if _, err := New(nil, Config{}); !errors.Is(err, fi.EINVAL) {
		t.Errorf("nil transport: %v", err)
	}
	tr := listenTransport(t, netOpts{}, 0)
	defer tr.Close()
	for _, cfg := range []Config{{}, {OnComplete: func(Completion) {}, Window: 100}, {OnComplete: func(Completion) {}, MaxPacket: 100}} {
		if _, err := New(tr, cfg); !errors.Is(err, fi.EINVAL) {
			t.Errorf("config %+v: %v", cfg, err)
		}
	}
}

// TestInjectWithResult: FI_INJECT copies Payload and Compare at Submit and
// leaves Result, an output buffer, to the caller: fetch and compare atomics
// take it, and their old values land in the caller's Result.
func TestInjectWithResult(t *testing.T) {
	checkGoroutines(t)
	tgt := newTestTarget(64)
	ini, c, target := pair(t, netOpts{}, tgt)
	peer := Peer{target.LocalAddr(), 2}
	tgt.mu.Lock()
	tgt.counter = 5
	tgt.mu.Unlock()

	operand, old := le64(3), make([]byte, 8)
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpFetchAtomic, Flags: fi.INJECT, RKey: 1,
		Payload: operand, Result: old, Count: 1, Context: "fetch"}); err != nil {
		t.Fatalf("fetch with FI_INJECT: %v", err)
	}
	binary.LittleEndian.PutUint64(operand, 1000) // copied at Submit
	if cp := c.wait(t, 5*time.Second); cp.Err != 0 || cp.Context != "fetch" || cp.Len != 8 {
		t.Fatalf("fetch: completion %+v", cp)
	}
	if v := binary.LittleEndian.Uint64(old); v != 5 {
		t.Fatalf("fetched %d, want 5", v)
	}

	swap, cmp := le64(100), le64(8)
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpCompareAtomic, Flags: fi.INJECT, RKey: 1,
		Payload: swap, Compare: cmp, Result: old, Count: 1, Context: "cswap"}); err != nil {
		t.Fatalf("compare with FI_INJECT: %v", err)
	}
	binary.LittleEndian.PutUint64(swap, 1)
	binary.LittleEndian.PutUint64(cmp, 1)
	if cp := c.wait(t, 5*time.Second); cp.Err != 0 || cp.Context != "cswap" || cp.Len != 8 {
		t.Fatalf("compare: completion %+v", cp)
	}
	if v := binary.LittleEndian.Uint64(old); v != 8 {
		t.Fatalf("compare fetched %d, want 8", v)
	}
	tgt.mu.Lock()
	counter := tgt.counter
	tgt.mu.Unlock()
	if counter != 100 {
		t.Fatalf("counter %d, want 100 (operand 3 then swap 100, not the values written after Submit)", counter)
	}

	// The copied bytes still have to fit InjectSize.
	err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpCompareAtomic, Flags: fi.INJECT, RKey: 1,
		Payload: make([]byte, 200), Compare: make([]byte, 200), Result: make([]byte, 200), Count: 25})
	if !errors.Is(err, fi.EMSGSIZE) {
		t.Fatalf("inject of 400 operand bytes: %v, want FI_EMSGSIZE", err)
	}
}

// TestEAGAIN: with MaxOps outstanding to a silent peer, Submit refuses
// with FI_EAGAIN instead of queueing.
func TestEAGAIN(t *testing.T) {
	silent := listenTransport(t, netOpts{}, 0) // nobody answers
	defer silent.Close()
	c := newCompletions()
	e := newEngine(t, listenTransport(t, netOpts{}, 0), Config{MaxOps: 4}, nil, c)
	r := Request{Peer: Peer{silent.LocalAddr(), 0}, Opcode: wire.OpMsg, Payload: []byte("x")}
	for i := 0; i < 4; i++ {
		if err := e.Submit(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Submit(&r); !errors.Is(err, fi.EAGAIN) {
		t.Fatalf("5th submit: %v", err)
	}
	if e.Stats().EAgain != 1 {
		t.Fatalf("stats %+v", e.Stats())
	}
}

// TestSegmented moves 1 B .. 1 MiB by RMA write, read back and message,
// byte-exact, optionally under loss.
func TestSegmented(t *testing.T) {
	for _, o := range []netOpts{{}, {loss: 0.01, dup: 0.01, reorder: 0.01, seed: 5},
		{loss: 0.05, dup: 0.05, reorder: 0.05, seed: 7}, {loss: 0.20, dup: 0.20, reorder: 0.20, seed: 9}} {
		t.Run(fmt.Sprintf("loss%v", o.loss), func(t *testing.T) { testSegmented(t, o) })
	}
}

func testSegmented(t *testing.T, o netOpts) {
	checkGoroutines(t)
	tgt := newTestTarget(1 << 20)
	ini, c, target := pair(t, o, tgt)
	peer := Peer{target.LocalAddr(), 2}
	rng := rand.New(rand.NewPCG(1, 2))
	seg := ini.MaxSegment()
	defer func() {
		if t.Failed() {
			t.Logf("initiator stats: %+v", ini.Stats())
			t.Logf("target stats: %+v", target.Stats())
		}
	}()
	for _, size := range []int{1, 100, seg - 1, seg, seg + 1, 4096, 65536, 1 << 20} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		tgt.mu.Lock()
		clear(tgt.mem)
		tgt.mu.Unlock()
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Payload: data}); err != nil {
			t.Fatal(err)
		}
		if cp := c.wait(t, 20*time.Second); cp.Err != 0 || cp.Len != size {
			t.Fatalf("write %d: %+v", size, cp)
		}
		tgt.mu.Lock()
		ok := bytes.Equal(tgt.mem[:size], data)
		tgt.mu.Unlock()
		if !ok {
			t.Fatalf("write %d: target memory differs", size)
		}
		back := make([]byte, size)
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMARead, RKey: 1, Result: back}); err != nil {
			t.Fatal(err)
		}
		if cp := c.wait(t, 20*time.Second); cp.Err != 0 || cp.Len != size || !bytes.Equal(back, data) {
			t.Fatalf("read %d: %+v equal=%v", size, cp, bytes.Equal(back, data))
		}
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpMsg, Payload: data}); err != nil {
			t.Fatal(err)
		}
		if cp := c.wait(t, 20*time.Second); cp.Err != 0 || cp.Len != size {
			t.Fatalf("msg %d: %+v", size, cp)
		}
		if m := <-tgt.done; !bytes.Equal(m, data) {
			t.Fatalf("msg %d: received message differs", size)
		}
	}
}

// fetchAddRun runs initiators x n fetch-add(1) on one counter, each
// initiator keeping up to depth requests in flight, and checks exactly-once:
// final value exact, every fetched value distinct.
func fetchAddRun(t *testing.T, o netOpts, initiators, n, depth int) (targetStats Stats) {
	tgt := newTestTarget(8)
	target := newEngine(t, listenSide(t, o, o.seed, true), withEP(o.cfg, 100), tgt, nil)
	peer := Peer{target.LocalAddr(), 100}
	if o.during != nil {
		stop := make(chan struct{})
		var dwg sync.WaitGroup
		dwg.Add(1)
		go func() { defer dwg.Done(); o.during(target.LocalAddr(), stop) }()
		defer dwg.Wait()
		defer close(stop)
	}
	results := make([][]uint64, initiators)
	var wg sync.WaitGroup
	errs := make(chan error, initiators)
	var inis []*Engine
	for w := 0; w < initiators; w++ {
		c := newCompletions()
		e := newEngine(t, listenTransport(t, o, o.seed+uint64(w)+1), withEP(o.cfg, uint32(w+1)), nil, c)
		inis = append(inis, e)
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs := make([][]byte, n)
			one := le64(1)
			got := 0
			sent := 0
			for got < n {
				for sent < n && sent-got < depth {
					bufs[sent] = make([]byte, 8)
					r := Request{Peer: peer, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: one, Result: bufs[sent], Count: 1, Context: sent}
					if err := e.Submit(&r); err != nil {
						if errors.Is(err, fi.EAGAIN) {
							break
						}
						errs <- err
						return
					}
					sent++
				}
				select {
				case cp := <-c.ch:
					if cp.Err != 0 {
						errs <- fmt.Errorf("initiator %d op %v: %v", w, cp.Context, cp.Err)
						return
					}
					results[w] = append(results[w], binary.LittleEndian.Uint64(bufs[cp.Context.(int)]))
					got++
				case <-time.After(30 * time.Second):
					errs <- fmt.Errorf("initiator %d stuck at %d/%d", w, got, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, e := range inis {
		s := e.Stats()
		e.mu.Lock()
		var srtt, rto int64
		for _, p := range e.peers {
			srtt, rto = p.est.srtt, int64(p.rto)
		}
		e.mu.Unlock()
		t.Logf("initiator: tx %d retx %d fast %d srtt %v rto %v", s.TxRequests, s.Retransmits, s.FastRetransmits, time.Duration(srtt), time.Duration(rto))
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := initiators * n
	tgt.mu.Lock()
	final := tgt.counter
	tgt.mu.Unlock()
	if final != uint64(total) {
		t.Fatalf("counter %d, want %d", final, total)
	}
	seen := make([]bool, total)
	for _, rs := range results {
		for _, v := range rs {
			if v >= uint64(total) || seen[v] {
				t.Fatalf("fetched value %d duplicated or out of range", v)
			}
			seen[v] = true
		}
	}
	return target.Stats()
}

func TestFetchAddExactlyOnce(t *testing.T) {
	for _, c := range []struct {
		rate float64
		n    int
	}{{0, 10000}, {0.01, 10000}, {0.05, 10000}, {0.20, 2500}} {
		t.Run(fmt.Sprintf("loss%v", c.rate), func(t *testing.T) {
			checkGoroutines(t)
			o := netOpts{loss: c.rate, dup: c.rate, reorder: c.rate, seed: uint64(c.rate*1000) + 3}
			start := time.Now()
			s := fetchAddRun(t, o, 4, c.n, 64)
			t.Logf("4x%d fetch-add at %v%% loss/dup/reorder in %v; target: delivered %d, replayed %d, held %d, drops %v",
				c.n, c.rate*100, time.Since(start), s.Delivered, s.ReplayedFromCache, s.Held, s.Drops)
			if c.rate > 0 && s.ReplayedFromCache+s.Drops[DropDuplicateHeld]+s.Drops[DropTooOld] == 0 {
				t.Fatalf("impairment produced no duplicates at the target: test did not exercise replay")
			}
		})
	}
}

// TestPeerDisappears: a target that goes away makes every pending request
// fail within the retry budget; nothing hangs or leaks. "closed": its port
// is closed, the ICMP port unreachable fails them with FI_ECONNREFUSED at
// once; "silent": the port is still bound but nobody answers (a hung or
// unplugged peer): FI_ETIMEDOUT after the retries.
func TestPeerDisappears(t *testing.T) {
	for _, silent := range []bool{false, true} {
		name, want := "closed", fi.ECONNREFUSED
		if silent {
			name, want = "silent", fi.ETIMEDOUT
		}
		t.Run(name, func(t *testing.T) { testPeerDisappears(t, silent, want) })
	}
}

func testPeerDisappears(t *testing.T, silent bool, want fi.Errno) {
	checkGoroutines(t)
	tgt := newTestTarget(1 << 20)
	cfg := Config{RetryInitial: time.Millisecond, RetryMax: 8 * time.Millisecond, MaxRetries: 6}
	c := newCompletions()
	target := newEngine(t, listenTransport(t, netOpts{}, 0), withEP(cfg, 2), tgt, nil)
	ini := newEngine(t, listenTransport(t, netOpts{}, 0), withEP(cfg, 1), nil, c)
	peer := Peer{target.LocalAddr(), 2}
	exchangeLive(t, ini, c, peer, "hi")
	target.Close()
	if silent {
		// Rebind the port to a socket that never answers.
		hole, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(peer.Addr))
		if err != nil {
			t.Fatal(err)
		}
		defer hole.Close()
	}
	// A big write (hundreds of packets, most still queued), an atomic and a message.
	reqs := []Request{
		{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Payload: make([]byte, 1<<20)},
		{Peer: peer, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(1), Result: make([]byte, 8)},
		{Peer: peer, Opcode: wire.OpMsg, Payload: []byte("lost"), Flags: fi.FENCE},
	}
	start := time.Now()
	for i := range reqs {
		if err := ini.Submit(&reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Budget: 1+2+4+8+8+8+8 ms of timers, plus scheduling slack.
	for range reqs {
		if cp := c.wait(t, 5*time.Second); cp.Err != want {
			t.Fatalf("completion %+v, want %v", cp, want)
		}
	}
	elapsed := time.Since(start)
	if elapsed > 2*time.Second {
		t.Fatalf("took %v to declare the peer unreachable", elapsed)
	}
	if s := ini.Stats(); s.PeersUnreachable+s.PeersRefused == 0 {
		t.Fatalf("stats %+v", s)
	}
	// The engine stays usable: a new session to a live peer works.
	tgt2 := newEngine(t, listenTransport(t, netOpts{}, 0), withEP(cfg, 2), tgt, nil)
	exchangeLive(t, ini, c, Peer{tgt2.LocalAddr(), 2}, "again")
	t.Logf("%v after %v", want.Name(), elapsed)
}

// TestCloseCancels: Close completes pending requests with FI_ECANCELED.
func TestCloseCancels(t *testing.T) {
	checkGoroutines(t)
	silent := listenTransport(t, netOpts{}, 0)
	defer silent.Close()
	c := newCompletions()
	e := newEngine(t, listenTransport(t, netOpts{}, 0), Config{}, nil, c)
	if err := e.Submit(&Request{Peer: Peer{silent.LocalAddr(), 0}, Opcode: wire.OpMsg}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if cp := c.wait(t, time.Second); cp.Err != fi.ECANCELED {
		t.Fatalf("%+v", cp)
	}
	if err := e.Submit(&Request{Peer: Peer{silent.LocalAddr(), 0}, Opcode: wire.OpMsg}); !errors.Is(err, fi.ESHUTDOWN) {
		t.Fatalf("submit after close: %v", err)
	}
}

// TestCloseCancelsBelowBound: Close looks only below opsBound, and every
// active op lies there also after the free stack was churned: ops that
// completed in another order than they started leave the stack shuffled
// above its untouched bottom, and the ops posted next (to a silent peer)
// take those shuffled indices; Close cancels each of them, and the bound
// stays at the ops ever used, not MaxOps.
func TestCloseCancelsBelowBound(t *testing.T) {
	tgt := newTestTarget(4096)
	ini, c, target := pair(t, netOpts{}, tgt)
	silent := listenTransport(t, netOpts{}, 0)
	defer silent.Close()
	const live, stuck = 12, 5
	for i := range live {
		if err := ini.Submit(&Request{Peer: Peer{target.LocalAddr(), 2}, Opcode: wire.OpRMAWrite, RKey: 1,
			Addr: uint64(i), Payload: []byte{byte(i)}, Flags: fi.INJECT}); err != nil {
			t.Fatal(err)
		}
	}
	for range live {
		if cp := c.wait(t, 5*time.Second); cp.Err != 0 {
			t.Fatal(cp)
		}
	}
	for i := range stuck {
		if err := ini.Submit(&Request{Peer: Peer{silent.LocalAddr(), 0}, Opcode: wire.OpMsg, Context: uint64(100 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	ini.mu.Lock()
	bound := ini.opsBound()
	ini.mu.Unlock()
	if bound < stuck || bound > live+stuck {
		t.Fatalf("opsBound %d after %d ops at most in flight", bound, live)
	}
	ini.Close()
	got := map[uint64]bool{}
	for range stuck {
		cp := c.wait(t, time.Second)
		if cp.Err != fi.ECANCELED {
			t.Fatalf("%+v", cp)
		}
		got[cp.Context.(uint64)] = true
	}
	if len(got) != stuck {
		t.Fatalf("cancelled %v", got)
	}
}

// TestMoreAndFence: FI_MORE packs ops into one packet; FI_FENCE holds a
// request until earlier ones completed; execution follows posting order.
func TestMoreAndFence(t *testing.T) {
	tgt := newTestTarget(4096)
	// MoreHold far beyond the test: the 8 posts must leave together
	// however slowly a loaded -race run makes them (200 µs, the default,
	// flushed the first ones early under a CPU hog).
	ini, c, target := pair(t, netOpts{cfg: Config{MoreHold: time.Minute}}, tgt)
	peer := Peer{target.LocalAddr(), 2}
	before := ini.Stats().TxRequests
	for i := 0; i < 8; i++ {
		f := fi.MORE
		if i == 7 {
			f = 0
		}
		buf := []byte{byte(i)}
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Addr: uint64(i), Payload: buf, Flags: f | fi.INJECT}); err != nil {
			t.Fatal(err)
		}
		buf[0] = 0xee // INJECT: the engine copied it already
	}
	for i := 0; i < 8; i++ {
		if cp := c.wait(t, 5*time.Second); cp.Err != 0 {
			t.Fatal(cp)
		}
	}
	if n := ini.Stats().TxRequests - before; n != 1 {
		t.Fatalf("8 ops with FI_MORE took %d packets", n)
	}
	tgt.mu.Lock()
	for i := 0; i < 8; i++ {
		if tgt.mem[i] != byte(i) {
			t.Fatalf("mem[%d] = %d", i, tgt.mem[i])
		}
	}
	tgt.mu.Unlock()
	// Fence: the fenced op must not leave before the big write completes.
	tgt.mu.Lock()
	tgt.order = nil
	tgt.mu.Unlock()
	openGate := tgt.closeGate(t)
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Addr: 1000, Payload: make([]byte, 3000), Context: "write"}); err != nil {
		t.Fatal(err)
	}
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpAtomic, RKey: 1, Addr: 2, Payload: le64(1), Flags: fi.FENCE, Context: "fenced"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the target is stuck in the gate; retransmissions happen
	if s := ini.Stats().TxRequests - before; s != 1+3 {
		t.Fatalf("fenced op sent before the write completed: %d packets", s)
	}
	openGate()
	if cp := c.wait(t, 5*time.Second); cp.Context != "write" {
		t.Fatalf("first completion %+v", cp)
	}
	if cp := c.wait(t, 5*time.Second); cp.Context != "fenced" || cp.Err != 0 {
		t.Fatalf("second completion %+v", cp)
	}
	tgt.mu.Lock()
	defer tgt.mu.Unlock()
	if len(tgt.order) != 4 || tgt.order[3] != 2 {
		t.Fatalf("execution order %v", tgt.order)
	}
}

// TestManualProgress: with ManualProgress the caller's Progress calls run
// the receive side; auto-progress engines refuse Progress.
func TestManualProgress(t *testing.T) {
	checkGoroutines(t)
	tgt := newTestTarget(64)
	c := newCompletions()
	target := newEngine(t, listenTransport(t, netOpts{}, 0), Config{EndpointID: 2}, tgt, nil)
	ini := newEngine(t, listenTransport(t, netOpts{}, 0), Config{EndpointID: 1, ManualProgress: true}, nil, c)
	if _, err := target.Progress(false); !errors.Is(err, fi.EOPBADSTATE) {
		t.Fatalf("Progress on auto engine: %v", err)
	}
	res := make([]byte, 8)
	if err := ini.Submit(&Request{Peer: Peer{target.LocalAddr(), 2}, Opcode: wire.OpFetchAtomic, Payload: le64(7), Result: res}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if len(c.ch) != 0 {
		t.Fatal("completion delivered without Progress")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.ch) == 0 && time.Now().Before(deadline) {
		if _, err := ini.Progress(false); err != nil {
			t.Fatal(err)
		}
	}
	if cp := c.wait(t, time.Second); cp.Err != 0 || cp.Len != 8 {
		t.Fatalf("%+v", cp)
	}
	ini.Close()
	if _, err := ini.Progress(true); !errors.Is(err, fi.ESHUTDOWN) {
		t.Fatalf("Progress after Close: %v", err)
	}
}

// TestBackoff: timeouts double from RetryInitial to the RetryMax cap, and
// the default budget is what the package doc promises.
func TestBackoff(t *testing.T) {
	rto, seq := time.Millisecond, []time.Duration{}
	for i := 0; i < 10; i++ {
		seq = append(seq, rto)
		rto = backoff(rto, 200*time.Millisecond)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 200, 200}
	for i := range want {
		if seq[i] != want[i]*time.Millisecond {
			t.Fatalf("timeouts %v", seq)
		}
	}
	var c Config
	c.OnComplete = func(Completion) {}
	if err := c.setDefaults(); err != nil || c.RetryInitial != time.Millisecond || c.RetryMax != 200*time.Millisecond || c.MaxRetries != 20 {
		t.Fatalf("defaults %+v %v", c, err)
	}
}

// TestCoalescing: with CoalesceAt packets in flight, further requests wait
// for the next response and leave packed together.
func TestCoalescing(t *testing.T) {
	tgt := newTestTarget(4096)
	// The timer also sends what coalescing left queued: keep its first
	// tick (RetryInitial after the first request, MoreHold after the
	// first request left queued) out of the test's way even on a loaded
	// machine. Nothing is lost on loopback. TestCoalesceHold tests the
	// hold.
	ini, c, target := pair(t, netOpts{cfg: Config{CoalesceAt: 4, RetryInitial: 10 * time.Second, RetryMax: 10 * time.Second,
		MoreHold: 10 * time.Second}}, tgt)
	peer := Peer{target.LocalAddr(), 2}
	openGate := tgt.closeGate(t)
	before := ini.Stats().TxRequests
	submit := func(addr uint64) {
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Addr: addr, Payload: []byte{1}}); err != nil {
			t.Fatal(err)
		}
	}
	submit(1000) // stalls the target in the gate
	for i := 0; i < 3; i++ {
		submit(uint64(i))
	}
	for i := 0; i < 16; i++ {
		submit(uint64(100 + i))
	}
	// The timer goroutine woken by the first Submit must not send what
	// coalescing is gathering (it did: 5 or 6 packets under load).
	if n := ini.Stats().TxRequests - before; n != 4 {
		t.Fatalf("%d packets sent before any response, want 4", n)
	}
	openGate()
	for i := 0; i < 20; i++ {
		if cp := c.wait(t, 5*time.Second); cp.Err != 0 {
			t.Fatal(cp)
		}
	}
	if n := ini.Stats().TxRequests - before; n != 5 {
		t.Fatalf("20 requests took %d packets, want 5 (16 coalesced into one)", n)
	}
}

// TestCoalesceHold: requests coalescing left queued go out MoreHold
// after, when no response comes to pack them (a target that is not
// scheduled answers late, and the retransmission timeout may be long):
// not at the timeout, nor at the late answer.
func TestCoalesceHold(t *testing.T) {
	start := time.Now()
	ini, c, _, openGate, before := stalledWithHeld(t, 20*time.Millisecond)
	for ini.Stats().TxRequests-before < 2 {
		if time.Since(start) > 5*time.Second {
			t.Fatal("the queued requests were not sent while the target stalled")
		}
		time.Sleep(time.Millisecond)
	}
	waited := time.Since(start)
	openGate()
	for range 4 {
		if cp := c.wait(t, 5*time.Second); cp.Err != 0 {
			t.Fatal(cp)
		}
	}
	n := ini.Stats().TxRequests - before
	t.Logf("queued requests sent after %v, %d packets in all", waited, n)
	if n != 2 {
		t.Fatalf("4 requests took %d packets, want 2 (3 coalesced into one)", n)
	}
	if waited < 20*time.Millisecond {
		t.Fatalf("queued requests sent after %v, before MoreHold", waited)
	}
}

// TestPeerTable: MaxPeers bounds target state; a full table refuses new
// sources (counted) until a peer has been idle past the retry budget.
func TestPeerTable(t *testing.T) {
	// Target: eviction after 2 x 3 x 100 ms idle.
	target := newEngine(t, listenTransport(t, netOpts{}, 0),
		Config{EndpointID: 2, MaxPeers: 2, RetryMax: 100 * time.Millisecond, MaxRetries: 2}, newTestTarget(64), nil)
	// Admitted peers keep retrying for seconds, so a loaded machine (CI
	// runs every package at once under -race) cannot time them out; the
	// refused one gives up after ~7 ms, far inside the eviction budget.
	patient := Config{RetryMax: 500 * time.Millisecond, MaxRetries: 8}
	impatient := Config{RetryMax: 4 * time.Millisecond, MaxRetries: 2}
	peer := Peer{target.LocalAddr(), 2}
	send := func(cfg Config, ep uint32) fi.Errno {
		c := newCompletions()
		e := newEngine(t, listenTransport(t, netOpts{}, 0), withEP(cfg, ep), nil, c)
		if err := e.Submit(&Request{Peer: peer, Opcode: wire.OpMsg}); err != nil {
			t.Fatal(err)
		}
		return c.wait(t, 10*time.Second).Err
	}
	if send(patient, 10) != 0 || send(patient, 11) != 0 {
		t.Fatalf("first two peers refused: %+v", target.Stats())
	}
	if err := send(impatient, 12); err != fi.ETIMEDOUT {
		t.Fatalf("third peer with a full table: %v", err)
	}
	if target.Stats().Drops[DropPeerTableFull] == 0 {
		t.Fatal("full-table drops not counted")
	}
	time.Sleep(700 * time.Millisecond) // > 600 ms: the first peers are idle
	if err := send(patient, 13); err != 0 {
		t.Fatalf("peer after idle eviction: %v, %+v", err, target.Stats())
	}
	if target.Stats().PeersEvicted != 1 {
		t.Fatalf("stats %+v", target.Stats())
	}
}

// TestFlush: requests held by FI_MORE wait until Flush sends them (the
// hold limit is out of reach here).
func TestFlush(t *testing.T) {
	ini, c, target := pair(t, netOpts{cfg: Config{MoreHold: time.Hour}}, newTestTarget(64))
	peer := Peer{target.LocalAddr(), 2}
	for i := 0; i < 3; i++ {
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpMsg, Payload: []byte("m"), Flags: fi.MORE}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if len(c.ch) != 0 || ini.Stats().TxRequests != 0 {
		t.Fatal("FI_MORE requests left before Flush")
	}
	if err := ini.Flush(peer); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if cp := c.wait(t, 5*time.Second); cp.Err != 0 {
			t.Fatal(cp)
		}
	}
	if n := ini.Stats().TxRequests; n != 1 {
		t.Fatalf("%d packets, want 1", n)
	}
}

// TestMoreHold: requests held by FI_MORE with no request without it to
// follow still go, together, once MoreHold has passed.
func TestMoreHold(t *testing.T) {
	// Long enough that the three Submits fall inside one hold even on a
	// loaded machine.
	ini, c, target := pair(t, netOpts{cfg: Config{MoreHold: 300 * time.Millisecond}}, newTestTarget(64))
	peer := Peer{target.LocalAddr(), 2}
	start := time.Now()
	for i := 0; i < 3; i++ {
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpMsg, Payload: []byte("m"), Flags: fi.MORE}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if cp := c.wait(t, 5*time.Second); cp.Err != 0 {
			t.Fatal(cp)
		}
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("held requests went after %v, before MoreHold", d)
	}
	if n := ini.Stats().TxRequests; n != 1 {
		t.Fatalf("%d packets, want 1", n)
	}
}

// TestForgetPeer: ForgetPeer cancels pending requests to the peer and
// releases target state; a new session to it works afterwards.
func TestForgetPeer(t *testing.T) {
	checkGoroutines(t)
	silent := listenTransport(t, netOpts{}, 0)
	defer silent.Close()
	tgt := newTestTarget(64)
	ini, c, target := pair(t, netOpts{}, tgt)
	gone := Peer{silent.LocalAddr(), 9}
	if err := ini.Submit(&Request{Peer: gone, Opcode: wire.OpMsg, Context: "pending"}); err != nil {
		t.Fatal(err)
	}
	ini.ForgetPeer(gone)
	if cp := c.wait(t, time.Second); cp.Err != fi.ECANCELED || cp.Context != "pending" {
		t.Fatalf("%+v", cp)
	}
	peer := Peer{target.LocalAddr(), 2}
	exchange := func() {
		t.Helper()
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpFetchAtomic, Payload: le64(1), Result: make([]byte, 8)}); err != nil {
			t.Fatal(err)
		}
		if cp := c.wait(t, 5*time.Second); cp.Err != 0 {
			t.Fatal(cp)
		}
	}
	exchange()
	// Both sides forget each other; the next exchange opens a new session.
	target.ForgetPeer(Peer{ini.LocalAddr(), 1})
	ini.ForgetPeer(peer)
	exchange()
	if s := target.Stats(); s.Delivered != 2 || s.SessionResets != 0 {
		t.Fatalf("target stats %+v", s)
	}
}
