package av

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// fakeMirror is a Mirror in Go memory, so unprivileged tests can check
// what the kernel map would hold. limit > 0 makes it refuse entries past
// that many with E2BIG, as a full BPF hash map does; block, if set, makes
// Update wait for a value on it (after signalling entered).
type fakeMirror struct {
	mu      sync.Mutex
	m       map[bpf.XdpfabAvKey]bpf.XdpfabAvValue
	updates int // Update calls
	deletes int // Delete calls
	limit   int
	// refuse, if set, refuses the keys it reports, whatever was written
	// before: a full map that does not depend on the order in which
	// concurrent batches land.
	refuse  func(bpf.XdpfabAvKey) bool
	entered chan struct{}
	block   chan struct{}
}

func newFakeMirror() *fakeMirror {
	return &fakeMirror{m: map[bpf.XdpfabAvKey]bpf.XdpfabAvValue{}}
}

func (f *fakeMirror) Update(keys []bpf.XdpfabAvKey, values []bpf.XdpfabAvValue) (int, error) {
	if f.block != nil {
		f.entered <- struct{}{}
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates++
	for i := range keys {
		if f.refuse != nil && f.refuse(keys[i]) {
			return i, fmt.Errorf("fake map update: %w", unix.E2BIG)
		}
		if _, ok := f.m[keys[i]]; !ok && f.limit > 0 && len(f.m) >= f.limit {
			return i, fmt.Errorf("fake map update: %w", unix.E2BIG)
		}
		f.m[keys[i]] = values[i]
	}
	return len(keys), nil
}

func (f *fakeMirror) Delete(keys []bpf.XdpfabAvKey) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes++
	for i := range keys {
		delete(f.m, keys[i])
	}
	return len(keys), nil
}

func (f *fakeMirror) Map() *ebpf.Map { return nil }

func (f *fakeMirror) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}

func (f *fakeMirror) get(avID uint32, ap netip.AddrPort) (bpf.XdpfabAvValue, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.m[kernelKey(avID, endpoint{ip: ap.Addr().As16(), port: ap.Port()})]
	return v, ok
}

// requireInStep checks that the kernel copy holds exactly the AV's
// entries with their handles.
func requireInStep(t testing.TB, a *AV, entries map[bpf.XdpfabAvKey]bpf.XdpfabAvValue) {
	t.Helper()
	n := 0
	for k, v := range entries {
		if k.AvId != a.ID() {
			continue
		}
		n++
		require.Zero(t, k.Pad)
		ap := endpointOfKey(&k).addrPort()
		require.Equal(t, fi.Addr(v.FiAddr), a.FIAddr(ap), "kernel entry %v", ap)
		got, ok := a.AddrPort(fi.Addr(v.FiAddr))
		require.True(t, ok)
		require.Equal(t, ap, got)
	}
	require.Equal(t, a.Count(), n, "kernel map holds %d entries, AV %d", n, a.Count())
}

func (f *fakeMirror) requireInStep(t testing.TB, a *AV) {
	t.Helper()
	f.mu.Lock()
	m := make(map[bpf.XdpfabAvKey]bpf.XdpfabAvValue, len(f.m))
	for k, v := range f.m {
		m[k] = v
	}
	f.mu.Unlock()
	requireInStep(t, a, m)
}

// openTest opens an AV on a fake mirror, closed when t ends.
func openTest(t testing.TB, attr Attr, opts ...Option) (*AV, *fakeMirror) {
	t.Helper()
	f := newFakeMirror()
	a, err := Open(attr, "avctx", append([]Option{WithMirror(f)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a, f
}

func sin(ap string) []byte {
	p := netip.MustParseAddrPort(ap)
	b := make([]byte, SockaddrInLen)
	binary.NativeEndian.PutUint16(b, afInet)
	binary.BigEndian.PutUint16(b[2:], p.Port())
	a4 := p.Addr().As4()
	copy(b[4:], a4[:])
	return b
}

func sin6(ap string) []byte {
	p := netip.MustParseAddrPort(ap)
	b := make([]byte, SockaddrIn6Len)
	binary.NativeEndian.PutUint16(b, afInet6)
	binary.BigEndian.PutUint16(b[2:], p.Port())
	a16 := p.Addr().As16()
	copy(b[8:], a16[:])
	return b
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// addrs returns n distinct IPv4 endpoints 10.x.y.z:7471.
func addrs(n int) []netip.AddrPort {
	out := make([]netip.AddrPort, n)
	for i := range out {
		out[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 7471)
	}
	return out
}

func fiAddrs(n int) []fi.Addr {
	s := make([]fi.Addr, n)
	for i := range s {
		s[i] = fi.Addr(0xdead)
	}
	return s
}
