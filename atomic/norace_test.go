//go:build !race

package atomic

const raceEnabled = false
