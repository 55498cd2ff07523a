package mr_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

const unitKey = 0xC0DE // FT_MR_KEY of libfabric's unit suite

func TestModeEffective(t *testing.T) {
	for _, tc := range []struct {
		in, want mr.Mode
		err      bool
	}{
		{mr.ModeUnspec, 0, false},
		{mr.ModeScalable, 0, false},
		{mr.ModeBasic, mr.ModeVirtAddr | mr.ModeAllocated | mr.ModeProvKey, false},
		{mr.ModeLocal | mr.ModeRaw | mr.ModeVirtAddr | mr.ModeAllocated | mr.ModeProvKey | mr.ModeMMUNotify |
			mr.ModeRMAEvent | mr.ModeEndpoint | mr.ModeHMEM,
			mr.ModeLocal | mr.ModeRaw | mr.ModeVirtAddr | mr.ModeAllocated | mr.ModeProvKey | mr.ModeMMUNotify |
				mr.ModeRMAEvent | mr.ModeEndpoint | mr.ModeHMEM, false},
		{mr.ModeBasic | mr.ModeLocal, 0, true},
		{mr.ModeScalable | mr.ModeProvKey, 0, true},
		{mr.ModeBasic | mr.ModeScalable, 0, true},
		{1 << 11, 0, true},
	} {
		got, err := tc.in.Effective()
		if tc.err {
			requireErrno(t, err, fi.EINVAL, tc.in)
			_, err = mr.NewTable(mr.Config{Mode: tc.in})
			requireErrno(t, err, fi.EINVAL, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		tab, err := mr.NewTable(mr.Config{Mode: tc.in})
		require.NoError(t, err)
		require.Equal(t, tc.want, tab.Mode())
	}
	require.Equal(t, "FI_MR_UNSPEC", mr.ModeUnspec.String())
	require.Equal(t, "FI_MR_LOCAL|FI_MR_PROV_KEY", (mr.ModeLocal | mr.ModeProvKey).String())
	require.Equal(t, 1<<10, int(mr.ModeHMEM))
	require.Equal(t, "FI_HMEM_SYSTEM", mr.HMEMSystem.String())
}

func TestDomainAttrs(t *testing.T) {
	tab, _ := newTable(t, 0)
	require.GreaterOrEqual(t, tab.IOVLimit(), 8, "mr_iov_limit")
	require.Equal(t, mr.IOVLimit, tab.IOVLimit())
	require.Equal(t, 8, tab.KeySize())
	require.Equal(t, uint32(testDomain), tab.DomainID())
}

// TestRegSizesAccess is libfabric's unit test mr_reg: requested key 0xC0DE,
// sizes 1 B ... 8 MiB, every access combination, close, and the same key
// again.
func TestRegSizesAccess(t *testing.T) {
	tab, mm := newTable(t, 0)
	buf := make([]byte, 8<<20)
	for _, size := range testSizes() {
		for _, access := range allAccess() {
			m, err := tab.Reg(buf[:size], access, 0, unitKey, 0, nil)
			require.NoError(t, err, "size %d access %#x", size, access)
			require.Equal(t, uint64(unitKey), m.Key())
			require.Equal(t, fi.ClassMR, m.Class())
			require.Equal(t, uint64(size), m.Len())
			require.Equal(t, access, m.Access())
			v, ok := mm.get(testDomain, unitKey)
			require.True(t, ok)
			require.Equal(t, uint64(0), v.Base)
			require.Equal(t, uint64(size), v.Len)
			require.Equal(t, uint32(access), v.Access)
			require.Equal(t, mr.RegionEnabled, v.Flags)
			require.Equal(t, m.RegionID(), v.RegionId)
			require.NoError(t, m.Close())
			_, ok = mm.get(testDomain, unitKey)
			require.False(t, ok, "close removes the map entry")
			_, err = tab.Lookup(unitKey, 0, 1, fi.REMOTE_READ)
			require.ErrorIs(t, err, mr.UnknownKey)
		}
	}
	require.Equal(t, 0, tab.Count())
	require.NoError(t, tab.Close())
}

// TestRegV is the unit test mr_regv: 1 ... mr_iov_limit buffers as one
// region, addressed as one 0-based range in registration order.
func TestRegV(t *testing.T) {
	tab, mm := newTable(t, 0)
	for _, size := range []int{mr.IOVLimit, 4096, 1 << 20, 8 << 20} {
		buf := make([]byte, size)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		for n := 1; n <= tab.IOVLimit(); n++ {
			// n pieces of buf, registered in reverse order so the region's
			// offsets differ from buf's.
			piece := size / n
			iov := make([][]byte, n)
			var want []byte
			for i := range n {
				lo := (n - 1 - i) * piece
				hi := lo + piece
				if i == 0 {
					hi = size
				}
				iov[i] = buf[lo:hi]
				want = append(want, iov[i]...)
			}
			m, err := tab.RegV(iov, fi.REMOTE_READ|fi.REMOTE_WRITE, 0, unitKey, 0, "ctx")
			require.NoError(t, err, "size %d n %d", size, n)
			require.Equal(t, uint64(len(want)), m.Len())
			v, _ := mm.get(testDomain, unitKey)
			require.Equal(t, uint64(len(want)), v.Len)

			sp, err := tab.Lookup(unitKey, 0, uint64(len(want)), fi.REMOTE_READ)
			require.NoError(t, err)
			require.Len(t, sp.AppendBufs(nil), n)
			var got []byte
			for _, b := range sp.AppendBufs(nil) {
				got = append(got, b...)
			}
			require.Equal(t, want, got)
			require.NoError(t, m.Close())
		}
	}
	_, err := tab.RegV(nil, fi.REMOTE_READ, 0, 1, 0, nil)
	requireErrno(t, err, fi.EINVAL)
	iov := make([][]byte, mr.IOVLimit+1)
	for i := range iov {
		iov[i] = make([]byte, 8)
	}
	_, err = tab.RegV(iov, fi.REMOTE_READ, 0, 1, 0, nil)
	requireErrno(t, err, fi.EINVAL, "more than mr_iov_limit buffers")
	_, err = tab.RegV([][]byte{make([]byte, 8), {}}, fi.REMOTE_READ, 0, 1, 0, nil)
	requireErrno(t, err, fi.EINVAL, "an empty buffer")
}

// TestRegAttr is the unit test mr_regattr over the same sizes, with the
// other fi_mr_attr fields.
func TestRegAttr(t *testing.T) {
	tab, _ := newTable(t, 0)
	buf := make([]byte, 8<<20)
	for _, size := range testSizes() {
		for _, access := range allAccess() {
			m, err := tab.RegAttr(&mr.Attr{IOV: [][]byte{buf[:size]}, Access: access,
				RequestedKey: unitKey, Context: size, Iface: mr.HMEMSystem, Device: 3}, 0)
			require.NoError(t, err)
			require.Equal(t, size, m.Context())
			require.Equal(t, uint64(unitKey), m.Key())
			require.NoError(t, m.Close())
		}
	}
	_, err := tab.RegAttr(nil, 0)
	requireErrno(t, err, fi.EINVAL)
	for _, iface := range []mr.HMEMIface{mr.HMEMCUDA, mr.HMEMROCR, mr.HMEMZE, mr.HMEMNeuron, mr.HMEMSynapseAI, 99} {
		_, err = tab.RegAttr(&mr.Attr{IOV: [][]byte{buf[:8]}, Access: fi.REMOTE_READ, Iface: iface}, 0)
		requireErrno(t, err, fi.ENOSYS, iface)
	}
	_, err = tab.RegAttr(&mr.Attr{IOV: [][]byte{buf[:8]}, Offset: 4}, 0)
	requireErrno(t, err, fi.EINVAL, "offset is reserved")
	require.Equal(t, 0, tab.Count())
}

// TestRegFreeAlloc: five rounds of register 8 MiB, close, free, allocate
// anew; the region always covers the new memory.
func TestRegFreeAlloc(t *testing.T) {
	tab, mm := newTable(t, 0)
	for round := range 5 {
		func() {
			buf := make([]byte, 8<<20)
			buf[len(buf)-1] = byte(round + 1)
			m, err := tab.Reg(buf, fi.REMOTE_READ|fi.REMOTE_WRITE, 0, unitKey, 0, nil)
			require.NoError(t, err)
			sp, err := tab.Lookup(unitKey, 8<<20-1, 1, fi.REMOTE_READ)
			require.NoError(t, err)
			require.Equal(t, byte(round+1), sp.First[0])
			require.NoError(t, m.Close())
		}()
		runtime.GC() // the buffer is garbage now: free it
	}
	require.Equal(t, 0, mm.len())
}

func TestRegErrors(t *testing.T) {
	tab, _ := newTable(t, 0)
	buf := make([]byte, 64)
	_, err := tab.Reg(nil, fi.REMOTE_READ, 0, 1, 0, nil)
	requireErrno(t, err, fi.EINVAL, "len 0")
	_, err = tab.Reg(buf[:0], fi.REMOTE_READ, 0, 1, 0, nil)
	requireErrno(t, err, fi.EINVAL, "len 0")
	_, err = tab.Reg(buf, fi.REMOTE_READ, 1, 1, 0, nil)
	requireErrno(t, err, fi.EINVAL, "offset must be 0")
	_, err = tab.Reg(buf, fi.REMOTE_READ, 0, 1, fi.RMA_PMEM, nil)
	requireErrno(t, err, fi.EBADFLAGS, "FI_RMA_PMEM")
	_, err = tab.Reg(buf, fi.REMOTE_READ, 0, 1, fi.SEND, nil)
	requireErrno(t, err, fi.EBADFLAGS)
	_, err = tab.Reg(buf, fi.REMOTE_READ|fi.TAGGED, 0, 1, 0, nil)
	requireErrno(t, err, fi.EINVAL, "unknown access bit")
	_, err = tab.Reg(buf, fi.REMOTE_READ, 0, fi.KeyNotAvail, 0, nil)
	requireErrno(t, err, fi.EKEYREJECTED, "key out of range")

	m, err := tab.Reg(buf, fi.REMOTE_READ, 0, 1, 0, nil)
	require.NoError(t, err)
	_, err = tab.Reg(buf, fi.REMOTE_READ, 0, 1, 0, nil)
	requireErrno(t, err, fi.ENOKEY, "key in use")
	m2, err := tab.Reg(buf, fi.REMOTE_READ, 0, 0, fi.RMA_EVENT, nil)
	require.NoError(t, err, "key 0 and FI_RMA_EVENT without FI_MR_RMA_EVENT")
	require.True(t, m2.Enabled(), "FI_RMA_EVENT does not disable without FI_MR_RMA_EVENT")
	require.NoError(t, m.Close())
	requireErrno(t, m.Close(), fi.EINVAL, "double close")
	m, err = tab.Reg(buf, fi.REMOTE_READ, 0, 1, 0, nil)
	require.NoError(t, err, "a closed key can be registered again")

	requireErrno(t, tab.Close(), fi.EBUSY, "regions open")
	require.NoError(t, m.Close())
	require.NoError(t, m2.Close())
	require.NoError(t, tab.Close())
	requireErrno(t, tab.Close(), fi.EINVAL)
	_, err = tab.Reg(buf, fi.REMOTE_READ, 0, 1, 0, nil)
	requireErrno(t, err, fi.EINVAL, "domain closed")
}

func TestMaxRegions(t *testing.T) {
	tab, err := mr.NewTable(mr.Config{MaxRegions: 3})
	require.NoError(t, err)
	buf := make([]byte, 8)
	var ms []*mr.MR
	for k := range 3 {
		m, err := tab.Reg(buf, fi.REMOTE_READ, 0, uint64(k), 0, nil)
		require.NoError(t, err)
		ms = append(ms, m)
	}
	_, err = tab.Reg(buf, fi.REMOTE_READ, 0, 3, 0, nil)
	requireErrno(t, err, fi.ENOMR)
	require.NoError(t, ms[0].Close())
	_, err = tab.Reg(buf, fi.REMOTE_READ, 0, 3, 0, nil)
	require.NoError(t, err)
	_, err = mr.NewTable(mr.Config{MaxRegions: -1})
	requireErrno(t, err, fi.EINVAL)
}

// TestMirrorFailure: a mirror that refuses the entry fails the
// registration (a full map is FI_ENOMR) and leaves the key free.
func TestMirrorFailure(t *testing.T) {
	tab, mm := newTable(t, 0)
	buf := make([]byte, 8)
	mm.failNext(fmt.Errorf("map update: %w", syscall.E2BIG))
	_, err := tab.Reg(buf, fi.REMOTE_READ, 0, 5, 0, nil)
	requireErrno(t, err, fi.ENOMR)
	mm.failNext(syscall.EPERM)
	_, err = tab.Reg(buf, fi.REMOTE_READ, 0, 5, 0, nil)
	requireErrno(t, err, fi.EPERM)
	mm.failNext(fmt.Errorf("weird"))
	_, err = tab.Reg(buf, fi.REMOTE_READ, 0, 5, 0, nil)
	requireErrno(t, err, fi.EIO)
	require.Equal(t, 0, tab.Count())
	_, err = tab.Lookup(5, 0, 1, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.UnknownKey)
	m, err := tab.Reg(buf, fi.REMOTE_READ, 0, 5, 0, nil)
	require.NoError(t, err)
	require.Equal(t, uint64(5), m.Key())
}

// TestManyKeys grows the key index past several rehashes and churns it.
func TestManyKeys(t *testing.T) {
	tab, mm := newTable(t, 0)
	buf := make([]byte, 16)
	const n = 5000
	ms := make([]*mr.MR, n)
	for i := range n {
		var err error
		ms[i], err = tab.Reg(buf, fi.REMOTE_READ, 0, uint64(i)*0x10001, 0, nil)
		require.NoError(t, err)
	}
	require.Equal(t, n, tab.Count())
	for i := 0; i < n; i += 2 {
		require.NoError(t, ms[i].Close())
	}
	for i := range n {
		_, err := tab.Lookup(uint64(i)*0x10001, 0, 16, fi.REMOTE_READ)
		if i%2 == 0 {
			require.ErrorIs(t, err, mr.UnknownKey, i)
		} else {
			require.NoError(t, err, i)
		}
	}
	// Churn: re-register the closed keys many times over.
	for round := range 3 {
		for i := 0; i < n; i += 2 {
			m, err := tab.Reg(buf, fi.REMOTE_READ, 0, uint64(i)*0x10001, 0, nil)
			require.NoError(t, err, "round %d key %d", round, i)
			require.NoError(t, m.Close())
		}
	}
	require.Equal(t, n/2, tab.Count())
	require.Equal(t, n/2, mm.len())
	for i := 1; i < n; i += 2 {
		require.NoError(t, ms[i].Close())
	}
	require.Equal(t, 0, tab.Count())
	require.NoError(t, tab.Close())
}

// TestProvKey: FI_MR_PROV_KEY ignores the requested key and returns
// unique keys, also across close and re-registration.
func TestProvKey(t *testing.T) {
	tab, mm := newTable(t, mr.ModeProvKey)
	buf := make([]byte, 64)
	seen := map[uint64]bool{}
	for i := range 2000 {
		m, err := tab.Reg(buf, fi.REMOTE_READ, 0, unitKey, 0, nil)
		require.NoError(t, err)
		k := m.Key()
		require.NotEqual(t, fi.KeyNotAvail, k)
		require.False(t, seen[k], "key %#x returned twice", k)
		seen[k] = true
		_, ok := mm.get(testDomain, k)
		require.True(t, ok)
		_, err = tab.Lookup(k, 0, 64, fi.REMOTE_READ)
		require.NoError(t, err)
		if i%2 == 0 {
			require.NoError(t, m.Close())
		}
	}
	_, err := tab.Reg(buf, fi.REMOTE_READ, 0, fi.KeyNotAvail, 0, nil)
	require.NoError(t, err, "the requested key is ignored with FI_MR_PROV_KEY")
}

// TestBasicMode: FI_MR_BASIC behaves as FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|
// FI_MR_PROV_KEY.
func TestBasicMode(t *testing.T) {
	tab, mm := newTable(t, mr.ModeBasic)
	require.Equal(t, mr.ModeVirtAddr|mr.ModeAllocated|mr.ModeProvKey, tab.Mode())
	buf := make([]byte, 3*4096)
	for i := range buf {
		buf[i] = 1 // resident (FI_MR_ALLOCATED)
	}
	m, err := tab.Reg(buf, fi.REMOTE_WRITE, 0, unitKey, 0, nil)
	require.NoError(t, err)
	require.NotEqual(t, uint64(unitKey), m.Key(), "provider key")
	va := addrOfBuf(buf)
	require.Equal(t, va, m.Base())
	v, _ := mm.get(testDomain, m.Key())
	require.Equal(t, va, v.Base)
	_, err = tab.Lookup(m.Key(), va+10, 4, fi.REMOTE_WRITE)
	require.NoError(t, err)
	_, err = tab.Lookup(m.Key(), 10, 4, fi.REMOTE_WRITE)
	require.ErrorIs(t, err, mr.OutOfRange, "offsets are not addresses under FI_MR_BASIC")

	untouched := mmapUntouched(t, 2)
	_, err = tab.Reg(untouched, fi.REMOTE_WRITE, 0, 0, 0, nil)
	requireErrno(t, err, fi.EFAULT, "FI_MR_ALLOCATED is part of FI_MR_BASIC")
}

// TestRegKeepsMemory: registered memory stays reachable while the MR
// exists, however the caller drops its own references, and is freed once
// the region is closed and the handle dropped.
func TestRegKeepsMemory(t *testing.T) {
	tab, _ := newTable(t, 0)
	var collected atomic.Bool
	m := func() *mr.MR {
		arr := new([1 << 20]byte)
		runtime.AddCleanup(arr, func(*atomic.Bool) { collected.Store(true) }, &collected)
		m, err := tab.Reg(arr[:], remoteBits, 0, 1, 0, nil)
		require.NoError(t, err)
		return m
	}()
	for range 3 {
		runtime.GC()
	}
	require.False(t, collected.Load(), "collected while registered")
	func() {
		sp, err := tab.Lookup(1, 1<<20-8, 8, fi.REMOTE_WRITE)
		require.NoError(t, err)
		copy(sp.First, "survives")
	}()
	require.NoError(t, m.Close())
	require.Equal(t, fi.KeyNotAvail, m.Key(), "no key once closed")
	m = nil // drop the handle
	require.Eventually(t, func() bool { runtime.GC(); return collected.Load() }, 5*time.Second, 10*time.Millisecond,
		"closed and dropped: freed")
}
