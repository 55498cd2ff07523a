package main

/*
#include "xdpfab.h"
*/
import "C"

import (
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"

	"github.com/xdpfab/xdpfab/fi"
)

// defaultMaxProcs bounds the Go runtime of a provider that lives in every
// rank of an MPI job. It is also the floor: a rank pinned to one CPU (as
// MPI launchers bind ranks) still gets two Ps. With one, a reader back from
// a poll(2) longer than sysmon's 20 µs finds its P taken by the engine's
// timer goroutine and waits for it through several context switches: in a
// pinned tagged ping-pong the mean round trip was 90-95 µs and p99
// 1.6-2.0 ms with one P, 36 µs and 0.22 ms with two (p50 within 2 µs).
// A P is not a thread: the second costs nothing while idle.
const defaultMaxProcs = 2

func init() {
	runtime.GOMAXPROCS(maxProcs(os.Getenv("XDPFAB_GOMAXPROCS"), os.Getenv("GOMAXPROCS")))
	C.xf_runtime_init()
}

// maxProcs is the GOMAXPROCS the provider runs with: XDPFAB_GOMAXPROCS if
// set and valid, else the user's GOMAXPROCS if set (the runtime already
// read it), else defaultMaxProcs, whatever the CPUs of the process's
// affinity mask.
func maxProcs(xdpfabEnv, goEnv string) int {
	if n, err := strconv.Atoi(xdpfabEnv); err == nil && n > 0 {
		return n
	}
	if n, err := strconv.Atoi(goEnv); err == nil && n > 0 {
		return n
	}
	return defaultMaxProcs
}

// errnoRet is what an exported function returns: a negative libfabric
// errno or a non-negative result.
type errnoRet interface {
	~int32 | ~int64 | ~int
}

// catch is deferred by every exported function: a panic becomes
// -FI_EOTHER, logged with its stack, instead of unwinding into C.
func catch[T errnoRet](ret *T) {
	if r := recover(); r != nil {
		log.Printf("xdpfab provider: panic: %v\n%s", r, debug.Stack())
		*ret = T(-fi.EOTHER)
	}
}

// errno is the negative libfabric errno of err (0 for nil).
func errno[T errnoRet](err error) T {
	return T(-fi.ErrnoOf(err))
}

// logf logs a provider notice; FI_LOG_LEVEL=info or debug shows them.
func logf(format string, args ...any) {
	if verbose {
		log.Output(2, fmt.Sprintf("xdpfab provider: "+format, args...))
	}
}

var verbose = func() bool {
	switch os.Getenv("FI_LOG_LEVEL") {
	case "info", "debug", "trace":
		return true
	}
	return false
}()

//export xfgo_cleanup
func xfgo_cleanup() {
	defer func() { _ = recover() }()
}
