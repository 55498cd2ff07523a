// Package afxdp is the AF_XDP datapath.Transport: xdpfab packets arrive
// through the XDP program's XSKMAP redirect into AF_XDP sockets, with the
// kernel's verdict (sender's fi_addr from the AV map, MR vetting) in the
// metadata in front of each packet, and leave as frames this package builds
// itself (Ethernet/IP/UDP headers, next-hop MAC from the neighbour table).
//
// Model. Open needs xdpfab attached on the interface (xdp.Attach or
// `xdpfab attach`). It binds one AF_XDP socket per RX queue of the
// interface (every queue the kernel accepts a socket on, up to the XSKMAP's
// 64) and puts each into the XSKMAP slot of its queue, and it also
// binds an ordinary kernel UDP socket to the same address and port: that
// reserves the port, and receives whatever the program passes to the stack
// (no socket bound on a queue, a non-strict unknown peer, IP fragments), so
// no packet is lost to the choice of path. Configure writes the port's
// entry in the program's ports map (which AV and domain it serves, strict
// or not); until then the program passes the port's traffic to the kernel
// socket. Close removes the port entry and the XSKMAP slots.
//
// Receive polls the RX rings of every socket and the kernel socket; a
// blocking Receive sleeps in poll(2) on the AF_XDP sockets and an eventfd
// (Close), waking at least every FallbackPoll to look at the kernel socket.
// Send resolves the next hop from a cache; a destination whose MAC is not
// known yet is resolved in the background and its packets are dropped
// meanwhile (the reliable layer retransmits), so Send never blocks.
package afxdp

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/nexthop"
	"github.com/xdpfab/xdpfab/udpframe"
	"github.com/xdpfab/xdpfab/xdp"
	"github.com/xdpfab/xdpfab/xsk"
)

// FallbackPoll bounds how long a blocking Receive goes without looking at
// the kernel socket.
const FallbackPoll = 2 * time.Millisecond

// batch is the most packets one Receive or Send moves per socket.
const batch = 64

// Options configures Open.
type Options struct {
	// Iface is the interface xdpfab is attached on.
	Iface string
	// Local is the interface address and UDP port to serve (port 0 picks
	// a free one through the kernel socket).
	Local netip.AddrPort
	// Bind selects copy or zero-copy AF_XDP (auto: zero-copy if possible).
	Bind xsk.BindMode
	// UDPChecksum computes UDP checksums on IPv4 too (zero is legal there
	// and saves a pass over the payload).
	UDPChecksum bool
}

// Stats are the transport's own counters.
type Stats struct {
	RxXSK, RxKernel uint64 // packets received through AF_XDP / the kernel socket
	TxXSK           uint64 // frames transmitted
	TxNoHop         uint64 // packets dropped: next hop not resolved yet
	TxNoFrame       uint64 // packets dropped: every TX frame in flight
	RxNotOurs       uint64 // frames on the XSK that were not UDP to our port
	RxTruncated     uint64 // payloads larger than the receive buffer
}

// Transport is an AF_XDP datapath.Transport.
type Transport struct {
	att      *xdp.Attachment
	socks    []*xsk.Socket
	kernel   *udp.Transport
	local    netip.AddrPort
	resolver *nexthop.Resolver
	wakeFD   int
	pollFDs  []unix.PollFd
	closed   atomic.Bool
	udpCsum  bool

	rxMu sync.Mutex // serialises Receive against Close
	rx   [batch]xsk.Desc

	txMu sync.Mutex // Send from several goroutines; guards tx
	tx   [batch]xsk.Desc

	hopMu     sync.Mutex
	resolving map[netip.Addr]bool // guarded by hopMu

	rxXSK, rxKernel, txXSK, txNoHop, txNoFrame, rxNotOurs, rxTrunc atomic.Uint64
}

var _ datapath.Transport = (*Transport)(nil)

// Open binds the AF_XDP sockets and the kernel socket. Call it with the
// thread in the interface's network namespace; the transport keeps
// working from any goroutine afterwards.
func Open(opts Options) (*Transport, error) {
	att, err := xdp.Open(opts.Iface)
	if err != nil {
		return nil, fmt.Errorf("afxdp: xdpfab is not attached on %s: %w", opts.Iface, err)
	}
	t := &Transport{att: att, wakeFD: -1, udpCsum: opts.UDPChecksum, resolving: map[netip.Addr]bool{}}
	if err := t.open(opts); err != nil {
		t.release()
		return nil, err
	}
	return t, nil
}

func (t *Transport) open(opts Options) error {
	nl, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("afxdp: netlink: %w", err)
	}
	link, err := nl.LinkByIndex(t.att.Ifindex)
	if err != nil {
		nl.Close()
		return fmt.Errorf("afxdp: link %s: %w", opts.Iface, err)
	}
	t.kernel, err = udp.Listen(opts.Local, udp.Options{})
	if err != nil {
		nl.Close()
		return fmt.Errorf("afxdp: kernel socket: %w", err)
	}
	t.local = t.kernel.LocalAddr()
	t.resolver = nexthop.New(nl, time.Second)
	// Probe from the kernel socket, which lives in the right namespace
	// whatever goroutine resolves: one byte to the discard port.
	t.resolver.Probe = func(next netip.Addr) {
		_ = t.kernel.Send([]datapath.Packet{{Buf: []byte{0}, Addr: netip.AddrPortFrom(next, 9)}})
	}
	t.wakeFD, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("afxdp: eventfd: %w", err)
	}
	queues := link.Attrs().NumRxQueues
	if queues < 1 {
		queues = 1
	}
	queues = min(queues, bpf.XSKMaxQueues)
	for q := 0; q < queues; q++ {
		s, err := openQueue(t.att.Ifindex, q, opts.Bind)
		if err != nil && q > 0 && errors.Is(err, unix.EINVAL) {
			// IFLA_NUM_RX_QUEUES is the allocated count; the kernel refuses
			// queues past the real one (a default veth has one).
			break
		}
		if err != nil {
			return fmt.Errorf("afxdp: %s queue %d: %w", opts.Iface, q, err)
		}
		t.socks = append(t.socks, s)
		if err := t.att.SetXSK(uint32(q), s.FD()); err != nil {
			return fmt.Errorf("afxdp: %s queue %d: %w", opts.Iface, q, err)
		}
		t.pollFDs = append(t.pollFDs, unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN})
	}
	t.pollFDs = append(t.pollFDs, unix.PollFd{Fd: int32(t.wakeFD), Events: unix.POLLIN})
	return nil
}

// RebindWait bounds how long Open retries a queue the kernel still holds
// for a socket closed just before: it releases the queue's buffer pool from
// a workqueue, and until then binding fails with EBUSY (seen for up to
// ~0.4 s on veth).
const RebindWait = 2 * time.Second

func openQueue(ifindex, q int, mode xsk.BindMode) (*xsk.Socket, error) {
	deadline := time.Now().Add(RebindWait)
	for {
		s, err := xsk.Open(ifindex, q, xsk.Options{Mode: mode})
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Configure sets the program's entry for the transport's port: the AV
// whose peers may send (strict: others are dropped in XDP) and the domain
// whose MR keys requests name.
func (t *Transport) Configure(cfg xdp.PortConfig) error {
	return t.att.SetPort(t.local.Port(), cfg)
}

// Attachment returns the XDP attachment the transport uses (its AV and MR
// maps are the ones the kernel consults).
func (t *Transport) Attachment() *xdp.Attachment { return t.att }

// LocalAddr implements datapath.Transport.
func (t *Transport) LocalAddr() netip.AddrPort { return t.local }

// BatchSize implements datapath.Transport.
func (t *Transport) BatchSize() int { return batch }

// Receive implements datapath.Transport.
func (t *Transport) Receive(pkts []datapath.Packet, wait bool) (int, error) {
	t.rxMu.Lock()
	defer t.rxMu.Unlock()
	for {
		if t.closed.Load() {
			return 0, datapath.ErrClosed
		}
		n := 0
		for _, s := range t.socks {
			n = t.receiveXSK(s, pkts, n)
		}
		if n < len(pkts) {
			m, err := t.kernel.Receive(pkts[n:], false)
			if err != nil && !errors.Is(err, datapath.ErrClosed) {
				return n, err
			}
			t.rxKernel.Add(uint64(m))
			n += m
		}
		if n > 0 || !wait {
			return n, nil
		}
		if _, err := unix.Poll(t.pollFDs, int(FallbackPoll/time.Millisecond)); err != nil && !errors.Is(err, unix.EINTR) {
			return 0, fmt.Errorf("afxdp: poll: %w", err)
		}
	}
}

// receiveXSK moves what socket s has into pkts[n:] and returns the new n.
func (t *Transport) receiveXSK(s *xsk.Socket, pkts []datapath.Packet, n int) int {
	want := min(len(pkts)-n, len(t.rx))
	if want <= 0 {
		return n
	}
	k := s.Receive(t.rx[:want])
	var p udpframe.Parsed
	for _, d := range t.rx[:k] {
		f := s.Frame(d)
		if udpframe.Parse(f, &p) != nil || p.Dst.Port() != t.local.Port() {
			t.rxNotOurs.Add(1)
			continue
		}
		pk := &pkts[n]
		buf := pk.Buf[:cap(pk.Buf)]
		if p.PayloadLen > len(buf) {
			t.rxTrunc.Add(1)
			continue
		}
		pk.Buf = buf[:copy(buf, f[p.PayloadOffset:p.PayloadOffset+p.PayloadLen])]
		pk.Addr = netip.AddrPortFrom(p.Src.Addr().Unmap(), p.Src.Port())
		pk.Meta = metaOf(bpf.ParseMeta(s.Meta(d, bpf.MetaLen)))
		n++
	}
	if k > 0 {
		s.Release(t.rx[:k])
		t.rxXSK.Add(uint64(k))
	}
	return n
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
	if m.BadOps != 0 {
		dm.Verdict = datapath.VerdictRejectedMR
	}
	return dm
}

// Send implements datapath.Transport.
func (t *Transport) Send(pkts []datapath.Packet) error {
	if t.closed.Load() {
		return datapath.ErrClosed
	}
	t.txMu.Lock()
	defer t.txMu.Unlock()
	s := t.socks[0]
	for len(pkts) > 0 {
		k := 0
		for len(pkts) > 0 && k < len(t.tx) {
			p := &pkts[0]
			pkts = pkts[1:]
			hop, ok := t.hop(p.Addr.Addr().Unmap())
			if !ok {
				t.txNoHop.Add(1)
				continue
			}
			addr, buf, ok := s.NextTxFrame()
			if !ok {
				t.txNoFrame.Add(1)
				continue
			}
			ep := udpframe.Endpoints{SrcMAC: hop.SrcMAC, DstMAC: hop.DstMAC, Src: t.local,
				Dst: netip.AddrPortFrom(p.Addr.Addr().Unmap(), p.Addr.Port()), UDPChecksum: t.udpCsum}
			hl := ep.HeaderLen()
			if hl+len(p.Buf) > len(buf) || hl+len(p.Buf)-udpframe.EthLen > hop.MTU {
				s.ReturnTxFrame(addr)
				return fmt.Errorf("afxdp: %d-byte datagram exceeds the MTU %d: %w", len(p.Buf), hop.MTU, fi.EMSGSIZE)
			}
			copy(buf[hl:], p.Buf)
			n, err := udpframe.Build(buf, &ep, len(p.Buf))
			if err != nil {
				s.ReturnTxFrame(addr)
				continue
			}
			t.tx[k] = xsk.Desc{Addr: addr, Len: uint32(n)}
			k++
		}
		if k == 0 {
			continue
		}
		sent, err := s.Transmit(t.tx[:k])
		for _, d := range t.tx[sent:k] { // TX ring full: datagram semantics, drop
			s.ReturnTxFrame(d.Addr)
			t.txNoFrame.Add(1)
		}
		t.txXSK.Add(uint64(sent))
		if err != nil {
			return err
		}
	}
	return nil
}

// hop returns the cached next hop of dst, or starts resolving it.
func (t *Transport) hop(dst netip.Addr) (nexthop.Hop, bool) {
	if h, ok := t.resolver.Cached(dst); ok {
		return h, true
	}
	t.hopMu.Lock()
	if !t.resolving[dst] {
		t.resolving[dst] = true
		go func() {
			_, _ = t.resolver.Lookup(dst)
			t.hopMu.Lock()
			delete(t.resolving, dst)
			t.hopMu.Unlock()
		}()
	}
	t.hopMu.Unlock()
	return nexthop.Hop{}, false
}

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{RxXSK: t.rxXSK.Load(), RxKernel: t.rxKernel.Load(), TxXSK: t.txXSK.Load(),
		TxNoHop: t.txNoHop.Load(), TxNoFrame: t.txNoFrame.Load(), RxNotOurs: t.rxNotOurs.Load(),
		RxTruncated: t.rxTrunc.Load()}
}

// Close implements datapath.Transport: it wakes a blocked Receive, removes
// the port entry and the XSKMAP slots, and releases the sockets.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	if t.wakeFD >= 0 {
		var one = [8]byte{1}
		_, _ = unix.Write(t.wakeFD, one[:])
	}
	t.rxMu.Lock()
	t.txMu.Lock()
	defer t.rxMu.Unlock()
	defer t.txMu.Unlock()
	_ = t.att.DeletePort(t.local.Port())
	t.release()
	return nil
}

func (t *Transport) release() {
	for q, s := range t.socks {
		_ = t.att.DeleteXSK(uint32(q))
		s.Close()
	}
	t.socks = nil
	if t.kernel != nil {
		t.kernel.Close()
	}
	if t.wakeFD >= 0 {
		unix.Close(t.wakeFD)
		t.wakeFD = -1
	}
	t.att.Close()
}
