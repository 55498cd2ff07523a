//go:build !amd64 || race

package ktable

import (
	"unsafe"

	"github.com/xdpfab/xdpfab/internal/memorder"
)

// storeSlot4 writes a compact slot's 16 bytes as the seqlock wants them
// (write4; slot4_amd64.s has the x86-64 version): the odd seq, the
// payload, the even seq, each seq store ordered after the stores before it.
func storeSlot4(s *avt4Slot, odd, mid uint32, lo uint64, even uint32) {
	memorder.StoreRelease32(seqPort(s), odd)
	*(*uint32)(unsafe.Add(unsafe.Pointer(s), 4)) = mid
	*(*uint64)(unsafe.Add(unsafe.Pointer(s), 8)) = lo
	memorder.StoreRelease32(seqPort(s), even)
}
