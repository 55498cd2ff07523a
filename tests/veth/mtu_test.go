package veth

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// setMTU sets the MTU of both veth ends (before any node opens).
func setMTU(t testing.TB, n *testNet, mtu int) {
	t.Helper()
	for _, s := range sides {
		nl := n.ns[s].Netlink()
		l, err := nl.LinkByName(n.iface(s))
		require.NoError(t, err)
		require.NoError(t, nl.LinkSetMTU(l, mtu), "mtu %d on %s", mtu, n.iface(s))
	}
}

// newNet6 is newNet's single-node pair over IPv6 (fd00:200::1 and ::2) with
// the given MTU; it waits for duplicate address detection to finish.
func newNet6(t testing.TB, tc transportCase, mtu int) *testNet {
	t.Helper()
	n := &testNet{}
	n.ns[sideA], n.ns[sideB] = testenv.NewNetns(t), testenv.NewNetns(t)
	n.veth = testenv.NewVeth(t, n.ns[sideA], n.ns[sideB], testenv.VethOptions{MTU: mtu,
		AddrA: netip.MustParsePrefix("fd00:200::1/64"), AddrB: netip.MustParsePrefix("fd00:200::2/64")})
	for _, s := range sides {
		n.ports[s] = []uint16{basePort[s]}
		waitDAD(t, n.ns[s].Netlink(), n.addr(s))
	}
	attr := tc.setup(t, n)
	for _, s := range sides {
		da := attr
		da.Addr, da.Port = n.addr(s), n.ports[s][0]
		n.nodes[s] = append(n.nodes[s], openNode(t, fmt.Sprintf("%v0", s), n.ns[s], da, nodeOpts{}))
	}
	a, b := n.nodes[sideA][0], n.nodes[sideB][0]
	a.peers = append(a.peers, insert(t, a.av, b.ep.GetName()))
	b.peers = append(b.peers, insert(t, b.av, a.ep.GetName()))
	return n
}

// waitDAD waits (bounded) until addr is no longer tentative.
func waitDAD(t testing.TB, nl *netlink.Handle, addr netip.Addr) {
	t.Helper()
	for range 100 {
		addrs, err := nl.AddrList(nil, netlink.FAMILY_V6)
		require.NoError(t, err)
		for _, a := range addrs {
			if ip, _ := netip.AddrFromSlice(a.IP); ip == addr && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%v still tentative after 5 s", addr)
}

// TestMTU: with the veth MTU lowered to 1280 (IPv4), and over IPv6 at MTU
// 1500, each endpoint's packets are the MTU's UDP payload (1252, 1452:
// AF_XDP would refuse a 1472-byte datagram with FI_EMSGSIZE), and
// messages, RMA writes and reads of many packets and an atomic at the
// largest valid count all complete, byte-exact, over every transport.
func TestMTU(t *testing.T) {
	testenv.RequirePriv(t)
	for _, fam := range []struct {
		name       string
		mtu        int
		wantPacket int
	}{{"ipv4-1280", 1280, 1280 - 20 - 8}, {"ipv6-1500", 1500, 1500 - 40 - 8}} {
		t.Run(fam.name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, tc transportCase) {
				var n *testNet
				if fam.name == "ipv6-1500" {
					n = newNet6(t, tc, fam.mtu)
				} else {
					n = newNet(t, tc, netOpts{beforeNodes: func(n *testNet) { setMTU(t, n, fam.mtu) }})
				}
				a, b := n.nodes[sideA][0], n.target()
				for _, x := range []*node{a, b} {
					require.Equal(t, fam.wantPacket, x.ep.MaxPacket(), "%s", x.name)
					require.Equal(t, fam.wantPacket, x.dom.MaxPacket(), "%s", x.name)
				}
				checkMultiPacket(t, a, b, fam.wantPacket)
				if tc.kernelFilters {
					require.Equal(t, fabric.TransportXDP, a.dom.Transport())
				}
			})
		})
	}
}

// checkMultiPacket sends a message, writes and reads back RMA data of
// several packets, and runs a fetch-add at the largest valid count.
func checkMultiPacket(t *testing.T, a, b *node, packet int) {
	t.Helper()
	peer, key := a.peers[0], b.region.Key()
	// A message of 5 packets and a bit.
	msg := make([]byte, 5*packet+17)
	for i := range msg {
		msg[i] = byte(i*7 + 3)
	}
	got := make([]byte, len(msg))
	require.NoError(t, b.ep.Recv(got, mr.Desc{}, fi.AddrUnspec, "recv"))
	require.NoError(t, a.ep.Send(msg, mr.Desc{}, peer, "send"))
	require.Equal(t, "send", waitComp(t, a.txCQ).Context)
	rc := waitComp(t, b.rxCQ)
	require.Equal(t, len(msg), rc.Len)
	require.True(t, bytes.Equal(msg, got), "message differs")

	// RMA: 40 KiB at an unaligned offset, read back.
	data := make([]byte, 40<<10+5)
	for i := range data {
		data[i] = byte(i*13 + 1)
	}
	a.write(t, peer, 3, data, key)
	require.True(t, bytes.Equal(data, a.read(t, peer, 3, len(data), key)), "RMA read-back differs")

	// An atomic at the largest valid count, one request packet.
	count, err := a.ep.FetchAtomicValid(fatomic.UINT64, fatomic.SUM)
	require.NoError(t, err)
	require.Equal(t, (packet-88)/8, count, "valid count follows the packet size")
	n2, err := a.ep.AtomicValid(fatomic.UINT8, fatomic.SUM)
	require.NoError(t, err)
	require.Equal(t, packet-88, n2)
	const off = 64 << 10
	base := make([]byte, 8*count)
	ops := make([]byte, 8*count)
	for i := range count {
		binary.LittleEndian.PutUint64(base[8*i:], uint64(i)<<20)
		binary.LittleEndian.PutUint64(ops[8*i:], uint64(i)+1)
	}
	a.write(t, peer, off, base, key)
	res := make([]byte, 8*count)
	require.NoError(t, a.ep.FetchAtomic(ops, count, mr.Desc{}, res, mr.Desc{}, peer, off, key,
		fatomic.UINT64, fatomic.SUM, "famax"))
	require.Equal(t, "famax", waitComp(t, a.txCQ).Context)
	require.True(t, bytes.Equal(base, res), "fetched values differ")
	after := a.read(t, peer, off, 8*count, key)
	for i := range count {
		require.Equal(t, uint64(i)<<20+uint64(i)+1, binary.LittleEndian.Uint64(after[8*i:]), "element %d", i)
	}
	// One more element is outside the valid counts: FI_EMSGSIZE
	// (fi_atomic(3): more operations than the provider supports).
	big := make([]byte, 8*(count+1))
	require.ErrorIs(t, a.ep.FetchAtomic(big, count+1, mr.Desc{}, make([]byte, len(big)), mr.Desc{}, peer, off, key,
		fatomic.UINT64, fatomic.SUM, nil), fi.EMSGSIZE)
}

// TestMTUTooSmall: an interface MTU that leaves less than the datapath's
// 256-byte minimum fails endpoint creation with FI_EINVAL naming the MTU.
func TestMTUTooSmall(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{MTU: 280})
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	do(t, a, func() error {
		d, err := f.Domain(fabric.DomainAttr{Addr: v.AddrA.Addr(), Transport: fabric.TransportUDP}, nil)
		if err != nil {
			return err
		}
		defer d.Close()
		require.Equal(t, 280, d.MTU())
		require.Zero(t, d.MaxPacket())
		ep, err := d.Endpoint(fabric.EPAttr{}, nil)
		if err == nil {
			ep.Close()
		}
		require.ErrorIs(t, err, fi.EINVAL)
		require.ErrorContains(t, err, "MTU 280")
		return nil
	})
}
