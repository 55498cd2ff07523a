package fabric

import (
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/fi"
)

// Opening objects from an Info, as C does: fi_fabric(info->fabric_attr),
// fi_domain(fabric, info), fi_endpoint(domain, info). Each checks the
// attributes it is given against what xdpfab offers, as GetInfo checks
// hints, and fails with FI_EINVAL where they ask for more: an Info that
// GetInfo answered always opens (on the host and namespace that answered
// it), and an attribute raised above a limit afterwards does not.

// OpenFabricInfo is fi_fabric(attr): it opens the fabric an Info's
// FabricAttr names. prov_name must be xdpfab's (or empty), and the
// versions no newer than xdpfab's.
func OpenFabricInfo(attr *FabricAttr, context any) (*Fabric, error) {
	if attr == nil {
		return OpenFabric("", context)
	}
	if err := checkFabricAttr(attr, ""); err != nil {
		return nil, fmt.Errorf("fabric: %w: %w", err, fi.EINVAL)
	}
	return OpenFabric(attr.Name, context)
}

// DomainFromInfo is fi_domain(fabric, info): a domain on info's source
// address (SrcAddr; without it the first address of the interface
// DomainAttr.Name names, else 127.0.0.1) with info's domain attributes,
// TransportAuto. Its Info reports info, narrowed as GetInfo would.
func (f *Fabric) DomainFromInfo(info *Info, context any) (*Domain, error) {
	if info == nil || info.DomainAttr == nil {
		return nil, fmt.Errorf("domain: no info or domain attributes: %w", fi.EINVAL)
	}
	version := APIVersion
	if info.FabricAttr != nil {
		if err := checkFabricAttr(info.FabricAttr, ""); err != nil {
			return nil, fmt.Errorf("domain: %w: %w", err, fi.EINVAL)
		}
		if v := info.FabricAttr.APIVersion; v != 0 {
			version = v
		}
	}
	if err := checkOpenInfo(info); err != nil {
		return nil, fmt.Errorf("domain: %w: %w", err, fi.EINVAL)
	}
	attr := *info.DomainAttr
	if info.SrcAddr != nil {
		ap, ok := parseSockaddr(info.SrcAddr)
		if !ok {
			return nil, fmt.Errorf("domain: src_addr is not a sockaddr_in/in6: %w", fi.EINVAL)
		}
		attr.Addr, attr.Port = ap.Addr(), ap.Port()
	}
	d, err := f.Domain(attr, context)
	if err != nil {
		return nil, err
	}
	d.info, d.version = info.Clone(), version
	return d, nil
}

// EndpointFromInfo is fi_endpoint(domain, info): an endpoint with info's
// endpoint, tx and rx attributes (tx_attr.size and rx_attr.size bound the
// outstanding operations and posted receives; op_flags become the default
// op flags: xdpfab keeps one set, so FI_COMPLETION in either applies to
// both), bound to info's source port when it has one. Attributes xdpfab
// cannot honour on this domain (a size or limit above xdpfab's, a
// capability, order or op flag it lacks, another endpoint type, a
// source address other than the domain's) fail with FI_EINVAL.
func (d *Domain) EndpointFromInfo(info *Info, context any) (*Endpoint, error) {
	attr, err := d.EndpointAttrFromInfo(info)
	if err != nil {
		return nil, err
	}
	return d.Endpoint(attr, context)
}

// EndpointAttrFromInfo checks info as EndpointFromInfo does and returns
// the EPAttr it would open the endpoint with, for callers that add
// options an Info cannot say (the C provider sets AcceptUnknown).
func (d *Domain) EndpointAttrFromInfo(info *Info) (EPAttr, error) {
	if info == nil {
		return EPAttr{}, fmt.Errorf("endpoint: no info: %w", fi.EINVAL)
	}
	if err := checkOpenInfo(info); err != nil {
		return EPAttr{}, fmt.Errorf("endpoint: %w: %w", err, fi.EINVAL)
	}
	limits := d.Info()
	if info.TxAttr != nil {
		if err := checkTxAttr(info.TxAttr, limits.TxAttr, info.TxAttr.Caps); err != nil {
			return EPAttr{}, fmt.Errorf("endpoint: %w: %w", err, fi.EINVAL)
		}
	}
	attr := EPAttr{Type: EPRDM, Caps: info.Caps}
	if info.EPAttr != nil {
		attr.Type = info.EPAttr.Type
	}
	if info.TxAttr != nil {
		attr.TxSize, attr.OpFlags = info.TxAttr.Size, info.TxAttr.OpFlags
	}
	if info.RxAttr != nil {
		attr.RxSize = info.RxAttr.Size
		attr.OpFlags |= info.RxAttr.OpFlags &^ fi.MULTI_RECV
		attr.RxOpFlags = info.RxAttr.OpFlags & fi.MULTI_RECV
	}
	if info.SrcAddr != nil {
		ap, ok := parseSockaddr(info.SrcAddr)
		if !ok {
			return EPAttr{}, fmt.Errorf("endpoint: src_addr is not a sockaddr_in/in6: %w", fi.EINVAL)
		}
		if ap.Addr() != d.localAddr().Unmap().WithZone("") {
			return EPAttr{}, fmt.Errorf("endpoint: src_addr %v is not the domain's address %v: %w", ap, d.localAddr(), fi.EINVAL)
		}
		attr.Port = ap.Port()
	}
	return attr, nil
}

// checkOpenInfo checks what an Info asks of a domain or endpoint beyond
// the domain attributes (Fabric.Domain checks those).
func checkOpenInfo(info *Info) error {
	if extra := info.Caps &^ ProviderCaps; extra != 0 {
		return mismatchf("caps %#x not supported", uint64(extra))
	}
	// info.Mode is what the application accepts: xdpfab needs no mode.
	switch info.AddrFormat {
	case fi.FormatUnspec, fi.FormatSockaddr, fi.FormatSockaddr4, fi.FormatSockaddr6:
	default:
		return mismatchf("address format %v", info.AddrFormat)
	}
	if info.EPAttr != nil {
		if err := checkEndpointAttr(info.EPAttr); err != nil {
			return err
		}
	}
	expanded := info.Caps
	if expanded == 0 {
		expanded = ProviderCaps
	}
	if expanded&(fi.MSG|fi.TAGGED) != 0 && expanded&msgDirCaps == 0 {
		expanded |= msgDirCaps
	}
	if expanded&(fi.RMA|fi.ATOMIC) != 0 && expanded&rmaDirCaps == 0 {
		expanded |= rmaDirCaps
	}
	base := baseInfoSizes(&localAddr{addr: netip.IPv6Loopback()}, 0, sizes{injectSize: InjectSize})
	if tx := info.TxAttr; tx != nil {
		if extra := tx.Caps &^ ignoredTxCap &^ expanded; extra != 0 {
			return mismatchf("tx caps %#x beyond the info's caps", uint64(extra))
		}
		if err := checkTxAttr(tx, base.TxAttr, tx.Caps&^ignoredTxCap); err != nil {
			return err
		}
	}
	if rx := info.RxAttr; rx != nil {
		if extra := rx.Caps &^ ignoredRxCap &^ expanded; extra != 0 {
			return mismatchf("rx caps %#x beyond the info's caps", uint64(extra))
		}
		if err := checkRxAttr(rx, base.RxAttr, rx.Caps&^ignoredRxCap); err != nil {
			return err
		}
	}
	return nil
}

// domainLimits are the fi_domain_attr limits Fabric.Domain checks
// against: what GetInfo reports on a non-loopback address.
func domainLimits() *DomainAttr {
	return baseInfoSizes(&localAddr{addr: netip.IPv4Unspecified()}, 0, sizes{}).DomainAttr
}

// addrOfInterface returns addr when the interface named name holds it (or
// its prefix contains it), and the first address GetInfo would offer on
// the interface when addr is not valid.
func addrOfInterface(name string, addr netip.Addr) (netip.Addr, error) {
	if addr.IsValid() {
		if l := localAddrOf(addr, 0); l.nic.Name != name {
			return addr, fmt.Errorf("address %v is not on interface %q: %w", addr, name, fi.EINVAL)
		}
		return addr, nil
	}
	locals, err := localAddrs()
	if err != nil {
		return addr, err
	}
	for _, l := range locals {
		if l.nic.Name == name {
			return l.addr, nil
		}
	}
	return addr, fmt.Errorf("no usable address on interface %q: %w", name, fi.EINVAL)
}
