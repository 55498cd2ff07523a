package av

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
)

// TestOpenCloseCounts is the libfabric unit suite's av_open_close: every
// count from 1 to 65536, both types.
func TestOpenCloseCounts(t *testing.T) {
	for _, typ := range []Type{TypeMap, TypeTable} {
		for count := 1; count <= 65536; count *= 2 {
			a, err := Open(Attr{Type: typ, Count: count}, nil, WithMirror(nil))
			require.NoError(t, err, "%v count %d", typ, count)
			require.Equal(t, typ, a.Attr().Type)
			require.Equal(t, fi.ClassAV, a.Class())
			require.NoError(t, a.Close(), "%v count %d", typ, count)
		}
	}
}

func TestOpenAttrs(t *testing.T) {
	a, _ := openTest(t, Attr{Type: TypeUnspec, Count: 0, EPPerNode: 4})
	require.Equal(t, TypeTable, a.Attr().Type, "FI_AV_UNSPEC resolves to the provider's choice")
	require.Equal(t, "avctx", a.Context())

	for name, attr := range map[string]Attr{
		"type":          {Type: 7},
		"rx_ctx_bits":   {RxCtxBits: MaxRxCtxBits + 1},
		"neg rx bits":   {RxCtxBits: -1},
		"count":         {Count: -1},
		"ep_per_node":   {EPPerNode: -1},
		"read no name":  {Flags: fi.READ},
		"unknown flags": {Flags: fi.MORE},
	} {
		_, err := Open(attr, nil, WithMirror(nil))
		require.Error(t, err, name)
		if name == "unknown flags" {
			require.ErrorIs(t, err, fi.EBADFLAGS)
		} else {
			require.ErrorIs(t, err, fi.EINVAL, name)
		}
	}
	_, err := Open(Attr{}, nil, WithMirror(nil), WithAddrFormat(fi.AddrFormat(42)))
	require.ErrorIs(t, err, fi.EINVAL)

	b, err := Open(Attr{}, nil, WithMirror(nil))
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.ErrorIs(t, b.Close(), fi.EINVAL, "second close")
	_, err = b.InsertAddrPort(addrs(1), nil, 0, nil)
	require.ErrorIs(t, err, fi.EINVAL, "insert after close")
	_, ok := b.AddrPort(0)
	require.False(t, ok)
}

// TestCountIsAHint: an AV grows past its count.
func TestCountIsAHint(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeMap, Count: 1})
	n, err := a.InsertAddrPort(addrs(5000), fiAddrs(5000), 0, nil)
	require.NoError(t, err)
	require.Equal(t, 5000, n)
	require.Equal(t, 5000, f.len())
}

// TestInsertSyncGood is the unit suite's av_good_sync.
func TestInsertSyncGood(t *testing.T) {
	for _, typ := range []Type{TypeMap, TypeTable} {
		a, f := openTest(t, Attr{Type: typ})
		out := fiAddrs(1)
		n, err := a.Insert([][]byte{sin("10.0.0.1:7471")}, out, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.NotEqual(t, fi.AddrNotAvail, out[0])
		got, ok := a.AddrPort(out[0])
		require.True(t, ok)
		require.Equal(t, ap("10.0.0.1:7471"), got)
		require.Equal(t, out[0], a.FIAddr(ap("10.0.0.1:7471")))
		f.requireInStep(t, a)
	}
}

// TestTableNilFiAddr: FI_AV_TABLE inserts may pass no fi_addr buffer; the
// addresses sit at indices 0, 1, ...
func TestTableNilFiAddr(t *testing.T) {
	a, _ := openTest(t, Attr{Type: TypeTable})
	n, err := a.Insert([][]byte{sin("10.0.0.1:1"), sin("10.0.0.2:2")}, nil, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for i, want := range []string{"10.0.0.1:1", "10.0.0.2:2"} {
		got, ok := a.AddrPort(fi.Addr(i))
		require.True(t, ok)
		require.Equal(t, ap(want), got)
	}
	m, _ := openTest(t, Attr{Type: TypeMap})
	_, err = m.Insert([][]byte{sin("10.0.0.1:1")}, nil, 0, nil)
	require.ErrorIs(t, err, fi.EINVAL, "FI_AV_MAP needs fi_addr")
	_, err = a.Insert([][]byte{sin("10.0.0.1:1"), sin("10.0.0.3:1")}, fiAddrs(1), 0, nil)
	require.ErrorIs(t, err, fi.EINVAL, "fi_addr shorter than addrs")
}

// TestTableOrder: indices are sequential across calls and the lowest unused
// index is taken after a remove.
func TestTableOrder(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeTable})
	all := addrs(10)
	for i := range 5 {
		out := fiAddrs(1)
		_, err := a.InsertAddrPort(all[i:i+1], out, 0, nil)
		require.NoError(t, err)
		require.Equal(t, fi.Addr(i), out[0])
	}
	require.NoError(t, a.Remove([]fi.Addr{3, 1}, 0))
	out := fiAddrs(3)
	n, err := a.InsertAddrPort(all[5:8], out, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, []fi.Addr{1, 3, 5}, out)
	f.requireInStep(t, a)
}

// TestMapStaleHandle: FI_AV_MAP handles are opaque and detect use after
// remove, also once the slot is reused.
func TestMapStaleHandle(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeMap})
	out := fiAddrs(1)
	_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1")}, out, 0, nil)
	require.NoError(t, err)
	old := out[0]
	require.NoError(t, a.Remove([]fi.Addr{old}, 0))
	_, err = a.Lookup(old, make([]byte, 64))
	require.ErrorIs(t, err, fi.EINVAL)

	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.2:2")}, out, 0, nil)
	require.NoError(t, err)
	require.NotEqual(t, old, out[0])
	require.Equal(t, uint32(old), uint32(out[0]), "same slot, new generation")
	_, ok := a.AddrPort(old)
	require.False(t, ok, "stale handle must not reach the new peer")
	require.ErrorIs(t, a.Remove([]fi.Addr{old}, 0), fi.EINVAL)
	require.ErrorIs(t, a.Remove([]fi.Addr{fi.Addr(12345)}, 0), fi.EINVAL, "never handed out")
	f.requireInStep(t, a)
}

// TestInsertGoodBadSync is the unit suite's av_goodbad_vector_sync.
func TestInsertGoodBadSync(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeMap})
	out := fiAddrs(2)
	n, err := a.Insert([][]byte{sin("10.0.0.1:7471"), sin("0.0.0.0:7471")}, out, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NotEqual(t, fi.AddrNotAvail, out[0])
	require.Equal(t, fi.AddrNotAvail, out[1])
	f.requireInStep(t, a)
}

// TestSyncErr: FI_SYNC_ERR fills the per-address status array.
func TestSyncErr(t *testing.T) {
	a, _ := openTest(t, Attr{Type: TypeTable})
	st := []int{-1, -1}
	n, err := a.Insert([][]byte{sin("10.0.0.1:7471"), sin("10.0.0.2:0")}, nil, fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 0, st[0])
	require.Equal(t, int(fi.EINVAL), st[1])

	_, err = a.Insert([][]byte{sin("10.0.0.3:1")}, nil, fi.SYNC_ERR, "not a status array")
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = a.Insert([][]byte{sin("10.0.0.3:1"), sin("10.0.0.4:1")}, nil, fi.SYNC_ERR, []int{0})
	require.ErrorIs(t, err, fi.EINVAL, "status array too short")
}

func TestBadAddresses(t *testing.T) {
	long := append(sin("10.0.0.1:1"), 0)
	wrongFam := sin("10.0.0.1:1")
	wrongFam[0] = afInet6
	for _, tc := range []struct {
		format fi.AddrFormat
		addr   []byte
	}{
		{fi.FormatSockaddr4, long},
		{fi.FormatSockaddr4, sin("10.0.0.1:1")[:8]},
		{fi.FormatSockaddr4, sin("0.0.0.0:1")},
		{fi.FormatSockaddr4, sin("10.0.0.1:0")},
		{fi.FormatSockaddr4, wrongFam},
		{fi.FormatSockaddr4, sin6("[fd00::1]:1")},
		{fi.FormatSockaddr6, sin6("[::]:1")},
		{fi.FormatSockaddr6, sin6("[fd00::1]:0")},
		{fi.FormatSockaddr6, sin6("[fd00::1]:1")[:27]},
		{fi.FormatSockaddr6, sin("10.0.0.1:1")},
		{fi.FormatSockaddr, nil},
		{fi.FormatStr, []byte("fi_sockaddr_in://10.0.0.1")},
		{fi.FormatStr, []byte("fi_sockaddr_in://10.0.0.1:99999")},
		{fi.FormatStr, []byte("fi_sockaddr_in://[fd00::1]:1")},
		{fi.FormatStr, []byte("fi_sockaddr_in6://10.0.0.1:1")},
		{fi.FormatStr, []byte("fi_sockaddr_in6://[::]:1")},
		{fi.FormatStr, []byte("10.0.0.1:1")},
		{fi.FormatStr, []byte("fi_sockaddr_in://0.0.0.0:1")},
		{fi.FormatStr, []byte("")},
	} {
		a, f := openTest(t, Attr{Type: TypeTable}, WithAddrFormat(tc.format))
		st := []int{-1, -1}
		out := fiAddrs(2)
		good := sin("10.9.9.9:9")
		switch tc.format {
		case fi.FormatSockaddr6:
			good = sin6("[fd00::9]:9")
		case fi.FormatStr:
			good = []byte("fi_sockaddr_in://10.9.9.9:9")
		}
		n, err := a.Insert([][]byte{tc.addr, good}, out, fi.SYNC_ERR, st)
		require.NoError(t, err)
		require.Equal(t, 1, n, "%v %q", tc.format, tc.addr)
		require.Equal(t, []int{int(fi.EINVAL), 0}, st, "%v %q", tc.format, tc.addr)
		require.Equal(t, []fi.Addr{fi.AddrNotAvail, 0}, out)
		require.Equal(t, 1, f.len())
	}
}

// TestFormats: each format round-trips through Insert, Lookup and Straddr.
func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		format fi.AddrFormat
		addr   []byte
		str    string
		peer   string
	}{
		{fi.FormatSockaddr4, sin("10.0.0.1:7471"), "fi_sockaddr_in://10.0.0.1:7471", "10.0.0.1:7471"},
		{fi.FormatSockaddr6, sin6("[fe80::1]:7471"), "fi_sockaddr_in6://[fe80::1]:7471", "[fe80::1]:7471"},
		{fi.FormatSockaddr, sin("10.0.0.1:7471"), "fi_sockaddr_in://10.0.0.1:7471", "10.0.0.1:7471"},
		{fi.FormatSockaddr, sin6("[fd00::1]:7471"), "fi_sockaddr_in6://[fd00::1]:7471", "[fd00::1]:7471"},
		{fi.FormatStr, []byte("fi_sockaddr_in://10.0.0.1:7471"), "fi_sockaddr_in://10.0.0.1:7471", "10.0.0.1:7471"},
		{fi.FormatStr, []byte("fi_sockaddr_in6://[fe80::1]:7471\x00"), "fi_sockaddr_in6://[fe80::1]:7471", "[fe80::1]:7471"},
	} {
		a, _ := openTest(t, Attr{Type: TypeMap}, WithAddrFormat(tc.format))
		require.Equal(t, tc.format, a.AddrFormat())
		out := fiAddrs(1)
		n, err := a.Insert([][]byte{tc.addr}, out, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		buf := make([]byte, 100)
		size, err := a.Lookup(out[0], buf)
		require.NoError(t, err)
		want := tc.addr
		if tc.format == fi.FormatStr {
			want = trimNUL(want)
		}
		require.Equal(t, want, buf[:size], "%v", tc.format)
		size, err = a.Straddr(tc.addr, buf)
		require.NoError(t, err)
		require.Equal(t, tc.str, string(buf[:size]))
		got, ok := a.AddrPort(out[0])
		require.True(t, ok)
		require.Equal(t, ap(tc.peer), got)
	}
}

// TestLookupTruncation: Lookup and Straddr truncate to the buffer and
// report the size needed.
func TestLookupTruncation(t *testing.T) {
	a, _ := openTest(t, Attr{Type: TypeTable}, WithAddrFormat(fi.FormatSockaddr6))
	addr := sin6("[fd00::1]:7471")
	_, err := a.Insert([][]byte{addr}, nil, 0, nil)
	require.NoError(t, err)
	buf := make([]byte, 10)
	n, err := a.Lookup(0, buf)
	require.NoError(t, err)
	require.Equal(t, SockaddrIn6Len, n)
	require.Equal(t, addr[:10], buf)
	n, err = a.Lookup(0, nil)
	require.NoError(t, err)
	require.Equal(t, SockaddrIn6Len, n)

	str := "fi_sockaddr_in6://[fd00::1]:7471"
	n, err = a.Straddr(addr, buf)
	require.NoError(t, err)
	require.Equal(t, len(str), n)
	require.Equal(t, str[:10], string(buf))
	_, err = a.Straddr([]byte{1, 2}, buf)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = a.Lookup(7, buf)
	require.ErrorIs(t, err, fi.EINVAL)
}

// readEvent waits (bounded) for the next EQ entry: an event, or an error
// entry when the head is one.
func readEvent(t *testing.T, q *eq.EQ) (eq.Entry, *eq.ErrEntry) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		e, err := q.Read(0)
		switch {
		case err == nil:
			return e, nil
		case errors.Is(err, fi.EAVAIL):
			ee, err := q.ReadErr(0)
			require.NoError(t, err)
			return eq.Entry{}, &ee
		case errors.Is(err, fi.EAGAIN):
			time.Sleep(time.Millisecond)
		default:
			t.Fatalf("eq read: %v", err)
		}
	}
	t.Fatal("no EQ event within 5s")
	return eq.Entry{}, nil
}

func requireEmpty(t *testing.T, q *eq.EQ) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	_, err := q.Read(fi.PEEK)
	require.ErrorIs(t, err, fi.EAGAIN)
}

func openAsync(t *testing.T, typ Type, opts ...Option) (*AV, *eq.EQ, *fakeMirror) {
	t.Helper()
	a, f := openTest(t, Attr{Type: typ, Flags: fi.EVENT}, opts...)
	q, err := eq.Open(eq.Attr{Size: 64}, nil)
	require.NoError(t, err)
	require.NoError(t, a.Bind(q, 0))
	t.Cleanup(func() { a.Close(); q.Close() })
	return a, q, f
}

// TestAsyncNoEQ: an FI_EVENT AV refuses inserts before an EQ is bound.
func TestAsyncNoEQ(t *testing.T) {
	a, _ := openTest(t, Attr{Flags: fi.EVENT})
	_, err := a.InsertAddrPort(addrs(1), nil, 0, nil)
	require.ErrorIs(t, err, fi.ENOEQ)
	_, err = a.InsertSvc("10.0.0.1", "1", nil, 0, nil)
	require.ErrorIs(t, err, fi.ENOEQ)
	_, err = a.InsertSym("10.0.0.1", 1, "1", 1, nil, 0, nil)
	require.ErrorIs(t, err, fi.ENOEQ)
}

// TestAsyncGood is the unit suite's av_good_vector_async: the call returns
// 0, then one FI_AV_COMPLETE with the count, the AV and the context.
func TestAsyncGood(t *testing.T) {
	for _, typ := range []Type{TypeMap, TypeTable} {
		a, q, f := openAsync(t, typ)
		out := fiAddrs(8)
		ctx := &struct{ x int }{1}
		n, err := a.InsertAddrPort(addrs(8), out, 0, ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		e, ee := readEvent(t, q)
		require.Nil(t, ee)
		require.Equal(t, eq.AVComplete, e.Event)
		require.Equal(t, uint64(8), e.Data)
		require.Same(t, a, e.FID)
		require.Same(t, ctx, e.Context)
		for i, h := range out {
			got, ok := a.AddrPort(h)
			require.True(t, ok)
			require.Equal(t, addrs(8)[i], got)
		}
		f.requireInStep(t, a)
		requireEmpty(t, q)
	}
}

// TestAsyncZero is the unit suite's av_zero_async: no addresses, still one
// completion with data 0.
func TestAsyncZero(t *testing.T) {
	a, q, _ := openAsync(t, TypeMap)
	n, err := a.Insert(nil, nil, 0, "zero")
	require.NoError(t, err)
	require.Zero(t, n)
	e, ee := readEvent(t, q)
	require.Nil(t, ee)
	require.Equal(t, eq.AVComplete, e.Event)
	require.Equal(t, uint64(0), e.Data)
	require.Equal(t, "zero", e.Context)
	requireEmpty(t, q)
}

// TestAsyncGoodBad is the unit suite's av_goodbad_vector_async: the first
// read says FI_EAVAIL, the error entry names the failed index, then the
// completion counts the one inserted.
func TestAsyncGoodBad(t *testing.T) {
	a, q, _ := openAsync(t, TypeTable)
	out := fiAddrs(2)
	_, err := a.Insert([][]byte{sin("10.0.0.1:7471"), sin("10.0.0.2:0")}, out, 0, "gb")
	require.NoError(t, err)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err = q.Read(0)
		if !errors.Is(err, fi.EAGAIN) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	require.ErrorIs(t, err, fi.EAVAIL)
	ee, err := q.ReadErr(0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), ee.Data)
	require.Greater(t, int(ee.Err), 0)
	require.Equal(t, "gb", ee.Context)
	require.Same(t, a, ee.FID)
	e, eerr := readEvent(t, q)
	require.Nil(t, eerr)
	require.Equal(t, eq.AVComplete, e.Event)
	require.Equal(t, uint64(1), e.Data)
	require.Equal(t, fi.Addr(0), out[0])
	require.Equal(t, fi.AddrNotAvail, out[1])
}

// TestAsyncAllFail: one error entry per address, then the completion with
// data 0.
func TestAsyncAllFail(t *testing.T) {
	a, q, _ := openAsync(t, TypeMap)
	bad := [][]byte{sin("10.0.0.1:0"), {1}, sin("0.0.0.0:1")}
	_, err := a.Insert(bad, fiAddrs(3), 0, "all")
	require.NoError(t, err)
	for i := range bad {
		_, ee := readEvent(t, q)
		require.NotNil(t, ee)
		require.Equal(t, uint64(i), ee.Data)
		require.Equal(t, fi.EINVAL, ee.Err)
	}
	e, ee := readEvent(t, q)
	require.Nil(t, ee)
	require.Equal(t, uint64(0), e.Data)
	require.Equal(t, "all", e.Context)
}

// TestAsyncTwoInFlight: an FI_MORE insert and the one after it complete
// independently, each with its context and count, errors first (the unit
// suite's av_good_2vector_async). The FI_MORE insert returns 0; the one
// ending the batch returns once the batch is in the AV, with its own
// count.
func TestAsyncTwoInFlight(t *testing.T) {
	a, q, f := openAsync(t, TypeTable)
	out1, out2 := fiAddrs(3), fiAddrs(2)
	all := addrs(5)
	n, err := a.InsertAddrPort([]netip.AddrPort{all[0], {}, all[1]}, out1, fi.MORE, "first")
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = a.InsertAddrPort(all[2:4], out2, 0, "second")
	require.NoError(t, err)
	require.Equal(t, 2, n, "the insert ending an FI_MORE batch returns its count")
	for i, h := range append([]fi.Addr{out1[0], out1[2]}, out2...) {
		got, ok := a.AddrPort(h)
		require.True(t, ok, "address %d not in the AV when the batch's last insert returned", i)
		require.Equal(t, append([]netip.AddrPort{all[0], all[1]}, all[2:4]...)[i], got)
	}

	got := map[any][]any{}
	for len(got["first"]) < 2 || len(got["second"]) < 1 {
		e, ee := readEvent(t, q)
		if ee != nil {
			require.Empty(t, got[ee.Context], "error entry after its completion")
			got[ee.Context] = append(got[ee.Context], *ee)
			continue
		}
		got[e.Context] = append(got[e.Context], e)
	}
	first, second := got["first"], got["second"]
	require.Len(t, first, 2)
	require.Equal(t, uint64(1), first[0].(eq.ErrEntry).Data)
	require.Equal(t, uint64(2), first[1].(eq.Entry).Data)
	require.Len(t, second, 1)
	require.Equal(t, uint64(2), second[0].(eq.Entry).Data)
	require.Equal(t, []fi.Addr{0, fi.AddrNotAvail, 1}, out1, "indices follow call order")
	require.Equal(t, []fi.Addr{2, 3}, out2)
	require.Equal(t, 1, f.updates, "one batched kernel write for both")
	f.requireInStep(t, a)
	requireEmpty(t, q)

	// An insert after the batch starts none: it returns 0 at once.
	n, err = a.InsertAddrPort(all[4:5], fiAddrs(1), 0, "third")
	require.NoError(t, err)
	require.Zero(t, n)
	e, ee := readEvent(t, q)
	require.Nil(t, ee)
	require.Equal(t, "third", e.Context)
	require.Equal(t, uint64(1), e.Data)
}

// TestAsyncKernelRefusal: when the kernel map refuses an entry, that
// address fails with its error, the rest of the batch is aborted with
// FI_ECANCELED, and none of them stays in the AV.
func TestAsyncKernelRefusal(t *testing.T) {
	a, q, f := openAsync(t, TypeMap)
	f.limit = 2
	out := fiAddrs(5)
	_, err := a.InsertAddrPort(addrs(5), out, 0, "full")
	require.NoError(t, err)
	wantErr := []fi.Errno{fi.ENOSPC, fi.ECANCELED, fi.ECANCELED}
	for i, w := range wantErr {
		_, ee := readEvent(t, q)
		require.NotNil(t, ee)
		require.Equal(t, uint64(2+i), ee.Data)
		require.Equal(t, w, ee.Err)
	}
	e, ee := readEvent(t, q)
	require.Nil(t, ee)
	require.Equal(t, uint64(2), e.Data)
	require.Equal(t, fi.AddrNotAvail, out[2])
	require.Equal(t, 2, a.Count())
	f.requireInStep(t, a)
}

// TestSyncKernelRefusal: the same for a synchronous insert, with
// FI_SYNC_ERR statuses; and an FI_MORE insert that had returned loses its
// addresses with an error from the flushing call.
func TestSyncKernelRefusal(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeTable})
	f.limit = 3
	st := make([]int, 5)
	n, err := a.InsertAddrPort(addrs(5), nil, fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, []int{0, 0, 0, int(fi.ENOSPC), int(fi.ECANCELED)}, st)
	require.Equal(t, 3, a.Count())
	f.requireInStep(t, a)

	all := addrs(10)
	n, err = a.InsertAddrPort(all[5:6], nil, fi.MORE, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = a.InsertAddrPort(all[6:7], nil, 0, nil)
	require.ErrorIs(t, err, fi.ENOSPC)
	require.Contains(t, err.Error(), "1 address(es) of earlier FI_MORE inserts")
	require.Equal(t, 0, n)
	require.Equal(t, 3, a.Count())
	f.requireInStep(t, a)
}

// TestMoreBatches: FI_MORE holds kernel writes back; an insert without it
// makes them all in one batch.
func TestMoreBatches(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeMap})
	all := addrs(30)
	for i := range 3 {
		_, err := a.InsertAddrPort(all[i*10:i*10+10], fiAddrs(10), fi.MORE, nil)
		require.NoError(t, err)
	}
	require.Zero(t, f.len(), "FI_MORE inserts not yet written")
	require.Equal(t, 30, a.Count(), "but usable in the AV")
	_, err := a.InsertAddrPort(nil, nil, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 30, f.len())
	require.Equal(t, 1, f.updates)
	f.requireInStep(t, a)

	// A remove writes held-back inserts first.
	out := fiAddrs(1)
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.1.0.1:1")}, out, fi.MORE, nil)
	require.NoError(t, err)
	require.NoError(t, a.Remove([]fi.Addr{out[0]}, 0))
	f.requireInStep(t, a)

	// Large inserts are written in batches of batchLen.
	f.updates = 0
	big := make([]netip.AddrPort, 3*batchLen)
	for i := range big {
		big[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{11, byte(i >> 16), byte(i >> 8), byte(i)}), 1)
	}
	_, err = a.InsertAddrPort(big, fiAddrs(len(big)), 0, nil)
	require.NoError(t, err)
	require.Equal(t, 3, f.updates)
	f.requireInStep(t, a)
}

// TestCloseAbortsQueued: Close aborts inserts still queued on an FI_EVENT
// AV (FI_ECANCELED each, then a completion with 0) and finishes the one
// running.
func TestCloseAbortsQueued(t *testing.T) {
	f := newFakeMirror()
	f.entered, f.block = make(chan struct{}), make(chan struct{})
	a, err := Open(Attr{Flags: fi.EVENT}, nil, WithMirror(f))
	require.NoError(t, err)
	q, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	require.NoError(t, a.Bind(q, 0))
	all := addrs(5)
	_, err = a.InsertAddrPort(all[:2], nil, 0, "running")
	require.NoError(t, err)
	<-f.entered // the worker is inside the kernel write of "running"
	_, err = a.InsertAddrPort(all[2:5], nil, 0, "queued")
	require.NoError(t, err)
	closed := make(chan error)
	go func() { closed <- a.Close() }()
	for { // Close has told the worker to stop
		a.async.mu.Lock()
		s := a.async.stopping
		a.async.mu.Unlock()
		if s {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(f.block)
	require.NoError(t, <-closed)

	e, ee := readEvent(t, q)
	require.Nil(t, ee)
	require.Equal(t, "running", e.Context)
	require.Equal(t, uint64(2), e.Data)
	for i := range 3 {
		_, ee := readEvent(t, q)
		require.NotNil(t, ee)
		require.Equal(t, "queued", ee.Context)
		require.Equal(t, uint64(i), ee.Data)
		require.Equal(t, fi.ECANCELED, ee.Err)
	}
	e, ee = readEvent(t, q)
	require.Nil(t, ee)
	require.Equal(t, "queued", e.Context)
	require.Equal(t, uint64(0), e.Data)
	require.NoError(t, q.Close(), "AV close unbinds the EQ")
}

func TestBind(t *testing.T) {
	a, _ := openTest(t, Attr{})
	q, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	require.ErrorIs(t, a.Bind(q, fi.MORE), fi.EBADFLAGS)
	require.ErrorIs(t, a.Bind(nil, 0), fi.EINVAL)
	require.NoError(t, a.Bind(q, 0))
	require.ErrorIs(t, a.Bind(q, 0), fi.EINVAL, "one EQ per AV")
	require.ErrorIs(t, q.Close(), fi.EBUSY, "the AV holds the EQ")
	require.NoError(t, a.Close())
	require.NoError(t, q.Close())
}

// TestCloseBusy: Close answers FI_EBUSY while an endpoint is bound.
func TestCloseBusy(t *testing.T) {
	a, err := Open(Attr{}, nil, WithMirror(nil))
	require.NoError(t, err)
	ep := &struct{ fi.FIDBase }{fi.NewFIDBase(fi.ClassEP, nil)}
	require.NoError(t, a.AttachEndpoint(ep))
	require.ErrorIs(t, a.AttachEndpoint(ep), fi.EINVAL)
	require.ErrorIs(t, a.Close(), fi.EBUSY)
	require.NoError(t, a.DetachEndpoint(ep))
	require.ErrorIs(t, a.DetachEndpoint(ep), fi.EINVAL)
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.AttachEndpoint(ep), fi.EINVAL, "closed")
}

// TestDuplicates: a second insert of an address fails with
// FI_EADDRINUSE, also within one call and across IPv4 forms; remove then
// insert works.
func TestDuplicates(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeMap})
	out := fiAddrs(1)
	_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:5")}, out, 0, nil)
	require.NoError(t, err)
	st := make([]int, 3)
	out2 := fiAddrs(3)
	n, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:5"), ap("[::ffff:10.0.0.1]:5"), ap("10.0.0.2:5")}, out2, fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []int{int(fi.EADDRINUSE), int(fi.EADDRINUSE), 0}, st)
	require.Equal(t, fi.AddrNotAvail, out2[0])
	n, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.3:5"), ap("10.0.0.3:5")}, fiAddrs(2), fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, int(fi.EADDRINUSE), st[1])
	require.Equal(t, out[0], a.FIAddr(ap("10.0.0.1:5")), "the existing handle")

	require.NoError(t, a.Remove(out, 0))
	require.Equal(t, fi.AddrNotAvail, a.FIAddr(ap("10.0.0.1:5")))
	n, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:5")}, out, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, out[0], a.FIAddr(ap("10.0.0.1:5")))
	f.requireInStep(t, a)
}

// TestRemove: remove is all or nothing.
func TestRemove(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeTable})
	_, err := a.InsertAddrPort(addrs(4), nil, 0, nil)
	require.NoError(t, err)
	require.ErrorIs(t, a.Remove([]fi.Addr{0, 9}, 0), fi.EINVAL)
	require.ErrorIs(t, a.Remove([]fi.Addr{1, 1}, 0), fi.EINVAL, "listed twice")
	require.ErrorIs(t, a.Remove([]fi.Addr{0}, fi.MORE), fi.EBADFLAGS)
	require.ErrorIs(t, a.Remove([]fi.Addr{0}, fi.AV_USER_ID), fi.EINVAL)
	require.Equal(t, 4, a.Count(), "nothing removed")
	require.NoError(t, a.Remove([]fi.Addr{0, 2}, 0))
	require.Equal(t, 2, a.Count())
	require.NoError(t, a.Remove(nil, 0))
	f.requireInStep(t, a)
}

// TestRxAddr: fi_rx_addr puts the receive context in the top rx_ctx_bits,
// and the AV resolves such addresses to the endpoint.
func TestRxAddr(t *testing.T) {
	require.Equal(t, fi.Addr(3<<60|5), RxAddr(5, 3, 4))
	require.Equal(t, fi.Addr(5), RxAddr(5, 3, 0))
	for _, typ := range []Type{TypeMap, TypeTable} {
		a, _ := openTest(t, Attr{Type: typ, RxCtxBits: 4})
		out := fiAddrs(1)
		_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1")}, out, 0, nil)
		require.NoError(t, err)
		rx := RxAddr(out[0], 3, a.Attr().RxCtxBits)
		require.Equal(t, 3, a.RxIndex(rx))
		got, ok := a.AddrPort(rx)
		require.True(t, ok)
		require.Equal(t, ap("10.0.0.1:1"), got)
		_, err = a.Lookup(rx, nil)
		require.NoError(t, err)
	}
}

// TestInsertSvc: node + service, FI_ADDR_STR node, host names.
func TestInsertSvc(t *testing.T) {
	a, _ := openTest(t, Attr{Type: TypeMap})
	out := fiAddrs(1)
	for _, tc := range []struct{ node, svc, want string }{
		{"10.0.0.1", "7471", "10.0.0.1:7471"},
		{"fd00::1", "7471", "[fd00::1]:7471"},
		{"fi_sockaddr_in://10.0.0.2:7472", "", "10.0.0.2:7472"},
		{"fi_sockaddr_in6://[fe80::1]:7471", "", "[fe80::1]:7471"},
	} {
		n, err := a.InsertSvc(tc.node, tc.svc, out, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n, tc.node)
		got, _ := a.AddrPort(out[0])
		require.Equal(t, ap(tc.want), got)
	}
	n, err := a.InsertSvc("localhost", "7473", out, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, _ := a.AddrPort(out[0])
	require.True(t, got.Addr().IsLoopback())
	for _, bad := range [][2]string{{"10.0.0.9", "0"}, {"10.0.0.9", "70000"}, {"10.0.0.9", ""}, {"", "1"},
		{"0.0.0.0", "1"}, {"fi_sockaddr_in://10.0.0.9", ""}} {
		n, err := a.InsertSvc(bad[0], bad[1], out, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 0, n, "%q", bad)
		require.Equal(t, fi.AddrNotAvail, out[0])
	}
	v4, _ := openTest(t, Attr{}, WithAddrFormat(fi.FormatSockaddr4))
	n, err = v4.InsertSvc("fd00::1", "1", nil, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 0, n, "IPv6 address into an FI_SOCKADDR_IN AV")
}

// TestInsertSym: the order of fi_av_insertsym's example, IPv6, and names.
func TestInsertSym(t *testing.T) {
	for _, flags := range []fi.Flags{0, fi.SYMMETRIC} {
		a, f := openTest(t, Attr{Type: TypeTable, Flags: flags})
		n, err := a.InsertSym("10.1.1.1", 2, "5000", 2, nil, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 4, n)
		for i, want := range []string{"10.1.1.1:5000", "10.1.1.1:5001", "10.1.1.2:5000", "10.1.1.2:5001"} {
			got, ok := a.AddrPort(fi.Addr(i))
			require.True(t, ok)
			require.Equal(t, ap(want), got, "flags %v", flags)
			require.Equal(t, fi.Addr(i), a.FIAddr(ap(want)))
		}
		out := fiAddrs(6)
		n, err = a.InsertSym("fd00::ff", 3, "7000", 2, out, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 6, n)
		for i, want := range []string{"[fd00::ff]:7000", "[fd00::ff]:7001", "[fd00::100]:7000", "[fd00::100]:7001", "[fd00::101]:7000", "[fd00::101]:7001"} {
			require.Equal(t, fi.Addr(4+i), out[i])
			got, _ := a.AddrPort(out[i])
			require.Equal(t, ap(want), got)
		}
		f.requireInStep(t, a)

		n, err = a.InsertSym("localhost", 1, "7000", 3, nil, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 3, n)

		_, err = a.InsertSym("host", 2, "1", 1, nil, 0, nil)
		require.ErrorIs(t, err, fi.EINVAL, "host name without numeric suffix")
		_, err = a.InsertSym("10.0.0.1", 1, "65535", 2, nil, 0, nil)
		require.ErrorIs(t, err, fi.EINVAL, "port range overflow")
		_, err = a.InsertSym("255.255.255.255", 2, "1", 1, nil, 0, nil)
		require.ErrorIs(t, err, fi.EINVAL, "address range overflow")
		_, err = a.InsertSym("10.0.0.1", -1, "1", 1, nil, 0, nil)
		require.ErrorIs(t, err, fi.EINVAL)
		n, err = a.InsertSym("10.0.0.1", 0, "1", 1, nil, 0, nil)
		require.NoError(t, err)
		require.Zero(t, n)
	}
}

func TestSymNodeNames(t *testing.T) {
	for _, tc := range []struct {
		node string
		want []string
	}{
		{"host10", []string{"host10", "host11", "host12"}},
		{"host09", []string{"host09", "host10", "host11"}},
		{"n7", []string{"n7", "n8", "n9"}},
		{"a1b99", []string{"a1b99", "a1b100", "a1b101"}},
	} {
		s, err := newSymSource(fi.FormatSockaddr, tc.node, 3, "1", 1)
		require.NoError(t, err)
		require.False(t, s.numeric)
		for i, w := range tc.want {
			require.Equal(t, w, s.nodeName(i))
		}
	}
}

// TestSymmetricRange: with FI_SYMMETRIC a symmetric insert is one range
// record, whatever its size; members behave like any address.
func TestSymmetricRange(t *testing.T) {
	for _, typ := range []Type{TypeMap, TypeTable} {
		a, f := openTest(t, Attr{Type: typ, Flags: fi.SYMMETRIC})
		out := fiAddrs(64 * 256)
		n, err := a.InsertSym("10.2.0.1", 64, "6000", 256, out, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 64*256, n)
		require.Len(t, a.t.ranges, 1)
		require.Zero(t, a.t.nchunks, "no per-address storage")
		require.Zero(t, a.t.hashed)
		f.requireInStep(t, a)

		// Member 300 is 10.2.0.2:6044.
		require.Equal(t, out[300], a.FIAddr(ap("10.2.0.2:6044")))
		require.Equal(t, fi.AddrNotAvail, a.FIAddr(ap("10.2.0.2:6256")))
		require.Equal(t, fi.AddrNotAvail, a.FIAddr(ap("10.2.0.65:6000")))

		// Remove a member, reinsert another address: TABLE reuses the index,
		// MAP's old handle stays dead.
		require.NoError(t, a.Remove([]fi.Addr{out[300]}, 0))
		_, ok := a.AddrPort(out[300])
		require.False(t, ok)
		require.Equal(t, fi.AddrNotAvail, a.FIAddr(ap("10.2.0.2:6044")))
		o := fiAddrs(1)
		_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.3.0.1:1")}, o, 0, nil)
		require.NoError(t, err)
		require.Equal(t, uint32(out[300]), uint32(o[0]))
		if typ == TypeMap {
			require.NotEqual(t, out[300], o[0])
		}
		_, ok = a.AddrPort(out[300])
		require.Equal(t, typ == TypeTable, ok)
		f.requireInStep(t, a)

		// A range overlapping existing addresses falls back to inserting
		// address by address, so the duplicates alone fail.
		n, err = a.InsertSym("10.2.0.64", 2, "6255", 2, fiAddrs(4), 0, nil)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.Len(t, a.t.ranges, 1)
		f.requireInStep(t, a)
	}
}

// TestSymmetricFillsHoles: FI_AV_TABLE's lowest-index rule holds for a
// symmetric insert too.
func TestSymmetricFillsHoles(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeTable, Flags: fi.SYMMETRIC})
	_, err := a.InsertAddrPort(addrs(4), nil, 0, nil)
	require.NoError(t, err)
	require.NoError(t, a.Remove([]fi.Addr{1, 2}, 0))
	out := fiAddrs(6)
	n, err := a.InsertSym("10.5.0.1", 3, "1", 2, out, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.Equal(t, []fi.Addr{1, 2, 4, 5, 6, 7}, out)
	for i, want := range []string{"10.5.0.1:1", "10.5.0.1:2", "10.5.0.2:1", "10.5.0.2:2", "10.5.0.3:1", "10.5.0.3:2"} {
		got, ok := a.AddrPort(out[i])
		require.True(t, ok)
		require.Equal(t, ap(want), got)
	}
	require.Len(t, a.t.ranges, 1)
	f.requireInStep(t, a)
}

// TestUserIDPerInsert: FI_AV_USER_ID per insert takes fi_addr as the IDs
// sources report; without it sources report the handle.
func TestUserIDPerInsert(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeMap})
	ids := []fi.Addr{100, 200}
	n, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1"), ap("10.0.0.2:1")}, ids, fi.AV_USER_ID, nil)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NotEqual(t, fi.Addr(100), ids[0], "output is the handle")
	require.Equal(t, fi.Addr(100), a.SourceAddr(ap("10.0.0.1:1")))
	require.Equal(t, fi.Addr(200), a.SourceAddr(ap("10.0.0.2:1")))
	require.Equal(t, ids[0], a.FIAddr(ap("10.0.0.1:1")))
	v, ok := f.get(a.ID(), ap("10.0.0.1:1"))
	require.True(t, ok)
	require.Equal(t, uint32(entryFlagUserIDSet), v.Flags)

	out := fiAddrs(1)
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.3:1")}, out, 0, nil)
	require.NoError(t, err)
	require.Equal(t, out[0], a.SourceAddr(ap("10.0.0.3:1")))
	require.Equal(t, fi.AddrNotAvail, a.SourceAddr(ap("10.0.0.4:1")))
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.5:1")}, nil, fi.AV_USER_ID, nil)
	require.ErrorIs(t, err, fi.EINVAL, "user IDs need fi_addr")
	require.ErrorIs(t, a.SetUserID(out[0], 1, 0), fi.EINVAL, "AV not opened with FI_AV_USER_ID")
}

// TestUserIDAV: an AV opened with FI_AV_USER_ID reports FI_ADDR_NOTAVAIL
// until SetUserID, and rejects the per-insert flag.
func TestUserIDAV(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeTable, Flags: fi.AV_USER_ID | fi.SYMMETRIC})
	out := fiAddrs(1)
	_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1")}, out, 0, nil)
	require.NoError(t, err)
	require.Equal(t, fi.AddrNotAvail, a.SourceAddr(ap("10.0.0.1:1")))
	require.NoError(t, a.SetUserID(out[0], 77, 0))
	require.Equal(t, fi.Addr(77), a.SourceAddr(ap("10.0.0.1:1")))
	v, _ := f.get(a.ID(), ap("10.0.0.1:1"))
	require.Equal(t, uint32(entryFlagUserIDSet), v.Flags)

	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.2:1")}, fiAddrs(1), fi.AV_USER_ID, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	require.ErrorIs(t, a.SetUserID(fi.Addr(99), 1, 0), fi.EINVAL)
	require.ErrorIs(t, a.SetUserID(out[0], 1, fi.MORE), fi.EBADFLAGS)

	// A member of a symmetric range takes a user ID too.
	sym := fiAddrs(8)
	_, err = a.InsertSym("10.7.0.1", 2, "1", 4, sym, 0, nil)
	require.NoError(t, err)
	require.NoError(t, a.SetUserID(sym[5], 55, 0))
	require.Equal(t, fi.Addr(55), a.SourceAddr(ap("10.7.0.2:2")))
	require.Equal(t, fi.AddrNotAvail, a.SourceAddr(ap("10.7.0.2:3")))
	require.Equal(t, sym[5], a.FIAddr(ap("10.7.0.2:2")))
	f.requireInStep(t, a)

	b, _ := openTest(t, Attr{}, WithAVAuthKey())
	_, err = b.InsertAddrPort(addrs(1), fiAddrs(1), fi.AV_USER_ID, nil)
	require.ErrorIs(t, err, fi.EINVAL, "per-insert FI_AV_USER_ID with FI_AV_AUTH_KEY")
}

// TestAuthKeys: insert, look up, bind addresses, remove with FI_EBUSY
// while in use.
func TestAuthKeys(t *testing.T) {
	plain, _ := openTest(t, Attr{})
	_, err := plain.InsertAuthKey(make([]byte, AuthKeySize), 0)
	require.ErrorIs(t, err, fi.EINVAL, "domain without FI_AV_AUTH_KEY")

	a, f := openTest(t, Attr{Type: TypeMap, Flags: fi.AV_USER_ID}, WithAVAuthKey())
	_, err = a.InsertAuthKey(make([]byte, AuthKeySize+1), 0)
	require.ErrorIs(t, err, fi.EINVAL, "wrong key size")
	_, err = a.InsertAuthKey(make([]byte, AuthKeySize), fi.MORE)
	require.ErrorIs(t, err, fi.EBADFLAGS)
	key := []byte("secret!!")
	hk, err := a.InsertAuthKey(key, 0)
	require.NoError(t, err)
	buf := make([]byte, 4)
	n, err := a.LookupAuthKey(hk, buf)
	require.NoError(t, err)
	require.Equal(t, AuthKeySize, n)
	require.Equal(t, key[:4], buf, "truncated")

	out := []fi.Addr{hk, hk}
	c, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1"), ap("10.0.0.2:1")}, out, fi.AUTH_KEY, nil)
	require.NoError(t, err)
	require.Equal(t, 2, c)
	buf = make([]byte, 16)
	n, err = a.LookupAuthKey(out[0], buf)
	require.NoError(t, err)
	require.Equal(t, key, buf[:n])
	v, _ := f.get(a.ID(), ap("10.0.0.1:1"))
	require.Equal(t, uint32(uint16(hk)), v.AuthKeyId)

	plainAddr := fiAddrs(1)
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.3:1")}, plainAddr, 0, nil)
	require.NoError(t, err)
	_, err = a.LookupAuthKey(plainAddr[0], buf)
	require.ErrorIs(t, err, fi.ENOKEY)

	require.Equal(t, fi.AddrNotAvail, a.AuthKeySource(hk))
	require.NoError(t, a.SetUserID(hk, 9, fi.AUTH_KEY))
	require.Equal(t, fi.Addr(9), a.AuthKeySource(hk))

	require.ErrorIs(t, a.Remove([]fi.Addr{hk}, fi.AUTH_KEY), fi.EBUSY, "addresses bound")
	require.NoError(t, a.Remove(out, 0))

	ep := &struct{ fi.FIDBase }{fi.NewFIDBase(fi.ClassEP, nil)}
	require.NoError(t, a.AttachEndpoint(ep))
	keys, err := a.EnableEndpoint(ep)
	require.NoError(t, err)
	require.Equal(t, []fi.Addr{hk}, keys)
	hk2, err := a.InsertAuthKey([]byte("later..."), 0)
	require.NoError(t, err)
	require.ErrorIs(t, a.Remove([]fi.Addr{hk}, fi.AUTH_KEY), fi.EBUSY, "endpoint enabled")
	require.NoError(t, a.Remove([]fi.Addr{hk2}, fi.AUTH_KEY), "not enabled against the later key")
	require.NoError(t, a.DisableEndpoint(ep))
	require.NoError(t, a.Remove([]fi.Addr{hk}, fi.AUTH_KEY))
	require.ErrorIs(t, a.Remove([]fi.Addr{hk}, fi.AUTH_KEY), fi.EINVAL, "gone")
	_, err = a.LookupAuthKey(hk, buf)
	require.ErrorIs(t, err, fi.EINVAL)
	require.NoError(t, a.DetachEndpoint(ep))

	st := make([]int, 1)
	out = []fi.Addr{hk}
	c, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.9:1")}, out, fi.AUTH_KEY|fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Zero(t, c)
	require.Equal(t, int(fi.ENOKEY), st[0], "stale auth key handle")
	_, err = a.InsertAddrPort(addrs(1), nil, fi.AUTH_KEY, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = plain.InsertAddrPort(addrs(1), []fi.Addr{hk}, fi.AUTH_KEY, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	f.requireInStep(t, a)
}

// TestHotPathNoAlloc: the data path's lookups allocate nothing.
func TestHotPathNoAlloc(t *testing.T) {
	a, _ := openTest(t, Attr{Type: TypeMap, Flags: fi.SYMMETRIC})
	out := fiAddrs(100)
	_, err := a.InsertAddrPort(addrs(100), out, 0, nil)
	require.NoError(t, err)
	_, err = a.InsertSym("10.9.0.1", 4, "1", 4, fiAddrs(16), 0, nil)
	require.NoError(t, err)
	peer, sym, stranger := addrs(100)[42], ap("10.9.0.3:2"), ap("192.0.2.1:1")
	var sink fi.Addr
	allocs := testing.AllocsPerRun(1000, func() {
		got, _ := a.AddrPort(out[42])
		sink += a.FIAddr(got) + a.SourceAddr(peer) + a.FIAddr(sym)
		sink += a.FIAddr(stranger) + a.SourceAddr(stranger)
		ip := peer.Addr().As16()
		sink += a.FIAddr16(&ip, peer.Port()) + a.SourceAddr16(&ip, peer.Port())
		if _, ok := a.AddrPort(fi.Addr(1) << 40); ok {
			sink++
		}
	})
	require.Zero(t, allocs)
	require.NotZero(t, sink)
	ip := peer.Addr().As16()
	require.Equal(t, out[42], a.FIAddr16(&ip, peer.Port()))
	require.Equal(t, out[42], a.SourceAddr16(&ip, peer.Port()))
	ip = sym.Addr().As16()
	require.Equal(t, a.FIAddr(sym), a.FIAddr16(&ip, sym.Port()))
	ip = stranger.Addr().As16()
	require.Equal(t, fi.AddrNotAvail, a.FIAddr16(&ip, stranger.Port()))
}

// TestMirrorInStepRandom: a random mix of inserts and removes keeps the
// kernel copy equal to the AV.
func TestMirrorInStepRandom(t *testing.T) {
	for _, typ := range []Type{TypeMap, TypeTable} {
		a, f := openTest(t, Attr{Type: typ, Flags: fi.SYMMETRIC})
		pool := addrs(500)
		var live []fi.Addr
		for round := range 200 {
			switch round % 4 {
			case 0, 1:
				lo := (round * 37) % 480
				out := fiAddrs(20)
				_, err := a.InsertAddrPort(pool[lo:lo+20], out, fi.MORE*fi.Flags(round%3/2), nil)
				require.NoError(t, err)
				for _, h := range out {
					if h != fi.AddrNotAvail {
						live = append(live, h)
					}
				}
			case 2:
				if len(live) > 10 {
					require.NoError(t, a.Remove(live[:7], 0))
					live = live[7:]
				}
			case 3:
				out := fiAddrs(6)
				_, err := a.InsertSym(fmt.Sprintf("10.100.%d.1", round), 2, "9", 3, out, 0, nil)
				require.NoError(t, err)
				live = append(live, out...)
			}
		}
		_, err := a.InsertAddrPort(nil, nil, 0, nil) // flush
		require.NoError(t, err)
		require.Equal(t, len(live), a.Count())
		f.requireInStep(t, a)
	}
}

// TestAsyncSvcSym: InsertSvc and InsertSym on an FI_EVENT AV resolve and
// insert in the worker, then complete like Insert.
func TestAsyncSvcSym(t *testing.T) {
	a, q, f := openAsync(t, TypeTable)
	out := fiAddrs(1)
	_, err := a.InsertSvc("localhost", "7000", out, 0, "svc")
	require.NoError(t, err)
	e, ee := readEvent(t, q)
	require.Nil(t, ee)
	require.Equal(t, "svc", e.Context)
	require.Equal(t, uint64(1), e.Data)
	require.Equal(t, fi.Addr(0), out[0])
	_, err = a.InsertSvc("10.0.0.1", "nonexistent-service-name", nil, 0, "bad")
	require.NoError(t, err)
	_, ee = readEvent(t, q)
	require.NotNil(t, ee)
	require.Equal(t, "bad", ee.Context)
	e, _ = readEvent(t, q)
	require.Equal(t, uint64(0), e.Data)

	sym := fiAddrs(4)
	_, err = a.InsertSym("10.1.1.1", 2, "5000", 2, sym, 0, "sym")
	require.NoError(t, err)
	e, ee = readEvent(t, q)
	require.Nil(t, ee)
	require.Equal(t, uint64(4), e.Data)
	require.Equal(t, []fi.Addr{1, 2, 3, 4}, sym)
	got, _ := a.AddrPort(3)
	require.Equal(t, ap("10.1.1.2:5000"), got)
	f.requireInStep(t, a)
	_, err = a.Insert(nil, nil, fi.SYNC_ERR, []int{})
	require.ErrorIs(t, err, fi.EINVAL, "FI_SYNC_ERR is synchronous only")
}

// TestBackgroundWrites runs large inserts with batches written in the
// background (as on machines with 4 CPUs or more), including a kernel
// refusal in the middle of the batches in flight.
func TestBackgroundWrites(t *testing.T) {
	saved := maxInflight
	maxInflight = 2
	t.Cleanup(func() { maxInflight = saved })

	a, f := openTest(t, Attr{Type: TypeTable})
	n := 5*batchLen + 7
	in := make([]netip.AddrPort, n)
	for i := range in {
		in[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{12, byte(i >> 16), byte(i >> 8), byte(i)}), 3)
	}
	got, err := a.InsertAddrPort(in, nil, 0, nil)
	require.NoError(t, err)
	require.Equal(t, n, got)
	require.Equal(t, 6, f.updates)
	f.requireInStep(t, a)
	require.NoError(t, a.Remove([]fi.Addr{0, 1, 2}, 0))

	b, g := openTest(t, Attr{Type: TypeMap})
	// The map refuses every address from index 2*batchLen+100 on. Not a
	// count limit: batches in flight land in any order, and a count
	// would make which address is refused depend on it.
	g.refuse = func(k bpf.XdpfabAvKey) bool {
		return int(k.Addr[13])<<16|int(k.Addr[14])<<8|int(k.Addr[15]) >= 2*batchLen+100
	}
	st := make([]int, n)
	out := fiAddrs(n)
	got, err = b.InsertAddrPort(in, out, fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 2*batchLen+100, got)
	require.Equal(t, int(fi.ENOSPC), st[2*batchLen+100])
	require.Equal(t, int(fi.ECANCELED), st[2*batchLen+101])
	require.Equal(t, fi.AddrNotAvail, out[2*batchLen+100])
	require.Equal(t, 0, st[2*batchLen+99])
	require.Equal(t, got, b.Count())
	g.requireInStep(t, b)
}
