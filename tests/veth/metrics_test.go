package veth

import (
	"fmt"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/metrics"
)

// TestMetrics runs fetch-adds from A to B through a router namespace,
// without loss and with 5 % of the endpoints' datagrams dropped by
// nftables in the router (the real path, AF_XDP included), and reads the
// counters as `xdpfab stats` does: from each namespace, through the
// processes' metrics sockets (metrics.Gather). The initiator counted its
// operations by kind, an RTT, nothing in flight, and retransmissions only
// under loss; the target executed them; on AF_XDP the XDP program
// redirected to the sockets whose ring statistics are there. B's report in
// Prometheus text format parses with the client library's parser and
// carries the XDP, engine and ring series.
func TestMetrics(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		for _, pct := range []int{0, 5} {
			t.Run(fmt.Sprintf("loss%d", pct), func(t *testing.T) { metricsUnderLoss(t, tc, pct) })
		}
	})
}

func metricsUnderLoss(t *testing.T, tc transportCase, pct int) {
	var router *testenv.Netns
	tn := newNet(t, tc, netOpts{link: func(t testing.TB) (*testenv.Netns, *testenv.Netns, *testenv.Veth) {
		var v *testenv.Veth
		router, v = routed(t)
		return v.A, v.B, v
	}})
	if pct > 0 {
		dropped := routerLoss(t, router, basePort[sideA], basePort[sideB]+100, pct)
		defer func() {
			n := dropped()
			t.Logf("router dropped %d datagrams", n)
			require.Positive(t, n, "the router's drop rule matched")
		}()
	}
	a, b := tn.nodes[sideA][0], tn.target()
	const adds = 1000
	_, err := fetchAdds{n: a, peer: a.peers[0], key: b.region.Key(), total: adds, depth: 8, timeout: 60 * time.Second}.run()
	require.NoError(t, err)

	gather := func(s side) *metrics.Report {
		var r *metrics.Report
		do(t, tn.ns[s], func() (err error) { r, err = metrics.Gather(); return err })
		return r
	}
	// find returns this process's endpoint addr in r.
	find := func(r *metrics.Report, addr string) (metrics.Process, metrics.Endpoint) {
		for _, p := range r.Processes {
			if p.PID != os.Getpid() {
				continue
			}
			for _, ep := range p.Endpoints {
				if ep.Addr == addr {
					return p, ep
				}
			}
		}
		t.Fatalf("endpoint %s of this process not in %+v", addr, r.Processes)
		return metrics.Process{}, metrics.Endpoint{}
	}
	repA, repB := gather(sideA), gather(sideB)
	_, ini := find(repA, a.ep.LocalAddr().String())
	procB, tgt := find(repB, b.ep.LocalAddr().String())
	// Each namespace's report holds only its own endpoints.
	for _, p := range repA.Processes {
		for _, ep := range p.Endpoints {
			require.NotEqual(t, b.ep.LocalAddr().String(), ep.Addr, "B's endpoint in A's report")
		}
	}

	e := ini.Engine
	require.Equal(t, uint64(adds), e.Ops["FETCH_ATOMIC"], "fetch-adds counted")
	require.Zero(t, e.OpErrors["FETCH_ATOMIC"])
	require.Zero(t, e.InFlight)
	require.Positive(t, e.SRTTSeconds)
	require.Positive(t, e.PacketsPerOp)
	require.GreaterOrEqual(t, tgt.Engine.Delivered, e.RequestPackets/2, "the target executed the requests")
	t.Logf("%s, %d%% loss: %d request packets, %d retransmits (%d fast), %.3f packets/op, srtt %v; target delivered %d, suppressed %d duplicates",
		tc.name, pct, e.RequestPackets, e.Retransmits, e.FastRetransmits, e.PacketsPerOp,
		time.Duration(e.SRTTSeconds*1e9), tgt.Engine.Delivered, tgt.Engine.DuplicatesSuppressed)
	if pct > 0 {
		require.Positive(t, e.Retransmits, "retransmissions under loss")
	} else if e.Retransmits != 0 {
		// Nothing was lost, so no retransmission was needed: one can
		// only be a timer that fired on a stalled machine (the engine's
		// 1 ms floor against -race on two shared cores: 1 to 6 % of the
		// packets here, with the load of the moment), its packet a
		// duplicate the target answered from its cache. None filled a
		// gap.
		require.Zero(t, e.FastRetransmits, "no gap without loss")
		require.Equal(t, e.Retransmits, tgt.Engine.DuplicatesSuppressed, "retransmissions without loss must all be spurious")
		t.Logf("%d spurious retransmissions without loss", e.Retransmits)
	}
	if tc.kernelFilters {
		require.Equal(t, "afxdp", tgt.Transport)
		require.NotEmpty(t, procB.Rings, "B's AF_XDP sockets")
		require.NotEmpty(t, repB.XDP)
		var redirected uint64
		for _, c := range repB.XDP[0].Counters {
			if c.Name == "redirect_xsk" {
				redirected = c.Value
			}
		}
		require.Positive(t, redirected, "B's XDP program redirected to the sockets")
		require.Positive(t, tgt.AFXDP.RxXSK)
	}

	// The exporter over B's report.
	srv := httptest.NewServer(metrics.HandlerFor(func() (r *metrics.Report, err error) {
		do(t, tn.ns[sideB], func() error { r, err = metrics.Gather(); return err })
		return r, err
	}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	want := []string{"xdpfab_engine_ops_total", "xdpfab_engine_retransmits_total", "xdpfab_engine_delivered_total",
		"xdpfab_engine_srtt_seconds", "xdpfab_engine_in_flight_ops", "xdpfab_engine_duplicates_suppressed_total"}
	if tc.kernelFilters {
		want = append(want, "xdpfab_xdp_packets_total", "xdpfab_xsk_rx_dropped_total", "xdpfab_xsk_rx_ring_full_total",
			"xdpfab_xsk_rx_fill_ring_empty_descs_total", "xdpfab_xsk_tx_invalid_descs_total", "xdpfab_xsk_tx_ring_empty_descs_total")
	}
	for _, name := range want {
		require.Contains(t, fams, name)
	}
	var delivered float64
	for _, m := range fams["xdpfab_engine_delivered_total"].Metric {
		for _, l := range m.Label {
			if l.GetName() == "endpoint" && l.GetValue() == b.ep.LocalAddr().String() {
				delivered = m.Counter.GetValue()
			}
		}
	}
	require.Equal(t, float64(tgt.Engine.Delivered), delivered, "the exporter's value is the report's")
}

// routerLoss makes the router drop pct % of the forwarded UDP datagrams
// whose source or destination port is in [lo, hi), and returns a function
// reading how many it dropped.
func routerLoss(t testing.TB, router *testenv.Netns, lo, hi uint16, pct int) func() int {
	t.Helper()
	ports := strconv.Itoa(int(lo)) + "-" + strconv.Itoa(int(hi)-1)
	for _, args := range [][]string{
		{"add", "table", "inet", "xfloss"},
		{"add", "chain", "inet", "xfloss", "xffwd", "{ type filter hook forward priority 0; }"},
		{"add", "rule", "inet", "xfloss", "xffwd", "udp", "dport", ports, "numgen", "random", "mod", "100", "<", strconv.Itoa(pct), "counter", "drop"},
		{"add", "rule", "inet", "xfloss", "xffwd", "udp", "sport", ports, "numgen", "random", "mod", "100", "<", strconv.Itoa(pct), "counter", "drop"},
	} {
		out, err := router.Exec("nft", args...)
		require.NoError(t, err, "nft %v: %s", args, out)
	}
	return func() int {
		out, err := router.Exec("nft", "list", "table", "inet", "xfloss")
		require.NoError(t, err)
		n := 0
		for _, m := range nftCounter.FindAllStringSubmatch(out, -1) {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
		return n
	}
}
