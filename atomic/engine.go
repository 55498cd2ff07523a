package atomic

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// MaxPayload is the operand bytes one atomic request carries for an
// Engine that sets no MaxPayload of its own, and for the package-level
// Valid and Query. It is a round default, not a packet's exact room:
// endpoints set theirs from the packet size, which on a 1500-byte MTU
// IPv4 link is 1384 bytes (1500 - 28 IP/UDP - 40 xdpfab header - 48 op
// descriptor). Base and fetch requests carry count*size operand
// bytes (a fetch reply carries as many result bytes); compare requests
// carry operand and compare data, 2*count*size bytes.
const MaxPayload = 1400

// Attr is struct fi_atomic_attr, the output of Query.
type Attr struct {
	// Count is the largest number of elements one request may carry, as
	// the valid calls report it.
	Count int
	// Size is the size in bytes of one element of the datatype.
	Size int
}

// Engine answers the valid and query calls and executes requests at the
// target, for one payload limit. The zero Engine uses MaxPayload; a domain
// whose packets hold a different amount sets its own, so that what it
// reports and what it accepts agree. An Engine is a value with no state of
// its own and is safe for concurrent use.
type Engine struct {
	// MaxPayload is the largest operand payload of one request in bytes;
	// zero or negative means the package constant MaxPayload.
	MaxPayload int
}

// kernels is the table of supported (datatype, op) pairs and their
// executors, built once. A nil entry is an unsupported pair; Valid, Query,
// Execute and Reference all consult it and nothing else.
var kernels = buildKernels()

func buildKernels() (t [NumDatatypes][NumOps]kernel) {
	for o := range NumOps {
		op := Op(o)
		set := func(dt Datatype, k kernel) { t[dt][op] = k }
		if f := intOp[uint8, int8](op); f != nil {
			set(INT8, kernel8(f))
		}
		if f := intOp[uint8, uint8](op); f != nil {
			set(UINT8, kernel8(f))
		}
		if f := intOp[uint16, int16](op); f != nil {
			set(INT16, kernel16(f))
		}
		if f := intOp[uint16, uint16](op); f != nil {
			set(UINT16, kernel16(f))
		}
		if f := intOp[uint32, int32](op); f != nil {
			set(INT32, wordKernel32(op, f))
		}
		if f := intOp[uint32, uint32](op); f != nil {
			set(UINT32, wordKernel32(op, f))
		}
		if f := intOp[uint64, int64](op); f != nil {
			set(INT64, wordKernel64(op, f))
		}
		if f := intOp[uint64, uint64](op); f != nil {
			set(UINT64, wordKernel64(op, f))
		}
		if f := int128Op(op, true); f != nil {
			set(INT128, kernel128(f))
		}
		if f := int128Op(op, false); f != nil {
			set(UINT128, kernel128(f))
		}
		if f := floatOp[float32](op, uint32(0x7fc00000)); f != nil {
			set(FLOAT, kernel32(f, nil))
		}
		if f := floatOp[float64](op, uint64(0x7ff8000000000000)); f != nil {
			set(DOUBLE, kernel64(f, nil))
		}
		if f := complex64Op(op); f != nil {
			set(FLOAT_COMPLEX, kernel64(f, nil))
		}
		if f := complex128Op(op); f != nil {
			set(DOUBLE_COMPLEX, kernel128(f))
		}
		if f := longDoubleOp(op); f != nil {
			set(LONG_DOUBLE, kernel128(f))
		}
		if f := complexLongDoubleOp(op); f != nil {
			set(LONG_DOUBLE_COMPLEX, kernel256(f))
		}
	}
	return t
}

// Supported reports whether the engine implements op on dt at all, in
// whichever class lists op.
func Supported(dt Datatype, op Op) bool {
	return int(dt) < NumDatatypes && int(op) < NumOps && kernels[dt][op] != nil
}

func (e Engine) payload() int {
	if e.MaxPayload <= 0 {
		return MaxPayload
	}
	return e.MaxPayload
}

// count is the valid calls' answer for class c.
func (e Engine) count(c Class, dt Datatype, op Op) (int, error) {
	if !c.Has(op) || !Supported(dt, op) {
		return 0, fmt.Errorf("atomic: %v on %v in %v class: %w", op, dt, c, fi.EOPNOTSUPP)
	}
	per := Size(dt)
	if c == Compare {
		per *= 2
	}
	n := e.payload() / per
	if n < 1 {
		return 0, fmt.Errorf("atomic: %v on %v: payload limit %d bytes below one element: %w",
			op, dt, e.payload(), fi.EOPNOTSUPP)
	}
	return n, nil
}

// Valid is fi_atomicvalid: the number of elements one base request (Apply)
// of op on dt may carry, or FI_EOPNOTSUPP.
func (e Engine) Valid(dt Datatype, op Op) (int, error) { return e.count(Base, dt, op) }

// FetchValid is fi_fetch_atomicvalid: the number of elements one fetch
// request may carry, or FI_EOPNOTSUPP.
func (e Engine) FetchValid(dt Datatype, op Op) (int, error) { return e.count(Fetch, dt, op) }

// CompareValid is fi_compare_atomicvalid: the number of elements one
// compare request may carry, or FI_EOPNOTSUPP.
func (e Engine) CompareValid(dt Datatype, op Op) (int, error) { return e.count(Compare, dt, op) }

// Query is fi_query_atomic. Flags 0 asks about base atomics,
// fi.FETCH_ATOMIC about fetch atomics, fi.COMPARE_ATOMIC about compare
// atomics; both together are FI_EINVAL. fi.TAGGED asks about atomics
// targeting tagged receive buffers, which xdpfab does not offer: it answers
// FI_EOPNOTSUPP for every pair. Any other flag bit is FI_EBADFLAGS.
func (e Engine) Query(dt Datatype, op Op, flags fi.Flags) (Attr, error) {
	if rest := flags &^ (fi.FETCH_ATOMIC | fi.COMPARE_ATOMIC | fi.TAGGED); rest != 0 {
		return Attr{}, fmt.Errorf("atomic: query flags %#x: %w", uint64(rest), fi.EBADFLAGS)
	}
	c := Base
	switch flags & (fi.FETCH_ATOMIC | fi.COMPARE_ATOMIC) {
	case fi.FETCH_ATOMIC | fi.COMPARE_ATOMIC:
		return Attr{}, fmt.Errorf("atomic: query with both FI_FETCH_ATOMIC and FI_COMPARE_ATOMIC: %w", fi.EINVAL)
	case fi.FETCH_ATOMIC:
		c = Fetch
	case fi.COMPARE_ATOMIC:
		c = Compare
	}
	if flags&fi.TAGGED != 0 {
		return Attr{}, fmt.Errorf("atomic: atomics on tagged receive buffers: %w", fi.EOPNOTSUPP)
	}
	n, err := e.count(c, dt, op)
	if err != nil {
		return Attr{}, err
	}
	return Attr{Count: n, Size: Size(dt)}, nil
}

// Execute performs one request of class c at the target: op on dt applied
// element by element to target, which holds count = len(target)/Size(dt)
// little-endian elements (typically a slice of a registered memory region).
//
// operand holds count elements (buf on the page); it is ignored for
// ATOMIC_READ and may then be nil. compare holds count elements for the
// Compare class and must be empty otherwise. result receives each
// element's value before the operation for the Fetch and Compare classes
// (at least len(target) bytes) and must be empty for Base. Every element is
// atomic as the package documentation describes, and the target and
// result are complete when Execute returns.
//
// Errors: FI_EOPNOTSUPP for a pair the class does not support;
// FI_EINVAL for an empty target or one that is not a whole number of
// elements, and for an operand or compare buffer of the wrong length or a
// buffer the class does not use; FI_EMSGSIZE for more elements than the
// valid call allows; FI_ETOOSMALL for a short result buffer. Nothing is
// modified when Execute fails.
func (e Engine) Execute(c Class, dt Datatype, op Op, target, operand, compare, result []byte) error {
	if !c.Has(op) || !Supported(dt, op) {
		return fmt.Errorf("atomic: %v on %v in %v class: %w", op, dt, c, fi.EOPNOTSUPP)
	}
	// Sizes are powers of two and the limit is checked by multiplication:
	// no division on this path.
	size := datatypeSizes[dt]
	n := len(target)
	if n == 0 || n&(size-1) != 0 {
		return fmt.Errorf("atomic: target of %d bytes is not a whole number of %d-byte %v elements: %w",
			n, size, dt, fi.EINVAL)
	}
	wire, per := n, size // operand bytes carried in all and per element
	if c == Compare {
		wire, per = 2*n, 2*size
	}
	if wire > e.payload() {
		if per > e.payload() {
			_, err := e.count(c, dt, op)
			return err
		}
		return fmt.Errorf("atomic: %d elements of %v exceed the %d one request may carry: %w",
			n/size, dt, e.payload()/per, fi.EMSGSIZE)
	}
	if op == ATOMIC_READ {
		operand = nil
	} else if len(operand) != n {
		return fmt.Errorf("atomic: operand of %d bytes for a %d-byte target: %w", len(operand), n, fi.EINVAL)
	}
	if c == Compare {
		if len(compare) != n {
			return fmt.Errorf("atomic: compare buffer of %d bytes for a %d-byte target: %w", len(compare), n, fi.EINVAL)
		}
	} else if len(compare) != 0 {
		return fmt.Errorf("atomic: compare buffer given to a %v atomic: %w", c, fi.EINVAL)
	} else {
		compare = nil
	}
	if c == Base {
		if len(result) != 0 {
			return fmt.Errorf("atomic: result buffer given to a base atomic: %w", fi.EINVAL)
		}
		result = nil
	} else if len(result) < n {
		return fmt.Errorf("atomic: result buffer of %d bytes for a %d-byte target: %w", len(result), n, fi.ETOOSMALL)
	}
	kernels[dt][op](target, operand, compare, result)
	return nil
}

// defaultEngine carries the package-level calls.
var defaultEngine Engine

// Valid is Engine.Valid with the default payload limit.
func Valid(dt Datatype, op Op) (int, error) { return defaultEngine.Valid(dt, op) }

// FetchValid is Engine.FetchValid with the default payload limit.
func FetchValid(dt Datatype, op Op) (int, error) { return defaultEngine.FetchValid(dt, op) }

// CompareValid is Engine.CompareValid with the default payload limit.
func CompareValid(dt Datatype, op Op) (int, error) { return defaultEngine.CompareValid(dt, op) }

// Query is Engine.Query with the default payload limit.
func Query(dt Datatype, op Op, flags fi.Flags) (Attr, error) {
	return defaultEngine.Query(dt, op, flags)
}

// Execute is Engine.Execute with the default payload limit.
func Execute(c Class, dt Datatype, op Op, target, operand, compare, result []byte) error {
	return defaultEngine.Execute(c, dt, op, target, operand, compare, result)
}
