package av

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// A named AV's fi_addr array is what its map_addr points to in every
// process that opens it: slot i holds the fi_addr_t of the address at index
// i, FI_ADDR_NOTAVAIL when the index holds none, as libfabric's sockets
// provider lays out a shared AV and as fabtests (fi_rdm_shared_av) reads
// it: a process that did not insert an address finds its fi_addr at
// ((fi_addr_t *)map_addr)[i]. fi_av(3) leaves the relation of map_addr to
// fi_addr_t to the provider and allows it to be an mmap of the shared AV.
//
// The array is a sparse file in /dev/shm (AddrArrayPath), mapped shared
// (read-only with FI_READ), written by the process that changes the AV,
// under the AV's pin lock, as its kernel map writes are made: a slot is
// written once its entry is in the map, and cleared before a removed entry
// leaves it. It covers the indices below AddrArraySlots (pages are
// allocated as indices are used, 4 KiB per 512 indices); slots past the
// highest index ever used read 0.

// AddrArraySlots is how many indices a named AV's fi_addr array covers.
const AddrArraySlots = 1 << 24

// AddrArrayPath is where the fi_addr array of the named AV name of the
// calling thread's network namespace lives.
func AddrArrayPath(name string) string {
	return filepath.Join("/dev/shm", "xdpfab-av."+netnsID()+"."+name)
}

// addrArray is one process's mapping of a named AV's fi_addr array.
type addrArray struct {
	base  unsafe.Pointer
	slots []uint64 // over base; stored atomically (other processes read)
}

// openAddrArray maps the array of the AV (pin lock held), creating it when
// missing, in which case fill writes its slots from the local table.
// fresh removes an array left by an earlier AV of the name.
func openAddrArray(name string, readOnly, fresh bool) (*addrArray, bool, error) {
	path := AddrArrayPath(name)
	if fresh {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, false, fmt.Errorf("remove stale %s: %w", path, errnoOfSys(err))
		}
	}
	created := false
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if readOnly && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EROFS)) {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if errors.Is(err, unix.ENOENT) {
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		created = err == nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", path, errnoOfSys(err))
	}
	defer unix.Close(fd)
	size := int64(AddrArraySlots * 8)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, false, fmt.Errorf("stat %s: %w", path, errnoOfSys(err))
	}
	if st.Size != size {
		if !created && st.Size != 0 {
			return nil, false, fmt.Errorf("%s holds %d bytes, not %d: %w", path, st.Size, size, fi.EINVAL)
		}
		if err := unix.Ftruncate(fd, size); err != nil {
			return nil, false, fmt.Errorf("size %s: %w", path, errnoOfSys(err))
		}
		created = true
	}
	prot := unix.PROT_READ | unix.PROT_WRITE
	if readOnly && !created {
		prot = unix.PROT_READ
	}
	p, err := unix.MmapPtr(fd, 0, nil, uintptr(size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, false, fmt.Errorf("map %s: %w", path, errnoOfSys(err))
	}
	a := &addrArray{base: p, slots: unsafe.Slice((*uint64)(p), AddrArraySlots)}
	return a, created, nil
}

func (a *addrArray) set(idx uint32, h fi.Addr) {
	if idx < AddrArraySlots {
		atomic.StoreUint64(&a.slots[idx], uint64(h))
	}
}

// readOnly remaps the array read-only (an FI_READ opener that had to
// create and fill it).
func (a *addrArray) readOnly() error {
	return unix.Mprotect(unsafe.Slice((*byte)(a.base), AddrArraySlots*8), unix.PROT_READ)
}

func (a *addrArray) close() error {
	if a == nil || a.base == nil {
		return nil
	}
	err := unix.MunmapPtr(a.base, AddrArraySlots*8)
	a.base, a.slots = nil, nil
	return err
}

// fillAddrArray writes the slots from index from up to the table's next
// index from the table; wmu and the pin lock held.
func (av *AV) fillAddrArray(a *addrArray, from uint32) {
	av.mu.RLock()
	defer av.mu.RUnlock()
	for idx := from; idx < av.t.next && idx < AddrArraySlots; idx++ {
		h := fi.AddrNotAvail
		if _, gen, _, ok := av.t.get(idx); ok {
			h = av.handle(idx, gen)
		}
		a.set(idx, h)
	}
}

// arrayMirror is a named AV's Mirror: the kernel map, and the fi_addr
// array kept in step with the map's entries.
type arrayMirror struct {
	*KernelMirror
	a *addrArray
}

func (m *arrayMirror) Update(keys []bpf.XdpfabAvKey, values []bpf.XdpfabAvValue) (int, error) {
	n, err := m.KernelMirror.Update(keys, values)
	for i := range n {
		if keys[i].Pad == 0 {
			m.a.set(uint32(values[i].FiAddr), fi.Addr(values[i].FiAddr))
		}
	}
	return n, err
}

func (m *arrayMirror) Delete(keys []bpf.XdpfabAvKey) (int, error) {
	var v bpf.XdpfabAvValue
	for i := range keys {
		if keys[i].Pad == 0 && m.m.Lookup(&keys[i], &v) == nil {
			m.a.set(uint32(v.FiAddr), fi.AddrNotAvail)
		}
	}
	return m.KernelMirror.Delete(keys)
}

var _ Mirror = (*arrayMirror)(nil)

// arraySlot reads slot idx of a named AV's fi_addr array (what C reads at
// ((fi_addr_t *)map_addr)[idx]); tests use it.
func (av *AV) arraySlot(idx uint32) fi.Addr {
	return fi.Addr(atomic.LoadUint64(&av.shared.arr.slots[idx]))
}
