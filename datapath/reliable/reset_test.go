package reliable

import (
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/wire"
)

// fetchAdds sends one request of n FETCH_ATOMIC ops (+1 each on the test
// target's counter) as (session, seq).
func (r *rawInitiator) fetchAdds(session, seq uint32, n int) {
	r.t.Helper()
	r.bld.Reset(r.buf, wire.Header{Type: wire.TypeReq, SrcEP: 1, DstEP: 2, Session: session, Seq: seq, Ack: seq})
	for range n {
		if err := r.bld.AddOp(wire.OpDesc{Opcode: wire.OpFetchAtomic, Access: wire.AccessRead | wire.AccessWrite,
			RKey: 1, RespLen: 8, Flags: wire.OpFirst | wire.OpLast}, le64(1), nil); err != nil {
			r.t.Fatal(err)
		}
	}
	if _, err := r.conn.WriteToUDP(r.bld.Finish(), r.dst); err != nil {
		r.t.Fatal(err)
	}
}

// rawResponse is one datagram the raw initiator received.
type rawResponse struct {
	session, seq uint32
	values       []uint64 // the fetched values, one per op
	err          string   // why the datagram is not a whole, successful response
}

// responses collects the datagrams that arrive until want have come (5 s
// at most), and any that follow within linger.
func (r *rawInitiator) responses(want int, linger time.Duration) []rawResponse {
	r.t.Helper()
	var out []rawResponse
	var p wire.Packet
	in := make([]byte, 2048)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if len(out) == want {
			deadline = time.Now().Add(linger)
		}
		_ = r.conn.SetReadDeadline(deadline)
		n, _, err := r.conn.ReadFromUDP(in)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			r.t.Fatal(err)
		}
		if err := wire.Decode(in[:n], &p); err != nil {
			out = append(out, rawResponse{err: err.Error()})
			continue
		}
		if p.Type != wire.TypeResp {
			out = append(out, rawResponse{err: "type " + p.Type.String()})
			continue
		}
		rr := rawResponse{session: p.Session, seq: p.Seq}
		for i := range int(p.NumOps) {
			if p.Resps[i].Errno != 0 || len(p.Payload(i)) != 8 {
				rr.err = "op failed or short"
				break
			}
			rr.values = append(rr.values, binary.LittleEndian.Uint64(p.Payload(i)))
		}
		out = append(out, rr)
	}
}

// TestSessionResetKeepsQueuedResponse: a request opening a new session
// clears the peer's response cache while the previous session's response
// to the same cache entry may still be queued for sending (both requests
// in one received batch). The new session's response must not be written
// into that queued buffer: each request gets exactly its one response,
// whole. (Before the fix: the old session's response was lost, the new
// one arrived twice, once with the old response's length.)
func TestSessionResetKeepsQueuedResponse(t *testing.T) {
	for _, gap := range []time.Duration{0, 3 * time.Millisecond} {
		t.Run(gap.String(), func(t *testing.T) {
			tgt := newTestTarget(64)
			// Manual progress: both requests wait in the socket and are
			// received in one batch, as a busy target receives them.
			target := newEngine(t, listenTransport(t, netOpts{}, 0), withEP(Config{ManualProgress: true}, 2), tgt, nil)
			r := newRawInitiator(t, target.LocalAddr())
			const a, b = 0xA1, 0xB2
			for pair := range uint32(20) {
				sa, sb := a+pair<<8, b+pair<<8
				r.fetchAdds(sa, 1, 2) // opens session sa, two ops
				time.Sleep(gap)
				r.fetchAdds(sb, 1, 1) // the initiator restarted: session sb, one op
				for got := 0; got < 2; {
					n, err := target.Progress(true)
					if err != nil {
						t.Fatal(err)
					}
					got += n
				}
				base := uint64(3 * pair)
				resps := r.responses(2, 10*time.Millisecond)
				want := []rawResponse{{session: sa, seq: 1, values: []uint64{base, base + 1}},
					{session: sb, seq: 1, values: []uint64{base + 2}}}
				if len(resps) != 2 {
					t.Fatalf("pair %d: %d responses %+v, want exactly %+v", pair, len(resps), resps, want)
				}
				for i, w := range want {
					g := resps[i]
					if g.err != "" || g.session != w.session || g.seq != w.seq || !slices.Equal(g.values, w.values) {
						t.Fatalf("pair %d: response %d is %+v, want %+v (all: %+v)", pair, i, g, w, resps)
					}
				}
			}
		})
	}
}
