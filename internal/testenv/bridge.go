package testenv

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
)

// Bridge is a Linux bridge inside a namespace of its own: a switch that
// joins many namespaces (incast: many initiators, one target). Loss
// injected with nftables in the bridge's namespace (family bridge,
// forward hook) reaches every packet it switches, AF_XDP traffic
// included, which netfilter in the endpoints' namespaces never sees.
type Bridge struct {
	NS    *Netns
	Name  string
	ports int
}

// NewBridge creates a namespace holding an up bridge; both go when tb ends.
func NewBridge(tb testing.TB) *Bridge {
	tb.Helper()
	ns := NewNetns(tb)
	la := netlink.NewLinkAttrs()
	la.Name = "xfbr0"
	br := &netlink.Bridge{LinkAttrs: la}
	if err := ns.nl.LinkAdd(br); err != nil {
		tb.Fatalf("create bridge in %s: %v", ns.Name, err)
	}
	if err := ns.nl.LinkSetUp(br); err != nil {
		tb.Fatalf("bridge up in %s: %v", ns.Name, err)
	}
	return &Bridge{NS: ns, Name: la.Name}
}

// Connect joins ns to the bridge with a veth pair: end A in ns, up with
// addr, end B a port of the bridge (no address). The returned Veth's A
// side is ns's end; B is the bridge's namespace.
func (b *Bridge) Connect(tb testing.TB, ns *Netns, addr netip.Prefix) *Veth {
	tb.Helper()
	b.ports++
	v := NewVeth(tb, ns, b.NS, VethOptions{AddrA: addr,
		// The bridge port needs no address; a link-local one from
		// 169.254/16 is harmless and keeps NewVeth's contract.
		AddrB: netip.PrefixFrom(netip.AddrFrom4([4]byte{169, 254, byte(b.ports >> 8), byte(b.ports)}), 32),
		NameB: fmt.Sprintf("xp%x-%d", os.Getpid()&0xffff, b.ports)})
	port, err := b.NS.nl.LinkByName(v.NameB)
	if err == nil {
		var br netlink.Link
		if br, err = b.NS.nl.LinkByName(b.Name); err == nil {
			err = b.NS.nl.LinkSetMaster(port, br)
		}
	}
	if err != nil {
		tb.Fatalf("enslave %s to %s: %v", v.NameB, b.Name, err)
	}
	return v
}
