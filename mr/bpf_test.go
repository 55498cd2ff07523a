package mr_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/bpffs"
	"github.com/xdpfab/xdpfab/internal/epoch"
	"github.com/xdpfab/xdpfab/internal/ktable"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

func newBPFTable(tb testing.TB, mode mr.Mode, domain uint32, maxEntries uint32) (*mr.Table, *ebpf.Map) {
	return newBPFTableSized(tb, mr.Config{Mode: mode, DomainID: domain, Epochs: epoch.New()}, maxEntries)
}

// newBPFTableConfig is newBPFTable with the Table's whole configuration
// but the mirror.
func newBPFTableConfig(tb testing.TB, cfg mr.Config) (*mr.Table, *ebpf.Map) {
	return newBPFTableSized(tb, cfg, 0)
}

func newBPFTableSized(tb testing.TB, cfg mr.Config, maxEntries uint32) (*mr.Table, *ebpf.Map) {
	tb.Helper()
	testenv.RequirePriv(tb)
	m, err := mr.CreateMap(mr.MapOptions{MaxEntries: maxEntries})
	require.NoError(tb, err)
	tb.Cleanup(func() { m.Close() })
	mirror, err := mr.NewMapMirror(m)
	require.NoError(tb, err)
	require.Same(tb, m, mirror.Map())
	cfg.Mirror = mirror
	tab, err := mr.NewTable(cfg)
	require.NoError(tb, err)
	return tab, m
}

// kernelEntry reads the entry of (domain, key) back from the kernel: the
// object's mr_vet program looks it up in m as XDP code does.
func kernelEntry(t *testing.T, m *ebpf.Map, domain uint32, key uint64) (bpf.XdpfabMrValue, bool) {
	t.Helper()
	ans := vet(t, loadVet(t, m), bpf.XdpfabMrVetReq{DomainId: domain, Key: key})
	switch ans.Verdict {
	case vetNoKey:
		return bpf.XdpfabMrValue{}, false
	case vetBusy:
		t.Fatalf("entry (%d, %#x) busy with no writer", domain, key)
	}
	return ans.Value, true
}

// TestBPFMirror reads the MR map back from the kernel through every
// registration, enable, refresh and close.
func TestBPFMirror(t *testing.T) {
	tab, m := newBPFTable(t, mr.ModeRMAEvent|mr.ModeVirtAddr, 11, 0)
	buf := make([]byte, 8192)
	r, err := tab.RegV([][]byte{buf[4096:], buf[:100]}, fi.REMOTE_READ|fi.SEND, 0, 0xC0DE, fi.RMA_EVENT, nil)
	require.NoError(t, err)
	v, ok := kernelEntry(t, m, 11, 0xC0DE)
	require.True(t, ok)
	require.Equal(t, bpf.XdpfabMrValue{Base: addrOfBuf(buf), Len: 8192, Access: uint32(fi.REMOTE_READ | fi.SEND),
		RegionId: r.RegionID(), Flags: 0}, v, "created disabled")
	_, ok = kernelEntry(t, m, 12, 0xC0DE)
	require.False(t, ok, "keyed by domain")

	require.NoError(t, r.Enable())
	v, _ = kernelEntry(t, m, 11, 0xC0DE)
	require.Equal(t, mr.RegionEnabled, v.Flags)

	require.NoError(t, r.Refresh(nil, 0))
	v, _ = kernelEntry(t, m, 11, 0xC0DE)
	require.Equal(t, mr.RegionEnabled, v.Flags, "re-enabled after refresh")
	// Enable and Refresh rewrote the region's one entry in its slot.
	kt, err := ktable.OpenReadOnly(m)
	require.NoError(t, err)
	defer kt.Close()
	require.Equal(t, 1, kt.Len())

	plain, err := tab.Reg(buf, fi.REMOTE_WRITE, 0, 1, 0, nil)
	require.NoError(t, err)
	v, _ = kernelEntry(t, m, 11, 1)
	require.Equal(t, mr.RegionEnabled, v.Flags)
	require.NotEqual(t, r.RegionID(), v.RegionId)

	require.NoError(t, r.Close())
	_, ok = kernelEntry(t, m, 11, 0xC0DE)
	require.False(t, ok, "deleted before Close returns")
	r, err = tab.Reg(buf, fi.REMOTE_READ, 0, 0xC0DE, 0, nil)
	require.NoError(t, err, "same key again")
	v, _ = kernelEntry(t, m, 11, 0xC0DE)
	require.Equal(t, uint64(8192), v.Len)
	require.Equal(t, 2, kt.Len())
	require.NoError(t, r.Close())
	require.NoError(t, plain.Close())
	_, ok = kernelEntry(t, m, 11, 1)
	require.False(t, ok)
	require.Zero(t, kt.Len())
}

// TestBPFMapFull: a key whose buckets in the kernel table are full is
// FI_ENOMR and leaves the key free; the smallest table (2 buckets of 8
// slots) fills up to its 16 slots.
func TestBPFMapFull(t *testing.T) {
	tab, m := newBPFTable(t, 0, 1, 4)
	buf := make([]byte, 64)
	var ms []*mr.MR
	var full uint64
	for k := range uint64(100) {
		r, err := tab.Reg(buf, fi.REMOTE_READ, 0, k, 0, nil)
		if err != nil {
			requireErrno(t, err, fi.ENOMR)
			full = k
			break
		}
		ms = append(ms, r)
	}
	require.Equal(t, 16, len(ms), "two buckets of 8 fill completely before a key is refused")
	require.Equal(t, 16, tab.Count(), "the refused key is not counted")
	_, ok := kernelEntry(t, m, 1, full)
	require.False(t, ok)
	for _, r := range ms {
		require.NoError(t, r.Close())
	}
	r, err := tab.Reg(buf, fi.REMOTE_READ, 0, full, 0, nil)
	require.NoError(t, err, "tombstones are reused")
	require.NoError(t, r.Close())
}

// TestBPFPinned: the map is pinned under bpffs and opened again from there,
// as the XDP attach code does.
func TestBPFPinned(t *testing.T) {
	testenv.RequirePriv(t)
	dir := bpffs.Path("test-mr-" + filepath.Base(t.TempDir()))
	t.Cleanup(func() { os.RemoveAll(dir) })
	m, err := mr.CreateMap(mr.MapOptions{PinDir: dir, MaxEntries: 128})
	require.NoError(t, err)
	defer m.Close()
	path := filepath.Join(dir, bpf.XdpfabMapMrMap)
	require.FileExists(t, path)

	mirror, err := mr.NewMapMirror(m)
	require.NoError(t, err)
	tab, err := mr.NewTable(mr.Config{DomainID: 3, Mirror: mirror})
	require.NoError(t, err)
	buf := make([]byte, 64)
	r, err := tab.Reg(buf, fi.REMOTE_READ, 0, 99, 0, nil)
	require.NoError(t, err)

	again, err := mr.LoadPinnedMap(path)
	require.NoError(t, err)
	defer again.Close()
	v, ok := kernelEntry(t, again, 3, 99)
	require.True(t, ok, "seen through the pinned map")
	require.Equal(t, uint64(64), v.Len)
	shared, err := mr.CreateMap(mr.MapOptions{PinDir: dir, MaxEntries: 128})
	require.NoError(t, err, "an existing pinned map is reused")
	defer shared.Close()
	_, ok = kernelEntry(t, shared, 3, 99)
	require.True(t, ok)
	require.NoError(t, r.Close())

	// A map of another layout is refused.
	wrong, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	require.NoError(t, err)
	defer wrong.Close()
	_, err = mr.NewMapMirror(wrong)
	require.Error(t, err)
	wrongPath := filepath.Join(dir, "wrong")
	require.NoError(t, wrong.Pin(wrongPath))
	_, err = mr.LoadPinnedMap(wrongPath)
	require.Error(t, err)
	_, err = mr.LoadPinnedMap(filepath.Join(dir, "missing"))
	require.Error(t, err)
	_, err = mr.NewMapMirror(nil)
	require.Error(t, err)
}

// TestBPFRegSizesAccess is the unit suite's mr_reg against the kernel map:
// every size and access combination is visible in mr_map while registered
// and gone once closed.
func TestBPFRegSizesAccess(t *testing.T) {
	tab, m := newBPFTable(t, 0, 21, 0)
	buf := make([]byte, 8<<20)
	for _, size := range testSizes() {
		for _, access := range allAccess() {
			r, err := tab.Reg(buf[:size], access, 0, unitKey, 0, nil)
			require.NoError(t, err)
			v, ok := kernelEntry(t, m, 21, unitKey)
			require.True(t, ok)
			require.Equal(t, bpf.XdpfabMrValue{Len: uint64(size), Access: uint32(access), RegionId: r.RegionID(),
				Flags: mr.RegionEnabled}, v)
			require.NoError(t, r.Close())
			_, ok = kernelEntry(t, m, 21, unitKey)
			require.False(t, ok)
		}
	}
}
