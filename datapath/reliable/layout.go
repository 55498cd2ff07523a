package reliable

import (
	"unsafe"

	"github.com/xdpfab/xdpfab/internal/prefetch"
)

// cacheLine is the line size the layout is counted in (amd64, arm64).
const cacheLine = 64

// hotEnd is the end of the engine's per-operation state (see Layout in
// Engine's doc): the fields from the start of the Engine to the end of
// its per-operation counters.
const hotEnd = unsafe.Offsetof(Engine{}.stats) + unsafe.Offsetof(counters{}.opsFailed)

// maxHotLines bounds the lines the per-operation state may span
// (TestEngineHotLayout), so a field added there that pushes it over is
// noticed: each line is a miss per operation with thousands of engines.
const maxHotLines = 13

// hintHot asks the CPU for the lines of e's per-operation state at once,
// so that their misses are in flight together instead of one after the
// other as the code reaches them.
func (e *Engine) hintHot() {
	var a [maxHotLines + 1]uintptr
	base := uintptr(unsafe.Pointer(e))
	n := 0
	for l := base &^ (cacheLine - 1); l < base+hotEnd && n < len(a); l += cacheLine {
		a[n] = l
		n++
	}
	prefetch.Addrs(&a[0], n)
}

// submitStart and submitEnd bound Submit's lines after cfg's first (see
// Engine's Layout): from tr to the receive state's first field.
const (
	submitStart = unsafe.Offsetof(Engine{}.tr)
	submitEnd   = unsafe.Offsetof(Engine{}.rxMu)
	// submitCounters is the offset of the counters Submit updates.
	submitCounters = unsafe.Offsetof(Engine{}.stats)
)

// maxSubmitLines bounds the lines hintSubmit asks for
// (TestEngineHotLayout).
const maxSubmitLines = 7

// hintSubmit asks for the lines of e a Submit touches, and only those: the
// response's lines, hintHot's others, are asked for when it arrives (the
// poller's Prefetch), and misses asked for at once contend for the same
// few fill buffers.
func (e *Engine) hintSubmit() {
	var a [maxSubmitLines + 1]uintptr
	base := uintptr(unsafe.Pointer(e))
	a[0] = base // cfg's first line: the fields Submit reads
	n := 1
	for l := (base + submitStart) &^ (cacheLine - 1); l < base+submitEnd && n < len(a)-1; l += cacheLine {
		a[n] = l
		n++
	}
	a[n] = (base + submitCounters) &^ (cacheLine - 1)
	n++
	prefetch.Addrs(&a[0], n)
}

// hintOp asks for the lines Submit touches after taking e.mu, before it
// reads them: the free op it will fill, the peer's state, the packet slot
// and pool list it will take. e.mu is held.
func (e *Engine) hintOp(p *txPeer) {
	var a [12]uintptr
	n := 0
	add := func(ptr unsafe.Pointer, size uintptr) {
		for l := uintptr(ptr) &^ (cacheLine - 1); l < uintptr(ptr)+size && n < len(a); l += cacheLine {
			a[n] = l
			n++
		}
	}
	if k := len(e.freeOps); k > 0 {
		add(unsafe.Pointer(&e.ops[e.freeOps[k-1]]), unsafe.Sizeof(op{}))
	}
	if p != nil {
		add(unsafe.Pointer(p), 2*cacheLine) // Submit's part (TestTxPeerHotLayout)
	}
	if k := len(e.freeSlots); k > 0 {
		add(unsafe.Pointer(e.freeSlots[k-1]), unsafe.Offsetof(txSlot{}.segs)+unsafe.Sizeof(segRef{}))
	}
	add(unsafe.Pointer(e.txPool), cacheLine)
	prefetch.Addrs(&a[0], n)
}
