package reliable

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/lossy"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// failingPair is an initiator whose transport fails Send calls on demand
// (lossy.FailSends over the UDP transport) and a test target.
func failingPair(t *testing.T, cfg Config) (ini *Engine, c *completions, w *lossy.Transport, tgt *testTarget, target *Engine) {
	t.Helper()
	tgt = newTestTarget(1 << 20)
	target = newEngine(t, listenTransport(t, netOpts{}, 0), withEP(cfg, 2), tgt, nil)
	u, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w, err = lossy.Wrap(u, lossy.Config{}); err != nil {
		t.Fatal(err)
	}
	c = newCompletions()
	ini = newEngine(t, w, withEP(cfg, 1), nil, c)
	return ini, c, w, tgt, target
}

// noMore checks that no further completion arrives for a while.
func (c *completions) noMore(t *testing.T) {
	t.Helper()
	select {
	case x := <-c.ch:
		t.Fatalf("unexpected completion %+v", x)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestSubmitAcceptedDespiteSendFailure: a transport send that fails after
// Submit queued the request does not turn into Submit's error (which says
// "not accepted, will never execute"): Submit returns nil, the retransmit
// timer sends the request, it executes once and completes once, and the
// failure is counted. Before the fix Submit returned the send error (here
// FI_EAGAIN) for a request it went on to execute and complete: a caller
// retrying it executed the atomic twice.
func TestSubmitAcceptedDespiteSendFailure(t *testing.T) {
	ini, c, w, tgt, target := failingPair(t, Config{})
	peer := Peer{target.LocalAddr(), 2}
	res := make([]byte, 8)
	w.FailSends(1, fi.EAGAIN)
	r := Request{Peer: peer, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(1), Result: res, Count: 1, Context: "fadd"}
	if err := ini.Submit(&r); err != nil {
		t.Fatalf("Submit of an accepted request failed: %v", err)
	}
	if cp := c.wait(t, 5*time.Second); cp.Err != 0 || cp.Context != "fadd" {
		t.Fatalf("completion %+v", cp)
	}
	c.noMore(t)
	if got := binary.LittleEndian.Uint64(res); got != 0 {
		t.Fatalf("fetched %d, want 0", got)
	}
	tgt.mu.Lock()
	counter := tgt.counter
	tgt.mu.Unlock()
	if counter != 1 {
		t.Fatalf("counter %d: the fetch-add executed %d times", counter, counter)
	}
	st := ini.Stats()
	if st.TxErrors != 1 || st.Retransmits == 0 {
		t.Fatalf("stats: %d tx errors, %d retransmits; want 1 and some", st.TxErrors, st.Retransmits)
	}
	if w.Stats().Failed != 1 {
		t.Fatalf("lossy failed %d sends", w.Stats().Failed)
	}
}

// TestSubmitAcceptedDespiteBatchSendFailure: the same when the send that
// fails is the one of a full transmit queue (queueTx) and then the one at
// the end of Submit: a burst of FI_MORE requests released by one without
// it, more packets than one transport batch.
func TestSubmitAcceptedDespiteBatchSendFailure(t *testing.T) {
	// The FI_MORE requests wait for the one without it, not for a timer.
	ini, c, w, tgt, target := failingPair(t, Config{MoreHold: time.Minute})
	peer := Peer{target.LocalAddr(), 2}
	const n, size = 100, 1200 // about a packet each: more than a batch
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Peer: peer, Opcode: wire.OpRMAWrite, RKey: 1, Addr: uint64(i * size),
			Payload: bytes.Repeat([]byte{byte(i + 1)}, size), Context: i}
		if i < n-1 {
			reqs[i].Flags = fi.MORE
		}
	}
	for i := range reqs[:n-1] {
		if err := ini.Submit(&reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	w.FailSends(2, fi.ENOBUFS)
	if err := ini.Submit(&reqs[n-1]); err != nil {
		t.Fatalf("Submit of an accepted request failed: %v", err)
	}
	seen := make([]int, n)
	for range n {
		cp := c.wait(t, 5*time.Second)
		if cp.Err != 0 {
			t.Fatalf("completion %+v", cp)
		}
		seen[cp.Context.(int)]++
	}
	c.noMore(t)
	for i, k := range seen {
		if k != 1 {
			t.Fatalf("request %d completed %d times", i, k)
		}
	}
	tgt.mu.Lock()
	for i := range n {
		if !bytes.Equal(tgt.mem[i*size:(i+1)*size], reqs[i].Payload) {
			t.Errorf("write %d did not land", i)
		}
	}
	tgt.mu.Unlock()
	st := ini.Stats()
	if st.TxErrors != 2 {
		t.Fatalf("%d tx errors counted, want 2", st.TxErrors)
	}
	if d := target.Stats().Delivered; d != st.TxRequests {
		t.Fatalf("%d request packets executed, %d sent: each must execute once", d, st.TxRequests)
	}
}
