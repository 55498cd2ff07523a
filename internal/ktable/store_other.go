//go:build !amd64

package ktable

import "sync/atomic"

// storeRelease32 and storeRelease64 store v at p after every store
// before them (store_amd64.go has the cheaper x86-64 version).
func storeRelease32(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
func storeRelease64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
