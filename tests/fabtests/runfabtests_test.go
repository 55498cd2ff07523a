package fabtests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// quickTimeout bounds runfabtests.sh's whole quick set on one transport.
const quickTimeout = 15 * time.Minute

// fakeSSH stands in for ssh in runfabtests.sh, which runs the server
// and the client as "ssh [-n] [-o OPT]... HOST COMMAND": HOST is the
// server's or the client's address, and COMMAND runs in that address's
// namespace (nsenter, keeping the host's bpffs; see run).
const fakeSSH = `#!/bin/sh
while [ $# -gt 0 ]; do
	case "$1" in
	-n) shift ;;
	-o) shift 2 ;;
	*) break ;;
	esac
done
host=$1
shift
case "$host" in
%s) ns=%s ;;
%s) ns=%s ;;
*) echo "fake ssh: no namespace for $host" >&2; exit 255 ;;
esac
exec nsenter --net=/var/run/netns/$ns sh -c "$*"
`

// quickID is the knownFailures key of a runfabtests test name
// (`fi_rdm_shared_av -p "xdpfab"` is fi_rdm_shared_av).
func quickID(name string) string {
	id, _, _ := strings.Cut(name, ` -p "xdpfab"`)
	return strings.TrimSpace(id)
}

// runQuick runs runfabtests.sh's quick set (unit, functional and short
// tests) for xdpfab between the pair's namespaces. A test that fails
// fails this one; the tests that report "Notrun" (the provider answers
// FI_ENODATA or FI_ENOSYS on both sides: FI_EP_MSG and FI_EP_DGRAM,
// which xdpfab does not offer, shared and scalable contexts, ...) are
// logged with their names. A test in knownFailures is logged as known.
func runQuick(t *testing.T, p *pair) {
	dir := t.TempDir()
	script := fmt.Sprintf(fakeSSH, serverAddr, p.a.Name, clientAddr, p.b.Name)
	if err := os.WriteFile(filepath.Join(dir, "ssh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), quickTimeout)
	defer cancel()
	began := time.Now()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(p.bin, "runfabtests.sh"), "-p", p.bin, "-t", "quick",
		"-T", "120", "-E", "FI_PROVIDER_PATH="+p.provDir, "xdpfab", serverAddr, clientAddr)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	cmd.Dir = dir // runfabtests.sh writes its temporary output files here
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	t.Logf("runfabtests.sh -t quick: %v", time.Since(began).Round(time.Second))
	var pass, fail, notrun []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, result, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch strings.TrimSpace(result) {
		case "Pass":
			pass = append(pass, name)
		case "Notrun":
			notrun = append(notrun, name)
		case "Fail":
			fail = append(fail, name)
		}
	}
	var known []string
	fail = slices.DeleteFunc(fail, func(name string) bool {
		if _, ok := knownFailures[quickID(name)]; ok {
			known = append(known, name)
			return true
		}
		return false
	})
	for _, name := range pass {
		if reason, ok := knownFailures[quickID(name)]; ok {
			t.Errorf("%s passes now: remove it from knownFailures (%s)", name, reason)
		}
	}
	t.Logf("runfabtests quick set: %d pass, %d notrun, %d known failures %v, %d fail", len(pass), len(notrun), len(known), known, len(fail))
	t.Logf("notrun (FI_ENODATA/FI_ENOSYS on both sides):\n  %s", strings.Join(notrun, "\n  "))
	if len(fail) > 0 {
		t.Errorf("runfabtests quick set failed:\n  %s\n%s", strings.Join(fail, "\n  "), tail(string(out), 40))
	}
	if len(pass) == 0 {
		t.Errorf("runfabtests ran no test (%v):\n%s", err, tail(string(out), 40))
	} else if err != nil && len(fail) == 0 {
		t.Errorf("runfabtests.sh: %v\n%s", err, tail(string(out), 40))
	}
}
