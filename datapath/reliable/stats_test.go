package reliable

import (
	"fmt"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// TestStatsCounters: the per-op counters the metrics export move with
// traffic: completions by opcode, in-flight back to zero, an RTT estimate,
// retransmits only with loss, timeouts for a silent peer.
func TestStatsCounters(t *testing.T) {
	for _, loss := range []float64{0, 0.05} {
		t.Run(fmt.Sprintf("loss%v", loss), func(t *testing.T) {
			o := netOpts{loss: loss, seed: 11}
			cfg := Config{EndpointID: 1}
			if loss == 0 {
				// Without loss nothing may be resent: a 250 ms floor keeps
				// a scheduling stall of a loaded machine (-race, two
				// cores) from passing for a lost packet.
				cfg.RetryInitial, cfg.RetryMax = 250*time.Millisecond, time.Second
			}
			ttr := listenSide(t, o, 1, true)
			target := newEngine(t, ttr, Config{EndpointID: 2}, newTestTarget(4096), nil)
			c := newCompletions()
			e := newEngine(t, listenTransport(t, o, 2), cfg, nil, c)
			peer := Peer{Addr: target.LocalAddr(), EP: 2}
			const n = 400
			waited := 0
			wait := func(upTo int) {
				for ; waited < upTo; waited++ {
					if cp := c.wait(t, 10*time.Second); cp.Err != fi.SUCCESS && cp.Opcode != wire.OpFetchAtomic {
						t.Fatalf("completion %+v", cp)
					}
				}
			}
			submitted := 0
			for i := 0; i < n; i++ {
				submitRetry(t, e, &Request{Peer: peer, Opcode: wire.OpMsg, Payload: []byte("x")})
				submitted++
				if i%2 == 1 {
					res := make([]byte, 8)
					submitRetry(t, e, &Request{Peer: peer, Opcode: wire.OpFetchAtomic, Datatype: 10, AtomicOp: 1, Count: 1,
						Payload: make([]byte, 8), Result: res})
					submitted++
				}
				if loss == 0 {
					// A few in flight: a burst could overflow the
					// loopback socket's buffer, a loss of its own.
					wait(submitted - 4)
				}
			}
			wait(n + n/2)
			s := e.Stats()
			if s.Ops[wire.OpMsg] != n || s.Ops[wire.OpFetchAtomic] != n/2 || s.TotalOps() != n+n/2 {
				t.Fatalf("ops by kind %v, want %d MSG and %d FETCH_ATOMIC", s.Ops, n, n/2)
			}
			if s.InFlight != 0 {
				t.Fatalf("in flight %d after every completion", s.InFlight)
			}
			if loss == 0 && s.SRTT <= 0 { // with loss, Karn's rule may leave no sample
				t.Fatalf("no RTT estimate after %d ops", n)
			}
			if ppo := s.PacketsPerOp(); ppo <= 0 {
				t.Fatalf("packets per op %v", ppo)
			}
			if ts := target.Stats(); loss == 0 && s.Retransmits != 0 {
				// Nothing was lost, so nothing needed resending. A timer can
				// still fire on a machine stalled past the retry floor
				// (seen under -race on two shared cores): then every
				// retransmission is a duplicate the target answered from
				// its cache, and rare.
				if s.Retransmits != ts.ReplayedFromCache || ts.Held != 0 || s.Retransmits*100 > s.TxRequests {
					t.Fatalf("%d retransmits without loss; target held %d, replayed %d; initiator sent %d", s.Retransmits, ts.Held, ts.ReplayedFromCache, s.TxRequests)
				}
				t.Logf("%d spurious retransmissions (a stalled timer), answered from the target's cache", s.Retransmits)
			}
			if loss > 0 && s.Retransmits == 0 {
				t.Fatalf("no retransmits at %v loss", loss)
			}
			if ts := target.Stats(); loss > 0 && ts.DuplicatesSuppressed() == 0 {
				t.Logf("target suppressed no duplicates (every retransmission replaced a lost request)")
			}
		})
	}
}

// TestStatsTimeouts: ops to a silent peer count as timeouts and errors.
func TestStatsTimeouts(t *testing.T) {
	silent := listenTransport(t, netOpts{}, 1)
	defer silent.Close()
	c := newCompletions()
	e := newEngine(t, listenTransport(t, netOpts{}, 2),
		Config{EndpointID: 1, MaxRetries: 2, RetryInitial: time.Millisecond, RetryMax: 2 * time.Millisecond}, nil, c)
	submitRetry(t, e, &Request{Peer: Peer{Addr: silent.LocalAddr(), EP: 9}, Opcode: wire.OpRMAWrite, Payload: []byte("y")})
	if s := e.Stats(); s.InFlight != 1 {
		t.Fatalf("in flight %d, want 1", s.InFlight)
	}
	if cp := c.wait(t, 5*time.Second); cp.Err != fi.ETIMEDOUT {
		t.Fatalf("completion %+v, want FI_ETIMEDOUT", cp)
	}
	s := e.Stats()
	if s.Timeouts != 1 || s.OpErrors[wire.OpRMAWrite] != 1 || s.Ops[wire.OpRMAWrite] != 1 || s.InFlight != 0 {
		t.Fatalf("timeouts %d, errors %v, ops %v, in flight %d", s.Timeouts, s.OpErrors, s.Ops, s.InFlight)
	}
}
