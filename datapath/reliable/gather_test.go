package reliable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// headerLog records the header of every packet a transport sends.
type headerLog struct {
	datapath.Transport
	mu   sync.Mutex
	hdrs []wire.Header
}

func (l *headerLog) Send(pkts []datapath.Packet) error {
	l.mu.Lock()
	for _, p := range pkts {
		var h wire.Header
		if err := wire.DecodeHeader(p.Buf, &h); err == nil {
			l.hdrs = append(l.hdrs, h)
		}
	}
	l.mu.Unlock()
	return l.Transport.Send(pkts)
}

// count returns the RESPs and the ACKs with answers sent so far, and how
// many requests those ACKs answered.
func (l *headerLog) count() (resps, answerAcks, answered int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.hdrs {
		switch {
		case h.Type == wire.TypeResp:
			resps++
		case h.Type == wire.TypeAck && h.Flags&wire.HdrAnswers != 0:
			answerAcks++
			answered += int(h.Answered)
		}
	}
	return
}

// TestGatheredAnswers: a burst of 4 KiB writes (three request packets
// each) that the target receives in one batch is answered by one ACK per
// run of consecutive requests (wire.HdrAnswers), not a RESP per packet,
// and every write completes successfully with its data in place.
func TestGatheredAnswers(t *testing.T) {
	checkGoroutines(t)
	const writes, size = 16, 4096
	ca := newCompletions()
	tb := newTestTarget(writes * size)
	lb := &headerLog{Transport: listenTransport(t, netOpts{}, 0)}
	// CoalesceAt off: every write goes out at Submit, so the whole burst
	// is queued at the target before it receives. No retransmission
	// within the test (a loaded machine may not run the target for a
	// while): every request packet is answered once.
	a := newEngine(t, listenTransport(t, netOpts{}, 0), Config{EndpointID: 1, ManualProgress: true, CoalesceAt: -1,
		RetryInitial: 5 * time.Second, RetryMax: 10 * time.Second}, nil, ca)
	b := newEngine(t, lb, Config{EndpointID: 2, ManualProgress: true}, tb, nil)
	pb := Peer{b.LocalAddr(), 2}
	data := make([]byte, writes*size)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	for i := range writes {
		if err := a.Submit(&Request{Peer: pb, Opcode: wire.OpRMAWrite, RKey: 1, Addr: uint64(i * size),
			Payload: data[i*size : (i+1)*size], Context: i}); err != nil {
			t.Fatal(err)
		}
	}
	packets := int(a.Stats().TxRequests)
	if packets < 2*writes {
		t.Fatalf("%d request packets for %d writes of %d bytes", packets, writes, size)
	}
	progressUntil(t, b, func() bool { return b.Stats().Delivered == uint64(packets) })
	progressUntil(t, a, func() bool { return len(ca.ch) == writes })
	for range writes {
		if cp := ca.wait(t, time.Second); cp.Err != 0 || cp.Len != size {
			t.Fatalf("write completion %+v", cp)
		}
	}
	tb.mu.Lock()
	same := bytes.Equal(tb.mem, data)
	tb.mu.Unlock()
	if !same {
		t.Fatal("target memory differs from the writes")
	}
	resps, acks, answered := lb.count()
	t.Logf("%d request packets answered by %d RESPs and %d ACKs answering %d", packets, resps, acks, answered)
	if resps+answered != packets {
		t.Fatalf("%d RESPs + %d answered by ACKs, want the %d request packets", resps, answered, packets)
	}
	if acks == 0 || resps+acks >= packets/2 {
		t.Fatalf("%d RESPs and %d ACKs for %d request packets received together: answers not gathered", resps, acks, packets)
	}
	if st := b.Stats(); st.AnswersSent != uint64(answered) {
		t.Fatalf("AnswersSent %d, the ACKs answered %d", st.AnswersSent, answered)
	}
}

// TestGatheredAnswersUnderLoss: pipelined 4 KiB writes and non-fetching
// atomic adds (both answered by gathered ACKs) through loss, duplication
// and reordering: every add executes exactly once (the counter is
// exact), every write's data arrives, every operation completes
// successfully, and (without impairment) ACKs did answer runs of requests.
func TestGatheredAnswersUnderLoss(t *testing.T) {
	for _, rate := range []float64{0, 0.05, 0.20} {
		t.Run(fmt.Sprintf("loss%v", rate), func(t *testing.T) {
			checkGoroutines(t)
			const size, depth = 4096, 32
			ops := map[float64]int{0: 4000, 0.05: 2000, 0.20: 400}[rate]
			o := netOpts{loss: rate, dup: rate, reorder: rate, seed: uint64(rate*1000) + 11}
			tgt := newTestTarget(depth * size)
			lb := &headerLog{Transport: listenSide(t, o, o.seed, true)}
			target := newEngine(t, lb, Config{EndpointID: 2, MaxRetries: 40}, tgt, nil)
			c := newCompletions()
			ini := newEngine(t, listenTransport(t, o, o.seed+1), Config{EndpointID: 1, MaxRetries: 40}, nil, c)
			peer := Peer{target.LocalAddr(), 2}
			src := make([]byte, depth*size)
			for i := range src {
				src[i] = byte(i ^ i>>9)
			}
			one := le64(1)
			adds, sent, done := 0, 0, 0
			for done < ops {
				for sent < ops && sent-done < depth {
					r := Request{Peer: peer, Context: sent}
					if sent%2 == 0 {
						slot := (sent / 2) % depth
						r.Opcode, r.RKey, r.Addr, r.Payload = wire.OpRMAWrite, 1, uint64(slot*size), src[slot*size:(slot+1)*size]
					} else {
						r.Opcode, r.RKey, r.Payload, r.Count = wire.OpAtomic, 1, one, 1
					}
					if err := ini.Submit(&r); err != nil {
						if errors.Is(err, fi.EAGAIN) {
							break
						}
						t.Fatal(err)
					}
					if r.Opcode == wire.OpAtomic {
						adds++
					}
					sent++
				}
				if cp := c.wait(t, 30*time.Second); cp.Err != 0 {
					t.Fatalf("op %v: %+v", cp.Context, cp)
				}
				done++
			}
			tgt.mu.Lock()
			counter, same := tgt.counter, bytes.Equal(tgt.mem, src)
			tgt.mu.Unlock()
			resps, acks, answered := lb.count()
			st := ini.Stats()
			t.Logf("%d ops at %v%% loss/dup/reorder: %d request packets, %d retransmits; target sent %d RESPs, %d ACKs answering %d",
				ops, rate*100, st.TxRequests, st.Retransmits, resps, acks, answered)
			if counter != uint64(adds) {
				t.Fatalf("counter %d after %d adds: not exactly once", counter, adds)
			}
			if !same {
				t.Fatal("target memory differs from the writes")
			}
			if answered < 2*acks || rate == 0 && acks == 0 {
				// Under impairment runs are short (held and replayed
				// responses go alone): gathering is required lossless.
				t.Fatalf("%d ACKs answering %d requests: answers not gathered", acks, answered)
			}
			if v := binary.LittleEndian.Uint64(one); v != 1 {
				t.Fatalf("operand changed to %d", v)
			}
		})
	}
}
