package ktable_test

import (
	"cmp"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/internal/ktable"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

func spec() *ebpf.MapSpec {
	return &ebpf.MapSpec{Type: ebpf.Array, Flags: unix.BPF_F_MMAPABLE, KeySize: 4, ValueSize: ktable.BucketSize}
}

func key(i int) ktable.Key { return ktable.Key{uint64(i), uint64(i) * 7, 3} }
func value(i int) ktable.Value {
	return ktable.Value{uint64(i), uint64(i) + 1, uint64(i) + 2, uint64(i) + 3}
}

// TestTable: entries go in, are read back (also through a second mapping
// of the map, as another process would), replaced in place, deleted,
// reused after deletion; a full pair of buckets is ErrFull; Reset empties.
func TestTable(t *testing.T) {
	testenv.RequirePriv(t)
	tab, err := ktable.Create(spec(), ktable.Buckets(100), 42)
	require.NoError(t, err)
	defer tab.Close()
	other, err := ktable.Open(tab.Map(), 7) // the header's seed wins
	require.NoError(t, err)
	defer other.Close()

	for i := range 100 {
		k, v := key(i), value(i)
		require.NoError(t, tab.Put(&k, &v))
	}
	require.Equal(t, 100, tab.Len())
	for i := range 100 {
		k := key(i)
		got, ok := other.Get(&k)
		require.True(t, ok, "entry %d", i)
		require.Equal(t, value(i), got)
	}
	k, v := key(5), value(500)
	require.NoError(t, tab.Put(&k, &v), "replace")
	got, _ := other.Get(&k)
	require.Equal(t, value(500), got)
	require.Equal(t, 100, tab.Len())
	require.True(t, other.Delete(&k), "any mapping may write")
	require.False(t, tab.Delete(&k))
	_, ok := tab.Get(&k)
	require.False(t, ok)
	require.Equal(t, 99, tab.Len())
	require.Equal(t, 1, tab.Dead())
	n := 0
	tab.Each(func(k *ktable.Key, v *ktable.Value) bool {
		require.Equal(t, value(int(k[0])), *v)
		n++
		return true
	})
	require.Equal(t, 99, n)
	require.Equal(t, 10, tab.DeleteIf(func(k *ktable.Key) bool { return k[0] < 11 }))
	require.Equal(t, 89, tab.Len())

	tab.Reset()
	require.Zero(t, tab.Len())
	require.Zero(t, tab.Dead())
	for i := range 100 {
		k := key(i)
		_, ok := tab.Get(&k)
		require.False(t, ok)
	}

	// The smallest table: 16 slots, then ErrFull.
	small, err := ktable.Create(spec(), 2, 1)
	require.NoError(t, err)
	defer small.Close()
	var i int
	for i = 0; ; i++ {
		k, v := key(i), value(i)
		if err := small.Put(&k, &v); err != nil {
			require.ErrorIs(t, err, ktable.ErrFull)
			break
		}
	}
	require.Equal(t, 16, i)
	_, err = ktable.Create(spec(), 3, 1)
	require.Error(t, err, "not a power of two")
}

// TestTableWriters: writers sharing a table through separate mappings
// (processes sharing the MR table) claim slots with compare-and-swap:
// every key of every writer lands once.
func TestTableWriters(t *testing.T) {
	testenv.RequirePriv(t)
	tab, err := ktable.Create(spec(), ktable.Buckets(4000), 9)
	require.NoError(t, err)
	defer tab.Close()
	const writers, per = 4, 1000
	var wg sync.WaitGroup
	for w := range writers {
		m, err := ktable.Open(tab.Map(), 0)
		require.NoError(t, err)
		defer m.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * per; i < (w+1)*per; i++ {
				k, v := key(i), value(i)
				if err := m.Put(&k, &v); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					m.Delete(&k)
				}
			}
		}()
	}
	wg.Wait()
	requireAllButThirds(t, tab, writers*per)
}

// TestUncounted: a map whose header OpenUncounted wrote is uncounted for
// every mapping of it, Open's included; writers sharing it (Put, Delete,
// Add, DeleteAt) leave the header's counts alone and Len and Dead count
// by walking it. A map whose header Open wrote keeps counting whichever
// call maps it later.
func TestUncounted(t *testing.T) {
	testenv.RequirePriv(t)
	sp := spec()
	sp.MaxEntries = uint32(1 + ktable.Buckets(4000))
	m, err := ebpf.NewMap(sp)
	require.NoError(t, err)
	defer m.Close()
	tab, err := ktable.OpenUncounted(m, 5)
	require.NoError(t, err)
	defer tab.Close()
	require.True(t, tab.Uncounted())
	const writers, per = 4, 1000
	var wg sync.WaitGroup
	for w := range writers {
		open := ktable.OpenUncounted
		if w%2 == 1 {
			open = ktable.Open // the header says uncounted: so is this mapping
		}
		mw, err := open(m, 0)
		require.NoError(t, err)
		defer mw.Close()
		require.True(t, mw.Uncounted())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * per; i < (w+1)*per; i++ {
				k, v := key(i), value(i)
				if i%2 == 0 {
					if err := mw.Put(&k, &v); err != nil {
						t.Error(err)
						return
					}
					if i%3 == 0 {
						mw.Delete(&k)
					}
					continue
				}
				r, err := mw.Add(&k, &v)
				if err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					mw.DeleteAt(r, &k)
				}
			}
		}()
	}
	wg.Wait()
	want := requireAllButThirds(t, tab, writers*per)
	dead := tab.Dead() // deleted slots later writes did not take again
	require.Positive(t, dead)
	require.LessOrEqual(t, dead, writers*per-want)
	for i := 1; i <= 30; i += 3 { // 10 live keys
		k := key(i)
		require.True(t, tab.Delete(&k))
	}
	require.Equal(t, want-10, tab.Len())
	require.Equal(t, dead+10, tab.Dead())
	want -= 10
	ro, err := ktable.OpenReadOnly(m)
	require.NoError(t, err)
	require.True(t, ro.Uncounted())
	require.Equal(t, want, ro.Len(), "a reader counts by walking too")
	require.NoError(t, ro.Close())

	counted, err := ktable.Create(spec(), ktable.Buckets(100), 1)
	require.NoError(t, err)
	defer counted.Close()
	later, err := ktable.OpenUncounted(counted.Map(), 0)
	require.NoError(t, err)
	defer later.Close()
	require.False(t, later.Uncounted(), "the header Create wrote says counted")
	k, v := key(1), value(1)
	require.NoError(t, later.Put(&k, &v))
	require.Equal(t, 1, counted.Len())
}

// TestOwnedTable: a table its one writer owns (Own) keeps the same
// contents as a shared one through puts, replacements, deletes, tombstone
// reuse, Reset and ErrFull, read back through a second mapping under the
// seqlock protocol; Own of a table with entries learns them.
func TestOwnedTable(t *testing.T) {
	testenv.RequirePriv(t)
	tab, err := ktable.Create(spec(), ktable.Buckets(2000), 5)
	require.NoError(t, err)
	defer tab.Close()
	for i := range 500 { // entries from before Own
		k, v := key(i), value(i)
		require.NoError(t, tab.Put(&k, &v))
	}
	tab.Own()
	reader, err := ktable.Open(tab.Map(), 0)
	require.NoError(t, err)
	defer reader.Close()
	want := map[int]ktable.Value{}
	for i := range 500 {
		want[i] = value(i)
	}
	for round := range 3 {
		for i := range 2000 {
			k, v := key(i), value(i+round)
			switch {
			case i%5 == round:
				if tab.Delete(&k) != (want[i] != ktable.Value{}) {
					t.Fatalf("round %d: delete %d: wrong presence", round, i)
				}
				delete(want, i)
			case i >= 500 && round == 0:
				require.NoError(t, tab.Insert(&k, &v))
				want[i] = v
			default:
				require.NoError(t, tab.Put(&k, &v))
				want[i] = v
			}
		}
		require.Equal(t, len(want), tab.Len(), "round %d", round)
		n := 0
		reader.Each(func(k *ktable.Key, v *ktable.Value) bool {
			require.Equal(t, want[int(k[0])], *v, "round %d key %d", round, k[0])
			n++
			return true
		})
		require.Equal(t, len(want), n, "round %d", round)
		for i := range 2000 {
			k := key(i)
			v, ok := reader.Get(&k)
			w, in := want[i]
			require.Equal(t, in, ok, "round %d key %d", round, i)
			require.Equal(t, w, v)
		}
	}
	tab.Reset()
	require.Zero(t, reader.Len())
	k, v := key(1), value(1)
	require.False(t, tab.Delete(&k))
	require.NoError(t, tab.Put(&k, &v))
	got, ok := reader.Get(&k)
	require.True(t, ok)
	require.Equal(t, v, got)

	small, err := ktable.Create(spec(), 2, 1)
	require.NoError(t, err)
	defer small.Close()
	small.Own()
	var i int
	for i = 0; ; i++ {
		k, v := key(i), value(i)
		if err := small.Insert(&k, &v); err != nil {
			require.ErrorIs(t, err, ktable.ErrFull)
			break
		}
	}
	require.Equal(t, 16, i)
	k = key(3)
	require.True(t, small.Delete(&k))
	require.Equal(t, 1, small.Dead())
	k, v = key(99), value(99)
	require.NoError(t, small.Put(&k, &v), "the tombstone is reused")
	require.Zero(t, small.Dead())
}

// BenchmarkPutDelete is one key put and deleted in a table shared by
// writers (the MR table's case) and in an owned one (an AV's).
func BenchmarkPutDelete(b *testing.B) {
	testenv.RequirePriv(b)
	for _, owned := range []bool{false, true} {
		name := "shared"
		if owned {
			name = "owned"
		}
		b.Run(name, func(b *testing.B) {
			tab, err := ktable.Create(spec(), 1<<15, 3)
			require.NoError(b, err)
			defer tab.Close()
			if owned {
				tab.Own()
			}
			for i := range 1 << 17 { // half full, as a busy table
				k, v := key(i+1000), value(i)
				require.NoError(b, tab.Put(&k, &v))
			}
			k, v := key(1), value(1)
			for b.Loop() {
				if err := tab.Put(&k, &v); err != nil {
					b.Fatal(err)
				}
				tab.Delete(&k)
			}
		})
	}
}

// BenchmarkFill1M is an AV's insert of 1,000,000 keys into its owned
// table sized for them: "create" is making and mapping the table (the
// kernel zeroes and maps it), "fill" the writes with PutMany 64 keys a
// call (as av's TableMirror.Update), "fillsorted" the same in bucket
// order, "insertmany" InsertMany 256 keys a call (as the AV's inserts
// reach TableMirror.Insert); cpu-ms/op is the writing thread's CPU time.
func BenchmarkFill1M(b *testing.B) {
	testenv.RequirePriv(b)
	const n = 1_000_000
	keys := make([]ktable.Key, n)
	vals := make([]ktable.Value, n)
	for i := range keys {
		// An AV's keys (struct av_key): av_id | port<<32, then the
		// IPv4-mapped address 10.x.y.z. (Keys made as
		// 0xffff00000000 | (i+1)<<32 were all one key below 65536, and
		// some 16 in all: a fill of in-place updates, ~40 ns a key, where
		// a million distinct keys cost ~130 ns each on the same machine.)
		keys[i] = ktable.Key{1 | 0x1d1b<<32, 0, 0xffff0000 | uint64(0x0a000000+i+1)<<32}
		vals[i] = ktable.Value{uint64(i), 0}
	}
	sorted := make([]ktable.Key, n)
	copy(sorted, keys)
	mask := uint64(ktable.Buckets(n) - 1)
	slices.SortFunc(sorted, func(a, b ktable.Key) int {
		return cmp.Compare(ktable.Hash(1, &a)&mask, ktable.Hash(1, &b)&mask)
	})
	for _, part := range []string{"create", "fill", "fillsorted", "insertmany"} {
		b.Run(part, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu int64
			for b.Loop() {
				if part != "create" {
					b.StopTimer()
				}
				tab, err := ktable.Create(spec(), ktable.Buckets(n), 1)
				if err != nil {
					b.Fatal(err)
				}
				tab.Own()
				if part == "create" {
					b.StopTimer()
				} else {
					b.StartTimer()
					start := testenv.ThreadCPU(b)
					ks := keys
					if part == "fillsorted" {
						ks = sorted
					}
					put, step := tab.PutMany, 64
					if part == "insertmany" {
						put, step = tab.InsertMany, 256
					}
					for lo := 0; lo < n; lo += step {
						hi := min(lo+step, n)
						if _, err := put(ks[lo:hi], vals[lo:hi]); err != nil {
							b.Fatal(err)
						}
					}
					cpu += testenv.ThreadCPU(b) - start
					b.StopTimer()
				}
				tab.Close()
				b.StartTimer()
			}
			if part != "create" {
				// The writing thread's CPU time: wall time on a shared
				// machine is mostly time spent descheduled.
				b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
			}
		})
	}
}

// TestRefs: Add enters keys and names their slots, SetAt and DeleteAt
// write there (read back through a second mapping, as XDP or another
// process reads), in a table writers share and in an owned one; a Ref
// that no longer holds its key falls back to the search by key, and a
// deleted slot is taken again by a later Add.
func TestRefs(t *testing.T) {
	testenv.RequirePriv(t)
	for _, owned := range []bool{false, true} {
		tab, other := writerAndReader(t, 200, owned)
		var err error

		refs := make([]ktable.Ref, 200)
		for i := range refs {
			k, v := key(i), value(i)
			refs[i], err = tab.Add(&k, &v)
			require.NoError(t, err)
			require.NotZero(t, refs[i])
		}
		require.Equal(t, 200, tab.Len())
		for i := range refs {
			k, v := key(i), value(1000+i)
			r, err := tab.SetAt(refs[i], &k, &v)
			require.NoError(t, err)
			require.Equal(t, refs[i], r, "rewritten in place")
			got, ok := other.Get(&k)
			require.True(t, ok)
			require.Equal(t, value(1000+i), got)
		}
		// A wrong Ref (another key's slot, out of range, none) is found
		// by key instead.
		k, v := key(3), value(3)
		r, err := tab.SetAt(refs[4], &k, &v)
		require.NoError(t, err)
		require.Equal(t, refs[3], r)
		r, err = tab.SetAt(ktable.Ref(1<<30), &k, &v)
		require.NoError(t, err)
		require.Equal(t, refs[3], r)
		require.True(t, tab.DeleteAt(0, &k), "Ref 0: by key")
		_, ok := other.Get(&k)
		require.False(t, ok)
		require.False(t, tab.DeleteAt(refs[3], &k), "gone")
		for i := range refs {
			if i == 3 {
				continue
			}
			k := key(i)
			require.True(t, tab.DeleteAt(refs[i], &k))
			_, ok := other.Get(&k)
			require.False(t, ok, "entry %d deleted", i)
		}
		require.Zero(t, tab.Len())
		require.Equal(t, 200, tab.Dead())
		// Tombstones are reused.
		for i := range refs {
			k, v := key(i), value(i)
			_, err := tab.Add(&k, &v)
			require.NoError(t, err)
		}
		require.Equal(t, 200, tab.Len())
		require.Zero(t, tab.Dead())
	}
}

// TestInsertMany: keys entered in groups (owned table: the pipeline, over
// several calls; shared: one by one) are all read back through a second
// mapping, once each; on a table too small for them, the keys before
// the one that found both its buckets full are in, and no later one.
func TestInsertMany(t *testing.T) {
	testenv.RequirePriv(t)
	for _, owned := range []bool{false, true} {
		const n = 5000
		tab, other := writerAndReader(t, n, owned)
		keys := make([]ktable.Key, n)
		vals := make([]ktable.Value, n)
		for i := range keys {
			keys[i], vals[i] = key(i), value(i)
		}
		for lo := 0; lo < n; lo += 777 { // calls not a multiple of a group
			hi := min(lo+777, n)
			got, err := tab.InsertMany(keys[lo:hi], vals[lo:hi])
			require.NoError(t, err)
			require.Equal(t, hi-lo, got)
		}
		require.Equal(t, n, tab.Len())
		require.Equal(t, n, other.Len())
		seen := 0
		other.Each(func(k *ktable.Key, v *ktable.Value) bool {
			require.Equal(t, value(int(k[0])), *v)
			seen++
			return true
		})
		require.Equal(t, n, seen, "one slot per key")
		for i := range keys {
			got, ok := other.Get(&keys[i])
			require.True(t, ok, "key %d", i)
			require.Equal(t, vals[i], got)
		}

		small, err := ktable.Create(spec(), 2, 1) // 16 slots
		require.NoError(t, err)
		defer small.Close()
		if owned {
			small.Own()
		}
		got, err := small.InsertMany(keys[:100], vals[:100])
		require.ErrorIs(t, err, ktable.ErrFull)
		require.Equal(t, 16, got)
		require.Equal(t, 16, small.Len())
		for i := range 100 {
			_, ok := small.Get(&keys[i])
			require.Equal(t, i < got, ok, "key %d", i)
		}
	}
}

// writerAndReader creates a table for entries keys (owned by its writer
// or shared) and a second mapping of it, both closed when t ends.
func writerAndReader(t *testing.T, entries int, owned bool) (tab, other *ktable.Table) {
	t.Helper()
	tab, err := ktable.Create(spec(), ktable.Buckets(entries), 42)
	require.NoError(t, err)
	t.Cleanup(func() { tab.Close() })
	if owned {
		tab.Own()
	}
	other, err = ktable.Open(tab.Map(), 0)
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	return tab, other
}

// requireAllButThirds checks that of keys 0..n-1 exactly those not
// divisible by 3 are in tab, with their values, and that Len counts them;
// it returns how many there are.
func requireAllButThirds(t *testing.T, tab *ktable.Table, n int) int {
	t.Helper()
	want := 0
	for i := range n {
		k := key(i)
		v, ok := tab.Get(&k)
		require.Equal(t, i%3 != 0, ok, "key %d", i)
		if ok {
			want++
			require.Equal(t, value(i), v)
		}
	}
	require.Equal(t, want, tab.Len())
	return want
}

// TestAddFrom: keys sharing key[0] entered with AddFrom and their
// Prefix (as an MR Table does with its domain_id) are where Hash puts
// them: another mapping's Get, which hashes the whole key, finds each,
// and they are deleted and reused as Add's are. HashFrom equals Hash.
func TestAddFrom(t *testing.T) {
	testenv.RequirePriv(t)
	for _, owned := range []bool{false, true} {
		tab, other := writerAndReader(t, 300, owned)
		const k0 = 0x1234_0000_0007
		p := tab.Prefix(k0)
		keyOf := func(i int) ktable.Key { return ktable.Key{k0, uint64(i) * 0x9e3779b9, 0} }
		refs := make([]ktable.Ref, 300)
		for i := range refs {
			k, v := keyOf(i), value(i)
			var err error
			refs[i], err = tab.AddFrom(p, &k, &v)
			require.NoError(t, err)
			got, ok := other.Get(&k)
			require.True(t, ok, "key %d", i)
			require.Equal(t, value(i), got)
		}
		for i := range refs {
			k := keyOf(i)
			require.True(t, tab.DeleteAt(refs[i], &k))
			_, ok := other.Get(&k)
			require.False(t, ok)
		}
		for i := range refs { // tombstones reused
			k, v := keyOf(i), value(i)
			_, err := tab.AddFrom(p, &k, &v)
			require.NoError(t, err)
		}
		require.Equal(t, 300, tab.Len())
		require.Zero(t, tab.Dead())
	}
	for i := range 1000 {
		seed, k := uint64(i)*0xabcdef12345, key(i)
		require.Equal(t, ktable.Hash(seed, &k), ktable.HashFrom(ktable.PrefixOf(seed, k[0]), &k))
	}
}

// BenchmarkAddDeleteAt is the MR table's part of a reg+close: a key
// entered with AddFrom (its Prefix computed once) and deleted at its Ref, in a half-full table
// opened uncounted as the MR table is; "samekey" enters one key each
// time (BenchmarkRegCloseBPF's), "1kkeys" cycles through 1024 keys of
// one domain.
func BenchmarkAddDeleteAt(b *testing.B) {
	testenv.RequirePriv(b)
	for _, n := range []int{1, 1024} {
		name := "samekey"
		if n > 1 {
			name = "1kkeys"
		}
		b.Run(name, func(b *testing.B) {
			sp := spec()
			sp.MaxEntries = 1 + 1<<15
			m, err := ebpf.NewMap(sp)
			require.NoError(b, err)
			defer m.Close()
			tab, err := ktable.OpenUncounted(m, 3)
			require.NoError(b, err)
			defer tab.Close()
			for i := range 1 << 17 { // half full, as a busy table
				k, v := key(i+1000), value(i)
				require.NoError(b, tab.Put(&k, &v))
			}
			const domain = 7
			p := tab.Prefix(domain)
			keys := make([]ktable.Key, n)
			for i := range keys {
				keys[i] = ktable.Key{domain, uint64(i) * 0x9e3779b97f4a7c15, 0}
			}
			v := value(1)
			i := 0
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			start := testenv.ThreadCPU(b)
			for b.Loop() {
				k := &keys[i]
				if i++; i == n {
					i = 0
				}
				r, err := tab.AddFrom(p, k, &v)
				if err != nil {
					b.Fatal(err)
				}
				tab.DeleteAt(r, k)
			}
			b.ReportMetric(float64(testenv.ThreadCPU(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
