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
// each of 20000 completions exactly once.
func TestCQRing(t *testing.T) {
	dir := built(t)
	for _, progress := range []string{"auto", "manual"} {
		for _, args := range [][]string{{"order"}, {"threads", "4"}} {
			t.Run(progress+"/"+strings.Join(args, "_"), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, filepath.Join(dir, "cqring"), args...)
				cmd.Env = append(providerEnv(dir), "FI_XDPFAB_DATA_PROGRESS="+progress)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("cqring %v: %v\n%s", args, err, out)
				}
				if !strings.HasPrefix(string(out), "ok ") {
					t.Fatalf("cqring %v: %s", args, out)
				}
			})
		}
	}
}
