// Package atomic is xdpfab's vocabulary of remote atomics, fi_atomic(3),
// and the engine that executes them at the target.
//
// The datapath carries an atomic request — class, datatype, operation,
// count elements of operand (and compare) data — to the node owning the
// memory, resolves the target address to a slice of a registered memory
// region, and calls Engine.Execute on it. Execute applies the operation
// element by element, each element atomically, and fills the result buffer
// the reply carries back for fetch and compare atomics. Engine.Valid,
// FetchValid, CompareValid and Query answer fi_atomicvalid,
// fi_fetch_atomicvalid, fi_compare_atomicvalid and fi_query_atomic from the
// same table of supported (datatype, op) pairs that Execute dispatches
// through, so what is reported and what runs cannot disagree. Reference is
// an independent sequential model of the same semantics for tests.
//
// # Datatypes and operations
//
// Datatype and Op carry libfabric's enum values (rdma/fi_atomic.h): FI_INT8
// = 0 through FI_LONG_DOUBLE_COMPLEX = 13, then FI_INT128 = 14 (=
// FI_DATATYPE_LAST) and FI_UINT128 = 15; FI_MIN = 0 through FI_MSWAP = 18.
// Elements are little-endian in target memory and on the wire. Of the 304
// pairs, 262 are supported:
//
//   - every operation on every integer width, 8 to 128 bits, signed and
//     unsigned (190 pairs). Arithmetic wraps modulo 2^width; MIN, MAX and
//     the ordered CSWAPs compare as signed or unsigned per the datatype;
//     logical operations store 1 or 0.
//   - FLOAT, DOUBLE and LONG_DOUBLE: MIN, MAX, SUM, PROD, LOR, LAND, LXOR,
//     ATOMIC_READ, ATOMIC_WRITE and the six CSWAPs (45 pairs).
//   - FLOAT_COMPLEX, DOUBLE_COMPLEX and LONG_DOUBLE_COMPLEX: SUM, PROD, LOR,
//     LAND, LXOR, ATOMIC_READ, ATOMIC_WRITE, CSWAP and CSWAP_NE (27 pairs).
//
// Bitwise operations and MSWAP on floating types, and order-based
// operations on complex types, make no mathematical sense and answer
// FI_EOPNOTSUPP, as do unknown datatype or op values and an op used with a
// class the page does not list it for (Class.Has).
//
// The semantics are the page's pseudo-code to the letter: MIN stores buf if
// buf < addr, MAX if buf > addr; CSWAP_LE swaps if compare <= addr (the
// compare operand on the left, so it swaps when the target is at least
// compare), and likewise for the other CSWAPs; MSWAP stores (buf & compare)
// | (addr & ^compare); LXOR is (addr && !buf) || (!addr && buf);
// ATOMIC_READ ignores buf.
//
// # Floating point
//
// Floating types follow IEEE 754 with rounding to nearest, ties to even,
// and C's semantics for the page's expressions. Comparisons involving a NaN
// are false, so a NaN operand never replaces the target under MIN or MAX, a
// NaN target is never replaced by them, CSWAP never swaps against a NaN
// and CSWAP_NE always does; -0 and +0 compare equal. A value is logically
// true unless it is ±0 (a NaN is true); logical results are stored as 1.0
// or +0.0 (for complex types 1+0i or 0+0i). SUM and PROD round each result
// in the type's own precision, without fused multiply-add; any NaN they
// produce is stored as the canonical quiet NaN (sign clear, only the quiet
// bit set), so results are deterministic bit for bit. Values that are
// stored as they are — the operand of ATOMIC_WRITE, of a CSWAP that swaps,
// of a MIN or MAX that replaces — keep their exact bits, NaN payloads
// included. Complex PROD is (ac - bd) + (ad + bc)i, each product, the
// difference and the sum rounded separately; C99 Annex G's recovery of
// infinities from NaN parts is not done.
//
// LONG_DOUBLE is the x86-64 ABI long double: the 80-bit x87 extended
// format (64-bit significand with explicit integer bit, 15-bit exponent,
// sign) in the first 10 bytes of 16. It is computed exactly, by a software
// implementation of x87 addition and multiplication with 64-bit precision,
// not through float64. Encodings the x87 rejects as invalid operands
// (unnormals, pseudo-infinities, pseudo-NaNs) act as NaN;
// pseudo-denormals are read as the denormals of the same value. Computed
// results are stored in canonical form with zero padding bytes; stored
// operands keep all 16 bytes. LONG_DOUBLE_COMPLEX is two such values, 32
// bytes. Attr.Size reports 16 and 32.
//
// # Atomicity
//
// Each element is atomic, never the array as a whole, as the page says.
// Which guarantee holds depends on the element:
//
//   - 4-byte elements (INT32, UINT32, FLOAT) at 4-byte aligned addresses
//     and 8-byte elements (INT64, UINT64, DOUBLE, FLOAT_COMPLEX) at 8-byte
//     aligned addresses are updated with one sync/atomic instruction on the
//     word where the operation has one (integer SUM, BOR, BAND,
//     ATOMIC_WRITE, ATOMIC_READ) and with a compare-and-swap loop on the
//     word otherwise. They are atomic against every other execution of
//     the engine in the process and also against local code that updates
//     the same word with sync/atomic (Add, CompareAndSwap, Swap, Store).
//   - All other elements — 1- and 2-byte integers, 16- and 32-byte types
//     (128-bit integers, DOUBLE_COMPLEX, the long doubles) and 4- or 8-byte
//     elements that are not naturally aligned — are read, computed and
//     written under one of 256 mutexes chosen by the element's address.
//     They are atomic against every other execution of the engine in the
//     process, but not against local CPU code that does not go through the
//     engine (Go has no sync/atomic operation for those sizes).
//
// Elements of different datatypes overlapping the same bytes are not
// coordinated; libfabric leaves concurrent atomics of several actors
// undefined and so does xdpfab. All writes to target and result are
// complete when Execute returns.
//
// # Counts
//
// One request carries at most Engine.MaxPayload bytes of operand data.
// The zero Engine (and the package-level Valid, Query and Execute) use the
// package constant MaxPayload, 1400 bytes, a fixed default that is not
// tied to any link: on a 1500-byte MTU link one xdpfab request packet
// holds 1500 − 28 (IPv4 and UDP headers) − 40 (xdpfab header) − 48 (op
// descriptor) = 1384 operand bytes, less than 1400. An xdpfab endpoint
// sets MaxPayload to what its own packets hold (package fabric derives it
// from the interface MTU; fabric.Domain.QueryAtomic reports the same), so
// its counts follow its link.
//
// The valid calls report MaxPayload/size elements for base and fetch
// atomics and MaxPayload/(2*size) for compare atomics, which carry a
// compare buffer as well. Execute refuses larger requests with
// FI_EMSGSIZE, a target that is empty or not a whole number of elements
// and operand or compare buffers of the wrong length with FI_EINVAL, and a
// short result buffer with FI_ETOOSMALL.
//
// # Query flags
//
// Query accepts 0, fi.FETCH_ATOMIC or fi.COMPARE_ATOMIC; both together are
// FI_EINVAL. fi.TAGGED asks about atomics on tagged receive buffers, which
// xdpfab does not implement: Query answers FI_EOPNOTSUPP for every pair
// with it. Any other bit is FI_EBADFLAGS.
//
// # Cost
//
// Dispatch goes through a table of per-(datatype, op) kernels built once at
// package initialisation. Execute allocates nothing, uses no reflection and
// boxes nothing per element.
package atomic
