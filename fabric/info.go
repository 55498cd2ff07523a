package fabric

import (
	"net/netip"
	"slices"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
)

// Info is struct fi_info: one way to use the provider (an endpoint type,
// capabilities and attributes on one local address), as GetInfo reports
// it, as hints to GetInfo, and as what OpenFabricInfo,
// Fabric.DomainFromInfo and Domain.EndpointFromInfo open. Each field
// mirrors the C field named in its comment; sizes are ints, and -1 stands
// for SIZE_MAX where the C field allows it (FI_SHARED_CONTEXT, an
// unlimited order size). A nil attribute pointer is a NULL one: in hints
// it asks for nothing. GetInfo fills every pointer.
type Info struct {
	Caps       fi.Flags      // caps
	Mode       fi.Flags      // mode
	AddrFormat fi.AddrFormat // addr_format
	// SrcAddr is src_addr (its length is src_addrlen): a struct
	// sockaddr_in or sockaddr_in6 as fi_getname returns it (see
	// SockaddrOf). Nil is NULL.
	SrcAddr []byte
	// DestAddr is dest_addr (dest_addrlen), in the same format.
	DestAddr []byte

	TxAttr     *TxAttr       // tx_attr
	RxAttr     *RxAttr       // rx_attr
	EPAttr     *EndpointAttr // ep_attr
	DomainAttr *DomainAttr   // domain_attr (plus the Go-only fields of DomainAttr)
	FabricAttr *FabricAttr   // fabric_attr
	NIC        *NIC          // nic
}

// TxAttr is struct fi_tx_attr.
type TxAttr struct {
	Caps        fi.Flags // caps
	Mode        fi.Flags // mode
	OpFlags     fi.Flags // op_flags
	MsgOrder    fi.Order // msg_order
	CompOrder   fi.Order // comp_order
	InjectSize  int      // inject_size
	Size        int      // size
	IovLimit    int      // iov_limit
	RMAIovLimit int      // rma_iov_limit
	TClass      uint32   // tclass
}

// RxAttr is struct fi_rx_attr.
type RxAttr struct {
	Caps              fi.Flags // caps
	Mode              fi.Flags // mode
	OpFlags           fi.Flags // op_flags
	MsgOrder          fi.Order // msg_order
	CompOrder         fi.Order // comp_order
	TotalBufferedRecv int      // total_buffered_recv
	Size              int      // size
	IovLimit          int      // iov_limit
}

// EndpointAttr is struct fi_ep_attr, the endpoint attributes of an Info.
// (EPAttr is the options of Domain.Endpoint; EndpointFromInfo derives one
// from an Info.)
type EndpointAttr struct {
	Type            EPType   // type
	Protocol        Protocol // protocol
	ProtocolVersion uint32   // protocol_version
	MaxMsgSize      int      // max_msg_size
	MsgPrefixSize   int      // msg_prefix_size
	MaxOrderRAWSize int      // max_order_raw_size (-1: any size)
	MaxOrderWARSize int      // max_order_war_size (-1: any size)
	MaxOrderWAWSize int      // max_order_waw_size (-1: any size)
	MemTagFormat    uint64   // mem_tag_format
	TxCtxCnt        int      // tx_ctx_cnt (SharedContext: FI_SHARED_CONTEXT)
	RxCtxCnt        int      // rx_ctx_cnt (SharedContext: FI_SHARED_CONTEXT)
	AuthKey         []byte   // auth_key, auth_key_size
}

// FabricAttr is struct fi_fabric_attr (without the fabric pointer).
type FabricAttr struct {
	Name        string // name
	ProvName    string // prov_name
	ProvVersion uint32 // prov_version, fi.Version(major, minor)
	APIVersion  uint32 // api_version
}

// NIC is struct fid_nic: the interface an Info's address is on.
type NIC struct {
	Name     string // device_attr.name: the interface name
	Ifindex  int    // the interface index (in the calling thread's network namespace)
	LinkAddr string // link_attr.address: the address the Info uses, as text
	MTU      int    // link_attr.mtu
	Up       bool   // link_attr.state: FI_LINK_UP, else FI_LINK_DOWN
	// NetworkType is link_attr.network_type: "Ethernet" or "Loopback".
	NetworkType string
	// XDPAttached (the provider-specific prov_attr) reports whether
	// xdpfab's XDP program is attached on the interface, so that a domain
	// opened on it with TransportAuto uses AF_XDP (given the privileges).
	XDPAttached bool
}

// Threading is enum fi_threading.
type Threading int

// Threading models, numbered as in fabric.h.
const (
	ThreadUnspec     Threading = iota // FI_THREAD_UNSPEC
	ThreadSafe                        // FI_THREAD_SAFE
	ThreadFID                         // FI_THREAD_FID
	ThreadDomain                      // FI_THREAD_DOMAIN
	ThreadCompletion                  // FI_THREAD_COMPLETION
	ThreadEndpoint                    // FI_THREAD_ENDPOINT
)

// ResourceMgmt is enum fi_resource_mgmt.
type ResourceMgmt int

// Resource management models, numbered as in fabric.h.
const (
	RMUnspec   ResourceMgmt = iota // FI_RM_UNSPEC
	RMDisabled                     // FI_RM_DISABLED
	RMEnabled                      // FI_RM_ENABLED
)

// Protocol is the ep_attr protocol value.
type Protocol uint32

// Protocols.
const (
	ProtoUnspec Protocol = 0 // FI_PROTO_UNSPEC
	// ProtoXdpfab is xdpfab's wire protocol over UDP (docs/protocol.md):
	// provider specific (FI_PROV_SPECIFIC | 'x'), as it does not talk to
	// plain UDP sockets (FI_PROTO_UDP). Its version is wire.Version.
	ProtoXdpfab Protocol = fi.ProvSpecific | 'x'
)

// SharedContext is FI_SHARED_CONTEXT in EndpointAttr.TxCtxCnt/RxCtxCnt.
const SharedContext = -1

// TagGeneric is FI_TAG_GENERIC, the mem_tag_format xdpfab reports: 64
// tag bits with no structure.
const TagGeneric uint64 = 0xAAAAAAAAAAAAAAAA

// SockaddrOf returns ap as a struct sockaddr_in (IPv4 and IPv4-mapped
// addresses) or sockaddr_in6: the form of Info.SrcAddr and DestAddr.
func SockaddrOf(ap netip.AddrPort) []byte { return av.AppendSockaddr(nil, ap) }

// SrcAddrPort returns SrcAddr as an address and port, and false when it
// is not a sockaddr_in or sockaddr_in6.
func (info *Info) SrcAddrPort() (netip.AddrPort, bool) { return parseSockaddr(info.SrcAddr) }

// DestAddrPort returns DestAddr as an address and port, and false when it
// is not a sockaddr_in or sockaddr_in6.
func (info *Info) DestAddrPort() (netip.AddrPort, bool) { return parseSockaddr(info.DestAddr) }

// Clone is fi_dupinfo: a deep copy (nil for nil).
func (info *Info) Clone() *Info {
	if info == nil {
		return nil
	}
	c := *info
	c.SrcAddr = slices.Clone(info.SrcAddr)
	c.DestAddr = slices.Clone(info.DestAddr)
	c.TxAttr = clonePtr(info.TxAttr)
	c.RxAttr = clonePtr(info.RxAttr)
	c.EPAttr = clonePtr(info.EPAttr)
	if c.EPAttr != nil {
		c.EPAttr.AuthKey = slices.Clone(c.EPAttr.AuthKey)
	}
	c.DomainAttr = clonePtr(info.DomainAttr)
	if c.DomainAttr != nil {
		c.DomainAttr.AuthKey = slices.Clone(c.DomainAttr.AuthKey)
	}
	c.FabricAttr = clonePtr(info.FabricAttr)
	c.NIC = clonePtr(info.NIC)
	return &c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// AllocInfo is fi_allocinfo: an Info with every attribute allocated and
// zero, ready to fill in as hints.
func AllocInfo() *Info {
	return &Info{TxAttr: &TxAttr{}, RxAttr: &RxAttr{}, EPAttr: &EndpointAttr{},
		DomainAttr: &DomainAttr{}, FabricAttr: &FabricAttr{}}
}
