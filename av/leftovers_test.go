package av

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
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
	a.mu.Lock()
	a.t.dense(idx).gen = gen
	a.mu.Unlock()
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
		require.Equal(t, uint16(1), a.t.dense(0).gen, "wrapped past 0")
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
