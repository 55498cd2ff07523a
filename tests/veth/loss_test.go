package veth

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath/lossy"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// lossOpsPerInitiator is each initiator's share of the fetch-adds. At 20 %
// the four initiators finish within 30 s under the race detector even on a
// loaded 2-core machine (in 2-4 s without it), so no rate is scaled down.
const lossOpsPerInitiator = 10000

func TestExactlyOnceUnderLoss(t *testing.T) {
	testenv.RequirePriv(t)
	forEachTransport(t, func(t *testing.T, tc transportCase) {
		hows := []string{"lossy"}
		if tc.netfilterSees {
			hows = append(hows, "nft")
		}
		for _, how := range hows {
			for _, pct := range []int{1, 5, 20} {
				t.Run(fmt.Sprintf("%s-%dpct", how, pct), func(t *testing.T) {
					exactlyOnce(t, tc, how, pct, lossOpsPerInitiator)
				})
			}
		}
	})
}

// exactlyOnce runs 4 initiators × perInitiator pipelined fetch-adds on one
// counter at the target with pct % impairment, how = "lossy" (loss,
// duplication and reordering of every endpoint's sends by datapath/lossy)
// or "nft" (nftables rules in both namespaces dropping incoming requests
// and responses at random and duplicating outgoing ones on the veth: the
// real path, which has no reordering to offer without netem), then
// multi-packet RMA writes and reads.
func exactlyOnce(t *testing.T, tc transportCase, how string, pct, perInitiator int) {
	const initiators, depth = 4, 32
	rate := float64(pct) / 100
	o := netOpts{nA: initiators}
	if how == "lossy" {
		o.node = func(s side, i int) nodeOpts {
			return nodeOpts{lossy: &lossy.Config{Seed: uint64(10*pct + 2*i + int(s)), Loss: rate, Duplicate: rate, Reorder: rate}}
		}
	}
	net := newNet(t, tc, o)
	target := net.target()
	key := target.region.Key()
	if how == "nft" {
		// Requests leave A and enter B on the target port, responses and
		// acks leave B and enter A from it.
		port := fmt.Sprint(net.ports[sideB][0])
		impaired := map[side]func() (int, int){
			sideA: nftImpair(t, net.ns[sideA], net.iface(sideA), "udp sport "+port, "udp dport "+port, pct),
			sideB: nftImpair(t, net.ns[sideB], net.iface(sideB), "udp dport "+port, "udp sport "+port, pct),
		}
		defer func() {
			for _, s := range sides {
				dropped, duplicated := impaired[s]()
				t.Logf("nftables in %v: dropped %d packets coming in, duplicated %d going out", s, dropped, duplicated)
				require.Positive(t, dropped, "the drop rule in %v never matched", s)
				require.Positive(t, duplicated, "the duplicate rule in %v never matched", s)
			}
		}()
	}

	start := time.Now()
	results := make([][]uint64, initiators)
	errs := make(chan error, initiators)
	for i, n := range net.nodes[sideA] {
		go func() {
			var err error
			results[i], err = fetchAdds{n: n, peer: n.peers[0], key: key, off: 0, total: perInitiator,
				depth: depth, timeout: 150 * time.Second}.run()
			errs <- err
		}()
	}
	for range initiators {
		require.NoError(t, <-errs)
	}
	elapsed := time.Since(start)
	total := initiators * perInitiator
	a := net.nodes[sideA][0]
	require.Equal(t, uint64(total), binary.LittleEndian.Uint64(a.read(t, a.peers[0], 0, 8, key)), "counter after %d fetch-adds", total)
	checkPermutation(t, results)

	// RMA data spanning many packets, each initiator in its own range.
	const rmaSize, rmaStride = 150_001, 200 << 10
	for i, n := range net.nodes[sideA] {
		off := uint64(4096 + i*rmaStride)
		data := pattern(rmaSize, 100+i)
		n.write(t, n.peers[0], off, data, key)
		require.True(t, bytes.Equal(data, n.read(t, n.peers[0], off, rmaSize, key)), "RMA write+read of %d bytes under loss", rmaSize)
	}

	s := target.ep.Stats()
	var retx uint64
	for _, n := range net.nodes[sideA] {
		retx += n.ep.Stats().Retransmits
	}
	t.Logf("%d fetch-adds (%d in flight per initiator) in %v (%.0f/s); target delivered %d, replayed from cache %d, held %d; initiators retransmitted %d",
		total, depth, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), s.Delivered, s.ReplayedFromCache, s.Held, retx)
	if how == "lossy" {
		var ls lossy.Stats
		for _, side := range net.nodes {
			for _, n := range side {
				st := n.lossy.Stats()
				ls.Dropped += st.Dropped
				ls.Duplicated += st.Duplicated
				ls.Reordered += st.Reordered
			}
		}
		t.Logf("lossy: dropped %d, duplicated %d, reordered %d", ls.Dropped, ls.Duplicated, ls.Reordered)
		require.Positive(t, ls.Dropped)
		require.Positive(t, ls.Duplicated)
		require.Positive(t, ls.Reordered)
	}

	// And the target's memory itself, once its datapath has stopped.
	require.NoError(t, target.closeEndpoint())
	require.Equal(t, uint64(total), binary.LittleEndian.Uint64(target.mem))
	for i := range initiators {
		off := 4096 + i*rmaStride
		require.True(t, bytes.Equal(pattern(rmaSize, 100+i), target.mem[off:off+rmaSize]), "initiator %d's RMA data in target memory", i)
	}
}

// nftImpair installs two nftables rules in ns: one dropping pct % of the
// incoming packets matching in (e.g. "udp dport 7200"), on the input hook,
// and one sending pct % of the packets matching out twice, on the egress
// hook of iface. It returns a function reporting how many packets each has
// dropped and duplicated so far.
//
// Drops are made at the receiver: a drop on the sender's egress is
// reported to a socket with IP_RECVERR as ENOBUFS, which hangs
// datapath/udp's Send (TestUDPSendSurvivesLocalDrop). Packets an XDP
// program redirects to an AF_XDP socket never reach the input hook, and
// AF_XDP sends bypass netfilter altogether.
func nftImpair(t testing.TB, ns *testenv.Netns, iface, in, out string, pct int) func() (dropped, duplicated int) {
	t.Helper()
	random := []string{"numgen", "random", "mod", "100", "<", strconv.Itoa(pct), "counter"}
	rule := func(family, table, chain, match string, verdict ...string) []string {
		r := append([]string{"add", "rule", family, table, chain}, strings.Fields(match)...)
		return append(append(r, random...), verdict...)
	}
	for _, args := range [][]string{
		{"add", "table", "inet", "xft"},
		{"add", "chain", "inet", "xft", "in", "{ type filter hook input priority 0; }"},
		rule("inet", "xft", "in", in, "drop"),
		{"add", "table", "netdev", "xftdup"},
		{"add", "chain", "netdev", "xftdup", "out", "{ type filter hook egress device " + iface + " priority 0; }"},
		rule("netdev", "xftdup", "out", out, "dup", "to", iface),
	} {
		out, err := ns.Exec("nft", args...)
		require.NoError(t, err, "nft %v: %s", args, out)
	}
	counter := func(family, table string) int {
		out, err := ns.Exec("nft", "list", "table", family, table)
		require.NoError(t, err)
		m := nftCounter.FindStringSubmatch(out)
		require.NotNil(t, m, "no counter in:\n%s", out)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	return func() (int, int) { return counter("inet", "xft"), counter("netdev", "xftdup") }
}

var nftCounter = regexp.MustCompile(`counter packets (\d+)`)
