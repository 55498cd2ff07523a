package ktable

import (
	"errors"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/xdpfab/xdpfab/internal/memorder"
	"github.com/xdpfab/xdpfab/internal/prefetch"
)

// Compact peer tables (bpf/xdpfab.h, "Compact peer tables"; av_find4 in
// bpf/xdpfab.c the reader): an AVTable whose header says AVT4Magic holds
// IPv4 peers with fi_addrs below 2^48 only, in 16-byte slots, 16 to the
// same 256-byte bucket, placed as a table of 32-byte slots places them
// (same hash, same two buckets, the emptier one). Half the bytes a peer
// and twice the ways a bucket, so that a table can be sized 3/4 full
// (AVTable4Buckets: 21 bytes of kernel memory a peer, against 48): a
// large insert's time on a VM that traps each page's first touch is
// mostly those bytes. A peer that does not fit (Fits4) gets ErrWide from
// the table; its writer (package av) then rebuilds it as a table of
// 32-byte slots.
//
// The writer's tags are two words a bucket (slots 0..7 and 8..15), and
// the seqlock is 16 bits: a 15-bit counter (bits 0..14) and the user-ID
// flag (bit 15). A reader could take a rewritten slot for the one it
// first read only if the writer rewrote that one slot 16384 times while
// the reader was between its two reads of seq.

// Layout constants of bpf/xdpfab.h, "Compact peer tables".
const (
	AVT4Ways     = 16                 // AVT4_WAYS
	AVT4SlotSize = 16                 // sizeof(struct avt4_slot)
	AVT4Magic    = 0x78666176746c3034 // AVT4_MAGIC

	avt4UserIDSet = 1 << 15 // AVT4_SEQ_USER_ID_SET
	avt4SeqMask   = avt4UserIDSet - 1

	// avt4FiAddrLimit bounds the fi_addrs a compact slot holds (48 bits:
	// a TABLE index, or a MAP handle's 16-bit generation and index).
	avt4FiAddrLimit = 1 << 48
	// mapped4 is the low word of an IPv4-mapped address's second word
	// (bytes 8..11: 00 00 ff ff).
	mapped4 = 0xffff0000
)

// ErrWide is the error of a compact table given a peer it cannot hold
// (Fits4 false): its writer rebuilds it as a table of 32-byte slots.
var ErrWide = errors.New("peer table: the compact table cannot hold the peer")

// avt4Slot is struct avt4_slot.
type avt4Slot struct {
	seq, port, authKey, fiHi uint16
	addr4, fiLo              uint32
}

type avt4Bucket [AVT4Ways]avt4Slot

// Fits4 reports whether a compact table can hold p: an IPv4(-mapped)
// peer whose fi_addr is below 2^48.
func Fits4(p *Peer) bool {
	return p.Addr[0] == 0 && uint32(p.Addr[1]) == mapped4 && p.FiAddr < avt4FiAddrLimit
}

// AVTable4Buckets returns how many data buckets a compact table needs
// for n peers at most 3/4 full (at least 2). Two-choice placement in
// 16-slot buckets found both of a key's buckets full in none of five
// simulated tables of 1,000,000 peers filled to 4/5; in 8-slot buckets
// it did in one of five at 2/3 (av's growAt).
func AVTable4Buckets(n int) int {
	return max(2, (n*4/3+AVT4Ways-1)/AVT4Ways)
}

// CreateAVTable4 is CreateAVTable for a compact table.
func CreateAVTable4(spec *ebpf.MapSpec, nb int, seed uint64) (*AVTable, error) {
	return createAVTable(spec, nb, seed, true)
}

// tags4 returns the two tag words of data bucket b (1..nb).
func (t *AVTable) tags4(b uint64) *[2]uint64 {
	return (*[2]uint64)(t.tags[2*(b-1) : 2*b])
}

// free4 returns the free-slot masks of bucket b's tag words and how many
// slots are free.
func (t *AVTable) free4(b uint64) (f [2]uint64, n int) {
	tg := t.tags4(b)
	f[0], f[1] = freeSlots(tg[0]), freeSlots(tg[1])
	return f, bits.OnesCount64(f[0]) + bits.OnesCount64(f[1])
}

// choose4 returns the bucket and way a new peer of hash h takes: a free
// slot of the emptier of its two buckets (the first when they are equally
// full); ok false if both are full. Which bucket is emptier is a coin
// toss for random peers, so it is chosen with conditional moves, not a
// branch the CPU would mispredict half the time, and the way as the first
// free byte of the bucket's two tag words read as one: TrailingZeros64 of
// an empty word is 64, so way 8+ comes out of the same sum.
func (t *AVTable) choose4(h uint64) (bi uint64, way int, ok bool) {
	b1, b2 := t.homesOf(h)
	t1, t2 := t.tags4(b1), t.tags4(b2)
	f10, f11 := freeSlots(t1[0]), freeSlots(t1[1])
	f20, f21 := freeSlots(t2[0]), freeSlots(t2[1])
	n1 := bits.OnesCount64(f10) + bits.OnesCount64(f11)
	n2 := bits.OnesCount64(f20) + bits.OnesCount64(f21)
	bi, f0, f1 := b1, f10, f11
	if n2 > n1 {
		bi, f0, f1 = b2, f20, f21
	}
	z0 := bits.TrailingZeros64(f0)
	way = z0>>3 + (bits.TrailingZeros64(f1)>>3)&-(z0>>6)
	return bi, way, way < AVT4Ways
}

// setTag4 sets (g != 0) or clears (g == 0) the tag of slot way of bucket bi.
func (t *AVTable) setTag4(bi uint64, way int, g uint8) {
	w := &t.tags4(bi)[way/8]
	sh := 8 * uint(way%8)
	*w = *w&^(0xff<<sh) | uint64(g)<<sh
}

// find4 returns the slot holding the IPv4 peer (port, addr), or nil.
func (t *AVTable) find4(port uint16, addr *[2]uint64, h uint64) *avt4Slot {
	if addr[0] != 0 || uint32(addr[1]) != mapped4 {
		return nil
	}
	a4 := uint32(addr[1] >> 32)
	b1, b2 := t.homesOf(h)
	g := avtTagOf(h)
	for _, bi := range [2]uint64{b1, b2} {
		for w, tw := range t.tags4(bi) {
			for m := tagMatches(tw, g); m != 0; m &= m - 1 {
				s := &t.buckets4[bi][8*w+bits.TrailingZeros64(m)/8]
				if s.port == port && s.addr4 == a4 {
					return s
				}
			}
		}
	}
	return nil
}

// nextSeq4 is nextSeq for a compact slot's 16-bit seq.
func nextSeq4(seq uint16, userIDSet bool) uint16 {
	n := (seq&avt4SeqMask&^1 + 2) & avt4SeqMask
	if userIDSet {
		n |= avt4UserIDSet
	}
	return n
}

// seqPort is the 32-bit word of slot s holding seq (low half) and port,
// which the writer stores whole: Go has no 16-bit atomic store.
func seqPort(s *avt4Slot) *uint32 { return (*uint32)(unsafe.Pointer(s)) }

// write4 stores p (Fits4) in the compact slot s: as write, seq odd (the
// port unchanged), the other words, then seq even with the new port, in
// one store, both seq stores ordered around the plain ones. A reader that
// read the old port saw the old seq, which the odd one replaced.
func write4(s *avt4Slot, p *Peer) {
	seq := s.seq & avt4SeqMask
	storeSlot4(s, uint32(s.port)<<16|uint32(seq|1),
		uint32(p.AuthKeyID)|uint32(uint16(p.FiAddr>>32))<<16,
		p.Addr[1]>>32|uint64(uint32(p.FiAddr))<<32,
		uint32(p.Port)<<16|uint32(nextSeq4(seq, p.UserIDSet)))
}

// clearSlot4 frees the compact slot s: port 0 and the rest zero.
func clearSlot4(s *avt4Slot) {
	seq := s.seq & avt4SeqMask
	memorder.StoreRelease32(seqPort(s), uint32(s.port)<<16|uint32(seq|1))
	s.authKey, s.fiHi = 0, 0
	s.addr4, s.fiLo = 0, 0
	memorder.StoreRelease32(seqPort(s), uint32(nextSeq4(seq, false)))
}

// place4 is place for a compact table (p fits).
func (t *AVTable) place4(p *Peer, h uint64) error {
	bi, way, ok := t.choose4(h)
	if !ok {
		return ErrFull
	}
	write4(&t.buckets4[bi][way], p)
	t.setTag4(bi, way, avtTagOf(h))
	t.count++
	return nil
}

// put4 is Put for a compact table.
func (t *AVTable) put4(p *Peer) error {
	if !Fits4(p) {
		return ErrWide
	}
	h := t.peerHash(p.Port, &p.Addr)
	if s := t.find4(p.Port, &p.Addr, h); s != nil {
		write4(s, p)
		return nil
	}
	err := t.place4(p, h)
	t.publishCount()
	return err
}

// insertMany4 is InsertMany for a compact table: the same pipeline, two
// tag words a bucket. A peer that does not fit stops it with ErrWide.
func (t *AVTable) insertMany4(ps []Peer) (int, error) {
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
				pf[2*i] = uintptr(unsafe.Pointer(t.tags4(b1)))
				pf[2*i+1] = uintptr(unsafe.Pointer(t.tags4(b2)))
			}
			prefetch.Addrs(&pf[0], 2*s.n)
		}
		var err error
		if g >= 0 && g < ngroups { // choose and claim the slots, prefetch them
			s := &st[g%3]
			for i := range s.n {
				if !Fits4(&ps[s.lo+i]) {
					s.n, err = i, ErrWide
					break
				}
				bi, way, ok := t.choose4(s.hs[i])
				if !ok {
					s.n, err = i, ErrFull
					break
				}
				t.setTag4(bi, way, avtTagOf(s.hs[i]))
				s.at[i] = uint32(bi*AVT4Ways) + uint32(way)
				pf[i] = uintptr(unsafe.Pointer(&t.buckets4[bi][way]))
			}
			prefetch.Addrs(&pf[0], s.n)
		}
		if prev := g - 1; prev >= 0 {
			t.writeChosen4(&st[prev%3], ps)
		}
		if err != nil {
			s := &st[g%3]
			t.writeChosen4(s, ps)
			return s.lo + s.n, err
		}
	}
	return len(ps), nil
}

// writeChosen4 is writeChosen for a compact table.
func (t *AVTable) writeChosen4(s *avtStage, ps []Peer) {
	for i := range s.n {
		write4(&t.buckets4[s.at[i]/AVT4Ways][s.at[i]%AVT4Ways], &ps[s.lo+i])
	}
	t.count += uint64(s.n)
}

// delete4 is Delete for a compact table.
func (t *AVTable) delete4(port uint16, addr *[2]uint64) bool {
	s := t.find4(port, addr, t.peerHash(port, addr))
	if s == nil {
		return false
	}
	clearSlot4(s)
	r := uint64(uintptr(unsafe.Pointer(s))-uintptr(unsafe.Pointer(&t.buckets4[0][0]))) / AVT4SlotSize
	t.setTag4(r/AVT4Ways, int(r%AVT4Ways), 0)
	t.count--
	t.publishCount()
	return true
}

// readPeer4 is readPeer for a compact slot.
func readPeer4(s *avt4Slot) (p Peer, ok bool) {
	for range 64 {
		seq := atomic.LoadUint32((*uint32)(unsafe.Pointer(s))) // seq, port
		if seq&1 != 0 {
			continue
		}
		w0 := atomic.LoadUint64((*uint64)(unsafe.Pointer(s)))
		w1 := atomic.LoadUint64((*uint64)(unsafe.Add(unsafe.Pointer(s), 8)))
		if uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(s)))) != uint16(seq) || uint16(w0) != uint16(seq) {
			continue
		}
		p.Port, p.AuthKeyID = uint16(w0>>16), uint16(w0>>32)
		p.FiAddr = w0>>48<<32 | w1>>32
		p.Addr = [2]uint64{0, uint64(uint32(w1))<<32 | mapped4}
		p.UserIDSet = seq&avt4UserIDSet != 0
		return p, p.Port != 0
	}
	return Peer{}, false
}

// get4 is Get for a compact table.
func (t *AVTable) get4(port uint16, addr *[2]uint64) (Peer, bool) {
	if addr[0] != 0 || uint32(addr[1]) != mapped4 {
		return Peer{}, false
	}
	b1, b2 := t.homesOf(t.peerHash(port, addr))
	for _, bi := range [2]uint64{b1, b2} {
		for i := range t.buckets4[bi] {
			s := &t.buckets4[bi][i]
			if atomic.LoadUint32(&s.addr4) != uint32(addr[1]>>32) {
				continue
			}
			if p, ok := readPeer4(s); ok && p.Port == port && p.Addr == *addr {
				return p, true
			}
		}
	}
	return Peer{}, false
}

// each4 is Each for a compact table.
func (t *AVTable) each4(fn func(p *Peer) bool) {
	for bi := 1; bi < len(t.buckets4); bi++ {
		b := &t.buckets4[bi]
		for i := range b {
			if atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[i])))>>16 == 0 {
				continue // port 0: free
			}
			if p, ok := readPeer4(&b[i]); ok && !fn(&p) {
				return
			}
		}
	}
}

// reset4 clears every slot of a compact table in use.
func (t *AVTable) reset4() {
	for bi := 1; bi < len(t.buckets4); bi++ {
		b := &t.buckets4[bi]
		for i := range b {
			if s := &b[i]; s.port != 0 || s.seq&1 != 0 {
				clearSlot4(s)
			}
		}
	}
}
