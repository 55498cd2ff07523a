package av

import (
	"encoding/binary"
	"math/bits"
	"sort"
	"sync/atomic"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/memorder"
)

// The table stores entries in chunks of chunkLen, allocated when an index
// in them is first used, so a directory of chunk pointers is the only
// storage that follows the index space; a symmetric range spanning whole
// chunks allocates none of them.
const (
	chunkShift = 10
	chunkLen   = 1 << chunkShift
	chunkMask  = chunkLen - 1

	// maxIndex is the highest index an AV hands out: index+1 must fit the
	// hash index's uint32 slots.
	maxIndex = 1<<32 - 2

	// maxGen is the last generation of an index: on an FI_AV_MAP AV
	// (table.retire) the index is retired when its occupant of this
	// generation leaves, rather than wrapping to generation 1 and letting
	// a handle of the first occupant name the next one.
	maxGen = 1<<16 - 1
)

// entry states.
const (
	entryUsed   uint16 = 1 << 0 // the index holds an address
	entryUserID uint16 = 1 << 1 // a user ID is set for it
	// entryHeld: the address was taken out again after its synchronous
	// FI_MORE insert had returned the handle (the kernel refused it); the
	// index stays out of use, under the same generation, until Remove
	// releases it, so that handle never names another address.
	entryHeld uint16 = 1 << 2
)

// entry is one address stored at an index: 24 bytes, three words that
// lock-free readers load with sync/atomic (see table.seq) and the writer,
// under the AV's mu inside a write section, stores with release stores
// (memorder: a MOV on x86-64, where a sync/atomic store is a locked XCHG).
type entry struct {
	ip0, ip1 word // the address's 16 bytes, little-endian words
	// meta packs port | gen<<16 | state<<32 | authKey<<48: gen is the
	// generation of the index's current or last occupant (0 = never
	// used), state entryUsed | entryUserID | entryHeld, authKey the auth
	// key id the address is bound to (0 = none).
	meta word
}

// word is a 64-bit word of the table that lock-free readers load: Load is
// atomic, Store a release store that only the writer makes, inside a
// write section (table.lockWrite), which readers detect by seq. Under
// the race detector the stores are sync/atomic ones (internal/memorder).
type word struct{ v uint64 }

func (w *word) Load() uint64   { return atomic.LoadUint64(&w.v) }
func (w *word) Store(v uint64) { memorder.StoreRelease64(&w.v, v) }

func packMeta(port, gen, state, authKey uint16) uint64 {
	return uint64(port) | uint64(gen)<<16 | uint64(state)<<32 | uint64(authKey)<<48
}

func metaPort(m uint64) uint16  { return uint16(m) }
func metaGen(m uint64) uint16   { return uint16(m >> 16) }
func metaState(m uint64) uint16 { return uint16(m >> 32) }
func metaKey(m uint64) uint16   { return uint16(m >> 48) }

func (e *entry) gen() uint16     { return metaGen(e.meta.Load()) }
func (e *entry) state() uint16   { return metaState(e.meta.Load()) }
func (e *entry) authKey() uint16 { return metaKey(e.meta.Load()) }

func (e *entry) endpoint() endpoint {
	return endpoint{ip: ipOfWords(e.ip0.Load(), e.ip1.Load()), port: metaPort(e.meta.Load())}
}

// set stores all of e; writer only.
func (e *entry) set(ep *endpoint, gen, state, authKey uint16) {
	e.ip0.Store(binary.LittleEndian.Uint64(ep.ip[:8]))
	e.ip1.Store(binary.LittleEndian.Uint64(ep.ip[8:]))
	e.meta.Store(packMeta(ep.port, gen, state, authKey))
}

// setMeta changes gen, state and authKey, keeping the address; writer only.
func (e *entry) setMeta(gen, state, authKey uint16) {
	e.meta.Store(packMeta(metaPort(e.meta.Load()), gen, state, authKey))
}

func (e *entry) setGen(gen uint16) {
	m := e.meta.Load()
	e.setMeta(gen, metaState(m), metaKey(m))
}

func (e *entry) setState(state uint16) {
	m := e.meta.Load()
	e.setMeta(metaGen(m), state, metaKey(m))
}

func ipOfWords(w0, w1 uint64) (ip [16]byte) {
	binary.LittleEndian.PutUint64(ip[:8], w0)
	binary.LittleEndian.PutUint64(ip[8:], w1)
	return ip
}

// chunk holds the dense entries of chunkLen indices. It holds no pointer,
// so the garbage collector does not scan it (24 MB for 1M addresses).
type chunk struct {
	e [chunkLen]entry
}

// chunkDir is the directory of chunks: a slot per chunk the index space
// may use so far, nil until the chunk is allocated, and beside it the
// chunk's user IDs, allocated when the first of them is set, so that AVs
// that never use FI_AV_USER_ID pay nothing for them. It is replaced by a
// larger copy when an index past it is first used, so a reader that
// loaded one sees a consistent directory.
type chunkDir struct {
	c []atomic.Pointer[chunk]
	u []atomic.Pointer[[chunkLen]word]
}

func newChunkDir(n int) *chunkDir {
	return &chunkDir{c: make([]atomic.Pointer[chunk], n), u: make([]atomic.Pointer[[chunkLen]word], n)}
}

// hashIndex is the hash index's slot array, replaced whole when it grows.
type hashIndex struct {
	slots []word
	shift uint // 32 - log2(len(slots))
}

// symRange is a symmetric insert stored as arithmetic: member k is the
// (off0+k)-th address of the node x service rectangle, nodes first.
type symRange struct {
	first   uint32   // index of member 0
	count   uint32   // members
	off0    uint64   // rectangle offset of member 0
	ip      [16]byte // first node of the rectangle
	port    uint16   // first service of the rectangle
	nodes   uint64   // nodecnt
	svcs    uint64   // svccnt
	authKey uint16   // auth key all members are bound to
	live    uint32   // members not removed
	// removed holds the member numbers removed so far; memory follows
	// removals only, and it is dropped once no member is live.
	removed map[uint32]struct{}
}

// rangeGen is the generation of every member of a range: a range always
// takes indices never used before. An index of a range reused later starts
// at rangeGen+1 so old handles stay dead.
const rangeGen = 1

func (r *symRange) member(k uint32) endpoint {
	off := r.off0 + uint64(k)
	ip, _ := ipAdd(r.ip, off/r.svcs)
	return endpoint{ip: ip, port: r.port + uint16(off%r.svcs)}
}

// memberOf returns the live member number of e.
func (r *symRange) memberOf(e *endpoint) (uint32, bool) {
	if r.live == 0 || e.port < r.port {
		return 0, false
	}
	node, ok := ipSub(e.ip, r.ip)
	svc := uint64(e.port - r.port)
	if !ok || node >= r.nodes || svc >= r.svcs {
		return 0, false
	}
	off := node*r.svcs + svc
	if off < r.off0 || off-r.off0 >= uint64(r.count) {
		return 0, false
	}
	k := uint32(off - r.off0)
	if _, gone := r.removed[k]; gone {
		return 0, false
	}
	return k, true
}

// table maps indices to addresses and back. One writer at a time changes
// it (the AV's mu held), bracketing every change with two increments of
// seq; readers either hold mu for reading or read lock-free (readDense,
// readFind): they load seq, read the entry words, the chunk directory
// and the hash slots atomically, and trust what they read only when seq
// was even and is unchanged afterwards (a seqlock). Everything else here
// (ranges, free indices, user IDs' allocation) is for the writer and for
// readers holding mu.
type table struct {
	seq     atomic.Uint64 // odd while the writer changes the table
	dir     atomic.Pointer[chunkDir]
	hix     atomic.Pointer[hashIndex]
	nchunks int       // chunks allocated
	slab    []chunk   // chunks allocated ahead, handed out by newChunk
	bigHint bool      // opened for slabAfter chunks or more: slabs from the start
	live    int       // addresses stored
	next    uint32    // lowest index never handed out
	free    indexHeap // freed indices, handed out again lowest first
	reuse   bool      // hand freed indices out again (not for shared MAP AVs)
	retire  bool      // FI_AV_MAP: an index whose generation is exhausted is never handed out again
	retired int       // indices retired so far
	// hash is the hash index (also published in hix): tag<<32 | index+1
	// of every dense entry; open addressing, linear probing; 0 = empty.
	hash   *hashIndex
	hashed int         // entries in hash
	seed   uint64      // hash seed
	ranges []*symRange // sorted by first
}

func newTable(countHint int, seed uint64, reuse bool) *table {
	t := &table{seed: seed, reuse: reuse}
	if countHint > 1<<20 {
		countHint = 1 << 20 // a hint, not a reason to allocate gigabytes up front
	}
	if countHint > 0 {
		t.bigHint = countHint >= slabAfter*chunkLen
		t.growHash(countHint)
		t.dir.Store(newChunkDir((countHint + chunkLen - 1) / chunkLen))
	}
	return t
}

// chunk returns chunk c, or nil when it does not exist.
func (t *table) chunk(c uint32) *chunk {
	d := t.dir.Load()
	if d == nil || int(c) >= len(d.c) {
		return nil
	}
	return d.c[c].Load()
}

// dense returns the dense entry slot of idx, or nil when its chunk does
// not exist.
func (t *table) dense(idx uint32) *entry {
	if c := t.chunk(idx >> chunkShift); c != nil {
		return &c.e[idx&chunkMask]
	}
	return nil
}

// lockWrite and unlockWrite bracket a change by the writer (the AV's mu
// held): readers that overlap it retry or take the lock.
func (t *table) lockWrite()   { t.seq.Add(1) }
func (t *table) unlockWrite() { t.seq.Add(1) }

// readDense reads the dense entry at idx without a lock: ok false when
// the read overlapped a change (the caller then takes the lock) or idx
// has no dense entry; meta 0 (gen 0) for an index never used densely.
func (t *table) readDense(idx uint32) (w0, w1, meta uint64, ok bool) {
	s := t.seq.Load()
	if s&1 != 0 {
		return 0, 0, 0, false
	}
	e := t.dense(idx)
	if e == nil {
		return 0, 0, 0, false
	}
	meta, w0, w1 = e.meta.Load(), e.ip0.Load(), e.ip1.Load()
	return w0, w1, meta, t.seq.Load() == s
}

// readFind is hashFind without a lock: the index and meta of the dense
// entry holding ep, with found false for a miss; ok false when the read
// overlapped a change (the caller then takes the lock).
func (t *table) readFind(ep *endpoint) (idx uint32, meta uint64, found, ok bool) {
	s := t.seq.Load()
	if s&1 != 0 {
		return 0, 0, false, false
	}
	hx := t.hix.Load()
	if hx == nil {
		return 0, 0, false, t.seq.Load() == s
	}
	h := t.hashOf(ep)
	tag := uint32(h >> 32)
	w0 := binary.LittleEndian.Uint64(ep.ip[:8])
	w1 := binary.LittleEndian.Uint64(ep.ip[8:])
	mask := len(hx.slots) - 1
	i := int(tag >> hx.shift)
	// Bounded: a table changing under the read may never show an empty
	// slot; seq says so then.
	for range len(hx.slots) {
		v := hx.slots[i].Load()
		if v == 0 {
			break
		}
		if slotTag(v) == tag {
			if e := t.dense(slotIdx(v)); e != nil {
				m := e.meta.Load()
				if e.ip0.Load() == w0 && e.ip1.Load() == w1 && metaPort(m) == ep.port {
					return slotIdx(v), m, true, t.seq.Load() == s
				}
			}
		}
		i = (i + 1) & mask
	}
	return 0, 0, false, t.seq.Load() == s
}

// get returns the address at idx with its generation and auth key.
func (t *table) get(idx uint32) (ep endpoint, gen, authKey uint16, ok bool) {
	if e := t.dense(idx); e != nil {
		if m := e.meta.Load(); metaGen(m) != 0 {
			if metaState(m)&entryUsed == 0 {
				return endpoint{}, 0, 0, false
			}
			return e.endpoint(), metaGen(m), metaKey(m), true
		}
	}
	if len(t.ranges) == 0 {
		return endpoint{}, 0, 0, false
	}
	if r, k, ok := t.rangeAt(idx); ok {
		return r.member(k), rangeGen, r.authKey, true
	}
	return endpoint{}, 0, 0, false
}

// spanOf returns the range whose index span holds idx, live or not.
func (t *table) spanOf(idx uint32) *symRange {
	i := sort.Search(len(t.ranges), func(i int) bool { return t.ranges[i].first > idx }) - 1
	if i < 0 {
		return nil
	}
	r := t.ranges[i]
	if idx-r.first >= r.count {
		return nil
	}
	return r
}

// rangeAt returns the live range member at idx (not superseded by a dense
// entry: callers check that first).
func (t *table) rangeAt(idx uint32) (*symRange, uint32, bool) {
	r := t.spanOf(idx)
	if r == nil || r.live == 0 {
		return nil, 0, false
	}
	k := idx - r.first
	if _, gone := r.removed[k]; gone {
		return nil, 0, false
	}
	return r, k, true
}

// find returns the index holding ep.
func (t *table) find(ep *endpoint) (uint32, bool) { return t.findH(ep, t.hashOf(ep)) }

// findH is find with ep's hash already computed.
func (t *table) findH(ep *endpoint, h uint64) (uint32, bool) {
	if _, idx, ok := t.hashFind(ep, h); ok {
		return idx, true
	}
	for _, r := range t.ranges {
		if k, ok := r.memberOf(ep); ok {
			return r.first + k, true
		}
	}
	return 0, false
}

// lookup is find that also returns the generation of the index.
func (t *table) lookup(ep *endpoint) (uint32, uint16, bool) {
	if _, idx, ok := t.hashFind(ep, t.hashOf(ep)); ok {
		return idx, t.dense(idx).gen(), true
	}
	for _, r := range t.ranges {
		if k, ok := r.memberOf(ep); ok {
			return r.first + k, rangeGen, true
		}
	}
	return 0, 0, false
}

// alloc hands out the lowest free index (TABLE order) or a new one.
func (t *table) alloc() (uint32, bool) {
	if t.reuse && len(t.free) > 0 {
		return t.free.pop(), true
	}
	if t.next > maxIndex {
		return 0, false
	}
	t.next++
	return t.next - 1, true
}

// put stores ep at idx (from alloc) as a dense entry.
func (t *table) put(idx uint32, ep endpoint, authKey uint16) *entry {
	return t.putH(idx, ep, authKey, t.hashOf(&ep))
}

// slot returns the dense entry slot of idx, allocating its chunk (and a
// larger chunk directory, published whole).
func (t *table) slot(idx uint32) *entry {
	c := int(idx >> chunkShift)
	d := t.dir.Load()
	if d == nil || c >= len(d.c) {
		n := 4
		if d != nil {
			n = 2 * len(d.c)
		}
		nd := newChunkDir(max(n, c+1))
		if d != nil {
			for i := range d.c {
				nd.c[i].Store(d.c[i].Load())
				nd.u[i].Store(d.u[i].Load())
			}
		}
		t.dir.Store(nd)
		d = nd
	}
	ch := d.c[c].Load()
	if ch == nil {
		ch = t.newChunk()
		d.c[c].Store(ch)
		t.nchunks++
	}
	return &ch.e[idx&chunkMask]
}

// Chunks of a large table come from slabs of slabChunks chunks (12 MiB),
// whose memory asks for transparent huge pages: the entries of 1M
// addresses then span a dozen TLB entries rather than 6000 pages, so a
// lookup of a recently used address (one of a hot set spread over the
// AV) does not pay a page walk for its entry. A table takes slabs once it
// holds slabAfter chunks (1.5 MiB of entries), or from the start when it
// was opened for that many addresses (its hash index is sized for the
// count at open too): a small AV keeps allocating 24 KiB chunks. A slab's
// unused tail is at most slabChunks-1 chunks, 12 MiB per AV.
const (
	slabAfter  = 64
	slabChunks = 512
)

// newChunk returns a zeroed chunk: a new one, or the next of the current
// slab.
func (t *table) newChunk() *chunk {
	if t.nchunks < slabAfter && !t.bigHint {
		return new(chunk)
	}
	if len(t.slab) == 0 {
		t.slab = make([]chunk, slabChunks)
		adviseHugeBytes(unsafe.Pointer(unsafe.SliceData(t.slab)), uintptr(len(t.slab))*unsafe.Sizeof(chunk{}))
	}
	ch := &t.slab[0]
	t.slab = t.slab[1:]
	return ch
}

// putH is put with ep's hash already computed.
func (t *table) putH(idx uint32, ep endpoint, authKey uint16, h uint64) *entry {
	e := t.slot(idx)
	gen := e.gen()
	if gen == 0 {
		gen = 1
		if t.spanOf(idx) != nil {
			gen = rangeGen + 1
		}
	}
	e.set(&ep, gen, entryUsed, authKey)
	t.hashInsert(idx, h)
	t.live++
	return e
}

// addRange stores r, whose indices [r.first, r.first+r.count) were never
// handed out, without touching per-index storage.
func (t *table) addRange(r *symRange) {
	r.live = r.count
	t.ranges = append(t.ranges, r) // r.first is past every existing range
	t.live += int(r.count)
}

// materialize turns the live range member at idx into a dense entry with
// the same handle, so per-address state (a user ID) can be attached.
func (t *table) materialize(idx uint32) *entry {
	if e := t.dense(idx); e != nil && e.gen() != 0 {
		return e
	}
	r, k, ok := t.rangeAt(idx)
	if !ok {
		return nil
	}
	ep := r.member(k)
	t.dropMember(r, k)
	t.live--
	e := t.put(idx, ep, r.authKey)
	e.setGen(rangeGen)
	return e
}

func (t *table) dropMember(r *symRange, k uint32) {
	if r.removed == nil {
		r.removed = map[uint32]struct{}{}
	}
	r.removed[k] = struct{}{}
	r.live--
	if r.live == 0 {
		r.removed = nil
	}
}

// remove frees idx and returns the address it held.
func (t *table) remove(idx uint32) (endpoint, bool) {
	if e := t.dense(idx); e != nil && e.gen() != 0 {
		if e.state()&entryUsed == 0 {
			return endpoint{}, false
		}
		ep := e.endpoint()
		t.hashDelete(ep)
		e.setMeta(e.gen(), 0, 0)
		if !t.nextGen(e) {
			t.live-- // retired: not released for reuse
			return ep, true
		}
		t.release(idx)
		return ep, true
	}
	if r, k, ok := t.rangeAt(idx); ok {
		ep := r.member(k)
		t.dropMember(r, k)
		t.release(idx)
		return ep, true
	}
	return endpoint{}, false
}

// hold takes the address at idx out of the table as remove does, but
// keeps the index, with its generation, out of use (entryHeld) until
// unhold: lookups no longer find it and alloc does not hand it out.
func (t *table) hold(idx uint32) (endpoint, bool) {
	if e := t.dense(idx); e != nil && e.gen() != 0 {
		if e.state()&entryUsed == 0 {
			return endpoint{}, false
		}
		ep := e.endpoint()
		t.hashDelete(ep)
		e.setMeta(e.gen(), entryHeld, 0)
		t.live--
		return ep, true
	}
	if r, k, ok := t.rangeAt(idx); ok {
		ep := r.member(k)
		t.dropMember(r, k)
		t.live--
		e := t.slot(idx) // supersedes the range member
		e.setMeta(rangeGen, entryHeld, 0)
		return ep, true
	}
	return endpoint{}, false
}

// heldGen returns the generation of the held index idx.
func (t *table) heldGen(idx uint32) (uint16, bool) {
	if e := t.dense(idx); e != nil {
		if m := e.meta.Load(); metaGen(m) != 0 && metaState(m)&entryHeld != 0 {
			return metaGen(m), true
		}
	}
	return 0, false
}

// unhold frees the held index idx (heldGen true), as remove frees a used
// one; it was counted out of live when held.
func (t *table) unhold(idx uint32) {
	e := t.dense(idx)
	e.setState(0)
	if t.nextGen(e) && t.reuse {
		t.free.push(idx)
	}
}

// nextGen moves the dense entry e, whose occupant just left, to its next
// generation and reports whether its index may be handed out again. On an
// AV that retires indices (FI_AV_MAP), an index whose occupant had maxGen
// is retired instead: it keeps that generation without an occupant, so
// every handle ever returned for it stays invalid, and alloc never hands
// it out again. Elsewhere (FI_AV_TABLE, whose handles carry no
// generation) the generation wraps to 1.
func (t *table) nextGen(e *entry) bool {
	gen := e.gen()
	if gen == maxGen && t.retire {
		t.retired++
		return false
	}
	if gen++; gen == 0 {
		gen = 1
	}
	e.setGen(gen)
	return true
}

func (t *table) release(idx uint32) {
	t.live--
	if t.reuse {
		t.free.push(idx)
	}
}

// setUserID sets the user ID of a dense entry; writer only.
func (t *table) setUserID(idx uint32, id fi.Addr) {
	u := &t.dir.Load().u[idx>>chunkShift]
	ids := u.Load()
	if ids == nil {
		ids = new([chunkLen]word)
		u.Store(ids)
	}
	ids[idx&chunkMask].Store(uint64(id))
}

// userID returns the user ID of a dense entry set with setUserID.
func (t *table) userID(idx uint32) fi.Addr {
	if ids := t.dir.Load().u[idx>>chunkShift].Load(); ids != nil {
		return fi.Addr(ids[idx&chunkMask].Load())
	}
	return fi.AddrNotAvail
}

// each calls fn for every stored address until fn returns false.
func (t *table) each(fn func(idx uint32, ep endpoint, gen, authKey uint16) bool) {
	if d := t.dir.Load(); d != nil {
		for ci := range d.c {
			c := d.c[ci].Load()
			if c == nil {
				continue
			}
			for i := range c.e {
				e := &c.e[i]
				if m := e.meta.Load(); metaState(m)&entryUsed != 0 {
					if !fn(uint32(ci<<chunkShift|i), e.endpoint(), metaGen(m), metaKey(m)) {
						return
					}
				}
			}
		}
	}
	for _, r := range t.ranges {
		for k := uint32(0); k < r.count && r.live > 0; k++ {
			if _, gone := r.removed[k]; gone {
				continue
			}
			idx := r.first + k
			if e := t.dense(idx); e != nil && e.gen() != 0 {
				continue // superseded, listed above
			}
			if !fn(idx, r.member(k), rangeGen, r.authKey) {
				return
			}
		}
	}
}

// Hash index over dense entries. A slot holds the top 32 bits of the
// address's hash (its tag) above index+1; 0 is an empty slot. The home slot
// is the tag's top bits, so probes compare tags without touching entries,
// and growing or deleting needs no entry either.

func (t *table) hashOf(ep *endpoint) uint64 {
	a := binary.LittleEndian.Uint64(ep.ip[:8])
	b := binary.LittleEndian.Uint64(ep.ip[8:])
	h := mix(a^t.seed^0xa0761d6478bd642f, b^0xe7037ed1a0b428db)
	return mix(h^uint64(ep.port), 0x8ebc6af09c88c6e3)
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func slotTag(v uint64) uint32 { return uint32(v >> 32) }
func slotIdx(v uint64) uint32 { return uint32(v) - 1 }

// home is the first slot probed for a tag.
func (t *table) home(tag uint32) int { return int(tag >> t.hash.shift) }

// homeAddr returns the address of the home slot of hash h (0 without a
// hash index), for a block of inserts to prefetch before it probes them
// one by one.
func (t *table) homeAddr(h uint64) uintptr {
	if t.hash == nil {
		return 0
	}
	return uintptr(unsafe.Pointer(&t.hash.slots[t.home(uint32(h>>32))]))
}

func (t *table) hashFind(ep *endpoint, h uint64) (slot int, idx uint32, ok bool) {
	if t.hashed == 0 {
		return 0, 0, false
	}
	tag := uint32(h >> 32)
	slots := t.hash.slots
	mask := len(slots) - 1
	w0 := binary.LittleEndian.Uint64(ep.ip[:8])
	w1 := binary.LittleEndian.Uint64(ep.ip[8:])
	for i := t.home(tag); ; i = (i + 1) & mask {
		v := slots[i].Load()
		if v == 0 {
			return 0, 0, false
		}
		if slotTag(v) == tag {
			e := t.dense(slotIdx(v))
			if e.ip0.Load() == w0 && e.ip1.Load() == w1 && metaPort(e.meta.Load()) == ep.port {
				return i, slotIdx(v), true
			}
		}
	}
}

func (t *table) hashInsert(idx uint32, h uint64) {
	if t.hash == nil || (t.hashed+1)*4 > len(t.hash.slots)*3 {
		t.growHash(t.hashed + 1)
	}
	t.hashPlace(h>>32<<32 | uint64(idx+1))
	t.hashed++
}

func (t *table) hashPlace(v uint64) {
	slots := t.hash.slots
	mask := len(slots) - 1
	i := t.home(slotTag(v))
	for slots[i].Load() != 0 {
		i = (i + 1) & mask
	}
	slots[i].Store(v)
}

// growHash resizes the index for at least n entries at load <= 3/4. The
// new slot array is filled before it is published, so lock-free readers
// see either the old index or the whole new one.
func (t *table) growHash(n int) {
	size, shift := 16, uint(28)
	old := t.hash
	for size*3 < n*4 || old != nil && size <= len(old.slots) {
		size *= 2
		shift--
	}
	t.hash = &hashIndex{slots: make([]word, size), shift: shift}
	adviseHuge(t.hash.slots)
	if old != nil {
		for i := range old.slots {
			if v := old.slots[i].Load(); v != 0 {
				t.hashPlace(v)
			}
		}
	}
	t.hix.Store(t.hash)
}

// hashDelete removes ep by backward-shift deletion, which keeps probe
// chains intact without tombstones.
func (t *table) hashDelete(ep endpoint) {
	i, _, ok := t.hashFind(&ep, t.hashOf(&ep))
	if !ok {
		return
	}
	slots := t.hash.slots
	mask := len(slots) - 1
	for j := (i + 1) & mask; slots[j].Load() != 0; j = (j + 1) & mask {
		vj := slots[j].Load()
		home := t.home(slotTag(vj))
		// Move the entry at j into the hole at i unless its home lies
		// cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			slots[i].Store(vj)
			i = j
		}
	}
	slots[i].Store(0)
	t.hashed--
}

// indexHeap is a min-heap of free indices.
type indexHeap []uint32

func (h *indexHeap) push(x uint32) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *indexHeap) pop() uint32 {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	*h = s[:n]
	h.down(0)
	return top
}

func (h indexHeap) down(i int) {
	for n := len(h); ; {
		l, m := 2*i+1, i
		if l < n && h[l] < h[m] {
			m = l
		}
		if l+1 < n && h[l+1] < h[m] {
			m = l + 1
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// remove deletes x from the heap (a shared AV learning that another
// process took a free index); O(n), off the hot path.
func (h *indexHeap) remove(x uint32) {
	s := *h
	for i, v := range s {
		if v == x {
			s[i] = s[len(s)-1]
			s = s[:len(s)-1]
			for j := len(s)/2 - 1; j >= 0; j-- {
				s.down(j)
			}
			*h = s
			return
		}
	}
}
