package bpf

// Counter is one of the XDP program's per-CPU outcome counters (enum
// xdpfab_counter in xdpfab.h); the counters map is indexed by it.
type Counter = XdpfabXdpfabCounter

type enumInfo struct {
	cName string // the C enumerator, checked against the object's BTF
	name  string // short name for the CLI and JSON
	desc  string
}

// counterInfo is indexed by Counter; TestCounterNamesInSync checks it
// against the enum in the compiled object.
var counterInfo = [...]enumInfo{
	XdpfabXdpfabCounterCNT_RX_TOTAL:          {"CNT_RX_TOTAL", "rx_total", "packets seen by the XDP program"},
	XdpfabXdpfabCounterCNT_PASS_NOT_IP:       {"CNT_PASS_NOT_IP", "pass_not_ip", "not IPv4/IPv6 (ARP, ...): passed to the stack"},
	XdpfabXdpfabCounterCNT_PASS_NOT_UDP:      {"CNT_PASS_NOT_UDP", "pass_not_udp", "IP but not UDP (ICMP, TCP, IPv6 extension headers): passed"},
	XdpfabXdpfabCounterCNT_PASS_FRAGMENT:     {"CNT_PASS_FRAGMENT", "pass_fragment", "IP fragments: passed"},
	XdpfabXdpfabCounterCNT_PASS_MALFORMED:    {"CNT_PASS_MALFORMED", "pass_malformed", "truncated or inconsistent Ethernet/IP/UDP headers: passed"},
	XdpfabXdpfabCounterCNT_PASS_OTHER_PORT:   {"CNT_PASS_OTHER_PORT", "pass_other_port", "UDP to a port xdpfab does not serve: passed"},
	XdpfabXdpfabCounterCNT_PASS_OTHER_HOST:   {"CNT_PASS_OTHER_HOST", "pass_other_host", "UDP to an xdpfab port but not to the address it is bound to (forwarded or bridged traffic): passed"},
	XdpfabXdpfabCounterCNT_PEER_KNOWN:        {"CNT_PEER_KNOWN", "peer_known", "xdpfab datagrams from a peer in the AV"},
	XdpfabXdpfabCounterCNT_PEER_UNKNOWN:      {"CNT_PEER_UNKNOWN", "peer_unknown", "xdpfab datagrams from a peer not in the AV, non-strict port: handed up marked unknown"},
	XdpfabXdpfabCounterCNT_DROP_UNKNOWN_PEER: {"CNT_DROP_UNKNOWN_PEER", "drop_unknown_peer", "xdpfab datagrams from a peer not in the AV, strict port: dropped"},
	XdpfabXdpfabCounterCNT_DROP_NO_CSUM:      {"CNT_DROP_NO_CSUM", "drop_no_csum", "xdpfab datagrams with UDP checksum 0 (none sent): dropped"},
	XdpfabXdpfabCounterCNT_PASS_BAD_CSUM:     {"CNT_PASS_BAD_CSUM", "pass_bad_csum", "xdpfab datagrams whose UDP checksum is wrong (corrupted, or left to offload by an in-host sender): passed, the stack keeps or drops them"},
	XdpfabXdpfabCounterCNT_PASS_NO_META:      {"CNT_PASS_NO_META", "pass_no_meta", "xdpfab datagrams the driver could not attach metadata to: passed"},
	XdpfabXdpfabCounterCNT_REDIRECT_XSK:      {"CNT_REDIRECT_XSK", "redirect_xsk", "xdpfab datagrams redirected to the AF_XDP socket of their RX queue"},
	XdpfabXdpfabCounterCNT_PASS_NO_XSK:       {"CNT_PASS_NO_XSK", "pass_no_xsk", "xdpfab datagrams with no AF_XDP socket on their queue: passed to the stack"},
	XdpfabXdpfabCounterCNT_TX_SERVED:         {"CNT_TX_SERVED", "tx_served", "requests executed in XDP on kernel-resident regions and answered with XDP_TX"},
	XdpfabXdpfabCounterCNT_TX_CACHED:         {"CNT_TX_CACHED", "tx_cached", "retransmitted requests answered from the shared response ring with XDP_TX"},
	XdpfabXdpfabCounterCNT_DROP_IN_PROGRESS:  {"CNT_DROP_IN_PROGRESS", "drop_in_progress", "retransmissions of a request another CPU is executing in XDP: dropped, that one answers"},
	XdpfabXdpfabCounterCNT_DROP_TX_FAIL:      {"CNT_DROP_TX_FAIL", "drop_tx_fail", "requests served in XDP whose response could not be built in the frame: dropped, the retransmission is answered from the ring"},
	XdpfabXdpfabCounterCNT_KERN_OPS:          {"CNT_KERN_OPS", "kern_ops", "atomic ops executed in XDP (detail of tx_served)"},
	XdpfabXdpfabCounterCNT_UP_NO_STATE:       {"CNT_UP_NO_STATE", "up_no_state", "requests handed up: the peer has no state shared with XDP"},
	XdpfabXdpfabCounterCNT_UP_USER_OWNS:      {"CNT_UP_USER_OWNS", "up_user_owns", "requests handed up: user space owns the peer's shared state"},
	XdpfabXdpfabCounterCNT_UP_NOT_NEXT:       {"CNT_UP_NOT_NEXT", "up_not_next", "requests handed up: another session or endpoint, not the next sequence number, or a retransmission not in the ring"},
	XdpfabXdpfabCounterCNT_UP_OP:             {"CNT_UP_OP", "up_op", "requests handed up: an op, datatype, flag or size XDP does not execute"},
	XdpfabXdpfabCounterCNT_UP_REGION:         {"CNT_UP_REGION", "up_region", "requests handed up: key not kernel-resident, or range, access, auth key, alignment or page crossing"},
	XdpfabXdpfabCounterCNT_UP_CONTENDED:      {"CNT_UP_CONTENDED", "up_contended", "requests handed up unexecuted: a compare-and-swap loop lost too often"},
}

// Counters returns every counter, in enum order.
func Counters() []Counter {
	cs := make([]Counter, len(counterInfo))
	for i := range cs {
		cs[i] = Counter(i)
	}
	return cs
}

// Name is the counter's short name, e.g. "drop_unknown_peer".
func (c XdpfabXdpfabCounter) Name() string {
	if int(c) < len(counterInfo) {
		return counterInfo[c].name
	}
	return "counter?"
}

// Description says what the counter counts.
func (c XdpfabXdpfabCounter) Description() string {
	if int(c) < len(counterInfo) {
		return counterInfo[c].desc
	}
	return ""
}

func (c XdpfabXdpfabCounter) String() string { return c.Name() }
