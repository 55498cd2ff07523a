package veth

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestKernelResidentAdopted: the application's own private anonymous
// pages, adopted by MRRegKernelAt (what the C provider does under
// XDPFAB_KERNEL_WINDOWS=1), keep their address and contents, and remote
// fetch-adds on them are served in XDP and seen through the application's
// pointer; after Close the pointer still holds the bytes, in private
// anonymous memory again. Memory that is not whole private anonymous
// pages, or is adopted already, is refused.
func TestKernelResidentAdopted(t *testing.T) {
	testenv.RequirePriv(t)
	tc := transportCases[1]
	require.Equal(t, "xdp-native", tc.name)
	net := newNet(t, tc, netOpts{node: func(side, int) nodeOpts { return nodeOpts{noRemoteCntr: true} }})
	target := net.target()

	const size = 64 << 10
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(buf) })
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	shared, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(shared) })
	access := fi.REMOTE_READ | fi.REMOTE_WRITE
	_, err = target.dom.MRRegKernelAt(shared, access, 0, kernelKey, 0, nil)
	require.ErrorIs(t, err, fi.EINVAL, "shared memory")
	_, err = target.dom.MRRegKernelAt(buf[:size-1], access, 0, kernelKey, 0, nil)
	require.ErrorIs(t, err, fi.EINVAL, "not whole pages")
	_, err = target.dom.MRRegKernelAt(buf[1:4097], access, 0, kernelKey, 0, nil)
	require.ErrorIs(t, err, fi.EINVAL, "not page-aligned")

	m, err := target.dom.MRRegKernelAt(buf, access, 0, kernelKey, 0, nil)
	require.NoError(t, err)
	require.Equal(t, "rw-s anon_inode:bpf-map", mappingOf(t, &buf[0]), "adopted pages map the region")
	for i := range buf {
		if buf[i] != byte(i*7) {
			t.Fatalf("byte %d changed by the adoption: %d", i, buf[i])
		}
	}
	_, err = target.dom.MRRegKernelAt(buf[4096:8192], access, 0, kernelKey+1, 0, nil)
	require.ErrorIs(t, err, fi.EINVAL, "adopted already (no longer private)")

	// The counter at offset 64 starts from the pattern's bytes there.
	counter := (*uint64)(unsafe.Pointer(&buf[64]))
	start := atomic.LoadUint64(counter)
	before := xdpCounters(t, net, sideB, tc)
	const total = 2000
	a := net.nodes[sideA][0]
	fetched, err := fetchAdds{n: a, peer: a.peers[0], key: kernelKey, off: 64, total: total,
		depth: 16, timeout: 60 * time.Second}.run()
	require.NoError(t, err)
	d := counterDelta(before, xdpCounters(t, net, sideB, tc))
	t.Logf("XDP counter deltas: %v", d)
	require.Equal(t, start+total, atomic.LoadUint64(counter), "the application's pointer sees every fetch-add")
	require.Len(t, fetched, total)
	require.Positive(t, d["tx_served"], "XDP served fetch-adds on the adopted pages")

	require.NoError(t, m.Close())
	require.Equal(t, "rw-p", mappingOf(t, &buf[0]), "private anonymous again after Close")
	require.Equal(t, start+total, *counter, "bytes kept by Close")
	for i := range buf {
		if i >= 64 && i < 72 {
			continue
		}
		if buf[i] != byte(i*7) {
			t.Fatalf("byte %d changed: %d", i, buf[i])
		}
	}
	buf[0] = 1 // still writable
}

// mappingOf returns the permissions and path of the mapping holding p.
func mappingOf(t *testing.T, p *byte) string {
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	addr := uintptr(unsafe.Pointer(p))
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 5 {
			continue
		}
		var lo, hi uintptr
		if _, err := fmt.Sscanf(fs[0], "%x-%x", &lo, &hi); err != nil || addr < lo || addr >= hi {
			continue
		}
		return strings.TrimSpace(fs[1] + " " + strings.Join(fs[5:], " "))
	}
	t.Fatalf("%#x is not mapped", addr)
	return ""
}
