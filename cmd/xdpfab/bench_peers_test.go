package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchPeers runs the built binary's bench peers at a small scale (its
// target is a child process of the binary), with the initiators on the
// shared poller (spinning, and with the target's endpoint on its own
// process's shared poller too) and with a receive goroutine each: every
// phase completes,
// every fetch-add executed exactly once, and the report carries the
// figures.
func TestBenchPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two bench phases")
	}
	bin := filepath.Join(t.TempDir(), "xdpfab")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err = exec.CommandContext(ctx, bin, "bench", "peers", "--peers", "1,20", "--ops", "20", "--min-ops", "200",
		"--inflight", "8", "--rx", "shared,spinall,own", "-o", "json").Output()
	require.NoError(t, err, "%s", out)
	var rows []peersPhase
	require.NoError(t, json.Unmarshal(out, &rows), "%s", out)
	require.Len(t, rows, 6)
	for i, want := range []struct {
		peers, ops int
		rx         string
	}{{1, 200, "shared"}, {1, 200, "spinall"}, {1, 200, "own"}, {20, 400, "shared"}, {20, 400, "spinall"}, {20, 400, "own"}} {
		r := rows[i]
		require.Equal(t, want.peers, r.Peers)
		require.Equal(t, want.rx, r.Rx)
		require.Equal(t, want.ops, r.Ops)
		require.True(t, r.ExactlyOnce, "%+v", r)
		require.Zero(t, r.Failed)
		require.Positive(t, r.Rate)
	}
}
