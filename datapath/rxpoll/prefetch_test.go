package rxpoll

import (
	"testing"

	"golang.org/x/sys/unix"
)

// prefetchHandler logs its Prefetch and Ready calls and drains its eventfd.
type prefetchHandler struct {
	fd   int
	name string
	l    *roundLog
}

func (h *prefetchHandler) Prefetch() { h.l.add("prefetch " + h.name) }

func (h *prefetchHandler) Ready(uint32) {
	var buf [8]byte
	if _, err := unix.Read(h.fd, buf[:]); err == nil {
		h.l.add(h.name)
	}
}

// TestPrefetchBeforeRound: a Prefetcher's Prefetch runs in its round before
// the round's hooks and before any handler, for every ready Prefetcher of
// the round (two here), and a plain Handler in the same round gets none.
func TestPrefetchBeforeRound(t *testing.T) {
	a, b, c, g := eventFD(t), eventFD(t), eventFD(t), eventFD(t)
	for _, fd := range []int{a, b, c, g} {
		defer unix.Close(fd)
	}
	l := &roundLog{}
	remove := AddRoundHook(l)
	defer remove()
	gate := make(chan struct{})
	rg, err := Register(g, handlerFunc(func(uint32) {
		var buf [8]byte
		if _, err := unix.Read(g, buf[:]); err == nil {
			l.add("gate")
		}
		<-gate
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer rg.Remove()
	// Hold the poller in a round while a, b and c become ready, so that
	// the next round has all three.
	signal(t, g)
	waitFor(t, "the gate handler", func() bool { return len(l.snapshot()) >= 2 })
	for _, h := range []*prefetchHandler{{fd: a, name: "a", l: l}, {fd: b, name: "b", l: l}} {
		r, err := Register(h.fd, h)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Remove()
	}
	rc, err := Register(c, handlerFunc(func(uint32) {
		var buf [8]byte
		if _, err := unix.Read(c, buf[:]); err == nil {
			l.add("c")
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Remove()
	signal(t, a)
	signal(t, b)
	signal(t, c)
	close(gate)
	// start1 gate end, then prefetch a/b, start3, a b c in any order, end.
	waitFor(t, "the second round", func() bool { return len(l.snapshot()) >= 10 })
	got := l.snapshot()
	if len(got) != 10 || got[2] != "end" || got[5] != "start3" || got[9] != "end" {
		t.Fatalf("calls %v, want start1 gate end, prefetch a and b, start3, a b c, end", got)
	}
	pf := map[string]bool{got[3]: true, got[4]: true}
	ran := map[string]bool{got[6]: true, got[7]: true, got[8]: true}
	if !pf["prefetch a"] || !pf["prefetch b"] || !ran["a"] || !ran["b"] || !ran["c"] {
		t.Fatalf("calls %v, want a and b prefetched before the round's hooks and handlers", got)
	}
}
