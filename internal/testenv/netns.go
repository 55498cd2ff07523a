package testenv

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const (
	netnsDir    = "/var/run/netns"
	netnsPrefix = "xfT"
)

var (
	nameSeq   atomic.Uint32
	sweepOnce sync.Once
)

// Netns is a named network namespace made for one test.
type Netns struct {
	Name   string
	handle netns.NsHandle
	nl     *netlink.Handle
}

// NewNetns creates a network namespace with its loopback up, and removes it
// when tb ends (or the run is interrupted).
func NewNetns(tb testing.TB) *Netns {
	tb.Helper()
	sweepOnce.Do(func() {
		sweepStale()
		netnsDirErr = prepareNetnsDir()
	})
	if netnsDirErr != nil {
		tb.Fatalf("prepare %s: %v", netnsDir, netnsDirErr)
	}
	name := fmt.Sprintf("%s%d-%d", netnsPrefix, os.Getpid(), nameSeq.Add(1))
	h, err := newNamedNetns(name)
	if err != nil {
		tb.Fatalf("create netns %s: %v", name, err)
	}
	ns := &Netns{Name: name, handle: h}
	unregister := onInterrupt(ns.destroy)
	tb.Cleanup(func() {
		ns.destroy()
		unregister()
	})
	ns.nl, err = netlink.NewHandleAt(h)
	if err != nil {
		tb.Fatalf("netlink handle in %s: %v", name, err)
	}
	lo, err := ns.nl.LinkByName("lo")
	if err == nil {
		err = ns.nl.LinkSetUp(lo)
	}
	if err != nil {
		tb.Fatalf("loopback up in %s: %v", name, err)
	}
	return ns
}

// netnsDirErr is what prepareNetnsDir said (sweepOnce).
var netnsDirErr error

// prepareNetnsDir makes netnsDir a mount point of its own with shared
// propagation, as `ip netns add` does before it mounts a namespace there.
// Without it, the first namespaces made on a fresh machine (before any ip
// netns command) are mounted on the plain directory; a later ip netns
// command then bind-mounts the directory over them, and they can be
// neither unmounted nor removed through it: left behind for good.
func prepareNetnsDir() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) { // not a mount point yet
		if err := unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mount %s on itself: %w", netnsDir, err)
		}
		err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("make %s shared: %w", netnsDir, err)
	}
	return nil
}

// newNamedNetns creates a named netns on a locked thread and puts the thread
// back in the namespace it came from.
func newNamedNetns(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		return 0, err
	}
	if err := netns.Set(orig); err != nil {
		// The thread is in the wrong namespace: don't hand it back to Go.
		h.Close()
		_ = netns.DeleteNamed(name)
		panic("testenv: cannot return thread to its netns: " + err.Error())
	}
	return h, nil
}

func (n *Netns) destroy() {
	if n.nl != nil {
		n.nl.Close()
		n.nl = nil
	}
	if n.handle.IsOpen() {
		n.handle.Close()
	}
	_ = netns.DeleteNamed(n.Name)
}

// Handle returns the namespace's file handle (for netlink.NsFd and
// netlink.NewHandleAt).
func (n *Netns) Handle() netns.NsHandle { return n.handle }

// Netlink returns a netlink handle operating inside the namespace.
func (n *Netns) Netlink() *netlink.Handle { return n.nl }

// Do runs fn on an OS thread switched into the namespace. Sockets fn opens
// stay in the namespace after Do returns; goroutines fn starts do not run
// inside it.
func (n *Netns) Do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(n.handle); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", n.Name, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: Go destroys it when the goroutine exits,
		// so no other goroutine runs in the wrong namespace.
		return fmt.Errorf("leave netns %s: %w", n.Name, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Exec runs a command inside the namespace (ip netns exec) and returns its
// combined output.
func (n *Netns) Exec(name string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// sweepStale removes namespaces left by earlier test processes that died
// before their cleanup ran.
func sweepStale() {
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), netnsPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		_, err := strconv.Atoi(pidStr)
		if err != nil || pidStr == strconv.Itoa(os.Getpid()) {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", pidStr)); err == nil {
			continue // its process still runs
		}
		_ = netns.DeleteNamed(e.Name())
	}
}

// Veth is a veth pair with end A in one namespace and end B in another,
// both up with an address.
type Veth struct {
	A, B         *Netns
	NameA, NameB string
	AddrA, AddrB netip.Prefix
	IndexA       int
	IndexB       int
}

// VethOptions configures NewVeth. Zero values pick 10.200.0.1/24 and
// 10.200.0.2/24, names unique to the test process, and the default MTU.
type VethOptions struct {
	AddrA, AddrB netip.Prefix
	MTU          int
	// NameA and NameB, if set, name the ends (each must be free in its
	// namespace): tests of namespaces holding same-named interfaces.
	NameA, NameB string
}

// NewVeth joins two namespaces with a veth pair, addresses both ends and
// sets them up. Deleting either namespace removes the pair; it is also
// deleted explicitly when tb ends.
func NewVeth(tb testing.TB, a, b *Netns, opts VethOptions) *Veth {
	tb.Helper()
	if !opts.AddrA.IsValid() {
		opts.AddrA = netip.MustParsePrefix("10.200.0.1/24")
	}
	if !opts.AddrB.IsValid() {
		opts.AddrB = netip.MustParsePrefix("10.200.0.2/24")
	}
	n := nameSeq.Add(1)
	v := &Veth{A: a, B: b, AddrA: opts.AddrA, AddrB: opts.AddrB,
		NameA: fmt.Sprintf("xf%x%xa", os.Getpid()&0xffff, n),
		NameB: fmt.Sprintf("xf%x%xb", os.Getpid()&0xffff, n)}
	if opts.NameA != "" {
		v.NameA = opts.NameA
	}
	if opts.NameB != "" {
		v.NameB = opts.NameB
	}
	la := netlink.NewLinkAttrs()
	la.Name = v.NameA
	la.Namespace = netlink.NsFd(a.handle)
	la.MTU = opts.MTU
	link := &netlink.Veth{LinkAttrs: la, PeerName: v.NameB, PeerNamespace: netlink.NsFd(b.handle)}
	// Created from inside A so neither end ever appears in the root netns.
	if err := a.nl.LinkAdd(link); err != nil {
		tb.Fatalf("create veth %s/%s: %v", v.NameA, v.NameB, err)
	}
	tb.Cleanup(func() {
		if l, err := a.nl.LinkByName(v.NameA); err == nil {
			_ = a.nl.LinkDel(l)
		}
	})
	var err error
	if v.IndexA, err = setupEnd(a, v.NameA, opts.AddrA, opts.MTU); err != nil {
		tb.Fatal(err)
	}
	if v.IndexB, err = setupEnd(b, v.NameB, opts.AddrB, opts.MTU); err != nil {
		tb.Fatal(err)
	}
	return v
}

func setupEnd(ns *Netns, name string, addr netip.Prefix, mtu int) (int, error) {
	l, err := ns.nl.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("find %s in %s: %w", name, ns.Name, err)
	}
	if mtu > 0 {
		if err := ns.nl.LinkSetMTU(l, mtu); err != nil {
			return 0, fmt.Errorf("mtu %d on %s: %w", mtu, name, err)
		}
	}
	nlAddr, err := netlink.ParseAddr(addr.String())
	if err != nil {
		return 0, err
	}
	if err := ns.nl.AddrAdd(l, nlAddr); err != nil {
		return 0, fmt.Errorf("address %s on %s: %w", addr, name, err)
	}
	if err := ns.nl.LinkSetUp(l); err != nil {
		return 0, fmt.Errorf("up %s: %w", name, err)
	}
	return l.Attrs().Index, nil
}
