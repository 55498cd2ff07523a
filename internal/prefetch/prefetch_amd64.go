package prefetch

// Addrs asks the CPU to bring the cache lines at addrs[0..n) in,
// without waiting for them: PREFETCHT0 retires at once, where a load
// whose value is kept (the read-ahead PutMany did before) holds its place
// in the reorder buffer until the line arrives, so only a few keys' misses
// overlapped. It never faults: an address is only a hint.
//
//go:noescape
func Addrs(addrs *uintptr, n int)
