package veth

import (
	"errors"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// retryBudget bounds how long the engine takes to give up on a silent
// peer: 20 retransmissions with the timeout doubling from 1 ms up to
// 200 ms is about 2.7 s (datapath/reliable's defaults); a request posted
// after that failure opens a new session and gets a budget of its own.
const retryBudget = 2 * 2700 * time.Millisecond

func TestPeerDisappears(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		for _, how := range []string{"endpoint-closed", "link-down"} {
			t.Run(how, func(t *testing.T) { peerDisappears(t, tc, how) })
		}
	})
}

// peerDisappears runs 200 fetch-adds from A to the target, 32 in flight,
// then makes 64 more pending for certain (an nftables rule in the target's
// namespace blackholes them until the initiator is retransmitting), makes
// the target vanish (its endpoint closes, or its veth end goes down),
// lifts the blackhole and posts 32 more. Every one of the 96 must complete
// with FI_ETIMEDOUT or FI_ECONNREFUSED within the retry budget. Closing
// everything must then bring the goroutine count back to what it was
// before the nodes opened.
func peerDisappears(t *testing.T, tc transportCase, how string) {
	const depth, before, pending, after = 32, 200, 64, 32
	var baseline int
	net := newNet(t, tc, netOpts{beforeNodes: func(*testNet) { baseline = runtime.NumGoroutine() }})
	a, target := net.nodes[sideA][0], net.target()
	key := target.region.Key()
	targetNS := net.ns[sideB]

	results := make([][8]byte, pending+after)
	post := func(slot int) {
		err := a.ep.FetchAtomic(one, 1, mr.Desc{}, results[slot%len(results)][:], mr.Desc{}, a.peers[0], 0, key,
			fatomic.UINT64, fatomic.SUM, slot)
		require.NoError(t, err, "posting fetch-add %d", slot)
	}

	// Healthy: all succeed.
	w := fetchAdds{n: a, peer: a.peers[0], key: key, total: before, depth: depth, timeout: compTimeout}
	_, err := w.run()
	require.NoError(t, err)

	// Pending: requests blackholed on their way into the target.
	lift := tc.blackhole(t, net, net.ports[sideB][0])
	retx0 := a.ep.Stats().Retransmits
	for slot := range pending {
		post(slot)
	}
	for stop := time.Now().Add(compTimeout); a.ep.Stats().Retransmits == retx0; {
		require.True(t, time.Now().Before(stop), "the blackholed fetch-adds are not being retransmitted")
		time.Sleep(time.Millisecond)
	}

	// Gone.
	switch how {
	case "endpoint-closed":
		require.NoError(t, target.closeEndpoint())
	case "link-down":
		nl := targetNS.Netlink()
		l, err := nl.LinkByName(net.iface(sideB))
		require.NoError(t, err)
		require.NoError(t, nl.LinkSetDown(l))
	}
	vanished := time.Now()
	lift()
	for slot := pending; slot < pending+after; slot++ {
		post(slot)
	}

	// Every one of them fails, within the retry budget.
	failures := map[fi.Errno]int{}
	deadline := vanished.Add(retryBudget + compTimeout)
	comps := make([]fabric.CQEntry, 1)
	var last time.Time
	for completed := 0; completed < pending+after; completed++ {
		var e fabric.CQErrEntry
		for {
			require.True(t, time.Now().Before(deadline), "hung: %d of %d fetch-adds completed %v after the target vanished (%s)",
				completed, pending+after, time.Since(vanished), how)
			_, err := a.txCQ.SRead(comps, 100)
			if errors.Is(err, fi.EAGAIN) {
				continue
			}
			require.ErrorIs(t, err, fi.EAVAIL, "fetch-add %v completed without error after the target vanished", comps[0].Context)
			e, err = a.txCQ.ReadErr(0)
			require.NoError(t, err)
			break
		}
		require.True(t, e.Err == fi.ETIMEDOUT || e.Err == fi.ECONNREFUSED,
			"fetch-add %v: error completion %v, want FI_ETIMEDOUT or FI_ECONNREFUSED", e.Context, e.Err)
		failures[e.Err]++
		last = time.Now()
	}
	t.Logf("%s: %v; the last failed %v after the target vanished", how, failures, last.Sub(vanished).Round(time.Millisecond))

	for _, side := range net.nodes {
		for _, n := range side {
			require.NoError(t, n.close())
		}
	}
	checkGoroutines(t, baseline)
}

// checkGoroutines waits (up to 5 s) for the goroutine count to drop to
// baseline and fails with the goroutines still running if it does not.
func checkGoroutines(t *testing.T, baseline int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("%d goroutines after closing everything, %d before the nodes opened:\n%s", n, baseline, b.String())
	}
}
