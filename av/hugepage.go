package av

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the transparent huge page size madviseHuge rounds to.
const hugePage = 2 << 20

// adviseHuge asks the kernel to back the 2 MiB-aligned pages inside s's
// memory with transparent huge pages (MADV_HUGEPAGE; honoured where THP
// is "madvise" or "always"), before s is first written. The hash index of
// a large AV is probed at random: with 4 KiB pages nearly every reverse
// lookup of a working set of a few thousand peers misses the TLB, and a
// page walk costs more than the probe. Advice only: on failure, or with
// THP off, the memory stays in small pages.
func adviseHuge(s []word) {
	n := uintptr(len(s)) * unsafe.Sizeof(word{})
	if n < 2*hugePage {
		return
	}
	const w = unsafe.Sizeof(word{})
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	i := ((p+hugePage-1)&^(hugePage-1) - p) / w // first element on a huge page boundary
	j := ((p+n)&^(hugePage-1) - p) / w          // past the last whole huge page
	if j <= i {
		return
	}
	_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Pointer(&s[i])), (j-i)*w), unix.MADV_HUGEPAGE)
}
