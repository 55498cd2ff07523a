package fi

// Flags is a set of libfabric flag bits (the uint64_t flags, caps and access
// arguments). Each constant has the bit value of the libfabric header that
// defines it. Some bits are reused by different calls with different
// meanings, exactly as in libfabric (for example FI_SYMMETRIC, FI_REG_MR,
// FI_COMPARE_ATOMIC and FI_SELECTIVE_COMPLETION are all bit 59); a call only
// interprets the bits documented for it.
type Flags uint64

// Capability and access bits (fabric.h).
const (
	MSG        Flags = 1 << 1
	RMA        Flags = 1 << 2
	TAGGED     Flags = 1 << 3
	ATOMIC     Flags = 1 << 4
	MULTICAST  Flags = 1 << 5
	COLLECTIVE Flags = 1 << 6

	READ         Flags = 1 << 8
	WRITE        Flags = 1 << 9
	RECV         Flags = 1 << 10
	SEND         Flags = 1 << 11
	TRANSMIT           = SEND
	REMOTE_READ  Flags = 1 << 12
	REMOTE_WRITE Flags = 1 << 13
)

// Operation flags (fabric.h).
const (
	MULTI_RECV        Flags = 1 << 16
	REMOTE_CQ_DATA    Flags = 1 << 17
	MORE              Flags = 1 << 18
	PEEK              Flags = 1 << 19
	TRIGGER           Flags = 1 << 20
	FENCE             Flags = 1 << 21
	COMPLETION        Flags = 1 << 24
	EVENT                   = COMPLETION
	INJECT            Flags = 1 << 25
	INJECT_COMPLETE   Flags = 1 << 26
	TRANSMIT_COMPLETE Flags = 1 << 27
	DELIVERY_COMPLETE Flags = 1 << 28
	AFFINITY          Flags = 1 << 29
	COMMIT_COMPLETE   Flags = 1 << 30
	MATCH_COMPLETE    Flags = 1 << 31

	AV_USER_ID           Flags = 1 << 41
	PEER                 Flags = 1 << 43
	HMEM                 Flags = 1 << 47
	VARIABLE_MSG         Flags = 1 << 48
	RMA_PMEM             Flags = 1 << 49
	SOURCE_ERR           Flags = 1 << 50
	LOCAL_COMM           Flags = 1 << 51
	REMOTE_COMM          Flags = 1 << 52
	SHARED_AV            Flags = 1 << 53
	PROV_ATTR_ONLY       Flags = 1 << 54
	NUMERICHOST          Flags = 1 << 55
	RMA_EVENT            Flags = 1 << 56
	SOURCE               Flags = 1 << 57
	NAMED_RX_CTX         Flags = 1 << 58
	DIRECTED_RECV        Flags = 1 << 59
	SELECTIVE_COMPLETION Flags = 1 << 59 // fi_bind flag
)

// Tagged-receive and buffered-receive flags (fabric.h): FI_CLAIM shares
// bit 59 with FI_DIRECTED_RECV, FI_DISCARD bit 58.
const (
	CLAIM   Flags = 1 << 59
	DISCARD Flags = 1 << 58
)

// Address-vector flags (fi_domain.h).
const (
	UNIVERSE  Flags = 1 << 57
	SYNC_ERR  Flags = 1 << 58
	SYMMETRIC Flags = 1 << 59
	// AUTH_KEY asks an AV call to treat fi_addr / addresses as bound to an
	// authorization key (libfabric 1.20+). fabric.h defines it with the
	// tagged/CQ flags as bit 57, the bit FI_UNIVERSE and FI_SOURCE also use
	// in other calls.
	AUTH_KEY Flags = 1 << 57
)

// Domain bind flag (fi_domain.h): report memory registrations on the bound EQ.
const REG_MR Flags = 1 << 59

// Atomic flags (fi_atomic.h).
const (
	FETCH_ATOMIC   Flags = 1 << 58
	COMPARE_ATOMIC Flags = 1 << 59
)
