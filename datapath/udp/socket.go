package udp

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
)

// socket is how the transport runs its system calls on the descriptor:
// Read and Write call f until it returns true, waiting for the socket to
// become readable (writable) whenever it returns false; after Close they
// return net.ErrClosed.
type socket interface {
	Read(f func(fd uintptr) bool) error
	Write(f func(fd uintptr) bool) error
	Control(f func(fd uintptr)) error
	Close() error
	LocalAddr() netip.AddrPort
}

// plainSocket is a socket outside Go's netpoller (Options.SharedPoll):
// the process's shared receive poller (datapath/rxpoll) watches it, and a
// netpoller registration beside it would only cost a second epoll
// callback per received datagram, in the sender's system call on
// loopback, and wake a thread idling in the netpoller for nothing (its
// registrations are edge triggered: one wake-up per datagram while
// nobody waits). The rare waits (a Receive that waits, a Send that finds
// the socket buffer full) block the OS thread in poll(2), 10 ms at a
// time, so that Close is never held up for longer.
type plainSocket struct {
	fd      int
	local   netip.AddrPort
	closing atomic.Bool
	// mu is read-held by every call on fd and taken by Close, so that the
	// descriptor is not closed (and its number reused) under a call.
	mu     sync.RWMutex
	closed bool
}

// pollSlice bounds one wait of a plainSocket, in milliseconds.
const pollSlice = 10

func listenPlain(network string, addr netip.AddrPort) (socket, error) {
	domain := unix.AF_INET
	if network == "udp6" {
		domain = unix.AF_INET6
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, errnoOf(err)
	}
	var sa unix.Sockaddr
	if domain == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
	} else {
		// Dual stack, as net.ListenUDP makes it for "udp6".
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
		sa6 := &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
		if z := addr.Addr().Zone(); z != "" {
			if sa6.ZoneId, err = zoneIndex(z); err != nil {
				unix.Close(fd)
				return nil, err
			}
		}
		sa = sa6
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, errnoOf(err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, errnoOf(err)
	}
	s := &plainSocket{fd: fd}
	switch a := got.(type) {
	case *unix.SockaddrInet4:
		s.local = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		s.local = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).WithZone(addr.Addr().Zone()), uint16(a.Port))
	}
	return s, nil
}

func zoneIndex(z string) (uint32, error) {
	if n, err := strconv.ParseUint(z, 10, 32); err == nil {
		return uint32(n), nil
	}
	ifi, err := net.InterfaceByName(z)
	if err != nil {
		return 0, fmt.Errorf("zone %q: %w", z, fi.EINVAL)
	}
	return uint32(ifi.Index), nil
}

func (s *plainSocket) Read(f func(fd uintptr) bool) error  { return s.do(f, unix.POLLIN) }
func (s *plainSocket) Write(f func(fd uintptr) bool) error { return s.do(f, unix.POLLOUT) }

func (s *plainSocket) do(f func(fd uintptr) bool, events int16) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for {
		if s.closed || s.closing.Load() {
			return net.ErrClosed
		}
		if f(uintptr(s.fd)) {
			return nil
		}
		pfd := [1]unix.PollFd{{Fd: int32(s.fd), Events: events}}
		if _, err := unix.Poll(pfd[:], pollSlice); err != nil && err != unix.EINTR {
			return err
		}
	}
}

func (s *plainSocket) Control(f func(fd uintptr)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return net.ErrClosed
	}
	f(uintptr(s.fd))
	return nil
}

// Close waits for a call under way (a wait ends within pollSlice).
func (s *plainSocket) Close() error {
	s.closing.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return unix.Close(s.fd)
}

func (s *plainSocket) LocalAddr() netip.AddrPort { return s.local }
