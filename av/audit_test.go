package av

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/bpffs"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestRemoveDespiteEarlierLostMoreInsert: a Remove whose flush of an
// unrelated FI_MORE insert fails still removes; the failure goes to the
// FI_MORE insert's slot.
func TestRemoveDespiteEarlierLostMoreInsert(t *testing.T) {
	for _, typ := range []Type{TypeTable, TypeMap} {
		a, f := openTest(t, Attr{Type: typ})
		x := fiAddrs(1)
		n, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.9:7000")}, x, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		f.limit = 1 // full: the next new key is refused
		y := fiAddrs(1)
		n, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:7000")}, y, fi.MORE, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n)

		require.NoError(t, a.Remove(x, 0), "%v", typ)
		_, ok := a.AddrPort(x[0])
		require.False(t, ok, "%v: removed address still in the AV", typ)
		require.Equal(t, fi.AddrNotAvail, y[0], "%v: the FI_MORE insert's slot", typ)
		require.Equal(t, 0, a.Count())
		require.Equal(t, 0, f.len())
		f.requireInStep(t, a)
	}
}

// TestSetUserIDDespiteEarlierLostMoreInsert: the same for SetUserID.
func TestSetUserIDDespiteEarlierLostMoreInsert(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeTable, Flags: fi.AV_USER_ID})
	x := fiAddrs(1)
	_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.9:7000")}, x, 0, nil)
	require.NoError(t, err)
	f.limit = 1
	y := fiAddrs(1)
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:7000")}, y, fi.MORE, nil)
	require.NoError(t, err)

	require.NoError(t, a.SetUserID(x[0], 77, 0))
	require.Equal(t, fi.Addr(77), a.SourceAddr(ap("10.0.0.9:7000")))
	v, ok := f.get(a.ID(), ap("10.0.0.9:7000"))
	require.True(t, ok)
	require.Equal(t, uint32(entryFlagUserIDSet), v.Flags)
	require.Equal(t, fi.AddrNotAvail, y[0])
	f.requireInStep(t, a)
}

// TestLostMoreHandleNotReused: a synchronous FI_MORE insert whose kernel
// write later fails gets FI_ADDR_NOTAVAIL and its FI_SYNC_ERR status in
// its slots, and the handle it returned names no other address until the
// application removes it.
func TestLostMoreHandleNotReused(t *testing.T) {
	for _, typ := range []Type{TypeTable, TypeMap} {
		a, f := openTest(t, Attr{Type: typ})
		_, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.99:7000")}, fiAddrs(1), 0, nil)
		require.NoError(t, err)
		outA, stA := fiAddrs(1), []int{-1}
		n, err := a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:7000")}, outA, fi.MORE|fi.SYNC_ERR, stA)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, []int{0}, stA)
		hA := outA[0]
		require.NotEqual(t, fi.AddrNotAvail, hA)

		f.limit = 1 // full: refuses every new key
		outB, stB := fiAddrs(1), []int{-1}
		n, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.2:7000")}, outB, fi.SYNC_ERR, stB)
		require.Equal(t, 0, n, "%v", typ)
		require.ErrorIs(t, err, fi.ENOSPC)
		var lost *LostError
		require.True(t, errors.As(err, &lost), "%v: %v", typ, err)
		require.Equal(t, []fi.Addr{hA}, lost.Handles)
		require.Equal(t, []fi.Addr{fi.AddrNotAvail}, outB)
		require.Equal(t, []int{int(fi.ECANCELED)}, stB, "B came after the refused A in the batch")
		// A's insert: its slots now say it failed.
		require.Equal(t, fi.AddrNotAvail, outA[0], "%v", typ)
		require.Equal(t, []int{int(fi.ENOSPC)}, stA, "%v", typ)

		f.limit = 0
		outC := fiAddrs(1)
		n, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.3:7000")}, outC, 0, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.NotEqual(t, uint32(hA), uint32(outC[0]), "%v: A's index handed to C while A's handle may be held", typ)
		_, ok := a.AddrPort(hA)
		require.False(t, ok, "%v", typ)
		_, err = a.Lookup(hA, nil)
		require.ErrorIs(t, err, fi.EINVAL)
		require.Equal(t, fi.AddrNotAvail, a.FIAddr(ap("10.0.0.1:7000")))
		require.Equal(t, 2, a.Count())
		f.requireInStep(t, a)

		// Removing the lost handle releases its index, once.
		require.NoError(t, a.Remove([]fi.Addr{hA}, 0))
		require.ErrorIs(t, a.Remove([]fi.Addr{hA}, 0), fi.EINVAL)
		require.Equal(t, 2, a.Count())
		if typ == TypeTable {
			outD := fiAddrs(1)
			_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.4:7000")}, outD, 0, nil)
			require.NoError(t, err)
			require.Equal(t, hA, outD[0], "lowest free index again")
		}
		f.requireInStep(t, a)
	}
}

// TestLostMoreRangeHeld: the same for members of an FI_SYMMETRIC range
// stored as arithmetic, refused part way through the batch.
func TestLostMoreRangeHeld(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeTable, Flags: fi.SYMMETRIC})
	out, st := fiAddrs(4), []int{-1, -1, -1, -1}
	n, err := a.InsertSym("10.1.0.1", 4, "7000", 1, out, fi.MORE|fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, []fi.Addr{0, 1, 2, 3}, out)
	f.limit = 2
	_, err = a.InsertAddrPort(nil, nil, 0, nil) // makes the pending writes
	var lost *LostError
	require.True(t, errors.As(err, &lost), "%v", err)
	require.Equal(t, []fi.Addr{2, 3}, lost.Handles)
	require.Equal(t, []fi.Addr{0, 1, fi.AddrNotAvail, fi.AddrNotAvail}, out)
	require.Equal(t, []int{0, 0, int(fi.ENOSPC), int(fi.ECANCELED)}, st)
	require.Equal(t, 2, a.Count())

	f.limit = 0
	e := fiAddrs(1)
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.2.0.1:7000")}, e, 0, nil)
	require.NoError(t, err)
	require.Equal(t, fi.Addr(4), e[0], "held indices 2 and 3 skipped")
	_, ok := a.AddrPort(2)
	require.False(t, ok)
	require.Equal(t, fi.AddrNotAvail, a.FIAddr(ap("10.1.0.3:7000")))
	f.requireInStep(t, a)

	require.NoError(t, a.Remove([]fi.Addr{3, 2}, 0))
	_, err = a.InsertAddrPort([]netip.AddrPort{ap("10.2.0.2:7000"), ap("10.2.0.3:7000")}, nil, 0, nil)
	require.NoError(t, err)
	got, ok := a.AddrPort(2)
	require.True(t, ok)
	require.Equal(t, ap("10.2.0.2:7000"), got)
	f.requireInStep(t, a)
}

// TestV4MappedInSockaddrIn6AV: an FI_SOCKADDR_IN6 AV takes sockaddr_in6
// addresses holding IPv4-mapped addresses, gives them back in that form,
// and keys them as the IPv4 packets of the peer are looked up.
func TestV4MappedInSockaddrIn6AV(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeTable}, WithAddrFormat(fi.FormatSockaddr6))
	mapped := sin6("[::ffff:10.0.0.1]:7000")
	out, st := fiAddrs(2), []int{-1, -1}
	n, err := a.Insert([][]byte{mapped, sin6("[fd00::1]:7000")}, out, fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []int{0, 0}, st)

	buf := make([]byte, 64)
	size, err := a.Lookup(out[0], buf)
	require.NoError(t, err)
	require.Equal(t, mapped, buf[:size])
	size, err = a.Straddr(mapped, buf)
	require.NoError(t, err)
	str := string(buf[:size])
	require.Equal(t, "fi_sockaddr_in6://[::ffff:10.0.0.1]:7000", str)

	// The peer sends IPv4: the datapath's key and lookups find it.
	_, ok := f.get(a.ID(), ap("10.0.0.1:7000"))
	require.True(t, ok)
	require.Equal(t, out[0], a.FIAddr(ap("10.0.0.1:7000")))
	require.Equal(t, out[0], a.FIAddr(ap("[::ffff:10.0.0.1]:7000")))
	v4 := netip.MustParseAddr("10.0.0.1").As16()
	require.Equal(t, out[0], a.FIAddr16(&v4, 7000))

	// Straddr's text is an address the AV takes (it is in the AV already).
	n, err = a.InsertSvc(str, "", fiAddrs(1), 0, nil)
	require.NoError(t, err)
	require.Equal(t, 0, n, "duplicate of the first address")
	for _, tc := range []struct {
		node, svc string
		ok        bool
	}{
		{"fi_sockaddr_in6://[::ffff:10.0.0.2]:7000", "", true},
		{"::ffff:10.0.0.3", "7000", true},
		{"fi_sockaddr_in://10.0.0.4:7000", "", false},
		{"10.0.0.5", "7000", false},
	} {
		o := fiAddrs(1)
		n, err := a.InsertSvc(tc.node, tc.svc, o, 0, nil)
		require.NoError(t, err)
		require.Equal(t, tc.ok, n == 1, "%q %q", tc.node, tc.svc)
	}
	o, st := fiAddrs(2), []int{-1, -1}
	n, err = a.InsertAddrPort([]netip.AddrPort{ap("[::ffff:10.0.0.6]:7000"), ap("10.0.0.7:7000")}, o, fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []int{0, int(fi.EINVAL)}, st, "plain IPv4 into FI_SOCKADDR_IN6")
	n, err = a.InsertSym("::ffff:10.0.1.1", 2, "7000", 1, nil, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	f.requireInStep(t, a)

	// FI_SOCKADDR_IN AVs are unchanged.
	b, _ := openTest(t, Attr{Type: TypeTable}, WithAddrFormat(fi.FormatSockaddr4))
	st = []int{-1, -1}
	n, err = b.Insert([][]byte{mapped, sin("10.0.0.1:7000")}, nil, fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []int{int(fi.EINVAL), 0}, st)
	size, err = b.Straddr(sin("10.0.0.1:7000"), buf)
	require.NoError(t, err)
	require.Equal(t, "fi_sockaddr_in://10.0.0.1:7000", string(buf[:size]))
	n, err = b.InsertSvc("::ffff:10.0.0.8", "7000", nil, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 0, n)
}

// TestIPv6IntoSockaddrInFailsAlone: an IPv6 address in a synchronous
// insert into an FI_SOCKADDR_IN AV fails alone, whatever the call.
func TestIPv6IntoSockaddrInFailsAlone(t *testing.T) {
	a, f := openTest(t, Attr{Type: TypeTable}, WithAddrFormat(fi.FormatSockaddr4))
	out, st := fiAddrs(3), []int{-1, -1, -1}
	n, err := a.Insert([][]byte{sin("10.0.0.1:1"), sin6("[fd00::1]:1"), sin("10.0.0.2:1")}, out, fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []int{0, int(fi.EINVAL), 0}, st)
	require.Equal(t, []fi.Addr{0, fi.AddrNotAvail, 1}, out)
	out, st = fiAddrs(2), []int{-1, -1}
	n, err = a.InsertAddrPort([]netip.AddrPort{ap("[fd00::2]:1"), ap("10.0.0.3:1")}, out, fi.SYNC_ERR, st)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []int{int(fi.EINVAL), 0}, st)
	require.Equal(t, []fi.Addr{fi.AddrNotAvail, 2}, out)
	f.requireInStep(t, a)
}

// TestInsertInvalidArguments: the flag checks and invalid combinations of
// fi_av(3), for every insert call; nothing is inserted.
func TestInsertInvalidArguments(t *testing.T) {
	plain, _ := openTest(t, Attr{Type: TypeTable})
	uid, _ := openTest(t, Attr{Type: TypeTable, Flags: fi.AV_USER_ID})
	keyed, _ := openTest(t, Attr{Type: TypeTable}, WithAVAuthKey())
	async, _ := openTest(t, Attr{Type: TypeTable, Flags: fi.EVENT})
	q, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	require.NoError(t, async.Bind(q, 0))
	t.Cleanup(func() { async.Close(); q.Close() })

	type insertFn func(a *AV, out []fi.Addr, flags fi.Flags, ctx any) (int, error)
	calls := map[string]insertFn{
		"Insert": func(a *AV, out []fi.Addr, flags fi.Flags, ctx any) (int, error) {
			return a.Insert([][]byte{sin("10.0.0.1:1")}, out, flags, ctx)
		},
		"InsertAddrPort": func(a *AV, out []fi.Addr, flags fi.Flags, ctx any) (int, error) {
			return a.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1")}, out, flags, ctx)
		},
		"InsertSvc": func(a *AV, out []fi.Addr, flags fi.Flags, ctx any) (int, error) {
			return a.InsertSvc("10.0.0.1", "1", out, flags, ctx)
		},
		"InsertSym": func(a *AV, out []fi.Addr, flags fi.Flags, ctx any) (int, error) {
			return a.InsertSym("10.0.0.1", 1, "1", 1, out, flags, ctx)
		},
	}
	for name, call := range calls {
		for _, tc := range []struct {
			what  string
			a     *AV
			flags fi.Flags
			ctx   any
			want  fi.Errno
		}{
			{"unsupported flag FI_SEND", plain, fi.SEND, nil, fi.EBADFLAGS},
			{"unsupported flag FI_EVENT", plain, fi.EVENT, nil, fi.EBADFLAGS},
			{"FI_PEEK with FI_MORE", plain, fi.PEEK | fi.MORE, nil, fi.EBADFLAGS},
			{"FI_AV_USER_ID with FI_AUTH_KEY", keyed, fi.AV_USER_ID | fi.AUTH_KEY, nil, fi.EINVAL},
			{"FI_AV_USER_ID on an FI_AV_AUTH_KEY domain", keyed, fi.AV_USER_ID, nil, fi.EINVAL},
			{"FI_AV_USER_ID on an AV opened with it", uid, fi.AV_USER_ID, nil, fi.EINVAL},
			{"FI_AUTH_KEY without FI_AV_AUTH_KEY", plain, fi.AUTH_KEY, nil, fi.EINVAL},
			{"FI_SYNC_ERR without status array", plain, fi.SYNC_ERR, nil, fi.EINVAL},
			{"FI_SYNC_ERR with short status array", plain, fi.SYNC_ERR, []int{}, fi.EINVAL},
			{"FI_SYNC_ERR on an FI_EVENT AV", async, fi.SYNC_ERR, []int{0}, fi.EINVAL},
		} {
			out := []fi.Addr{fi.AddrNotAvail}
			before := tc.a.Count()
			n, err := call(tc.a, out, tc.flags, tc.ctx)
			require.ErrorIs(t, err, tc.want, "%s: %s", name, tc.what)
			require.Zero(t, n)
			require.Equal(t, before, tc.a.Count(), "%s: %s inserted", name, tc.what)
		}
	}
	_, err = keyed.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1")}, nil, fi.AUTH_KEY, nil)
	require.ErrorIs(t, err, fi.EINVAL, "FI_AUTH_KEY without handles in fi_addr")
	_, err = plain.InsertAddrPort([]netip.AddrPort{ap("10.0.0.1:1")}, nil, fi.AV_USER_ID, nil)
	require.ErrorIs(t, err, fi.EINVAL, "FI_AV_USER_ID without IDs in fi_addr")
	require.ErrorIs(t, uid.Remove([]fi.Addr{0}, fi.AV_USER_ID), fi.EINVAL, "per-remove FI_AV_USER_ID")
	require.ErrorIs(t, uid.SetUserID(0, 1, fi.MORE), fi.EBADFLAGS)
}

// auditChildEnv selects the child part of TestNamedAVSysErrno.
const auditChildEnv = "XDPFAB_AV_AUDIT_SYSERR_CHILD"

// TestNamedAVSysErrno: errors of the system calls on a named AV's bpffs
// directory match their fi.Errno with errors.Is and keep their text. The
// failures are made in a child process with a mount namespace of its own,
// where the bpffs directory is a read-only tmpfs, then one it may not
// write to as another user; nothing outside the namespace changes.
func TestNamedAVSysErrno(t *testing.T) {
	if os.Getenv(auditChildEnv) == "1" {
		namedAVSysErrnoChild(t)
		return
	}
	testenv.RequirePriv(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestNamedAVSysErrno$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), auditChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // mounts made private
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child:\n%s", out)
	require.True(t, bytes.Contains(out, []byte("child: all checks ran")), "child:\n%s", out)
}

func namedAVSysErrnoChild(t *testing.T) {
	// A bpffs of the namespace's own, its xdpfab directory a tmpfs.
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must(unix.Mount("bpf", bpffs.Root, "bpf", 0, "mode=0755"), "mount bpffs")
	must(os.MkdirAll(bpffs.Dir, 0o755), "mkdir")
	must(unix.Mount("tmpfs", bpffs.Dir, "tmpfs", unix.MS_RDONLY, "mode=0755"), "mount ro tmpfs")

	// bpffs.Ensure cannot create the av directory: EROFS.
	_, err := Open(Attr{Name: "audit-syserr"}, nil)
	require.Error(t, err)
	require.ErrorIs(t, err, fi.Errno(unix.EROFS), "%v", err)
	require.Equal(t, fi.Errno(unix.EROFS), fi.ErrnoOf(err))
	require.Contains(t, err.Error(), "read-only file system")

	// Unlink of a pin it cannot remove: EROFS.
	must(unix.Mount("", bpffs.Dir, "", unix.MS_REMOUNT, "mode=0755"), "remount rw")
	must(os.MkdirAll(filepath.Dir(PinPath("x")), 0o755), "mkdir av")
	must(os.WriteFile(PinPath("x"), nil, 0o600), "create pin stand-in")
	must(unix.Mount("", bpffs.Dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, "mode=0755"), "remount ro")
	err = Unlink("x")
	require.ErrorIs(t, err, fi.Errno(unix.EROFS), "%v", err)
	require.Contains(t, err.Error(), "read-only file system")

	// As a user without write access: FI_EACCES.
	must(unix.Mount("", bpffs.Dir, "", unix.MS_REMOUNT, "mode=0755"), "remount rw")
	must(os.Remove(PinPath("x")), "remove stand-in")
	must(os.Remove(filepath.Dir(PinPath("x"))), "remove av")
	must(syscall.Setgid(65534), "setgid")
	must(syscall.Setuid(65534), "setuid")
	_, err = Open(Attr{Name: "audit-syserr"}, nil)
	require.ErrorIs(t, err, fi.EACCES, "%v", err)
	require.Contains(t, err.Error(), "permission denied")
	t.Log("child: all checks ran")
}
