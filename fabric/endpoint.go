package fabric

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/epoch"
	"github.com/xdpfab/xdpfab/metrics"
	"github.com/xdpfab/xdpfab/mr"
)

// EPType is enum fi_ep_type; xdpfab offers FI_EP_RDM.
type EPType int

// Endpoint types, numbered as in fabric.h.
const (
	EPUnspec EPType = 0 // FI_EP_UNSPEC: resolves to EPRDM
	EPRDM    EPType = 3 // FI_EP_RDM: reliable, unconnected
)

// EPAttr configures an endpoint.
type EPAttr struct {
	Type EPType
	// Port is the UDP port; 0 takes the domain's port for the domain's
	// first endpoint and any free port otherwise.
	Port uint16
	// TxSize bounds the operations outstanding at once (tx_attr.size);
	// posting more fails with FI_EAGAIN. Default DefaultTxSize, at most
	// MaxTxSize.
	TxSize int
	// RxSize bounds the receives posted at once (rx_attr.size). Default
	// DefaultRxSize, at most MaxRxSize.
	RxSize int
	// OpFlags are the default op flags of calls without a flags argument
	// (tx_attr.op_flags), e.g. fi.COMPLETION with a CQ bound with
	// FI_SELECTIVE_COMPLETION.
	OpFlags fi.Flags
	// RxOpFlags are rx_attr.op_flags beyond fi.COMPLETION (which OpFlags
	// carries for both sides): fi.MULTI_RECV makes fi_recv and fi_recvv
	// (untagged, one buffer) post FI_MULTI_RECV buffers, as fi_recvmsg
	// with the flag does.
	RxOpFlags fi.Flags
	// Caps are the endpoint's capabilities (fi_info caps); 0 takes all
	// of the provider's (Domain.Info().Caps). Of them the datapath looks
	// at fi.DIRECTED_RECV: without it a receive's source address is
	// ignored (any peer matches), as fi_msg(3) and fi_tagged(3) say.
	Caps fi.Flags
	// AcceptUnknown lets peers that are not in the bound AV send to the
	// endpoint (their completions report FI_ADDR_NOTAVAIL as source). By
	// default only peers in the AV are served: others are dropped.
	AcceptUnknown bool
	// Transport overrides the endpoint's packet transport (tests inject
	// loss with a wrapper); nil opens the domain's kind.
	Transport datapath.Transport
}

// endpointID is the id every xdpfab endpoint uses on its own socket: an
// endpoint owns its UDP port, so the port already tells endpoints apart.
const endpointID = 1

// Endpoint is an FI_EP_RDM endpoint (fi_endpoint).
type Endpoint struct {
	fi.FIDBase
	dom  *Domain
	attr EPAttr
	tr   datapath.Transport
	eng  *reliable.Engine // nil until Enable
	// engPub is eng, published for engine(): progress reads it for every
	// endpoint on every CQ read, without ep.mu.
	engPub atomic.Pointer[reliable.Engine]
	// open is enabled && !closed, published for rxReady: every posted
	// receive checks it, without ep.mu (the receiver's own closed flag,
	// under its lock, settles a race with Close).
	open atomic.Bool
	// kshare shares the engine's target state with the XDP program
	// (kernelshare.go); nil when the domain cannot have kernel-resident
	// regions.
	kshare *kernelShare
	amo    fatomic.Engine // valid counts and execution for this endpoint's packet size
	size   sizes          // packet size and what follows from it, fixed at open
	// sharedPoll: the engine receives on the process's shared poller
	// (DomainAttr.SharedPoll, SharedPollAuto); udpCounted: the endpoint
	// counts in udpEndpoints. Set at open (and SetName), before Enable.
	sharedPoll, udpCounted bool
	// enabledCntr is cntr as Enable found it: bindings are refused once
	// enabled, so the datapath reads this copy without taking mu (written
	// by Enable before the engine starts, never after).
	enabledCntr [numCntrKinds]*Cntr
	// unregisterMetrics removes the endpoint from package metrics.
	unregisterMetrics func()

	mu sync.Mutex
	// Guarded by mu.
	av              *av.AV
	txCQ, rxCQ      *CQ
	txSel, rxSel    bool // bound with FI_SELECTIVE_COMPLETION
	cntr            [numCntrKinds]*Cntr
	enabled, closed bool
	ops             []txOp
	freeOps         []int32
	// txCredits are txCQ's slots reserved ahead for the next posts
	// (cq_credits.go). Guarded by mu.
	txCredits int
	// creditsListed (in txCQ.creditEPs) and creditsReturned (by Close:
	// no more batches) are guarded by txCQ.mu.
	creditsListed, creditsReturned bool
	// authKeys maps the handles of the AV's authorization keys the
	// endpoint was enabled against (av.EnableEndpoint) to their digests
	// (mr.AuthDigest), computed once by Enable and read-only after; nil
	// when there are none. See presentedDigest.
	authKeys map[fi.Addr]uint32

	rx receiver

	// eagerLimit: longer messages go by rendezvous (rendezvous.go).
	// Guarded by mu; fixed once enabled.
	eagerLimit int
	// hmemP2P is FI_OPT_FI_HMEM_P2P's value (opt.go). Guarded by mu.
	hmemP2P int

	// Rendezvous sends, by op index, allocated at the first one.
	rndvMu sync.Mutex
	rndvs  []rndvSend // guarded by rndvMu
	// The control queue (rendezvous.go): requests the endpoint makes on
	// its own, waiting for an engine slot.
	ctlMu      sync.Mutex
	ctl        []reliable.Request // guarded by ctlMu, from ctlHead on
	ctlHead    int
	ctlPending atomic.Int32 // len(ctl)-ctlHead

	// pieceBuf is scratch for the handler (the engine's receive goroutine
	// only): the buffers a target span covers.
	pieceBuf [mr.IOVLimit][]byte
	// segFail is the errno of each peer's segmented RMA transfer that
	// failed part way (receive goroutine only; see segmentFailed).
	segFail map[reliable.Peer]fi.Errno
	// cqDataHeld is the receive CQ slot reserved for the remote CQ data
	// of each peer's write or atomic executing now (receive goroutine
	// only; see holdCQData).
	cqDataHeld map[reliable.Peer]*CQ
}

// Counter kinds an endpoint can bind (fi_ep_bind flags).
const (
	cntrSend = iota
	cntrRecv
	cntrRead
	cntrWrite
	cntrRemoteRead
	cntrRemoteWrite
	numCntrKinds
)

var cntrFlags = [numCntrKinds]fi.Flags{fi.SEND, fi.RECV, fi.READ, fi.WRITE, fi.REMOTE_READ, fi.REMOTE_WRITE}

// txOp is the per-operation state between posting and completion; a fixed
// pool of them (TxSize) bounds what is outstanding and avoids allocation.
type txOp struct {
	idx      int32 // index in Endpoint.ops
	ctx      any
	cqFlags  fi.Flags // FI_SEND|FI_MSG, FI_RMA|FI_READ, ...
	cq       *CQ      // the transmit CQ, or nil
	wantComp bool     // write a success completion
	reserved bool     // a CQ slot was reserved
	cntr     int      // counter kind advanced on completion, or -1
	scratch  []byte   // gather buffer for the V and Msg atomic calls
	dest     fi.Addr
	// The caller's result iovecs of a fetch/compare V call with several,
	// which the completion scatters result into; copied into the op so
	// that the call's slice does not escape (no allocation per call).
	result   []byte
	resultV  [IovLimit]IOC
	nres     int
	elemSize int
	rndv     bool // a rendezvous send: its request is the RTS
}

// Endpoint is fi_endpoint: it opens an endpoint on the domain with its own
// UDP socket (GetName works at once); it serves traffic once enabled.
func (d *Domain) Endpoint(attr EPAttr, context any) (*Endpoint, error) {
	switch attr.Type {
	case EPUnspec:
		attr.Type = EPRDM
	case EPRDM:
	default:
		return nil, fmt.Errorf("endpoint: type %d (only FI_EP_RDM): %w", attr.Type, fi.ENOPROTOOPT)
	}
	if attr.TxSize < 0 || attr.RxSize < 0 || attr.TxSize > MaxTxSize || attr.RxSize > MaxRxSize {
		return nil, fmt.Errorf("endpoint: sizes %d/%d (at most %d/%d): %w", attr.TxSize, attr.RxSize, MaxTxSize, MaxRxSize, fi.EINVAL)
	}
	if attr.TxSize == 0 {
		attr.TxSize = DefaultTxSize
	}
	if attr.RxSize == 0 {
		attr.RxSize = DefaultRxSize
	}
	if attr.OpFlags&^(fi.COMPLETION|fi.INJECT|fi.FENCE|fi.DELIVERY_COMPLETE|fi.TRANSMIT_COMPLETE|fi.INJECT_COMPLETE) != 0 {
		return nil, fmt.Errorf("endpoint: op flags %#x: %w", uint64(attr.OpFlags), fi.EBADFLAGS)
	}
	if attr.RxOpFlags&^(fi.COMPLETION|fi.MULTI_RECV) != 0 {
		return nil, fmt.Errorf("endpoint: rx op flags %#x: %w", uint64(attr.RxOpFlags), fi.EBADFLAGS)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("endpoint: domain closed: %w", fi.EINVAL)
	}
	port := attr.Port
	if port == 0 && d.eps == 0 {
		port = d.attr.Port
	}
	d.eps++
	d.mu.Unlock()

	ep := &Endpoint{FIDBase: fi.NewFIDBase(fi.ClassEP, context), dom: d, attr: attr, tr: attr.Transport}
	if ep.tr == nil {
		tr, shared, err := d.openTransport(port)
		if err != nil {
			d.mu.Lock()
			d.eps--
			d.mu.Unlock()
			return nil, err
		}
		ep.tr, ep.sharedPoll = tr, shared
	} else {
		ep.sharedPoll = d.attr.SharedPoll // the domain refuses it with busy polling or manual progress
	}
	size, err := deriveSizes(ep.tr.LocalAddr().Addr(), frameDataOf(ep.tr))
	if err != nil {
		if attr.Transport == nil {
			ep.tr.Close()
		}
		d.mu.Lock()
		d.eps--
		d.mu.Unlock()
		return nil, fmt.Errorf("endpoint on %v: %w", ep.tr.LocalAddr(), err)
	}
	ep.size = size
	ep.amo = size.atomics()
	ep.ops = make([]txOp, attr.TxSize)
	for i := range ep.ops {
		ep.ops[i].idx = int32(i)
	}
	ep.freeOps = make([]int32, attr.TxSize)
	for i := range ep.freeOps {
		ep.freeOps[i] = int32(attr.TxSize - 1 - i)
	}
	ep.rx.init(attr.RxSize)
	ep.eagerLimit = max(DefaultEagerLimit, size.injectSize)
	ep.countUDP()
	// On the thread that opened the transport: its network namespace is
	// the endpoint's (see package metrics).
	ep.unregisterMetrics = metrics.Register(metrics.Source{Stats: ep.Stats, Transport: ep.tr})
	return ep, nil
}

func (d *Domain) localAddr() netip.Addr {
	if d.attr.Addr.IsValid() {
		return d.attr.Addr
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// countUDP keeps the endpoint's place in udpEndpoints (SharedPollAuto)
// in step with its transport: counted while it is a kernel UDP socket the
// domain opened.
func (ep *Endpoint) countUDP() {
	want := ep.attr.Transport == nil && !ep.closed && !isXDP(ep.tr)
	switch {
	case want && !ep.udpCounted:
		udpEndpoints.Add(1)
	case !want && ep.udpCounted:
		udpEndpoints.Add(-1)
	}
	ep.udpCounted = want
}

// GetName is fi_getname: the endpoint's address in the AV's binary format
// (a sockaddr_in or sockaddr_in6), ready for a peer's av.Insert.
func (ep *Endpoint) GetName() []byte {
	return av.AppendSockaddr(nil, ep.tr.LocalAddr())
}

// LocalAddr returns the endpoint's socket address.
func (ep *Endpoint) LocalAddr() netip.AddrPort { return ep.tr.LocalAddr() }

// Bind is fi_ep_bind: an *av.AV, a *CQ with fi.TRANSMIT and/or fi.RECV
// (plus fi.SELECTIVE_COMPLETION), or a *Cntr with any of fi.SEND, fi.RECV,
// fi.READ, fi.WRITE, fi.REMOTE_READ, fi.REMOTE_WRITE. Bindings are made
// before Enable.
func (ep *Endpoint) Bind(obj fi.FID, flags fi.Flags) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return fmt.Errorf("ep bind: closed: %w", fi.EINVAL)
	}
	if ep.enabled {
		return fmt.Errorf("ep bind: endpoint already enabled: %w", fi.EOPBADSTATE)
	}
	switch o := obj.(type) {
	case *av.AV:
		if flags != 0 {
			return fmt.Errorf("ep bind av: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
		}
		if ep.av != nil {
			return fmt.Errorf("ep bind av: an AV is already bound: %w", fi.EINVAL)
		}
		if err := o.AttachEndpoint(ep); err != nil {
			return fmt.Errorf("ep bind av: %w", err)
		}
		ep.av = o
	case *CQ:
		if o.dom != ep.dom {
			return fmt.Errorf("ep bind cq: the CQ belongs to another domain: %w", fi.EINVAL)
		}
		if flags&^(fi.TRANSMIT|fi.RECV|fi.SELECTIVE_COMPLETION) != 0 || flags&(fi.TRANSMIT|fi.RECV) == 0 {
			return fmt.Errorf("ep bind cq: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
		}
		if (flags&fi.TRANSMIT != 0 && ep.txCQ != nil) || (flags&fi.RECV != 0 && ep.rxCQ != nil) {
			return fmt.Errorf("ep bind cq: a CQ is already bound for that direction: %w", fi.EINVAL)
		}
		sel := flags&fi.SELECTIVE_COMPLETION != 0
		if flags&fi.TRANSMIT != 0 {
			if err := o.ref(); err != nil {
				return err
			}
			ep.txCQ, ep.txSel = o, sel
		}
		if flags&fi.RECV != 0 {
			if err := o.ref(); err != nil {
				return err
			}
			ep.rxCQ, ep.rxSel = o, sel
		}
		o.progress.add(ep)
	case *Cntr:
		if o.dom != ep.dom {
			return fmt.Errorf("ep bind cntr: the counter belongs to another domain: %w", fi.EINVAL)
		}
		if flags == 0 || flags&^(fi.SEND|fi.RECV|fi.READ|fi.WRITE|fi.REMOTE_READ|fi.REMOTE_WRITE) != 0 {
			return fmt.Errorf("ep bind cntr: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
		}
		if o.Closed() {
			return fmt.Errorf("ep bind cntr: counter closed: %w", fi.EINVAL)
		}
		for k, f := range cntrFlags {
			if flags&f != 0 {
				if ep.cntr[k] != nil {
					return fmt.Errorf("ep bind cntr: a counter is already bound for %#x: %w", uint64(f), fi.EINVAL)
				}
			}
		}
		for k, f := range cntrFlags {
			if flags&f != 0 {
				ep.cntr[k] = o
				o.ref()
				o.progress.add(ep)
			}
		}
	default:
		return fmt.Errorf("ep bind: cannot bind %T: %w", obj, fi.EINVAL)
	}
	return nil
}

// Enable is fi_enable: it starts the endpoint's datapath. An AV and, for
// anything that completes, CQs must be bound first (FI_ENOAV / FI_ENOCQ).
func (ep *Endpoint) Enable() error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	switch {
	case ep.closed:
		return fmt.Errorf("ep enable: closed: %w", fi.EINVAL)
	case ep.enabled:
		return fmt.Errorf("ep enable: already enabled: %w", fi.EOPBADSTATE)
	case ep.av == nil:
		return fmt.Errorf("ep enable: no AV bound: %w", fi.ENOAV)
	case ep.txCQ == nil && ep.rxCQ == nil && ep.cntr == [numCntrKinds]*Cntr{}:
		return fmt.Errorf("ep enable: no CQ or counter bound: %w", fi.ENOCQ)
	}
	if err := ep.configureTransport(); err != nil {
		return fmt.Errorf("ep enable: %w", err)
	}
	handles, err := ep.av.EnableEndpoint(ep)
	if err != nil {
		return fmt.Errorf("ep enable: %w", err)
	}
	keys, err := authKeyDigests(ep.av, handles)
	if err != nil {
		_ = ep.av.DisableEndpoint(ep)
		return fmt.Errorf("ep enable: %w", err)
	}
	ep.enabledCntr = ep.cntr
	ep.rx.cq, ep.rx.sel, ep.rx.cntr = ep.rxCQ, ep.rxSel, ep.cntr[cntrRecv]
	ep.rx.directed = ep.attr.Caps == 0 || ep.attr.Caps&fi.DIRECTED_RECV != 0
	ep.rx.av = ep.av
	eng, err := reliable.New(ep.tr, reliable.Config{
		EndpointID: endpointID,
		Handler:    ep,
		// The handler's MR lookups (target.go) read recycled regions.
		Epochs: epoch.Process,
		// A batch at a time: one CQ lock and one op-pool lock per batch
		// (complete_batch.go).
		OnCompleteBatch: ep.onCompleteBatch,
		Admit:           ep.admit,
		// The user's operations take at most TxSize; the rest is
		// headroom for the rendezvous protocol's own requests (a push
		// per iovec of a send, a CTS per receive), which otherwise
		// wait in the control queue.
		MaxOps:     2*ep.attr.TxSize + ep.attr.RxSize,
		MaxPacket:  ep.size.maxPacket,
		InjectSize: ep.size.injectSize,
		BusyPoll:   ep.dom.attr.BusyPoll,
		SharedPoll: ep.sharedPoll,

		ManualProgress: ep.manual(),
		Shared:         ep.sharedTarget(),
	})
	if err != nil {
		_ = ep.av.DisableEndpoint(ep)
		return fmt.Errorf("ep enable: %w", err)
	}
	if eng.MaxSegment() != ep.amo.MaxPayload { // the engine and the valid calls agree
		eng.Close()
		_ = ep.av.DisableEndpoint(ep)
		return fmt.Errorf("ep enable: engine segment %d, expected %d: %w", eng.MaxSegment(), ep.amo.MaxPayload, fi.EOTHER)
	}
	ep.eng = eng
	ep.engPub.Store(eng)
	ep.authKeys = keys
	ep.enabled = true
	ep.open.Store(true)
	return nil
}

// authKeyDigests returns the digests of the AV's authorization keys an
// endpoint is enabled against, by handle (nil for none). The keys cannot
// be removed while the endpoint is enabled, so the handles stay valid.
func authKeyDigests(a *av.AV, handles []fi.Addr) (map[fi.Addr]uint32, error) {
	if len(handles) == 0 {
		return nil, nil
	}
	keys := make(map[fi.Addr]uint32, len(handles))
	var buf [av.AuthKeySize]byte
	for _, h := range handles {
		n, err := a.LookupAuthKey(h, buf[:])
		if err != nil {
			return nil, err
		}
		keys[h] = mr.AuthDigest(buf[:min(n, len(buf))])
	}
	return keys, nil
}

// admit serves peers in the bound AV (or anyone with AcceptUnknown).
func (ep *Endpoint) admit(p reliable.Peer, meta datapath.Meta) bool {
	if ep.attr.AcceptUnknown {
		return true
	}
	if meta.FIAddr != fi.AddrNotAvail {
		return true // the XDP program found it in the AV map
	}
	return ep.av.FIAddr(p.Addr) != fi.AddrNotAvail
}

// Close is fi_close: it stops the datapath (outstanding operations complete
// with FI_ECANCELED), releases the socket and the bindings.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return fmt.Errorf("ep close: already closed: %w", fi.EINVAL)
	}
	ep.closed = true
	ep.open.Store(false)
	eng := ep.eng
	var sets [2 + numCntrKinds]*progressSet
	nsets := 0
	for _, cq := range []*CQ{ep.txCQ, ep.rxCQ} {
		if cq != nil {
			sets[nsets] = &cq.progress
			nsets++
		}
	}
	for _, c := range ep.cntr {
		if c != nil {
			sets[nsets] = &c.progress
			nsets++
		}
	}
	ep.mu.Unlock()
	// Out of the progress sets first, without ep.mu: remove waits until no
	// reader sleeps in poll(2) on this endpoint's descriptors, which
	// closing the transport below would pull away.
	for _, s := range sets[:nsets] {
		s.remove(ep)
	}
	if eng != nil {
		eng.Close() // completes what is pending with FI_ECANCELED, via onComplete
		if ep.kshare != nil {
			ep.kshare.close()
			ep.dom.kmr.removeEndpoint(ep)
		}
		ep.dropCtl(nil)
		ep.cancelRndvSends(nil)
		ep.releaseAllCQData()
	}
	ep.unregisterMetrics()
	ep.tr.Close()
	ep.countUDP() // closed: out of the count
	ep.rx.cancelAll()

	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.av != nil {
		_ = ep.av.DetachEndpoint(ep)
	}
	if ep.txCQ != nil {
		ep.returnCredits(ep.txCQ)
		ep.txCQ.unref()
	}
	if ep.rxCQ != nil {
		ep.rxCQ.unref()
	}
	for k, c := range ep.cntr {
		if c != nil {
			c.unref()
			ep.cntr[k] = nil
		}
	}
	ep.dom.mu.Lock()
	ep.dom.eps--
	ep.dom.mu.Unlock()
	return nil
}

// manual reports whether the endpoint's domain uses FI_PROGRESS_MANUAL.
func (ep *Endpoint) manual() bool { return ep.dom.attr.Progress == ProgressManual }

// engine returns the endpoint's engine, nil before Enable.
func (ep *Endpoint) engine() *reliable.Engine { return ep.engPub.Load() }

// MRTable is the memory-registration table of the endpoint's domain:
// mr.MR.Bind refuses an endpoint of another domain with it.
func (ep *Endpoint) MRTable() *mr.Table { return ep.dom.mrs }

// Closed reports whether the endpoint was closed (mr.Endpoint).
func (ep *Endpoint) Closed() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.closed
}

// MaxPacket returns the UDP payload bytes of the endpoint's datapath
// packets, derived from the interface MTU when it opened (see Packet size
// in the package doc).
func (ep *Endpoint) MaxPacket() int { return ep.size.maxPacket }

// InjectSize returns the endpoint's inject_size: InjectSize, or less if
// one packet holds less.
func (ep *Endpoint) InjectSize() int { return ep.size.injectSize }

// Stats returns the datapath's counters (packets, retransmissions, drops
// by reason).
func (ep *Endpoint) Stats() reliable.Stats {
	ep.mu.Lock()
	eng := ep.eng
	ep.mu.Unlock()
	if eng == nil {
		return reliable.Stats{}
	}
	return eng.Stats()
}

// ForgetPeers implements av.PeerForgetter: the bound AV calls it from
// fi_av_remove (av.Remove) with the addresses it removed. Operations
// pending to them complete with FI_ECANCELED, the datapath's state about
// them (session, replay window, cached responses) is released, so the next
// operation to an address inserted again starts a new session; a message
// arriving from one is cut short (a receive it matched completes with
// FI_ECANCELED).
func (ep *Endpoint) ForgetPeers(addrs []netip.AddrPort) {
	eng := ep.engine()
	if eng == nil {
		return // not enabled (or closed): no datapath state
	}
	for _, a := range addrs {
		p := reliable.Peer{Addr: a, EP: endpointID}
		eng.ForgetPeer(p)
		ep.dropCtl(&p)
		ep.cancelRndvSends(&p)
		ep.rx.forget(p)
	}
}
