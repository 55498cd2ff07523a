package fabric

import (
	"errors"
	"fmt"
	"log"
	"net/netip"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/xdp"
)

// errNoXDP says why a domain cannot use AF_XDP.
var errNoXDP = errors.New("AF_XDP not available")

// resolveTransport decides, when the domain opens, how its endpoints move
// packets, and returns the MR mirror that goes with it: with AF_XDP the
// domain's keys are kept in the attachment's MR map, the kernel-visible
// registry of the keys (the target vets every request). TransportAuto falls back to the kernel UDP socket, logging why.
func (d *Domain) resolveTransport() (mr.Mirror, error) {
	if d.attr.Transport == TransportUDP {
		d.kind = TransportUDP
		return nil, nil
	}
	iface, att, err := openAttachment(d.localAddr(), d.attr.AttachXDP)
	if err != nil {
		if d.attr.Transport == TransportXDP {
			return nil, fmt.Errorf("domain: %w", err)
		}
		if !d.localAddr().IsLoopback() { // nothing to say about loopback
			d.logf("xdpfab: domain %v: using the kernel UDP socket: %v", d.localAddr(), err)
		}
		d.kind = TransportUDP
		return nil, nil
	}
	mirror, err := mr.NewMapMirror(att.MRMap)
	if err != nil {
		att.Close()
		return nil, fmt.Errorf("domain: MR map of %s: %w", iface, err)
	}
	d.kind, d.xdpIface, d.xdpAtt = TransportXDP, iface, att
	return mirror, nil
}

func (d *Domain) logf(format string, args ...any) {
	if d.attr.Logf != nil {
		d.attr.Logf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// openAttachment finds the interface holding addr and the xdpfab program
// attached on it, attaching it first if attach is set and it is not.
func openAttachment(addr netip.Addr, attach bool) (string, *xdp.Attachment, error) {
	if addr.IsLoopback() {
		return "", nil, fmt.Errorf("%w: %v is a loopback address", errNoXDP, addr)
	}
	name, err := afxdp.InterfaceOf(addr)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", errNoXDP, err)
	}
	att, err := xdp.Open(name)
	if err != nil && attach {
		att, err = xdp.Attach(name, xdp.Options{Mode: xdp.ModeAuto})
	}
	if err != nil {
		return "", nil, fmt.Errorf("%w: xdpfab is not attached on %s (xdpfab attach %s): %v", errNoXDP, name, name, err)
	}
	return name, att, nil
}

// Transport returns how the domain's endpoints move packets: TransportXDP
// or TransportUDP (TransportAuto resolved).
func (d *Domain) Transport() TransportKind { return d.kind }

// AVOpen is fi_av_open. On a domain using AF_XDP the AV is mirrored into
// the XDP program's AV map, so the kernel resolves and admits its peers;
// an AV opened with av.Open directly is not, and an endpoint using AF_XDP
// refuses it at Enable. Its av_id comes from the attachment (NewAVID):
// unique among the processes sharing the map, and this process's, so its
// entries are removed if the process dies without closing it.
func (d *Domain) AVOpen(attr av.Attr, context any) (*av.AV, error) {
	if d.xdpAtt == nil || attr.Name != "" {
		return av.Open(attr, context)
	}
	att := d.xdpAtt
	id, err := att.NewAVID()
	if err != nil {
		return nil, fmt.Errorf("av open: %w", err)
	}
	a, err := av.Open(attr, context, av.WithKernelMap(att.AVMap), av.WithKernelID(id, func() { _ = att.ReleaseAVID(id) }))
	if err != nil {
		_ = att.ReleaseAVID(id)
	}
	return a, err
}

// SharedPollAuto is how many endpoints on the kernel UDP socket a
// process has open before its next ones are served by the shared receive
// poller without DomainAttr.SharedPoll (see "Many endpoints" in the
// package doc). Below it a receive goroutine per endpoint, which its CQ
// readers can relieve, wakes readers sooner; with thousands of endpoints
// the goroutines' wake-ups and empty receives cost more than the poller's
// hand-off (bench peers at 10,000). 64 is a round number above what an
// MPI rank or a fabtests program opens, not a measured crossover.
const SharedPollAuto = 64

// udpEndpoints counts the process's open endpoints on the kernel UDP
// socket that the domain opened (SharedPollAuto).
var udpEndpoints atomic.Int32

// sharedPoll reports whether an endpoint opened now on the kernel UDP
// socket is served by the process's shared receive poller.
func (d *Domain) sharedPoll() bool {
	if d.attr.BusyPoll || d.attr.Progress == ProgressManual {
		return false
	}
	return d.attr.SharedPoll || udpEndpoints.Load() >= SharedPollAuto
}

// openTransport opens an endpoint's transport on port; shared reports a
// kernel UDP socket opened for the shared receive poller (sharedPoll),
// which the endpoint's engine must then use.
func (d *Domain) openTransport(port uint16) (tr datapath.Transport, shared bool, err error) {
	local := netip.AddrPortFrom(d.localAddr(), port)
	if d.kind == TransportXDP {
		tr, err := afxdp.Open(afxdp.Options{Iface: d.xdpIface, Local: local})
		switch {
		case err == nil:
			return tr, false, nil
		case d.attr.Transport == TransportXDP || !errors.Is(err, unix.EBUSY):
			return nil, false, fmt.Errorf("endpoint: %w", err)
		}
		// Another process holds the interface's AF_XDP queues (two
		// processes of one namespace on one NIC, as fabtests'
		// fi_rdm_shared_av forks): this endpoint takes the kernel
		// socket, which the program passes its port's datagrams to.
		d.logf("xdpfab: endpoint %v: using the kernel UDP socket: %v", local, err)
	}
	shared = d.sharedPoll()
	tr, err = udp.Listen(local, udp.Options{PathChecks: true, SharedPoll: shared})
	if err != nil {
		return nil, false, fmt.Errorf("endpoint: open UDP transport on %v: %w", local, err)
	}
	return tr, shared, nil
}

// configureTransport tells the XDP program about an AF_XDP endpoint's
// port once its AV is known: which AV admits peers (strict unless
// AcceptUnknown) and which domain's keys requests name.
func (ep *Endpoint) configureTransport() error {
	inner := ep.tr
	for { // see through wrappers such as datapath/lossy
		u, ok := inner.(interface{ Unwrap() datapath.Transport })
		if !ok {
			break
		}
		inner = u.Unwrap()
	}
	tr, ok := inner.(*afxdp.Transport)
	if !ok {
		return nil
	}
	km := ep.av.KernelMap()
	if (km == nil || !sameMap(km, tr.Attachment().AVMap)) && !ep.attr.AcceptUnknown {
		// A named AV's map is shared by processes, not read by the
		// program: the port's av_id finds no table there, and only a
		// non-strict port hands its peers up (marked unknown; Go
		// resolves them in the AV).
		return fmt.Errorf("AV is not mirrored in the XDP program's AV map (open it with Domain.AVOpen, or accept unknown peers): %w", fi.EINVAL)
	}
	serve := ep.dom.kmr.att != nil && ep.dom.kmr.addEndpoint(ep)
	return tr.Configure(xdp.PortConfig{AVID: ep.av.ID(), DomainID: ep.dom.id, Strict: !ep.attr.AcceptUnknown,
		KernelServe: serve})
}

func sameMap(a, b *ebpf.Map) bool {
	ia, err1 := a.Info()
	ib, err2 := b.Info()
	if err1 != nil || err2 != nil {
		return false
	}
	ida, ok1 := ia.ID()
	idb, ok2 := ib.ID()
	return ok1 && ok2 && ida == idb
}
