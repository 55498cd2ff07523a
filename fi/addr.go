package fi

import "strconv"

// Addr is fi_addr_t: the handle an address vector returns for a peer and
// that data transfer calls take as destination or report as source.
type Addr uint64

const (
	// AddrNotAvail is FI_ADDR_NOTAVAIL: no address, or an insert that failed.
	AddrNotAvail Addr = ^Addr(0)
	// AddrUnspec is FI_ADDR_UNSPEC: any or unspecified peer.
	AddrUnspec Addr = ^Addr(0)
)

// KeyNotAvail is FI_KEY_NOTAVAIL: a memory-region key that is not (yet)
// available.
const KeyNotAvail uint64 = ^uint64(0)

// String formats a as a decimal handle, or "FI_ADDR_NOTAVAIL".
func (a Addr) String() string {
	if a == AddrNotAvail {
		return "FI_ADDR_NOTAVAIL"
	}
	return strconv.FormatUint(uint64(a), 10)
}

// AddrFormat is a libfabric address format (fabric.h's FI_SOCKADDR_IN ...).
type AddrFormat uint32

// Address formats, numbered as in fabric.h.
const (
	FormatUnspec    AddrFormat = 0 // FI_FORMAT_UNSPEC
	FormatSockaddr  AddrFormat = 1 // FI_SOCKADDR
	FormatSockaddr4 AddrFormat = 2 // FI_SOCKADDR_IN
	FormatSockaddr6 AddrFormat = 3 // FI_SOCKADDR_IN6
	FormatStr       AddrFormat = 9 // FI_ADDR_STR
)

var formatNames = map[AddrFormat]string{
	FormatUnspec: "FI_FORMAT_UNSPEC", FormatSockaddr: "FI_SOCKADDR",
	FormatSockaddr4: "FI_SOCKADDR_IN", FormatSockaddr6: "FI_SOCKADDR_IN6",
	FormatStr: "FI_ADDR_STR",
}

func (f AddrFormat) String() string {
	if s, ok := formatNames[f]; ok {
		return s
	}
	return "AddrFormat(" + strconv.Itoa(int(f)) + ")"
}
