package bpffs_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/bpffs"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

func TestEnsureMountsAndCreates(t *testing.T) {
	testenv.RequirePriv(t)
	dir := bpffs.Path("test-ensure")
	got, err := bpffs.Ensure(dir)
	require.NoError(t, err)
	t.Cleanup(func() { os.Remove(dir) })
	require.Equal(t, dir, got)
	require.True(t, bpffs.IsMounted())
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.True(t, st.IsDir())
}
