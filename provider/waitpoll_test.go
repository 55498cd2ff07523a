package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWaitAndPollSets runs testdata/waitpoll.c over loopback, under auto
// and manual progress: fi_wait_open and fi_poll_open through libfabric,
// queues opened with FI_WAIT_SET, fi_wait, fi_trywait, FI_GETWAIT's fd,
// fi_poll naming exactly the queues with something to read, and the
// errno of every misuse (see the program's comment).
func TestWaitAndPollSets(t *testing.T) {
	dir := built(t)
	for _, progress := range []string{"auto", "manual"} {
		t.Run(progress, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(dir, "waitpoll"))
			cmd.Env = append(providerEnv(dir), "FI_XDPFAB_DATA_PROGRESS="+progress)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "ok") {
				t.Fatalf("waitpoll: %v\n%s", err, out)
			}
		})
	}
}
