package reliable

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

// firstAnswerTransport interferes with the first Send of a target that
// carries an answer (RESP or ACK): it delays it (a peer that is not
// scheduled for a while) or drops its answers (a lost response).
type firstAnswerTransport struct {
	datapath.Transport
	delay time.Duration
	drop  bool
	mu    sync.Mutex
	done  bool
	kept  []datapath.Packet
	// original: the first answer was to the first transmission. Not so
	// when the target ran so late that a retransmission came in the same
	// batch as the original: its replay unmarks the shared response.
	original bool
}

func (f *firstAnswerTransport) Send(pkts []datapath.Packet) error {
	f.mu.Lock()
	if f.done {
		f.mu.Unlock()
		return f.Transport.Send(pkts)
	}
	answer := false
	for _, p := range pkts {
		if t := wire.Type(p.Buf[2]); t == wire.TypeResp || t == wire.TypeAck {
			answer = true
		}
	}
	if !answer {
		f.mu.Unlock()
		return f.Transport.Send(pkts)
	}
	f.done = true
	for _, p := range pkts {
		if wire.Type(p.Buf[2]) == wire.TypeResp && p.Buf[3]&wire.HdrOriginal != 0 {
			f.original = true
		}
	}
	f.mu.Unlock()
	if !f.drop {
		time.Sleep(f.delay) // the target's receive side stalls with it
		return f.Transport.Send(pkts)
	}
	f.kept = f.kept[:0]
	for _, p := range pkts {
		if t := wire.Type(p.Buf[2]); t != wire.TypeResp && t != wire.TypeAck {
			f.kept = append(f.kept, p)
		}
	}
	if len(f.kept) == 0 {
		return nil
	}
	return f.Transport.Send(f.kept)
}

// spuriousRun has the initiator fetch-add once to a target whose first
// answer ft delays or drops, checks exactly once, and returns the
// initiator's stats and the peer's estimator and timeout after.
func spuriousRun(t *testing.T, ft *firstAnswerTransport) (Stats, rtoEstimator, time.Duration) {
	t.Helper()
	checkGoroutines(t)
	tgt := newTestTarget(8)
	ft.Transport = listenTransport(t, netOpts{}, 0)
	target := newEngine(t, ft, Config{EndpointID: 2}, tgt, nil)
	c := newCompletions()
	ini := newEngine(t, listenTransport(t, netOpts{}, 0), Config{EndpointID: 1, RetryInitial: time.Millisecond}, nil, c)
	peer := Peer{target.LocalAddr(), 2}
	got := make([]byte, 8)
	if err := ini.Submit(&Request{Peer: peer, Opcode: wire.OpFetchAtomic, RKey: 1, Payload: le64(5), Result: got, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if cp := c.wait(t, 10*time.Second); cp.Err != 0 {
		t.Fatalf("%+v", cp)
	}
	tgt.mu.Lock()
	counter := tgt.counter
	tgt.mu.Unlock()
	if counter != 5 || binary.LittleEndian.Uint64(got) != 0 {
		t.Fatalf("counter %d, fetched %d: want 5 and 0 (exactly once)", counter, binary.LittleEndian.Uint64(got))
	}
	ini.mu.Lock()
	p := ini.peers[peer]
	est, rto := p.est, p.rto
	ini.mu.Unlock()
	return ini.Stats(), est, rto
}

// TestSpuriousTimeoutDetected: a target that stalls for 30 ms before it
// answers makes the initiator retransmit (1 ms timeout), but the answer
// is to the first transmission (wire.HdrOriginal): the retransmissions
// are counted spurious, the round trip is taken as a sample and the
// peer's timeout rises above it (the floor, rto.go), so the next stall of
// that length costs no retransmission. The fetch-add executes once.
func TestSpuriousTimeoutDetected(t *testing.T) {
	withProcessRTO(t, 0) // the first timeout is RetryInitial, not another test's estimate (rtoseed.go)
	const stall = 30 * time.Millisecond
	var (
		st  Stats
		est rtoEstimator
		rto time.Duration
	)
	for attempt := 1; ; attempt++ {
		ft := &firstAnswerTransport{delay: stall}
		st, est, rto = spuriousRun(t, ft)
		ft.mu.Lock()
		original := ft.original
		ft.mu.Unlock()
		if original {
			break
		}
		// A loaded machine ran the target only after a retransmission
		// had come too: no detection to expect. Try again.
		t.Logf("attempt %d: the target received a retransmission with the original", attempt)
		if attempt == 5 {
			t.Fatal("the target never answered a first transmission first")
		}
	}
	t.Logf("retransmits %d, spurious %d; srtt %v, floor %v, timeout %v",
		st.Retransmits, st.SpuriousRetransmits, time.Duration(est.srtt), time.Duration(est.floor), rto)
	if st.Retransmits == 0 {
		t.Fatal("no retransmission during a 30 ms stall with a 1 ms timeout")
	}
	if st.SpuriousRetransmits != 1 {
		t.Fatalf("spurious retransmissions %d, want 1 (the packet whose first transmission was answered)", st.SpuriousRetransmits)
	}
	if est.srtt < int64(stall) || est.floor < int64(2*stall) || rto < 2*stall {
		t.Fatalf("srtt %v, floor %v, timeout %v after a spurious timeout %v in: want the round trip learnt",
			time.Duration(est.srtt), time.Duration(est.floor), rto, stall)
	}
}

// TestLostResponseNotSpurious: when the first response is lost, the
// retransmission is answered from the target's cache without
// wire.HdrOriginal: a needed retransmission, not counted spurious, and
// the timeout learns no floor from it (Karn's rule: no sample).
func TestLostResponseNotSpurious(t *testing.T) {
	withProcessRTO(t, 0)
	st, est, rto := spuriousRun(t, &firstAnswerTransport{drop: true})
	t.Logf("retransmits %d, spurious %d; srtt %v, floor %v, timeout %v",
		st.Retransmits, st.SpuriousRetransmits, time.Duration(est.srtt), time.Duration(est.floor), rto)
	if st.Retransmits == 0 {
		t.Fatal("the lost response was not recovered by a retransmission")
	}
	if st.SpuriousRetransmits != 0 || est.floor != 0 || est.srtt != 0 {
		t.Fatalf("spurious %d, floor %v, srtt %v after a lost response: want none",
			st.SpuriousRetransmits, time.Duration(est.floor), time.Duration(est.srtt))
	}
}
