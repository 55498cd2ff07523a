package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReopen runs testdata/reopen.c over loopback: one process opens and
// closes the whole object tree 20 times (fabtests' fi_rdm_multi_client
// client) while a server it opened once learns each new client's
// address, inserts it into its AV (of the av_type fi_getinfo answered)
// and replies to the fi_addr it got.
func TestReopen(t *testing.T) {
	dir := built(t)
	for _, progress := range []string{"auto", "manual"} {
		t.Run(progress, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(dir, "reopen"), "clients", "20")
			cmd.Env = append(providerEnv(dir), "FI_XDPFAB_DATA_PROGRESS="+progress)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "ok ") {
				t.Fatalf("reopen: %v\n%s", err, out)
			}
		})
	}
}
