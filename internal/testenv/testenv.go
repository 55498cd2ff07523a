// Package testenv gates xdpfab's privileged tests and builds the network
// they run on: network namespaces joined by veth pairs, with 10.x addresses,
// torn down when the test ends, also when it fails or the run is
// interrupted.
//
// Every privileged test starts with RequirePriv. Without root and the
// capabilities BPF and netns work needs, the test is skipped with a one-line
// reason; with XDPFAB_REQUIRE_PRIV=1 in the environment (CI sets it) that
// skip becomes a failure, so CI can never pass by skipping.
//
// Names are unique per test process and test (netns "xfT<pid>-<n>", links
// "xf<pid><n>a/b"), and a run first sweeps namespaces left by test processes
// that no longer exist.
package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// RequirePrivEnv is the environment variable that turns a privilege skip
// into a failure.
const RequirePrivEnv = "XDPFAB_REQUIRE_PRIV"

// Capability numbers (linux/capability.h).
const (
	capNetAdmin = 12
	capSysAdmin = 21
	capBPF      = 39
)

// PrivReason returns why this process cannot run privileged tests, or "" if
// it can: it needs euid 0 with CAP_NET_ADMIN, CAP_SYS_ADMIN (namespaces,
// bpffs) and CAP_BPF effective.
func PrivReason() string {
	if os.Geteuid() != 0 {
		return "needs root (euid 0) for BPF and network namespaces"
	}
	eff, err := effectiveCaps()
	if err != nil {
		return "cannot read capabilities: " + err.Error()
	}
	for _, c := range []struct {
		bit  uint
		name string
	}{{capNetAdmin, "CAP_NET_ADMIN"}, {capSysAdmin, "CAP_SYS_ADMIN"}, {capBPF, "CAP_BPF"}} {
		if eff&(1<<c.bit) == 0 {
			return "needs " + c.name
		}
	}
	return ""
}

// RequirePriv skips tb with a one-line reason when the process lacks the
// privileges of PrivReason, and fails it instead when XDPFAB_REQUIRE_PRIV=1.
func RequirePriv(tb testing.TB) {
	tb.Helper()
	reason := PrivReason()
	if reason == "" {
		return
	}
	if os.Getenv(RequirePrivEnv) == "1" {
		tb.Fatalf("privileged test cannot run (%s) and %s=1 forbids skipping", reason, RequirePrivEnv)
	}
	tb.Skip("privileged test skipped: " + reason)
}

func effectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapEff line in /proc/self/status")
}

// interruptCleanups holds teardown functions that must also run when the
// test binary is interrupted (SIGINT/SIGTERM), where t.Cleanup would not.
var interruptCleanups struct {
	sync.Mutex
	next int
	fns  map[int]func()
	once sync.Once
}

// onInterrupt registers fn to run if the process is interrupted, and
// returns a function that unregisters it (to call once fn has run normally).
func onInterrupt(fn func()) (unregister func()) {
	ic := &interruptCleanups
	ic.once.Do(func() {
		ic.fns = map[int]func(){}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-ch
			ic.Lock()
			for _, f := range ic.fns {
				f()
			}
			ic.Unlock()
			fmt.Fprintf(os.Stderr, "testenv: %v: removed test namespaces and links\n", sig)
			os.Exit(2)
		}()
	})
	ic.Lock()
	id := ic.next
	ic.next++
	ic.fns[id] = fn
	ic.Unlock()
	return func() {
		ic.Lock()
		delete(ic.fns, id)
		ic.Unlock()
	}
}

// RequireTool skips tb with reason when a tool or package a privileged
// test needs is missing (libfabric-dev, gcc, fabtests), and fails it
// instead when XDPFAB_REQUIRE_PRIV=1: CI must run every such test.
func RequireTool(tb testing.TB, missing bool, reason string) {
	tb.Helper()
	if !missing {
		return
	}
	if os.Getenv(RequirePrivEnv) == "1" {
		tb.Fatalf("test cannot run (%s) and %s=1 forbids skipping", reason, RequirePrivEnv)
	}
	tb.Skip("skipped: " + reason)
}
