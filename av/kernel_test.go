package av

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// kernelEntries reads a kernel AV map back: an av_map's tables, or a
// named AV's hash map (whose records, pad != 0, it leaves out).
func kernelEntries(t testing.TB, m *ebpf.Map) map[bpf.XdpfabAvKey]bpf.XdpfabAvValue {
	t.Helper()
	if m.Type() == ebpf.HashOfMaps {
		out, err := KernelEntries(m)
		require.NoError(t, err)
		return out
	}
	out := map[bpf.XdpfabAvKey]bpf.XdpfabAvValue{}
	var k bpf.XdpfabAvKey
	var v bpf.XdpfabAvValue
	it := m.Iterate()
	for it.Next(&k, &v) {
		if k.Pad == 0 {
			out[k] = v
		}
	}
	require.NoError(t, it.Err())
	return out
}

// TestKernelMapReadBack inserts and removes through an AV with its own
// kernel map and reads the map back after each step.
func TestKernelMapReadBack(t *testing.T) {
	testenv.RequirePriv(t)
	for _, typ := range []Type{TypeMap, TypeTable} {
		a, err := Open(Attr{Type: typ, Flags: fi.SYMMETRIC | fi.AV_USER_ID}, nil)
		require.NoError(t, err)
		m := a.KernelMap()
		require.NotNil(t, m)

		out := fiAddrs(10000)
		n, err := a.InsertAddrPort(addrs(10000), out, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 10000, n)
		requireInStep(t, a, kernelEntries(t, m))

		require.NoError(t, a.Remove(out[100:1100], 0))
		requireInStep(t, a, kernelEntries(t, m))
		tm := a.mirror.(*TableMirror)
		require.True(t, tm.t.Compact(), "IPv4 peers only: a compact table")

		v6 := []netip.AddrPort{ap("[fd00::1]:7471"), ap("[fe80::2]:1")}
		for i := range 3 { // FI_MORE batches, written by the last call
			_, err = a.InsertAddrPort(v6[:1+i/2], fiAddrs(2), fi.MORE, nil)
			require.NoError(t, err)
		}
		require.True(t, tm.t.Compact(), "FI_MORE: not written yet")
		sym := fiAddrs(5000)
		_, err = a.InsertSym("10.60.0.1", 50, "4000", 100, sym, 0, nil)
		require.NoError(t, err)
		require.False(t, tm.t.Compact(), "an IPv6 peer: rebuilt with 32-byte slots")
		require.NoError(t, a.SetUserID(out[5], 1234, 0))
		got := kernelEntries(t, m)
		requireInStep(t, a, got)
		require.Equal(t, uint32(entryFlagUserIDSet), got[kernelKey(a.ID(), endpoint{ip: addrs(6)[5].Addr().As16(), port: 7471})].Flags)
		k := kernelKey(a.ID(), endpoint{ip: netip.MustParseAddr("fd00::1").As16(), port: 7471})
		require.Equal(t, uint16(7471), uint16(k.Port>>8|k.Port<<8), "port in network order")

		require.NoError(t, a.Close())
	}
}

// TestSharedKernelMap: AVs sharing one kernel map key their entries apart
// by av_id; closing one takes only its own entries out. The XDP program
// loads with that map as its av_map.
func TestSharedKernelMap(t *testing.T) {
	testenv.RequirePriv(t)
	m, err := NewKernelMap(0) // the program's own size: a replacement map must match its spec
	require.NoError(t, err)
	defer m.Close()
	a, err := Open(Attr{}, nil, WithKernelMap(m))
	require.NoError(t, err)
	b, err := Open(Attr{Type: TypeMap}, nil, WithKernelMap(m))
	require.NoError(t, err)
	require.NotEqual(t, a.ID(), b.ID())
	_, err = a.InsertAddrPort(addrs(300), nil, 0, nil)
	require.NoError(t, err)
	_, err = b.InsertAddrPort(addrs(200), fiAddrs(200), 0, nil)
	require.NoError(t, err)
	require.Len(t, kernelEntries(t, m), 500)
	requireInStep(t, a, kernelEntries(t, m))
	requireInStep(t, b, kernelEntries(t, m))
	require.NoError(t, a.Close())
	left := kernelEntries(t, m)
	require.Len(t, left, 200)
	requireInStep(t, b, left)

	var objs bpf.XdpfabObjects
	require.NoError(t, bpf.LoadXdpfabObjects(&objs, &ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{bpf.XdpfabMapAvMap: b.KernelMap()},
	}))
	defer objs.Close()
	want, err := m.Info()
	require.NoError(t, err)
	got, err := objs.AvMap.Info()
	require.NoError(t, err)
	wantID, _ := want.ID()
	gotID, _ := got.ID()
	require.Equal(t, wantID, gotID, "the program reads the AV's map")
	require.NoError(t, b.Close())
	require.Empty(t, kernelEntries(t, m))

	_, err = NewKernelMirror(objs.MrMap)
	require.ErrorIs(t, err, fi.EINVAL, "not an AV map")
}

// Child process modes of TestNamedAV, selected by environment.
const (
	childEnv = "XDPFAB_AV_TEST_CHILD"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if err := namedChild(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(runTidy(m.Run))
}

// namedChild opens the named AV of XDPFAB_AV_NAME, checks that the
// peer=handle pairs of XDPFAB_AV_EXPECT (and only those of XDPFAB_AV_ABSENT
// absent) resolve in both directions, inserts XDPFAB_AV_INSERT and prints
// "peer handle" for each.
func namedChild(mode string) error {
	typ, _ := strconv.Atoi(os.Getenv("XDPFAB_AV_TYPE"))
	mapAddr, _ := strconv.ParseUint(os.Getenv("XDPFAB_AV_MAPADDR"), 0, 64)
	attr := Attr{Type: Type(typ), Name: os.Getenv("XDPFAB_AV_NAME"), MapAddr: mapAddr}
	if mode == "read" {
		attr.Flags |= fi.READ
	}
	a, err := Open(attr, nil)
	if err != nil {
		return err
	}
	defer a.Close()
	for _, pair := range strings.Fields(os.Getenv("XDPFAB_AV_EXPECT")) {
		peer, hs, _ := strings.Cut(pair, "=")
		h, _ := strconv.ParseUint(hs, 0, 64)
		if got := a.FIAddr(netip.MustParseAddrPort(peer)); got != fi.Addr(h) {
			return fmt.Errorf("FIAddr(%s) = %v, want %v", peer, got, fi.Addr(h))
		}
		if got, ok := a.AddrPort(fi.Addr(h)); !ok || got.String() != peer {
			return fmt.Errorf("AddrPort(%#x) = %v %v, want %s", h, got, ok, peer)
		}
	}
	for _, pair := range strings.Fields(os.Getenv("XDPFAB_AV_EXPECT")) {
		_, hs, _ := strings.Cut(pair, "=")
		h, _ := strconv.ParseUint(hs, 0, 64)
		if got := a.arraySlot(uint32(h)); got != fi.Addr(h) {
			return fmt.Errorf("fi_addr array slot %d = %#x, want %#x", uint32(h), uint64(got), h)
		}
	}
	for _, peer := range strings.Fields(os.Getenv("XDPFAB_AV_ABSENT")) {
		if got := a.FIAddr(netip.MustParseAddrPort(peer)); got != fi.AddrNotAvail {
			return fmt.Errorf("FIAddr(%s) = %v after remove", peer, got)
		}
	}
	for _, is := range strings.Fields(os.Getenv("XDPFAB_AV_ABSENT_SLOTS")) {
		idx, _ := strconv.ParseUint(is, 0, 32)
		if got := a.arraySlot(uint32(idx)); got != fi.AddrNotAvail {
			return fmt.Errorf("fi_addr array slot %d = %#x after remove", idx, uint64(got))
		}
	}
	var ins []netip.AddrPort
	for _, p := range strings.Fields(os.Getenv("XDPFAB_AV_INSERT")) {
		ins = append(ins, netip.MustParseAddrPort(p))
	}
	if len(ins) == 0 {
		return nil
	}
	out := fiAddrs(len(ins))
	n, err := a.InsertAddrPort(ins, out, 0, nil)
	if err != nil {
		return err
	}
	if n != len(ins) {
		return fmt.Errorf("inserted %d of %d", n, len(ins))
	}
	for i, p := range ins {
		fmt.Printf("%s %d\n", p, uint64(out[i]))
	}
	return nil
}

// runChild runs the test binary in child mode and returns its
// "peer handle" lines.
func runChild(t *testing.T, mode string, env ...string) map[netip.AddrPort]fi.Addr {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "child: %s", stderr.String())
	got := map[netip.AddrPort]fi.Addr{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 {
			h, err := strconv.ParseUint(f[1], 10, 64)
			require.NoError(t, err)
			got[netip.MustParseAddrPort(f[0])] = fi.Addr(h)
		}
	}
	return got
}

func expectEnv(peers []netip.AddrPort, handles []fi.Addr) string {
	var b strings.Builder
	for i, p := range peers {
		fmt.Fprintf(&b, "%s=%d ", p, uint64(handles[i]))
	}
	return "XDPFAB_AV_EXPECT=" + b.String()
}

// TestNamedAV shares a named AV between this process and child processes:
// they see the same entries with the same handles, and each other's
// inserts and removes; FI_READ opens it read-only.
func TestNamedAV(t *testing.T) {
	testenv.RequirePriv(t)
	for _, typ := range []Type{TypeMap, TypeTable} {
		name := fmt.Sprintf("avtest-%d-%v", os.Getpid(), typ)
		t.Cleanup(func() { Unlink(name) })

		_, err := Open(Attr{Name: name, Flags: fi.READ}, nil)
		require.ErrorIs(t, err, fi.ENOENT, "FI_READ of an AV that does not exist")

		a, err := Open(Attr{Type: typ, Name: name}, nil)
		require.NoError(t, err)
		mapAddr := a.Attr().MapAddr
		require.Equal(t, uint64(uintptr(a.shared.arr.base)), mapAddr, "map_addr is the fi_addr array")
		_, err = os.Stat(PinPath(name))
		require.NoError(t, err)
		_, err = os.Stat(AddrArrayPath(name))
		require.NoError(t, err)

		mine := []netip.AddrPort{ap("10.0.0.1:1"), ap("10.0.0.2:1"), ap("[fd00::3]:1")}
		out := fiAddrs(3)
		_, err = a.InsertAddrPort(mine, out, 0, nil)
		require.NoError(t, err)
		for _, h := range out {
			require.Equal(t, h, a.arraySlot(uint32(h)), "slot of index %d", uint32(h))
		}

		env := []string{"XDPFAB_AV_NAME=" + name, fmt.Sprintf("XDPFAB_AV_MAPADDR=%d", mapAddr),
			fmt.Sprintf("XDPFAB_AV_TYPE=%d", int(typ))}
		theirs := runChild(t, "write", append(env, expectEnv(mine, out),
			"XDPFAB_AV_INSERT=10.0.1.1:1 10.0.1.2:1")...)
		require.Len(t, theirs, 2)
		for peer, h := range theirs {
			require.Equal(t, h, a.FIAddr(peer), "the child's insert, seen here with its handle")
			require.Equal(t, h, a.arraySlot(uint32(h)), "the child's insert, in the fi_addr array here")
			got, ok := a.AddrPort(h)
			require.True(t, ok)
			require.Equal(t, peer, got)
		}
		if typ == TypeTable {
			require.Equal(t, fi.Addr(3), theirs[ap("10.0.1.1:1")], "indices continue across processes")
		}
		require.Equal(t, 5, a.Count())

		require.NoError(t, a.Remove(out[:1], 0))
		require.Equal(t, fi.AddrNotAvail, a.arraySlot(uint32(out[0])), "a removed index's slot")
		absentSlot := fmt.Sprintf("XDPFAB_AV_ABSENT_SLOTS=%d", uint32(out[0]))
		theirs = runChild(t, "write", append(env, expectEnv(mine[1:], out[1:]),
			"XDPFAB_AV_ABSENT="+mine[0].String(), absentSlot, "XDPFAB_AV_INSERT=10.0.2.1:1")...)
		if typ == TypeTable {
			require.Equal(t, fi.Addr(0), theirs[ap("10.0.2.1:1")], "lowest free index, freed by another process")
		} else {
			require.NotEqual(t, out[0], theirs[ap("10.0.2.1:1")], "MAP handles are not reused")
		}
		runChild(t, "read", append(env, expectEnv(mine[1:], out[1:]), "XDPFAB_AV_ABSENT="+mine[0].String())...)

		// Read-only: lookups yes, changes no.
		ro, err := Open(Attr{Name: name, Flags: fi.READ}, nil)
		require.NoError(t, err)
		require.Equal(t, typ, ro.Attr().Type, "FI_AV_UNSPEC takes the shared AV's type")
		require.Equal(t, out[1], ro.FIAddr(mine[1]))
		_, err = ro.InsertAddrPort(addrs(1), fiAddrs(1), 0, nil)
		require.ErrorIs(t, err, fi.EACCES)
		require.ErrorIs(t, ro.Remove(out[1:2], 0), fi.EACCES)
		require.NoError(t, ro.Close())

		other := TypeTable + TypeMap - typ
		_, err = Open(Attr{Type: other, Name: name}, nil)
		require.ErrorIs(t, err, fi.EINVAL, "type differs")
		other2, err := Open(Attr{Name: name, MapAddr: mapAddr + 4096}, nil)
		require.NoError(t, err, "a map_addr given is ignored")
		require.Equal(t, out[1], other2.FIAddr(mine[1]))
		require.NotEqual(t, mapAddr, other2.Attr().MapAddr, "each opener maps the array")
		require.NoError(t, other2.Close())
		_, err = Open(Attr{Name: name, RxCtxBits: 3}, nil)
		require.ErrorIs(t, err, fi.EINVAL, "rx_ctx_bits differ")

		requireInStep(t, a, kernelEntries(t, a.KernelMap()))
		require.NoError(t, a.Close())
		_, err = os.Stat(PinPath(name))
		require.NoError(t, err, "Close keeps the named AV")
		require.NoError(t, Unlink(name))
		_, err = os.Stat(AddrArrayPath(name))
		require.ErrorIs(t, err, os.ErrNotExist, "Unlink removes the fi_addr array")
		require.ErrorIs(t, Unlink(name), fi.ENOENT)
	}
	_, err := Open(Attr{Name: "a/b"}, nil)
	require.ErrorIs(t, err, fi.EINVAL)
}

// TestProcessKernelMap: unnamed AVs share the process's kernel map by
// default and take only their own entries out on Close.
func TestProcessKernelMap(t *testing.T) {
	testenv.RequirePriv(t)
	othersOpen := ProcessKernelMap() != nil // AVs of other tests, if any
	a, err := Open(Attr{}, nil)
	require.NoError(t, err)
	b, err := Open(Attr{Type: TypeMap}, nil)
	require.NoError(t, err)
	m := ProcessKernelMap()
	require.NotNil(t, m)
	require.Same(t, m, a.KernelMap())
	require.Same(t, m, b.KernelMap())
	_, err = a.InsertAddrPort(addrs(10), nil, 0, nil)
	require.NoError(t, err)
	_, err = b.InsertAddrPort(addrs(5), fiAddrs(5), 0, nil)
	require.NoError(t, err)
	requireInStep(t, a, kernelEntries(t, m))
	requireInStep(t, b, kernelEntries(t, m))
	require.NoError(t, a.Close())
	requireInStep(t, b, kernelEntries(t, m))
	for k := range kernelEntries(t, m) {
		require.NotEqual(t, a.ID(), k.AvId, "a closed AV leaves no entry")
	}
	require.NoError(t, b.Close())
	require.Same(t, m, ProcessKernelMap(), "kept for the life of the process")
	if !othersOpen {
		// The next AV takes a closed AV's table, emptied, with its id.
		c, err := Open(Attr{}, nil)
		require.NoError(t, err)
		require.Contains(t, []uint32{a.ID(), b.ID()}, c.ID())
		requireInStep(t, c, kernelEntries(t, m)) // nothing of a's or b's
		_, err = c.InsertAddrPort(addrs(3), nil, 0, nil)
		require.NoError(t, err)
		requireInStep(t, c, kernelEntries(t, m))
		require.NoError(t, c.Close())
	}
}

// TestNamedAVAsync: an FI_EVENT opener of a named AV inserts under the
// same cross-process protocol; another opener sees the entries.
func TestNamedAVAsync(t *testing.T) {
	testenv.RequirePriv(t)
	name := fmt.Sprintf("avtest-async-%d", os.Getpid())
	t.Cleanup(func() { Unlink(name) })
	a, err := Open(Attr{Type: TypeTable, Name: name}, nil)
	require.NoError(t, err)
	defer a.Close()
	b, err := Open(Attr{Name: name, Flags: fi.EVENT}, nil)
	require.NoError(t, err)
	defer b.Close()
	require.Equal(t, TypeTable, b.Attr().Type)
	q := openEQ(t)
	require.NoError(t, b.Bind(q, 0))
	_, err = a.InsertAddrPort(addrs(2), nil, 0, nil)
	require.NoError(t, err)
	out := fiAddrs(3)
	peers := []netip.AddrPort{ap("10.8.0.1:1"), ap("10.8.0.2:1"), ap("10.8.0.1:1")}
	_, err = b.InsertAddrPort(peers, out, 0, "b")
	require.NoError(t, err)
	_, ee := readEvent(t, q)
	require.NotNil(t, ee)
	require.Equal(t, fi.EADDRINUSE, ee.Err)
	e, ee := readEvent(t, q)
	require.Nil(t, ee)
	require.Equal(t, uint64(2), e.Data)
	require.Equal(t, []fi.Addr{2, 3, fi.AddrNotAvail}, out)
	require.Equal(t, fi.Addr(3), a.FIAddr(peers[1]))
	require.Equal(t, 4, a.Count())
}
