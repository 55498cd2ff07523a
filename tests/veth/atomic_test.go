package veth

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// valueGen makes atomic operands: edge values of each datatype half of the
// time, random ones otherwise, from a seeded generator.
type valueGen struct{ rng *rand.Rand }

// Edge values by element format, as raw little-endian bits.
var (
	float32Edges = []uint32{0, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000,
		0x7fc00000, 0xffc00001, 0x7fa00001, 0x00000001, 0x80800000, 0x7f7fffff, 0xff7fffff}
	float64Edges = []uint64{0, 1 << 63, math.Float64bits(1), math.Float64bits(-1), math.Float64bits(math.Inf(1)),
		math.Float64bits(math.Inf(-1)), 0x7ff8000000000000, 0xfff8000000000001, 0x7ff4000000000001, 1,
		0x8010000000000000, math.Float64bits(math.MaxFloat64), math.Float64bits(-math.MaxFloat64)}
	// x86 80-bit extended: significand (explicit integer bit), sign|exponent.
	extendedEdges = [][2]uint64{{0, 0}, {0, 0x8000}, {1 << 63, 0x3fff}, {1 << 63, 0xbfff}, {1 << 63, 0x7fff},
		{1 << 63, 0xffff}, {0xc000000000000000, 0x7fff}, {0xc000000000000001, 0xffff}, {1, 0},
		{^uint64(0), 0x7ffe}, {1 << 63, 1}}
)

// element writes one random or edge element of dt into b.
func (g valueGen) element(dt fatomic.Datatype, b []byte) {
	edge := g.rng.IntN(2) == 0
	switch dt {
	case fatomic.FLOAT:
		v := math.Float32bits(float32(g.rng.NormFloat64() * 1000))
		if edge {
			v = float32Edges[g.rng.IntN(len(float32Edges))]
		}
		binary.LittleEndian.PutUint32(b, v)
	case fatomic.DOUBLE:
		v := math.Float64bits(g.rng.NormFloat64() * 1e6)
		if edge {
			v = float64Edges[g.rng.IntN(len(float64Edges))]
		}
		binary.LittleEndian.PutUint64(b, v)
	case fatomic.LONG_DOUBLE:
		v := [2]uint64{g.rng.Uint64() | 1<<63, 0x3fc0 + g.rng.Uint64N(0x80) | uint64(g.rng.IntN(2))<<15}
		if edge {
			v = extendedEdges[g.rng.IntN(len(extendedEdges))]
		}
		clear(b)
		binary.LittleEndian.PutUint64(b, v[0])
		binary.LittleEndian.PutUint16(b[8:], uint16(v[1]))
	case fatomic.FLOAT_COMPLEX, fatomic.DOUBLE_COMPLEX, fatomic.LONG_DOUBLE_COMPLEX:
		part := map[fatomic.Datatype]fatomic.Datatype{fatomic.FLOAT_COMPLEX: fatomic.FLOAT,
			fatomic.DOUBLE_COMPLEX: fatomic.DOUBLE, fatomic.LONG_DOUBLE_COMPLEX: fatomic.LONG_DOUBLE}[dt]
		h := len(b) / 2
		g.element(part, b[:h])
		g.element(part, b[h:])
	default: // integers, 1 to 16 bytes
		for i := range b {
			b[i] = byte(g.rng.Uint32())
		}
		if edge {
			top := len(b) - 1
			switch g.rng.IntN(6) {
			case 0: // 0
				clear(b)
			case 1: // 1
				clear(b)
				b[0] = 1
			case 2: // -1, the unsigned maximum
				for i := range b {
					b[i] = 0xff
				}
			case 3: // the signed minimum
				clear(b)
				b[top] = 0x80
			case 4: // the signed maximum
				for i := range b {
					b[i] = 0xff
				}
				b[top] = 0x7f
			case 5: // small: a carry into the top half of wide types
				clear(b)
				b[0] = byte(g.rng.IntN(4))
			}
		}
	}
}

// values returns count elements of dt.
func (g valueGen) values(dt fatomic.Datatype, count int) []byte {
	size := fatomic.Size(dt)
	b := make([]byte, count*size)
	for i := 0; i < len(b); i += size {
		g.element(dt, b[i:i+size])
	}
	return b
}

// compareValues returns compare operands: half the elements equal to the
// target's, so the equality-based swaps happen as often as not.
func (g valueGen) compareValues(dt fatomic.Datatype, target []byte) []byte {
	size := fatomic.Size(dt)
	c := g.values(dt, len(target)/size)
	for i := 0; i < len(c); i += size {
		if g.rng.IntN(2) == 0 {
			copy(c[i:i+size], target[i:i+size])
		}
	}
	return c
}

// validCount is the valid call of class c on ep.
func validCount(ep *fabric.Endpoint, c fatomic.Class, dt fatomic.Datatype, op fatomic.Op) (int, error) {
	switch c {
	case fatomic.Fetch:
		return ep.FetchAtomicValid(dt, op)
	case fatomic.Compare:
		return ep.CompareAtomicValid(dt, op)
	}
	return ep.AtomicValid(dt, op)
}

func TestEveryAtomic(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		net := newNet(t, tc, netOpts{})
		a, b := net.nodes[sideA][0], net.target()
		peer, key := a.peers[0], b.region.Key()
		g := valueGen{rand.New(rand.NewPCG(1, 2))}
		start := time.Now()
		const maxFailures = 20
		var cases, pairs [3]int
		failures := 0
		for _, c := range []fatomic.Class{fatomic.Base, fatomic.Fetch, fatomic.Compare} {
			for dt := range fatomic.Datatype(fatomic.NumDatatypes) {
				for op := range fatomic.Op(fatomic.NumOps) {
					if !c.Has(op) {
						continue
					}
					if !fatomic.Supported(dt, op) {
						_, err := validCount(a.ep, c, dt, op)
						require.ErrorIs(t, err, fi.EOPNOTSUPP, "%v valid for unsupported %v %v", c, dt, op)
						continue
					}
					pairs[c]++
					limit, err := validCount(a.ep, c, dt, op)
					require.NoError(t, err, "%v valid for %v %v", c, dt, op)
					require.GreaterOrEqual(t, limit, 1)
					counts := []int{1}
					if (int(dt)+int(op))%3 == 0 { // the largest count for a third of the pairs
						counts = append(counts, limit)
					}
					for _, count := range counts {
						cases[c]++
						name := fmt.Sprintf("%v %v %v count %d", c, dt, op, count)
						if err := atomicCase(t, a, peer, key, g, c, dt, op, count); err != nil {
							failures++
							t.Errorf("%s: %v", name, err)
							if failures == maxFailures {
								t.Fatalf("stopping after %d failures", failures)
							}
						}
					}
				}
			}
		}
		t.Logf("pairs base/fetch/compare %v, cases %v, in %v", pairs, cases, time.Since(start))
		// Fetch takes every op but the compare ones, so fetch and compare
		// together reach each of the 262 supported pairs (atomic's doc).
		require.Equal(t, [3]int{152, 168, 94}, pairs, "pairs per class")
	})
}

// atomicCase sets the target to random contents by RMA write, applies one
// atomic of class c and checks the target contents (read back by RMA) and
// the fetched values against atomic.Reference. It reports mismatches as
// errors and fails t only when the datapath itself fails.
func atomicCase(t *testing.T, a *node, peer fi.Addr, key uint64, g valueGen, c fatomic.Class,
	dt fatomic.Datatype, op fatomic.Op, count int) error {
	t.Helper()
	size := fatomic.Size(dt)
	prev := g.values(dt, count)
	const off = 64 // an aligned offset past the start
	a.write(t, peer, off, prev, key)
	operand := g.values(dt, count)
	if op == fatomic.ATOMIC_READ {
		operand = nil // it takes none
	}
	var compare []byte
	result := make([]byte, count*size)
	var err error
	switch c {
	case fatomic.Base:
		err = a.ep.Atomic(operand, count, mr.Desc{}, peer, off, key, dt, op, "amo")
	case fatomic.Fetch:
		err = a.ep.FetchAtomic(operand, count, mr.Desc{}, result, mr.Desc{}, peer, off, key, dt, op, "amo")
	case fatomic.Compare:
		compare = g.compareValues(dt, prev)
		err = a.ep.CompareAtomic(operand, count, mr.Desc{}, compare, mr.Desc{}, result, mr.Desc{}, peer, off, key, dt, op, "amo")
	}
	require.NoError(t, err)
	require.Equal(t, "amo", waitComp(t, a.txCQ).Context)
	got := a.read(t, peer, off, count*size, key)
	want, fetched, err := fatomic.Reference(dt, op, prev, operand, compare)
	require.NoError(t, err)
	if i := firstDiff(want, got, size); i >= 0 {
		return fmt.Errorf("target element %d: got %x, want %x (before %x, operand %x, compare %x)", i,
			elem(got, i, size), elem(want, i, size), elem(prev, i, size), elem(operand, i, size), elem(compare, i, size))
	}
	if c != fatomic.Base {
		if i := firstDiff(fetched, result, size); i >= 0 {
			return fmt.Errorf("fetched element %d: got %x, want %x", i, elem(result, i, size), elem(fetched, i, size))
		}
	}
	return nil
}

// firstDiff returns the first element index where a and b differ, or -1.
func firstDiff(a, b []byte, size int) int {
	for i := 0; i < len(a); i += size {
		if string(a[i:i+size]) != string(b[i:i+size]) {
			return i / size
		}
	}
	if len(a) != len(b) {
		return len(a) / size
	}
	return -1
}

func elem(b []byte, i, size int) []byte {
	if (i+1)*size > len(b) {
		return nil
	}
	return b[i*size : (i+1)*size]
}
