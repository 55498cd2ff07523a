package reliable

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// vethNet builds two namespaces joined by veth: the target listens in B
// (10.200.0.2), initiators in A (10.200.0.1). dropPct > 0 installs an
// nftables rule dropping that share of incoming UDP to our sockets in both
// namespaces, so requests and responses are both lost on the real path.
func vethNet(t testing.TB, dropPct int) func(t testing.TB, target bool) *udp.Transport {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	testenv.NewVeth(t, a, b, testenv.VethOptions{})
	if dropPct > 0 {
		for _, ns := range []*testenv.Netns{a, b} {
			for _, args := range [][]string{
				{"add", "table", "inet", "xf"},
				{"add", "chain", "inet", "xf", "in", "{ type filter hook input priority 0; }"},
				{"add", "rule", "inet", "xf", "in", "ip", "saddr", "10.200.0.0/24", "meta", "l4proto", "udp",
					"numgen", "random", "mod", "100", "<", fmt.Sprint(dropPct), "counter", "drop"},
			} {
				if out, err := ns.Exec("nft", args...); err != nil {
					t.Fatalf("nft %v: %v %s", args, err, out)
				}
			}
		}
		t.Cleanup(func() {
			out, _ := b.Exec("nft", "list", "chain", "inet", "xf", "in")
			t.Logf("target netns drop rule after the test:\n%s", out)
		})
	}
	return func(tb testing.TB, target bool) *udp.Transport {
		ns, addr := a, "10.200.0.1:0"
		if target {
			ns, addr = b, "10.200.0.2:0"
		}
		var u *udp.Transport
		err := ns.Do(func() (err error) {
			u, err = udp.Listen(netip.MustParseAddrPort(addr), udp.Options{})
			return err
		})
		if err != nil {
			tb.Fatal(err)
		}
		return u
	}
}

func TestVethSegmented(t *testing.T) {
	for _, pct := range []int{0, 1, 5, 20} {
		t.Run(fmt.Sprintf("drop%d", pct), func(t *testing.T) {
			testSegmented(t, netOpts{open: vethNet(t, pct)})
		})
	}
}

func TestVethFetchAddExactlyOnce(t *testing.T) {
	for _, c := range []struct{ pct, n int }{{0, 10000}, {1, 10000}, {5, 10000}, {20, 2500}} {
		t.Run(fmt.Sprintf("drop%d", c.pct), func(t *testing.T) {
			open := vethNet(t, c.pct) // before the count: testenv keeps a signal goroutine
			checkGoroutines(t)
			start := time.Now()
			s := fetchAddRun(t, netOpts{open: open}, 4, c.n, 64)
			t.Logf("4x%d fetch-add over veth with %d%% nft drop in %v; target: delivered %d, replayed %d, held %d",
				c.n, c.pct, time.Since(start), s.Delivered, s.ReplayedFromCache, s.Held)
		})
	}
}
