package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// xdpfab runs the command in-process and returns its exit code and output.
func xdpfab(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut, nil)
	return code, out.String(), errOut.String()
}

// cleanupIn detaches xdpfab from iface in ns and removes its pins, whatever
// a test did.
func cleanupIn(ns *testenv.Netns, iface string) {
	_ = ns.Do(func() error {
		dir := xdp.PinDir(iface)
		_ = xdp.Detach(iface)
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return nil
	})
}

func TestAttachStatusStatsDetach(t *testing.T) {
	for _, mode := range []string{"native", "generic"} {
		t.Run(mode, func(t *testing.T) {
			testenv.RequirePriv(t)
			a, b := testenv.NewNetns(t), testenv.NewNetns(t)
			v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
			iface := v.NameB
			t.Cleanup(func() { cleanupIn(b, iface) })

			code, stdout, stderr := xdpfab("-n", b.Name, "attach", iface, "--mode", mode, "--port", "4791", "--port", "4792", "--strict", "--av-id", "1", "--domain-id", "2")
			require.Equal(t, exitOK, code, stderr)
			require.Contains(t, stdout, "xdpfab attached to "+iface+" in "+mode+" mode")

			// Idempotent.
			code, stdout2, stderr := xdpfab("-n", b.Name, "attach", iface)
			require.Equal(t, exitOK, code, stderr)
			require.Equal(t, stdout, stdout2, "re-attach reports the same program")

			code, stdout, stderr = xdpfab("-n", b.Name, "status", iface)
			require.Equal(t, exitOK, code, stderr)
			require.Contains(t, stdout, iface+" (ifindex ")
			require.Contains(t, stdout, mode+" mode, program ")
			require.Contains(t, stdout, "port 4791 (every address): av 1, domain 2, strict")
			require.Contains(t, stdout, "port 4792 (every address): av 1, domain 2, strict")
			require.Contains(t, stdout, "AV map: 0 of ")
			require.Contains(t, stdout, "AF_XDP sockets on RX queues: none")

			code, stdout, stderr = xdpfab("-n", b.Name, "status", "-o", "json")
			require.Equal(t, exitOK, code, stderr)
			var sts []xdp.Status
			require.NoError(t, json.Unmarshal([]byte(stdout), &sts))
			var st *xdp.Status
			for i := range sts {
				if sts[i].Iface == iface {
					st = &sts[i]
				}
			}
			require.NotNil(t, st, "status without IFACE lists %s: %s", iface, stdout)
			require.Equal(t, mode, st.Mode)
			require.NotZero(t, st.ProgramID)
			require.Len(t, st.Ports, 2)
			require.Equal(t, uint32(bpf.AVMapMaxAVs), st.AVMaxAVs)
			require.Equal(t, uint32(8*bpf.MRTableBuckets), st.MRCapacity)

			// Traffic to count: ping B from A (ICMP passes, counted).
			code, stdout, stderr = xdpfab("-n", b.Name, "stats", iface)
			require.Equal(t, exitOK, code, stderr)
			for _, c := range bpf.Counters() {
				require.Contains(t, stdout, c.Name())
			}

			code, stdout, stderr = xdpfab("-n", b.Name, "stats", iface, "--watch", "--count", "2", "--interval", "50ms", "-o", "json")
			require.Equal(t, exitOK, code, stderr)
			sc := bufio.NewScanner(strings.NewReader(stdout))
			var recs []statsRecord
			for sc.Scan() {
				var r statsRecord
				require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
				recs = append(recs, r)
			}
			require.Len(t, recs, 2)
			require.Len(t, recs[0].Counters, len(bpf.Counters()))
			require.Nil(t, recs[0].Rates, "no rate before a second sample")
			require.Len(t, recs[1].Rates, len(bpf.Counters()))
			require.GreaterOrEqual(t, recs[1].Counters["rx_total"], recs[0].Counters["rx_total"])

			// --watch without --count runs until interrupted.
			stop := make(chan struct{})
			done := make(chan int, 1)
			var watchOut lockedBuffer
			go func() {
				done <- run([]string{"-n", b.Name, "stats", iface, "--watch", "--interval", "30ms"}, &watchOut, io.Discard, stop)
			}()
			// Interrupt once two lines are out: a loaded machine can take
			// longer than a few intervals to print them.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(30 * time.Millisecond) {
				if strings.Count(watchOut.String(), " "+iface+" rx ") >= 2 {
					break
				}
			}
			close(stop)
			select {
			case code = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("stats --watch did not stop")
			}
			require.Equal(t, exitOK, code)
			// Compact lines, one per interval after the first sample.
			require.GreaterOrEqual(t, strings.Count(watchOut.String(), " "+iface+" rx "), 2, watchOut.String())
			require.NotContains(t, watchOut.String(), iface+" at ", "--watch does not reprint the table")
			require.Contains(t, watchOut.String(), "/s")

			code, stdout, stderr = xdpfab("-n", b.Name, "detach", iface)
			require.Equal(t, exitOK, code, stderr)
			require.Contains(t, stdout, "detached")
			l, err := b.Netlink().LinkByName(iface)
			require.NoError(t, err)
			require.True(t, l.Attrs().Xdp == nil || l.Attrs().Xdp.ProgId == 0, "no XDP program left")
			require.NoDirExists(t, st.PinDir)

			code, _, stderr = xdpfab("-n", b.Name, "detach", iface)
			require.Equal(t, exitError, code)
			require.Contains(t, stderr, "not attached")
			code, _, stderr = xdpfab("-n", b.Name, "status", iface)
			require.Equal(t, exitError, code)
			require.Contains(t, stderr, "not attached")
		})
	}
}

func TestErrors(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})

	code, _, stderr := xdpfab("-n", b.Name, "attach", "xfnosuch0")
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, `no such interface "xfnosuch0"`)

	code, _, stderr = xdpfab("-n", "xfT-no-such-netns", "status")
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, "xfT-no-such-netns")

	// The interface of A is not in B.
	code, _, stderr = xdpfab("-n", b.Name, "attach", v.NameA)
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, "no such interface")

	// Another XDP program on the interface: named in the error, untouched.
	other, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "someone_else", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	require.NoError(t, err)
	defer other.Close()
	var l link.Link
	require.NoError(t, b.Do(func() (err error) {
		l, err = link.AttachXDP(link.XDPOptions{Program: other, Interface: v.IndexB, Flags: link.XDPGenericMode})
		return err
	}))
	defer l.Close()
	t.Cleanup(func() { cleanupIn(b, v.NameB) })
	code, _, stderr = xdpfab("-n", b.Name, "attach", v.NameB)
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, `XDP program "someone_else" (id `)
	code, _, _ = xdpfab("-n", b.Name, "detach", v.NameB)
	require.Equal(t, exitError, code)
	nl, err := b.Netlink().LinkByName(v.NameB)
	require.NoError(t, err)
	require.NotZero(t, nl.Attrs().Xdp.ProgId, "the other program stays")
}

// TestRefusesPrivateBPFFS runs the built binary under `ip netns exec`,
// which hides the host's bpffs: attaching there would pin into a bpffs
// that vanishes with the command, so xdpfab refuses and says why.
func TestRefusesPrivateBPFFS(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	bin := buildBinary(t)
	t.Cleanup(func() { cleanupIn(b, v.NameB) })

	// Whether `ip netns exec` hides bpffs depends on iproute2; check.
	probe, err := b.Exec("stat", "-f", "-c", "%T", "/sys/fs/bpf")
	if err == nil && strings.TrimSpace(probe) == "bpf_fs" {
		t.Skip("this iproute2 keeps bpffs under ip netns exec")
	}
	cmd := exec.Command("ip", "netns", "exec", b.Name, bin, "attach", v.NameB)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	require.True(t, errors.As(err, &exitErr), "attach under ip netns exec must fail: %v", err)
	require.Equal(t, exitError, exitErr.ExitCode())
	require.Contains(t, stderr.String(), "ip netns exec")
	require.Contains(t, stderr.String(), "xdpfab -n NETNS")
	l, err := b.Netlink().LinkByName(v.NameB)
	require.NoError(t, err)
	require.True(t, l.Attrs().Xdp == nil || l.Attrs().Xdp.ProgId == 0, "nothing attached")

	// The same through -n works.
	code, _, errOut := xdpfab("-n", b.Name, "attach", v.NameB, "--mode", "generic")
	require.Equal(t, exitOK, code, errOut)
}

// buildBinary builds this command into the test's temporary directory,
// for tests that run it as a process of its own, and returns its path.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "xdpfab")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}
