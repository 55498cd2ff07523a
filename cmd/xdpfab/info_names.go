package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// The names fabric.h gives the bits and values `xdpfab info` prints and
// takes as hints, so its output reads like fi_info's.

type bitName[T ~uint64] struct {
	bit  T
	name string
}

// capNames are fi_info caps (primary and secondary capabilities).
var capNames = []bitName[fi.Flags]{
	{fi.MSG, "FI_MSG"}, {fi.RMA, "FI_RMA"}, {fi.TAGGED, "FI_TAGGED"}, {fi.ATOMIC, "FI_ATOMIC"},
	{fi.MULTICAST, "FI_MULTICAST"}, {fi.COLLECTIVE, "FI_COLLECTIVE"},
	{fi.READ, "FI_READ"}, {fi.WRITE, "FI_WRITE"}, {fi.RECV, "FI_RECV"}, {fi.SEND, "FI_SEND"},
	{fi.REMOTE_READ, "FI_REMOTE_READ"}, {fi.REMOTE_WRITE, "FI_REMOTE_WRITE"},
	{fi.MULTI_RECV, "FI_MULTI_RECV"}, {fi.REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"}, {fi.TRIGGER, "FI_TRIGGER"},
	{fi.FENCE, "FI_FENCE"}, {fi.PRIORITY, "FI_PRIORITY"}, {fi.PEER_TRANSFER, "FI_PEER_TRANSFER"},
	{fi.AV_USER_ID, "FI_AV_USER_ID"}, {fi.PEER, "FI_PEER"}, {fi.XPU_TRIGGER, "FI_XPU"}, {fi.HMEM, "FI_HMEM"},
	{fi.VARIABLE_MSG, "FI_VARIABLE_MSG"}, {fi.RMA_PMEM, "FI_RMA_PMEM"}, {fi.SOURCE_ERR, "FI_SOURCE_ERR"},
	{fi.LOCAL_COMM, "FI_LOCAL_COMM"}, {fi.REMOTE_COMM, "FI_REMOTE_COMM"}, {fi.SHARED_AV, "FI_SHARED_AV"},
	{fi.RMA_EVENT, "FI_RMA_EVENT"}, {fi.SOURCE, "FI_SOURCE"}, {fi.NAMED_RX_CTX, "FI_NAMED_RX_CTX"},
	{fi.DIRECTED_RECV, "FI_DIRECTED_RECV"},
}

// modeNames are fi_info mode bits.
var modeNames = []bitName[fi.Flags]{
	{fi.CONTEXT, "FI_CONTEXT"}, {fi.MSG_PREFIX, "FI_MSG_PREFIX"}, {fi.ASYNC_IOV, "FI_ASYNC_IOV"},
	{fi.RX_CQ_DATA, "FI_RX_CQ_DATA"}, {fi.LOCAL_MR, "FI_LOCAL_MR"}, {fi.NOTIFY_FLAGS_ONLY, "FI_NOTIFY_FLAGS_ONLY"},
	{fi.RESTRICTED_COMP, "FI_RESTRICTED_COMP"}, {fi.CONTEXT2, "FI_CONTEXT2"}, {fi.BUFFERED_RECV, "FI_BUFFERED_RECV"},
}

// opFlagNames are tx/rx op_flags.
var opFlagNames = []bitName[fi.Flags]{
	{fi.MULTI_RECV, "FI_MULTI_RECV"}, {fi.COMPLETION, "FI_COMPLETION"}, {fi.INJECT, "FI_INJECT"},
	{fi.INJECT_COMPLETE, "FI_INJECT_COMPLETE"}, {fi.TRANSMIT_COMPLETE, "FI_TRANSMIT_COMPLETE"},
	{fi.DELIVERY_COMPLETE, "FI_DELIVERY_COMPLETE"}, {fi.COMMIT_COMPLETE, "FI_COMMIT_COMPLETE"},
	{fi.MATCH_COMPLETE, "FI_MATCH_COMPLETE"}, {fi.MORE, "FI_MORE"}, {fi.FENCE, "FI_FENCE"},
}

var orderNames = []bitName[fi.Order]{
	{fi.OrderRAR, "FI_ORDER_RAR"}, {fi.OrderRAW, "FI_ORDER_RAW"}, {fi.OrderRAS, "FI_ORDER_RAS"},
	{fi.OrderWAR, "FI_ORDER_WAR"}, {fi.OrderWAW, "FI_ORDER_WAW"}, {fi.OrderWAS, "FI_ORDER_WAS"},
	{fi.OrderSAR, "FI_ORDER_SAR"}, {fi.OrderSAW, "FI_ORDER_SAW"}, {fi.OrderSAS, "FI_ORDER_SAS"},
	{fi.OrderData, "FI_ORDER_DATA"},
	{fi.OrderRMARAR, "FI_ORDER_RMA_RAR"}, {fi.OrderRMARAW, "FI_ORDER_RMA_RAW"}, {fi.OrderRMAWAR, "FI_ORDER_RMA_WAR"},
	{fi.OrderRMAWAW, "FI_ORDER_RMA_WAW"}, {fi.OrderAtomicRAR, "FI_ORDER_ATOMIC_RAR"},
	{fi.OrderAtomicRAW, "FI_ORDER_ATOMIC_RAW"}, {fi.OrderAtomicWAR, "FI_ORDER_ATOMIC_WAR"},
	{fi.OrderAtomicWAW, "FI_ORDER_ATOMIC_WAW"},
}

// bitsList names the bits of v; bits without a name are kept as hex.
func bitsList[T ~uint64](v T, names []bitName[T]) []string {
	out := []string{}
	for _, n := range names {
		if v&n.bit != 0 {
			out = append(out, n.name)
			v &^= n.bit
		}
	}
	if v != 0 {
		out = append(out, fmt.Sprintf("%#x", uint64(v)))
	}
	return out
}

// parseBits reads "FI_MSG|FI_RMA", "msg,rma" or a number.
func parseBits[T ~uint64](s string, names []bitName[T]) (T, error) {
	var v T
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '|' || r == ',' || r == ' ' }) {
		if n, err := strconv.ParseUint(f, 0, 64); err == nil {
			v |= T(n)
			continue
		}
		want := strings.ToUpper(f)
		if !strings.HasPrefix(want, "FI_") {
			want = "FI_" + want
		}
		found := false
		for _, bn := range names {
			if bn.name == want {
				v |= bn.bit
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown name %q", f)
		}
	}
	return v, nil
}

var epTypeNames = map[fabric.EPType]string{fabric.EPUnspec: "FI_EP_UNSPEC", 1: "FI_EP_MSG", 2: "FI_EP_DGRAM", fabric.EPRDM: "FI_EP_RDM"}

func epTypeName(t fabric.EPType) string {
	if n, ok := epTypeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("EPType(%d)", int(t))
}

func parseEPType(s string) (fabric.EPType, error) {
	want := strings.ToUpper(s)
	if !strings.HasPrefix(want, "FI_EP_") {
		want = "FI_EP_" + want
	}
	for t, n := range epTypeNames {
		if n == want {
			return t, nil
		}
	}
	return 0, fmt.Errorf("endpoint type %q is not FI_EP_MSG, FI_EP_DGRAM or FI_EP_RDM", s)
}

var addrFormats = []fi.AddrFormat{fi.FormatUnspec, fi.FormatSockaddr, fi.FormatSockaddr4, fi.FormatSockaddr6, fi.FormatStr}

func parseAddrFormat(s string) (fi.AddrFormat, error) {
	want := strings.ToUpper(s)
	if !strings.HasPrefix(want, "FI_") {
		want = "FI_" + want
	}
	for _, f := range addrFormats {
		if f.String() == want {
			return f, nil
		}
	}
	return 0, fmt.Errorf("address format %q is not one of FI_FORMAT_UNSPEC, FI_SOCKADDR, FI_SOCKADDR_IN, FI_SOCKADDR_IN6, FI_ADDR_STR", s)
}

func protocolName(p fabric.Protocol) string {
	switch p {
	case fabric.ProtoUnspec:
		return "FI_PROTO_UNSPEC"
	case fabric.ProtoXdpfab:
		return "FI_PROTO_XDPFAB"
	}
	return fmt.Sprintf("Protocol(%#x)", uint32(p))
}

var threadingNames = []string{"FI_THREAD_UNSPEC", "FI_THREAD_SAFE", "FI_THREAD_FID", "FI_THREAD_DOMAIN", "FI_THREAD_COMPLETION", "FI_THREAD_ENDPOINT"}

func threadingName(t fabric.Threading) string {
	if int(t) >= 0 && int(t) < len(threadingNames) {
		return threadingNames[t]
	}
	return fmt.Sprintf("Threading(%d)", int(t))
}

func progressName(p fabric.Progress) string {
	switch p {
	case fabric.ProgressUnspec:
		return "FI_PROGRESS_UNSPEC"
	case fabric.ProgressAuto:
		return "FI_PROGRESS_AUTO"
	case fabric.ProgressManual:
		return "FI_PROGRESS_MANUAL"
	}
	return fmt.Sprintf("Progress(%d)", int(p))
}

func rmName(r fabric.ResourceMgmt) string {
	return [...]string{"FI_RM_UNSPEC", "FI_RM_DISABLED", "FI_RM_ENABLED"}[min(max(int(r), 0), 2)]
}
