package fabric_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// TestCompletionBatchOrder: sixteen fetch-adds posted with FI_MORE share
// one request packet, so their completions reach the provider in one
// batch (complete_batch.go); every fourth targets a key the peer does not
// have and fails. The CQ gives them in posting order, the error entries
// among the successes, each success with its old value; and every op slot
// is back once the entries are read: with TxSize 16, each round posts
// sixteen again without FI_EAGAIN.
func TestCompletionBatchOrder(t *testing.T) {
	a, _ := pair(t, sideOpts{ep: fabric.EPAttr{TxSize: 16}}, sideOpts{})
	one := binary.LittleEndian.AppendUint64(nil, 1)
	const n = 16
	res := make([][]byte, n)
	for i := range res {
		res[i] = make([]byte, 8)
	}
	bad := func(i int) bool { return i%4 == 3 }
	for round := range 3 {
		for i := range n {
			key := uint64(regionKey)
			if bad(i) {
				key = regionKey + 99
			}
			flags := fi.MORE
			if i == n-1 {
				flags = 0
			}
			msg := &fabric.MsgAtomic{MsgIOV: []fabric.IOC{{Buf: one, Count: 1}}, Addr: a.peer,
				RMAIOV:   []fabric.RMAIOC{{Addr: uint64(8 * i), Count: 1, Key: key}},
				Datatype: fatomic.UINT64, Op: fatomic.SUM, Context: i}
			require.NoError(t, a.ep.FetchAtomicMsg(msg, []fabric.IOC{{Buf: res[i], Count: 1}}, nil, flags),
				"round %d, op %d", round, i)
		}
		for i := range n {
			if bad(i) {
				e := errComp(t, a.txCQ)
				require.Equal(t, i, e.Context, "round %d", round)
				require.NotEqual(t, fi.SUCCESS, e.Err)
				continue
			}
			c := comp(t, a.txCQ)
			require.Equal(t, i, c.Context, "round %d", round)
			require.Equal(t, uint64(round), binary.LittleEndian.Uint64(res[i]), "round %d, op %d: old value", round, i)
		}
	}
}
