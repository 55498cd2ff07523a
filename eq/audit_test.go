package eq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
)

// TestReadErrPeek: fi_eq_readerr with FI_PEEK, which libfabric's util EQ
// accepts, returns the head error entry and leaves it queued; a read
// without FI_PEEK then removes it.
func TestReadErrPeek(t *testing.T) {
	q := open(t, eq.Attr{Size: 4})
	src := newObj(fi.ClassAV, "av")
	require.NoError(t, q.PostErr(eq.ErrEntry{FID: src, Context: "ctx", Data: 7, Err: fi.EIO, ProvErrno: 5, ErrData: []byte("why")}))
	require.NoError(t, q.Post(eq.Entry{Event: eq.AVComplete, FID: src, Data: 1}))

	want := eq.ErrEntry{FID: src, Context: "ctx", Data: 7, Err: fi.EIO, ProvErrno: 5, ErrData: []byte("why")}
	for range 2 {
		ee, err := q.ReadErr(fi.PEEK)
		require.NoError(t, err)
		require.Equal(t, want, ee)
		_, err = q.Read(0)
		require.ErrorIs(t, err, fi.EAVAIL, "the peeked error entry is still the head")
	}
	ee, err := q.ReadErr(0)
	require.NoError(t, err)
	require.Equal(t, want, ee)
	_, err = q.ReadErr(fi.PEEK)
	require.ErrorIs(t, err, fi.EAGAIN, "the head is an event now")
	e, err := q.Read(0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), e.Data)

	// On a drained overrun EQ, FI_PEEK reports the FI_EOVERRUN entry too.
	o := open(t, eq.Attr{Size: 1})
	require.NoError(t, o.Post(eq.Entry{Event: eq.AVComplete}))
	require.ErrorIs(t, o.Post(eq.Entry{Event: eq.AVComplete}), fi.EOVERRUN)
	_, err = o.Read(0)
	require.NoError(t, err)
	ee, err = o.ReadErr(fi.PEEK)
	require.NoError(t, err)
	require.Equal(t, fi.EOVERRUN, ee.Err)
}
