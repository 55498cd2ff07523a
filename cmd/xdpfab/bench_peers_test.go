package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestBenchPeers runs the built binary's bench peers at a small scale (its
// target is a child process of the binary), with the initiators on the
// shared poller (alone, with their sends batched through io_uring,
// spinning, and with the target's endpoint on its own process's shared
// poller too) and with a receive goroutine each: every
// phase completes,
// every fetch-add executed exactly once, and the report carries the
// figures.
func TestBenchPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two bench phases")
	}
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "bench", "peers", "--peers", "1,20", "--ops", "20", "--min-ops", "200",
		"--inflight", "8", "--rx", "shared,ring,spinall,own", "-o", "json").Output()
	require.NoError(t, err, "%s", out)
	var rows []peersPhase
	require.NoError(t, json.Unmarshal(out, &rows), "%s", out)
	require.Len(t, rows, 8)
	for i, want := range []struct {
		peers, ops int
		rx         string
	}{{1, 200, "shared"}, {1, 200, "ring"}, {1, 200, "spinall"}, {1, 200, "own"},
		{20, 400, "shared"}, {20, 400, "ring"}, {20, 400, "spinall"}, {20, 400, "own"}} {
		r := rows[i]
		require.Equal(t, want.peers, r.Peers)
		require.Equal(t, want.rx, r.Rx)
		require.Equal(t, want.ops, r.Ops)
		require.True(t, r.ExactlyOnce, "%+v", r)
		require.Zero(t, r.Failed)
		if r.Net == "veth" {
			// The requests reached the target's AF_XDP rings, not its
			// kernel socket (the initiators' veth sends full checksums).
			require.GreaterOrEqual(t, r.TargetRxRings, uint64(r.Ops), "%+v", r)
			require.Less(t, r.TargetRxKernel, uint64(r.Ops)/10, "%+v", r)
		} else {
			require.Zero(t, r.TargetRxRings+r.TargetRxKernel, "%+v", r)
		}
		require.Positive(t, r.Rate)
		require.Equal(t, "lo", r.Net)
		require.Equal(t, "udp", r.Transport)
		require.Positive(t, r.CPURatio)
		if r.Peers == 1 {
			require.Equal(t, 1.0, r.CPURatio)
		}
	}
}

// TestBenchPeersVeth runs bench peers with --net lo,veth at a small scale,
// the initiators' sends plain and batched through io_uring (--rx ring):
// the veth phases' targets serve on AF_XDP (their banner says xdp; the
// loopback ones udp) and receive the requests through their rings, not
// their kernel sockets, every phase completes with every fetch-add executed
// exactly once, the ratios are to each kind's own single peer, and the
// run leaves none of its namespaces behind.
func TestBenchPeersVeth(t *testing.T) {
	testenv.RequirePriv(t)
	if testing.Short() {
		t.Skip("builds the binary, a veth topology and runs four bench phases")
	}
	rows := runBenchPeers(t, "--peers", "1,20", "--ops", "20", "--min-ops", "200",
		"--inflight", "8", "--net", "lo,veth", "--rx", "shared,ring", "--mode", "generic")
	require.Len(t, rows, 8)
	for i, want := range []struct {
		peers, ops         int
		net, transport, rx string
	}{{1, 200, "lo", "udp", "shared"}, {1, 200, "lo", "udp", "ring"}, {1, 200, "veth", "xdp", "shared"}, {1, 200, "veth", "xdp", "ring"},
		{20, 400, "lo", "udp", "shared"}, {20, 400, "lo", "udp", "ring"}, {20, 400, "veth", "xdp", "shared"}, {20, 400, "veth", "xdp", "ring"}} {
		r := rows[i]
		require.Equal(t, want.peers, r.Peers)
		require.Equal(t, want.net, r.Net)
		require.Equal(t, want.rx, r.Rx)
		require.Equal(t, want.transport, r.Transport, "%+v", r)
		require.Equal(t, want.ops, r.Ops)
		require.True(t, r.ExactlyOnce, "%+v", r)
		require.Zero(t, r.Failed)
		if r.Net == "veth" {
			// The requests reached the target's AF_XDP rings, not its
			// kernel socket (the initiators' veth sends full checksums).
			require.GreaterOrEqual(t, r.TargetRxRings, uint64(r.Ops), "%+v", r)
			require.Less(t, r.TargetRxKernel, uint64(r.Ops)/10, "%+v", r)
		} else {
			require.Zero(t, r.TargetRxRings+r.TargetRxKernel, "%+v", r)
		}
		require.Positive(t, r.Rate)
		require.Positive(t, r.CPURatio)
		if r.Peers == 1 {
			require.Equal(t, 1.0, r.RateRatio)
			require.Equal(t, 1.0, r.CPURatio)
		}
	}
}

// TestBenchPeersIniXDP runs bench peers --net veth --ini xdp small (2 and
// 50 peers): the initiators' requests leave through their AF_XDP socket
// and the responses come back through it (the XDP program on their veth
// steering each to its endpoint's port), not through their kernel
// sockets; every fetch-add executes exactly once, on the target's AF_XDP
// rings; the run leaves none of its namespaces behind.
func TestBenchPeersIniXDP(t *testing.T) {
	testenv.RequirePriv(t)
	if testing.Short() {
		t.Skip("builds the binary, a veth topology and runs two bench phases")
	}
	rows := runBenchPeers(t, "--peers", "2,50", "--ops", "20", "--min-ops", "200",
		"--inflight", "8", "--net", "veth", "--ini", "xdp", "--rx", "ring", "--mode", "generic")
	require.Len(t, rows, 2)
	for i, want := range []struct{ peers, ops int }{{2, 200}, {50, 1000}} {
		r := rows[i]
		require.Equal(t, want.peers, r.Peers)
		require.Equal(t, want.ops, r.Ops)
		require.Equal(t, "xdp", r.Ini)
		require.Equal(t, "xdp", r.Transport, "%+v", r)
		require.True(t, r.ExactlyOnce, "%+v", r)
		require.Zero(t, r.Failed)
		// The requests left through the initiators' AF_XDP socket (the
		// bench resolves the target's next hop before the phase) and
		// the responses came back through it. A neighbour change the
		// resolver follows sends a few through the kernel socket until
		// the hop is known again, and the target's first responses to a
		// new peer address may take its kernel socket until its own hop
		// is resolved: not all, then, but nearly.
		require.GreaterOrEqual(t, r.IniTxXSK, uint64(r.Ops)*19/20, "%+v", r)
		require.GreaterOrEqual(t, r.IniRxXSK+r.IniRxKernel, uint64(r.Ops), "%+v", r)
		// (The target's neighbour changes put a run of its responses
		// through its kernel socket, whose datagrams carry a checksum
		// left to offload: their share moves with the machine's load.)
		require.GreaterOrEqual(t, r.IniRxXSK, uint64(r.Ops)/2, "%+v", r)
		require.GreaterOrEqual(t, r.TargetRxRings, uint64(r.Ops), "%+v", r)
		require.Positive(t, r.Rate)
	}
}

// runBenchPeers runs `xdpfab bench peers ARGS -o json` (a binary built for
// the test) and returns its phases, after checking that the run left none
// of its namespaces behind.
func runBenchPeers(t *testing.T, args ...string) []peersPhase {
	t.Helper()
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(append([]string{"bench", "peers"}, args...), "-o", "json")...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s\n%s", out, stderr.String())
	var rows []peersPhase
	require.NoError(t, json.Unmarshal(out, &rows), "%s", out)
	entries, err := os.ReadDir("/run/netns")
	if err == nil {
		for _, e := range entries {
			require.False(t, strings.HasPrefix(e.Name(), fmt.Sprintf("%s%d-", incastNetPrefix, cmd.Process.Pid)), "left behind: %s", e.Name())
		}
	}
	return rows
}

// TestBenchPeersIniFlag: --ini takes kernel and xdp, and xdp only with
// --net veth (the initiators' AF_XDP side needs the namespace's veth).
func TestBenchPeersIniFlag(t *testing.T) {
	o, err := parsePeersFlags([]string{"--net", "lo,veth", "--ini", "kernel,xdp"})
	require.NoError(t, err)
	require.Equal(t, []string{"kernel", "xdp"}, o.inis)
	_, err = parsePeersFlags([]string{"--ini", "xdp"})
	require.ErrorIs(t, err, errUsage)
	_, err = parsePeersFlags([]string{"--net", "veth", "--ini", "dpdk"})
	require.ErrorIs(t, err, errUsage)
}
