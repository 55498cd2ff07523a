package reliable

import (
	"crypto/rand"
	"encoding/binary"
)

// rxPeerTable maps a Peer to its target state: open addressing with
// linear probing over 16-byte slots (the key's hash and the state), at
// most half full. A request's lookup reads one slot's cache line, then the
// state it needs anyway, where a Go map keyed by Peer (a netip.AddrPort
// and an endpoint id, 32 bytes) reads a control word, a slot of 40 bytes
// and runs the generic hash and equality: with 10,000 peers none of it is
// in cache, and the map was 7 % of a target's samples (bench peers).
// The hash is seeded per table, so sources cannot pick addresses that
// collide. Receive side only.
type rxPeerTable struct {
	slots []rxPeerSlot // len a power of two
	n     int
	seed  uint64
}

type rxPeerSlot struct {
	hash uint64
	rp   *rxPeer // nil: empty
}

func newRxPeerTable() rxPeerTable {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return rxPeerTable{slots: make([]rxPeerSlot, 16), seed: binary.LittleEndian.Uint64(b[:]) | 1}
}

// hash mixes the address, port and endpoint id (the zone of an IPv6
// address only in equality): a multiply-xorshift finalizer over the
// seeded words.
func (t *rxPeerTable) hash(p Peer) uint64 {
	a := p.Addr.Addr().As16()
	hi := binary.LittleEndian.Uint64(a[:8])
	lo := binary.LittleEndian.Uint64(a[8:])
	x := t.seed ^ uint64(p.Addr.Port())<<32 ^ uint64(p.EP)
	x = mix64(x ^ hi)
	return mix64(x ^ lo)
}

func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

func (t *rxPeerTable) len() int { return t.n }

// get returns p's state, or nil.
func (t *rxPeerTable) get(p Peer) *rxPeer {
	h := t.hash(p)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.rp == nil {
			return nil
		}
		if s.hash == h && s.rp.peer == p {
			return s.rp
		}
	}
}

// put adds rp under rp.peer, which must not be there. It allocates only
// when the table grows (a new peer, never a request of a known one).
func (t *rxPeerTable) put(rp *rxPeer) {
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		t.slots = make([]rxPeerSlot, 2*len(old))
		for _, s := range old {
			if s.rp != nil {
				t.place(s)
			}
		}
	}
	t.place(rxPeerSlot{hash: t.hash(rp.peer), rp: rp})
	t.n++
}

func (t *rxPeerTable) place(s rxPeerSlot) {
	mask := uint64(len(t.slots) - 1)
	i := s.hash & mask
	for t.slots[i].rp != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

// remove drops rp, if it is there, closing the gap by moving later
// entries of its probe run back (no tombstones: lookups stay as short as
// the table's fill).
func (t *rxPeerTable) remove(rp *rxPeer) {
	h := t.hash(rp.peer)
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].rp != rp {
		if t.slots[i].rp == nil {
			return
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.slots[j].rp != nil; j = (j + 1) & mask {
		// The entry at j may move to the gap at i unless its home
		// position lies cyclically in (i, j].
		if home := t.slots[j].hash & mask; (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = rxPeerSlot{}
	t.n--
}

// each calls f for every state (f must not change the table).
func (t *rxPeerTable) each(f func(*rxPeer)) {
	for _, s := range t.slots {
		if s.rp != nil {
			f(s.rp)
		}
	}
}
