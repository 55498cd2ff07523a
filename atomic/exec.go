package atomic

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"
)

var le = binary.LittleEndian

// valueOp is one operation on one element's bits: given the target's old
// value, the operand and the compare operand, it returns the new value and
// whether to store it.
type valueOp[T any] func(old, buf, cmp T) (T, bool)

// kernel executes one (op, datatype) over a whole request. The caller has
// checked the lengths: target is a non-empty multiple of the element size,
// operand and compare are nil or as long as target, result is nil or at
// least as long.
type kernel func(target, operand, compare, result []byte)

// u128 is a 16-byte element: lo holds bytes 0-7, hi bytes 8-15, both
// little-endian.
type u128 struct{ lo, hi uint64 }

// u256 is a 32-byte element (LONG_DOUBLE_COMPLEX): real, then imaginary.
type u256 struct{ re, im u128 }

func load128(b []byte) u128 {
	_ = b[15]
	return u128{le.Uint64(b), le.Uint64(b[8:])}
}

func store128(b []byte, v u128) {
	_ = b[15]
	le.PutUint64(b, v.lo)
	le.PutUint64(b[8:], v.hi)
}

func load256(b []byte) u256 {
	_ = b[31]
	return u256{load128(b), load128(b[16:])}
}

func store256(b []byte, v u256) {
	_ = b[31]
	store128(b, v.re)
	store128(b[16:], v.im)
}

// Elements that cannot be updated with one atomic instruction are read,
// computed and written under one of these locks, chosen by a hash of the
// element's address, so that all executions on the same element
// serialize. A stripe guards every target element whose address hashes to
// it. The padding keeps two locks off one cache line.
const stripeBits = 8

var stripes [1 << stripeBits]struct {
	sync.Mutex
	_ [64 - unsafe.Sizeof(sync.Mutex{})]byte
}

func stripeFor(p *byte) *sync.Mutex {
	a := uint64(uintptr(unsafe.Pointer(p)))
	return &stripes[(a*0x9E3779B97F4A7C15)>>(64-stripeBits)].Mutex
}

func aligned(p *byte, n uintptr) bool {
	return nativeLittleEndian && uintptr(unsafe.Pointer(p))%n == 0
}

func kernel8(f valueOp[uint8]) kernel {
	return func(t, b, c, r []byte) {
		for i := range t {
			var bv, cv uint8
			if b != nil {
				bv = b[i]
			}
			if c != nil {
				cv = c[i]
			}
			mu := stripeFor(&t[i])
			mu.Lock()
			old := t[i]
			if nv, ok := f(old, bv, cv); ok {
				t[i] = nv
			}
			mu.Unlock()
			if r != nil {
				r[i] = old
			}
		}
	}
}

func kernel16(f valueOp[uint16]) kernel {
	return func(t, b, c, r []byte) {
		for off := 0; off+2 <= len(t); off += 2 {
			var bv, cv uint16
			if b != nil {
				bv = le.Uint16(b[off:])
			}
			if c != nil {
				cv = le.Uint16(c[off:])
			}
			e := t[off : off+2 : off+2]
			mu := stripeFor(&e[0])
			mu.Lock()
			old := le.Uint16(e)
			if nv, ok := f(old, bv, cv); ok {
				le.PutUint16(e, nv)
			}
			mu.Unlock()
			if r != nil {
				le.PutUint16(r[off:], old)
			}
		}
	}
}

// wordOp is an operation that one sync/atomic call performs on an aligned
// word, returning the old value: faster than a compare-and-swap loop and
// never retried under contention.
type wordOp[T any] func(w *T, b T) (old T)

// wordOp32 and wordOp64 return the single-instruction forms of the integer
// operations that have one, or nil.
func wordOp32(op Op) wordOp[uint32] {
	switch op {
	case SUM:
		return func(w *uint32, b uint32) uint32 { return atomic.AddUint32(w, b) - b }
	case BOR:
		return atomic.OrUint32
	case BAND:
		return atomic.AndUint32
	case ATOMIC_WRITE:
		return atomic.SwapUint32
	case ATOMIC_READ:
		return func(w *uint32, _ uint32) uint32 { return atomic.LoadUint32(w) }
	}
	return nil
}

func wordOp64(op Op) wordOp[uint64] {
	switch op {
	case SUM:
		return func(w *uint64, b uint64) uint64 { return atomic.AddUint64(w, b) - b }
	case BOR:
		return atomic.OrUint64
	case BAND:
		return atomic.AndUint64
	case ATOMIC_WRITE:
		return atomic.SwapUint64
	case ATOMIC_READ:
		return func(w *uint64, _ uint64) uint64 { return atomic.LoadUint64(w) }
	}
	return nil
}

// kernel32 builds the kernel of a 4-byte type; fast, if not nil, replaces
// f on aligned words.
func kernel32(f valueOp[uint32], fast wordOp[uint32]) kernel {
	return func(t, b, c, r []byte) {
		for off := 0; off+4 <= len(t); off += 4 {
			var bv, cv uint32
			if b != nil {
				bv = le.Uint32(b[off:])
			}
			if c != nil {
				cv = le.Uint32(c[off:])
			}
			e := t[off : off+4 : off+4]
			var old uint32
			if fast != nil && aligned(&e[0], 4) {
				old = fast((*uint32)(unsafe.Pointer(&e[0])), bv)
			} else {
				old = rmw32(e, f, bv, cv)
			}
			if r != nil {
				le.PutUint32(r[off:], old)
			}
		}
	}
}

// rmw32 applies f to one 4-byte element and returns the old value: a
// compare-and-swap loop on an aligned word, so it is atomic also against
// sync/atomic users of that word, else under the element's stripe lock.
func rmw32(e []byte, f valueOp[uint32], b, c uint32) uint32 {
	if aligned(&e[0], 4) {
		w := (*uint32)(unsafe.Pointer(&e[0]))
		for {
			old := atomic.LoadUint32(w)
			nv, ok := f(old, b, c)
			if !ok || atomic.CompareAndSwapUint32(w, old, nv) {
				return old
			}
		}
	}
	mu := stripeFor(&e[0])
	mu.Lock()
	old := le.Uint32(e)
	if nv, ok := f(old, b, c); ok {
		le.PutUint32(e, nv)
	}
	mu.Unlock()
	return old
}

// kernel64 builds the kernel of an 8-byte type; fast, if not nil,
// replaces f on aligned words.
func kernel64(f valueOp[uint64], fast wordOp[uint64]) kernel {
	return func(t, b, c, r []byte) {
		for off := 0; off+8 <= len(t); off += 8 {
			var bv, cv uint64
			if b != nil {
				bv = le.Uint64(b[off:])
			}
			if c != nil {
				cv = le.Uint64(c[off:])
			}
			e := t[off : off+8 : off+8]
			var old uint64
			if fast != nil && aligned(&e[0], 8) {
				old = fast((*uint64)(unsafe.Pointer(&e[0])), bv)
			} else {
				old = rmw64(e, f, bv, cv)
			}
			if r != nil {
				le.PutUint64(r[off:], old)
			}
		}
	}
}

// rmw64 is rmw32 for 8-byte elements; the lock-free path needs 8-byte
// alignment.
func rmw64(e []byte, f valueOp[uint64], b, c uint64) uint64 {
	if aligned(&e[0], 8) {
		w := (*uint64)(unsafe.Pointer(&e[0]))
		for {
			old := atomic.LoadUint64(w)
			nv, ok := f(old, b, c)
			if !ok || atomic.CompareAndSwapUint64(w, old, nv) {
				return old
			}
		}
	}
	mu := stripeFor(&e[0])
	mu.Lock()
	old := le.Uint64(e)
	if nv, ok := f(old, b, c); ok {
		le.PutUint64(e, nv)
	}
	mu.Unlock()
	return old
}

func kernel128(f valueOp[u128]) kernel {
	return func(t, b, c, r []byte) {
		for off := 0; off+16 <= len(t); off += 16 {
			var bv, cv u128
			if b != nil {
				bv = load128(b[off:])
			}
			if c != nil {
				cv = load128(c[off:])
			}
			e := t[off : off+16 : off+16]
			mu := stripeFor(&e[0])
			mu.Lock()
			old := load128(e)
			if nv, ok := f(old, bv, cv); ok {
				store128(e, nv)
			}
			mu.Unlock()
			if r != nil {
				store128(r[off:], old)
			}
		}
	}
}

func kernel256(f valueOp[u256]) kernel {
	return func(t, b, c, r []byte) {
		for off := 0; off+32 <= len(t); off += 32 {
			var bv, cv u256
			if b != nil {
				bv = load256(b[off:])
			}
			if c != nil {
				cv = load256(c[off:])
			}
			e := t[off : off+32 : off+32]
			mu := stripeFor(&e[0])
			mu.Lock()
			old := load256(e)
			if nv, ok := f(old, bv, cv); ok {
				store256(e, nv)
			}
			mu.Unlock()
			if r != nil {
				store256(r[off:], old)
			}
		}
	}
}

// wordKernel32 and wordKernel64 pick the kernel of a 4- or 8-byte integer
// op: SUM and CSWAP, the most common remote atomics, get loops with the
// atomic instruction inlined; the other ops with a one-instruction form
// use it; the rest use the compare-and-swap loop.
func wordKernel32(op Op, f valueOp[uint32]) kernel {
	slow := kernel32(f, wordOp32(op))
	switch op {
	case SUM:
		return func(t, b, c, r []byte) {
			if !aligned(&t[0], 4) {
				slow(t, b, c, r)
				return
			}
			b = b[:len(t)]
			for off := 0; off+4 <= len(t); off += 4 {
				bv := le.Uint32(b[off:])
				old := atomic.AddUint32((*uint32)(unsafe.Pointer(&t[off])), bv) - bv
				if r != nil {
					le.PutUint32(r[off:], old)
				}
			}
		}
	case CSWAP:
		return func(t, b, c, r []byte) {
			if !aligned(&t[0], 4) {
				slow(t, b, c, r)
				return
			}
			b, c, r = b[:len(t)], c[:len(t)], r[:len(t)]
			for off := 0; off+4 <= len(t); off += 4 {
				w := (*uint32)(unsafe.Pointer(&t[off]))
				bv, cv := le.Uint32(b[off:]), le.Uint32(c[off:])
				old := atomic.LoadUint32(w)
				for old == cv && !atomic.CompareAndSwapUint32(w, cv, bv) {
					old = atomic.LoadUint32(w)
				}
				le.PutUint32(r[off:], old)
			}
		}
	}
	return slow
}

func wordKernel64(op Op, f valueOp[uint64]) kernel {
	slow := kernel64(f, wordOp64(op))
	switch op {
	case SUM:
		return func(t, b, c, r []byte) {
			if !aligned(&t[0], 8) {
				slow(t, b, c, r)
				return
			}
			b = b[:len(t)]
			for off := 0; off+8 <= len(t); off += 8 {
				bv := le.Uint64(b[off:])
				old := atomic.AddUint64((*uint64)(unsafe.Pointer(&t[off])), bv) - bv
				if r != nil {
					le.PutUint64(r[off:], old)
				}
			}
		}
	case CSWAP:
		return func(t, b, c, r []byte) {
			if !aligned(&t[0], 8) {
				slow(t, b, c, r)
				return
			}
			b, c, r = b[:len(t)], c[:len(t)], r[:len(t)]
			for off := 0; off+8 <= len(t); off += 8 {
				w := (*uint64)(unsafe.Pointer(&t[off]))
				bv, cv := le.Uint64(b[off:]), le.Uint64(c[off:])
				old := atomic.LoadUint64(w)
				for old == cv && !atomic.CompareAndSwapUint64(w, cv, bv) {
					old = atomic.LoadUint64(w)
				}
				le.PutUint64(r[off:], old)
			}
		}
	}
	return slow
}
