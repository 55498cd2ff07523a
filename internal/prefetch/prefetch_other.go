//go:build !amd64

package prefetch

// Addrs is a hint; without the amd64 instruction it does nothing.
func Addrs(addrs *uintptr, n int) {}
