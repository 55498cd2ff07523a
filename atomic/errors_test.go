package atomic

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

func TestExecuteRejectsBadRequests(t *testing.T) {
	b := func(n int) []byte { return bytes.Repeat([]byte{0x5a}, n) }
	tooMany := (MaxPayload/8 + 1) * 8
	cases := []struct {
		name                      string
		c                         Class
		dt                        Datatype
		op                        Op
		target, operand, cmp, res []byte
		want                      fi.Errno
	}{
		{"unknown datatype", Base, Datatype(16), SUM, b(8), b(8), nil, nil, fi.EOPNOTSUPP},
		{"FI_VOID", Base, Datatype(256), SUM, b(8), b(8), nil, nil, fi.EOPNOTSUPP},
		{"unknown op", Base, UINT64, Op(19), b(8), b(8), nil, nil, fi.EOPNOTSUPP},
		{"unknown class", Class(7), UINT64, SUM, b(8), b(8), nil, nil, fi.EOPNOTSUPP},
		{"op of another class", Base, UINT64, CSWAP, b(8), b(8), b(8), nil, fi.EOPNOTSUPP},
		{"bitwise on float", Base, DOUBLE, BOR, b(8), b(8), nil, nil, fi.EOPNOTSUPP},
		{"order on complex", Compare, DOUBLE_COMPLEX, CSWAP_LT, b(16), b(16), b(16), b(16), fi.EOPNOTSUPP},
		{"nil target", Base, UINT64, SUM, nil, nil, nil, nil, fi.EINVAL},
		{"partial element", Base, UINT64, SUM, b(12), b(12), nil, nil, fi.EINVAL},
		{"partial long double", Fetch, LONG_DOUBLE, SUM, b(10), b(10), nil, b(10), fi.EINVAL},
		{"count beyond valid", Base, UINT64, SUM, b(tooMany), b(tooMany), nil, nil, fi.EMSGSIZE},
		{"compare count beyond valid", Compare, UINT64, CSWAP, b(88 * 8), b(88 * 8), b(88 * 8), b(88 * 8), fi.EMSGSIZE},
		{"short operand", Base, UINT32, SUM, b(8), b(4), nil, nil, fi.EINVAL},
		{"long operand", Base, UINT32, SUM, b(8), b(12), nil, nil, fi.EINVAL},
		{"nil operand", Fetch, UINT32, SUM, b(8), nil, nil, b(8), fi.EINVAL},
		{"short compare", Compare, UINT32, CSWAP, b(8), b(8), b(4), b(8), fi.EINVAL},
		{"nil compare", Compare, UINT32, MSWAP, b(8), b(8), nil, b(8), fi.EINVAL},
		{"compare on base", Base, UINT32, SUM, b(8), b(8), b(8), nil, fi.EINVAL},
		{"compare on fetch", Fetch, UINT32, SUM, b(8), b(8), b(8), b(8), fi.EINVAL},
		{"result on base", Base, UINT32, SUM, b(8), b(8), nil, b(8), fi.EINVAL},
		{"short result", Fetch, UINT32, SUM, b(8), b(8), nil, b(4), fi.ETOOSMALL},
		{"nil result", Compare, UINT32, CSWAP, b(8), b(8), b(8), nil, fi.ETOOSMALL},
		{"nil result read", Fetch, UINT32, ATOMIC_READ, b(8), nil, nil, nil, fi.ETOOSMALL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			orig := append([]byte(nil), tc.target...)
			origRes := append([]byte(nil), tc.res...)
			err := Execute(tc.c, tc.dt, tc.op, tc.target, tc.operand, tc.cmp, tc.res)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, tc.want, fi.ErrnoOf(err))
			require.Equal(t, orig, tc.target, "target modified by a failed request")
			require.Equal(t, origRes, tc.res, "result modified by a failed request")
		})
	}
}

func TestReferenceRejectsBadRequests(t *testing.T) {
	_, _, err := Reference(DOUBLE, BXOR, make([]byte, 8), make([]byte, 8), nil)
	require.ErrorIs(t, err, fi.EOPNOTSUPP)
	_, _, err = Reference(UINT64, SUM, make([]byte, 7), make([]byte, 7), nil)
	require.ErrorIs(t, err, fi.EINVAL)
	_, _, err = Reference(UINT64, SUM, make([]byte, 8), nil, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	_, _, err = Reference(UINT64, CSWAP, make([]byte, 8), make([]byte, 8), nil)
	require.ErrorIs(t, err, fi.EINVAL)
	nt, f, err := Reference(UINT64, ATOMIC_READ, u64(7), nil, nil)
	require.NoError(t, err)
	require.Equal(t, u64(7), nt)
	require.Equal(t, u64(7), f)
}

// TestExecuteNoAllocs: the hot path allocates nothing, for every class and
// element kind (lock-free and locked paths).
func TestExecuteNoAllocs(t *testing.T) {
	for _, tc := range []struct {
		c   Class
		dt  Datatype
		op  Op
		off int
	}{
		{Base, UINT64, SUM, 0}, {Base, UINT64, SUM, 1}, {Fetch, INT32, MAX, 0},
		{Compare, UINT64, CSWAP, 0}, {Compare, UINT8, CSWAP_LE, 0}, {Fetch, INT128, PROD, 0},
		{Fetch, DOUBLE, SUM, 0}, {Fetch, LONG_DOUBLE, PROD, 0}, {Fetch, LONG_DOUBLE_COMPLEX, PROD, 0},
		{Compare, FLOAT_COMPLEX, CSWAP, 0}, {Fetch, DOUBLE_COMPLEX, PROD, 0},
	} {
		size := Size(tc.dt)
		n := 16 * size
		tgt := alignedAt(n, tc.off)
		op, cmp, res := make([]byte, n), make([]byte, n), make([]byte, n)
		if tc.c != Compare {
			cmp = nil
		}
		if tc.c == Base {
			res = nil
		}
		allocs := testing.AllocsPerRun(100, func() {
			if err := Execute(tc.c, tc.dt, tc.op, tgt, op, cmp, res); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs, "%v %v %v", tc.c, tc.dt, tc.op)
	}
}
