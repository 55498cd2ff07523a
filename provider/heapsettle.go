package main

import (
	"runtime"
	"sync"
)

// settleHeapOnce runs one garbage collection when the process's first
// endpoint is enabled (xfgo_ep_control, FI_ENABLE), after its engine is
// made.
//
// Why: the provider's Go runtime starts with the runtime's minimum heap
// goal, 4 MiB, and opening the first endpoint leaves about 5 MiB of
// garbage (cilium/ebpf parsing the XDP object's BTF, netlink replies) beside
// about 6 MiB that stays (the engine's ops, the AF_XDP receive queue, the
// endpoint's ops). So the runtime's third cycle started during fi_enable
// (the engine's 2.25 MiB of ops crossing the goal) and ran on, concurrently,
// into the application's first operations: in fi_rma_bw's 4 KiB writes
// (GODEBUG=gctrace=1) it took 31-112 ms of wall time at 25 % of the Ps,
// with write barriers and mark assists, through the first window of 64
// writes in one process or both. A collection here finishes that cycle
// in fi_enable, frees the set-up garbage for the first operations' buffers
// to reuse (pages already mapped: every fresh page is a fault, and on the
// project's VM a trap to the hypervisor), and sets the next goal at twice
// what stays, above what the first operations allocate. Once per process:
// later endpoints find the heap settled, and a process that opens
// thousands of endpoints does not pay a collection for each.
var settleHeapOnce sync.Once

func settleHeap() { settleHeapOnce.Do(runtime.GC) }
