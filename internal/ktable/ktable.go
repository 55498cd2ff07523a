// Package ktable is the user-space side of xdpfab's kernel tables: hash
// tables held in a BPF_F_MMAPABLE array map that this process mmaps and
// writes with plain (atomic) stores, and that the XDP program reads
// (bpf/xdpfab.h, "Kernel tables", is the layout and the seqlock protocol;
// kt_find in bpf/xdpfab.c the reader). Keeping the kernel in step with a
// change costs a few memory writes instead of a bpf(2) call.
//
// A Table is keyed by 3 words and holds 4 words per key; the mr and av
// packages say how their types fill them. Writers in several processes
// may share a table (the MR table of an interface): slots are claimed
// with compare-and-swap. One key must have at most one writer at a time
// (each key belongs to one MR table or one AV, which serialize their
// writes per key).
//
// Cost. A slot is a cache line, so reading the two buckets of a key is 16
// of them; a sync/atomic store is a locked XCHG on x86-64. So a writer
// stores the words of a slot it claimed with plain stores and releases
// the slot with one store of seq ordered after them
// (memorder.StoreRelease: a MOV on x86-64, from assembly so that the
// compiler can neither reorder nor drop it), and the header keeps both counts in one word (one atomic add
// a write). A table opened with OpenUncounted (the MR table) keeps no
// counts at all: its writers, in several processes, would each take a
// locked add on the header's one word a write, two of the dozen locked
// instructions of a registration and close; Len and Dead walk it instead
// (a few ms for the MR table's 16 MiB, for `xdpfab status`). A table with one writer (an AV's: Own) goes further: the
// writer keeps a tag byte per slot in Go memory (8 bytes a bucket), finds
// a key's slot or a free one from the tags without reading the buckets,
// marks slots odd with a plain store instead of a compare-and-swap and
// counts in Go, so a write is one cache line and no locked instruction;
// PutMany prefetches a group of keys' tags, then the slots they will
// take, so that their cache misses (and page walks) overlap; InsertMany,
// for keys known to be new, skips the search, reads a key's second
// bucket's tags only when its first is nearly full, and runs groups of
// keys through a pipeline so that each group's misses were asked for a
// step before they are needed (BenchmarkFill1M: ~30% less CPU). Measured (BenchmarkPutDelete, put+delete of one key):
// shared ~70 ns, owned ~45 ns, on a loaded 2-core VM.
//
// A key's only writer can also keep where its key is: Add enters a key
// the caller knows is absent (no search of its buckets) and returns its
// slot as a Ref, and SetAt and DeleteAt write that slot directly (no hash,
// no search), after checking that it still holds the key in use. A slot in
// use is written only by its key's writer (other writers claim free or
// dead slots only, by compare-and-swap on seq), so marking it odd needs no
// compare-and-swap either. The MR table's regions use them. A writer
// whose keys share key[0] (an MR Table's: its domain_id) hashes that word
// once (Prefix) and enters keys with AddFrom, one of the hash's three
// rounds less a key. A slot's seq and state are adjacent and 8-byte
// aligned, so writers read them with one load (the free-slot scan, the
// check of a Ref) and release a slot with one store of both; DeleteAt
// kills a slot it holds in use with that one store, without marking it
// odd first (bpf/xdpfab.h's seqlock text says why readers are safe).
//
// AV tables use AVTable (avtable.go), the layout made compact for one
// AV's peers (bpf/xdpfab.h, "Peer tables"): 32-byte slots, any bucket
// count, one writer. A large insert's time is mostly the first touch of
// the table's pages, so bytes an entry count more there than cache lines
// a write; the MR table, written a registration at a time by several
// processes, keeps Table.
//
// Failure modes. A table does not grow: Put fails with ErrFull when both
// buckets of a key are full (the caller resizes by building a bigger
// table and swapping it in, as av does, or refuses, as mr does). A process
// that dies between claiming a slot and releasing it leaves the slot's
// seq odd: readers treat it as busy (XDP passes the packet to the stack,
// mr_vet answers MR_VET_BUSY) and writers skip it, so the slot is lost
// until the table is rebuilt, never misread (an owned table's writer
// takes such a slot over: no one else may write it). An owned table's
// tags are right only while no one else writes the table: Own is for a
// table its caller made, or took over emptied with the right to be its
// only writer (an av_id from the attachment), never for the MR table.
package ktable

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/internal/memorder"
	"github.com/xdpfab/xdpfab/internal/prefetch"
)

// Layout constants of bpf/xdpfab.h.
const (
	Ways       = 8                  // KT_WAYS: slots per bucket
	SlotSize   = 64                 // sizeof(struct kt_slot)
	BucketSize = Ways * SlotSize    // sizeof(struct kt_bucket), the map's value size
	Magic      = 0x78666b74626c3031 // KT_MAGIC

	stateFree   = 0 // KT_FREE
	stateUsed   = 1 // KT_USED
	stateDead   = 2 // KT_DEAD
	stateHeader = 3 // KT_HEADER

	// headerUncounted, in the header's val[1], is KT_UNCOUNTED: writers
	// keep no counts in val[0] (Len and Dead walk the table).
	headerUncounted = 1
)

// Key and Value are a slot's key and value words.
type (
	Key   [3]uint64
	Value [4]uint64
)

// slot is struct kt_slot.
type slot struct {
	seq   uint32
	state uint32
	key   Key
	val   Value
}

type bucket [Ways]slot

// ErrFull: both buckets a key may live in are full.
var ErrFull = errors.New("kernel table: no free slot for the key")

// Table is a kernel table mapped into this process.
type Table struct {
	m       *ebpf.Map
	ownMap  bool
	mem     []byte
	buckets []bucket // buckets[0] is the header
	hdr     *slot
	nb      uint64 // data buckets
	seed    uint64

	// tags, set by Own, shadow the table for its only writer: byte i of
	// tags[b] is 0 while slot i of data bucket b+1 is free or dead, else
	// the key's tag (1..255, from its hash), so that writes find a free
	// slot, or the slot of a key, without reading the slots of the two
	// buckets (8 cache lines each). nil while writers may share the
	// table.
	tags  []uint64
	count uint64 // owned: the header's val[0], which only this writer changes

	// noCounts: the header says KT_UNCOUNTED (OpenUncounted), so writes
	// leave val[0] alone.
	noCounts bool
}

// Buckets returns how many data buckets a table needs for n entries at
// most ~75% full (a power of two, at least 2).
func Buckets(n int) int {
	need := (n*4/3 + Ways - 1) / Ways
	if need < 2 {
		return 2
	}
	return 1 << bits.Len(uint(need-1))
}

// Create makes a map of spec (an array of kt_bucket values) with nb data
// buckets (a power of two, at least 2), maps it and writes its header. The
// Table owns the map.
func Create(spec *ebpf.MapSpec, nb int, seed uint64) (*Table, error) {
	if nb < 2 || nb&(nb-1) != 0 {
		return nil, fmt.Errorf("kernel table: %d buckets: not a power of two >= 2", nb)
	}
	spec = spec.Copy()
	spec.MaxEntries = uint32(1 + nb)
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("kernel table: create map: %w", err)
	}
	t, err := mapTable(m, true)
	if err != nil {
		m.Close()
		return nil, err
	}
	t.ownMap = true
	t.init(seed, 0)
	return t, nil
}

// Open maps the kernel table m, which stays the caller's. A map whose
// header was never written (a new map the XDP loader created) gets one,
// with seed; a map whose header is another's fails.
func Open(m *ebpf.Map, seed uint64) (*Table, error) { return open(m, seed, 0) }

// OpenUncounted is Open of a table whose writers share it and count
// nothing: a header it writes says KT_UNCOUNTED, so that no write
// updates the header's counts, which on a table shared by several
// writers took a locked add each (two of a registration's dozen locked
// instructions in the MR table: ~13% of a reg+close). Len and Dead then
// walk the table. What a map's header says wins: a map whose header
// another Open wrote keeps counting.
func OpenUncounted(m *ebpf.Map, seed uint64) (*Table, error) {
	return open(m, seed, headerUncounted)
}

func open(m *ebpf.Map, seed, flags uint64) (*Table, error) {
	t, err := mapTable(m, true)
	if err != nil {
		return nil, err
	}
	t.init(seed, flags)
	if atomic.LoadUint64(&t.hdr.key[2]) != Magic || atomic.LoadUint64(&t.hdr.key[1]) != t.nb {
		t.Close()
		return nil, fmt.Errorf("kernel table: map %v has no valid header", m)
	}
	t.noCounts = atomic.LoadUint64(&t.hdr.val[1])&headerUncounted != 0
	return t, nil
}

// Take is Open of a map the Table then owns: Close closes m too (also
// when Take fails).
func Take(m *ebpf.Map) (*Table, error) {
	t, err := Open(m, RandomSeed())
	if err != nil {
		m.Close()
		return nil, err
	}
	t.ownMap = true
	return t, nil
}

// OpenReadOnly maps m for reading (Len, Each), as `xdpfab status` does.
func OpenReadOnly(m *ebpf.Map) (*Table, error) {
	t, err := mapTable(m, false)
	if err != nil {
		return nil, err
	}
	if atomic.LoadUint64(&t.hdr.key[2]) != Magic || atomic.LoadUint64(&t.hdr.key[1]) != t.nb {
		t.Close()
		return nil, fmt.Errorf("kernel table: map %v has no valid header", m)
	}
	t.seed = atomic.LoadUint64(&t.hdr.key[0])
	t.noCounts = atomic.LoadUint64(&t.hdr.val[1])&headerUncounted != 0
	return t, nil
}

func mapTable(m *ebpf.Map, write bool) (*Table, error) {
	if m == nil {
		return nil, errors.New("kernel table: nil map")
	}
	n := uint64(m.MaxEntries())
	if m.ValueSize() != BucketSize || m.KeySize() != 4 || n < 3 || (n-1)&(n-2) != 0 {
		return nil, fmt.Errorf("kernel table: map %v (key %d, value %d, %d entries) is not a kernel table",
			m, m.KeySize(), m.ValueSize(), n)
	}
	mem, err := mmapBuckets(m, BucketSize, write)
	if err != nil {
		return nil, fmt.Errorf("kernel table: %w", err)
	}
	t := &Table{m: m, mem: mem, nb: n - 1}
	t.buckets = unsafe.Slice((*bucket)(unsafe.Pointer(&mem[0])), n)
	t.hdr = &t.buckets[0][0]
	return t, nil
}

// mmapBuckets maps the whole of m, an array of bucketSize-byte values
// (BPF_F_MMAPABLE), shared: read-only, or writable when write.
func mmapBuckets(m *ebpf.Map, bucketSize int, write bool) ([]byte, error) {
	size := int(m.MaxEntries()) * bucketSize
	if pg := unix.Getpagesize(); size%pg != 0 {
		size += pg - size%pg
	}
	prot := unix.PROT_READ
	if write {
		prot |= unix.PROT_WRITE
	}
	mem, err := unix.Mmap(m.FD(), 0, size, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap map %v: %w", m, err)
	}
	return mem, nil
}

// init writes the header, with flags in val[1], unless one is there.
func (t *Table) init(seed, flags uint64) {
	h := t.hdr
	if atomic.LoadUint64(&h.key[2]) == Magic {
		t.seed = atomic.LoadUint64(&h.key[0])
		return
	}
	if atomic.CompareAndSwapUint32(&h.seq, 0, 1) {
		atomic.StoreUint32(&h.state, stateHeader)
		atomic.StoreUint64(&h.key[0], seed)
		atomic.StoreUint64(&h.key[1], t.nb)
		atomic.StoreUint64(&h.val[1], flags)
		atomic.StoreUint64(&h.key[2], Magic) // last: readers check it
		atomic.StoreUint32(&h.seq, 2)
	}
	for atomic.LoadUint32(&h.seq)&1 != 0 { // another process is writing it
	}
	t.seed = atomic.LoadUint64(&h.key[0])
}

// Map returns the map behind the table.
func (t *Table) Map() *ebpf.Map { return t.m }

// Buckets returns the number of data buckets.
func (t *Table) Buckets() int { return int(t.nb) }

// Slots returns how many entries the table can hold at most.
func (t *Table) Slots() int { return int(t.nb) * Ways }

// Len returns the entries in use, as the header counts them (on an
// uncounted table, as a walk of every slot finds them: ~16 MiB read for
// the MR table).
func (t *Table) Len() int {
	if t.noCounts {
		used, _ := t.walkCounts()
		return used
	}
	return int(uint32(atomic.LoadUint64(&t.hdr.val[0])))
}

// Dead returns the tombstones, as the header counts them (or a walk
// finds them, as Len).
func (t *Table) Dead() int {
	if t.noCounts {
		_, dead := t.walkCounts()
		return dead
	}
	return int(atomic.LoadUint64(&t.hdr.val[0]) >> 32)
}

// Uncounted reports whether the table's header says KT_UNCOUNTED.
func (t *Table) Uncounted() bool { return t.noCounts }

// walkCounts counts the slots in use and dead. Slots being written are
// counted as their state word says at the moment.
func (t *Table) walkCounts() (used, dead int) {
	for bi := 1; bi < len(t.buckets); bi++ {
		b := &t.buckets[bi]
		for i := range b {
			switch atomic.LoadUint32(&b[i].state) {
			case stateUsed:
				used++
			case stateDead:
				dead++
			}
		}
	}
	return used, dead
}

// Close unmaps the table, and closes its map if Create made it. Nothing
// of the table may be used afterwards.
func (t *Table) Close() error {
	var err error
	if t.mem != nil {
		t.buckets, t.hdr = nil, nil
		err = unix.Munmap(t.mem)
		t.mem = nil
	}
	if t.ownMap {
		err = errors.Join(err, t.m.Close())
	}
	return err
}

// RandomSeed returns a hash seed for a new table.
func RandomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Hash is kt_hash of bpf/xdpfab.c.
func Hash(seed uint64, k *Key) uint64 {
	return HashFrom(PrefixOf(seed, k[0]), k)
}

// Prefix is the first of Hash's three rounds, which reads only key[0]
// (and the table's seed): a writer whose keys all share key[0] (an MR
// Table's: its domain_id) computes it once (Table.Prefix) and hashes each
// key with the two rounds left (HashFrom, AddFrom).
type Prefix uint64

// Prefix returns the Prefix of keys whose key[0] is k0 in t.
func (t *Table) Prefix(k0 uint64) Prefix { return PrefixOf(t.seed, k0) }

// PrefixOf returns the Prefix of keys whose key[0] is k0 under seed.
func PrefixOf(seed, k0 uint64) Prefix { return Prefix(mix(seed ^ k0)) }

// HashFrom is Hash of k, whose key[0] has the Prefix p.
func HashFrom(p Prefix, k *Key) uint64 {
	h := mix(uint64(p) ^ k[1])
	return mix(h ^ k[2])
}

// homes returns the two buckets key may live in.
func (t *Table) homes(k *Key) (*bucket, *bucket) {
	b1, b2 := t.homesOf(Hash(t.seed, k))
	return &t.buckets[b1], &t.buckets[b2]
}

// find returns the slot holding k and its even seq, or nil.
func find(b *bucket, k *Key) (*slot, uint32) {
	for i := range b {
		s := &b[i]
		if atomic.LoadUint64(&s.key[0]) != k[0] || atomic.LoadUint64(&s.key[1]) != k[1] ||
			atomic.LoadUint64(&s.key[2]) != k[2] {
			continue
		}
		seq := atomic.LoadUint32(&s.seq)
		if seq&1 == 0 && atomic.LoadUint32(&s.state) == stateUsed && atomic.LoadUint32(&s.seq) == seq {
			return s, seq
		}
	}
	return nil, 0
}

// Put sets k's value, in place if k is in the table, else in a free slot
// of the emptier of its two buckets; ErrFull if both are full.
func (t *Table) Put(k *Key, v *Value) error {
	if t.tags != nil {
		return t.ownPut(k, v, true)
	}
	b1, b2 := t.homes(k)
	for {
		s, seq := find(b1, k)
		if s == nil {
			s, seq = find(b2, k)
		}
		if s != nil {
			if !atomic.CompareAndSwapUint32(&s.seq, seq, seq+1) {
				continue // another writer's claim: look again
			}
			s.val = *v // the slot is ours (seq odd): plain stores
			memorder.StoreRelease32(&s.seq, seq+2)
			return nil
		}
		s, seq, state := emptier(b1, b2)
		if s == nil {
			return ErrFull
		}
		if !atomic.CompareAndSwapUint32(&s.seq, seq, seq+1) {
			continue
		}
		fill(s, seq, k, v)
		t.counted(state)
		return nil
	}
}

// fill writes k and v into s, which the caller claimed (seq moved from
// the even seq to seq+1), marks it used and releases it. The words a
// claimed slot holds are written with plain stores: readers ignore them
// until seq is even again, and the stores stay in program order (Go keeps
// memory operations in order around sync/atomic calls, and x86-64 keeps
// stores in order), so the final seq store publishes them. Each
// sync/atomic store would be a locked XCHG on x86-64, ~10 of them a
// write. The mapping is not Go memory, which the race detector does not
// watch. State and seq go in one 8-byte store (seqState).
func fill(s *slot, seq uint32, k *Key, v *Value) {
	s.key[0], s.key[1], s.key[2] = k[0], k[1], k[2]
	setValue(s, v)
	memorder.StoreRelease64(seqState(s), seqStateOf(seq+2, stateUsed))
}

// rewrite sets the value of slot s, in use at even seq, for its only
// writer: marked odd with a plain store (no other writer claims a slot in
// use), written, then even again.
func rewrite(s *slot, seq uint32, v *Value) {
	memorder.StoreRelease32(&s.seq, seq+1)
	setValue(s, v)
	memorder.StoreRelease32(&s.seq, seq+2)
}

// setValue stores v in the claimed slot s word by word: callers build
// keys and values on the stack with 8-byte stores, and a whole-array copy
// reads them back with 16-byte loads, which cannot be forwarded from
// those stores and wait for them to reach the cache.
func setValue(s *slot, v *Value) {
	s.val[0], s.val[1], s.val[2], s.val[3] = v[0], v[1], v[2], v[3]
}

// The header counts entries in use in the low 32 bits of val[0] and
// tombstones in the high 32 bits, so that one atomic add keeps both.
const deadOne = 1 << 32

// counted updates the header's counts for a slot of state that now holds
// an entry.
func (t *Table) counted(state uint32) {
	d := uint64(1)
	if state == stateDead {
		d = ^uint64(deadOne - 2) // +1 entry, -1 tombstone
	}
	if t.noCounts {
		return
	}
	if t.tags != nil { // owned: the one writer's store is enough
		t.count += d
		memorder.StoreRelease64(&t.hdr.val[0], t.count)
		return
	}
	atomic.AddUint64(&t.hdr.val[0], d)
}

// Insert enters k, which the caller knows is not in the table (a table
// being filled by one writer before anyone reads it), skipping the search
// Put makes for it; ErrFull if both its buckets are full.
func (t *Table) Insert(k *Key, v *Value) error {
	if t.tags != nil {
		return t.ownPut(k, v, false)
	}
	b1, b2 := t.homes(k)
	for {
		s, seq, state := emptier(b1, b2)
		if s == nil {
			return ErrFull
		}
		if !atomic.CompareAndSwapUint32(&s.seq, seq, seq+1) {
			continue
		}
		fill(s, seq, k, v)
		t.counted(state)
		return nil
	}
}

// emptier returns a free or dead slot, its seq and state, of whichever of
// b1 and b2 has more of them (two choices keep the buckets' loads within
// a slot or two of each other, so a table fills to ~90% before a key
// finds both full), nil if both are full.
//
// Each bucket's slots are read only until the choice is known (a slot is
// a cache line, a miss of its own in a big table): b1's until more than
// half of them are found free (an empty bucket: 5 of 8), b2's until it
// has more free than b1.
func emptier(b1, b2 *bucket) (*slot, uint32, uint32) {
	s1, q1, st1, n1 := free(b1, Ways/2+1)
	if n1 > Ways/2 {
		return s1, q1, st1 // mostly empty: no need to read the other bucket
	}
	s2, q2, st2, n2 := free(b2, n1+1)
	if n2 > n1 {
		return s2, q2, st2
	}
	return s1, q1, st1
}

// free returns the first stable free or dead slot of b, its seq and
// state, and how many such slots b has, counting no further than enough.
//
// A slot's seq and state are read with one 8-byte load (seqState): two
// 4-byte loads a slot, five slots a registration, were a measurable part
// of the claim.
func free(b *bucket, enough int) (first *slot, seq, state uint32, n int) {
	for i := range b {
		s := &b[i]
		w := atomic.LoadUint64(seqState(s))
		// Even seq, state KT_FREE (0) or KT_DEAD (2).
		if w&1 != 0 || (w>>32)&^stateDead != 0 {
			continue
		}
		if n == 0 {
			first, seq, state = s, uint32(w), uint32(w>>32)
		}
		if n++; n == enough {
			break
		}
	}
	return first, seq, state, n
}

// seqState returns s's seq and state words as one: seq in the low 32 bits
// and state in the high (little-endian; slots are 64-byte aligned, so an
// 8-byte store of both is one access, of which no reader sees half).
func seqState(s *slot) *uint64 { return (*uint64)(unsafe.Pointer(&s.seq)) }

// seqStateOf is the word seqState names holding seq and state.
func seqStateOf(seq, state uint32) uint64 { return uint64(seq) | uint64(state)<<32 }

// Delete removes k; it reports whether k was there.
func (t *Table) Delete(k *Key) bool {
	if t.tags != nil {
		return t.ownDelete(k)
	}
	b1, b2 := t.homes(k)
	for {
		s, seq := find(b1, k)
		if s == nil {
			s, seq = find(b2, k)
		}
		if s == nil {
			return false
		}
		if !atomic.CompareAndSwapUint32(&s.seq, seq, seq+1) {
			continue
		}
		kill(s, seq)
		t.uncounted()
		return true
	}
}

// kill marks the claimed slot s dead and releases it, with one 8-byte
// store of state and seq. It keeps the key words: a reader comparing them
// without the second seq read then still finds the slot and sees it dead.
func kill(s *slot, seq uint32) {
	memorder.StoreRelease64(seqState(s), seqStateOf(seq+2, stateDead))
}

// uncounted updates the header's counts for an entry that became a
// tombstone.
func (t *Table) uncounted() {
	const d = deadOne - 1 // -1 entry, +1 tombstone
	if t.noCounts {
		return
	}
	if t.tags != nil {
		t.count += d
		memorder.StoreRelease64(&t.hdr.val[0], t.count)
		return
	}
	atomic.AddUint64(&t.hdr.val[0], d)
}

// Ref names the slot holding a key, as Add returned it, so that the
// key's writer can rewrite or delete it there (SetAt, DeleteAt) without
// hashing the key and searching its two buckets (16 slot lines). 0 is no
// slot.
type Ref uint32

// slotOf returns the slot r names, nil when r is out of range.
func (t *Table) slotOf(r Ref) *slot {
	bi, i := uint64(r)/Ways, int(r%Ways)
	if bi == 0 || bi > t.nb {
		return nil
	}
	return &t.buckets[bi][i]
}

// Add enters k, which the caller knows is not in the table because it is
// k's only writer (an MR table's keys carry its domain_id, which one
// process owns), and returns its slot; ErrFull if both of k's buckets are
// full. It skips the search Put makes for k: a registration then costs
// the claim of a free slot, not a read of both buckets.
func (t *Table) Add(k *Key, v *Value) (Ref, error) {
	return t.addH(k, v, Hash(t.seed, k))
}

// AddFrom is Add of k whose key[0] has the Prefix p (Table.Prefix of
// k[0]; a wrong p puts k where no reader looks): one round of the hash
// less.
func (t *Table) AddFrom(p Prefix, k *Key, v *Value) (Ref, error) {
	return t.addH(k, v, HashFrom(p, k))
}

// addH is Add of k, whose hash is h.
func (t *Table) addH(k *Key, v *Value, h uint64) (Ref, error) {
	if t.tags != nil {
		return t.ownPutH(k, v, h, false)
	}
	n1, n2 := t.homesOf(h)
	b1, b2 := &t.buckets[n1], &t.buckets[n2]
	for {
		s, seq, state := emptier(b1, b2)
		if s == nil {
			return 0, ErrFull
		}
		if !atomic.CompareAndSwapUint32(&s.seq, seq, seq+1) {
			continue
		}
		fill(s, seq, k, v)
		t.counted(state)
		return t.refOf(s), nil
	}
}

// refOf returns the Ref of slot s of t.
func (t *Table) refOf(s *slot) Ref {
	off := uintptr(unsafe.Pointer(s)) - uintptr(unsafe.Pointer(&t.buckets[0][0]))
	return Ref(off / SlotSize)
}

// held returns the slot r names when it holds k (in use, seq even), with
// its seq; nil otherwise. Only k's writer changes such a slot, so what it
// finds stays true until that writer changes it.
func (t *Table) held(r Ref, k *Key) (*slot, uint32) {
	s := t.slotOf(r)
	if s == nil {
		return nil, 0
	}
	w := atomic.LoadUint64(seqState(s))
	if w != seqStateOf(uint32(w)&^1, stateUsed) || atomic.LoadUint64(&s.key[0]) != k[0] ||
		atomic.LoadUint64(&s.key[1]) != k[1] || atomic.LoadUint64(&s.key[2]) != k[2] {
		return nil, 0 // odd seq, not in use, or another key
	}
	return s, uint32(w)
}

// SetAt sets the value of k, which Add put at r, and returns where k is
// now: r, or, if r no longer holds k (the caller's bookkeeping is wrong,
// or the table was rebuilt), whatever Put found. A slot holding k in use
// is written only by k's writer (others claim free or dead slots only,
// with compare-and-swap), so the caller marks it odd with a plain store.
func (t *Table) SetAt(r Ref, k *Key, v *Value) (Ref, error) {
	s, seq := t.held(r, k)
	if s == nil {
		if err := t.Put(k, v); err != nil {
			return 0, err
		}
		return t.find(k), nil
	}
	rewrite(s, seq, v)
	return r, nil
}

// DeleteAt removes k, which Add put at r (Delete's search when r no
// longer holds k); it reports whether k was there. On a counted table
// writers share, the count's atomic add after the slot's stores makes
// them visible to every CPU before DeleteAt returns; on an uncounted one
// they are plain stores, visible to every CPU after the caller's next
// locked instruction (x86-64 keeps them in order: anything the caller
// does that others can see comes after them). mr's Close takes its
// table's lock right after, before it returns.
//
// The slot is not marked odd first: the kill changes only its state and
// seq, in one 8-byte store (kill), so a reader sees the slot in use at
// seq or dead at seq+2, never between; no other writer claims a slot in
// use.
func (t *Table) DeleteAt(r Ref, k *Key) bool {
	s, seq := t.held(r, k)
	if s == nil {
		return t.Delete(k)
	}
	kill(s, seq)
	if t.tags != nil {
		bi, i := uint64(r)/Ways, r%Ways
		t.tags[bi-1] &^= 0xff << (8 * i)
	}
	t.uncounted()
	return true
}

// find returns the Ref of the slot holding k, 0 if none.
func (t *Table) find(k *Key) Ref {
	b1, b2 := t.homes(k)
	s, _ := find(b1, k)
	if s == nil {
		s, _ = find(b2, k)
	}
	if s == nil {
		return 0
	}
	return t.refOf(s)
}

// Own makes the caller the table's only writer, in this process and any
// other, until Close: Put, Insert and Delete then keep tags (see Table)
// and no longer read the two buckets of a key to find its slot or a free
// one, nor claim slots with compare-and-swap. The table's current entries
// are read once, unless its header counts none (a new or Reset table). A table the caller created, or took over emptied (an AV
// table), may be owned; the MR table, which processes share, may not.
func (t *Table) Own() {
	t.tags = make([]uint64, t.nb)
	t.count = atomic.LoadUint64(&t.hdr.val[0])
	if t.count == 0 && !t.noCounts {
		return // new or Reset: nothing to learn (a 1M-entry table is 128 MiB)
	}
	for bi := uint64(1); bi <= t.nb; bi++ {
		b := &t.buckets[bi]
		for i := range b {
			s := &b[i]
			if atomic.LoadUint32(&s.state) != stateUsed {
				continue
			}
			k := s.key
			t.tags[bi-1] |= uint64(tagOf(Hash(t.seed, &k))) << (8 * i)
		}
	}
}

// tagOf is the tag of a key whose hash is h: bits the bucket choice does
// not use, never 0.
func tagOf(h uint64) uint8 {
	if g := uint8(h >> 56); g != 0 {
		return g
	}
	return 1
}

// homesOf returns the two data buckets (1..nb) of hash h.
func (t *Table) homesOf(h uint64) (uint64, uint64) {
	mask := t.nb - 1
	b1 := 1 + h&mask
	b2 := 1 + (h>>32)&mask
	if b2 == b1 {
		b2 = 1 + ((h>>32)^1)&mask
	}
	return b1, b2
}

const (
	lows  = 0x0101010101010101
	highs = 0x8080808080808080
)

// tagMatches returns a word with bit 8i+7 set exactly where byte i of w
// is g.
func tagMatches(w uint64, g uint8) uint64 { return freeSlots(w ^ lows*uint64(g)) }

// freeSlots returns a word with bit 8i+7 set exactly where byte i of w is
// 0 (no carry crosses bytes: each byte's low 7 bits are added apart).
func freeSlots(w uint64) uint64 {
	return ((w&^highs+^uint64(highs))|w)&highs ^ highs
}

// ownFind returns the slot index (bucket, way) holding k in an owned
// table, or ok false.
func (t *Table) ownFind(k *Key, b1, b2 uint64, g uint8) (uint64, int, bool) {
	for _, bi := range [2]uint64{b1, b2} {
		for m := tagMatches(t.tags[bi-1], g); m != 0; m &= m - 1 {
			i := bits.TrailingZeros64(m) / 8
			if t.buckets[bi][i].key == *k {
				return bi, i, true
			}
		}
	}
	return 0, 0, false
}

// ownPut is Put (search) or Insert (k known absent) on an owned table.
func (t *Table) ownPut(k *Key, v *Value, search bool) error {
	_, err := t.ownPutH(k, v, Hash(t.seed, k), search)
	return err
}

// PutMany is Put of keys[i] -> values[i] for each i in order, prefetching
// so that the cache misses of a group of keys overlap (on a big owned
// table a write is otherwise bound by two or three misses one after the
// other: tags, slot, and the slot's page walk). It returns how many it
// put before an error.
func (t *Table) PutMany(keys []Key, values []Value) (int, error) {
	if t.tags == nil {
		for i := range keys {
			if err := t.Put(&keys[i], &values[i]); err != nil {
				return i, err
			}
		}
		return len(keys), nil
	}
	const group = 32
	var hs [group]uint64
	var pf [2 * group]uintptr
	for lo := 0; lo < len(keys); lo += group {
		n := min(group, len(keys)-lo)
		// Ahead of the writes, in two rounds of prefetches: the tag
		// words of each key's two buckets (Go memory, 8 bytes a
		// bucket), then the slot each key will likely take, found from
		// those tags. Each round's misses are in flight together.
		for i := range n {
			h := Hash(t.seed, &keys[lo+i])
			hs[i] = h
			b1, b2 := t.homesOf(h)
			pf[2*i] = uintptr(unsafe.Pointer(&t.tags[b1-1]))
			pf[2*i+1] = uintptr(unsafe.Pointer(&t.tags[b2-1]))
		}
		prefetch.Addrs(&pf[0], 2*n)
		for i := range n {
			b1, b2 := t.homesOf(hs[i])
			w1, w2 := t.tags[b1-1], t.tags[b2-1]
			f := freeSlots(w1)
			if bits.OnesCount64(freeSlots(w2)) > bits.OnesCount64(f) {
				b1, f = b2, freeSlots(w2)
			}
			pf[i] = uintptr(unsafe.Pointer(&t.buckets[b1][bits.TrailingZeros64(f|1<<63)/8]))
		}
		prefetch.Addrs(&pf[0], n)
		for i := range n {
			if _, err := t.ownPutH(&keys[lo+i], &values[lo+i], hs[i], true); err != nil {
				return lo + i, err
			}
		}
	}
	return len(keys), nil
}

// InsertMany is Insert of keys[i] -> values[i] for each i in order: keys
// the caller knows are not in the table (and not twice among keys), as
// an AV's new addresses are. It returns how many it entered before an
// error (ErrFull). On an owned table it reads a key's second bucket's
// tags only when its first bucket has insertSpill free slots or fewer
// (Put reads both, to find the key): the tags are 8 bytes a bucket, met
// at random, so the second tag word is a cache miss of its own. Readers
// look in both buckets whatever the placement, and a table still fills
// until both of a key's buckets are full. Groups of keys go through a
// pipeline, one step apart: while a group's slots are chosen from its
// tags (prefetched a step earlier), the next group's tags are prefetched
// and the previous group's slots (prefetched a step earlier) written.
func (t *Table) InsertMany(keys []Key, values []Value) (int, error) {
	if t.tags == nil {
		for i := range keys {
			if err := t.Insert(&keys[i], &values[i]); err != nil {
				return i, err
			}
		}
		return len(keys), nil
	}
	// insertSpill: with at most this many free slots in the first bucket
	// the emptier of the two takes the key.
	const insertSpill = 2
	var st [3]insertStage
	var pf [insertGroup]uintptr
	ngroups := (len(keys) + insertGroup - 1) / insertGroup
	for g := -1; g <= ngroups; g++ {
		if next := g + 1; next < ngroups { // hash, prefetch the first buckets' tags
			s := &st[next%3]
			s.lo = next * insertGroup
			s.n = min(insertGroup, len(keys)-s.lo)
			for i := range s.n {
				h := Hash(t.seed, &keys[s.lo+i])
				s.hs[i] = h
				b1, _ := t.homesOf(h)
				pf[i] = uintptr(unsafe.Pointer(&t.tags[b1-1]))
			}
			prefetch.Addrs(&pf[0], s.n)
		}
		var err error
		if g >= 0 && g < ngroups { // choose and claim the slots, prefetch them
			s := &st[g%3]
			for i := range s.n {
				b1, b2 := t.homesOf(s.hs[i])
				bi, f := b1, freeSlots(t.tags[b1-1])
				if bits.OnesCount64(f) <= insertSpill {
					if f2 := freeSlots(t.tags[b2-1]); bits.OnesCount64(f2) > bits.OnesCount64(f) {
						bi, f = b2, f2
					}
				}
				if f == 0 {
					s.n, err = i, ErrFull
					break
				}
				w := bits.TrailingZeros64(f) / 8
				// Claimed in the tags now, so that keys of the group
				// sharing a bucket take different slots.
				t.tags[bi-1] |= uint64(tagOf(s.hs[i])) << (8 * w)
				s.at[i] = uint32(bi*Ways) + uint32(w)
				pf[i] = uintptr(unsafe.Pointer(&t.buckets[bi][w]))
			}
			prefetch.Addrs(&pf[0], s.n)
		}
		if prev := g - 1; prev >= 0 {
			t.writeChosen(&st[prev%3], keys, values)
		}
		if err != nil { // the keys before the full one are claimed: write them
			s := &st[g%3]
			t.writeChosen(s, keys, values)
			return s.lo + s.n, err
		}
	}
	return len(keys), nil
}

// insertGroup is how many keys InsertMany moves through each step.
const insertGroup = 32

// insertStage is a group of keys in InsertMany's pipeline: keys[lo:lo+n],
// their hashes and the slots chosen for them (bucket*Ways + way).
type insertStage struct {
	lo, n int
	hs    [insertGroup]uint64
	at    [insertGroup]uint32
}

// writeChosen writes the keys of s into the slots chosen for them.
func (t *Table) writeChosen(s *insertStage, keys []Key, values []Value) {
	for i := range s.n {
		sl := &t.buckets[s.at[i]/Ways][s.at[i]%Ways]
		seq := sl.seq &^ 1 // even unless a dead writer left it odd: ours to fix
		state := sl.state
		memorder.StoreRelease32(&sl.seq, seq+1)
		fill(sl, seq, &keys[s.lo+i], &values[s.lo+i])
		t.counted(state)
	}
}

// ownPutH is ownPut with k's hash h.
func (t *Table) ownPutH(k *Key, v *Value, h uint64, search bool) (Ref, error) {
	b1, b2 := t.homesOf(h)
	g := tagOf(h)
	if search {
		if bi, i, ok := t.ownFind(k, b1, b2, g); ok {
			s := &t.buckets[bi][i]
			rewrite(s, s.seq&^1, v)
			return Ref(bi*Ways + uint64(i)), nil
		}
	}
	f1, f2 := freeSlots(t.tags[b1-1]), freeSlots(t.tags[b2-1])
	bi, f := b1, f1
	if bits.OnesCount64(f2) > bits.OnesCount64(f1) {
		bi, f = b2, f2
	}
	if f == 0 {
		return 0, ErrFull
	}
	i := bits.TrailingZeros64(f) / 8
	s := &t.buckets[bi][i]
	seq := s.seq &^ 1 // even unless a dead writer left it odd: ours to fix
	state := s.state
	memorder.StoreRelease32(&s.seq, seq+1)
	fill(s, seq, k, v)
	t.tags[bi-1] |= uint64(g) << (8 * i)
	t.counted(state)
	return Ref(bi*Ways + uint64(i)), nil
}

// ownDelete is Delete on an owned table.
func (t *Table) ownDelete(k *Key) bool {
	h := Hash(t.seed, k)
	b1, b2 := t.homesOf(h)
	bi, i, ok := t.ownFind(k, b1, b2, tagOf(h))
	if !ok {
		return false
	}
	s := &t.buckets[bi][i]
	seq := s.seq &^ 1
	memorder.StoreRelease32(&s.seq, seq+1)
	kill(s, seq)
	t.tags[bi-1] &^= 0xff << (8 * i)
	t.uncounted()
	return true
}

// Get reads k's value under the seqlock protocol, as the XDP program does.
func (t *Table) Get(k *Key) (Value, bool) {
	b1, b2 := t.homes(k)
	for _, b := range []*bucket{b1, b2} {
		for i := range b {
			s := &b[i]
			if atomic.LoadUint64(&s.key[0]) != k[0] || atomic.LoadUint64(&s.key[1]) != k[1] ||
				atomic.LoadUint64(&s.key[2]) != k[2] {
				continue
			}
			if v, ok, stable := readSlot(s, k); stable && ok {
				return v, true
			}
		}
	}
	return Value{}, false
}

// readSlot reads s; ok when it holds k.
func readSlot(s *slot, k *Key) (v Value, ok, stable bool) {
	for range 64 {
		seq := atomic.LoadUint32(&s.seq)
		if seq&1 != 0 {
			continue
		}
		st := atomic.LoadUint32(&s.state)
		var key Key
		for i := range key {
			key[i] = atomic.LoadUint64(&s.key[i])
		}
		for i := range v {
			v[i] = atomic.LoadUint64(&s.val[i])
		}
		if atomic.LoadUint32(&s.seq) != seq {
			continue
		}
		return v, st == stateUsed && (k == nil || key == *k), true
	}
	return Value{}, false, false
}

// Each calls fn with every entry in use, each read consistently, until fn
// returns false. Entries written during the walk may be seen or not.
func (t *Table) Each(fn func(k *Key, v *Value) bool) {
	var k Key // one pair for the walk: they escape to fn
	var v Value
	for bi := 1; bi < len(t.buckets); bi++ {
		b := &t.buckets[bi]
		for i := range b {
			s := &b[i]
			if atomic.LoadUint32(&s.state) != stateUsed {
				continue
			}
			for range 64 {
				seq := atomic.LoadUint32(&s.seq)
				if seq&1 != 0 {
					continue
				}
				st := atomic.LoadUint32(&s.state)
				for j := range k {
					k[j] = atomic.LoadUint64(&s.key[j])
				}
				for j := range v {
					v[j] = atomic.LoadUint64(&s.val[j])
				}
				if atomic.LoadUint32(&s.seq) != seq {
					continue
				}
				if st == stateUsed && !fn(&k, &v) {
					return
				}
				break
			}
		}
	}
}

// Reset empties the table: every slot it used becomes free again and the
// header counts restart. Only its one writer may call it, and only when
// no reader can still be looking keys up for the entries it held (what
// the table served is gone: a new owner starts from an empty table).
func (t *Table) Reset() {
	for bi := 1; bi < len(t.buckets); bi++ {
		b := &t.buckets[bi]
		for i := range b {
			s := &b[i]
			if atomic.LoadUint32(&s.state) == stateFree {
				continue
			}
			seq := atomic.LoadUint32(&s.seq) &^ 1
			atomic.StoreUint32(&s.seq, seq+1)
			atomic.StoreUint32(&s.state, stateFree)
			s.key, s.val = Key{}, Value{}
			atomic.StoreUint32(&s.seq, seq+2)
		}
	}
	atomic.StoreUint64(&t.hdr.val[0], 0)
	t.count = 0
	clear(t.tags)
}

// DeleteIf removes every entry for which drop returns true (reaping a dead
// process's keys); it returns how many went.
func (t *Table) DeleteIf(drop func(k *Key) bool) int {
	var keys []Key
	t.Each(func(k *Key, _ *Value) bool {
		if drop(k) {
			keys = append(keys, *k)
		}
		return true
	})
	n := 0
	for i := range keys {
		if t.Delete(&keys[i]) {
			n++
		}
	}
	return n
}
