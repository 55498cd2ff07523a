package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	for name, p := range map[string]*phaseResult{"fetch_add_latency": r.FetchAddLatency,
		"fetch_add_rate": r.FetchAddRate, "send_rate": r.SendRate, "write_bandwidth": r.WriteBandwidth} {
		require.NotNil(t, p, name)
		require.NotZero(t, p.Ops, name)
		require.Positive(t, p.Seconds, name)
		require.InDelta(t, float64(p.Ops)/p.Seconds, p.OpsPerSec, p.OpsPerSec*1e-9, name)
		require.InDelta(t, p.OpsPerSec*float64(p.OpBytes), p.BytesPerSec, p.BytesPerSec*1e-9, name)
	}
	require.Equal(t, 1, r.FetchAddLatency.Depth)
	require.Equal(t, r.Depth, r.FetchAddRate.Depth)
	require.Equal(t, benchWriteSize, r.WriteBandwidth.OpBytes)
	l := r.FetchAddLatency.Latency
	require.NotNil(t, l)
	require.Positive(t, l.Min)
	require.LessOrEqual(t, l.Min, l.P50)
	require.LessOrEqual(t, l.P50, l.P99)
	require.LessOrEqual(t, l.P99, l.Max)
	require.LessOrEqual(t, l.Min, l.Mean)
	require.LessOrEqual(t, l.Mean, l.Max)
	require.Nil(t, r.FetchAddRate.Latency, "no latency at depth > 1")
	require.Equal(t, r.FetchAddLatency.Ops+r.FetchAddRate.Ops, r.FetchAdds)
	require.Equal(t, r.FetchAdds, r.CounterAdded, "the target's counter moved by the fetch-adds that completed")
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

	code, stdout, stderr = xdpfab("bench", "local", "--duration", "200ms", "--count", "50")
	require.Equal(t, exitOK, code, stderr)
	for _, want := range []string{"xdpfab bench: 127.0.0.1:", "key 0xbe7c4",
		"fetch-add uint64, 1 in flight   50 ", "round trip p50 ", " p99 ",
		"fetch-add uint64, 64 in flight  50 ", "send 8 B, 64 in flight", "RMA write 4 KiB, 64 in flight",
		"MB/s", "target counter 100: +100 this run, as expected"} {
		require.Contains(t, stdout, want)
	}
}

// TestBenchLocalInterrupted stops a long run at once: it ends early with
// the phases it finished and says so.
func TestBenchLocalInterrupted(t *testing.T) {
	stop := make(chan struct{})
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"bench", "local", "--duration", "1m", "-o", "json"}, &out, &errOut, stop) }()
	// The first progress line (after a second) shows round trips done.
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "bench: fetch-add, 1 in flight: ") },
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
	require.NotNil(t, r.FetchAddLatency)
	require.Nil(t, r.WriteBandwidth)
	require.Equal(t, r.FetchAdds, r.CounterAdded)
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
// (xdpfab attached on both ends).
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

			code, stdout, stderr := xdpfab("-n", a.Name, "bench", "run", "--peer", target, "--addr", v.AddrA.Addr().String(),
				"--transport", transport, "--duration", "600ms")
			require.Equal(t, exitOK, code, stderr)
			for _, want := range []string{"xdpfab bench: " + v.AddrA.Addr().String() + ":", "-> " + target,
				"transport " + transport, "fetch-add uint64, 1 in flight", "round trip p50 ",
				"send 8 B, 64 in flight", "RMA write 4 KiB, 64 in flight", "as expected"} {
				require.Contains(t, stdout, want)
			}

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
			require.Contains(t, srvOut.String(), fmt.Sprintf("counter %d", r.Counter))
		})
	}
}
