package atomic

import (
	"bytes"
	"errors"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// FuzzExecute feeds arbitrary class, datatype, op and buffers to Execute,
// which must never panic and must fail only with a documented errno; then
// it shapes the same bytes into a well-formed request and checks target and
// result against Reference.
func FuzzExecute(f *testing.F) {
	for dt := range NumDatatypes + 1 {
		for _, op := range []Op{SUM, PROD, MIN, CSWAP_LE, MSWAP, ATOMIC_READ, LXOR} {
			fillType := Datatype(min(dt, NumDatatypes-1)) // 16 is no datatype
			size := Size(fillType)
			g := newGen(uint64(dt*100) + uint64(op))
			b := make([]byte, 3*size*2)
			g.fill(fillType, b[:len(b)/2])
			copy(b[len(b)/2:], b)
			cls := uint8(Fetch)
			if Compare.Has(op) {
				cls = uint8(Compare)
			}
			f.Add(cls, uint8(dt), uint8(op), uint8(dt), b[:3*size], b[3*size:], b[size:4*size])
		}
	}
	f.Fuzz(func(t *testing.T, cls, dtb, opb, off uint8, target, operand, compare []byte) {
		c, dt, op := Class(cls%4), Datatype(dtb%17), Op(opb%20)

		// Raw: anything goes, except panics and undocumented errors.
		raw := append([]byte(nil), target...)
		res := make([]byte, int(off)%(len(target)+2))
		err := Execute(c, dt, op, raw, operand, compare, res)
		if err != nil {
			switch fi.ErrnoOf(err) {
			case fi.EOPNOTSUPP, fi.EINVAL, fi.EMSGSIZE, fi.ETOOSMALL:
			default:
				t.Fatalf("undocumented error %v", err)
			}
			if !bytes.Equal(raw, target) {
				t.Fatal("failed request modified the target")
			}
		}

		// Shaped: a well-formed request over the same bytes.
		if !c.Has(op) || !Supported(dt, op) {
			if !errors.Is(err, fi.EOPNOTSUPP) {
				t.Fatalf("%v %v %v: want FI_EOPNOTSUPP, got %v", c, dt, op, err)
			}
			return
		}
		size := Size(dt)
		limit, _ := defaultEngine.count(c, dt, op)
		n := min(len(target)/size, limit)
		if n == 0 {
			return
		}
		tgt := target[:n*size]
		shape := func(b []byte) []byte {
			out := make([]byte, n*size)
			copy(out, b)
			return out
		}
		opnd, cmp := shape(operand), shape(compare)
		wantT, wantF, rerr := Reference(dt, op, tgt, opnd, cmp)
		if rerr != nil {
			t.Fatalf("reference: %v", rerr)
		}
		got := alignedAt(len(tgt), int(off%8))
		copy(got, tgt)
		var result []byte
		if c != Base {
			result = make([]byte, len(tgt))
		}
		if c != Compare {
			cmp = nil
		}
		if err := Execute(c, dt, op, got, opnd, cmp, result); err != nil {
			t.Fatalf("%v %v %v: %v", c, dt, op, err)
		}
		if !bytes.Equal(got, wantT) {
			t.Fatalf("%v %v %v: target %x, want %x (was %x, operand %x, compare %x)", c, dt, op, got, wantT, tgt, opnd, cmp)
		}
		if c != Base && !bytes.Equal(result, wantF) {
			t.Fatalf("%v %v %v: fetched %x, want %x", c, dt, op, result, wantF)
		}
	})
}
