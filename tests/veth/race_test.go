//go:build race

package veth

// raceEnabled scales the long tagged tests down under the race detector.
const raceEnabled = true
