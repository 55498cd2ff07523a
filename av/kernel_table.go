package av

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/ktable"
)

// TableMirror is the Mirror of an unnamed AV: the AV's own peer table
// (bpf/xdpfab.h, "Peer tables"; ktable.AVTable), an mmapped
// BPF_F_MMAPABLE array map that av_map holds under the AV's av_id, written
// with plain stores under the table's seqlock protocol. An insert or
// remove costs memory writes; the table grows (a new map twice the size,
// filled, then swapped into av_map with one syscall) when an insert would
// fill it past growAt or a key's two buckets are full. Close (Drop)
// deletes the av_map entry: the kernel frees the table once no program
// run still reads it.
//
// An AV starts with a compact table (ktable.CreateAVTable4: IPv4 peers,
// 16-byte slots), sized for n entries with 4n/3 slots
// (ktable.AVTable4Buckets) and grown at 4/5 full to twice that: 21-40
// bytes of kernel memory an address. The first peer it cannot hold (an
// IPv6 address, an fi_addr past 48 bits) makes the AV rebuild it with
// 32-byte slots (one grow), which a table sized for n entries has 3n/2
// of (ktable.AVTableBuckets), growing at 7/10 full to twice that: 46-96
// bytes an address. A new AV takes 768 bytes (3 buckets of 256).
type TableMirror struct {
	outer *ebpf.Map
	id    uint32
	spec  *ebpf.MapSpec // of the inner tables, shared: never changed

	mu sync.Mutex // serializes writers: a table has one writer at a time
	t  *ktable.AVTable
}

// growAt is the fill (numerator, denominator) past which an insert grows
// the table first. Two-choice placement rarely finds both of a key's
// buckets full below it, and a key that does makes the table double: in
// a simulation with 1M random keys, 16-slot buckets (a compact table)
// never did at 4/5 full (a compact table is sized 3/4 full), 8-slot
// buckets (32-byte slots) did in one table of five at 2/3 full.
const (
	growAtNum, growAtDen   = 7, 10
	growAt4Num, growAt4Den = 4, 5
)

// tooFull reports whether t holding n entries is past its growAt.
func tooFull(t *ktable.AVTable, n int) bool {
	if t.Compact() {
		return n*growAt4Den > t.Slots()*growAt4Num
	}
	return n*growAtDen > t.Slots()*growAtNum
}

// tableBuckets returns the data buckets of a table sized for n entries,
// compact or of 32-byte slots.
func tableBuckets(n int, compact bool) int {
	if compact {
		return ktable.AVTable4Buckets(n)
	}
	return ktable.AVTableBuckets(n)
}

// NewTableMirror makes the kernel table of AV id in av_map outer, sized
// for hint entries, and enters it there. If outer holds a table under id
// already, one a closed AV left there (Drop parks small tables), the AV
// takes that one over, emptied: entering a table in av_map is a
// map-in-map update, after which bpf(2) waits for an RCU grace period
// (5-20 ms), and taking a parked one over costs a lookup, an mmap and no
// wait. A parked table smaller than hint is grown (one swap) at once.
func NewTableMirror(outer *ebpf.Map, id uint32, hint int) (*TableMirror, error) {
	if err := checkAVMap(outer); err != nil {
		return nil, err
	}
	spec, err := avTableSpec()
	if err != nil {
		return nil, err
	}
	tm := &TableMirror{outer: outer, id: id, spec: spec}
	if t := takeParked(outer, id); t != nil {
		tm.t = t
		if tableBuckets(hint, t.Compact()) > t.Buckets() {
			tm.mu.Lock()
			err := tm.grow(hint, false)
			tm.mu.Unlock()
			if err != nil {
				t.Close()
				return nil, err
			}
		}
		return tm, nil
	}
	// Compact until a peer that does not fit (IPv6, a huge fi_addr)
	// arrives: most AVs hold IPv4 peers only.
	t, err := ktable.CreateAVTable4(spec, ktable.AVTable4Buckets(hint), ktable.RandomSeed())
	if err != nil {
		return nil, fmt.Errorf("av: kernel table: %w", errnoOfKernel(err))
	}
	if err := outer.Put(id, t.Map()); err != nil {
		t.Close()
		return nil, fmt.Errorf("av: enter kernel table of AV %#x: %w", id, errnoOfKernel(err))
	}
	tm.t = t
	return tm, nil
}

// takeParked maps the table outer holds under id, empties it and makes
// the caller its writer; nil if there is none or it is not a kernel
// table. The caller owns id (xdp.Attachment.NewAVID), so no one else
// writes that table.
func takeParked(outer *ebpf.Map, id uint32) *ktable.AVTable {
	var inner ebpf.MapID
	if err := outer.Lookup(id, &inner); err != nil {
		return nil
	}
	m, err := ebpf.NewMapFromID(inner)
	if err != nil {
		return nil
	}
	t, err := ktable.TakeAVTable(m) // emptied: parked so, but a writer may have died before that
	if err != nil {
		return nil
	}
	return t
}

// parkMaxBuckets is the largest table Drop parks (64 buckets, 512 slots,
// 16 KiB of kernel memory); a bigger one leaves av_map.
const parkMaxBuckets = 64

// Map returns av_map, the map the XDP program is loaded with.
func (tm *TableMirror) Map() *ebpf.Map { return tm.outer }

// Len returns the entries of the AV's table.
func (tm *TableMirror) Len() int {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.t.Len()
}

// Slots returns the table's capacity in entries.
func (tm *TableMirror) Slots() int {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.t.Slots()
}

// peerOf is the peer table slot of key k with value v (the av_id is the
// table's). Auth key ids are at most maxAuthKeys, 16 bits.
func peerOf(k *bpf.XdpfabAvKey, v *bpf.XdpfabAvValue) ktable.Peer {
	return ktable.Peer{Port: k.Port, Addr: addrWords(k), FiAddr: v.FiAddr,
		AuthKeyID: uint16(v.AuthKeyId), UserIDSet: v.Flags&entryFlagUserIDSet != 0}
}

// addrWords is struct av_key's addr as the table's two words.
func addrWords(k *bpf.XdpfabAvKey) [2]uint64 {
	return [2]uint64{binary.LittleEndian.Uint64(k.Addr[0:8]), binary.LittleEndian.Uint64(k.Addr[8:16])}
}

// entryOfPeer is the key (in AV id) and value of peer table slot p.
func entryOfPeer(id uint32, p *ktable.Peer) (bpf.XdpfabAvKey, bpf.XdpfabAvValue) {
	k := bpf.XdpfabAvKey{AvId: id, Port: p.Port}
	binary.LittleEndian.PutUint64(k.Addr[0:8], p.Addr[0])
	binary.LittleEndian.PutUint64(k.Addr[8:16], p.Addr[1])
	v := bpf.XdpfabAvValue{FiAddr: p.FiAddr, AuthKeyId: uint32(p.AuthKeyID)}
	if p.UserIDSet {
		v.Flags = entryFlagUserIDSet
	}
	return k, v
}

// Update implements Mirror.
func (tm *TableMirror) Update(keys []bpf.XdpfabAvKey, values []bpf.XdpfabAvValue) (int, error) {
	return tm.write(keys, values, false)
}

// Insert is Update of keys the table does not hold: the AV's pending
// writes, for addresses it did not hold when they were inserted (a
// removal deletes from the table before the address can come back), so
// no key is looked for first (ktable AVTable.InsertMany).
func (tm *TableMirror) Insert(keys []bpf.XdpfabAvKey, values []bpf.XdpfabAvValue) (int, error) {
	return tm.write(keys, values, true)
}

func (tm *TableMirror) write(keys []bpf.XdpfabAvKey, values []bpf.XdpfabAvValue, fresh bool) (int, error) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.t == nil {
		return 0, fmt.Errorf("av: kernel table dropped: %w", fi.EINVAL)
	}
	if need := tm.t.Len() + len(keys); tooFull(tm.t, need) {
		if err := tm.grow(need, false); err != nil {
			return 0, err
		}
	}
	// Converted 256 at a time (8 KiB of stack).
	var ps [256]ktable.Peer
	for lo := 0; lo < len(keys); {
		n := min(len(ps), len(keys)-lo)
		for i := range n {
			if values[lo+i].AuthKeyId > maxAuthKeys {
				return lo, fmt.Errorf("av: auth key id %d: %w", values[lo+i].AuthKeyId, fi.EINVAL)
			}
			ps[i] = peerOf(&keys[lo+i], &values[lo+i])
		}
		var done int
		var err error
		if fresh {
			done, err = tm.t.InsertMany(ps[:n])
		} else {
			for ; done < n; done++ {
				if err = tm.t.Put(&ps[done]); err != nil {
					break
				}
			}
		}
		lo += done
		switch {
		case errors.Is(err, ktable.ErrFull):
			err = tm.grow(tm.t.Len()+len(keys)-lo, false)
		case errors.Is(err, ktable.ErrWide):
			err = tm.grow(tm.t.Len()+len(keys)-lo, true)
		}
		if err != nil {
			return lo, err
		}
	}
	return len(keys), nil
}

// Delete implements Mirror.
func (tm *TableMirror) Delete(keys []bpf.XdpfabAvKey) (int, error) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.t == nil {
		return 0, nil
	}
	for i := range keys {
		tm.t.Delete(keys[i].Port, addrWords(&keys[i]))
	}
	return len(keys), nil
}

// grow replaces the table by one sized for n entries, copies the entries
// over and swaps it into av_map; mu held. XDP reads the old table until
// the swap, the new one after: both hold every entry. The new table is
// compact if the old one is and wide is false, and then has at least
// twice the old one's slots (a table has no tombstones to rebuild away);
// with wide (a peer the compact table cannot hold) it has 32-byte slots,
// and at least the old one's slots.
func (tm *TableMirror) grow(n int, wide bool) error {
	compact := tm.t.Compact() && !wide
	ways := ktable.AVTWays
	if compact {
		ways = ktable.AVT4Ways
	}
	least := 2 * tm.t.Slots()
	if compact != tm.t.Compact() {
		least = tm.t.Slots()
	}
	nb := max(tableBuckets(n, compact), (least+ways-1)/ways)
	for {
		create := ktable.CreateAVTable
		if compact {
			create = ktable.CreateAVTable4
		}
		t, err := create(tm.spec, nb, ktable.RandomSeed())
		if err != nil {
			return fmt.Errorf("av: grow kernel table to %d slots: %w", nb*ways, errnoOfKernel(err))
		}
		full := false
		tm.t.Each(func(p *ktable.Peer) bool {
			if t.Insert(p) != nil {
				full = true
			}
			return !full
		})
		if full { // unlucky placement: twice the size again
			t.Close()
			nb *= 2
			continue
		}
		if err := tm.outer.Put(tm.id, t.Map()); err != nil {
			t.Close()
			return fmt.Errorf("av: swap in kernel table of AV %#x: %w", tm.id, errnoOfKernel(err))
		}
		old := tm.t
		tm.t = t
		return old.Close()
	}
}

// Drop deletes the AV's table from av_map and releases it. The delete
// is a map-in-map update: bpf(2) returns after an RCU grace period, once
// no program run can still read the table.
func (tm *TableMirror) Drop() error { return tm.release(false) }

// Park empties the AV's table and releases it, leaving it in av_map under
// the AV's id for the next AV given that id (NewTableMirror takes it
// over): no map-in-map update, so no RCU grace period, on either side. A
// table bigger than parkMaxBuckets is dropped instead. Either way no entry
// of the AV is found by a lookup that starts after Park returns. Only for
// ids that are handed out again (xdp.Attachment.NewAVID), or the parked
// table stays in av_map for nothing.
func (tm *TableMirror) Park() error { return tm.release(true) }

func (tm *TableMirror) release(park bool) error {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.t == nil {
		return nil
	}
	var err error
	if park && tm.t.Buckets() <= parkMaxBuckets {
		tm.t.Reset()
	} else {
		err = tm.outer.Delete(tm.id)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			err = nil // reaped, or replaced by another opener of the id
		}
	}
	err = errors.Join(errnoOfKernel(err), tm.t.Close())
	tm.t = nil
	return err
}

// KernelEntries reads every AV entry of av_map m back from the kernel
// tables it holds, keyed as the XDP program looks them up.
func KernelEntries(m *ebpf.Map) (map[bpf.XdpfabAvKey]bpf.XdpfabAvValue, error) {
	if err := checkAVMap(m); err != nil {
		return nil, err
	}
	out := map[bpf.XdpfabAvKey]bpf.XdpfabAvValue{}
	var id uint32
	var inner ebpf.MapID
	it := m.Iterate()
	for it.Next(&id, &inner) {
		im, err := ebpf.NewMapFromID(inner)
		if err != nil {
			continue // swapped out meanwhile
		}
		t, err := ktable.OpenAVTableReadOnly(im)
		if err != nil {
			im.Close()
			return nil, fmt.Errorf("av: table of AV %#x: %w", id, err)
		}
		t.Each(func(p *ktable.Peer) bool {
			k, v := entryOfPeer(id, p)
			out[k] = v
			return true
		})
		t.Close()
		im.Close()
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("av: read AV map: %w", errnoOfKernel(err))
	}
	return out, nil
}

// checkAVMap checks that m has av_map's layout: av_id -> inner map.
func checkAVMap(m *ebpf.Map) error {
	if m == nil || m.Type() != ebpf.HashOfMaps || m.KeySize() != 4 {
		return fmt.Errorf("av: %v is not an av_map (hash of maps keyed by av_id): %w", m, fi.EINVAL)
	}
	return nil
}

// avTableSpec returns the spec of an AV's kernel table, av_map's inner
// map: one copy, made once and shared, which callers must not change
// (ktable.CreateAVTable copies it before sizing it). Copying it per AV
// open cost some 40 allocations for its BTF.
func avTableSpec() (*ebpf.MapSpec, error) {
	innerSpec.once.Do(func() {
		spec, err := AVMapSpec()
		switch {
		case err != nil:
			innerSpec.err = err
		case spec.InnerMap == nil:
			innerSpec.err = fmt.Errorf("av: %s has no inner map spec", bpf.XdpfabMapAvMap)
		default:
			innerSpec.spec = spec.InnerMap
		}
	})
	return innerSpec.spec, innerSpec.err
}

var innerSpec struct {
	once sync.Once
	spec *ebpf.MapSpec
	err  error
}
