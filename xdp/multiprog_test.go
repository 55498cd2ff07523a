package xdp_test

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/datapath/udpframe"
	"github.com/xdpfab/xdpfab/datapath/xsk"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/xdp"
)

// nsTool runs an xdp-tools command in ns with nsenter, which switches the
// network namespace only: ip netns exec would remount /sys and hide the
// bpffs libxdp keeps its state in.
func nsTool(t *testing.T, ns *testenv.Netns, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + ns.Name}, args...)...).CombinedOutput()
	return string(out), err
}

// requireXDPTools skips without Debian's xdp-tools, unless privileged
// tests are required (CI installs it).
func requireXDPTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"xdp-filter", "xdp-loader", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(testenv.RequirePrivEnv) == "1" {
				t.Fatalf("%s not installed (apt-get install xdp-tools)", tool)
			}
			t.Skipf("%s not installed (apt-get install xdp-tools)", tool)
		}
	}
	// The state directories the tools create, once empty again (rmdir
	// leaves a directory someone else still uses alone).
	t.Cleanup(func() {
		for _, d := range []string{"/sys/fs/bpf/xdp-filter/programs", "/sys/fs/bpf/xdp-filter", "/sys/fs/bpf/xdp"} {
			_ = unix.Rmdir(d)
		}
	})
}

// freplaceRefused reports why the kernel does not let a libxdp dispatcher
// run here ("" if it does): a trivial freplace extension of libxdp's own
// dispatcher must load.
func freplaceRefused(t *testing.T) string {
	t.Helper()
	obj := ""
	for _, d := range []string{"/usr/lib/x86_64-linux-gnu/bpf", "/usr/lib/aarch64-linux-gnu/bpf", "/usr/lib/bpf", "/usr/local/lib/bpf"} {
		if _, err := os.Stat(filepath.Join(d, "xdp-dispatcher.o")); err == nil {
			obj = filepath.Join(d, "xdp-dispatcher.o")
		}
	}
	require.NotEmpty(t, obj, "libxdp's xdp-dispatcher.o")
	spec, err := ebpf.LoadCollectionSpec(obj)
	require.NoError(t, err)
	for name := range spec.Programs {
		if name != "xdp_dispatcher" {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollection(spec)
	require.NoError(t, err)
	defer coll.Close()
	ext, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Extension, AttachTarget: coll.Programs["xdp_dispatcher"],
		AttachTo: "prog0", License: "GPL", Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		return "the kernel refuses freplace (BPF_PROG_TYPE_EXT) programs (" + err.Error() + "): libxdp falls back to single programs here, and so no dispatcher can run"
	}
	ext.Close()
	return ""
}

// TestLoneProgramRefused: a program loaded alone (xdp-filter where libxdp
// cannot build a dispatcher, or any other) is named, with its id and the
// ways forward, and left alone; an xdpfab attached alone is left alone by
// libxdp in turn.
func TestLoneProgramRefused(t *testing.T) {
	requireXDPTools(t)
	p := newPair(t)
	if freplaceRefused(t) == "" {
		// libxdp would build a dispatcher: load a lone program by hand.
		p.netlinkAttach(t, trivialXDP(t, "lone_prog"), true)
	} else {
		out, err := nsTool(t, p.b, "xdp-filter", "load", "-m", "skb", p.v.NameB)
		require.NoError(t, err, out)
		t.Cleanup(func() { _, _ = nsTool(t, p.b, "xdp-filter", "unload", p.v.NameB) })
	}
	other := p.linkXDP(t).ProgId
	for _, multi := range []bool{false, true} {
		_, err := p.attach(xdp.Options{Mode: xdp.ModeGeneric, MultiProg: multi})
		require.ErrorIs(t, err, fi.EBUSY)
		require.Contains(t, err.Error(), "(id ")
		require.Contains(t, err.Error(), "detach it first")
		require.Contains(t, err.Error(), "--multiprog")
		require.Equal(t, other, p.linkXDP(t).ProgId, "the other program stays")
		require.NoDirExists(t, p.pinDir(t))
	}
	if freplaceRefused(t) == "" {
		return
	}
	out, err := nsTool(t, p.b, "xdp-filter", "unload", p.v.NameB)
	require.NoError(t, err, out)
	// xdpfab alone: xdp-filter cannot replace it.
	a := p.mustAttach(t, xdp.Options{Mode: xdp.ModeGeneric})
	id := progID(t, a.Program)
	out, err = nsTool(t, p.b, "xdp-filter", "load", "-m", "skb", p.v.NameB)
	require.Error(t, err, out)
	require.Equal(t, id, p.linkXDP(t).ProgId, "xdp-filter left xdpfab alone")
}

// TestBesideXDPFilter: xdpfab and xdp-filter on one veth end through
// libxdp's dispatcher, whichever comes first. xdp-loader status lists
// both; xdp-filter drops its port, xdpfab redirects its own to its
// AF_XDP socket; detaching xdpfab leaves xdp-filter running, and the
// reverse.
func TestBesideXDPFilter(t *testing.T) {
	requireXDPTools(t)
	testenv.RequirePriv(t)
	if why := freplaceRefused(t); why != "" {
		t.Skip(why)
	}
	for _, first := range []string{"xdp-filter", "xdpfab"} {
		t.Run(first+"-first", func(t *testing.T) {
			const fabPort, deniedPort, peerPort, avID = 4791, 9009, 6002, 4
			p := newPair(t)
			t.Cleanup(func() { _, _ = nsTool(t, p.b, "xdp-filter", "unload", p.v.NameB) })
			loadFilter := func() {
				out, err := nsTool(t, p.b, "xdp-filter", "load", "-m", "skb", p.v.NameB, "-f", "udp")
				require.NoError(t, err, out)
				out, err = nsTool(t, p.b, "xdp-filter", "port", "-p", "udp", "-m", "dst", strconv.Itoa(deniedPort))
				require.NoError(t, err, out)
			}
			opts := xdp.Options{Mode: xdp.ModeGeneric, MultiProg: true, Ports: map[uint16]xdp.PortConfig{fabPort: {AVID: avID}}}
			var a *xdp.Attachment
			if first == "xdp-filter" {
				loadFilter()
				opts.MultiProg = false // joining an existing dispatcher is implied
				a = p.mustAttach(t, opts)
			} else {
				a = p.mustAttach(t, opts)
				loadFilter()
			}
			status, err := nsTool(t, p.b, "xdp-loader", "status", p.v.NameB)
			require.NoError(t, err, status)
			require.Contains(t, status, "xdp_dispatcher")
			require.Contains(t, status, "xdpfab_xdp")
			require.Contains(t, status, "xdpfilt_")

			// Our pins and status agree with libxdp's view.
			var st *xdp.Status
			require.NoError(t, p.b.Do(func() error {
				a2, err := xdp.Open(p.v.NameB)
				if err != nil {
					return err
				}
				defer a2.Close()
				st, err = a2.Status()
				return err
			}))
			require.NotNil(t, st.Dispatcher)
			require.Len(t, st.Dispatcher.Programs, 2)
			require.Equal(t, progID(t, a.Program), st.Dispatcher.Programs[st.Dispatcher.Slot].ProgramID)
			var ok bool
			require.NoError(t, p.b.Do(func() (err error) { ok, err = xdp.Attached(p.v.NameB); return err }))
			require.True(t, ok, "Attached sees xdpfab in the dispatcher")

			// xdp-filter drops its port.
			addrA, addrB := p.v.AddrA.Addr(), p.v.AddrB.Addr()
			tx := udpListen(t, p.a, netip.AddrPortFrom(addrA, peerPort))
			rxDenied := udpListen(t, p.b, netip.AddrPortFrom(addrB, deniedPort))
			require.False(t, receives(t, tx, rxDenied, netip.AddrPortFrom(addrB, deniedPort), "denied", 3))
			// Other UDP passes both.
			rxOther := udpListen(t, p.b, netip.AddrPortFrom(addrB, 5556))
			require.True(t, receives(t, tx, rxOther, netip.AddrPortFrom(addrB, 5556), "other", 10))
			// xdpfab's port reaches its AF_XDP socket, metadata in front.
			require.NoError(t, a.AVMap.Put(bpf.XdpfabAvKey{AvId: avID, Port: htons(peerPort), Addr: addrA.As16()},
				bpf.XdpfabAvValue{FiAddr: 9}))
			m := xskReceive(t, p, a, tx, fabPort, "to xdpfab beside xdp-filter")
			require.Equal(t, uint64(9), m.FiAddr)

			// Detach xdpfab: xdp-filter keeps running alone in the dispatcher.
			require.NoError(t, p.detach())
			status, err = nsTool(t, p.b, "xdp-loader", "status", p.v.NameB)
			require.NoError(t, err, status)
			require.NotContains(t, status, "xdpfab_xdp")
			require.Contains(t, status, "xdpfilt_")
			require.False(t, receives(t, tx, rxDenied, netip.AddrPortFrom(addrB, deniedPort), "denied after", 3))
			require.NoDirExists(t, p.pinDir(t))
		})
	}
}

// xskReceive binds an AF_XDP socket to B's queue 0, sends msg from tx to
// port until the socket gets it, and returns the packet's metadata.
func xskReceive(t *testing.T, p *pair, a *xdp.Attachment, tx *net.UDPConn, port uint16, msg string) bpf.Meta {
	t.Helper()
	var sock *xsk.Socket
	require.NoError(t, p.b.Do(func() (err error) {
		sock, err = xsk.Open(p.v.IndexB, 0, xsk.Options{NumFrames: 64, RingSize: 64})
		return err
	}))
	defer sock.Close()
	require.NoError(t, a.SetXSK(0, sock.FD()))
	defer func() { _ = a.DeleteXSK(0) }()
	descs := make([]xsk.Desc, 16)
	var parsed udpframe.Parsed
	dst := netip.AddrPortFrom(p.v.AddrB.Addr(), port)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		_, err := tx.WriteToUDPAddrPort([]byte(msg), dst)
		require.NoError(t, err)
		ready, err := sock.Poll(100)
		require.NoError(t, err)
		if !ready {
			continue
		}
		n := sock.Receive(descs)
		for _, d := range descs[:n] {
			f := sock.Frame(d)
			if udpframe.Parse(f, &parsed) != nil || parsed.Dst.Port() != port ||
				string(f[parsed.PayloadOffset:parsed.PayloadOffset+parsed.PayloadLen]) != msg {
				continue
			}
			m, ok := bpf.ParseMeta(sock.Meta(d, bpf.MetaLen))
			sock.Release(descs[:n])
			require.True(t, ok, "xdpfab's metadata reached the socket through the dispatcher")
			return m
		}
		sock.Release(descs[:n])
	}
	t.Fatalf("%q never reached the AF_XDP socket", msg)
	return bpf.Meta{}
}
