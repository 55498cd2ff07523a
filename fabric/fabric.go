// Package fabric holds the libfabric objects that make address vectors,
// event queues, memory registration and the atomic engine useful across a
// network: Fabric, Domain, Endpoint (FI_EP_RDM), completion queues (CQ) and
// counters (Cntr).
//
// Model. A Domain is a local IP address and UDP port (port 0: any) with the
// memory registrations of its process (an mr.Table) and the attributes
// fi_getinfo would report for it (Domain.Info). An Endpoint opened on it
// owns one transport (a kernel UDP socket, or AF_XDP when the xdpfab XDP
// program is attached on the interface) and one reliable datapath engine;
// its address (GetName) is the socket address peers insert into their AV.
// Data transfer calls (messages, RMA, the fi_atomic(3) calls) become
// requests to the engine, which delivers them exactly once, in posting
// order, to the peer endpoint; the target side executes them against its
// domain's registered memory through mr.Table.Lookup (unknown key, range and
// access checks, with the errno the initiator then gets) and the atomic
// engine, and the initiator's CQ and counters report completion.
//
// Provider choices, as fi_getinfo reports them (GetInfo; the full list
// and how hints match is in getinfo.go's fi_getinfo section): FI_EP_RDM
// endpoints, FI_SOCKADDR_IN/IN6 addresses, one Info per usable local
// address (fabric_attr.name its network, domain_attr.name its interface),
// auto progress (goroutines; busy polling on request) or manual on request,
// FI_THREAD_SAFE, no mode bits, mr_mode none required (the bits an
// application sets in DomainAttr.MRMode are enforced), completions delivered when the
// target has executed the operation (FI_DELIVERY_COMPLETE semantics for
// every operation, so fetched data is in the caller's buffer before its
// completion is read; see Completion levels).
//
// Many endpoints. An endpoint on the kernel UDP socket has, by default, a
// receive goroutine of its own, parked in Go's netpoller on its socket,
// which the CQ's readers relieve while they wait (they receive themselves:
// one wake-up per completion instead of two); the netpoller watches the
// socket only while that goroutine waits on it, so the datagrams that
// arrive while readers receive wake no idle runtime thread (datapath/udp). With thousands of endpoints
// in one process (a service with an endpoint per client, a test harness
// playing 10,000 MPI ranks) every operation then wakes a goroutine of its
// own and pays an empty receive before it parks again. The process's
// shared receive poller (datapath/rxpoll, reliable.Config.SharedPoll)
// serves all their sockets from one epoll set and one goroutine instead:
// a socket is received from once per datagram batch it reports, and one
// wake-up serves every socket that became ready meanwhile (`xdpfab bench
// peers --rx shared,own` compares the two). Its endpoints' CQ readers
// wait for the poller's completions instead of receiving themselves, and
// a slow CQ callback holds up every endpoint it serves. An endpoint uses
// it when its domain has DomainAttr.SharedPoll, or when it is opened
// while the process already has SharedPollAuto (64) endpoints on the
// kernel socket (auto progress without BusyPoll only; AF_XDP endpoints
// keep their own receive goroutine). rxpoll.SetSpin makes the poller look
// for the next datagram a while before it parks: a busy target endpoint
// serving thousands of peers then sleeps and is woken far less often, at
// the price of a core spinning while traffic flows (`xdpfab bench peers
// --rx tgtspin`).
//
// Authorization keys. Every request presents one key, as its digest in the
// wire header (mr.AuthDigest, docs/protocol.md): the key of its
// destination's AV entry when the address was inserted with FI_AUTH_KEY
// (an AV opened with av.WithAVAuthKey, FI_AV_AUTH_KEY), else the domain's
// (DomainAttr.AuthKey; there is no per-endpoint ep_attr.auth_key), else
// none. The target serves a region only to requests presenting the
// region's own key (fi_mr_attr.auth_key, or its domain's when the
// registration gave none), so a region registered under another key than
// its domain's is reachable by peers presenting that key; a region without
// key serves only requests presenting none. Others get FI_EACCES and the
// memory is untouched. An endpoint is configured with the AV's keys when it
// is enabled (fi_av_insert_auth_key); an operation to an address bound to
// a key inserted later fails at once with FI_EACCES.
//
// Packet size. An endpoint's datapath packets are as large as the MTU of
// the interface holding the domain's address allows (for an unspecified
// address, or one no interface holds: the smallest MTU of the up
// interfaces; 1500 if none can be read): MTU less the IP (20 or 40) and
// UDP (8) headers, capped at what the transport carries (AF_XDP: one
// UMEM frame less the receive headroom and headers, 3798 bytes over IPv4
// with the 4096-byte frames of interfaces whose MTU exceeds 1774, 2048-byte
// frames below; the kernel socket: a 9000-byte jumbo frame's payload, 8972, which
// is what loopback gets) and failing endpoint creation with FI_EINVAL
// below the datapath's 256 bytes. max_atomic_size and the fi_atomicvalid
// counts (one request packet), inject_size (InjectSize at most) and the
// segmenting of messages and RMA follow it; Info and Endpoint.MaxPacket
// report it. There is no attribute to override it. See mtu.go.
//
// Messages and RMA (fi_msg(3), fi_rma(3)). Every call has its Go method:
// Send, SendV, SendMsg, SendData, Inject, InjectData, Recv, RecvV,
// RecvMsg; Write, WriteV, WriteMsg, WriteData, InjectWrite,
// InjectWriteData, Read, ReadV, ReadMsg. iov_limit is IovLimit (8) local
// buffers per call, FI_EINVAL beyond it or with fewer descriptors than
// buffers; a vector is gathered into one message or transfer (up to 64 KiB
// in the op slot's reused buffer, larger ones in a buffer of their own)
// and scattered on receipt, so the wire never sees the split.
// rma_iov_limit is RMAIovLimit (1): one remote range per call, whose
// length must equal the local buffers' (FI_EINVAL otherwise) — MPI's
// one-sided layer and fabtests post one range, and a single range keeps
// each call one request that is either accepted whole or not at all.
//
// Operation flags. The calls with a flags argument take FI_COMPLETION,
// FI_MORE, FI_FENCE, FI_INJECT (at most inject_size bytes, FI_EMSGSIZE
// beyond; the buffers are free at return), FI_REMOTE_CQ_DATA (sends and
// writes) and the completion levels; a receive takes FI_COMPLETION,
// FI_MORE, FI_TRANSMIT_COMPLETE and FI_DELIVERY_COMPLETE. Any other flag
// fails with FI_EBADFLAGS and posts nothing: a flag asking for something
// xdpfab does not do (FI_MULTICAST, FI_MATCH_COMPLETE, FI_COMMIT_COMPLETE,
// FI_CLAIM, FI_DISCARD, remote CQ data or FI_INJECT on a read) is never
// silently ignored. The calls without a flags argument use
// EPAttr.OpFlags. fi_inject, fi_injectdata, fi_inject_write and
// fi_inject_writedata never generate a completion at the initiator, not
// even an error one; counters still count them.
//
// Completion levels. Every initiator completion is written when the
// target has executed the operation and answered (data placed, atomic
// applied, read data in the caller's buffer): FI_DELIVERY_COMPLETE. That
// is never later than what FI_INJECT_COMPLETE (buffers reusable: the
// datapath no longer reads them once every packet of the op is built)
// and FI_TRANSMIT_COMPLETE (delivered to the peer, no longer tracked)
// require, so all three are accepted and met by the same, stronger event,
// as fi_cq(3) allows; FI_FENCE holds an operation until the earlier ones
// to the same peer have completed, so a fenced operation's completion
// also says they met delivery complete. Target completions (receives,
// remote CQ data) are written once the data is in memory.
//
// Remote CQ data. fi_senddata/fi_injectdata/fi_sendmsg deliver the data
// in the receive completion (FI_REMOTE_CQ_DATA set); fi_writedata,
// fi_inject_writedata and fi_writemsg with FI_REMOTE_CQ_DATA (and atomics
// with it) make a completion on the target endpoint's receive CQ with
// FI_RMA|FI_REMOTE_WRITE|FI_REMOTE_CQ_DATA, the data, a nil context and
// the initiator as source, consuming no posted receive. Its CQ slot is
// reserved before the first byte lands: when the target's receive CQ has
// no room the write (or atomic) is refused whole and the initiator's
// completion fails with FI_EOVERRUN, target memory untouched. Together
// with the slots posted operations reserve, this means xdpfab's CQs never
// overrun: fi_cq(3)'s overrun state does not arise.
//
// CQs and counters. FI_CQ_FORMAT_UNSPEC is FI_CQ_FORMAT_DATA; CQEntry is
// the union of the formats and a CQ clears the fields its format lacks
// (error entries carry them all). Len is set on transmit completions too
// (the bytes moved), which the page leaves undefined. ReadFrom reports the
// sender's fi_addr (its user ID on an FI_AV_USER_ID AV), FI_ADDR_NOTAVAIL
// for a peer not in the AV (EPAttr.AcceptUnknown); for a transmit
// completion it is the operation's peer. CQAttr.WaitCond FI_CQ_COND_THRESHOLD makes SReadCond's
// cond a count to wait for. fi_cq_signal is remembered until one blocking
// read that finds nothing takes it (CQ.SRead, or fi_wait on the CQ's wait
// set), as libfabric's CQs do, so a signal made just before the read is
// not lost. A counter (fi_cntr) counts successes and
// errors of the operations of the kinds it is bound for, Wait returns
// FI_EAVAIL when the error count changes and FI_ETIMEDOUT on timeout; a
// counter may join a wait set (FI_WAIT_SET), where it is pending from an
// update until the next Read or ReadErr. FI_CNTR_EVENTS_COMP is the only
// event kind (libfabric 1.17 has no other).
//
// fi_setname (Endpoint.SetAddr, setname.go) moves an endpoint that is not
// enabled yet to another port, like bind(2); its IP address stays its
// domain's (the domain chose interface, transport and packet size for
// it), so another IP fails with FI_EADDRNOTAVAIL, and port 0 keeps the
// port the endpoint has had since its open.
//
// Poll sets (fi_poll(3); poll.go). Domain.PollOpen is fi_poll_open, and
// PollSet's Add, Del and Poll are fi_poll_add, fi_poll_del and fi_poll,
// with the semantics of libfabric's util poll set (prov/util's
// util_poll.c), which the page leaves loose: Poll first drives the manual
// progress of each member, as reading it would, then reports a CQ while it
// is not empty and a counter when its success or error count differs from
// the set's checkpoint for it (0/0 when it joined; the checkpoint moves
// when Poll reports the counter, so fi_cntr_set or fi_cntr_add by the
// application count as changes, as in libfabric). A CQ reported by Poll
// has a completion (or an error completion, FI_EAVAIL) for the next
// fi_cq_read unless another thread reads it first: no false positives
// from a lone reader, which fabtests' fi_poll counts on. Poll reads
// counters without marking them seen, so a counter in both a poll set and
// a wait set stays pending for fi_wait. Where libfabric is silent or lax
// xdpfab chooses: only CQs and counters of the set's own domain join
// (FI_EINVAL for EQs, as libfabric's domain poll sets, and anything else);
// adding a member twice fails with FI_EALREADY and deleting a non-member
// with FI_ENOENT (util returns 0 for both); add and del flags fail with
// FI_EBADFLAGS; a counter that does not fit in the context array keeps its
// checkpoint (util advances it and loses the event) and the next Poll
// starts after the last member reported. Closing the set does not need
// its members deleted first, and a member closed while in the set leaves
// it at the next Poll, never reported (util would touch freed memory).
//
// fi_av_remove. fi_av(3) leaves operations in progress to a removed
// address undefined and says all resources associated with it are
// released. xdpfab releases them at once: av.Remove tells every endpoint
// bound to the AV (Endpoint.ForgetPeers), whose datapath then completes
// the operations pending to the address with FI_ECANCELED, drops its
// session, replay window and cached responses for it, and cuts short a
// message arriving from it (a receive it matched completes with
// FI_ECANCELED). The removed peer's later packets are dropped (unless
// AcceptUnknown); once the address is inserted again the next operation
// starts a new session. A cancelled operation that was already on the
// wire may still have executed at the target, or still execute (at most
// once) until the target has forgotten the peer or seen its new session;
// after that its delayed packets are refused (retired sessions,
// datapath/reliable). A named AV's removals made by
// another process are not seen by this process's endpoints (idle eviction
// still applies).
//
// Messages and tagged messages (fi_msg(3), fi_tagged(3)). Receives are
// matched as the pages say (match.go): tagged and untagged traffic in
// separate queues, posted receives searched in posting order, the first
// that accepts a message taking it, a sender's messages matched in its
// send order; tags are 64 bits, all of them compared (mem_tag_format is
// reported as FI_TAG_GENERIC, any mask is honoured), outside
// the receive's ignore bits; a receive's source counts only with
// FI_DIRECTED_RECV in EPAttr.Caps (0 takes every capability, so it
// counts by default). Messages up to the eager limit (DefaultEagerLimit,
// FI_OPT_BUFFERED_LIMIT) are sent at once; without a matching receive
// they wait in a bounded unexpected queue (MaxUnexpectedMsgs messages,
// MaxUnexpectedBytes bytes), and past the bound the message is refused:
// the sender's completion is FI_ENORX, nothing of it is kept. Longer
// messages use a rendezvous (rendezvous.go): only their header waits
// unexpected, and once matched the data moves once, from the send buffer
// into the receive buffer. An eager send completes when the target has
// placed or buffered it (FI_DELIVERY_COMPLETE), a rendezvous send when its
// data is in the matched receive (which is also FI_MATCH_COMPLETE). A
// message longer than its receive fills it and completes with FI_ETRUNC.
// FI_MULTI_RECV buffers (RecvMsg) pack messages without alignment padding
// and are released below FI_OPT_MIN_MULTI_RECV (DefaultMinMultiRecv). The
// peek family (FI_PEEK, FI_CLAIM, FI_DISCARD) works on tagged receives
// (peek.go); fi_cancel on posted receives (cancel.go); fi_getopt and
// fi_setopt as opt.go says. FI_BUFFERED_RECV and FI_VARIABLE_MSG are not
// offered.
package fabric

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/epoch"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/xdp"
)

// ProviderName is the provider name fi_getinfo would report.
const ProviderName = "xdpfab"

// Fabric is fi_fabric: the root object EQs and domains are opened from.
type Fabric struct {
	fi.FIDBase
	name string
}

// OpenFabric is fi_fabric.
func OpenFabric(name string, context any) (*Fabric, error) {
	if name == "" {
		name = ProviderName
	}
	return &Fabric{FIDBase: fi.NewFIDBase(fi.ClassFabric, context), name: name}, nil
}

// Name returns the fabric's name.
func (f *Fabric) Name() string { return f.name }

// EQOpen is fi_eq_open.
func (f *Fabric) EQOpen(attr eq.Attr, context any) (*eq.EQ, error) { return eq.Open(attr, context) }

// Close is fi_close.
func (f *Fabric) Close() error { return nil }

// TransportKind selects how a domain's endpoints move packets.
type TransportKind int

const (
	// TransportAuto uses AF_XDP when the xdpfab XDP program is attached on
	// the domain's interface (and the process is privileged), and the kernel
	// UDP socket otherwise, logging why.
	TransportAuto TransportKind = iota
	// TransportUDP always uses the kernel UDP socket.
	TransportUDP
	// TransportXDP requires AF_XDP and fails when it is not available.
	TransportXDP
)

// DomainAttr configures a domain: struct fi_domain_attr (as an Info
// reports it and Fabric.Domain honours it), plus where the domain lives on
// the network and how it moves packets (the Go-only fields Addr, Port,
// Transport, BusyPoll, AttachXDP and Logf, which an Info's DomainAttr
// leaves zero: DomainFromInfo takes the address from Info.SrcAddr).
//
// Fabric.Domain validates the fi_domain_attr fields against what xdpfab
// offers (see GetInfo's package doc section), failing with FI_EINVAL: a
// zero field takes xdpfab's default, a count or size above xdpfab's limit,
// a capability or mode bit it does not have, or an unknown enum value is
// refused.
type DomainAttr struct {
	// Addr is the local IP address endpoints bind to and GetName reports,
	// so it must be one peers can reach; the zero value means 127.0.0.1.
	Addr netip.Addr
	// Port is the UDP port of the domain's first endpoint (0: any).
	Port uint16
	// MRMode is mr_mode: the bits the application supports; the domain
	// enforces them (mr.Mode.Effective resolves FI_MR_BASIC and
	// FI_MR_SCALABLE), and xdpfab requires none of them.
	MRMode    mr.Mode
	Transport TransportKind

	Name            string       // name: the interface holding Addr (informative)
	Threading       Threading    // threading (every model is served thread safe)
	ControlProgress Progress     // control_progress: control calls complete before they return
	ResourceMgmt    ResourceMgmt // resource_mgmt
	AVType          av.Type      // av_type: both AV types are supported
	MRKeySize       int          // mr_key_size
	CQDataSize      int          // cq_data_size
	CQCnt           int          // cq_cnt
	EPCnt           int          // ep_cnt
	TxCtxCnt        int          // tx_ctx_cnt
	RxCtxCnt        int          // rx_ctx_cnt
	MaxEPTxCtx      int          // max_ep_tx_ctx
	MaxEPRxCtx      int          // max_ep_rx_ctx
	MaxEPStxCtx     int          // max_ep_stx_ctx
	MaxEPSrxCtx     int          // max_ep_srx_ctx
	CntrCnt         int          // cntr_cnt
	MRIovLimit      int          // mr_iov_limit
	Caps            fi.Flags     // caps
	Mode            fi.Flags     // mode
	MaxErrData      int          // max_err_data
	MRCnt           int          // mr_cnt
	TClass          uint32       // tclass
	// BusyPoll makes endpoint progress spin on the transport instead of
	// blocking in the kernel: lower latency, one core per endpoint.
	BusyPoll bool
	// SharedPoll has the receive side of the domain's endpoints on the
	// kernel UDP socket served by the process's one shared receive poller
	// (datapath/rxpoll) instead of a goroutine per endpoint: for
	// processes with hundreds or thousands of endpoints (see "Many
	// endpoints" in the package doc). Auto progress only: with BusyPoll
	// or ProgressManual the domain fails to open with FI_EINVAL.
	// Endpoints opened while the process has SharedPollAuto or more
	// endpoints on the kernel socket use it without this.
	SharedPoll bool
	// Progress is data_progress, the domain's data progress model: auto
	// (a goroutine per endpoint, the default) or manual (CQ and counter
	// reads drive it; see ProgressManual).
	Progress Progress
	// AuthKey is the domain's authorization key (auth_key, auth_key_size).
	AuthKey []byte
	// AttachXDP lets the domain attach xdpfab's XDP program on its
	// interface itself (mode auto, pinned like `xdpfab attach`) when it is
	// not attached yet and the process is privileged. Without it the
	// domain only uses an existing attachment.
	AttachXDP bool
	// Logf receives the domain's notices (e.g. why TransportAuto fell back
	// to the kernel socket); nil logs with the standard log package.
	Logf func(format string, args ...any)
}

// MaxMsgSize is the largest message or RMA transfer (max_msg_size).
const MaxMsgSize = 1 << 30

// InjectSize is the largest inject_size: sends and RMA writes up to this
// size may use FI_INJECT (the buffer is copied before the call returns),
// unless one packet holds less at the interface's MTU (TxAttr.InjectSize).
const InjectSize = 1024

var nextDomainID atomic.Uint32

// Domain is fi_domain.
type Domain struct {
	fi.FIDBase
	fabric *Fabric
	attr   DomainAttr
	id     uint32
	mrs    *mr.Table

	// authDigest is mr.AuthDigest(attr.AuthKey): what requests present
	// when neither their destination's AV entry nor the endpoint has a key.
	authDigest uint32

	// Resolved at open: how endpoints move packets, and for AF_XDP the
	// interface and the program's maps.

	kind     TransportKind
	xdpIface string
	xdpAtt   *xdp.Attachment
	kmr      kernelMRs     // kernel-resident regions (kernelmr.go)
	mrMirror *mr.MapMirror // the attachment's MR table, mapped; nil without AF_XDP

	// The packet sizes for the domain's address and transport, as read
	// at open (Info); each endpoint derives its own when it opens.
	sizes    sizes
	sizesErr error

	// info is the Info the domain was opened from (DomainFromInfo), nil
	// otherwise; version is its api_version (APIVersion otherwise). Info
	// reports what they asked for.
	info    *Info
	version uint32

	mu sync.Mutex
	// Guarded by mu.
	eps    int // open endpoints
	avs    int // open AVs
	queues int // open CQs, counters and poll sets (hold, release)
	eqRef  *eq.EQ
	closed bool
}

// Domain is fi_domain: it opens a domain on the fabric.
func (f *Fabric) Domain(attr DomainAttr, context any) (*Domain, error) {
	if attr.Addr.IsValid() && attr.Addr.Zone() != "" && !attr.Addr.Is6() {
		return nil, fmt.Errorf("domain: address %s: %w", attr.Addr, fi.EINVAL)
	}
	if attr.Progress < ProgressUnspec || attr.Progress > ProgressManual {
		return nil, fmt.Errorf("domain: progress %d: %w", attr.Progress, fi.EINVAL)
	}
	if attr.Transport < TransportAuto || attr.Transport > TransportXDP {
		return nil, fmt.Errorf("domain: transport %d: %w", attr.Transport, fi.EINVAL)
	}
	if attr.SharedPoll && (attr.BusyPoll || attr.Progress == ProgressManual) {
		return nil, fmt.Errorf("domain: shared receive poller with busy polling or manual progress: %w", fi.EINVAL)
	}
	if err := checkDomainAttr(APIVersion, &attr, domainLimits()); err != nil {
		return nil, fmt.Errorf("domain: %w: %w", err, fi.EINVAL)
	}
	if attr.Name != "" {
		addr, err := addrOfInterface(attr.Name, attr.Addr)
		if err != nil {
			return nil, fmt.Errorf("domain: %w", err)
		}
		attr.Addr = addr
	}
	attr.AuthKey = append([]byte(nil), attr.AuthKey...)
	d := &Domain{FIDBase: fi.NewFIDBase(fi.ClassDomain, context), fabric: f, attr: attr, id: nextDomainID.Add(1),
		authDigest: mr.AuthDigest(attr.AuthKey), version: APIVersion}
	mirror, err := d.resolveTransport()
	if err != nil {
		return nil, err
	}
	if mm, ok := mirror.(*mr.MapMirror); ok {
		d.mrMirror = mm
	}
	if d.xdpAtt != nil {
		// The MR map is shared with the other processes on the
		// interface: a domain_id unique among them, recorded as this
		// process's so its keys go if it dies.
		if d.id, err = d.xdpAtt.NewDomainID(); err != nil {
			d.closeMRMirror()
			d.xdpAtt.Close()
			return nil, fmt.Errorf("domain: %w", err)
		}
	}
	if d.xdpAtt != nil && d.xdpAtt.KRMem != nil && mirror != nil {
		d.kmr.att = d.xdpAtt
		mirror = &krMirror{inner: mirror, d: d}
	}
	// Regions are recycled: every Lookup of the table runs in an
	// engine's receive batch (target.go), a reader of epoch.Process.
	t, err := mr.NewTable(mr.Config{Mode: attr.MRMode, DomainID: d.id, AuthKey: attr.AuthKey, Owner: d, Mirror: mirror, Epochs: epoch.Process})
	if err != nil {
		d.closeMRMirror()
		if d.xdpAtt != nil {
			_ = d.xdpAtt.ReleaseDomainID(d.id)
			d.xdpAtt.Close()
		}
		return nil, fmt.Errorf("domain: %w", err)
	}
	d.mrs = t
	d.sizes, d.sizesErr = deriveSizes(d.localAddr(), largestFrameData(d.kind == TransportXDP))
	return d, nil
}

// ID returns the domain id (the domain_id of its MR map entries): on
// AF_XDP unique among the processes sharing the interface's MR map.
func (d *Domain) ID() uint32 { return d.id }

// Info reports the domain as fi_getinfo does (the same builder as
// GetInfo): its address, the interface holding it, and the attributes
// fi_getinfo would answer for the hints the domain was opened with (the
// Info of DomainFromInfo, else its DomainAttr). The sizes that depend on
// the packet size are those of the MTU read when the domain opened (zero
// if it is too small for the datapath: endpoints then fail). A domain
// opened from a GetInfo answer reports that answer.
func (d *Domain) Info() *Info {
	l := localAddrOf(d.localAddr(), d.sizes.mtu)
	l.nic.MTU = d.sizes.mtu
	base := baseInfoSizes(&l, d.attr.Port, d.sizes)
	hints := d.info
	if hints == nil {
		attr := d.attr
		hints = &Info{DomainAttr: &attr}
	}
	info := alterInfo(d.version, base, hints)
	info.DomainAttr.MRMode = d.attr.MRMode // what the domain enforces
	if d.info != nil {
		info.DestAddr = slices.Clone(d.info.DestAddr)
	}
	return info
}

// MTU is the interface MTU the domain's packet size was derived from,
// read when it opened (see the package doc's Packet size).
func (d *Domain) MTU() int { return d.sizes.mtu }

// MaxPacket is the UDP payload bytes per datapath packet for the domain's
// address and transport; zero when the MTU is too small for the datapath.
func (d *Domain) MaxPacket() int { return d.sizes.maxPacket }

// MaxAtomicSize is the operand bytes one atomic request carries (one
// packet): what bounds the fi_atomicvalid counts.
func (d *Domain) MaxAtomicSize() int { return d.sizes.maxSegment }

// MRs returns the domain's memory-registration table.
func (d *Domain) MRs() *mr.Table { return d.mrs }

// Bind is fi_domain_bind: bind an EQ with FI_REG_MR so registrations
// complete asynchronously with FI_MR_COMPLETE events.
func (d *Domain) Bind(q *eq.EQ, flags fi.Flags) error {
	if err := d.mrs.BindEQ(q, flags); err != nil {
		return err
	}
	d.mu.Lock()
	d.eqRef = q
	d.mu.Unlock()
	return nil
}

// MRReg is fi_mr_reg.
func (d *Domain) MRReg(buf []byte, access fi.Flags, offset, requestedKey uint64, flags fi.Flags, context any) (*mr.MR, error) {
	return d.mrs.Reg(buf, access, offset, requestedKey, flags, context)
}

// MRRegV is fi_mr_regv.
func (d *Domain) MRRegV(iov [][]byte, access fi.Flags, offset, requestedKey uint64, flags fi.Flags, context any) (*mr.MR, error) {
	return d.mrs.RegV(iov, access, offset, requestedKey, flags, context)
}

// MRRegAttr is fi_mr_regattr.
func (d *Domain) MRRegAttr(attr *mr.Attr, flags fi.Flags) (*mr.MR, error) {
	return d.mrs.RegAttr(attr, flags)
}

// QueryAtomic is fi_query_atomic. Its count is the valid calls' for the
// domain's packet size (max_atomic_size, Info().MaxAtomicSize), as read
// when the domain opened: what an endpoint opened on the domain's address
// reports and accepts. When that packet is too small for the datapath
// (endpoints then fail to open) it fails with the same error.
func (d *Domain) QueryAtomic(dt fatomic.Datatype, op fatomic.Op, flags fi.Flags) (fatomic.Attr, error) {
	if d.sizesErr != nil {
		return fatomic.Attr{}, fmt.Errorf("query_atomic: %w", d.sizesErr)
	}
	return d.sizes.atomics().Query(dt, op, flags)
}

// Close is fi_close: FI_EBUSY while endpoints, AVs, CQs, counters or poll
// sets opened on the domain are open, as fi_domain(3) requires; otherwise
// its MR table closes (failing with FI_EBUSY while regions are
// registered).
func (d *Domain) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("domain close: already closed: %w", fi.EINVAL)
	}
	if d.eps > 0 || d.avs > 0 || d.queues > 0 {
		return fmt.Errorf("domain close: %d endpoint(s), %d AV(s), %d CQ(s), counter(s) or poll set(s) open: %w",
			d.eps, d.avs, d.queues, fi.EBUSY)
	}
	if err := d.mrs.Close(); err != nil {
		return fmt.Errorf("domain close: %w", err)
	}
	d.kmr.closeAll()
	d.closeMRMirror()
	if d.xdpAtt != nil {
		_ = d.xdpAtt.ReleaseDomainID(d.id) // its MRs are closed: no key carries it
		d.xdpAtt.Close()
	}
	d.closed = true
	return nil
}

// hold counts a CQ, counter or poll set being opened on the domain, so that
// Close refuses while it is open; it fails with FI_EINVAL once the domain is
// closed. Each successful hold is paired with one release.
func (d *Domain) hold(op string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("%s: domain closed: %w", op, fi.EINVAL)
	}
	d.queues++
	return nil
}

// release undoes hold, when the object's open failed or it closed.
func (d *Domain) release() {
	d.mu.Lock()
	d.queues--
	d.mu.Unlock()
}

// closeMRMirror unmaps the MR table once no region can write it.
func (d *Domain) closeMRMirror() {
	if d.mrMirror != nil {
		_ = d.mrMirror.Close()
		d.mrMirror = nil
	}
}
