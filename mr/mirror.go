package mr

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/bpffs"
	"github.com/xdpfab/xdpfab/internal/ktable"
)

// RegionEnabled is MR_REGION_ENABLED of bpf/xdpfab.h: the region may be
// accessed (registered, enabled, not being refreshed, not closed). A #define
// has no BTF, so bpf2go cannot generate it; this is its one Go copy.
const RegionEnabled uint32 = 0x1

// Mirror is an external copy of a Table's keys that the Table keeps in step:
// the XDP attachment's MR table (mr_map), which XDP code vetting requests
// for kernel-resident regions reads and `xdpfab status` counts. Every
// registration, enable, refresh and close calls it synchronously, so when
// such a call returns the kernel agrees with Go. The layouts are the
// generated ones of bpf/xdpfab.h. The pointers are valid only during the
// call.
type Mirror interface {
	// Update inserts or replaces the entry of key.
	Update(key *bpf.XdpfabMrKey, value *bpf.XdpfabMrValue) error
	// Delete removes the entry of key; a missing entry is not an error.
	Delete(key *bpf.XdpfabMrKey) error
}

// MapMirror is the Mirror backed by an MR table: mr_map of bpf/xdpfab.h,
// a kernel table (internal/ktable) that this process has mmapped and
// writes with plain stores under the table's seqlock protocol, so an
// update or delete costs memory writes, not a bpf(2) call.
type MapMirror struct {
	m *ebpf.Map
	t *ktable.Table
}

// NewMapMirror maps m, after checking that it has mr_map's type, key and
// value sizes, and writes its header if it has none yet. The caller keeps
// ownership of m (closing it, unpinning it); Close unmaps.
func NewMapMirror(m *ebpf.Map) (*MapMirror, error) {
	if m == nil {
		return nil, errors.New("mr: nil map")
	}
	spec, err := mapSpec()
	if err != nil {
		return nil, err
	}
	if m.Type() != spec.Type || m.KeySize() != spec.KeySize || m.ValueSize() != spec.ValueSize {
		return nil, fmt.Errorf("mr: map %v has type %v key %d value %d, mr_map needs %v key %d value %d",
			m, m.Type(), m.KeySize(), m.ValueSize(), spec.Type, spec.KeySize, spec.ValueSize)
	}
	t, err := ktable.OpenUncounted(m, ktable.RandomSeed())
	if err != nil {
		return nil, fmt.Errorf("mr: %w", err)
	}
	return &MapMirror{m: m, t: t}, nil
}

// Map returns the underlying map, e.g. to hand it to the XDP loader
// (ebpf.CollectionOptions.MapReplacements["mr_map"]).
func (mm *MapMirror) Map() *ebpf.Map { return mm.m }

// Len returns the entries in the MR table, of every domain sharing it.
func (mm *MapMirror) Len() int { return mm.t.Len() }

// Close unmaps the table; the map stays open.
func (mm *MapMirror) Close() error { return mm.t.Close() }

// mrKey and mrValue fill a kernel table slot: struct mr_key then 0, and
// struct mr_value (bpf/xdpfab.h). They write into the caller's variables
// word by word: returned as values, two at a time, they were built in
// temporaries and copied with 16-byte loads of 8-byte stores, which
// cannot be forwarded from the store buffer.
func mrKey(dst *ktable.Key, k *bpf.XdpfabMrKey) {
	dst[0], dst[1], dst[2] = uint64(k.DomainId)|uint64(k.Pad)<<32, k.Key, 0
}

func mrValue(dst *ktable.Value, v *bpf.XdpfabMrValue) {
	dst[0], dst[1] = v.Base, v.Len
	dst[2], dst[3] = uint64(v.Access)|uint64(v.RegionId)<<32, uint64(v.Flags)|uint64(v.Pad)<<32
}

// slotKey and slotValue are mrKey and mrValue of r's mirrorKey and
// mirror value (Table.mirrorUpdate), built from the region's fields for a
// *MapMirror: the bpf structs' 32-bit fields, stored apart and loaded as
// one word, could not be forwarded from the store buffer either (this
// and the copies were ~5% of a registration in a profile).
func (t *Table) slotKey(dst *ktable.Key, r *region) {
	dst[0], dst[1], dst[2] = uint64(t.domainID), r.key, 0
}

func slotValue(dst *ktable.Value, r *region, flags uint32) {
	dst[0], dst[1] = r.base, r.length
	dst[2], dst[3] = uint64(uint32(r.access))|uint64(r.regionID)<<32, uint64(flags)
}

// Update implements Mirror. A key whose two buckets are full fails with
// FI_ENOMR.
func (mm *MapMirror) Update(key *bpf.XdpfabMrKey, value *bpf.XdpfabMrValue) error {
	var k ktable.Key
	var v ktable.Value
	mrKey(&k, key)
	mrValue(&v, value)
	if err := mm.t.Put(&k, &v); err != nil {
		return fmt.Errorf("%w (%w)", err, fi.ENOMR)
	}
	return nil
}

// Delete implements Mirror.
func (mm *MapMirror) Delete(key *bpf.XdpfabMrKey) error {
	var k ktable.Key
	mrKey(&k, key)
	mm.t.Delete(&k)
	return nil
}

// add enters key, which its Table knows is not in the MR table (the
// Table is the only writer of its domain_id's keys and checked the key),
// and returns the slot holding it: a registration claims a free slot
// without reading both buckets of the key first. p is the Table's
// Prefix of k[0] (its domain_id), computed once per Table.
func (mm *MapMirror) add(p ktable.Prefix, k *ktable.Key, v *ktable.Value) (ktable.Ref, error) {
	r, err := mm.t.AddFrom(p, k, v)
	if err != nil {
		return 0, fmt.Errorf("%w (%w)", err, fi.ENOMR)
	}
	return r, nil
}

// setAt rewrites the entry of key held at r (from add), and returns
// where the entry is.
func (mm *MapMirror) setAt(r ktable.Ref, k *ktable.Key, v *ktable.Value) (ktable.Ref, error) {
	r, err := mm.t.SetAt(r, k, v)
	if err != nil {
		return 0, fmt.Errorf("%w (%w)", err, fi.ENOMR)
	}
	return r, nil
}

// deleteAt removes the entry of key held at r (from add): no hash, no
// search of the key's buckets.
func (mm *MapMirror) deleteAt(r ktable.Ref, k *ktable.Key) {
	mm.t.DeleteAt(r, k)
}

// Lookup reads the entry of key from the kernel table, under its seqlock
// protocol, as XDP does.
func (mm *MapMirror) Lookup(key *bpf.XdpfabMrKey) (bpf.XdpfabMrValue, bool) {
	var k ktable.Key
	mrKey(&k, key)
	w, ok := mm.t.Get(&k)
	if !ok {
		return bpf.XdpfabMrValue{}, false
	}
	return bpf.XdpfabMrValue{Base: w[0], Len: w[1], Access: uint32(w[2]), RegionId: uint32(w[2] >> 32),
		Flags: uint32(w[3]), Pad: uint32(w[3] >> 32)}, true
}

// MapOptions says how CreateMap makes the map.
type MapOptions struct {
	// PinDir, when set, pins the map as PinDir/mr_map (bpffs is mounted
	// and the directory created if needed); an existing compatible map
	// pinned there is opened instead, so processes share it.
	PinDir string
	// MaxEntries, when non-zero, sizes the table for that many regions
	// (ktable.Buckets) instead of mr_map's MR_TABLE_BUCKETS.
	MaxEntries uint32
}

// DefaultPinDir is where xdpfab pins the MR map by convention.
var DefaultPinDir = bpffs.Path("mr")

// CreateMap creates the mr_map of bpf/xdpfab.h from the compiled object's
// spec, its header not yet written (NewMapMirror writes it). It needs
// CAP_BPF.
func CreateMap(opts MapOptions) (*ebpf.Map, error) {
	spec, err := mapSpec()
	if err != nil {
		return nil, err
	}
	if opts.MaxEntries != 0 {
		spec.MaxEntries = 1 + uint32(ktable.Buckets(int(opts.MaxEntries)))
	}
	var mo ebpf.MapOptions
	if opts.PinDir != "" {
		if _, err := bpffs.Ensure(opts.PinDir); err != nil {
			return nil, fmt.Errorf("mr: %w", err)
		}
		spec.Pinning = ebpf.PinByName
		mo.PinPath = opts.PinDir
	}
	m, err := ebpf.NewMapWithOptions(spec, mo)
	if err != nil {
		return nil, fmt.Errorf("mr: create %s: %w", filepath.Join(opts.PinDir, spec.Name), err)
	}
	return m, nil
}

// LoadPinnedMap opens the MR map pinned at path, checking its layout.
func LoadPinnedMap(path string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return nil, fmt.Errorf("mr: open pinned map: %w", err)
	}
	mm, err := NewMapMirror(m)
	if err != nil {
		m.Close()
		return nil, err
	}
	mm.Close()
	return m, nil
}

// mapSpec returns a private copy of mr_map's spec.
func mapSpec() (*ebpf.MapSpec, error) {
	cs, err := bpf.LoadXdpfab()
	if err != nil {
		return nil, fmt.Errorf("mr: %w", err)
	}
	spec, ok := cs.Maps[bpf.XdpfabMapMrMap]
	if !ok {
		return nil, fmt.Errorf("mr: compiled object has no %s map", bpf.XdpfabMapMrMap)
	}
	return spec.Copy(), nil
}
