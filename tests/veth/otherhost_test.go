package veth

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// otherHost is an address B does not hold. A routes it onto the veth with
// a static neighbour entry for B's MAC, so B's interface receives traffic
// for it, as a host does traffic it forwards or bridges.
var otherHost = netip.MustParseAddr("10.251.0.77")

// TestOtherHostTraffic sends B 100 RMA writes from a peer in B's AV to B's
// endpoint port, but addressed to otherHost: none may reach the endpoint.
// Control writes to B's own address before and after show that the same
// forged requests are executed when they are B's, and the one after (the
// session's next sequence number) that none of the 100 was executed in
// between. The XDP program counts them as pass_other_host; B's stack, not
// forwarding, drops them (Ip InAddrErrors). B's endpoint keeps serving.
func TestOtherHostTraffic(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		tn := newNet(t, tc, netOpts{})
		target, a := tn.target(), tn.nodes[sideA][0]
		key := target.region.Key()
		port := tn.ports[sideB][0]

		bLink, err := tn.ns[sideB].Netlink().LinkByName(tn.iface(sideB))
		require.NoError(t, err)
		for _, args := range [][]string{
			{"route", "add", otherHost.String() + "/32", "dev", tn.iface(sideA)},
			{"neigh", "add", otherHost.String(), "lladdr", bLink.Attrs().HardwareAddr.String(), "dev", tn.iface(sideA), "nud", "permanent"},
		} {
			out, err := tn.ns[sideA].Exec("ip", args...)
			require.NoError(t, err, out)
		}

		f := newForger(t, tn, forgerPort)
		var fa [1]fi.Addr
		n, err := target.av.InsertAddrPort([]netip.AddrPort{netip.AddrPortFrom(tn.addr(sideA), forgerPort)}, fa[:], 0, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		const session = 11
		write := func(seq uint32, off uint64) []byte {
			return f.req(wire.Header{SrcEP: fabricEndpointID, DstEP: fabricEndpointID, Session: session, Seq: seq},
				wire.OpDesc{Opcode: wire.OpRMAWrite, RKey: key, Addr: off, Flags: wire.OpFirst | wire.OpLast},
				le64(0x0df0adba00000000|uint64(seq)))
		}
		marker := func(off uint64) uint64 { return binary.LittleEndian.Uint64(a.read(t, a.peers[0], off, 8, key)) }

		// Control: addressed to B, the forged write executes.
		r := f.call(wire.Header{SrcEP: fabricEndpointID, DstEP: fabricEndpointID, Session: session, Seq: 1},
			wire.OpDesc{Opcode: wire.OpRMAWrite, RKey: key, Addr: 0, Flags: wire.OpFirst | wire.OpLast}, le64(0x0df0adba00000001))
		require.Zero(t, r.Errno)
		require.Equal(t, uint64(0x0df0adba00000001), marker(0))

		xdpBefore := xdpCounters(t, tn, sideB, tc)
		inAddrErrs := ipStat(t, tn.ns[sideB], "InAddrErrors")
		const stray = 100
		elsewhere := net.UDPAddrFromAddrPort(netip.AddrPortFrom(otherHost, port))
		for i := range stray {
			seq := uint32(2 + i)
			_, err := f.conn.WriteToUDP(write(seq, 8*uint64(seq)), elsewhere)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			return ipStat(t, tn.ns[sideB], "InAddrErrors")-inAddrErrs >= stray
		}, 5*time.Second, 10*time.Millisecond, "B's stack drops what is not for it")
		if tc.kernelFilters {
			after := xdpCounters(t, tn, sideB, tc)
			require.Equal(t, uint64(stray), after[bpf.XdpfabXdpfabCounterCNT_PASS_OTHER_HOST]-xdpBefore[bpf.XdpfabXdpfabCounterCNT_PASS_OTHER_HOST],
				"the XDP program passed and counted them")
			require.Equal(t, xdpBefore[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK], after[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK],
				"nothing was redirected to the endpoint meanwhile")
		}

		// None executed: their bytes are not in B's memory, and the
		// session's next request, seq 2, is new to B: executed, where
		// a stray seq 2 executed before would have it answered from the
		// response cache instead.
		for i := range stray {
			seq := uint64(2 + i)
			require.Zero(t, marker(8*seq), "stray write seq %d executed", seq)
		}
		r = f.call(wire.Header{SrcEP: fabricEndpointID, DstEP: fabricEndpointID, Session: session, Seq: 2},
			wire.OpDesc{Opcode: wire.OpRMAWrite, RKey: key, Addr: 4096, Flags: wire.OpFirst | wire.OpLast}, le64(0x0df0adba00000002))
		require.Zero(t, r.Errno)
		require.Equal(t, uint64(0x0df0adba00000002), marker(4096), "seq 2 executed: no stray one took its place")

		// B's endpoint serves real traffic as before.
		res, err := fetchAdds{n: a, peer: a.peers[0], key: key, off: 8192, total: 200, depth: 8, timeout: 20 * time.Second}.run()
		require.NoError(t, err)
		checkPermutation(t, [][]uint64{res})
	})
}

// xdpCounters reads the XDP program's counters on side s (zero for a
// transport case without one).
func xdpCounters(t testing.TB, tn *testNet, s side, tc transportCase) xdp.Counters {
	t.Helper()
	var c xdp.Counters
	if !tc.kernelFilters {
		return c
	}
	do(t, tn.ns[s], func() error {
		att, err := xdp.Open(tn.iface(s))
		if err != nil {
			return err
		}
		defer att.Close()
		c, err = att.Counters()
		return err
	})
	return c
}

// ipStat returns the "Ip:" counter name of /proc/net/snmp in ns.
func ipStat(t testing.TB, ns *testenv.Netns, name string) uint64 {
	t.Helper()
	return snmpStat(t, ns, "Ip", name)
}

// snmpStat returns the counter name of protocol proto ("Ip", "Udp") of
// /proc/net/snmp in ns.
func snmpStat(t testing.TB, ns *testenv.Netns, proto, name string) uint64 {
	t.Helper()
	out, err := ns.Exec("cat", "/proc/net/snmp")
	require.NoError(t, err)
	var header []string
	sc := bufio.NewScanner(bytes.NewReader([]byte(out)))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != proto+":" {
			continue
		}
		if header == nil {
			header = fields
			continue
		}
		for i, h := range header {
			if h == name && i < len(fields) {
				v, err := strconv.ParseUint(fields[i], 10, 64)
				require.NoError(t, err)
				return v
			}
		}
	}
	t.Fatalf("no %s %s in /proc/net/snmp", proto, name)
	return 0
}
