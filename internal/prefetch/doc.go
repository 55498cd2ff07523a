// Package prefetch asks the CPU to bring cache lines in ahead of their
// use, without waiting for them: writers that touch many random lines in
// a row (internal/ktable's PutMany, av's inserts into a large hash index)
// give it the addresses of a group first, so that the group's cache
// misses and page walks are in flight together instead of one after the
// other.
package prefetch
