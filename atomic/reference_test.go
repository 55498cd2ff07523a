package atomic

import (
	"bytes"
	"fmt"
	"testing"
)

// allPairs lists every (datatype, op) in a deterministic order.
func allPairs() (p [][2]uint32) {
	for dt := range NumDatatypes {
		for op := range NumOps {
			p = append(p, [2]uint32{uint32(dt), uint32(op)})
		}
	}
	return p
}

func classesOf(op Op) (cs []Class) {
	for _, c := range []Class{Base, Fetch, Compare} {
		if c.Has(op) {
			cs = append(cs, c)
		}
	}
	return cs
}

// alignedAt returns an n-byte slice whose first byte sits at offset off
// from an 8-byte (in practice 16-byte) boundary, to reach both the
// lock-free and the locked paths.
func alignedAt(n, off int) []byte {
	buf := make([]byte, n+off+16)
	return buf[off : off+n : off+n]
}

// checkAgainstReference runs one request through Execute and the model
// and compares target and result bytes.
func checkAgainstReference(t *testing.T, c Class, dt Datatype, op Op, target, operand, compare []byte, off int) {
	t.Helper()
	wantT, wantF, err := Reference(dt, op, target, operand, compare)
	if err != nil {
		t.Fatalf("%v %v %v: reference: %v", c, dt, op, err)
	}
	tgt := alignedAt(len(target), off)
	copy(tgt, target)
	var res []byte
	if c != Base {
		res = make([]byte, len(target))
	}
	cmp := compare
	if c != Compare {
		cmp = nil
	}
	if err := Execute(c, dt, op, tgt, operand, cmp, res); err != nil {
		t.Fatalf("%v %v %v: %v", c, dt, op, err)
	}
	if !bytes.Equal(tgt, wantT) {
		t.Fatalf("%v %v %v (offset %d): target\n  was     %x\n  operand %x\n  compare %x\n  got     %x\n  want    %x",
			c, dt, op, off, target, operand, compare, tgt, wantT)
	}
	if c != Base && !bytes.Equal(res, wantF) {
		t.Fatalf("%v %v %v: fetched %x, want %x", c, dt, op, res, wantF)
	}
}

// TestExecuteMatchesReference is the property test: every supported pair
// in every class that lists it, random values with the types' edge cases,
// counts from 1 to the valid count, elements aligned and not.
func TestExecuteMatchesReference(t *testing.T) {
	iters := 300
	if testing.Short() || raceEnabled {
		iters = 40
	}
	for _, p := range allPairs() {
		dt, op := Datatype(p[0]), Op(p[1])
		if !Supported(dt, op) {
			continue
		}
		for _, c := range classesOf(op) {
			t.Run(fmt.Sprintf("%v/%v/%v", c, dt, op), func(t *testing.T) {
				g := newGen(uint64(p[0])<<32 | uint64(p[1])<<8 | uint64(c))
				limit, err := defaultEngine.count(c, dt, op)
				if err != nil {
					t.Fatal(err)
				}
				size := Size(dt)
				for i := range iters {
					n := 1 + g.r.IntN(4)
					if i%50 == 0 {
						n = limit
					}
					target := make([]byte, n*size)
					operand := make([]byte, n*size)
					compare := make([]byte, n*size)
					g.fill(dt, target)
					g.fillRelated(dt, operand, target)
					g.fillRelated(dt, compare, target)
					checkAgainstReference(t, c, dt, op, target, operand, compare, i%8)
				}
			})
		}
	}
}
