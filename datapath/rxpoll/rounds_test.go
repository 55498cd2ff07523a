package rxpoll

import (
	"fmt"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// roundLog records the calls of a RoundHook and of handlers in order.
type roundLog struct {
	mu  sync.Mutex
	log []string
}

func (l *roundLog) add(s string) {
	l.mu.Lock()
	l.log = append(l.log, s)
	l.mu.Unlock()
}

func (l *roundLog) RoundStart(ready []int) { l.add(fmt.Sprint("start", len(ready))) }
func (l *roundLog) RoundEnd()              { l.add("end") }

func (l *roundLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.log...)
}

// TestRoundHooks: a hook hears RoundStart before a round's handlers and
// RoundEnd after them, with two ready descriptors' handlers in one round
// (and RoundStart told of both);
// once removed it hears nothing more.
func TestRoundHooks(t *testing.T) {
	a, b := eventFD(t), eventFD(t)
	defer unix.Close(a)
	defer unix.Close(b)
	l := &roundLog{}
	remove := AddRoundHook(l)
	defer remove()
	gate := make(chan struct{})
	drain := func(fd int, name string) Handler {
		return handlerFunc(func(uint32) {
			var buf [8]byte
			if _, err := unix.Read(fd, buf[:]); err == nil {
				l.add(name)
			}
			if name == "gate" {
				<-gate
			}
		})
	}
	g := eventFD(t)
	defer unix.Close(g)
	rg, err := Register(g, drain(g, "gate"))
	if err != nil {
		t.Fatal(err)
	}
	defer rg.Remove()
	// Hold the poller in a round while a and b become ready, so that the
	// next round has both.
	signal(t, g)
	waitFor(t, "the gate handler", func() bool { return len(l.snapshot()) >= 2 })
	ra, err := Register(a, drain(a, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Remove()
	rb, err := Register(b, drain(b, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Remove()
	signal(t, a)
	signal(t, b)
	close(gate)
	waitFor(t, "the second round", func() bool { return len(l.snapshot()) >= 7 })
	got := l.snapshot()
	if len(got) != 7 || got[0] != "start1" || got[1] != "gate" || got[2] != "end" || got[3] != "start2" || got[6] != "end" ||
		!(got[4] == "a" && got[5] == "b" || got[4] == "b" && got[5] == "a") {
		t.Fatalf("calls %v, want start1 gate end start2 a b end", got)
	}
	remove()
	signal(t, a)
	waitFor(t, "a's handler", func() bool { return len(l.snapshot()) >= 8 })
	if got := l.snapshot(); len(got) != 8 || got[7] != "a" {
		t.Fatalf("calls after removal %v", got[7:])
	}
}
