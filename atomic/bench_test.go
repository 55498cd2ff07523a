package atomic

import (
	"fmt"
	"testing"
)

// BenchmarkExecute runs full-packet requests (the valid count of
// elements) and single-element ones, and reports the cost per element.
func BenchmarkExecute(b *testing.B) {
	for _, bc := range []struct {
		c   Class
		dt  Datatype
		op  Op
		off int // misalignment, to time the locked path of a word type
	}{
		{Base, UINT64, SUM, 0},
		{Fetch, UINT64, SUM, 0},
		{Base, UINT64, SUM, 4},
		{Compare, UINT64, CSWAP, 0},
		{Fetch, UINT32, MAX, 0},
		{Base, UINT8, SUM, 0},
		{Fetch, INT128, SUM, 0},
		{Compare, UINT128, CSWAP, 0},
		{Fetch, DOUBLE, SUM, 0},
		{Compare, DOUBLE, CSWAP_LE, 0},
		{Fetch, FLOAT, PROD, 0},
		{Fetch, DOUBLE_COMPLEX, PROD, 0},
		{Fetch, LONG_DOUBLE, SUM, 0},
		{Fetch, LONG_DOUBLE, PROD, 0},
		{Fetch, LONG_DOUBLE_COMPLEX, PROD, 0},
	} {
		limit, err := defaultEngine.count(bc.c, bc.dt, bc.op)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, limit} {
			name := fmt.Sprintf("%v/%v/%v/n=%d", bc.c, bc.dt, bc.op, n)
			if bc.off != 0 {
				name += "/unaligned"
			}
			b.Run(name, func(b *testing.B) {
				size := Size(bc.dt)
				tgt := alignedAt(n*size, bc.off)
				g := newGen(1)
				opnd := make([]byte, n*size)
				cmp := make([]byte, n*size)
				res := make([]byte, n*size)
				g.fill(bc.dt, tgt)
				g.fill(bc.dt, opnd)
				copy(cmp, tgt)
				if bc.c == Compare { // every compare succeeds and stores
					copy(opnd, tgt)
				}
				if bc.c != Compare {
					cmp = nil
				}
				if bc.c == Base {
					res = nil
				}
				b.ReportAllocs()
				b.SetBytes(int64(n * size))
				for b.Loop() {
					if err := Execute(bc.c, bc.dt, bc.op, tgt, opnd, cmp, res); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/elem")
			})
		}
	}
}

// BenchmarkContendedSum has every goroutine add into the same uint64 and
// the same long double: the cost of contention on the CAS loop and on a
// stripe lock.
func BenchmarkContendedSum(b *testing.B) {
	for _, bc := range []struct {
		dt  Datatype
		one []byte
	}{{UINT64, u64(1)}, {LONG_DOUBLE, ldf(1)}} {
		b.Run(bc.dt.String(), func(b *testing.B) {
			tgt := alignedAt(len(bc.one), 0)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := Execute(Base, bc.dt, SUM, tgt, bc.one, nil, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
