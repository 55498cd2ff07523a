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
	"github.com/xdpfab/xdpfab/datapath/udpframe"
	"github.com/xdpfab/xdpfab/datapath/xsk"
	"github.com/xdpfab/xdpfab/xdp"
)

// device is the AF_XDP side of one interface, shared by every transport
// (endpoint port) of the process on it: the kernel lets one socket bind a
// queue, so the sockets are per interface. There is no goroutine of its
// own: a transport that receives drains the rings (holding rxMu) and hands
// packets for other ports to their transports' queues, so a lone endpoint
// reads its rings directly, with no hand-off.
type device struct {
	key     string
	claim   int // the claim on the interface's queues (queues.go), -1 when none
	att     *xdp.Attachment
	socks   []*xsk.Socket
	pollFDs []unix.PollFd
	addrs   *addrWatch // keeps the program's local_addrs map current
	// frameSize is the sockets' UMEM frame size, chosen by the
	// interface's MTU when the device opened (xsk.FrameSizeFor).
	frameSize int

	rxMu sync.Mutex // held while draining or polling the RX rings; guards rx

	mu    sync.RWMutex
	ports map[uint16]*Transport // guarded by mu: transports by local port
	refs  int                   // guarded by devicesMu

	txMu sync.Mutex // guards tx, the kick fields and transmits on socks[0]
	tx   [batch]xsk.Desc

	rx [batch]xsk.Desc

	// statSocks is socks for readers of ring statistics (Rings), set when
	// the device opened and cleared before it closes: they need neither
	// rxMu nor txMu, so a metrics scrape never waits for the datapath.
	statSocks atomic.Pointer[[]*xsk.Socket]

	// The shared transports' side (Options.SharedPoll), after the fields
	// above so that their layout is a lone endpoint's as before it.
	// resolvers: by source address (resolvers.go), guarded by mu.
	resolvers map[netip.Addr]*resolverRef
	// pending are the shared transports a drain queued datagrams for,
	// whose readers have not run yet (guarded by rxMu); sharedPoll is nil
	// until the first shared transport (shared.go).
	pending    []*Transport
	sharedPoll atomic.Pointer[devicePoll]
	// While the shared poller's handler runs readers, shared transports'
	// sends only queue frames (kicksHeld), and the handler kicks once
	// after them (kickOwed: something was queued); guarded by txMu.
	kicksHeld, kickOwed bool
}

var (
	devicesMu sync.Mutex
	devices   = map[string]*device{} // by pin directory: one per interface
)

// openDevice returns the shared device of iface, opening it (sockets on
// every queue, receive goroutine) for the first transport. The calling
// thread must be in the interface's network namespace.
func openDevice(iface string, bind xsk.BindMode) (*device, error) {
	key := xdp.PinDir(iface)
	devicesMu.Lock()
	defer devicesMu.Unlock()
	if d := devices[key]; d != nil {
		d.refs++
		return d, nil
	}
	att, err := xdp.Open(iface)
	if err != nil {
		return nil, fmt.Errorf("xdpfab is not attached on %s: %w", iface, err)
	}
	d := &device{key: key, claim: -1, att: att, ports: map[uint16]*Transport{}, resolvers: map[netip.Addr]*resolverRef{}}
	if d.claim, err = claimQueues(att.Ifindex); err != nil {
		att.Close()
		return nil, fmt.Errorf("%s: %w", iface, err)
	}
	if err := d.open(iface, bind); err != nil {
		d.release()
		return nil, err
	}
	d.refs = 1
	devices[key] = d
	return d, nil
}

func (d *device) open(iface string, bind xsk.BindMode) error {
	link, err := netlink.LinkByIndex(d.att.Ifindex)
	if err != nil {
		return fmt.Errorf("link %s: %w", iface, err)
	}
	if d.addrs, err = watchLocalAddrs(d.att); err != nil {
		return fmt.Errorf("%s: %w", iface, err)
	}
	queues := min(max(link.Attrs().NumRxQueues, 1), bpf.XSKMaxQueues)
	d.frameSize = xsk.FrameSizeFor(link.Attrs().MTU)
	for q := 0; q < queues; q++ {
		s, err := openQueue(d.att.Ifindex, q, bind, d.frameSize)
		if err != nil && q > 0 && errors.Is(err, unix.EINVAL) {
			// IFLA_NUM_RX_QUEUES is the allocated count; the kernel refuses
			// queues past the real one (a default veth has one).
			break
		}
		if err != nil {
			return fmt.Errorf("%s queue %d: %w", iface, q, err)
		}
		d.socks = append(d.socks, s)
		if link.Type() == "veth" && d.frameSize > link.Attrs().MTU+xsk.EthVLANLen {
			// The kernel's first touches of the frames a connection's
			// first packets use, paid here instead of on the datapath
			// (xsk.WarmKernelMapping: frames longer than the MTU allows,
			// which the veth drops, so for veth only). Before the
			// socket's XSKMAP slot is set.
			if _, err := s.WarmKernelMapping(); err != nil {
				return fmt.Errorf("%s queue %d: %w", iface, q, err)
			}
		}
		if err := d.att.SetXSK(uint32(q), s.FD()); err != nil {
			return fmt.Errorf("%s queue %d: %w", iface, q, err)
		}
		d.pollFDs = append(d.pollFDs, unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN})
	}
	socks := d.socks
	d.statSocks.Store(&socks)
	return nil
}

// register makes t receive the packets for its port.
func (d *device) register(t *Transport) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ports[t.local.Port()] != nil {
		return fmt.Errorf("port %d already has an AF_XDP transport", t.local.Port())
	}
	d.ports[t.local.Port()] = t
	return nil
}

// close drops t from the device, and closes the device with its last
// transport.
func (d *device) close(t *Transport) {
	d.mu.Lock()
	if d.ports[t.local.Port()] == t {
		delete(d.ports, t.local.Port())
	}
	d.mu.Unlock()
	devicesMu.Lock()
	d.refs--
	last := d.refs == 0
	if last {
		delete(devices, d.key)
	}
	devicesMu.Unlock()
	if !last {
		return
	}
	// Off the shared poller first: its handler takes rxMu.
	d.leavePoller()
	// A poller leaves within FallbackPoll.
	d.rxMu.Lock()
	d.txMu.Lock()
	d.release()
	d.txMu.Unlock()
	d.rxMu.Unlock()
}

func (d *device) release() {
	d.statSocks.Store(nil)
	d.addrs.stop()
	d.addrs = nil
	for q, s := range d.socks {
		_ = d.att.DeleteXSK(uint32(q))
		s.Close()
	}
	d.socks = nil
	d.att.Close()
	if d.claim >= 0 {
		unix.Close(d.claim) // after the sockets: a claimant finds them closed
		d.claim = -1
	}
}

// drain moves what the RX rings hold to the queues of the transports the
// packets are for and returns how many frames it took. d.rxMu is held.
func (d *device) drain() int {
	var p udpframe.Parsed
	got := 0
	for _, s := range d.socks {
		k := s.Receive(d.rx[:])
		got += k
		d.mu.RLock()
		for _, desc := range d.rx[:k] {
			f := s.Frame(desc)
			if udpframe.Parse(f, &p) != nil {
				continue
			}
			t := d.ports[p.Dst.Port()]
			if t == nil {
				continue
			}
			// The program steers only datagrams to the address the
			// port is bound to; this catches the rest (a port entry
			// still bound to every address, a stale one).
			if p.Dst.Addr() != t.addr {
				t.rxOtherHost.Add(1)
				continue
			}
			// The program redirects only datagrams whose UDP checksum
			// it verified, and says so: one without that mark (a
			// program from before checksums) is not trusted.
			m, ok := bpf.ParseMeta(s.Meta(desc, bpf.MetaLen))
			if !ok || m.Flags&bpf.MetaCsumOK == 0 {
				t.rxBadCsum.Add(1)
				continue
			}
			t.rxXSK.Add(1)
			t.q.push(f[p.PayloadOffset:p.PayloadOffset+p.PayloadLen],
				netip.AddrPortFrom(p.Src.Addr().Unmap(), p.Src.Port()), metaOf(m, ok))
			if t.shared && !t.listed {
				t.listed = true
				d.pending = append(d.pending, t)
			}
		}
		d.mu.RUnlock()
		if k > 0 {
			s.Release(d.rx[:k])
		}
	}
	return got
}

// poll waits up to timeout for the RX rings. d.rxMu is held.
func (d *device) poll(timeout time.Duration) {
	if len(d.socks) == 0 {
		time.Sleep(timeout)
		return
	}
	_, _ = unix.Poll(d.pollFDs, int(timeout/time.Millisecond))
}

// rxQueue is a transport's bounded queue of received packets, filled by
// the device's receive goroutine and drained by Receive. Full means drop
// (datagram semantics; the reliable layer retransmits). Buffers are
// preallocated: nothing allocates per packet.
type rxQueue struct {
	mu    sync.Mutex
	slots []rxSlot // guarded by mu
	head  int      // guarded by mu
	n     int      // guarded by mu
	drops uint64   // guarded by mu
	ready chan struct{}
}

type rxSlot struct {
	buf  []byte
	addr netip.AddrPort
	meta datapath.Meta
}

func (q *rxQueue) init(n, size int) {
	q.slots = make([]rxSlot, n)
	mem := make([]byte, n*size)
	prefault(mem)
	for i := range q.slots {
		q.slots[i].buf = mem[i*size : i*size : (i+1)*size]
	}
	q.ready = make(chan struct{}, 1)
}

func (q *rxQueue) push(payload []byte, src netip.AddrPort, meta datapath.Meta) {
	q.mu.Lock()
	if q.n == len(q.slots) || len(payload) > cap(q.slots[0].buf) {
		q.drops++
		q.mu.Unlock()
		return
	}
	s := &q.slots[(q.head+q.n)%len(q.slots)]
	s.buf = append(s.buf[:0], payload...)
	s.addr, s.meta = src, meta
	q.n++
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// len returns how many packets are queued.
func (q *rxQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// pop moves queued packets into pkts and returns how many.
func (q *rxQueue) pop(pkts []datapath.Packet) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := 0
	for ; i < len(pkts) && q.n > 0; i++ {
		s := &q.slots[q.head]
		pk := &pkts[i]
		buf := pk.Buf[:cap(pk.Buf)]
		if len(s.buf) > len(buf) {
			q.drops++
			i--
		} else {
			pk.Buf = buf[:copy(buf, s.buf)]
			pk.Addr, pk.Meta = s.addr, s.meta
		}
		q.head = (q.head + 1) % len(q.slots)
		q.n--
	}
	return i
}

// prefault writes a byte of every page of mem, freshly allocated.
//
// A large make gets pages the kernel has not mapped yet, so each slot's
// first packet took a page fault in drain, on the datapath: on the
// project's 2-core VM (a PVM guest, where a fault also traps to the
// hypervisor) 512 faults cost 11-12 ms, about 22 us each, and the queue's
// 2 MiB were all touched by the first few hundred packets of a transfer
// (perf record -e page-faults: 1,045 faults in drain's copy over both
// processes of a 2,000-write fi_rma_bw run). The queue is made when the
// transport opens, so opening pays them instead.
func prefault(mem []byte) {
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 0
	}
}
