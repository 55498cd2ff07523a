package afxdp_test

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// TestSharedPollReaders: transports opened with SharedPoll on one
// interface get their datagrams through their readers (NotifyReady), run
// by the shared poller, with no goroutine of their own: each datagram
// reaches the reader of the port it was sent to, exactly once, through
// the AF_XDP rings, also when a reader takes one datagram per call and
// so leaves the rest of a burst queued (the device runs it again); after
// stop, the reader is not called again.
func TestSharedPollReaders(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	attachBoth(t, v, xdp.ModeGeneric)
	const ports, per = 3, 40
	trs := make([]*afxdp.Transport, ports)
	require.NoError(t, a.Do(func() error {
		for i := range trs {
			tr, err := afxdp.Open(afxdp.Options{Iface: v.NameA, Local: netip.AddrPortFrom(v.AddrA.Addr(), uint16(testPort+1+i)),
				QueueLen: 2 * per, Batch: 8, SharedPoll: true})
			if err != nil {
				return err
			}
			trs[i] = tr
			if err := tr.Configure(xdp.PortConfig{}); err != nil {
				return err
			}
		}
		return nil
	}))
	for _, tr := range trs {
		t.Cleanup(func() { _ = tr.Close() })
	}
	var mu sync.Mutex
	got := make([]map[string]int, ports)
	stops := make([]func(), ports)
	for i, tr := range trs {
		got[i] = map[string]int{}
		pkts := []datapath.Packet{{Buf: make([]byte, 2048)}} // one per call
		stop, ok, err := tr.NotifyReady(func() {
			n, err := tr.Receive(pkts, false)
			if err != nil || n == 0 {
				return
			}
			mu.Lock()
			got[i][string(pkts[0].Buf)]++
			mu.Unlock()
		})
		require.NoError(t, err)
		require.True(t, ok)
		stops[i] = stop
	}
	// The sender: an AF_XDP transport on B (it builds full checksums, so
	// A's program steers the datagrams to the rings).
	var tx *afxdp.Transport
	require.NoError(t, b.Do(func() error {
		var err error
		tx, err = afxdp.Open(afxdp.Options{Iface: v.NameB, Local: netip.AddrPortFrom(v.AddrB.Addr(), testPort)})
		return err
	}))
	t.Cleanup(func() { _ = tx.Close() })
	dst := func(i int) netip.AddrPort { return netip.AddrPortFrom(v.AddrA.Addr(), uint16(testPort+1+i)) }
	require.Eventually(t, func() bool {
		_ = tx.Send([]datapath.Packet{{Buf: []byte("probe"), Addr: dst(0)}})
		return tx.Stats().TxXSK > 0
	}, 5*time.Second, time.Millisecond)
	// Bursts to every port, larger than a reader's one datagram.
	burst := make([]datapath.Packet, 0, ports*per)
	for k := range per {
		for i := range ports {
			burst = append(burst, datapath.Packet{Buf: fmt.Appendf(nil, "%d-%d", i, k), Addr: dst(i)})
		}
	}
	for len(burst) > 0 {
		n := min(len(burst), 8)
		require.NoError(t, tx.Send(burst[:n]))
		burst = burst[n:]
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range ports {
			for k := range per {
				if got[i][fmt.Sprintf("%d-%d", i, k)] != 1 {
					return false
				}
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "every datagram reached its port's reader")
	mu.Lock()
	for i := range ports {
		for s, c := range got[i] {
			if s != "probe" {
				require.Equal(t, 1, c, "port %d datagram %s", i, s)
				var pi, k int
				_, err := fmt.Sscanf(s, "%d-%d", &pi, &k)
				require.NoError(t, err)
				require.Equal(t, i, pi, "datagram %s at port %d", s, i)
			}
		}
	}
	mu.Unlock()
	for i, tr := range trs {
		require.GreaterOrEqual(t, tr.Stats().RxXSK, uint64(per), "port %d through the rings", i)
	}
	// Stopped: the reader is not called again; the datagram waits in the
	// queue for a Receive.
	stops[0]()
	before := len(got[0])
	require.NoError(t, tx.Send([]datapath.Packet{{Buf: []byte("after"), Addr: dst(0)}}))
	pkts := []datapath.Packet{{Buf: make([]byte, 2048)}}
	require.Eventually(t, func() bool {
		n, err := trs[0].Receive(pkts, false)
		return err == nil && n == 1 && string(pkts[0].Buf) == "after"
	}, 5*time.Second, time.Millisecond)
	mu.Lock()
	require.Equal(t, before, len(got[0]))
	mu.Unlock()
}
