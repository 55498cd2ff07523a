package atomic

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

func TestDatatypeValuesNamesSizes(t *testing.T) {
	// enum fi_datatype of rdma/fi_atomic.h, with FI_INT128 = FI_DATATYPE_LAST.
	want := []struct {
		dt   Datatype
		val  uint32
		name string
		size int
	}{
		{INT8, 0, "FI_INT8", 1}, {UINT8, 1, "FI_UINT8", 1},
		{INT16, 2, "FI_INT16", 2}, {UINT16, 3, "FI_UINT16", 2},
		{INT32, 4, "FI_INT32", 4}, {UINT32, 5, "FI_UINT32", 4},
		{INT64, 6, "FI_INT64", 8}, {UINT64, 7, "FI_UINT64", 8},
		{FLOAT, 8, "FI_FLOAT", 4}, {DOUBLE, 9, "FI_DOUBLE", 8},
		{FLOAT_COMPLEX, 10, "FI_FLOAT_COMPLEX", 8}, {DOUBLE_COMPLEX, 11, "FI_DOUBLE_COMPLEX", 16},
		{LONG_DOUBLE, 12, "FI_LONG_DOUBLE", 16}, {LONG_DOUBLE_COMPLEX, 13, "FI_LONG_DOUBLE_COMPLEX", 32},
		{INT128, 14, "FI_INT128", 16}, {UINT128, 15, "FI_UINT128", 16},
	}
	require.Len(t, want, 16)
	require.Equal(t, 16, NumDatatypes)
	for _, w := range want {
		require.Equal(t, w.val, uint32(w.dt), w.name)
		require.Equal(t, w.name, w.dt.String())
		require.Equal(t, w.size, Size(w.dt), w.name)
	}
	require.Equal(t, "Datatype(16)", Datatype(16).String())
	require.Equal(t, 0, Size(Datatype(16)))
	require.Equal(t, 0, Size(Datatype(256))) // FI_VOID is no atomic datatype
}

func TestOpValuesNames(t *testing.T) {
	names := []string{"FI_MIN", "FI_MAX", "FI_SUM", "FI_PROD", "FI_LOR", "FI_LAND", "FI_BOR",
		"FI_BAND", "FI_LXOR", "FI_BXOR", "FI_ATOMIC_READ", "FI_ATOMIC_WRITE", "FI_CSWAP",
		"FI_CSWAP_NE", "FI_CSWAP_LE", "FI_CSWAP_LT", "FI_CSWAP_GE", "FI_CSWAP_GT", "FI_MSWAP"}
	ops := []Op{MIN, MAX, SUM, PROD, LOR, LAND, BOR, BAND, LXOR, BXOR, ATOMIC_READ,
		ATOMIC_WRITE, CSWAP, CSWAP_NE, CSWAP_LE, CSWAP_LT, CSWAP_GE, CSWAP_GT, MSWAP}
	require.Equal(t, 19, NumOps)
	for i, op := range ops {
		require.Equal(t, uint32(i), uint32(op), names[i])
		require.Equal(t, names[i], op.String())
	}
	require.Equal(t, "Op(19)", Op(19).String())
}

// TestClasses checks the three lists of the page verbatim.
func TestClasses(t *testing.T) {
	base := []Op{MIN, MAX, SUM, PROD, LOR, LAND, BOR, BAND, LXOR, BXOR, ATOMIC_WRITE}
	fetch := append(append([]Op{}, base...), ATOMIC_READ)
	compare := []Op{CSWAP, CSWAP_NE, CSWAP_LE, CSWAP_LT, CSWAP_GE, CSWAP_GT, MSWAP}
	for c, list := range map[Class][]Op{Base: base, Fetch: fetch, Compare: compare} {
		in := map[Op]bool{}
		for _, op := range list {
			in[op] = true
		}
		for op := range Op(NumOps + 2) {
			require.Equal(t, in[op], c.Has(op), "%v %v", c, op)
		}
	}
	require.False(t, Class(3).Has(SUM))
}

// expectSupported is the support rule written out independently of the
// op builders: what makes mathematical sense for each kind of type.
func expectSupported(dt Datatype, op Op) bool {
	if int(op) >= NumOps {
		return false
	}
	switch dt {
	case INT8, UINT8, INT16, UINT16, INT32, UINT32, INT64, UINT64, INT128, UINT128:
		return true
	case FLOAT, DOUBLE, LONG_DOUBLE:
		switch op {
		case BOR, BAND, BXOR, MSWAP:
			return false
		}
		return true
	case FLOAT_COMPLEX, DOUBLE_COMPLEX, LONG_DOUBLE_COMPLEX:
		switch op {
		case SUM, PROD, LOR, LAND, LXOR, ATOMIC_READ, ATOMIC_WRITE, CSWAP, CSWAP_NE:
			return true
		}
	}
	return false
}

// TestSupportTableConsistent checks the table against the rule, and that
// Valid, FetchValid, CompareValid, Query and Execute all agree with it,
// with the documented counts, for every one of the 304 pairs plus values
// out of range.
func TestSupportTableConsistent(t *testing.T) {
	n := 0
	for dt := range Datatype(NumDatatypes + 1) {
		for op := range Op(NumOps + 1) {
			sup := expectSupported(dt, op)
			require.Equal(t, sup, Supported(dt, op), "%v %v", dt, op)
			if sup {
				n++
			}
			for _, cl := range []struct {
				c     Class
				valid func(Datatype, Op) (int, error)
				flags fi.Flags
			}{{Base, Valid, 0}, {Fetch, FetchValid, fi.FETCH_ATOMIC}, {Compare, CompareValid, fi.COMPARE_ATOMIC}} {
				cnt, err := cl.valid(dt, op)
				attr, qerr := Query(dt, op, cl.flags)
				size := Size(dt)
				buf := make([]byte, max(size, 1))
				var res, cmp []byte
				if cl.c != Base {
					res = make([]byte, len(buf))
				}
				if cl.c == Compare {
					cmp = make([]byte, len(buf))
				}
				xerr := Execute(cl.c, dt, op, buf, make([]byte, len(buf)), cmp, res)
				if !sup || !cl.c.Has(op) {
					require.ErrorIs(t, err, fi.EOPNOTSUPP, "%v %v %v", cl.c, dt, op)
					require.ErrorIs(t, qerr, fi.EOPNOTSUPP, "%v %v %v", cl.c, dt, op)
					require.ErrorIs(t, xerr, fi.EOPNOTSUPP, "%v %v %v", cl.c, dt, op)
					require.Zero(t, cnt)
					require.Zero(t, attr)
					continue
				}
				want := MaxPayload / size
				if cl.c == Compare {
					want = MaxPayload / (2 * size)
				}
				require.NoError(t, err)
				require.NoError(t, qerr)
				require.NoError(t, xerr, "%v %v %v", cl.c, dt, op)
				require.Equal(t, want, cnt, "%v %v %v", cl.c, dt, op)
				require.Equal(t, Attr{Count: want, Size: size}, attr)
			}
		}
	}
	require.Equal(t, 262, n)
	// The page's worked numbers for the default 1400-byte payload.
	c, _ := Valid(UINT64, SUM)
	require.Equal(t, 175, c)
	c, _ = CompareValid(UINT64, CSWAP)
	require.Equal(t, 87, c)
	c, _ = FetchValid(LONG_DOUBLE_COMPLEX, ATOMIC_READ)
	require.Equal(t, 43, c)
	c, _ = CompareValid(LONG_DOUBLE_COMPLEX, CSWAP_NE)
	require.Equal(t, 21, c)
}

func TestEnginePayloadLimit(t *testing.T) {
	e := Engine{MaxPayload: 64}
	c, err := e.Valid(UINT64, SUM)
	require.NoError(t, err)
	require.Equal(t, 8, c)
	c, err = e.CompareValid(INT128, CSWAP)
	require.NoError(t, err)
	require.Equal(t, 2, c)
	a, err := e.Query(LONG_DOUBLE_COMPLEX, CSWAP, fi.COMPARE_ATOMIC)
	require.NoError(t, err)
	require.Equal(t, Attr{Count: 1, Size: 32}, a)
	require.NoError(t, e.Execute(Base, UINT64, SUM, make([]byte, 64), make([]byte, 64), nil, nil))
	err = e.Execute(Base, UINT64, SUM, make([]byte, 72), make([]byte, 72), nil, nil)
	require.ErrorIs(t, err, fi.EMSGSIZE)

	// A limit below one compare element leaves the pair unsupported.
	_, err = Engine{MaxPayload: 40}.CompareValid(LONG_DOUBLE_COMPLEX, CSWAP)
	require.ErrorIs(t, err, fi.EOPNOTSUPP)
	c, err = Engine{MaxPayload: 40}.Valid(LONG_DOUBLE_COMPLEX, SUM)
	require.NoError(t, err)
	require.Equal(t, 1, c)

	// Zero means the default.
	c, err = Engine{}.Valid(UINT8, SUM)
	require.NoError(t, err)
	require.Equal(t, MaxPayload, c)
}

func TestQueryFlags(t *testing.T) {
	_, err := Query(UINT64, CSWAP, fi.FETCH_ATOMIC|fi.COMPARE_ATOMIC)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = Query(UINT64, SUM, fi.FETCH_ATOMIC|fi.COMPARE_ATOMIC|fi.TAGGED)
	require.ErrorIs(t, err, fi.EINVAL)
	for _, f := range []fi.Flags{fi.TAGGED, fi.TAGGED | fi.FETCH_ATOMIC, fi.TAGGED | fi.COMPARE_ATOMIC} {
		_, err = Query(UINT64, CSWAP, f)
		require.ErrorIs(t, err, fi.EOPNOTSUPP, "%#x", uint64(f))
		_, err = Query(UINT64, SUM, f)
		require.ErrorIs(t, err, fi.EOPNOTSUPP, "%#x", uint64(f))
	}
	_, err = Query(UINT64, SUM, fi.INJECT)
	require.ErrorIs(t, err, fi.EBADFLAGS)
	// A class mismatch is "not supported", not a flag error.
	_, err = Query(UINT64, CSWAP, 0)
	require.ErrorIs(t, err, fi.EOPNOTSUPP)
	_, err = Query(UINT64, ATOMIC_READ, 0)
	require.ErrorIs(t, err, fi.EOPNOTSUPP)
	a, err := Query(UINT64, ATOMIC_READ, fi.FETCH_ATOMIC)
	require.NoError(t, err)
	require.Equal(t, Attr{Count: 175, Size: 8}, a)
}
