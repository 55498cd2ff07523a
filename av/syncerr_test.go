package av

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// TestSyncErrInt32: FI_SYNC_ERR's status array may be an []int32 (the C
// provider's view of the application's int array): a good and a bad
// address insert one, with statuses 0 and FI_EINVAL; a short array is
// FI_EINVAL and inserts nothing.
func TestSyncErrInt32(t *testing.T) {
	a, _ := openTest(t, Attr{Type: TypeTable, Count: 32})
	bad := sin("10.0.0.2:7000")
	bad[0] = 99 // not AF_INET
	st := []int32{-1, 0}
	n, err := a.Insert([][]byte{sin("10.0.0.1:7000"), bad}, nil, fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []int32{0, int32(fi.EINVAL)}, st)

	n, err = a.Insert([][]byte{sin("10.0.0.3:7000"), sin("10.0.0.4:7000")}, nil, fi.SYNC_ERR, []int32{0})
	require.ErrorIs(t, err, fi.EINVAL)
	require.Zero(t, n)
}
