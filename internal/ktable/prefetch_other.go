//go:build !amd64

package ktable

// prefetch is a hint; without the amd64 instruction it does nothing.
func prefetch(addrs *uintptr, n int) {}
