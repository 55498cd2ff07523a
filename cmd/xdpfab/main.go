// Command xdpfab attaches xdpfab's XDP program to an interface, removes it,
// and reports its state and counters.
//
//	xdpfab [-n NETNS] attach IFACE [--mode auto|native|generic] [--port N]... [--av-id N] [--domain-id N] [--strict]
//	xdpfab [-n NETNS] detach IFACE
//	xdpfab [-n NETNS] status [IFACE] [-o text|json]
//	xdpfab [-n NETNS] stats [IFACE] [--watch] [--interval D] [--count N] [-o text|json]
//	xdpfab [-n NETNS] bench serve|run|local [flags]   (xdpfab bench help)
//
// attach pins the program, its link and maps under /sys/fs/bpf/xdpfab/IFACE/
// so it stays attached after xdpfab exits and library processes find the
// maps; it is idempotent. -n runs the command in a named network namespace
// (as `ip -n`) while keeping the host's bpffs, which `ip netns exec` hides.
//
// Exit status: 0 success, 1 error, 2 usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, nil))
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// errUsage marks a command-line error (exit 2).
var errUsage = errors.New("usage")

const usage = `usage:
  xdpfab [-n NETNS] attach IFACE [--mode auto|native|generic] [--port N]... [--av-id N] [--domain-id N] [--strict]
  xdpfab [-n NETNS] detach IFACE
  xdpfab [-n NETNS] status [IFACE] [-o text|json]
  xdpfab [-n NETNS] stats [IFACE] [--watch] [--interval D] [--count N] [-o text|json]
  xdpfab [-n NETNS] bench serve|run|local [flags]   (xdpfab bench help)
`

// run is the whole command; stop, if not nil, ends `stats --watch` and
// `bench` when closed (tests), as SIGINT does.
func run(args []string, stdout, stderr io.Writer, stop <-chan struct{}) int {
	global := flag.NewFlagSet("xdpfab", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	nsName := global.String("n", "", "network namespace (name under /var/run/netns) to run in")
	if err := global.Parse(args); err != nil {
		return usageError(stderr, err)
	}
	rest := global.Args()
	if len(rest) == 0 {
		return usageError(stderr, errors.New("no command"))
	}
	cmd, cmdArgs := rest[0], rest[1:]
	var fn func([]string, io.Writer, <-chan struct{}) error
	switch cmd {
	case "attach":
		fn = cmdAttach
	case "detach":
		fn = cmdDetach
	case "status":
		fn = cmdStatus
	case "stats":
		fn = cmdStats
	case "bench":
		// bench writes its progress line on stderr.
		fn = func(args []string, stdout io.Writer, stop <-chan struct{}) error {
			return cmdBench(args, stdout, stderr, stop)
		}
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		return usageError(stderr, fmt.Errorf("unknown command %q", cmd))
	}

	err := inNetns(*nsName, func() error { return fn(cmdArgs, stdout, stop) })
	if errors.Is(err, errUsage) && cmd == "bench" {
		fmt.Fprintf(stderr, "xdpfab: %v\n%s", err, benchUsage)
		return exitUsage
	}
	if errors.Is(err, errUsage) {
		return usageError(stderr, err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "xdpfab %s: %v\n", cmd, err)
		return exitError
	}
	return exitOK
}

func usageError(stderr io.Writer, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	fmt.Fprintf(stderr, "xdpfab: %v\n%s", err, usage)
	return exitUsage
}

// inNetns runs fn with this OS thread in the named network namespace (all
// of xdpfab's netlink and attach calls happen on it), then returns the
// thread to its namespace. The mount namespace, and so bpffs, is unchanged.
func inNetns(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("network namespace %q: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace %q: %w", name, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked so Go retires it with its goroutine.
		return errors.Join(ferr, fmt.Errorf("leave network namespace %q: %w", name, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// parseInterspersed parses fs from args allowing flags after positional
// arguments (`attach IFACE --mode native`), and returns the positionals.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// portList is a repeatable --port flag.
type portList []uint16

func (p *portList) String() string { return fmt.Sprint(*p) }

func (p *portList) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("port %q is not in 1..65535", s)
	}
	*p = append(*p, uint16(n))
	return nil
}

// outputFlag is -o text|json.
type outputFlag string

func (o *outputFlag) String() string { return string(*o) }

func (o *outputFlag) Set(s string) error {
	if s != "text" && s != "json" {
		return fmt.Errorf("output %q is not text or json", s)
	}
	*o = outputFlag(s)
	return nil
}

// interrupted returns a channel closed on SIGINT/SIGTERM or when stop is
// closed, and a function releasing the signal handler.
func interrupted(stop <-chan struct{}) (<-chan struct{}, func()) {
	done := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	quit := make(chan struct{})
	go func() {
		select {
		case <-sig:
		case <-stop:
		case <-quit:
			return
		}
		close(done)
	}()
	return done, func() {
		signal.Stop(sig)
		close(quit)
	}
}

// sleep waits d or until done is closed; it reports whether d elapsed.
func sleep(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
