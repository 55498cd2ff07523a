//go:build !amd64 || race

package memorder

import (
	"sync/atomic"
	"unsafe"
)

// storePointerRelease is sync/atomic's store where a plain one is not a
// release store, and under the race detector (pointer_amd64.go has the
// x86-64 version).
func storePointerRelease(p *unsafe.Pointer, v unsafe.Pointer) { atomic.StorePointer(p, v) }
