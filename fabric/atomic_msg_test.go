package fabric_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// readU64 reads the peer's 8 bytes at addr through s's endpoint.
func readU64(t *testing.T, s *side, addr uint64) uint64 {
	t.Helper()
	got := make([]byte, 8)
	require.NoError(t, s.ep.Read(got, mr.Desc{}, s.peer, addr, regionKey, "read-back"))
	require.Equal(t, "read-back", comp(t, s.txCQ).Context)
	return binary.LittleEndian.Uint64(got)
}

// putU64 writes v to the peer's 8 bytes at addr through s's endpoint.
func putU64(t *testing.T, s *side, addr, v uint64) {
	t.Helper()
	require.NoError(t, s.ep.Write(u64(v), mr.Desc{}, s.peer, addr, regionKey, "put"))
	require.Equal(t, "put", comp(t, s.txCQ).Context)
}

func oneElem(s *side, addr uint64, buf []byte, op fatomic.Op) *fabric.MsgAtomic {
	return &fabric.MsgAtomic{MsgIOV: []fabric.IOC{{Buf: buf, Count: 1}}, Addr: s.peer,
		RMAIOV: []fabric.RMAIOC{{Addr: addr, Count: 1, Key: regionKey}}, Datatype: fatomic.UINT64, Op: op}
}

// TestAtomicCountOverLimit: a count above what the class's valid call
// reports is FI_EMSGSIZE (fi_atomic(3) ERRORS), for every call form; a
// count of zero stays FI_EINVAL.
func TestAtomicCountOverLimit(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	const size = 8
	for _, tc := range []struct {
		name  string
		valid func(fatomic.Datatype, fatomic.Op) (int, error)
		op    fatomic.Op
		post  func(count int, operand, compare, result []byte) error
	}{
		{"atomic", a.ep.AtomicValid, fatomic.SUM, func(count int, operand, _, _ []byte) error {
			return a.ep.Atomic(operand, count, mr.Desc{}, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil)
		}},
		{"atomicmsg", a.ep.AtomicValid, fatomic.SUM, func(count int, operand, _, _ []byte) error {
			m := oneElem(a, 0, operand, fatomic.SUM)
			m.MsgIOV[0].Count, m.RMAIOV[0].Count = count, count
			return a.ep.AtomicMsg(m, 0)
		}},
		{"fetch_atomic", a.ep.FetchAtomicValid, fatomic.SUM, func(count int, operand, _, result []byte) error {
			return a.ep.FetchAtomic(operand, count, mr.Desc{}, result, mr.Desc{}, a.peer, 0, regionKey,
				fatomic.UINT64, fatomic.SUM, nil)
		}},
		{"fetch_atomicmsg", a.ep.FetchAtomicValid, fatomic.SUM, func(count int, operand, _, result []byte) error {
			m := oneElem(a, 0, operand, fatomic.SUM)
			m.MsgIOV[0].Count, m.RMAIOV[0].Count = count, count
			return a.ep.FetchAtomicMsg(m, []fabric.IOC{{Buf: result, Count: count}}, nil, 0)
		}},
		{"compare_atomic", a.ep.CompareAtomicValid, fatomic.CSWAP, func(count int, operand, compare, result []byte) error {
			return a.ep.CompareAtomic(operand, count, mr.Desc{}, compare, mr.Desc{}, result, mr.Desc{}, a.peer, 0, regionKey,
				fatomic.UINT64, fatomic.CSWAP, nil)
		}},
		{"compare_atomicmsg", a.ep.CompareAtomicValid, fatomic.CSWAP, func(count int, operand, compare, result []byte) error {
			m := oneElem(a, 0, operand, fatomic.CSWAP)
			m.MsgIOV[0].Count, m.RMAIOV[0].Count = count, count
			return a.ep.CompareAtomicMsg(m, []fabric.IOC{{Buf: compare, Count: count}}, nil,
				[]fabric.IOC{{Buf: result, Count: count}}, nil, 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := tc.valid(fatomic.UINT64, tc.op)
			require.NoError(t, err)
			bufs := func(count int) ([]byte, []byte, []byte) {
				return make([]byte, count*size), make([]byte, count*size), make([]byte, count*size)
			}
			o, c, r := bufs(n + 1)
			err = tc.post(n+1, o, c, r)
			require.ErrorIs(t, err, fi.EMSGSIZE, "count %d > valid %d", n+1, n)
			require.False(t, errors.Is(err, fi.EINVAL), "count over the limit is not FI_EINVAL: %v", err)
			o, c, r = bufs(1)
			require.ErrorIs(t, tc.post(0, o, c, r), fi.EINVAL, "count 0")
			o, c, r = bufs(n)
			require.NoError(t, tc.post(n, o, c, r), "count %d = valid", n)
			comp(t, a.txCQ)
		})
	}
	noComp(t, a.txCQ)

	// A count whose byte size overflows int is a short buffer, not a
	// panic, also where FI_MR_LOCAL slices the buffers to check them.
	l, _ := pair(t, sideOpts{dom: fabric.DomainAttr{MRMode: mr.ModeLocal}}, sideOpts{})
	huge := math.MaxInt/size + 2
	buf := l.mem[:size]
	require.ErrorIs(t, l.ep.Atomic(buf, huge, l.region.Desc(), l.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil),
		fi.EINVAL)
	require.ErrorIs(t, l.ep.FetchAtomic(buf, huge, l.region.Desc(), buf, l.region.Desc(), l.peer, 0, regionKey,
		fatomic.UINT64, fatomic.SUM, nil), fi.EINVAL)
	noComp(t, l.txCQ)
}

// TestQueryAtomicMatchesValid: fi_query_atomic's count is the valid
// calls' ("as defined for the atomic valid calls"), for the domain's real
// packet size, in all three classes; unsupported pairs fail alike.
func TestQueryAtomicMatchesValid(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	classes := []struct {
		flags fi.Flags
		valid func(fatomic.Datatype, fatomic.Op) (int, error)
	}{{0, a.ep.AtomicValid}, {fi.FETCH_ATOMIC, a.ep.FetchAtomicValid}, {fi.COMPARE_ATOMIC, a.ep.CompareAtomicValid}}
	pairs := []struct {
		dt fatomic.Datatype
		op fatomic.Op
	}{
		{fatomic.UINT64, fatomic.SUM}, {fatomic.INT8, fatomic.BOR}, {fatomic.DOUBLE, fatomic.MIN},
		{fatomic.UINT32, fatomic.ATOMIC_READ}, {fatomic.UINT64, fatomic.CSWAP}, {fatomic.INT16, fatomic.MSWAP},
		{fatomic.LONG_DOUBLE_COMPLEX, fatomic.ATOMIC_WRITE},
	}
	supported := 0
	for _, c := range classes {
		for _, p := range pairs {
			n, verr := c.valid(p.dt, p.op)
			q, qerr := a.dom.QueryAtomic(p.dt, p.op, c.flags)
			if verr != nil {
				require.ErrorIs(t, verr, fi.EOPNOTSUPP)
				require.ErrorIs(t, qerr, fi.EOPNOTSUPP, "flags %#x %v %v: valid refuses, query %+v", uint64(c.flags), p.dt, p.op, q)
				continue
			}
			supported++
			require.NoError(t, qerr, "flags %#x %v %v", uint64(c.flags), p.dt, p.op)
			require.Equal(t, n, q.Count, "flags %#x %v %v", uint64(c.flags), p.dt, p.op)
			require.Equal(t, fatomic.Size(p.dt), q.Size)
		}
	}
	require.GreaterOrEqual(t, supported, 6)
	// The base count is max_atomic_size worth of elements: the domain's
	// packet, not a fixed 1500-byte-MTU figure.
	q, err := a.dom.QueryAtomic(fatomic.UINT8, fatomic.SUM, 0)
	require.NoError(t, err)
	require.Equal(t, a.dom.MaxAtomicSize(), q.Count)
}

// TestMsgInjectCompletes: FI_INJECT on the *Msg calls frees the source
// buffer at return but still completes; only the fi_inject_* calls
// generate no completion.
func TestMsgInjectCompletes(t *testing.T) {
	a, _ := pair(t, sideOpts{cntrs: fi.WRITE}, sideOpts{})
	putU64(t, a, 0, 10)
	operand := u64(5)
	m := oneElem(a, 0, operand, fatomic.SUM)
	m.Context = "amo"
	require.NoError(t, a.ep.AtomicMsg(m, fi.INJECT))
	binary.LittleEndian.PutUint64(operand, 1000) // copied already
	e := comp(t, a.txCQ)
	require.Equal(t, "amo", e.Context)
	require.Equal(t, fi.ATOMIC|fi.WRITE, e.Flags)
	require.Equal(t, uint64(15), readU64(t, a, 0))

	w := []byte("injected")
	require.NoError(t, a.ep.WriteMsg(rmaMsg(w, a.peer, 64, regionKey, "w", 0), fi.INJECT))
	copy(w, "XXXXXXXX")
	e = comp(t, a.txCQ)
	require.Equal(t, "w", e.Context)
	require.Equal(t, fi.RMA|fi.WRITE, e.Flags)
	got := make([]byte, 8)
	require.NoError(t, a.ep.Read(got, mr.Desc{}, a.peer, 64, regionKey, nil))
	comp(t, a.txCQ)
	require.Equal(t, "injected", string(got))

	// The inject calls still complete nothing (the counter still counts).
	before := a.cntr[fi.WRITE].Read()
	require.NoError(t, a.ep.InjectAtomic(u64(1), 1, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM))
	require.NoError(t, a.ep.InjectWrite([]byte("x"), a.peer, 128, regionKey))
	require.NoError(t, a.cntr[fi.WRITE].Wait(before+2, waitMs))
	noComp(t, a.txCQ)
	require.Equal(t, uint64(16), readU64(t, a, 0))

	// FI_INJECT in the endpoint's default op flags: the calls without a
	// flags argument complete too.
	c, _ := pair(t, sideOpts{ep: fabric.EPAttr{OpFlags: fi.INJECT}}, sideOpts{})
	require.NoError(t, c.ep.Atomic(u64(2), 1, mr.Desc{}, c.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, "def"))
	require.Equal(t, "def", comp(t, c.txCQ).Context)
	require.NoError(t, c.ep.Write([]byte("y"), mr.Desc{}, c.peer, 8, regionKey, "defw"))
	require.Equal(t, "defw", comp(t, c.txCQ).Context)

	// With FI_SELECTIVE_COMPLETION FI_INJECT changes nothing either:
	// FI_COMPLETION asks for the completion, its absence suppresses it.
	s, _ := pair(t, sideOpts{cqFlags: fi.SELECTIVE_COMPLETION, cntrs: fi.WRITE}, sideOpts{})
	m = oneElem(s, 0, u64(1), fatomic.SUM)
	m.Context = "sel"
	require.NoError(t, s.ep.AtomicMsg(m, fi.INJECT|fi.COMPLETION))
	require.Equal(t, "sel", comp(t, s.txCQ).Context)
	m.Context = "quiet"
	require.NoError(t, s.ep.AtomicMsg(m, fi.INJECT))
	require.NoError(t, s.cntr[fi.WRITE].Wait(2, waitMs))
	noComp(t, s.txCQ)
}

// TestFetchCompareAtomicMsgInject: FI_INJECT on the fetch and compare
// calls is accepted; operand and compare values are copied at return and
// the result buffer is written at completion ("Non-constant or output
// buffers are unaffected by this flag").
func TestFetchCompareAtomicMsgInject(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	putU64(t, a, 0, 5)
	operand := u64(3)
	res := make([]byte, 8)
	m := oneElem(a, 0, operand, fatomic.SUM)
	m.Context = "fetch"
	require.NoError(t, a.ep.FetchAtomicMsg(m, []fabric.IOC{{Buf: res, Count: 1}}, nil, fi.INJECT))
	binary.LittleEndian.PutUint64(operand, 1000)
	e := comp(t, a.txCQ)
	require.Equal(t, "fetch", e.Context)
	require.Equal(t, fi.ATOMIC|fi.READ, e.Flags)
	require.Equal(t, uint64(5), binary.LittleEndian.Uint64(res))
	require.Equal(t, uint64(8), readU64(t, a, 0))

	// Vectors: operands gathered and copied, results scattered at completion.
	putU64(t, a, 16, 100)
	putU64(t, a, 24, 200)
	ops := []fabric.IOC{{Buf: u64(1), Count: 1}, {Buf: u64(2), Count: 1}}
	resv := []fabric.IOC{{Buf: make([]byte, 8), Count: 1}, {Buf: make([]byte, 8), Count: 1}}
	m = &fabric.MsgAtomic{MsgIOV: ops, Addr: a.peer, RMAIOV: []fabric.RMAIOC{{Addr: 16, Count: 2, Key: regionKey}},
		Datatype: fatomic.UINT64, Op: fatomic.SUM, Context: "fetchv"}
	require.NoError(t, a.ep.FetchAtomicMsg(m, resv, nil, fi.INJECT))
	binary.LittleEndian.PutUint64(ops[0].Buf, 7777)
	binary.LittleEndian.PutUint64(ops[1].Buf, 7777)
	require.Equal(t, "fetchv", comp(t, a.txCQ).Context)
	require.Equal(t, uint64(100), binary.LittleEndian.Uint64(resv[0].Buf))
	require.Equal(t, uint64(200), binary.LittleEndian.Uint64(resv[1].Buf))
	require.Equal(t, uint64(101), readU64(t, a, 16))
	require.Equal(t, uint64(202), readU64(t, a, 24))

	// Compare: operand and compare copied at return.
	swap, cmp := u64(77), u64(8)
	m = oneElem(a, 0, swap, fatomic.CSWAP)
	m.Context = "cswap"
	require.NoError(t, a.ep.CompareAtomicMsg(m, []fabric.IOC{{Buf: cmp, Count: 1}}, nil,
		[]fabric.IOC{{Buf: res, Count: 1}}, nil, fi.INJECT))
	binary.LittleEndian.PutUint64(swap, 1)
	binary.LittleEndian.PutUint64(cmp, 1)
	e = comp(t, a.txCQ)
	require.Equal(t, "cswap", e.Context)
	require.Equal(t, fi.ATOMIC|fi.READ, e.Flags)
	require.Equal(t, uint64(8), binary.LittleEndian.Uint64(res))
	require.Equal(t, uint64(77), readU64(t, a, 0))

	// FI_INJECT is limited by inject_size: operand (and compare) bytes.
	inj := a.ep.InjectSize()
	fv, err := a.ep.FetchAtomicValid(fatomic.UINT8, fatomic.SUM)
	require.NoError(t, err)
	cv, err := a.ep.CompareAtomicValid(fatomic.UINT8, fatomic.CSWAP)
	require.NoError(t, err)
	if fv <= inj || cv <= inj/2 {
		t.Skipf("valid counts %d/%d do not exceed inject_size %d", fv, cv, inj)
	}
	big := make([]byte, inj+1)
	m = &fabric.MsgAtomic{MsgIOV: []fabric.IOC{{Buf: big, Count: inj + 1}}, Addr: a.peer,
		RMAIOV: []fabric.RMAIOC{{Addr: 0, Count: inj + 1, Key: regionKey}}, Datatype: fatomic.UINT8, Op: fatomic.SUM}
	require.ErrorIs(t, a.ep.FetchAtomicMsg(m, []fabric.IOC{{Buf: make([]byte, inj+1), Count: inj + 1}}, nil, fi.INJECT),
		fi.EMSGSIZE)
	half := inj/2 + 1
	m = &fabric.MsgAtomic{MsgIOV: []fabric.IOC{{Buf: big, Count: half}}, Addr: a.peer,
		RMAIOV: []fabric.RMAIOC{{Addr: 0, Count: half, Key: regionKey}}, Datatype: fatomic.UINT8, Op: fatomic.CSWAP}
	require.ErrorIs(t, a.ep.CompareAtomicMsg(m, []fabric.IOC{{Buf: big, Count: half}}, nil,
		[]fabric.IOC{{Buf: make([]byte, half), Count: half}}, nil, fi.INJECT), fi.EMSGSIZE, "operand and compare > inject_size")
	noComp(t, a.txCQ)
}

// TestAtomicMsgRemoteCQData: fi_atomicmsg with FI_REMOTE_CQ_DATA reports
// the data on the target's receive CQ, flagged FI_ATOMIC, the remote
// access and FI_REMOTE_CQ_DATA, and only when the operation succeeded.
func TestAtomicMsgRemoteCQData(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	putU64(t, a, 0, 1)
	res := make([]byte, 8)

	m := oneElem(a, 0, u64(1), fatomic.SUM)
	m.Context, m.Data = "sum", 0xfeed
	require.NoError(t, a.ep.AtomicMsg(m, fi.REMOTE_CQ_DATA))
	require.Equal(t, "sum", comp(t, a.txCQ).Context)
	e, src := compFrom(t, b.rxCQ)
	require.Equal(t, fabric.CQEntry{Flags: fi.ATOMIC | fi.REMOTE_WRITE | fi.REMOTE_CQ_DATA, Data: 0xfeed}, e)
	require.Equal(t, b.peer, src)

	m = oneElem(a, 0, u64(3), fatomic.SUM)
	m.Data = 0xf00
	require.NoError(t, a.ep.FetchAtomicMsg(m, []fabric.IOC{{Buf: res, Count: 1}}, nil, fi.REMOTE_CQ_DATA))
	comp(t, a.txCQ)
	require.Equal(t, uint64(2), binary.LittleEndian.Uint64(res))
	require.Equal(t, fabric.CQEntry{Flags: fi.ATOMIC | fi.REMOTE_WRITE | fi.REMOTE_CQ_DATA, Data: 0xf00}, comp(t, b.rxCQ))

	m = &fabric.MsgAtomic{Addr: a.peer, RMAIOV: []fabric.RMAIOC{{Addr: 0, Count: 1, Key: regionKey}},
		Datatype: fatomic.UINT64, Op: fatomic.ATOMIC_READ, Data: 0xaead}
	require.NoError(t, a.ep.FetchAtomicMsg(m, []fabric.IOC{{Buf: res, Count: 1}}, nil, fi.REMOTE_CQ_DATA))
	comp(t, a.txCQ)
	require.Equal(t, uint64(5), binary.LittleEndian.Uint64(res))
	require.Equal(t, fabric.CQEntry{Flags: fi.ATOMIC | fi.REMOTE_READ | fi.REMOTE_CQ_DATA, Data: 0xaead}, comp(t, b.rxCQ))

	m = oneElem(a, 0, u64(9), fatomic.CSWAP)
	m.Data = 0xc5
	require.NoError(t, a.ep.CompareAtomicMsg(m, []fabric.IOC{{Buf: u64(5), Count: 1}}, nil,
		[]fabric.IOC{{Buf: res, Count: 1}}, nil, fi.REMOTE_CQ_DATA))
	comp(t, a.txCQ)
	require.Equal(t, fabric.CQEntry{Flags: fi.ATOMIC | fi.REMOTE_WRITE | fi.REMOTE_CQ_DATA, Data: 0xc5}, comp(t, b.rxCQ))
	require.Equal(t, uint64(9), readU64(t, a, 0))

	// Without the flag, or when the op fails at the target, nothing.
	m = oneElem(a, 0, u64(1), fatomic.SUM)
	m.Data = 0x1
	require.NoError(t, a.ep.AtomicMsg(m, 0))
	comp(t, a.txCQ)
	m.RMAIOV[0].Key = regionKey + 1
	require.NoError(t, a.ep.AtomicMsg(m, fi.REMOTE_CQ_DATA))
	errComp(t, a.txCQ)
	m.RMAIOV[0] = fabric.RMAIOC{Addr: uint64(len(b.mem)), Count: 1, Key: regionKey}
	require.NoError(t, a.ep.AtomicMsg(m, fi.REMOTE_CQ_DATA))
	errComp(t, a.txCQ)
	noComp(t, b.rxCQ)
}

// TestInjectMRLocal: with FI_MR_LOCAL fi_inject_atomic and fi_inject_write,
// which take no descriptor, work on unregistered buffers (their data is
// copied before return); fi_atomic and fi_write still need one.
func TestInjectMRLocal(t *testing.T) {
	local := sideOpts{dom: fabric.DomainAttr{MRMode: mr.ModeLocal}, cntrs: fi.WRITE}
	a, _ := pair(t, local, local)
	one := u64(1)
	require.ErrorIs(t, a.ep.Atomic(one, 1, mr.Desc{}, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil), fi.EINVAL)
	require.ErrorIs(t, a.ep.Write([]byte("x"), mr.Desc{}, a.peer, 0, regionKey, nil), fi.EINVAL)
	require.NoError(t, a.ep.InjectAtomic(u64(41), 1, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM))
	require.NoError(t, a.ep.InjectAtomic(one, 1, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM))
	require.NoError(t, a.ep.InjectWrite([]byte("written!"), a.peer, 64, regionKey))
	require.NoError(t, a.cntr[fi.WRITE].Wait(3, waitMs))
	noComp(t, a.txCQ)
	got := a.mem[:72]
	require.NoError(t, a.ep.Read(got[:8], a.region.Desc(), a.peer, 0, regionKey, nil))
	comp(t, a.txCQ)
	require.NoError(t, a.ep.Read(got[64:72], a.region.Desc(), a.peer, 64, regionKey, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(42), binary.LittleEndian.Uint64(got[:8]))
	require.Equal(t, "written!", string(got[64:72]))
}

// TestInjectAllocs: once warm, the inject calls (no completion), the *Msg
// calls with FI_INJECT (which complete), a fetch with FI_INJECT and an
// atomic with FI_REMOTE_CQ_DATA (target completion) allocate nothing per
// operation, initiator and target sides together.
func TestInjectAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b := pair(t, sideOpts{cntrs: fi.WRITE}, sideOpts{})
	buf := make([]fabric.CQEntry, 4)
	one, res, w := u64(1), make([]byte, 8), make([]byte, 64)
	wrote := a.cntr[fi.WRITE]
	next := uint64(0)
	waitWrite := func() {
		next++
		if err := wrote.Wait(next, waitMs); err != nil {
			t.Fatal(err)
		}
	}
	m := oneElem(a, 0, one, fatomic.SUM)
	m.Context, m.Data = opCtx, 7
	resv := []fabric.IOC{{Buf: res, Count: 1}}
	wm := rmaMsg(w, a.peer, 64, regionKey, opCtx, 0)
	for _, tc := range []struct {
		name string
		op   func()
	}{
		{"inject_atomic", func() {
			if err := a.ep.InjectAtomic(one, 1, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM); err != nil {
				t.Fatal(err)
			}
			waitWrite()
		}},
		{"inject_write", func() {
			if err := a.ep.InjectWrite(w, a.peer, 64, regionKey); err != nil {
				t.Fatal(err)
			}
			waitWrite()
		}},
		{"atomicmsg_inject_cq_data", func() {
			if err := a.ep.AtomicMsg(m, fi.INJECT|fi.REMOTE_CQ_DATA); err != nil {
				t.Fatal(err)
			}
			waitWrite()
			block(t, a.txCQ, buf, 1)
			block(t, b.rxCQ, buf, 1)
		}},
		{"writemsg_inject", func() {
			if err := a.ep.WriteMsg(wm, fi.INJECT); err != nil {
				t.Fatal(err)
			}
			waitWrite()
			block(t, a.txCQ, buf, 1)
		}},
		{"fetch_atomicmsg_inject", func() {
			if err := a.ep.FetchAtomicMsg(m, resv, nil, fi.INJECT); err != nil {
				t.Fatal(err)
			}
			block(t, a.txCQ, buf, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 { // warm the pools, timers and buffers
				tc.op()
			}
			allocs := testing.AllocsPerRun(500, tc.op)
			t.Logf("%s: %.2f allocs/op", tc.name, allocs)
			require.Zero(t, allocs, "%s allocates per operation", tc.name)
		})
	}
}
