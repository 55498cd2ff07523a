package atomic

import (
	"math"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// Enough rounds that goroutines on two cores really interleave; fewer
// under the race detector, which checks the same interleavings itself.
const goroutines = 8

var rounds = map[bool]int{false: 20000, true: 3000}[raceEnabled]

var intTypes = []Datatype{INT8, UINT8, INT16, UINT16, INT32, UINT32, INT64, UINT64, INT128, UINT128}

// leUint reads an element of up to 16 bytes as an unsigned number.
func leUint(b []byte) *big.Int {
	return leInt(b, false)
}

func expectCount(size int, n int64) *big.Int {
	mod := new(big.Int).Lsh(big.NewInt(1), uint(8*size))
	return new(big.Int).Mod(big.NewInt(n), mod)
}

func one(size, count int) []byte {
	b := make([]byte, size*count)
	for off := 0; off < len(b); off += size {
		b[off] = 1
	}
	return b
}

func parallel(n int, f func(g int)) {
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() { f(g) })
	}
	wg.Wait()
}

// TestConcurrentSum: many goroutines SUM 1 into the same elements of every
// integer type, at aligned and unaligned addresses, one and several
// elements per request; no increment may be lost.
func TestConcurrentSum(t *testing.T) {
	for _, dt := range intTypes {
		for _, off := range []int{0, 1} {
			size := Size(dt)
			const count = 3
			tgt := alignedAt(size*count, off)
			inc := one(size, count)
			parallel(goroutines, func(int) {
				for range rounds {
					if err := Execute(Base, dt, SUM, tgt, inc, nil, nil); err != nil {
						panic(err)
					}
				}
			})
			want := expectCount(size, int64(goroutines*rounds))
			for i := range count {
				got := leUint(tgt[i*size : (i+1)*size])
				require.Zero(t, want.Cmp(got), "%v offset %d element %d: %v, want %v", dt, off, i, got, want)
			}
		}
	}
}

// TestConcurrentCSWAPIncrement: increments built from ATOMIC_READ and
// CSWAP, retried until the swap happens (the fetched value tells), are
// exact under contention.
func TestConcurrentCSWAPIncrement(t *testing.T) {
	for _, dt := range intTypes {
		for _, off := range []int{0, 3} {
			size := Size(dt)
			tgt := alignedAt(size, off)
			inc := one(size, 1)
			parallel(goroutines, func(int) {
				old := make([]byte, size)
				next := make([]byte, size)
				fetched := make([]byte, size)
				for done := 0; done < rounds/4; {
					if err := Execute(Fetch, dt, ATOMIC_READ, tgt, nil, nil, old); err != nil {
						panic(err)
					}
					// next = old + 1, computed with the engine on a private copy.
					copy(next, old)
					if err := Execute(Base, dt, SUM, next, inc, nil, nil); err != nil {
						panic(err)
					}
					if err := Execute(Compare, dt, CSWAP, tgt, next, old, fetched); err != nil {
						panic(err)
					}
					if string(fetched) == string(old) {
						done++
					}
				}
			})
			want := expectCount(size, int64(goroutines*(rounds/4)))
			got := leUint(tgt)
			require.Zero(t, want.Cmp(got), "%v offset %d: %v, want %v", dt, off, got, want)
		}
	}
}

// TestConcurrentWithSyncAtomic: engine SUMs and CSWAP increments race with
// plain Go code using sync/atomic on the same aligned 4- and 8-byte words;
// the engine's compare-and-swap loops keep every update.
func TestConcurrentWithSyncAtomic(t *testing.T) {
	t.Run("uint64", func(t *testing.T) {
		for _, dt := range []Datatype{UINT64, INT64} {
			tgt := alignedAt(8, 0)
			word := (*uint64)(unsafe.Pointer(&tgt[0]))
			require.Zero(t, uintptr(unsafe.Pointer(word))%8)
			inc := u64(3)
			parallel(goroutines, func(g int) {
				cur, next, fetched := make([]byte, 8), make([]byte, 8), make([]byte, 8)
				for range rounds {
					switch g % 3 {
					case 0:
						atomic.AddUint64(word, 5)
					case 1:
						if err := Execute(Base, dt, SUM, tgt, inc, nil, nil); err != nil {
							panic(err)
						}
					case 2: // +7 by CSWAP, retried
						for {
							if err := Execute(Fetch, dt, ATOMIC_READ, tgt, nil, nil, cur); err != nil {
								panic(err)
							}
							le.PutUint64(next, le.Uint64(cur)+7)
							if err := Execute(Compare, dt, CSWAP, tgt, next, cur, fetched); err != nil {
								panic(err)
							}
							if string(fetched) == string(cur) {
								break
							}
						}
					}
				}
			})
			var want uint64
			for g := range goroutines {
				want += uint64(rounds) * []uint64{5, 3, 7}[g%3]
			}
			require.Equal(t, want, atomic.LoadUint64(word), "%v", dt)
		}
	})
	t.Run("uint32", func(t *testing.T) {
		tgt := alignedAt(4, 4)
		word := (*uint32)(unsafe.Pointer(&tgt[0]))
		inc := i32(3)
		parallel(goroutines, func(g int) {
			fetched := make([]byte, 4)
			for range rounds {
				if g%2 == 0 {
					atomic.AddUint32(word, 5)
				} else if err := Execute(Fetch, UINT32, SUM, tgt, inc, nil, fetched); err != nil {
					panic(err)
				}
			}
		})
		require.Equal(t, uint32(goroutines/2*rounds*8), atomic.LoadUint32(word))
	})
	t.Run("double bits", func(t *testing.T) {
		// A local CAS loop on a float64's bits and the engine's SUM.
		tgt := alignedAt(8, 0)
		word := (*uint64)(unsafe.Pointer(&tgt[0]))
		inc := f64(1)
		parallel(goroutines, func(g int) {
			for range rounds {
				if g%2 == 0 {
					for {
						old := atomic.LoadUint64(word)
						nv := f64(math.Float64frombits(old) + 2)
						if atomic.CompareAndSwapUint64(word, old, le.Uint64(nv)) {
							break
						}
					}
				} else if err := Execute(Base, DOUBLE, SUM, tgt, inc, nil, nil); err != nil {
					panic(err)
				}
			}
		})
		require.Equal(t, float64(goroutines/2*rounds*3), math.Float64frombits(atomic.LoadUint64(word)))
	})
}

// TestConcurrentLockedTypes: the locked path (long double, complex, 128-bit
// and unaligned words) keeps exact sums of small integers.
func TestConcurrentLockedTypes(t *testing.T) {
	total := float64(goroutines * rounds)
	for _, tc := range []struct {
		dt   Datatype
		one  []byte
		want []byte
	}{
		{LONG_DOUBLE, ldf(1), ldf(total)},
		{LONG_DOUBLE_COMPLEX, concat(ldf(1), ldf(-2)), concat(ldf(total), ldf(-2*total))},
		{DOUBLE_COMPLEX, c128(1, -2), c128(total, -2*total)},
		{FLOAT_COMPLEX, c64(1, -2), c64(float32(total), float32(-2*total))},
		{DOUBLE, f64(1), f64(total)},
		{FLOAT, f32(1), f32(float32(total))},
	} {
		for _, off := range []int{0, 1} {
			tgt := alignedAt(len(tc.one), off)
			parallel(goroutines, func(int) {
				for range rounds {
					if err := Execute(Base, tc.dt, SUM, tgt, tc.one, nil, nil); err != nil {
						panic(err)
					}
				}
			})
			require.Equal(t, tc.want, tgt, "%v offset %d", tc.dt, off)
		}
	}
}
