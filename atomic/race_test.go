//go:build race

package atomic

// The race detector slows the engine tenfold; keep contention tests short.
const raceEnabled = true
