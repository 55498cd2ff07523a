package fabric

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// fi_getinfo. GetInfo answers one Info per usable local address: every
// IPv4 and IPv6 address of every interface that is up in the calling
// thread's network namespace, loopback included (IPv6 link-local
// addresses, which need a zone, are left out). The Infos with xdpfab's XDP
// program attached on their interface come first (the fastest), then the
// other non-loopback addresses (IPv4 before IPv6, by interface index),
// then loopback. Each names its place as the IP providers of libfabric do:
// fabric_attr.name is the address's network ("10.1.0.0/24"),
// domain_attr.name the interface ("veth0", "lo"), and NIC says the
// interface, its MTU and whether the XDP program is attached there.
// fabric_attr.prov_name is "xdpfab" (matched case-insensitively; layered
// names such as "xdpfab;ofi_rxm" match nothing: xdpfab is a core RDM
// provider and no utility provider runs over it).
//
// What xdpfab reports (and its limits, which hints may ask for less of):
// ep_type FI_EP_RDM; caps ProviderCaps (FI_LOCAL_COMM only on loopback);
// no mode bits (no FI_CONTEXT); addr_format FI_SOCKADDR_IN or
// FI_SOCKADDR_IN6 by the address's family (hints FI_SOCKADDR and
// FI_FORMAT_UNSPEC take both; FI_ADDR_STR and the others take none,
// although an FI_ADDR_STR string is accepted as node); mr_mode none
// required (a legacy FI_MR_BASIC or FI_MR_SCALABLE hint is answered as
// given, and is what the domain then enforces); threading FI_THREAD_SAFE
// (a weaker hint is answered as given: everything is thread safe anyway);
// data and control progress FI_PROGRESS_AUTO unless the hint says manual;
// resource_mgmt FI_RM_ENABLED; av_type FI_AV_UNSPEC (both types are
// served; an AV opened FI_AV_UNSPEC is a table) unless the hint names one,
// as libfabric's sockets, udp, tcp and rxd providers answer: fabtests
// (fi_rdm_multi_client's server) treats an FI_AV_TABLE answer as "the
// peer is fi_addr 0" and so cannot serve a second client; tx/rx size DefaultTxSize/DefaultRxSize (hints up to
// MaxTxSize/MaxRxSize); inject_size InjectSize or what one packet at the
// interface's MTU holds; iov_limit IovLimit, rma_iov_limit RMAIovLimit,
// max_msg_size MaxMsgSize; msg_order every bit (requests to one peer
// execute in posting order), max_order_*_size any size (-1); comp_order
// FI_ORDER_NONE; total_buffered_recv MaxUnexpectedBytes; cq_data_size 8;
// mem_tag_format FI_TAG_GENERIC (64 bits); one tx and one rx context per
// endpoint, no shared or scalable contexts; no per-endpoint auth_key (the
// domain's is used); traffic classes: the labels are taken (all served
// as FI_TC_BEST_EFFORT), DSCP values are not met (no packet marking).
//
// Hints follow fi_getinfo(3) and libfabric's util checks: a zero hint is a
// wildcard (mode: the application supports no mode bit), a non-zero one
// must be met or the Info is left out, and when none is left GetInfo
// fails with FI_ENODATA naming the last reason. A hint asking for more
// than xdpfab has (a size above a limit, a capability, order or op flag
// it lacks) is never silently widened. The answer's caps are the hints'
// primary caps (with the modifiers FI_SEND|FI_RECV, FI_READ|FI_WRITE|
// FI_REMOTE_READ|FI_REMOTE_WRITE when none is given) plus the secondary
// caps xdpfab always has; with no caps hint, all of ProviderCaps.

// APIVersion is the newest interface version GetInfo accepts: that of
// the libfabric whose man pages xdpfab follows (and Debian's libfabric).
var APIVersion = fi.Version(1, 17)

// ProviderVersion is fabric_attr.prov_version.
var ProviderVersion = fi.Version(1, 0)

// Capabilities.
const (
	// PrimaryCaps are the primary capabilities (and modifiers) xdpfab has;
	// they are reported only when asked for, or when caps is not hinted.
	PrimaryCaps = fi.MSG | fi.TAGGED | fi.RMA | fi.ATOMIC | fi.READ | fi.WRITE | fi.SEND | fi.RECV |
		fi.REMOTE_READ | fi.REMOTE_WRITE | fi.DIRECTED_RECV | fi.AV_USER_ID
	// SecondaryCaps are the secondary capabilities xdpfab has and
	// always reports.
	SecondaryCaps = fi.MULTI_RECV | fi.SOURCE | fi.RMA_EVENT | fi.FENCE | fi.SHARED_AV
	// CommCaps are FI_LOCAL_COMM and FI_REMOTE_COMM: loopback addresses
	// have only the first.
	CommCaps = fi.LOCAL_COMM | fi.REMOTE_COMM
	// ProviderCaps is every capability xdpfab has.
	ProviderCaps = PrimaryCaps | SecondaryCaps | CommCaps

	// txCaps and rxCaps are the capabilities that apply to each side
	// (fi_endpoint(3)); a tx_attr hint's receive-only bits are ignored and
	// the other way round, as util does.
	txCaps       = fi.MSG | fi.RMA | fi.TAGGED | fi.ATOMIC | fi.READ | fi.WRITE | fi.SEND | fi.FENCE
	rxCaps       = fi.MSG | fi.RMA | fi.TAGGED | fi.ATOMIC | fi.REMOTE_READ | fi.REMOTE_WRITE | fi.RECV | fi.DIRECTED_RECV | fi.MULTI_RECV | fi.SOURCE | fi.RMA_EVENT
	ignoredTxCap = fi.REMOTE_READ | fi.REMOTE_WRITE | fi.RECV | fi.DIRECTED_RECV | fi.VARIABLE_MSG | fi.MULTI_RECV | fi.SOURCE | fi.RMA_EVENT | fi.SOURCE_ERR
	ignoredRxCap = fi.READ | fi.WRITE | fi.SEND | fi.FENCE | fi.MULTICAST | fi.NAMED_RX_CTX
	msgDirCaps   = fi.SEND | fi.RECV
	rmaDirCaps   = fi.READ | fi.WRITE | fi.REMOTE_READ | fi.REMOTE_WRITE
)

// Attribute limits and defaults (see the package doc's fi_getinfo section).
const (
	DefaultTxSize = 4096    // tx_attr.size when not asked
	MaxTxSize     = 1 << 16 // the largest tx_attr.size (EPAttr.TxSize)
	DefaultRxSize = 1024    // rx_attr.size when not asked
	MaxRxSize     = 1 << 16 // the largest rx_attr.size (EPAttr.RxSize)
	CQDataSize    = 8       // cq_data_size: remote CQ data is a uint64

	// Domain counts. They are what xdpfab is built for, not enforced
	// individually (each endpoint holds a UDP port and, with AF_XDP, a
	// socket per queue; the system's limits apply first).
	maxEndpoints = 1 << 15
	maxCQs       = 1 << 15
	maxCntrs     = 1 << 15
)

const (
	// txOpFlags are the tx_attr.op_flags an endpoint takes (EPAttr.OpFlags).
	txOpFlags = fi.COMPLETION | fi.INJECT | fi.FENCE | fi.DELIVERY_COMPLETE | fi.TRANSMIT_COMPLETE | fi.INJECT_COMPLETE
	// rxOpFlags are the rx_attr.op_flags an endpoint takes.
	rxOpFlags = fi.COMPLETION | fi.MULTI_RECV
	// msgOrder is every ordering bit: requests to one peer execute at the
	// target in posting order (datapath/reliable).
	msgOrder = fi.OrderStrict | fi.OrderRMARAR | fi.OrderRMARAW | fi.OrderRMAWAR | fi.OrderRMAWAW |
		fi.OrderAtomicRAR | fi.OrderAtomicRAW | fi.OrderAtomicWAR | fi.OrderAtomicWAW
	// compOrder: completions of requests to one peer are not promised in
	// order (a lost response is resent after later ones arrived).
	compOrder = fi.OrderNone
)

// errMismatch marks the reasons an attribute cannot be met; GetInfo
// answers them with FI_ENODATA, the calls that open objects with
// FI_EINVAL.
type mismatch struct{ msg string }

func (m *mismatch) Error() string { return m.msg }

func mismatchf(format string, args ...any) error {
	return &mismatch{fmt.Sprintf(format, args...)}
}

// GetInfo is fi_getinfo: the ways xdpfab can be used to reach node and
// service (or, with fi.SOURCE, from them), subject to hints. flags takes
// fi.SOURCE, fi.NUMERICHOST and fi.PROV_ATTR_ONLY. See the package doc's
// fi_getinfo section for what is reported and how hints match. A version
// newer than APIVersion fails with FI_ENOSYS; a node that does not
// resolve, an address no local interface holds, or hints that nothing
// meets, with FI_ENODATA.
func GetInfo(version uint32, node, service string, flags fi.Flags, hints *Info) ([]*Info, error) {
	if version > APIVersion {
		return nil, fmt.Errorf("getinfo: version %d.%d is newer than %d.%d: %w",
			fi.VersionMajor(version), fi.VersionMinor(version),
			fi.VersionMajor(APIVersion), fi.VersionMinor(APIVersion), fi.ENOSYS)
	}
	if flags&^(fi.SOURCE|fi.NUMERICHOST|fi.PROV_ATTR_ONLY) != 0 {
		return nil, fmt.Errorf("getinfo: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	if flags == fi.PROV_ATTR_ONLY {
		return []*Info{provAttrOnly(version)}, nil
	}
	if hints != nil && hints.FabricAttr != nil {
		if err := checkFabricAttr(hints.FabricAttr, ""); err != nil {
			return nil, fmt.Errorf("getinfo: %w: %w", err, fi.ENODATA)
		}
	}
	q, err := resolveQuery(node, service, flags, hints)
	if err != nil {
		return nil, fmt.Errorf("getinfo: %w", err)
	}
	locals, err := localAddrs()
	if err != nil {
		return nil, fmt.Errorf("getinfo: %w", err)
	}
	var out []*Info
	reason := errors.New("no usable local address")
	for _, dest := range q.dests {
		srcs := q.srcs
		if dest.IsValid() && srcs == nil {
			src, err := routeSource(dest)
			if err != nil {
				reason = err
				continue
			}
			srcs = []netip.Addr{src}
		}
		for i := range locals {
			l := &locals[i]
			if srcs != nil && !containsAddr(srcs, l.addr) {
				continue
			}
			if dest.IsValid() && is6(dest.Addr()) != is6(l.addr) {
				continue
			}
			base, err := baseInfo(l, q.srcPort)
			if err != nil {
				reason = err
				continue
			}
			if err := checkInfo(version, base, hints); err != nil {
				reason = err
				continue
			}
			info := alterInfo(version, base, hints)
			if dest.IsValid() {
				info.DestAddr = SockaddrOf(dest)
			}
			out = append(out, info)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("getinfo: %v: %w", reason, fi.ENODATA)
	}
	return out, nil
}

// query is what node, service, flags and the hints' addresses ask for.
type query struct {
	srcs    []netip.Addr     // local addresses to use; nil: any
	srcPort uint16           // src_addr port
	dests   []netip.AddrPort // destinations; one invalid entry: none
}

func resolveQuery(node, service string, flags fi.Flags, hints *Info) (query, error) {
	q := query{dests: []netip.AddrPort{{}}}
	var hintDest, hintSrc netip.AddrPort
	if hints != nil {
		var ok bool
		if hints.DestAddr != nil {
			if hintDest, ok = parseSockaddr(hints.DestAddr); !ok {
				return q, fmt.Errorf("hints dest_addr is not a sockaddr_in/in6: %w", fi.EINVAL)
			}
		}
		if hints.SrcAddr != nil && flags&fi.SOURCE == 0 {
			if hintSrc, ok = parseSockaddr(hints.SrcAddr); !ok {
				return q, fmt.Errorf("hints src_addr is not a sockaddr_in/in6: %w", fi.EINVAL)
			}
		}
	}
	want6 := hints != nil && hints.AddrFormat == fi.FormatSockaddr6
	if flags&fi.SOURCE != 0 {
		if node == "" && service == "" {
			return q, fmt.Errorf("FI_SOURCE without node or service: %w", fi.EINVAL)
		}
		ips, port, err := resolve(node, service, flags, want6)
		if err != nil {
			return q, err
		}
		if node != "" {
			q.srcs = ips
		}
		q.srcPort = port
		if hintDest.IsValid() {
			q.dests = []netip.AddrPort{hintDest}
		}
		return q, nil
	}
	if node != "" || service != "" {
		ips, port, err := resolve(node, service, flags, want6)
		if err != nil {
			return q, err
		}
		q.dests = q.dests[:0]
		for _, ip := range ips {
			q.dests = append(q.dests, netip.AddrPortFrom(ip, port))
		}
	} else if hintDest.IsValid() {
		q.dests = []netip.AddrPort{hintDest}
	}
	if hintSrc.IsValid() {
		q.srcs = []netip.Addr{hintSrc.Addr().Unmap()}
		q.srcPort = hintSrc.Port()
	}
	return q, nil
}

// resolveTimeout bounds a host name lookup.
const resolveTimeout = 10 * time.Second

// resolve turns node and service into addresses and a port: node as an IP
// address, an FI_ADDR_STR address (service then empty), or, unless
// fi.NUMERICHOST, a host name; an empty node is the loopback address
// (::1 when want6), as getaddrinfo has it. service is a port number or a
// UDP service name.
func resolve(node, service string, flags fi.Flags, want6 bool) ([]netip.Addr, uint16, error) {
	if strings.Contains(node, "://") {
		if service != "" {
			return nil, 0, fmt.Errorf("node %q is an FI_ADDR_STR address: service must be empty: %w", node, fi.EINVAL)
		}
		ap, err := parseAddrStr(node)
		if err != nil {
			return nil, 0, err
		}
		return []netip.Addr{ap.Addr()}, ap.Port(), nil
	}
	port, err := resolvePort(service)
	if err != nil {
		return nil, 0, err
	}
	switch {
	case node == "" && want6:
		return []netip.Addr{netip.IPv6Loopback()}, port, nil
	case node == "":
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}, port, nil
	}
	if ip, err := netip.ParseAddr(node); err == nil {
		return []netip.Addr{ip.Unmap()}, port, nil
	}
	if flags&fi.NUMERICHOST != 0 {
		return nil, 0, fmt.Errorf("node %q is not a numeric address (FI_NUMERICHOST): %w", node, fi.ENODATA)
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", node)
	if err != nil || len(ips) == 0 {
		return nil, 0, fmt.Errorf("resolve node %q: %v: %w", node, err, fi.ENODATA)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, port, nil
}

func resolvePort(service string) (uint16, error) {
	if service == "" {
		return 0, nil
	}
	if n, err := strconv.ParseUint(service, 10, 16); err == nil {
		return uint16(n), nil
	}
	p, err := net.LookupPort("udp", service)
	if err != nil {
		return 0, fmt.Errorf("service %q: %v: %w", service, err, fi.ENODATA)
	}
	return uint16(p), nil
}

// parseAddrStr parses the FI_ADDR_STR forms of socket addresses,
// fi_sockaddr_in://a.b.c.d:port, fi_sockaddr_in6://[addr]:port and
// fi_sockaddr://either.
func parseAddrStr(s string) (netip.AddrPort, error) {
	scheme, rest, _ := strings.Cut(s, "://")
	ap, err := netip.ParseAddrPort(rest)
	ok := err == nil
	switch scheme {
	case "fi_sockaddr_in":
		ok = ok && ap.Addr().Is4()
	case "fi_sockaddr_in6":
		ok = ok && ap.Addr().Is6()
	case "fi_sockaddr":
	default:
		ok = false
	}
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("node %q: not an FI_ADDR_STR socket address: %w", s, fi.ENODATA)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// routeSource returns the local address the kernel would send to dest
// from (connecting a UDP socket sends nothing).
func routeSource(dest netip.AddrPort) (netip.Addr, error) {
	if dest.Port() == 0 {
		dest = netip.AddrPortFrom(dest.Addr(), 9)
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dest))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %v", dest.Addr(), err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, x := range list {
		if x.Unmap().WithZone("") == a.WithZone("") {
			return true
		}
	}
	return false
}

// parseSockaddr parses a struct sockaddr_in or sockaddr_in6.
func parseSockaddr(b []byte) (netip.AddrPort, bool) {
	switch len(b) {
	case av.SockaddrInLen:
		if b[0] != 2 || b[1] != 0 { // AF_INET, host order (little-endian)
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), uint16(b[2])<<8|uint16(b[3])), true
	case av.SockaddrIn6Len:
		if b[0] != 10 || b[1] != 0 { // AF_INET6
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), uint16(b[2])<<8|uint16(b[3])), true
	}
	return netip.AddrPort{}, false
}

// provAttrOnly is the one Info of FI_PROV_ATTR_ONLY: defaults, with
// fabric_attr's prov_name and prov_version.
func provAttrOnly(version uint32) *Info {
	l := localAddr{addr: netip.AddrFrom4([4]byte{127, 0, 0, 1}), prefix: netip.MustParsePrefix("127.0.0.0/8"),
		loopback: true, nic: NIC{Name: "lo", MTU: defaultMTU, Up: true, NetworkType: "Loopback"}}
	info, err := baseInfo(&l, 0)
	if err != nil { // not for a 1500-byte MTU
		info = AllocInfo()
	}
	info = alterInfo(version, info, nil)
	info.SrcAddr, info.NIC = nil, nil
	info.FabricAttr.Name, info.DomainAttr.Name = "", ""
	return info
}

// baseInfo is everything xdpfab offers on local address l, with src_addr
// l's address and port: the Info that hints are checked against and
// narrowed from (alterInfo).
func baseInfo(l *localAddr, port uint16) (*Info, error) {
	s, err := sizesFor(l.nic.MTU, is6(l.addr), largestFrameData(l.nic.XDPAttached))
	if err != nil {
		return nil, fmt.Errorf("%s (%v): %w", l.nic.Name, l.addr, err)
	}
	return baseInfoSizes(l, port, s), nil
}

func baseInfoSizes(l *localAddr, port uint16, s sizes) *Info {
	format := fi.FormatSockaddr4
	if is6(l.addr) {
		format = fi.FormatSockaddr6
	}
	comm := CommCaps
	if l.loopback {
		comm = fi.LOCAL_COMM
	}
	nic := l.nic
	return &Info{
		Caps:       PrimaryCaps | SecondaryCaps | comm,
		AddrFormat: format,
		SrcAddr:    SockaddrOf(netip.AddrPortFrom(l.addr, port)),
		TxAttr: &TxAttr{
			Caps: txCaps, MsgOrder: msgOrder, CompOrder: compOrder,
			InjectSize: s.injectSize, Size: DefaultTxSize, IovLimit: IovLimit, RMAIovLimit: RMAIovLimit,
		},
		RxAttr: &RxAttr{
			Caps: rxCaps, MsgOrder: msgOrder, CompOrder: compOrder,
			TotalBufferedRecv: MaxUnexpectedBytes, Size: DefaultRxSize, IovLimit: IovLimit,
		},
		EPAttr: &EndpointAttr{
			Type: EPRDM, Protocol: ProtoXdpfab, ProtocolVersion: wireVersion, MaxMsgSize: MaxMsgSize,
			MaxOrderRAWSize: -1, MaxOrderWARSize: -1, MaxOrderWAWSize: -1,
			MemTagFormat: TagGeneric, TxCtxCnt: 1, RxCtxCnt: 1,
		},
		DomainAttr: &DomainAttr{
			Name: l.nic.Name, Threading: ThreadSafe, ControlProgress: ProgressAuto, Progress: ProgressAuto,
			ResourceMgmt: RMEnabled, AVType: av.TypeUnspec, MRKeySize: mr.KeySize, CQDataSize: CQDataSize,
			CQCnt: maxCQs, EPCnt: maxEndpoints, TxCtxCnt: maxEndpoints, RxCtxCnt: maxEndpoints,
			MaxEPTxCtx: 1, MaxEPRxCtx: 1, CntrCnt: maxCntrs, MRIovLimit: mr.IOVLimit,
			Caps: comm | fi.SHARED_AV, MRCnt: mr.DefaultMaxRegions,
		},
		FabricAttr: &FabricAttr{Name: l.prefix.Masked().String(), ProvName: ProviderName,
			ProvVersion: ProviderVersion, APIVersion: APIVersion},
		NIC: &nic,
	}
}

// getCaps is util's ofi_get_caps: the hinted primary caps (all of the
// offered ones when none is hinted) plus the offered secondary caps, with
// the direction modifiers of a primary cap given without any.
func getCaps(infoCaps, hintCaps, offered fi.Flags) fi.Flags {
	var c fi.Flags
	if hintCaps == 0 {
		c = infoCaps&offered&(PrimaryCaps|CommCaps) | offered&SecondaryCaps
	} else {
		c = hintCaps&(PrimaryCaps|CommCaps) | offered&SecondaryCaps
	}
	if c&(fi.MSG|fi.TAGGED) != 0 && c&msgDirCaps == 0 {
		c |= offered & msgDirCaps
	}
	if c&(fi.RMA|fi.ATOMIC) != 0 && c&rmaDirCaps == 0 {
		c |= offered & rmaDirCaps
	}
	return c
}

// alterInfo narrows base to what hints ask for (hints checked already):
// util's ofi_alter_info. version is the caller's API version.
func alterInfo(version uint32, base, hints *Info) *Info {
	info := base.Clone()
	info.FabricAttr.APIVersion = version
	comm := base.Caps & CommCaps
	if hints == nil {
		info.DomainAttr.MRMode = legacyMRMode(version, 0)
		return info
	}
	info.Caps = getCaps(base.Caps, hints.Caps, base.Caps)&^CommCaps | comm
	info.Mode = 0 // xdpfab needs no mode bit
	d := info.DomainAttr
	if hd := hints.DomainAttr; hd != nil {
		d.MRMode = legacyMRMode(version, hd.MRMode)
		if hd.Threading != ThreadUnspec {
			d.Threading = hd.Threading
		}
		if hd.ControlProgress != ProgressUnspec {
			d.ControlProgress = hd.ControlProgress
		}
		if hd.Progress != ProgressUnspec {
			d.Progress = hd.Progress
		}
		if hd.AVType != av.TypeUnspec {
			d.AVType = hd.AVType
		}
		if len(hd.AuthKey) > 0 {
			d.AuthKey = append([]byte(nil), hd.AuthKey...)
		}
	} else {
		d.MRMode = legacyMRMode(version, 0)
	}
	var txHint, rxHint fi.Flags
	if hints.TxAttr != nil {
		txHint = hints.TxAttr.Caps &^ ignoredTxCap
	}
	if hints.RxAttr != nil {
		rxHint = hints.RxAttr.Caps &^ ignoredRxCap
	}
	info.TxAttr.Caps = getCaps(info.Caps, txHint, base.TxAttr.Caps) & txCaps
	info.RxAttr.Caps = getCaps(info.Caps, rxHint, base.RxAttr.Caps) & rxCaps
	if h := hints.TxAttr; h != nil {
		info.TxAttr.OpFlags = h.OpFlags
		if h.Size != 0 {
			info.TxAttr.Size = h.Size
		}
	}
	if h := hints.RxAttr; h != nil {
		info.RxAttr.OpFlags = h.OpFlags
		if h.Size != 0 {
			info.RxAttr.Size = h.Size
		}
		if h.TotalBufferedRecv != 0 {
			info.RxAttr.TotalBufferedRecv = h.TotalBufferedRecv
		}
	}
	return info
}

// legacyMRMode is the mr_mode reported for a hinted one: xdpfab needs no
// bit, so the answer is none, except that a legacy FI_MR_BASIC or
// FI_MR_SCALABLE stays as given, and an application older than 1.5 that
// hints FI_MR_UNSPEC gets FI_MR_SCALABLE (what xdpfab does by default).
func legacyMRMode(version uint32, hint mr.Mode) mr.Mode {
	switch {
	case hint == mr.ModeBasic || hint == mr.ModeScalable:
		return hint
	case version < fi.Version(1, 5):
		return mr.ModeScalable
	}
	return 0
}

// checkInfo reports why base cannot meet hints (nil if it can): util's
// ofi_check_info with xdpfab's limits.
func checkInfo(version uint32, base, hints *Info) error {
	if hints == nil {
		return nil
	}
	if hints.EPAttr != nil && hints.EPAttr.Type != EPUnspec && hints.EPAttr.Type != EPRDM {
		return mismatchf("endpoint type %d (xdpfab has FI_EP_RDM)", hints.EPAttr.Type)
	}
	if extra := hints.Caps &^ base.Caps; extra != 0 {
		return mismatchf("caps %#x not supported on %s", uint64(extra), base.DomainAttr.Name)
	}
	switch hints.AddrFormat {
	case fi.FormatUnspec, fi.FormatSockaddr, base.AddrFormat:
	default:
		return mismatchf("address format %v (%s has %v)", hints.AddrFormat, base.DomainAttr.Name, base.AddrFormat)
	}
	if hints.FabricAttr != nil {
		if err := checkFabricAttr(hints.FabricAttr, base.FabricAttr.Name); err != nil {
			return err
		}
	}
	if hints.NIC != nil && hints.NIC.Name != "" && hints.NIC.Name != base.NIC.Name {
		return mismatchf("nic %q (this is %q)", hints.NIC.Name, base.NIC.Name)
	}
	if hints.DomainAttr != nil {
		if n := hints.DomainAttr.Name; n != "" && n != base.DomainAttr.Name {
			return mismatchf("domain %q (this is %q)", n, base.DomainAttr.Name)
		}
		if err := checkDomainAttr(version, hints.DomainAttr, base.DomainAttr); err != nil {
			return err
		}
	}
	if hints.EPAttr != nil {
		if err := checkEndpointAttr(hints.EPAttr); err != nil {
			return err
		}
	}
	if hints.TxAttr != nil {
		if err := checkTxAttr(hints.TxAttr, base.TxAttr, hints.TxAttr.Caps&^ignoredTxCap); err != nil {
			return err
		}
	}
	if hints.RxAttr != nil {
		if err := checkRxAttr(hints.RxAttr, base.RxAttr, hints.RxAttr.Caps&^ignoredRxCap); err != nil {
			return err
		}
	}
	return nil
}

// checkFabricAttr checks prov_name, prov_version, api_version and (when
// name is not empty) the fabric name.
func checkFabricAttr(h *FabricAttr, name string) error {
	if h.ProvName != "" && !strings.EqualFold(h.ProvName, ProviderName) {
		return mismatchf("provider %q (this is %q)", h.ProvName, ProviderName)
	}
	if h.ProvVersion > ProviderVersion {
		return mismatchf("provider version %#x (this is %#x)", h.ProvVersion, ProviderVersion)
	}
	if h.APIVersion > APIVersion {
		return mismatchf("api version %#x (xdpfab has %#x)", h.APIVersion, APIVersion)
	}
	if name != "" && h.Name != "" && h.Name != name {
		return mismatchf("fabric %q (this is %q)", h.Name, name)
	}
	return nil
}

// checkDomainAttr checks the fi_domain_attr fields of h against what
// xdpfab offers (limits: the Info it would report).
func checkDomainAttr(version uint32, h, limits *DomainAttr) error {
	switch {
	case h.Threading < ThreadUnspec || h.Threading > ThreadEndpoint:
		return mismatchf("threading %d", h.Threading)
	case h.ControlProgress < ProgressUnspec || h.ControlProgress > ProgressManual:
		return mismatchf("control progress %d", h.ControlProgress)
	case h.Progress < ProgressUnspec || h.Progress > ProgressManual:
		return mismatchf("data progress %d", h.Progress)
	case h.ResourceMgmt < RMUnspec || h.ResourceMgmt > RMEnabled:
		return mismatchf("resource management %d", h.ResourceMgmt)
	case h.AVType < av.TypeUnspec || h.AVType > av.TypeTable:
		return mismatchf("av type %d", h.AVType)
	case h.MRKeySize > limits.MRKeySize:
		return mismatchf("mr_key_size %d (xdpfab has %d)", h.MRKeySize, limits.MRKeySize)
	case h.CQDataSize > limits.CQDataSize:
		return mismatchf("cq_data_size %d (xdpfab has %d)", h.CQDataSize, limits.CQDataSize)
	case h.CQCnt > limits.CQCnt:
		return mismatchf("cq_cnt %d (xdpfab has %d)", h.CQCnt, limits.CQCnt)
	case h.EPCnt > limits.EPCnt:
		return mismatchf("ep_cnt %d (xdpfab has %d)", h.EPCnt, limits.EPCnt)
	case h.TxCtxCnt > limits.TxCtxCnt || h.RxCtxCnt > limits.RxCtxCnt:
		return mismatchf("tx/rx_ctx_cnt %d/%d (xdpfab has %d/%d)", h.TxCtxCnt, h.RxCtxCnt, limits.TxCtxCnt, limits.RxCtxCnt)
	case h.MaxEPTxCtx > limits.MaxEPTxCtx || h.MaxEPRxCtx > limits.MaxEPRxCtx:
		return mismatchf("max_ep_tx/rx_ctx %d/%d (xdpfab has one of each)", h.MaxEPTxCtx, h.MaxEPRxCtx)
	case h.MaxEPStxCtx > limits.MaxEPStxCtx || h.MaxEPSrxCtx > limits.MaxEPSrxCtx:
		return mismatchf("shared contexts (max_ep_stx/srx_ctx %d/%d): xdpfab has none", h.MaxEPStxCtx, h.MaxEPSrxCtx)
	case h.CntrCnt > limits.CntrCnt:
		return mismatchf("cntr_cnt %d (xdpfab has %d)", h.CntrCnt, limits.CntrCnt)
	case h.MRIovLimit > limits.MRIovLimit:
		return mismatchf("mr_iov_limit %d (xdpfab has %d)", h.MRIovLimit, limits.MRIovLimit)
	case h.Caps&^limits.Caps != 0:
		return mismatchf("domain caps %#x not supported", uint64(h.Caps&^limits.Caps))
	case h.MaxErrData > limits.MaxErrData:
		return mismatchf("max_err_data %d (xdpfab has %d)", h.MaxErrData, limits.MaxErrData)
	case h.MRCnt > limits.MRCnt:
		return mismatchf("mr_cnt %d (xdpfab has %d)", h.MRCnt, limits.MRCnt)
	case !tclassServed(h.TClass):
		return mismatchf("traffic class %#x: xdpfab marks no DSCP", h.TClass)
	case h.CQCnt < 0 || h.EPCnt < 0 || h.CntrCnt < 0 || h.MRCnt < 0 || h.MRKeySize < 0 || h.CQDataSize < 0 ||
		h.TxCtxCnt < 0 || h.RxCtxCnt < 0 || h.MaxEPTxCtx < 0 || h.MaxEPRxCtx < 0 || h.MaxEPStxCtx < 0 ||
		h.MaxEPSrxCtx < 0 || h.MRIovLimit < 0 || h.MaxErrData < 0:
		return mismatchf("negative domain attribute")
	}
	return checkMRMode(version, h.MRMode)
}

// checkMRMode checks a hinted mr_mode (the bits the application supports):
// xdpfab needs none, so any set is met, but the legacy values must be used
// as fi_domain(3) says: FI_MR_BASIC and FI_MR_SCALABLE alone, and before
// API 1.5 nothing else.
func checkMRMode(version uint32, m mr.Mode) error {
	legacy := m & (mr.ModeBasic | mr.ModeScalable)
	if legacy != 0 && m != legacy || legacy == mr.ModeBasic|mr.ModeScalable {
		return mismatchf("mr_mode %v: FI_MR_BASIC and FI_MR_SCALABLE go alone", m)
	}
	if version < fi.Version(1, 5) && m != 0 && legacy == 0 {
		return mismatchf("mr_mode %v before API 1.5", m)
	}
	return nil
}

func checkEndpointAttr(h *EndpointAttr) error {
	switch {
	case h.Type != EPUnspec && h.Type != EPRDM:
		return mismatchf("endpoint type %d (xdpfab has FI_EP_RDM)", h.Type)
	case h.Protocol != ProtoUnspec && h.Protocol != ProtoXdpfab:
		return mismatchf("protocol %#x (xdpfab speaks %#x)", uint32(h.Protocol), uint32(ProtoXdpfab))
	case h.ProtocolVersion > wireVersion:
		return mismatchf("protocol version %d (xdpfab speaks %d)", h.ProtocolVersion, wireVersion)
	case h.MaxMsgSize > MaxMsgSize || h.MaxMsgSize < 0:
		return mismatchf("max_msg_size %d (xdpfab has %d)", h.MaxMsgSize, MaxMsgSize)
	case h.MsgPrefixSize != 0:
		return mismatchf("msg_prefix_size %d: xdpfab uses no prefix", h.MsgPrefixSize)
	case h.TxCtxCnt > 1 || h.TxCtxCnt == SharedContext || h.TxCtxCnt < SharedContext:
		return mismatchf("tx_ctx_cnt %d: xdpfab has one tx context, not shared", h.TxCtxCnt)
	case h.RxCtxCnt > 1 || h.RxCtxCnt == SharedContext || h.RxCtxCnt < SharedContext:
		return mismatchf("rx_ctx_cnt %d: xdpfab has one rx context, not shared", h.RxCtxCnt)
	case len(h.AuthKey) != 0:
		return mismatchf("endpoint auth_key: xdpfab uses the domain's (domain_attr.auth_key)")
	case h.MaxOrderRAWSize < -1 || h.MaxOrderWARSize < -1 || h.MaxOrderWAWSize < -1:
		return mismatchf("negative order size")
	}
	// Any order size is met (-1: requests to one peer execute in order),
	// and so is any tag format (64 tag bits).
	return nil
}

func checkTxAttr(h, limits *TxAttr, caps fi.Flags) error {
	switch {
	case caps&^limits.Caps != 0:
		return mismatchf("tx caps %#x not supported", uint64(caps&^limits.Caps))
	case h.Mode != 0 && h.Mode&limits.Mode != limits.Mode:
		return mismatchf("tx mode %#x lacks %#x", uint64(h.Mode), uint64(limits.Mode))
	case h.OpFlags&^txOpFlags != 0:
		return mismatchf("tx op_flags %#x not supported", uint64(h.OpFlags&^txOpFlags))
	case h.MsgOrder&^limits.MsgOrder != 0:
		return mismatchf("tx msg_order %#x not supported", uint64(h.MsgOrder&^limits.MsgOrder))
	case h.CompOrder&^limits.CompOrder != 0:
		return mismatchf("tx comp_order %#x not supported", uint64(h.CompOrder&^limits.CompOrder))
	case h.InjectSize > limits.InjectSize || h.InjectSize < 0:
		return mismatchf("inject_size %d (xdpfab has %d here)", h.InjectSize, limits.InjectSize)
	case h.Size > MaxTxSize || h.Size < 0:
		return mismatchf("tx size %d (xdpfab has %d)", h.Size, MaxTxSize)
	case h.IovLimit > limits.IovLimit || h.IovLimit < 0:
		return mismatchf("tx iov_limit %d (xdpfab has %d)", h.IovLimit, limits.IovLimit)
	case h.RMAIovLimit > limits.RMAIovLimit || h.RMAIovLimit < 0:
		return mismatchf("rma_iov_limit %d (xdpfab has %d)", h.RMAIovLimit, limits.RMAIovLimit)
	case !tclassServed(h.TClass):
		return mismatchf("traffic class %#x: xdpfab marks no DSCP", h.TClass)
	}
	return nil
}

// Traffic classes (fi_endpoint(3) "Traffic Class"): FI_TC_UNSPEC, the
// labels FI_TC_BEST_EFFORT..FI_TC_NETWORK_CTRL, or FI_TC_DSCP|value.
const (
	tcLabelFirst = 0x200 // FI_TC_BEST_EFFORT (FI_TC_LABEL)
	tcLabelLast  = 0x205 // FI_TC_NETWORK_CTRL
)

// tclassServed reports whether xdpfab serves traffic class tc: the
// default and the labels, which name a kind of traffic rather than a
// marking (fabtests' pingpong asks for FI_TC_LOW_LATENCY) and which
// xdpfab all serves alike, as FI_TC_BEST_EFFORT; a DSCP value would have
// to mark packets, which xdpfab does not do, so it is not met.
func tclassServed(tc uint32) bool {
	return tc == 0 || tc >= tcLabelFirst && tc <= tcLabelLast
}

func checkRxAttr(h, limits *RxAttr, caps fi.Flags) error {
	switch {
	case caps&^limits.Caps != 0:
		return mismatchf("rx caps %#x not supported", uint64(caps&^limits.Caps))
	case h.Mode != 0 && h.Mode&limits.Mode != limits.Mode:
		return mismatchf("rx mode %#x lacks %#x", uint64(h.Mode), uint64(limits.Mode))
	case h.OpFlags&^rxOpFlags != 0:
		return mismatchf("rx op_flags %#x not supported", uint64(h.OpFlags&^rxOpFlags))
	case h.MsgOrder&^limits.MsgOrder != 0:
		return mismatchf("rx msg_order %#x not supported", uint64(h.MsgOrder&^limits.MsgOrder))
	case h.CompOrder&^limits.CompOrder != 0:
		return mismatchf("rx comp_order %#x not supported", uint64(h.CompOrder&^limits.CompOrder))
	case h.TotalBufferedRecv > limits.TotalBufferedRecv || h.TotalBufferedRecv < 0:
		return mismatchf("total_buffered_recv %d (xdpfab has %d)", h.TotalBufferedRecv, limits.TotalBufferedRecv)
	case h.Size > MaxRxSize || h.Size < 0:
		return mismatchf("rx size %d (xdpfab has %d)", h.Size, MaxRxSize)
	case h.IovLimit > limits.IovLimit || h.IovLimit < 0:
		return mismatchf("rx iov_limit %d (xdpfab has %d)", h.IovLimit, limits.IovLimit)
	}
	return nil
}
