package veth

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestCorruptionInFlight puts a router namespace R between A and B whose
// XDP program flips one byte of the UDP payload of about 5 % of the
// datagrams between the endpoints' ports, both ways, leaving the UDP
// checksum as it was. No corrupted request, response or ack may be acted
// on: A's pipelined fetch-adds on one counter in B's memory must each
// execute exactly once with the operand sent (the counter ends at their
// number, the fetched values are 0..N-1), and RMA writes of 1 B to 64 KiB
// must land byte-exact (checked by RMA read through the router and in B's
// memory after its endpoint closes). The corrupted datagrams must have been
// caught: B's XDP program counts them (pass_bad_csum) on the AF_XDP
// transport, and B's stack drops them (Udp InCsumErrors) on every
// transport, the sender retransmitting.
//
// The endpoints' veths send with transmit checksum offload off, as a NIC
// puts a full checksum on the wire: with it on, a kernel socket's datagram
// crosses veth with its checksum left to offload (CHECKSUM_PARTIAL) and a
// receiving kernel trusts it, corrupted or not.
func TestCorruptionInFlight(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		var router *testenv.Netns
		tn := newNet(t, tc, netOpts{link: func(t testing.TB) (*testenv.Netns, *testenv.Netns, *testenv.Veth) {
			var v *testenv.Veth
			router, v = routed(t)
			return v.A, v.B, v
		}})
		a, b := tn.nodes[sideA][0], tn.target()
		key := b.region.Key()
		flips := corruptor(t, router, 50, basePort[sideA], basePort[sideB]+100)
		csumErrs := snmpStat(t, tn.ns[sideB], "Udp", "InCsumErrors")
		xdpBefore := xdpCounters(t, tn, sideB, tc)

		// Fetch-adds on the counter at offset 0.
		const adds = 3000
		res, err := fetchAdds{n: a, peer: a.peers[0], key: key, total: adds, depth: 16, timeout: 60 * time.Second}.run()
		require.NoError(t, err)
		checkPermutation(t, [][]uint64{res})
		require.Equal(t, uint64(adds), binary.LittleEndian.Uint64(a.read(t, a.peers[0], 0, 8, key)), "counter after the fetch-adds")

		// RMA writes after it, each read back through the router.
		want := make([]byte, len(b.mem))
		binary.LittleEndian.PutUint64(want, adds)
		off := 64
		for i, size := range []int{1, 7, 100, 1400, 1500, 4096, 9000, 64 << 10} {
			for rep := range 4 {
				data := pattern(size, 10*i+rep+1)
				a.write(t, a.peers[0], uint64(off), data, key)
				copy(want[off:], data)
				require.True(t, bytes.Equal(data, a.read(t, a.peers[0], uint64(off), size, key)), "RMA write+read of %d bytes at %d", size, off)
				off += size + 3
			}
		}

		flipped := flips()
		t.Logf("%d datagrams corrupted in flight", flipped)
		require.Greater(t, flipped, uint64(30), "the router corrupted datagrams")
		require.Positive(t, snmpStat(t, tn.ns[sideB], "Udp", "InCsumErrors")-csumErrs, "B's stack dropped corrupted datagrams")
		if tc.kernelFilters {
			after := xdpCounters(t, tn, sideB, tc)
			require.Positive(t, after[bpf.XdpfabXdpfabCounterCNT_PASS_BAD_CSUM]-xdpBefore[bpf.XdpfabXdpfabCounterCNT_PASS_BAD_CSUM],
				"B's XDP program caught corrupted datagrams")
		}
		require.NoError(t, b.closeEndpoint())
		require.True(t, bytes.Equal(want, b.mem), "B's memory after its endpoint closed")
	})
}

// routed builds A —veth— R —veth— B with R forwarding: A 10.200.0.1/24
// and B 10.202.0.2/24, each routing the other's subnet through R. It
// returns R and a Veth describing A's and B's ends (A, NameA, AddrA of the
// first pair, B, NameB, AddrB of the second), as newNet expects.
func routed(t testing.TB) (*testenv.Netns, *testenv.Veth) {
	t.Helper()
	nsA, nsR, nsB := testenv.NewNetns(t), testenv.NewNetns(t), testenv.NewNetns(t)
	ar := testenv.NewVeth(t, nsA, nsR, testenv.VethOptions{
		AddrA: netip.MustParsePrefix("10.200.0.1/24"), AddrB: netip.MustParsePrefix("10.200.0.254/24")})
	rb := testenv.NewVeth(t, nsR, nsB, testenv.VethOptions{
		AddrA: netip.MustParsePrefix("10.202.0.254/24"), AddrB: netip.MustParsePrefix("10.202.0.2/24")})
	for _, c := range []struct {
		ns   *testenv.Netns
		args []string
	}{
		{nsR, []string{"sysctl", "-qw", "net.ipv4.conf.all.forwarding=1"}},
		{nsA, []string{"ip", "route", "add", "10.202.0.0/24", "via", "10.200.0.254"}},
		{nsB, []string{"ip", "route", "add", "10.200.0.0/24", "via", "10.202.0.254"}},
	} {
		out, err := c.ns.Exec(c.args[0], c.args[1:]...)
		require.NoError(t, err, out)
	}
	require.NoError(t, nsA.SetTxChecksum(ar.NameA, false))
	require.NoError(t, nsB.SetTxChecksum(rb.NameB, false))
	return nsR, &testenv.Veth{A: nsA, B: nsB, NameA: ar.NameA, NameB: rb.NameB,
		AddrA: ar.AddrA, AddrB: rb.AddrB, IndexA: ar.IndexA, IndexB: rb.IndexB}
}

// corruptor attaches, in generic mode on both of R's interfaces, an XDP
// program that XORs one byte of the UDP payload with 0xa5 in permille ‰
// of the IPv4 datagrams (IHL 5) whose source or destination port is in
// [lo, hi), the position drawn at random, and passes them on. The UDP
// checksum is left alone. It returns a function reading how many
// datagrams it corrupted.
func corruptor(t testing.TB, router *testenv.Netns, permille int32, lo, hi uint16) func() uint64 {
	t.Helper()
	count, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	require.NoError(t, err)
	t.Cleanup(func() { count.Close() })
	const (
		ethIP  = 14
		ipUDP  = ethIP + 20
		udpPay = ipUDP + 8
	)
	inRange := func(off int16, next string) asm.Instructions {
		return asm.Instructions{
			asm.LoadMem(asm.R5, asm.R2, off, asm.Half),
			asm.HostTo(asm.BE, asm.R5, asm.Half),
			asm.JLT.Imm(asm.R5, int32(lo), next),
			asm.JLT.Imm(asm.R5, int32(hi), "match"),
		}
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, udpPay),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, 0x0008, "pass"), // ETH_P_IP, network order
		asm.LoadMem(asm.R5, asm.R2, ethIP, asm.Byte),
		asm.JNE.Imm(asm.R5, 0x45, "pass"),
		asm.LoadMem(asm.R5, asm.R2, ethIP+9, asm.Byte),
		asm.JNE.Imm(asm.R5, 17, "pass"),
	}
	insns = append(insns, inRange(ipUDP, "dport")...)
	dport := inRange(ipUDP+2, "pass")
	dport[0] = dport[0].WithSymbol("dport")
	insns = append(insns, dport...)
	insns = append(insns, asm.Ja.Label("pass"))
	insns = append(insns,
		// r7 = payload length; nothing to corrupt in an empty one.
		asm.LoadMem(asm.R7, asm.R2, ipUDP+4, asm.Half).WithSymbol("match"),
		asm.HostTo(asm.BE, asm.R7, asm.Half),
		asm.JLE.Imm(asm.R7, 8, "pass"),
		asm.Sub.Imm(asm.R7, 8),
		asm.FnGetPrandomU32.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.Mod.Imm(asm.R8, 1000),
		asm.JGE.Imm(asm.R8, permille, "pass"),
		// r9 = offset of a random payload byte
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.RSh.Imm(asm.R9, 10),
		asm.Mod.Reg(asm.R9, asm.R7),
		asm.Add.Imm(asm.R9, udpPay),
		asm.And.Imm(asm.R9, 0x3fff),
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word),
		asm.Add.Reg(asm.R2, asm.R9),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 1),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 0, asm.Byte),
		asm.Xor.Imm(asm.R5, 0xa5),
		asm.StoreMem(asm.R2, 0, asm.R5, asm.Byte),
		// count[0]++
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, count.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"), // XDP_PASS
		asm.Return(),
	)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: insns})
	require.NoError(t, err)
	t.Cleanup(func() { prog.Close() })
	links, err := router.Netlink().LinkList()
	require.NoError(t, err)
	for _, l := range links {
		if l.Type() != "veth" {
			continue
		}
		idx := l.Attrs().Index
		var xl link.Link
		do(t, router, func() (err error) {
			xl, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: idx, Flags: link.XDPGenericMode})
			return err
		})
		t.Cleanup(func() { xl.Close() })
	}
	return func() uint64 {
		var v uint64
		require.NoError(t, count.Lookup(uint32(0), &v))
		return v
	}
}
