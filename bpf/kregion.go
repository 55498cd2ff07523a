package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Kernel-resident region constants (xdpfab.h).
const (
	KRPage = 4096 // KR_PAGE: bytes per element of a region's array map

	KREnabled     = 0x1 // KR_ENABLED: XDP may serve the region
	KRRemoteRead  = 0x2 // KR_REMOTE_READ
	KRRemoteWrite = 0x4 // KR_REMOTE_WRITE
)

// KernelRegion is the memory of a kernel-resident region: a
// BPF_F_MMAPABLE array map of KRPage-byte elements (the inner map type of
// kr_mem), mapped into the process. Bytes is the region as the
// application sees it; the XDP program reaches the same pages through
// kr_mem, so both sides work on one memory (Go with sync/atomic, the
// program with BPF atomic instructions).
type KernelRegion struct {
	// Map is the array map; kr_mem holds it for the region's key.
	Map *ebpf.Map
	// Bytes is the region: the first length bytes of the mapping.
	Bytes []byte
	mem   []byte // the whole mapping, whole pages
}

// NewKernelRegion allocates a kernel-resident region of length bytes
// (rounded up to whole pages in the map; Bytes has length bytes), zeroed.
// It needs CAP_BPF.
func NewKernelRegion(length int) (*KernelRegion, error) {
	if length <= 0 || length > 1<<30 {
		return nil, fmt.Errorf("bpf: kernel-resident region of %d bytes: %w", length, unix.EINVAL)
	}
	cs, err := LoadXdpfab()
	if err != nil {
		return nil, err
	}
	outer := cs.Maps[XdpfabMapKrMem]
	if outer == nil || outer.InnerMap == nil {
		return nil, errors.New("bpf: compiled object has no kr_mem inner map")
	}
	spec := outer.InnerMap.Copy()
	spec.Name = "xdpfab_kregion"
	pages := (length + KRPage - 1) / KRPage
	spec.MaxEntries = uint32(pages)
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("bpf: create kernel-resident region: %w", err)
	}
	mem, err := unix.Mmap(m.FD(), 0, pages*KRPage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("bpf: mmap kernel-resident region: %w", err)
	}
	return &KernelRegion{Map: m, Bytes: mem[:length:length], mem: mem}, nil
}

// Close unmaps the memory and releases the map. Bytes must not be used
// afterwards. The map itself lives on while kr_mem holds it.
func (r *KernelRegion) Close() error {
	var errs []error
	if r.mem != nil {
		errs = append(errs, unix.Munmap(r.mem))
		r.mem, r.Bytes = nil, nil
	}
	if r.Map != nil {
		errs = append(errs, r.Map.Close())
		r.Map = nil
	}
	return errors.Join(errs...)
}
