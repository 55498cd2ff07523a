package mr_test

import (
	"errors"
	"hash/fnv"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

var allOps = []mr.Op{mr.OpRead, mr.OpWrite, mr.OpAtomic, mr.OpFetchAtomic, mr.OpCompareAtomic}

// TestAccessTable: every access combination against every remote
// operation kind. Only FI_REMOTE_READ / FI_REMOTE_WRITE admit peers.
func TestAccessTable(t *testing.T) {
	needs := map[mr.Op]fi.Flags{
		mr.OpRead:          fi.REMOTE_READ,
		mr.OpWrite:         fi.REMOTE_WRITE,
		mr.OpAtomic:        fi.REMOTE_WRITE,
		mr.OpFetchAtomic:   fi.REMOTE_READ | fi.REMOTE_WRITE,
		mr.OpCompareAtomic: fi.REMOTE_READ | fi.REMOTE_WRITE,
	}
	tab, _ := newTable(t, 0)
	buf := make([]byte, 64)
	for _, access := range allAccess() {
		m, err := tab.Reg(buf, access, 0, 1, 0, nil)
		require.NoError(t, err)
		for _, op := range allOps {
			require.Equal(t, needs[op], op.Access(), op)
			sp, err := tab.Lookup(1, 8, 8, op.Access())
			if access&needs[op] == needs[op] {
				require.NoError(t, err, "access %#x op %v", access, op)
				require.Equal(t, buf[8:16], sp.First)
				require.True(t, sp.Contiguous())
				require.Same(t, m, sp.MR)
			} else {
				require.ErrorIs(t, err, mr.AccessDenied, "access %#x op %v", access, op)
				requireErrno(t, err, fi.EACCES)
			}
		}
		// Local bits never admit a peer, nor does an empty or unknown want.
		for _, want := range []fi.Flags{0, fi.SEND, fi.RECV, fi.READ, fi.WRITE, fi.REMOTE_READ | fi.SEND, mr.Op(99).Access()} {
			_, err := tab.Lookup(1, 0, 8, want)
			require.ErrorIs(t, err, mr.AccessDenied, "access %#x want %#x", access, want)
		}
		require.NoError(t, m.Close())
	}
}

// TestRangeEdges: first byte, last byte, one past, wrapping, zero length,
// in both addressing modes and over multi-buffer regions.
func TestRangeEdges(t *testing.T) {
	buf := make([]byte, 300)
	for i := range buf {
		buf[i] = byte(i)
	}
	for _, mode := range []mr.Mode{0, mr.ModeVirtAddr} {
		tab, _ := newTable(t, mode)
		for _, iov := range [][][]byte{
			{buf[:100]},
			{buf[:40], buf[40:100]},
			{buf[:10], buf[10:20], buf[20:30], buf[30:40], buf[40:50], buf[50:60], buf[60:70], buf[70:100]},
		} {
			m, err := tab.RegV(iov, remoteBits, 0, 5, 0, nil)
			require.NoError(t, err)
			base := m.Base()
			ok := func(addr, n uint64, want []byte) {
				t.Helper()
				sp, err := tab.Lookup(5, base+addr, n, fi.REMOTE_READ)
				require.NoError(t, err, "mode %v iov %d addr %d len %d", mode, len(iov), addr, n)
				var got []byte
				for _, b := range sp.AppendBufs(nil) {
					got = append(got, b...)
				}
				require.Equal(t, uint64(len(want)), sp.Len)
				require.Equal(t, string(want), string(got))
			}
			bad := func(addr, n uint64) {
				t.Helper()
				_, err := tab.Lookup(5, addr, n, fi.REMOTE_READ)
				require.ErrorIs(t, err, mr.OutOfRange, "mode %v addr %#x len %d", mode, addr, n)
				requireErrno(t, err, fi.EFAULT)
			}
			ok(0, 1, buf[0:1])          // first byte
			ok(99, 1, buf[99:100])      // last byte
			ok(0, 100, buf[0:100])      // all of it
			ok(35, 10, buf[35:45])      // across a boundary
			ok(9, 62, buf[9:71])        // across many
			ok(100, 0, []byte{})        // empty, at the end
			bad(base+100, 1)            // one past
			bad(base+99, 2)             // last byte and one past
			bad(base+0, 101)            // one too long
			bad(base+math.MaxUint64, 2) // wraps
			bad(base+1, math.MaxUint64) // wraps
			bad(base+101, 0)            // empty, beyond the end
			if base > 0 {
				bad(base-1, 1) // one before
			}
			require.NoError(t, m.Close())
		}
	}
}

func TestDenials(t *testing.T) {
	for d, errno := range map[mr.Denial]fi.Errno{
		mr.UnknownKey: fi.EKEYREJECTED, mr.OutOfRange: fi.EFAULT, mr.AccessDenied: fi.EACCES,
		mr.RegionDisabled: fi.EOPBADSTATE, mr.AuthKeyDenied: fi.EACCES,
	} {
		require.Equal(t, errno, d.Errno())
		require.Equal(t, errno, fi.ErrnoOf(d))
		require.True(t, errors.Is(d, errno))
		require.NotEmpty(t, d.Error())
	}
	require.Equal(t, fi.EOTHER, mr.Denial(0).Errno())
	require.Contains(t, mr.Denial(77).Error(), "77")
	require.Equal(t, "fetch-atomic", mr.OpFetchAtomic.String())
}

// TestAuthKeys: a region with an authorization key admits only peers
// presenting its digest; the domain's key applies when the registration has
// none, and a region registered under another key is reachable through that
// key (not the domain's).
func TestAuthKeys(t *testing.T) {
	tab, err := mr.NewTable(mr.Config{AuthKey: []byte("domain")})
	require.NoError(t, err)
	buf := make([]byte, 64)
	md, err := tab.Reg(buf, remoteBits, 0, 1, 0, nil)
	require.NoError(t, err)
	require.Equal(t, []byte("domain"), md.AuthKey())
	require.Equal(t, mr.AuthDigest([]byte("domain")), md.AuthDigest())
	ma, err := tab.RegAttr(&mr.Attr{IOV: [][]byte{buf}, Access: remoteBits, RequestedKey: 2, AuthKey: []byte("job-7")}, 0)
	require.NoError(t, err)
	require.Equal(t, []byte("job-7"), ma.AuthKey())
	require.Equal(t, mr.AuthDigest([]byte("job-7")), ma.AuthDigest())

	domain, job := mr.AuthDigest([]byte("domain")), mr.AuthDigest([]byte("job-7"))
	_, err = tab.LookupAuth(1, 0, 8, fi.REMOTE_READ, domain)
	require.NoError(t, err)
	_, err = tab.LookupAuth(2, 0, 8, fi.REMOTE_READ, job)
	require.NoError(t, err, "a region under a non-domain key serves that key")
	_, err = tab.LookupAuth(1, 0, 8, fi.REMOTE_READ, job)
	require.ErrorIs(t, err, mr.AuthKeyDenied)
	_, err = tab.LookupAuth(2, 0, 8, fi.REMOTE_READ, domain)
	require.ErrorIs(t, err, mr.AuthKeyDenied)
	require.ErrorIs(t, err, fi.EACCES)
	_, err = tab.Lookup(1, 0, 8, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.AuthKeyDenied, "a peer without a key")
	_, err = tab.LookupAuth(2, 0, 8, fi.REMOTE_READ, 0)
	require.ErrorIs(t, err, mr.AuthKeyDenied, "a peer without a key")

	plain, _ := newTable(t, 0)
	mp, err := plain.Reg(buf, remoteBits, 0, 1, 0, nil)
	require.NoError(t, err)
	require.Zero(t, mp.AuthDigest())
	require.Nil(t, mp.AuthKey())
	_, err = plain.LookupAuth(1, 0, 8, fi.REMOTE_READ, mr.AuthDigest([]byte("x")))
	require.ErrorIs(t, err, mr.AuthKeyDenied)
	_, err = plain.LookupAuth(1, 0, 8, fi.REMOTE_READ, 0)
	require.NoError(t, err)
	// A region of a keyless domain registered with a key serves that key.
	mk, err := plain.RegAttr(&mr.Attr{IOV: [][]byte{buf}, Access: remoteBits, RequestedKey: 3, AuthKey: []byte("x")}, 0)
	require.NoError(t, err)
	_, err = plain.LookupAuth(3, 0, 8, fi.REMOTE_READ, mr.AuthDigest([]byte("x")))
	require.NoError(t, err)
	_, err = plain.Lookup(3, 0, 8, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.AuthKeyDenied)
	require.NoError(t, mk.Close())
}

// TestAuthDigest pins the digest to the protocol's definition (32-bit
// FNV-1a, 0 only for no key) so that peers of different builds agree.
func TestAuthDigest(t *testing.T) {
	require.Zero(t, mr.AuthDigest(nil))
	require.Zero(t, mr.AuthDigest([]byte{}))
	for _, k := range []string{"a", "foobar", "sekrit-1", "domain"} {
		h := fnv.New32a()
		h.Write([]byte(k))
		require.Equal(t, h.Sum32(), mr.AuthDigest([]byte(k)), k)
	}
	require.Equal(t, uint32(0xe40c292c), mr.AuthDigest([]byte("a")))
	require.Equal(t, uint32(0xbf9cf968), mr.AuthDigest([]byte("foobar")))
	// A key whose FNV-1a hash is 0 is sent as 1, not as "no key".
	k := []byte{0xcc, 0x24, 0x31, 0xc4, 0x00}
	h := fnv.New32a()
	h.Write(k)
	require.Zero(t, h.Sum32())
	require.Equal(t, uint32(1), mr.AuthDigest(k))
}

// TestUnknownKeys: never registered, closed, and keys of another domain.
func TestUnknownKeys(t *testing.T) {
	tab, _ := newTable(t, 0)
	other, _ := newTable(t, 0)
	buf := make([]byte, 64)
	_, err := other.Reg(buf, remoteBits, 0, 3, 0, nil)
	require.NoError(t, err)
	_, err = tab.Lookup(3, 0, 8, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.UnknownKey)
	requireErrno(t, err, fi.EKEYREJECTED)
	_, err = tab.Lookup(0, 0, 8, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.UnknownKey, "key 0 (the tombstone's) is unknown too")
	m, err := tab.Reg(buf, remoteBits, 0, 0, 0, nil)
	require.NoError(t, err)
	require.NoError(t, m.Close())
	_, err = tab.Lookup(0, 0, 8, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.UnknownKey)
}

// TestLookupConcurrentClose: lookups race registrations and closes; a key
// is refused by every lookup that starts after its Close returned, and a
// lookup that is admitted sees the right region.
func TestLookupConcurrentClose(t *testing.T) {
	tab, _ := newTable(t, 0)
	const keys = 8
	bufs := make([][]byte, keys)
	for k := range bufs {
		bufs[k] = make([]byte, 64)
		bufs[k][0] = byte(k)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd := tab.Epochs().NewReader() // a target poller: regions are recycled
			defer rd.Close()
			for i := 0; !stop.Load(); i++ {
				rd.Quiesce()
				k := i % keys
				sp, err := tab.Lookup(uint64(k), 0, 64, fi.REMOTE_WRITE)
				if err == nil && (sp.First[0] != byte(k) || !sp.Contiguous() || len(sp.First) != 64) {
					t.Errorf("key %d reached the wrong bytes", k)
					return
				}
				if err != nil && !errors.Is(err, mr.UnknownKey) {
					t.Errorf("key %d: %v", k, err)
					return
				}
			}
		}()
	}
	for gen := 1; gen <= 2000; gen++ {
		k := gen % keys
		m, err := tab.Reg(bufs[k], remoteBits, 0, uint64(k), 0, nil)
		require.NoError(t, err)
		require.NoError(t, m.Close())
		_, err = tab.Lookup(uint64(k), 0, 1, fi.REMOTE_WRITE)
		require.ErrorIs(t, err, mr.UnknownKey, "refused the moment Close returns")
	}
	stop.Store(true)
	wg.Wait()
}

// TestHotPathAllocs: Lookup, CheckLocal and CountRemoteWrite do not
// allocate, admitted or refused.
func TestHotPathAllocs(t *testing.T) {
	tab, _ := newTable(t, mr.ModeLocal)
	buf := make([]byte, 4096)
	m, err := tab.RegV([][]byte{buf[:1024], buf[1024:]}, remoteBits|fi.SEND, 0, 1, 0, nil)
	require.NoError(t, err)
	c := newCounter()
	require.NoError(t, m.Bind(c, fi.REMOTE_WRITE))
	ep := newEndpoint()
	require.NoError(t, m.Bind(ep, 0))
	d := m.Desc()
	var bufs [mr.IOVLimit][]byte
	var sink int
	for name, f := range map[string]func(){
		"lookup":        func() { sp, _ := tab.Lookup(1, 1000, 100, fi.REMOTE_WRITE); sink += len(sp.AppendBufs(bufs[:0])) },
		"lookup-denied": func() { _, err := tab.Lookup(2, 0, 1, fi.REMOTE_WRITE); sink += int(err.(mr.Denial)) },
		"lookup-range":  func() { _, err := tab.Lookup(1, 4096, 1, fi.REMOTE_WRITE); sink += int(err.(mr.Denial)) },
		"check-local":   func() { _ = tab.CheckLocal(d, buf[10:20], fi.SEND) },
		"check-denied":  func() { _ = tab.CheckLocal(d, buf[10:20], fi.RECV) },
		"count":         func() { m.CountRemoteWrite() },
		"bound-to":      func() { _ = m.BoundTo(ep) },
	} {
		require.Zero(t, testing.AllocsPerRun(1000, f), name)
	}
	require.NotZero(t, sink)
}

// TestLookupDuringGrowth: a live key stays admitted while the index is
// rehashed under it again and again.
func TestLookupDuringGrowth(t *testing.T) {
	tab, _ := newTable(t, 0)
	buf := make([]byte, 64)
	_, err := tab.Reg(buf, remoteBits, 0, 1<<40, 0, nil)
	require.NoError(t, err)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd := tab.Epochs().NewReader()
			defer rd.Close()
			for !stop.Load() {
				rd.Quiesce()
				if _, err := tab.Lookup(1<<40, 0, 64, fi.REMOTE_READ); err != nil {
					t.Errorf("live key refused during growth: %v", err)
					return
				}
			}
		}()
	}
	var ms []*mr.MR
	for k := range uint64(4000) {
		m, err := tab.Reg(buf, remoteBits, 0, k, 0, nil)
		require.NoError(t, err)
		ms = append(ms, m)
	}
	for _, m := range ms {
		require.NoError(t, m.Close())
	}
	stop.Store(true)
	wg.Wait()
}
