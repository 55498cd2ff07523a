//go:build !race

package veth

const raceEnabled = false
