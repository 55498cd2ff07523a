package veth

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath/rxpoll"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestSharedPollExactlyOnceVeth: four initiator endpoints in one
// namespace and a target in another, on the kernel UDP socket, every
// domain with DomainAttr.SharedPoll, so the process's one receive poller
// serves all five sockets across both namespaces; nftables drops 5 % of
// the requests and responses at the receivers and duplicates 5 % on the
// way out. Every pipelined fetch-add on the target's counter completes
// once, successfully, with a distinct fetched value, and the counter ends
// at their number. Then with the poller spinning before it parks
// (rxpoll.SetSpin), the same.
func TestSharedPollExactlyOnceVeth(t *testing.T) {
	testenv.RequirePriv(t)
	udpCase := transportCases[0]
	require.Equal(t, "udp", udpCase.name)
	for _, spin := range []time.Duration{0, 50 * time.Microsecond} {
		t.Run(fmt.Sprintf("spin-%v", spin), func(t *testing.T) {
			rxpoll.SetSpin(spin)
			defer rxpoll.SetSpin(0)
			sharedPollExactlyOnce(t, udpCase)
		})
	}
}

func sharedPollExactlyOnce(t *testing.T, tc transportCase) {
	const initiators, depth, perInitiator, pct = 4, 16, 2000, 5
	net := newNet(t, tc, netOpts{nA: initiators, domain: func(a *fabric.DomainAttr) { a.SharedPoll = true }})
	require.True(t, rxpoll.Running(), "no shared poller with the endpoints enabled")
	target := net.target()
	key := target.region.Key()
	port := fmt.Sprint(net.ports[sideB][0])
	impaired := map[side]func() (int, int){
		sideA: nftImpair(t, net.ns[sideA], net.iface(sideA), "udp sport "+port, "udp dport "+port, pct),
		sideB: nftImpair(t, net.ns[sideB], net.iface(sideB), "udp dport "+port, "udp sport "+port, pct),
	}
	results := make([][]uint64, initiators)
	errs := make(chan error, initiators)
	for i, n := range net.nodes[sideA] {
		go func() {
			var err error
			results[i], err = fetchAdds{n: n, peer: n.peers[0], key: key, total: perInitiator,
				depth: depth, timeout: 2 * time.Minute}.run()
			errs <- err
		}()
	}
	for range initiators {
		require.NoError(t, <-errs)
	}
	checkPermutation(t, results)
	for _, s := range sides {
		dropped, duplicated := impaired[s]()
		t.Logf("nftables in %v: dropped %d packets coming in, duplicated %d going out", s, dropped, duplicated)
		require.Positive(t, dropped, "the drop rule in %v never matched", s)
	}
	require.NoError(t, target.closeEndpoint())
	require.Equal(t, uint64(initiators*perInitiator), binary.LittleEndian.Uint64(target.mem), "the target's counter")
	for _, n := range net.nodes[sideA] {
		require.NoError(t, n.closeEndpoint())
	}
	require.False(t, rxpoll.Running(), "the shared poller outlived the endpoints")
}
