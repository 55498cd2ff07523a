package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// endpointChildEnv selects the child part of TestKilledOwner: NETNS,ADDR:PORT.
const endpointChildEnv = "XDPFAB_CLI_ENDPOINT_CHILD"

// endpointChild opens an AF_XDP endpoint at addr in namespace ns with
// three peers in its AV and two registered regions, says "ready", and
// waits to be killed.
func endpointChild(spec string) {
	fail := func(what string, err error) {
		fmt.Printf("child error: %s: %v\n", what, err)
		os.Exit(1)
	}
	name, addrStr, _ := strings.Cut(spec, ",")
	local := netip.MustParseAddrPort(addrStr)
	runtime.LockOSThread() // for good: the endpoint is made in the namespace
	h, err := netns.GetFromName(name)
	if err != nil {
		fail("netns", err)
	}
	if err := netns.Set(h); err != nil {
		fail("setns", err)
	}
	f, err := fabric.OpenFabric("", nil)
	if err != nil {
		fail("fabric", err)
	}
	d, err := f.Domain(fabric.DomainAttr{Addr: local.Addr(), Port: local.Port(), Transport: fabric.TransportXDP}, nil)
	if err != nil {
		fail("domain", err)
	}
	ep, err := d.Endpoint(fabric.EPAttr{}, nil)
	if err != nil {
		fail("endpoint", err)
	}
	a, err := d.AVOpen(av.Attr{}, nil)
	if err != nil {
		fail("av", err)
	}
	peers := []netip.AddrPort{
		netip.MustParseAddrPort("10.204.0.11:7471"), netip.MustParseAddrPort("10.204.0.12:7471"), netip.MustParseAddrPort("10.204.0.13:7471"),
	}
	if _, err := a.InsertAddrPort(peers, make([]fi.Addr, len(peers)), 0, nil); err != nil {
		fail("av insert", err)
	}
	cq, err := d.CQOpen(fabric.CQAttr{Format: fabric.CQFormatMsg}, nil)
	if err != nil {
		fail("cq", err)
	}
	if err := ep.Bind(a, 0); err != nil {
		fail("bind av", err)
	}
	if err := ep.Bind(cq, fi.TRANSMIT|fi.RECV); err != nil {
		fail("bind cq", err)
	}
	if err := ep.Enable(); err != nil {
		fail("enable", err)
	}
	mem := make([]byte, 8192)
	for i, key := range []uint64{0x1001, 0x1002} {
		if _, err := d.MRReg(mem[i*4096:(i+1)*4096], fi.REMOTE_READ|fi.REMOTE_WRITE, 0, key, 0, nil); err != nil {
			fail("mr reg", err)
		}
	}
	fmt.Printf("ready %d\n", os.Getpid())
	time.Sleep(time.Minute) // the test kills it long before
	os.Exit(3)
}

// TestKilledOwner: a process with an AF_XDP endpoint, AV entries and
// registered regions on an attached interface shows as the owner of its
// port in status while it lives; once SIGKILLed, status (text and JSON)
// shows no port, AV or MR entry of it, and its owner record is gone.
func TestKilledOwner(t *testing.T) {
	if spec := os.Getenv(endpointChildEnv); spec != "" {
		endpointChild(spec)
		return
	}
	testenv.RequirePriv(t)
	na, nb := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, na, nb, testenv.VethOptions{})
	t.Cleanup(func() { cleanupIn(nb, v.NameB) })
	code, _, stderr := xdpfab("-n", nb.Name, "attach", v.NameB, "--port", "4791")
	require.Equal(t, exitOK, code, stderr)

	const port = 7600
	child := testenv.StartChild(t, "TestKilledOwner", endpointChildEnv+"="+nb.Name+","+netip.AddrPortFrom(v.AddrB.Addr(), port).String())
	cmd, out := child.Cmd, child.Stdout
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") || strings.HasPrefix(sc.Text(), "child error") {
				ready <- sc.Text()
				return
			}
		}
		close(ready)
	}()
	select {
	case line := <-ready:
		require.Equal(t, fmt.Sprintf("ready %d", cmd.Process.Pid), line)
	case <-time.After(30 * time.Second):
		t.Fatal("the endpoint child did not get ready")
	}

	// Alive: its port shows it as owner.
	sts := statusJSON(t, nb, v.NameB)
	require.Len(t, sts, 1)
	st := sts[0]
	var owned *xdp.PortStatus
	for i := range st.Ports {
		if st.Ports[i].Port.Port == port {
			owned = &st.Ports[i]
		}
	}
	require.NotNil(t, owned, "the endpoint's port: %+v", st.Ports)
	require.NotNil(t, owned.Owner)
	require.Equal(t, cmd.Process.Pid, owned.Owner.PID)
	comm := filepath.Base(os.Args[0])
	if len(comm) > 15 {
		comm = comm[:15] // TASK_COMM_LEN
	}
	require.Equal(t, comm, owned.Owner.Comm)
	require.Len(t, st.Owners, 1)
	require.Equal(t, cmd.Process.Pid, st.Owners[0].PID)
	require.Len(t, st.Owners[0].AVIDs, 1)
	require.Len(t, st.Owners[0].DomainIDs, 1)
	require.Equal(t, owned.DomainID, st.Owners[0].DomainIDs[0])
	require.Equal(t, owned.AVID, st.Owners[0].AVIDs[0])
	require.Equal(t, 3, st.AVEntries)
	require.Equal(t, 2, st.MREntries)
	code, text, stderr := xdpfab("-n", nb.Name, "status", v.NameB)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, text, fmt.Sprintf("port %d (%v): av %d, domain %d, strict; owner pid %d (%s)", port, v.AddrB.Addr(), owned.AVID, owned.DomainID, cmd.Process.Pid, comm))
	require.Contains(t, text, "port 4791 (every address): av 0, domain 0; no owner")
	require.Contains(t, text, fmt.Sprintf("owner pid %d (%s): ports %d, av ids %d, domain ids %d", cmd.Process.Pid, comm, port, owned.AVID, owned.DomainID))
	records, err := filepath.Glob(filepath.Join(xdp.RunDir, st.Netns.String(), strconv.Itoa(st.Ifindex), "*", "owner-*"))
	require.NoError(t, err)
	require.Len(t, records, 1)

	// kill -9: nothing of it survives the next status.
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	code, raw, stderr := xdpfab("-n", nb.Name, "status", "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	require.NotContains(t, raw, "null")
	require.NoError(t, json.Unmarshal([]byte(raw), &sts))
	require.Len(t, sts, 1)
	st = sts[0]
	require.Len(t, st.Ports, 1, "only attach's port is left: %+v", st.Ports)
	require.Equal(t, uint16(4791), st.Ports[0].Port.Port)
	require.Nil(t, st.Ports[0].Owner)
	require.Empty(t, st.Owners)
	require.Zero(t, st.AVEntries, "its AV entries are gone")
	require.Zero(t, st.MREntries, "its MR entries are gone")
	require.Zero(t, len(st.BoundQueues), "its AF_XDP sockets are gone")
	records, err = filepath.Glob(filepath.Join(xdp.RunDir, st.Netns.String(), strconv.Itoa(st.Ifindex), "*", "owner-*"))
	require.NoError(t, err)
	require.Empty(t, records)
	code, text, _ = xdpfab("-n", nb.Name, "status", v.NameB)
	require.Equal(t, exitOK, code)
	require.NotContains(t, text, "owner pid")
	require.Contains(t, text, "AV map: 0 of ")
	require.Contains(t, text, "MR table: 0 of ")

	code, _, stderr = xdpfab("-n", nb.Name, "detach", v.NameB)
	require.Equal(t, exitOK, code, stderr)
	require.NoDirExists(t, filepath.Join(xdp.RunDir, st.Netns.String()))
}
