package mr

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/bpffs"
)

// RegionEnabled is MR_REGION_ENABLED of bpf/xdpfab.h: the region may be
// accessed (registered, enabled, not being refreshed, not closed). A #define
// has no BTF, so bpf2go cannot generate it; this is its one Go copy.
const RegionEnabled uint32 = 0x1

// Mirror is an external copy of a Table's keys that the Table keeps in step:
// the XDP attachment's mr_map, the kernel-visible registry of the keys
// (`xdpfab status`). Every registration, enable, refresh and close calls it
// synchronously, so when such a call returns the kernel agrees with Go.
// The layouts are the generated ones of bpf/xdpfab.h. The pointers are
// valid only during the call.
type Mirror interface {
	// Update inserts or replaces the entry of key.
	Update(key *bpf.XdpfabMrKey, value *bpf.XdpfabMrValue) error
	// Delete removes the entry of key; a missing entry is not an error.
	Delete(key *bpf.XdpfabMrKey) error
}

// MapMirror is the Mirror backed by a BPF hash map with mr_map's layout.
type MapMirror struct {
	m *ebpf.Map
}

// NewMapMirror wraps m after checking that it has mr_map's type, key and
// value sizes. The caller keeps ownership of m (closing it, unpinning it).
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
	return &MapMirror{m: m}, nil
}

// Map returns the underlying map, e.g. to hand it to the XDP loader
// (ebpf.CollectionOptions.MapReplacements["mr_map"]).
func (mm *MapMirror) Map() *ebpf.Map { return mm.m }

// Update implements Mirror.
func (mm *MapMirror) Update(key *bpf.XdpfabMrKey, value *bpf.XdpfabMrValue) error {
	return mm.m.Update(key, value, ebpf.UpdateAny)
}

// Delete implements Mirror.
func (mm *MapMirror) Delete(key *bpf.XdpfabMrKey) error {
	err := mm.m.Delete(key)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// MapOptions says how CreateMap makes the map.
type MapOptions struct {
	// PinDir, when set, pins the map as PinDir/mr_map (bpffs is mounted
	// and the directory created if needed); an existing compatible map
	// pinned there is opened instead, so processes share it.
	PinDir string
	// MaxEntries overrides mr_map's size (1<<20) when non-zero.
	MaxEntries uint32
}

// DefaultPinDir is where xdpfab pins the MR map by convention.
var DefaultPinDir = bpffs.Path("mr")

// CreateMap creates the mr_map of bpf/xdpfab.h from the compiled object's
// spec. It needs CAP_BPF.
func CreateMap(opts MapOptions) (*ebpf.Map, error) {
	spec, err := mapSpec()
	if err != nil {
		return nil, err
	}
	if opts.MaxEntries != 0 {
		spec.MaxEntries = opts.MaxEntries
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
	if _, err := NewMapMirror(m); err != nil {
		m.Close()
		return nil, err
	}
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
