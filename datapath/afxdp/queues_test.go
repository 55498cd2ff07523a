package afxdp_test

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// holderEnv makes the test binary a child that holds an interface's
// AF_XDP queues (NETNS:IFACE:ADDR) until its stdin closes.
const holderEnv = "XDPFAB_TEST_QUEUE_HOLDER"

func queueHolder(spec string) {
	fail := func(err error) {
		fmt.Println("child error:", err)
		os.Exit(1)
	}
	f := strings.Split(spec, ":")
	runtime.LockOSThread() // for good: this goroutine stays in the namespace
	h, err := netns.GetFromName(f[0])
	if err != nil {
		fail(err)
	}
	if err := netns.Set(h); err != nil {
		fail(err)
	}
	tr, err := afxdp.Open(afxdp.Options{Iface: f[1], Local: netip.AddrPortFrom(netip.MustParseAddr(f[2]), testPort+1)})
	if err != nil {
		fail(err)
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	tr.Close()
	os.Exit(0)
}

// TestQueueClaim: a process whose interface's queues another live process
// holds gets EBUSY at once (its endpoints take the kernel socket without
// waiting), and one that opens right after the holder closed or exited
// waits for the kernel to release the queues and gets them.
func TestQueueClaim(t *testing.T) {
	if spec := os.Getenv(holderEnv); spec != "" {
		queueHolder(spec)
	}
	testenv.RequirePriv(t)
	a, b := testenv.NewNetns(t), testenv.NewNetns(t)
	v := testenv.NewVeth(t, a, b, testenv.VethOptions{})
	attachBoth(t, v, xdp.ModeNative)
	open := func(port uint16) (*afxdp.Transport, error) {
		var tr *afxdp.Transport
		err := a.Do(func() (err error) {
			tr, err = afxdp.Open(afxdp.Options{Iface: v.NameA, Local: netip.AddrPortFrom(v.AddrA.Addr(), port)})
			return err
		})
		return tr, err
	}

	// Closed and opened again at once, in this process.
	tr, err := open(testPort)
	require.NoError(t, err)
	tr.Close()
	start := time.Now()
	tr, err = open(testPort)
	require.NoError(t, err, "reopen right after close")
	t.Logf("reopened after %v", time.Since(start))
	tr.Close()

	// Held by a live process.
	child := testenv.StartChild(t, "TestQueueClaim", holderEnv+"="+a.Name+":"+v.NameA+":"+v.AddrA.Addr().String())
	cmd, stdin := child.Cmd, child.Stdin
	line, err := bufio.NewReader(child.Stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	start = time.Now()
	_, err = open(testPort)
	require.True(t, errors.Is(err, unix.EBUSY), "open while another process holds the queues: %v", err)
	require.Less(t, time.Since(start), time.Second, "EBUSY should come at once, not after a wait")

	// The holder exits: its claim goes with it, and the queues come free.
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
	start = time.Now()
	tr, err = open(testPort)
	require.NoError(t, err, "open after the holder exited")
	t.Logf("opened %v after the holder exited", time.Since(start))
	tr.Close()
}
