package testenv

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// CPUTimer measures the CPU time the benchmark's thread spends in the
// loop and reports it as cpu-ns/op beside ns/op: on a machine shared with
// other work wall time per op includes time spent descheduled, CPU time
// does not (make bench-control compares it with the CPU time peers.c
// measures the same way, CLOCK_THREAD_CPUTIME_ID). It locks the goroutine
// to its thread until the returned func, which the caller runs right
// after the loop. Work the op hands to other threads is not counted.
func CPUTimer(b *testing.B) func() {
	runtime.LockOSThread()
	start := ThreadCPU(b)
	return func() {
		d := ThreadCPU(b) - start
		runtime.UnlockOSThread()
		b.ReportMetric(float64(d)/float64(b.N), "cpu-ns/op")
	}
}

// ThreadCPU is the calling thread's CPU time in nanoseconds
// (CLOCK_THREAD_CPUTIME_ID), for benchmarks that time part of a loop; the
// caller keeps its goroutine on one thread (runtime.LockOSThread).
func ThreadCPU(tb testing.TB) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		tb.Fatal(err)
	}
	return ts.Nano()
}
