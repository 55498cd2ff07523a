// Package nexthop answers, for a destination IP, what the AF_XDP transport
// must put in the frame it builds itself: the outgoing interface, the
// source IP the kernel would choose, our MAC and the next hop's MAC.
//
// It asks the kernel (netlink RTM_GETROUTE, then the neighbour table) so
// xdpfab follows the host's routing exactly. A missing or incomplete
// neighbour entry is resolved by having the kernel send one probe datagram
// (an empty UDP datagram to the discard port, 9) towards the next hop, which
// makes it run ARP or neighbour discovery, and by polling the table for a
// bounded time. Answers are cached; Invalidate drops one when a peer
// stops answering.
package nexthop

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Hop is where frames for one destination go.
type Hop struct {
	Ifindex int
	Src     netip.Addr       // the source address the kernel's route picks
	SrcMAC  net.HardwareAddr // our interface's MAC
	DstMAC  net.HardwareAddr // the next hop's MAC (the peer, or its gateway)
	MTU     int
}

// ErrUnresolved is returned when the next hop's MAC could not be learned in
// time.
var ErrUnresolved = errors.New("nexthop: neighbour not resolved")

// Resolver caches hops. Its zero value is not usable; use New.
type Resolver struct {
	nl      *netlink.Handle
	timeout time.Duration
	// Probe makes the kernel resolve a next hop; the default dials a UDP
	// socket from the calling thread's network namespace. A caller whose
	// goroutines may run outside the namespace of nl sets its own (e.g.
	// sending from a socket opened in that namespace).
	Probe func(next netip.Addr)

	mu    sync.Mutex
	cache map[netip.Addr]Hop // guarded by mu
}

// New returns a resolver using nl (nil: the calling thread's namespace at
// each call) that waits at most timeout for a neighbour to resolve.
func New(nl *netlink.Handle, timeout time.Duration) *Resolver {
	if nl == nil {
		nl = &netlink.Handle{}
	}
	if timeout <= 0 {
		timeout = time.Second
	}
	return &Resolver{nl: nl, timeout: timeout, cache: map[netip.Addr]Hop{}, Probe: probe}
}

// Lookup returns the hop for dst, resolving it if needed.
func (r *Resolver) Lookup(dst netip.Addr) (Hop, error) {
	dst = dst.Unmap()
	r.mu.Lock()
	h, ok := r.cache[dst]
	r.mu.Unlock()
	if ok {
		return h, nil
	}
	h, err := r.resolve(dst)
	if err != nil {
		return Hop{}, err
	}
	r.mu.Lock()
	r.cache[dst] = h
	r.mu.Unlock()
	return h, nil
}

// Cached returns dst's hop if it is resolved already, without blocking.
func (r *Resolver) Cached(dst netip.Addr) (Hop, bool) {
	r.mu.Lock()
	h, ok := r.cache[dst.Unmap()]
	r.mu.Unlock()
	return h, ok
}

// Invalidate forgets dst's hop so the next Lookup asks the kernel again.
func (r *Resolver) Invalidate(dst netip.Addr) {
	r.mu.Lock()
	delete(r.cache, dst.Unmap())
	r.mu.Unlock()
}

func (r *Resolver) resolve(dst netip.Addr) (Hop, error) {
	routes, err := r.nl.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return Hop{}, fmt.Errorf("nexthop: no route to %s: %w", dst, err)
	}
	rt := routes[0]
	link, err := r.nl.LinkByIndex(rt.LinkIndex)
	if err != nil {
		return Hop{}, fmt.Errorf("nexthop: link %d: %w", rt.LinkIndex, err)
	}
	h := Hop{Ifindex: rt.LinkIndex, SrcMAC: link.Attrs().HardwareAddr, MTU: link.Attrs().MTU}
	if src, ok := netip.AddrFromSlice(rt.Src); ok {
		h.Src = src.Unmap()
	}
	next := dst
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok && gw.IsValid() && !gw.IsUnspecified() {
		next = gw.Unmap()
	}
	family := unix.AF_INET
	if next.Is6() {
		family = unix.AF_INET6
	}
	deadline := time.Now().Add(r.timeout)
	probed := false
	for {
		if mac := r.neighbour(rt.LinkIndex, family, next); mac != nil {
			h.DstMAC = mac
			return h, nil
		}
		if !time.Now().Before(deadline) {
			return Hop{}, fmt.Errorf("nexthop: %s via %s on %s: %w", dst, next, link.Attrs().Name, ErrUnresolved)
		}
		if !probed {
			r.Probe(next)
			probed = true
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// neighbour returns next's MAC from the neighbour table if the entry is
// usable (reachable, stale, delay, probe or permanent).
func (r *Resolver) neighbour(ifindex, family int, next netip.Addr) net.HardwareAddr {
	neighs, err := r.nl.NeighList(ifindex, family)
	if err != nil {
		return nil
	}
	const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
		netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, n := range neighs {
		ip, ok := netip.AddrFromSlice(n.IP)
		if ok && ip.Unmap() == next && n.State&usable != 0 && len(n.HardwareAddr) == 6 {
			return n.HardwareAddr
		}
	}
	return nil
}

// probe makes the kernel resolve next by sending it an empty datagram to
// the discard port.
func probe(next netip.Addr) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(next, 9)))
	if err != nil {
		return
	}
	_, _ = c.Write(nil)
	c.Close()
}
