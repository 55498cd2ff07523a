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

// peerDisappears keeps 32 fetch-adds in flight from A to the target, makes
// the target vanish (its endpoint closes, or its veth end goes down) after
// 200 have succeeded, posts 64 more, and then requires every operation to
// complete: successfully only if it was posted before the target vanished,
// otherwise with FI_ETIMEDOUT or FI_ECONNREFUSED, all within the retry
// budget. Closing everything must then bring the goroutine count back to
// what it was before the nodes opened.
func peerDisappears(t *testing.T, tc transportCase, how string) {
	const depth, before, after = 32, 200, 64
	var baseline int
	net := newNet(t, tc, netOpts{beforeNodes: func(*testNet) { baseline = runtime.NumGoroutine() }})
	a, target := net.nodes[sideA][0], net.target()
	key := target.region.Key()

	vanish := func() {
		switch how {
		case "endpoint-closed":
			require.NoError(t, target.closeEndpoint())
		case "link-down":
			nl := net.ns[sideB].Netlink()
			l, err := nl.LinkByName(net.iface(sideB))
			require.NoError(t, err)
			require.NoError(t, nl.LinkSetDown(l))
		}
	}

	results := make([][8]byte, depth)
	postedAfter := make([]bool, depth) // the op in each slot was posted after the target vanished
	var posted, postedAfterVanish, succeeded int
	vanished := false
	var vanishedAt, lastCompletion time.Time
	failures := map[fi.Errno]int{}
	post := func(slot int) {
		err := a.ep.FetchAtomic(one, 1, mr.Desc{}, results[slot][:], mr.Desc{}, a.peers[0], 0, key,
			fatomic.UINT64, fatomic.SUM, slot)
		require.NoError(t, err, "posting fetch-add %d (%d after the target vanished)", posted, postedAfterVanish)
		postedAfter[slot] = vanished
		posted++
		if vanished {
			postedAfterVanish++
		}
	}
	for slot := range depth {
		post(slot)
	}
	deadline := time.Now().Add(compTimeout + retryBudget)
	comps := make([]fabric.CQEntry, depth)
	for completed := 0; completed < posted; {
		require.True(t, time.Now().Before(deadline), "hung: %d of %d fetch-adds completed, %d after the target vanished (%s)",
			completed, posted, postedAfterVanish, how)
		k, err := a.txCQ.SRead(comps, 100)
		var slots []int
		switch {
		case errors.Is(err, fi.EAGAIN):
			continue
		case errors.Is(err, fi.EAVAIL):
			e, rerr := a.txCQ.ReadErr(0)
			require.NoError(t, rerr)
			require.True(t, e.Err == fi.ETIMEDOUT || e.Err == fi.ECONNREFUSED, "error completion %v, want FI_ETIMEDOUT or FI_ECONNREFUSED", e.Err)
			require.True(t, vanished, "fetch-add failed (%v) before the target vanished", e.Err)
			failures[e.Err]++
			slots = []int{e.Context.(int)}
		default:
			require.NoError(t, err)
			for _, c := range comps[:k] {
				slot := c.Context.(int)
				require.False(t, postedAfter[slot], "a fetch-add posted after the target vanished succeeded")
				succeeded++
				slots = append(slots, slot)
			}
		}
		for _, slot := range slots {
			completed++
			lastCompletion = time.Now()
			if !vanished && succeeded >= before {
				vanish()
				vanished, vanishedAt = true, time.Now()
			}
			if !vanished || postedAfterVanish < after {
				post(slot)
			}
		}
	}
	require.Equal(t, after, postedAfterVanish)
	nfail := 0
	for _, n := range failures {
		nfail += n
	}
	require.GreaterOrEqual(t, nfail, after, "every fetch-add posted after the target vanished failed")
	t.Logf("%s: %d succeeded, %d failed %v; last completion %v after the target vanished",
		how, succeeded, nfail, failures, lastCompletion.Sub(vanishedAt).Round(time.Millisecond))

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
