package reliable

import (
	"encoding/binary"
	"net/netip"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

// Answers: delayed acknowledgements that ride on the reverse direction's
// data, as TCP's delayed ACK does. A response that says nothing but
// "delivered, every op succeeded, no bytes back" (a message's, a write's,
// a non-fetching atomic's) and that the receive side deferred (deferRx)
// does not go out as a packet of its own when a request to the same peer
// leaves with it: the request carries it (wire.HdrAnswers: the peer's
// session, the last sequence number answered and how many before it).
// A message ping-pong then costs two frames per round trip instead of
// four; the deferral's backstops (the next batch, the timer within
// RetryInitial) still send a response that finds no request to ride on.
//
// Loss and exactly-once are unchanged: the response stays in the
// target's cache as always, so an initiator whose answering request was
// lost retransmits at its RTO and gets the cached response; a
// retransmitted request answers nothing (retransmit clears the answers,
// which may be stale by then), and answers for sequence numbers not in
// flight, or of another session, are ignored like duplicate responses.

// foldAnswers moves the queued simple responses (simpleResponse) onto
// queued requests to the same peer, contiguous runs of sequence numbers
// per request, and takes them out of rxOut. rxMu and mu are held.
func (e *Engine) foldAnswers() {
	if len(e.txq) == 0 || len(e.rxOut) == 0 {
		return
	}
	folded := 0
	for i := range e.rxOut {
		r := &e.rxOut[i]
		if !simpleResponse(r.Buf) {
			continue
		}
		dst := binary.LittleEndian.Uint32(r.Buf[12:])
		session := binary.LittleEndian.Uint32(r.Buf[20:])
		seq := binary.LittleEndian.Uint32(r.Buf[24:])
		if foldAnswer(e.txq, r.Addr, dst, session, seq) {
			r.Buf = nil
			folded++
		}
	}
	if folded == 0 {
		return
	}
	e.stats.answersSent.Add(uint64(folded))
	e.compactRxOut()
}

// foldAnswer makes a request in txq to (addr, ep) answer seq of session:
// one that answers nothing yet, or extends the run one already answers.
func foldAnswer(txq []datapath.Packet, addr netip.AddrPort, ep, session, seq uint32) bool {
	for j := range txq {
		q := txq[j].Buf
		if txq[j].Addr != addr || wire.Type(q[2]) != wire.TypeReq || binary.LittleEndian.Uint32(q[12:]) != ep {
			continue
		}
		if q[3]&wire.HdrAnswers == 0 {
			wire.PutAnswer(q, session, seq, 1)
			return true
		}
		n := binary.LittleEndian.Uint16(q[6:])
		if binary.LittleEndian.Uint32(q[32:]) == session && binary.LittleEndian.Uint32(q[36:])+1 == seq && n < maxAnswers {
			wire.PutAnswer(q, session, seq, n+1)
			return true
		}
	}
	return false
}

// maxAnswers bounds the run one request answers (the count's 16 bits).
const maxAnswers = 1<<16 - 1

// simpleResponse reports whether the encoded packet b is a response
// that an answer says all of: to a first transmission and sent for the
// first time (wire.HdrOriginal, which answers stand for), no other flag
// (not held, not lost), no selective ack (a gap the initiator should hear
// about at once), every op a success, no response bytes.
func simpleResponse(b []byte) bool {
	if len(b) < wire.HeaderLen || wire.Type(b[2]) != wire.TypeResp || b[3] != wire.HdrOriginal ||
		binary.LittleEndian.Uint64(b[32:]) != 0 {
		return false
	}
	n := int(binary.LittleEndian.Uint16(b[4:]))
	if len(b) != wire.HeaderLen+n*wire.RespDescLen {
		return false // response bytes follow the descriptors
	}
	for i := 0; i < n; i++ {
		if binary.LittleEndian.Uint32(b[wire.HeaderLen+i*wire.RespDescLen+4:]) != 0 {
			return false // an errno: the initiator needs the descriptor
		}
	}
	return true
}

// handleAnswers completes our requests that the packet pk (a REQ or ACK
// with wire.HdrAnswers) answers, as the responses it stands for would.
// Answers to nothing in flight (late, duplicated, another session's) are
// ignored. e.mu is held.
func (e *Engine) handleAnswers(pk *wire.Packet, src netip.AddrPort, out *[]Completion) {
	session, last, n := pk.Answer()
	if n == 0 || pk.DstEP != e.cfg.EndpointID {
		return // handleRequest and handleResponse count the wrong endpoint
	}
	p := e.txPeerOf(Peer{src, pk.SrcEP})
	if p == nil || session != p.session {
		return
	}
	a := &e.rxAns
	for seq := last - uint32(n) + 1; ; seq++ {
		if seq-p.base < p.nextSeq-p.base {
			if s := p.slot(seq); s != nil && s.seq == seq {
				a.Header = wire.Header{Type: wire.TypeResp, Flags: wire.HdrOriginal, NumOps: uint16(s.nsegs),
					SrcEP: pk.SrcEP, DstEP: pk.DstEP, Session: session, Seq: seq}
				for i := 0; i < s.nsegs; i++ {
					a.Resps[i] = wire.RespDesc{Opcode: e.ops[s.segs[i].op].req.Opcode}
				}
				e.matchResponse(p, a, out)
			}
		}
		if seq == last {
			break
		}
	}
	e.pump(p)
}

// Gathered acknowledgements: the simple responses a batch leaves to send
// (a write's, a message's: one per request packet, and a 4 KiB write is
// three packets) go out as one ACK per run of consecutive sequence
// numbers of one peer (wire.HdrAnswers on an ACK) instead of a RESP each.
// The packets, not their bytes, are what a software datapath pays for:
// each frame is a socket buffer, a pass of the emulated wire and of the
// XDP program, and a receive at the initiator. What a response of its own
// would add (the target's receive state at that request) the ACK carries
// for the last one, as TCP's cumulative ack. Loss is as for answers on a
// request: the responses stay cached, and a lost ACK costs the initiator
// a retransmission answered from the cache.

// gatherAnswers replaces each run of two or more simple responses in
// rxOut to one peer, consecutive sequence numbers of one session, with
// one ACK answering them, placed where the run's first response was.
// rxMu is held.
func (e *Engine) gatherAnswers() {
	if len(e.rxOut) < 2 {
		return
	}
	runs := e.ansRuns[:0]
	for i := range e.rxOut {
		b := e.rxOut[i].Buf
		if !simpleResponse(b) {
			continue
		}
		dst := binary.LittleEndian.Uint32(b[12:])
		session := binary.LittleEndian.Uint32(b[20:])
		seq := binary.LittleEndian.Uint32(b[24:])
		k := 0
		for ; k < len(runs); k++ {
			r := &runs[k]
			if r.last+1 == seq && r.n < maxAnswers && r.session == session && r.dst == dst && e.rxOut[r.first].Addr == e.rxOut[i].Addr {
				break
			}
		}
		if k == len(runs) {
			runs = append(runs, answerRun{first: i, session: session, dst: dst, last: seq - 1})
		}
		r := &runs[k]
		r.last = seq
		r.n++
		r.ack = binary.LittleEndian.Uint32(b[28:])
		if r.n > 1 {
			e.rxOut[i].Buf = nil // answered by the run's ACK
		}
	}
	gathered := 0
	for k := range runs {
		r := &runs[k]
		if r.n < 2 {
			continue
		}
		first := e.rxOut[r.first].Buf
		off := len(e.ansBuf)
		e.ansBuf = e.ansBuf[:off+wire.HeaderLen]
		e.rxOut[r.first].Buf = wire.EncodeAnswersAck(e.ansBuf[off:off+wire.HeaderLen:off+wire.HeaderLen],
			wire.Header{SrcEP: binary.LittleEndian.Uint32(first[8:]), DstEP: r.dst, AuthKey: binary.LittleEndian.Uint32(first[16:])},
			r.session, r.last, r.ack, 0, uint16(r.n))
		gathered += r.n
	}
	e.ansRuns = runs[:0]
	if gathered == 0 {
		return
	}
	e.stats.answersSent.Add(uint64(gathered))
	e.compactRxOut()
}

// answerRun is a run of simple responses gatherAnswers found: rxOut's
// index of the first, the peer's endpoint id, session, last sequence
// number, the Ack field of the last and how many.
type answerRun struct {
	first        int
	dst, session uint32
	last, ack    uint32
	n            int
}

// compactRxOut drops the responses of rxOut that an answer took over
// (their Buf set to nil), keeping the others in order. rxMu is held.
func (e *Engine) compactRxOut() {
	kept := e.rxOut[:0]
	for _, r := range e.rxOut {
		if r.Buf != nil {
			kept = append(kept, r)
		}
	}
	clear(e.rxOut[len(kept):])
	e.rxOut = kept
}
