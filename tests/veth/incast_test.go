package veth

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// Incast at small scale (issue 17; `xdpfab bench incast` is the full
// one): incastInitiators initiators, each in a namespace of its own, on a
// Linux bridge (in its own namespace) to one target, each keeping
// incastDepth fetch-adds in flight on one counter; then again with 5 %
// of the packets the bridge forwards dropped by nftables there (which
// sees AF_XDP traffic too, unlike netfilter in the endpoints'
// namespaces). Every fetch-add must execute exactly once and every
// initiator finish; Jain's fairness index over the initiators' rates is
// computed and logged (rates are a benchmark's business, not asserted).
const (
	incastInitiators = 4
	incastDepth      = 16
	incastOps        = 2000 // per initiator and phase
)

func TestIncast(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		br := testenv.NewBridge(t)
		tns := testenv.NewNetns(t)
		tv := br.Connect(t, tns, netip.MustParsePrefix("10.237.0.1/16"))
		inis := make([]*testenv.Netns, incastInitiators)
		ifaces := make([]string, incastInitiators)
		addrs := make([]netip.Addr, incastInitiators)
		for i := range inis {
			inis[i] = testenv.NewNetns(t)
			addrs[i] = netip.AddrFrom4([4]byte{10, 237, 1, byte(i + 1)})
			ifaces[i] = br.Connect(t, inis[i], netip.PrefixFrom(addrs[i], 16)).NameA
		}
		tport, iport := basePort[sideB], basePort[sideA]
		da := fabric.DomainAttr{Transport: fabric.TransportUDP}
		if tc.kernelFilters { // the AF_XDP cases
			mode := xdp.ModeNative
			if strings.HasSuffix(tc.name, "generic") {
				mode = xdp.ModeGeneric
			}
			attach := func(ns *testenv.Netns, iface string, port uint16) {
				do(t, ns, func() error {
					a, err := xdp.Attach(iface, xdp.Options{Mode: mode, Ports: map[uint16]xdp.PortConfig{port: {}}})
					if err != nil {
						return err
					}
					return a.Close() // the pinned link keeps it attached
				})
				t.Cleanup(func() { _ = ns.Do(func() error { return xdp.Detach(iface) }) })
			}
			attach(tns, tv.NameA, tport)
			for i := range inis {
				attach(inis[i], ifaces[i], iport)
			}
			da.Transport = fabric.TransportXDP
		}
		tda := da
		tda.Addr, tda.Port = tv.AddrA.Addr(), tport
		target := openNode(t, "target", tns, tda, nodeOpts{})
		nodes := make([]*node, incastInitiators)
		for i := range nodes {
			ida := da
			ida.Addr, ida.Port = addrs[i], iport
			nodes[i] = openNode(t, fmt.Sprintf("ini%d", i), inis[i], ida, nodeOpts{})
			nodes[i].peers = append(nodes[i].peers, insert(t, nodes[i].av, target.ep.GetName()))
			target.peers = append(target.peers, insert(t, target.av, nodes[i].ep.GetName()))
		}
		phase := func(name string, off uint64) {
			all := make([][]uint64, incastInitiators)
			rates := make([]float64, incastInitiators)
			errs := make([]error, incastInitiators)
			var wg sync.WaitGroup
			for i, n := range nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					all[i], errs[i] = fetchAdds{n: n, peer: n.peers[0], key: target.region.Key(), off: off,
						total: incastOps, depth: incastDepth, timeout: 60 * time.Second}.run()
					rates[i] = float64(len(all[i])) / time.Since(start).Seconds()
				}()
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "%s: initiator %d", name, i)
				require.Len(t, all[i], incastOps, "%s: initiator %d", name, i)
			}
			checkPermutation(t, all)
			sum := 0.0
			for _, r := range rates {
				sum += r
			}
			t.Logf("%s: %d initiators, aggregate %.0f ops/s, Jain's index %.3f, per initiator %.0f",
				name, incastInitiators, sum, jainIndex(rates), rates)
		}
		phase("lossless", 0)
		for _, args := range [][]string{
			{"add", "table", "bridge", "xftinc"},
			{"add", "chain", "bridge", "xftinc", "fw", "{ type filter hook forward priority 0; }"},
			{"add", "rule", "bridge", "xftinc", "fw", "meta", "l4proto", "udp", "numgen", "random", "mod", "100", "<", "5", "counter", "drop"},
		} {
			out, err := br.NS.Exec("nft", args...)
			require.NoError(t, err, "nft %v: %s", args, out)
		}
		phase("5% loss in the bridge", 64)
		out, err := br.NS.Exec("nft", "list", "table", "bridge", "xftinc")
		require.NoError(t, err)
		m := nftCounter.FindStringSubmatch(out)
		require.NotNil(t, m, "no counter in:\n%s", out)
		dropped, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		require.Positive(t, dropped, "the bridge dropped nothing: loss not injected")
		t.Logf("the bridge dropped %d packets", dropped)
	})
}

// jainIndex is Jain's fairness index: 1 when all xs are equal, 1/n when
// one has everything.
func jainIndex(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}
