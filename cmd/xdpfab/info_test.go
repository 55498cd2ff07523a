package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// infoCase is one `xdpfab info` invocation and the fi_getinfo call it
// stands for.
type infoCase struct {
	args  []string
	node  string
	svc   string
	flags fi.Flags
	hints func() *fabric.Info
}

func infoCases() []infoCase {
	h := func(f func(*fabric.Info)) func() *fabric.Info {
		return func() *fabric.Info { i := fabric.AllocInfo(); f(i); return i }
	}
	return []infoCase{
		{args: nil},
		{args: []string{"-p", "xdpfab"}, hints: h(func(i *fabric.Info) { i.FabricAttr.ProvName = "xdpfab" })},
		{args: []string{"-e", "rdm", "-c", "FI_MSG|FI_ATOMIC"}, hints: h(func(i *fabric.Info) { i.EPAttr.Type = fabric.EPRDM; i.Caps = fi.MSG | fi.ATOMIC })},
		{args: []string{"-c", "tagged,rma", "-m", "FI_CONTEXT"}, hints: h(func(i *fabric.Info) { i.Caps = fi.TAGGED | fi.RMA; i.Mode = fi.CONTEXT })},
		{args: []string{"-a", "FI_SOCKADDR_IN6"}, hints: h(func(i *fabric.Info) { i.AddrFormat = fi.FormatSockaddr6 })},
		{args: []string{"-n", "127.0.0.1", "-s", "4791", "--src"}, node: "127.0.0.1", svc: "4791", flags: fi.SOURCE},
		{args: []string{"-n", "127.0.0.1", "-s", "4791"}, node: "127.0.0.1", svc: "4791"},
		{args: []string{"-d", "lo"}, hints: h(func(i *fabric.Info) { i.DomainAttr.Name = "lo" })},
	}
}

// checkInfoMatches runs each case through the CLI (in ns, or here) and
// fabric.GetInfo (in the same namespace) and requires the same answer:
// as many entries, in the same order, every field equal, and every name
// the CLI printed parsing back to the exact bits GetInfo returned.
func checkInfoMatches(t *testing.T, ns *testenv.Netns) {
	for _, c := range infoCases() {
		prefix := []string{"info"}
		if ns != nil {
			prefix = []string{"-n", ns.Name, "info"}
		}
		args := append(append(slices.Clone(prefix), c.args...), "-o", "json")
		code, stdout, stderr := xdpfab(args...)
		require.Equal(t, exitOK, code, "%v: %s", c.args, stderr)
		require.NotContains(t, stdout, "null", "lists are [], never null")
		var got []infoRecord
		require.NoError(t, json.Unmarshal([]byte(stdout), &got))

		var infos []*fabric.Info
		get := func() (err error) {
			var hints *fabric.Info
			if c.hints != nil {
				hints = c.hints()
			}
			infos, err = fabric.GetInfo(fabric.APIVersion, c.node, c.svc, c.flags, hints)
			return err
		}
		if ns != nil {
			require.NoError(t, ns.Do(get))
		} else {
			require.NoError(t, get())
		}
		require.Len(t, got, len(infos), "%v", c.args)
		for i, in := range infos {
			want, err := json.Marshal(infoRecordOf(in))
			require.NoError(t, err)
			var wantRec infoRecord
			require.NoError(t, json.Unmarshal(want, &wantRec))
			require.Equal(t, wantRec, got[i], "%v: entry %d", c.args, i)
			// The names are the bits, all of them.
			back := func(names []string) fi.Flags {
				v, err := parseBits(strings.Join(names, "|"), capNames)
				require.NoError(t, err, "%v", names)
				return v
			}
			require.Equal(t, in.Caps, back(got[i].Caps))
			require.Equal(t, in.TxAttr.Caps, back(got[i].TxAttr.Caps))
			require.Equal(t, in.RxAttr.Caps, back(got[i].RxAttr.Caps))
			order, err := parseBits(strings.Join(got[i].TxAttr.MsgOrder, "|"), orderNames)
			require.NoError(t, err)
			require.Equal(t, in.TxAttr.MsgOrder, order)
			src, _ := in.SrcAddrPort()
			require.Equal(t, src.String(), got[i].SrcAddr)
		}

		// The text listing has the same entries.
		code, text, stderr := xdpfab(append(slices.Clone(prefix), c.args...)...)
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, len(infos), strings.Count(text, "provider: xdpfab\n"), text)
		for _, r := range got {
			require.Contains(t, text, "    address: "+r.SrcAddr+" ("+r.AddrFormat+")\n")
		}
	}
}

// TestInfoMatchesGetInfo: `xdpfab info` prints what fi_getinfo answers,
// for each hint flag, in text and JSON.
func TestInfoMatchesGetInfo(t *testing.T) {
	checkInfoMatches(t, nil)
}

// TestInfoXDPAttached: in a namespace with xdpfab attached on one end of
// a veth, info lists that address first, marked attached and AF_XDP, and
// still matches fi_getinfo.
func TestInfoXDPAttached(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	t.Cleanup(func() { cleanupIn(b, v.NameB) })
	code, _, stderr := xdpfab("-n", b.Name, "attach", v.NameB, "--mode", "generic")
	require.Equal(t, exitOK, code, stderr)

	code, stdout, stderr := xdpfab("-n", b.Name, "info", "-o", "json", "-a", "FI_SOCKADDR_IN")
	require.Equal(t, exitOK, code, stderr)
	var recs []infoRecord
	require.NoError(t, json.Unmarshal([]byte(stdout), &recs))
	require.NotEmpty(t, recs)
	require.Equal(t, v.NameB, recs[0].DomainAttr.Name, "the attached interface comes first")
	require.True(t, recs[0].NIC.XDPAttached)
	require.Equal(t, "afxdp", recs[0].Transport)
	require.Equal(t, v.AddrB.Addr().String()+":0", recs[0].SrcAddr)
	for _, r := range recs[1:] {
		require.False(t, r.NIC.XDPAttached, "%s", r.DomainAttr.Name)
	}
	code, text, _ := xdpfab("-n", b.Name, "info", "-d", v.NameB)
	require.Equal(t, exitOK, code)
	require.Contains(t, text, "xdp attached: yes (AF_XDP)")
	checkInfoMatches(t, b)
}

// TestInfoErrors: hints nothing meets fail like fi_getinfo (FI_ENODATA,
// exit 1); names that are no libfabric name are usage errors.
func TestInfoErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"info", "-e", "msg"}, exitError, "no data available"},
		{[]string{"info", "-p", "tcp"}, exitError, "no data available"},
		{[]string{"info", "-c", "FI_COLLECTIVE"}, exitError, "no data available"},
		{[]string{"info", "-c", "FI_BOGUS"}, exitUsage, "unknown name"},
		{[]string{"info", "-a", "FI_SOCKADDR_IB"}, exitUsage, "address format"},
		{[]string{"info", "extra"}, exitUsage, "no arguments"},
	} {
		code, _, stderr := xdpfab(c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.msg, "%v", c.args)
	}
}
