//go:build race

package fabric_test

// raceEnabled: the race detector allocates on its own, so allocation
// counts are only checked without it: `make test` runs the allocation
// guards once more without -race (the Makefile's GUARDS names them).
const raceEnabled = true
