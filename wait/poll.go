package wait

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// PollFD blocks until fd is readable or timeout passes (negative: forever)
// and reports whether it became readable. It is the application's half of
// the fi_trywait(3) protocol for FI_WAIT_FD objects: call TryWait on the
// queue, and if it returns nil, PollFD on the fd from Control(GetWait).
//
// poll(2) fails with EINTR whenever a signal lands on the thread, and the Go
// runtime signals its threads routinely (goroutine preemption), so a bare
// unix.Poll fails spuriously. PollFD retries with the time that remains.
func PollFD(fd int, timeout time.Duration) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	var deadline time.Time
	if timeout >= 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		ms := -1
		if timeout >= 0 {
			left := time.Until(deadline)
			if left < 0 {
				left = 0
			}
			// Round up: a 0.5 ms remainder must not become a busy 0 ms poll.
			ms = int((left + time.Millisecond - 1) / time.Millisecond)
		}
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("wait: poll fd %d: %w", fd, err)
		}
		return n > 0 && fds[0].Revents&unix.POLLIN != 0, nil
	}
}
