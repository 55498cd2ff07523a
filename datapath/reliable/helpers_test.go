package reliable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/lossy"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

const badKey = 666 // rkey the test target refuses with FI_EACCES

// testTarget is a handler with one memory region, one 64-bit counter and
// a message reassembly buffer.
type testTarget struct {
	mu      sync.Mutex
	mem     []byte
	counter uint64
	msgs    map[Peer][]byte // message being reassembled per peer
	done    chan []byte     // completed messages
	order   []uint64        // Addr of every RMA_WRITE/ATOMIC op, in execution order
	gate    chan struct{}   // if set, an RMA_WRITE to address 1000 waits for it
}

func newTestTarget(memSize int) *testTarget {
	return &testTarget{mem: make([]byte, memSize), msgs: map[Peer][]byte{}, done: make(chan []byte, 64)}
}

// closeGate makes RMA_WRITEs to address 1000 wait until the returned
// function opens the gate. The gate also opens when the test ends, before
// the engines registered earlier close: Close waits for the batch stuck in
// the gate, so a test stopped by a failure would hang there otherwise.
func (t *testTarget) closeGate(tb testing.TB) (open func()) {
	t.mu.Lock()
	t.gate = make(chan struct{})
	g := t.gate
	t.mu.Unlock()
	open = sync.OnceFunc(func() { close(g) })
	tb.Cleanup(open)
	return open
}

func (t *testTarget) HandleRequest(in *Incoming, resp []byte) (int, fi.Errno) {
	t.mu.Lock()
	if in.Op.Opcode == wire.OpRMAWrite && in.Op.Addr == 1000 && t.gate != nil {
		g := t.gate
		t.mu.Unlock()
		<-g
		t.mu.Lock()
	}
	defer t.mu.Unlock()
	d := &in.Op
	if d.Opcode != wire.OpMsg && d.RKey == badKey {
		return 0, fi.EACCES
	}
	inRange := func(n uint64) bool { return d.Addr <= uint64(len(t.mem)) && n <= uint64(len(t.mem))-d.Addr }
	switch d.Opcode {
	case wire.OpMsg:
		if d.Flags&wire.OpFirst != 0 {
			if m := t.msgs[in.Peer]; cap(m) >= int(d.Count) {
				t.msgs[in.Peer] = m[:0]
			} else {
				t.msgs[in.Peer] = make([]byte, 0, d.Count)
			}
		}
		m := t.msgs[in.Peer]
		if uint64(len(m)) != d.Addr {
			return 0, fi.EIO // segments out of order: would be a bug
		}
		m = append(m, in.Payload...)
		t.msgs[in.Peer] = m
		if d.Flags&wire.OpLast != 0 {
			if len(t.done) < cap(t.done) { // benchmarks do not collect messages
				t.done <- bytes.Clone(m)
			}
		}
		return 0, 0
	case wire.OpRMAWrite:
		if !inRange(uint64(len(in.Payload))) {
			return 0, fi.EINVAL
		}
		t.order = append(t.order, d.Addr)
		copy(t.mem[d.Addr:], in.Payload)
		return 0, 0
	case wire.OpRMARead:
		if !inRange(uint64(d.RespLen)) {
			return 0, fi.EINVAL
		}
		return copy(resp, t.mem[d.Addr:d.Addr+uint64(d.RespLen)]), 0
	case wire.OpFetchAtomic:
		// The exactly-once probe: old := counter; counter += operand.
		if len(in.Payload) != 8 || len(resp) != 8 {
			return 0, fi.EINVAL
		}
		t.order = append(t.order, d.Addr)
		old := t.counter
		t.counter += binary.LittleEndian.Uint64(in.Payload)
		binary.LittleEndian.PutUint64(resp, old)
		return 8, 0
	case wire.OpCompareAtomic:
		if len(in.Payload) != 16 || len(resp) != 8 {
			return 0, fi.EINVAL
		}
		old := t.counter
		if old == binary.LittleEndian.Uint64(in.Payload[8:]) {
			t.counter = binary.LittleEndian.Uint64(in.Payload)
		}
		binary.LittleEndian.PutUint64(resp, old)
		return 8, 0
	case wire.OpAtomic:
		t.order = append(t.order, d.Addr)
		t.counter += binary.LittleEndian.Uint64(in.Payload)
		return 0, 0
	}
	return 0, fi.EOPNOTSUPP
}

// completions collects an engine's completions.
type completions struct{ ch chan Completion }

func newCompletions() *completions { return &completions{ch: make(chan Completion, 1<<16)} }

func (c *completions) on(x Completion) { c.ch <- x }

func (c *completions) wait(t testing.TB, timeout time.Duration) Completion {
	t.Helper()
	select {
	case x := <-c.ch:
		return x
	case <-time.After(timeout):
		t.Fatalf("no completion within %v", timeout)
	}
	return Completion{}
}

type netOpts struct {
	loss, dup, reorder float64
	seed               uint64
	cfg                Config // base engine config (OnComplete/Handler set by the helper)
	addr               string // listen address, default 127.0.0.1:0
	// open, when set, opens the UDP socket (e.g. inside a netns); target
	// says which side the socket is for.
	open func(t testing.TB, target bool) *udp.Transport
	// during, when set, runs while fetchAddRun's traffic flows (stop closes
	// when the traffic is done).
	during func(target netip.AddrPort, stop <-chan struct{})
}

func listenTransport(t testing.TB, o netOpts, seed uint64) datapath.Transport {
	return listenSide(t, o, seed, false)
}

func listenSide(t testing.TB, o netOpts, seed uint64, target bool) datapath.Transport {
	t.Helper()
	var u *udp.Transport
	if o.open != nil {
		u = o.open(t, target)
	} else {
		addr := o.addr
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		var err error
		if u, err = udp.Listen(netip.MustParseAddrPort(addr), udp.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if o.loss == 0 && o.dup == 0 && o.reorder == 0 {
		return u
	}
	w, err := lossy.Wrap(u, lossy.Config{Seed: seed, Loss: o.loss, Duplicate: o.dup, Reorder: o.reorder, MaxPacket: 9000})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func newEngine(t testing.TB, tr datapath.Transport, cfg Config, h Handler, c *completions) *Engine {
	t.Helper()
	cfg.Handler = h
	if c != nil {
		cfg.OnComplete = c.on
	} else {
		cfg.OnComplete = func(Completion) {}
	}
	e, err := New(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// checkGoroutines fails the test if goroutines started during it outlive it.
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("goroutines leaked: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// submitRetry submits r, waiting out FI_EAGAIN.
func submitRetry(t testing.TB, e *Engine, r *Request) {
	t.Helper()
	for {
		err := e.Submit(r)
		if err == nil {
			return
		}
		if !errors.Is(err, fi.EAGAIN) {
			t.Fatalf("submit: %v", err)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// exchangeLive sends a message to a live peer and waits for its success.
// Tests with a tight retry budget use it for the exchanges that must
// succeed: on a loaded machine (CI runs every package at once under
// -race) a live target may stay unscheduled longer than the budget, and
// FI_ETIMEDOUT then is the engine's right answer, so such an attempt is
// repeated rather than failed.
func exchangeLive(t testing.TB, e *Engine, c *completions, peer Peer, msg string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		if err := e.Submit(&Request{Peer: peer, Opcode: wire.OpMsg, Payload: []byte(msg)}); err != nil {
			t.Fatal(err)
		}
		cp := c.wait(t, 5*time.Second)
		if cp.Err == 0 {
			return
		}
		if cp.Err != fi.ETIMEDOUT || attempt == 5 {
			t.Fatalf("%q to a live peer, attempt %d: %+v", msg, attempt, cp)
		}
	}
}

// stalledWithHeld makes an initiator and a target (CoalesceAt 1, 10 s
// timers, MoreHold as given) and submits a write that stalls the target in
// its gate, then three that coalescing holds behind it. It returns the
// initiator, its completions, the target's address, the gate's opener and
// the initiator's TxRequests before the first write.
func stalledWithHeld(t *testing.T, moreHold time.Duration) (ini *Engine, c *completions, peer Peer, openGate func(), before uint64) {
	t.Helper()
	tgt := newTestTarget(4096)
	ini, c, target := pair(t, netOpts{cfg: Config{CoalesceAt: 1, RetryInitial: 10 * time.Second, RetryMax: 10 * time.Second,
		MoreHold: moreHold}}, tgt)
	peer = Peer{target.LocalAddr(), 2}
	openGate = tgt.closeGate(t)
	before = ini.Stats().TxRequests
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Addr: 1000, Payload: []byte{1}}); err != nil {
		t.Fatal(err) // stalls the target in the gate
	}
	for i := range 3 {
		if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Addr: uint64(i), Payload: []byte{1}}); err != nil {
			t.Fatal(err)
		}
	}
	return ini, c, peer, openGate, before
}
