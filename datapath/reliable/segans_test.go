package reliable

import (
	"bytes"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

// oneByOne receives at most one datagram per batch: how a reader that
// receives as soon as it is woken meets the frames of a segmented op.
type oneByOne struct{ datapath.Transport }

func (o oneByOne) Receive(pkts []datapath.Packet, wait bool) (int, error) {
	return o.Transport.Receive(pkts[:1], wait)
}

// TestSegmentedWriteOneAnswer: 4 KiB writes (three request packets each)
// that the target receives a packet per batch are answered by one packet
// each, an ACK answering all three (segans.go), not a RESP per packet;
// every write completes once its last packet is answered, with its data
// in place.
func TestSegmentedWriteOneAnswer(t *testing.T) {
	checkGoroutines(t)
	const writes, size = 8, 4096
	ca := newCompletions()
	tb := newTestTarget(writes * size)
	lb := &headerLog{Transport: oneByOne{listenTransport(t, netOpts{}, 0)}}
	// No timer within the test (a loaded machine may not run the target
	// for a while): every request packet is answered once, and no hold
	// ends by time.
	slow := Config{ManualProgress: true, CoalesceAt: -1, RetryInitial: 5 * time.Second, RetryMax: 10 * time.Second,
		MoreHold: 5 * time.Second}
	ac, bc := slow, slow
	ac.EndpointID, bc.EndpointID = 1, 2
	a := newEngine(t, listenTransport(t, netOpts{}, 0), ac, nil, ca)
	b := newEngine(t, lb, bc, tb, nil)
	pb := Peer{b.LocalAddr(), 2}
	data := make([]byte, writes*size)
	for i := range data {
		data[i] = byte(i*5 + i>>8)
	}
	for i := range writes {
		before := a.Stats().TxRequests
		if err := a.Submit(&Request{Peer: pb, Opcode: wire.OpRMAWrite, RKey: 1, Addr: uint64(i * size),
			Payload: data[i*size : (i+1)*size], Context: i}); err != nil {
			t.Fatal(err)
		}
		if n := a.Stats().TxRequests - before; n != 3 {
			t.Fatalf("write %d: %d request packets, want 3", i, n)
		}
		delivered := b.Stats().Delivered
		progressUntil(t, b, func() bool { return b.Stats().Delivered == delivered+3 })
		progressUntil(t, a, func() bool { return len(ca.ch) == 1 })
		if cp := ca.wait(t, time.Second); cp.Err != 0 || cp.Len != size || cp.Context != i {
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
	t.Logf("%d writes received a packet per batch: %d RESPs, %d ACKs answering %d", writes, resps, acks, answered)
	if resps != 0 || acks != writes || answered != 3*writes {
		t.Fatalf("%d RESPs and %d ACKs answering %d for %d writes of 3 packets: want one ACK answering 3 per write",
			resps, acks, answered, writes)
	}
	if st := b.Stats(); st.AnswersSent != uint64(answered) {
		t.Fatalf("AnswersSent %d, the ACKs answered %d", st.AnswersSent, answered)
	}
}
