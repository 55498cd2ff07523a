package reliable

import "math/bits"

// bufPool hands out byte buffers in size classes half a power of two
// apart (64, 96, 128, 192, ... 64 KiB) and takes them back for reuse, so
// that a packet costs memory near its own size and, once warm, get and put
// do not allocate. It is how the engine keeps per-peer memory bounded by
// what is in flight or cached: request packets in flight (initiator) and
// cached responses and held requests (target) each take a buffer of their
// size from one pool per engine side, shared by every peer, instead of a
// Window of MaxPacket buffers per peer.
//
// limit bounds the bytes handed out and not yet returned (0: unbounded);
// get fails when a buffer would exceed it. Idle buffers kept for reuse are
// capped per class (maxIdle bytes, at least a few buffers) and beyond that
// left to the garbage collector, so a burst does not pin its peak.
//
// Not safe for concurrent use: each engine side guards its own pool.
type bufPool struct {
	// The byte counts first: with them the small classes' lists, which
	// request packets and small responses take, share get's first line.
	inUse   int // bytes (class sizes) handed out
	idle    int // bytes in free
	limit   int
	maxIdle int
	free    [numClasses][][]byte
}

const (
	minClassShift = 6 // 64 bytes
	numClasses    = 21
	// poolMinIdle buffers of a class are kept even beyond maxIdle.
	poolMinIdle = 4
)

// classOf returns the class of a buffer of n bytes (n ≤ 64 KiB).
func classOf(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	b := bits.Len(uint(n - 1)) // 1<<(b-1) < n <= 1<<b
	if n <= 3<<(b-2) {
		return 2*(b-minClassShift) - 1
	}
	return 2 * (b - minClassShift)
}

// classSize returns the buffer size of class c.
func classSize(c int) int {
	if c&1 == 0 {
		return 1 << (minClassShift + c/2)
	}
	return 3 << (minClassShift + (c+1)/2 - 2)
}

// newBufPool returns a pool handing out at most limit bytes at once (0:
// unbounded) and keeping at most maxIdle idle bytes per class.
func newBufPool(limit, maxIdle int) *bufPool {
	return &bufPool{limit: limit, maxIdle: maxIdle}
}

// get returns a buffer of at least n bytes (its full class size, len ==
// cap), or false when the limit does not allow it.
func (p *bufPool) get(n int) ([]byte, bool) {
	c := classOf(n)
	if c >= numClasses {
		return nil, false
	}
	size := classSize(c)
	if p.limit > 0 && p.inUse+size > p.limit {
		return nil, false
	}
	p.inUse += size
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.free[c] = l[:len(l)-1]
		p.idle -= size
		return b, true
	}
	return make([]byte, size), true
}

// fits reports whether get(n) would succeed now.
func (p *bufPool) fits(n int) bool {
	c := classOf(n)
	return c < numClasses && (p.limit == 0 || p.inUse+classSize(c) <= p.limit)
}

// put gives back a buffer get returned (whole: len and cap as handed out).
func (p *bufPool) put(b []byte) {
	c := classOf(cap(b))
	size := classSize(c)
	if c >= numClasses || size != cap(b) {
		panic("reliable: buffer returned to the wrong pool")
	}
	p.inUse -= size
	if l := p.free[c]; len(l) < poolMinIdle || (len(l)+1)*size <= p.maxIdle {
		p.free[c] = append(l, b[:size])
		p.idle += size
	}
}
