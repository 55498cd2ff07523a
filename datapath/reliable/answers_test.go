package reliable

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
)

// pingPongSide drives one manual-progress engine of a message ping-pong:
// it sends its message of each round (the initiator first), waits for the
// other side's, and then keeps progressing until all its own messages
// have completed, and after that until the other side is done too (its
// last request may need an answer from this side's cache). Every message
// must arrive once, in order.
func pingPongSide(e *Engine, tt *testTarget, c *completions, peer Peer, first bool, rounds int, finished *atomic.Int32, deadline time.Time) error {
	mine, theirs := "pong", "ping"
	if first {
		mine, theirs = theirs, mine
	}
	for round := range rounds {
		if first {
			if err := e.Submit(&Request{Peer: peer, Opcode: wire.OpMsg, Payload: fmt.Appendf(nil, "%s %d", mine, round)}); err != nil {
				return err
			}
		}
		for len(tt.done) == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s %d: no %s within the deadline", mine, round, theirs)
			}
			if _, err := e.Progress(false); err != nil {
				return err
			}
		}
		if got, want := string(<-tt.done), fmt.Sprintf("%s %d", theirs, round); got != want {
			return fmt.Errorf("got %q, want %q (a message lost, repeated or reordered)", got, want)
		}
		if !first {
			if err := e.Submit(&Request{Peer: peer, Opcode: wire.OpMsg, Payload: fmt.Appendf(nil, "%s %d", mine, round)}); err != nil {
				return err
			}
		}
	}
	for done := 0; done < rounds; {
		select {
		case cp := <-c.ch:
			if cp.Err != 0 {
				return fmt.Errorf("%s completion %+v", mine, cp)
			}
			done++
			continue
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d %ss completed within the deadline", done, rounds, mine)
		}
		if _, err := e.Progress(false); err != nil {
			return err
		}
	}
	finished.Add(1)
	for finished.Load() < 2 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the other side was not done within the deadline")
		}
		if _, err := e.Progress(false); err != nil {
			return err
		}
	}
	if len(tt.done) > 0 {
		return fmt.Errorf("a %s delivered twice", theirs)
	}
	return nil
}

// TestAnswersUnderLoss: a message ping-pong whose responses ride on the
// reverse messages (wire.HdrAnswers) loses, duplicates and reorders
// datagrams, answering ones among them: every message is delivered
// exactly once and in order, every send completes successfully (lost
// answers are recovered from the target's response cache by
// retransmission), and answers did replace responses.
func TestAnswersUnderLoss(t *testing.T) {
	for _, rate := range []float64{0, 0.05, 0.20} {
		t.Run(fmt.Sprintf("loss%v", rate), func(t *testing.T) {
			checkGoroutines(t)
			// Rounds that take about a second each without -race on a
			// loaded machine (backoff makes lossy rounds slow).
			rounds := map[float64]int{0: 1000, 0.05: 200, 0.20: 50}[rate]
			o := netOpts{loss: rate, dup: rate, reorder: rate}
			ca, cb := newCompletions(), newCompletions()
			ta, tb := newTestTarget(64), newTestTarget(64)
			cfg := Config{ManualProgress: true, MaxRetries: 40}
			cfg.EndpointID = 1
			a := newEngine(t, listenTransport(t, o, uint64(rate*1000)+1), cfg, ta, ca)
			cfg.EndpointID = 2
			b := newEngine(t, listenTransport(t, o, uint64(rate*1000)+2), cfg, tb, cb)
			pa, pb := Peer{a.LocalAddr(), 1}, Peer{b.LocalAddr(), 2}
			deadline := time.Now().Add(60 * time.Second)
			errs := make(chan error, 1)
			var finished atomic.Int32
			go func() { errs <- pingPongSide(b, tb, cb, pa, false, rounds, &finished, deadline) }()
			if err := pingPongSide(a, ta, ca, pb, true, rounds, &finished, deadline); err != nil {
				t.Fatal(err)
			}
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			sa, sb := a.Stats(), b.Stats()
			t.Logf("%d rounds at %v%% loss/dup/reorder: answers sent %d/%d, responses %d/%d, retransmits %d/%d",
				rounds, rate*100, sa.AnswersSent, sb.AnswersSent, sa.RxResponses, sb.RxResponses, sa.Retransmits, sb.Retransmits)
			if sa.Delivered < uint64(rounds) || sb.Delivered < uint64(rounds) {
				t.Fatalf("delivered %d/%d request packets, want %d each", sa.Delivered, sb.Delivered, rounds)
			}
			if sa.AnswersSent == 0 || sb.AnswersSent == 0 {
				t.Fatalf("answers sent %d/%d: no response rode on a message", sa.AnswersSent, sb.AnswersSent)
			}
			if rate > 0 && sa.Retransmits+sb.Retransmits == 0 {
				t.Fatal("no retransmission: the loss did not exercise recovery")
			}
		})
	}
}
