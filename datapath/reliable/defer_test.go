package reliable

import (
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

// sendLog records the packet types of every Send call of a transport.
type sendLog struct {
	datapath.Transport
	mu    sync.Mutex
	calls [][]wire.Type
}

func (s *sendLog) Send(pkts []datapath.Packet) error {
	var h wire.Header
	types := make([]wire.Type, 0, len(pkts))
	for _, p := range pkts {
		_ = wire.DecodeHeader(p.Buf, &h)
		types = append(types, h.Type)
	}
	s.mu.Lock()
	s.calls = append(s.calls, types)
	s.mu.Unlock()
	return s.Transport.Send(pkts)
}

func (s *sendLog) sends() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func (s *sendLog) last() []wire.Type {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) == 0 {
		return nil
	}
	return s.calls[len(s.calls)-1]
}

// progressUntil drives e until cond holds, for at most 5 s.
func progressUntil(t *testing.T, e *Engine, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		if _, err := e.Progress(false); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeferredResponses: the response to a delivered message waits for
// the target's next request and rides on it (wire.HdrAnswers: a
// ping-pong pays one send and one frame per message); with no next
// request, the next Progress call sends it, whether a packet arrives or
// not.
func TestDeferredResponses(t *testing.T) {
	checkGoroutines(t)
	ca, cb := newCompletions(), newCompletions()
	ta, tb := newTestTarget(64), newTestTarget(64)
	la := &sendLog{Transport: listenTransport(t, netOpts{}, 0)}
	lb := &sendLog{Transport: listenTransport(t, netOpts{}, 0)}
	// Timers rarely run: a timer run flushes deferred responses too.
	a := newEngine(t, la, Config{EndpointID: 1, ManualProgress: true, RetryInitial: time.Second, RetryMax: 2 * time.Second}, ta, ca)
	b := newEngine(t, lb, Config{EndpointID: 2, ManualProgress: true, RetryInitial: time.Second, RetryMax: 2 * time.Second}, tb, cb)
	pa, pb := Peer{a.LocalAddr(), 1}, Peer{b.LocalAddr(), 2}

	for round := range 3 {
		// Ping: b delivers it and answers with a pong.
		if err := a.Submit(&Request{Peer: pb, Opcode: wire.OpMsg, Payload: []byte("ping"), Context: round}); err != nil {
			t.Fatal(err)
		}
		progressUntil(t, b, func() bool { return len(tb.done) > 0 })
		if got := string(<-tb.done); got != "ping" {
			t.Fatalf("round %d: b got %q", round, got)
		}
		if err := b.Submit(&Request{Peer: pa, Opcode: wire.OpMsg, Payload: []byte("pong"), Context: round}); err != nil {
			t.Fatal(err)
		}
		if got := lb.last(); len(got) != 1 || got[0] != wire.TypeReq {
			t.Fatalf("round %d: b's pong went out as %v, want [REQ] answering the ping", round, got)
		}
		// a gets the pong and the completion of its ping, and answers
		// with the next ping (or, in the last round, nothing).
		progressUntil(t, a, func() bool { return len(ta.done) > 0 && len(ca.ch) > 0 })
		if cp := ca.wait(t, time.Second); cp.Err != 0 || cp.Context != round {
			t.Fatalf("round %d: ping completion %+v", round, cp)
		}
		<-ta.done
		if round < 2 {
			continue
		}
		// Nothing follows: a's next Progress call sends its deferred
		// response, with nothing to receive.
		before := la.sends()
		if _, err := a.Progress(false); err != nil {
			t.Fatal(err)
		}
		if got := la.last(); la.sends() != before+1 || len(got) != 1 || got[0] != wire.TypeResp {
			t.Fatalf("a's Progress made %d sends, the last %v; want one, its deferred [RESP]", la.sends()-before, got)
		}
		progressUntil(t, b, func() bool { return len(cb.ch) >= 3 })
	}
	for round := range 3 {
		if cp := cb.wait(t, time.Second); cp.Err != 0 || cp.Context != round {
			t.Fatalf("pong completion %+v, want round %d", cp, round)
		}
	}
	// Every ping's response rode on the pong, and every pong's but the
	// last on the next ping (the last went out by itself).
	if st := a.Stats(); st.Delivered != 3 || st.AnswersSent != 2 {
		t.Fatalf("a delivered %d requests, answered %d on requests; want 3, 2", st.Delivered, st.AnswersSent)
	}
	if st := b.Stats(); st.Delivered != 3 || st.AnswersSent != 3 {
		t.Fatalf("b delivered %d requests, answered %d on requests; want 3, 3", st.Delivered, st.AnswersSent)
	}
}

// TestDeferredResponseTimer: a manual-progress target that delivered a
// message and then neither submits nor progresses again still answers it:
// a timer run sends the deferred response (TestCQSReadCondThreshold's
// pattern: the receiver reads its last completion and stops).
func TestDeferredResponseTimer(t *testing.T) {
	checkGoroutines(t)
	ca := newCompletions()
	tb := newTestTarget(64)
	a := newEngine(t, listenTransport(t, netOpts{}, 0), Config{EndpointID: 1, ManualProgress: true}, nil, ca)
	b := newEngine(t, listenTransport(t, netOpts{}, 0), Config{EndpointID: 2, ManualProgress: true}, tb, nil)
	if err := a.Submit(&Request{Peer: Peer{b.LocalAddr(), 2}, Opcode: wire.OpMsg, Payload: []byte("last")}); err != nil {
		t.Fatal(err)
	}
	progressUntil(t, b, func() bool { return len(tb.done) > 0 })
	if !b.rxDeferred.Load() {
		t.Fatal("the response to a delivered message was not deferred")
	}
	progressUntil(t, a, func() bool { return len(ca.ch) > 0 })
	if cp := ca.wait(t, time.Second); cp.Err != 0 {
		t.Fatalf("%+v", cp)
	}
}
