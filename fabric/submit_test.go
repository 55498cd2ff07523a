package fabric_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath/lossy"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// TestPostErrorMeansNoCompletion: a post that returns an error is never
// executed and never completes; one that returns nil completes exactly
// once with its own context, even when the transport fails the send that
// carries it (lossy.FailSends with FI_EAGAIN, which a caller would retry).
// Before the fix such a post returned the send error while the engine
// went on to execute it: a retrying caller ran the fetch-add twice, and
// the slot the error had freed got a second, foreign completion.
func TestPostErrorMeansNoCompletion(t *testing.T) {
	u, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	require.NoError(t, err)
	w, err := lossy.Wrap(u, lossy.Config{})
	require.NoError(t, err)
	a, _ := pair(t, sideOpts{ep: fabric.EPAttr{Transport: w, TxSize: 4}}, sideOpts{})
	one := binary.LittleEndian.AppendUint64(nil, 1)
	res := make([]byte, 8)
	buf := make([]fabric.CQEntry, 4)

	const rounds = 20
	posted := 0
	for i := range rounds {
		if i%2 == 0 {
			w.FailSends(1, fi.EAGAIN)
		}
		ctx := &i
		// Retry while the post fails, as a caller seeing FI_EAGAIN does.
		for {
			err := a.ep.FetchAtomic(one, 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
				fatomic.UINT64, fatomic.SUM, ctx)
			if err == nil {
				break
			}
			require.ErrorIs(t, err, fi.EAGAIN)
			n, rerr := a.txCQ.SRead(buf, 50)
			require.True(t, errors.Is(rerr, fi.EAGAIN), "round %d: the post failed (%v) and yet %d completions came: %+v",
				i, err, n, buf[:max(n, 0)])
		}
		posted++
		n, err := a.txCQ.SRead(buf, waitMs)
		require.NoError(t, err, "round %d", i)
		require.Equal(t, 1, n, "round %d", i)
		require.Same(t, ctx, buf[0].Context, "round %d: the completion is the post's own", i)
		require.Equal(t, uint64(i), binary.LittleEndian.Uint64(res), "round %d: fetched", i)
	}
	noComp(t, a.txCQ)
	// One more fetch-add reads the counter: each post executed once.
	require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
		fatomic.UINT64, fatomic.SUM, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(posted), binary.LittleEndian.Uint64(res))
	require.Equal(t, uint64(rounds/2), a.ep.Stats().TxErrors, "the failed sends were counted")
}
