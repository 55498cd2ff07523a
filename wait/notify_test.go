package wait

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// TestSetNotify: a MutexCond object calls what SetNotify registered after
// every broadcast (Signal and Close), stops on nil, and other kinds and
// argument types are refused.
func TestSetNotify(t *testing.T) {
	o, err := NewObject(fi.WaitMutexCond)
	require.NoError(t, err)
	var n atomic.Int32
	require.NoError(t, o.Control(SetNotify, func() { n.Add(1) }))
	o.Signal()
	o.Signal()
	require.Equal(t, int32(2), n.Load())
	require.ErrorIs(t, o.Control(SetNotify, 42), fi.EINVAL)
	require.NoError(t, o.Control(SetNotify, (func())(nil)), "a nil func() stops it")
	o.Signal()
	require.Equal(t, int32(2), n.Load())
	require.NoError(t, o.Control(SetNotify, func() { n.Add(10) }))
	require.NoError(t, o.Close())
	require.Equal(t, int32(12), n.Load(), "Close broadcasts")

	fd, err := NewObject(fi.WaitFD)
	require.NoError(t, err)
	defer fd.Close()
	require.ErrorIs(t, fd.Control(SetNotify, func() {}), fi.ENOSYS)
}
