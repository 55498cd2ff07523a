package xdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/internal/bpffs"
)

// NetnsID identifies a network namespace: the inode number of its nsfs
// file, the number `ls -l /proc/PID/ns/net` (net:[NUMBER]), `lsns -t net`
// and `ip netns identify` go by. It is unique among the namespaces that
// exist; a number freed by a destroyed namespace can be given to a new one,
// which is why a pin directory counts as a namespace's own only while its
// link is attached to that namespace's device (see pinState).
type NetnsID uint64

func (id NetnsID) String() string { return strconv.FormatUint(uint64(id), 10) }

// CurrentNetns returns the network namespace of the calling OS thread
// (the one a caller that switched namespaces locked).
func CurrentNetns() (NetnsID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("xdp: network namespace of this thread: %w", err)
	}
	return NetnsID(st.Ino), nil
}

// nsPinDir is where the attachments of namespace ns are pinned, one
// directory per ifindex.
func nsPinDir(ns NetnsID) string { return bpffs.Path(ns.String()) }

func pinDir(ns NetnsID, ifindex int) string {
	return filepath.Join(nsPinDir(ns), strconv.Itoa(ifindex))
}

// PinDir is where xdpfab's program, link and maps for iface, an interface
// of the calling thread's network namespace, are pinned:
// /sys/fs/bpf/xdpfab/NETNS/IFINDEX. It is "" when there is no such
// interface.
func PinDir(iface string) string {
	ns, err := CurrentNetns()
	if err != nil {
		return ""
	}
	nl, err := netlink.LinkByName(iface)
	if err != nil {
		return ""
	}
	return pinDir(ns, nl.Attrs().Index)
}

// pinState is what a pin directory holds, seen from one namespace.
type pinState int

const (
	// pinsNone: no pinned link (maybe pins a crash left half way).
	pinsNone pinState = iota
	// pinsLive: the pinned link is attached to the device of this
	// ifindex in this namespace, which runs the link's program.
	pinsLive
	// pinsDefunct: the pinned link is attached to nothing (its device was
	// deleted, or the link detached): a leftover, whoever made it.
	pinsDefunct
	// pinsElsewhere: the pinned link is attached to a device that is not
	// this namespace's device of that ifindex (it moved to another
	// namespace while attached, or the directory belongs to a destroyed
	// namespace whose number was reused). Not ours to remove.
	pinsElsewhere
)

// inspectPins reports the state of dir, the pin directory of ifindex in
// the calling thread's namespace.
func inspectPins(dir string, ifindex int) (pinState, error) {
	l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
	if errors.Is(err, os.ErrNotExist) {
		// No link of ours: a component of a libxdp dispatcher, or
		// nothing (multiprog.go).
		return inspectMultiPins(dir, ifindex)
	}
	if err != nil {
		return pinsNone, fmt.Errorf("open pinned link in %s: %w", dir, mapErr(err))
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return pinsNone, fmt.Errorf("pinned link info in %s: %w", dir, mapErr(err))
	}
	x := info.XDP()
	if x == nil || x.Ifindex == 0 {
		return pinsDefunct, nil
	}
	if int(x.Ifindex) != ifindex {
		return pinsElsewhere, nil
	}
	// Same ifindex: is it this namespace's device, running this program?
	nl, err := netlink.LinkByIndex(ifindex)
	if err != nil || nl.Attrs().Xdp == nil || ebpf.ProgramID(nl.Attrs().Xdp.ProgId) != info.Program {
		return pinsElsewhere, nil
	}
	return pinsLive, nil
}

// ifindexDirs lists the ifindexes with a pin directory in namespace ns.
func ifindexDirs(ns NetnsID) ([]int, error) {
	entries, err := os.ReadDir(nsPinDir(ns))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	var idx []int
	for _, e := range entries {
		if i, err := strconv.Atoi(e.Name()); err == nil && i > 0 && e.IsDir() {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	return idx, nil
}

// sweepDefunct removes the pins whose link is attached to nothing (its
// interface was deleted, with its namespace or alone, or the link was
// detached) and the owner records of interfaces without pins. Such pins
// hold no running program, only the maps' memory, and nobody can use them
// again; a namespace destroyed with xdpfab attached leaves them, and no
// process can detach there any more, so every namespace sweeps them. A
// link attached to a device, in whatever namespace, is never touched. The
// pin lock is held.
func sweepDefunct() error {
	nsDirs, err := os.ReadDir(bpffs.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("xdp: %w", err)
	}
	var errs []error
	for _, e := range nsDirs {
		v, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil || !e.IsDir() {
			continue // av/, mr/ and what else is not a namespace's
		}
		ns := NetnsID(v)
		idx, err := ifindexDirs(ns)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, i := range idx {
			dir := pinDir(ns, i)
			if st, err := inspectPins(dir, i); err != nil || st != pinsDefunct {
				continue
			}
			if _, err := removePins(dir); err != nil {
				errs = append(errs, err)
			}
		}
		removeIfEmpty(nsPinDir(ns))
	}
	// Owner records whose pins are gone.
	runDirs, _ := os.ReadDir(RunDir)
	for _, e := range runDirs {
		v, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil || !e.IsDir() {
			continue
		}
		ifDirs, _ := os.ReadDir(filepath.Join(RunDir, e.Name()))
		for _, f := range ifDirs {
			i, err := strconv.Atoi(f.Name())
			if err != nil {
				continue
			}
			if _, err := os.Stat(pinDir(NetnsID(v), i)); errors.Is(err, os.ErrNotExist) {
				removeOwnerRecords(NetnsID(v), i)
			}
		}
	}
	return errors.Join(errs...)
}

// removeIfEmpty removes dir if nothing is left in it.
func removeIfEmpty(dir string) { _ = unix.Rmdir(dir) }

// OpenAll opens xdpfab's attachment on every interface of the calling
// thread's network namespace that has one, in ifindex order. Attachments
// of other namespaces are invisible.
func OpenAll() ([]*Attachment, error) {
	ns, err := CurrentNetns()
	if err != nil {
		return nil, err
	}
	idx, err := ifindexDirs(ns)
	if err != nil {
		return nil, err
	}
	var as []*Attachment
	for _, i := range idx {
		nl, err := netlink.LinkByIndex(i)
		if err != nil {
			continue // its interface is gone: pins the next Attach or Detach sweeps
		}
		a, err := open(ns, nl)
		if errors.Is(err, errNotAttached) {
			continue
		}
		if err != nil {
			for _, a := range as {
				a.Close()
			}
			return nil, err
		}
		as = append(as, a)
	}
	return as, nil
}
