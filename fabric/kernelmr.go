package fabric

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/xdp"
)

// Kernel-resident regions: an xdpfab extension of memory registration, in
// the spirit of FI_MR_ALLOCATED, where the provider owns the memory.
// Domain.MRRegKernel allocates the region as a BPF_F_MMAPABLE array map,
// maps it into the process and registers the mapping like any buffer, so
// every path that serves a region serves it; in addition the XDP program
// reaches the same pages (kr_mem) and executes remote atomics on them
// itself, answering with XDP_TX without waking the process
// (docs/xdp-atomics.md, bpf/kserve.h). Go code must access the memory
// with sync/atomic, as the program uses atomic instructions.
//
// The program serves a region only where it can check everything the
// target's mr.Table check would (key, enabled, range, access, auth key):
// not with FI_MR_ENDPOINT (bindings are not visible to it) nor for a
// region registered with FI_RMA_EVENT (its counters must count); those
// regions are kernel-resident memory served by user space only. From the
// moment Close of the region returns, the program refuses the key: the
// MR mirror removes its kr_regions entry, waits for running programs
// (a kr_mem update synchronises RCU), then removes kr_mem's. The memory
// stays mapped until the domain closes, so a stale slice faults nothing.

// kernelMRs is a domain's kernel-resident regions.
type kernelMRs struct {
	att *xdp.Attachment // nil: the domain cannot have any

	// serving is set by the first region XDP may serve: from then on
	// the domain's AF_XDP ports ask the program to serve (PORT_KSERVE).
	serving atomic.Bool
	// keys are the servable regions' keys, read by Wants without locks.
	keys atomic.Pointer[map[uint64]struct{}]

	mu     sync.Mutex
	byKey  map[uint64]*kernelMR // live regions (servable or not)
	closed []*bpf.KernelRegion  // memory of closed regions, unmapped at domain close
	eps    []*Endpoint          // AF_XDP endpoints to reconfigure when serving starts
}

type kernelMR struct {
	mem      *bpf.KernelRegion
	m        *mr.MR
	servable bool
	// adopted is the application's memory the region is mapped over
	// (MRRegKernelAt), restored at Close; nil for MRRegKernel's.
	adopted []byte
}

// MRRegKernel registers a kernel-resident region of length bytes with the
// given access, requested key and flags (as fi_mr_reg) and returns it with
// its memory, zeroed, owned by the provider. It needs a domain on AF_XDP
// (FI_EOPNOTSUPP otherwise).
func (d *Domain) MRRegKernel(length int, access fi.Flags, requestedKey uint64, flags fi.Flags, context any) (*mr.MR, []byte, error) {
	k := &d.kmr
	if k.att == nil || k.att.KRMem == nil || k.att.KRRegions == nil {
		return nil, nil, fmt.Errorf("mr reg kernel: the domain is not on AF_XDP with kernel-resident region support: %w", fi.EOPNOTSUPP)
	}
	mem, err := bpf.NewKernelRegion(length)
	if err != nil {
		return nil, nil, fmt.Errorf("mr reg kernel: %w: %w", err, fi.ENOMEM)
	}
	m, err := d.mrs.Reg(mem.Bytes, access, 0, requestedKey, flags, context)
	if err != nil {
		mem.Close()
		return nil, nil, err
	}
	if err := d.addKernelMR(&kernelMR{mem: mem, m: m}, access, flags); err != nil {
		_ = m.Close()
		return nil, nil, fmt.Errorf("mr reg kernel: %w", err)
	}
	return m, mem.Bytes, nil
}

// addKernelMR records r, registered with access and flags, as a live
// region of the domain and, where XDP may serve it (no per-endpoint MRs,
// no FI_RMA_EVENT, remote access), installs it in the program's maps. On
// error the caller closes r.m.
func (d *Domain) addKernelMR(r *kernelMR, access, flags fi.Flags) error {
	k := &d.kmr
	r.servable = d.mrs.Mode()&mr.ModeEndpoint == 0 && flags&fi.RMA_EVENT == 0 && access&(fi.REMOTE_READ|fi.REMOTE_WRITE) != 0
	k.mu.Lock()
	if k.byKey == nil {
		k.byKey = map[uint64]*kernelMR{}
	}
	k.byKey[r.m.Key()] = r
	k.mu.Unlock()
	if r.servable {
		return k.install(d.id, r)
	}
	return nil
}

func (k *kernelMRs) install(domainID uint32, r *kernelMR) error {
	key := bpf.XdpfabMrKey{DomainId: domainID, Key: r.m.Key()}
	if err := k.att.KRMem.Put(&key, r.mem.Map); err != nil {
		return fmt.Errorf("kr_mem: %w", err)
	}
	if err := k.att.KRRegions.Put(&key, krValue(r.m, r.m.Enabled())); err != nil {
		_ = k.att.KRMem.Delete(&key)
		return fmt.Errorf("kr_regions: %w", err)
	}
	k.mu.Lock()
	keys := map[uint64]struct{}{}
	if old := k.keys.Load(); old != nil {
		for x := range *old {
			keys[x] = struct{}{}
		}
	}
	keys[r.m.Key()] = struct{}{}
	k.keys.Store(&keys)
	first := !k.serving.Swap(true)
	eps := append([]*Endpoint(nil), k.eps...)
	k.mu.Unlock()
	if first {
		for _, ep := range eps {
			_ = ep.configureTransport() // now with KernelServe
		}
	}
	return nil
}

func krValue(m *mr.MR, enabled bool) bpf.XdpfabKrRegion {
	v := bpf.XdpfabKrRegion{Base: m.Base(), Len: m.Len(), AuthDigest: m.AuthDigest()}
	if enabled {
		v.Flags |= bpf.KREnabled
	}
	if m.Access()&fi.REMOTE_READ != 0 {
		v.Flags |= bpf.KRRemoteRead
	}
	if m.Access()&fi.REMOTE_WRITE != 0 {
		v.Flags |= bpf.KRRemoteWrite
	}
	return v
}

// servable reports whether key is a region the program may serve.
func (k *kernelMRs) servable(key uint64) bool {
	keys := k.keys.Load()
	if keys == nil {
		return false
	}
	_, ok := (*keys)[key]
	return ok
}

// addEndpoint records an AF_XDP endpoint whose port serves in XDP once
// the domain has a servable region; it reports whether it already has.
func (k *kernelMRs) addEndpoint(ep *Endpoint) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.eps {
		if e == ep {
			return k.serving.Load()
		}
	}
	k.eps = append(k.eps, ep)
	return k.serving.Load()
}

func (k *kernelMRs) removeEndpoint(ep *Endpoint) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, e := range k.eps {
		if e == ep {
			k.eps = append(k.eps[:i], k.eps[i+1:]...)
			return
		}
	}
}

// closeAll unmaps the memory of every region; the domain is closing and
// its regions are closed.
func (k *kernelMRs) closeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.byKey {
		if r.adopted != nil {
			restoreAdopted(r.adopted, r.mem)
		}
		k.closed = append(k.closed, r.mem)
	}
	k.byKey = nil
	for _, m := range k.closed {
		_ = m.Close()
	}
	k.closed = nil
}

// krMirror is the domain's MR mirror with kernel-resident regions: it
// keeps kr_regions' enabled flag in step and removes a closed region from
// the program before the close returns.
type krMirror struct {
	inner mr.Mirror
	d     *Domain
}

func (km *krMirror) Update(key *bpf.XdpfabMrKey, value *bpf.XdpfabMrValue) error {
	if err := km.inner.Update(key, value); err != nil {
		return err
	}
	k := &km.d.kmr
	k.mu.Lock()
	r := k.byKey[key.Key]
	k.mu.Unlock()
	if r == nil || !r.servable {
		return nil
	}
	v := krValue(r.m, value.Flags&mr.RegionEnabled != 0)
	err := k.att.KRRegions.Update(key, &v, ebpf.UpdateExist)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

func (km *krMirror) Delete(key *bpf.XdpfabMrKey) error {
	k := &km.d.kmr
	k.mu.Lock()
	r := k.byKey[key.Key]
	if r != nil {
		delete(k.byKey, key.Key)
		k.closed = append(k.closed, r.mem)
		if old := k.keys.Load(); old != nil {
			keys := map[uint64]struct{}{}
			for x := range *old {
				if x != key.Key {
					keys[x] = struct{}{}
				}
			}
			k.keys.Store(&keys)
		}
	}
	k.mu.Unlock()
	var errs []error
	if r != nil && r.servable {
		// No new request sees the region; then wait for the programs
		// that did (an update of the map-in-map synchronises RCU), so
		// none is between its check and its execution; then drop the
		// memory's entry (synchronising again).
		if err := k.att.KRRegions.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
		if err := k.att.KRMem.Update(key, r.mem.Map, ebpf.UpdateExist); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
		if err := k.att.KRMem.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	if r != nil && r.adopted != nil {
		// The program no longer touches it: give the application its
		// pages back.
		restoreAdopted(r.adopted, r.mem)
	}
	errs = append(errs, km.inner.Delete(key))
	return errors.Join(errs...)
}
