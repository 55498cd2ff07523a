package bpf

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

// coldEvict is bigger than a core's L2 cache (1 MiB on the machines
// measured): writing it between two runs leaves the program's maps and
// code about as cold as a veth round trip leaves them, where both
// processes and the kernel's send and receive paths run between two of
// the program's packets.
const coldEvict = 4 << 20

// portCompact is a strict port bound to self4 whose AV (avCompact) has a
// compact peer table holding peer4, as an AV of IPv4 peers starts.
const (
	portCompact = 4797
	avCompact   = 2
)

// BenchmarkProgramCold runs the program on one frame at a time with the
// caches evicted in between and reports the kernel's own time of each
// BPF_PROG_TEST_RUN (repeat 1): median and 90th percentile. Over veth,
// where the program's BPF run-time stats during `xdpfab bench` say
// 300-700 ns a packet against ~100 for BenchmarkProgram's warm runs,
// each packet finds the maps about this cold: the cache lines and pages
// the program touches cost more than its instructions (package doc,
// "Cost").
func BenchmarkProgramCold(b *testing.B) {
	e := newKserveEnv(b, peer4, portKS4)
	peers := newAVTable(b, e.objs.AvMap, avCompact, true)
	putPeer(b, peers, avKey(avCompact, peer4), XdpfabAvValue{FiAddr: 42})
	require.NoError(b, e.objs.Ports.Put(htons(portCompact), XdpfabPortConfig{AvId: avCompact, DomainId: domainID,
		Flags: PortStrict | PortBoundAddr, Addr: self4.As16()}))
	for _, bc := range coldFrames(e) {
		b.Run(bc.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			data := bc.frame.build()
			evict := make([]byte, coldEvict)
			per := make([]time.Duration, 0, b.N)
			for b.Loop() {
				for i := 0; i < len(evict); i += 64 {
					evict[i]++
				}
				_, d, err := e.objs.XdpfabXdp.Benchmark(data, 1, nil)
				require.NoError(b, err)
				per = append(per, d)
			}
			slices.Sort(per)
			b.ReportMetric(float64(per[len(per)/2].Nanoseconds()), "p50-ns/pkt")
			b.ReportMetric(float64(per[len(per)*9/10].Nanoseconds()), "p90-ns/pkt")
		})
	}
}

type namedFrame struct {
	name  string
	frame frame
}

// coldFrames are the frames `xdpfab bench`'s latency phases send, as the
// target's program sees them, and a datagram it passes for comparison.
func coldFrames(e *kserveEnv) []namedFrame {
	var tagged wire.Builder
	tagged.Reset(make([]byte, 0, 1472), wire.Header{Type: wire.TypeReq, SrcEP: ksSrcEP, DstEP: ksDstEP,
		Session: e.ses, Seq: e.next, Ack: e.next})
	if err := tagged.AddOp(wire.OpDesc{Opcode: wire.OpMsg, Flags: wire.OpFirst | wire.OpLast, Count: 8}, make([]byte, 8), nil); err != nil {
		panic(err)
	}
	fetchAdd := ksOp{opcode: wire.OpFetchAtomic, dt: atomic.UINT64, op: atomic.SUM, rkey: userKey, count: 1, operand: u64s(1)}
	return []namedFrame{
		{"other-udp", udp(peer4, portOther, request(msgOp(16)))},
		// An 8-byte message, to a port without and with PORT_KSERVE.
		{"msg", udp(peer4, portCompact, tagged.Finish())},
		{"msg-kserve", udp(peer4, portKS4, tagged.Finish())},
		// A fetch-add on a region that is not kernel-resident, to a
		// PORT_KSERVE port (the target's of bench's fetch-add phases).
		{"fetch-add-up", udp(peer4, portKS4, encodeRequest(e.ses, e.next, 0, []ksOp{fetchAdd}))},
		{"payload-1400B", udp(peer4, portCompact, make([]byte, 1400))},
	}
}
