package mr_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// TestDefaultMode: application keys, 0-based offsets, no local
// registration needed, enabled at once.
func TestDefaultMode(t *testing.T) {
	tab, mm := newTable(t, 0)
	buf := make([]byte, 100)
	m, err := tab.Reg(buf[10:60], remoteBits, 0, 42, 0, nil)
	require.NoError(t, err)
	require.Equal(t, uint64(42), m.Key())
	require.Equal(t, uint64(0), m.Base())
	require.True(t, m.Enabled())
	sp, err := tab.Lookup(42, 0, 50, fi.REMOTE_READ)
	require.NoError(t, err)
	require.Equal(t, addrOfBuf(buf[10:]), addrOfBuf(sp.First), "offset 0 is the buffer's first byte")
	_, err = tab.Lookup(42, addrOfBuf(buf[10:]), 1, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.OutOfRange, "virtual addresses are not offsets")
	require.NoError(t, tab.CheckLocal(mr.Desc{}, buf, fi.SEND), "no FI_MR_LOCAL: desc ignored")
	v, _ := mm.get(testDomain, 42)
	require.Equal(t, bpf.XdpfabMrValue{Base: 0, Len: 50, Access: uint32(remoteBits), RegionId: m.RegionID(), Flags: mr.RegionEnabled}, v)
}

// TestVirtAddr: peers address by virtual address; every byte of a
// multi-buffer region by its own address.
func TestVirtAddr(t *testing.T) {
	tab, mm := newTable(t, mr.ModeVirtAddr)
	buf := make([]byte, 1000)
	for i := range buf {
		buf[i] = byte(i)
	}
	va := addrOfBuf(buf)
	// Three buffers: [100,200) and [200,300) adjacent, [500,600) after a gap,
	// registered out of address order.
	m, err := tab.RegV([][]byte{buf[500:600], buf[100:200], buf[200:300]}, remoteBits, 0, 9, 0, nil)
	require.NoError(t, err)
	require.Equal(t, va+100, m.Base())
	require.Equal(t, uint64(300), m.Len())
	v, _ := mm.get(testDomain, 9)
	require.Equal(t, va+100, v.Base)
	require.Equal(t, uint64(500), v.Len, "the map holds the extent")

	sp, err := tab.Lookup(9, va+150, 100, fi.REMOTE_READ)
	require.NoError(t, err, "across adjacent buffers")
	require.False(t, sp.Contiguous())
	require.Equal(t, [][]byte{buf[150:200], buf[200:250]}, sp.AppendBufs(nil))
	require.Equal(t, buf[150:200], sp.First)
	sp, err = tab.Lookup(9, va+550, 50, fi.REMOTE_WRITE)
	require.NoError(t, err)
	require.Equal(t, buf[550:600], sp.First)
	_, err = tab.Lookup(9, va+250, 100, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.OutOfRange, "into the gap")
	_, err = tab.Lookup(9, va+350, 10, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.OutOfRange, "inside the gap")
	_, err = tab.Lookup(9, 0, 10, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.OutOfRange, "offsets are not addresses")
	raw := make([]byte, 8)
	base, _, err := m.RawAttr(raw, 0)
	require.NoError(t, err)
	require.Equal(t, va+100, base, "fi_mr_raw_attr's base_addr")
}

// TestEndpointMode: FI_MR_ENDPOINT regions are disabled until bound to an
// endpoint and enabled.
func TestEndpointMode(t *testing.T) {
	tab, mm := newTable(t, mr.ModeEndpoint)
	buf := make([]byte, 64)
	m, err := tab.Reg(buf, remoteBits, 0, 1, 0, nil)
	require.NoError(t, err)
	require.False(t, m.Enabled())
	require.Equal(t, uint64(1), m.Key(), "the key is known before enabling")
	v, ok := mm.get(testDomain, 1)
	require.True(t, ok)
	require.Zero(t, v.Flags, "mirrored disabled")
	_, err = tab.Lookup(1, 0, 8, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.RegionDisabled)
	requireErrno(t, m.Enable(), fi.EOPBADSTATE, "not bound to an endpoint")

	closedEP := newEndpoint()
	require.NoError(t, m.Bind(closedEP, 0))
	closedEP.closed.Store(true)
	requireErrno(t, m.Enable(), fi.EOPBADSTATE, "bound endpoint closed")

	ep := newEndpoint()
	requireErrno(t, m.Bind(ep, fi.REMOTE_WRITE), fi.EBADFLAGS, "endpoint flags must be 0")
	require.False(t, m.BoundTo(ep))
	require.NoError(t, m.Bind(ep, 0))
	require.True(t, m.BoundTo(ep))
	require.True(t, m.BoundTo(closedEP))
	require.False(t, m.BoundTo(newEndpoint()))
	requireErrno(t, m.Bind(ep, 0), fi.EALREADY)
	require.NoError(t, m.Enable())
	require.NoError(t, m.Enable(), "enable twice")
	require.True(t, m.Enabled())
	v, _ = mm.get(testDomain, 1)
	require.Equal(t, mr.RegionEnabled, v.Flags)
	_, err = tab.Lookup(1, 0, 8, fi.REMOTE_READ)
	require.NoError(t, err)
	requireErrno(t, m.Bind(newEndpoint(), 0), fi.EOPBADSTATE, "no bindings after enable")

	requireErrno(t, m.Close(), fi.EBUSY, "bound endpoint open")
	ep.closed.Store(true)
	require.NoError(t, m.Close())
}

// TestRMAEventMode: FI_RMA_EVENT regions start disabled, take their
// counters, are enabled, then take no more bindings.
func TestRMAEventMode(t *testing.T) {
	tab, mm := newTable(t, mr.ModeRMAEvent)
	buf := make([]byte, 64)
	m, err := tab.Reg(buf, remoteBits, 0, 1, fi.RMA_EVENT, nil)
	require.NoError(t, err)
	require.False(t, m.Enabled())
	_, err = tab.Lookup(1, 0, 8, fi.REMOTE_WRITE)
	require.ErrorIs(t, err, mr.RegionDisabled)
	requireErrno(t, err, fi.EOPBADSTATE)
	v, _ := mm.get(testDomain, 1)
	require.Zero(t, v.Flags)

	c1, c2 := newCounter(), newCounter()
	require.NoError(t, m.Bind(c1, fi.REMOTE_WRITE))
	require.NoError(t, m.Bind(c2, fi.REMOTE_WRITE))
	require.NoError(t, m.Enable())
	v, _ = mm.get(testDomain, 1)
	require.Equal(t, mr.RegionEnabled, v.Flags)
	requireErrno(t, m.Bind(newCounter(), fi.REMOTE_WRITE), fi.EOPBADSTATE, "no bindings after enable")

	sp, err := tab.Lookup(1, 0, 8, fi.REMOTE_WRITE)
	require.NoError(t, err)
	sp.MR.CountRemoteWrite()
	sp.MR.CountRemoteWrite()
	require.Equal(t, uint64(2), c1.n.Load())
	require.Equal(t, uint64(2), c2.n.Load())

	// Without FI_RMA_EVENT: enabled at once, but no counter may be bound.
	m2, err := tab.Reg(buf, remoteBits, 0, 2, 0, nil)
	require.NoError(t, err)
	require.True(t, m2.Enabled())
	requireErrno(t, m2.Bind(newCounter(), fi.REMOTE_WRITE), fi.EINVAL)
	require.NoError(t, m2.Enable(), "enabling an enabled region is a no-op")

	requireErrno(t, m.Close(), fi.EBUSY, "bound counters open")
	c1.closed.Store(true)
	requireErrno(t, m.Close(), fi.EBUSY, "one bound counter open")
	c2.closed.Store(true)
	require.NoError(t, m.Close())
}

// TestRawMode: with FI_MR_RAW the key is obtained raw, exchanged, and
// mapped at the peer.
func TestRawMode(t *testing.T) {
	target, _ := newTable(t, mr.ModeRaw|mr.ModeProvKey)
	peer, _ := newTable(t, mr.ModeRaw|mr.ModeProvKey)
	buf := make([]byte, 64)
	m, err := target.Reg(buf, remoteBits, 0, 0, 0, nil)
	require.NoError(t, err)
	require.Equal(t, fi.KeyNotAvail, m.Key(), "FI_MR_RAW: key only through fi_mr_raw_attr")

	small := make([]byte, 4)
	_, size, err := m.RawAttr(small, 0)
	requireErrno(t, err, fi.ETOOSMALL)
	require.Equal(t, target.KeySize(), size, "the size needed")
	_, _, err = m.RawAttr(make([]byte, 8), fi.SEND)
	requireErrno(t, err, fi.EBADFLAGS)
	raw := make([]byte, size)
	base, size, err := m.RawAttr(raw, 0)
	require.NoError(t, err)
	require.Equal(t, 8, size)

	key, err := peer.MapRaw(base, raw, 0)
	require.NoError(t, err)
	require.True(t, peer.IsMapped(key))
	_, err = target.Lookup(key, 0, 64, fi.REMOTE_READ)
	require.NoError(t, err, "the mapped key reaches the region")
	key2, err := peer.MapRaw(base, raw, 0)
	require.NoError(t, err)
	require.Equal(t, key, key2)

	_, err = peer.MapRaw(base, raw[:7], 0)
	requireErrno(t, err, fi.EINVAL)
	_, err = peer.MapRaw(base, raw, fi.SEND)
	requireErrno(t, err, fi.EBADFLAGS)
	_, err = peer.MapRaw(base, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0)
	requireErrno(t, err, fi.EINVAL, "FI_KEY_NOTAVAIL is no key")

	requireErrno(t, peer.Close(), fi.EBUSY, "mapped keys must be freed before the domain closes")
	require.NoError(t, peer.UnmapKey(key))
	require.True(t, peer.IsMapped(key), "mapped twice")
	require.NoError(t, peer.UnmapKey(key))
	require.False(t, peer.IsMapped(key))
	requireErrno(t, peer.UnmapKey(key), fi.EINVAL)
	require.NoError(t, peer.Close())
	_, err = peer.MapRaw(base, raw, 0)
	requireErrno(t, err, fi.EINVAL, "domain closed")

	// The raw functions work without FI_MR_RAW too.
	plain, _ := newTable(t, 0)
	m2, err := plain.Reg(buf, remoteBits, 0, 77, 0, nil)
	require.NoError(t, err)
	_, _, err = m2.RawAttr(raw, 0)
	require.NoError(t, err)
	key, err = plain.MapRaw(0, raw, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(77), key)
	require.NoError(t, plain.UnmapKey(key))

	require.NoError(t, m.Close())
	_, _, err = m.RawAttr(raw, 0)
	requireErrno(t, err, fi.EINVAL, "closed region")
}

// TestLocalMode: with FI_MR_LOCAL local buffers need a valid descriptor.
func TestLocalMode(t *testing.T) {
	tab, _ := newTable(t, mr.ModeLocal)
	other, _ := newTable(t, mr.ModeLocal)
	buf := make([]byte, 256)
	m, err := tab.RegV([][]byte{buf[0:100], buf[100:200]}, fi.SEND|fi.READ, 0, 1, 0, nil)
	require.NoError(t, err)
	d := m.Desc()
	require.Equal(t, m, d.MR())

	require.NoError(t, tab.CheckLocal(d, buf[10:20], fi.SEND))
	require.NoError(t, tab.CheckLocal(d, buf[50:150], fi.READ), "across adjacent buffers")
	require.NoError(t, tab.CheckLocal(d, buf[0:200], fi.SEND|fi.READ))
	requireErrno(t, tab.CheckLocal(d, buf[10:20], fi.RECV), fi.EACCES)
	requireErrno(t, tab.CheckLocal(d, buf[10:20], fi.WRITE), fi.EACCES)
	requireErrno(t, tab.CheckLocal(d, buf[190:210], fi.SEND), fi.EFAULT, "past the region")
	requireErrno(t, tab.CheckLocal(d, make([]byte, 8), fi.SEND), fi.EFAULT, "another buffer")
	requireErrno(t, tab.CheckLocal(mr.Desc{}, buf[:8], fi.SEND), fi.EINVAL, "desc required")
	require.NoError(t, tab.CheckLocal(mr.Desc{}, nil, fi.SEND), "nothing to access")

	om, err := other.Reg(buf, fi.SEND, 0, 1, 0, nil)
	require.NoError(t, err)
	requireErrno(t, tab.CheckLocal(om.Desc(), buf[:8], fi.SEND), fi.EINVAL, "another domain's desc")

	require.NoError(t, m.Close())
	requireErrno(t, tab.CheckLocal(d, buf[:8], fi.SEND), fi.EINVAL, "closed region")

	// FI_MR_HMEM without FI_MR_LOCAL: desc valid or NULL.
	htab, _ := newTable(t, mr.ModeHMEM)
	hm, err := htab.Reg(buf, fi.SEND, 0, 1, 0, nil)
	require.NoError(t, err)
	require.NoError(t, htab.CheckLocal(mr.Desc{}, buf[:8], fi.SEND), "NULL")
	require.NoError(t, htab.CheckLocal(hm.Desc(), buf[:8], fi.SEND), "valid")
	requireErrno(t, htab.CheckLocal(hm.Desc(), buf[:8], fi.RECV), fi.EACCES, "not valid for the access")
	requireErrno(t, htab.CheckLocal(d, buf[:8], fi.SEND), fi.EINVAL, "not valid: closed, other domain")

	// FI_MR_LOCAL with FI_MR_ENDPOINT: a disabled region's desc is refused.
	etab, _ := newTable(t, mr.ModeLocal|mr.ModeEndpoint)
	em, err := etab.Reg(buf, fi.SEND, 0, 1, 0, nil)
	require.NoError(t, err)
	requireErrno(t, etab.CheckLocal(em.Desc(), buf[:8], fi.SEND), fi.EOPBADSTATE)
}

// TestAllocatedMode: FI_MR_ALLOCATED needs backed pages at registration.
func TestAllocatedMode(t *testing.T) {
	tab, _ := newTable(t, mr.ModeAllocated)
	b := mmapUntouched(t, 4)
	_, err := tab.Reg(b, remoteBits, 0, 1, 0, nil)
	requireErrno(t, err, fi.EFAULT, "pages not backed")
	touch(b[:2*os.Getpagesize()])
	_, err = tab.Reg(b, remoteBits, 0, 1, 0, nil)
	requireErrno(t, err, fi.EFAULT, "half backed")
	touch(b)
	m, err := tab.Reg(b, remoteBits, 0, 1, 0, nil)
	require.NoError(t, err)
	require.NoError(t, m.Close())

	// Without FI_MR_ALLOCATED any address range registers.
	plain, _ := newTable(t, 0)
	m, err = plain.Reg(mmapUntouched(t, 4), remoteBits, 0, 1, 0, nil)
	require.NoError(t, err)
	require.NoError(t, m.Close())
}

func isResident(t *testing.T, b []byte) bool {
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafePtr(b)), uintptr(len(b)), uintptr(unsafePtr(vec)))
	require.Zero(t, e)
	for _, v := range vec {
		if v&1 == 0 {
			return false
		}
	}
	return true
}

// TestMMUNotifyRefresh: with FI_MR_MMU_NOTIFY, Refresh disables the region,
// brings its pages in, and re-enables it; peers fail meanwhile.
func TestMMUNotifyRefresh(t *testing.T) {
	tab, mm := newTable(t, mr.ModeMMUNotify)
	b := mmapAnon(t, 4)
	page := os.Getpagesize()
	m, err := tab.Reg(b, remoteBits, 0, 1, 0, nil)
	require.NoError(t, err, "unbacked memory registers without FI_MR_ALLOCATED")
	require.False(t, isResident(t, b))

	var during []error
	var flags []uint32
	mm.setHook(func(_ bpf.XdpfabMrKey, v bpf.XdpfabMrValue) {
		flags = append(flags, v.Flags)
		_, err := tab.Lookup(1, 0, 8, fi.REMOTE_READ)
		during = append(during, err)
	})
	require.NoError(t, m.Refresh(nil, 0))
	mm.setHook(nil)
	require.True(t, isResident(t, b), "refresh backs the pages")
	require.Equal(t, []uint32{0, mr.RegionEnabled}, flags, "mirror disabled, then enabled")
	for _, err := range during {
		require.ErrorIs(t, err, mr.RegionDisabled, "peers fail while the refresh is occurring")
	}
	_, err = tab.Lookup(1, 0, 8, fi.REMOTE_READ)
	require.NoError(t, err)

	require.NoError(t, m.Refresh([][]byte{b[page : 2*page]}, 0), "part of the region")
	requireErrno(t, m.Refresh([][]byte{make([]byte, 8)}, 0), fi.EINVAL, "outside the region")
	requireErrno(t, m.Refresh(nil, fi.SEND), fi.EBADFLAGS)

	// The pages go away: refresh fails and the region stays disabled until a
	// refresh succeeds on new pages.
	require.NoError(t, unix.Munmap(b))
	requireErrno(t, m.Refresh(nil, 0), fi.EFAULT)
	_, err = tab.Lookup(1, 0, 8, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.RegionDisabled)
	v, _ := mm.get(testDomain, 1)
	require.Zero(t, v.Flags)
	nb, err := unix.MmapPtr(-1, 0, unsafePtr(b), uintptr(len(b)), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.MunmapPtr(nb, uintptr(len(b))) })
	require.NoError(t, m.Refresh(nil, 0))
	_, err = tab.Lookup(1, 0, 8, fi.REMOTE_READ)
	require.NoError(t, err)
	v, _ = mm.get(testDomain, 1)
	require.Equal(t, mr.RegionEnabled, v.Flags)
	require.NoError(t, m.Close())
	requireErrno(t, m.Refresh(nil, 0), fi.EINVAL, "closed")
}

// TestRefreshDisabledRegion: refreshing a region not yet enabled leaves it
// disabled.
func TestRefreshDisabledRegion(t *testing.T) {
	tab, mm := newTable(t, mr.ModeRMAEvent|mr.ModeMMUNotify)
	buf := make([]byte, 64)
	m, err := tab.Reg(buf, remoteBits, 0, 1, fi.RMA_EVENT, nil)
	require.NoError(t, err)
	require.NoError(t, m.Refresh(nil, 0))
	require.False(t, m.Enabled())
	v, _ := mm.get(testDomain, 1)
	require.Zero(t, v.Flags)
	require.NoError(t, m.Enable())
	require.True(t, m.Enabled())
}
