package xdp

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// The local_addrs map tells the program which destination addresses are
// this namespace's own, for ports bound to every address (PortConfig with
// no Addr): a datagram to such a port is xdpfab's only when its destination
// is in the map. User space keeps it: Attach fills it, and the AF_XDP
// transport follows the namespace's address changes while it runs (the
// only time the program's redirect reaches anyone). An address added while
// nobody follows is missing from the map and its datagrams pass to the
// stack (and the endpoint's kernel socket); one removed stays until the
// next sync.

// SyncLocalAddrs makes the local_addrs map hold exactly the addresses of
// the namespace nl works in (nil: the calling thread's).
func (a *Attachment) SyncLocalAddrs(nl *netlink.Handle) error {
	var (
		list []netlink.Addr
		err  error
	)
	if nl != nil {
		list, err = nl.AddrList(nil, netlink.FAMILY_ALL)
	} else {
		list, err = netlink.AddrList(nil, netlink.FAMILY_ALL)
	}
	if err != nil {
		return fmt.Errorf("xdp: %s: list addresses: %w", a.Iface, err)
	}
	addrs := make([]netip.Addr, 0, len(list))
	for _, l := range list {
		if ip, ok := netip.AddrFromSlice(l.IP); ok {
			addrs = append(addrs, ip)
		}
	}
	return a.SetLocalAddrs(addrs)
}

// SetLocalAddrs makes the local_addrs map hold exactly addrs.
func (a *Attachment) SetLocalAddrs(addrs []netip.Addr) error {
	if a.LocalMap == nil {
		return fmt.Errorf("xdp: %s: no local_addrs map: %w", a.Iface, fi.EINVAL)
	}
	want := make(map[bpf.XdpfabLocalAddr]bool, len(addrs))
	for _, ip := range addrs {
		want[bpf.XdpfabLocalAddr{Addr: ip.Unmap().As16()}] = true
	}
	// Add first, then remove what is gone: an address that stays is
	// never missing in between.
	for k := range want {
		if err := a.LocalMap.Put(k, uint32(0)); err != nil {
			if errors.Is(err, unix.E2BIG) {
				return fmt.Errorf("xdp: %s: local_addrs full (%d): %w", a.Iface, a.LocalMap.MaxEntries(), fi.ENOSPC)
			}
			return fmt.Errorf("xdp: %s: add local address: %w", a.Iface, mapErr(err))
		}
	}
	var (
		k     bpf.XdpfabLocalAddr
		v     uint32
		stale []bpf.XdpfabLocalAddr
	)
	it := a.LocalMap.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("xdp: %s: list local addresses: %w", a.Iface, mapErr(err))
	}
	for _, k := range stale {
		if err := a.LocalMap.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("xdp: %s: remove local address: %w", a.Iface, mapErr(err))
		}
	}
	return nil
}

// LocalAddrs lists the local_addrs map.
func (a *Attachment) LocalAddrs() ([]netip.Addr, error) {
	var (
		k   bpf.XdpfabLocalAddr
		v   uint32
		out []netip.Addr
	)
	it := a.LocalMap.Iterate()
	for it.Next(&k, &v) {
		out = append(out, netip.AddrFrom16(k.Addr).Unmap())
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("xdp: %s: list local addresses: %w", a.Iface, mapErr(err))
	}
	return out, nil
}
