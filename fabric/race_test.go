//go:build race

package fabric_test

// raceEnabled: the race detector allocates on its own, so allocation
// counts are only checked without it.
const raceEnabled = true
