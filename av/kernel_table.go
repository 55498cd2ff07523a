package av

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/ktable"
)

// TableMirror is the Mirror of an unnamed AV: the AV's own kernel table
// (bpf/xdpfab.h, "Kernel tables"), an mmapped BPF_F_MMAPABLE array map
// that av_map holds under the AV's av_id, written with plain stores under
// the table's seqlock protocol. An insert or remove costs memory writes;
// the table grows (a new map twice the size, filled, then swapped into
// av_map with one syscall) when it is 7/8 full or a key's two buckets
// are. Close (Drop) deletes the av_map entry: the kernel frees the table
// once no program run still reads it.
//
// Kernel memory is 64 bytes a slot, one slot per entry at 44-88% load
// after growth, so 73-145 bytes an address; a new AV takes one page
// (2 buckets of 8 slots).
type TableMirror struct {
	outer *ebpf.Map
	id    uint32
	spec  *ebpf.MapSpec // of the inner tables

	mu sync.Mutex // serializes writers: a table has one writer at a time
	t  *ktable.Table
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
		if ktable.Buckets(hint) > t.Buckets() {
			tm.mu.Lock()
			err := tm.grow(hint)
			tm.mu.Unlock()
			if err != nil {
				t.Close()
				return nil, err
			}
		}
		return tm, nil
	}
	t, err := ktable.Create(spec, ktable.Buckets(hint), ktable.RandomSeed())
	if err != nil {
		return nil, fmt.Errorf("av: kernel table: %w", errnoOfKernel(err))
	}
	t.Own()
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
func takeParked(outer *ebpf.Map, id uint32) *ktable.Table {
	var inner ebpf.MapID
	if err := outer.Lookup(id, &inner); err != nil {
		return nil
	}
	m, err := ebpf.NewMapFromID(inner)
	if err != nil {
		return nil
	}
	t, err := ktable.Take(m)
	if err != nil {
		return nil
	}
	t.Reset() // parked emptied, but a writer may have died before that
	t.Own()
	return t
}

// parkMaxBuckets is the largest table Drop parks (64 buckets, 512 slots,
// 32 KiB of kernel memory); a bigger one leaves av_map.
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

// avKeyWords and avValueWords fill a kernel table slot: struct av_key,
// and struct av_value then 0 (bpf/xdpfab.h). Both structs are laid out
// as the words they become on a little-endian machine.
func avKeyWords(k *bpf.XdpfabAvKey) ktable.Key {
	b := (*[24]byte)(unsafe.Pointer(k))
	return ktable.Key{binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}
}

func avKeyOfWords(w *ktable.Key) bpf.XdpfabAvKey {
	var k bpf.XdpfabAvKey
	b := (*[24]byte)(unsafe.Pointer(&k))
	binary.LittleEndian.PutUint64(b[0:], w[0])
	binary.LittleEndian.PutUint64(b[8:], w[1])
	binary.LittleEndian.PutUint64(b[16:], w[2])
	return k
}

func avValueWords(v *bpf.XdpfabAvValue) ktable.Value {
	return ktable.Value{v.FiAddr, uint64(v.AuthKeyId) | uint64(v.Flags)<<32}
}

func avValueOfWords(w *ktable.Value) bpf.XdpfabAvValue {
	return bpf.XdpfabAvValue{FiAddr: w[0], AuthKeyId: uint32(w[1]), Flags: uint32(w[1] >> 32)}
}

// Update implements Mirror.
func (tm *TableMirror) Update(keys []bpf.XdpfabAvKey, values []bpf.XdpfabAvValue) (int, error) {
	return tm.write(keys, values, false)
}

// Insert is Update of keys the table does not hold: the AV's pending
// writes, for addresses it did not hold when they were inserted (a
// removal deletes from the table before the address can come back), so
// no key is looked for first (ktable InsertMany).
func (tm *TableMirror) Insert(keys []bpf.XdpfabAvKey, values []bpf.XdpfabAvValue) (int, error) {
	return tm.write(keys, values, true)
}

func (tm *TableMirror) write(keys []bpf.XdpfabAvKey, values []bpf.XdpfabAvValue, fresh bool) (int, error) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if tm.t == nil {
		return 0, fmt.Errorf("av: kernel table dropped: %w", fi.EINVAL)
	}
	if need := tm.t.Len() + tm.t.Dead() + len(keys); need > tm.t.Slots()*7/8 {
		if err := tm.grow(tm.t.Len() + len(keys)); err != nil {
			return 0, err
		}
	}
	// Converted 256 at a time (14 KiB of stack): InsertMany's pipeline
	// of 32-key groups fills and drains once per call.
	var kw [256]ktable.Key
	var vw [256]ktable.Value
	for lo := 0; lo < len(keys); {
		n := min(len(kw), len(keys)-lo)
		for i := range n {
			kw[i], vw[i] = avKeyWords(&keys[lo+i]), avValueWords(&values[lo+i])
		}
		put := tm.t.PutMany
		if fresh {
			put = tm.t.InsertMany
		}
		done, err := put(kw[:n], vw[:n])
		lo += done
		if errors.Is(err, ktable.ErrFull) {
			err = tm.grow(tm.t.Len() + len(keys) - lo)
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
		k := avKeyWords(&keys[i])
		tm.t.Delete(&k)
	}
	return len(keys), nil
}

// grow replaces the table by one sized for n entries (at least twice the
// old one when that is full of live entries), copies the entries over and
// swaps it into av_map; mu held. XDP reads the old table until the swap,
// the new one after: both hold every entry.
func (tm *TableMirror) grow(n int) error {
	nb := ktable.Buckets(n)
	if cur := tm.t.Buckets(); tm.t.Dead() > tm.t.Len() {
		nb = max(nb, cur) // mostly tombstones: rebuild at the same size
	} else {
		nb = max(nb, 2*cur)
	}
	for {
		t, err := ktable.Create(tm.spec, nb, ktable.RandomSeed())
		if err != nil {
			return fmt.Errorf("av: grow kernel table to %d slots: %w", nb*ktable.Ways, errnoOfKernel(err))
		}
		t.Own()
		full := false
		tm.t.Each(func(k *ktable.Key, v *ktable.Value) bool {
			if t.Insert(k, v) != nil {
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
		t, err := ktable.OpenReadOnly(im)
		if err != nil {
			im.Close()
			return nil, fmt.Errorf("av: table of AV %#x: %w", id, err)
		}
		t.Each(func(k *ktable.Key, v *ktable.Value) bool {
			out[avKeyOfWords(k)] = avValueOfWords(v)
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

// avTableSpec returns the spec of an AV's kernel table, av_map's inner map.
func avTableSpec() (*ebpf.MapSpec, error) {
	spec, err := AVMapSpec()
	if err != nil {
		return nil, err
	}
	if spec.InnerMap == nil {
		return nil, fmt.Errorf("av: %s has no inner map spec", bpf.XdpfabMapAvMap)
	}
	return spec.InnerMap.Copy(), nil
}
