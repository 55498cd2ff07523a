package nexthop

import (
	"errors"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// subscribe opens a netlink socket, in the calling thread's namespace,
// that receives the neighbour, route and link notifications the cache
// follows.
func subscribe() (*nl.NetlinkSocket, error) {
	return nl.Subscribe(unix.NETLINK_ROUTE,
		unix.RTNLGRP_NEIGH, unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE, unix.RTNLGRP_LINK)
}

// watch is the goroutine applying notifications to the cache until Close
// closes the socket.
func (r *Resolver) watch() {
	defer r.wg.Done()
	for {
		msgs, from, err := r.sub.Receive()
		if err != nil {
			select {
			case <-r.done:
				return
			default:
			}
			// ENOBUFS: the socket overflowed and notifications were lost.
			// Anything else leaves the socket unusable: flush, and stop
			// following (Recheck still catches a dead hop).
			r.flush()
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if from.Pid != nl.PidKernel {
			continue
		}
		for i := range msgs {
			r.apply(&msgs[i])
		}
	}
}

// apply updates the cache for one notification.
func (r *Resolver) apply(m *syscall.NetlinkMessage) {
	switch m.Header.Type {
	case unix.RTM_NEWNEIGH, unix.RTM_DELNEIGH:
		n, err := netlink.NeighDeserialize(m.Data)
		if err != nil {
			r.flush()
			return
		}
		r.neighbourChanged(n, m.Header.Type == unix.RTM_DELNEIGH)
	case unix.RTM_NEWROUTE, unix.RTM_DELROUTE:
		r.flush()
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
		l, err := netlink.LinkDeserialize(&unix.NlMsghdr{Len: m.Header.Len, Type: m.Header.Type,
			Flags: m.Header.Flags, Seq: m.Header.Seq, Pid: m.Header.Pid}, m.Data)
		if err != nil {
			r.flush()
			return
		}
		r.linkChanged(l.Attrs(), m.Header.Type == unix.RTM_DELLINK)
	}
}

// neighbourChanged updates the hops going to n: a usable entry lends them
// its MAC, any other state (failed, incomplete, deleted) drops them.
func (r *Resolver) neighbourChanged(n *netlink.Neigh, deleted bool) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return
	}
	ip = ip.Unmap()
	keep := !deleted && usable(n)
	r.mu.Lock()
	defer r.mu.Unlock()
	// A resolution reading the table now may have read the old entry.
	r.gen++
	for dst, h := range r.cache {
		if h.Ifindex != n.LinkIndex || h.Next != ip {
			continue
		}
		if !keep {
			delete(r.cache, dst)
			continue
		}
		if !sameMAC(h.DstMAC, n.HardwareAddr) {
			h.DstMAC = append([]byte(nil), n.HardwareAddr...)
			r.cache[dst] = h
		}
	}
}

// linkChanged drops the hops leaving through a link that went away, went
// down or changed its MAC or MTU.
func (r *Resolver) linkChanged(a *netlink.LinkAttrs, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	for dst, h := range r.cache {
		if h.Ifindex != a.Index {
			continue
		}
		if deleted || a.RawFlags&unix.IFF_UP == 0 || a.MTU != h.MTU || !sameMAC(a.HardwareAddr, h.SrcMAC) {
			delete(r.cache, dst)
		}
	}
}

// flush drops every hop.
func (r *Resolver) flush() {
	r.mu.Lock()
	clear(r.cache)
	r.gen++
	r.mu.Unlock()
}
