package veth

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// TestTaggedMessages: tagged traffic between the namespaces, over every
// transport: a ping-pong checked message by message, and rendezvous
// messages (64 MiB, 16 MiB under -race) checked byte for byte, to a
// receive posted before the message and to one posted after it arrived,
// tagged and untagged.
func TestTaggedMessages(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		net := newNet(t, tc, netOpts{})
		a, b := net.nodes[sideA][0], net.target()

		t.Run("pingpong", func(t *testing.T) {
			const rounds = 2000
			ping, pong := make([]byte, 8), make([]byte, 8)
			for i := range uint64(rounds) {
				require.NoError(t, b.ep.TRecv(ping, mr.Desc{}, fi.AddrUnspec, i, 0, "ping"))
				require.NoError(t, a.ep.TRecv(pong, mr.Desc{}, fi.AddrUnspec, 1<<63|i, 0, "pong"))
				require.NoError(t, a.ep.TSend(binary.LittleEndian.AppendUint64(nil, i), mr.Desc{}, a.peers[0], i, nil))
				c, src := recvFrom(t, b.rxCQ)
				require.Equal(t, fi.RECV|fi.TAGGED, c.Flags)
				require.Equal(t, i, c.Tag)
				require.Equal(t, b.peers[0], src)
				require.Equal(t, i, binary.LittleEndian.Uint64(ping))
				require.NoError(t, b.ep.TSend(ping, mr.Desc{}, b.peers[0], 1<<63|i, nil))
				c = waitComp(t, a.rxCQ)
				require.Equal(t, 1<<63|i, c.Tag)
				require.Equal(t, i, binary.LittleEndian.Uint64(pong))
				waitComp(t, a.txCQ)
				waitComp(t, b.txCQ)
			}
		})

		t.Run("rendezvous", func(t *testing.T) {
			size := 64 << 20
			if raceEnabled || testing.Short() {
				size = 16 << 20
			}
			msg := pattern(size, 3)
			rb := make([]byte, size)
			for _, tagged := range []bool{true, false} {
				for _, posted := range []bool{true, false} {
					clear(rb)
					recv := func() {
						if tagged {
							require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, 0xb16, 0, "r"))
						} else {
							require.NoError(t, b.ep.Recv(rb, mr.Desc{}, fi.AddrUnspec, "r"))
						}
					}
					if posted {
						recv()
					}
					if tagged {
						require.NoError(t, a.ep.TSendData(msg, mr.Desc{}, 42, a.peers[0], 0xb16, "s"))
					} else {
						require.NoError(t, a.ep.SendData(msg, mr.Desc{}, 42, a.peers[0], "s"))
					}
					if !posted {
						time.Sleep(20 * time.Millisecond) // let the RTS arrive: it waits as a header
						recv()
					}
					c := waitComp(t, b.rxCQ)
					require.Equal(t, size, c.Len)
					require.Equal(t, uint64(42), c.Data)
					require.True(t, bytes.Equal(msg, rb), "%d bytes, tagged %v, posted %v: intact", size, tagged, posted)
					require.Equal(t, "s", waitComp(t, a.txCQ).Context)
				}
			}
		})
	})
}

// TestTaggedRendezvous1GiB: one 1 GiB tagged send to a posted receive,
// byte for byte. It needs 2 GiB of memory and some seconds: opt in with
// XDPFAB_1GIB=1.
func TestTaggedRendezvous1GiB(t *testing.T) {
	if os.Getenv("XDPFAB_1GIB") == "" {
		t.Skip("set XDPFAB_1GIB=1 to move 1 GiB")
	}
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		net := newNet(t, tc, netOpts{})
		a, b := net.nodes[sideA][0], net.target()
		size := fabric.MaxMsgSize
		msg := pattern(size, 11)
		rb := make([]byte, size)
		start := time.Now()
		require.NoError(t, b.ep.TRecv(rb, mr.Desc{}, fi.AddrUnspec, 1, 0, "r"))
		require.NoError(t, a.ep.TSend(msg, mr.Desc{}, a.peers[0], 1, "s"))
		buf := make([]fabric.CQEntry, 1)
		n, err := b.rxCQ.SRead(buf, 5*60*1000)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, size, buf[0].Len)
		t.Logf("1 GiB in %v", time.Since(start))
		require.True(t, bytes.Equal(msg, rb))
		waitComp(t, a.txCQ)
	})
}

// TestTaggedMatchingOrder: four senders send tagged messages (a million
// in all; fewer with -short or -race) to one receiver, which keeps
// receives posted of three kinds, mixed at random: full wildcards, one
// sender's messages (the sequence bits ignored), and one sender's
// messages of one tag class. Every message is received exactly once, with
// its tag; and for every kind of receive, the receives of that kind, in
// posting order, get each sender's messages in send order (what
// fi_tagged(3)'s rules imply whether a message finds its receive posted
// or waits unexpected). Senders stay within the unexpected queue's bound
// of the receiver.
func TestTaggedMatchingOrder(t *testing.T) {
	testenv.RequirePriv(t)
	const senders = 4
	total := 1_000_000
	if testing.Short() {
		total = 100_000
	}
	if raceEnabled {
		total = 20_000
	}
	perSender := total / senders
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		net := newNet(t, tc, netOpts{nA: senders})
		matchingOrder(t, net, perSender)
	})
}

// Tags: sender in bits 32..39, a class (sequence mod tagClasses) in bits
// 0..3, the sequence in bits 8..31.
const tagClasses = 16

func orderTag(sender, seq int) uint64 {
	return uint64(sender)<<32 | uint64(seq)<<8 | uint64(seq%tagClasses)
}

// recvKind is one kind of receive: its tag and ignore bits. Kinds are
// numbered: 0 full wildcard, 1+s sender s, 1+senders+s*tagClasses+c
// sender s's class c.
type recvKind struct{ tag, ignore uint64 }

func kindOf(k, senders int) recvKind {
	switch {
	case k == 0:
		return recvKind{0, ^uint64(0)}
	case k <= senders:
		return recvKind{uint64(k-1) << 32, 1<<32 - 1}
	}
	k -= 1 + senders
	s, c := k/tagClasses, k%tagClasses
	return recvKind{uint64(s)<<32 | uint64(c), 1<<32 - 1 - (tagClasses - 1)}
}

// orderRecv is one receive: its kind and, once completed, what it got.
type orderRecv struct {
	kind        int
	sender, seq int
	done        bool
}

func matchingOrder(t *testing.T, net *testNet, perSender int) {
	b := net.target()
	senders := len(net.nodes[sideA])
	total := perSender * senders
	const window = 256   // receives kept posted
	const maxAhead = 768 // messages a sender side may have unreceived (the unexpected queue holds 1024)
	deadline := time.Now().Add(3 * time.Minute)
	var received atomic.Int64
	var sentTotal atomic.Int64

	// Senders: each keeps up to 64 sends in flight.
	var wg sync.WaitGroup
	errs := make(chan error, senders+1)
	for s, n := range net.nodes[sideA] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- sendOrdered(n, s, perSender, deadline, func() bool {
				return sentTotal.Load()-received.Load() < maxAhead
			}, &sentTotal)
		}()
	}

	// The receiver.
	rng := rand.New(rand.NewPCG(1, 2))
	nkinds := 1 + senders + senders*tagClasses
	var recvs []orderRecv
	got := make([][]bool, senders)
	for s := range got {
		got[s] = make([]bool, perSender)
	}
	buf := make([]byte, 8*window)
	free := make([]int, 0, window) // free buffer slots
	for i := range window {
		free = append(free, i)
	}
	slotOf := map[int]int{} // receive index -> buffer slot
	nonWild := 0
	post := func() {
		k := 0
		if nonWild < window/2 && rng.IntN(2) == 0 {
			k = 1 + rng.IntN(nkinds-1)
		}
		if k != 0 {
			nonWild++
		}
		idx := len(recvs)
		recvs = append(recvs, orderRecv{kind: k})
		slot := free[len(free)-1]
		free = free[:len(free)-1]
		slotOf[idx] = slot
		kd := kindOf(k, senders)
		require.NoError(t, b.ep.TRecv(buf[slot*8:slot*8+8], mr.Desc{}, fi.AddrUnspec, kd.tag, kd.ignore, idx))
	}
	for range window {
		post()
	}
	comps := make([]fabric.CQEntry, 64)
	for received.Load() < int64(total) {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d messages in time", received.Load(), total)
		}
		n, err := b.rxCQ.SRead(comps, 100)
		if errors.Is(err, fi.EAGAIN) {
			continue
		}
		require.NoError(t, err)
		for _, c := range comps[:n] {
			idx := c.Context.(int)
			slot := slotOf[idx]
			delete(slotOf, idx)
			v := binary.LittleEndian.Uint64(buf[slot*8:])
			s, seq := int(v>>32), int(uint32(v))
			// Plain checks: this loop runs a million times.
			if s >= senders || seq >= perSender || got[s][seq] {
				t.Fatalf("message %d/%d: unknown or received twice", s, seq)
			}
			got[s][seq] = true
			r := &recvs[idx]
			kd := kindOf(r.kind, senders)
			if c.Tag != orderTag(s, seq) || (c.Tag^kd.tag)&^kd.ignore != 0 {
				t.Fatalf("message %d/%d: tag %#x, taken by a receive of kind %d", s, seq, c.Tag, r.kind)
			}
			r.sender, r.seq, r.done = s, seq, true
			if r.kind != 0 {
				nonWild--
			}
			free = append(free, slot)
			received.Add(1)
			post()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// What is still posted matched nothing: cancel it.
	left := 0
	for idx := range slotOf {
		require.NoError(t, b.ep.Cancel(idx))
		left++
	}
	for range left {
		buf := make([]fabric.CQEntry, 1)
		_, err := b.rxCQ.SRead(buf, int(compTimeout.Milliseconds()))
		require.ErrorIs(t, err, fi.EAVAIL)
		e, err := b.rxCQ.ReadErr(0)
		require.NoError(t, err)
		require.Equal(t, fi.ECANCELED, e.Err)
	}
	for s := range got {
		require.NotContains(t, got[s], false, "sender %d: every message received", s)
	}
	// Per kind, in posting order, each sender's sequence numbers rise.
	last := make([][]int, nkinds)
	for k := range last {
		last[k] = slices.Repeat([]int{-1}, senders)
	}
	counts := make([]int, 3)
	for idx, r := range recvs {
		if !r.done {
			continue
		}
		require.Greater(t, r.seq, last[r.kind][r.sender],
			"receive %d (kind %d) got %d/%d after an older receive of its kind got %d",
			idx, r.kind, r.sender, r.seq, last[r.kind][r.sender])
		last[r.kind][r.sender] = r.seq
		counts[min(r.kind, 1)+min(max(r.kind-senders, 0), 1)]++
	}
	t.Logf("%d messages: %d by wildcards, %d by sender receives, %d by class receives", total, counts[0], counts[1], counts[2])
}

// sendOrdered sends sender s's messages 0..n-1 in order, tagged, each
// carrying (s, seq), keeping up to 64 in flight while may() allows.
func sendOrdered(n *node, s, count int, deadline time.Time, may func() bool, sent *atomic.Int64) error {
	const depth = 64
	msgs := make([][]byte, depth)
	for i := range msgs {
		msgs[i] = make([]byte, 8)
	}
	comps := make([]fabric.CQEntry, depth)
	inflight, next, free := 0, 0, make([]int, 0, depth)
	for i := range depth {
		free = append(free, i)
	}
	for next < count || inflight > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("sender %d: %d of %d sent in time: %w", s, next, count, fi.ETIMEDOUT)
		}
		for next < count && len(free) > 0 && may() {
			slot := free[len(free)-1]
			binary.LittleEndian.PutUint64(msgs[slot], uint64(s)<<32|uint64(next))
			err := n.ep.TSend(msgs[slot], mr.Desc{}, n.peers[0], orderTag(s, next), slot)
			if errors.Is(err, fi.EAGAIN) {
				break
			}
			if err != nil {
				return fmt.Errorf("sender %d: tsend %d: %w", s, next, err)
			}
			free = free[:len(free)-1]
			inflight++
			next++
			sent.Add(1)
		}
		if inflight == 0 {
			time.Sleep(50 * time.Microsecond) // held back: the receiver is behind
			continue
		}
		k, err := n.txCQ.SRead(comps, 100)
		if errors.Is(err, fi.EAGAIN) {
			continue
		}
		if err != nil {
			e, _ := n.txCQ.ReadErr(0)
			return fmt.Errorf("sender %d: completion: %w (%v)", s, err, e.Err)
		}
		for _, c := range comps[:k] {
			free = append(free, c.Context.(int))
			inflight--
		}
	}
	return nil
}
