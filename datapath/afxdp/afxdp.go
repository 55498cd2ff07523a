// Package afxdp is the AF_XDP datapath.Transport: xdpfab packets arrive
// through the XDP program's XSKMAP redirect into AF_XDP sockets, with the
// kernel's verdict (sender's fi_addr from the AV map, UDP checksum
// verified) in the metadata in front of each packet, and leave as frames
// this package builds itself (Ethernet/IP/UDP headers with a UDP checksum,
// next-hop MAC from the neighbour table).
//
// Model. Open needs xdpfab attached on the interface (xdp.Attach or
// `xdpfab attach`) and a local address of the interface (not a wildcard:
// frames need a source address). The kernel lets one AF_XDP socket bind a
// queue, so the sockets belong to a device shared by all of the process's
// transports on the interface: one socket per RX queue (every queue the
// kernel accepts a socket on, up to the XSKMAP's 64), each in the XSKMAP
// slot of its queue (on a veth, after xsk.WarmKernelMapping has had the
// kernel touch the frames a connection's first packets use, paying a
// shadow-paging VM's first-touch traps at open instead of on the
// datapath); the transport that receives drains the rings and
// hands every packet to the transport of its UDP destination port through
// a bounded, preallocated per-transport queue. A packet goes to a
// transport only if its destination address is the transport's and the
// program marked its checksum verified (Stats.RxOtherHost and
// RxBadChecksum count the rest: a port entry still bound to every address,
// a program older than checksums). While open, the device keeps the
// program's local_addrs map equal to the namespace's addresses (netlink;
// localaddrs.go), for ports bound to every address. Each transport also
// binds an ordinary kernel UDP socket to its address and port: that
// reserves the port, and receives whatever the program passes to the stack
// (a non-strict unknown peer, IP fragments, no socket on a queue, a
// datagram whose checksum an in-host kernel sender left to offload), so no
// packet is lost to the choice of path. Configure writes the port's entry
// in the program's ports map (which AV and domain it serves, strict or
// not, and the transport's address); until then the program passes the
// port's traffic to the kernel socket. Close removes the port entry; the
// last transport on the interface removes the XSKMAP slots and the sockets.
//
// With Options.SharedPoll the process's shared poller (datapath/rxpoll)
// serves the transport instead (datapath.ReadyNotifier, shared.go): the
// device's sockets are on the poller, whose handler drains the rings and
// runs the reader of each transport it queued datagrams for, sends during
// those readers are kicked once after them, and the kernel socket is on
// the poller too. Thousands of endpoints on one interface (bench peers
// --ini xdp) then cost no goroutine, timer or descriptor beyond the kernel
// socket each; the transports of one address share a next-hop resolver
// (resolvers.go), and Options.QueueLen bounds their queues' memory.
//
// Receive takes from the transport's queue and, at most every
// KernelPollInterval, from the kernel socket (a recvmmsg that finds nothing
// cost half the CPU of a busy target when it ran on every Receive); a
// blocking Receive waits for the queue, looking at the kernel socket at
// least every FallbackPoll. Send resolves the next hop from a cache
// (datapath/nexthop) that follows the namespace's neighbour, route and link
// changes; a destination whose hop is not known yet is resolved in the
// background, and its packets go through the kernel socket meanwhile, so
// Send never blocks. So do packets whose route leaves through another
// interface than the one the AF_XDP sockets are on: a frame built for that
// hop would go out on the wrong link. When the reliable engine finds a
// peer silent (datapath.PathChecker), the transport has the hop verified
// again (nexthop.Resolver.Recheck): a neighbour whose MAC changed without
// telling anyone is learned afresh within milliseconds.
package afxdp

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/nexthop"
	"github.com/xdpfab/xdpfab/datapath/rxpoll"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/udpframe"
	"github.com/xdpfab/xdpfab/datapath/xsk"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/xdp"
)

// FallbackPoll bounds how long a blocking Receive goes without looking at
// the kernel socket.
const FallbackPoll = 2 * time.Millisecond

// KernelPollInterval is how often Receive looks at the kernel socket while
// the AF_XDP path is busy. The kernel socket carries only what the program
// passes to the stack (fragments, traffic before Configure, ICMP errors),
// so its packets may wait this long (KernelPollInterval + kernelBusySlack
// while AF_XDP datagrams keep coming); the AF_XDP path does not.
const KernelPollInterval = 100 * time.Microsecond

// batch is the most packets one ring pass or Send moves.
const batch = 64

// queueLen is how many received packets a transport holds before its
// endpoint reads them; past it they are dropped (and retransmitted).
const queueLen = 512

// slotSize holds any datagram an AF_XDP frame can carry (frames are 4096
// bytes including the kernel's headroom).
const slotSize = 4096

// Options configures Open.
type Options struct {
	// Iface is the interface xdpfab is attached on; empty means the one
	// holding Local's address (InterfaceOf).
	Iface string
	// Local is the interface address and UDP port to serve (port 0 picks
	// a free one through the kernel socket).
	Local netip.AddrPort
	// Bind selects copy or zero-copy AF_XDP (auto: zero-copy if possible).
	Bind xsk.BindMode
	// QueueLen is how many received datagrams the transport holds for its
	// endpoint (default 512). A process with thousands of endpoints on the
	// interface, each with a few operations in flight, gives each a short
	// queue: the queue's buffers (a frame each) are most of a transport's
	// memory.
	QueueLen int
	// Batch is the most datagrams one Receive or Send moves (BatchSize;
	// default 64). The reliable engine keeps a receive buffer per batch
	// slot.
	Batch int
	// SharedPoll has the process's shared poller (datapath/rxpoll) serve
	// the transport (datapath.ReadyNotifier, shared.go): the poller drains
	// the interface's rings and calls the transport's reader, so an
	// endpoint needs no receive goroutine, and thousands of endpoints on
	// one interface cost nothing while idle.
	SharedPoll bool
}

// Stats are the transport's own counters.
type Stats struct {
	RxXSK, RxKernel uint64 // packets received through AF_XDP / the kernel socket
	TxXSK           uint64 // frames transmitted
	TxNoHop         uint64 // packets sent through the kernel socket: next hop not resolved yet
	TxOtherLink     uint64 // packets sent through the kernel socket: their route leaves through another interface
	TxNoFrame       uint64 // packets dropped: every TX frame in flight
	TxTooBig        uint64 // packets dropped: larger than the next hop's MTU or a frame (Send reports FI_EMSGSIZE)
	RxQueueFull     uint64 // packets dropped: the transport's queue was full
	RxBadChecksum   uint64 // packets dropped: not marked checksum-verified by the XDP program
	RxOtherHost     uint64 // packets dropped: to the port but not to the transport's address
}

// Transport is an AF_XDP datapath.Transport for one local port.
type Transport struct {
	dev      *device
	kernel   *udp.Transport
	local    netip.AddrPort
	addr     netip.Addr // local's address as received frames carry it (drain compares)
	resolver *nexthop.Resolver
	closed   atomic.Bool
	closing  chan struct{}
	q        rxQueue
	timer    *time.Timer // Receive's FallbackPoll wait (one Receive at a time)
	// The kernel-socket check's state (receiveKernel), owned by Receive
	// (one at a time): when it next looks, in nanoseconds since epoch, and
	// how many calls it has seen (the clock is read on every 16th).
	kernelNext  int64
	kernelCalls uint32
	epoch       time.Time

	rxXSK, rxKernel, txXSK, txNoHop, txOtherLink, txNoFrame, txTooBig atomic.Uint64
	rxBadCsum, rxOtherHost                                            atomic.Uint64

	// The fields of many endpoints on one interface, after the hot ones
	// above so that a lone endpoint's layout is what it was without them.
	batch int
	// shared: the transport is served by the shared poller (Options.SharedPoll,
	// shared.go): Receive never drains the rings, and looks at the kernel
	// socket only when the poller found it readable (kernelDue).
	shared    bool
	kernelDue atomic.Bool
	ready     atomic.Pointer[func()] // the reader NotifyReady set
	listed    bool                   // on the device's pending list; guarded by dev.rxMu
	kernelReg *rxpoll.Registration   // the kernel socket on the shared poller
}

var (
	_ datapath.Transport   = (*Transport)(nil)
	_ datapath.Pollable    = (*Transport)(nil)
	_ datapath.PathChecker = (*Transport)(nil)
)

// Open binds the transport's port on the interface's shared AF_XDP device
// (opening the device for the first transport) and the kernel socket.
// Call it with the thread in the interface's network namespace; the
// transport keeps working from any goroutine afterwards.
func Open(opts Options) (*Transport, error) {
	if opts.Iface == "" {
		iface, err := InterfaceOf(opts.Local.Addr())
		if err != nil {
			return nil, fmt.Errorf("afxdp: %w", err)
		}
		opts.Iface = iface
	}
	if !opts.Local.Addr().IsValid() || opts.Local.Addr().IsUnspecified() {
		// Frames this transport builds need a source address, and the
		// receive side serves one destination address.
		return nil, fmt.Errorf("afxdp: local address %v: an interface address is needed: %w", opts.Local.Addr(), fi.EINVAL)
	}
	t := &Transport{closing: make(chan struct{}), batch: batch, shared: opts.SharedPoll}
	if opts.Batch > 0 {
		t.batch = min(opts.Batch, batch)
	}
	qlen := queueLen
	if opts.QueueLen > 0 {
		qlen = opts.QueueLen
	}
	var err error
	// The kernel socket's batch state is per batch slot: no larger than
	// the transport's. A shared transport's is on the shared poller
	// (NotifyReady), so it needs no epoll set of its own (udp's armed
	// socket): one descriptor per endpoint, not two.
	t.kernel, err = udp.Listen(opts.Local, udp.Options{Batch: t.batch, SharedPoll: t.shared})
	if err != nil {
		return nil, fmt.Errorf("afxdp: kernel socket: %w", err)
	}
	t.local = t.kernel.LocalAddr()
	// As a received frame's destination parses: IPv4 as 4 bytes (an IPv6
	// datagram to a mapped address is not IPv4 traffic), no zone.
	t.addr = t.local.Addr().Unmap().WithZone("")
	t.timer = time.NewTimer(time.Hour)
	t.timer.Stop()
	t.epoch = time.Now()
	if t.dev, err = openDevice(opts.Iface, opts.Bind); err != nil {
		t.kernel.Close()
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	slot := slotSize
	if t.shared {
		// A queue slot holds what a frame can carry (the device's frames
		// are sized by the interface's MTU): thousands of shared
		// transports' queues are most of their memory.
		slot = min(slotSize, t.dev.frameSize)
	}
	t.q.init(qlen, slot)
	// Bound to this thread's namespace, which its goroutines keep using.
	// Shared transports share one resolver per address of the device
	// (resolvers.go); any other has its own, as a lone endpoint did before
	// there were shared ones.
	if t.shared {
		t.resolver, err = t.dev.resolverFor(t.local.Addr())
	} else {
		t.resolver, err = nexthop.New(nexthop.Options{Src: t.local.Addr()})
	}
	if err != nil {
		t.dev.close(t)
		t.kernel.Close()
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	if err := t.dev.register(t); err != nil {
		t.releaseResolver()
		t.dev.close(t)
		t.kernel.Close()
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	return t, nil
}

// releaseResolver lets go of the transport's next-hop resolver: its own,
// or its hold on the device's shared one.
func (t *Transport) releaseResolver() {
	if t.shared {
		t.dev.putResolver(t.local.Addr())
		return
	}
	t.resolver.Close()
}

// InterfaceOf returns the name of the interface holding addr, in the
// calling thread's network namespace.
func InterfaceOf(addr netip.Addr) (string, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return "", fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || ip.Unmap() != addr.Unmap() {
			continue
		}
		l, err := netlink.LinkByIndex(a.LinkIndex)
		if err != nil {
			return "", fmt.Errorf("link %d: %w", a.LinkIndex, err)
		}
		return l.Attrs().Name, nil
	}
	return "", fmt.Errorf("no interface has address %v: %w", addr, fi.EADDRNOTAVAIL)
}

// Configure sets the program's entry for the transport's port: the AV
// whose peers may send (strict: others are dropped in XDP) and the domain
// whose MR keys requests name. The entry is bound to the transport's
// address (cfg.Addr is ignored): datagrams to the port but another address
// are not this transport's and pass to the stack.
func (t *Transport) Configure(cfg xdp.PortConfig) error {
	cfg.Addr = t.local.Addr()
	return t.dev.att.SetPort(t.local.Port(), cfg)
}

// Attachment returns the XDP attachment the transport uses (its AV and MR
// maps are the ones the kernel consults).
func (t *Transport) Attachment() *xdp.Attachment { return t.dev.att }

// LocalAddr implements datapath.Transport.
func (t *Transport) LocalAddr() netip.AddrPort { return t.local }

// BatchSize implements datapath.Transport.
func (t *Transport) BatchSize() int { return t.batch }

// Receive implements datapath.Transport. The caller that gets the device's
// RX lock drains the rings for every transport and, when nothing is there
// and wait is set, polls them; the others wait for their queue. The kernel
// socket is looked at (receiveKernel) by a round that found nothing on the
// rings, after them: its check, a system call when due (1-2 µs in a VM),
// then never delays a datagram waiting on a ring, as it did every
// KernelPollInterval to a ping-pong's messages. A round with datagrams in
// hand looks only when the check is kernelBusySlack overdue, so a stream
// that never leaves the rings empty does not starve the kernel socket.
func (t *Transport) Receive(pkts []datapath.Packet, wait bool) (int, error) {
	d := t.dev
	waited := false
	for {
		if t.closed.Load() {
			return 0, datapath.ErrClosed
		}
		if n := t.q.pop(pkts); n > 0 {
			if n < len(pkts) {
				m, err := t.receiveKernel(pkts[n:], waited, true)
				if err != nil {
					return n, err
				}
				n += m
			}
			return n, nil
		}
		// A shared transport leaves the rings to the shared poller.
		if !t.shared && d.rxMu.TryLock() {
			if d.drain() > 0 {
				if len(d.pending) > 0 { // shared transports' datagrams
					d.wakePending()
				}
				d.rxMu.Unlock()
				continue
			}
			m, err := t.receiveKernel(pkts, waited, false)
			if err == nil && m == 0 && wait {
				d.poll(FallbackPoll)
				waited = true
			}
			d.rxMu.Unlock()
			if err != nil || m > 0 || !wait {
				return m, err
			}
			continue
		}
		if m, err := t.receiveKernel(pkts, waited, false); err != nil || m > 0 {
			return m, err
		}
		if !wait {
			return 0, nil
		}
		t.timer.Reset(FallbackPoll)
		select {
		case <-t.q.ready:
		case <-t.timer.C:
		case <-t.closing:
		}
		t.timer.Stop()
		waited = true
	}
}

// kernelBusySlack is how far past KernelPollInterval a Receive round that
// has AF_XDP datagrams in hand lets the kernel socket's check slip.
const kernelBusySlack = 900 * time.Microsecond

// receiveKernel takes what the kernel socket holds if KernelPollInterval
// (plus kernelBusySlack when busy: the caller has datagrams already) has
// passed since it last looked and found nothing.
// A spinning receiver calls it millions of times a second, so it reads the
// clock on every 16th call only, unless the caller has just waited.
// A shared transport looks only when the shared poller found its kernel
// socket readable, and then at once.
func (t *Transport) receiveKernel(pkts []datapath.Packet, waited, busy bool) (int, error) {
	now := int64(0)
	if t.shared && !waited {
		if !t.kernelDue.Load() {
			return 0, nil
		}
		t.kernelDue.Store(false)
	} else {
		t.kernelCalls++
		if !waited && t.kernelCalls%16 != 0 {
			return 0, nil
		}
		now = int64(time.Since(t.epoch))
		next := t.kernelNext
		if busy {
			next += int64(kernelBusySlack)
		}
		if now < next {
			return 0, nil
		}
	}
	m, err := t.kernel.Receive(pkts, false)
	if err != nil && !errors.Is(err, datapath.ErrClosed) {
		return 0, err
	}
	if m == 0 {
		t.kernelNext = now + int64(KernelPollInterval)
	}
	t.rxKernel.Add(uint64(m))
	return m, nil
}

// PollFDs implements datapath.Pollable: the device's AF_XDP sockets and the
// kernel socket. Only for the device's lone transport: with several, one
// transport's Receive may drain the rings into another's queue, which no
// descriptor reports.
func (t *Transport) PollFDs(dst []unix.PollFd) ([]unix.PollFd, bool) {
	if t.closed.Load() {
		return dst, false
	}
	d := t.dev
	d.mu.RLock()
	alone := len(d.ports) == 1 && d.ports[t.local.Port()] == t
	d.mu.RUnlock()
	if !alone || len(d.pollFDs) == 0 {
		return dst, false
	}
	out, ok := t.kernel.PollFDs(append(dst, d.pollFDs...))
	if !ok {
		return dst, false
	}
	return out, true
}

// metaOf turns the XDP program's metadata into the datapath's.
func metaOf(m bpf.Meta, ok bool) datapath.Meta {
	if !ok {
		return datapath.NoMeta
	}
	dm := datapath.Meta{FIAddr: fi.Addr(m.FiAddr), Verdict: datapath.VerdictAccepted}
	if m.Flags&bpf.MetaPeerUnknown != 0 {
		dm.FIAddr = fi.AddrNotAvail
	}
	return dm
}

// Send implements datapath.Transport. A datagram larger than the next
// hop's MTU (or a frame) is dropped and counted (Stats.TxTooBig) while the
// rest of the batch goes out; Send then reports FI_EMSGSIZE for it.
func (t *Transport) Send(pkts []datapath.Packet) error {
	if t.closed.Load() {
		return datapath.ErrClosed
	}
	d := t.dev
	d.txMu.Lock()
	defer d.txMu.Unlock()
	if len(d.socks) == 0 {
		return datapath.ErrClosed
	}
	s := d.socks[0]
	var tooBig error
	for len(pkts) > 0 {
		k := 0
		for len(pkts) > 0 && k < len(d.tx) {
			p := &pkts[0]
			pkts = pkts[1:]
			hop, ok := t.hop(p.Addr.Addr().Unmap())
			if !ok {
				// Until the next hop's MAC is known, or when the route
				// leaves through another interface, the kernel socket
				// carries the packet: the stack queues it behind ARP or
				// neighbour discovery instead of losing it, and sends it
				// out on the right link.
				_ = t.kernel.Send(p1(p))
				continue
			}
			addr, buf, ok := s.NextTxFrame()
			if !ok {
				t.txNoFrame.Add(1)
				continue
			}
			ep := udpframe.Endpoints{SrcMAC: hop.SrcMAC, DstMAC: hop.DstMAC, Src: t.local,
				Dst: netip.AddrPortFrom(p.Addr.Addr().Unmap(), p.Addr.Port())}
			hl := ep.HeaderLen()
			if hl+len(p.Buf) > len(buf) || hl+len(p.Buf)-udpframe.EthLen > hop.MTU {
				// Dropped, counted and reported once the rest of the
				// batch is on its way: the frames built for it stay ours
				// to send.
				s.ReturnTxFrame(addr)
				t.txTooBig.Add(1)
				if tooBig == nil {
					tooBig = fmt.Errorf("afxdp: %d-byte datagram exceeds the MTU %d: %w", len(p.Buf), hop.MTU, fi.EMSGSIZE)
				}
				continue
			}
			n, err := udpframe.BuildCopy(buf, &ep, p.Buf)
			if err != nil {
				s.ReturnTxFrame(addr)
				continue
			}
			d.tx[k] = xsk.Desc{Addr: addr, Len: uint32(n)}
			k++
		}
		if k == 0 {
			continue
		}
		var sent int
		var err error
		if t.shared {
			// Held while the shared poller's handler runs readers.
			sent, err = d.transmitHeld(s, d.tx[:k])
		} else {
			sent, err = s.Transmit(d.tx[:k])
		}
		for _, d := range d.tx[sent:k] { // TX ring full: datagram semantics, drop
			s.ReturnTxFrame(d.Addr)
			t.txNoFrame.Add(1)
		}
		t.txXSK.Add(uint64(sent))
		if err != nil {
			return err
		}
	}
	return tooBig
}

// p1 returns p as a one-packet batch without allocating.
func p1(p *datapath.Packet) []datapath.Packet { return unsafe.Slice(p, 1) }

// hop returns the next hop of dst if a frame can be sent to it from the
// AF_XDP sockets: resolved (else resolving starts in the background) and
// out through their interface. It counts the packets it refuses.
func (t *Transport) hop(dst netip.Addr) (nexthop.Hop, bool) {
	h, ok := t.resolver.Try(dst)
	switch {
	case !ok:
		t.txNoHop.Add(1)
		return h, false
	case h.Ifindex != t.dev.att.Ifindex:
		t.txOtherLink.Add(1)
		return h, false
	}
	return h, true
}

// ResolvePath resolves dst's next hop now (blocking up to a second), so
// that the first datagrams to it leave through AF_XDP instead of the
// kernel socket; the transports of the address share the answer.
func (t *Transport) ResolvePath(dst netip.Addr) error {
	_, err := t.resolver.Lookup(dst.Unmap())
	if err != nil {
		return fmt.Errorf("afxdp: next hop of %v: %w", dst, err)
	}
	return nil
}

// CheckPath implements datapath.PathChecker: the reliable engine finds dst
// silent, so its next hop is verified again (nexthop.Resolver.Recheck,
// rate-limited there); packets go through the kernel socket until it is.
func (t *Transport) CheckPath(dst netip.AddrPort) {
	t.resolver.Recheck(dst.Addr())
}

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	t.q.mu.Lock()
	drops := t.q.drops
	t.q.mu.Unlock()
	return Stats{RxXSK: t.rxXSK.Load(), RxKernel: t.rxKernel.Load(), TxXSK: t.txXSK.Load(),
		TxNoHop: t.txNoHop.Load(), TxOtherLink: t.txOtherLink.Load(), TxNoFrame: t.txNoFrame.Load(), TxTooBig: t.txTooBig.Load(),
		RxQueueFull: drops, RxBadChecksum: t.rxBadCsum.Load(), RxOtherHost: t.rxOtherHost.Load()}
}

// Close implements datapath.Transport: it wakes a blocked Receive, removes
// the port entry, leaves the device (the last transport closes it), stops
// the next-hop resolver (its goroutines and netlink sockets) and closes the
// kernel socket.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	close(t.closing)
	t.stopNotify()
	_ = t.dev.att.DeletePort(t.local.Port())
	t.dev.close(t)
	t.releaseResolver()
	return t.kernel.Close()
}
