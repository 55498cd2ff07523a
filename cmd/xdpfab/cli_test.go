package main

import (
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/internal/bpffs"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// TestHelp: every way of asking for help prints usage, with the flags of
// the command asked about, to stdout and exits 0, without needing the
// namespace of -n.
func TestHelp(t *testing.T) {
	overview := []string{"usage:", "xdpfab [-n NETNS] attach IFACE", "xdpfab --version", "global flags:", "Exit status:"}
	flagsOf := map[string][]string{
		"attach": {"usage: xdpfab [-n NETNS] attach IFACE", "flags:", "--mode MODE", "--port PORT", "--av-id ID", "--domain-id ID", "--strict", "(default auto)"},
		"detach": {"usage: xdpfab [-n NETNS] detach IFACE", "never touched"},
		"status": {"usage: xdpfab [-n NETNS] status [IFACE]", "flags:", "-o FORMAT", "(default text)", "exits 0"},
		"stats":  {"usage: xdpfab [-n NETNS] stats [IFACE]", "flags:", "--watch", "--interval duration", "(default 1s)", "--count N", "-o FORMAT", "--listen ADDR"},
		"info":   {"usage: xdpfab [-n NETNS] info", "flags:", "-p NAME", "-e TYPE", "-c CAPS", "-a FORMAT", "-n NODE", "-s SERVICE", "--src", "-v"},
	}
	type tc struct {
		args []string
		want []string
	}
	cases := []tc{
		{[]string{"-h"}, overview},
		{[]string{"--help"}, overview},
		{[]string{"-help"}, overview},
		{[]string{"help"}, overview},
		{[]string{"help", "help"}, overview},
		{[]string{"-n", "xfT-no-such-netns", "--help"}, overview},
		{[]string{"bench", "help"}, []string{"bench serve --addr", "bench run --peer"}},
		{[]string{"help", "bench"}, []string{"bench serve --addr", "bench run --peer"}},
		{[]string{"bench", "serve", "--help"}, []string{"usage: xdpfab [-n NETNS] bench serve --addr", "--addr", "--duration duration", "--transport"}},
		{[]string{"help", "bench", "run"}, []string{"usage: xdpfab [-n NETNS] bench run --peer", "--peer", "--depth int", "(default 64)"}},
	}
	for cmd, want := range flagsOf {
		cases = append(cases,
			tc{[]string{cmd, "-h"}, want},
			tc{[]string{cmd, "--help"}, want},
			tc{[]string{"help", cmd}, want},
			tc{[]string{cmd, "xfnosuch0", "--help"}, want},           // after a positional
			tc{[]string{cmd, "--bogus", "-h"}, nil},                  // the bad flag wins: see TestUsageErrors
			tc{[]string{"-n", "xfT-no-such-netns", cmd, "-h"}, want}, // no namespace needed
		)
	}
	for _, c := range cases {
		code, stdout, stderr := xdpfab(c.args...)
		if c.want == nil {
			require.Equal(t, exitUsage, code, "args %q", c.args)
			continue
		}
		require.Equal(t, exitOK, code, "args %q: %s", c.args, stderr)
		require.Empty(t, stderr, "args %q", c.args)
		for _, w := range c.want {
			require.Contains(t, stdout, w, "args %q", c.args)
		}
		require.NotContains(t, stdout, "help requested", "args %q", c.args)
	}
}

// TestVersion: --version and version print the module version and the
// XDP program's hash, exit 0.
func TestVersion(t *testing.T) {
	var first string
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}, {"-n", "xfT-no-such-netns", "--version"}} {
		code, stdout, stderr := xdpfab(args...)
		require.Equal(t, exitOK, code, "args %q: %s", args, stderr)
		require.Regexp(t, regexp.MustCompile(`^xdpfab \S+\n`), stdout, "args %q", args)
		require.Regexp(t, regexp.MustCompile(`\nbuilt with go\S+ for \S+/\S+\n`), stdout)
		require.Regexp(t, regexp.MustCompile(`\nXDP program xdpfab_xdp sha256 [0-9a-f]{16}\n$`), stdout)
		if first == "" {
			first = stdout
		}
		require.Equal(t, first, stdout)
	}
}

// TestUsageErrors: bad command lines print the error and usage (the
// command's, with its flags) to stderr, nothing to stdout, and exit 2.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{}, []string{"no command", "usage:"}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`, "usage:"}},
		{[]string{"help", "frobnicate"}, []string{`unknown command "frobnicate"`, "usage:"}},
		{[]string{"--bogus"}, []string{"-bogus", "usage:"}},
		{[]string{"-n"}, []string{"usage:"}},
		{[]string{"attach"}, []string{"attach takes one interface", "--mode MODE"}},
		{[]string{"attach", "a", "b"}, []string{"attach takes one interface", "--mode MODE"}},
		{[]string{"attach", "eth0", "--mode", "turbo"}, []string{"turbo", "--mode MODE"}},
		{[]string{"attach", "eth0", "--port", "0"}, []string{"--port PORT"}},
		{[]string{"attach", "eth0", "--port", "70000"}, []string{"--port PORT"}},
		{[]string{"attach", "eth0", "--bogus"}, []string{"flag provided but not defined: -bogus", "--mode MODE"}},
		{[]string{"attach", "--bogus", "-h"}, []string{"-bogus", "--mode MODE"}},
		{[]string{"detach"}, []string{"detach takes one interface", "usage: xdpfab [-n NETNS] detach IFACE"}},
		{[]string{"detach", "-x"}, []string{"-x", "usage: xdpfab [-n NETNS] detach IFACE"}},
		{[]string{"status", "a", "b"}, []string{"at most one interface", "-o FORMAT"}},
		{[]string{"status", "-o", "yaml"}, []string{"yaml", "-o FORMAT"}},
		{[]string{"status", "--nope"}, []string{"-nope", "-o FORMAT"}},
		{[]string{"stats", "--interval", "0s"}, []string{"--interval", "--watch"}},
		{[]string{"stats", "-x"}, []string{"-x", "--watch"}},
	} {
		code, stdout, stderr := xdpfab(c.args...)
		require.Equal(t, exitUsage, code, "args %q", c.args)
		require.Empty(t, stdout, "args %q", c.args)
		require.Contains(t, stderr, "usage:", "args %q", c.args)
		for _, w := range c.want {
			require.Contains(t, stderr, w, "args %q", c.args)
		}
		require.NotContains(t, stderr, "help requested", "args %q", c.args)
	}
}

// TestNothingAttachedExitCodes: in a namespace where xdpfab is attached
// nowhere, status and stats list nothing and exit 0 (as ip and xdp-loader
// do for an empty list); naming an interface without xdpfab is an error,
// for status, stats and detach alike.
func TestNothingAttachedExitCodes(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	for _, c := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"status"}, exitOK, "xdpfab is not attached to any interface of this network namespace\n", ""},
		{[]string{"status", "-o", "json"}, exitOK, "[]\n", ""},
		{[]string{"stats"}, exitOK, "xdpfab is not attached to any interface of this network namespace\n", ""},
		{[]string{"stats", "-o", "json"}, exitOK, "", ""},
		{[]string{"stats", "--watch", "--count", "3", "--interval", "10ms"}, exitOK, "xdpfab is not attached to any interface of this network namespace\n", ""},
		{[]string{"status", v.NameB}, exitError, "", "not attached"},
		{[]string{"stats", v.NameB}, exitError, "", "not attached"},
		{[]string{"detach", v.NameB}, exitError, "", "not attached"},
		{[]string{"detach", "lo"}, exitError, "", "not attached"},
		{[]string{"status", "xfnosuch0"}, exitError, "", `no such interface "xfnosuch0"`},
		{[]string{"stats", "xfnosuch0"}, exitError, "", `no such interface "xfnosuch0"`},
		{[]string{"detach", "xfnosuch0"}, exitError, "", `no such interface "xfnosuch0"`},
	} {
		code, stdout, stderr := xdpfab(append([]string{"-n", b.Name}, c.args...)...)
		require.Equal(t, c.code, code, "args %q: %s", c.args, stderr)
		require.Equal(t, c.stdout, stdout, "args %q", c.args)
		if c.stderr == "" {
			require.Empty(t, stderr, "args %q", c.args)
		} else {
			require.Contains(t, stderr, c.stderr, "args %q", c.args)
		}
	}
}

// sideEffectsChildEnv selects the child part of TestFailingCommandsChangeNothing.
const sideEffectsChildEnv = "XDPFAB_CLI_SIDE_EFFECTS_CHILD"

// TestFailingCommandsChangeNothing: detach, status and stats that find
// nothing create no directory and mount nothing. They run in a child
// process with mount and network namespaces of its own: a fresh bpffs (or
// none at all) on /sys/fs/bpf and an empty tmpfs on /run, which must stay
// as they were.
func TestFailingCommandsChangeNothing(t *testing.T) {
	if mode := os.Getenv(sideEffectsChildEnv); mode != "" {
		sideEffectsChild(t, mode)
		return
	}
	testenv.RequirePriv(t)
	for _, mode := range []string{"bpffs", "no-bpffs"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestFailingCommandsChangeNothing$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), sideEffectsChildEnv+"="+mode)
			// Mounts private to the child; a network namespace with only lo.
			cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET}
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "child:\n%s", out)
			require.Contains(t, string(out), "child: all checks ran", "child:\n%s", out)
		})
	}
}

func sideEffectsChild(t *testing.T, mode string) {
	fstype := "bpf"
	if mode == "no-bpffs" {
		fstype = "tmpfs"
	}
	require.NoError(t, unix.Mount(fstype, bpffs.Root, fstype, 0, "mode=0700"), "mount %s on %s", fstype, bpffs.Root)
	require.NoError(t, unix.Mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"), "mount tmpfs on /run")
	var before unix.Statfs_t
	require.NoError(t, unix.Statfs(bpffs.Root, &before))
	// A fresh bpffs holds the kernel's maps.debug and progs.debug.
	names := func(dir string) []string {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		var n []string
		for _, e := range entries {
			n = append(n, e.Name())
		}
		return n
	}
	rootBefore := names(bpffs.Root)

	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"detach", "lo"}, exitError},
		{[]string{"detach", "xfnosuch0"}, exitError},
		{[]string{"detach"}, exitUsage},
		{[]string{"status"}, exitOK},
		{[]string{"status", "-o", "json"}, exitOK},
		{[]string{"status", "lo"}, exitError},
		{[]string{"stats"}, exitOK},
		{[]string{"stats", "lo"}, exitError},
		{[]string{"stats", "--bogus"}, exitUsage},
		{[]string{"attach", "xfnosuch0"}, exitError},
		{[]string{"attach", "lo", "--mode", "turbo"}, exitUsage},
	} {
		code, _, stderr := xdpfab(c.args...)
		require.Equal(t, c.code, code, "args %q: %s", c.args, stderr)
		require.Equal(t, rootBefore, names(bpffs.Root), "args %q left something in %s", c.args, bpffs.Root)
		require.Empty(t, names("/run"), "args %q left something in /run", c.args)
		var after unix.Statfs_t
		require.NoError(t, unix.Statfs(bpffs.Root, &after))
		require.Equal(t, before.Type, after.Type, "args %q mounted something on %s", c.args, bpffs.Root)
		require.NoDirExists(t, xdp.RunDir)
	}
	// Not a vacuous check: a command that does something shows up here.
	code, _, stderr := xdpfab("attach", "lo", "--mode", "generic")
	require.Equal(t, exitOK, code, stderr)
	require.NotEmpty(t, names(bpffs.Dir))
	code, _, stderr = xdpfab("detach", "lo")
	require.Equal(t, exitOK, code, stderr)
	t.Log("child: all checks ran")
}
