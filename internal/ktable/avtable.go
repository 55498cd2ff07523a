package ktable

import (
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

// An AVTable is an AV's peer table (bpf/xdpfab.h, "Peer tables"; av_find
// in bpf/xdpfab.c the reader): a kernel table made compact for the peers
// of one AV, which is its only writer. A slot is 32 bytes (port, address,
// fi_addr, auth key id, and the user-ID flag in seq's bit 31) instead of
// a Table's 64, and the bucket count need not be a power of two (a
// bucket is chosen by multiplying the hash's halves by nb), so an AV
// sized for n peers takes 48 bytes of kernel memory a peer
// (AVTableBuckets: at most 2/3 full) where a Table took 85-170. What a
// large insert costs on a VM that traps the first touch of each page is
// mostly those bytes (package av says why). A compact table
// (CreateAVTable4, avtable4.go) halves them again for IPv4 peers.
//
// The writer keeps a tag byte per slot in Go memory, as an owned Table
// does, so a write finds its slot from the tags, marks it odd with a
// plain store and costs one half cache line and no locked instruction.
// Placement is by two choices, the emptier bucket of the two (both tag
// words read): at 2/3 full a key finds both of its buckets full about
// never, and the writer gets ErrFull rather than a wrong table if one
// does (av then grows the table).
type AVTable struct {
	m        *ebpf.Map
	ownMap   bool
	mem      []byte
	compact  bool         // AVT4Magic: IPv4 peers in buckets4 (avtable4.go)
	buckets  []avtBucket  // buckets[0] is the header
	buckets4 []avt4Bucket // the same memory, for a compact table
	hdr      *avtHeader
	nb       uint64
	seed     uint64

	// tags: byte i of tags[b] is 0 while slot i of data bucket b+1 is
	// free, else its peer's tag (from its hash); a compact table has two
	// words a bucket (tags[2b], tags[2b+1]: slots 0..7, 8..15). nil when
	// read-only.
	tags  []uint64
	count uint64
}

// Layout constants of bpf/xdpfab.h, "Peer tables".
const (
	AVTWays       = 8                  // AVT_WAYS
	AVTSlotSize   = 32                 // sizeof(struct avt_slot)
	AVTBucketSize = AVTWays * 32       // sizeof(struct avt_bucket), the map's value size
	AVTMagic      = 0x78666176746c3031 // AVT_MAGIC

	avtUserIDSet = 1 << 31 // AVT_SEQ_USER_ID_SET
	avtSeqMask   = avtUserIDSet - 1
)

// avtSlot is struct avt_slot.
type avtSlot struct {
	seq     uint32
	port    uint16
	authKey uint16
	addr    [2]uint64
	fiAddr  uint64
}

type avtBucket [AVTWays]avtSlot

// avtHeader is struct avt_header, at the start of bucket 0.
type avtHeader struct {
	magic, seed, nb, count uint64
}

// Peer is what a peer table slot holds: the peer (Port, in network byte
// order, and Addr, struct av_key's 16 address bytes as two little-endian
// words) and its value. Port 0 is no peer.
type Peer struct {
	Port      uint16
	Addr      [2]uint64
	FiAddr    uint64
	AuthKeyID uint16
	UserIDSet bool
}

// AVTableBuckets returns how many data buckets a peer table needs for n
// peers at most 2/3 full (at least 2).
func AVTableBuckets(n int) int {
	return max(2, (n*3/2+AVTWays-1)/AVTWays)
}

// CreateAVTable makes a map of spec (an array of avt_bucket values) with
// nb data buckets (at least 2), maps it and writes its header; the caller
// is its only writer, and the AVTable owns the map.
func CreateAVTable(spec *ebpf.MapSpec, nb int, seed uint64) (*AVTable, error) {
	return createAVTable(spec, nb, seed, false)
}

func createAVTable(spec *ebpf.MapSpec, nb int, seed uint64, compact bool) (*AVTable, error) {
	if nb < 2 || uint64(nb) >= 1<<32-1 {
		return nil, fmt.Errorf("peer table: %d buckets: not in [2, 2^32-1)", nb)
	}
	spec = spec.Copy()
	spec.MaxEntries = uint32(1 + nb)
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("peer table: create map: %w", err)
	}
	t, err := mapAVTable(m, true)
	if err != nil {
		m.Close()
		return nil, err
	}
	t.ownMap = true
	t.seed = seed
	t.compact = compact
	atomic.StoreUint64(&t.hdr.seed, seed)
	atomic.StoreUint64(&t.hdr.nb, t.nb)
	magic := uint64(AVTMagic)
	if compact {
		magic = AVT4Magic
	}
	atomic.StoreUint64(&t.hdr.magic, magic) // last: readers check it
	t.tags = make([]uint64, t.nb*t.tagWords())
	return t, nil
}

// TakeAVTable maps the peer table m, which the AVTable then owns (Close
// closes m, also when TakeAVTable fails), empties it and makes the caller
// its only writer: for a table a closed AV left in av_map under an av_id
// the caller now holds.
func TakeAVTable(m *ebpf.Map) (*AVTable, error) {
	t, err := openAVTable(m, true)
	if err != nil {
		m.Close()
		return nil, err
	}
	t.ownMap = true
	t.tags = make([]uint64, t.nb*t.tagWords())
	t.Reset()
	return t, nil
}

// OpenAVTableReadOnly maps the peer table m for reading (Len, Each); m
// stays the caller's.
func OpenAVTableReadOnly(m *ebpf.Map) (*AVTable, error) { return openAVTable(m, false) }

// openAVTable maps m and checks its header.
func openAVTable(m *ebpf.Map, write bool) (*AVTable, error) {
	t, err := mapAVTable(m, write)
	if err != nil {
		return nil, err
	}
	magic := atomic.LoadUint64(&t.hdr.magic)
	if magic != AVTMagic && magic != AVT4Magic || atomic.LoadUint64(&t.hdr.nb) != t.nb {
		t.Close()
		return nil, fmt.Errorf("peer table: map %v has no valid header", m)
	}
	t.compact = magic == AVT4Magic
	t.seed = atomic.LoadUint64(&t.hdr.seed)
	return t, nil
}

func mapAVTable(m *ebpf.Map, write bool) (*AVTable, error) {
	if m == nil {
		return nil, errors.New("peer table: nil map")
	}
	n := uint64(m.MaxEntries())
	if m.ValueSize() != AVTBucketSize || m.KeySize() != 4 || n < 3 {
		return nil, fmt.Errorf("peer table: map %v (key %d, value %d, %d entries) is not a peer table",
			m, m.KeySize(), m.ValueSize(), n)
	}
	mem, err := mmapBuckets(m, AVTBucketSize, write)
	if err != nil {
		return nil, fmt.Errorf("peer table: %w", err)
	}
	t := &AVTable{m: m, mem: mem, nb: n - 1}
	t.buckets = unsafe.Slice((*avtBucket)(unsafe.Pointer(&mem[0])), n)
	t.buckets4 = unsafe.Slice((*avt4Bucket)(unsafe.Pointer(&mem[0])), n)
	t.hdr = (*avtHeader)(unsafe.Pointer(&mem[0]))
	return t, nil
}

// Map returns the map behind the table.
func (t *AVTable) Map() *ebpf.Map { return t.m }

// Buckets returns the number of data buckets.
func (t *AVTable) Buckets() int { return int(t.nb) }

// Slots returns how many peers the table can hold at most.
func (t *AVTable) Slots() int { return int(t.nb) * t.ways() }

// Compact reports whether the table is a compact one (AVT4Magic: IPv4
// peers in 16-byte slots; Fits4 says which peers it takes).
func (t *AVTable) Compact() bool { return t.compact }

// ways is the slots a bucket.
func (t *AVTable) ways() int {
	if t.compact {
		return AVT4Ways
	}
	return AVTWays
}

// tagWords is the tag words a bucket.
func (t *AVTable) tagWords() uint64 { return uint64(t.ways() / 8) }

// Len returns the peers in the table, as its header counts them.
func (t *AVTable) Len() int { return int(atomic.LoadUint64(&t.hdr.count)) }

// Close unmaps the table, and closes its map if the AVTable owns it.
// Nothing of the table may be used afterwards.
func (t *AVTable) Close() error {
	var err error
	if t.mem != nil {
		t.buckets, t.buckets4, t.hdr = nil, nil, nil
		err = unix.Munmap(t.mem)
		t.mem = nil
	}
	if t.ownMap {
		err = errors.Join(err, t.m.Close())
	}
	return err
}

// peerHash is kt_hash of the peer's key words as av_find builds them.
func (t *AVTable) peerHash(port uint16, addr *[2]uint64) uint64 {
	k := Key{uint64(port), addr[0], addr[1]}
	return Hash(t.seed, &k)
}

// homesOf returns the two data buckets (1..nb) of hash h.
func (t *AVTable) homesOf(h uint64) (uint64, uint64) {
	b1 := 1 + (h&0xffffffff)*t.nb>>32 // nb < 2^32: no overflow
	b2 := 1 + (h>>32)*t.nb>>32
	if b2 == b1 {
		b2 = b1%t.nb + 1
	}
	return b1, b2
}

// avtTagOf is the tag of a peer whose hash is h: its low byte, which
// neither bucket choice uses while nb < 2^24 (they take the high bits of
// each half), never 0.
func avtTagOf(h uint64) uint8 {
	if g := uint8(h); g != 0 {
		return g
	}
	return 1
}

// find returns the slot holding the peer (port, addr), or nil.
func (t *AVTable) find(port uint16, addr *[2]uint64, h uint64) *avtSlot {
	b1, b2 := t.homesOf(h)
	g := avtTagOf(h)
	for _, bi := range [2]uint64{b1, b2} {
		for m := tagMatches(t.tags[bi-1], g); m != 0; m &= m - 1 {
			s := &t.buckets[bi][bits.TrailingZeros64(m)/8]
			if s.port == port && s.addr == *addr {
				return s
			}
		}
	}
	return nil
}

// nextSeq is the even seq after the writer's seq (its counter bits) and
// the user-ID flag.
func nextSeq(seq uint32, userIDSet bool) uint32 {
	n := (seq&avtSeqMask&^1 + 2) & avtSeqMask
	if userIDSet {
		n |= avtUserIDSet
	}
	return n
}

// write stores p in the slot s, which the caller (the only writer) marks
// busy: an odd seq with a plain store, the words with plain stores, then
// the next even seq, ordered after them (memorder.StoreRelease32; the
// same argument as Table's fill).
func write(s *avtSlot, p *Peer) {
	seq := s.seq & avtSeqMask
	memorder.StoreRelease32(&s.seq, seq|1)
	s.port, s.authKey = p.Port, p.AuthKeyID
	s.addr[0], s.addr[1] = p.Addr[0], p.Addr[1]
	s.fiAddr = p.FiAddr
	memorder.StoreRelease32(&s.seq, nextSeq(seq, p.UserIDSet))
}

// clearSlot frees s: busy, port 0 and the rest zero, then even again.
func clearSlot(s *avtSlot) {
	seq := s.seq & avtSeqMask
	memorder.StoreRelease32(&s.seq, seq|1)
	s.port, s.authKey = 0, 0
	s.addr[0], s.addr[1] = 0, 0
	s.fiAddr = 0
	memorder.StoreRelease32(&s.seq, nextSeq(seq, false))
}

// place enters p, known not to be in the table, with hash h, in a free
// slot of the emptier of its two buckets; ErrFull if both are full.
func (t *AVTable) place(p *Peer, h uint64) error {
	b1, b2 := t.homesOf(h)
	f1, f2 := freeSlots(t.tags[b1-1]), freeSlots(t.tags[b2-1])
	bi, f := b1, f1
	if bits.OnesCount64(f2) > bits.OnesCount64(f1) {
		bi, f = b2, f2
	}
	if f == 0 {
		return ErrFull
	}
	i := bits.TrailingZeros64(f) / 8
	write(&t.buckets[bi][i], p)
	t.tags[bi-1] |= uint64(avtTagOf(h)) << (8 * i)
	t.count++
	return nil
}

// publishCount stores the writer's count in the header (informational:
// Len of other readers, `xdpfab status`).
func (t *AVTable) publishCount() { memorder.StoreRelease64(&t.hdr.count, t.count) }

// Insert enters p, which the caller knows is not in the table; ErrFull
// if both of its buckets are full.
func (t *AVTable) Insert(p *Peer) error {
	if t.compact {
		if !Fits4(p) {
			return ErrWide
		}
		err := t.place4(p, t.peerHash(p.Port, &p.Addr))
		t.publishCount()
		return err
	}
	err := t.place(p, t.peerHash(p.Port, &p.Addr))
	t.publishCount()
	return err
}

// Put sets p's value, in place if the peer is in the table, else as
// Insert.
func (t *AVTable) Put(p *Peer) error {
	if t.compact {
		return t.put4(p)
	}
	h := t.peerHash(p.Port, &p.Addr)
	if s := t.find(p.Port, &p.Addr, h); s != nil {
		write(s, p)
		return nil
	}
	err := t.place(p, h)
	t.publishCount()
	return err
}

// avtGroup is how many peers InsertMany moves through each step.
const avtGroup = 32

// avtStage is a group of peers in InsertMany's pipeline: ps[lo:lo+n],
// their hashes and the slots chosen for them (bucket*AVTWays + way).
type avtStage struct {
	lo, n int
	hs    [avtGroup]uint64
	at    [avtGroup]uint32
}

// InsertMany is Insert of each of ps in order (peers known not to be in
// the table, and not twice among ps); it returns how many it entered
// before an error (ErrFull). Groups of peers go through a pipeline, one
// step apart, so that each group's cache misses were asked for a step
// before they are needed: while a group's slots are chosen from its tag
// words (prefetched a step earlier), the next group's tag words are
// prefetched and the previous group's slots (prefetched a step earlier)
// written. In a table of tens of MiB every peer's tags and slot are a
// cache and TLB miss each.
func (t *AVTable) InsertMany(ps []Peer) (int, error) {
	defer t.publishCount()
	if t.compact {
		return t.insertMany4(ps)
	}
	var st [3]avtStage
	var pf [2 * avtGroup]uintptr
	ngroups := (len(ps) + avtGroup - 1) / avtGroup
	for g := -1; g <= ngroups; g++ {
		if next := g + 1; next < ngroups { // hash, prefetch both buckets' tags
			s := &st[next%3]
			s.lo = next * avtGroup
			s.n = min(avtGroup, len(ps)-s.lo)
			for i := range s.n {
				p := &ps[s.lo+i]
				h := t.peerHash(p.Port, &p.Addr)
				s.hs[i] = h
				b1, b2 := t.homesOf(h)
				pf[2*i] = uintptr(unsafe.Pointer(&t.tags[b1-1]))
				pf[2*i+1] = uintptr(unsafe.Pointer(&t.tags[b2-1]))
			}
			prefetch.Addrs(&pf[0], 2*s.n)
		}
		var err error
		if g >= 0 && g < ngroups { // choose and claim the slots, prefetch them
			s := &st[g%3]
			for i := range s.n {
				b1, b2 := t.homesOf(s.hs[i])
				f1, f2 := freeSlots(t.tags[b1-1]), freeSlots(t.tags[b2-1])
				bi, f := b1, f1
				if bits.OnesCount64(f2) > bits.OnesCount64(f1) {
					bi, f = b2, f2
				}
				if f == 0 {
					s.n, err = i, ErrFull
					break
				}
				w := bits.TrailingZeros64(f) / 8
				// Claimed in the tags now, so that peers of the group
				// sharing a bucket take different slots.
				t.tags[bi-1] |= uint64(avtTagOf(s.hs[i])) << (8 * w)
				s.at[i] = uint32(bi*AVTWays) + uint32(w)
				pf[i] = uintptr(unsafe.Pointer(&t.buckets[bi][w]))
			}
			prefetch.Addrs(&pf[0], s.n)
		}
		if prev := g - 1; prev >= 0 {
			t.writeChosen(&st[prev%3], ps)
		}
		if err != nil { // the peers before the full one are claimed: write them
			s := &st[g%3]
			t.writeChosen(s, ps)
			return s.lo + s.n, err
		}
	}
	return len(ps), nil
}

// writeChosen writes the peers of s into the slots chosen for them.
func (t *AVTable) writeChosen(s *avtStage, ps []Peer) {
	for i := range s.n {
		write(&t.buckets[s.at[i]/AVTWays][s.at[i]%AVTWays], &ps[s.lo+i])
	}
	t.count += uint64(s.n)
}

// Delete removes the peer (port, addr); it reports whether it was there.
func (t *AVTable) Delete(port uint16, addr [2]uint64) bool {
	if t.compact {
		return t.delete4(port, &addr)
	}
	h := t.peerHash(port, &addr)
	s := t.find(port, &addr, h)
	if s == nil {
		return false
	}
	clearSlot(s)
	r := t.refOf(s)
	t.tags[r/AVTWays-1] &^= 0xff << (8 * (r % AVTWays))
	t.count--
	t.publishCount()
	return true
}

// refOf returns bucket*AVTWays + way of slot s.
func (t *AVTable) refOf(s *avtSlot) uint64 {
	return uint64(uintptr(unsafe.Pointer(s))-uintptr(unsafe.Pointer(&t.buckets[0][0]))) / AVTSlotSize
}

// readPeer reads slot s under the seqlock; ok false when it holds no peer
// or stayed busy.
func readPeer(s *avtSlot) (p Peer, ok bool) {
	for range 64 {
		seq := atomic.LoadUint32(&s.seq)
		if seq&1 != 0 {
			continue
		}
		w0 := atomic.LoadUint64((*uint64)(unsafe.Pointer(s))) // seq, port, auth key
		p.Addr[0] = atomic.LoadUint64(&s.addr[0])
		p.Addr[1] = atomic.LoadUint64(&s.addr[1])
		p.FiAddr = atomic.LoadUint64(&s.fiAddr)
		if atomic.LoadUint32(&s.seq) != seq || uint32(w0) != seq {
			continue
		}
		p.Port, p.AuthKeyID = uint16(w0>>32), uint16(w0>>48)
		p.UserIDSet = seq&avtUserIDSet != 0
		return p, p.Port != 0
	}
	return Peer{}, false
}

// Get returns the peer (port, addr)'s entry, read as av_find reads it.
func (t *AVTable) Get(port uint16, addr [2]uint64) (Peer, bool) {
	if t.compact {
		return t.get4(port, &addr)
	}
	b1, b2 := t.homesOf(t.peerHash(port, &addr))
	for _, bi := range [2]uint64{b1, b2} {
		for i := range t.buckets[bi] {
			s := &t.buckets[bi][i]
			if atomic.LoadUint64(&s.addr[0]) != addr[0] || atomic.LoadUint64(&s.addr[1]) != addr[1] {
				continue
			}
			if p, ok := readPeer(s); ok && p.Port == port && p.Addr == addr {
				return p, true
			}
		}
	}
	return Peer{}, false
}

// Each calls fn with every peer in the table, each read consistently,
// until fn returns false. Peers written during the walk may be seen or
// not.
func (t *AVTable) Each(fn func(p *Peer) bool) {
	if t.compact {
		t.each4(fn)
		return
	}
	for bi := 1; bi < len(t.buckets); bi++ {
		b := &t.buckets[bi]
		for i := range b {
			if atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[i])))>>32&0xffff == 0 {
				continue // port 0: free
			}
			if p, ok := readPeer(&b[i]); ok && !fn(&p) {
				return
			}
		}
	}
}

// Reset empties the table (its writer only, once no reader can still be
// looking up the peers it held).
func (t *AVTable) Reset() {
	if t.compact {
		t.reset4()
	} else {
		for bi := 1; bi < len(t.buckets); bi++ {
			b := &t.buckets[bi]
			for i := range b {
				if s := &b[i]; s.port != 0 || s.seq&1 != 0 {
					clearSlot(s)
				}
			}
		}
	}
	t.count = 0
	t.publishCount()
	clear(t.tags)
}
