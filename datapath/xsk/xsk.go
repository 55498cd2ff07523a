// Package xsk is an AF_XDP socket in Go: a UMEM, its fill and completion
// rings, and the RX and TX rings, set up and driven through
// golang.org/x/sys/unix with no cgo and no libxdp.
//
// Model. The UMEM is one mmapped area cut into fixed-size frames: half
// for receiving, half a TX free list. At Open the fill ring (the kernel
// writes received packets into its frames) gets initialFill of the
// receive frames, and the rest when traffic needs them (growFill): the
// frames in the ring are the receive path's working set. Open reads them
// and the first transmit frames once (warm), and WarmKernelMapping (the
// afxdp transport calls it on a veth) has the kernel touch them through
// its own mapping (kwarm.go), so that a connection's first packets pay no first-touch
// traps on a virtual machine that shadows page tables. Receive peeks
// completed RX descriptors and hands their frames to the caller, who must
// Release them; Release puts the frames straight back on the fill ring,
// so the fill ring stays stocked without allocation. Transmit frames come
// from the free list (NextTxFrame), are queued with Transmit and come back
// through the completion ring, which Transmit and Reclaim drain.
//
// The indices shared with the kernel are read and written only with
// sync/atomic (see ringHeader); each side caches the other's index and
// refreshes it only when its cached view runs out, as gVisor's pkg/xdp does.
// need_wakeup is honoured: the kernel is kicked (sendto / poll) only when it
// set XDP_RING_NEED_WAKEUP, or always in copy mode for TX where veth needs
// it.
//
// Concurrency: the RX side (Receive, Release, Poll) and the TX side
// (NextTxFrame, Transmit, Reclaim) each take their own mutex, so one
// goroutine may receive while another transmits.
package xsk

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BindMode selects copy or zero-copy AF_XDP.
type BindMode int

const (
	// BindAuto tries zero-copy and falls back to copy mode when the driver
	// cannot do zero-copy (veth cannot).
	BindAuto BindMode = iota
	BindCopy
	BindZeroCopy
)

func (m BindMode) String() string {
	return [...]string{"auto", "copy", "zerocopy"}[m]
}

// RxHeadroom is the bytes the kernel leaves before each packet it writes
// into a receive frame (XDP_PACKET_HEADROOM; the XDP program's metadata
// goes there): a frame of FrameSize bytes receives Ethernet frames of at
// most FrameSize − RxHeadroom bytes.
const RxHeadroom = 256

// EthVLANLen is an Ethernet header with one 802.1Q tag: what a frame
// carries beyond the MTU, and what a veth lets it (WarmKernelMapping).
const EthVLANLen = 14 + 4

// FrameSizeFor returns the smallest frame size (2048 or 4096) whose
// receive frames hold an Ethernet frame of an interface with this MTU,
// a VLAN tag included. Small frames matter on virtual machines whose
// hypervisor shadows page tables: the kernel copies received packets into
// the UMEM, and reads transmitted ones from it, through a mapping of its
// own (vmap), whose first access to each page traps to the hypervisor
// like user space's (see warm), on the datapath, and nothing user space
// touches warms it (only the kernel's own copies do: WarmKernelMapping).
// With two frames a page the first packets pay half the traps: on the
// 2-core VM of this project's benchmarks the kernel's copies into fresh
// receive frames were most of the system time of a connection's first
// thousand 4 KiB writes.
func FrameSizeFor(mtu int) int {
	if mtu+EthVLANLen <= 2048-RxHeadroom {
		return 2048
	}
	return 4096
}

// Options configures Open. Zero values take the defaults.
type Options struct {
	NumFrames int // UMEM frames, power of two; default 4096
	// FrameSize must be 2048 or 4096 (default 4096: the kernel puts
	// RxHeadroom bytes before each received packet, so 2048-byte frames
	// carry at most 1792 B; FrameSizeFor picks one for an MTU).
	FrameSize int
	RingSize  int // entries of each of the four rings, power of two; default 2048
	Mode      BindMode
	// NoNeedWakeup disables XDP_USE_NEED_WAKEUP (the kernel then polls the
	// fill and TX rings itself, at the cost of CPU).
	NoNeedWakeup bool
}

func (o *Options) setDefaults() error {
	if o.NumFrames == 0 {
		o.NumFrames = 4096
	}
	if o.FrameSize == 0 {
		o.FrameSize = 4096
	}
	if o.RingSize == 0 {
		o.RingSize = 2048
	}
	if o.NumFrames&(o.NumFrames-1) != 0 || o.RingSize&(o.RingSize-1) != 0 || o.NumFrames < 2 {
		return fmt.Errorf("xsk: NumFrames %d and RingSize %d must be powers of two", o.NumFrames, o.RingSize)
	}
	if o.FrameSize != 2048 && o.FrameSize != 4096 {
		return fmt.Errorf("xsk: FrameSize %d must be 2048 or 4096", o.FrameSize)
	}
	if o.RingSize < o.NumFrames/2 {
		return fmt.Errorf("xsk: RingSize %d cannot hold the %d RX frames", o.RingSize, o.NumFrames/2)
	}
	return nil
}

// Desc is one received or to-be-transmitted frame: its UMEM address and the
// packet length.
type Desc struct {
	Addr uint64
	Len  uint32
}

// Socket is an AF_XDP socket bound to one queue of one interface.
type Socket struct {
	fd        int
	ifindex   int
	queue     int
	mode      BindMode // the mode actually bound
	frameSize uint64
	umem      []byte
	ringMem   [4][]byte // fill, completion, rx, tx mmaps

	rxMu sync.Mutex
	// Guarded by rxMu.
	fill    addrRing
	rx      descRing
	fillPop int      // receive frames given to the fill ring so far
	rxSpare []uint64 // receive frames not given yet (a stack)

	txMu sync.Mutex
	// Guarded by txMu.
	comp    addrRing
	tx      descRing
	txFree  []uint64 // frames free for transmit (a stack)
	txInUse int      // frames handed to the kernel, not yet completed

	warmSink byte // what warm read, kept so that the reads are not dropped

	closeOnce sync.Once
	// statsMu keeps Stats off a closed (and maybe reused) descriptor:
	// Stats read-locks it, Close write-locks it to set closed. The
	// datapath never takes it.
	statsMu sync.RWMutex
	closed  bool // guarded by statsMu
}

// Open creates an AF_XDP socket with its UMEM and binds it to queue of the
// interface ifindex.
func Open(ifindex, queue int, opts Options) (*Socket, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xsk: socket(AF_XDP): %w", err)
	}
	s := &Socket{fd: fd, ifindex: ifindex, queue: queue, frameSize: uint64(opts.FrameSize)}
	if err := s.setup(opts); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Socket) setup(opts Options) error {
	size := opts.NumFrames * opts.FrameSize
	umem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("xsk: mmap UMEM of %d bytes: %w", size, err)
	}
	s.umem = umem
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(&umem[0]))),
		Len:  uint64(size),
		Size: uint32(opts.FrameSize),
	}
	if err := setsockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return fmt.Errorf("xsk: XDP_UMEM_REG: %w", err)
	}
	rs := uint32(opts.RingSize)
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, opt, int(rs)); err != nil {
			return fmt.Errorf("xsk: ring size option %d: %w", opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	offLen := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&offLen)), 0); e != 0 {
		return fmt.Errorf("xsk: XDP_MMAP_OFFSETS: %w", e)
	}
	maps := []struct {
		pgoff    int64
		off      unix.XDPRingOffset
		descSize uint64
	}{
		{unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, 8},
		{unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, 8},
		{unix.XDP_PGOFF_RX_RING, off.Rx, uint64(unsafe.Sizeof(unix.XDPDesc{}))},
		{unix.XDP_PGOFF_TX_RING, off.Tx, uint64(unsafe.Sizeof(unix.XDPDesc{}))},
	}
	for i, m := range maps {
		mem, err := unix.Mmap(s.fd, m.pgoff, int(m.off.Desc+uint64(rs)*m.descSize),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("xsk: mmap ring %d: %w", i, err)
		}
		s.ringMem[i] = mem
	}
	s.fill = newAddrRing(s.ringMem[0], off.Fr, rs)
	s.comp = newAddrRing(s.ringMem[1], off.Cr, rs)
	s.rx = newDescRing(s.ringMem[2], off.Rx, rs)
	s.tx = newDescRing(s.ringMem[3], off.Tx, rs)

	// Half the frames are for receiving, half for transmit. The fill ring
	// starts with initialFill of the receive frames and takes the others
	// as traffic needs them (growFill).
	half := opts.NumFrames / 2
	pop := min(half, initialFill)
	n := s.fill.free(uint32(pop))
	for i := uint32(0); i < n; i++ {
		s.fill.descs[(s.fill.cachedProd+i)&s.fill.mask] = uint64(i) * s.frameSize
	}
	s.fill.submit(n)
	s.fillPop = int(n)
	s.rxSpare = make([]uint64, 0, half-int(n))
	for i := half - 1; i >= int(n); i-- {
		s.rxSpare = append(s.rxSpare, uint64(i)*s.frameSize)
	}
	s.warmSink = warm(s.umem[:int(n)*opts.FrameSize])
	s.txFree = make([]uint64, 0, opts.NumFrames-half)
	for i := opts.NumFrames - 1; i >= half; i-- {
		s.txFree = append(s.txFree, uint64(i)*s.frameSize)
	}
	// The free list is a stack whose top is frame half: a connection's
	// first bursts write the frames from there on.
	txWarm := min(opts.NumFrames-half, txWarmFrames)
	s.warmSink |= warm(s.umem[half*opts.FrameSize : (half+txWarm)*opts.FrameSize])

	var flags uint16
	if !opts.NoNeedWakeup {
		flags |= unix.XDP_USE_NEED_WAKEUP
	}
	bind := func(mode BindMode) error {
		f := flags
		switch mode {
		case BindCopy:
			f |= unix.XDP_COPY
		case BindZeroCopy:
			f |= unix.XDP_ZEROCOPY
		}
		return unix.Bind(s.fd, &unix.SockaddrXDP{Flags: f, Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)})
	}
	switch opts.Mode {
	case BindAuto:
		err = bind(BindZeroCopy)
		s.mode = BindZeroCopy
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
			err = bind(BindCopy)
			s.mode = BindCopy
		}
	default:
		err = bind(opts.Mode)
		s.mode = opts.Mode
	}
	if err != nil {
		return fmt.Errorf("xsk: bind ifindex %d queue %d (%v): %w", s.ifindex, s.queue, opts.Mode, err)
	}
	return nil
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

// FD returns the socket's file descriptor, to insert into an XSKMAP.
func (s *Socket) FD() int { return s.fd }

// Mode returns the bind mode in use (copy or zero-copy).
func (s *Socket) Mode() BindMode { return s.mode }

// FrameSize returns the bytes of each UMEM frame (Options.FrameSize).
func (s *Socket) FrameSize() int { return int(s.frameSize) }

// Queue returns the queue the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// Frame returns the bytes of a descriptor's packet, valid until the frame
// is released (RX) or transmitted (TX).
func (s *Socket) Frame(d Desc) []byte {
	return s.umem[d.Addr : d.Addr+uint64(d.Len) : d.Addr+uint64(d.Len)]
}

// Meta returns the n bytes the XDP program placed before the packet with
// bpf_xdp_adjust_meta (at most 32 in practice).
func (s *Socket) Meta(d Desc, n int) []byte {
	frameStart := d.Addr &^ (s.frameSize - 1)
	if d.Addr-frameStart < uint64(n) {
		return nil
	}
	return s.umem[d.Addr-uint64(n) : d.Addr : d.Addr]
}

// Receive moves up to len(descs) received packets into descs and returns
// how many; it never blocks. Each frame must be given back with Release.
func (s *Socket) Receive(descs []Desc) int {
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	n := s.rx.avail(uint32(len(descs)))
	for i := uint32(0); i < n; i++ {
		d := &s.rx.descs[(s.rx.cachedCons+i)&s.rx.mask]
		descs[i] = Desc{Addr: d.Addr, Len: d.Len}
	}
	if n > 0 {
		s.rx.release(n)
	}
	return int(n)
}

// Release gives received frames back to the kernel through the fill ring.
func (s *Socket) Release(descs []Desc) {
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	if len(s.rxSpare) > 0 {
		s.growFill() // before these go back: how low did the kernel get?
	}
	// The fill ring is as large as the RX frame population, so there is
	// always room for every frame we own, spare ones included.
	n := s.fill.free(uint32(len(descs)))
	for i := uint32(0); i < n; i++ {
		// Received addresses may carry an offset (headroom); the fill ring
		// wants the frame's start.
		s.fill.descs[(s.fill.cachedProd+i)&s.fill.mask] = descs[i].Addr &^ (s.frameSize - 1)
	}
	s.fill.submit(n)
	if s.fill.needWakeup() {
		// Kick the kernel's RX processing so it sees the refilled ring.
		_, _ = unix.Poll([]unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}, 0)
	}
}

// initialFill is how many receive frames the fill ring starts with.
//
// The kernel takes fill ring entries in order, so every frame given to it
// is written once per population's worth of packets: the population is
// the receive path's working set. With all 2,048 receive frames of a
// default socket in the ring, the first 2,048 packets each landed on a
// page neither the kernel's UMEM mapping nor user space had touched yet,
// which on a virtual machine that shadows page tables costs a trap to the
// hypervisor per side (on the project's VM the kernel's copy into them,
// __xsk_rcv, took 171 of the 396 samples of both fi_rma_bw processes in
// the first 130 ms of a 2,000-write run, against 29 of 401 after), and
// 8 MiB of frames cycle through the caches where 2 MiB would do. 512
// frames take the bursts of a 64-write window of 4 KiB writes (192
// frames) with room; more come as traffic needs them.
const initialFill = 512

// growFill gives the fill ring more of the spare receive frames when less
// than half of its population is left in it (the kernel took the rest
// for packets the caller has not released yet; Release asks before it
// puts its frames back): as many again as it has, so a population that
// is too small for the traffic doubles within a batch. A burst larger
// than what the ring holds before the next Release is dropped
// (Stats().Rx_fill_ring_empty_descs) and resent by the sender, as on any
// busy NIC. rxMu is held.
func (s *Socket) growFill() {
	left := s.fill.cachedProd - s.fill.consumer.Load()
	if int(left) >= s.fillPop/2 {
		return
	}
	n := s.fill.free(uint32(min(s.fillPop, len(s.rxSpare))))
	top := len(s.rxSpare)
	for i := uint32(0); i < n; i++ {
		s.fill.descs[(s.fill.cachedProd+i)&s.fill.mask] = s.rxSpare[top-1-int(i)]
	}
	s.rxSpare = s.rxSpare[:top-int(n)]
	s.fill.submit(n)
	s.fillPop += int(n)
}

// FillFrames returns how many receive frames the socket has given to the
// fill ring so far (initialFill at Open, growing with traffic up to half
// the UMEM's frames).
func (s *Socket) FillFrames() int {
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	return s.fillPop
}

// Poll blocks until packets are ready to Receive or timeoutMs passes
// (negative: forever). It returns whether the RX ring has packets.
func (s *Socket) Poll(timeoutMs int) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, timeoutMs)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("xsk: poll: %w", err)
		}
		return n > 0 && fds[0].Revents&unix.POLLIN != 0, nil
	}
}

// NextTxFrame returns a free transmit frame (its whole FrameSize buffer and
// its address), reclaiming completed transmissions first if none is free.
// ok is false when every TX frame is in flight.
func (s *Socket) NextTxFrame() (addr uint64, buf []byte, ok bool) {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if len(s.txFree) == 0 {
		s.reclaimLocked()
		if len(s.txFree) == 0 {
			return 0, nil, false
		}
	}
	addr = s.txFree[len(s.txFree)-1]
	s.txFree = s.txFree[:len(s.txFree)-1]
	return addr, s.umem[addr : addr+s.frameSize : addr+s.frameSize], true
}

// ReturnTxFrame gives back a frame from NextTxFrame that will not be sent.
func (s *Socket) ReturnTxFrame(addr uint64) {
	s.txMu.Lock()
	s.txFree = append(s.txFree, addr)
	s.txMu.Unlock()
}

// Transmit queues frames (from NextTxFrame, Len set) for sending and kicks
// the kernel when it needs it. It returns how many were queued; the rest
// (TX ring full) stay owned by the caller, who may retry or ReturnTxFrame.
func (s *Socket) Transmit(descs []Desc) (int, error) {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	n := s.queueLocked(descs)
	if n == 0 {
		return 0, nil
	}
	// Copy mode (veth) sends only on a kick; zero-copy drivers ask through
	// need_wakeup.
	if s.mode == BindCopy || s.tx.needWakeup() {
		if err := s.kick(); err != nil {
			return int(n), err
		}
	}
	return int(n), nil
}

// TransmitHeld is Transmit without the kick: the frames go out with the next
// Kick or Transmit. A caller sending many small batches in a row (the
// AF_XDP transport's shared poller running thousands of endpoints' receive
// batches, each sending a datagram or two) kicks once after them instead of
// once per batch: in copy mode each kick is a sendto.
func (s *Socket) TransmitHeld(descs []Desc) int {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	return int(s.queueLocked(descs))
}

// queueLocked puts as many of descs on the TX ring as it has room for
// (after reclaiming completed frames) and returns how many. txMu is held.
func (s *Socket) queueLocked(descs []Desc) uint32 {
	s.reclaimLocked()
	n := s.tx.free(uint32(len(descs)))
	for i := uint32(0); i < n; i++ {
		s.tx.descs[(s.tx.cachedProd+i)&s.tx.mask] = unix.XDPDesc{Addr: descs[i].Addr, Len: descs[i].Len}
	}
	if n > 0 {
		s.tx.submit(n)
		s.txInUse += int(n)
	}
	return n
}

// Kick makes the kernel send what TransmitHeld left in the TX ring, when it needs
// a kick to (copy mode, or need_wakeup).
func (s *Socket) Kick() error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.mode == BindCopy || s.tx.needWakeup() {
		return s.kick()
	}
	return nil
}

// maxKicks bounds the sendto calls of one kick.
const maxKicks = 64

// kick makes the kernel send what the TX ring holds. In copy mode one
// sendto sends at most 32 frames (the kernel's TX_BATCH_SIZE) and fails
// with EAGAIN while more are queued: a burst larger than that (a batch of
// responses, the segments of several large writes) would otherwise wait in
// the ring for the next Transmit, which may be a retransmission timer's, so
// kick again while the kernel takes frames and the ring is not empty.
// txMu is held.
func (s *Socket) kick() error {
	for i := 0; i < maxKicks; i++ {
		before := s.tx.consumer.Load()
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EAGAIN:
			// The batch budget ran out, or the kernel is out of buffers:
			// kick again while it makes progress.
			if c := s.tx.consumer.Load(); c != s.tx.cachedProd && c != before {
				continue
			}
			return nil
		case unix.EBUSY, unix.ENOBUFS, unix.ENETDOWN:
			// The kernel is busy sending or out of buffers: the frames stay
			// queued and go with the next kick.
			return nil
		case unix.EINTR:
			continue
		default:
			return fmt.Errorf("xsk: TX kick: %w", e)
		}
	}
	return nil
}

// Reclaim drains the completion ring, returning sent frames to the free
// list, and returns how many frames are still in flight.
func (s *Socket) Reclaim() int {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	s.reclaimLocked()
	return s.txInUse
}

func (s *Socket) reclaimLocked() {
	n := s.comp.avail(s.comp.size)
	for i := uint32(0); i < n; i++ {
		s.txFree = append(s.txFree, s.comp.descs[(s.comp.cachedCons+i)&s.comp.mask])
	}
	if n > 0 {
		s.comp.release(n)
		s.txInUse -= int(n)
	}
}

// Stats returns the kernel's XDP_STATISTICS for the socket.
func (s *Socket) Stats() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	s.statsMu.RLock()
	defer s.statsMu.RUnlock()
	if s.closed {
		return st, fmt.Errorf("xsk: XDP_STATISTICS: %w", unix.EBADF)
	}
	l := uint32(unsafe.Sizeof(st))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return st, fmt.Errorf("xsk: XDP_STATISTICS: %w", e)
	}
	return st, nil
}

// Close unbinds the socket and unmaps its rings and UMEM. Frames returned
// by Frame must not be used afterwards.
func (s *Socket) Close() error {
	s.closeOnce.Do(func() {
		s.rxMu.Lock()
		s.txMu.Lock()
		defer s.rxMu.Unlock()
		defer s.txMu.Unlock()
		s.statsMu.Lock()
		s.closed = true
		s.statsMu.Unlock()
		unix.Close(s.fd)
		for i, m := range s.ringMem {
			if m != nil {
				unix.Munmap(m)
				s.ringMem[i] = nil
			}
		}
		if s.umem != nil {
			unix.Munmap(s.umem)
			s.umem = nil
		}
	})
	return nil
}

// warm reads one byte of every page of m and returns their OR.
//
// The UMEM is mapped with MAP_POPULATE, yet in a virtual machine whose
// hypervisor shadows the guest's page tables the first access from user
// space to each page still traps to the hypervisor: on the 2-core VM of
// this project's benchmarks (a PVM guest) a first read pass over a
// populated 16 MiB took 47 ms (11 us a page), the next 0.04-0.12 ms.
// The fill ring hands its frames to the kernel in order, so the first
// packets of a connection each landed on a page user space had never
// touched, and Receive paid those traps on the datapath (with all 2,048
// receive frames of a socket in the ring: about 23 ms of CPU in the first
// thousand 4 KiB writes). Open pays them instead, for the frames the fill
// ring starts with (initialFill) and the txWarmFrames transmit frames on
// top of the free stack (a connection's first bursts build their frames
// there: 76 of 667 samples of the first 100 4 KiB writes were
// BuildCopy's first writes to them); frames the fill ring takes later,
// and deeper transmit frames, warm up with the traffic that needs them.
// On bare metal the pass costs about what reading the pages' first cache
// lines does.
func warm(m []byte) byte {
	var x byte
	for i := 0; i < len(m); i += pageSize {
		x |= m[i]
	}
	return x
}

// pageSize is the page size warm steps by (the smallest of x86-64 and
// arm64 Linux; larger pages are only read more than once).
const pageSize = 4096
