package udp

import (
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// armedSocket is the socket of a transport with a receive goroutine of its
// own (no Options.SharedPoll): a Receive that waits parks its goroutine,
// as in Go's netpoller, but the socket is watched only while one does.
//
// Why not net.ListenUDP: Go's netpoller watches its descriptors edge
// triggered all the time, and every datagram queued on the socket then
// wakes the thread that idles in the runtime's epoll_wait (there is one
// whenever a processor is idle and a timer pending), even when nobody
// waits for the socket: the engine's receive goroutine is busy, or CQ
// readers receive for it (reliable's Assist) and sleep in poll(2)
// themselves. A target with 10,000 peers, whose datagrams each come from
// another peer and arrive one by one, spent half its context switches on
// such wake-ups. Here the socket is in an epoll set of its own with
// EPOLLONESHOT, armed (EPOLL_CTL_MOD) by a Receive about to wait and
// disarmed by the report that ends the wait; the set's descriptor is what
// sits in the netpoller, readable only while the armed socket is.
type armedSocket struct {
	*plainSocket // the descriptor; Write waits in poll(2), as there
	ep           *os.File
	epRaw        syscall.RawConn
	epWait       func(fd uintptr) bool
	arm          func(fd uintptr)
	armErr       error // of the last arm; Read's
	armEv        unix.EpollEvent
	events       [1]unix.EpollEvent
}

func listenArmed(network string, addr netip.AddrPort) (socket, error) {
	s, err := listenPlain(network, addr)
	if err != nil {
		return nil, err
	}
	ps := s.(*plainSocket)
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		ps.Close()
		return nil, errnoOf(err)
	}
	// Disarmed at first: EPOLLONESHOT with no events reports nothing.
	ev := unix.EpollEvent{Events: unix.EPOLLONESHOT}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, ps.fd, &ev); err != nil {
		unix.Close(epfd)
		ps.Close()
		return nil, errnoOf(err)
	}
	// Non-blocking, so that os.NewFile puts it in Go's netpoller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		ps.Close()
		return nil, errnoOf(err)
	}
	f := os.NewFile(uintptr(epfd), "udp-armed")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		ps.Close()
		return nil, err
	}
	a := &armedSocket{plainSocket: ps, ep: f, epRaw: raw}
	a.epWait = a.reported
	a.arm = a.armSocket
	return a, nil
}

// armSocket is the RawConn.Control callback on the epoll set that arms
// the socket for one report (EPOLLIN; EPOLLERR always). Armed while
// already readable, the socket is reported at once: a datagram that came
// after the last receive looked is not missed.
func (s *armedSocket) armSocket(epfd uintptr) {
	s.armEv = unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT}
	s.armErr = unix.EpollCtl(int(epfd), unix.EPOLL_CTL_MOD, s.fd, &s.armEv)
}

// reported is the RawConn.Read callback on the epoll set: whether the
// armed socket has been reported (which disarms it); false parks.
func (s *armedSocket) reported(fd uintptr) bool {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&s.events[0])), 1, 0, 0, 0)
	return e == 0 && n > 0
}

// Read calls f until it returns true, parking the goroutine, with the
// socket armed, whenever f returns false.
func (s *armedSocket) Read(f func(fd uintptr) bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for {
		if s.closed || s.closing.Load() {
			return net.ErrClosed
		}
		if f(uintptr(s.fd)) {
			return nil
		}
		if err := s.epRaw.Control(s.arm); err != nil {
			return net.ErrClosed // Close closed the set
		}
		if s.armErr != nil {
			return s.armErr
		}
		if err := s.epRaw.Read(s.epWait); err != nil {
			return net.ErrClosed // Close closed the set to end the wait
		}
	}
}

// Close ends a waiting Read (closing the epoll set wakes it), then closes
// the socket once no call is under way.
func (s *armedSocket) Close() error {
	s.closing.Store(true)
	s.ep.Close()
	return s.plainSocket.Close()
}
