package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/internal/testenv"
)

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "frobnicate"},
		{"bench", "serve"},
		{"bench", "serve", "--addr", "not-an-ip"},
		{"bench", "run"},
		{"bench", "run", "--peer", "127.0.0.1", "--depth", "0"},
		{"bench", "run", "--peer", "127.0.0.1", "--depth", "5000"},
		{"bench", "run", "--peer", "127.0.0.1", "--count", "0"},
		{"bench", "local", "--duration", "0s"},
		{"bench", "local", "--transport", "rdma"},
		{"bench", "local", "-o", "yaml"},
		{"bench", "local", "extra"},
		{"bench", "serve", "--addr", "127.0.0.1", "--poll-spin", "50us"},
		{"bench", "local", "--shared-poll", "--poll-spin", "-1s"},
		{"bench", "local", "--phases", "tagged(ping"},
	} {
		code, _, stderr := xdpfab(args...)
		require.Equal(t, exitUsage, code, "args %q: %s", args, stderr)
		require.Contains(t, stderr, "bench serve --addr", "args %q", args)
	}
	code, stdout, _ := xdpfab("bench", "help")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "bench run --peer")
}

// checkReport checks that every phase ran and its figures are sane.
func checkReport(t *testing.T, r *benchReport) {
	t.Helper()
	require.True(t, r.Complete)
	for name, p := range map[string]*phaseResult{"udp_ping_pong": r.UDPPingPong, "fetch_add_latency": r.FetchAddLatency,
		"fetch_add_rate": r.FetchAddRate, "fetch_add_batched_rate": r.FetchAddBatchedRate,
		"send_rate": r.SendRate, "write_bandwidth": r.WriteBandwidth, "tagged_send_rate": r.TaggedSendRate,
		"tagged_ping_pong": r.TaggedPingPong, "tagged_bandwidth": r.TaggedBandwidth} {
		require.NotNil(t, p, name)
		require.NotZero(t, p.Ops, name)
		require.Positive(t, p.Seconds, name)
		require.InDelta(t, float64(p.Ops)/p.Seconds, p.OpsPerSec, p.OpsPerSec*1e-9, name)
		require.InDelta(t, p.OpsPerSec*float64(p.OpBytes), p.BytesPerSec, p.BytesPerSec*1e-9, name)
	}
	require.Equal(t, 1, r.UDPPingPong.Depth)
	require.Equal(t, benchMsgSize, r.UDPPingPong.OpBytes)
	require.Equal(t, 1, r.FetchAddLatency.Depth)
	require.Equal(t, r.Depth, r.FetchAddRate.Depth)
	require.Equal(t, r.Depth, r.FetchAddBatchedRate.Depth)
	require.Equal(t, 8, r.FetchAddBatchedRate.OpBytes)
	require.Equal(t, benchWriteSize, r.WriteBandwidth.OpBytes)
	checkLatency(t, r.UDPPingPong.Latency, "udp_ping_pong")
	checkLatency(t, r.FetchAddLatency.Latency, "fetch_add_latency")
	require.Nil(t, r.FetchAddRate.Latency, "no latency at depth > 1")
	require.Nil(t, r.FetchAddBatchedRate.Latency, "no latency at depth > 1")
	require.Equal(t, r.FetchAddLatency.Ops+r.FetchAddRate.Ops+r.FetchAddBatchedRate.Ops, r.FetchAdds)
	require.Equal(t, r.FetchAdds, r.CounterAdded, "the target's counter moved by the fetch-adds that completed")
}

// checkLatency checks a round-trip distribution is there and ordered.
func checkLatency(t *testing.T, l *latency, name string) {
	t.Helper()
	require.NotNil(t, l, name)
	require.Positive(t, l.Min, name)
	require.LessOrEqual(t, l.Min, l.P50, name)
	require.LessOrEqual(t, l.P50, l.P99, name)
	require.LessOrEqual(t, l.P99, l.Max, name)
	require.LessOrEqual(t, l.Min, l.Mean, name)
	require.LessOrEqual(t, l.Mean, l.Max, name)
}

func TestBenchLocal(t *testing.T) {
	code, stdout, stderr := xdpfab("bench", "local", "--transport", "udp", "--duration", "400ms", "--depth", "16", "-o", "json")
	require.Equal(t, exitOK, code, stderr)
	var r benchReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &r), stdout)
	checkReport(t, &r)
	require.Equal(t, 16, r.Depth)
	require.Equal(t, "udp", r.Transport)
	require.Equal(t, r.FetchAdds, r.Counter, "a fresh target's counter starts at 0")

	// --count bounds each phase: the batched phase posts one burst of 50,
	// FI_MORE on all but the last.
	// --duration is long enough for 50 round trips per phase even on a
	// loaded machine under -race; --count ends each phase long before.
	code, stdout, stderr = xdpfab("bench", "local", "--duration", "12s", "--count", "50")
	require.Equal(t, exitOK, code, stderr)
	for _, want := range []string{"xdpfab bench: 127.0.0.1:", "key 0xbe7c4",
		"send 8 B, 64 in flight", "RMA write 4 KiB, 64 in flight",
		"MB/s", "target counter 150: +150 this run, as expected"} {
		require.Contains(t, stdout, want)
	}
	for _, want := range []string{
		`(?m)^  udp ping-pong 8 B, 1 in flight \(kernel sockets, no xdpfab\)\s+50\s.*round trip p50 \S+  p99 \S+  mean \S+$`,
		`(?m)^  fetch-add uint64, 1 in flight\s+50\s.*round trip p50 \S+  p99 \S+  mean \S+$`,
		`(?m)^  fetch-add uint64, 64 in flight\s+50\s`,
		`(?m)^  fetch-add uint64, 64 in flight, FI_MORE\s+50\s`,
		`(?m)^  fetch-add round trip p50 = \d+\.\d\d× UDP ping-pong p50$`,
	} {
		require.Regexp(t, want, stdout)
	}
}

// TestBenchLocalPhases: --phases runs the phases it matches and no
// other; a report without a phase prints it as not run and leaves out
// the ratios that need it.
func TestBenchLocalPhases(t *testing.T) {
	code, stdout, stderr := xdpfab("bench", "local", "--transport", "udp", "--duration", "9s", "--count", "40",
		"--phases", "^(udp ping-pong|tagged ping-pong)")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^  udp ping-pong 8 B, 1 in flight \(kernel sockets, no xdpfab\)\s+40\s`, stdout)
	require.Regexp(t, `(?m)^  tagged ping-pong, 1 in flight\s+40\s`, stdout)
	require.Regexp(t, `(?m)^  tagged ping-pong round trip p50 = \d+\.\d\d× UDP ping-pong p50$`, stdout)
	require.Regexp(t, `(?m)^  fetch-add uint64, 1 in flight\s+-\s+not run`, stdout)
	require.Regexp(t, `(?m)^  send 8 B, 64 in flight\s+-\s+not run`, stdout)
	require.NotContains(t, stdout, "fetch-add round trip p50")
	require.Contains(t, stdout, "target counter 0: +0 this run, as expected")
}

// TestPrintReportRatio: the ratio line is computed from the two p50s, lost
// datagrams are shown, and without the baseline there is no ratio.
func TestPrintReportRatio(t *testing.T) {
	phase := func(p50 float64) *phaseResult {
		return &phaseResult{Ops: 10, OpBytes: 8, Depth: 1, Seconds: 1, OpsPerSec: 10,
			Latency: &latency{P50: p50, P99: 2 * p50, Mean: p50, Min: p50 / 2, Max: 3 * p50}}
	}
	r := &benchReport{Local: "10.0.0.1:1", Peer: "10.0.0.2:7471", Depth: 64, Complete: true,
		UDPPingPong: phase(20), FetchAddLatency: phase(30)}
	r.UDPPingPong.Lost = 3
	var buf bytes.Buffer
	printReport(&buf, r)
	require.Contains(t, buf.String(), "  fetch-add round trip p50 = 1.50× UDP ping-pong p50\n")
	require.Regexp(t, `udp ping-pong 8 B, 1 in flight \(kernel sockets, no xdpfab\)\s+10\s.*round trip p50 20\.0µs  p99 40\.0µs  mean 20\.0µs  lost 3\n`,
		buf.String())
	require.Regexp(t, `fetch-add uint64, 64 in flight, FI_MORE\s+-\s+not run`, buf.String())

	r.UDPPingPong = nil
	buf.Reset()
	printReport(&buf, r)
	require.NotContains(t, buf.String(), "×")
	require.Regexp(t, `udp ping-pong 8 B, 1 in flight \(kernel sockets, no xdpfab\)\s+-\s+not run`, buf.String())
}

// TestBenchLocalInterrupted stops a long run at once: it ends early with
// the phases it finished and says so. The UDP ping-pong runs first; a run
// of 12s has 2s phases, so the fetch-add round trips show progress after
// about 3s.
func TestBenchLocalInterrupted(t *testing.T) {
	for _, tc := range []struct {
		duration, line string
		check          func(t *testing.T, r *benchReport)
	}{
		{"1m", "bench: udp ping-pong 8 B, 1 in flight: ", func(t *testing.T, r *benchReport) {
			require.NotNil(t, r.UDPPingPong)
			require.NotNil(t, r.UDPPingPong.Latency)
			require.Nil(t, r.FetchAddLatency)
			require.Zero(t, r.FetchAdds)
		}},
		{"12s", "bench: fetch-add, 1 in flight: ", func(t *testing.T, r *benchReport) {
			require.NotNil(t, r.UDPPingPong)
			require.NotNil(t, r.FetchAddLatency)
			require.Nil(t, r.WriteBandwidth)
		}},
	} {
		t.Run(tc.duration, func(t *testing.T) { testBenchLocalInterrupted(t, tc.duration, tc.line, tc.check) })
	}
}

func testBenchLocalInterrupted(t *testing.T, duration, line string, check func(t *testing.T, r *benchReport)) {
	stop := make(chan struct{})
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"bench", "local", "--duration", duration, "-o", "json"}, &out, &errOut, stop)
	}()
	// Progress lines (one a second) show the phase running.
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), line) },
		20*time.Second, 10*time.Millisecond, errOut.String())
	close(stop)
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, errOut.String())
	case <-time.After(20 * time.Second):
		t.Fatal("bench local did not stop when interrupted")
	}
	var r benchReport
	require.NoError(t, json.Unmarshal([]byte(out.String()), &r), out.String())
	require.False(t, r.Complete)
	check(t, &r)
	require.Equal(t, r.FetchAdds, r.CounterAdded)
}

// TestUDPEcho: the ping-pong's echo server sends back whatever it gets,
// garbage of any size included, keeps going after an ICMP error (its echo
// to a closed socket), and stops on Close, blocking or spinning.
func TestUDPEcho(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busy=%v", busy), func(t *testing.T) {
			e, err := openUDPEcho(netip.MustParseAddrPort("127.0.0.1:0"), busy)
			require.NoError(t, err)
			require.NotZero(t, e.addr.Port())
			closed := false
			defer func() {
				if !closed {
					e.Close()
				}
			}()
			dial := func() *net.UDPConn {
				c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(e.addr))
				require.NoError(t, err)
				return c
			}
			// A client gone before its echo: the echo meets port unreachable.
			gone := dial()
			_, err = gone.Write([]byte("gone"))
			require.NoError(t, err)
			require.NoError(t, gone.Close())

			c := dial()
			defer c.Close()
			in := make([]byte, 70000)
			for _, size := range []int{0, 1, 8, 9, 1500, 9000, 65507} {
				out := bytes.Repeat([]byte{byte(size)}, size)
				_, err := c.Write(out)
				require.NoError(t, err)
				require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
				n, err := c.Read(in)
				require.NoError(t, err, "size %d", size)
				require.Equal(t, out, in[:n], "size %d", size)
			}
			require.GreaterOrEqual(t, e.echoed.Load(), uint64(7))
			closed = true
			require.NoError(t, e.Close())
		})
	}
}

// fakeEcho serves one datagram per round at addr: it drops the first one
// it gets and echoes the second twice (a late and a duplicate echo), then
// echoes the rest once. It stops after n datagrams.
func fakeEcho(t *testing.T, n int) (netip.AddrPort, <-chan error) {
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for i := range n {
			k, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				done <- err
				return
			}
			for range [...]int{0, 2, 1}[min(i, 2)] {
				if _, err := pc.WriteToUDPAddrPort(buf[:k], from); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort(), done
}

// TestUDPPingPongLoss: a datagram without an echo is sent again and
// counted lost, not waited for; echoes of earlier datagrams are skipped.
func TestUDPPingPongLoss(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busy=%v", busy), func(t *testing.T) {
			peer, served := fakeEcho(t, 4) // 3 round trips, one datagram lost
			fd, err := udpSocket(netip.MustParseAddrPort("127.0.0.1:0"), peer, busy)
			require.NoError(t, err)
			defer unix.Close(fd)
			c := &benchClient{o: &benchOptions{busyPoll: busy, count: 3}, done: make(chan struct{}),
				progress: newProgress(io.Discard), udp: fd, udpPeer: peer}
			r, err := c.udpPingPong("udp ping-pong", time.Minute)
			require.NoError(t, err)
			require.NoError(t, <-served)
			require.Equal(t, uint64(3), r.Ops)
			require.Equal(t, uint64(1), r.Lost)
			require.Equal(t, 1, r.Depth)
			checkLatency(t, r.Latency, "udp ping-pong")
			require.GreaterOrEqual(t, r.Latency.Max, float64(udpResend/time.Microsecond),
				"the lost one's round trip counts from its first send")
		})
	}
}

// TestUDPPingPongNoEcho: without an echo server the client is told so.
func TestUDPPingPongNoEcho(t *testing.T) {
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	require.NoError(t, err)
	peer := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	require.NoError(t, pc.Close())
	fd, err := udpSocket(netip.MustParseAddrPort("127.0.0.1:0"), peer, false)
	require.NoError(t, err)
	defer unix.Close(fd)
	c := &benchClient{o: &benchOptions{count: 10}, done: make(chan struct{}),
		progress: newProgress(io.Discard), udp: fd, udpPeer: peer}
	_, err = c.udpPingPong("udp ping-pong", time.Minute)
	require.ErrorIs(t, err, unix.ECONNREFUSED)
	require.ErrorContains(t, err, "no UDP echo at "+peer.String())
}

func TestProgressLine(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf)
	require.False(t, p.tty, "a buffer is no terminal")
	t0 := time.Now()
	p.begin("fetch-add, 1 in flight", t0)
	p.update(10, t0.Add(100*time.Millisecond))
	require.Empty(t, buf.String(), "at most one line a second")
	p.update(2000, t0.Add(time.Second))
	require.Equal(t, "bench: fetch-add, 1 in flight: 2000 ops, 2.00 k ops/s\n", buf.String())

	buf.Reset()
	p = &progress{w: &buf, tty: true, every: 0}
	p.begin("send", t0)
	p.update(5, t0.Add(time.Second))
	p.clear()
	require.Equal(t, "\r\033[Kbench: send: 5 ops, 5.00  ops/s\r\033[K", buf.String())
}

func TestSI(t *testing.T) {
	for v, want := range map[float64]string{0: "0.00 ", 1.5: "1.50 ", 999: "999 ", 1000: "1.00 k",
		12345: "12.3 k", 123456: "123 k", 2.5e6: "2.50 M", 4e9: "4.00 G"} {
		require.Equal(t, want, si(v), "%v", v)
	}
}

// lockedBuffer is a bytes.Buffer written by a command's goroutine while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBenchServeRunVeth runs `bench serve` in one namespace and `bench
// run` in the other, over a veth pair, on the kernel socket and on AF_XDP
// (xdpfab attached on both ends: the UDP ping-pong's port, PORT+1, passes
// the XDP program to the kernel stack), blocking and busy polling.
func TestBenchServeRunVeth(t *testing.T) {
	for _, transport := range []string{"udp", "xdp"} {
		t.Run(transport, func(t *testing.T) {
			testenv.RequirePriv(t)
			a, b := testenv.NewNetns(t), testenv.NewNetns(t)
			v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
			if transport == "xdp" {
				for _, end := range []struct{ ns, iface string }{{a.Name, v.NameA}, {b.Name, v.NameB}} {
					t.Cleanup(func() { xdpfab("-n", end.ns, "detach", end.iface) })
					code, _, stderr := xdpfab("-n", end.ns, "attach", end.iface, "--mode", "generic")
					require.Equal(t, exitOK, code, stderr)
				}
			}
			target := v.AddrB.Addr().String() + ":7471"

			var srvOut, srvErr lockedBuffer
			stop := make(chan struct{})
			served := make(chan int, 1)
			go func() {
				served <- run([]string{"-n", b.Name, "bench", "serve", "--addr", target, "--transport", transport}, &srvOut, &srvErr, stop)
			}()
			stopped := false
			defer func() {
				if !stopped {
					close(stop)
					<-served
				}
			}()
			require.Eventually(t, func() bool { return strings.Contains(srvOut.String(), "run: xdpfab bench run") },
				10*time.Second, 10*time.Millisecond, "serve did not start: %s", srvErr.String())
			require.Contains(t, srvOut.String(), "target "+target+", region key 0xbe7c4")
			require.Contains(t, srvOut.String(), "transport "+transport)
			require.Contains(t, srvOut.String(), "kernel UDP echo (the ping-pong baseline) at "+v.AddrB.Addr().String()+":7472")

			code, stdout, stderr := xdpfab("-n", a.Name, "bench", "run", "--peer", target, "--addr", v.AddrA.Addr().String(),
				"--transport", transport, "--duration", "600ms")
			require.Equal(t, exitOK, code, stderr)
			for _, want := range []string{"xdpfab bench: " + v.AddrA.Addr().String() + ":", "-> " + target,
				"transport " + transport, "fetch-add uint64, 1 in flight", "round trip p50 ",
				"udp ping-pong 8 B, 1 in flight (kernel sockets, no xdpfab)", "fetch-add uint64, 64 in flight, FI_MORE",
				"send 8 B, 64 in flight", "RMA write 4 KiB, 64 in flight", "as expected"} {
				require.Contains(t, stdout, want)
			}
			require.Regexp(t, `(?m)^  fetch-add round trip p50 = \d+\.\d\d× UDP ping-pong p50$`, stdout)

			// The local address defaults to the route's source address.
			code, stdout, stderr = xdpfab("-n", a.Name, "bench", "run", "--peer", target, "--transport", transport,
				"--duration", "600ms", "--depth", "32", "-o", "json")
			require.Equal(t, exitOK, code, stderr)
			var r benchReport
			require.NoError(t, json.Unmarshal([]byte(stdout), &r), stdout)
			checkReport(t, &r)
			require.Equal(t, transport, r.Transport)
			require.Equal(t, target, r.Peer)
			require.True(t, strings.HasPrefix(r.Local, v.AddrA.Addr().String()+":"), r.Local)
			counter := r.Counter

			// Busy polling: the ping-pong client spins on MSG_DONTWAIT.
			code, stdout, stderr = xdpfab("-n", a.Name, "bench", "run", "--peer", target, "--transport", transport,
				"--duration", "600ms", "--busy-poll", "-o", "json")
			require.Equal(t, exitOK, code, stderr)
			r = benchReport{}
			require.NoError(t, json.Unmarshal([]byte(stdout), &r), stdout)
			checkReport(t, &r)
			require.True(t, r.BusyPoll)
			require.Equal(t, counter+r.FetchAdds, r.Counter)

			// A client with the wrong key is told so, not left waiting.
			code, _, stderr = xdpfab("-n", a.Name, "bench", "run", "--peer", target, "--transport", transport,
				"--key", "0x1234", "--duration", "200ms")
			require.Equal(t, exitError, code)
			require.Contains(t, stderr, "key 0x1234")

			close(stop)
			stopped = true
			select {
			case code = <-served:
			case <-time.After(10 * time.Second):
				t.Fatal("bench serve did not stop")
			}
			require.Equal(t, exitOK, code, srvErr.String())
			require.Contains(t, srvOut.String(), fmt.Sprintf("counter %d, ", r.Counter))
			require.Regexp(t, `counter \d+, [1-9]\d* UDP datagrams echoed`, srvOut.String())
		})
	}
}
