package eq_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
)

func TestCoreOrderAndErrors(t *testing.T) {
	q, err := eq.Open(eq.Attr{Size: 4}, "qctx")
	require.NoError(t, err)
	_, err = q.Read(0)
	require.ErrorIs(t, err, fi.EAGAIN)
	require.NoError(t, q.PostErr(eq.ErrEntry{Data: 1, Err: fi.EINVAL}))
	require.NoError(t, q.Post(eq.Entry{Event: eq.AVComplete, Data: 1}))
	_, err = q.Read(0)
	require.ErrorIs(t, err, fi.EAVAIL)
	ee, err := q.ReadErr(0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), ee.Data)
	_, err = q.ReadErr(0)
	require.True(t, errors.Is(err, fi.EAGAIN))
	e, err := q.Read(0)
	require.NoError(t, err)
	require.Equal(t, eq.AVComplete, e.Event)
	require.NoError(t, q.Close())
}
