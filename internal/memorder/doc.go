// Package memorder has the one memory-ordering primitive the lock-free
// tables need beyond sync/atomic: a release store, which on x86-64 is a
// plain MOV instead of sync/atomic's locked XCHG. Writers of seqlocked
// words (internal/ktable's slots in BPF maps, av's table) use it for the
// words they write inside a write section, whose bracketing sequence
// updates order them for readers; readers load with sync/atomic.
//
// Under the race detector they are sync/atomic stores (store_other.go),
// so that it sees the happens-before edge a reader's atomic load of the
// word makes, as the real program has it: a word in Go memory may then be
// written with them wherever one writer at a time (serialized by a lock
// or by ownership) publishes what it wrote before, and lock-free readers
// need no total order of the store with the writer's later loads. Uint32,
// Uint64 and Pointer (whose store keeps the collector's write barrier) are
// such words.
package memorder
