package veth

import (
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
	"slices"
	"testing"
	"time"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/xdp"
)

// BenchmarkMRVerdict (MEASUREMENT, issue 11 item 10) compares over veth with
// AF_XDP (native), side by side in one run, rounds interleaved:
//
//	vet+check  the program vets every op against mr_map, user space checks every op again
//	vet+trust  the program vets, user space trusts an accepted packet's verdict
//	check      the program does not vet, user space checks
//
// Each round runs every workload once per variant (order rotating); the
// metrics are the medians of the rounds' rates. Run with -benchtime 1x.
func BenchmarkMRVerdict(b *testing.B) {
	testenv.RequirePriv(b)
	const rounds, ops = 25, 50_000
	tc := transportCases[1]
	variants := []struct{ name, vet, trust string }{
		{"vet+check", "1", "0"}, {"vet+trust", "1", "1"}, {"check", "0", "0"},
	}
	nets := make([]*benchNet, len(variants))
	tns := make([]*testNet, len(variants))
	for i, v := range variants {
		b.Setenv("XDPFAB_VET_MR", v.vet)
		b.Setenv("XDPFAB_TRUST_XDP", v.trust)
		tns[i] = newNet(b, tc, netOpts{})
		nets[i] = &benchNet{a: tns[i].nodes[sideA][0], b: tns[i].target()}
	}
	workloads := []struct {
		name string
		run  func(bn *benchNet, n int)
	}{
		{"FetchAddSame", func(bn *benchNet, n int) {
			if _, err := (fetchAdds{n: bn.a, peer: bn.a.peers[0], key: bn.b.region.Key(), total: n, depth: 64, timeout: time.Minute}).run(); err != nil {
				b.Fatal(err)
			}
		}},
		{"FetchAddDistinct", func(bn *benchNet, n int) { bn.fetchAddDistinct(b, n) }},
		{"Read8Distinct", func(bn *benchNet, n int) { bn.read8Distinct(b, n) }},
	}
	// The kernel's run-time accounting of BPF programs, for the XDP
	// program's own cost per packet in this very datapath.
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	progStats := func(i int) (time.Duration, uint64) {
		var st *ebpf.ProgramStats
		do(b, tns[i].ns[sideB], func() error {
			att, err := xdp.Open(tns[i].iface(sideB))
			if err != nil {
				return err
			}
			defer att.Close()
			st, err = att.Program.Stats()
			return err
		})
		return st.Runtime, st.RunCount
	}
	var rt0 [3]time.Duration
	var rc0 [3]uint64
	for i := range variants {
		rt0[i], rc0[i] = progStats(i)
	}
	rates := make([][][]float64, len(workloads)) // [workload][variant][round]
	for w := range workloads {
		rates[w] = make([][]float64, len(variants))
	}
	for r := range rounds {
		for k := range variants {
			vi := (k + r) % len(variants)
			for w, wl := range workloads {
				start := time.Now()
				wl.run(nets[vi], ops)
				rates[w][vi] = append(rates[w][vi], ops/time.Since(start).Seconds())
			}
		}
	}
	for w, wl := range workloads {
		line := wl.name + ":"
		base := 0.0
		for vi, v := range variants {
			rs := rates[w][vi]
			slices.Sort(rs)
			med := rs[len(rs)/2]
			if vi == 0 {
				base = med
			}
			b.ReportMetric(med, wl.name+"/"+v.name+"-ops/s")
			line += fmt.Sprintf(" %s %.0f ops/s (%.3f)", v.name, med, med/base)
		}
		b.Log(line)
	}
	for i, v := range variants {
		c := xdpCounters(b, tns[i], sideB, tc)
		rt, rc := progStats(i)
		b.Logf("%s: B req_ok %d redirect_xsk %d; B's XDP program %.0f ns per packet over %d packets", v.name,
			c[bpf.XdpfabXdpfabCounterCNT_REQ_OK], c[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK],
			float64(rt-rt0[i])/float64(rc-rc0[i]), rc-rc0[i])
	}
}

// fetchAddDistinct: n uint64 fetch-adds, 64 in flight, each slot on its
// own counter, so the ops sharing a packet all differ.
func (bn *benchNet) fetchAddDistinct(b *testing.B, n int) {
	const depth = 64
	a := bn.a
	key := bn.b.region.Key()
	res := make([][8]byte, depth)
	bn.pipeline(b, a.txCQ, n, depth, func(slot int) error {
		return a.ep.FetchAtomic(one, 1, mr.Desc{}, res[slot][:], mr.Desc{}, a.peers[0], uint64(8*slot), key,
			fatomic.UINT64, fatomic.SUM, slot)
	})
}

// read8Distinct: n 8-byte RMA reads, 64 in flight at distinct addresses.
func (bn *benchNet) read8Distinct(b *testing.B, n int) {
	const depth = 64
	a := bn.a
	key := bn.b.region.Key()
	bufs := make([][8]byte, depth)
	bn.pipeline(b, a.txCQ, n, depth, func(slot int) error {
		return a.ep.Read(bufs[slot][:], mr.Desc{}, a.peers[0], uint64(8*slot), key, slot)
	})
}
