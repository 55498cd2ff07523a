package reliable

import (
	"sync/atomic"
	"unsafe"
)

// mapOpsForScan reads one word of every page of e.ops, which New has just
// made and nothing has written yet but the first ops.
//
// Why: ops is MaxOps ops of 256 bytes (2.25 MiB with the defaults), made
// by one large allocation that the kernel maps page by page on first
// touch, and an op holds pointers (its Request's buffers and context,
// its peer), so every garbage collection scans the whole array, also the
// ops never used. The first cycle after New therefore read hundreds of
// pages nobody had touched, each a page fault (mapping the shared zero
// page) that on the project's 2-core VM, a PVM guest, also traps to the
// hypervisor: 577 of the server's faults in one 100-write fi_rma_bw run
// were under runtime.scanObject, and the Go runtime's third cycle (the
// heap crossing its 4 MiB minimum goal) came while the first window of
// writes ran in one process or the other. Reading the pages here puts
// those faults in fi_endpoint, where the engine's other memory is made.
// A read fault maps the zero page, so this costs page-table entries,
// not memory: the pages an endpoint never uses stay unbacked, as before.
func (e *Engine) mapOpsForScan() {
	if len(e.ops) == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&e.ops[0])), uintptr(len(e.ops))*unsafe.Sizeof(e.ops[0]))
	var x byte
	for i := 0; i < len(b); i += pageSize {
		x |= b[i]
	}
	opsScanSink.Store(uint32(x))
}

// pageSize is the step of mapOpsForScan (the smallest page of the
// platforms xdpfab runs on; larger pages are only read more than once).
const pageSize = 4096

// opsScanSink keeps mapOpsForScan's reads from being optimised away.
var opsScanSink atomic.Uint32
