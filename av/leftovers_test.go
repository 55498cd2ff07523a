package av

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/bpffs"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestMapGenerationExhaustedRetiresIndex drives one FI_AV_MAP index
// through every generation with Insert and Remove: each occupant's handle
// is new, and once the occupant of generation 65535 leaves, the index is
// retired instead of wrapping to generation 1, so no handle ever returned
// names a later peer; the next address takes a new index.
func TestMapGenerationExhaustedRetiresIndex(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeMap})
	peers := [2]netip.AddrPort{ap("10.9.0.1:7471"), ap("10.9.0.2:7471")}
	one := fiAddrs(1)
	var stale []fi.Addr // a sample of the handles index 0 had
	for g := 1; g <= maxGen; g++ {
		n, err := a.InsertAddrPort(peers[g%2:g%2+1], one, 0, nil)
		if err != nil || n != 1 {
			t.Fatalf("generation %d: insert = %d, %v", g, n, err)
		}
		h := one[0]
		if want := fi.Addr(g)<<32 | 0; h != want {
			t.Fatalf("generation %d: handle %#x, want %#x", g, uint64(h), uint64(want))
		}
		if g <= 3 || g%4099 == 0 || g >= maxGen-2 {
			stale = append(stale, h)
		}
		if err := a.Remove([]fi.Addr{h}, 0); err != nil {
			t.Fatalf("generation %d: remove: %v", g, err)
		}
	}

	// Index 0 is retired: the next peer gets index 1, generation 1.
	n, err := a.InsertAddrPort(peers[1:], one, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	fresh := one[0]
	require.Equal(t, fi.Addr(1)<<32|1, fresh)
	require.Equal(t, fresh, a.FIAddr(peers[1]))
	v, ok := f.get(a.ID(), peers[1])
	require.True(t, ok)
	require.Equal(t, uint64(fresh), v.FiAddr, "kernel copy")

	for _, h := range stale {
		_, ok := a.AddrPort(h)
		require.False(t, ok, "stale handle %#x resolves", uint64(h))
		_, err := a.Lookup(h, make([]byte, SockaddrInLen))
		require.ErrorIs(t, err, fi.EINVAL, "lookup of stale handle %#x", uint64(h))
		require.ErrorIs(t, a.Remove([]fi.Addr{h}, 0), fi.EINVAL, "remove of stale handle %#x", uint64(h))
	}
	// The retired index stays out: churning the new index does not bring
	// index 0 back, and the AV keeps working.
	require.NoError(t, a.Remove([]fi.Addr{fresh}, 0))
	_, err = a.InsertAddrPort(peers[:1], one, 0, nil)
	require.NoError(t, err)
	require.Equal(t, fi.Addr(2)<<32|1, one[0])
	require.Equal(t, 1, a.t.retired)
	require.Equal(t, 1, a.Count())
	f.requireInStep(t, a)
}

// setGen sets the generation of index idx, a test hook for the
// generations Insert and Remove take 65535 rounds to reach.
func setGen(a *AV, idx uint32, gen uint16) {
	a.lock()
	a.t.dense(idx).setGen(gen)
	a.unlock()
}

// TestGenerationAtMax: an FI_AV_TABLE index, whose handles carry no
// generation, is reused past the last generation (lowest index first);
// an FI_AV_MAP index held after a refused FI_MORE write (see LostError) is
// retired when Remove releases it at the last generation.
func TestGenerationAtMax(t *testing.T) {
	t.Run("TABLE", func(t *testing.T) {
		a, f := openTest(t, Attr{Type: TypeTable})
		one := fiAddrs(1)
		_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.9.1.1:1")}, one, 0, nil)
		require.NoError(t, err)
		require.Equal(t, fi.Addr(0), one[0])
		setGen(a, 0, maxGen)
		require.NoError(t, a.Remove(one, 0))
		_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.1.2:1")}, one, 0, nil)
		require.NoError(t, err)
		require.Equal(t, fi.Addr(0), one[0], "TABLE reuses the lowest index")
		require.Equal(t, uint16(1), a.t.dense(0).gen(), "wrapped past 0")
		require.Zero(t, a.t.retired)
		f.requireInStep(t, a)
	})
	t.Run("MAP held", func(t *testing.T) {
		a, f := openTest(t, Attr{Type: TypeMap})
		one := fiAddrs(1)
		_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.9.2.1:1")}, one, 0, nil)
		require.NoError(t, err)
		_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.2.2:1")}, one, 0, nil)
		require.NoError(t, err)
		require.Equal(t, fi.Addr(1)<<32|1, one[0])
		setGen(a, 1, maxGen-1)
		require.NoError(t, a.Remove([]fi.Addr{fi.Addr(maxGen-1)<<32 | 1}, 0))

		// The kernel copy is full: the FI_MORE insert's write is refused
		// when the next insert makes it, and index 1 stays held.
		f.limit = 1
		_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.2.3:1")}, one, fi.MORE, nil)
		require.NoError(t, err)
		held := one[0]
		require.Equal(t, fi.Addr(maxGen)<<32|1, held)
		_, err = a.InsertAddrPort(nil, nil, 0, nil)
		var lost *LostError
		require.True(t, errors.As(err, &lost), "%v", err)
		require.Equal(t, []fi.Addr{held}, lost.Handles)
		require.Equal(t, fi.AddrNotAvail, one[0])

		require.NoError(t, a.Remove([]fi.Addr{held}, 0), "releases the held index")
		require.Equal(t, 1, a.t.retired)
		require.ErrorIs(t, a.Remove([]fi.Addr{held}, 0), fi.EINVAL)
		f.limit = 0
		_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.2.3:1")}, one, 0, nil)
		require.NoError(t, err)
		require.Equal(t, fi.Addr(1)<<32|2, one[0], "index 1 retired: a new index")
		_, ok := a.AddrPort(held)
		require.False(t, ok)
		f.requireInStep(t, a)
	})
}

// TestInsertAuthKeyExhaustion fills an AV's auth key space (ids
// 1..65535): the next InsertAuthKey fails with FI_ENOSPC, as libfabric's
// util AV answers a full AV, and changes nothing; a key an address is
// bound to cannot make room (FI_EBUSY); removing an unbound key does, and
// its id is handed out again. Removing every key gives back their memory.
func TestInsertAuthKeyExhaustion(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeMap}, WithAVAuthKey())
	keyOf := func(i uint64) []byte { return binary.LittleEndian.AppendUint64(nil, i) }
	handles := make([]fi.Addr, 0, maxAuthKeys)
	seen := make(map[fi.Addr]bool, maxAuthKeys)
	for i := range uint64(maxAuthKeys) {
		h, err := a.InsertAuthKey(keyOf(i+1), 0)
		if err != nil {
			t.Fatalf("key %d: %v", i+1, err)
		}
		if seen[h] || h&authKeyTag == 0 {
			t.Fatalf("key %d: handle %#x repeated or untagged", i+1, uint64(h))
		}
		seen[h] = true
		handles = append(handles, h)
	}
	full := func(msg string) {
		t.Helper()
		for range 2 { // and stays so
			h, err := a.InsertAuthKey(keyOf(1<<40), 0)
			require.ErrorIs(t, err, fi.ENOSPC, msg)
			require.Equal(t, fi.AddrNotAvail, h, msg)
		}
		require.Len(t, a.keys, maxAuthKeys, msg)
	}
	full("AV holds 65535 keys")
	for _, i := range []int{0, 4242, maxAuthKeys - 1} {
		var buf [AuthKeySize]byte
		n, err := a.LookupAuthKey(handles[i], buf[:])
		require.NoError(t, err)
		require.Equal(t, AuthKeySize, n)
		require.Equal(t, keyOf(uint64(i)+1), buf[:], "key %d", i+1)
	}

	// A key an address is bound to stays (FI_EBUSY), as do the others
	// of the same Remove: still full.
	bound := []fi.Addr{handles[100]}
	_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.9.3.1:1")}, bound, fi.AUTH_KEY, nil)
	require.NoError(t, err)
	require.ErrorIs(t, a.Remove([]fi.Addr{handles[7], handles[100]}, fi.AUTH_KEY), fi.EBUSY)
	full("after a refused remove")

	// Removing an unbound key makes room for one; its id comes back.
	victim := handles[1234]
	require.NoError(t, a.Remove([]fi.Addr{victim}, fi.AUTH_KEY))
	_, err = a.LookupAuthKey(victim, nil)
	require.ErrorIs(t, err, fi.EINVAL, "removed key")
	st := []fi.Addr{victim}
	n, err := a.InsertAddrPort([]netip.AddrPort{ap("10.9.3.2:1")}, st, fi.AUTH_KEY, nil)
	require.NoError(t, err)
	require.Zero(t, n, "insert with a removed key")
	require.Equal(t, fi.AddrNotAvail, st[0])
	h, err := a.InsertAuthKey(keyOf(1<<41), 0)
	require.NoError(t, err)
	require.Equal(t, victim, h, "lowest free id")
	var buf [AuthKeySize]byte
	_, err = a.LookupAuthKey(h, buf[:])
	require.NoError(t, err)
	require.Equal(t, keyOf(1<<41), buf[:])
	full("refilled")

	// Every key goes once its address does; the AV holds no key memory
	// afterwards and starts again from id 1.
	require.NoError(t, a.Remove(bound, 0))
	require.NoError(t, a.Remove(handles, fi.AUTH_KEY))
	require.Empty(t, a.keys)
	require.LessOrEqual(t, cap(a.keys), 64, "key array released")
	h, err = a.InsertAuthKey(keyOf(1), 0)
	require.NoError(t, err)
	require.Equal(t, authKeyTag|1, h)
	require.Zero(t, a.Count())
	f.requireInStep(t, a)
}

// TestAuthKeyIDsLowestFirst: against a model, InsertAuthKey hands out the
// lowest free id through random inserts and removes (single and batched),
// and the key array shrinks when the highest ids go.
func TestAuthKeyIDsLowestFirst(t *testing.T) {
	a, _ := openTest(t, Attr{Type: TypeTable}, WithAVAuthKey())
	rng := rand.New(rand.NewPCG(1, 2))
	used := map[fi.Addr]bool{}
	lowestFree := func() fi.Addr {
		for id := fi.Addr(1); ; id++ {
			if !used[authKeyTag|id] {
				return authKeyTag | id
			}
		}
	}
	for step := range 5000 {
		if len(used) == 0 || rng.IntN(3) != 0 {
			want := lowestFree()
			h, err := a.InsertAuthKey(make([]byte, AuthKeySize), 0)
			require.NoError(t, err)
			require.Equal(t, want, h, "step %d", step)
			used[h] = true
		} else {
			var rm []fi.Addr
			for h := range used {
				rm = append(rm, h)
				if len(rm) > rng.IntN(4) {
					break
				}
			}
			require.NoError(t, a.Remove(rm, fi.AUTH_KEY))
			for _, h := range rm {
				delete(used, h)
			}
		}
		high := 0
		for h := range used {
			high = max(high, int(h&^authKeyTag))
		}
		require.Len(t, a.keys, high, "step %d: key array follows the highest id", step)
	}
}

type fakeEP struct{ fi.FIDBase }

// TestClosedAV: every call on a closed AV, synchronous or FI_EVENT, fails
// cleanly with FI_EINVAL (lookups find nothing), Bind included; the EQ it
// was bound to is released, an EQ offered to it later is not referenced,
// and the kernel copy is empty.
func TestClosedAV(t *testing.T) {
	for _, flags := range []fi.Flags{0, fi.EVENT} {
		for _, typ := range []Type{TypeTable, TypeMap} {
			t.Run(typ.String()+"/"+map[fi.Flags]string{0: "sync", fi.EVENT: "event"}[flags], func(t *testing.T) {
				f := newFakeMirror()
				a, err := Open(Attr{Type: typ, Flags: flags | fi.AV_USER_ID}, nil, WithMirror(f), WithAVAuthKey())
				require.NoError(t, err)
				q, err := eq.Open(eq.Attr{WaitObj: fi.WaitUnspec}, nil)
				require.NoError(t, err)
				require.NoError(t, a.Bind(q, 0))
				peer := ap("10.9.4.1:7471")
				one := fiAddrs(1)
				_, err = a.InsertAddrPort([]netip.AddrPort{peer}, one, 0, nil)
				require.NoError(t, err)
				if flags&fi.EVENT != 0 {
					ev, err := q.SRead(10000, 0)
					require.NoError(t, err)
					require.Equal(t, eq.AVComplete, ev.Event)
				}
				h := one[0]
				key, err := a.InsertAuthKey(make([]byte, AuthKeySize), 0)
				require.NoError(t, err)
				require.ErrorIs(t, q.Close(), fi.EBUSY, "bound to the AV")

				require.NoError(t, a.Close())
				require.ErrorIs(t, a.Close(), fi.EINVAL, "second close")
				require.NoError(t, q.Close(), "the AV released its EQ")
				require.Zero(t, f.len(), "kernel copy emptied")

				q2, err := eq.Open(eq.Attr{}, nil)
				require.NoError(t, err)
				require.ErrorIs(t, a.Bind(q2, 0), fi.EINVAL)
				require.ErrorIs(t, a.Bind(q, 0), fi.EINVAL, "closed AV, closed EQ")
				require.NoError(t, q2.Close(), "a refused Bind takes no reference")

				out := fiAddrs(1)
				n, err := a.InsertAddrPort([]netip.AddrPort{peer}, out, 0, nil)
				require.ErrorIs(t, err, fi.EINVAL)
				require.Zero(t, n)
				n, err = a.Insert([][]byte{sin("10.9.4.2:1")}, out, 0, nil)
				require.ErrorIs(t, err, fi.EINVAL)
				require.Zero(t, n)
				_, err = a.InsertSvc("10.9.4.3", "1", out, 0, nil)
				require.ErrorIs(t, err, fi.EINVAL)
				_, err = a.InsertSym("10.9.5.1", 2, "1", 2, fiAddrs(4), 0, nil)
				require.ErrorIs(t, err, fi.EINVAL)
				require.Equal(t, fi.Addr(0xdead), out[0], "fi_addr untouched")
				require.ErrorIs(t, a.Remove([]fi.Addr{h}, 0), fi.EINVAL)
				require.ErrorIs(t, a.Remove([]fi.Addr{key}, fi.AUTH_KEY), fi.EINVAL)
				_, err = a.Lookup(h, make([]byte, 64))
				require.ErrorIs(t, err, fi.EINVAL)
				_, err = a.InsertAuthKey(make([]byte, AuthKeySize), 0)
				require.ErrorIs(t, err, fi.EINVAL)
				_, err = a.LookupAuthKey(key, make([]byte, AuthKeySize))
				require.ErrorIs(t, err, fi.EINVAL)
				_, err = a.LookupAuthKey(h, make([]byte, AuthKeySize))
				require.ErrorIs(t, err, fi.EINVAL)
				require.ErrorIs(t, a.SetUserID(h, 7, 0), fi.EINVAL)
				require.ErrorIs(t, a.SetUserID(key, 7, fi.AUTH_KEY), fi.EINVAL)
				_, ok := a.AddrPort(h)
				require.False(t, ok)
				_, kh, ok := a.AddrPortAuthKey(h)
				require.False(t, ok)
				require.Equal(t, fi.AddrNotAvail, kh)
				require.Equal(t, fi.AddrNotAvail, a.FIAddr(peer))
				require.Equal(t, fi.AddrNotAvail, a.SourceAddr(peer))
				require.Equal(t, fi.AddrNotAvail, a.AuthKeySource(key))
				require.Zero(t, a.Count())

				ep := &fakeEP{fi.NewFIDBase(fi.ClassEP, nil)}
				require.ErrorIs(t, a.AttachEndpoint(ep), fi.EINVAL)
				_, err = a.EnableEndpoint(ep)
				require.ErrorIs(t, err, fi.EINVAL)
				require.ErrorIs(t, a.DisableEndpoint(ep), fi.EINVAL)
				require.ErrorIs(t, a.DetachEndpoint(ep), fi.EINVAL)
				require.Zero(t, f.len())
			})
		}
	}
}

// TestBindClosedEQ: binding a closed EQ fails with FI_EINVAL and leaves
// the AV without one (an FI_EVENT insert answers FI_ENOEQ rather than
// posting to the closed EQ); a nil EQ or flags fail too; an open EQ binds
// afterwards and gets the events.
func TestBindClosedEQ(t *testing.T) {
	a, _ := openTest(t, Attr{Flags: fi.EVENT})
	q, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	require.NoError(t, q.Close())
	require.ErrorIs(t, a.Bind(q, 0), fi.EINVAL)
	require.ErrorIs(t, a.Bind(nil, 0), fi.EINVAL)
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.6.1:1")}, nil, 0, "ctx")
	require.ErrorIs(t, err, fi.ENOEQ)

	q2, err := eq.Open(eq.Attr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	require.ErrorIs(t, a.Bind(q2, fi.EVENT), fi.EBADFLAGS)
	require.NoError(t, a.Bind(q2, 0))
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.6.1:1")}, nil, 0, "ctx")
	require.NoError(t, err)
	ev, err := q2.SRead(10000, 0)
	require.NoError(t, err)
	require.Equal(t, eq.AVComplete, ev.Event)
	require.Equal(t, uint64(1), ev.Data)
	require.Equal(t, "ctx", ev.Context)
	require.NoError(t, a.Close())
	require.NoError(t, q2.Close())
}

// TestClosedNamedAV: on a closed named AV, lookups that miss do not reach
// for the closed pinned map (no panic, nothing found) even after another
// opener changed the AV, and changes fail with FI_EINVAL; the pin stays
// for the other opener until Unlink.
func TestClosedNamedAV(t *testing.T) {
	testenv.RequirePriv(t)
	name := fmt.Sprintf("avleft-%d", os.Getpid())
	t.Cleanup(func() { Unlink(name) })
	a, err := Open(Attr{Type: TypeMap, Name: name}, nil)
	require.NoError(t, err)
	b, err := Open(Attr{Name: name}, nil)
	require.NoError(t, err)
	one := fiAddrs(1)
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.7.1:1")}, one, 0, nil)
	require.NoError(t, err)
	h := one[0]
	require.NoError(t, a.Close())
	_, err = b.InsertAddrPort([]netip.AddrPort{ap("10.9.7.2:1")}, one, 0, nil)
	require.NoError(t, err) // the version moved: a miss on a would catch up
	h2 := one[0]

	for _, x := range []fi.Addr{h, h2} {
		_, err = a.Lookup(x, make([]byte, 64))
		require.ErrorIs(t, err, fi.EINVAL)
		_, ok := a.AddrPort(x)
		require.False(t, ok)
	}
	require.Equal(t, fi.AddrNotAvail, a.FIAddr(ap("10.9.7.2:1")))
	require.Equal(t, fi.AddrNotAvail, a.SourceAddr(ap("10.9.7.2:1")))
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.9.7.3:1")}, one, 0, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	require.ErrorIs(t, a.Remove([]fi.Addr{h}, 0), fi.EINVAL)
	q, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	require.ErrorIs(t, a.Bind(q, 0), fi.EINVAL)
	require.NoError(t, q.Close())

	got, ok := b.AddrPort(h)
	require.True(t, ok, "the other opener keeps the AV")
	require.Equal(t, ap("10.9.7.1:1"), got)
	require.NoError(t, b.Close())
	require.NoError(t, Unlink(name))
}

// runTidy runs the tests and then removes the bpffs directories the
// named-AV tests made: bpffs.Path("av"), which Unlink removes once empty
// but a test that failed before its Unlink leaves, and xdpfab's bpffs.Dir
// above it. Only a directory that did not exist
// before the run goes, and only when empty (rmdir): another process's
// pins, such as xdpfab attach's under bpffs.Dir, stay. A pin the tests
// leave in the av directory fails the run.
func runTidy(run func() int) int {
	avDir := bpffs.Path("av")
	var made []string // deepest first
	for _, d := range []string{avDir, bpffs.Dir} {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			made = append(made, d)
		}
	}
	code := run()
	for _, d := range made {
		err := os.Remove(d)
		switch {
		case err == nil || errors.Is(err, os.ErrNotExist):
		case d == avDir:
			// Only the tests' own names count: other processes (the
			// fabtests package, run beside this one by go test) may pin
			// named AVs here meanwhile.
			left, _ := os.ReadDir(d)
			var names []string
			for _, e := range left {
				if isTestAVName(e.Name()) {
					names = append(names, e.Name())
				}
			}
			if len(names) > 0 {
				fmt.Fprintf(os.Stderr, "av tests left %s behind (%v): %v\n", d, names, err)
				code = 1
			}
		default:
			// bpffs.Dir: another process put something there meanwhile.
		}
	}
	return code
}

// testAVNames are the prefixes of the names the named-AV tests open.
var testAVNames = []string{"avtest-", "avleft-", "audit-", "kernel-id-"}

func isTestAVName(name string) bool {
	for _, p := range testAVNames {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// TestUnlinkRemovesEmptyPinDir: Unlink of a namespace's last named AV
// removes the namespace's pin directory, and the av directory above it
// when no other namespace has one there, and xdpfab's bpffs directory when
// nothing else is pinned there.
func TestUnlinkRemovesEmptyPinDir(t *testing.T) {
	testenv.RequirePriv(t)
	name := fmt.Sprintf("avleft-%d-dir", os.Getpid())
	t.Cleanup(func() { Unlink(name) })
	a, err := Open(Attr{Type: TypeTable, Name: name}, nil)
	require.NoError(t, err)
	require.DirExists(t, pinDir())
	require.NoError(t, a.Close())
	require.DirExists(t, pinDir(), "Close keeps the pin and its directory")
	require.NoError(t, Unlink(name))
	if left, err := os.ReadDir(pinDir()); err == nil {
		// Another AV of this namespace (a test of another package run
		// beside this one) keeps it; never this one's.
		for _, e := range left {
			require.NotEqual(t, name, e.Name())
		}
		require.NotEmpty(t, left, "an empty pin directory left behind")
		return
	}
	left, err := os.ReadDir(bpffs.Path("av"))
	if err == nil {
		require.NotEmpty(t, left, "an empty av directory left behind")
		return
	}
	if left, err := os.ReadDir(bpffs.Dir); err == nil {
		require.NotEmpty(t, left, "an empty %s left behind", bpffs.Dir)
	}
}

// TestOpenPinDirRemovedBeforeLock: when the pin directory is removed
// between an opener's creating it and its lock (another process's Unlink of
// the namespace's last AV), the opener makes a new one: the directory it
// returns locked is the one at its path, where its pin will be found.
func TestOpenPinDirRemovedBeforeLock(t *testing.T) {
	testenv.RequirePriv(t)
	removed := 0
	beforePinLock = func(dir string) {
		if removed == 0 {
			removeEmptyPinDir(dir)
			_, err := os.Stat(dir)
			if errors.Is(err, os.ErrNotExist) {
				removed++
			}
		}
	}
	t.Cleanup(func() { beforePinLock = nil })
	// Another namespace's AV or another package's may keep the directory:
	// try a few times for a moment it is empty.
	var dir string
	var fd int
	for range 50 {
		var err error
		dir, fd, err = openPinDir()
		require.NoError(t, err)
		if removed > 0 {
			break
		}
		unix.Close(fd)
		time.Sleep(10 * time.Millisecond)
	}
	if removed == 0 {
		t.Skip("the pin directory was never empty (other named AVs in this namespace)")
	}
	defer unix.Close(fd)
	var st, atPath unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &st))
	require.NoError(t, unix.Stat(dir, &atPath), "the directory returned exists")
	require.Equal(t, atPath.Ino, st.Ino, "the directory locked is the one at its path")
	require.NotZero(t, st.Nlink)
	unix.Flock(fd, unix.LOCK_UN)
	removeEmptyPinDir(dir)
}
