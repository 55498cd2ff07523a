package fabric

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/xdp"
)

// wireVersion is ep_attr.protocol_version.
const wireVersion = uint32(wire.Version)

// localAddr is one address GetInfo can offer: an interface address of the
// calling thread's network namespace.
type localAddr struct {
	addr     netip.Addr   // no zone
	prefix   netip.Prefix // the interface address with its prefix length
	loopback bool
	nic      NIC
}

// localAddrs lists the usable local addresses in GetInfo's order: those
// on interfaces with xdpfab's XDP program attached first, then the other
// non-loopback ones (IPv4 first), then loopback; by interface index and
// address within each group. IPv6 link-local and multicast addresses and
// interfaces that are down are left out.
func localAddrs() ([]localAddr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []localAddr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue // the interface went away
		}
		loop := ifc.Flags&net.FlagLoopback != 0
		attached := false
		if !loop {
			attached, _ = xdp.Attached(ifc.Name) // unprivileged: cannot tell, so not usable either
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsUnspecified() {
				continue
			}
			ones, _ := ipn.Mask.Size()
			pfx, err := ip.Prefix(ones)
			if err != nil {
				continue
			}
			nt := "Ethernet"
			if loop {
				nt = "Loopback"
			}
			out = append(out, localAddr{addr: ip, prefix: pfx, loopback: loop || ip.IsLoopback(),
				nic: NIC{Name: ifc.Name, Ifindex: ifc.Index, LinkAddr: ip.String(), MTU: ifc.MTU, Up: true,
					NetworkType: nt, XDPAttached: attached}})
		}
	}
	slices.SortStableFunc(out, func(a, b localAddr) int {
		return cmp.Or(
			boolOrder(!a.nic.XDPAttached, !b.nic.XDPAttached),
			boolOrder(a.loopback, b.loopback),
			boolOrder(is6(a.addr), is6(b.addr)),
			cmp.Compare(a.nic.Ifindex, b.nic.Ifindex),
			a.addr.Compare(b.addr))
	})
	return out, nil
}

// boolOrder orders false before true.
func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// localAddrOf describes addr as GetInfo would: the entry of the interface
// holding it, or of the interface whose prefix contains it (127.0.0.2 on
// lo), or else an entry without interface whose MTU is mtu.
func localAddrOf(addr netip.Addr, mtu int) localAddr {
	addr = addr.Unmap().WithZone("")
	locals, _ := localAddrs()
	for _, l := range locals {
		if l.addr == addr {
			return l
		}
	}
	for _, l := range locals {
		if l.prefix.Contains(addr) {
			l.addr = addr
			l.nic.LinkAddr = addr.String()
			return l
		}
	}
	bits := 32
	if is6(addr) {
		bits = 128
	}
	return localAddr{addr: addr, prefix: netip.PrefixFrom(addr, bits), loopback: addr.IsLoopback(),
		nic: NIC{LinkAddr: addr.String(), MTU: mtu, NetworkType: "Ethernet"}}
}
