package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCQRing runs testdata/cqring.c over loopback with automatic and
// manual progress: completions read from C come out in completion order
// across the ring and the Go CQ (an error completion between two
// successes, fi_cq_readerr, fi_cq_readfrom's source, the tagged format's
// fields, a burst read in batches), and four threads draining one CQ read
// each of 20000 completions exactly once. The threads run once more with
// FI_XDPFAB_YIELD_POLLS=1: every empty read offers the processor
// (cqyield.c), and concurrent readers count empty reads and share the
// quiet time of one CQ.
func TestCQRing(t *testing.T) {
	dir := built(t)
	run := func(t *testing.T, env []string, args ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "cqring"), args...)
		cmd.Env = append(providerEnv(dir), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cqring %v: %v\n%s", args, err, out)
		}
		if !strings.HasPrefix(string(out), "ok ") {
			t.Fatalf("cqring %v: %s", args, out)
		}
	}
	for _, progress := range []string{"auto", "manual"} {
		for _, args := range [][]string{{"order"}, {"threads", "4"}} {
			t.Run(progress+"/"+strings.Join(args, "_"), func(t *testing.T) {
				run(t, []string{"FI_XDPFAB_DATA_PROGRESS=" + progress}, args...)
			})
		}
	}
	t.Run("auto/threads_4/yield_every_empty_read", func(t *testing.T) {
		run(t, []string{"FI_XDPFAB_DATA_PROGRESS=auto", "FI_XDPFAB_YIELD_POLLS=1"}, "threads", "4")
	})
}

// TestYieldPollsFromEnv: FI_XDPFAB_YIELD_POLLS sets how many empty reads
// in a row yield once; 0 turns it off; anything else is the default.
func TestYieldPollsFromEnv(t *testing.T) {
	for v, want := range map[string]uint32{"": defaultYieldPolls, "0": 0, "1": 1, " 64 ": 64,
		"-1": defaultYieldPolls, "many": defaultYieldPolls, "99999999999": defaultYieldPolls} {
		if got := yieldPollsFromEnv(v); got != want {
			t.Errorf("yieldPollsFromEnv(%q) = %d, want %d", v, got, want)
		}
	}
}
