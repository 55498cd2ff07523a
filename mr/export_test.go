package mr

// LimboMax is limboMax, for tests of the pool's bound.
const LimboMax = limboMax

// SameRegion reports whether a and b are registrations of one region
// object: b reused a's.
func SameRegion(a, b *MR) bool { return a.r == b.r }

// SpanKey returns the key of the region a span points into now: the key
// it was looked up by until the region is filled again.
func SpanKey(s *Span) uint64 { return s.MR.r.key }

// RetireBatch is retireBatch: closes stamped for reuse together.
const RetireBatch = retireBatch
