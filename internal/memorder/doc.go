// Package memorder has the one memory-ordering primitive the lock-free
// tables need beyond sync/atomic: a release store, which on x86-64 is a
// plain MOV instead of sync/atomic's locked XCHG. Writers of seqlocked
// words (internal/ktable's slots in BPF maps, av's table) use it for the
// words they write inside a write section, whose bracketing sequence
// updates order them for readers; readers load with sync/atomic.
//
// The race detector does not see these stores (they are assembly on
// x86-64): only words that readers validate with a sequence counter, or
// that live outside Go memory, may be written with them.
package memorder
