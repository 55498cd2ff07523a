package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/metrics"
	"github.com/xdpfab/xdpfab/xdp"
)

// TestStatusListsEveryAttachment: B has xdpfab on two interfaces, A on
// one, C on none. status in B lists B's two (one with this process's
// AF_XDP transport: its port's owner and bound queue), never A's; in C
// nothing, as text and as JSON without null.
func TestStatusListsEveryAttachment(t *testing.T) {
	testenv.RequirePriv(t)
	a, b, c := testenv.NewNetns(t), testenv.NewNetns(t), testenv.NewNetns(t)
	vab := testenv.NewVeth(t, a, b, testenv.VethOptions{AddrA: netip.MustParsePrefix("10.211.1.1/24"), AddrB: netip.MustParsePrefix("10.211.1.2/24")})
	vcb := testenv.NewVeth(t, c, b, testenv.VethOptions{AddrA: netip.MustParsePrefix("10.211.2.1/24"), AddrB: netip.MustParsePrefix("10.211.2.2/24")})
	t.Cleanup(func() {
		cleanupIn(b, vab.NameB)
		cleanupIn(b, vcb.NameB)
		cleanupIn(a, vab.NameA)
	})
	for _, x := range []struct {
		ns    *testenv.Netns
		iface string
		port  string
	}{{b, vab.NameB, "4791"}, {b, vcb.NameB, "4792"}, {a, vab.NameA, "4793"}} {
		code, _, stderr := xdpfab("-n", x.ns.Name, "attach", x.iface, "--mode", "generic", "--port", x.port)
		require.Equal(t, exitOK, code, stderr)
	}
	// This process serves a port on B's first interface over AF_XDP.
	var tr *afxdp.Transport
	require.NoError(t, b.Do(func() (err error) {
		tr, err = afxdp.Open(afxdp.Options{Iface: vab.NameB, Local: netip.AddrPortFrom(vab.AddrB.Addr(), 4800)})
		if err != nil {
			return err
		}
		return tr.Configure(xdp.PortConfig{AVID: 9})
	}))
	defer tr.Close()

	sts := statusJSON(t, b)
	require.Len(t, sts, 2, "B's two attachments")
	got := []string{sts[0].Iface, sts[1].Iface}
	require.ElementsMatch(t, []string{vab.NameB, vcb.NameB}, got)
	for _, st := range sts {
		require.NotEqual(t, vab.NameA, st.Iface)
		if st.Iface == vab.NameB {
			require.Equal(t, []uint32{0}, st.BoundQueues, "this process's AF_XDP socket")
			owned := false
			for _, p := range st.Ports {
				if p.Port.Port == 4800 {
					require.NotNil(t, p.Owner)
					require.Equal(t, os.Getpid(), p.Owner.PID)
					owned = true
				}
			}
			require.True(t, owned, "port 4800 with its owner in %+v", st.Ports)
		}
	}
	code, text, stderr := xdpfab("-n", b.Name, "status")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, text, vab.NameB+" (ifindex ")
	require.Contains(t, text, vcb.NameB+" (ifindex ")
	require.NotContains(t, text, vab.NameA)
	require.Contains(t, text, fmt.Sprintf("owner pid %d", os.Getpid()))
	require.Contains(t, text, "AF_XDP sockets on RX queues: 0")
	require.Contains(t, text, "AV map: ")
	require.Contains(t, text, "MR map: ")

	require.Len(t, statusJSON(t, a), 1, "A sees its own only")
	code, stdout, _ := xdpfab("-n", c.Name, "status", "-o", "json")
	require.Equal(t, exitOK, code)
	require.Equal(t, "[]\n", stdout)
	code, stdout, _ = xdpfab("-n", c.Name, "status")
	require.Equal(t, exitOK, code)
	require.Equal(t, notAttachedAnywhere+"\n", stdout)
}

// TestStatsShowsProcesses: with this process's engines on an AF_XDP
// transport in B and a UDP one in A exchanging messages, `stats` in B
// shows the XDP counters and next to them this process's endpoint and
// AF_XDP socket counters, as text, JSON, --watch lines and --listen's
// Prometheus text, which parses with the client library's parser.
func TestStatsShowsProcesses(t *testing.T) {
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	// A's kernel socket puts full checksums on the wire, as over a NIC
	// (XDP passes a checksum left to offload to the stack).
	require.NoError(t, a.SetTxChecksum(v.NameA, false))
	t.Cleanup(func() { cleanupIn(b, v.NameB) })
	code, _, stderr := xdpfab("-n", b.Name, "attach", v.NameB, "--mode", "generic")
	require.Equal(t, exitOK, code, stderr)

	var target, ini *reliable.Engine
	var unregs []func()
	defer func() {
		for _, u := range unregs {
			u()
		}
	}()
	require.NoError(t, b.Do(func() error {
		tr, err := afxdp.Open(afxdp.Options{Iface: v.NameB, Local: netip.AddrPortFrom(v.AddrB.Addr(), 4810)})
		if err != nil {
			return err
		}
		if err := tr.Configure(xdp.PortConfig{AVID: 3}); err != nil {
			tr.Close()
			return err
		}
		target, err = reliable.New(tr, reliable.Config{EndpointID: 2, OnComplete: func(reliable.Completion) {},
			Handler: reliable.HandlerFunc(func(*reliable.Incoming, []byte) (int, fi.Errno) { return 0, fi.SUCCESS })})
		if err != nil {
			tr.Close()
			return err
		}
		unregs = append(unregs, metrics.Register(metrics.Source{Stats: target.Stats, Transport: tr}))
		return nil
	}))
	defer target.Close()
	done := make(chan reliable.Completion, 64)
	require.NoError(t, a.Do(func() error {
		tr, err := udp.Listen(netip.AddrPortFrom(v.AddrA.Addr(), 0), udp.Options{})
		if err != nil {
			return err
		}
		ini, err = reliable.New(tr, reliable.Config{EndpointID: 1, OnComplete: func(c reliable.Completion) { done <- c }})
		if err != nil {
			tr.Close()
			return err
		}
		unregs = append(unregs, metrics.Register(metrics.Source{Stats: ini.Stats, Transport: tr}))
		return nil
	}))
	defer ini.Close()
	const msgs = 50
	for i := 0; i < msgs; i++ {
		require.NoError(t, ini.Submit(&reliable.Request{Peer: reliable.Peer{Addr: target.LocalAddr(), EP: 2}, Opcode: wire.OpMsg, Payload: []byte("hello")}))
		select {
		case c := <-done:
			require.Equal(t, fi.SUCCESS, c.Err)
		case <-time.After(10 * time.Second):
			t.Fatal("no completion")
		}
	}
	targetAddr := target.LocalAddr().String()
	pid := fmt.Sprint(os.Getpid())

	code, text, stderr := xdpfab("-n", b.Name, "stats", v.NameB)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, text, "redirect_xsk")
	require.Contains(t, text, "endpoint "+targetAddr+" (afxdp) of pid "+pid)
	require.Contains(t, text, "AF_XDP socket queue 0")
	require.NotContains(t, text, v.AddrA.Addr().String()+":", "A's endpoint is not in B")

	code, stdout, stderr := xdpfab("-n", b.Name, "stats", "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	var rec statsRecord
	require.NoError(t, json.NewDecoder(strings.NewReader(stdout)).Decode(&rec))
	require.Equal(t, v.NameB, rec.Iface)
	var ep *metrics.Endpoint
	for _, p := range rec.Processes {
		for i := range p.Endpoints {
			if p.Endpoints[i].Addr == targetAddr {
				ep = &p.Endpoints[i]
			}
		}
	}
	require.NotNil(t, ep, "B's endpoint in %s", stdout)
	require.GreaterOrEqual(t, ep.Engine.Delivered, uint64(1))
	require.Positive(t, ep.AFXDP.RxXSK, "received through AF_XDP: %s", text)

	// A's own stats: the UDP endpoint, nothing attached there.
	code, stdout, stderr = xdpfab("-n", a.Name, "stats")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "endpoints on the kernel UDP socket")
	require.Contains(t, stdout, "MSG "+fmt.Sprint(msgs))

	code, stdout, stderr = xdpfab("-n", b.Name, "stats", "--watch", "--count", "3", "--interval", "50ms")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, 2, strings.Count(stdout, " "+v.NameB+" rx "), stdout)
	require.Equal(t, 2, strings.Count(stdout, " pid "+pid+" "+targetAddr+" afxdp ops "), stdout)
	require.Equal(t, 2, strings.Count(stdout, " ifindex "), stdout)

	// --listen, scraped from inside B where it listens.
	pr, pw := io.Pipe()
	stop := make(chan struct{})
	exited := make(chan int, 1)
	go func() {
		exited <- run([]string{"-n", b.Name, "stats", "--listen", "127.0.0.1:0"}, pw, io.Discard, stop)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url := strings.TrimSpace(strings.TrimPrefix(line, "serving metrics on "))
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), line)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = b.Do(func() (err error) { c, err = (&net.Dialer{}).DialContext(ctx, network, addr); return err })
		return c, err
	}}}
	resp, err := client.Get(url)
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	for _, name := range []string{"xdpfab_xdp_packets_total", "xdpfab_engine_ops_total", "xdpfab_engine_retransmits_total",
		"xdpfab_xsk_rx_ring_full_total", "xdpfab_xsk_rx_fill_ring_empty_descs_total", "xdpfab_transport_rx_packets_total"} {
		require.Contains(t, fams, name)
	}
	close(stop)
	select {
	case code := <-exited:
		require.Equal(t, exitOK, code)
	case <-time.After(5 * time.Second):
		t.Fatal("stats --listen did not stop")
	}
}
