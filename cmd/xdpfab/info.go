package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
)

// infoRecord is one fi_info in `xdpfab info -o json`: fabric.Info with
// bits and enums by name and addresses as text. Lists are never null.
type infoRecord struct {
	Caps       []string          `json:"caps"`
	Mode       []string          `json:"mode"`
	AddrFormat string            `json:"addr_format"`
	SrcAddr    string            `json:"src_addr,omitempty"`
	DestAddr   string            `json:"dest_addr,omitempty"`
	TxAttr     *txAttrRecord     `json:"tx_attr"`
	RxAttr     *rxAttrRecord     `json:"rx_attr"`
	EPAttr     *epAttrRecord     `json:"ep_attr"`
	DomainAttr *domainAttrRecord `json:"domain_attr"`
	FabricAttr *fabricAttrRecord `json:"fabric_attr"`
	NIC        *fabric.NIC       `json:"nic"`
	Transport  string            `json:"transport"` // what a domain on it uses: "afxdp" when XDP is attached, else "udp"
}

type txAttrRecord struct {
	Caps        []string `json:"caps"`
	Mode        []string `json:"mode"`
	OpFlags     []string `json:"op_flags"`
	MsgOrder    []string `json:"msg_order"`
	CompOrder   []string `json:"comp_order"`
	InjectSize  int      `json:"inject_size"`
	Size        int      `json:"size"`
	IovLimit    int      `json:"iov_limit"`
	RMAIovLimit int      `json:"rma_iov_limit"`
	TClass      uint32   `json:"tclass"`
}

type rxAttrRecord struct {
	Caps              []string `json:"caps"`
	Mode              []string `json:"mode"`
	OpFlags           []string `json:"op_flags"`
	MsgOrder          []string `json:"msg_order"`
	CompOrder         []string `json:"comp_order"`
	TotalBufferedRecv int      `json:"total_buffered_recv"`
	Size              int      `json:"size"`
	IovLimit          int      `json:"iov_limit"`
}

type epAttrRecord struct {
	Type            string `json:"type"`
	Protocol        string `json:"protocol"`
	ProtocolVersion uint32 `json:"protocol_version"`
	MaxMsgSize      int    `json:"max_msg_size"`
	MsgPrefixSize   int    `json:"msg_prefix_size"`
	MaxOrderRAWSize int    `json:"max_order_raw_size"`
	MaxOrderWARSize int    `json:"max_order_war_size"`
	MaxOrderWAWSize int    `json:"max_order_waw_size"`
	MemTagFormat    string `json:"mem_tag_format"`
	TxCtxCnt        int    `json:"tx_ctx_cnt"`
	RxCtxCnt        int    `json:"rx_ctx_cnt"`
	AuthKeySize     int    `json:"auth_key_size"`
}

type domainAttrRecord struct {
	Name            string   `json:"name"`
	Threading       string   `json:"threading"`
	ControlProgress string   `json:"control_progress"`
	DataProgress    string   `json:"data_progress"`
	ResourceMgmt    string   `json:"resource_mgmt"`
	AVType          string   `json:"av_type"`
	MRMode          string   `json:"mr_mode"`
	MRKeySize       int      `json:"mr_key_size"`
	CQDataSize      int      `json:"cq_data_size"`
	CQCnt           int      `json:"cq_cnt"`
	EPCnt           int      `json:"ep_cnt"`
	TxCtxCnt        int      `json:"tx_ctx_cnt"`
	RxCtxCnt        int      `json:"rx_ctx_cnt"`
	MaxEPTxCtx      int      `json:"max_ep_tx_ctx"`
	MaxEPRxCtx      int      `json:"max_ep_rx_ctx"`
	MaxEPStxCtx     int      `json:"max_ep_stx_ctx"`
	MaxEPSrxCtx     int      `json:"max_ep_srx_ctx"`
	CntrCnt         int      `json:"cntr_cnt"`
	MRIovLimit      int      `json:"mr_iov_limit"`
	Caps            []string `json:"caps"`
	Mode            []string `json:"mode"`
	MaxErrData      int      `json:"max_err_data"`
	MRCnt           int      `json:"mr_cnt"`
	TClass          uint32   `json:"tclass"`
}

type fabricAttrRecord struct {
	Name        string `json:"name"`
	ProvName    string `json:"prov_name"`
	ProvVersion string `json:"prov_version"`
	APIVersion  string `json:"api_version"`
}

func version(v uint32) string { return fmt.Sprintf("%d.%d", fi.VersionMajor(v), fi.VersionMinor(v)) }

func addrText(b []byte, ap func() (string, bool)) string {
	if b == nil {
		return ""
	}
	if s, ok := ap(); ok {
		return s
	}
	return fmt.Sprintf("%x", b)
}

// infoRecordOf names the fields of in.
func infoRecordOf(in *fabric.Info) infoRecord {
	r := infoRecord{Caps: bitsList(in.Caps, capNames), Mode: bitsList(in.Mode, modeNames), AddrFormat: in.AddrFormat.String(),
		NIC: in.NIC, Transport: "udp"}
	r.SrcAddr = addrText(in.SrcAddr, func() (string, bool) { a, ok := in.SrcAddrPort(); return a.String(), ok })
	r.DestAddr = addrText(in.DestAddr, func() (string, bool) { a, ok := in.DestAddrPort(); return a.String(), ok })
	if in.NIC != nil && in.NIC.XDPAttached {
		r.Transport = "afxdp"
	}
	if t := in.TxAttr; t != nil {
		r.TxAttr = &txAttrRecord{Caps: bitsList(t.Caps, capNames), Mode: bitsList(t.Mode, modeNames), OpFlags: bitsList(t.OpFlags, opFlagNames),
			MsgOrder: bitsList(t.MsgOrder, orderNames), CompOrder: bitsList(t.CompOrder, orderNames), InjectSize: t.InjectSize,
			Size: t.Size, IovLimit: t.IovLimit, RMAIovLimit: t.RMAIovLimit, TClass: t.TClass}
	}
	if t := in.RxAttr; t != nil {
		r.RxAttr = &rxAttrRecord{Caps: bitsList(t.Caps, capNames), Mode: bitsList(t.Mode, modeNames), OpFlags: bitsList(t.OpFlags, opFlagNames),
			MsgOrder: bitsList(t.MsgOrder, orderNames), CompOrder: bitsList(t.CompOrder, orderNames),
			TotalBufferedRecv: t.TotalBufferedRecv, Size: t.Size, IovLimit: t.IovLimit}
	}
	if e := in.EPAttr; e != nil {
		r.EPAttr = &epAttrRecord{Type: epTypeName(e.Type), Protocol: protocolName(e.Protocol), ProtocolVersion: e.ProtocolVersion,
			MaxMsgSize: e.MaxMsgSize, MsgPrefixSize: e.MsgPrefixSize, MaxOrderRAWSize: e.MaxOrderRAWSize,
			MaxOrderWARSize: e.MaxOrderWARSize, MaxOrderWAWSize: e.MaxOrderWAWSize, MemTagFormat: fmt.Sprintf("%#x", e.MemTagFormat),
			TxCtxCnt: e.TxCtxCnt, RxCtxCnt: e.RxCtxCnt, AuthKeySize: len(e.AuthKey)}
	}
	if d := in.DomainAttr; d != nil {
		r.DomainAttr = &domainAttrRecord{Name: d.Name, Threading: threadingName(d.Threading), ControlProgress: progressName(d.ControlProgress),
			DataProgress: progressName(d.Progress), ResourceMgmt: rmName(d.ResourceMgmt), AVType: d.AVType.String(), MRMode: d.MRMode.String(),
			MRKeySize: d.MRKeySize, CQDataSize: d.CQDataSize, CQCnt: d.CQCnt, EPCnt: d.EPCnt, TxCtxCnt: d.TxCtxCnt, RxCtxCnt: d.RxCtxCnt,
			MaxEPTxCtx: d.MaxEPTxCtx, MaxEPRxCtx: d.MaxEPRxCtx, MaxEPStxCtx: d.MaxEPStxCtx, MaxEPSrxCtx: d.MaxEPSrxCtx,
			CntrCnt: d.CntrCnt, MRIovLimit: d.MRIovLimit, Caps: bitsList(d.Caps, capNames), Mode: bitsList(d.Mode, modeNames),
			MaxErrData: d.MaxErrData, MRCnt: d.MRCnt, TClass: d.TClass}
	}
	if f := in.FabricAttr; f != nil {
		r.FabricAttr = &fabricAttrRecord{Name: f.Name, ProvName: f.ProvName, ProvVersion: version(f.ProvVersion), APIVersion: version(f.APIVersion)}
	}
	return r
}

func cmdInfo(args []string, stdout io.Writer, _ <-chan struct{}) error {
	fs := newFlagSet("info")
	out := outputFlag("text")
	fs.Var(&out, "o", "output `FORMAT`: text or json")
	prov := fs.String("p", "", "provider `NAME` hint (fabric_attr.prov_name: only xdpfab matches)")
	epType := fs.String("e", "", "endpoint `TYPE` hint: FI_EP_RDM (rdm), FI_EP_MSG, FI_EP_DGRAM")
	caps := fs.String("c", "", "capabilities `CAPS` hint, e.g. FI_MSG|FI_RMA or msg,atomic")
	mode := fs.String("m", "", "`MODE` bits the application supports, e.g. FI_CONTEXT")
	addrFmt := fs.String("a", "", "address `FORMAT` hint: FI_SOCKADDR_IN, FI_SOCKADDR_IN6, FI_SOCKADDR, FI_ADDR_STR")
	node := fs.String("n", "", "`NODE`: host name or address to reach (with --src: a local address)")
	service := fs.String("s", "", "`SERVICE`: UDP port or service name")
	src := fs.Bool("src", false, "NODE and SERVICE are the local (source) address: FI_SOURCE")
	numeric := fs.Bool("numeric", false, "NODE is a numeric address: FI_NUMERICHOST")
	domain := fs.String("d", "", "domain `NAME` hint (domain_attr.name: the interface)")
	fabricName := fs.String("f", "", "fabric `NAME` hint (fabric_attr.name: the network, e.g. 10.1.0.0/24)")
	verbose := fs.Bool("v", false, "print every attribute, as fi_info -v")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: info takes no arguments (use -n NODE and -s SERVICE)", errUsage)
	}
	var hints *fabric.Info
	hint := func() *fabric.Info {
		if hints == nil {
			hints = fabric.AllocInfo()
		}
		return hints
	}
	if *prov != "" {
		hint().FabricAttr.ProvName = *prov
	}
	if *fabricName != "" {
		hint().FabricAttr.Name = *fabricName
	}
	if *domain != "" {
		hint().DomainAttr.Name = *domain
	}
	if *epType != "" {
		t, err := parseEPType(*epType)
		if err != nil {
			return fmt.Errorf("%w: -e: %v", errUsage, err)
		}
		hint().EPAttr.Type = t
	}
	if *caps != "" {
		c, err := parseBits(*caps, capNames)
		if err != nil {
			return fmt.Errorf("%w: -c: %v", errUsage, err)
		}
		hint().Caps = c
	}
	if *mode != "" {
		m, err := parseBits(*mode, modeNames)
		if err != nil {
			return fmt.Errorf("%w: -m: %v", errUsage, err)
		}
		hint().Mode = m
	}
	if *addrFmt != "" {
		f, err := parseAddrFormat(*addrFmt)
		if err != nil {
			return fmt.Errorf("%w: -a: %v", errUsage, err)
		}
		hint().AddrFormat = f
	}
	var flags fi.Flags
	if *src {
		flags |= fi.SOURCE
	}
	if *numeric {
		flags |= fi.NUMERICHOST
	}
	infos, err := fabric.GetInfo(fabric.APIVersion, *node, *service, flags, hints)
	if err != nil {
		return err
	}
	recs := make([]infoRecord, len(infos))
	for i, in := range infos {
		recs[i] = infoRecordOf(in)
	}
	if out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(recs)
	}
	for _, r := range recs {
		if *verbose {
			printInfoVerbose(stdout, &r)
		} else {
			printInfo(stdout, &r)
		}
	}
	return nil
}

// printInfo is fi_info's default listing, plus the address and whether
// the XDP program serves it.
func printInfo(w io.Writer, r *infoRecord) {
	fmt.Fprintf(w, "provider: %s\n", r.FabricAttr.ProvName)
	fmt.Fprintf(w, "    fabric: %s\n", r.FabricAttr.Name)
	fmt.Fprintf(w, "    domain: %s\n", r.DomainAttr.Name)
	fmt.Fprintf(w, "    version: %s\n", r.FabricAttr.ProvVersion)
	fmt.Fprintf(w, "    type: %s\n", r.EPAttr.Type)
	fmt.Fprintf(w, "    protocol: %s\n", r.EPAttr.Protocol)
	fmt.Fprintf(w, "    address: %s (%s)\n", r.SrcAddr, r.AddrFormat)
	fmt.Fprintf(w, "    caps: %s\n", strings.Join(r.Caps, "|"))
	if r.NIC != nil {
		xdp := "no (kernel UDP socket)"
		if r.NIC.XDPAttached {
			xdp = "yes (AF_XDP)"
		}
		fmt.Fprintf(w, "    xdp attached: %s, mtu %d\n", xdp, r.NIC.MTU)
	}
}

// printInfoVerbose prints every attribute in fi_tostr's layout.
func printInfoVerbose(w io.Writer, r *infoRecord) {
	list := func(s []string) string { return "[ " + strings.Join(s, ", ") + " ]" }
	fmt.Fprintf(w, "---\nfi_info:\n")
	fmt.Fprintf(w, "    caps: %s\n    mode: %s\n    addr_format: %s\n", list(r.Caps), list(r.Mode), r.AddrFormat)
	fmt.Fprintf(w, "    src_addr: %s\n    dest_addr: %s\n", orNil(r.SrcAddr), orNil(r.DestAddr))
	if t := r.TxAttr; t != nil {
		fmt.Fprintf(w, "    fi_tx_attr:\n        caps: %s\n        mode: %s\n        op_flags: %s\n        msg_order: %s\n        comp_order: %s\n",
			list(t.Caps), list(t.Mode), list(t.OpFlags), list(t.MsgOrder), list(t.CompOrder))
		fmt.Fprintf(w, "        inject_size: %d\n        size: %d\n        iov_limit: %d\n        rma_iov_limit: %d\n        tclass: %#x\n",
			t.InjectSize, t.Size, t.IovLimit, t.RMAIovLimit, t.TClass)
	}
	if t := r.RxAttr; t != nil {
		fmt.Fprintf(w, "    fi_rx_attr:\n        caps: %s\n        mode: %s\n        op_flags: %s\n        msg_order: %s\n        comp_order: %s\n",
			list(t.Caps), list(t.Mode), list(t.OpFlags), list(t.MsgOrder), list(t.CompOrder))
		fmt.Fprintf(w, "        total_buffered_recv: %d\n        size: %d\n        iov_limit: %d\n", t.TotalBufferedRecv, t.Size, t.IovLimit)
	}
	if e := r.EPAttr; e != nil {
		fmt.Fprintf(w, "    fi_ep_attr:\n        type: %s\n        protocol: %s\n        protocol_version: %d\n        max_msg_size: %d\n        msg_prefix_size: %d\n",
			e.Type, e.Protocol, e.ProtocolVersion, e.MaxMsgSize, e.MsgPrefixSize)
		fmt.Fprintf(w, "        max_order_raw_size: %d\n        max_order_war_size: %d\n        max_order_waw_size: %d\n        mem_tag_format: %s\n        tx_ctx_cnt: %d\n        rx_ctx_cnt: %d\n        auth_key_size: %d\n",
			e.MaxOrderRAWSize, e.MaxOrderWARSize, e.MaxOrderWAWSize, e.MemTagFormat, e.TxCtxCnt, e.RxCtxCnt, e.AuthKeySize)
	}
	if d := r.DomainAttr; d != nil {
		fmt.Fprintf(w, "    fi_domain_attr:\n        name: %s\n        threading: %s\n        control_progress: %s\n        data_progress: %s\n        resource_mgmt: %s\n        av_type: %s\n        mr_mode: %s\n",
			d.Name, d.Threading, d.ControlProgress, d.DataProgress, d.ResourceMgmt, d.AVType, d.MRMode)
		fmt.Fprintf(w, "        mr_key_size: %d\n        cq_data_size: %d\n        cq_cnt: %d\n        ep_cnt: %d\n        tx_ctx_cnt: %d\n        rx_ctx_cnt: %d\n        max_ep_tx_ctx: %d\n        max_ep_rx_ctx: %d\n        max_ep_stx_ctx: %d\n        max_ep_srx_ctx: %d\n        cntr_cnt: %d\n        mr_iov_limit: %d\n        caps: %s\n        mode: %s\n        max_err_data: %d\n        mr_cnt: %d\n        tclass: %#x\n",
			d.MRKeySize, d.CQDataSize, d.CQCnt, d.EPCnt, d.TxCtxCnt, d.RxCtxCnt, d.MaxEPTxCtx, d.MaxEPRxCtx, d.MaxEPStxCtx, d.MaxEPSrxCtx,
			d.CntrCnt, d.MRIovLimit, list(d.Caps), list(d.Mode), d.MaxErrData, d.MRCnt, d.TClass)
	}
	if f := r.FabricAttr; f != nil {
		fmt.Fprintf(w, "    fi_fabric_attr:\n        name: %s\n        prov_name: %s\n        prov_version: %s\n        api_version: %s\n", f.Name, f.ProvName, f.ProvVersion, f.APIVersion)
	}
	if n := r.NIC; n != nil {
		fmt.Fprintf(w, "    nic:\n        device_attr:\n            name: %s\n        link_attr:\n            address: %s\n            mtu: %d\n            state: %s\n            network_type: %s\n        prov_attr:\n            xdp_attached: %v\n            ifindex: %d\n",
			n.Name, n.LinkAddr, n.MTU, map[bool]string{true: "FI_LINK_UP", false: "FI_LINK_DOWN"}[n.Up], n.NetworkType, n.XDPAttached, n.Ifindex)
	}
}

func orNil(s string) string {
	if s == "" {
		return "(null)"
	}
	return s
}
