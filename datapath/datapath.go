// Package datapath defines the boundary between xdpfab's reliability engine
// (datapath/reliable) and the packet transports under it: the kernel UDP
// socket (datapath/udp), the loss-injecting test wrapper (datapath/lossy)
// and the AF_XDP transport. The wire format is datapath/wire.
//
// The Transport interface is modelled on wireguard-go's conn.Bind: packets
// move in batches, each with its peer address, so one system call (or one
// ring pass) carries many packets, and nothing allocates per packet. A
// transport that vets packets before user space sees them (the XDP path
// resolves the sender's fi_addr from the AV map) says so in each packet's
// Meta; the UDP transport reports "not vetted".
package datapath

import (
	"errors"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
)

// Verdict is what the transport's packet filter decided about a received
// packet before user space saw it.
type Verdict uint8

const (
	// VerdictNone: the transport does not vet packets (kernel UDP). The
	// engine must apply its own admission checks.
	VerdictNone Verdict = iota
	// VerdictAccepted: the packet went through the transport's filter:
	// sender resolved (Meta.FIAddr, or fi.AddrNotAvail for an unknown one
	// on a port that admits them), checksum verified. Its ops are not
	// vetted: the target checks each against its MR table.
	VerdictAccepted
	// VerdictUnreachable: not a received datagram but one this transport
	// sent that the network bounced (ICMP port unreachable): Buf is the
	// datagram as sent, Addr its destination. The engine fails the
	// destination's pending operations with FI_ECONNREFUSED.
	VerdictUnreachable
)

// Meta is per-packet metadata a transport may fill on receive.
type Meta struct {
	// FIAddr is the sender's fi_addr as resolved by the transport, or
	// fi.AddrNotAvail when the transport does not resolve senders.
	FIAddr  fi.Addr
	Verdict Verdict
}

// NoMeta is the metadata of a transport that neither resolves nor vets.
var NoMeta = Meta{FIAddr: fi.AddrNotAvail, Verdict: VerdictNone}

// Packet is one datagram in a batch.
type Packet struct {
	// Buf holds the datagram. On Send, Buf is the payload to send. On
	// Receive, the caller passes buffers (the transport uses their full
	// capacity) and gets back Buf sliced to the datagram; a zero-copy
	// transport may instead point Buf at its own memory, which then stays
	// valid only until the next Receive call.
	Buf []byte
	// Addr is the destination on Send, the source on Receive.
	Addr netip.AddrPort
	// Meta is filled on Receive.
	Meta Meta
}

// Transport moves batches of datagrams. Send may be called from several
// goroutines at once; Receive from one goroutine at a time.
type Transport interface {
	// Receive fills pkts[:n] with received datagrams and returns n. With
	// wait it blocks until at least one datagram arrives or the transport
	// is closed; without wait it returns 0, nil when none is ready (busy
	// polling). After Close it returns ErrClosed.
	Receive(pkts []Packet, wait bool) (n int, err error)
	// Send transmits pkts. Datagram semantics: a packet the network or the
	// local stack drops is not an error. Returns ErrClosed after Close.
	Send(pkts []Packet) error
	// BatchSize is the largest batch one Receive or Send call handles at once.
	BatchSize() int
	// LocalAddr is the bound address (peers send to it).
	LocalAddr() netip.AddrPort
	// Close releases the transport and wakes a blocked Receive.
	Close() error
}

// Pollable is implemented by transports whose receive side can be waited
// for with poll(2) from outside Receive, so that a goroutine driving manual
// progress can sleep in the kernel on the descriptors of several transports
// at once and wake up when a datagram arrives. PollFDs appends those
// descriptors (events POLLIN) to dst. A wake-up may be spurious (the caller
// calls Receive without waiting and tolerates zero); a datagram that
// arrives must make a descriptor readable. ok is false when the transport
// cannot promise that now (closed, or its datagrams may reach it another
// way); the caller then keeps calling Receive without sleeping. The
// descriptors stay valid until Close, so a caller must leave poll(2)
// before the transport is closed.
type Pollable interface {
	PollFDs(dst []unix.PollFd) (fds []unix.PollFd, ok bool)
}

// SharedPollable is implemented by transports that a process-wide
// receive poller (datapath/rxpoll) may serve instead of a goroutine of
// their own: PollFD is one descriptor, the same from Listen to Close,
// that epoll reports readable (level triggered) whenever Receive without
// waiting would return a datagram, and with EPOLLERR while a bounced
// datagram waits to be reported as VerdictUnreachable. ok is false when
// the transport cannot promise that (then it is not to be polled so).
type SharedPollable interface {
	PollFD() (fd int, ok bool)
	// ErrorReady tells the transport that its descriptor reported
	// EPOLLERR: the next Receive looks at the error queue.
	ErrorReady()
}

// ReadyNotifier is implemented by transports whose datagrams arrive on
// rings shared with other transports of the process (AF_XDP endpoints on
// one interface), so that no descriptor of their own reports them and
// SharedPollable does not fit, but which the process-wide poller
// (datapath/rxpoll) can serve all the same: NotifyReady has the transport
// call fn on the poller's goroutine whenever Receive without waiting would
// return a datagram (fn should receive one batch, as a SharedPollable's
// handler does). stop removes fn and waits for a call in progress; it must
// not be called from fn. ok is false when the transport is not served so
// (then the caller keeps a receive goroutine).
type ReadyNotifier interface {
	NotifyReady(fn func()) (stop func(), ok bool, err error)
}

// PathChecker is implemented by transports that choose a packet's
// link-layer path themselves (the AF_XDP transport builds its frames for a
// cached next hop) and so can keep sending into the void when that path
// changes under them (a neighbour's new MAC nobody announced). The
// reliability engine calls CheckPath when packets to dst keep going
// unanswered (retransmitted several times): the transport should verify
// its path to dst again. CheckPath is a hint: it must return at once (the
// caller holds its locks), must not call back into the caller, and rate
// limiting repeated hints is the transport's business.
type PathChecker interface {
	CheckPath(dst netip.AddrPort)
}

// ErrClosed is returned by a closed transport; it matches fi.ESHUTDOWN.
var ErrClosed error = closedError{}

type closedError struct{}

func (closedError) Error() string { return "datapath: transport closed" }
func (closedError) Is(target error) bool {
	return target == fi.ESHUTDOWN || errors.Is(fi.ESHUTDOWN, target)
}
