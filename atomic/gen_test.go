package atomic

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
)

// valueGen draws element values for a datatype, mixing random bit
// patterns with the edge cases each type has.
type valueGen struct{ r *rand.Rand }

func newGen(seed uint64) valueGen { return valueGen{rand.New(rand.NewPCG(seed, 0x5eed))} }

func (g valueGen) intEdge(size int, b []byte) {
	for i := range b {
		b[i] = 0
	}
	switch g.r.IntN(9) {
	case 0: // zero
	case 1: // one
		b[0] = 1
	case 2: // -1, all ones, UINT max
		for i := range b {
			b[i] = 0xff
		}
	case 3: // signed min
		b[size-1] = 0x80
	case 4: // signed max
		for i := range b {
			b[i] = 0xff
		}
		b[size-1] = 0x7f
	case 5: // small signed
		v := int64(g.r.IntN(7) - 3)
		for i := range b {
			b[i] = byte(v >> (8 * min(i, 7)))
		}
	default:
		for i := range b {
			b[i] = byte(g.r.Uint32())
		}
	}
}

var float32Edges = []uint32{
	0, 0x80000000, // ±0
	0x3f800000, 0xbf800000, 0x40000000, // 1, -1, 2
	0x7f800000, 0xff800000, // ±Inf
	0x7fc00000, 0xffc00001, 0x7f800001, // quiet NaN, negative NaN with payload, signalling NaN
	0x00000001, 0x80000001, 0x007fffff, // denormals
	0x00800000, 0x7f7fffff, 0xff7fffff, // min normal, ±max
	0x3f7fffff, 0x33800000, 0x4b800000, // just below 1, 2^-24, 2^24
}

var float64Edges = []uint64{
	0, 1 << 63,
	0x3ff0000000000000, 0xbff0000000000000, 0x4000000000000000,
	0x7ff0000000000000, 0xfff0000000000000,
	0x7ff8000000000000, 0xfff8000000000123, 0x7ff0000000000001,
	1, 1<<63 | 1, 0x000fffffffffffff,
	0x0010000000000000, 0x7fefffffffffffff, 0xffefffffffffffff,
	0x3fefffffffffffff, 0x3ca0000000000000, 0x4340000000000000,
}

// ld80Edges are (significand, sign+exponent) pairs.
var ld80Edges = [][2]uint64{
	{0, 0}, {0, 0x8000}, // ±0
	{1 << 63, 0x3fff}, {1 << 63, 0xbfff}, {1 << 63, 0x4000}, // 1, -1, 2
	{1 << 63, 0x7fff}, {1 << 63, 0xffff}, // ±Inf
	{0xC000000000000000, 0x7fff}, {0xC000000000000001, 0xffff}, {0x8000000000000001, 0x7fff}, // NaNs
	{0, 0x7fff}, {0x4000000000000000, 0x7fff}, // pseudo-infinity, pseudo-NaN
	{0x4000000000000000, 0x3fff}, {0, 0x1234}, // unnormals
	{1, 0}, {1, 0x8000}, {0x7fffffffffffffff, 0}, // denormals
	{1 << 63, 0}, {0xffffffffffffffff, 0}, // pseudo-denormals
	{1 << 63, 1}, {0xffffffffffffffff, 0x7ffe}, {0xffffffffffffffff, 0xfffe}, // min normal, ±max
	{0xffffffffffffffff, 0x3ffe}, {1 << 63, 0x3fff - 64}, {1 << 63, 0x3fff + 64},
	{1 << 63, 0x2001}, {1 << 63, 0x5ffe}, // products near the ends of the range
}

func (g valueGen) float32Value() uint32 {
	switch g.r.IntN(4) {
	case 0:
		return float32Edges[g.r.IntN(len(float32Edges))]
	case 1: // small integers and halves: sums and products are often exact
		return math.Float32bits(float32(g.r.IntN(17)-8) / 2)
	case 2: // near the denormal boundary
		return g.r.Uint32()&0x80ffffff | uint32(g.r.IntN(3))<<23
	}
	return g.r.Uint32()
}

func (g valueGen) float64Value() uint64 {
	switch g.r.IntN(4) {
	case 0:
		return float64Edges[g.r.IntN(len(float64Edges))]
	case 1:
		return math.Float64bits(float64(g.r.IntN(17)-8) / 2)
	case 2:
		return g.r.Uint64()&0x800fffffffffffff | uint64(g.r.IntN(3))<<52
	}
	return g.r.Uint64()
}

// ld80Value returns 16 bytes' worth: significand and the high word (sign,
// exponent and, sometimes, non-zero padding).
func (g valueGen) ld80Value() (m, hi uint64) {
	switch g.r.IntN(6) {
	case 0:
		e := ld80Edges[g.r.IntN(len(ld80Edges))]
		m, hi = e[0], e[1]
	case 1:
		f := float64(g.r.IntN(17)-8) / 2
		m, hi = ld80FromFloat64(f)
	case 2: // near the denormal boundary
		m, hi = g.r.Uint64(), uint64(g.r.IntN(3))|uint64(g.r.IntN(2))<<15
		if hi&0x7fff != 0 {
			m |= 1 << 63
		}
	case 3: // near overflow
		m, hi = g.r.Uint64()|1<<63, uint64(0x7ffe-g.r.IntN(3))|uint64(g.r.IntN(2))<<15
	case 4: // moderate exponents, so that sums of two values interact
		m, hi = g.r.Uint64()|1<<63, uint64(0x3fff-70+g.r.IntN(140))|uint64(g.r.IntN(2))<<15
	default:
		m, hi = g.r.Uint64(), g.r.Uint64()&0xffff
		if hi&0x7fff != 0 && g.r.IntN(8) != 0 {
			m |= 1 << 63
		}
	}
	if g.r.IntN(8) == 0 {
		hi |= g.r.Uint64() << 16 // padding that must be ignored
	}
	return m, hi
}

// ld80FromFloat64 converts exactly.
func ld80FromFloat64(f float64) (m, hi uint64) {
	b := math.Float64bits(f)
	sign := b >> 63 << 15
	if f == 0 {
		return 0, sign
	}
	fr, exp := math.Frexp(math.Abs(f)) // f = fr * 2^exp, fr in [0.5, 1)
	m = uint64(fr*(1<<53)) << 11
	return m, sign | uint64(exp-1+16383)
}

// fill writes count random elements of dt into b.
func (g valueGen) fill(dt Datatype, b []byte) {
	size := Size(dt)
	for off := 0; off < len(b); off += size {
		e := b[off : off+size]
		switch dt {
		case FLOAT:
			binary.LittleEndian.PutUint32(e, g.float32Value())
		case DOUBLE:
			binary.LittleEndian.PutUint64(e, g.float64Value())
		case FLOAT_COMPLEX:
			binary.LittleEndian.PutUint32(e, g.float32Value())
			binary.LittleEndian.PutUint32(e[4:], g.float32Value())
		case DOUBLE_COMPLEX:
			binary.LittleEndian.PutUint64(e, g.float64Value())
			binary.LittleEndian.PutUint64(e[8:], g.float64Value())
		case LONG_DOUBLE, LONG_DOUBLE_COMPLEX:
			for p := 0; p < size; p += 16 {
				m, hi := g.ld80Value()
				binary.LittleEndian.PutUint64(e[p:], m)
				binary.LittleEndian.PutUint64(e[p+8:], hi)
			}
		default:
			g.intEdge(size, e)
		}
	}
}

// fillRelated fills b with values chosen to relate to target: often equal
// to it element by element (so that CSWAP hits), otherwise random.
func (g valueGen) fillRelated(dt Datatype, b, target []byte) {
	g.fill(dt, b)
	size := Size(dt)
	for off := 0; off < len(b); off += size {
		if g.r.IntN(3) == 0 {
			copy(b[off:off+size], target[off:off+size])
		}
	}
}
