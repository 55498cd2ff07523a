package bpf

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

// BenchmarkKServeFetchAdds is the program's own time (the kernel's
// BPF_PROG_TEST_RUN clock, not the test's) to serve a request of
// wire.MaxOps uint64 fetch-adds on one page, as `xdpfab bench` sends
// them at 64 in flight: per packet, and per op (op-ns). On veth the
// initiator's TX kick runs it, so it is part of the initiator's system
// time per kernel-resident op.
func BenchmarkKServeFetchAdds(b *testing.B) {
	for _, n := range []int{1, 4, wire.MaxOps} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) { benchKServeFetchAdds(b, n) })
	}
}

func benchKServeFetchAdds(b *testing.B, nops int) {
	e := newKserveEnv(b, peer4, portKS4)
	ops := make([]ksOp, nops)
	for i := range ops {
		ops[i] = ksOp{opcode: wire.OpFetchAtomic, dt: atomic.UINT64, op: atomic.SUM, count: 1, operand: u64s(1)}
	}
	var total time.Duration
	for b.Loop() {
		// A new sequence number each time: served, not answered from the ring.
		frame := udp(peer4, portKS4, encodeRequest(e.ses, e.next, 0, ops)).build()
		e.next++
		act, d, err := e.objs.XdpfabXdp.Benchmark(frame, 1, nil)
		require.NoError(b, err)
		if act != xdpTx {
			b.Fatalf("action %d, want XDP_TX", act)
		}
		total += d
	}
	b.ReportMetric(float64(total)/float64(b.N), "prog-ns/packet")
	b.ReportMetric(float64(total)/float64(b.N)/float64(len(ops)), "prog-ns/op")
}
