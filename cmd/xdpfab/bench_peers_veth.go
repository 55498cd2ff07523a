package main

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/xdp"
)

// bench peers --net veth: the same phases with the target on xdpfab's
// fast path. The topology is bench incast's (buildIncastNet) with one
// initiator namespace: a bridge namespace, the target's namespace with
// xdpfab attached on its veth and `xdpfab bench serve` on AF_XDP, and one
// namespace holding every initiator endpoint's kernel UDP socket (one
// address, a port each). Over loopback the target's responses to one peer
// leave as one GSO message per batch and to 10,000 peers one pass through
// the stack each; on AF_XDP every response is a frame of its own whatever
// its destination, so the target's cost per operation should not depend
// on how many peers there are.

// peersVethPort is the target's port in its namespace (the namespaces are
// this run's own, so a fixed port collides with nothing).
const peersVethPort = 7473

// buildPeersVeth makes the topology and attaches xdpfab for the target,
// and with --ini xdp for the initiators on their veth too, its ports map
// sized for every initiator endpoint's port (the program's default holds
// 256).
func buildPeersVeth(o *peersOptions) (*incastNet, error) {
	n, err := buildIncastNet(1, &incastOptions{transport: "xdp", mode: o.mode, port: peersVethPort})
	if err != nil || !slices.Contains(o.inis, "xdp") {
		return n, err
	}
	mode, err := xdp.ParseMode(o.mode)
	if err != nil {
		return n, err
	}
	maxPorts := uint32(slices.Max(o.peers)) + 64
	err = inNetns(n.inis[0], func() error {
		a, err := xdp.Attach("xe0", xdp.Options{Mode: mode, MaxPorts: maxPorts})
		if err != nil {
			return err
		}
		return a.Close()
	})
	if err != nil {
		return n, fmt.Errorf("attach xdpfab in %s: %w", n.inis[0], err)
	}
	n.iniAttached = true
	return n, nil
}

// iniQueueLen bounds an AF_XDP initiator's receive queue: the operations
// it may have in flight (its share of --inflight, all of them with one
// peer) and room to spare, at least 8. A queue slot is a frame (2 KiB at
// the veth's MTU), so with 10,000 peers the queues hold 160 MiB at 8
// slots each instead of 20 GiB at the default 512.
func iniQueueLen(slots, peers int) int {
	return min(max(2*((slots+peers-1)/peers), 8), 512)
}

// openXDPInitiator opens an initiator endpoint on AF_XDP on the
// initiators' veth (the calling thread is in their namespace) and has the
// XDP program steer its port's datagrams to it.
func openXDPInitiator(local netip.AddrPort, slots, peers int, sharedPoll bool) (*afxdp.Transport, error) {
	tr, err := afxdp.Open(afxdp.Options{Iface: "xe0", Local: local, QueueLen: iniQueueLen(slots, peers), Batch: 8, SharedPoll: sharedPoll})
	if err != nil {
		return nil, err
	}
	if err := tr.Configure(xdp.PortConfig{}); err != nil {
		tr.Close()
		return nil, err
	}
	return tr, nil
}

// xdpStats sums the AF_XDP initiators' counters (zero for kernel ones).
func (l *peersLoad) xdpStats() afxdp.Stats {
	var sum afxdp.Stats
	for _, t := range l.xdps {
		s := t.Stats()
		sum.TxXSK += s.TxXSK
		sum.RxXSK += s.RxXSK
		sum.RxKernel += s.RxKernel
	}
	return sum
}

// startPeersTarget starts a fresh `xdpfab bench serve` on AF_XDP in the
// target namespace (it waits there for the previous phase's target to
// release the interface's queues). Its receive goroutine spins on the
// rings (bench serve --busy-poll) where the kind spins the target's
// receive side (--rx tgtspin, spinall).
func (n *incastNet) startPeersTarget(o *peersOptions) (*peersTarget, error) {
	return n.startTarget(&incastOptions{transport: "xdp", port: peersVethPort, key: o.key, busyPoll: o.spinTgt})
}

// peersVethLocal is where the initiators' sockets live: their namespace
// and address.
func (n *incastNet) peersVethLocal() (ns string, addr netip.AddrPort) {
	return n.inis[0], netip.AddrPortFrom(n.iniAddrs[0], 0)
}
