package main

import (
	"net/netip"
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

// buildPeersVeth makes the topology and attaches xdpfab for the target.
func buildPeersVeth(o *peersOptions) (*incastNet, error) {
	return buildIncastNet(1, &incastOptions{transport: "xdp", mode: o.mode, port: peersVethPort})
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
