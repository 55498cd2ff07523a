package bpf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestGeneratedUpToDate fails when the C sources changed after the committed
// objects were generated: run `make generate`.
func TestGeneratedUpToDate(t *testing.T) {
	recorded, err := os.ReadFile("sources.sha256")
	require.NoError(t, err)
	var want strings.Builder
	for _, f := range []string{"gen.go", "xdpfab.c", "xdpfab.h"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		sum := sha256.Sum256(b)
		fmt.Fprintf(&want, "%s  %s\n", hex.EncodeToString(sum[:]), f)
	}
	require.Equal(t, want.String(), string(recorded),
		"bpf/ sources changed since the objects were generated: run `make generate` and commit the result")

	obj, err := os.Stat("xdpfab_bpfel.o")
	require.NoError(t, err)
	require.NotZero(t, obj.Size())
}

// TestSpecLayout checks the committed object against the layouts Go relies on.
func TestSpecLayout(t *testing.T) {
	spec, err := LoadXdpfab()
	require.NoError(t, err)
	av := spec.Maps[XdpfabMapAvMap]
	require.NotNil(t, av)
	require.Equal(t, uint32(24), av.KeySize)
	require.Equal(t, uint32(16), av.ValueSize)
	mr := spec.Maps[XdpfabMapMrMap]
	require.NotNil(t, mr)
	require.Equal(t, uint32(16), mr.KeySize)
	require.Equal(t, uint32(32), mr.ValueSize)
	require.Equal(t, ebpf.PerCPUArray, spec.Maps[XdpfabMapCounters].Type)
	require.Equal(t, uint32(XdpfabXdpfabCounterCNT_MAX), spec.Maps[XdpfabMapCounters].MaxEntries)
}

// TestProgramRuns loads the program and runs it on a crafted frame with
// BPF_PROG_TEST_RUN, checking the action and the per-CPU counters.
func TestProgramRuns(t *testing.T) {
	testenv.RequirePriv(t)
	var objs XdpfabObjects
	require.NoError(t, LoadXdpfabObjects(&objs, nil))
	defer objs.Close()

	frame := make([]byte, 64) // not IPv4/IPv6: passes
	frame[12], frame[13] = 0x08, 0x06
	ret, err := objs.XdpfabXdp.Run(&ebpf.RunOptions{Data: frame})
	require.NoError(t, err)
	require.Equal(t, uint32(2), ret, "XDP_PASS")

	var perCPU []uint64
	require.NoError(t, objs.Counters.Lookup(XdpfabXdpfabCounterCNT_PASS_NOT_OURS, &perCPU))
	var total uint64
	for _, v := range perCPU {
		total += v
	}
	require.Equal(t, uint64(1), total)
}
