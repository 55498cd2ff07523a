package atomic

import "strconv"

// Datatype is enum fi_datatype: the type of every element of an atomic
// request. The values are libfabric's (rdma/fi_atomic.h).
type Datatype uint32

// Datatypes, numbered as in rdma/fi_atomic.h. FI_INT128 and FI_UINT128 were
// appended after FI_LONG_DOUBLE_COMPLEX with FI_INT128 = FI_DATATYPE_LAST
// (14), so existing numbers kept their meaning; libfabric's collective
// FI_VOID is FI_COLLECTIVE_OFFSET (256) and not an atomic datatype.
const (
	INT8                Datatype = iota // FI_INT8
	UINT8                               // FI_UINT8
	INT16                               // FI_INT16
	UINT16                              // FI_UINT16
	INT32                               // FI_INT32
	UINT32                              // FI_UINT32
	INT64                               // FI_INT64
	UINT64                              // FI_UINT64
	FLOAT                               // FI_FLOAT: IEEE 754 binary32
	DOUBLE                              // FI_DOUBLE: IEEE 754 binary64
	FLOAT_COMPLEX                       // FI_FLOAT_COMPLEX: binary32 real, then imaginary
	DOUBLE_COMPLEX                      // FI_DOUBLE_COMPLEX: binary64 real, then imaginary
	LONG_DOUBLE                         // FI_LONG_DOUBLE: x86-64 80-bit extended, in 16 bytes
	LONG_DOUBLE_COMPLEX                 // FI_LONG_DOUBLE_COMPLEX: two LONG_DOUBLE, real first
	INT128                              // FI_INT128 (= FI_DATATYPE_LAST, 14)
	UINT128                             // FI_UINT128 (15)

	// NumDatatypes is one past the largest atomic Datatype.
	NumDatatypes = int(UINT128) + 1
)

var datatypeNames = [NumDatatypes]string{
	"FI_INT8", "FI_UINT8", "FI_INT16", "FI_UINT16", "FI_INT32", "FI_UINT32",
	"FI_INT64", "FI_UINT64", "FI_FLOAT", "FI_DOUBLE", "FI_FLOAT_COMPLEX",
	"FI_DOUBLE_COMPLEX", "FI_LONG_DOUBLE", "FI_LONG_DOUBLE_COMPLEX",
	"FI_INT128", "FI_UINT128",
}

// datatypeSizes holds each element's size in bytes in target memory and on
// the wire. LONG_DOUBLE is the x86-64 ABI layout: 10 significant bytes
// (64-bit significand with explicit integer bit, then sign and 15-bit
// exponent) padded to 16.
var datatypeSizes = [NumDatatypes]int{
	1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 16, 32, 16, 16,
}

// String returns the libfabric name, e.g. "FI_UINT64".
func (dt Datatype) String() string {
	if int(dt) < NumDatatypes {
		return datatypeNames[dt]
	}
	return "Datatype(" + strconv.FormatUint(uint64(dt), 10) + ")"
}

// Size returns the size in bytes of one element of dt, or 0 for a value
// that is not a datatype.
func Size(dt Datatype) int {
	if int(dt) < NumDatatypes {
		return datatypeSizes[dt]
	}
	return 0
}

// Op is enum fi_op: the operation applied to each element. The values are
// libfabric's (rdma/fi_atomic.h).
type Op uint32

// Operations, numbered as in rdma/fi_atomic.h. The comments give the
// page's definition; addr is the target, buf the operand, compare the
// compare operand.
const (
	MIN          Op = iota // if (buf < addr) addr = buf
	MAX                    // if (buf > addr) addr = buf
	SUM                    // addr = addr + buf
	PROD                   // addr = addr * buf
	LOR                    // addr = addr || buf
	LAND                   // addr = addr && buf
	BOR                    // addr = addr | buf
	BAND                   // addr = addr & buf
	LXOR                   // addr = (addr && !buf) || (!addr && buf)
	BXOR                   // addr = addr ^ buf
	ATOMIC_READ            // result = addr
	ATOMIC_WRITE           // addr = buf
	CSWAP                  // if (compare == addr) addr = buf
	CSWAP_NE               // if (compare != addr) addr = buf
	CSWAP_LE               // if (compare <= addr) addr = buf
	CSWAP_LT               // if (compare < addr) addr = buf
	CSWAP_GE               // if (compare >= addr) addr = buf
	CSWAP_GT               // if (compare > addr) addr = buf
	MSWAP                  // addr = (buf & compare) | (addr & ~compare)

	// NumOps is FI_ATOMIC_OP_LAST, one past the largest Op.
	NumOps = int(MSWAP) + 1
)

var opNames = [NumOps]string{
	"FI_MIN", "FI_MAX", "FI_SUM", "FI_PROD", "FI_LOR", "FI_LAND", "FI_BOR",
	"FI_BAND", "FI_LXOR", "FI_BXOR", "FI_ATOMIC_READ", "FI_ATOMIC_WRITE",
	"FI_CSWAP", "FI_CSWAP_NE", "FI_CSWAP_LE", "FI_CSWAP_LT", "FI_CSWAP_GE",
	"FI_CSWAP_GT", "FI_MSWAP",
}

// String returns the libfabric name, e.g. "FI_CSWAP_LE".
func (op Op) String() string {
	if int(op) < NumOps {
		return opNames[op]
	}
	return "Op(" + strconv.FormatUint(uint64(op), 10) + ")"
}

// Class is one of the three families of atomic calls, each with its own
// valid call and its own list of usable operations.
type Class int

const (
	// Base is fi_atomic / fi_atomicv / fi_atomicmsg / fi_inject_atomic
	// (checked by fi_atomicvalid): MIN, MAX, SUM, PROD, LOR, LAND, BOR,
	// BAND, LXOR, BXOR and ATOMIC_WRITE.
	Base Class = iota
	// Fetch is fi_fetch_atomic* (fi_fetch_atomicvalid): the base operations
	// plus ATOMIC_READ, returning the target's initial value.
	Fetch
	// Compare is fi_compare_atomic* (fi_compare_atomicvalid): CSWAP,
	// CSWAP_NE, CSWAP_LE, CSWAP_LT, CSWAP_GE, CSWAP_GT and MSWAP, returning
	// the target's initial value.
	Compare
)

func (c Class) String() string {
	switch c {
	case Base:
		return "base"
	case Fetch:
		return "fetch"
	case Compare:
		return "compare"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Has reports whether the page lists op as usable with class c.
func (c Class) Has(op Op) bool {
	switch c {
	case Base:
		return op <= BXOR || op == ATOMIC_WRITE
	case Fetch:
		return op <= ATOMIC_WRITE
	case Compare:
		return op >= CSWAP && op <= MSWAP
	}
	return false
}
