package afxdp_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// TestFrameSizeFollowsMTU: the device's UMEM frames are 2048 bytes on an
// interface whose MTU fits them (the default 1500, 1774) and 4096 above
// (1775, a jumbo 3000), so a transport's FrameData is 1792 or 3840.
func TestFrameSizeFollowsMTU(t *testing.T) {
	testenv.RequirePriv(t)
	for _, tc := range []struct{ mtu, want int }{{0, 1792}, {1774, 1792}, {1775, 3840}, {3000, 3840}} {
		t.Run(fmt.Sprint(tc.mtu), func(t *testing.T) {
			a, b := testenv.NewNetns(t), testenv.NewNetns(t)
			v := testenv.NewVeth(t, a, b, testenv.VethOptions{MTU: tc.mtu})
			attachBoth(t, v, xdp.ModeNative)
			var tr *afxdp.Transport
			require.NoError(t, a.Do(func() error {
				var err error
				tr, err = afxdp.Open(afxdp.Options{Iface: v.NameA, Local: netip.AddrPortFrom(v.AddrA.Addr(), testPort)})
				return err
			}))
			defer func() { require.NoError(t, tr.Close()) }()
			require.Equal(t, tc.want, tr.FrameData())
		})
	}
}
