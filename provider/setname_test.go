package main

import (
	"context"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSetName runs testdata/setname.c on loopback: fi_setname before
// fi_enable moves the endpoint, and each refusal has its errno.
func TestSetName(t *testing.T) {
	dir := built(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "setname"))
	cmd.Env = providerEnv(dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok") {
		t.Fatalf("setname: %v\n%s", err, out)
	}
}

func TestSockaddrOf(t *testing.T) {
	in4 := []byte{2, 0, 0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}
	ap, ok := sockaddrOf(in4)
	require.True(t, ok)
	require.Equal(t, netip.MustParseAddrPort("127.0.0.1:8080"), ap)
	in6 := make([]byte, 28)
	in6[0], in6[2], in6[3], in6[23] = 10, 0x1f, 0x90, 1
	ap, ok = sockaddrOf(in6)
	require.True(t, ok)
	require.Equal(t, netip.MustParseAddrPort("[::1]:8080"), ap)
	for _, bad := range [][]byte{nil, {2}, in4[:15], append(in4, 0), in6[:27], {10, 0, 0, 0}, {1, 0, 0, 0}} {
		_, ok := sockaddrOf(bad)
		require.False(t, ok, "%v", bad)
	}
}
