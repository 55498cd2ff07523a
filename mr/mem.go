package mr

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

var pageSize = uintptr(os.Getpagesize())

// pageSpan returns the page-aligned range covering b.
func pageSpan(b []byte) (start, length uintptr) {
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start = addr &^ (pageSize - 1)
	end := (addr + uintptr(len(b)) + pageSize - 1) &^ (pageSize - 1)
	return start, end - start
}

// resident reports whether every page under b is backed by physical memory
// now (mincore(2)); FI_MR_ALLOCATED requires it at registration.
func resident(b []byte) (bool, error) {
	start, length := pageSpan(b)
	vec := make([]byte, length/pageSize)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, start, length, uintptr(unsafe.Pointer(&vec[0])))
	runtime.KeepAlive(b)
	if e != 0 {
		return false, e
	}
	for _, v := range vec {
		if v&1 == 0 {
			return false, nil
		}
	}
	return true, nil
}

// populate faults in the page tables under b (madvise MADV_POPULATE_*), as
// fi_mr_refresh asks a provider to "verify and update" the region: it fails
// when part of b is no longer mapped, or not mapped writable when write is
// set.
func populate(b []byte, write bool) error {
	start, length := pageSpan(b)
	advice := uintptr(unix.MADV_POPULATE_READ)
	if write {
		advice = unix.MADV_POPULATE_WRITE
	}
	_, _, e := unix.Syscall(unix.SYS_MADVISE, start, length, advice)
	runtime.KeepAlive(b)
	if e != 0 {
		return e
	}
	return nil
}

// addrOf is the virtual address of b's first byte.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
