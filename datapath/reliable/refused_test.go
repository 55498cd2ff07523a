package reliable

import (
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
)

// TestAnsweredBeforeRefused: a target answers a request and closes its
// port; the initiator, not reading meanwhile (manual progress), sends a
// retransmission that the closed port bounces. Linux then reports the
// ICMP port unreachable before the response queued ahead of it. The
// request completes with the target's answer, not FI_ECONNREFUSED: the
// operation was executed, and the refusal waits one batch (refused.go).
// Before that rule, fabtests' fi_cq_data and fi_multi_ep clients failed
// this way now and then when their server exited right after receiving.
func TestAnsweredBeforeRefused(t *testing.T) {
	checkGoroutines(t)
	tgt := newTestTarget(64)
	c := newCompletions()
	cfg := Config{RetryInitial: time.Millisecond, RetryMax: 50 * time.Millisecond, MaxRetries: 20}
	target := newEngine(t, listenTransport(t, netOpts{}, 0), withEP(cfg, 2), tgt, nil)
	icfg := withEP(cfg, 1)
	icfg.ManualProgress = true
	ini := newEngine(t, listenTransport(t, netOpts{}, 0), icfg, nil, c)
	res := make([]byte, 8)
	if err := ini.Submit(&Request{Peer: Peer{target.LocalAddr(), 2}, Opcode: wire.OpFetchAtomic, Payload: le64(7), Result: res}); err != nil {
		t.Fatal(err)
	}
	// The target executes and answers at once; wait for it, then close it.
	deadline := time.Now().Add(5 * time.Second)
	for target.Stats().Delivered == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if target.Stats().Delivered != 1 {
		t.Fatal("the target did not execute the request")
	}
	target.Close()
	// Retransmissions (the initiator has not read the answer) reach the
	// closed port and bounce.
	for ini.Stats().Retransmits == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond) // the ICMP comes back
	for len(c.ch) == 0 && time.Now().Before(deadline) {
		if _, err := ini.Progress(false); err != nil {
			t.Fatal(err)
		}
	}
	cp := c.wait(t, time.Second)
	if cp.Err != 0 || cp.Len != 8 || tgt.counter != 7 {
		t.Fatalf("completion %+v, target counter %d: want the target's answer", cp, tgt.counter)
	}
}
