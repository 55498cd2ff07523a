package atomic

import (
	"fmt"
	"math"
	"math/big"
	"slices"

	"github.com/xdpfab/xdpfab/fi"
)

// Reference is the sequential model of the semantics Execute implements,
// written independently of it: integers through math/big, every floating
// type (binary32, binary64 and the 80-bit extended format) by exact
// math/big.Float arithmetic rounded once to nearest even into the format,
// with IEEE rules for zeros, infinities and NaNs spelled out. It is meant
// for tests, here and end to end, and allocates freely.
//
// It applies op on dt to a copy of target and returns that copy and the
// values fetched (target's elements before the operation, for the Fetch
// and Compare classes). operand is ignored for ATOMIC_READ; compare is used
// only by the Compare-class operations. There is no payload limit.
// Unsupported pairs are FI_EOPNOTSUPP, malformed lengths FI_EINVAL.
func Reference(dt Datatype, op Op, target, operand, compare []byte) (newTarget, fetched []byte, err error) {
	if !Supported(dt, op) {
		return nil, nil, fmt.Errorf("atomic reference: %v on %v: %w", op, dt, fi.EOPNOTSUPP)
	}
	size := Size(dt)
	n := len(target)
	if n == 0 || n%size != 0 {
		return nil, nil, fmt.Errorf("atomic reference: target of %d bytes: %w", n, fi.EINVAL)
	}
	if op != ATOMIC_READ && len(operand) != n {
		return nil, nil, fmt.Errorf("atomic reference: operand of %d bytes: %w", len(operand), fi.EINVAL)
	}
	if Compare.Has(op) && len(compare) != n {
		return nil, nil, fmt.Errorf("atomic reference: compare of %d bytes: %w", len(compare), fi.EINVAL)
	}
	newTarget = slices.Clone(target)
	fetched = slices.Clone(target)
	for off := 0; off < n; off += size {
		t := newTarget[off : off+size]
		var b, c []byte
		if op != ATOMIC_READ {
			b = operand[off : off+size]
		}
		if Compare.Has(op) {
			c = compare[off : off+size]
		}
		switch dt {
		case INT8, INT16, INT32, INT64, INT128:
			refInt(op, t, b, c, true)
		case UINT8, UINT16, UINT32, UINT64, UINT128:
			refInt(op, t, b, c, false)
		case FLOAT:
			refReal(op, binary32, t, b, c)
		case DOUBLE:
			refReal(op, binary64, t, b, c)
		case LONG_DOUBLE:
			refReal(op, extended80, t, b, c)
		case FLOAT_COMPLEX:
			refComplex(op, binary32, t, b, c)
		case DOUBLE_COMPLEX:
			refComplex(op, binary64, t, b, c)
		case LONG_DOUBLE_COMPLEX:
			refComplex(op, extended80, t, b, c)
		}
	}
	return newTarget, fetched, nil
}

// leInt reads a little-endian two's complement (signed) or plain binary
// integer.
func leInt(b []byte, signed bool) *big.Int {
	be := slices.Clone(b)
	slices.Reverse(be)
	x := new(big.Int).SetBytes(be)
	if signed && b[len(b)-1]&0x80 != 0 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return x
}

// putLEInt stores x modulo 2^(8*len(t)) little-endian into t.
func putLEInt(t []byte, x *big.Int) {
	mod := new(big.Int).Lsh(big.NewInt(1), uint(8*len(t)))
	r := new(big.Int).Mod(x, mod)
	r.FillBytes(t)
	slices.Reverse(t)
}

func refInt(op Op, t, b, c []byte, signed bool) {
	a := leInt(t, signed)
	var bv, cv *big.Int
	if b != nil {
		bv = leInt(b, signed)
	}
	if c != nil {
		cv = leInt(c, signed)
	}
	// The bitwise operations act on the bit patterns.
	ua, ub, uc := leInt(t, false), (*big.Int)(nil), (*big.Int)(nil)
	if b != nil {
		ub = leInt(b, false)
	}
	if c != nil {
		uc = leInt(c, false)
	}
	bool01 := func(v bool) *big.Int {
		if v {
			return big.NewInt(1)
		}
		return big.NewInt(0)
	}
	nz := func(x *big.Int) bool { return x.Sign() != 0 }
	swapIf := func(cond bool) {
		if cond {
			copy(t, b)
		}
	}
	switch op {
	case MIN:
		swapIf(bv.Cmp(a) < 0)
	case MAX:
		swapIf(bv.Cmp(a) > 0)
	case SUM:
		putLEInt(t, new(big.Int).Add(a, bv))
	case PROD:
		putLEInt(t, new(big.Int).Mul(a, bv))
	case LOR:
		putLEInt(t, bool01(nz(a) || nz(bv)))
	case LAND:
		putLEInt(t, bool01(nz(a) && nz(bv)))
	case LXOR:
		putLEInt(t, bool01((nz(a) && !nz(bv)) || (!nz(a) && nz(bv))))
	case BOR:
		putLEInt(t, new(big.Int).Or(ua, ub))
	case BAND:
		putLEInt(t, new(big.Int).And(ua, ub))
	case BXOR:
		putLEInt(t, new(big.Int).Xor(ua, ub))
	case ATOMIC_READ:
	case ATOMIC_WRITE:
		copy(t, b)
	case CSWAP:
		swapIf(cv.Cmp(a) == 0)
	case CSWAP_NE:
		swapIf(cv.Cmp(a) != 0)
	case CSWAP_LE:
		swapIf(cv.Cmp(a) <= 0)
	case CSWAP_LT:
		swapIf(cv.Cmp(a) < 0)
	case CSWAP_GE:
		swapIf(cv.Cmp(a) >= 0)
	case CSWAP_GT:
		swapIf(cv.Cmp(a) > 0)
	case MSWAP:
		keep := new(big.Int).AndNot(ua, uc)
		putLEInt(t, new(big.Int).Or(new(big.Int).And(ub, uc), keep))
	}
}

// floatFormat describes a binary floating-point format for the reference
// model.
type floatFormat struct {
	size   int // bytes of one value in memory
	prec   int // significand bits, including the leading one
	minLSB int // exponent of the smallest denormal, 2^minLSB
	emax   int // largest finite values are below 2^(emax+1)
}

var (
	binary32   = floatFormat{size: 4, prec: 24, minLSB: -149, emax: 127}
	binary64   = floatFormat{size: 8, prec: 53, minLSB: -1074, emax: 1023}
	extended80 = floatFormat{size: 16, prec: 64, minLSB: -16445, emax: 16383}
)

// refFloat is a value of the model: NaN, or an exact *big.Float that may
// be ±0 or ±Inf.
type refFloat struct {
	nan bool
	v   *big.Float
}

func (f floatFormat) decode(b []byte) refFloat {
	switch f.size {
	case 4:
		x := math.Float32frombits(le.Uint32(b))
		if x != x {
			return refFloat{nan: true}
		}
		return refFloat{v: big.NewFloat(float64(x))}
	case 8:
		x := math.Float64frombits(le.Uint64(b))
		if x != x {
			return refFloat{nan: true}
		}
		return refFloat{v: big.NewFloat(x)}
	}
	// x87 extended: 64-bit significand with explicit integer bit, then
	// sign and 15-bit biased exponent.
	m := le.Uint64(b)
	se := le.Uint16(b[8:])
	neg := se&0x8000 != 0
	e := int(se & 0x7fff)
	intBit := m>>63 == 1
	v := new(big.Float)
	switch {
	case e == 0x7fff && intBit && m<<1 == 0:
		v.SetInf(neg)
		return refFloat{v: v}
	case e == 0x7fff || (e != 0 && !intBit):
		// NaN, or an encoding the x87 rejects as an invalid operand
		// (pseudo-NaN, pseudo-infinity, unnormal).
		return refFloat{nan: true}
	case e == 0:
		v.SetMantExp(new(big.Float).SetUint64(m), -16445) // denormal or pseudo-denormal
	default:
		v.SetMantExp(new(big.Float).SetUint64(m), e-16383-63)
	}
	if neg {
		v.Neg(v)
	}
	return refFloat{v: v}
}

// round rounds an exact finite value into the format, to nearest with ties
// to even, giving ±0 on total underflow and ±Inf on overflow.
func (f floatFormat) round(x *big.Float) *big.Float {
	if x.IsInf() || x.Sign() == 0 {
		return x
	}
	neg := x.Signbit()
	e := x.MantExp(nil) // |x| in [2^(e-1), 2^e)
	p := f.prec
	if e-p < f.minLSB {
		p = e - f.minLSB
	}
	var r *big.Float
	switch {
	case p >= 1:
		r = new(big.Float).SetPrec(uint(p)).SetMode(big.ToNearestEven).Set(x)
	case p == 0: // 2^(minLSB-1) <= |x| < 2^minLSB: the midpoint goes to even, zero
		half := new(big.Float).SetMantExp(big.NewFloat(1), f.minLSB-1)
		r = new(big.Float)
		if new(big.Float).Abs(x).Cmp(half) > 0 {
			r.SetMantExp(big.NewFloat(1), f.minLSB)
		}
	default:
		r = new(big.Float)
	}
	if r.Sign() != 0 && r.MantExp(nil) > f.emax+1 {
		r = new(big.Float).SetInf(false)
	}
	if neg && !r.Signbit() {
		r.Neg(r)
	}
	return r
}

func (f floatFormat) canonicalNaN(t []byte) {
	switch f.size {
	case 4:
		le.PutUint32(t, 0x7fc00000)
	case 8:
		le.PutUint64(t, 0x7ff8000000000000)
	default:
		le.PutUint64(t, 0xC000000000000000)
		le.PutUint64(t[8:], 0x7fff)
	}
}

// encode stores a rounded model value; every NaN is the canonical quiet
// NaN and long doubles get zero padding.
func (f floatFormat) encode(t []byte, x refFloat) {
	if x.nan {
		f.canonicalNaN(t)
		return
	}
	v := x.v
	switch f.size {
	case 4:
		y, _ := v.Float32()
		le.PutUint32(t, math.Float32bits(y))
		return
	case 8:
		y, _ := v.Float64()
		le.PutUint64(t, math.Float64bits(y))
		return
	}
	var se uint16
	if v.Signbit() {
		se = 0x8000
	}
	var m uint64
	switch {
	case v.IsInf():
		se |= 0x7fff
		m = 1 << 63
	case v.Sign() == 0:
	default:
		abs := new(big.Float).Abs(v)
		e := abs.MantExp(nil)
		if e-1 >= -16382 { // normal: |v| = m * 2^(e-64), m in [2^63, 2^64)
			se |= uint16(e - 1 + 16383)
			m, _ = new(big.Float).SetMantExp(abs, 64-e).Uint64()
		} else { // denormal: |v| = m * 2^-16445
			m, _ = new(big.Float).SetMantExp(abs, 16445).Uint64()
		}
	}
	le.PutUint64(t, m)
	le.PutUint64(t[8:], uint64(se))
}

func refAdd(f floatFormat, a, b refFloat) refFloat {
	if a.nan || b.nan {
		return refFloat{nan: true}
	}
	x, y := a.v, b.v
	switch {
	case x.IsInf() && y.IsInf():
		if x.Signbit() != y.Signbit() {
			return refFloat{nan: true}
		}
		return a
	case x.IsInf():
		return a
	case y.IsInf():
		return b
	case x.Sign() == 0 && y.Sign() == 0:
		z := new(big.Float)
		if x.Signbit() && y.Signbit() {
			z.Neg(z)
		}
		return refFloat{v: z}
	}
	// Precision enough to hold the sum exactly.
	hi := max(x.MantExp(nil), y.MantExp(nil))
	lo := min(x.MantExp(nil)-int(x.MinPrec()), y.MantExp(nil)-int(y.MinPrec()))
	if x.Sign() == 0 {
		lo = y.MantExp(nil) - int(y.MinPrec())
	} else if y.Sign() == 0 {
		lo = x.MantExp(nil) - int(x.MinPrec())
	}
	s := new(big.Float).SetPrec(uint(hi-lo+2)).Add(x, y)
	if s.Sign() == 0 {
		return refFloat{v: new(big.Float)} // exact cancellation: +0
	}
	return refFloat{v: f.round(s)}
}

func refNeg(a refFloat) refFloat {
	if a.nan {
		return a
	}
	return refFloat{v: new(big.Float).Neg(a.v)}
}

func refMul(f floatFormat, a, b refFloat) refFloat {
	if a.nan || b.nan {
		return refFloat{nan: true}
	}
	x, y := a.v, b.v
	neg := x.Signbit() != y.Signbit()
	z := new(big.Float)
	switch {
	case (x.IsInf() && y.Sign() == 0) || (y.IsInf() && x.Sign() == 0):
		return refFloat{nan: true}
	case x.IsInf() || y.IsInf():
		z.SetInf(neg)
		return refFloat{v: z}
	case x.Sign() == 0 || y.Sign() == 0:
		if neg {
			z.Neg(z)
		}
		return refFloat{v: z}
	}
	z.SetPrec(x.MinPrec()+y.MinPrec()).Mul(x, y)
	return refFloat{v: f.round(z)}
}

// refCmp compares by value; ok is false when a NaN makes them unordered.
func refCmp(a, b refFloat) (c int, ok bool) {
	if a.nan || b.nan {
		return 0, false
	}
	return a.v.Cmp(b.v), true
}

func refTrue(a refFloat) bool { return a.nan || a.v.Sign() != 0 }

func refOne(f floatFormat, t []byte, v bool) {
	x := new(big.Float)
	if v {
		x.SetInt64(1)
	}
	f.encode(t, refFloat{v: x})
}

func refReal(op Op, f floatFormat, t, b, c []byte) {
	a := f.decode(t)
	var bv, cv refFloat
	if b != nil {
		bv = f.decode(b)
	}
	if c != nil {
		cv = f.decode(c)
	}
	holds := func(x, y refFloat, pred func(int) bool) bool {
		r, ok := refCmp(x, y)
		return ok && pred(r)
	}
	lt := func(r int) bool { return r < 0 }
	le := func(r int) bool { return r <= 0 }
	eq := func(r int) bool { return r == 0 }
	gt := func(r int) bool { return r > 0 }
	ge := func(r int) bool { return r >= 0 }
	swapIf := func(cond bool) {
		if cond {
			copy(t, b)
		}
	}
	switch op {
	case MIN:
		swapIf(holds(bv, a, lt))
	case MAX:
		swapIf(holds(bv, a, gt))
	case SUM:
		f.encode(t, refAdd(f, a, bv))
	case PROD:
		f.encode(t, refMul(f, a, bv))
	case LOR:
		refOne(f, t, refTrue(a) || refTrue(bv))
	case LAND:
		refOne(f, t, refTrue(a) && refTrue(bv))
	case LXOR:
		refOne(f, t, (refTrue(a) && !refTrue(bv)) || (!refTrue(a) && refTrue(bv)))
	case ATOMIC_READ:
	case ATOMIC_WRITE:
		copy(t, b)
	case CSWAP:
		swapIf(holds(cv, a, eq))
	case CSWAP_NE:
		swapIf(!holds(cv, a, eq))
	case CSWAP_LE:
		swapIf(holds(cv, a, le))
	case CSWAP_LT:
		swapIf(holds(cv, a, lt))
	case CSWAP_GE:
		swapIf(holds(cv, a, ge))
	case CSWAP_GT:
		swapIf(holds(cv, a, gt))
	}
}

func refComplex(op Op, f floatFormat, t, b, c []byte) {
	k := f.size
	part := func(x []byte) [2]refFloat { return [2]refFloat{f.decode(x[:k]), f.decode(x[k:])} }
	a := part(t)
	var bv, cv [2]refFloat
	if b != nil {
		bv = part(b)
	}
	if c != nil {
		cv = part(c)
	}
	isTrue := func(z [2]refFloat) bool { return refTrue(z[0]) || refTrue(z[1]) }
	equal := func(x, y [2]refFloat) bool {
		r0, ok0 := refCmp(x[0], y[0])
		r1, ok1 := refCmp(x[1], y[1])
		return ok0 && ok1 && r0 == 0 && r1 == 0
	}
	truth := func(v bool) {
		refOne(f, t[:k], v)
		refOne(f, t[k:], false)
	}
	switch op {
	case SUM:
		f.encode(t[:k], refAdd(f, a[0], bv[0]))
		f.encode(t[k:], refAdd(f, a[1], bv[1]))
	case PROD:
		ac, bd := refMul(f, a[0], bv[0]), refMul(f, a[1], bv[1])
		ad, bc := refMul(f, a[0], bv[1]), refMul(f, a[1], bv[0])
		f.encode(t[:k], refAdd(f, ac, refNeg(bd)))
		f.encode(t[k:], refAdd(f, ad, bc))
	case LOR:
		truth(isTrue(a) || isTrue(bv))
	case LAND:
		truth(isTrue(a) && isTrue(bv))
	case LXOR:
		truth((isTrue(a) && !isTrue(bv)) || (!isTrue(a) && isTrue(bv)))
	case ATOMIC_READ:
	case ATOMIC_WRITE:
		copy(t, b)
	case CSWAP:
		if equal(cv, a) {
			copy(t, b)
		}
	case CSWAP_NE:
		if !equal(cv, a) {
			copy(t, b)
		}
	}
}
