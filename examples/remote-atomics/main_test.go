package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-role", "server", "-addr", "10.0.0.1"},
		{"-role", "both", "-addr", "10.0.0.1", "-dir", "/tmp"},
		{"-role", "client", "-addr", "nowhere", "-dir", "/tmp"},
		{"-role", "client", "-addr", "10.0.0.1", "-dir", "/tmp", "-n", "0"},
		{"-bogus"},
	} {
		require.Error(t, run(args, &bytes.Buffer{}), "args %q", args)
	}
}

// TestTwoNamespaces runs the server role in one network namespace and the
// client role in another, joined by veth, first on the kernel UDP socket
// (nothing attached: TransportAuto falls back), then on AF_XDP with
// xdpfab's program attached on both ends, and checks what they print.
func TestTwoNamespaces(t *testing.T) {
	for _, attach := range []bool{false, true} {
		name := map[bool]string{false: "udp", true: "xdp"}[attach]
		t.Run(name, func(t *testing.T) {
			testenv.RequirePriv(t)
			cli, srv := testenv.NewNetns(t), testenv.NewNetns(t)
			v := testenv.NewVeth(t, cli, srv, testenv.VethOptions{})
			transport := "kernel UDP socket"
			if attach {
				transport = "AF_XDP"
				for _, end := range []struct {
					ns    *testenv.Netns
					iface string
				}{{cli, v.NameA}, {srv, v.NameB}} {
					require.NoError(t, end.ns.Do(func() error {
						a, err := xdp.Attach(end.iface, xdp.Options{Mode: xdp.ModeGeneric})
						if err != nil {
							return err
						}
						return a.Close()
					}))
					t.Cleanup(func() { require.NoError(t, end.ns.Do(func() error { return xdp.Detach(end.iface) })) })
				}
			}

			const n = 500
			dir := t.TempDir()
			srvAddr := v.AddrB.Addr().String() + ":7471"
			var srvOut, cliOut bytes.Buffer
			srvDone := make(chan error, 1)
			go func() {
				srvDone <- srv.Do(func() error {
					return run([]string{"-role", "server", "-addr", srvAddr, "-dir", dir, "-timeout", "20s"}, &srvOut)
				})
			}()
			cliErr := cli.Do(func() error {
				return run([]string{"-role", "client", "-addr", v.AddrA.Addr().String(), "-dir", dir,
					"-n", fmt.Sprint(n), "-timeout", "20s"}, &cliOut)
			})
			srvErr := <-srvDone
			if cliErr != nil || srvErr != nil {
				logCounters(t, cli, v.NameA)
				logCounters(t, srv, v.NameB)
			}
			require.NoError(t, cliErr, "client:\n%s\nserver:\n%s", &cliOut, &srvOut)
			require.NoError(t, srvErr, "server:\n%s", &srvOut)

			board := fmt.Sprintf("counter=%d lock=0 min=-3.5 max=23.75", 2*n)
			for _, want := range []string{
				"server: endpoint " + srvAddr + " (transport " + transport + "), region key 0xb0a2d",
				"server: client is at " + v.AddrA.Addr().String() + ":",
				`server: client says "done"; board: ` + board,
			} {
				require.Contains(t, srvOut.String(), want)
			}
			if attach {
				// The server's XDP program handed the client's requests to
				// the AF_XDP socket: at least one datagram per fetch-add of
				// the one-in-flight phase (pipelined ops may share one).
				require.NoError(t, srv.Do(func() error {
					a, err := xdp.Open(v.NameB)
					if err != nil {
						return err
					}
					defer a.Close()
					c, err := a.Counters()
					if err != nil {
						return err
					}
					require.GreaterOrEqual(t, c[bpf.XdpfabXdpfabCounterCNT_REDIRECT_XSK], uint64(n))
					return nil
				}))
			}
			for _, want := range []string{
				"client: endpoint " + v.AddrA.Addr().String() + ":",
				"(transport " + transport + "), region key 0x3a11",
				"client: server is at " + srvAddr + ", key 0xb0a2d",
				fmt.Sprintf("client: fetch-add x%d, one in flight: ", n),
				fmt.Sprintf("returned 0..%d in order", n-1),
				fmt.Sprintf("client: add x%d, 64 in flight: ", n),
				fmt.Sprintf("counter now %d", 2*n),
				"take the lock (0 -> 42): lock was 0, swapped",
				"take it again (0 -> 7): lock was 42, not swapped",
				"release it (42 -> 0): lock was 42, swapped",
				"min -3.5, max 23.75",
				"client: the server wrote into our memory: " + board,
			} {
				require.Contains(t, cliOut.String(), want)
			}
		})
	}
}

// logCounters logs the non-zero XDP counters of iface, if xdpfab is
// attached there, to tell a failure's story.
func logCounters(t *testing.T, ns *testenv.Netns, iface string) {
	_ = ns.Do(func() error {
		a, err := xdp.Open(iface)
		if err != nil {
			return err
		}
		defer a.Close()
		c, err := a.Counters()
		if err != nil {
			return err
		}
		var nonzero []string
		for i, v := range c {
			if v != 0 {
				nonzero = append(nonzero, fmt.Sprintf("%s=%d", bpf.Counter(i).Name(), v))
			}
		}
		t.Logf("XDP counters on %s: %v", iface, nonzero)
		return nil
	})
}
