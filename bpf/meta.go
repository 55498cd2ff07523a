package bpf

import "encoding/binary"

// Meta is the metadata the XDP program puts in front of every packet it
// hands to an AF_XDP socket (struct xdp_meta); in the UMEM frame it ends
// where the packet starts.
type Meta = XdpfabXdpMeta

// Metadata constants (xdpfab.h).
const (
	MetaLen   = 24         // sizeof(struct xdp_meta)
	MetaMagic = 0x58464d32 // XDPFAB_META_MAGIC, the last 4 bytes of the metadata

	MetaPeerUnknown = 0x1 // XDP_META_PEER_UNKNOWN: source not in the AV, FiAddr is FI_ADDR_NOTAVAIL
	MetaCsumOK      = 0x2 // XDP_META_CSUM_OK: the UDP checksum was present and verified

	PortStrict    = 0x1 // PORT_STRICT: drop datagrams from peers not in the AV
	PortBoundAddr = 0x2 // PORT_BOUND_ADDR: only datagrams to XdpfabPortConfig.Addr; else to any address in local_addrs
	PortKServe    = 0x4 // PORT_KSERVE: the endpoint shares target state; requests may be served in XDP

	XSKMaxQueues = 64 // XSK_MAX_QUEUES: entries of the xsks map
)

// ParseMeta decodes the MetaLen bytes that precede a packet in its UMEM
// frame. ok is false when they do not end in MetaMagic, i.e. the packet did
// not pass through the XDP program's metadata step.
func ParseMeta(b []byte) (m Meta, ok bool) {
	if len(b) < MetaLen {
		return m, false
	}
	b = b[len(b)-MetaLen:]
	m.FiAddr = binary.LittleEndian.Uint64(b[0:])
	m.AuthKeyId = binary.LittleEndian.Uint32(b[8:])
	m.Flags = b[12]
	m.Magic = binary.LittleEndian.Uint32(b[20:])
	return m, m.Magic == MetaMagic
}
