//go:build amd64 && !race

package memorder

import "unsafe"

// storePointerRelease stores v at p with a plain Go store: the compiler
// puts the collector's write barrier before it, as it does for
// atomic.StorePointer, and the store itself is a MOV, which x86-64 keeps
// in order after every earlier store. Kept out of line, the call is a
// point the compiler moves no memory operation of the caller across, so
// the store cannot be reordered or dropped at compile time either.
//
//go:noinline
func storePointerRelease(p *unsafe.Pointer, v unsafe.Pointer) { *p = v }
