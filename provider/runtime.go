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
// rank of an MPI job.
const defaultMaxProcs = 2

func init() {
	runtime.GOMAXPROCS(maxProcs(os.Getenv("XDPFAB_GOMAXPROCS"), os.Getenv("GOMAXPROCS"), runtime.NumCPU()))
	C.xf_runtime_init()
}

// maxProcs is the GOMAXPROCS the provider runs with: XDPFAB_GOMAXPROCS if
// set and valid, else the user's GOMAXPROCS if set (the runtime already
// read it), else min(defaultMaxProcs, cpus).
func maxProcs(xdpfabEnv, goEnv string, cpus int) int {
	if n, err := strconv.Atoi(xdpfabEnv); err == nil && n > 0 {
		return n
	}
	if n, err := strconv.Atoi(goEnv); err == nil && n > 0 {
		return n
	}
	return min(defaultMaxProcs, cpus)
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
