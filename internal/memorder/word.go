package memorder

import "sync/atomic"

// Uint32 is a word that lock-free readers load with sync/atomic and that
// one writer at a time stores with a release store: a reader that sees a
// value also sees every store its writer made before it. That is all a
// flag or generation published to lock-free readers needs, and on x86-64
// it is a MOV instead of sync/atomic's locked XCHG (~6 ns here, a few per
// registration). What a release store does not give is the order of the
// store before the writer's later loads (a store-load fence, as in
// Dekker's mutual exclusion): a writer that needs the word visible to
// everyone before it reads something others write uses StoreSync, or
// takes a lock afterwards (its locked instruction drains the store
// buffer).
type Uint32 struct{ v uint32 }

// Load loads the word atomically.
func (w *Uint32) Load() uint32 { return atomic.LoadUint32(&w.v) }

// Store stores v with a release store; the caller is the word's only
// writer at the moment.
func (w *Uint32) Store(v uint32) { StoreRelease32(&w.v, v) }

// StoreSync stores v with sync/atomic's sequentially consistent store.
func (w *Uint32) StoreSync(v uint32) { atomic.StoreUint32(&w.v, v) }

// Uint64 is Uint32 for a 64-bit word.
type Uint64 struct{ v uint64 }

// Load loads the word atomically.
func (w *Uint64) Load() uint64 { return atomic.LoadUint64(&w.v) }

// Store stores v with a release store; the caller is the word's only
// writer at the moment.
func (w *Uint64) Store(v uint64) { StoreRelease64(&w.v, v) }
