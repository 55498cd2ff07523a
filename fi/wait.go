package fi

import "strconv"

// WaitObj is enum fi_wait_obj: how a blocking read on an EQ, CQ or counter
// waits.
type WaitObj int

// Wait objects, numbered as in fi_eq.h.
const (
	WaitNone      WaitObj = iota // FI_WAIT_NONE: no blocking reads
	WaitUnspec                   // FI_WAIT_UNSPEC: the provider's choice
	WaitSet                      // FI_WAIT_SET: a wait set shared with other objects
	WaitFD                       // FI_WAIT_FD: a file descriptor usable with poll/epoll
	WaitMutexCond                // FI_WAIT_MUTEX_COND: a mutex and condition variable
	WaitYield                    // FI_WAIT_YIELD: spin, yielding the CPU
	WaitPollFD                   // FI_WAIT_POLLFD: a set of fds
)

var waitNames = [...]string{
	"FI_WAIT_NONE", "FI_WAIT_UNSPEC", "FI_WAIT_SET", "FI_WAIT_FD",
	"FI_WAIT_MUTEX_COND", "FI_WAIT_YIELD", "FI_WAIT_POLLFD",
}

func (w WaitObj) String() string {
	if w >= 0 && int(w) < len(waitNames) {
		return waitNames[w]
	}
	return "WaitObj(" + strconv.Itoa(int(w)) + ")"
}
