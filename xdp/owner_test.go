package xdp_test

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/xdp"
)

// ownerChildEnv selects the child part of TestDeadOwnerReaped: NETNS:IFACE.
const ownerChildEnv = "XDPFAB_XDP_OWNER_CHILD"

// namedAVID is an av_id of the kind package av gives named AVs (top bit).
const namedAVID = 1<<31 | 5

func avKey(id uint32, port uint16, last byte) bpf.XdpfabAvKey {
	return bpf.XdpfabAvKey{AvId: id, Port: htons(port), Addr: netip.AddrFrom4([4]byte{10, 203, 0, last}).As16()}
}

// ownerChild opens the attachment, claims ports and ids, writes AV and
// MR entries under them, says so and waits to be killed.
func ownerChild(spec string) {
	fail := func(err error) {
		fmt.Println("child error:", err)
		os.Exit(1)
	}
	name, iface, _ := strings.Cut(spec, ":")
	runtime.LockOSThread() // for good: this goroutine stays in the namespace
	h, err := netns.GetFromName(name)
	if err != nil {
		fail(err)
	}
	if err := netns.Set(h); err != nil {
		fail(err)
	}
	a, err := xdp.Open(iface)
	if err != nil {
		fail(err)
	}
	avID, err := a.NewAVID()
	if err != nil {
		fail(err)
	}
	domID, err := a.NewDomainID()
	if err != nil {
		fail(err)
	}
	for port, cfg := range map[uint16]xdp.PortConfig{5000: {AVID: avID, DomainID: domID, Strict: true}, 5002: {AVID: avID}} {
		if err := a.SetPort(port, cfg); err != nil {
			fail(err)
		}
	}
	for id, lasts := range map[uint32][]byte{avID: {1, 2, 3}, namedAVID: {9}} {
		// An entry of a named AV (namedAVID) is the AV's, not the process's.
		if err := putAV(a.AVMap, id, 7000, lasts...); err != nil {
			fail(err)
		}
	}
	mrs, err := mr.NewMapMirror(a.MRMap)
	if err != nil {
		fail(err)
	}
	for k := uint64(1); k <= 2; k++ {
		if err := mrs.Update(&bpf.XdpfabMrKey{DomainId: domID, Key: k}, &bpf.XdpfabMrValue{Base: 4096, Len: 4096}); err != nil {
			fail(err)
		}
	}
	fmt.Printf("ready %d %d\n", avID, domID)
	time.Sleep(time.Minute) // the test kills it long before
	os.Exit(3)
}

// startOwnerChild runs ownerChild in a re-executed test binary and waits
// for it to be ready; it returns the child and its av_id and domain_id.
func startOwnerChild(t *testing.T, ns *testenv.Netns, iface, test string) (*exec.Cmd, uint32, uint32) {
	t.Helper()
	child := testenv.StartChild(t, test, ownerChildEnv+"="+ns.Name+":"+iface)
	cmd, out := child.Cmd, child.Stdout
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") || strings.HasPrefix(sc.Text(), "child error") {
				lines <- sc.Text()
				return
			}
		}
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("owner child did not get ready")
	}
	f := strings.Fields(line)
	require.Len(t, f, 3, "child said %q", line)
	avID, err := strconv.ParseUint(f[1], 10, 32)
	require.NoError(t, err)
	domID, err := strconv.ParseUint(f[2], 10, 32)
	require.NoError(t, err)
	return cmd, uint32(avID), uint32(domID)
}

func ownerRecords(t *testing.T, st *xdp.Status) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(xdp.RunDir, st.Netns.String(), strconv.Itoa(st.Ifindex), fmt.Sprintf("prog-%d", st.ProgramID), "owner-*"))
	require.NoError(t, err)
	return m
}

func countAV(t *testing.T, m *ebpf.Map, id uint32) int {
	t.Helper()
	entries, err := av.KernelEntries(m)
	require.NoError(t, err)
	n := 0
	for k := range entries {
		if k.AvId == id {
			n++
		}
	}
	return n
}

// putAV enters a kernel table for AV id in av_map m (as package av does)
// holding the peers 10.203.0.<last>:port. The table lives while m holds
// it, whatever becomes of this process.
func putAV(m *ebpf.Map, id uint32, port uint16, lasts ...byte) error {
	tm, err := av.NewTableMirror(m, id, len(lasts))
	if err != nil {
		return err
	}
	keys := make([]bpf.XdpfabAvKey, len(lasts))
	vals := make([]bpf.XdpfabAvValue, len(lasts))
	for i, last := range lasts {
		keys[i], vals[i] = avKey(id, port, last), bpf.XdpfabAvValue{FiAddr: uint64(last)}
	}
	_, err = tm.Update(keys, vals)
	return err
}

func portOwner(st *xdp.Status, port uint16) (found bool, owner *xdp.PortOwner) {
	for _, p := range st.Ports {
		if p.Port.Port == port {
			return true, p.Owner
		}
	}
	return false, nil
}

// TestDeadOwnerReaped: a process that set ports, took ids and wrote AV and
// MR entries under them is SIGKILLed; the next Status (Open, SetPort)
// removes exactly what it owned: not the ports of Attach, not a port
// someone else set since, not a live owner's entries, not a named AV's.
func TestDeadOwnerReaped(t *testing.T) {
	if spec := os.Getenv(ownerChildEnv); spec != "" {
		ownerChild(spec)
		return
	}
	p := newPair(t)
	a := p.mustAttach(t, xdp.Options{Mode: xdp.ModeGeneric, Ports: map[uint16]xdp.PortConfig{4791: {AVID: 1}}})

	// This process is a live owner too.
	var myAV uint32
	require.NoError(t, p.b.Do(func() (err error) {
		if myAV, err = a.NewAVID(); err != nil {
			return err
		}
		return a.SetPort(5001, xdp.PortConfig{AVID: myAV})
	}))
	require.NoError(t, putAV(a.AVMap, myAV, 7001, 1, 2))

	child, avID, domID := startOwnerChild(t, p.b, p.v.NameB, "TestDeadOwnerReaped")
	require.NotEqual(t, myAV, avID, "ids are unique across processes")
	require.NotEqual(t, avID, domID)
	// Someone re-sets the child's port 5002 (attach --port): no longer the child's.
	_, err := p.attach(xdp.Options{Ports: map[uint16]xdp.PortConfig{5002: {AVID: 99}}})
	require.NoError(t, err)

	status := func() *xdp.Status {
		var st *xdp.Status
		require.NoError(t, p.b.Do(func() (err error) { st, err = a.Status(); return err }))
		return st
	}
	st := status()
	require.Len(t, st.Owners, 2)
	pids := map[int]xdp.Owner{}
	for _, o := range st.Owners {
		pids[o.PID] = o
	}
	co, ok := pids[child.Process.Pid]
	require.True(t, ok, "the child owns: %+v", st.Owners)
	require.Equal(t, []uint32{avID}, co.AVIDs)
	require.Equal(t, []uint32{domID}, co.DomainIDs)
	require.NotEmpty(t, co.Comm)
	require.NotZero(t, co.StartTime)
	require.Equal(t, []uint32{myAV}, pids[os.Getpid()].AVIDs)
	found, owner := portOwner(st, 5000)
	require.True(t, found)
	require.Equal(t, &xdp.PortOwner{PID: child.Process.Pid, Comm: co.Comm}, owner)
	found, owner = portOwner(st, 5001)
	require.True(t, found)
	require.Equal(t, os.Getpid(), owner.PID)
	found, owner = portOwner(st, 4791)
	require.True(t, found)
	require.Nil(t, owner, "attach's ports belong to nobody")
	found, owner = portOwner(st, 5002)
	require.True(t, found)
	require.Nil(t, owner, "re-set by attach: the child's config is gone")
	require.Equal(t, 3+1+2, st.AVEntries)
	require.Equal(t, 2, st.MREntries)
	require.Len(t, ownerRecords(t, st), 2)

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()

	st = status()
	require.Len(t, st.Owners, 1)
	require.Equal(t, os.Getpid(), st.Owners[0].PID)
	var ports []uint16
	for _, p := range st.Ports {
		ports = append(ports, p.Port.Port)
	}
	require.Equal(t, []uint16{4791, 5001, 5002}, ports, "the child's own port went, the others stay")
	require.Zero(t, countAV(t, a.AVMap, avID), "the child's AV entries went")
	require.Equal(t, 2, countAV(t, a.AVMap, myAV), "a live owner's stay")
	require.Equal(t, 1, countAV(t, a.AVMap, namedAVID), "a named AV's stay")
	require.Zero(t, st.MREntries, "the child's MR entries went")
	require.Len(t, ownerRecords(t, st), 1)

	// Giving back what this process owns removes its record.
	require.NoError(t, p.b.Do(func() error { return a.DeletePort(5001) }))
	require.NoError(t, p.b.Do(func() error { return a.ReleaseAVID(myAV) }))
	require.Empty(t, ownerRecords(t, st))
	st = status()
	require.NotNil(t, st.Owners)
	require.Empty(t, st.Owners)

	require.NoError(t, p.detach())
	require.NoDirExists(t, filepath.Join(xdp.RunDir, st.Netns.String()), "detach removes the records")
}
