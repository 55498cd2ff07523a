//go:build amd64

package atomic

import (
	"encoding/binary"
	"testing"

	"github.com/xdpfab/xdpfab/atomic/internal/x87"
)

// TestLongDoubleMatchesX87 checks the software extended-precision add and
// multiply bit for bit against the CPU's own FADDP and FMULP on random
// values and edge cases (denormals, pseudo-denormals, unnormals, overflow,
// cancellation). NaN results only have to be NaN: the engine stores the
// canonical quiet NaN where the x87 produces its "indefinite" or
// propagates a payload.
func TestLongDoubleMatchesX87(t *testing.T) {
	cw := x87.ControlWord()
	if cw&0x0f00 != 0x0300 {
		t.Skipf("x87 control word %#04x: not 64-bit precision, round to nearest", cw)
	}
	iters := 400000
	if testing.Short() {
		iters = 20000
	}
	g := newGen(87)
	enc := func(x ld80) (b [10]byte) {
		binary.LittleEndian.PutUint64(b[:], x.m)
		binary.LittleEndian.PutUint16(b[8:], x.se)
		return b
	}
	dec := func(b [10]byte) ld80 {
		return ld80{m: binary.LittleEndian.Uint64(b[:]), se: binary.LittleEndian.Uint16(b[8:])}
	}
	var bad int
	for i := range iters {
		am, ahi := g.ld80Value()
		bm, bhi := g.ld80Value()
		if i%4 == 0 { // close exponents: carries and cancellation
			bhi = ahi&0xffff ^ uint64(g.r.IntN(3))
			bm = am ^ g.r.Uint64()>>uint(g.r.IntN(64))
		}
		if i%4 == 1 { // exponents about 64 apart, sparse significands: sticky bits decide ties
			ahi = uint64(0x3fff+g.r.IntN(200)-100) | ahi&0x8000
			am = 1<<63 | g.r.Uint64()&1<<uint(g.r.IntN(64))
			bhi = ahi&0x8000 ^ uint64(g.r.IntN(2))<<15 | (ahi&0x7fff - uint64(58+g.r.IntN(12)))
			bm = 1<<63 | 1<<uint(g.r.IntN(64)) | uint64(g.r.IntN(2))
		}
		a, b := ld80{m: am, se: uint16(ahi)}, ld80{m: bm, se: uint16(bhi)}
		ab, bb := enc(a), enc(b)
		for _, op := range []struct {
			name string
			soft func(a, b ld80) ld80
			hard func(a, b, r *[10]byte)
			ref  Op
		}{{"add", ldAdd, x87.Add, SUM}, {"mul", ldMul, x87.Mul, PROD}} {
			var rb [10]byte
			op.hard(&ab, &bb, &rb)
			want := dec(rb)
			got := op.soft(a, b)
			if i%8 == 0 { // the math/big model, which other packages' tests rely on
				var t16, b16 [16]byte
				copy(t16[:], ab[:])
				copy(b16[:], bb[:])
				nt, _, err := Reference(LONG_DOUBLE, op.ref, t16[:], b16[:], nil)
				if err != nil {
					t.Fatal(err)
				}
				r := dec([10]byte(nt))
				if (want.class() == ldNaNClass) != (r.class() == ldNaNClass) ||
					(want.class() != ldNaNClass && r != want) {
					t.Errorf("reference %s(%04x:%016x, %04x:%016x) = %04x:%016x, x87 gives %04x:%016x",
						op.name, a.se, a.m, b.se, b.m, r.se, r.m, want.se, want.m)
					bad++
				}
			}
			if want.class() == ldNaNClass {
				if got.class() != ldNaNClass {
					t.Errorf("%s(%04x:%016x, %04x:%016x) = %04x:%016x, x87 gives NaN %04x:%016x",
						op.name, a.se, a.m, b.se, b.m, got.se, got.m, want.se, want.m)
					bad++
				}
				continue
			}
			if got != want {
				t.Errorf("%s(%04x:%016x, %04x:%016x) = %04x:%016x, x87 gives %04x:%016x",
					op.name, a.se, a.m, b.se, b.m, got.se, got.m, want.se, want.m)
				bad++
			}
		}
		if bad > 10 {
			t.FailNow()
		}
	}
}

// TestLongDoubleCompareMatchesX87 checks the ordering behind MIN, MAX and
// the CSWAPs on long doubles against FUCOMIP: -0 == +0, NaNs and invalid
// encodings unordered, pseudo-denormals by value.
func TestLongDoubleCompareMatchesX87(t *testing.T) {
	g := newGen(88)
	enc := func(x ld80) (b [10]byte) {
		binary.LittleEndian.PutUint64(b[:], x.m)
		binary.LittleEndian.PutUint16(b[8:], x.se)
		return b
	}
	for i := range 200000 {
		am, ahi := g.ld80Value()
		bm, bhi := g.ld80Value()
		if i%3 == 0 { // near-equal pairs
			bm, bhi = am^uint64(g.r.IntN(2)), ahi^uint64(g.r.IntN(2))<<15
		}
		a, b := ld80{m: am, se: uint16(ahi)}, ld80{m: bm, se: uint16(bhi)}
		ab, bb := enc(a), enc(b)
		less, equal, unordered := x87.Compare(&ab, &bb)
		c, ok := ldCmp(a, b)
		want := 1
		switch {
		case equal:
			want = 0
		case less:
			want = -1
		}
		if ok == unordered || (ok && c != want) {
			t.Fatalf("ldCmp(%04x:%016x, %04x:%016x) = %d, %v; x87 less=%v equal=%v unordered=%v",
				a.se, a.m, b.se, b.m, c, ok, less, equal, unordered)
		}
	}
}
