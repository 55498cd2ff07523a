// Package udp is the kernel UDP socket transport of the xdpfab datapath: a
// datapath.Transport that moves batches with recvmmsg(2)/sendmmsg(2).
//
// Runs of equal-size datagrams to one peer (the segments of a large RMA
// write) are sent as one UDP GSO message (UDP_SEGMENT), so the stack is
// traversed once per run instead of once per datagram; if the kernel or
// device refuses GSO the transport stops using it.
//
// A blocking Receive parks the goroutine, not an OS thread, in Go's
// netpoller, and Close wakes it; but the netpoller watches the socket only
// while a Receive waits (armed.go: an epoll set of its own, armed one
// report at a time), so that datagrams that arrive while the receiver is
// busy, or while CQ readers receive for it, wake no idle thread. The
// system calls, all non-blocking, are raw ones (the runtime's monitor
// would otherwise hand the processor of a busy receiver to another thread
// now and then) in callbacks built once at Listen; the mmsghdr, iovec and
// sockaddr arrays are preallocated, so once warm a Receive or Send
// allocates nothing. With Options.SharedPoll the socket is left out of the
// netpoller entirely: the process's shared receive poller (datapath/rxpoll)
// watches it (socket.go). With Options.RingSend too, what Send is given
// while that poller runs a round of handlers is held and sent at the
// round's end together with every other such transport's datagrams, in one
// io_uring_enter for all their sockets (ringsend.go), and at the round's
// start one datagram from each of its ready sockets is received in one
// io_uring_enter for their Receive to hand over (ringrecv.go): for a
// process with thousands of endpoints, whose operations complete and post
// their successors on the poller's goroutine, two system calls per round
// instead of a recvmmsg and a sendmmsg per datagram.
//
// The kernel neither resolves nor vets senders on this path: every
// received packet carries datapath.NoMeta. Datagrams larger than the
// caller's buffer are dropped and counted (Stats.RxTruncated).
//
// The socket sets IP_RECVERR (IPV6_RECVERR), so an ICMP port unreachable
// for a datagram we sent is read from the error queue and returned as a
// packet with Verdict datapath.VerdictUnreachable: the sent datagram and
// its destination. That lets the engine fail requests to a peer whose
// process is gone with FI_ECONNREFUSED at once instead of timing out.
//
// With Options.PathChecks the transport is a datapath.PathChecker: when
// the engine finds a peer silent, the kernel's learned neighbour entry for
// the peer's next hop is deleted and resolved afresh (nexthop.Resolver's
// Recheck, at most every 250 ms per peer). The kernel does not confirm
// neighbours for UDP traffic, so without that a next hop whose MAC changed
// silently keeps getting our datagrams for as long as its entry counts as
// reachable (tens of seconds), and the engine declares the peer
// unreachable first.
package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/nexthop"
	"github.com/xdpfab/xdpfab/fi"
)

// Options configures Listen. Zero values take the defaults.
type Options struct {
	// Batch is the most datagrams one system call moves (default 64, max 1024).
	Batch int
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF in bytes (default 4 MiB); it is
	// forced past net.core.rmem_max when the process may (CAP_NET_ADMIN).
	SocketBuffer int
	// DisableGSO sends every datagram as its own message instead of
	// batching equal-size runs to one peer with UDP_SEGMENT.
	DisableGSO bool
	// PathChecks makes CheckPath verify the kernel's next hop to a silent
	// peer (see the package doc). It opens netlink sockets in the calling
	// thread's network namespace.
	PathChecks bool
	// SharedPoll leaves the socket out of Go's netpoller, for a transport
	// whose receive side the process's shared poller serves
	// (reliable.Config.SharedPoll, datapath/rxpoll): a netpoller
	// registration beside the poller's would cost an epoll callback per
	// datagram and wake an idle thread for nothing. A Receive that waits,
	// and a Send that finds the socket buffer full, then block their OS
	// thread in poll(2), 10 ms at a time (socket.go).
	SharedPoll bool
	// RingSend (with SharedPoll) holds what Send is given while the
	// shared poller runs a round of handlers and sends it at the round's
	// end, with the datagrams of every other transport using it, in one
	// io_uring_enter (ringsend.go); outside a round Send sends at once.
	// For processes with many endpoints, whose operations complete and
	// post their successors on the poller's goroutine.
	// The ring also receives: at a round's start one datagram from each
	// ready socket of the transports using it, in one io_uring_enter,
	// which their Receive then hands over. Listen fails with
	// io_uring_setup's errno where the kernel has no io_uring (ENOSYS)
	// or it is disabled (EPERM, kernel.io_uring_disabled).
	RingSend bool
}

// Stats are the transport's counters.
type Stats struct {
	RxPackets, TxPackets uint64
	RxTruncated          uint64 // datagrams larger than the receive buffer, dropped
	TxErrors             uint64 // datagrams the kernel refused to send, dropped
	Unreachable          uint64 // ICMP port-unreachable reports read from the error queue
	TxRing               uint64 // of TxPackets, those the ring sender sent (Options.RingSend)
	RxRing               uint64 // of RxPackets, those the ring sender received (Options.RingSend)
}

type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// batchState is the preallocated system-call scratch of one direction.
type batchState struct {
	msgs    []mmsghdr
	iovs    []unix.Iovec
	names   []unix.RawSockaddrInet6 // large enough for either family
	ctrl    [][]byte                // control buffers (error queue reads)
	ctrlLen []int
	gsoCtrl [][24]byte        // UDP_SEGMENT control messages (tx)
	segs    []int             // datagrams in each tx message
	pkts    []datapath.Packet // the caller's batch during a call
	n       int               // result of the call
	err     error
	errq    bool   // the socket reported a pending ICMP error; b.n error-queue entries read already, if any
	polls   uint32 // EAGAINs seen, to check the error queue now and then when polling
}

func newBatchState(n int) batchState {
	b := batchState{msgs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n), names: make([]unix.RawSockaddrInet6, n)}
	for i := range b.msgs {
		b.msgs[i].hdr.Iov = &b.iovs[i]
		b.msgs[i].hdr.Iovlen = 1
		b.msgs[i].hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
	}
	return b
}

// Transport is a UDP socket driven with recvmmsg/sendmmsg.
//
// Layout: a process with thousands of endpoints (a transport each) finds
// each operation's transport out of cache, and every line it touches is a
// miss. What a datagram's send and receive through the ring sender use
// (the descriptor, the ring's fields, the receive lock, the counters)
// comes first, in two lines (TestTransportHotLayout); the batch states of
// sendmmsg and recvmmsg, used by sockets off the ring, follow.
type Transport struct {
	fd         int  // the socket's descriptor, for PollFDs (valid until Close)
	is4        bool // AF_INET socket: destinations must be IPv4
	closed     atomic.Bool
	errPending atomic.Bool // a send saw a socket error: drain the error queue
	// ringRxHeld is the ring sender's receive slot holding a datagram
	// for this transport, or -1 (guarded by the ring sender's mu).
	ringRxHeld int32
	// ringRxRound and ringRxAgain: the ring sender's round that last
	// received from this socket, and whether the one before it did too
	// (guarded by the ring sender's mu; see Receive).
	ringRxRound uint32
	ringRxAgain bool
	batch       int
	rxMu        sync.Mutex  // serializes Receive; guards rx
	ring        *ringSender // Options.RingSend, else nil; immutable
	ringQuiet   int         // ring receives until Receive looks with recvmmsg again (Options.RingSend)
	stats       struct{ rxPackets, txPackets, rxRing, txRing, rxTrunc, txErr, unreach atomic.Uint64 }

	raw    socket // the descriptor: armed for the netpoller while a Receive waits (armed.go), or plain (socket.go)
	local  netip.AddrPort
	gsoOff atomic.Bool       // UDP GSO disabled (by option, or the kernel refused it)
	paths  *nexthop.Resolver // Options.PathChecks, else nil; immutable

	rx     batchState
	rxWait bool
	rxFn   func(fd uintptr) bool
	errFn  func(fd uintptr) bool

	txMu sync.Mutex // serializes Send; guards tx
	tx   batchState
	txFn func(fd uintptr) bool
}

var (
	_ datapath.Transport   = (*Transport)(nil)
	_ datapath.Pollable    = (*Transport)(nil)
	_ datapath.PathChecker = (*Transport)(nil)

	_ datapath.SharedPollable = (*Transport)(nil)
)

// Listen opens a UDP socket bound to addr (port 0 picks a free port). An
// IPv4 address opens an AF_INET socket; an IPv6 one (including ::) a
// dual-stack AF_INET6 socket that also reaches IPv4-mapped peers.
func Listen(addr netip.AddrPort, opts Options) (*Transport, error) {
	if opts.Batch == 0 {
		opts.Batch = 64
	}
	if opts.Batch < 1 || opts.Batch > 1024 {
		return nil, fmt.Errorf("udp listen: batch %d out of range 1..1024: %w", opts.Batch, fi.EINVAL)
	}
	if opts.RingSend && !opts.SharedPoll {
		return nil, fmt.Errorf("udp listen: RingSend needs SharedPoll: %w", fi.EINVAL)
	}
	if opts.SocketBuffer == 0 {
		opts.SocketBuffer = 4 << 20
	}
	if !addr.IsValid() {
		return nil, fmt.Errorf("udp listen: invalid address: %w", fi.EINVAL)
	}
	network := "udp6"
	if addr.Addr().Unmap().Is4() {
		network = "udp4"
		addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	}
	listen := listenArmed
	if opts.SharedPoll {
		listen = listenPlain
	}
	raw, err := listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("udp listen %s: %w", addr, err)
	}
	sockFD := -1
	_ = raw.Control(func(fd uintptr) {
		sockFD = int(fd)
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], opts.SocketBuffer) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], opts.SocketBuffer)
			}
		}
		if network == "udp4" {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_RECVERR, 1)
		} else {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_RECVERR, 1)
			_ = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_RECVERR, 1) // v4-mapped peers
		}
	})
	t := &Transport{
		raw: raw, fd: sockFD, batch: opts.Batch,
		local: raw.LocalAddr(),
		is4:   network == "udp4",
		rx:    newBatchState(opts.Batch),
		tx:    newBatchState(opts.Batch),

		ringRxHeld: -1,
	}
	t.rxFn = t.recvBatch
	t.errFn = t.recvErrQueue
	t.txFn = t.sendBatch
	t.tx.gsoCtrl = make([][24]byte, opts.Batch)
	t.tx.segs = make([]int, opts.Batch)
	t.gsoOff.Store(opts.DisableGSO)
	t.rx.ctrl = make([][]byte, opts.Batch)
	t.rx.ctrlLen = make([]int, opts.Batch)
	for i := range t.rx.ctrl {
		t.rx.ctrl[i] = make([]byte, 128)
	}
	if opts.PathChecks {
		if t.paths, err = nexthop.New(nexthop.Options{Src: t.local.Addr()}); err != nil {
			raw.Close()
			return nil, fmt.Errorf("udp listen %s: %w", addr, err)
		}
	}
	if opts.RingSend {
		if t.ring, err = useRingSender(); err != nil {
			if t.paths != nil {
				t.paths.Close()
			}
			raw.Close()
			return nil, fmt.Errorf("udp listen %s: %w", addr, err)
		}
		t.ring.register(t)
	}
	return t, nil
}

// CheckPath implements datapath.PathChecker (with Options.PathChecks; a
// no-op without).
func (t *Transport) CheckPath(dst netip.AddrPort) {
	if t.paths != nil && !t.closed.Load() {
		t.paths.Recheck(dst.Addr())
	}
}

func errnoOf(err error) error {
	var se syscall.Errno
	if errors.As(err, &se) {
		return fi.Errno(se)
	}
	return err
}

// LocalAddr returns the bound address.
func (t *Transport) LocalAddr() netip.AddrPort { return t.local }

// BatchSize returns Options.Batch.
func (t *Transport) BatchSize() int { return t.batch }

// Stats returns a snapshot of the counters.
func (t *Transport) Stats() Stats {
	return Stats{RxPackets: t.stats.rxPackets.Load(), TxPackets: t.stats.txPackets.Load(),
		RxTruncated: t.stats.rxTrunc.Load(), TxErrors: t.stats.txErr.Load(), Unreachable: t.stats.unreach.Load(),
		TxRing: t.stats.txRing.Load(), RxRing: t.stats.rxRing.Load()}
}

// PollFDs implements datapath.Pollable: the socket is readable when a
// datagram (or an ICMP error, POLLERR) is queued.
func (t *Transport) PollFDs(dst []unix.PollFd) ([]unix.PollFd, bool) {
	if t.closed.Load() || t.fd < 0 {
		return dst, false
	}
	return append(dst, unix.PollFd{Fd: int32(t.fd), Events: unix.POLLIN}), true
}

// PollFD implements datapath.SharedPollable: the socket, readable while a
// datagram is queued, with EPOLLERR while its error queue holds one.
func (t *Transport) PollFD() (int, bool) {
	if t.closed.Load() || t.fd < 0 {
		return -1, false
	}
	return t.fd, true
}

// ErrorReady implements datapath.SharedPollable: the next Receive that
// finds no datagram reads the error queue.
func (t *Transport) ErrorReady() { t.errPending.Store(true) }

// Close closes the socket; a blocked Receive returns datapath.ErrClosed.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	if t.paths != nil {
		t.paths.Close()
	}
	if t.ring != nil {
		t.ring.release(t) // nothing held names the descriptor once it is closed
	}
	return t.raw.Close()
}

// Receive implements datapath.Transport.
func (t *Transport) Receive(pkts []datapath.Packet, wait bool) (int, error) {
	if len(pkts) > t.batch {
		pkts = pkts[:t.batch]
	}
	if len(pkts) == 0 {
		return 0, nil
	}
	t.rxMu.Lock()
	defer t.rxMu.Unlock()
	if cap(pkts[0].Buf) == 0 {
		return 0, fmt.Errorf("udp receive: packet 0 has no buffer: %w", fi.EINVAL)
	}
	if t.ring != nil {
		if n, again := t.ring.takeReceived(t, pkts); n > 0 {
			// The socket may hold more (one busy peer's burst): look
			// with recvmmsg when the round before this one received
			// from it too, and after a look that found nothing only
			// every ringQuietRounds-th time. A socket that last had a
			// datagram rounds ago (one of thousands of endpoints with
			// an operation each in flight) is not looked at: the look
			// would find nothing, and it cost 5 µs in recvmmsg (its
			// cold mmsghdrs) at 10,000 peers. Should it hold more, the
			// level-triggered poller reports it in the next round, which
			// then looks.
			if len(pkts) == 1 || !again || t.ringQuiet > 0 {
				if again {
					t.ringQuiet = max(t.ringQuiet-1, 0)
				}
				return n, nil
			}
			if err := fullBuffers(pkts[1:], 1); err != nil {
				return 0, err
			}
			m, err := t.receiveLocked(pkts[1:], false)
			if err != nil || m == 0 {
				t.ringQuiet = ringQuietRounds
			}
			return n + m, nil // an error shows again in the next call
		}
	}
	if err := fullBuffers(pkts, 0); err != nil {
		return 0, err
	}
	return t.receiveLocked(pkts, wait)
}

// fullBuffers gives recvmmsg the whole capacity of pkts' buffers (pkts[i]
// is the caller's packet first+i). Only a receive that goes to recvmmsg
// pays for it: the ring's datagram fills pkts[0] alone, and with
// thousands of sockets the caller's other packets are out of cache.
func fullBuffers(pkts []datapath.Packet, first int) error {
	for i := range pkts {
		buf := pkts[i].Buf[:cap(pkts[i].Buf)]
		if len(buf) == 0 {
			return fmt.Errorf("udp receive: packet %d has no buffer: %w", first+i, fi.EINVAL)
		}
		pkts[i].Buf = buf
	}
	return nil
}

// ringQuietRounds: see Receive.
const ringQuietRounds = 8

// receiveLocked is Receive's recvmmsg path. t.rxMu is held; the buffers
// are checked.
func (t *Transport) receiveLocked(pkts []datapath.Packet, wait bool) (int, error) {
	b := &t.rx
	for i := range pkts {
		b.iovs[i].Base = &pkts[i].Buf[0]
		b.iovs[i].SetLen(len(pkts[i].Buf))
	}
	b.pkts = pkts
	t.rxWait = wait
	for {
		b.n, b.err = 0, nil
		err := t.raw.Read(t.rxFn)
		if err != nil || b.err != nil {
			b.pkts = nil
			if t.closed.Load() || errors.Is(err, net.ErrClosed) {
				return 0, datapath.ErrClosed
			}
			if err == nil {
				err = b.err
			}
			return 0, fmt.Errorf("udp receive: %w", errnoOf(err))
		}
		var n int
		if b.errq {
			b.errq = false
			if b.n == 0 { // not yet read by recvBatch
				if err := t.raw.Read(t.errFn); err != nil {
					b.n = 0
				}
			}
			n = t.collectErrors(b.n)
		} else {
			n = t.collect(b.n)
		}
		if n > 0 || !wait {
			b.pkts = nil
			return n, nil
		}
	}
}

// recvBatch is the RawConn.Read callback: one recvmmsg. Returning false
// parks the goroutine in the netpoller until the socket is readable.
func (t *Transport) recvBatch(fd uintptr) bool {
	b := &t.rx
	for {
		for i := range b.pkts {
			b.msgs[i].hdr.Namelen = unix.SizeofSockaddrInet6
			b.msgs[i].hdr.Flags = 0
		}
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.msgs[0])), uintptr(len(b.pkts)),
			unix.MSG_DONTWAIT, 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			// A sendmmsg can consume the socket error (and the wake-up it
			// caused) while the bounced datagram stays on the error queue:
			// look there before parking, and now and then while polling.
			b.polls++
			if t.errPending.Swap(false) || t.rxWait || b.polls%1024 == 0 {
				b.n = 0
				t.recvErrQueue(fd)
				if b.n > 0 {
					b.errq = true
					return true
				}
			}
			return !t.rxWait
		case isICMPErrno(e):
			// A pending ICMP error (IP_RECVERR): read the error queue next.
			t.errPending.Store(false)
			b.errq = true
			b.n = 0
			return true
		case e != 0:
			b.err = e
			return true
		}
		b.n = int(n)
		return true
	}
}

func isICMPErrno(e unix.Errno) bool {
	return e == unix.ECONNREFUSED || e == unix.EHOSTUNREACH || e == unix.ENETUNREACH || e == unix.EMSGSIZE
}

// recvErrQueue is the RawConn.Read callback that drains the socket's error
// queue into the batch (never waits).
func (t *Transport) recvErrQueue(fd uintptr) bool {
	b := &t.rx
	for b.n < len(b.pkts) {
		i := b.n
		m := &b.msgs[i].hdr
		m.Namelen = unix.SizeofSockaddrInet6
		m.Flags = 0
		m.Control = &b.ctrl[i][0]
		m.SetControllen(len(b.ctrl[i]))
		n, _, e := unix.RawSyscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(m)), unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		b.ctrlLen[i] = int(m.Controllen)
		m.Control = nil // recvmmsg must not see it
		m.Controllen = 0
		if e != 0 {
			break
		}
		b.msgs[i].len = uint32(n)
		b.n++
	}
	return true
}

// collectErrors turns the first n error-queue messages into packets with
// VerdictUnreachable, keeping only ICMP port unreachable (ECONNREFUSED).
func (t *Transport) collectErrors(n int) int {
	b := &t.rx
	out := 0
	for i := 0; i < n; i++ {
		m := &b.msgs[i]
		if m.hdr.Flags&unix.MSG_TRUNC != 0 || !isConnRefused(b.ctrl[i][:b.ctrlLen[i]]) {
			continue
		}
		p := &b.pkts[out]
		if out != i {
			b.pkts[i].Buf, p.Buf = p.Buf, b.pkts[i].Buf
		}
		p.Buf = p.Buf[:m.len]
		p.Addr = sockaddrToAddrPort(&b.names[i])
		p.Meta = datapath.Meta{FIAddr: fi.AddrNotAvail, Verdict: datapath.VerdictUnreachable}
		out++
	}
	t.stats.unreach.Add(uint64(out))
	return out
}

// isConnRefused reports whether the control messages hold an IP(V6)_RECVERR
// sock_extended_err with errno ECONNREFUSED.
func isConnRefused(ctrl []byte) bool {
	for len(ctrl) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
		if h.Len < unix.SizeofCmsghdr || int(h.Len) > len(ctrl) {
			return false
		}
		if (h.Level == unix.SOL_IP && h.Type == unix.IP_RECVERR) || (h.Level == unix.SOL_IPV6 && h.Type == unix.IPV6_RECVERR) {
			if int(h.Len) >= unix.SizeofCmsghdr+int(unsafe.Sizeof(unix.SockExtendedErr{})) {
				ee := (*unix.SockExtendedErr)(unsafe.Pointer(&ctrl[unix.SizeofCmsghdr]))
				return ee.Errno == uint32(unix.ECONNREFUSED)
			}
		}
		step := (int(h.Len) + 7) &^ 7
		if step >= len(ctrl) {
			return false
		}
		ctrl = ctrl[step:]
	}
	return false
}

// collect converts the first n received mmsghdrs into packets, dropping
// truncated ones, and returns how many packets remain.
func (t *Transport) collect(n int) int {
	b := &t.rx
	out := 0
	for i := 0; i < n; i++ {
		m := &b.msgs[i]
		if m.hdr.Flags&unix.MSG_TRUNC != 0 {
			t.stats.rxTrunc.Add(1)
			continue
		}
		p := &b.pkts[out]
		if out != i {
			// Swap buffers so the truncated slot's buffer is not lost.
			b.pkts[i].Buf, p.Buf = p.Buf, b.pkts[i].Buf
		}
		p.Buf = p.Buf[:m.len]
		p.Addr = sockaddrToAddrPort(&b.names[i])
		p.Meta = datapath.NoMeta
		out++
	}
	t.stats.rxPackets.Add(uint64(out))
	return out
}

func sockaddrToAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	pb := (*[2]byte)(unsafe.Pointer(&sa.Port))
	port := uint16(pb[0])<<8 | uint16(pb[1])
	if sa.Family == unix.AF_INET {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
}

// putSockaddr writes ap into sa in the socket's family and returns its length.
func (t *Transport) putSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort) (uint32, bool) {
	addr := ap.Addr()
	pb := (*[2]byte)(unsafe.Pointer(&sa.Port))
	if t.is4 {
		addr = addr.Unmap()
		if !addr.Is4() {
			return 0, false
		}
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family = unix.AF_INET
		pb = (*[2]byte)(unsafe.Pointer(&sa4.Port))
		pb[0], pb[1] = byte(ap.Port()>>8), byte(ap.Port())
		sa4.Addr = addr.As4()
		sa4.Zero = [8]uint8{}
		return unix.SizeofSockaddrInet4, true
	}
	sa.Family = unix.AF_INET6
	pb[0], pb[1] = byte(ap.Port()>>8), byte(ap.Port())
	sa.Flowinfo = 0
	sa.Addr = addr.As16()
	sa.Scope_id = 0
	return unix.SizeofSockaddrInet6, true
}

// Send implements datapath.Transport.
func (t *Transport) Send(pkts []datapath.Packet) error {
	if t.ring != nil {
		rest, err := t.ring.hold(t, pkts)
		if err != nil || len(rest) == 0 {
			return err
		}
		pkts = rest
	}
	t.txMu.Lock()
	defer t.txMu.Unlock()
	b := &t.tx
	for len(pkts) > 0 {
		if t.closed.Load() {
			return datapath.ErrClosed
		}
		chunk := pkts
		if len(chunk) > t.batch {
			chunk = chunk[:t.batch]
		}
		pkts = pkts[len(chunk):]
		k := t.buildTx(chunk)
		for off := 0; off < k; {
			b.n, b.err = off, nil
			b.pkts = chunk[:k] // only its length is used by sendBatch
			err := t.raw.Write(t.txFn)
			b.pkts = nil
			if err != nil {
				if t.closed.Load() || errors.Is(err, net.ErrClosed) {
					return datapath.ErrClosed
				}
				return fmt.Errorf("udp send: %w", errnoOf(err))
			}
			sent := 0
			for m := off; m < b.n; m++ {
				sent += b.segs[m]
			}
			if b.err != nil {
				// The message at b.n was refused (no route, or a device
				// that cannot segment): drop it; reliability resends.
				t.stats.txErr.Add(uint64(b.segs[b.n]))
				if b.segs[b.n] > 1 {
					t.gsoOff.Store(true)
				}
				b.n++
			}
			t.stats.txPackets.Add(uint64(sent))
			off = b.n
		}
	}
	return nil
}

// buildTx fills the tx mmsghdrs for chunk and returns the message count.
// With UDP GSO, a run of datagrams to one destination, all of one size but
// a shorter last one, becomes one message with one iovec per datagram and
// a UDP_SEGMENT control message: the kernel cuts it back into the same
// datagrams after one pass through the stack.
func (t *Transport) buildTx(chunk []datapath.Packet) int {
	b := &t.tx
	gso := !t.gsoOff.Load()
	k, iov := 0, 0
	for i := 0; i < len(chunk); {
		p := &chunk[i]
		nl, ok := t.putSockaddr(&b.names[k], p.Addr)
		if !ok || len(p.Buf) == 0 {
			t.stats.txErr.Add(1)
			i++
			continue
		}
		m := &b.msgs[k].hdr
		m.Namelen = nl
		m.Iov = &b.iovs[iov]
		segSize, total, nseg := len(p.Buf), len(p.Buf), 1
		b.iovs[iov].Base = &p.Buf[0]
		b.iovs[iov].SetLen(len(p.Buf))
		iov++
		i++
		for gso && i < len(chunk) && nseg < maxGSOSegments {
			q := &chunk[i]
			l := len(q.Buf)
			if q.Addr != p.Addr || l == 0 || l > segSize || total+l > maxGSOBytes {
				break
			}
			b.iovs[iov].Base = &q.Buf[0]
			b.iovs[iov].SetLen(l)
			iov++
			i++
			nseg++
			total += l
			if l < segSize {
				break // only the last segment may be shorter
			}
		}
		m.Iovlen = uint64(nseg)
		if nseg > 1 {
			c := b.gsoCtrl[k][:]
			h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			h.SetLen(unix.CmsgLen(2))
			*(*uint16)(unsafe.Pointer(&c[unix.CmsgLen(0)])) = uint16(segSize)
			m.Control = &c[0]
			m.SetControllen(unix.CmsgSpace(2))
		} else {
			m.Control = nil
			m.Controllen = 0
		}
		b.segs[k] = nseg
		k++
	}
	return k
}

// GSO limits: the kernel's UDP_MAX_SEGMENTS and the 64 KiB a UDP
// datagram (the unsegmented super-packet) may hold.
const (
	maxGSOSegments = 64
	maxGSOBytes    = 65000
)

// sendBatch is the RawConn.Write callback: sendmmsg from message b.n on.
func (t *Transport) sendBatch(fd uintptr) bool {
	b := &t.tx
	off := b.n
	for try := 0; ; try++ {
		n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.msgs[off])), uintptr(len(b.pkts)-off),
			unix.MSG_DONTWAIT, 0, 0)
		switch {
		case e == unix.EAGAIN:
			return false // wait for room in the socket buffer
		case e == unix.ENOBUFS:
			// With IP_RECVERR the local stack reports a datagram it
			// dropped on the way out (netfilter, a full qdisc) as
			// ENOBUFS. It is a loss, not a full buffer: waiting for the
			// socket to become writable would block forever on an idle
			// socket. Drop that datagram like any refused one.
			b.err = e
			return true
		case e == unix.EINTR:
			continue
		case isICMPErrno(e) && try < 4:
			// The send reported (and cleared) a pending ICMP error meant
			// for the receive side: flag it for Receive and send again.
			t.errPending.Store(true)
			continue
		case e != 0:
			b.err = e
			return true
		}
		b.n = off + int(n)
		return true
	}
}
