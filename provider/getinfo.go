package main

/*
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include "xdpfab.h"
*/
import "C"

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"unsafe"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// request is fi_getinfo's arguments read out of C.
type request struct {
	version       uint32
	node, service string
	hasNode       bool
	hasService    bool
	flags         fi.Flags
	hints         *C.struct_fi_info // nil: none
}

// candidate is one local address getinfo reports, and the peer address
// when the call named one.
type candidate struct {
	src   netip.AddrPort
	dest  netip.AddrPort // invalid: none
	iface string
}

//export xfgo_getinfo
func xfgo_getinfo(version C.uint32_t, node, service *C.char, flags C.uint64_t,
	hints *C.struct_fi_info, info **C.struct_fi_info) (ret C.int) {
	defer catch(&ret)
	*info = nil
	r := request{version: uint32(version), flags: fi.Flags(flags), hints: hints}
	if node != nil {
		r.node, r.hasNode = C.GoString(node), true
	}
	if service != nil {
		r.service, r.hasService = C.GoString(service), true
	}
	list, err := getinfo(&r)
	if err != nil {
		logf("getinfo: %v", err)
		return errno[C.int](err)
	}
	*info = list
	return 0
}

// getinfo returns the fi_info list for r, allocated as libfabric's
// fi_freeinfo frees it, or FI_ENODATA when nothing matches.
func getinfo(r *request) (*C.struct_fi_info, error) {
	cands, err := candidates(r)
	if err != nil {
		return nil, err
	}
	var head, tail *C.struct_fi_info
	for _, c := range cands {
		ci, err := buildInfo(r, c)
		if err != nil {
			if head != nil {
				C.xf_freeinfo(head)
			}
			return nil, err
		}
		if ci == nil {
			continue
		}
		if head == nil {
			head = ci
		} else {
			tail.next = ci
		}
		tail = ci
	}
	if head == nil {
		return nil, fmt.Errorf("getinfo: no local address matches: %w", fi.ENODATA)
	}
	return head, nil
}

// candidates resolves node, service, FI_SOURCE and the hints' addresses to
// the local addresses to report: the one named, the one routing to the
// named peer, or every up interface's IPv4 address (non-loopback first).
func candidates(r *request) ([]candidate, error) {
	h := r.hints
	var src, dest netip.AddrPort
	if h != nil {
		if h.addr_format != C.FI_FORMAT_UNSPEC && h.addr_format != C.FI_SOCKADDR && h.addr_format != C.FI_SOCKADDR_IN {
			return nil, fmt.Errorf("getinfo: addr_format %d: %w", h.addr_format, fi.ENODATA)
		}
		var err error
		if src, err = sockaddrIn(h.src_addr, h.src_addrlen); err != nil {
			return nil, err
		}
		if dest, err = sockaddrIn(h.dest_addr, h.dest_addrlen); err != nil {
			return nil, err
		}
	}
	if r.hasNode || r.hasService {
		ap, err := resolve(r)
		if err != nil {
			return nil, err
		}
		if r.flags&fi.SOURCE != 0 {
			src = ap
		} else {
			dest = ap
		}
	}
	if !src.IsValid() && dest.IsValid() {
		local, err := routeSource(dest)
		if err != nil {
			return nil, fmt.Errorf("getinfo: no route to %v: %v: %w", dest, err, fi.ENODATA)
		}
		src = netip.AddrPortFrom(local, 0)
	}
	if src.IsValid() && !src.Addr().IsUnspecified() {
		return []candidate{{src: src, dest: dest, iface: interfaceOf(src.Addr())}}, nil
	}
	port := src.Port()
	var out, loop []candidate
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("getinfo: interfaces: %v: %w", err, fi.ENODATA)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			pfx, err := netip.ParsePrefix(a.String())
			if err != nil || !pfx.Addr().Is4() {
				continue
			}
			c := candidate{src: netip.AddrPortFrom(pfx.Addr(), port), dest: dest, iface: ifc.Name}
			if pfx.Addr().IsLoopback() {
				loop = append(loop, c)
			} else {
				out = append(out, c)
			}
		}
	}
	return append(out, loop...), nil
}

// resolve turns node and service into an address (loopback when node is
// absent, as getaddrinfo does without AI_PASSIVE).
func resolve(r *request) (netip.AddrPort, error) {
	var port uint16
	if r.hasService && r.service != "" {
		p, err := strconv.ParseUint(r.service, 10, 16)
		if err != nil {
			sp, err2 := net.LookupPort("udp", r.service)
			if err2 != nil {
				return netip.AddrPort{}, fmt.Errorf("getinfo: service %q: %w", r.service, fi.ENODATA)
			}
			p = uint64(sp)
		}
		port = uint16(p)
	}
	addr := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if r.hasNode && r.node != "" {
		a, err := netip.ParseAddr(r.node)
		if err != nil {
			if r.flags&fi.NUMERICHOST != 0 {
				return netip.AddrPort{}, fmt.Errorf("getinfo: node %q is not numeric: %w", r.node, fi.ENODATA)
			}
			ips, lerr := net.LookupIP(r.node)
			if lerr != nil {
				return netip.AddrPort{}, fmt.Errorf("getinfo: node %q: %v: %w", r.node, lerr, fi.ENODATA)
			}
			for _, ip := range ips {
				if ip4 := ip.To4(); ip4 != nil {
					a = netip.AddrFrom4([4]byte(ip4))
					err = nil
					break
				}
			}
			if err != nil {
				return netip.AddrPort{}, fmt.Errorf("getinfo: node %q has no IPv4 address: %w", r.node, fi.ENODATA)
			}
		}
		addr = a.Unmap()
		if !addr.Is4() {
			return netip.AddrPort{}, fmt.Errorf("getinfo: node %q: only IPv4 so far: %w", r.node, fi.ENODATA)
		}
	} else if r.flags&fi.SOURCE != 0 {
		addr = netip.IPv4Unspecified()
	}
	return netip.AddrPortFrom(addr, port), nil
}

// routeSource is the local address the kernel would send from to dest
// (connecting a UDP socket sends nothing).
func routeSource(dest netip.AddrPort) (netip.Addr, error) {
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dest))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

func interfaceOf(a netip.Addr) string {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, x := range addrs {
			if p, err := netip.ParsePrefix(x.String()); err == nil && p.Addr().Unmap() == a {
				return ifc.Name
			}
		}
	}
	return ""
}

// sockaddrIn reads a struct sockaddr_in (invalid AddrPort for NULL).
func sockaddrIn(p unsafe.Pointer, n C.size_t) (netip.AddrPort, error) {
	if p == nil {
		return netip.AddrPort{}, nil
	}
	if n < C.sizeof_struct_sockaddr_in || (*C.struct_sockaddr_in)(p).sin_family != C.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("getinfo: address of %d bytes is not a sockaddr_in: %w", n, fi.ENODATA)
	}
	sin := (*C.struct_sockaddr_in)(p)
	ip := *(*[4]byte)(unsafe.Pointer(&sin.sin_addr))
	port := uint16(C.ntohs(sin.sin_port))
	return netip.AddrPortFrom(netip.AddrFrom4(ip), port), nil
}

// newSockaddrIn allocates (malloc) a struct sockaddr_in for ap.
func newSockaddrIn(ap netip.AddrPort) (unsafe.Pointer, C.size_t) {
	sin := (*C.struct_sockaddr_in)(C.calloc(1, C.sizeof_struct_sockaddr_in))
	sin.sin_family = C.AF_INET
	sin.sin_port = C.htons(C.uint16_t(ap.Port()))
	*(*[4]byte)(unsafe.Pointer(&sin.sin_addr)) = ap.Addr().As4()
	return unsafe.Pointer(sin), C.sizeof_struct_sockaddr_in
}

// providerCaps are the capabilities xdpfab has today; mrModeUsed are the
// mr_mode bits it uses when the application allows them (it requires none).
const (
	primaryCaps = fi.MSG | fi.TAGGED | fi.RMA | fi.ATOMIC | fi.READ | fi.WRITE | fi.SEND | fi.RECV |
		fi.REMOTE_READ | fi.REMOTE_WRITE
	secondaryCaps = fi.SOURCE | fi.RMA_EVENT | fi.DIRECTED_RECV | fi.LOCAL_COMM | fi.REMOTE_COMM
	mrModeUsed    = mr.ModeVirtAddr | mr.ModeProvKey
)

// Sizes reported as getinfo's attributes.
const (
	txSize     = 4096
	rxSize     = 1024
	cqSize     = 1 << 16
	maxObjects = 1 << 16
)

// buildInfo returns the fi_info for one candidate, nil when the hints
// exclude it, or an error for hints no candidate can meet.
func buildInfo(r *request, c candidate) (*C.struct_fi_info, error) {
	h := r.hints
	caps := primaryCaps | secondaryCaps
	mrMode := mr.Mode(0)
	progress := defaultProgress
	threading := C.enum_fi_threading(C.FI_THREAD_SAFE)
	avType := C.enum_fi_av_type(C.FI_AV_UNSPEC)
	if h != nil {
		if hc := fi.Flags(h.caps); hc != 0 {
			if hc&^(primaryCaps|secondaryCaps) != 0 {
				return nil, fmt.Errorf("getinfo: caps %#x beyond xdpfab's: %w", uint64(hc&^(primaryCaps|secondaryCaps)), fi.ENODATA)
			}
			// Primary caps are what was asked (or all when none was);
			// secondary caps only when asked.
			caps = hc
			if hc&primaryCaps == 0 {
				caps |= primaryCaps
			}
		} else {
			caps = primaryCaps
		}
		if d := h.domain_attr; d != nil {
			if d.name != nil && c.iface != C.GoString(d.name) {
				return nil, nil
			}
			mrMode = mr.Mode(d.mr_mode) & mrModeUsed
			switch d.data_progress {
			case C.FI_PROGRESS_UNSPEC:
			case C.FI_PROGRESS_AUTO, C.FI_PROGRESS_MANUAL:
				progress = d.data_progress
			default:
				return nil, fmt.Errorf("getinfo: data_progress %d: %w", d.data_progress, fi.ENODATA)
			}
			if d.threading != C.FI_THREAD_UNSPEC {
				threading = d.threading
			}
			switch d.av_type {
			case C.FI_AV_UNSPEC, C.FI_AV_MAP, C.FI_AV_TABLE:
				avType = d.av_type
			default:
				return nil, fmt.Errorf("getinfo: av_type %d: %w", d.av_type, fi.ENODATA)
			}
			if d.mr_mode&C.FI_MR_HMEM != 0 && fi.Flags(h.caps)&fi.HMEM != 0 {
				return nil, fmt.Errorf("getinfo: FI_HMEM: %w", fi.ENODATA)
			}
		}
		if f := h.fabric_attr; f != nil && f.name != nil && C.GoString(f.name) != fabric.ProviderName {
			return nil, nil
		}
		if t := h.tx_attr; t != nil {
			if t.size > txSize || t.iov_limit > 1 || t.rma_iov_limit > fabric.RMAIovLimit ||
				t.inject_size > fabric.InjectSize {
				return nil, fmt.Errorf("getinfo: tx_attr beyond xdpfab's: %w", fi.ENODATA)
			}
		}
		if rx := h.rx_attr; rx != nil && (rx.size > rxSize || rx.iov_limit > 1) {
			return nil, fmt.Errorf("getinfo: rx_attr beyond xdpfab's: %w", fi.ENODATA)
		}
		if e := h.ep_attr; e != nil && e.max_msg_size > fabric.MaxMsgSize {
			return nil, fmt.Errorf("getinfo: max_msg_size beyond xdpfab's: %w", fi.ENODATA)
		}
	}

	// The sizes that follow from the interface's MTU, as a domain on this
	// address reports them.
	f, _ := fabric.OpenFabric("", nil)
	d, err := f.Domain(fabric.DomainAttr{Addr: c.src.Addr(), Transport: fabric.TransportUDP, MRMode: mrMode}, nil)
	if err != nil {
		return nil, fmt.Errorf("getinfo: domain on %v: %w", c.src.Addr(), err)
	}
	di := d.Info()
	d.Close()

	info := C.xf_allocinfo()
	if info == nil {
		return nil, fi.ENOMEM
	}
	info.caps = C.uint64_t(caps)
	info.mode = 0
	info.addr_format = C.FI_SOCKADDR_IN
	info.src_addr, info.src_addrlen = newSockaddrIn(c.src)
	if c.dest.IsValid() {
		info.dest_addr, info.dest_addrlen = newSockaddrIn(c.dest)
	}
	dataCaps := caps & (primaryCaps | fi.SOURCE | fi.RMA_EVENT | fi.DIRECTED_RECV)
	tx := info.tx_attr
	tx.caps = C.uint64_t(dataCaps &^ (fi.RECV | fi.REMOTE_READ | fi.REMOTE_WRITE | fi.SOURCE | fi.DIRECTED_RECV | fi.RMA_EVENT))
	tx.msg_order = C.FI_ORDER_SAS | C.FI_ORDER_RAR | C.FI_ORDER_RAW | C.FI_ORDER_WAR | C.FI_ORDER_WAW |
		C.FI_ORDER_SAR | C.FI_ORDER_SAW | C.FI_ORDER_RAS | C.FI_ORDER_WAS
	tx.comp_order = C.FI_ORDER_NONE
	tx.inject_size = C.size_t(di.TxAttr.InjectSize)
	tx.size = txSize
	tx.iov_limit = 1
	tx.rma_iov_limit = fabric.RMAIovLimit
	rx := info.rx_attr
	rx.caps = C.uint64_t(dataCaps &^ (fi.SEND | fi.READ | fi.WRITE))
	rx.msg_order = tx.msg_order
	rx.comp_order = C.FI_ORDER_NONE
	rx.size = rxSize
	// The default op flags are the application's (MPI's mtl ofi asks
	// for FI_COMPLETION on both sides of a CQ bound with
	// FI_SELECTIVE_COMPLETION).
	if h != nil && h.tx_attr != nil {
		tx.op_flags = h.tx_attr.op_flags & C.uint64_t(fi.COMPLETION|fi.INJECT_COMPLETE|fi.TRANSMIT_COMPLETE|fi.DELIVERY_COMPLETE)
	}
	if h != nil && h.rx_attr != nil {
		rx.op_flags = h.rx_attr.op_flags & C.uint64_t(fi.COMPLETION)
	}
	rx.iov_limit = 1
	ep := info.ep_attr
	ep._type = C.FI_EP_RDM
	ep.protocol = C.FI_PROTO_UDP
	ep.protocol_version = 1
	ep.max_msg_size = fabric.MaxMsgSize
	ep.mem_tag_format = C.uint64_t(fabric.TagGeneric)
	ep.max_order_raw_size = fabric.MaxMsgSize
	ep.max_order_war_size = fabric.MaxMsgSize
	ep.max_order_waw_size = fabric.MaxMsgSize
	ep.tx_ctx_cnt = 1
	ep.rx_ctx_cnt = 1
	dom := info.domain_attr
	dom.name = C.CString(c.iface)
	dom.threading = threading
	dom.control_progress = C.FI_PROGRESS_AUTO
	dom.data_progress = progress
	dom.resource_mgmt = C.FI_RM_ENABLED
	dom.av_type = avType
	dom.mr_mode = C.int(di.DomainAttr.MRMode)
	dom.mr_key_size = C.size_t(di.DomainAttr.MRKeySize)
	dom.cq_data_size = 8
	dom.cq_cnt = maxObjects
	dom.ep_cnt = maxObjects
	dom.tx_ctx_cnt = maxObjects
	dom.rx_ctx_cnt = maxObjects
	dom.max_ep_tx_ctx = 1
	dom.max_ep_rx_ctx = 1
	dom.cntr_cnt = maxObjects
	dom.mr_iov_limit = C.size_t(di.DomainAttr.MRIovLimit)
	dom.caps = C.uint64_t(caps & (fi.LOCAL_COMM | fi.REMOTE_COMM))
	if dom.caps == 0 {
		dom.caps = C.FI_LOCAL_COMM | C.FI_REMOTE_COMM
	}
	dom.max_err_data = 0
	dom.mr_cnt = maxObjects
	info.fabric_attr.name = C.CString(fabric.ProviderName)
	// prov_name and prov_version are libfabric's to set (ofi_set_prov_attr).
	return info, nil
}
