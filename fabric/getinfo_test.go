package fabric_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

var lo4 = netip.MustParseAddr("127.0.0.1")

// loInfo asks for 127.0.0.1 as the source address, so that the answer is
// the one Info of IPv4 loopback whatever else the host has.
func loInfo(t *testing.T, version uint32, hints *fabric.Info) ([]*fabric.Info, error) {
	t.Helper()
	return fabric.GetInfo(version, "127.0.0.1", "", fi.SOURCE, hints)
}

func hintsWith(fn func(h *fabric.Info)) *fabric.Info {
	h := fabric.AllocInfo()
	fn(h)
	return h
}

func TestGetInfoDefaults(t *testing.T) {
	infos, err := fabric.GetInfo(fabric.APIVersion, "", "", 0, nil)
	require.NoError(t, err)
	require.NotEmpty(t, infos)
	seenLoopback := false
	for i, info := range infos {
		ap, ok := info.SrcAddrPort()
		require.True(t, ok, "info %d src_addr", i)
		require.Nil(t, info.DestAddr)
		require.Equal(t, fabric.ProviderName, info.FabricAttr.ProvName)
		require.Equal(t, fabric.ProviderVersion, info.FabricAttr.ProvVersion)
		require.Equal(t, fabric.APIVersion, info.FabricAttr.APIVersion)
		require.Equal(t, info.NIC.Name, info.DomainAttr.Name)
		pfx, err := netip.ParsePrefix(info.FabricAttr.Name)
		require.NoError(t, err, "fabric name is the address's network")
		require.True(t, pfx.Contains(ap.Addr()))
		require.Equal(t, fabric.EPRDM, info.EPAttr.Type)
		require.Zero(t, info.Mode, "no mode bit required")
		require.Equal(t, fabric.PrimaryCaps|fabric.SecondaryCaps, info.Caps&^fabric.CommCaps)
		require.Equal(t, mr.Mode(0), info.DomainAttr.MRMode)
		require.Equal(t, fabric.ThreadSafe, info.DomainAttr.Threading)
		require.Equal(t, fabric.ProgressAuto, info.DomainAttr.Progress)
		require.Equal(t, fabric.ProgressAuto, info.DomainAttr.ControlProgress)
		require.Equal(t, fabric.RMEnabled, info.DomainAttr.ResourceMgmt)
		require.Equal(t, av.TypeUnspec, info.DomainAttr.AVType)
		require.Equal(t, fabric.DefaultTxSize, info.TxAttr.Size)
		require.Equal(t, fabric.DefaultRxSize, info.RxAttr.Size)
		require.Equal(t, fabric.MaxMsgSize, info.EPAttr.MaxMsgSize)
		require.Equal(t, fabric.IovLimit, info.TxAttr.IovLimit)
		require.Equal(t, fabric.RMAIovLimit, info.TxAttr.RMAIovLimit)
		require.LessOrEqual(t, info.TxAttr.InjectSize, fabric.InjectSize)
		require.Positive(t, info.TxAttr.InjectSize)
		require.Equal(t, mr.KeySize, info.DomainAttr.MRKeySize)
		require.Equal(t, mr.IOVLimit, info.DomainAttr.MRIovLimit)
		require.Equal(t, 8, info.DomainAttr.CQDataSize)
		require.Equal(t, 1, info.DomainAttr.MaxEPTxCtx)
		require.Zero(t, info.DomainAttr.MaxEPStxCtx)
		if ap.Addr().IsLoopback() {
			seenLoopback = true
			require.Equal(t, fi.LOCAL_COMM, info.Caps&fabric.CommCaps, "loopback is local only")
			require.False(t, info.NIC.XDPAttached)
			for _, other := range infos[i:] {
				oap, _ := other.SrcAddrPort()
				require.True(t, oap.Addr().IsLoopback(), "loopback comes after the other addresses")
			}
		} else {
			require.Equal(t, fabric.CommCaps, info.Caps&fabric.CommCaps)
		}
		if ap.Addr().Is4() {
			require.Equal(t, fi.FormatSockaddr4, info.AddrFormat)
		} else {
			require.Equal(t, fi.FormatSockaddr6, info.AddrFormat)
		}
	}
	require.True(t, seenLoopback)
}

// TestGetInfoHints runs hints against the IPv4 loopback Info: those that
// can be met give one Info (checked by check), the others FI_ENODATA.
func TestGetInfoHints(t *testing.T) {
	v := fabric.APIVersion
	for _, tc := range []struct {
		name    string
		version uint32
		hints   func(h *fabric.Info)
		err     error // nil: met
		check   func(t *testing.T, info *fabric.Info)
	}{
		{name: "empty hints", hints: func(h *fabric.Info) {}, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fabric.PrimaryCaps|fabric.SecondaryCaps|fi.LOCAL_COMM, info.Caps)
		}},
		{name: "caps msg", hints: func(h *fabric.Info) { h.Caps = fi.MSG }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fi.MSG|fi.SEND|fi.RECV|fabric.SecondaryCaps|fi.LOCAL_COMM, info.Caps)
			require.Equal(t, fi.MSG|fi.SEND|fi.FENCE, info.TxAttr.Caps)
			require.Equal(t, fi.MSG|fi.RECV|fi.MULTI_RECV|fi.SOURCE|fi.RMA_EVENT, info.RxAttr.Caps)
		}},
		{name: "caps send only", hints: func(h *fabric.Info) { h.Caps = fi.TAGGED | fi.SEND }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fi.TAGGED|fi.SEND, info.Caps&fabric.PrimaryCaps, "a given modifier is not widened")
		}},
		{name: "caps rma atomic", hints: func(h *fabric.Info) { h.Caps = fi.RMA | fi.ATOMIC }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fi.RMA|fi.ATOMIC|fi.READ|fi.WRITE|fi.REMOTE_READ|fi.REMOTE_WRITE, info.Caps&fabric.PrimaryCaps)
		}},
		{name: "caps tagged directed", hints: func(h *fabric.Info) { h.Caps = fi.TAGGED | fi.DIRECTED_RECV | fi.SOURCE | fi.MULTI_RECV }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fi.TAGGED|fi.DIRECTED_RECV|fi.SEND|fi.RECV, info.Caps&fabric.PrimaryCaps)
		}},
		{name: "caps av user id", hints: func(h *fabric.Info) { h.Caps = fi.MSG | fi.AV_USER_ID }},
		{name: "caps local comm", hints: func(h *fabric.Info) { h.Caps = fi.MSG | fi.LOCAL_COMM }},
		{name: "caps remote comm on loopback", hints: func(h *fabric.Info) { h.Caps = fi.MSG | fi.REMOTE_COMM }, err: fi.ENODATA},
		{name: "caps hmem", hints: func(h *fabric.Info) { h.Caps = fi.MSG | fi.HMEM }, err: fi.ENODATA},
		{name: "caps multicast", hints: func(h *fabric.Info) { h.Caps = fi.MSG | fi.MULTICAST }, err: fi.ENODATA},
		{name: "caps collective", hints: func(h *fabric.Info) { h.Caps = fi.COLLECTIVE }, err: fi.ENODATA},
		{name: "caps trigger", hints: func(h *fabric.Info) { h.Caps = fi.MSG | fi.TRIGGER }, err: fi.ENODATA},
		{name: "caps named rx ctx", hints: func(h *fabric.Info) { h.Caps = fi.MSG | fi.NAMED_RX_CTX }, err: fi.ENODATA},
		{name: "caps source err", hints: func(h *fabric.Info) { h.Caps = fi.MSG | fi.SOURCE | fi.SOURCE_ERR }, err: fi.ENODATA},
		{name: "caps variable msg", hints: func(h *fabric.Info) { h.Caps = fi.MSG | fi.VARIABLE_MSG }, err: fi.ENODATA},
		{name: "mode context accepted", hints: func(h *fabric.Info) { h.Mode = fi.CONTEXT | fi.CONTEXT2 | fi.MSG_PREFIX }, check: func(t *testing.T, info *fabric.Info) {
			require.Zero(t, info.Mode, "no mode is kept")
		}},
		{name: "ep rdm", hints: func(h *fabric.Info) { h.EPAttr.Type = fabric.EPRDM }},
		{name: "ep msg", hints: func(h *fabric.Info) { h.EPAttr.Type = 1 }, err: fi.ENODATA},
		{name: "ep dgram", hints: func(h *fabric.Info) { h.EPAttr.Type = 2 }, err: fi.ENODATA},
		{name: "addr in", hints: func(h *fabric.Info) { h.AddrFormat = fi.FormatSockaddr4 }},
		{name: "addr sockaddr", hints: func(h *fabric.Info) { h.AddrFormat = fi.FormatSockaddr }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fi.FormatSockaddr4, info.AddrFormat)
		}},
		{name: "addr in6 on ipv4", hints: func(h *fabric.Info) { h.AddrFormat = fi.FormatSockaddr6 }, err: fi.ENODATA},
		{name: "addr str", hints: func(h *fabric.Info) { h.AddrFormat = fi.FormatStr }, err: fi.ENODATA},
		{name: "mr unspec", hints: func(h *fabric.Info) {}, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, mr.Mode(0), info.DomainAttr.MRMode)
		}},
		{name: "mr basic map", hints: func(h *fabric.Info) {
			h.DomainAttr.MRMode = mr.ModeLocal | mr.ModeVirtAddr | mr.ModeAllocated | mr.ModeProvKey
		}, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, mr.Mode(0), info.DomainAttr.MRMode, "xdpfab needs none of them")
		}},
		{name: "mr all bits", hints: func(h *fabric.Info) { h.DomainAttr.MRMode = 0xffc }},
		{name: "mr basic", hints: func(h *fabric.Info) { h.DomainAttr.MRMode = mr.ModeBasic }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, mr.ModeBasic, info.DomainAttr.MRMode)
		}},
		{name: "mr scalable", hints: func(h *fabric.Info) { h.DomainAttr.MRMode = mr.ModeScalable }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, mr.ModeScalable, info.DomainAttr.MRMode)
		}},
		{name: "mr basic with bits", hints: func(h *fabric.Info) { h.DomainAttr.MRMode = mr.ModeBasic | mr.ModeLocal }, err: fi.ENODATA},
		{name: "mr basic and scalable", hints: func(h *fabric.Info) { h.DomainAttr.MRMode = mr.ModeBasic | mr.ModeScalable }, err: fi.ENODATA},
		{name: "mr unspec 1.4", version: fi.Version(1, 4), hints: func(h *fabric.Info) {}, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, mr.ModeScalable, info.DomainAttr.MRMode)
			require.Equal(t, fi.Version(1, 4), info.FabricAttr.APIVersion)
		}},
		{name: "mr basic 1.4", version: fi.Version(1, 4), hints: func(h *fabric.Info) { h.DomainAttr.MRMode = mr.ModeBasic }},
		{name: "mr local 1.4", version: fi.Version(1, 4), hints: func(h *fabric.Info) { h.DomainAttr.MRMode = mr.ModeLocal }, err: fi.ENODATA},
		{name: "progress manual", hints: func(h *fabric.Info) { h.DomainAttr.Progress = fabric.ProgressManual }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fabric.ProgressManual, info.DomainAttr.Progress)
			require.Equal(t, fabric.ProgressAuto, info.DomainAttr.ControlProgress)
		}},
		{name: "progress auto", hints: func(h *fabric.Info) {
			h.DomainAttr.Progress, h.DomainAttr.ControlProgress = fabric.ProgressAuto, fabric.ProgressManual
		}, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fabric.ProgressAuto, info.DomainAttr.Progress)
			require.Equal(t, fabric.ProgressManual, info.DomainAttr.ControlProgress)
		}},
		{name: "progress bad", hints: func(h *fabric.Info) { h.DomainAttr.Progress = 3 }, err: fi.ENODATA},
		{name: "threading domain", hints: func(h *fabric.Info) { h.DomainAttr.Threading = fabric.ThreadDomain }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fabric.ThreadDomain, info.DomainAttr.Threading)
		}},
		{name: "threading completion", hints: func(h *fabric.Info) { h.DomainAttr.Threading = fabric.ThreadCompletion }},
		{name: "threading safe", hints: func(h *fabric.Info) { h.DomainAttr.Threading = fabric.ThreadSafe }},
		{name: "threading bad", hints: func(h *fabric.Info) { h.DomainAttr.Threading = 9 }, err: fi.ENODATA},
		{name: "av map", hints: func(h *fabric.Info) { h.DomainAttr.AVType = av.TypeMap }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, av.TypeMap, info.DomainAttr.AVType)
		}},
		{name: "rm disabled", hints: func(h *fabric.Info) { h.DomainAttr.ResourceMgmt = fabric.RMDisabled }},
		{name: "tx size max", hints: func(h *fabric.Info) { h.TxAttr.Size = fabric.MaxTxSize }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fabric.MaxTxSize, info.TxAttr.Size)
		}},
		{name: "tx size above", hints: func(h *fabric.Info) { h.TxAttr.Size = fabric.MaxTxSize + 1 }, err: fi.ENODATA},
		{name: "rx size", hints: func(h *fabric.Info) { h.RxAttr.Size = 10 }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, 10, info.RxAttr.Size)
		}},
		{name: "rx size above", hints: func(h *fabric.Info) { h.RxAttr.Size = fabric.MaxRxSize + 1 }, err: fi.ENODATA},
		{name: "inject small", hints: func(h *fabric.Info) { h.TxAttr.InjectSize = 64 }, check: func(t *testing.T, info *fabric.Info) {
			require.GreaterOrEqual(t, info.TxAttr.InjectSize, 64)
		}},
		{name: "inject above", hints: func(h *fabric.Info) { h.TxAttr.InjectSize = fabric.InjectSize + 1 }, err: fi.ENODATA},
		{name: "iov limit", hints: func(h *fabric.Info) { h.TxAttr.IovLimit, h.RxAttr.IovLimit = fabric.IovLimit, 2 }},
		{name: "tx iov above", hints: func(h *fabric.Info) { h.TxAttr.IovLimit = fabric.IovLimit + 1 }, err: fi.ENODATA},
		{name: "rx iov above", hints: func(h *fabric.Info) { h.RxAttr.IovLimit = fabric.IovLimit + 1 }, err: fi.ENODATA},
		{name: "rma iov above", hints: func(h *fabric.Info) { h.TxAttr.RMAIovLimit = 2 }, err: fi.ENODATA},
		{name: "max msg size", hints: func(h *fabric.Info) { h.EPAttr.MaxMsgSize = fabric.MaxMsgSize }},
		{name: "max msg size above", hints: func(h *fabric.Info) { h.EPAttr.MaxMsgSize = fabric.MaxMsgSize + 1 }, err: fi.ENODATA},
		{name: "order sizes", hints: func(h *fabric.Info) {
			h.Caps = fi.RMA
			h.EPAttr.MaxOrderRAWSize, h.EPAttr.MaxOrderWARSize, h.EPAttr.MaxOrderWAWSize = -1, 1<<20, 8
		}},
		{name: "tx ctx 2", hints: func(h *fabric.Info) { h.EPAttr.TxCtxCnt = 2 }, err: fi.ENODATA},
		{name: "rx ctx shared", hints: func(h *fabric.Info) { h.EPAttr.RxCtxCnt = fabric.SharedContext }, err: fi.ENODATA},
		{name: "ep auth key", hints: func(h *fabric.Info) { h.EPAttr.AuthKey = []byte("k") }, err: fi.ENODATA},
		{name: "protocol", hints: func(h *fabric.Info) { h.EPAttr.Protocol = fabric.ProtoXdpfab }},
		{name: "protocol udp", hints: func(h *fabric.Info) { h.EPAttr.Protocol = 5 }, err: fi.ENODATA},
		{name: "tag format", hints: func(h *fabric.Info) { h.Caps = fi.TAGGED; h.EPAttr.MemTagFormat = fabric.TagGeneric }},
		{name: "cq data size", hints: func(h *fabric.Info) { h.DomainAttr.CQDataSize = 8 }},
		{name: "cq data size above", hints: func(h *fabric.Info) { h.DomainAttr.CQDataSize = 16 }, err: fi.ENODATA},
		{name: "mr iov above", hints: func(h *fabric.Info) { h.DomainAttr.MRIovLimit = mr.IOVLimit + 1 }, err: fi.ENODATA},
		{name: "mr key size above", hints: func(h *fabric.Info) { h.DomainAttr.MRKeySize = 16 }, err: fi.ENODATA},
		{name: "max ep tx ctx", hints: func(h *fabric.Info) { h.DomainAttr.MaxEPTxCtx = 2 }, err: fi.ENODATA},
		{name: "shared tx ctx", hints: func(h *fabric.Info) { h.DomainAttr.MaxEPStxCtx = 1 }, err: fi.ENODATA},
		{name: "mr cnt above", hints: func(h *fabric.Info) { h.DomainAttr.MRCnt = mr.DefaultMaxRegions + 1 }, err: fi.ENODATA},
		{name: "tclass label", hints: func(h *fabric.Info) { h.TxAttr.TClass, h.DomainAttr.TClass = 0x201, 0x205 }},
		{name: "tclass dscp", hints: func(h *fabric.Info) { h.TxAttr.TClass = 0x100 | 46 }, err: fi.ENODATA},
		{name: "domain tclass dscp", hints: func(h *fabric.Info) { h.DomainAttr.TClass = 0x100 }, err: fi.ENODATA},
		{name: "tclass above labels", hints: func(h *fabric.Info) { h.TxAttr.TClass = 0x206 }, err: fi.ENODATA},
		{name: "domain auth key", hints: func(h *fabric.Info) { h.DomainAttr.AuthKey = []byte("job-1") }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, []byte("job-1"), info.DomainAttr.AuthKey)
		}},
		{name: "domain caps", hints: func(h *fabric.Info) { h.DomainAttr.Caps = fi.LOCAL_COMM | fi.SHARED_AV }},
		{name: "domain caps remote on loopback", hints: func(h *fabric.Info) { h.DomainAttr.Caps = fi.REMOTE_COMM }, err: fi.ENODATA},
		{name: "msg order", hints: func(h *fabric.Info) {
			h.TxAttr.MsgOrder = fi.OrderSAS | fi.OrderRAW | fi.OrderRMAWAW
			h.RxAttr.MsgOrder = fi.OrderSAS
		}},
		{name: "comp order strict", hints: func(h *fabric.Info) { h.TxAttr.CompOrder = fi.OrderStrict }, err: fi.ENODATA},
		{name: "tx op flags", hints: func(h *fabric.Info) { h.TxAttr.OpFlags = fi.DELIVERY_COMPLETE | fi.COMPLETION }, check: func(t *testing.T, info *fabric.Info) {
			require.Equal(t, fi.DELIVERY_COMPLETE|fi.COMPLETION, info.TxAttr.OpFlags)
		}},
		{name: "tx op flags commit", hints: func(h *fabric.Info) { h.TxAttr.OpFlags = fi.COMMIT_COMPLETE }, err: fi.ENODATA},
		{name: "rx op flags multi recv", hints: func(h *fabric.Info) { h.RxAttr.OpFlags = fi.MULTI_RECV | fi.COMPLETION }},
		{name: "rx op flags peek", hints: func(h *fabric.Info) { h.RxAttr.OpFlags = fi.PEEK }, err: fi.ENODATA},
		{name: "tx caps beyond", hints: func(h *fabric.Info) { h.TxAttr.Caps = fi.MSG | fi.MULTICAST }, err: fi.ENODATA},
		{name: "tx caps ignore rx bits", hints: func(h *fabric.Info) { h.TxAttr.Caps = fi.MSG | fi.RECV | fi.SOURCE }},
		{name: "total buffered above", hints: func(h *fabric.Info) { h.RxAttr.TotalBufferedRecv = fabric.MaxUnexpectedBytes + 1 }, err: fi.ENODATA},
		{name: "prov name", hints: func(h *fabric.Info) { h.FabricAttr.ProvName = "xdpfab" }},
		{name: "prov name case", hints: func(h *fabric.Info) { h.FabricAttr.ProvName = "XDPFab" }},
		{name: "prov name tcp", hints: func(h *fabric.Info) { h.FabricAttr.ProvName = "tcp" }, err: fi.ENODATA},
		{name: "prov name layered", hints: func(h *fabric.Info) { h.FabricAttr.ProvName = "xdpfab;ofi_rxm" }, err: fi.ENODATA},
		{name: "prov version newer", hints: func(h *fabric.Info) { h.FabricAttr.ProvVersion = fabric.ProviderVersion + 1 }, err: fi.ENODATA},
		{name: "api version newer", hints: func(h *fabric.Info) { h.FabricAttr.APIVersion = fabric.APIVersion + 1 }, err: fi.ENODATA},
		{name: "fabric name", hints: func(h *fabric.Info) { h.FabricAttr.Name = "127.0.0.0/8" }},
		{name: "fabric name other", hints: func(h *fabric.Info) { h.FabricAttr.Name = "10.0.0.0/8" }, err: fi.ENODATA},
		{name: "domain name", hints: func(h *fabric.Info) { h.DomainAttr.Name = loopbackName(t) }},
		{name: "domain name other", hints: func(h *fabric.Info) { h.DomainAttr.Name = "no-such-if" }, err: fi.ENODATA},
		{name: "nic name", hints: func(h *fabric.Info) { h.NIC = &fabric.NIC{Name: loopbackName(t)} }},
		{name: "nic name other", hints: func(h *fabric.Info) { h.NIC = &fabric.NIC{Name: "no-such-if"} }, err: fi.ENODATA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version := tc.version
			if version == 0 {
				version = v
			}
			infos, err := loInfo(t, version, hintsWith(tc.hints))
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Nil(t, infos)
				return
			}
			require.NoError(t, err)
			require.Len(t, infos, 1)
			ap, ok := infos[0].SrcAddrPort()
			require.True(t, ok)
			require.Equal(t, lo4, ap.Addr())
			if tc.check != nil {
				tc.check(t, infos[0])
			}
		})
	}
}

func loopbackName(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	require.NoError(t, err)
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 {
			return ifc.Name
		}
	}
	t.Skip("no loopback interface")
	return ""
}

func hasAddr(t *testing.T, a netip.Addr) bool {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, x := range addrs {
		if ipn, ok := x.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

func TestGetInfoCallErrors(t *testing.T) {
	_, err := fabric.GetInfo(fabric.APIVersion+1, "", "", 0, nil)
	require.ErrorIs(t, err, fi.ENOSYS, "version newer than xdpfab's")
	_, err = fabric.GetInfo(fi.Version(2, 0), "", "", 0, nil)
	require.ErrorIs(t, err, fi.ENOSYS)
	_, err = fabric.GetInfo(fabric.APIVersion, "", "", fi.MSG, nil)
	require.ErrorIs(t, err, fi.EBADFLAGS)
	_, err = fabric.GetInfo(fabric.APIVersion, "", "", fi.SOURCE, nil)
	require.ErrorIs(t, err, fi.EINVAL, "FI_SOURCE needs node or service")
	_, err = fabric.GetInfo(fabric.APIVersion, "", "", 0, &fabric.Info{SrcAddr: []byte{1, 2, 3}})
	require.ErrorIs(t, err, fi.EINVAL, "malformed hints src_addr")

	infos, err := fabric.GetInfo(fabric.APIVersion, "", "", fi.PROV_ATTR_ONLY, nil)
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, fabric.ProviderName, infos[0].FabricAttr.ProvName)
	require.Equal(t, fabric.ProviderVersion, infos[0].FabricAttr.ProvVersion)
}

func TestGetInfoNodeService(t *testing.T) {
	v := fabric.APIVersion
	t.Run("source", func(t *testing.T) {
		infos, err := fabric.GetInfo(v, "127.0.0.1", "4711", fi.SOURCE, nil)
		require.NoError(t, err)
		require.Len(t, infos, 1)
		ap, _ := infos[0].SrcAddrPort()
		require.Equal(t, netip.MustParseAddrPort("127.0.0.1:4711"), ap)
		require.Nil(t, infos[0].DestAddr)
	})
	t.Run("source service only", func(t *testing.T) {
		infos, err := fabric.GetInfo(v, "", "4712", fi.SOURCE, nil)
		require.NoError(t, err)
		for _, info := range infos {
			ap, _ := info.SrcAddrPort()
			require.Equal(t, uint16(4712), ap.Port(), "every local address, on the service's port")
		}
	})
	t.Run("source with hints dest", func(t *testing.T) {
		h := &fabric.Info{DestAddr: fabric.SockaddrOf(netip.MustParseAddrPort("127.0.0.1:9000"))}
		infos, err := fabric.GetInfo(v, "127.0.0.1", "", fi.SOURCE, h)
		require.NoError(t, err)
		dest, ok := infos[0].DestAddrPort()
		require.True(t, ok)
		require.Equal(t, netip.MustParseAddrPort("127.0.0.1:9000"), dest)
	})
	t.Run("source not local", func(t *testing.T) {
		_, err := fabric.GetInfo(v, "198.51.100.77", "", fi.SOURCE, nil)
		require.ErrorIs(t, err, fi.ENODATA)
	})
	t.Run("destination", func(t *testing.T) {
		infos, err := fabric.GetInfo(v, "127.0.0.1", "4711", 0, nil)
		require.NoError(t, err)
		require.Len(t, infos, 1, "the source the route picks")
		dest, ok := infos[0].DestAddrPort()
		require.True(t, ok)
		require.Equal(t, netip.MustParseAddrPort("127.0.0.1:4711"), dest)
		src, _ := infos[0].SrcAddrPort()
		require.Equal(t, netip.MustParseAddrPort("127.0.0.1:0"), src)
	})
	t.Run("destination service only", func(t *testing.T) {
		infos, err := fabric.GetInfo(v, "", "4711", 0, nil)
		require.NoError(t, err)
		dest, _ := infos[0].DestAddrPort()
		require.Equal(t, netip.MustParseAddrPort("127.0.0.1:4711"), dest, "node NULL is loopback")
	})
	t.Run("destination addr str", func(t *testing.T) {
		infos, err := fabric.GetInfo(v, "fi_sockaddr_in://127.0.0.1:4711", "", 0, nil)
		require.NoError(t, err)
		dest, _ := infos[0].DestAddrPort()
		require.Equal(t, netip.MustParseAddrPort("127.0.0.1:4711"), dest)
		_, err = fabric.GetInfo(v, "fi_sockaddr_in://127.0.0.1:4711", "4711", 0, nil)
		require.ErrorIs(t, err, fi.EINVAL, "FI_ADDR_STR node takes no service")
		_, err = fabric.GetInfo(v, "fi_sockaddr_in://[::1]:4711", "", 0, nil)
		require.ErrorIs(t, err, fi.ENODATA)
	})
	t.Run("destination hints src", func(t *testing.T) {
		h := &fabric.Info{SrcAddr: fabric.SockaddrOf(netip.MustParseAddrPort("127.0.0.1:5000"))}
		infos, err := fabric.GetInfo(v, "127.0.0.1", "4711", 0, h)
		require.NoError(t, err)
		src, _ := infos[0].SrcAddrPort()
		require.Equal(t, netip.MustParseAddrPort("127.0.0.1:5000"), src)
	})
	t.Run("hints dest without node", func(t *testing.T) {
		h := &fabric.Info{DestAddr: fabric.SockaddrOf(netip.MustParseAddrPort("127.0.0.1:4711"))}
		infos, err := fabric.GetInfo(v, "", "", 0, h)
		require.NoError(t, err)
		dest, _ := infos[0].DestAddrPort()
		require.Equal(t, netip.MustParseAddrPort("127.0.0.1:4711"), dest)
		src, _ := infos[0].SrcAddrPort()
		require.Equal(t, lo4, src.Addr())
	})
	t.Run("localhost", func(t *testing.T) {
		infos, err := fabric.GetInfo(v, "localhost", "4711", 0, hintsWith(func(h *fabric.Info) { h.AddrFormat = fi.FormatSockaddr4 }))
		require.NoError(t, err)
		dest, _ := infos[0].DestAddrPort()
		require.True(t, dest.Addr().IsLoopback())
		_, err = fabric.GetInfo(v, "localhost", "4711", fi.NUMERICHOST, nil)
		require.ErrorIs(t, err, fi.ENODATA, "FI_NUMERICHOST takes no host name")
	})
	t.Run("unknown node", func(t *testing.T) {
		_, err := fabric.GetInfo(v, "no-such-host.invalid", "4711", 0, nil)
		require.ErrorIs(t, err, fi.ENODATA)
	})
	t.Run("bad service", func(t *testing.T) {
		_, err := fabric.GetInfo(v, "127.0.0.1", "no-such-service-xdpfab", 0, nil)
		require.ErrorIs(t, err, fi.ENODATA)
		_, err = fabric.GetInfo(v, "127.0.0.1", "70000", 0, nil)
		require.ErrorIs(t, err, fi.ENODATA)
	})
	t.Run("ipv6", func(t *testing.T) {
		if !hasAddr(t, netip.IPv6Loopback()) {
			t.Skip("no ::1 on this host")
		}
		infos, err := fabric.GetInfo(v, "::1", "4711", fi.SOURCE, nil)
		require.NoError(t, err)
		require.Len(t, infos, 1)
		require.Equal(t, fi.FormatSockaddr6, infos[0].AddrFormat)
		require.Len(t, infos[0].SrcAddr, av.SockaddrIn6Len)
		require.Equal(t, "::1/128", infos[0].FabricAttr.Name)
		infos, err = fabric.GetInfo(v, "", "4711", 0, hintsWith(func(h *fabric.Info) { h.AddrFormat = fi.FormatSockaddr6 }))
		require.NoError(t, err)
		dest, _ := infos[0].DestAddrPort()
		require.Equal(t, netip.MustParseAddrPort("[::1]:4711"), dest)
		_, err = fabric.GetInfo(v, "::1", "", fi.SOURCE, hintsWith(func(h *fabric.Info) { h.AddrFormat = fi.FormatSockaddr4 }))
		require.ErrorIs(t, err, fi.ENODATA)
	})
}

// TestGetInfoOpens opens fabric, domain and endpoint from a GetInfo
// answer, as C does, and checks that the domain reports the answer.
func TestGetInfoOpens(t *testing.T) {
	h := hintsWith(func(h *fabric.Info) {
		h.Caps = fi.MSG | fi.TAGGED | fi.RMA
		h.Mode = fi.CONTEXT
		h.TxAttr.Size = 100
		h.RxAttr.Size = 50
		h.TxAttr.OpFlags = fi.DELIVERY_COMPLETE
		h.DomainAttr.Progress = fabric.ProgressManual
		h.DomainAttr.Threading = fabric.ThreadDomain
		h.DomainAttr.AVType = av.TypeMap
		h.DomainAttr.MRMode = mr.ModeBasic
		h.DomainAttr.AuthKey = []byte("job")
		h.FabricAttr.ProvName = fabric.ProviderName
	})
	infos, err := fabric.GetInfo(fabric.APIVersion, "127.0.0.1", "", fi.SOURCE, h)
	require.NoError(t, err)
	info := infos[0]
	f, err := fabric.OpenFabricInfo(info.FabricAttr, nil)
	require.NoError(t, err)
	require.Equal(t, info.FabricAttr.Name, f.Name())
	d, err := f.DomainFromInfo(info, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	require.Equal(t, info, d.Info(), "Domain.Info and fi_getinfo agree")
	require.Equal(t, mr.ModeVirtAddr|mr.ModeAllocated|mr.ModeProvKey, d.MRs().Mode(), "FI_MR_BASIC enforced")

	ep, err := d.EndpointFromInfo(info, nil)
	require.NoError(t, err)
	require.Equal(t, lo4, ep.LocalAddr().Addr())
	require.NoError(t, ep.Close())

	// Attributes raised above what xdpfab has are refused at open.
	for name, mutate := range map[string]func(i *fabric.Info){
		"tx size":     func(i *fabric.Info) { i.TxAttr.Size = fabric.MaxTxSize + 1 },
		"rx size":     func(i *fabric.Info) { i.RxAttr.Size = fabric.MaxRxSize + 1 },
		"inject size": func(i *fabric.Info) { i.TxAttr.InjectSize = info.TxAttr.InjectSize + 1 },
		"iov limit":   func(i *fabric.Info) { i.TxAttr.IovLimit = fabric.IovLimit + 1 },
		"rma iov":     func(i *fabric.Info) { i.TxAttr.RMAIovLimit = fabric.RMAIovLimit + 1 },
		"msg size":    func(i *fabric.Info) { i.EPAttr.MaxMsgSize = fabric.MaxMsgSize + 1 },
		"ep type":     func(i *fabric.Info) { i.EPAttr.Type = 1 },
		"caps":        func(i *fabric.Info) { i.Caps |= fi.HMEM },
		"tx caps":     func(i *fabric.Info) { i.TxAttr.Caps = fi.ATOMIC },
		"comp order":  func(i *fabric.Info) { i.RxAttr.CompOrder = fi.OrderStrict },
		"tx ctx":      func(i *fabric.Info) { i.EPAttr.TxCtxCnt = 2 },
		"op flags":    func(i *fabric.Info) { i.TxAttr.OpFlags = fi.MULTICAST },
		"src addr":    func(i *fabric.Info) { i.SrcAddr = fabric.SockaddrOf(netip.MustParseAddrPort("127.0.0.2:0")) },
	} {
		bad := info.Clone()
		mutate(bad)
		_, err := d.EndpointFromInfo(bad, nil)
		require.ErrorIs(t, err, fi.EINVAL, name)
	}
	for name, mutate := range map[string]func(i *fabric.Info){
		"cq data size": func(i *fabric.Info) { i.DomainAttr.CQDataSize = 16 },
		"threading":    func(i *fabric.Info) { i.DomainAttr.Threading = 9 },
		"progress":     func(i *fabric.Info) { i.DomainAttr.Progress = 7 },
		"shared ctx":   func(i *fabric.Info) { i.DomainAttr.MaxEPSrxCtx = 1 },
		"mr mode":      func(i *fabric.Info) { i.DomainAttr.MRMode = mr.ModeBasic | mr.ModeLocal },
		"provider":     func(i *fabric.Info) { i.FabricAttr.ProvName = "tcp" },
		"name":         func(i *fabric.Info) { i.DomainAttr.Name = "no-such-if" },
		"addr format":  func(i *fabric.Info) { i.AddrFormat = fi.FormatStr },
		"src addr":     func(i *fabric.Info) { i.SrcAddr = []byte{0} },
	} {
		bad := info.Clone()
		mutate(bad)
		_, err := f.DomainFromInfo(bad, nil)
		require.ErrorIs(t, err, fi.EINVAL, name)
	}
	_, err = fabric.OpenFabricInfo(&fabric.FabricAttr{ProvName: "xdpfab;ofi_rxm"}, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = f.Domain(fabric.DomainAttr{Addr: lo4, EPCnt: 1 << 20}, nil)
	require.ErrorIs(t, err, fi.EINVAL, "a count above xdpfab's")
}

// TestDomainInfoAgrees: a domain opened from plain attributes reports
// what GetInfo answers for its address and the same attributes as hints.
func TestDomainInfoAgrees(t *testing.T) {
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	attr := fabric.DomainAttr{Addr: lo4, Port: 0, Transport: fabric.TransportUDP, Progress: fabric.ProgressManual,
		MRMode: mr.ModeLocal}
	d, err := f.Domain(attr, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	infos, err := fabric.GetInfo(fabric.APIVersion, "127.0.0.1", "", fi.SOURCE,
		&fabric.Info{DomainAttr: &fabric.DomainAttr{Progress: fabric.ProgressManual}})
	require.NoError(t, err)
	want := infos[0]
	want.DomainAttr.MRMode = mr.ModeLocal // what this domain enforces
	require.Equal(t, want, d.Info())

	// A domain named by its interface takes the interface's address.
	d2, err := f.Domain(fabric.DomainAttr{Name: loopbackName(t), Transport: fabric.TransportUDP}, nil)
	require.NoError(t, err)
	require.True(t, d2.Info().NIC.Up)
	require.NoError(t, d2.Close())
}

func TestInfoClone(t *testing.T) {
	infos, err := loInfo(t, fabric.APIVersion, hintsWith(func(h *fabric.Info) { h.DomainAttr.AuthKey = []byte("k") }))
	require.NoError(t, err)
	a := infos[0]
	b := a.Clone()
	require.Equal(t, a, b)
	b.TxAttr.Size++
	b.SrcAddr[2]++
	b.DomainAttr.AuthKey[0]++
	b.FabricAttr.Name = "x"
	b.NIC.MTU++
	require.NotEqual(t, a.TxAttr.Size, b.TxAttr.Size)
	require.NotEqual(t, a.SrcAddr, b.SrcAddr)
	require.NotEqual(t, a.DomainAttr.AuthKey, b.DomainAttr.AuthKey)
	require.NotEqual(t, a.FabricAttr.Name, b.FabricAttr.Name)
	require.NotEqual(t, a.NIC.MTU, b.NIC.MTU)
	require.Nil(t, (*fabric.Info)(nil).Clone())
}
