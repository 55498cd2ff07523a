package fabric_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/mr"
)

// TestCQAwaitingOwnOperations: a CQ's readers count as awaiting answers
// (and poll longer before they sleep, spinpark.go) while an endpoint
// bound to it has a write of its own unanswered, and not once it
// completed or when only the peer's operations arrive.
func TestCQAwaitingOwnOperations(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	require.False(t, a.txCQ.AwaitingForTest(), "nothing posted")

	dead := a.silentPeer(t)
	require.NoError(t, a.ep.Write([]byte{1}, mr.Desc{}, dead, 0, regionKey, "silent"))
	require.True(t, a.txCQ.AwaitingForTest(), "a write to a peer that never answers")
	require.True(t, a.rxCQ.AwaitingForTest(), "the same endpoint's receive CQ")
	require.False(t, b.txCQ.AwaitingForTest(), "another endpoint")

	require.NoError(t, b.ep.Write([]byte{2}, mr.Desc{}, b.peer, 8, regionKey, "answered"))
	require.Equal(t, "answered", comp(t, b.txCQ).Context)
	require.False(t, b.txCQ.AwaitingForTest(), "its write completed")
	require.Equal(t, byte(2), a.mem[8])
}
