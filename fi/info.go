package fi

// Version is an interface version as FI_VERSION(major, minor) encodes it:
// the version argument of fi_getinfo and fi_fabric_attr's api_version and
// prov_version.
func Version(major, minor uint16) uint32 { return uint32(major)<<16 | uint32(minor) }

// VersionMajor is FI_MAJOR.
func VersionMajor(v uint32) uint16 { return uint16(v >> 16) }

// VersionMinor is FI_MINOR.
func VersionMinor(v uint32) uint16 { return uint16(v) }

// Capability and operation bits fabric.h defines beside those in flags.go.
const (
	PRIORITY         Flags = 1 << 22
	PEER_TRANSFER    Flags = 1 << 36
	XPU_TRIGGER      Flags = 1 << 44
	HMEM_HOST_ALLOC  Flags = 1 << 45
	HMEM_DEVICE_ONLY Flags = 1 << 46
)

// Mode bits (fi_info.mode, fabric.h): requirements a provider may place on
// the application. They reuse high bits of the flag space.
const (
	CONTEXT           Flags = 1 << 59
	MSG_PREFIX        Flags = 1 << 58
	ASYNC_IOV         Flags = 1 << 57
	RX_CQ_DATA        Flags = 1 << 56
	LOCAL_MR          Flags = 1 << 55
	NOTIFY_FLAGS_ONLY Flags = 1 << 54
	RESTRICTED_COMP   Flags = 1 << 53
	CONTEXT2          Flags = 1 << 52
	BUFFERED_RECV     Flags = 1 << 51
)

// Order is a set of ordering bits: tx_attr/rx_attr msg_order and
// comp_order (fabric.h's FI_ORDER_*).
type Order uint64

// Ordering bits, as fabric.h defines them.
const (
	OrderNone   Order = 0
	OrderRAR    Order = 1 << 0
	OrderRAW    Order = 1 << 1
	OrderRAS    Order = 1 << 2
	OrderWAR    Order = 1 << 3
	OrderWAW    Order = 1 << 4
	OrderWAS    Order = 1 << 5
	OrderSAR    Order = 1 << 6
	OrderSAW    Order = 1 << 7
	OrderSAS    Order = 1 << 8
	OrderStrict Order = 0x1FF // FI_ORDER_STRICT: the nine bits above

	OrderData Order = 1 << 16 // FI_ORDER_DATA (rx comp_order)

	OrderRMARAR    Order = 1 << 32
	OrderRMARAW    Order = 1 << 33
	OrderRMAWAR    Order = 1 << 34
	OrderRMAWAW    Order = 1 << 35
	OrderAtomicRAR Order = 1 << 36
	OrderAtomicRAW Order = 1 << 37
	OrderAtomicWAR Order = 1 << 38
	OrderAtomicWAW Order = 1 << 39
)

// ProvSpecific is FI_PROV_SPECIFIC: the bit that marks provider-specific
// enum values (protocols, for example).
const ProvSpecific = 1 << 31
