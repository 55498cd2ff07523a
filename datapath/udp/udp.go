// Package udp is the kernel UDP socket transport of the xdpfab datapath: a
// datapath.Transport that moves batches with recvmmsg(2)/sendmmsg(2).
//
// The socket stays in Go's netpoller (it is opened with net.ListenUDP), so
// a blocking Receive parks the goroutine instead of an OS thread, and Close
// wakes it. The system calls run inside syscall.RawConn callbacks that are
// built once at Listen; the mmsghdr, iovec and sockaddr arrays are
// preallocated, so once warm a Receive or Send allocates nothing.
//
// The kernel neither resolves nor vets senders on this path: every
// received packet carries datapath.NoMeta. Datagrams larger than the
// caller's buffer are dropped and counted (Stats.RxTruncated).
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
	"github.com/xdpfab/xdpfab/fi"
)

// Options configures Listen. Zero values take the defaults.
type Options struct {
	// Batch is the most datagrams one system call moves (default 64, max 1024).
	Batch int
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF in bytes (default 4 MiB); it is
	// forced past net.core.rmem_max when the process may (CAP_NET_ADMIN).
	SocketBuffer int
}

// Stats are the transport's counters.
type Stats struct {
	RxPackets, TxPackets uint64
	RxTruncated          uint64 // datagrams larger than the receive buffer, dropped
	TxErrors             uint64 // datagrams the kernel refused to send, dropped
}

type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// batchState is the preallocated system-call scratch of one direction.
type batchState struct {
	msgs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for either family
	pkts  []datapath.Packet       // the caller's batch during a call
	n     int                     // result of the call
	err   error
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
type Transport struct {
	conn  *net.UDPConn
	raw   syscall.RawConn
	local netip.AddrPort
	is4   bool // AF_INET socket: destinations must be IPv4
	batch int

	rxMu   sync.Mutex // serializes Receive; guards rx
	rx     batchState
	rxWait bool
	rxFn   func(fd uintptr) bool

	txMu sync.Mutex // serializes Send; guards tx
	tx   batchState
	txFn func(fd uintptr) bool

	closed atomic.Bool
	stats  struct{ rxPackets, txPackets, rxTrunc, txErr atomic.Uint64 }
}

var _ datapath.Transport = (*Transport)(nil)

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
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("udp listen %s: %w", addr, errnoOf(err))
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp listen %s: %w", addr, err)
	}
	_ = raw.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], opts.SocketBuffer) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], opts.SocketBuffer)
			}
		}
	})
	t := &Transport{
		conn: conn, raw: raw, batch: opts.Batch,
		local: conn.LocalAddr().(*net.UDPAddr).AddrPort(),
		is4:   network == "udp4",
		rx:    newBatchState(opts.Batch),
		tx:    newBatchState(opts.Batch),
	}
	t.rxFn = t.recvBatch
	t.txFn = t.sendBatch
	return t, nil
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
		RxTruncated: t.stats.rxTrunc.Load(), TxErrors: t.stats.txErr.Load()}
}

// Close closes the socket; a blocked Receive returns datapath.ErrClosed.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	return t.conn.Close()
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
	b := &t.rx
	for i := range pkts {
		buf := pkts[i].Buf[:cap(pkts[i].Buf)]
		if len(buf) == 0 {
			return 0, fmt.Errorf("udp receive: packet %d has no buffer: %w", i, fi.EINVAL)
		}
		pkts[i].Buf = buf
		b.iovs[i].Base = &buf[0]
		b.iovs[i].SetLen(len(buf))
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
		n := t.collect(b.n)
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
	for i := range b.pkts {
		b.msgs[i].hdr.Namelen = unix.SizeofSockaddrInet6
		b.msgs[i].hdr.Flags = 0
	}
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.msgs[0])), uintptr(len(b.pkts)),
		unix.MSG_DONTWAIT, 0, 0)
	switch {
	case e == unix.EAGAIN:
		return !t.rxWait
	case e == unix.EINTR:
		return false
	case e != 0:
		b.err = e
		return true
	}
	b.n = int(n)
	return true
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
		k := 0
		for i := range chunk {
			p := &chunk[i]
			nl, ok := t.putSockaddr(&b.names[k], p.Addr)
			if !ok || len(p.Buf) == 0 {
				t.stats.txErr.Add(1)
				continue
			}
			b.msgs[k].hdr.Namelen = nl
			b.iovs[k].Base = &p.Buf[0]
			b.iovs[k].SetLen(len(p.Buf))
			k++
		}
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
			if b.err != nil {
				// The datagram at b.n was refused (e.g. no route): drop it.
				t.stats.txErr.Add(1)
				b.n++
			}
			t.stats.txPackets.Add(uint64(b.n - off))
			off = b.n
		}
	}
	return nil
}

// sendBatch is the RawConn.Write callback: sendmmsg from message b.n on.
func (t *Transport) sendBatch(fd uintptr) bool {
	b := &t.tx
	off := b.n
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.msgs[off])), uintptr(len(b.pkts)-off),
		unix.MSG_DONTWAIT, 0, 0)
	switch {
	case e == unix.EAGAIN || e == unix.ENOBUFS:
		return false // wait for room in the socket buffer
	case e == unix.EINTR:
		return false
	case e != 0:
		b.err = e
		return true
	}
	b.n = off + int(n)
	return true
}
