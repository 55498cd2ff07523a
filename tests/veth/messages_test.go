package veth

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// pattern returns n bytes that differ with seed and position.
func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + seed*7 + i>>8)
	}
	return b
}

// recvFrom reads one receive completion with its source.
func recvFrom(t testing.TB, cq *fabric.CQ) (fabric.CQEntry, fi.Addr) {
	t.Helper()
	buf, src := make([]fabric.CQEntry, 1), make([]fi.Addr, 1)
	n, err := cq.SReadFrom(buf, src, int(compTimeout.Milliseconds()))
	require.NoError(t, err, "no receive completion within %v", compTimeout)
	require.Equal(t, 1, n)
	return buf[0], src[0]
}

func TestMessagesRMA(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		net := newNet(t, tc, netOpts{})
		a, b := net.nodes[sideA][0], net.target()

		t.Run("messages", func(t *testing.T) {
			// All receives posted, then all sends without waiting: the
			// messages must arrive intact, whole and in posting order.
			sizes := []int{1, 8, 100, 1000, 1400, 1472, 1500, 4096, 9000, 32 << 10, 64 << 10}
			rbufs := make([][]byte, len(sizes))
			for i := range sizes {
				rbufs[i] = make([]byte, 64<<10)
				require.NoError(t, b.ep.Recv(rbufs[i], mr.Desc{}, fi.AddrUnspec, i))
			}
			msgs := make([][]byte, len(sizes))
			for i, size := range sizes {
				msgs[i] = pattern(size, i)
				require.NoError(t, a.ep.Send(msgs[i], mr.Desc{}, a.peers[0], i))
			}
			// Each send completes once. The endpoint reports comp_order
			// FI_ORDER_NONE: a send completes at its answer, and answers
			// come back in any order (a delayed answer waits to ride on
			// traffic back; a large message's pull answers it). Seen here:
			// [2 3 4 5 6 7 8 0 1 9 10] and [10 0 1 2 ...], also on older
			// builds.
			var sent, want []any
			for i := range sizes {
				c := waitComp(t, a.txCQ)
				require.Equal(t, fi.SEND|fi.MSG, c.Flags)
				sent, want = append(sent, c.Context), append(want, i)
			}
			require.ElementsMatch(t, want, sent, "every send completes once")
			for i, size := range sizes {
				c, src := recvFrom(t, b.rxCQ)
				require.Equal(t, i, c.Context, "messages delivered in sending order")
				require.Equal(t, fi.RECV|fi.MSG, c.Flags)
				require.Equal(t, size, c.Len)
				require.Equal(t, b.peers[0], src, "FI_SOURCE is the sender's fi_addr")
				require.True(t, bytes.Equal(msgs[i], rbufs[i][:size]), "message %d (%d bytes) intact", i, size)
			}
			// And back, the largest message only.
			rbuf := make([]byte, 64<<10)
			require.NoError(t, a.ep.Recv(rbuf, mr.Desc{}, a.peers[0], "back"))
			back := pattern(64<<10, 99)
			require.NoError(t, b.ep.Send(back, mr.Desc{}, b.peers[0], "back"))
			waitComp(t, b.txCQ)
			c, src := recvFrom(t, a.rxCQ)
			require.Equal(t, "back", c.Context)
			require.Equal(t, a.peers[0], src)
			require.Equal(t, back, rbuf)
		})

		t.Run("rma", func(t *testing.T) {
			// want mirrors the target's memory. Each write lands at an
			// odd offset; reading one byte more on each side shows that
			// the neighbours are untouched.
			key := b.region.Key()
			want := make([]byte, len(b.mem))
			for i, size := range []int{1, 2, 3, 7, 8, 100, 1000, 1400, 1472, 1500, 4095, 4096, 65536, 300_001, 1 << 20} {
				off := 1 + (i*977)%(len(want)-(1<<20)-2)
				data := pattern(size, i+1)
				a.write(t, a.peers[0], uint64(off), data, key)
				copy(want[off:], data)
				got := a.read(t, a.peers[0], uint64(off-1), size+2, key)
				require.True(t, bytes.Equal(want[off-1:off+size+1], got), "RMA write+read of %d bytes at %d", size, off)
			}
			// Reads of sizes across the packet boundaries, from the start.
			for _, size := range []int{1, 1399, 1400, 1401, 2 * 1400, 64 << 10} {
				require.True(t, bytes.Equal(want[:size], a.read(t, a.peers[0], 0, size, key)), "RMA read of %d bytes", size)
			}
			// The target's memory itself, once its datapath has stopped.
			require.NoError(t, b.closeEndpoint())
			require.True(t, bytes.Equal(want, b.mem), "target memory after close")
		})
	})
}

func TestUserIDInCompletions(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		net := newNet(t, tc, netOpts{nA: 2, node: func(s side, _ int) nodeOpts {
			if s == sideB {
				return nodeOpts{avAttr: av.Attr{Flags: fi.AV_USER_ID}}
			}
			return nodeOpts{}
		}})
		b := net.target()
		senders := net.nodes[sideA]

		// exchange sends one message from each sender and returns the
		// source each was reported with, by sender.
		exchange := func(t *testing.T, round int) []fi.Addr {
			t.Helper()
			rbufs := make([][]byte, len(senders))
			for i := range senders {
				rbufs[i] = make([]byte, 64)
				require.NoError(t, b.ep.Recv(rbufs[i], mr.Desc{}, fi.AddrUnspec, i))
			}
			for i, s := range senders {
				require.NoError(t, s.ep.Send([]byte(fmt.Sprintf("round %d from %d", round, i)), mr.Desc{}, s.peers[0], nil))
				waitComp(t, s.txCQ)
			}
			srcs := make([]fi.Addr, len(senders))
			for range senders {
				c, src := recvFrom(t, b.rxCQ)
				var from int
				_, err := fmt.Sscanf(string(rbufs[c.Context.(int)][:c.Len]), fmt.Sprintf("round %d from %%d", round), &from)
				require.NoError(t, err)
				require.Less(t, from, len(senders))
				srcs[from] = src
			}
			return srcs
		}

		for i, src := range exchange(t, 0) {
			require.Equal(t, fi.AddrNotAvail, src, "sender %d before SetUserID", i)
		}
		userIDs := []fi.Addr{0xA11CE, 0xB0B}
		for i := range senders {
			require.NoError(t, b.av.SetUserID(b.peers[i], userIDs[i], 0))
		}
		for round := 1; round <= 3; round++ {
			require.Equal(t, userIDs, exchange(t, round), "FI_AV_USER_ID reported as the source")
		}
	})
}
