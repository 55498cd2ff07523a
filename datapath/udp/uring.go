package udp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
)

// uring is a minimal io_uring (io_uring_setup(2), io_uring_enter(2), with
// the rings mmapped) for the batched sender (ringsend.go): SENDMSG
// submissions only. Raw system calls through golang.org/x/sys/unix; the
// structures are the kernel's (include/uapi/linux/io_uring.h). Callers
// serialize all use. Every submission carries MSG_DONTWAIT, so the kernel
// completes it within the io_uring_enter that submits it (a socket with
// no room or no datagram answers EAGAIN rather than being waited for):
// nothing is left in flight for the kernel to finish later.
type uring struct {
	fd      int
	sqRing  []byte // the SQ ring (and, with a single mmap, the CQ ring)
	cqRing  []byte // the CQ ring when mapped apart, else nil
	sqesMem []byte
	sqes    []uringSQE

	sqHead, sqTail, sqMask *uint32
	sqArray                []uint32
	sqEntries              uint32
	cqHead, cqTail, cqMask *uint32
	cqes                   []uringCQE

	tail uint32 // the SQ tail as filled, published by submit
}

type uringSQOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type uringCQOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  uringSQOffsets
	cqOff                                                                  uringCQOffsets
}

type uringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	msgFlags    uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFDIn  int32
	addr3       uint64
	_           uint64
}

type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

const (
	uringOffSQRing = 0
	uringOffCQRing = 0x8000000
	uringOffSQEs   = 0x10000000

	uringFeatSingleMmap = 1 << 0
	uringSetupSubmitAll = 1 << 7
	uringSetupCoopTask  = 1 << 8
	uringOpSendmsg      = 9
	uringOpRecvmsg      = 10
	uringEnterGetEvents = 1 << 0
)

// newUring sets up a ring of entries submissions (a power of two).
func newUring(entries uint32) (*uring, error) {
	var p uringParams
	p.flags = uringSetupSubmitAll | uringSetupCoopTask
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e == unix.EINVAL {
		p = uringParams{} // a kernel before 5.19 knows neither flag
		fd, _, e = unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	}
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", fi.Errno(e))
	}
	r := &uring{fd: int(fd), sqEntries: p.sqEntries}
	fail := func(err error) (*uring, error) {
		r.close()
		return nil, err
	}
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*int(unsafe.Sizeof(uringCQE{}))
	single := p.features&uringFeatSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	if r.sqRing, err = unix.Mmap(r.fd, uringOffSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fail(fmt.Errorf("io_uring mmap sq: %w", err))
	}
	cq := r.sqRing
	if !single {
		if r.cqRing, err = unix.Mmap(r.fd, uringOffCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			return fail(fmt.Errorf("io_uring mmap cq: %w", err))
		}
		cq = r.cqRing
	}
	sqeSize := int(p.sqEntries) * int(unsafe.Sizeof(uringSQE{}))
	if r.sqesMem, err = unix.Mmap(r.fd, uringOffSQEs, sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fail(fmt.Errorf("io_uring mmap sqes: %w", err))
	}
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&r.sqesMem[0])), p.sqEntries)
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead, r.sqTail, r.sqMask = u32(r.sqRing, p.sqOff.head), u32(r.sqRing, p.sqOff.tail), u32(r.sqRing, p.sqOff.ringMask)
	r.sqArray = unsafe.Slice(u32(r.sqRing, p.sqOff.array), p.sqEntries)
	r.cqHead, r.cqTail, r.cqMask = u32(cq, p.cqOff.head), u32(cq, p.cqOff.tail), u32(cq, p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&cq[p.cqOff.cqes])), p.cqEntries)
	r.tail = atomic.LoadUint32(r.sqTail)
	return r, nil
}

// queued is how many submissions are filled but not yet taken by the kernel.
func (r *uring) queued() uint32 { return r.tail - atomic.LoadUint32(r.sqHead) }

// pushSendmsg fills the next submission: sendmsg(fd, hdr, MSG_DONTWAIT)
// tagged with tag. The caller makes sure there is room (queued() below
// sqEntries) and keeps hdr and what it points at alive and unchanged
// until the completion tagged tag is reaped.
func (r *uring) pushSendmsg(fd int, hdr *unix.Msghdr, tag uint64) {
	i := r.tail & *r.sqMask
	r.sqes[i] = uringSQE{opcode: uringOpSendmsg, fd: int32(fd), addr: uint64(uintptr(unsafe.Pointer(hdr))), len: 1,
		msgFlags: unix.MSG_DONTWAIT, userData: tag}
	r.sqArray[i] = i
	r.tail++
}

// pushRecvmsg fills the next submission: recvmsg(fd, hdr,
// MSG_DONTWAIT|MSG_TRUNC) tagged with tag (the result is the datagram's
// whole length, also when the buffer was shorter); as pushSendmsg.
func (r *uring) pushRecvmsg(fd int, hdr *unix.Msghdr, tag uint64) {
	i := r.tail & *r.sqMask
	r.sqes[i] = uringSQE{opcode: uringOpRecvmsg, fd: int32(fd), addr: uint64(uintptr(unsafe.Pointer(hdr))), len: 1,
		msgFlags: unix.MSG_DONTWAIT | unix.MSG_TRUNC, userData: tag}
	r.sqArray[i] = i
	r.tail++
}

// submit publishes the filled submissions and has the kernel take them
// (one io_uring_enter, which also runs the ring's pending completion work).
// The submissions it did not take are withdrawn: their tags are passed to
// dropped, and the ring holds nothing unsubmitted afterwards, so that no
// submission can outlive the descriptor it names.
func (r *uring) submit(dropped func(tag uint64)) error {
	head := atomic.LoadUint32(r.sqHead)
	n := r.tail - head
	atomic.StoreUint32(r.sqTail, r.tail)
	var err error
	for {
		_, _, e := unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), 0, uringEnterGetEvents, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			err = fmt.Errorf("io_uring_enter: %w", fi.Errno(e))
		}
		break
	}
	if head = atomic.LoadUint32(r.sqHead); head != r.tail {
		for t := head; t != r.tail; t++ {
			dropped(r.sqes[r.sqArray[t&*r.sqMask]].userData)
		}
		r.tail = head
		atomic.StoreUint32(r.sqTail, head)
	}
	return err
}

// reap passes each posted completion's tag and result to f and frees the
// completion slots.
func (r *uring) reap(f func(tag uint64, res int32)) int {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	for h := head; h != tail; h++ {
		c := &r.cqes[h&*r.cqMask]
		f(c.userData, c.res)
	}
	atomic.StoreUint32(r.cqHead, tail)
	return int(tail - head)
}

func (r *uring) close() {
	for _, m := range [][]byte{r.sqesMem, r.cqRing, r.sqRing} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqesMem, r.cqRing, r.sqRing = nil, nil, nil
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}
