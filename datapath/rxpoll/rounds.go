package rxpoll

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Rounds. A RoundHook is told when the poller starts running the handlers
// of one round of ready descriptors and when it has run them all. What the
// handlers do in a round belongs together: with thousands of endpoints each
// ready socket's handler completes an operation and its completion posts
// the next one, a datagram on another endpoint's socket. A transport that
// can send many sockets' datagrams in one system call (datapath/udp's
// Options.RingSend, io_uring) holds them from RoundStart and sends them
// all at RoundEnd, one system call per round instead of one per datagram;
// and it may receive a datagram from each of the round's ready sockets in
// one system call at RoundStart, for their handlers to take.
type RoundHook interface {
	// RoundStart is called on the poller's goroutine before a round's
	// first handler, with the descriptors whose handlers the round runs
	// (valid during the call only).
	RoundStart(ready []int)
	// RoundEnd is called on the poller's goroutine after the round's
	// last handler. It must not block for long: every registration waits.
	RoundEnd()
}

var (
	hooksMu sync.Mutex
	hooks   atomic.Pointer[[]RoundHook] // copied on change: the poller reads it every round without a lock
)

// AddRoundHook has the process's poller (whichever is running now or
// later) call h around each round, until the returned function removes
// it. A round under way when h is removed may still end with h's RoundEnd
// once, on the poller's goroutine; remove does not wait for it.
func AddRoundHook(h RoundHook) (remove func()) {
	hooksMu.Lock()
	defer hooksMu.Unlock()
	var cur []RoundHook
	if p := hooks.Load(); p != nil {
		cur = *p
	}
	next := append(slices.Clip(cur), h)
	hooks.Store(&next)
	var once sync.Once
	return func() {
		once.Do(func() {
			hooksMu.Lock()
			defer hooksMu.Unlock()
			cur := *hooks.Load()
			i := slices.Index(cur, h)
			if i < 0 {
				return
			}
			next := slices.Delete(slices.Clone(cur), i, i+1)
			hooks.Store(&next)
		})
	}
}

// roundHooks returns the hooks for this round.
func roundHooks() []RoundHook {
	if p := hooks.Load(); p != nil {
		return *p
	}
	return nil
}
