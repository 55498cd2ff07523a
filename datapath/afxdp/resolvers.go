package afxdp

import (
	"net/netip"

	"github.com/xdpfab/xdpfab/datapath/nexthop"
)

// The shared transports (Options.SharedPoll) of one address on a device
// share a next-hop resolver; any other transport keeps one of its own, as
// a lone endpoint did before there were shared ones.
// A resolver holds two netlink sockets, a probe socket and a goroutine
// that every neighbour, route and link change of the namespace wakes: one
// per transport made 10,000 endpoints on one interface (bench peers --ini
// xdp) cost 30,000 descriptors and 10,000 wake-ups per change, for one
// cache of the same hops.

type resolverRef struct {
	r    *nexthop.Resolver
	refs int
}

// resolverFor returns the device's resolver for source address src,
// opening it (in the calling thread's namespace) for the first transport
// of that address. putResolver releases it.
func (d *device) resolverFor(src netip.Addr) (*nexthop.Resolver, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rr := d.resolvers[src]; rr != nil {
		rr.refs++
		return rr.r, nil
	}
	r, err := nexthop.New(nexthop.Options{Src: src})
	if err != nil {
		return nil, err
	}
	d.resolvers[src] = &resolverRef{r: r, refs: 1}
	return r, nil
}

// putResolver releases a transport's hold on src's resolver, closing it
// with the last.
func (d *device) putResolver(src netip.Addr) {
	d.mu.Lock()
	rr := d.resolvers[src]
	if rr == nil {
		d.mu.Unlock()
		return
	}
	rr.refs--
	if rr.refs > 0 {
		d.mu.Unlock()
		return
	}
	delete(d.resolvers, src)
	d.mu.Unlock()
	rr.r.Close()
}
