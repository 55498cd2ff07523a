// Package xdp loads xdpfab's XDP program (package bpf) onto one network
// interface, pins it, finds it again from other processes, removes it, and
// keeps track of which live process owns what in its maps.
//
// Model. Attach loads the collection, attaches the program to the
// interface with a bpf_link and pins the link, the program and the maps
// under /sys/fs/bpf/xdpfab/NETNS/IFINDEX/ (PinDir), where NETNS is the
// inode number of the interface's network namespace (NetnsID: what
// `ls -l /proc/PID/ns/net` and `lsns` show) and IFINDEX its index there.
// The pinned link keeps the program attached after the attaching process
// exits; a process that did not attach calls Open to get the same maps
// (AV, MR, ports, XSKs, counters). Detach removes the link, the pins, the
// owner records and any stale netlink attachment of xdpfab's program,
// leaving the interface as it was.
//
// Namespaces. bpffs is one per host, shared by every network namespace,
// and every container has an eth0: so nothing is keyed by interface name.
// Every call acts in the calling thread's network namespace (callers
// switching namespaces lock the OS thread; `xdpfab -n NETNS` switches only
// the network namespace) and sees only that namespace's attachments: a pin
// directory is this namespace's only while its link is attached to the
// device of that ifindex here, running the link's program (a namespace
// number can be reused after its namespace is destroyed). Attach, Open,
// Detach, Attached, OpenAll and Status never find, replace, detach or
// clean up a live program of another namespace, also on an interface of
// the same name. The one exception is garbage: pins whose link is attached to
// nothing (its interface was deleted, e.g. with its namespace, where no
// one can detach any more) hold no running program, only memory, and the
// next Attach or Detach in any namespace removes them.
//
// Owners. Ports set with SetPort, AV entries under an av_id from NewAVID
// and MR entries under a domain_id from NewDomainID belong to the calling
// process, recorded in /run/xdpfab/NETNS/IFINDEX/prog-ID/ in a file the
// process holds an flock on for as long as it owns anything there (owner.go
// gives the reasons). When the process dies, however it dies, the kernel
// drops the lock; the next Open, Attach, SetPort, NewAVID, NewDomainID or
// Status removes what it owned and shows no trace of it. Ports of
// Options.Ports (`xdpfab attach --port`) belong to nobody and stay until
// DeletePort or Detach; named AVs' entries stay with the AV, as after a
// normal close. The ids NewAVID and NewDomainID hand out are unique among
// the processes sharing the attachment, so their entries never mix.
//
// Provider choices:
//   - ModeAuto tries native (driver) XDP and falls back to generic (SKB).
//   - Attach is idempotent: on an interface where xdpfab is already attached
//     (in a compatible mode) it reuses the pinned objects and only applies
//     the ports; a leftover from a crash (pins without a live link, or an
//     xdpfab program attached through netlink with no pins) is cleaned up
//     first. Any other XDP program attached alone is left alone and
//     reported by name and id (fi.EBUSY), before anything is created.
//   - Beside other programs: with Options.MultiProg, or when the interface
//     runs libxdp's multi-program dispatcher already, the program becomes
//     one component of that dispatcher (multiprog.go, libxdp.go), so that
//     xdp-filter, xdp-loader's programs and xdpfab share the interface.
//   - Attach and Detach serialise on an flock of /sys/fs/bpf/xdpfab, so
//     processes racing to attach one interface share one program. A Detach
//     or Open that finds nothing creates nothing and mounts nothing. The
//     last Detach removes the namespace's directory and /sys/fs/bpf/xdpfab
//     itself (under the lock; a locker that finds it unlinked makes it
//     again, so the lock is never split: internal/bpffs.Lock). bpffs stays
//     mounted: other programs may pin there.
//   - AF_XDP sockets are registered per RX queue (SetXSK); the kernel does
//     not let user space read an XSKMAP, so BoundQueues asks a probe
//     program (bpf's xsk_probe) run with BPF_PROG_TEST_RUN. A dead
//     process's sockets leave the XSKMAP by themselves.
//   - Detach takes the interface by name, in the caller's namespace: an
//     interface that is gone cannot be named (fi.ENODEV); its pins are
//     garbage swept as above.
//   - bpffs must be the host's: under `ip netns exec`, /sys is remounted and
//     a bpffs mounted there would vanish with the command (and the program
//     with it), so Attach refuses that case (use `xdpfab -n NETNS`, which
//     switches only the network namespace).
//
// Errors wrap fi errnos: fi.ENODEV (no such interface in this namespace),
// fi.EPERM (not privileged), fi.EBUSY (another XDP program, or xdpfab in
// another mode), fi.EOPNOTSUPP (the kernel or driver lacks a feature),
// fi.ENOENT (xdpfab is not attached in this namespace), fi.EINVAL (bad
// arguments).
package xdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/bpffs"
	"github.com/xdpfab/xdpfab/internal/ktable"
)

// Mode is how the program is attached.
type Mode int

const (
	// ModeAuto tries ModeNative, then ModeGeneric.
	ModeAuto Mode = iota
	// ModeNative runs the program in the driver (XDP_FLAGS_DRV_MODE).
	ModeNative
	// ModeGeneric runs it in the stack after SKB allocation (XDP_FLAGS_SKB_MODE).
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "auto", "native" or "generic".
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{ModeAuto, ModeNative, ModeGeneric} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("xdp: mode %q is not auto, native or generic: %w", s, fi.EINVAL)
}

// ProgramName is the kernel name of xdpfab's XDP program; an attached
// program of that name without pins is a leftover of xdpfab.
const ProgramName = bpf.XdpfabProgXdpfabXdp

// Names of the pins in an attachment's pin directory.
const (
	pinLink = "link"
	pinProg = "prog"
)

var pinnedMaps = []string{bpf.XdpfabMapAvMap, bpf.XdpfabMapMrMap, bpf.XdpfabMapPorts, bpf.XdpfabMapXsks, bpf.XdpfabMapCounters,
	bpf.XdpfabMapLocalAddrs, bpf.XdpfabMapKrRegions, bpf.XdpfabMapKrMem, bpf.XdpfabMapKtarget}

// errNotAttached is Open's error where xdpfab is not attached.
var errNotAttached = fmt.Errorf("xdpfab is not attached: %w", fi.ENOENT)

// Options configures Attach.
type Options struct {
	Mode Mode
	// Ports are set after attaching, also when xdpfab was already
	// attached. Unlike SetPort's, they belong to no process: they stay
	// until DeletePort or Detach (the ports of `xdpfab attach --port`).
	Ports map[uint16]PortConfig
	// AVMap and MRMap, if set, are used instead of new maps: maps with
	// the layout of bpf's av_map and mr_map kept by the av and mr
	// packages (e.g. mr.MapMirror.Map()), so one AV or MR table serves
	// several interfaces. They are pinned in the pin directory too.
	// Ignored when xdpfab is already attached.
	AVMap, MRMap *ebpf.Map
	// MultiProg attaches the program as a component of libxdp's
	// multi-program dispatcher (multiprog.go), so that other libxdp
	// programs (xdp-filter, xdp-loader's) can run on the interface too.
	// It is implied when a dispatcher is attached there already.
	MultiProg bool
	// RunPriority is the component's run priority in the dispatcher
	// (lower runs first; 0: DefaultRunPriority).
	RunPriority uint32
}

// Attachment is xdpfab's program and maps on one interface, as loaded by
// Attach or Open. Close releases this process's handles; the pinned
// objects and the attachment stay.
type Attachment struct {
	Iface   string  // the interface's name when opened (display only)
	Ifindex int     // the interface, in namespace Netns
	Netns   NetnsID // the network namespace of the interface
	PinDir  string  // where the objects are pinned

	Program    *ebpf.Program
	AVMap      *ebpf.Map // av_map: bpf.XdpfabAvKey -> bpf.XdpfabAvValue
	MRMap      *ebpf.Map // mr_map: bpf.XdpfabMrKey -> bpf.XdpfabMrValue
	PortMap    *ebpf.Map // ports: UDP port (network order) -> bpf.XdpfabPortConfig
	XSKMap     *ebpf.Map // xsks: RX queue -> AF_XDP socket
	CounterMap *ebpf.Map // counters: per-CPU, bpf.Counter -> uint64
	LocalMap   *ebpf.Map // local_addrs: the namespace's addresses (bpf.XdpfabLocalAddr)
	// Kernel-resident regions and the per-peer target state the program
	// shares with user space (bpf/kserve.h); nil on an attachment pinned
	// by an xdpfab that had none (nothing is then served in XDP).
	KRRegions *ebpf.Map // kr_regions: bpf.XdpfabMrKey -> bpf.XdpfabKrRegion
	KRMem     *ebpf.Map // kr_mem: bpf.XdpfabMrKey -> a region's array map
	KTarget   *ebpf.Map // ktarget: bpf.XdpfabKtKey -> bpf.XdpfabKtState

	progID ebpf.ProgramID // keys the owner records (owner.go)
}

// Close releases the handles; it does not detach.
func (a *Attachment) Close() error {
	var errs []error
	if a.Program != nil {
		errs = append(errs, a.Program.Close())
	}
	for _, m := range []*ebpf.Map{a.AVMap, a.MRMap, a.PortMap, a.XSKMap, a.CounterMap, a.LocalMap, a.KRRegions, a.KRMem, a.KTarget} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// Attach loads xdpfab's program onto iface, an interface of the calling
// thread's network namespace, in opts.Mode, pins it under PinDir(iface)
// and sets opts.Ports. If xdpfab is already attached there in a
// compatible mode it returns the existing attachment. Leftovers of this
// namespace (pins of deleted interfaces, owners that died) are removed on
// the way; nothing of another namespace is looked at.
func Attach(iface string, opts Options) (*Attachment, error) {
	if opts.Mode < ModeAuto || opts.Mode > ModeGeneric {
		return nil, fmt.Errorf("xdp: attach %s: mode %v: %w", iface, opts.Mode, fi.EINVAL)
	}
	nl, err := findLink(iface)
	if err != nil {
		return nil, err
	}
	ns, err := CurrentNetns()
	if err != nil {
		return nil, err
	}
	if err := usableBPFFS(); err != nil {
		return nil, fmt.Errorf("xdp: attach %s: %w", iface, err)
	}
	// Another program: refuse before touching bpffs (checked again below,
	// under the lock). A libxdp dispatcher is joined, not refused.
	multi := opts.MultiProg
	switch attachedProgName(nl) {
	case ProgramName:
	case dispatcherProgName:
		multi = true
	default:
		if err := checkOtherProgram(iface, nl); err != nil {
			return nil, err
		}
	}
	unlock, err := lockPins(true)
	if err != nil {
		return nil, fmt.Errorf("xdp: attach %s: %w", iface, err)
	}
	defer unlock()
	if err := sweepDefunct(); err != nil {
		return nil, fmt.Errorf("xdp: attach %s: %w", iface, err)
	}

	a, err := reuse(ns, iface, nl, opts.Mode)
	if err != nil {
		return nil, err
	}
	if a == nil && multi {
		if a, err = attachMulti(ns, iface, nl, opts); err != nil {
			removeIfEmpty(nsPinDir(ns))
			return nil, err
		}
	} else if a == nil {
		if a, err = attachNew(ns, iface, nl, opts); err != nil {
			removeIfEmpty(nsPinDir(ns))
			return nil, err
		}
	}
	// Ports bound to every address need the namespace's addresses.
	if err := a.SyncLocalAddrs(nil); err != nil {
		a.Close()
		return nil, err
	}
	for port, cfg := range opts.Ports {
		if err := a.setPort(port, cfg); err != nil {
			a.Close()
			return nil, err
		}
	}
	_, _ = a.reapDeadOwners()
	return a, nil
}

// reuse returns the existing attachment of nl if it is live and in a
// mode compatible with want, cleans it up if it is stale, and returns nil
// when a fresh attach is needed. The pin lock is held.
func reuse(ns NetnsID, iface string, nl netlink.Link, want Mode) (*Attachment, error) {
	dir := pinDir(ns, nl.Attrs().Index)
	st, err := inspectPins(dir, nl.Attrs().Index)
	if err != nil {
		return nil, fmt.Errorf("xdp: attach %s: %w", iface, err)
	}
	switch st {
	case pinsElsewhere:
		return nil, fmt.Errorf("xdp: attach %s: %s holds xdpfab's link to a device that is not %s of this network namespace (it moved to another namespace while attached?): detach it there: %w",
			iface, dir, iface, fi.EBUSY)
	case pinsNone, pinsDefunct:
		// Pins without a live link (the link was detached, or a crash
		// between attach and pin): start over.
		if _, err := removePins(dir); err != nil {
			return nil, err
		}
		removeOwnerRecords(ns, nl.Attrs().Index)
		if err := clearStaleNetlink(iface, nl); err != nil {
			return nil, err
		}
		return nil, nil
	}
	got := attachedMode(nl)
	if want != ModeAuto && got != want {
		return nil, fmt.Errorf("xdp: attach %s: xdpfab is already attached in %v mode, not %v: detach first: %w",
			iface, got, want, fi.EBUSY)
	}
	return open(ns, nl)
}

func attachNew(ns NetnsID, iface string, nl netlink.Link, opts Options) (_ *Attachment, err error) {
	spec, err := bpf.LoadXdpfab()
	if err != nil {
		return nil, err
	}
	copts, release, err := replacementMaps(iface, spec, opts)
	if err != nil {
		return nil, err
	}
	defer release()
	var objs bpf.XdpfabObjects
	if err := spec.LoadAndAssign(&objs, copts); err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("xdp: attach %s: replacement map does not have the layout of the program's: %v: %w", iface, err, fi.EINVAL)
		}
		return nil, fmt.Errorf("xdp: attach %s: load program: %w", iface, loadErr(err))
	}
	defer func() {
		if err != nil {
			objs.Close()
		}
	}()

	l, err := attachLink(iface, nl, objs.XdpfabXdp, opts.Mode)
	if err != nil {
		return nil, err
	}
	// Closing the link fd detaches unless it is pinned: pin everything,
	// the link last, so a crash half way leaves no attached program.
	defer l.Close()
	dir, err := bpffs.Ensure(pinDir(ns, nl.Attrs().Index))
	if err != nil {
		return nil, fmt.Errorf("xdp: attach %s: %w", iface, err)
	}
	defer func() {
		if err != nil {
			_, _ = removePins(dir)
		}
	}()
	maps := map[string]*ebpf.Map{
		bpf.XdpfabMapAvMap: objs.AvMap, bpf.XdpfabMapMrMap: objs.MrMap, bpf.XdpfabMapPorts: objs.Ports,
		bpf.XdpfabMapXsks: objs.Xsks, bpf.XdpfabMapCounters: objs.Counters, bpf.XdpfabMapLocalAddrs: objs.LocalAddrs,
		bpf.XdpfabMapKrRegions: objs.KrRegions, bpf.XdpfabMapKrMem: objs.KrMem, bpf.XdpfabMapKtarget: objs.Ktarget,
	}
	for _, name := range pinnedMaps {
		if err := maps[name].Pin(filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("xdp: attach %s: pin %s: %w", iface, name, err)
		}
	}
	if err := objs.XdpfabXdp.Pin(filepath.Join(dir, pinProg)); err != nil {
		return nil, fmt.Errorf("xdp: attach %s: pin program: %w", iface, err)
	}
	if err := l.Pin(filepath.Join(dir, pinLink)); err != nil {
		return nil, fmt.Errorf("xdp: attach %s: pin link: %w", iface, err)
	}
	objs.XskProbe.Close()
	objs.MrVet.Close()
	// Write the MR table's header now, so that every process sharing the
	// table finds the same seed.
	if t, err := ktable.OpenUncounted(objs.MrMap, ktable.RandomSeed()); err != nil {
		return nil, fmt.Errorf("xdp: attach %s: MR table: %w", iface, err)
	} else {
		t.Close()
	}
	a := &Attachment{
		Iface: iface, Ifindex: nl.Attrs().Index, Netns: ns, PinDir: dir, Program: objs.XdpfabXdp,
		AVMap: objs.AvMap, MRMap: objs.MrMap, PortMap: objs.Ports, XSKMap: objs.Xsks, CounterMap: objs.Counters,
		LocalMap: objs.LocalAddrs, KRRegions: objs.KrRegions, KRMem: objs.KrMem, KTarget: objs.Ktarget,
	}
	a.progID = progIDOf(a.Program)
	return a, nil
}

// replacementMaps returns the collection options using opts.AVMap and
// opts.MRMap instead of new maps; release closes their handles after the
// load.
func replacementMaps(iface string, spec *ebpf.CollectionSpec, opts Options) (*ebpf.CollectionOptions, func(), error) {
	copts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{}}
	release := func() {
		for _, m := range copts.MapReplacements {
			m.Close()
		}
	}
	for name, m := range map[string]*ebpf.Map{bpf.XdpfabMapAvMap: opts.AVMap, bpf.XdpfabMapMrMap: opts.MRMap} {
		if m == nil {
			continue
		}
		// A fresh handle with no pin path of its own: pinning it must
		// add a pin, not move the owner's.
		own, err := ebpf.NewMapFromID(mapID(m))
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("xdp: attach %s: reopen %s: %w", iface, name, mapErr(err))
		}
		copts.MapReplacements[name] = own
		// The program does not depend on the capacity: take the
		// replacement's, so only type, sizes and flags must agree.
		spec.Maps[name].MaxEntries = own.MaxEntries()
	}
	return copts, release, nil
}

func progIDOf(p *ebpf.Program) ebpf.ProgramID {
	info, err := p.Info()
	if err != nil {
		return 0
	}
	id, _ := info.ID()
	return id
}

func mapID(m *ebpf.Map) ebpf.MapID {
	info, err := m.Info()
	if err != nil {
		return 0
	}
	id, _ := info.ID()
	return id
}

// attachLink attaches prog to nl in mode, trying native then generic for
// ModeAuto.
func attachLink(iface string, nl netlink.Link, prog *ebpf.Program, mode Mode) (link.Link, error) {
	if err := checkOtherProgram(iface, nl); err != nil {
		return nil, err
	}
	try := []Mode{mode}
	if mode == ModeAuto {
		try = []Mode{ModeNative, ModeGeneric}
	}
	var errs []error
	for _, m := range try {
		flags := link.XDPDriverMode
		if m == ModeGeneric {
			flags = link.XDPGenericMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: nl.Attrs().Index, Flags: flags})
		if err == nil {
			return l, nil
		}
		errs = append(errs, fmt.Errorf("%v: %w", m, err))
	}
	err := errors.Join(errs...)
	switch {
	case errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EBUSY):
		if other := checkOtherProgram(iface, nl); other != nil {
			return nil, other
		}
		return nil, fmt.Errorf("xdp: attach %s: an XDP program is already attached: %v: %w", iface, err, fi.EBUSY)
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return nil, fmt.Errorf("xdp: attach %s: not permitted (needs CAP_NET_ADMIN and CAP_BPF): %v: %w", iface, err, fi.EPERM)
	case errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ERANGE):
		return nil, fmt.Errorf("xdp: attach %s: the kernel or driver cannot attach XDP in %v mode (MTU too large for native XDP, or no bpf_link support): %v: %w",
			iface, mode, err, fi.EOPNOTSUPP)
	}
	return nil, fmt.Errorf("xdp: attach %s: %w", iface, err)
}

// checkOtherProgram fails with fi.EBUSY naming the program when an XDP
// program that is not xdpfab's is attached to nl.
func checkOtherProgram(iface string, nl netlink.Link) error {
	fresh, err := netlink.LinkByIndex(nl.Attrs().Index)
	if err == nil {
		nl = fresh
	}
	x := nl.Attrs().Xdp
	if x == nil || x.ProgId == 0 {
		return nil
	}
	name := "?"
	if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId)); err == nil {
		if info, err := p.Info(); err == nil {
			name = info.Name
		}
		p.Close()
	}
	if name == dispatcherProgName {
		return fmt.Errorf("xdp: %s runs a libxdp dispatcher (id %d, %v mode) that xdpfab cannot read (another version, or its pins in %s are missing): unload its programs with xdp-loader unload, or attach xdpfab elsewhere: %w",
			iface, x.ProgId, modeOf(x.AttachMode), libxdpDir(), fi.EBUSY)
	}
	return fmt.Errorf("xdp: %s already has XDP program %q (id %d) attached in %v mode, alone: detach it first (ip link set dev %s xdp off, or the tool that loaded it), or load it through libxdp's dispatcher (xdp-loader load) and attach xdpfab with --multiprog to run both: %w",
		iface, name, x.ProgId, modeOf(x.AttachMode), iface, fi.EBUSY)
}

func modeOf(attachMode uint32) Mode {
	switch attachMode {
	case 1: // XDP_ATTACHED_DRV
		return ModeNative
	case 2: // XDP_ATTACHED_SKB
		return ModeGeneric
	}
	return ModeAuto
}

// attachedMode reports the mode of the program attached to nl (ModeAuto
// if none or unknown).
func attachedMode(nl netlink.Link) Mode {
	if fresh, err := netlink.LinkByIndex(nl.Attrs().Index); err == nil {
		nl = fresh
	}
	if x := nl.Attrs().Xdp; x != nil && x.ProgId != 0 {
		return modeOf(x.AttachMode)
	}
	return ModeAuto
}

// clearStaleNetlink removes an xdpfab program attached to nl through
// netlink (it outlives a crashed process and blocks the next attach).
// Programs of other names are left alone.
func clearStaleNetlink(iface string, nl netlink.Link) error {
	fresh, err := netlink.LinkByIndex(nl.Attrs().Index)
	if err != nil {
		return nil
	}
	x := fresh.Attrs().Xdp
	if x == nil || x.ProgId == 0 {
		return nil
	}
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId))
	if err != nil {
		return nil
	}
	info, err := p.Info()
	p.Close()
	if err != nil || info.Name != ProgramName {
		return nil
	}
	flags := 0
	switch x.AttachMode {
	case 1:
		flags = 1 << 2 // XDP_FLAGS_DRV_MODE
	case 2:
		flags = 1 << 1 // XDP_FLAGS_SKB_MODE
	}
	if err := netlink.LinkSetXdpFdWithFlags(fresh, -1, flags); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("xdp: %s: xdpfab program (id %d) is attached through a bpf_link that xdpfab did not pin here (held by another process, or pinned by an older xdpfab in /sys/fs/bpf/xdpfab/%s: detach with that version, or remove that pin): %w",
				iface, x.ProgId, iface, fi.EBUSY)
		}
		return fmt.Errorf("xdp: %s: remove stale xdpfab program (id %d): %w", iface, x.ProgId, mapErr(err))
	}
	return nil
}

// lockPins serialises Attach and Detach across processes (and goroutines)
// with bpffs.Lock, the flock of xdpfab's bpffs directory, so concurrent
// attaches of one interface end with one program that all of them share.
// The lock is host-wide, but nothing under it looks at another namespace's
// pins. With create false, a missing directory means nothing is pinned,
// and no lock is taken: unlock is nil then, and nothing was created or
// mounted. Unlocking removes the directory once the last pin is gone.
func lockPins(create bool) (unlock func(), err error) {
	return bpffs.Lock(create)
}

// removePins removes xdpfab's pins in dir and reports whether there were
// any. Only the names Attach pins are removed, and the directory only when
// that leaves it empty.
func removePins(dir string) (bool, error) {
	found := false
	for _, name := range append([]string{pinLink, pinProg}, pinnedMaps...) {
		err := os.Remove(filepath.Join(dir, name))
		if err == nil {
			found = true
		} else if !errors.Is(err, os.ErrNotExist) {
			return found, fmt.Errorf("xdp: remove pin %s: %w", filepath.Join(dir, name), err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
		return found, fmt.Errorf("xdp: remove %s: %w", dir, err)
	}
	return found, nil
}

// Open loads the pinned program and maps of iface, an interface of the
// calling thread's network namespace, for a process that did not attach
// them. It fails with fi.ENOENT when xdpfab is not attached there (also
// when it is attached to an interface of that name in another namespace).
func Open(iface string) (*Attachment, error) {
	nl, err := findLink(iface)
	if err != nil {
		return nil, err
	}
	ns, err := CurrentNetns()
	if err != nil {
		return nil, err
	}
	a, err := open(ns, nl)
	if err != nil {
		return nil, err
	}
	_, _ = a.reapDeadOwners()
	return a, nil
}

func open(ns NetnsID, nl netlink.Link) (*Attachment, error) {
	iface := nl.Attrs().Name
	dir := pinDir(ns, nl.Attrs().Index)
	st, err := inspectPins(dir, nl.Attrs().Index)
	if err != nil {
		return nil, fmt.Errorf("xdp: open %s: %w", iface, err)
	}
	if st != pinsLive {
		return nil, fmt.Errorf("xdp: %s: %w (no live pinned link in %s)", iface, errNotAttached, dir)
	}
	a := &Attachment{Iface: iface, Ifindex: nl.Attrs().Index, Netns: ns, PinDir: dir}
	if a.Program, err = ebpf.LoadPinnedProgram(filepath.Join(dir, pinProg), nil); err != nil {
		return nil, fmt.Errorf("xdp: open %s: program: %w", iface, mapErr(err))
	}
	a.progID = progIDOf(a.Program)
	for _, m := range []struct {
		name string
		dst  **ebpf.Map
	}{
		{bpf.XdpfabMapAvMap, &a.AVMap}, {bpf.XdpfabMapMrMap, &a.MRMap}, {bpf.XdpfabMapPorts, &a.PortMap},
		{bpf.XdpfabMapXsks, &a.XSKMap}, {bpf.XdpfabMapCounters, &a.CounterMap}, {bpf.XdpfabMapLocalAddrs, &a.LocalMap},
	} {
		if *m.dst, err = ebpf.LoadPinnedMap(filepath.Join(dir, m.name), nil); err != nil {
			a.Close()
			return nil, fmt.Errorf("xdp: open %s: map %s: %w", iface, m.name, mapErr(err))
		}
	}
	// Optional: an attachment pinned before kernel-resident regions
	// existed has none, and serves nothing in XDP.
	for _, m := range []struct {
		name string
		dst  **ebpf.Map
	}{{bpf.XdpfabMapKrRegions, &a.KRRegions}, {bpf.XdpfabMapKrMem, &a.KRMem}, {bpf.XdpfabMapKtarget, &a.KTarget}} {
		*m.dst, _ = ebpf.LoadPinnedMap(filepath.Join(dir, m.name), nil)
	}
	return a, nil
}

// Attached reports whether xdpfab's program is attached to iface (in the
// calling thread's network namespace) with a live pinned link, as Open
// needs, without loading the program or its maps. Reading the pin needs
// the privileges Open needs; without them it fails.
func Attached(iface string) (bool, error) {
	nl, err := findLink(iface)
	if err != nil {
		return false, err
	}
	if n := attachedProgName(nl); n != ProgramName && n != dispatcherProgName {
		return false, nil
	}
	ns, err := CurrentNetns()
	if err != nil {
		return false, err
	}
	st, err := inspectPins(pinDir(ns, nl.Attrs().Index), nl.Attrs().Index)
	if err != nil {
		return false, fmt.Errorf("xdp: %s: %w", iface, err)
	}
	return st == pinsLive, nil
}

// Detach removes xdpfab's program from iface, an interface of the calling
// thread's network namespace: the pinned link (and with it the
// attachment), every pin, the owner records, and a stale netlink
// attachment of xdpfab's program. It fails with fi.ENOENT when there was
// nothing to remove, and then changes nothing (no directory is created,
// no bpffs mounted). Programs and pins of other namespaces are never
// touched, also those on an interface of the same name.
func Detach(iface string) error {
	nl, err := findLink(iface)
	if err != nil {
		return err
	}
	ns, err := CurrentNetns()
	if err != nil {
		return err
	}
	unlock, err := lockPins(false)
	if err != nil {
		return fmt.Errorf("xdp: detach %s: %w", iface, err)
	}
	if unlock != nil {
		defer unlock()
	}
	ifindex := nl.Attrs().Index
	dir := pinDir(ns, ifindex)
	found := false
	st, err := inspectPins(dir, ifindex)
	if err != nil {
		return fmt.Errorf("xdp: detach %s: %w", iface, err)
	}
	switch st {
	case pinsElsewhere:
		return fmt.Errorf("xdp: detach %s: %s holds xdpfab's link to a device that is not %s of this network namespace: left alone: %w",
			iface, dir, iface, fi.EBUSY)
	case pinsLive:
		if isMultiProg(dir) {
			if err := detachMulti(iface, nl, dir); err != nil {
				return err
			}
			found = true
			break
		}
		l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
		if err != nil {
			return fmt.Errorf("xdp: detach %s: open pinned link: %w", iface, mapErr(err))
		}
		found = true
		// Detach explicitly: another process may hold the link fd.
		if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			l.Close()
			return fmt.Errorf("xdp: detach %s: %w", iface, mapErr(err))
		}
		_ = l.Unpin()
		l.Close()
	}
	if unlock != nil { // else nothing is pinned
		removed, err := removePins(dir)
		if err != nil {
			return err
		}
		if found = found || removed; found {
			removeOwnerRecords(ns, ifindex)
		}
	}
	if attachedProgName(nl) == ProgramName {
		found = true
		if err := clearStaleNetlink(iface, nl); err != nil {
			return err
		}
	}
	if !found {
		return fmt.Errorf("xdp: detach %s: %w", iface, errNotAttached)
	}
	if unlock != nil {
		_ = sweepDefunct()
	}
	return nil
}

func attachedProgName(nl netlink.Link) string {
	fresh, err := netlink.LinkByIndex(nl.Attrs().Index)
	if err != nil || fresh.Attrs().Xdp == nil || fresh.Attrs().Xdp.ProgId == 0 {
		return ""
	}
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(fresh.Attrs().Xdp.ProgId))
	if err != nil {
		return ""
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return ""
	}
	return info.Name
}

func findLink(iface string) (netlink.Link, error) {
	if iface == "" || strings.ContainsAny(iface, "/\x00") || iface == "." || iface == ".." {
		return nil, fmt.Errorf("xdp: bad interface name %q: %w", iface, fi.EINVAL)
	}
	nl, err := netlink.LinkByName(iface)
	if err != nil {
		return nil, notFound(iface, err)
	}
	return nl, nil
}

func notFound(iface string, err error) error {
	var lnf netlink.LinkNotFoundError
	if errors.As(err, &lnf) || errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("xdp: no such interface %q in this network namespace: %w", iface, fi.ENODEV)
	}
	return fmt.Errorf("xdp: interface %q: %w", iface, mapErr(err))
}

// usableBPFFS fails when pinning would go to a bpffs private to this
// process's mount namespace (as under `ip netns exec`, which remounts
// /sys): the pins, and the attachment, would vanish with the process.
func usableBPFFS() error {
	if bpffs.IsMounted() {
		return nil
	}
	if ns := ipNetnsExec(); ns != "" {
		return fmt.Errorf("no bpffs at %s: this runs under `ip netns exec %s`, which remounts /sys, and pins made here would vanish with this process; run from the host mount namespace with `xdpfab -n NETNS`: %w",
			bpffs.Root, ns, fi.EOPNOTSUPP)
	}
	return nil
}

// ipNetnsExec returns the namespace name when this process runs under `ip
// netns exec`: that mounts a sysfs on /sys whose source is the name of the
// network namespace (/var/run/netns/NAME) instead of "sysfs".
func ipNetnsExec() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	source := ""
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 || f[4] != "/sys" {
			continue
		}
		source = "" // the last mount on /sys is the visible one
		if g[0] == "sysfs" {
			source = g[1]
		}
	}
	if source == "" || source == "sysfs" || strings.ContainsRune(source, '/') {
		return ""
	}
	if _, err := os.Stat(filepath.Join("/var/run/netns", source)); err != nil {
		return ""
	}
	return source
}

// loadErr classifies a collection load failure.
func loadErr(err error) error {
	switch {
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("not permitted (needs root with CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN): %v: %w", err, fi.EPERM)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("the kernel lacks a BPF feature xdpfab needs: %v: %w", err, fi.EOPNOTSUPP)
	}
	return err
}

// mapErr adds a privilege hint to EPERM errors of the bpf syscall.
func mapErr(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("not permitted (needs root with CAP_BPF and CAP_NET_ADMIN): %v: %w", err, fi.EPERM)
	}
	return err
}
