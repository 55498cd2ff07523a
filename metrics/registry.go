package metrics

import (
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/xdp"
)

// Source is what an endpoint registers: how to read its engine's
// counters and the transport it moves packets with (*afxdp.Transport and
// *udp.Transport are recognised, also behind a wrapper with an Unwrap
// method).
type Source struct {
	Stats     func() reliable.Stats
	Transport datapath.Transport
}

type entry struct {
	src   Source
	netns xdp.NetnsID
}

// registry holds the process's sources and its metrics servers, one per
// network namespace with sources.
var registry = struct {
	sync.Mutex
	next    uint64
	entries map[uint64]entry
	servers map[xdp.NetnsID]*server
}{entries: map[uint64]entry{}, servers: map[xdp.NetnsID]*server{}}

// Register adds an endpoint to the process's metrics, in the network
// namespace of the calling thread (the endpoint's: call it on the thread
// that opened the transport), and starts the namespace's metrics socket
// if it is the first endpoint there. unregister removes it, and the
// socket with the namespace's last endpoint. A socket that cannot be
// served (no privilege to read the namespace) only costs the CLI its
// view of this process; the endpoint works regardless.
func Register(src Source) (unregister func()) {
	ns, _ := xdp.CurrentNetns()
	registry.Lock()
	defer registry.Unlock()
	registry.next++
	id := registry.next
	registry.entries[id] = entry{src: src, netns: ns}
	if registry.servers[ns] == nil {
		if s, err := listen(ns); err == nil {
			registry.servers[ns] = s
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			registry.Lock()
			defer registry.Unlock()
			delete(registry.entries, id)
			for _, e := range registry.entries {
				if e.netns == ns {
					return
				}
			}
			if s := registry.servers[ns]; s != nil {
				s.close()
				delete(registry.servers, ns)
			}
		})
	}
}

// unwrapper is a transport wrapping another (datapath/lossy).
type unwrapper interface{ Unwrap() datapath.Transport }

func baseTransport(tr datapath.Transport) datapath.Transport {
	for {
		u, ok := tr.(unwrapper)
		if !ok {
			return tr
		}
		tr = u.Unwrap()
	}
}

// Local is the calling process's report: its endpoints (in every network
// namespace) and the counters of the XDP attachments their AF_XDP
// transports use.
func Local() *Report {
	r := &Report{}
	registry.Lock()
	nss := make([]xdp.NetnsID, 0, len(registry.servers))
	seen := map[xdp.NetnsID]bool{}
	for _, e := range registry.entries {
		if !seen[e.netns] {
			seen[e.netns] = true
			nss = append(nss, e.netns)
		}
	}
	registry.Unlock()
	slices.Sort(nss)
	type ifKey struct {
		ns      xdp.NetnsID
		ifindex int
	}
	xdps := map[ifKey]bool{}
	for _, ns := range nss {
		p, atts := snapshot(ns)
		r.Processes = append(r.Processes, p)
		for _, a := range atts {
			k := ifKey{a.Netns, a.Ifindex}
			if xdps[k] {
				continue
			}
			xdps[k] = true
			if x, err := XDPOf(a); err == nil {
				r.XDP = append(r.XDP, x)
			}
		}
	}
	r.normalize()
	return r
}

// snapshot is the process's counters in namespace ns, and the attachments
// its AF_XDP transports there use.
func snapshot(ns xdp.NetnsID) (Process, []*xdp.Attachment) {
	registry.Lock()
	var srcs []Source
	for _, e := range registry.entries {
		if e.netns == ns {
			srcs = append(srcs, e.src)
		}
	}
	registry.Unlock()
	p := Process{PID: os.Getpid(), Comm: comm(), Netns: ns}
	type ringKey struct{ ifindex, queue int }
	rings := map[ringKey]bool{}
	var atts []*xdp.Attachment
	for _, s := range srcs {
		ep := Endpoint{Engine: EngineOf(s.Stats())}
		switch tr := baseTransport(s.Transport).(type) {
		case *afxdp.Transport:
			st := tr.Stats()
			ep.Transport, ep.Iface, ep.AFXDP = "afxdp", tr.Iface(), &st
			for _, rs := range tr.Rings(nil) {
				if k := (ringKey{rs.Ifindex, rs.Queue}); !rings[k] {
					rings[k] = true
					p.Rings = append(p.Rings, rs)
				}
			}
			atts = append(atts, tr.Attachment())
		case *udp.Transport:
			st := tr.Stats()
			ep.Transport, ep.UDP = "udp", &st
		default:
			ep.Transport = "other"
		}
		if s.Transport != nil {
			ep.Addr = s.Transport.LocalAddr().String()
		}
		p.Endpoints = append(p.Endpoints, ep)
	}
	slices.SortFunc(p.Endpoints, func(a, b Endpoint) int { return strings.Compare(a.Addr, b.Addr) })
	slices.SortFunc(p.Rings, func(a, b afxdp.RingStats) int {
		if a.Ifindex != b.Ifindex {
			return a.Ifindex - b.Ifindex
		}
		return a.Queue - b.Queue
	})
	p.normalize()
	return p, atts
}

func comm() string {
	b, _ := os.ReadFile("/proc/self/comm")
	return strings.TrimSpace(string(b))
}
