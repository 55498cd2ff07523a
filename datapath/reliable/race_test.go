//go:build race

package reliable

// raceEnabled scales long tests down under the race detector.
const raceEnabled = true
