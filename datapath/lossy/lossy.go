// Package lossy wraps a datapath.Transport and makes its sending side
// unreliable on purpose: it drops, duplicates and reorders outgoing
// datagrams at configured rates, driven by a seeded PCG generator so a test
// run can be reproduced, and fails whole Send calls on demand (FailSends),
// as a socket does that refuses a batch (ENOBUFS, a firewall's EPERM). It
// exists to test the reliability engine; wrap both ends to make both
// directions lossy.
//
// Reordering holds a packet back (copied into one of a fixed set of
// buffers) and releases it after the next one to three Send calls, so a
// held packet is overtaken by later ones. When every hold buffer is busy a
// packet is sent in order. Nothing allocates once the buffers exist.
package lossy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/fi"
)

// Config sets the impairment rates, each a probability in [0, 1].
type Config struct {
	Seed      uint64
	Loss      float64 // drop the packet
	Duplicate float64 // send it twice
	Reorder   float64 // hold it back behind later packets
	// RecvLoss drops received datagrams, for losses a sender cannot be
	// made to cause (responses the target's XDP program sends itself).
	RecvLoss float64
	// HoldSlots bounds the packets held for reordering (default 64).
	HoldSlots int
	// MaxPacket is the size of each hold buffer (default 65507).
	MaxPacket int
}

// Stats counts what the wrapper did.
type Stats struct {
	Sent, Dropped, Duplicated, Reordered uint64
	Failed                               uint64 // Send calls failed by FailSends (their packets dropped)
}

type held struct {
	buf   []byte
	n     int
	addr  netip.AddrPort
	delay int  // Send calls left before release
	busy  bool // holds a packet (also while it is being released)
}

// Transport is the impairing wrapper.
type Transport struct {
	inner datapath.Transport
	cfg   Config

	mu    sync.Mutex // guards everything below
	rng   *rand.Rand
	hold  []held
	out   []datapath.Packet
	stats Stats
	fails int   // Send calls still to fail (FailSends)
	err   error // ... with this error
}

var _ datapath.Transport = (*Transport)(nil)

// Wrap returns inner with impaired sending.
func Wrap(inner datapath.Transport, cfg Config) (*Transport, error) {
	for _, r := range []float64{cfg.Loss, cfg.Duplicate, cfg.Reorder, cfg.RecvLoss} {
		if r < 0 || r > 1 || r != r {
			return nil, fmt.Errorf("lossy: rate %v out of [0,1]: %w", r, fi.EINVAL)
		}
	}
	if cfg.HoldSlots == 0 {
		cfg.HoldSlots = 64
	}
	if cfg.MaxPacket == 0 {
		cfg.MaxPacket = 65507
	}
	t := &Transport{inner: inner, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	t.hold = make([]held, cfg.HoldSlots)
	t.out = make([]datapath.Packet, 0, 2*inner.BatchSize()+cfg.HoldSlots)
	return t, nil
}

// Unwrap returns the wrapped transport (the fabric layer configures an
// AF_XDP transport through the wrapper).
func (t *Transport) Unwrap() datapath.Transport { return t.inner }

// Stats returns a snapshot of the counters.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Receive passes through, dropping Config.RecvLoss of the datagrams
// (counted in Stats.Dropped): a dropped one is swapped behind the ones
// kept, so every buffer stays in pkts.
func (t *Transport) Receive(pkts []datapath.Packet, wait bool) (int, error) {
	n, err := t.inner.Receive(pkts, wait)
	if t.cfg.RecvLoss == 0 || n == 0 {
		return n, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := 0
	for i := 0; i < n; i++ {
		if t.rng.Float64() < t.cfg.RecvLoss {
			t.stats.Dropped++
			continue
		}
		pkts[kept], pkts[i] = pkts[i], pkts[kept]
		kept++
	}
	return kept, err
}

// FailSends makes the next n Send calls drop their whole batch and return
// err, as a socket that refuses a batch does.
func (t *Transport) FailSends(n int, err error) {
	t.mu.Lock()
	t.fails, t.err = n, err
	t.mu.Unlock()
}

// Send impairs pkts and sends what survives, plus held packets now due.
func (t *Transport) Send(pkts []datapath.Packet) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fails > 0 && len(pkts) > 0 {
		t.fails--
		t.stats.Failed++
		t.stats.Dropped += uint64(len(pkts))
		return fmt.Errorf("lossy: injected send failure: %w", t.err)
	}
	for len(pkts) > 0 {
		chunk := pkts
		if len(chunk) > t.inner.BatchSize() {
			chunk = chunk[:t.inner.BatchSize()]
		}
		pkts = pkts[len(chunk):]
		out := t.out[:0]
		for i := range t.hold {
			h := &t.hold[i]
			if h.busy && h.delay > 0 {
				if h.delay--; h.delay == 0 {
					out = append(out, datapath.Packet{Buf: h.buf[:h.n], Addr: h.addr})
				}
			}
		}
		for _, p := range chunk {
			switch {
			case t.rng.Float64() < t.cfg.Loss:
				t.stats.Dropped++
				continue
			case t.rng.Float64() < t.cfg.Reorder && len(p.Buf) <= t.cfg.MaxPacket && t.holdPacket(p):
				t.stats.Reordered++
				continue
			}
			out = append(out, p)
			if t.rng.Float64() < t.cfg.Duplicate {
				out = append(out, p)
				t.stats.Duplicated++
			}
		}
		if err := t.flushOut(out); err != nil {
			return err
		}
	}
	return nil
}

// flushOut sends out and frees the hold slots released into it (only after
// the send, so a slot's buffer is not reused while it is queued).
func (t *Transport) flushOut(out []datapath.Packet) error {
	t.stats.Sent += uint64(len(out))
	t.out = out[:0]
	var err error
	if len(out) > 0 {
		err = t.inner.Send(out)
	}
	for i := range t.hold {
		if t.hold[i].busy && t.hold[i].delay <= 0 {
			t.hold[i].busy = false
		}
	}
	return err
}

// Flush sends every held packet now.
func (t *Transport) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.out[:0]
	for i := range t.hold {
		if h := &t.hold[i]; h.busy {
			h.delay = 0
			out = append(out, datapath.Packet{Buf: h.buf[:h.n], Addr: h.addr})
		}
	}
	return t.flushOut(out)
}

func (t *Transport) holdPacket(p datapath.Packet) bool {
	for i := range t.hold {
		h := &t.hold[i]
		if !h.busy {
			if h.buf == nil {
				h.buf = make([]byte, t.cfg.MaxPacket)
			}
			h.n = copy(h.buf, p.Buf)
			h.addr = p.Addr
			h.delay = 1 + t.rng.IntN(3)
			h.busy = true
			return true
		}
	}
	return false
}

// PollFDs implements datapath.Pollable for an inner transport that does:
// the wrapper impairs only the sending side.
func (t *Transport) PollFDs(dst []unix.PollFd) ([]unix.PollFd, bool) {
	if p, ok := t.inner.(datapath.Pollable); ok {
		return p.PollFDs(dst)
	}
	return dst, false
}

// PollFD implements datapath.SharedPollable for an inner transport that
// does (only sends are impaired).
func (t *Transport) PollFD() (int, bool) {
	if p, ok := t.inner.(datapath.SharedPollable); ok {
		return p.PollFD()
	}
	return -1, false
}

// ErrorReady passes through.
func (t *Transport) ErrorReady() {
	if p, ok := t.inner.(datapath.SharedPollable); ok {
		p.ErrorReady()
	}
}

// BatchSize passes through.
func (t *Transport) BatchSize() int { return t.inner.BatchSize() }

// LocalAddr passes through.
func (t *Transport) LocalAddr() netip.AddrPort { return t.inner.LocalAddr() }

// Close closes the inner transport.
func (t *Transport) Close() error { return t.inner.Close() }
