// Command xdpfab attaches xdpfab's XDP program to an interface, removes it,
// and reports its state, owners and counters.
//
//	xdpfab [-n NETNS] attach IFACE [--mode auto|native|generic] [--port N]... [--av-id N] [--domain-id N] [--strict] [--multiprog [--priority N]]
//	xdpfab [-n NETNS] detach IFACE
//	xdpfab [-n NETNS] status [IFACE] [-o text|json]
//	xdpfab [-n NETNS] stats [IFACE] [--watch] [--interval D] [--count N] [-o text|json] [--listen ADDR]
//	xdpfab [-n NETNS] info [-p PROV] [-e EPTYPE] [-c CAPS] [-a ADDRFMT] [-n NODE] [-s SERVICE] [--src] [-v] [-o text|json]
//	xdpfab [-n NETNS] bench serve|run|local [flags]   (xdpfab bench help)
//	xdpfab --version
//	xdpfab help [COMMAND]
//
// attach pins the program, its link and maps under
// /sys/fs/bpf/xdpfab/NETNS/IFINDEX/ (NETNS: the namespace's inode number)
// so it stays attached after xdpfab exits and library processes find the
// maps; it is idempotent. Every command acts on the interfaces of one
// network namespace only: a same-named interface elsewhere is invisible.
// -n runs the command in a named network namespace (as `ip -n`) while
// keeping the host's bpffs, which `ip netns exec` hides.
//
// -h, --help and help print usage with the flags to stdout and exit 0; a
// command that fails changes nothing (no directory created, no bpffs
// mounted).
//
// Exit status: 0 success (status and stats without IFACE also when nothing
// is attached), 1 error (also an IFACE where xdpfab is not attached), 2
// usage.
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
	"strings"
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

// commands by name; bench writes its progress line on stderr.
func commandFunc(name string, stderr io.Writer) func([]string, io.Writer, <-chan struct{}) error {
	switch name {
	case "attach":
		return cmdAttach
	case "detach":
		return cmdDetach
	case "status":
		return cmdStatus
	case "stats":
		return cmdStats
	case "info":
		return cmdInfo
	case "bench":
		return func(args []string, stdout io.Writer, stop <-chan struct{}) error {
			return cmdBench(args, stdout, stderr, stop)
		}
	}
	return nil
}

// run is the whole command; stop, if not nil, ends `stats --watch` and
// `bench` when closed (tests), as SIGINT does.
func run(args []string, stdout, stderr io.Writer, stop <-chan struct{}) int {
	global := flag.NewFlagSet("xdpfab", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	nsName := global.String("n", "", "network namespace (name under /var/run/netns) to run in")
	version := global.Bool("version", false, "print the version")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return exitOK
		}
		return usageError(stderr, err)
	}
	if *version {
		fmt.Fprint(stdout, versionText())
		return exitOK
	}
	rest := global.Args()
	if len(rest) == 0 {
		return usageError(stderr, errors.New("no command"))
	}
	cmd, cmdArgs := rest[0], rest[1:]
	switch cmd {
	case "help":
		if len(cmdArgs) == 0 || cmdArgs[0] == "help" {
			fmt.Fprint(stdout, usage)
			return exitOK
		}
		// help COMMAND [SUBCOMMAND] is COMMAND [SUBCOMMAND] --help.
		cmd, cmdArgs = cmdArgs[0], append(cmdArgs[1:len(cmdArgs):len(cmdArgs)], "--help")
		if commandFunc(cmd, stderr) == nil {
			return usageError(stderr, fmt.Errorf("help: unknown command %q", cmd))
		}
	case "version":
		fmt.Fprint(stdout, versionText())
		return exitOK
	}
	fn := commandFunc(cmd, stderr)
	if fn == nil {
		return usageError(stderr, fmt.Errorf("unknown command %q", cmd))
	}

	var err error
	if wantsHelp(cmdArgs) {
		// Flag parsing answers it before the command does anything: no
		// namespace to enter.
		err = fn(cmdArgs, stdout, stop)
	} else {
		err = inNetns(*nsName, func() error { return fn(cmdArgs, stdout, stop) })
	}
	var help *helpRequest
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.text)
		return exitOK
	case errors.Is(err, errUsage) && cmd == "bench":
		fmt.Fprintf(stderr, "xdpfab bench: %s\n%s", usageMessage(err), benchUsage)
		return exitUsage
	case errors.Is(err, errUsage):
		// The command's help, flags included: what it answers to --help.
		text := usage
		if herr := fn([]string{"--help"}, io.Discard, stop); errors.As(herr, &help) {
			text = help.text
		}
		fmt.Fprintf(stderr, "xdpfab %s: %s\n%s", cmd, usageMessage(err), text)
		return exitUsage
	}
	fmt.Fprintf(stderr, "xdpfab %s: %v\n", cmd, err)
	return exitError
}

// usageMessage is a usage error's text without the errUsage prefix.
func usageMessage(err error) string {
	return strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
}

func usageError(stderr io.Writer, err error) int {
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
// -h or --help returns a *helpRequest with the command's help.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			return nil, &helpRequest{text: commandHelp(fs)}
		} else if err != nil {
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
