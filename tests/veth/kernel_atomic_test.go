package veth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/datapath/lossy"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/xdp"
)

// kernelKey is the MR key of the target's kernel-resident region.
const kernelKey = 0x5000

func counterDelta(before, after xdp.Counters) map[string]uint64 {
	m := map[string]uint64{}
	for i := range after {
		if d := after[i] - before[i]; d != 0 {
			m[bpf.Counter(i).Name()] = d
		}
	}
	return m
}

// TestKernelResidentExactlyOnce runs K initiators × N pipelined fetch-adds
// on one counter of the target's kernel-resident region, served by the
// target's XDP program, at 0, 5 and 20 % loss (requests dropped,
// duplicated and reordered as they leave the initiators, responses
// dropped as they arrive), with every 50th fetch-add going to a counter of
// an ordinary region, which only user space serves: those packets (and
// the fetch-adds coalesced with them, and requests after a gap) move the
// peer's session from XDP to user space and back, so both executors
// serve one session. Both counters end exact and every fetched value is
// distinct; the XDP counters show both executors and the ring at work.
func TestKernelResidentExactlyOnce(t *testing.T) {
	testenv.RequirePriv(t)
	for _, tc := range transportCases {
		if tc.name != "xdp-native" && tc.name != "xdp-generic" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			for _, pct := range []int{0, 5, 20} {
				if tc.name == "xdp-generic" && pct != 5 {
					continue
				}
				t.Run(fmt.Sprintf("%dpct", pct), func(t *testing.T) { kernelExactlyOnce(t, tc, pct, 4, 5000) })
			}
		})
	}
}

func kernelExactlyOnce(t *testing.T, tc transportCase, pct, initiators, perInitiator int) {
	const depth, altEvery = 32, 50
	rate := float64(pct) / 100
	o := netOpts{nA: initiators, node: func(s side, i int) nodeOpts {
		no := nodeOpts{noRemoteCntr: true}
		if s == sideA && pct > 0 {
			no.lossy = &lossy.Config{Seed: uint64(10*pct + 2*i), Loss: rate, Duplicate: rate, Reorder: rate, RecvLoss: rate}
		}
		return no
	}}
	net := newNet(t, tc, o)
	target := net.target()
	m, mem, err := target.dom.MRRegKernel(64<<10, fi.REMOTE_READ|fi.REMOTE_WRITE, kernelKey, 0, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	before := xdpCounters(t, net, sideB, tc)

	start := time.Now()
	results := make([][]uint64, initiators)
	alts := make([][]uint64, initiators)
	errs := make(chan error, initiators)
	for i, n := range net.nodes[sideA] {
		go func() {
			var err error
			results[i], err = fetchAdds{n: n, peer: n.peers[0], key: kernelKey, off: 64, total: perInitiator,
				depth: depth, timeout: 150 * time.Second,
				altEvery: altEvery, altKey: target.region.Key(), altOff: 0, alt: &alts[i]}.run()
			errs <- err
		}()
	}
	for range initiators {
		require.NoError(t, <-errs)
	}
	elapsed := time.Since(start)
	total := initiators * perInitiator
	nAlt := 0
	for _, a := range alts {
		nAlt += len(a)
	}
	// The kernel-resident counter, read by the application as Go reads
	// memory the program updates: with sync/atomic.
	kc := atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[64])))
	require.Equal(t, uint64(total-nAlt), kc, "kernel-resident counter")
	checkPermutation(t, results)
	checkPermutation(t, alts)
	a := net.nodes[sideA][0]
	require.Equal(t, uint64(nAlt), binary.LittleEndian.Uint64(a.read(t, a.peers[0], 0, 8, target.region.Key())), "user-space counter")
	// An RMA read of the kernel-resident region goes through user space
	// and sees what XDP wrote.
	require.Equal(t, kc, binary.LittleEndian.Uint64(a.read(t, a.peers[0], 64, 8, kernelKey)))

	d := counterDelta(before, xdpCounters(t, net, sideB, tc))
	s := target.ep.Stats()
	t.Logf("%d fetch-adds (%d on the user-space region) in %v (%.0f/s); XDP: %v; user space delivered %d, replayed %d, held %d",
		total, nAlt, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), d, s.Delivered, s.ReplayedFromCache, s.Held)
	require.Positive(t, d["tx_served"], "XDP served requests")
	require.Positive(t, d["up_user_owns"]+d["up_not_next"], "requests moved the session to user space")
	require.Positive(t, s.Delivered, "user space served requests")
	if pct > 0 {
		require.Positive(t, d["tx_cached"], "XDP answered retransmissions from the ring")
	}
}

// TestKernelResidentClose: a fetch-add on a kernel-resident region is
// served in XDP; once the region's Close returns, the program refuses the
// key (the request goes up and user space answers FI_EKEYREJECTED).
func TestKernelResidentClose(t *testing.T) {
	testenv.RequirePriv(t)
	tc := transportCases[1]
	require.Equal(t, "xdp-native", tc.name)
	net := newNet(t, tc, netOpts{node: func(side, int) nodeOpts { return nodeOpts{noRemoteCntr: true} }})
	target, a := net.target(), net.nodes[sideA][0]
	m, _, err := target.dom.MRRegKernel(4096, fi.REMOTE_READ|fi.REMOTE_WRITE, kernelKey, 0, nil)
	require.NoError(t, err)
	fetchAdd := func() error {
		res := make([]byte, 8)
		require.NoError(t, a.ep.FetchAtomic(one, 1, mr.Desc{}, res, mr.Desc{}, a.peers[0], 0, kernelKey,
			fatomic.UINT64, fatomic.SUM, "fa"))
		buf := make([]fabric.CQEntry, 1)
		_, err := a.txCQ.SRead(buf, int(compTimeout/time.Millisecond))
		if errors.Is(err, fi.EAVAIL) {
			e, rerr := a.txCQ.ReadErr(0)
			require.NoError(t, rerr)
			return e.Err
		}
		return err
	}
	// The first opens the session in user space, which hands it to XDP
	// after sending its response: a request that overtakes the hand-off
	// goes up again (up_user_owns), so wait (boundedly) for XDP to serve.
	var d map[string]uint64
	for i := 0; i < 20; i++ {
		before := xdpCounters(t, net, sideB, tc)
		require.NoError(t, fetchAdd())
		d = counterDelta(before, xdpCounters(t, net, sideB, tc))
		if d["tx_served"] > 0 {
			break
		}
	}
	require.Equal(t, uint64(1), d["tx_served"], "served in XDP: %v", d)

	require.NoError(t, m.Close())
	before := xdpCounters(t, net, sideB, tc)
	require.ErrorIs(t, fetchAdd(), fi.EKEYREJECTED)
	d = counterDelta(before, xdpCounters(t, net, sideB, tc))
	require.Zero(t, d["tx_served"], "nothing served after Close: %v", d)
}
