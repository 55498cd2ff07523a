package av

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the transparent huge page size adviseHugeBytes rounds to.
const hugePage = 2 << 20

// adviseHuge asks the kernel to back the 2 MiB-aligned pages inside s's
// memory with transparent huge pages (MADV_HUGEPAGE; honoured where THP
// is "madvise" or "always"), before s is first written. The hash index of
// a large AV is probed at random: with 4 KiB pages nearly every reverse
// lookup of a working set of a few thousand peers misses the TLB, and a
// page walk costs more than the probe. Advice only: on failure, or with
// THP off, the memory stays in small pages.
func adviseHuge(s []word) {
	adviseHugeBytes(unsafe.Pointer(unsafe.SliceData(s)), uintptr(len(s))*unsafe.Sizeof(word{}))
}

// adviseHugeBytes is adviseHuge for the n bytes at p (Go memory the
// caller holds, not yet written).
func adviseHugeBytes(p unsafe.Pointer, n uintptr) {
	if n < 2*hugePage {
		return
	}
	a := uintptr(p)
	i := (a+hugePage-1)&^(hugePage-1) - a // first byte on a huge page boundary
	j := (a+n)&^(hugePage-1) - a          // past the last whole huge page
	if j <= i {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, i)), j-i)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	// Memory the Go heap hands out again (a freed hash index, say) may
	// have been faulted in small pages already, and zeroing it again
	// touched it: MADV_HUGEPAGE then only lets khugepaged collapse it
	// some time later. MADV_COLLAPSE (Linux 6.1) makes the huge pages
	// now (on fresh memory it faults them in, as the first writes would).
	_ = unix.Madvise(b, unix.MADV_COLLAPSE)
}
