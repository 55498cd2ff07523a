package mr_test

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/epoch"
	"github.com/xdpfab/xdpfab/mr"
)

// memMirror is a Mirror in memory: it records the entries, can fail on
// demand and can run a hook inside an update (to observe intermediate
// states, or to hold an asynchronous registration).
type memMirror struct {
	mu      sync.Mutex
	entries map[bpf.XdpfabMrKey]bpf.XdpfabMrValue
	updates []bpf.XdpfabMrValue // every value written, in order
	failErr error               // returned by the next Update when set
	hook    func(bpf.XdpfabMrKey, bpf.XdpfabMrValue)
}

func newMemMirror() *memMirror {
	return &memMirror{entries: map[bpf.XdpfabMrKey]bpf.XdpfabMrValue{}}
}

func (mm *memMirror) Update(k *bpf.XdpfabMrKey, v *bpf.XdpfabMrValue) error {
	mm.mu.Lock()
	hook, err := mm.hook, mm.failErr
	mm.failErr = nil
	mm.mu.Unlock()
	if hook != nil {
		hook(*k, *v)
	}
	if err != nil {
		return err
	}
	mm.mu.Lock()
	defer mm.mu.Unlock()
	mm.entries[*k] = *v
	mm.updates = append(mm.updates, *v)
	return nil
}

func (mm *memMirror) Delete(k *bpf.XdpfabMrKey) error {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	delete(mm.entries, *k)
	return nil
}

func (mm *memMirror) get(domain uint32, key uint64) (bpf.XdpfabMrValue, bool) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	v, ok := mm.entries[bpf.XdpfabMrKey{DomainId: domain, Key: key}]
	return v, ok
}

func (mm *memMirror) len() int {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	return len(mm.entries)
}

func (mm *memMirror) setHook(h func(bpf.XdpfabMrKey, bpf.XdpfabMrValue)) {
	mm.mu.Lock()
	mm.hook = h
	mm.mu.Unlock()
}

func (mm *memMirror) failNext(err error) {
	mm.mu.Lock()
	mm.failErr = err
	mm.mu.Unlock()
}

// counter is a minimal completion counter (what fabric.Cntr provides).
type counter struct {
	fi.FIDBase
	n      atomic.Uint64
	closed atomic.Bool
}

func newCounter() *counter { return &counter{FIDBase: fi.NewFIDBase(fi.ClassCntr, nil)} }

func (c *counter) Add(v uint64) error { c.n.Add(v); return nil }
func (c *counter) Closed() bool       { return c.closed.Load() }

// endpoint is a minimal endpoint.
type endpoint struct {
	fi.FIDBase
	closed atomic.Bool
}

func newEndpoint() *endpoint { return &endpoint{FIDBase: fi.NewFIDBase(fi.ClassEP, nil)} }

func (e *endpoint) Closed() bool { return e.closed.Load() }

const testDomain = 7

// newTable returns a Table that recycles regions, in an epoch domain of
// its own: with no reader registered a closed region is filled again by
// the next registration, the most eager reuse there is. Tests that look
// keys up from other goroutines register them as readers (Table.Epochs).
func newTable(tb testing.TB, mode mr.Mode) (*mr.Table, *memMirror) {
	tb.Helper()
	mm := newMemMirror()
	t, err := mr.NewTable(mr.Config{Mode: mode, DomainID: testDomain, Mirror: mm, Epochs: epoch.New()})
	require.NoError(tb, err)
	return t, mm
}

// requireErrno checks that err carries errno.
func requireErrno(tb testing.TB, err error, errno fi.Errno, msgAndArgs ...any) {
	tb.Helper()
	require.Error(tb, err, msgAndArgs...)
	require.Truef(tb, errors.Is(err, errno), "got %v (%s), want %s %v", err, fi.ErrnoOf(err).Name(), errno.Name(), msgAndArgs)
}

// allAccess lists every combination of the six access bits.
func allAccess() []fi.Flags {
	bits := []fi.Flags{fi.SEND, fi.RECV, fi.READ, fi.WRITE, fi.REMOTE_READ, fi.REMOTE_WRITE}
	var out []fi.Flags
	for c := 0; c < 1<<len(bits); c++ {
		var f fi.Flags
		for i, b := range bits {
			if c&(1<<i) != 0 {
				f |= b
			}
		}
		out = append(out, f)
	}
	return out
}

// testSizes are the sizes of libfabric's unit suite: 1 B ... 8 MiB.
func testSizes() []int {
	var s []int
	for n := 1; n <= 8<<20; n <<= 1 {
		s = append(s, n)
	}
	return s
}

const remoteBits = fi.REMOTE_READ | fi.REMOTE_WRITE

func addrOfBuf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// mmapAnon maps pages fresh anonymous pages, not yet backed by memory. The
// caller unmaps them.
func mmapAnon(tb testing.TB, pages int) []byte {
	tb.Helper()
	b, err := unix.Mmap(-1, 0, pages*os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(tb, err)
	return b
}

// mmapUntouched is mmapAnon unmapped when the test ends.
func mmapUntouched(tb testing.TB, pages int) []byte {
	b := mmapAnon(tb, pages)
	tb.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}

// touch writes every page of b so it is backed.
func touch(b []byte) {
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
}

func unsafePtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
