//go:build amd64 && !race

package memorder

// StoreRelease32 and StoreRelease64 store v at p, ordered after every
// store before them: on x86-64 a plain MOV (stores are not reordered with
// stores), where sync/atomic's store is a locked XCHG, which also orders
// later loads and costs ~20 cycles. Being calls, the compiler neither
// reorders memory operations across them nor drops them as dead stores,
// which a plain Go store to seq before the slot's other stores could be.

//go:noescape
func StoreRelease32(p *uint32, v uint32)

//go:noescape
func StoreRelease64(p *uint64, v uint64)
