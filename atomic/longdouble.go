package atomic

import "math/bits"

// ld80 is an x87 double-extended value as the x86-64 ABI lays out a long
// double: a 64-bit significand m with an explicit integer bit (bit 63),
// then se = sign<<15 | biased exponent (bias 16383). In memory it takes the
// first 10 of 16 bytes; the other 6 are padding.
//
// The arithmetic here is a software implementation of the x87 operations
// with precision control set to extended (Linux's default) and rounding to
// nearest even, so results are bit-for-bit those of FADD/FMUL on hardware,
// except that every NaN result is the canonical quiet NaN ldNaN.
type ld80 struct {
	m  uint64
	se uint16
}

const (
	ldExpMask = 0x7fff
	ldSignBit = 0x8000
	ldIntBit  = 1 << 63
	// ldMinLSB is the exponent of the least significant significand bit of
	// a denormal: 1 - 16383 - 63.
	ldMinLSB = -16445
	// ldExpOffset turns a biased exponent into the exponent of the
	// significand's least significant bit: value = m * 2^(e - ldExpOffset).
	ldExpOffset = 16383 + 63
)

var (
	// ldNaN is the quiet NaN every NaN-producing operation stores: sign
	// clear, integer and quiet bits set, no payload.
	ldNaN = ld80{m: 0xC000000000000000, se: ldExpMask}
	ldOne = ld80{m: ldIntBit, se: 16383}
)

type ldClass uint8

const (
	ldZero ldClass = iota
	ldFinite
	ldInf
	ldNaNClass
)

// class sorts x the way the x87 does: unnormals, pseudo-infinities and
// pseudo-NaNs (integer bit clear where it must be set) are invalid
// operands and act as NaN; pseudo-denormals (exponent 0, integer bit set)
// are accepted and read with exponent 1, like denormals.
func (x ld80) class() ldClass {
	switch e := x.se & ldExpMask; {
	case e == ldExpMask:
		switch {
		case x.m&ldIntBit == 0:
			return ldNaNClass
		case x.m<<1 == 0:
			return ldInf
		}
		return ldNaNClass
	case e == 0:
		if x.m == 0 {
			return ldZero
		}
		return ldFinite
	case x.m&ldIntBit == 0:
		return ldNaNClass
	}
	return ldFinite
}

func (x ld80) neg() bool { return x.se&ldSignBit != 0 }

func ldSigned(neg bool, x ld80) ld80 {
	if neg {
		x.se |= ldSignBit
	}
	return x
}

// unpack returns a finite non-zero x as m * 2^exp with m's top bit set.
func (x ld80) unpack() (m uint64, exp int) {
	e := int(x.se & ldExpMask)
	if e == 0 {
		e = 1
	}
	n := bits.LeadingZeros64(x.m)
	return x.m << n, e - ldExpOffset - n
}

// ldRound returns (hi:lo) * 2^exp with the given sign, rounded to nearest
// even into the extended format: denormal when below the normal range,
// infinity when above.
func ldRound(neg bool, hi, lo uint64, exp int) ld80 {
	var sign uint16
	if neg {
		sign = ldSignBit
	}
	l := 128 - bits.LeadingZeros64(hi)
	if hi == 0 {
		l = 64 - bits.LeadingZeros64(lo)
	}
	if l == 0 {
		return ld80{se: sign}
	}
	shift := l - 64
	if exp+shift < ldMinLSB {
		shift = ldMinLSB - exp
	}
	var q uint64
	if shift <= 0 {
		q = lo << uint(-shift) // l <= 64: hi is zero and q cannot overflow
	} else {
		var up bool
		q, up = shr128RNE(hi, lo, uint(shift))
		if up {
			q++
			if q == 0 { // carried into bit 64
				q = ldIntBit
				shift++
			}
		}
	}
	if q&ldIntBit == 0 { // denormal (or zero): least significant bit at ldMinLSB
		return ld80{m: q, se: sign}
	}
	e := exp + shift + ldExpOffset
	if e >= ldExpMask {
		return ld80{m: ldIntBit, se: sign | ldExpMask}
	}
	return ld80{m: q, se: sign | uint16(e)}
}

// shr128RNE returns (hi:lo) >> s for s >= 1, where the result fits in 64
// bits, and whether rounding to nearest even goes up.
func shr128RNE(hi, lo uint64, s uint) (q uint64, up bool) {
	var half, sticky bool
	switch {
	case s < 64:
		q = lo>>s | hi<<(64-s)
		half = lo>>(s-1)&1 != 0
		sticky = lo&(1<<(s-1)-1) != 0
	case s == 64:
		q = hi
		half = lo>>63 != 0
		sticky = lo<<1 != 0
	case s < 128:
		q = hi >> (s - 64)
		half = hi>>(s-65)&1 != 0
		sticky = lo != 0 || hi&(1<<(s-65)-1) != 0
	case s == 128:
		half = hi>>63 != 0
		sticky = hi<<1 != 0 || lo != 0
	}
	return q, half && (sticky || q&1 != 0)
}

// shr128Jam shifts (hi:lo) right by s, OR-ing any bit shifted out into the
// least significant bit so that rounding later still sees it.
func shr128Jam(hi, lo uint64, s int) (uint64, uint64) {
	switch {
	case s == 0:
		return hi, lo
	case s < 64:
		lost := lo<<(64-s) != 0
		lo = lo>>s | hi<<(64-s)
		hi >>= s
		if lost {
			lo |= 1
		}
		return hi, lo
	case s < 128:
		lost := lo != 0 || hi<<(128-s) != 0
		lo = hi >> (s - 64)
		if lost {
			lo |= 1
		}
		return 0, lo
	}
	if hi|lo != 0 {
		return 0, 1
	}
	return 0, 0
}

// canonical re-encodes a finite or zero x (pseudo-denormals become
// normals), as any x87 arithmetic result would be.
func (x ld80) canonical() ld80 {
	if x.class() == ldZero {
		return ld80{se: x.se & ldSignBit}
	}
	m, exp := x.unpack()
	return ldRound(x.neg(), 0, m, exp)
}

// ldAdd is a + b, rounded.
func ldAdd(a, b ld80) ld80 {
	ca, cb := a.class(), b.class()
	switch {
	case ca == ldNaNClass || cb == ldNaNClass:
		return ldNaN
	case ca == ldInf && cb == ldInf:
		if a.neg() != b.neg() {
			return ldNaN
		}
		return ldSigned(a.neg(), ld80{m: ldIntBit, se: ldExpMask})
	case ca == ldInf:
		return ldSigned(a.neg(), ld80{m: ldIntBit, se: ldExpMask})
	case cb == ldInf:
		return ldSigned(b.neg(), ld80{m: ldIntBit, se: ldExpMask})
	case ca == ldZero && cb == ldZero:
		return ld80{se: a.se & b.se & ldSignBit} // -0 only for -0 + -0
	case ca == ldZero:
		return b.canonical()
	case cb == ldZero:
		return a.canonical()
	}
	ma, ea := a.unpack()
	mb, eb := b.unpack()
	na, nb := a.neg(), b.neg()
	if ea < eb || (ea == eb && ma < mb) {
		ma, ea, na, mb, eb, nb = mb, eb, nb, ma, ea, na
	}
	// Both significands sit 63 bits up in 128, leaving room for the carry
	// of a sum and 63 guard bits below the larger operand.
	ahi, alo := ma>>1, ma<<63
	bhi, blo := shr128Jam(mb>>1, mb<<63, ea-eb)
	if na == nb {
		lo, c := bits.Add64(alo, blo, 0)
		hi, _ := bits.Add64(ahi, bhi, c)
		return ldRound(na, hi, lo, ea-63)
	}
	lo, borrow := bits.Sub64(alo, blo, 0)
	hi, _ := bits.Sub64(ahi, bhi, borrow)
	if hi|lo == 0 {
		return ld80{} // exact cancellation is +0 when rounding to nearest
	}
	return ldRound(na, hi, lo, ea-63)
}

// ldSub is a - b, rounded.
func ldSub(a, b ld80) ld80 {
	b.se ^= ldSignBit // NaN operands stay NaN: their sign is not looked at
	return ldAdd(a, b)
}

// ldMul is a * b, rounded.
func ldMul(a, b ld80) ld80 {
	ca, cb := a.class(), b.class()
	neg := a.neg() != b.neg()
	switch {
	case ca == ldNaNClass || cb == ldNaNClass:
		return ldNaN
	case ca == ldInf || cb == ldInf:
		if ca == ldZero || cb == ldZero {
			return ldNaN
		}
		return ldSigned(neg, ld80{m: ldIntBit, se: ldExpMask})
	case ca == ldZero || cb == ldZero:
		return ldSigned(neg, ld80{})
	}
	ma, ea := a.unpack()
	mb, eb := b.unpack()
	hi, lo := bits.Mul64(ma, mb)
	return ldRound(neg, hi, lo, ea+eb)
}

// ldCmp compares a and b by value: -1, 0 or +1, and false when they are
// unordered (either is a NaN or an invalid encoding). +0 equals -0.
func ldCmp(a, b ld80) (int, bool) {
	ca, cb := a.class(), b.class()
	if ca == ldNaNClass || cb == ldNaNClass {
		return 0, false
	}
	sa := a.neg() && ca != ldZero
	sb := b.neg() && cb != ldZero
	if sa != sb {
		if sa {
			return -1, true
		}
		return 1, true
	}
	c := ldCmpMag(a, ca, b, cb)
	if sa {
		c = -c
	}
	return c, true
}

func ldCmpMag(a ld80, ca ldClass, b ld80, cb ldClass) int {
	if ca != cb || ca != ldFinite {
		switch {
		case ca < cb:
			return -1
		case ca > cb:
			return 1
		}
		return 0
	}
	ma, ea := a.unpack()
	mb, eb := b.unpack()
	switch {
	case ea < eb || (ea == eb && ma < mb):
		return -1
	case ea > eb || (ea == eb && ma > mb):
		return 1
	}
	return 0
}

// ldTrue is C's truth value of a long double: anything but ±0, NaNs
// included.
func ldTrue(x ld80) bool { return x.class() != ldZero }
