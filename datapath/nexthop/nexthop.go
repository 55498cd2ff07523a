// Package nexthop answers, for a destination IP, what the AF_XDP transport
// must put in the frame it builds itself: the outgoing interface, the
// source IP the kernel would choose, our MAC and the next hop's MAC.
//
// Model. A Resolver belongs to one network namespace, the one its creator's
// thread is in when New is called: its netlink sockets (requests and
// notifications) and its probe socket are opened there and stay bound to
// it, so its background work (resolutions, the watch goroutine) keeps
// looking at that namespace's routes and neighbours whatever thread it
// runs on.
//
// It asks the kernel (netlink RTM_GETROUTE, then the neighbour table) so
// xdpfab follows the host's routing exactly. A missing or incomplete
// neighbour entry is resolved by having the kernel send one probe datagram
// (an empty UDP datagram to the discard port, 9) towards the next hop, which
// makes it run ARP or neighbour discovery, and by polling the table for a
// bounded time. Answers are cached, and the cache follows the kernel: the
// Resolver subscribes to the namespace's neighbour, route and link
// notifications (RTNLGRP_NEIGH, RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE,
// RTNLGRP_LINK). A neighbour entry that changes MAC updates the hops using
// it, one that fails or goes away drops them, any route change drops every
// hop (the next lookup asks the kernel again), and a link whose MAC, MTU or
// state changes drops the hops leaving through it. A lost notification
// (ENOBUFS) drops everything.
//
// Notifications only tell what the kernel knows, and a kernel that does not
// send through a neighbour itself (the AF_XDP path bypasses it) never
// notices that its MAC changed unless the peer announces it (gratuitous
// ARP, unsolicited neighbour advertisement). So a user that sees a
// destination stop answering calls Recheck: the hop is dropped and the
// kernel's neighbour entry, if it is a learned one (never a permanent or
// externally managed one), is deleted, so that the next resolution runs ARP
// or neighbour discovery afresh and learns the current MAC, which is what
// the kernel itself would do after its own probes failed, in seconds
// instead of milliseconds. Rechecks of one destination are at least
// Options.RecheckInterval apart.
package nexthop

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Hop is where frames for one destination go.
type Hop struct {
	Ifindex int
	Src     netip.Addr       // the source address the kernel's route picks
	SrcMAC  net.HardwareAddr // our interface's MAC
	Next    netip.Addr       // the neighbour frames go to: the destination or its gateway
	DstMAC  net.HardwareAddr // Next's MAC
	MTU     int
}

// ErrUnresolved is returned when the next hop's MAC could not be learned in
// time.
var ErrUnresolved = errors.New("nexthop: neighbour not resolved")

// ErrClosed is returned by a closed Resolver.
var ErrClosed = errors.New("nexthop: resolver closed")

// Options configures New. Zero values take the defaults.
type Options struct {
	// Timeout bounds how long a resolution waits for a neighbour (1 s).
	Timeout time.Duration
	// Src, when valid, is the address the caller sends from: routes are
	// looked up for it, as the kernel does for a socket bound to it
	// (source-based policy routing).
	Src netip.Addr
	// RecheckInterval is the least time between two Rechecks of one
	// destination that act (250 ms). A Recheck made for a spurious reason
	// (a stall on a loaded host) delays the one a real change needs by up
	// to this long; a peer that is really gone costs one neighbour
	// resolution per interval until its user gives up on it.
	RecheckInterval time.Duration
	// Probe makes the kernel resolve a next hop. The default sends an
	// empty datagram to its discard port from a UDP socket opened in the
	// resolver's namespace by New.
	Probe func(next netip.Addr)
}

// Resolver caches hops and keeps them current. Its zero value is not
// usable; use New.
type Resolver struct {
	opts  Options
	nl    *netlink.Handle     // bound to the namespace
	sub   *nl.NetlinkSocket   // neighbour, route and link notifications
	probe *net.UDPConn        // the default Probe's socket, or nil
	done  chan struct{}       // closed by Close
	wg    sync.WaitGroup      // resolutions, rechecks and the watch goroutine
	mu    sync.Mutex          // guards the fields below
	cache map[netip.Addr]Hop  // by destination
	busy  map[netip.Addr]bool // destinations with a background resolution running
	// gen changes whenever the cache may have gone stale (a notification,
	// Invalidate, Recheck): a resolution started before does not store
	// its answer.
	gen       uint64
	rechecked map[netip.Addr]time.Time // the last Recheck that acted, by destination
	closed    bool
}

// New returns a resolver of the network namespace of the calling thread:
// a caller that switched a thread into another namespace calls New on it
// (runtime.LockOSThread, or testenv's Netns.Do). Close releases it.
func New(opts Options) (*Resolver, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.RecheckInterval <= 0 {
		opts.RecheckInterval = 250 * time.Millisecond
	}
	// Every socket is opened here, on the caller's thread, and so in its
	// namespace, for good: netlink and UDP sockets stay in the namespace
	// they were created in. (Opening them at a namespace handle instead
	// would need setns(2), a privilege the namespace's own users lack.)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := &Resolver{opts: opts, done: make(chan struct{}), cache: map[netip.Addr]Hop{},
		busy: map[netip.Addr]bool{}, rechecked: map[netip.Addr]time.Time{}}
	var err error
	if r.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		return nil, fmt.Errorf("nexthop: netlink: %w", err)
	}
	if r.sub, err = subscribe(); err != nil {
		r.nl.Close()
		return nil, fmt.Errorf("nexthop: netlink notifications: %w", err)
	}
	if r.opts.Probe == nil {
		// Opened here, on the caller's thread, so in the namespace.
		if r.probe, err = net.ListenUDP("udp", nil); err != nil {
			r.sub.Close()
			r.nl.Close()
			return nil, fmt.Errorf("nexthop: probe socket: %w", err)
		}
		r.opts.Probe = r.sendProbe
	}
	r.wg.Add(1)
	go r.watch()
	return r, nil
}

// Close stops following the kernel, waits for background resolutions to
// end (they stop at once) and releases the sockets. Later lookups fail with
// ErrClosed; Try and Recheck do nothing.
func (r *Resolver) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	r.mu.Unlock()
	r.sub.Close() // wakes the watch goroutine
	r.wg.Wait()
	r.nl.Close()
	if r.probe != nil {
		r.probe.Close()
	}
	return nil
}

// Lookup returns the hop for dst, resolving it if needed (blocking up to
// Options.Timeout).
func (r *Resolver) Lookup(dst netip.Addr) (Hop, error) {
	dst = dst.Unmap()
	r.mu.Lock()
	h, ok := r.cache[dst]
	closed := r.closed
	r.mu.Unlock()
	switch {
	case closed:
		return Hop{}, ErrClosed
	case ok:
		return h, nil
	}
	return r.resolveAndStore(dst)
}

// Cached returns dst's hop if it is resolved already, without blocking.
func (r *Resolver) Cached(dst netip.Addr) (Hop, bool) {
	r.mu.Lock()
	h, ok := r.cache[dst.Unmap()]
	r.mu.Unlock()
	return h, ok
}

// Try returns dst's hop if it is resolved already; if not, it starts
// resolving it in the background (once at a time per destination) and
// returns false. It never blocks: the per-packet path calls it.
func (r *Resolver) Try(dst netip.Addr) (Hop, bool) {
	dst = dst.Unmap()
	r.mu.Lock()
	h, ok := r.cache[dst]
	if !ok && !r.closed && !r.busy[dst] {
		r.busy[dst] = true
		r.wg.Add(1)
		go r.background(dst, nil)
	}
	r.mu.Unlock()
	return h, ok
}

// Invalidate forgets dst's hop so the next lookup asks the kernel again.
func (r *Resolver) Invalidate(dst netip.Addr) {
	r.mu.Lock()
	delete(r.cache, dst.Unmap())
	r.gen++
	r.mu.Unlock()
}

// Recheck is what a user calls when dst stops answering: it forgets dst's
// hop and resolves it again in the background, making the kernel verify
// the neighbour first (see the package doc). It does nothing within
// Options.RecheckInterval of the last Recheck of dst that acted, while a
// resolution of dst runs, or once closed. It never blocks.
func (r *Resolver) Recheck(dst netip.Addr) {
	dst = dst.Unmap()
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.busy[dst] || now.Sub(r.rechecked[dst]) < r.opts.RecheckInterval {
		return
	}
	if len(r.rechecked) >= maxRechecked {
		for d, at := range r.rechecked {
			if now.Sub(at) >= r.opts.RecheckInterval {
				delete(r.rechecked, d)
			}
		}
	}
	r.rechecked[dst] = now
	old, cached := r.cache[dst]
	r.busy[dst] = true
	r.wg.Add(1)
	var stale *Hop
	if cached {
		stale = &old
	}
	go r.background(dst, func() { r.reverify(dst, stale) })
}

// maxRechecked bounds the Recheck rate limiter's memory: past it, entries
// older than the interval are dropped.
const maxRechecked = 1024

// background resolves dst and stores the answer, after first (a Recheck)
// has run.
func (r *Resolver) background(dst netip.Addr, first func()) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.busy, dst)
		r.mu.Unlock()
	}()
	if first != nil {
		first()
	}
	_, _ = r.resolveAndStore(dst)
}

// reverify makes the kernel verify dst's neighbour: unless the kernel
// already knows a MAC other than the stale hop's (then that is the news),
// a learned entry is deleted so that the probe of the next resolution runs
// ARP or neighbour discovery. Then dst's hop is dropped.
func (r *Resolver) reverify(dst netip.Addr, stale *Hop) {
	defer r.Invalidate(dst)
	rt, next, err := r.route(dst)
	if err != nil {
		return
	}
	n := r.neighbour(rt.LinkIndex, next)
	if n == nil || n.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 || n.Flags&netlink.NTF_EXT_LEARNED != 0 {
		return // nothing learned to verify, or not ours to touch
	}
	if stale != nil && usable(n) && !sameMAC(n.HardwareAddr, stale.DstMAC) {
		return // the kernel learned the new MAC already
	}
	_ = r.nl.NeighDel(n)
}

// resolveAndStore resolves dst and caches the answer unless the cache may
// have gone stale meanwhile; then it tries again, twice at most, and
// returns the last answer uncached (the next use resolves once more).
func (r *Resolver) resolveAndStore(dst netip.Addr) (Hop, error) {
	for attempt := 0; ; attempt++ {
		r.mu.Lock()
		gen := r.gen
		r.mu.Unlock()
		h, err := r.resolve(dst)
		if err != nil {
			return Hop{}, err
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return Hop{}, ErrClosed
		}
		if r.gen == gen {
			r.cache[dst] = h
			r.mu.Unlock()
			return h, nil
		}
		r.mu.Unlock()
		if attempt == 2 {
			return h, nil
		}
	}
}

// route returns the kernel's route to dst and the neighbour it goes to.
func (r *Resolver) route(dst netip.Addr) (netlink.Route, netip.Addr, error) {
	var opts *netlink.RouteGetOptions
	if r.opts.Src.IsValid() && !r.opts.Src.IsUnspecified() {
		opts = &netlink.RouteGetOptions{SrcAddr: r.opts.Src.AsSlice()}
	}
	routes, err := r.nl.RouteGetWithOptions(dst.AsSlice(), opts)
	if err != nil || len(routes) == 0 {
		return netlink.Route{}, netip.Addr{}, fmt.Errorf("nexthop: no route to %s: %w", dst, err)
	}
	rt := routes[0]
	next := dst
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok && gw.IsValid() && !gw.IsUnspecified() {
		next = gw.Unmap()
	}
	return rt, next, nil
}

func (r *Resolver) resolve(dst netip.Addr) (Hop, error) {
	rt, next, err := r.route(dst)
	if err != nil {
		return Hop{}, err
	}
	link, err := r.nl.LinkByIndex(rt.LinkIndex)
	if err != nil {
		return Hop{}, fmt.Errorf("nexthop: link %d: %w", rt.LinkIndex, err)
	}
	h := Hop{Ifindex: rt.LinkIndex, SrcMAC: link.Attrs().HardwareAddr, Next: next, MTU: link.Attrs().MTU}
	if src, ok := netip.AddrFromSlice(rt.Src); ok {
		h.Src = src.Unmap()
	}
	deadline := time.Now().Add(r.opts.Timeout)
	probed := false
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if n := r.neighbour(rt.LinkIndex, next); n != nil && usable(n) {
			h.DstMAC = n.HardwareAddr
			return h, nil
		}
		if !time.Now().Before(deadline) {
			return Hop{}, fmt.Errorf("nexthop: %s via %s on %s: %w", dst, next, link.Attrs().Name, ErrUnresolved)
		}
		if !probed {
			r.opts.Probe(next)
			probed = true
		}
		select {
		case <-tick.C:
		case <-r.done:
			return Hop{}, ErrClosed
		}
	}
}

// usableStates are the neighbour states whose MAC can be used.
const usableStates = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY |
	netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP

// usable reports whether n's MAC can be used: a usable state and an
// Ethernet address.
func usable(n *netlink.Neigh) bool {
	return n.State&usableStates != 0 && len(n.HardwareAddr) == 6
}

// neighbour returns the kernel's entry for next on ifindex, or nil.
func (r *Resolver) neighbour(ifindex int, next netip.Addr) *netlink.Neigh {
	family := unix.AF_INET
	if next.Is6() {
		family = unix.AF_INET6
	}
	neighs, err := r.nl.NeighList(ifindex, family)
	if err != nil {
		return nil
	}
	for i := range neighs {
		ip, ok := netip.AddrFromSlice(neighs[i].IP)
		if ok && ip.Unmap() == next {
			return &neighs[i]
		}
	}
	return nil
}

func sameMAC(a, b net.HardwareAddr) bool { return string(a) == string(b) }

// sendProbe is the default Probe: an empty datagram to next's discard
// port from the socket New opened in the namespace.
func (r *Resolver) sendProbe(next netip.Addr) {
	_, _ = r.probe.WriteToUDPAddrPort(nil, netip.AddrPortFrom(next, 9))
}
