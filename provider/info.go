package main

/*
#include <stdint.h>
#include "xdpfab.h"
*/
import "C"

import (
	"math"
	"unsafe"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// struct fi_info <-> fabric.Info. Every field of fi_info and its
// attribute structs has a fabric.Info field (fabric/info.go); the two
// conversions are exact inverses except for what C keeps beside the
// values: the fid pointers (handle, domain_attr.domain,
// fabric_attr.fabric) are not copied, and fi_info.nic is not reported
// (libfabric prints and duplicates a fid_nic through ops xdpfab would
// have to provide; the interface is domain_attr.name).
//
// SIZE_MAX in a size_t field is -1 in Go (FI_SHARED_CONTEXT, an unlimited
// order size), as fabric.Info documents.

// goSize is a size_t field as fabric.Info holds it.
func goSize(v C.size_t) int {
	if uint64(v) == math.MaxUint64 {
		return -1
	}
	return int(min(uint64(v), math.MaxInt64))
}

// cSize is the size_t of an Info size (-1: SIZE_MAX).
func cSize(v int) C.size_t {
	if v < 0 {
		return C.size_t(C.SIZE_MAX)
	}
	return C.size_t(v)
}

func goStr(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// cStr is a malloc'd copy of s (NULL for ""), for fi_freeinfo to free.
func cStr(s string) *C.char {
	if s == "" {
		return nil
	}
	return C.CString(s)
}

func goBytes(p unsafe.Pointer, n C.size_t) []byte {
	if p == nil || n == 0 {
		return nil
	}
	return C.GoBytes(p, C.int(n))
}

// cBytesCopy is a malloc'd copy of b (NULL for none).
func cBytesCopy(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return C.CBytes(b)
}

// infoFromC reads a C fi_info (hints, or an Info handed back to
// fi_domain/fi_endpoint); nil for NULL. NULL attribute pointers stay nil.
func infoFromC(ci *C.struct_fi_info) *fabric.Info {
	if ci == nil {
		return nil
	}
	info := &fabric.Info{
		Caps:       fi.Flags(ci.caps),
		Mode:       fi.Flags(ci.mode),
		AddrFormat: fi.AddrFormat(ci.addr_format),
		SrcAddr:    goBytes(ci.src_addr, ci.src_addrlen),
		DestAddr:   goBytes(ci.dest_addr, ci.dest_addrlen),
	}
	if t := ci.tx_attr; t != nil {
		info.TxAttr = &fabric.TxAttr{Caps: fi.Flags(t.caps), Mode: fi.Flags(t.mode), OpFlags: fi.Flags(t.op_flags),
			MsgOrder: fi.Order(t.msg_order), CompOrder: fi.Order(t.comp_order), InjectSize: goSize(t.inject_size),
			Size: goSize(t.size), IovLimit: goSize(t.iov_limit), RMAIovLimit: goSize(t.rma_iov_limit),
			TClass: uint32(t.tclass)}
	}
	if r := ci.rx_attr; r != nil {
		info.RxAttr = &fabric.RxAttr{Caps: fi.Flags(r.caps), Mode: fi.Flags(r.mode), OpFlags: fi.Flags(r.op_flags),
			MsgOrder: fi.Order(r.msg_order), CompOrder: fi.Order(r.comp_order),
			TotalBufferedRecv: goSize(r.total_buffered_recv), Size: goSize(r.size), IovLimit: goSize(r.iov_limit)}
	}
	if e := ci.ep_attr; e != nil {
		info.EPAttr = &fabric.EndpointAttr{Type: fabric.EPType(e._type), Protocol: fabric.Protocol(e.protocol),
			ProtocolVersion: uint32(e.protocol_version), MaxMsgSize: goSize(e.max_msg_size),
			MsgPrefixSize: goSize(e.msg_prefix_size), MaxOrderRAWSize: goSize(e.max_order_raw_size),
			MaxOrderWARSize: goSize(e.max_order_war_size), MaxOrderWAWSize: goSize(e.max_order_waw_size),
			MemTagFormat: uint64(e.mem_tag_format), TxCtxCnt: goSize(e.tx_ctx_cnt), RxCtxCnt: goSize(e.rx_ctx_cnt),
			AuthKey: goBytes(unsafe.Pointer(e.auth_key), e.auth_key_size)}
	}
	if d := ci.domain_attr; d != nil {
		info.DomainAttr = &fabric.DomainAttr{Name: goStr(d.name), Threading: fabric.Threading(d.threading),
			ControlProgress: fabric.Progress(d.control_progress), Progress: fabric.Progress(d.data_progress),
			ResourceMgmt: fabric.ResourceMgmt(d.resource_mgmt), AVType: av.Type(d.av_type),
			MRMode: mr.Mode(d.mr_mode), MRKeySize: goSize(d.mr_key_size), CQDataSize: goSize(d.cq_data_size),
			CQCnt: goSize(d.cq_cnt), EPCnt: goSize(d.ep_cnt), TxCtxCnt: goSize(d.tx_ctx_cnt),
			RxCtxCnt: goSize(d.rx_ctx_cnt), MaxEPTxCtx: goSize(d.max_ep_tx_ctx), MaxEPRxCtx: goSize(d.max_ep_rx_ctx),
			MaxEPStxCtx: goSize(d.max_ep_stx_ctx), MaxEPSrxCtx: goSize(d.max_ep_srx_ctx), CntrCnt: goSize(d.cntr_cnt),
			MRIovLimit: goSize(d.mr_iov_limit), Caps: fi.Flags(d.caps), Mode: fi.Flags(d.mode),
			AuthKey: goBytes(unsafe.Pointer(d.auth_key), d.auth_key_size), MaxErrData: goSize(d.max_err_data),
			MRCnt: goSize(d.mr_cnt), TClass: uint32(d.tclass)}
	}
	if f := ci.fabric_attr; f != nil {
		info.FabricAttr = &fabric.FabricAttr{Name: goStr(f.name), ProvName: goStr(f.prov_name),
			ProvVersion: uint32(f.prov_version), APIVersion: uint32(f.api_version)}
	}
	return info
}

// infoToC allocates the C fi_info of info (fi_freeinfo frees it).
// fabric_attr.prov_name and prov_version are left for libfabric, which
// sets them on what a provider's getinfo returns.
func infoToC(info *fabric.Info) *C.struct_fi_info {
	ci := C.xf_allocinfo()
	if ci == nil {
		return nil
	}
	ci.caps = C.uint64_t(info.Caps)
	ci.mode = C.uint64_t(info.Mode)
	ci.addr_format = C.uint32_t(info.AddrFormat)
	if len(info.SrcAddr) > 0 {
		ci.src_addr, ci.src_addrlen = cBytesCopy(info.SrcAddr), C.size_t(len(info.SrcAddr))
	}
	if len(info.DestAddr) > 0 {
		ci.dest_addr, ci.dest_addrlen = cBytesCopy(info.DestAddr), C.size_t(len(info.DestAddr))
	}
	if t := info.TxAttr; t != nil {
		c := ci.tx_attr
		c.caps, c.mode, c.op_flags = C.uint64_t(t.Caps), C.uint64_t(t.Mode), C.uint64_t(t.OpFlags)
		c.msg_order, c.comp_order = C.uint64_t(t.MsgOrder), C.uint64_t(t.CompOrder)
		c.inject_size, c.size = cSize(t.InjectSize), cSize(t.Size)
		c.iov_limit, c.rma_iov_limit = cSize(t.IovLimit), cSize(t.RMAIovLimit)
		c.tclass = C.uint32_t(t.TClass)
	}
	if r := info.RxAttr; r != nil {
		c := ci.rx_attr
		c.caps, c.mode, c.op_flags = C.uint64_t(r.Caps), C.uint64_t(r.Mode), C.uint64_t(r.OpFlags)
		c.msg_order, c.comp_order = C.uint64_t(r.MsgOrder), C.uint64_t(r.CompOrder)
		c.total_buffered_recv, c.size, c.iov_limit = cSize(r.TotalBufferedRecv), cSize(r.Size), cSize(r.IovLimit)
	}
	if e := info.EPAttr; e != nil {
		c := ci.ep_attr
		c._type = C.enum_fi_ep_type(e.Type)
		c.protocol, c.protocol_version = C.uint32_t(e.Protocol), C.uint32_t(e.ProtocolVersion)
		c.max_msg_size, c.msg_prefix_size = cSize(e.MaxMsgSize), cSize(e.MsgPrefixSize)
		c.max_order_raw_size = cSize(e.MaxOrderRAWSize)
		c.max_order_war_size = cSize(e.MaxOrderWARSize)
		c.max_order_waw_size = cSize(e.MaxOrderWAWSize)
		c.mem_tag_format = C.uint64_t(e.MemTagFormat)
		c.tx_ctx_cnt, c.rx_ctx_cnt = cSize(e.TxCtxCnt), cSize(e.RxCtxCnt)
		if len(e.AuthKey) > 0 {
			c.auth_key, c.auth_key_size = (*C.uint8_t)(cBytesCopy(e.AuthKey)), C.size_t(len(e.AuthKey))
		}
	}
	if d := info.DomainAttr; d != nil {
		c := ci.domain_attr
		c.name = cStr(d.Name)
		c.threading = C.enum_fi_threading(d.Threading)
		c.control_progress = C.enum_fi_progress(d.ControlProgress)
		c.data_progress = C.enum_fi_progress(d.Progress)
		c.resource_mgmt = C.enum_fi_resource_mgmt(d.ResourceMgmt)
		c.av_type = C.enum_fi_av_type(d.AVType)
		c.mr_mode = C.int(d.MRMode)
		c.mr_key_size, c.cq_data_size = cSize(d.MRKeySize), cSize(d.CQDataSize)
		c.cq_cnt, c.ep_cnt = cSize(d.CQCnt), cSize(d.EPCnt)
		c.tx_ctx_cnt, c.rx_ctx_cnt = cSize(d.TxCtxCnt), cSize(d.RxCtxCnt)
		c.max_ep_tx_ctx, c.max_ep_rx_ctx = cSize(d.MaxEPTxCtx), cSize(d.MaxEPRxCtx)
		c.max_ep_stx_ctx, c.max_ep_srx_ctx = cSize(d.MaxEPStxCtx), cSize(d.MaxEPSrxCtx)
		c.cntr_cnt, c.mr_iov_limit = cSize(d.CntrCnt), cSize(d.MRIovLimit)
		c.caps, c.mode = C.uint64_t(d.Caps), C.uint64_t(d.Mode)
		if len(d.AuthKey) > 0 {
			c.auth_key, c.auth_key_size = (*C.uint8_t)(cBytesCopy(d.AuthKey)), C.size_t(len(d.AuthKey))
		}
		c.max_err_data, c.mr_cnt = cSize(d.MaxErrData), cSize(d.MRCnt)
		c.tclass = C.uint32_t(d.TClass)
	}
	if f := info.FabricAttr; f != nil {
		c := ci.fabric_attr
		c.name = cStr(f.Name)
		c.api_version = C.uint32_t(f.APIVersion)
	}
	return ci
}
