package metrics_test

import (
	"bufio"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/metrics"
)

// loopbackPair registers two engines over loopback UDP and sends n
// messages from one to the other.
func loopbackPair(t *testing.T, n int) (ini *reliable.Engine) {
	t.Helper()
	open := func(id uint32, h reliable.Handler, done func(reliable.Completion)) *reliable.Engine {
		tr, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		e, err := reliable.New(tr, reliable.Config{EndpointID: id, Handler: h, OnComplete: done})
		if err != nil {
			t.Fatal(err)
		}
		unreg := metrics.Register(metrics.Source{Stats: e.Stats, Transport: tr})
		t.Cleanup(func() { unreg(); e.Close() })
		return e
	}
	target := open(2, reliable.HandlerFunc(func(*reliable.Incoming, []byte) (int, fi.Errno) { return 0, fi.SUCCESS }),
		func(reliable.Completion) {})
	done := make(chan reliable.Completion, n)
	ini = open(1, nil, func(c reliable.Completion) { done <- c })
	for i := 0; i < n; i++ {
		if err := ini.Submit(&reliable.Request{Peer: reliable.Peer{Addr: target.LocalAddr(), EP: 2}, Opcode: wire.OpMsg, Payload: []byte("hi")}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		select {
		case c := <-done:
			if c.Err != fi.SUCCESS {
				t.Fatalf("completion %+v", c)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no completion")
		}
	}
	return ini
}

// TestChannel: a process with endpoints serves their counters on its
// metrics socket, which Discover finds and Fetch reads; the socket goes
// with the last endpoint.
func TestChannel(t *testing.T) {
	loopbackPair(t, 10)
	names, err := metrics.Discover()
	if err != nil {
		t.Fatal(err)
	}
	var mine []metrics.Process
	for _, n := range names {
		p, err := metrics.Fetch(n)
		if err != nil {
			t.Fatalf("fetch %s: %v", n, err)
		}
		if p.PID == os.Getpid() {
			mine = append(mine, p)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("%d metrics sockets of this process among %v, want 1", len(mine), names)
	}
	p := mine[0]
	if len(p.Endpoints) != 2 || p.Rings == nil {
		t.Fatalf("process %+v: want 2 endpoints and a non-nil ring list", p)
	}
	var ops uint64
	for _, ep := range p.Endpoints {
		ops += ep.Engine.Ops["MSG"]
		if ep.Transport != "udp" || ep.UDP == nil {
			t.Fatalf("endpoint %+v: want udp", ep)
		}
	}
	if ops != 10 {
		t.Fatalf("MSG ops %d, want 10", ops)
	}
}

// TestChannelGoneWithEndpoints: unregistering the last endpoint closes
// the socket (and kill -9 does the same: the name is the kernel's).
func TestChannelGoneWithEndpoints(t *testing.T) {
	count := func() int {
		names, err := metrics.Discover()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range names {
			if strings.HasPrefix(name, metrics.SocketPrefix+itoa(os.Getpid())+"-") {
				n++
			}
		}
		return n
	}
	before := count()
	tr, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	unreg := metrics.Register(metrics.Source{Stats: func() reliable.Stats { return reliable.Stats{} }, Transport: tr})
	if got := count(); got != 1 {
		t.Fatalf("%d sockets with an endpoint (before %d)", got, before)
	}
	unreg()
	unreg() // idempotent
	if got := count(); got != 0 {
		t.Fatalf("%d sockets after the last endpoint left", got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestHandlerParses: the library handler's output parses with the client
// library's parser and carries the engine series.
func TestHandlerParses(t *testing.T) {
	loopbackPair(t, 5)
	srv := httptest.NewServer(metrics.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	for _, want := range []string{"xdpfab_engine_ops_total", "xdpfab_engine_retransmits_total", "xdpfab_engine_srtt_seconds",
		"xdpfab_engine_in_flight_ops", "xdpfab_engine_packets_per_op", "xdpfab_transport_rx_packets_total"} {
		if fams[want] == nil {
			names := make([]string, 0, len(fams))
			for n := range fams {
				names = append(names, n)
			}
			slices.Sort(names)
			t.Fatalf("no %s among %v", want, names)
		}
	}
	var msgs float64
	for _, m := range fams["xdpfab_engine_ops_total"].Metric {
		for _, l := range m.Label {
			if l.GetName() == "op" && l.GetValue() == "MSG" {
				msgs += m.Counter.GetValue()
			}
		}
	}
	if msgs != 5 {
		t.Fatalf("xdpfab_engine_ops_total{op=MSG} sums to %v, want 5", msgs)
	}
}

// TestKilledProcessLeavesNothing: a process with an endpoint serves a
// metrics socket; killed with -9 it leaves no trace for the CLI to find
// or clean up.
func TestKilledProcessLeavesNothing(t *testing.T) {
	if os.Getenv("XDPFAB_METRICS_CHILD") == "1" {
		tr, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
		if err != nil {
			os.Exit(1)
		}
		metrics.Register(metrics.Source{Stats: func() reliable.Stats { return reliable.Stats{} }, Transport: tr})
		os.Stdout.WriteString("ready\n")
		select {} // until killed
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledProcessLeavesNothing$")
	cmd.Env = append(os.Environ(), "XDPFAB_METRICS_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child: %q %v", line, err)
	}
	prefix := metrics.SocketPrefix + strconv.Itoa(cmd.Process.Pid) + "-"
	childSockets := func() []string {
		names, err := metrics.Discover()
		if err != nil {
			t.Fatal(err)
		}
		var mine []string
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				mine = append(mine, n)
			}
		}
		return mine
	}
	socks := childSockets()
	if len(socks) != 1 {
		t.Fatalf("child's metrics sockets %v, want one", socks)
	}
	p, err := metrics.Fetch(socks[0])
	if err != nil || p.PID != cmd.Process.Pid || len(p.Endpoints) != 1 {
		t.Fatalf("child's snapshot %+v, %v", p, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if left := childSockets(); len(left) != 0 {
		t.Fatalf("sockets of the killed child still listed: %v", left)
	}
	if _, err := metrics.Fetch(socks[0]); err == nil {
		t.Fatal("the killed child's socket still answers")
	}
}
