package memorder

import (
	"sync/atomic"
	"unsafe"
)

// Pointer is Uint64 for a pointer to T: lock-free readers load it with
// sync/atomic, one writer at a time stores it with a release store. On
// x86-64 the store is the collector's write barrier and a MOV, where
// sync/atomic's (atomic.Pointer.Store) is the write barrier and a locked
// XCHG. The store is ordered after the writer's earlier stores; like
// Uint64's, it is not ordered before the writer's later loads (a lock
// taken afterwards orders it).
type Pointer[T any] struct {
	_ [0]*T // no conversion between Pointer types
	v unsafe.Pointer
}

// Load loads the pointer atomically.
func (p *Pointer[T]) Load() *T { return (*T)(atomic.LoadPointer(&p.v)) }

// Store stores v with a release store; the caller is the word's only
// writer at the moment.
func (p *Pointer[T]) Store(v *T) { storePointerRelease(&p.v, unsafe.Pointer(v)) }
