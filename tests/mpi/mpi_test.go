// Package mpi runs Open MPI programs over xdpfab: two ranks in two network
// namespaces joined by veth, xdpfab's XDP program attached on both ends,
// Debian's Open MPI 4.1 loading xdpfab's provider through libfabric
// (scripts/mpi-run.sh, the same command `make demo-mpi` runs):
//
//   - examples/mpi/onesided.c through osc rdma and btl ofi (pml ob1 over
//     btl ofi for the window's setup messages): MPI_Win_allocate,
//     MPI_Fetch_and_op, MPI_Compare_and_swap, MPI_Accumulate, MPI_Put and
//     MPI_Get with MPI_Win_flush.
//   - examples/mpi/p2p.c through pml cm and mtl ofi (tagged messages):
//     send/recv from 0 B to 8 MiB, wildcards, out-of-order tags, probes,
//     MPI_Issend, a rank to itself, and MPI_Bcast, MPI_Allreduce,
//     MPI_Allgather and MPI_Barrier.
//
// The ofi components may pick only xdpfab and no other transport is
// enabled; the XDP program's counters show the traffic arriving on both
// ends through AF_XDP. Every run is bounded in time, and whatever it
// leaves in the namespaces (Open MPI's daemons detach themselves) is
// killed before they are removed, also when the test fails.
//
// Needs root, openmpi-bin and libopenmpi-dev (mpicc, mpirun), gcc and
// libfabric-dev; skips with a reason otherwise.
package mpi

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// runTimeout bounds one mpirun; mpirun's own --timeout (XDPFAB_MPI_TIMEOUT)
// is shorter, so a hung job is reported by Open MPI first.
const (
	runTimeout = 180 * time.Second
	mpiTimeout = 150
)

// minPackets is the least number of xdpfab datagrams each end's XDP
// program must have redirected to AF_XDP during a run: the programs
// exchange megabytes, so a run that moved fewer went another way.
const minPackets = 1000

type mpiCase struct {
	name string // examples/mpi/NAME.c
	mode string // mpi-run.sh's osc or mtl
	ok   string // the line rank 0 prints last
}

var cases = []mpiCase{
	{name: "onesided", mode: "osc", ok: "onesided: OK"},
	{name: "p2p", mode: "mtl", ok: "p2p: OK"},
	{name: "p2p", mode: "osc", ok: "p2p: OK"},
}

func TestMPI(t *testing.T) {
	testenv.RequirePriv(t)
	root, provDir, bin := prepare(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	veth := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	attach(t, a, veth.NameA)
	attach(t, b, veth.NameB)
	// Registered after the namespaces, so it runs before they go.
	t.Cleanup(func() {
		killIn(t, a.Name)
		killIn(t, b.Name)
	})
	for _, c := range cases {
		t.Run(c.mode+"/"+c.name, func(t *testing.T) {
			before := [2]xdp.Counters{counters(t, a, veth.NameA), counters(t, b, veth.NameB)}
			out, err := mpiRun(root, provDir, c.mode, a.Name, b.Name, filepath.Join(bin, c.name))
			killIn(t, a.Name)
			killIn(t, b.Name)
			if err != nil {
				t.Fatalf("mpi-run.sh %s %s: %v\n%s", c.mode, c.name, err, tail(out, 40))
			}
			if !strings.Contains(out, c.ok) {
				t.Fatalf("no %q in the output:\n%s", c.ok, tail(out, 40))
			}
			after := [2]xdp.Counters{counters(t, a, veth.NameA), counters(t, b, veth.NameB)}
			for i, end := range []string{veth.NameA, veth.NameB} {
				got := after[i][bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK] - before[i][bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK]
				if got < minPackets {
					t.Errorf("%s: the XDP program redirected %d xdpfab datagrams to AF_XDP, want at least %d", end, got, minPackets)
				}
				t.Logf("%s: %d xdpfab datagrams through AF_XDP", end, got)
			}
			t.Log(tail(out, 12))
		})
	}
}

// prepare builds the provider and the MPI programs into temporary
// directories, or skips when the tools are missing.
func prepare(t *testing.T) (root, provDir, bin string) {
	t.Helper()
	for _, tool := range []string{"mpicc", "mpirun", "gcc", "nsenter", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (apt-get install openmpi-bin libopenmpi-dev; scripts/deps.sh)", tool)
		}
	}
	if _, err := os.Stat("/usr/include/rdma/providers/fi_prov.h"); err != nil {
		t.Skip("libfabric-dev is not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	provDir, bin = t.TempDir(), t.TempDir()
	build := exec.Command("sh", filepath.Join(root, "scripts/build-provider.sh"), provDir)
	build.Env = append(os.Environ(), "GO="+filepath.Join(runtime.GOROOT(), "bin", "go"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build provider: %v\n%s", err, out)
	}
	for _, name := range []string{"onesided", "p2p"} {
		out, err := exec.Command("mpicc", "-O2", "-Wall", "-o", filepath.Join(bin, name),
			filepath.Join(root, "examples/mpi", name+".c")).CombinedOutput()
		if err != nil {
			t.Fatalf("mpicc %s: %v\n%s", name, err, out)
		}
	}
	return root, provDir, bin
}

func attach(t *testing.T, ns *testenv.Netns, iface string) {
	t.Helper()
	err := ns.Do(func() error {
		a, err := xdp.Attach(iface, xdp.Options{Mode: xdp.ModeNative})
		if err != nil {
			return err
		}
		return a.Close() // the pinned link keeps it attached
	})
	if err != nil {
		t.Fatalf("attach xdpfab on %s: %v", iface, err)
	}
	t.Cleanup(func() { _ = ns.Do(func() error { return xdp.Detach(iface) }) })
}

func counters(t *testing.T, ns *testenv.Netns, iface string) xdp.Counters {
	t.Helper()
	var c xdp.Counters
	err := ns.Do(func() error {
		a, err := xdp.Open(iface)
		if err != nil {
			return err
		}
		defer a.Close()
		c, err = a.Counters()
		return err
	})
	if err != nil {
		t.Fatalf("counters of %s: %v", iface, err)
	}
	return c
}

// mpiRun runs scripts/mpi-run.sh in its own process group, killed when
// runTimeout passes.
func mpiRun(root, provDir, mode, nsA, nsB, prog string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", filepath.Join(root, "scripts/mpi-run.sh"), mode, nsA, nsB, prog)
	cmd.Env = append(os.Environ(), "FI_PROVIDER_PATH="+provDir, "XDPFAB_MPI_TIMEOUT="+strconv.Itoa(mpiTimeout))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%v (killed after %v)", err, runTimeout)
	}
	return out.String(), err
}

// killIn kills every process in the named network namespace (Open MPI's
// daemons leave mpirun's process group) and waits for them to go.
func killIn(t *testing.T, ns string) {
	t.Helper()
	for try := 0; try < 50; try++ {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err != nil {
			return // the namespace is gone
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			return
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("processes still in namespace %s after SIGKILL", ns)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	kept := lines[:0]
	for _, l := range lines {
		// btl/mtl ofi's verbose list of providers it skipped.
		if !strings.Contains(l, "not in include list") {
			kept = append(kept, l)
		}
	}
	if len(kept) > n {
		kept = append([]string{"..."}, kept[len(kept)-n:]...)
	}
	return strings.Join(kept, "\n")
}
