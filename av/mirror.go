package av

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/ktable"
)

// Mirror is where an AV keeps the kernel's copy of its entries, the AV map
// the XDP program reads: peer (IP, UDP port) of this AV -> fi_addr, auth
// key id, flags. Keys and values are the bpf2go types generated from
// bpf/xdpfab.h, so Go and C share one layout.
//
// Update and Delete take batches (up to a few thousand entries) and report
// how many entries, from the start, they applied before an error. Delete
// must treat a key that is already absent as deleted. An AV may call Update
// from several goroutines at once, with batches that share no key.
type Mirror interface {
	Update(keys []bpf.XdpfabAvKey, values []bpf.XdpfabAvValue) (int, error)
	Delete(keys []bpf.XdpfabAvKey) (int, error)
	// Map returns the kernel map behind the mirror, nil if there is none.
	Map() *ebpf.Map
}

// AV_ENTRY_* flags of struct av_value (bpf/xdpfab.h).
const entryFlagUserIDSet = 0x1 // AV_ENTRY_USER_ID_SET

// batchLen is how many kernel map updates an AV gathers before it writes
// them with one BPF_MAP_UPDATE_BATCH: FI_MORE runs and large inserts are
// written in batches of this size, which also bounds the Go memory the
// batch takes.
const batchLen = 4096

// KernelMirror mirrors AV entries into a BPF hash map of av_key ->
// av_value (a named AV's pinned map, which processes share and the XDP
// program does not read) with batched map updates.
type KernelMirror struct {
	m *ebpf.Map
}

// NewKernelMirror returns a mirror writing into m, a hash map of av_key ->
// av_value. The mirror does not own m.
func NewKernelMirror(m *ebpf.Map) (*KernelMirror, error) {
	spec := namedMapSpec()
	if m == nil || m.Type() != spec.Type || m.KeySize() != spec.KeySize || m.ValueSize() != spec.ValueSize {
		return nil, fmt.Errorf("av: kernel map is not a hash of av_key -> av_value (key %d, value %d bytes): %w",
			spec.KeySize, spec.ValueSize, fi.EINVAL)
	}
	return &KernelMirror{m: m}, nil
}

// namedMapSpec is the map of a named AV: a hash of av_key -> av_value
// holding the entries and the records of shared.go.
func namedMapSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{
		Name:       "xdpfab_av",
		Type:       ebpf.Hash,
		Flags:      unix.BPF_F_NO_PREALLOC,
		KeySize:    uint32(binary.Size(bpf.XdpfabAvKey{})),
		ValueSize:  uint32(binary.Size(bpf.XdpfabAvValue{})),
		MaxEntries: 1 << 22,
	}
}

// Map returns the kernel map.
func (k *KernelMirror) Map() *ebpf.Map { return k.m }

// Update writes the entries with BPF_MAP_UPDATE_BATCH (one by one on
// kernels without the batch API).
func (k *KernelMirror) Update(keys []bpf.XdpfabAvKey, values []bpf.XdpfabAvValue) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	n, err := k.m.BatchUpdate(keys, values, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		for n = range keys {
			if err = k.m.Update(&keys[n], &values[n], ebpf.UpdateAny); err != nil {
				return n, err
			}
		}
		return len(keys), nil
	}
	return n, err
}

// Delete removes the entries with BPF_MAP_DELETE_BATCH. The kernel stops a
// batch at the first absent key; that key counts as deleted and the batch
// goes on after it.
func (k *KernelMirror) Delete(keys []bpf.XdpfabAvKey) (int, error) {
	done := 0
	for done < len(keys) {
		n, err := k.m.BatchDelete(keys[done:], nil)
		done += n
		switch {
		case err == nil:
			return done, nil
		case errors.Is(err, ebpf.ErrKeyNotExist):
			done++
		case errors.Is(err, ebpf.ErrNotSupported):
			for ; done < len(keys); done++ {
				if err := k.m.Delete(&keys[done]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return done, err
				}
			}
		default:
			return done, err
		}
	}
	return done, nil
}

// AVMapSpec returns a copy of the av_map spec of the XDP object: a hash of
// maps from av_id to the AV's kernel table.
func AVMapSpec() (*ebpf.MapSpec, error) {
	avSpec.once.Do(func() {
		spec, err := bpf.LoadXdpfab()
		if err != nil {
			avSpec.err = fmt.Errorf("av: load BPF spec: %w", err)
			return
		}
		if avSpec.spec = spec.Maps[bpf.XdpfabMapAvMap]; avSpec.spec == nil {
			avSpec.err = fmt.Errorf("av: no %s in the BPF object", bpf.XdpfabMapAvMap)
		}
	})
	if avSpec.err != nil {
		return nil, avSpec.err
	}
	return avSpec.spec.Copy(), nil
}

// avSpec is av_map's spec, parsed from the object once (parsing it takes
// longer than opening an AV).
var avSpec struct {
	once sync.Once
	spec *ebpf.MapSpec // never handed out: AVMapSpec copies it
	err  error
}

// NewKernelMap creates an av_map from the XDP object's spec, for up to
// maxEntries AVs (0 keeps the spec's AV_MAP_MAX_AVS). Several AVs can
// share it (each enters its kernel table under its own av_id, see
// WithKernelMap), and the XDP program can be loaded with it as its av_map
// (ebpf.CollectionOptions.MapReplacements); a map of another size needs
// the program's spec given the same MaxEntries. An empty av_map costs
// next to nothing: its hash buckets are allocated as AVs enter.
func NewKernelMap(maxEntries uint32) (*ebpf.Map, error) {
	spec, err := AVMapSpec()
	if err != nil {
		return nil, err
	}
	if maxEntries != 0 {
		spec.MaxEntries = maxEntries
	}
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("av: create kernel AV map: %w", errnoOfKernel(err))
	}
	return m, nil
}

// kernelKey is the av_map key of ep in AV avID.
func kernelKey(avID uint32, ep endpoint) bpf.XdpfabAvKey {
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], ep.port)
	return bpf.XdpfabAvKey{AvId: avID, Port: binary.NativeEndian.Uint16(port[:]), Addr: ep.ip}
}

// kernelPeer is the peer table slot (the av_map entry, in the table's
// words) of ep with handle h: what kernelKey and its value make, built
// directly.
func kernelPeer(ep endpoint, h fi.Addr, keyID uint16, userIDSet bool) ktable.Peer {
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], ep.port)
	return ktable.Peer{Port: binary.NativeEndian.Uint16(port[:]),
		Addr:   [2]uint64{binary.LittleEndian.Uint64(ep.ip[0:8]), binary.LittleEndian.Uint64(ep.ip[8:16])},
		FiAddr: uint64(h), AuthKeyID: keyID, UserIDSet: userIDSet}
}

// endpointOfKey is the inverse of kernelKey.
func endpointOfKey(k *bpf.XdpfabAvKey) endpoint {
	var port [2]byte
	binary.NativeEndian.PutUint16(port[:], k.Port)
	return endpoint{ip: k.Addr, port: binary.BigEndian.Uint16(port[:])}
}

// errnoOfKernel keeps err and adds the libfabric number of a kernel map
// failure: a full map (E2BIG) is FI_ENOSPC.
func errnoOfKernel(err error) error {
	if err == nil {
		return nil
	}
	var e fi.Errno
	if errors.As(err, &e) {
		return err
	}
	switch n := fi.ErrnoOf(err); n {
	case fi.E2BIG:
		return fmt.Errorf("%w (%w)", err, fi.ENOSPC)
	case fi.EOTHER:
		return fmt.Errorf("%w (%w)", err, fi.EIO)
	default:
		return fmt.Errorf("%w (%w)", err, n)
	}
}
