package fabric

import "math/bits"

// bufPool recycles the buffers that hold unexpected eager messages, in
// power-of-two size classes, so that a message arriving before its
// receive allocates nothing once warm. Each class keeps at most
// poolClassBytes of idle buffers (and at least poolMinKeep), so the pool
// never holds more than a few MiB.
type bufPool struct {
	classes [poolClasses][][]byte
}

const (
	poolMinShift   = 6  // 64 bytes
	poolClasses    = 15 // ... to 1 MiB
	poolClassBytes = 1 << 20
	poolMinKeep    = 4
)

func poolClass(n int) int {
	if n <= 1<<poolMinShift {
		return 0
	}
	return bits.Len(uint(n-1)) - poolMinShift
}

// get returns a buffer of length n.
func (p *bufPool) get(n int) []byte {
	c := poolClass(n)
	if c >= poolClasses {
		return make([]byte, n)
	}
	if l := p.classes[c]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = nil
		p.classes[c] = l[:len(l)-1]
		return b[:n]
	}
	return make([]byte, n, 1<<(c+poolMinShift))
}

// put gives b back (nil is ignored).
func (p *bufPool) put(b []byte) {
	if b == nil {
		return
	}
	c := poolClass(cap(b))
	if c >= poolClasses || cap(b) != 1<<(c+poolMinShift) {
		return // not one of ours
	}
	if keep := max(poolMinKeep, poolClassBytes>>(c+poolMinShift)); len(p.classes[c]) >= keep {
		return
	}
	p.classes[c] = append(p.classes[c], b[:0])
}
