package atomic

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// Little-endian element builders for hand-written cases.

func i8(v int8) []byte { return []byte{byte(v)} }
func u16(v uint16) []byte {
	return binary.LittleEndian.AppendUint16(nil, v)
}
func i32(v int32) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(v)) }
func i64(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }
func u64(v uint64) []byte {
	return binary.LittleEndian.AppendUint64(nil, v)
}
func f32(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }
func f32bits(b uint32) []byte {
	return binary.LittleEndian.AppendUint32(nil, b)
}
func f64(v float64) []byte { return binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)) }
func c64(re, im float32) []byte {
	return append(f32(re), f32(im)...)
}
func c128(re, im float64) []byte { return append(f64(re), f64(im)...) }

// i128 is hi:lo, two's complement.
func i128(hi, lo uint64) []byte { return append(u64(lo), u64(hi)...) }

// ld builds a long double from significand and sign+exponent, with
// optional padding.
func ld(m uint64, se uint16, pad ...byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, m)
	b = binary.LittleEndian.AppendUint16(b, se)
	p := make([]byte, 6)
	copy(p, pad)
	return append(b, p...)
}

func ldf(f float64) []byte {
	m, hi := ld80FromFloat64(f)
	return ld(m, uint16(hi))
}

func concat(bs ...[]byte) (out []byte) {
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

type semCase struct {
	name                string
	dt                  Datatype
	op                  Op
	target, buf, cmp    []byte
	wantTarget, wantOld []byte // wantOld nil: the target before
}

func TestSemanticsByHand(t *testing.T) {
	nan32 := f32bits(0x7fc00000)
	cases := []semCase{
		// Comparison directions, compare operand on the left.
		{"CSWAP_LE swaps when compare <= target", INT32, CSWAP_LE, i32(5), i32(9), i32(3), i32(9), nil},
		{"CSWAP_LE equal swaps", INT32, CSWAP_LE, i32(5), i32(9), i32(5), i32(9), nil},
		{"CSWAP_LE keeps when compare > target", INT32, CSWAP_LE, i32(5), i32(9), i32(7), i32(5), nil},
		{"CSWAP_LT equal keeps", INT32, CSWAP_LT, i32(5), i32(9), i32(5), i32(5), nil},
		{"CSWAP_LT swaps", INT32, CSWAP_LT, i32(5), i32(9), i32(-4), i32(9), nil},
		{"CSWAP_GE swaps when compare >= target", INT32, CSWAP_GE, i32(5), i32(9), i32(7), i32(9), nil},
		{"CSWAP_GE keeps", INT32, CSWAP_GE, i32(5), i32(9), i32(3), i32(5), nil},
		{"CSWAP_GT equal keeps", INT32, CSWAP_GT, i32(5), i32(9), i32(5), i32(5), nil},
		{"CSWAP equal", INT64, CSWAP, i64(-7), i64(1), i64(-7), i64(1), nil},
		{"CSWAP unequal", INT64, CSWAP, i64(-7), i64(1), i64(7), i64(-7), nil},
		{"CSWAP_NE unequal", INT64, CSWAP_NE, i64(-7), i64(1), i64(7), i64(1), nil},
		{"signed order", INT8, CSWAP_GT, i8(1), i8(2), i8(-1), i8(1), nil},
		{"unsigned order", UINT8, CSWAP_GT, []byte{1}, []byte{2}, []byte{0xff}, []byte{2}, nil},
		{"MIN signed", INT8, MIN, i8(1), i8(-1), nil, i8(-1), nil},
		{"MIN unsigned", UINT8, MIN, []byte{1}, []byte{0xff}, nil, []byte{1}, nil},
		{"MAX signed 128", INT128, MAX, i128(0, 1), i128(math.MaxUint64, math.MaxUint64), nil, i128(0, 1), nil},
		{"MAX unsigned 128", UINT128, MAX, i128(0, 1), i128(1<<63, 0), nil, i128(1<<63, 0), nil},
		{"CSWAP_LE 128 high words", INT128, CSWAP_LE, i128(1, 0), i128(0, 9), i128(0, math.MaxUint64), i128(0, 9), nil},
		// MSWAP and the logical ops as the page writes them.
		{"MSWAP", UINT16, MSWAP, u16(0xAAAA), u16(0x1234), u16(0x00FF), u16(0xAA34), nil},
		{"MSWAP 128", UINT128, MSWAP, i128(0xAAAA, 0xAAAA), i128(0x1234, 0x1234), i128(0xFF00, 0x00FF), i128(0x12AA, 0xAA34), nil},
		{"LXOR 0 0", INT32, LXOR, i32(0), i32(0), nil, i32(0), nil},
		{"LXOR x 0", INT32, LXOR, i32(5), i32(0), nil, i32(1), nil},
		{"LXOR 0 x", INT32, LXOR, i32(0), i32(-3), nil, i32(1), nil},
		{"LXOR x y", INT32, LXOR, i32(5), i32(7), nil, i32(0), nil},
		{"LOR", UINT64, LOR, u64(0), u64(42), nil, u64(1), nil},
		{"LAND", UINT64, LAND, u64(3), u64(42), nil, u64(1), nil},
		{"LAND 0", UINT64, LAND, u64(0), u64(42), nil, u64(0), nil},
		{"BAND", UINT64, BAND, u64(0xF0F0), u64(0xFF00), nil, u64(0xF000), nil},
		{"BOR", UINT64, BOR, u64(0xF0F0), u64(0xFF00), nil, u64(0xFFF0), nil},
		{"BXOR", UINT64, BXOR, u64(0xF0F0), u64(0xFF00), nil, u64(0x0FF0), nil},
		{"LXOR 128 high bit only", INT128, LXOR, i128(1, 0), i128(0, 0), nil, i128(0, 1), nil},
		{"WRITE", INT16, ATOMIC_WRITE, u16(1), u16(0xBEEF), nil, u16(0xBEEF), nil},
		// Wrapping arithmetic.
		{"SUM wraps", UINT8, SUM, []byte{250}, []byte{10}, nil, []byte{4}, nil},
		{"SUM overflows signed", INT64, SUM, i64(math.MaxInt64), i64(1), nil, i64(math.MinInt64), nil},
		{"PROD 128 negative", INT128, PROD, i128(math.MaxUint64, -3&math.MaxUint64), i128(0, 5), nil, i128(math.MaxUint64, -15&math.MaxUint64), nil},
		{"PROD 128 2^64*2^64", UINT128, PROD, i128(1, 0), i128(1, 0), nil, i128(0, 0), nil},
		{"PROD 128 (2^64+1)(2^64-1)", UINT128, PROD, i128(1, 1), i128(0, math.MaxUint64), nil, i128(math.MaxUint64, math.MaxUint64), nil},
		{"SUM 128 carry", UINT128, SUM, i128(0, math.MaxUint64), i128(0, 1), nil, i128(1, 0), nil},
		// IEEE floats.
		{"MIN NaN operand ignored", FLOAT, MIN, f32(1), nan32, nil, f32(1), nil},
		{"MIN NaN target sticks", FLOAT, MIN, nan32, f32(1), nil, nan32, nil},
		{"MAX -0 does not replace +0", FLOAT, MAX, f32(0), f32(float32(math.Copysign(0, -1))), nil, f32(0), nil},
		{"CSWAP -0 equals +0", FLOAT, CSWAP, f32(0), f32(7), f32(float32(math.Copysign(0, -1))), f32(7), nil},
		{"CSWAP NaN never equal", FLOAT, CSWAP, nan32, f32(7), nan32, nan32, nil},
		{"CSWAP_NE NaN always swaps", FLOAT, CSWAP_NE, nan32, f32(7), nan32, f32(7), nil},
		{"CSWAP_GE NaN never", DOUBLE, CSWAP_GE, f64(1), f64(7), f64(math.NaN()), f64(1), nil},
		{"SUM inf-inf canonical NaN", FLOAT, SUM, f32(float32(math.Inf(1))), f32(float32(math.Inf(-1))), nil, nan32, nil},
		{"SUM NaN payload not kept", DOUBLE, SUM, u64(0xfff8000000000123), f64(1), nil, u64(0x7ff8000000000000), nil},
		{"PROD overflow", FLOAT, PROD, f32(1e30), f32(1e30), nil, f32(float32(math.Inf(1))), nil},
		{"PROD denormal", DOUBLE, PROD, f64(0x1p-1000), f64(0x1p-70), nil, f64(0x1p-1070), nil},
		{"SUM 0.1+0.2", DOUBLE, SUM, f64(0.1), f64(0.2), nil, f64(0.30000000000000004), nil},
		{"SUM single precision", FLOAT, SUM, f32(16777216), f32(1), nil, f32(16777216), nil},
		{"SUM -0 + -0", DOUBLE, SUM, f64(math.Copysign(0, -1)), f64(math.Copysign(0, -1)), nil, f64(math.Copysign(0, -1)), nil},
		{"SUM x + -x is +0", DOUBLE, SUM, f64(3), f64(-3), nil, f64(0), nil},
		{"LOR NaN is true", FLOAT, LOR, nan32, f32(0), nil, f32(1), nil},
		{"LAND -0 is false", FLOAT, LAND, f32(float32(math.Copysign(0, -1))), f32(1), nil, f32(0), nil},
		{"WRITE keeps NaN payload", DOUBLE, ATOMIC_WRITE, f64(1), u64(0x7ff0000000000001), nil, u64(0x7ff0000000000001), nil},
		// Complex.
		{"complex64 PROD", FLOAT_COMPLEX, PROD, c64(1, 2), c64(3, 4), nil, c64(-5, 10), nil},
		{"complex128 SUM", DOUBLE_COMPLEX, SUM, c128(1, 2), c128(3, -4), nil, c128(4, -2), nil},
		{"complex LOR imaginary only", DOUBLE_COMPLEX, LOR, c128(0, 2), c128(0, 0), nil, c128(1, 0), nil},
		{"complex LXOR", FLOAT_COMPLEX, LXOR, c64(0, 2), c64(1, 0), nil, c64(0, 0), nil},
		{"complex CSWAP -0", DOUBLE_COMPLEX, CSWAP, c128(1, 0), c128(9, 9), c128(1, math.Copysign(0, -1)), c128(9, 9), nil},
		{"complex CSWAP_NE", FLOAT_COMPLEX, CSWAP_NE, c64(1, 2), c64(9, 9), c64(1, 2), c64(1, 2), nil},
		// Long double: exact in 64 bits, not through float64.
		{"ld 1 + 2^-63 exact", LONG_DOUBLE, SUM, ldf(1), ldf(0x1p-63), nil, ld(1<<63|1, 0x3fff), nil},
		{"ld 1 + 2^-64 ties to even", LONG_DOUBLE, SUM, ldf(1), ldf(0x1p-64), nil, ldf(1), nil},
		{"ld (1+2^-63) + 2^-64 ties up", LONG_DOUBLE, SUM, ld(1<<63|1, 0x3fff), ldf(0x1p-64), nil, ld(1<<63|2, 0x3fff), nil},
		{"ld PROD", LONG_DOUBLE, PROD, ldf(1.5), ldf(-1.5), nil, ldf(-2.25), nil},
		{"ld PROD beyond double range", LONG_DOUBLE, PROD, ld(1<<63, 0x3fff+1000), ld(1<<63, 0x3fff+1000), nil, ld(1<<63, 0x3fff+2000), nil},
		{"ld PROD overflow", LONG_DOUBLE, PROD, ld(1<<63, 0x7000), ld(1<<63, 0x7000), nil, ld(1<<63, 0x7fff), nil},
		{"ld min denormal", LONG_DOUBLE, PROD, ld(1<<63, 1), ld(1<<63, 0x3fff-63), nil, ld(1, 0), nil},
		{"ld half the min denormal ties to +0", LONG_DOUBLE, PROD, ld(1, 0), ldf(0.5), nil, ldf(0), nil},
		{"ld 3/4 of the min denormal rounds up", LONG_DOUBLE, PROD, ld(1, 0), ldf(0.75), nil, ld(1, 0), nil},
		{"ld -1/4 of the min denormal is -0", LONG_DOUBLE, PROD, ld(1, 0), ldf(-0.25), nil, ld(0, 0x8000), nil},
		{"ld 3/2 of the min denormal ties to even 2", LONG_DOUBLE, PROD, ld(1, 0), ldf(1.5), nil, ld(2, 0), nil},
		{"ld denormal sum carries into normal", LONG_DOUBLE, SUM, ld(0x7fffffffffffffff, 0), ld(1, 0), nil, ld(1<<63, 1), nil},
		{"double half min denormal ties to +0", DOUBLE, PROD, u64(1), f64(0.5), nil, f64(0), nil},
		{"double 3/4 min denormal rounds up", DOUBLE, PROD, u64(1), f64(0.75), nil, u64(1), nil},
		{"float 3/2 min denormal ties to even", FLOAT, PROD, f32bits(1), f32(1.5), nil, f32bits(2), nil},
		{"ld SUM zeroes padding", LONG_DOUBLE, SUM, ld(1<<63, 0x3fff, 1, 2, 3), ldf(0), nil, ld(1<<63, 0x3fff), nil},
		{"ld WRITE keeps padding", LONG_DOUBLE, ATOMIC_WRITE, ldf(1), ld(1<<63, 0x4000, 7, 7), nil, ld(1<<63, 0x4000, 7, 7), nil},
		{"ld MIN", LONG_DOUBLE, MIN, ldf(2), ldf(-3), nil, ldf(-3), nil},
		{"ld MIN NaN ignored", LONG_DOUBLE, MIN, ldf(2), ld(0xC000000000000000, 0xffff), nil, ldf(2), nil},
		{"ld unnormal is NaN", LONG_DOUBLE, SUM, ld(0x4000000000000000, 0x3fff), ldf(1), nil, ld(0xC000000000000000, 0x7fff), nil},
		{"ld pseudo-denormal read as denormal", LONG_DOUBLE, CSWAP, ld(1<<63, 0), ldf(5), ld(1<<63, 1), ldf(5), nil},
		{"ld CSWAP_LE", LONG_DOUBLE, CSWAP_LE, ldf(5), ldf(9), ldf(3), ldf(9), nil},
		{"ld CSWAP_GT keeps", LONG_DOUBLE, CSWAP_GT, ldf(5), ldf(9), ldf(3), ldf(5), nil},
		{"ld LOR", LONG_DOUBLE, LOR, ldf(0), ld(1, 0), nil, ldf(1), nil},
		{"ld complex PROD", LONG_DOUBLE_COMPLEX, PROD, concat(ldf(1), ldf(2)), concat(ldf(3), ldf(4)), nil, concat(ldf(-5), ldf(10)), nil},
		{"ld complex CSWAP", LONG_DOUBLE_COMPLEX, CSWAP, concat(ldf(1), ldf(2)), concat(ldf(3), ldf(4)), concat(ldf(1), ldf(2)), concat(ldf(3), ldf(4)), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cls := Fetch
			if Compare.Has(tc.op) {
				cls = Compare
			}
			want := tc.wantOld
			if want == nil {
				want = tc.target
			}
			tgt := append([]byte(nil), tc.target...)
			res := make([]byte, len(tgt))
			require.NoError(t, Execute(cls, tc.dt, tc.op, tgt, tc.buf, tc.cmp, res))
			require.Equal(t, tc.wantTarget, tgt, "target")
			require.Equal(t, want, res, "fetched")
			// The model agrees with the hand-written expectation.
			rt, rf, err := Reference(tc.dt, tc.op, tc.target, tc.buf, tc.cmp)
			require.NoError(t, err)
			require.Equal(t, tc.wantTarget, rt, "reference target")
			require.Equal(t, want, rf, "reference fetched")
		})
	}
}

// TestReadIgnoresOperand: ATOMIC_READ takes no buf (NULL on the page) and
// leaves the target alone.
func TestReadIgnoresOperand(t *testing.T) {
	for dt := range Datatype(NumDatatypes) {
		size := Size(dt)
		tgt := make([]byte, 3*size)
		newGen(uint64(dt)).fill(dt, tgt)
		orig := append([]byte(nil), tgt...)
		res := make([]byte, len(tgt))
		require.NoError(t, Execute(Fetch, dt, ATOMIC_READ, tgt, nil, nil, res), "%v", dt)
		require.Equal(t, orig, tgt)
		require.Equal(t, orig, res)
		res2 := make([]byte, len(tgt))
		require.NoError(t, Execute(Fetch, dt, ATOMIC_READ, tgt, []byte{1, 2, 3}, nil, res2), "%v", dt)
		require.Equal(t, orig, res2)
		_, err := Valid(dt, ATOMIC_READ)
		require.ErrorIs(t, err, fi.EOPNOTSUPP) // not a base operation
	}
}
