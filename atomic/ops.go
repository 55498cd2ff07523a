package atomic

import (
	"math"
	"math/bits"
	"unsafe"
)

// This file holds the per-element semantics of every supported (op,
// datatype) pair. Each builder returns nil for an operation that makes no
// sense for its types; the kernels table built from them is the single
// record of what is supported.

type unsigned interface {
	~uint8 | ~uint16 | ~uint32 | ~uint64
}

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | unsigned
}

// intOp returns op on integers held as their bits U; S is the type whose
// order MIN, MAX and the ordered CSWAPs use: the signed type of the same
// width for signed datatypes, U itself for unsigned ones. Arithmetic wraps
// modulo 2^width, as two's complement hardware does.
func intOp[U unsigned, S integer](op Op) valueOp[U] {
	truth := func(v bool) U {
		if v {
			return 1
		}
		return 0
	}
	switch op {
	case MIN:
		return func(a, b, _ U) (U, bool) { return b, S(b) < S(a) }
	case MAX:
		return func(a, b, _ U) (U, bool) { return b, S(b) > S(a) }
	case SUM:
		return func(a, b, _ U) (U, bool) { return a + b, true }
	case PROD:
		return func(a, b, _ U) (U, bool) { return a * b, true }
	case LOR:
		return func(a, b, _ U) (U, bool) { return truth(a != 0 || b != 0), true }
	case LAND:
		return func(a, b, _ U) (U, bool) { return truth(a != 0 && b != 0), true }
	case BOR:
		return func(a, b, _ U) (U, bool) { return a | b, true }
	case BAND:
		return func(a, b, _ U) (U, bool) { return a & b, true }
	case LXOR:
		return func(a, b, _ U) (U, bool) { return truth((a != 0) != (b != 0)), true }
	case BXOR:
		return func(a, b, _ U) (U, bool) { return a ^ b, true }
	case ATOMIC_READ:
		return func(a, _, _ U) (U, bool) { return a, false }
	case ATOMIC_WRITE:
		return func(_, b, _ U) (U, bool) { return b, true }
	case CSWAP:
		return func(a, b, c U) (U, bool) { return b, c == a }
	case CSWAP_NE:
		return func(a, b, c U) (U, bool) { return b, c != a }
	case CSWAP_LE:
		return func(a, b, c U) (U, bool) { return b, S(c) <= S(a) }
	case CSWAP_LT:
		return func(a, b, c U) (U, bool) { return b, S(c) < S(a) }
	case CSWAP_GE:
		return func(a, b, c U) (U, bool) { return b, S(c) >= S(a) }
	case CSWAP_GT:
		return func(a, b, c U) (U, bool) { return b, S(c) > S(a) }
	case MSWAP:
		return func(a, b, c U) (U, bool) { return b&c | a&^c, true }
	}
	return nil
}

func (x u128) isZero() bool { return x.lo|x.hi == 0 }

// less128 orders 128-bit integers, as two's complement when signed.
func less128(a, b u128, signed bool) bool {
	if a.hi != b.hi {
		if signed {
			return int64(a.hi) < int64(b.hi)
		}
		return a.hi < b.hi
	}
	return a.lo < b.lo
}

func add128(a, b u128) u128 {
	lo, c := bits.Add64(a.lo, b.lo, 0)
	return u128{lo, a.hi + b.hi + c}
}

// mul128 is a*b modulo 2^128, the same bits for signed and unsigned.
func mul128(a, b u128) u128 {
	hi, lo := bits.Mul64(a.lo, b.lo)
	return u128{lo, hi + a.lo*b.hi + a.hi*b.lo}
}

func truth128(v bool) u128 {
	if v {
		return u128{lo: 1}
	}
	return u128{}
}

// int128Op is intOp for INT128 and UINT128.
func int128Op(op Op, signed bool) valueOp[u128] {
	lt := func(a, b u128) bool { return less128(a, b, signed) }
	switch op {
	case MIN:
		return func(a, b, _ u128) (u128, bool) { return b, lt(b, a) }
	case MAX:
		return func(a, b, _ u128) (u128, bool) { return b, lt(a, b) }
	case SUM:
		return func(a, b, _ u128) (u128, bool) { return add128(a, b), true }
	case PROD:
		return func(a, b, _ u128) (u128, bool) { return mul128(a, b), true }
	case LOR:
		return func(a, b, _ u128) (u128, bool) { return truth128(!a.isZero() || !b.isZero()), true }
	case LAND:
		return func(a, b, _ u128) (u128, bool) { return truth128(!a.isZero() && !b.isZero()), true }
	case BOR:
		return func(a, b, _ u128) (u128, bool) { return u128{a.lo | b.lo, a.hi | b.hi}, true }
	case BAND:
		return func(a, b, _ u128) (u128, bool) { return u128{a.lo & b.lo, a.hi & b.hi}, true }
	case LXOR:
		return func(a, b, _ u128) (u128, bool) { return truth128(a.isZero() != b.isZero()), true }
	case BXOR:
		return func(a, b, _ u128) (u128, bool) { return u128{a.lo ^ b.lo, a.hi ^ b.hi}, true }
	case ATOMIC_READ:
		return func(a, _, _ u128) (u128, bool) { return a, false }
	case ATOMIC_WRITE:
		return func(_, b, _ u128) (u128, bool) { return b, true }
	case CSWAP:
		return func(a, b, c u128) (u128, bool) { return b, c == a }
	case CSWAP_NE:
		return func(a, b, c u128) (u128, bool) { return b, c != a }
	case CSWAP_LE:
		return func(a, b, c u128) (u128, bool) { return b, !lt(a, c) }
	case CSWAP_LT:
		return func(a, b, c u128) (u128, bool) { return b, lt(c, a) }
	case CSWAP_GE:
		return func(a, b, c u128) (u128, bool) { return b, !lt(c, a) }
	case CSWAP_GT:
		return func(a, b, c u128) (u128, bool) { return b, lt(a, c) }
	case MSWAP:
		return func(a, b, c u128) (u128, bool) {
			return u128{b.lo&c.lo | a.lo&^c.lo, b.hi&c.hi | a.hi&^c.hi}, true
		}
	}
	return nil
}

type float interface{ ~float32 | ~float64 }

// fbits and ffrom reinterpret a float's bits; U must be the unsigned
// integer of F's size.
func fbits[F float, U unsigned](f F) U { return *(*U)(unsafe.Pointer(&f)) }
func ffrom[F float, U unsigned](u U) F { return *(*F)(unsafe.Pointer(&u)) }

// floatOp is op on IEEE binary32 or binary64 values held as bits U. MIN,
// MAX and the CSWAPs are the page's C comparisons, so with IEEE semantics:
// a comparison with a NaN is false (NaN operands never replace, a NaN
// target is never replaced by MIN/MAX, CSWAP_NE always swaps), and -0
// equals +0. SUM and PROD round to nearest even in F's own precision and
// store quietNaN for any NaN result. The logical ops store 1.0 or +0.0; a
// NaN is true, ±0 false. Bitwise ops and MSWAP are not defined on floats.
func floatOp[F float, U unsigned](op Op, quietNaN U) valueOp[U] {
	one := fbits[F, U](1)
	switch op {
	case MIN:
		return func(a, b, _ U) (U, bool) { return b, ffrom[F, U](b) < ffrom[F, U](a) }
	case MAX:
		return func(a, b, _ U) (U, bool) { return b, ffrom[F, U](b) > ffrom[F, U](a) }
	case SUM:
		return func(a, b, _ U) (U, bool) { return canonical(ffrom[F, U](a)+ffrom[F, U](b), quietNaN), true }
	case PROD:
		return func(a, b, _ U) (U, bool) { return canonical(F(ffrom[F, U](a)*ffrom[F, U](b)), quietNaN), true }
	case LOR:
		return func(a, b, _ U) (U, bool) { return truthValue(ffrom[F, U](a) != 0 || ffrom[F, U](b) != 0, one), true }
	case LAND:
		return func(a, b, _ U) (U, bool) { return truthValue(ffrom[F, U](a) != 0 && ffrom[F, U](b) != 0, one), true }
	case LXOR:
		return func(a, b, _ U) (U, bool) {
			return truthValue((ffrom[F, U](a) != 0) != (ffrom[F, U](b) != 0), one), true
		}
	case ATOMIC_READ:
		return func(a, _, _ U) (U, bool) { return a, false }
	case ATOMIC_WRITE:
		return func(_, b, _ U) (U, bool) { return b, true }
	case CSWAP:
		return func(a, b, c U) (U, bool) { return b, ffrom[F, U](c) == ffrom[F, U](a) }
	case CSWAP_NE:
		return func(a, b, c U) (U, bool) { return b, ffrom[F, U](c) != ffrom[F, U](a) }
	case CSWAP_LE:
		return func(a, b, c U) (U, bool) { return b, ffrom[F, U](c) <= ffrom[F, U](a) }
	case CSWAP_LT:
		return func(a, b, c U) (U, bool) { return b, ffrom[F, U](c) < ffrom[F, U](a) }
	case CSWAP_GE:
		return func(a, b, c U) (U, bool) { return b, ffrom[F, U](c) >= ffrom[F, U](a) }
	case CSWAP_GT:
		return func(a, b, c U) (U, bool) { return b, ffrom[F, U](c) > ffrom[F, U](a) }
	}
	return nil
}

// canonical returns x's bits, or quietNaN for any NaN.
func canonical[F float, U unsigned](x F, quietNaN U) U {
	if x != x {
		return quietNaN
	}
	return fbits[F, U](x)
}

// truthValue is one for true, zero bits for false.
func truthValue[U unsigned](v bool, one U) U {
	if v {
		return one
	}
	return 0
}

// complexMath is the arithmetic of one complex component type: float32,
// float64 or the 80-bit extended format, each as its own value type V.
type complexMath[V any] struct {
	add, sub, mul func(a, b V) V
	isZero        func(a V) bool
	eq            func(a, b V) bool // IEEE ==: false for NaN, -0 == +0
	zero, one     V
}

// complexOp is op on complex values (re, im) of component type V. SUM adds
// componentwise; PROD is (ac - bd) + (ad + bc)i with each product, the
// difference and the sum rounded in V (no fused operations, and no C99
// Annex G recovery of infinities from NaN results). A complex value is true
// unless both parts are ±0; CSWAP compares both parts with IEEE ==. There is
// no order on complex numbers, so MIN, MAX and the ordered CSWAPs are
// unsupported, as are the bitwise ops and MSWAP.
func complexOp[V any](op Op, m complexMath[V]) valueOp[[2]V] {
	truth := func(v bool) [2]V {
		if v {
			return [2]V{m.one, m.zero}
		}
		return [2]V{m.zero, m.zero}
	}
	isTrue := func(z [2]V) bool { return !m.isZero(z[0]) || !m.isZero(z[1]) }
	equal := func(x, y [2]V) bool { return m.eq(x[0], y[0]) && m.eq(x[1], y[1]) }
	switch op {
	case SUM:
		return func(a, b, _ [2]V) ([2]V, bool) {
			return [2]V{m.add(a[0], b[0]), m.add(a[1], b[1])}, true
		}
	case PROD:
		return func(a, b, _ [2]V) ([2]V, bool) {
			re := m.sub(m.mul(a[0], b[0]), m.mul(a[1], b[1]))
			im := m.add(m.mul(a[0], b[1]), m.mul(a[1], b[0]))
			return [2]V{re, im}, true
		}
	case LOR:
		return func(a, b, _ [2]V) ([2]V, bool) { return truth(isTrue(a) || isTrue(b)), true }
	case LAND:
		return func(a, b, _ [2]V) ([2]V, bool) { return truth(isTrue(a) && isTrue(b)), true }
	case LXOR:
		return func(a, b, _ [2]V) ([2]V, bool) { return truth(isTrue(a) != isTrue(b)), true }
	case ATOMIC_READ:
		return func(a, _, _ [2]V) ([2]V, bool) { return a, false }
	case ATOMIC_WRITE:
		return func(_, b, _ [2]V) ([2]V, bool) { return b, true }
	case CSWAP:
		return func(a, b, c [2]V) ([2]V, bool) { return b, equal(c, a) }
	case CSWAP_NE:
		return func(a, b, c [2]V) ([2]V, bool) { return b, !equal(c, a) }
	}
	return nil
}

// Component arithmetic for the complex types. The explicit conversions
// F(x * y) keep the compiler from fusing a product into the following
// addition; NaN results become the canonical quiet NaN.

// floatMath is the arithmetic of float32 or float64 components; qnan is
// the canonical quiet NaN of the width.
func floatMath[F float32 | float64](qnan F) complexMath[F] {
	canon := func(x F) F {
		if x != x {
			return qnan
		}
		return x
	}
	return complexMath[F]{
		add:    func(a, b F) F { return canon(a + b) },
		sub:    func(a, b F) F { return canon(a - b) },
		mul:    func(a, b F) F { return canon(F(a * b)) },
		isZero: func(a F) bool { return a == 0 },
		eq:     func(a, b F) bool { return a == b },
		one:    1,
	}
}

func float32Math() complexMath[float32] { return floatMath(math.Float32frombits(0x7fc00000)) }

func float64Math() complexMath[float64] { return floatMath(math.Float64frombits(0x7ff8000000000000)) }

func ld80Math() complexMath[ld80] {
	return complexMath[ld80]{
		add:    ldAdd,
		sub:    ldSub,
		mul:    ldMul,
		isZero: func(a ld80) bool { return !ldTrue(a) },
		eq: func(a, b ld80) bool {
			c, ok := ldCmp(a, b)
			return ok && c == 0
		},
		one: ldOne,
	}
}

// Conversions between element bits and component values. A long double
// occupies the low 10 bytes of its 16; computed results are stored with
// zero padding, values taken from an operand (WRITE, the CSWAPs, MIN/MAX)
// keep the operand's 16 bytes.

func ldFromBits(x u128) ld80 { return ld80{m: x.lo, se: uint16(x.hi)} }
func ldToBits(x ld80) u128   { return u128{lo: x.m, hi: uint64(x.se)} }

// longDoubleOp is op on FI_LONG_DOUBLE, with floatOp's semantics carried
// over to the extended format: comparisons by value (unordered with NaN
// and invalid encodings, -0 == +0), SUM and PROD rounded to nearest even
// with a 64-bit significand.
func longDoubleOp(op Op) valueOp[u128] {
	x := ldFromBits
	lt := func(a, b u128) bool { c, ok := ldCmp(x(a), x(b)); return ok && c < 0 }
	le := func(a, b u128) bool { c, ok := ldCmp(x(a), x(b)); return ok && c <= 0 }
	eq := func(a, b u128) bool { c, ok := ldCmp(x(a), x(b)); return ok && c == 0 }
	truth := func(v bool) u128 {
		if v {
			return ldToBits(ldOne)
		}
		return u128{}
	}
	switch op {
	case MIN:
		return func(a, b, _ u128) (u128, bool) { return b, lt(b, a) }
	case MAX:
		return func(a, b, _ u128) (u128, bool) { return b, lt(a, b) }
	case SUM:
		return func(a, b, _ u128) (u128, bool) { return ldToBits(ldAdd(x(a), x(b))), true }
	case PROD:
		return func(a, b, _ u128) (u128, bool) { return ldToBits(ldMul(x(a), x(b))), true }
	case LOR:
		return func(a, b, _ u128) (u128, bool) { return truth(ldTrue(x(a)) || ldTrue(x(b))), true }
	case LAND:
		return func(a, b, _ u128) (u128, bool) { return truth(ldTrue(x(a)) && ldTrue(x(b))), true }
	case LXOR:
		return func(a, b, _ u128) (u128, bool) { return truth(ldTrue(x(a)) != ldTrue(x(b))), true }
	case ATOMIC_READ:
		return func(a, _, _ u128) (u128, bool) { return a, false }
	case ATOMIC_WRITE:
		return func(_, b, _ u128) (u128, bool) { return b, true }
	case CSWAP:
		return func(a, b, c u128) (u128, bool) { return b, eq(c, a) }
	case CSWAP_NE:
		return func(a, b, c u128) (u128, bool) { return b, !eq(c, a) }
	case CSWAP_LE:
		return func(a, b, c u128) (u128, bool) { return b, le(c, a) }
	case CSWAP_LT:
		return func(a, b, c u128) (u128, bool) { return b, lt(c, a) }
	case CSWAP_GE:
		return func(a, b, c u128) (u128, bool) { return b, le(a, c) }
	case CSWAP_GT:
		return func(a, b, c u128) (u128, bool) { return b, lt(a, c) }
	}
	return nil
}

// Adapters from complexOp's [2]V to the element bit layouts. A selected
// value (WRITE, CSWAP) is taken verbatim from the operand bits rather than
// round-tripped, so NaN payloads and long double padding survive.

func complex64Op(op Op) valueOp[uint64] {
	f := complexOp(op, float32Math())
	if f == nil {
		return nil
	}
	split := func(v uint64) [2]float32 {
		return [2]float32{math.Float32frombits(uint32(v)), math.Float32frombits(uint32(v >> 32))}
	}
	if op == ATOMIC_WRITE || op == ATOMIC_READ || op == CSWAP || op == CSWAP_NE {
		return func(a, b, c uint64) (uint64, bool) {
			_, ok := f(split(a), split(b), split(c))
			return b, ok
		}
	}
	return func(a, b, c uint64) (uint64, bool) {
		z, ok := f(split(a), split(b), split(c))
		return uint64(math.Float32bits(z[0])) | uint64(math.Float32bits(z[1]))<<32, ok
	}
}

func complex128Op(op Op) valueOp[u128] {
	f := complexOp(op, float64Math())
	if f == nil {
		return nil
	}
	split := func(v u128) [2]float64 {
		return [2]float64{math.Float64frombits(v.lo), math.Float64frombits(v.hi)}
	}
	if op == ATOMIC_WRITE || op == ATOMIC_READ || op == CSWAP || op == CSWAP_NE {
		return func(a, b, c u128) (u128, bool) {
			_, ok := f(split(a), split(b), split(c))
			return b, ok
		}
	}
	return func(a, b, c u128) (u128, bool) {
		z, ok := f(split(a), split(b), split(c))
		return u128{math.Float64bits(z[0]), math.Float64bits(z[1])}, ok
	}
}

func complexLongDoubleOp(op Op) valueOp[u256] {
	f := complexOp(op, ld80Math())
	if f == nil {
		return nil
	}
	split := func(v u256) [2]ld80 { return [2]ld80{ldFromBits(v.re), ldFromBits(v.im)} }
	if op == ATOMIC_WRITE || op == ATOMIC_READ || op == CSWAP || op == CSWAP_NE {
		return func(a, b, c u256) (u256, bool) {
			_, ok := f(split(a), split(b), split(c))
			return b, ok
		}
	}
	return func(a, b, c u256) (u256, bool) {
		z, ok := f(split(a), split(b), split(c))
		return u256{ldToBits(z[0]), ldToBits(z[1])}, ok
	}
}
