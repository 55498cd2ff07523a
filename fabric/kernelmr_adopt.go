package fabric

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// Adopted kernel-resident regions: the application's own pages put in the
// kernel. MRRegKernelAt is how a C program that allocates and registers
// its memory itself (Open MPI's osc rdma with MPI_Win_allocate) gets the
// XDP-served atomics of MRRegKernel without being changed: the provider
// copies the pages into a kernel-resident region and maps the region's
// map over them (MAP_SHARED|MAP_FIXED), so the application's pointer now
// addresses memory the XDP program also reaches. At Close the bytes go
// back into fresh private anonymous pages at the same address, so the
// pointer stays valid and the memory is again the application's alone.
//
// Only private anonymous memory of whole pages, not adopted already, is
// adopted: anything else (shared or file mappings, a partial page whose
// rest the application may share) is refused with FI_EINVAL or FI_EBUSY
// and the caller registers it in place. No other thread may write the
// pages while they are adopted (the copy and the remap are not atomic
// against writers); MPI registers a window before anyone uses it.

// MRRegKernelAt registers buf as a kernel-resident region (see
// MRRegKernel), keeping buf's address and contents: buf must be whole
// pages of private anonymous memory. FI_EOPNOTSUPP: the domain cannot
// have kernel-resident regions; FI_EINVAL: buf is not such memory;
// FI_EBUSY: part of buf is adopted by another region.
func (d *Domain) MRRegKernelAt(buf []byte, access fi.Flags, offset, requestedKey uint64, flags fi.Flags, context any) (*mr.MR, error) {
	k := &d.kmr
	if k.att == nil || k.att.KRMem == nil || k.att.KRRegions == nil {
		return nil, fmt.Errorf("mr reg kernel at: the domain is not on AF_XDP with kernel-resident region support: %w", fi.EOPNOTSUPP)
	}
	n := len(buf)
	if n == 0 || n%bpf.KRPage != 0 || os.Getpagesize() != bpf.KRPage {
		return nil, fmt.Errorf("mr reg kernel at: %d bytes are not whole pages: %w", n, fi.EINVAL)
	}
	base := uintptr(unsafe.Pointer(&buf[0]))
	if base%bpf.KRPage != 0 {
		return nil, fmt.Errorf("mr reg kernel at: %#x is not page-aligned: %w", base, fi.EINVAL)
	}
	if err := privateAnonymous(base, base+uintptr(n)); err != nil {
		return nil, fmt.Errorf("mr reg kernel at: %w: %w", err, fi.EINVAL)
	}
	k.mu.Lock()
	for _, r := range k.byKey {
		if a := r.adopted; a != nil {
			ab := uintptr(unsafe.Pointer(&a[0]))
			if ab < base+uintptr(n) && base < ab+uintptr(len(a)) {
				k.mu.Unlock()
				return nil, fmt.Errorf("mr reg kernel at: %#x+%d overlaps an adopted region: %w", base, n, fi.EBUSY)
			}
		}
	}
	k.mu.Unlock()

	mem, err := bpf.NewKernelRegion(n)
	if err != nil {
		return nil, fmt.Errorf("mr reg kernel at: %w: %w", err, fi.ENOMEM)
	}
	copy(mem.Bytes, buf)
	if _, err := unix.MmapPtr(mem.Map.FD(), 0, unsafe.Pointer(&buf[0]), uintptr(n),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		// MAP_FIXED replaces only on success: buf is untouched.
		mem.Close()
		return nil, fmt.Errorf("mr reg kernel at: map the region over %#x: %w: %w", base, err, fi.ENOMEM)
	}
	m, err := d.mrs.Reg(buf, access, offset, requestedKey, flags, context)
	if err != nil {
		restoreAdopted(buf, mem)
		mem.Close()
		return nil, err
	}
	if err := d.addKernelMR(&kernelMR{mem: mem, m: m, adopted: buf}, access, flags); err != nil {
		_ = m.Close() // the mirror's Delete restores buf
		return nil, fmt.Errorf("mr reg kernel at: %w", err)
	}
	return m, nil
}

// restoreAdopted puts buf's bytes back into private anonymous pages at
// buf's address: fresh pages get the bytes elsewhere and mremap moves
// them over buf in one step, so no moment leaves buf unmapped. It does
// nothing if buf no longer maps a BPF map (the application unmapped it,
// or mapped something else there: that is not the provider's to touch).
func restoreAdopted(buf []byte, mem *bpf.KernelRegion) {
	base := uintptr(unsafe.Pointer(&buf[0]))
	if !mapsBPFMap(base, base+uintptr(len(buf))) {
		return
	}
	fresh, err := unix.Mmap(-1, 0, len(buf), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return // the application keeps the shared mapping, still valid
	}
	copy(fresh, mem.Bytes)
	if _, err := unix.MremapPtr(unsafe.Pointer(&fresh[0]), uintptr(len(buf)), unsafe.Pointer(&buf[0]), uintptr(len(buf)),
		unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED); err != nil {
		_ = unix.Munmap(fresh)
	}
}

// vma is one line of /proc/self/maps.
type vma struct {
	start, end uintptr
	perms      string
	inode      uint64
	path       string
}

// vmasCovering returns the mappings over [start, end), in order, or nil
// if some byte of it is not mapped.
func vmasCovering(start, end uintptr) []vma {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []vma
	next := start
	sc := bufio.NewScanner(f)
	for sc.Scan() && next < end {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(lo, 16, 64)
		e, err2 := strconv.ParseUint(hi, 16, 64)
		ino, err3 := strconv.ParseUint(fs[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || uintptr(e) <= next {
			continue
		}
		if uintptr(s) > next {
			return nil // a hole
		}
		v := vma{start: uintptr(s), end: uintptr(e), perms: fs[1], inode: ino}
		if len(fs) > 5 {
			v.path = strings.Join(fs[5:], " ")
		}
		out = append(out, v)
		next = uintptr(e)
	}
	if next < end {
		return nil
	}
	return out
}

// privateAnonymous checks that [start, end) is mapped, readable and
// writable, private and anonymous: no file, and not the brk heap or the
// stack, whose pages hold other objects and which the kernel grows and
// shrinks itself.
func privateAnonymous(start, end uintptr) error {
	vs := vmasCovering(start, end)
	if vs == nil {
		return fmt.Errorf("%#x-%#x is not all mapped", start, end)
	}
	for _, v := range vs {
		if v.perms[:2] != "rw" || v.perms[3] != 'p' || v.inode != 0 || v.path != "" {
			return fmt.Errorf("%#x-%#x is not private anonymous memory (%s %s)", v.start, v.end, v.perms, v.path)
		}
	}
	return nil
}

// mapsBPFMap reports whether [start, end) is all a shared mapping of a
// BPF map.
func mapsBPFMap(start, end uintptr) bool {
	vs := vmasCovering(start, end)
	for _, v := range vs {
		if v.perms[3] != 's' || v.path != "anon_inode:bpf-map" {
			return false
		}
	}
	return vs != nil
}
