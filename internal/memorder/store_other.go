//go:build !amd64 || race

package memorder

import "sync/atomic"

// StoreRelease32 and StoreRelease64 store v at p after every store
// before them (store_amd64.go has the cheaper x86-64 version).
func StoreRelease32(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
func StoreRelease64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
