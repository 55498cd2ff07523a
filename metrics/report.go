package metrics

import (
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/xdp"
)

// Report is everything one look at xdpfab shows: the XDP program's
// counters per interface and the counters of processes using xdpfab.
// Lists are never nil (JSON [] rather than null).
type Report struct {
	XDP       []XDP     `json:"xdp"`
	Processes []Process `json:"processes"`
}

// XDP is the XDP program's counters on one interface.
type XDP struct {
	Iface    string      `json:"iface"`
	Ifindex  int         `json:"ifindex"`
	Netns    xdp.NetnsID `json:"netns"`
	Counters []Counter   `json:"counters"` // in bpf.Counter order
}

// Counter is one named counter.
type Counter struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// Process is one process's endpoints and AF_XDP sockets in one network
// namespace: what its metrics socket serves.
type Process struct {
	PID       int               `json:"pid"`
	Comm      string            `json:"comm"`
	Netns     xdp.NetnsID       `json:"netns"`
	Endpoints []Endpoint        `json:"endpoints"`
	Rings     []afxdp.RingStats `json:"rings"` // one per AF_XDP socket, shared by the endpoints on its interface
}

// Endpoint is one endpoint's engine and transport counters.
type Endpoint struct {
	Addr      string       `json:"addr"`      // local IP:port
	Transport string       `json:"transport"` // "afxdp" or "udp"
	Iface     string       `json:"iface,omitempty"`
	Engine    Engine       `json:"engine"`
	AFXDP     *afxdp.Stats `json:"afxdp,omitempty"`
	UDP       *udp.Stats   `json:"udp,omitempty"`
}

// Engine is reliable.Stats with names: what the reliability engine of an
// endpoint counted.
type Engine struct {
	Ops                  map[string]uint64 `json:"ops"`       // completed, by kind (MSG, RMA_WRITE, ...)
	OpErrors             map[string]uint64 `json:"op_errors"` // of which with an error, by kind
	Timeouts             uint64            `json:"timeouts"`  // ops failed with FI_ETIMEDOUT
	InFlight             int64             `json:"in_flight"`
	RequestPackets       uint64            `json:"request_packets"` // first transmissions
	Retransmits          uint64            `json:"retransmits"`
	FastRetransmits      uint64            `json:"fast_retransmits"`
	SpuriousRetransmits  uint64            `json:"spurious_retransmits"` // whose first transmission was answered
	PacketsPerOp         float64           `json:"packets_per_op"`
	SRTTSeconds          float64           `json:"srtt_seconds"`
	Responses            uint64            `json:"responses"`
	Delivered            uint64            `json:"delivered"` // request packets executed as target
	DuplicatesSuppressed uint64            `json:"duplicates_suppressed"`
	SessionResets        uint64            `json:"session_resets"`
	PeersUnreachable     uint64            `json:"peers_unreachable"`
	EAgain               uint64            `json:"eagain"`
	Drops                map[string]uint64 `json:"drops"` // by reason
}

// EngineOf names the counters of s.
func EngineOf(s reliable.Stats) Engine {
	e := Engine{Ops: map[string]uint64{}, OpErrors: map[string]uint64{}, Drops: map[string]uint64{},
		Timeouts: s.Timeouts, InFlight: s.InFlight, RequestPackets: s.TxRequests, Retransmits: s.Retransmits,
		FastRetransmits: s.FastRetransmits, SpuriousRetransmits: s.SpuriousRetransmits, PacketsPerOp: s.PacketsPerOp(), SRTTSeconds: s.SRTT.Seconds(),
		Responses: s.RxResponses, Delivered: s.Delivered, DuplicatesSuppressed: s.DuplicatesSuppressed(),
		SessionResets: s.SessionResets, PeersUnreachable: s.PeersUnreachable, EAgain: s.EAgain}
	for op := wire.Opcode(1); op.Valid(); op++ {
		e.Ops[op.String()] = s.Ops[op]
		e.OpErrors[op.String()] = s.OpErrors[op]
	}
	for r := reliable.DropReason(0); r < reliable.NumDropReasons; r++ {
		e.Drops[r.String()] = s.Drops[r]
	}
	return e
}

// TotalOps sums Ops.
func (e *Engine) TotalOps() uint64 {
	var n uint64
	for _, v := range e.Ops {
		n += v
	}
	return n
}

// XDPOf reads the counters of an attachment.
func XDPOf(a *xdp.Attachment) (XDP, error) {
	c, err := a.Counters()
	if err != nil {
		return XDP{}, err
	}
	x := XDP{Iface: a.Iface, Ifindex: a.Ifindex, Netns: a.Netns, Counters: make([]Counter, len(c))}
	for i, v := range c {
		x.Counters[i] = Counter{Name: bpf.Counter(i).Name(), Value: v}
	}
	return x, nil
}

// normalize makes the lists non-nil.
func (r *Report) normalize() {
	if r.XDP == nil {
		r.XDP = []XDP{}
	}
	if r.Processes == nil {
		r.Processes = []Process{}
	}
	for i := range r.Processes {
		r.Processes[i].normalize()
	}
}

func (p *Process) normalize() {
	if p.Endpoints == nil {
		p.Endpoints = []Endpoint{}
	}
	if p.Rings == nil {
		p.Rings = []afxdp.RingStats{}
	}
}
