package main

import (
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// sameName is the interface name both namespaces of TestSameNameNamespacesCLI hold.
const sameName = "xfsame0"

// statusJSON runs `xdpfab -n NS status -o json` and decodes it.
func statusJSON(t *testing.T, ns *testenv.Netns, args ...string) []xdp.Status {
	t.Helper()
	code, stdout, stderr := xdpfab(append([]string{"-n", ns.Name, "status", "-o", "json"}, args...)...)
	require.Equal(t, exitOK, code, stderr)
	require.NotContains(t, stdout, "null", "JSON lists are [], never null")
	var sts []xdp.Status
	require.NoError(t, json.Unmarshal([]byte(stdout), &sts))
	return sts
}

func progOnIface(t *testing.T, ns *testenv.Netns, name string) uint32 {
	t.Helper()
	l, err := ns.Netlink().LinkByName(name)
	require.NoError(t, err)
	if l.Attrs().Xdp == nil {
		return 0
	}
	return l.Attrs().Xdp.ProgId
}

// TestSameNameNamespacesCLI: namespaces A and C each hold an xfsame0 (the
// eth0 of two containers), joined to a hub H. xdpfab run with -n in one
// never sees, replaces or detaches the other's program.
func TestSameNameNamespacesCLI(t *testing.T) {
	testenv.RequirePriv(t)
	h, a, c := testenv.NewNetns(t), testenv.NewNetns(t), testenv.NewNetns(t)
	va := testenv.NewVeth(t, h, a, testenv.VethOptions{NameA: "xfhubA", NameB: sameName,
		AddrA: netip.MustParsePrefix("10.202.1.1/24"), AddrB: netip.MustParsePrefix("10.202.1.2/24")})
	testenv.NewVeth(t, h, c, testenv.VethOptions{NameA: "xfhubC", NameB: sameName,
		AddrA: netip.MustParsePrefix("10.202.2.1/24"), AddrB: netip.MustParsePrefix("10.202.2.2/24")})
	t.Cleanup(func() {
		cleanupIn(a, sameName)
		cleanupIn(c, sameName)
	})

	code, _, stderr := xdpfab("-n", a.Name, "attach", sameName, "--mode", "generic", "--port", "4791", "--av-id", "7", "--strict")
	require.Equal(t, exitOK, code, stderr)
	idA := progOnIface(t, a, sameName)
	require.NotZero(t, idA)

	// C sees nothing, and detaching there finds nothing.
	require.Empty(t, statusJSON(t, c))
	code, stdout, _ := xdpfab("-n", c.Name, "status")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "not attached to any interface")
	code, _, stderr = xdpfab("-n", c.Name, "status", sameName)
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, "not attached")
	code, _, stderr = xdpfab("-n", c.Name, "detach", sameName)
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, "not attached")
	require.Equal(t, idA, progOnIface(t, a, sameName), "detach in C left A's program")

	// Attach in C: a program of its own; A's untouched.
	code, _, stderr = xdpfab("-n", c.Name, "attach", sameName, "--mode", "generic", "--port", "4792")
	require.Equal(t, exitOK, code, stderr)
	idC := progOnIface(t, c, sameName)
	require.NotZero(t, idC)
	require.NotEqual(t, idA, idC)
	require.Equal(t, idA, progOnIface(t, a, sameName), "attach in C left A's program")

	// Each status lists its own only.
	stA, stC := statusJSON(t, a), statusJSON(t, c)
	require.Len(t, stA, 1)
	require.Len(t, stC, 1)
	require.Equal(t, sameName, stA[0].Iface)
	require.Equal(t, sameName, stC[0].Iface)
	require.Equal(t, idA, stA[0].ProgramID)
	require.Equal(t, idC, stC[0].ProgramID)
	require.NotEqual(t, stA[0].PinDir, stC[0].PinDir)
	require.NotEqual(t, stA[0].Netns, stC[0].Netns)
	require.Len(t, stA[0].Ports, 1)
	require.Equal(t, uint16(4791), stA[0].Ports[0].Port.Port)
	require.Len(t, stC[0].Ports, 1)
	require.Equal(t, uint16(4792), stC[0].Ports[0].Port.Port)
	code, stdout, stderr = xdpfab("-n", c.Name, "stats", "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	var rec statsRecord
	require.NoError(t, json.NewDecoder(strings.NewReader(stdout)).Decode(&rec))
	require.Equal(t, sameName, rec.Iface)
	require.Equal(t, 1, strings.Count(stdout, "\n"), "stats in C lists one interface")

	// Detach in C: C's program goes, A's stays with its pins and port.
	code, _, stderr = xdpfab("-n", c.Name, "detach", sameName)
	require.Equal(t, exitOK, code, stderr)
	require.Zero(t, progOnIface(t, c, sameName))
	require.Equal(t, idA, progOnIface(t, a, sameName), "detach in C left A's program")
	require.NoDirExists(t, stC[0].PinDir)
	require.DirExists(t, stA[0].PinDir)
	code, _, _ = xdpfab("-n", c.Name, "detach", sameName)
	require.Equal(t, exitError, code, "nothing left in C, and A's is not C's")
	require.Equal(t, idA, progOnIface(t, a, sameName))
	stA = statusJSON(t, a, sameName)
	require.Len(t, stA, 1)
	require.Equal(t, idA, stA[0].ProgramID)

	// A's program still runs: ping answers, a datagram to its strict port
	// from a peer outside its AV is dropped in XDP and counted.
	drops := func() uint64 {
		code, stdout, stderr := xdpfab("-n", a.Name, "stats", sameName, "-o", "json")
		require.Equal(t, exitOK, code, stderr)
		var r statsRecord
		require.NoError(t, json.Unmarshal([]byte(stdout), &r))
		return r.Counters["drop_unknown_peer"]
	}
	before := drops()
	var tx *net.UDPConn
	require.NoError(t, h.Do(func() (err error) {
		tx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(va.AddrA.Addr(), 6000)))
		return err
	}))
	defer tx.Close()
	var rx *net.UDPConn
	require.NoError(t, a.Do(func() (err error) {
		rx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(va.AddrB.Addr(), 4791)))
		return err
	}))
	defer rx.Close()
	// ARP first: a datagram to another port reaches the stack.
	var other *net.UDPConn
	require.NoError(t, a.Do(func() (err error) {
		other, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(va.AddrB.Addr(), 5555)))
		return err
	}))
	defer other.Close()
	buf := make([]byte, 64)
	got := false
	for i := 0; i < 10 && !got; i++ {
		_, err := tx.WriteToUDPAddrPort([]byte("hello"), netip.AddrPortFrom(va.AddrB.Addr(), 5555))
		require.NoError(t, err)
		require.NoError(t, other.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
		_, err = other.Read(buf)
		got = err == nil
	}
	require.True(t, got, "A's other ports reach the stack")
	for i := 0; i < 3; i++ {
		_, err := tx.WriteToUDPAddrPort([]byte("stranger"), netip.AddrPortFrom(va.AddrB.Addr(), 4791))
		require.NoError(t, err)
	}
	require.NoError(t, rx.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err := rx.Read(buf)
	require.Error(t, err, "the stranger's datagrams were dropped in XDP")
	require.Equal(t, uint64(3), drops()-before)

	code, _, stderr = xdpfab("-n", a.Name, "detach", sameName)
	require.Equal(t, exitOK, code, stderr)
	require.Zero(t, progOnIface(t, a, sameName))
	require.NoDirExists(t, stA[0].PinDir)
}
