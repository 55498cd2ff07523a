package main

import (
	"runtime"
	"sync"
)

// settleHeapOnce runs one garbage collection when the process's first
// endpoint has been enabled (xfgo_ep_control, FI_ENABLE).
//
// Why: the provider's Go runtime starts at the runtime's minimum heap
// goal, 4 MiB. Opening the first endpoint leaves a few MiB of garbage
// (cilium/ebpf parsing the XDP object's BTF, netlink replies) beside about
// 6 MiB that stays (the engine's ops array, 2.25 MiB; the AF_XDP receive
// queue, 2 MiB; the endpoint's ops, 1.5 MiB), so the runtime's third cycle
// started in fi_enable and, running concurrently at a quarter of the Ps,
// went on into the application's first operations, with write barriers on
// and mark assists. Its scan read the engine's ops array, which nothing
// had touched beyond its first ops (an op holds pointers, so the whole
// array is scanned): each page a fault, on the project's VM (a PVM guest)
// also a trap to the hypervisor, 577 faults under runtime.scanObject in
// one process of a 100-write fi_rma_bw run. The first window of 4 KiB
// writes took up to 63 ms where later ones take 1-2 ms.
//
// A collection here finishes that cycle in fi_enable, frees the set-up
// garbage so that the first operations' buffers reuse pages already mapped
// (GOGC=off, which leaves them fresh pages, made the 100-write run 2-5x
// slower), and sets the next goal at twice what stays, above what the
// first operations allocate, so that no cycle runs in them. Once per
// process: later endpoints find the heap settled, and a process that opens
// thousands of endpoints does not pay a collection for each.
var settleHeapOnce sync.Once

func settleHeap() { settleHeapOnce.Do(runtime.GC) }
