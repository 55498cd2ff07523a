package xdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/bpffs"
)

// xdpfab as one program among others (libxdp.go has the protocol).
//
// With Options.MultiProg, or whenever the interface already runs a libxdp
// dispatcher (xdp-loader, xdp-filter, libxdp's AF_XDP programs), Attach
// loads xdpfab's program as a component of that dispatcher instead of
// attaching it alone: a new dispatcher with the old components plus
// xdpfab's replaces the old one atomically, and `xdp-loader status` lists
// xdpfab_xdp beside the others. xdpfab's run priority is
// Options.RunPriority (libxdp's default 50; lower runs first) and its
// chain call action XDP_PASS: what it does not take (other ports, other
// traffic) goes on to the next program, what it takes (redirected to an
// AF_XDP socket, dropped for a strict port) ends the chain there. The
// AF_XDP redirect works from a component (bpf_redirect_map sets the
// per-CPU redirect target, the dispatcher returns XDP_REDIRECT), and so
// does the metadata: the component runs on the same xdp_buff, so the
// bpf_xdp_adjust_meta of xdpfab's program is what the socket sees,
// provided no program after it in the chain adjusts the metadata of a
// packet xdpfab passed (xdpfab never passes one it redirected). A program
// before xdpfab that adds metadata of its own would have it overwritten
// in front of xdpfab's (xdpfab always writes its whole struct xdp_meta).
//
// Pins: xdpfab's pin directory holds the maps and the component program,
// but no link: the freplace link belongs to the dispatcher and is pinned
// in libxdp's dispatch-IFINDEX-DID as progN-link; a libxdp tool that
// rebuilds the dispatcher (to add or remove its own program) re-links
// xdpfab's component and moves those pins, and xdpfab's stay valid. The
// attachment is live while the dispatcher on the interface lists
// xdpfab's program. Detach removes only xdpfab's component (the
// dispatcher goes with its last component) and then xdpfab's pins and
// owner records, as for a lone attachment.

// isMultiProg reports whether dir holds a component attachment's pins (a
// program and no link).
func isMultiProg(dir string) bool {
	if _, err := os.Lstat(filepath.Join(dir, pinLink)); err == nil {
		return false
	}
	_, err := os.Lstat(filepath.Join(dir, pinProg))
	return err == nil
}

// inspectMultiPins is inspectPins for a component attachment: live when
// the dispatcher on this namespace's ifindex lists the pinned program,
// elsewhere when another dispatcher does, defunct when none does.
func inspectMultiPins(dir string, ifindex int) (pinState, error) {
	p, err := ebpf.LoadPinnedProgram(filepath.Join(dir, pinProg), nil)
	if errors.Is(err, os.ErrNotExist) {
		return pinsNone, nil
	}
	if err != nil {
		return pinsNone, fmt.Errorf("open pinned program in %s: %w", dir, mapErr(err))
	}
	ours := progIDOf(p)
	p.Close()
	if nl, err := netlink.LinkByIndex(ifindex); err == nil && nl.Attrs().Xdp != nil && nl.Attrs().Xdp.ProgId != 0 {
		if dispatchHolds(dispatchDir(ifindex, ebpf.ProgramID(nl.Attrs().Xdp.ProgId)), ours) {
			return pinsLive, nil
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(libxdpDir(), "dispatch-*"))
	for _, d := range dirs {
		if dispatchHolds(d, ours) {
			return pinsElsewhere, nil
		}
	}
	return pinsDefunct, nil
}

// dispatchHolds reports whether the dispatcher pins in dir include program id.
func dispatchHolds(dir string, id ebpf.ProgramID) bool {
	pins, _ := filepath.Glob(filepath.Join(dir, "prog*-prog"))
	for _, pin := range pins {
		p, err := ebpf.LoadPinnedProgram(pin, nil)
		if err != nil {
			continue
		}
		got := progIDOf(p)
		p.Close()
		if got == id {
			return true
		}
	}
	return false
}

// attachMulti attaches xdpfab's program to nl as a component of a libxdp
// dispatcher: joining the one attached there, or making one. The pin
// lock is held.
func attachMulti(ns NetnsID, iface string, nl netlink.Link, opts Options) (_ *Attachment, err error) {
	unlock, err := lockLibxdp()
	if err != nil {
		return nil, fmt.Errorf("xdp: attach %s: %w", iface, err)
	}
	defer unlock()
	ifindex := nl.Attrs().Index
	var old *dispatcher
	if fresh, err := netlink.LinkByIndex(ifindex); err == nil && fresh.Attrs().Xdp != nil && fresh.Attrs().Xdp.ProgId != 0 {
		x := fresh.Attrs().Xdp
		if old, err = readDispatcher(ebpf.ProgramID(x.ProgId), ifindex, modeOf(x.AttachMode)); err != nil {
			return nil, fmt.Errorf("xdp: attach %s: %w", iface, err)
		}
		if old == nil {
			return nil, checkOtherProgram(iface, nl)
		}
		defer old.close()
		if opts.Mode != ModeAuto && opts.Mode != old.mode {
			return nil, fmt.Errorf("xdp: attach %s: the libxdp dispatcher runs in %v mode, not %v: %w", iface, old.mode, opts.Mode, fi.EBUSY)
		}
	}

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
	loaded := false
	defer func() {
		if err != nil && loaded {
			objs.Close()
		}
	}()
	load := func(target *ebpf.Program, fn string) (*ebpf.Program, error) {
		ps := spec.Programs[bpf.XdpfabProgXdpfabXdp]
		ps.Type, ps.AttachType, ps.AttachTarget, ps.AttachTo = ebpf.Extension, ebpf.AttachNone, target, fn
		if err := spec.LoadAndAssign(&objs, copts); err != nil {
			if errors.Is(err, unix.EPERM) {
				// Root, yet refused: the kernel (lockdown, a BPF LSM
				// policy) does not allow freplace programs, and libxdp
				// falls back to attaching one program alone here too.
				return nil, fmt.Errorf("the kernel refuses to load xdpfab's program as an freplace extension (BPF_PROG_TYPE_EXT), so no libxdp dispatcher can run here (libxdp falls back to a single program too); attach without --multiprog: %v: %w",
					err, fi.EOPNOTSUPP)
			}
			return nil, fmt.Errorf("load program as a dispatcher component: %w", loadErr(err))
		}
		loaded = true
		return objs.XdpfabXdp, nil
	}
	prio := opts.RunPriority
	if prio == 0 {
		prio = DefaultRunPriority
	}
	comps := []*component{{ours: true, name: ProgramName, runPrio: prio, chain: 1 << xdpPass}}
	if old != nil {
		if len(old.comps) >= dispatcherMaxProgs {
			return nil, fmt.Errorf("xdp: attach %s: the libxdp dispatcher already runs %d programs: %w", iface, len(old.comps), fi.E2BIG)
		}
		// Shared with old: old.close releases them.
		comps = append(comps, old.comps...)
	}
	b, err := newDispatcher(ifindex, opts.Mode, comps, load)
	if err != nil {
		return nil, fmt.Errorf("xdp: attach %s: %w", iface, err)
	}
	defer func() {
		// The component handles are old's or objs': not b's to close.
		for _, c := range b.comps {
			c.prog = nil
		}
		b.close()
	}()
	// xdpfab's pins first, then libxdp's, then the switch: a crash on
	// the way leaves pins of nothing attached, which the next Attach or
	// Detach sweeps (pinsDefunct), never a running program without pins.
	dir, err := bpffs.Ensure(pinDir(ns, ifindex))
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
	if err := b.pin(); err != nil {
		unpinDispatch(b.pinned)
		return nil, fmt.Errorf("xdp: attach %s: %w", iface, err)
	}
	if _, err := b.attach(old); err != nil {
		unpinDispatch(b.pinned)
		return nil, fmt.Errorf("xdp: attach %s: attach libxdp dispatcher: %w", iface, attachErr(err))
	}
	if old != nil {
		unpinDispatch(dispatchDir(ifindex, old.id))
	}
	objs.XskProbe.Close()
	a := &Attachment{
		Iface: iface, Ifindex: ifindex, Netns: ns, PinDir: dir, Program: objs.XdpfabXdp,
		AVMap: objs.AvMap, MRMap: objs.MrMap, PortMap: objs.Ports, XSKMap: objs.Xsks, CounterMap: objs.Counters,
		LocalMap: objs.LocalAddrs, KRRegions: objs.KrRegions, KRMem: objs.KrMem, KTarget: objs.Ktarget,
	}
	a.progID = progIDOf(a.Program)
	return a, nil
}

// attachErr classifies a netlink attach failure.
func attachErr(err error) error {
	switch {
	case errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EBUSY):
		return fmt.Errorf("the interface's XDP program changed meanwhile, or one is attached through a bpf_link: %v: %w", err, fi.EBUSY)
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("not permitted: %v: %w", err, fi.EPERM)
	case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL):
		return fmt.Errorf("the driver cannot attach XDP in this mode: %v: %w", err, fi.EOPNOTSUPP)
	}
	return err
}

// detachMulti removes xdpfab's component from the dispatcher on nl: the
// dispatcher is rebuilt without it, or detached if it was the last. The
// pin lock is held; xdpfab's own pins are the caller's.
func detachMulti(iface string, nl netlink.Link, dir string) error {
	unlock, err := lockLibxdp()
	if err != nil {
		return fmt.Errorf("xdp: detach %s: %w", iface, err)
	}
	defer unlock()
	p, err := ebpf.LoadPinnedProgram(filepath.Join(dir, pinProg), nil)
	if err != nil {
		return fmt.Errorf("xdp: detach %s: pinned program: %w", iface, mapErr(err))
	}
	ours := progIDOf(p)
	p.Close()
	fresh, err := netlink.LinkByIndex(nl.Attrs().Index)
	if err != nil || fresh.Attrs().Xdp == nil || fresh.Attrs().Xdp.ProgId == 0 {
		return nil // nothing attached any more
	}
	x := fresh.Attrs().Xdp
	old, err := readDispatcher(ebpf.ProgramID(x.ProgId), nl.Attrs().Index, modeOf(x.AttachMode))
	if err != nil || old == nil {
		return err
	}
	defer old.close()
	var rest []*component
	for _, c := range old.comps {
		if c.id != ours {
			rest = append(rest, c)
		}
	}
	if len(rest) == len(old.comps) {
		return nil // not (any more) in this dispatcher
	}
	if len(rest) == 0 {
		if err := detachDispatcher(old); err != nil {
			return fmt.Errorf("xdp: detach %s: detach libxdp dispatcher: %w", iface, attachErr(err))
		}
		unpinDispatch(dispatchDir(old.ifindex, old.id))
		return nil
	}
	b, err := newDispatcher(old.ifindex, old.mode, rest, nil)
	if err != nil {
		return fmt.Errorf("xdp: detach %s: %w", iface, err)
	}
	defer func() {
		for _, c := range b.comps {
			c.prog = nil // old's
		}
		b.close()
	}()
	if err := b.pin(); err != nil {
		unpinDispatch(b.pinned)
		return fmt.Errorf("xdp: detach %s: %w", iface, err)
	}
	if _, err := b.attach(old); err != nil {
		unpinDispatch(b.pinned)
		return fmt.Errorf("xdp: detach %s: replace libxdp dispatcher: %w", iface, attachErr(err))
	}
	unpinDispatch(dispatchDir(old.ifindex, old.id))
	return nil
}

// DispatcherStatus describes the libxdp dispatcher xdpfab runs in.
type DispatcherStatus struct {
	ProgramID uint32            `json:"program_id"`
	Slot      int               `json:"slot"` // xdpfab's component: progN
	Programs  []ComponentStatus `json:"programs"`
}

// ComponentStatus is one program of a dispatcher, in run order.
type ComponentStatus struct {
	Name             string   `json:"name"`
	ProgramID        uint32   `json:"program_id"`
	RunPriority      uint32   `json:"run_priority"`
	ChainCallActions []string `json:"chain_call_actions"`
}

var xdpActionNames = []string{"XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT"}

// dispatcherStatus reads the dispatcher a's program is a component of,
// nil if it is not one.
func (a *Attachment) dispatcherStatus() *DispatcherStatus {
	if !isMultiProg(a.PinDir) {
		return nil
	}
	nl, err := netlink.LinkByIndex(a.Ifindex)
	if err != nil || nl.Attrs().Xdp == nil || nl.Attrs().Xdp.ProgId == 0 {
		return nil
	}
	x := nl.Attrs().Xdp
	unlock, err := lockLibxdp()
	if err != nil {
		return nil
	}
	defer unlock()
	d, err := readDispatcher(ebpf.ProgramID(x.ProgId), a.Ifindex, modeOf(x.AttachMode))
	if err != nil || d == nil {
		return nil
	}
	defer d.close()
	st := &DispatcherStatus{ProgramID: uint32(d.id), Slot: -1, Programs: []ComponentStatus{}}
	for i, c := range d.comps {
		cs := ComponentStatus{Name: c.name, ProgramID: uint32(c.id), RunPriority: c.runPrio, ChainCallActions: []string{}}
		for act, n := range xdpActionNames {
			if c.chain&(1<<act) != 0 {
				cs.ChainCallActions = append(cs.ChainCallActions, n)
			}
		}
		if c.id == a.progID {
			st.Slot = i
		}
		st.Programs = append(st.Programs, cs)
	}
	return st
}
