package afxdp

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/rxpoll"
	"github.com/xdpfab/xdpfab/datapath/xsk"
)

// Serving many transports from the process's shared poller
// (Options.SharedPoll). A transport's datagrams arrive on the device's
// rings, which it shares with every other transport on the interface, so
// no descriptor of its own reports them and datapath.SharedPollable does
// not fit. Instead the device puts its AF_XDP sockets on the shared poller
// (datapath/rxpoll); its handler drains the rings into the transports'
// queues, noting on the device's pending list each shared transport it
// gave datagrams to, and then runs those transports' readers (the
// functions NotifyReady set: the reliable engine's receive batch), one
// after the other on the poller's goroutine. Per datagram that is a map
// lookup by port and the queue's copy: no goroutine of the endpoint wakes
// and nothing scans the other endpoints. The transport's kernel socket is
// on the poller too; when it is readable the transport's next Receive
// looks at it (kernelDue). A drain by a transport with a receive goroutine
// of its own (a device with both kinds) cannot run other transports'
// readers (it holds its engine's locks), so it wakes the device's handler
// through an eventfd instead.

var _ datapath.ReadyNotifier = (*Transport)(nil)

// devicePoll is the device's registrations with the shared poller.
type devicePoll struct {
	efd  int // eventfd: pending transports a foreign drain left
	regs []*rxpoll.Registration
	// runMu is held while readers run, so that stopNotify can wait for a
	// running one; run is the handler's copy of the pending list.
	runMu sync.Mutex
	run   []*Transport
}

// deviceHandler is the device as the poller's handler of its sockets and
// eventfd.
type deviceHandler struct {
	d   *device
	efd int // >= 0 for the eventfd's registration
}

// Ready drains the rings and runs the readers of the transports the
// datagrams went to.
func (h *deviceHandler) Ready(uint32) {
	d := h.d
	if h.efd >= 0 {
		var b [8]byte
		_, _ = unix.Read(h.efd, b[:])
	}
	p := d.sharedPoll.Load()
	d.rxMu.Lock()
	if len(d.socks) > 0 {
		d.drain()
	}
	p.runMu.Lock()
	p.run, d.pending = d.pending, p.run[:0]
	for _, t := range p.run {
		t.listed = false
	}
	d.rxMu.Unlock()
	d.holdKicks()
	again := false
	for _, t := range p.run {
		if fn := t.ready.Load(); fn != nil {
			(*fn)()
			// A reader takes one batch: what it left needs another
			// turn, which nothing on the rings would announce.
			again = again || t.q.len() > 0
		}
	}
	d.releaseKicks()
	if again {
		d.rxMu.Lock()
		for _, t := range p.run {
			if !t.listed && t.ready.Load() != nil && t.q.len() > 0 {
				t.listed = true
				d.pending = append(d.pending, t)
			}
		}
		d.wakePending()
		d.rxMu.Unlock()
	}
	p.runMu.Unlock()
}

// kernelHandler is a shared transport's kernel socket as the poller's
// handler.
type kernelHandler Transport

func (h *kernelHandler) Ready(events uint32) {
	t := (*Transport)(h)
	if events&unix.EPOLLERR != 0 {
		t.kernel.ErrorReady()
	}
	t.kernelDue.Store(true)
	p := t.dev.sharedPoll.Load()
	p.runMu.Lock()
	if fn := t.ready.Load(); fn != nil {
		(*fn)()
	}
	p.runMu.Unlock()
}

// NotifyReady implements datapath.ReadyNotifier for a transport opened
// with Options.SharedPoll: fn runs on the shared poller's goroutine
// whenever Receive without waiting would return datagrams. stop removes fn
// and waits for a call of it in progress; Close stops it too.
func (t *Transport) NotifyReady(fn func()) (stop func(), ok bool, err error) {
	if !t.shared || t.closed.Load() {
		return nil, false, nil
	}
	if err := t.dev.joinPoller(); err != nil {
		return nil, false, err
	}
	fd, ok := t.kernel.PollFD()
	if !ok {
		return nil, false, nil
	}
	t.ready.Store(&fn)
	r, err := rxpoll.Register(fd, (*kernelHandler)(t))
	if err != nil {
		t.ready.Store(nil)
		return nil, false, err
	}
	t.kernelReg = r
	// Datagrams queued before fn was set: have the handler run it.
	if t.q.len() > 0 {
		d := t.dev
		d.rxMu.Lock()
		if !t.listed {
			t.listed = true
			d.pending = append(d.pending, t)
		}
		d.wakePending()
		d.rxMu.Unlock()
	}
	return t.stopNotify, true, nil
}

// stopNotify takes the transport off the shared poller and waits for a
// reader call in progress.
func (t *Transport) stopNotify() {
	if t.ready.Swap(nil) == nil {
		return
	}
	if t.kernelReg != nil {
		t.kernelReg.Remove()
	}
	if p := t.dev.sharedPoll.Load(); p != nil {
		p.runMu.Lock()
		p.runMu.Unlock() //nolint:staticcheck // waits for a reader call in progress
	}
	d := t.dev
	d.rxMu.Lock()
	if t.listed {
		d.pending = deleteTransport(d.pending, t)
		t.listed = false
	}
	d.rxMu.Unlock()
}

func deleteTransport(ts []*Transport, t *Transport) []*Transport {
	for i, x := range ts {
		if x == t {
			return append(ts[:i], ts[i+1:]...)
		}
	}
	return ts
}

// joinPoller puts the device's sockets and eventfd on the shared poller,
// once.
func (d *device) joinPoller() error {
	devicesMu.Lock()
	defer devicesMu.Unlock()
	if d.sharedPoll.Load() != nil {
		return nil
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("afxdp: eventfd: %w", err)
	}
	p := &devicePoll{efd: efd}
	d.sharedPoll.Store(p) // before the handlers can run
	fds := []int{efd}
	for _, s := range d.socks {
		fds = append(fds, s.FD())
	}
	for i, fd := range fds {
		h := &deviceHandler{d: d, efd: -1}
		if i == 0 {
			h.efd = efd
		}
		r, err := rxpoll.Register(fd, h)
		if err != nil {
			d.leavePollerLocked()
			return fmt.Errorf("afxdp: shared poller: %w", err)
		}
		p.regs = append(p.regs, r)
	}
	return nil
}

// wakePending has the device's handler run the readers of the pending
// transports a drain outside it left. d.rxMu is held.
func (d *device) wakePending() {
	p := d.sharedPoll.Load()
	if len(d.pending) == 0 || p == nil {
		return
	}
	one := [8]byte{1}
	_, _ = unix.Write(p.efd, one[:])
}

// leavePoller removes the device's registrations (the last transport
// closes the device).
func (d *device) leavePoller() {
	devicesMu.Lock()
	defer devicesMu.Unlock()
	d.leavePollerLocked()
}

func (d *device) leavePollerLocked() {
	p := d.sharedPoll.Load()
	if p == nil {
		return
	}
	for _, r := range p.regs {
		r.Remove()
	}
	d.rxMu.Lock() // wakePending reads d.poll under rxMu
	d.sharedPoll.Store(nil)
	d.rxMu.Unlock()
	unix.Close(p.efd)
}

// transmitHeld sends a shared transport's descs on s, or only queues them
// while the handler holds the kicks. d.txMu is held.
func (d *device) transmitHeld(s *xsk.Socket, descs []xsk.Desc) (int, error) {
	if !d.kicksHeld {
		return s.Transmit(descs)
	}
	n := s.TransmitHeld(descs)
	if n > 0 {
		d.kickOwed = true
	}
	if n < len(descs) {
		// The TX ring is full of held frames: send them, then the rest.
		d.kickOwed = false
		if err := s.Kick(); err != nil {
			return n, err
		}
		m, err := s.Transmit(descs[n:])
		return n + m, err
	}
	return n, nil
}

// holdKicks makes sends queue their frames until releaseKicks.
func (d *device) holdKicks() {
	d.txMu.Lock()
	d.kicksHeld = len(d.socks) > 0
	d.txMu.Unlock()
}

// releaseKicks kicks once for what the sends since holdKicks queued.
func (d *device) releaseKicks() {
	d.txMu.Lock()
	d.kicksHeld = false
	if d.kickOwed && len(d.socks) > 0 {
		d.kickOwed = false
		_ = d.socks[0].Kick()
	}
	d.txMu.Unlock()
}
