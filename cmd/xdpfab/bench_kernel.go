package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// The kernel-resident phases of bench run (docs/xdp-atomics.md): the
// target registers, besides its region, a kernel-resident one under
// --key + 1 (Domain.MRRegKernel; on AF_XDP only), whose atomics its XDP
// program executes and answers itself. The client measures a fetch-add
// and a CSWAP on it one in flight, against the UDP ping-pong, and
// fetch-adds at --depth in flight. The target publishes its process CPU
// time (getrusage) in its ordinary region at benchCPUOff; the client reads
// it around the two pipelined fetch-add phases, user-space and
// kernel-resident, and reports the target's CPU time per op of each, and
// its own (the initiator's, getrusage around the phase): the initiator is
// what bounds the kernel-resident rate, and its CPU time per op moves less
// with other work on the machine than the rate does.
const (
	benchKernelLen = 4096
	benchCPUOff    = benchWriteOff - 8 // uint64 ns of target CPU time, little-endian
)

// benchKernelTarget is the target's kernel-resident region.
type benchKernelTarget struct {
	region *mr.MR
	mem    []byte
}

// openKernel registers the kernel-resident region if the domain can have
// one; the phases are skipped otherwise.
func (t *benchTarget) openKernel(o *benchOptions) {
	m, mem, err := t.dom.MRRegKernel(benchKernelLen, fi.REMOTE_READ|fi.REMOTE_WRITE, o.key+1, 0, nil)
	if err == nil {
		t.kernel = benchKernelTarget{region: m, mem: mem}
	}
}

func (t *benchTarget) closeKernel() error {
	if t.kernel.region == nil {
		return nil
	}
	return t.kernel.region.Close()
}

// publishCPU writes the process's CPU time (user + system) where clients
// read it, at most once per benchCPUEvery: the serve loop calls it on
// every round, and getrusage, a system call (1-2 µs in a VM), on every
// round put that into each tagged ping-pong round trip whenever the two
// processes shared a core. An idle target's blocking read returns every
// 100 ms, so the figure was never fresher than that between rounds; the
// phases it is read for last a second or so.
func (t *benchTarget) publishCPU() {
	now := time.Now()
	if now.Sub(t.cpuPublished) < benchCPUEvery {
		return
	}
	t.cpuPublished = now
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return
	}
	ns := ru.Utime.Nano() + ru.Stime.Nano()
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&t.mem[benchCPUOff])), uint64(ns))
}

// benchCPUEvery is how often the target publishes its CPU time at most.
const benchCPUEvery = time.Millisecond

// readTargetCPU reads the CPU time the target published. An atomic read,
// not an RMA read: the target executes it with an atomic load, as
// publishCPU stores it (an RMA read copies the bytes, which the race
// detector rightly reports against the store).
func (c *benchClient) readTargetCPU() (uint64, error) {
	buf := c.results[0][:8]
	if err := c.ep.FetchAtomic(c.one, 1, mr.Desc{}, buf, mr.Desc{}, c.peer, benchCPUOff, c.o.key,
		fatomic.UINT64, fatomic.ATOMIC_READ, c.ctxs[0]); err != nil {
		return 0, err
	}
	_, failed, err := c.reap(c.comps[:1])
	if err != nil {
		return 0, err
	}
	if failed != nil {
		return 0, fmt.Errorf("atomic read of the target's CPU time: %w", failed.Err)
	}
	return binary.LittleEndian.Uint64(buf), nil
}

// withTargetCPU runs a phase and records the target's CPU time per op,
// and the initiator's.
// The target publishes it at least every 100 ms (its serve loop), so the
// phase is followed by a pause that lets it catch up.
func (c *benchClient) withTargetCPU(run func() (*phaseResult, error)) func() (*phaseResult, error) {
	return func() (*phaseResult, error) {
		time.Sleep(150 * time.Millisecond)
		before, err := c.readTargetCPU()
		if err != nil {
			return nil, err
		}
		var ru0, ru1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		st0 := c.ep.Stats()
		r, err := run()
		if err != nil || r == nil || r.Ops == 0 {
			return r, err
		}
		st1 := c.ep.Stats()
		r.PacketsPerOp = float64(st1.TxRequests+st1.Retransmits-st0.TxRequests-st0.Retransmits) / float64(r.Ops)
		if unix.Getrusage(unix.RUSAGE_SELF, &ru1) == nil {
			r.InitiatorUserPerOp = float64(ru1.Utime.Nano()-ru0.Utime.Nano()) / float64(r.Ops)
			r.InitiatorSysPerOp = float64(ru1.Stime.Nano()-ru0.Stime.Nano()) / float64(r.Ops)
		}
		time.Sleep(150 * time.Millisecond)
		after, err := c.readTargetCPU()
		if err != nil {
			return r, err
		}
		r.TargetCPUPerOp = float64(after-before) / float64(r.Ops)
		return r, nil
	}
}

// hasKernelRegion reports whether the target has the kernel-resident
// region (a target on the kernel UDP socket has none): an RMA read of it
// succeeds.
func (c *benchClient) hasKernelRegion() bool {
	if err := c.ep.Read(c.results[0], mr.Desc{}, c.peer, 0, c.o.key+1, c.ctxs[0]); err != nil {
		return false
	}
	_, failed, err := c.reap(c.comps[:1])
	return err == nil && failed == nil
}

type kernelPhase struct {
	name string
	dst  **phaseResult
	run  func() (*phaseResult, error)
	adds bool
}

func (c *benchClient) kernelPhases(rep *benchReport,
	pipe func(name string, depth, opBytes int, batch bool, post func(int, bool) error) func() (*phaseResult, error)) []kernelPhase {
	key := c.o.key + 1
	fetchAdd := func(slot int, _ bool) error {
		return c.ep.FetchAtomic(c.one, 1, mr.Desc{}, c.results[slot], mr.Desc{}, c.peer, 0,
			key, fatomic.UINT64, fatomic.SUM, c.ctxs[slot])
	}
	zero := make([]byte, 8)
	cswap := func(slot int, _ bool) error {
		return c.ep.CompareAtomic(c.one, 1, mr.Desc{}, zero, mr.Desc{}, c.results[slot], mr.Desc{}, c.peer, 8,
			key, fatomic.UINT64, fatomic.CSWAP, c.ctxs[slot])
	}
	// Bursts posted with FI_MORE, as the user-space FI_MORE phase does:
	// the engine packs a burst into full packets (16 fetch-adds each)
	// instead of sending the first requests of every refill alone. The
	// messages are made once, one per slot (fetchAddMsgs).
	fetchAddMore := c.fetchAddMsgs(0, key)
	lat := "kernel-resident fetch-add, 1 in flight"
	cas := "kernel-resident CSWAP, 1 in flight"
	rate := fmt.Sprintf("kernel-resident fetch-add, %d in flight", c.o.depth)
	more := rate + ", FI_MORE"
	return []kernelPhase{
		{lat, &rep.KernelFetchAddLatency, pipe(lat, 1, 8, false, fetchAdd), false},
		{cas, &rep.KernelCSwapLatency, pipe(cas, 1, 8, false, cswap), false},
		{rate, &rep.KernelFetchAddRate, c.withTargetCPU(pipe(rate, c.o.depth, 8, false, fetchAdd)), false},
		{more, &rep.KernelFetchAddBatchedRate, c.withTargetCPU(pipe(more, c.o.depth, 8, true, fetchAddMore)), false},
	}
}

func kernelRows(r *benchReport, row func(name string, p *phaseResult, unit, extra string), rtt func(*phaseResult) string) {
	row("kernel-resident fetch-add uint64, 1 in flight", r.KernelFetchAddLatency, "ops/s", rtt(r.KernelFetchAddLatency))
	row("kernel-resident CSWAP uint64, 1 in flight", r.KernelCSwapLatency, "ops/s", rtt(r.KernelCSwapLatency))
	row(fmt.Sprintf("kernel-resident fetch-add uint64, %d in flight", r.Depth), r.KernelFetchAddRate, "ops/s", "")
	row(fmt.Sprintf("kernel-resident fetch-add uint64, %d in flight, FI_MORE", r.Depth), r.KernelFetchAddBatchedRate, "ops/s", "")
}

// kernelRatios prints the kernel-resident figures against their
// references.
func kernelRatios(w io.Writer, r *benchReport) {
	pp := r.UDPPingPong
	for _, k := range []struct {
		name string
		p    *phaseResult
	}{{"kernel-resident fetch-add", r.KernelFetchAddLatency}, {"kernel-resident CSWAP", r.KernelCSwapLatency}} {
		if k.p != nil && k.p.Latency != nil && pp != nil && pp.Latency != nil {
			fmt.Fprintf(w, "  %s round trip p50 = %.2f× UDP ping-pong p50\n", k.name, k.p.Latency.P50/pp.Latency.P50)
		}
	}
	if k, u := r.KernelFetchAddRate, r.FetchAddRate; k != nil && u != nil && u.OpsPerSec > 0 {
		fmt.Fprintf(w, "  kernel-resident fetch-add rate = %.2f× user-space fetch-add rate (%d in flight)\n", k.OpsPerSec/u.OpsPerSec, r.Depth)
		if m := r.KernelFetchAddBatchedRate; m != nil && k.OpsPerSec > 0 {
			fmt.Fprintf(w, "  kernel-resident fetch-add rate with FI_MORE bursts = %.2f× without\n", m.OpsPerSec/k.OpsPerSec)
		}
		if u.TargetCPUPerOp > 0 {
			fmt.Fprintf(w, "  target process CPU per fetch-add: user space %.0f ns, XDP %.0f ns (%.3f×; softirq time is not the process's)\n",
				u.TargetCPUPerOp, k.TargetCPUPerOp, k.TargetCPUPerOp/u.TargetCPUPerOp)
		}
	}
	for _, k := range []struct {
		name string
		p    *phaseResult
	}{{"user-space", r.FetchAddRate}, {"kernel-resident", r.KernelFetchAddRate}, {"kernel-resident FI_MORE", r.KernelFetchAddBatchedRate}} {
		if k.p != nil && k.p.InitiatorUserPerOp+k.p.InitiatorSysPerOp > 0 {
			fmt.Fprintf(w, "  initiator CPU per %s fetch-add (%d in flight): user %.0f ns, system %.0f ns; %.3f request packets per op\n",
				k.name, r.Depth, k.p.InitiatorUserPerOp, k.p.InitiatorSysPerOp, k.p.PacketsPerOp)
		}
	}
}
