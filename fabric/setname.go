package fabric

import (
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/metrics"
)

// SetAddr is fi_setname (fi_cm(3)) on an endpoint that is not enabled yet:
// like bind(2), it moves the endpoint to addr's port, opening a new
// transport there and closing the one it had (GetName then reports the
// new address; peers must learn it before they send). The IP address is
// the domain's: the domain resolved its interface, its transport (AF_XDP
// or the kernel socket) and its packet size for that address, so addr
// must carry the endpoint's own IP or an unspecified one (0.0.0.0, ::),
// else SetAddr fails with FI_EADDRNOTAVAIL. Port 0 keeps the port the
// endpoint already has (the page: a provider assigns a service address
// only when none was assigned, and an endpoint has one from its open).
//
// It fails with FI_EOPBADSTATE once the endpoint is enabled, FI_EINVAL
// when it is closed or addr is invalid, FI_EADDRINUSE when the port is
// taken, FI_EOPNOTSUPP for an endpoint opened on an injected transport
// (EPAttr.Transport, tests), and then leaves the endpoint as it was.
func (ep *Endpoint) SetAddr(addr netip.AddrPort) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	switch {
	case ep.closed:
		return fmt.Errorf("ep setname: closed: %w", fi.EINVAL)
	case ep.enabled:
		return fmt.Errorf("ep setname: endpoint already enabled: %w", fi.EOPBADSTATE)
	case !addr.Addr().IsValid():
		return fmt.Errorf("ep setname: no address: %w", fi.EINVAL)
	case ep.attr.Transport != nil:
		return fmt.Errorf("ep setname: endpoint on an injected transport: %w", fi.EOPNOTSUPP)
	}
	cur := ep.tr.LocalAddr()
	if ip := addr.Addr().Unmap(); !ip.IsUnspecified() && ip != cur.Addr().Unmap() {
		return fmt.Errorf("ep setname: %v is not the endpoint's address %v: %w", addr.Addr(), cur.Addr(), fi.EADDRNOTAVAIL)
	}
	if addr.Port() == 0 || addr.Port() == cur.Port() {
		return nil
	}
	tr, shared, err := ep.dom.openTransport(addr.Port())
	if err != nil {
		return fmt.Errorf("ep setname: %w", err)
	}
	size, err := deriveSizes(tr.LocalAddr().Addr(), frameDataOf(tr))
	if err != nil {
		tr.Close()
		return fmt.Errorf("ep setname: endpoint on %v: %w", tr.LocalAddr(), err)
	}
	old := ep.tr
	ep.unregisterMetrics()
	ep.tr, ep.sharedPoll = tr, shared
	ep.countUDP()
	ep.size = size
	ep.amo = size.atomics()
	ep.eagerLimit = max(ep.eagerLimit, size.injectSize)
	ep.unregisterMetrics = metrics.Register(metrics.Source{Stats: ep.Stats, Transport: ep.tr})
	old.Close()
	return nil
}
