package testenv

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Sleeper runs fn on a goroutine locked to its own OS thread and lets a
// test see whether that thread is asleep in poll(2): the way to check that
// a blocking call waits in the kernel instead of spinning, without timing
// anything. Wait returns fn's result.
type Sleeper struct {
	tid  chan int
	done chan error
	id   int
}

// StartSleeper starts fn on a locked thread.
func StartSleeper(fn func() error) *Sleeper {
	s := &Sleeper{tid: make(chan int, 1), done: make(chan error, 1)}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s.tid <- unix.Gettid()
		s.done <- fn()
	}()
	s.id = <-s.tid
	return s
}

// pollSyscalls are poll(2) and ppoll(2) on amd64 and arm64 (arm64 has no
// plain poll).
var pollSyscalls = map[string]map[int]bool{
	"amd64": {7: true, 271: true},
	"arm64": {73: true},
}

// InPoll reports whether the thread is blocked in poll or ppoll now, from
// /proc/self/task/TID/syscall (the number of the system call it sleeps in,
// "running" when it is not in one).
func (s *Sleeper) InPoll() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/syscall", s.id))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return false
	}
	nr, err := strconv.Atoi(f[0])
	return err == nil && pollSyscalls[runtime.GOARCH][nr]
}

// WaitInPoll fails tb unless the thread is seen blocked in poll(2) within
// limit (checked every millisecond), and unless it stays there for a
// second look 20 ms later: a spinning thread that happens to pass through
// a poll call is not taken for a sleeping one.
func (s *Sleeper) WaitInPoll(tb testing.TB, limit time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if s.InPoll() {
			time.Sleep(20 * time.Millisecond)
			if s.InPoll() {
				return
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			tb.Fatalf("the sleeper returned (%v) instead of sleeping in poll(2)", err)
		default:
		}
		time.Sleep(time.Millisecond)
	}
	tb.Fatalf("thread %d never slept in poll(2) within %v", s.id, limit)
}

// Wait returns fn's result, failing tb if it does not come within limit.
func (s *Sleeper) Wait(tb testing.TB, limit time.Duration) error {
	tb.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(limit):
		tb.Fatalf("the sleeper did not return within %v", limit)
		return nil
	}
}
