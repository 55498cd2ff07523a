package veth

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// TestMsgRMAForms drives the vector and msg forms of fi_msg(3) and
// fi_rma(3) across the veth pair: fi_sendmsg with remote CQ data from
// several buffers into a posted vector, fi_writedata and fi_writemsg with
// remote CQ data (target completions with the initiator as source), and
// fi_readmsg/fi_readv scattering a segmented read, checked byte for byte.
func TestMsgRMAForms(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		net := newNet(t, tc, netOpts{})
		a, b := net.nodes[sideA][0], net.target()
		peer := a.peers[0]

		t.Run("sendmsg", func(t *testing.T) {
			for i, size := range []int{1, 1000, 5000, 64 << 10} {
				msg := pattern(size, i)
				rb := make([]byte, size)
				third := size / 3
				require.NoError(t, b.ep.RecvMsg(&fabric.Msg{MsgIOV: [][]byte{rb[:third], rb[third : 2*third], rb[2*third:]},
					Addr: fi.AddrUnspec, Context: i}, fi.COMPLETION))
				half := size / 2
				require.NoError(t, a.ep.SendMsg(&fabric.Msg{MsgIOV: [][]byte{msg[:half], msg[half:]}, Addr: peer,
					Context: i, Data: uint64(0x5e0 + i)}, fi.REMOTE_CQ_DATA|fi.DELIVERY_COMPLETE))
				require.Equal(t, i, waitComp(t, a.txCQ).Context)
				c, src := recvFrom(t, b.rxCQ)
				require.Equal(t, i, c.Context)
				require.Equal(t, fi.RECV|fi.MSG|fi.REMOTE_CQ_DATA, c.Flags)
				require.Equal(t, uint64(0x5e0+i), c.Data)
				require.Equal(t, size, c.Len)
				require.Equal(t, b.peers[0], src)
				require.True(t, bytes.Equal(msg, rb), "sendmsg of %d bytes intact", size)
			}
		})

		t.Run("writedata_readmsg", func(t *testing.T) {
			key := b.region.Key()
			for i, size := range []int{8, 1500, 100_003} {
				off := uint64(1 + i*200_000)
				data := pattern(size, 40+i)
				if i%2 == 0 {
					require.NoError(t, a.ep.WriteData(data, mr.Desc{}, uint64(0xda7a+i), peer, off, key, "wd"))
				} else {
					q := size / 4
					require.NoError(t, a.ep.WriteMsg(&fabric.MsgRMA{MsgIOV: [][]byte{data[:q], data[q:]}, Addr: peer,
						RMAIOV: []fabric.RMAIov{{Addr: off, Len: size, Key: key}}, Context: "wd", Data: uint64(0xda7a + i)},
						fi.REMOTE_CQ_DATA))
				}
				require.Equal(t, "wd", waitComp(t, a.txCQ).Context)
				c, src := recvFrom(t, b.rxCQ)
				require.Equal(t, fabric.CQEntry{Flags: fi.RMA | fi.REMOTE_WRITE | fi.REMOTE_CQ_DATA, Data: uint64(0xda7a + i)}, c)
				require.Equal(t, b.peers[0], src, "the writer is the source")
				require.True(t, bytes.Equal(data, b.mem[off:off+uint64(size)]), "write of %d bytes at the target", size)

				got := make([]byte, size)
				q := size / 3
				require.NoError(t, a.ep.ReadMsg(&fabric.MsgRMA{MsgIOV: [][]byte{got[:q], got[q:]}, Addr: peer,
					RMAIOV: []fabric.RMAIov{{Addr: off, Len: size, Key: key}}, Context: "rm"}, 0))
				require.Equal(t, "rm", waitComp(t, a.txCQ).Context)
				require.True(t, bytes.Equal(data, got), "readmsg of %d bytes", size)
				clear(got)
				require.NoError(t, a.ep.ReadV([][]byte{got[:1], got[1:]}, nil, peer, off, key, "rv"))
				require.Equal(t, "rv", waitComp(t, a.txCQ).Context)
				require.True(t, bytes.Equal(data, got), "readv of %d bytes", size)
			}
		})
	})
}
