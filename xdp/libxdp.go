package xdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/bpffs"
)

// libxdp's multi-program dispatcher, as lib/libxdp/protocol.org of
// xdp-tools describes it (version 2, libxdp 1.3 and later). A dispatcher
// is an XDP program calling up to ten stub functions prog0..prog9 in turn;
// each stub is replaced by a component program (an freplace extension)
// and a component's return value either ends the chain or, when its bit
// is set in the component's chain_call_actions, continues it. The
// dispatcher's configuration is its .rodata (xdp_dispatcher_config):
// magic, version, the number of components and, per component, its chain
// call actions, run priority and program flags. Components run in order
// of run priority, ties broken by name (cmp_xdp_programs). A dispatcher
// with a single component has it replace xdp_dispatcher itself.
//
// State lives in bpffs under /sys/fs/bpf/xdp (LIBXDP_BPFFS overrides
// /sys/fs/bpf): dispatch-IFINDEX-DID/progN-prog and progN-link pin each
// component and its freplace link, DID being the dispatcher's program id;
// the dispatcher itself is attached to the interface through netlink.
// Changes happen under an flock of that directory: a new dispatcher with
// the new set of components is built, its components linked and pinned,
// it replaces the old one atomically (XDP_FLAGS_REPLACE with the old
// program as the expected one), and the old one's pins are removed.
//
// xdpfab builds its dispatchers from libxdp's own xdp-dispatcher.o, found
// where libxdp looks for it ($LIBXDP_OBJECT_PATH, then the system's BPF
// object directories): the dispatcher is then the very one the host's
// libxdp builds and recognises, of the version it speaks.

const (
	dispatcherMagic    = 236
	dispatcherVersion  = 2
	dispatcherRetval   = 31
	dispatcherMaxProgs = 10
	dispatcherProgName = "xdp_dispatcher"
	dispatcherObject   = "xdp-dispatcher.o"
	// DefaultRunPriority is libxdp's default run priority, xdpfab's unless
	// Options.RunPriority says otherwise.
	DefaultRunPriority = 50
	xdpPass            = 2 // XDP_PASS
)

// dispatcherConfig is struct xdp_dispatcher_config (version 2).
type dispatcherConfig struct {
	Magic            uint8
	Version          uint8
	NumProgsEnabled  uint8
	IsXDPFrags       uint8
	ChainCallActions [dispatcherMaxProgs]uint32
	RunPrios         [dispatcherMaxProgs]uint32
	ProgramFlags     [dispatcherMaxProgs]uint32
}

const dispatcherConfigSize = 4 + 3*4*dispatcherMaxProgs

// component is one program of a dispatcher.
type component struct {
	prog     *ebpf.Program
	id       ebpf.ProgramID
	name     string
	tag      string
	runPrio  uint32
	chain    uint32 // chain call actions, without the dispatcher's retval bit
	flags    uint32 // program_flags (BPF_F_XDP_HAS_FRAGS)
	loadTime uint64
	// ours, for xdpfab's program being added: loaded for the first
	// dispatcher it joins (prog is nil until then).
	ours bool
}

// dispatcher is a libxdp dispatcher attached to an interface.
type dispatcher struct {
	prog    *ebpf.Program
	id      ebpf.ProgramID
	ifindex int
	mode    Mode
	comps   []*component
}

func (d *dispatcher) close() {
	if d == nil {
		return
	}
	if d.prog != nil {
		d.prog.Close()
	}
	for _, c := range d.comps {
		if c.prog != nil {
			c.prog.Close()
		}
	}
}

// libxdpDir is libxdp's state directory in bpffs.
func libxdpDir() string {
	root := bpffs.Root
	if v := os.Getenv("LIBXDP_BPFFS"); v != "" {
		root = v
	}
	return filepath.Join(root, "xdp")
}

func dispatchDir(ifindex int, id ebpf.ProgramID) string {
	return filepath.Join(libxdpDir(), fmt.Sprintf("dispatch-%d-%d", ifindex, id))
}

// lockLibxdp takes libxdp's lock (an flock of its bpffs directory,
// created as libxdp creates it).
func lockLibxdp() (unlock func(), err error) {
	dir := libxdpDir()
	if _, err := bpffs.Ensure(filepath.Dir(dir)); err != nil && !bpffs.IsMounted() {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("libxdp state directory: %w", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("libxdp lock: %w", err)
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("libxdp lock: %w", err)
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// findDispatcherObject returns the path of libxdp's xdp-dispatcher.o.
func findDispatcherObject() (string, error) {
	var dirs []string
	if v := os.Getenv("LIBXDP_OBJECT_PATH"); v != "" {
		dirs = append(dirs, strings.Split(v, ":")...)
	}
	arch := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu",
		"s390x": "s390x-linux-gnu", "riscv64": "riscv64-linux-gnu", "386": "i386-linux-gnu"}[runtime.GOARCH]
	dirs = append(dirs, "/usr/lib/"+arch+"/bpf", "/usr/lib64/bpf", "/usr/lib/bpf", "/usr/local/lib/bpf", "/usr/local/lib/"+arch+"/bpf", "/usr/local/lib64/bpf")
	for _, d := range dirs {
		p := filepath.Join(d, dispatcherObject)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("libxdp's %s not found in %s (install libxdp, e.g. Debian's xdp-tools, or set LIBXDP_OBJECT_PATH): %w",
		dispatcherObject, strings.Join(dirs, ", "), fi.EOPNOTSUPP)
}

// readDispatcher reads the libxdp dispatcher with program id on ifindex:
// its configuration and its components from their pins. It returns nil
// and no error when the program is not a dispatcher. libxdp's lock is
// held.
func readDispatcher(id ebpf.ProgramID, ifindex int, mode Mode) (*dispatcher, error) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, mapErr(err)
	}
	info, err := p.Info()
	if err != nil || info.Name != dispatcherProgName {
		p.Close()
		return nil, err
	}
	mapIDs, _ := info.MapIDs()
	if len(mapIDs) != 1 {
		p.Close()
		return nil, nil
	}
	cfg, err := readDispatcherConfig(mapIDs[0])
	if err != nil {
		p.Close()
		return nil, err
	}
	if cfg.Magic != dispatcherMagic || cfg.Version != dispatcherVersion {
		p.Close()
		return nil, fmt.Errorf("libxdp dispatcher (id %d) has version %d, xdpfab speaks %d: unload its programs first: %w",
			id, cfg.Version, dispatcherVersion, fi.EBUSY)
	}
	d := &dispatcher{prog: p, id: id, ifindex: ifindex, mode: mode}
	dir := dispatchDir(ifindex, id)
	for i := 0; i < int(cfg.NumProgsEnabled) && i < dispatcherMaxProgs; i++ {
		cp, err := ebpf.LoadPinnedProgram(filepath.Join(dir, fmt.Sprintf("prog%d-prog", i)), nil)
		if err != nil {
			d.close()
			return nil, fmt.Errorf("libxdp dispatcher %s: component %d: %w", dir, i, mapErr(err))
		}
		c := &component{prog: cp, runPrio: cfg.RunPrios[i], chain: cfg.ChainCallActions[i] &^ (1 << dispatcherRetval),
			flags: cfg.ProgramFlags[i]}
		if ci, err := cp.Info(); err == nil {
			c.id, _ = ci.ID()
			c.name, c.tag = ci.Name, ci.Tag
		}
		d.comps = append(d.comps, c)
	}
	return d, nil
}

func readDispatcherConfig(id ebpf.MapID) (dispatcherConfig, error) {
	var cfg dispatcherConfig
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return cfg, mapErr(err)
	}
	defer m.Close()
	if m.KeySize() != 4 || m.ValueSize() != dispatcherConfigSize || m.MaxEntries() != 1 {
		return cfg, fmt.Errorf("libxdp dispatcher config map %d: unexpected layout: %w", id, fi.EBUSY)
	}
	var buf []byte
	if err := m.Lookup(uint32(0), &buf); err != nil {
		return cfg, mapErr(err)
	}
	if err := binary.Read(bytes.NewReader(buf), binary.NativeEndian, &cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// sortComponents orders components as libxdp's cmp_xdp_programs does: by
// run priority, then name, loaded before not loaded, then tag.
func sortComponents(cs []*component) {
	slices.SortStableFunc(cs, func(a, b *component) int {
		if a.runPrio != b.runPrio {
			if a.runPrio < b.runPrio {
				return -1
			}
			return 1
		}
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if (a.prog != nil) != (b.prog != nil) {
			if a.prog != nil {
				return -1
			}
			return 1
		}
		return strings.Compare(a.tag, b.tag)
	})
}

// newDispatcher loads a dispatcher for comps (sorted here) and links each
// component into it. load loads xdpfab's component (ours) as an
// extension of the given dispatcher function. The result is neither
// pinned nor attached.
func newDispatcher(ifindex int, mode Mode, comps []*component, load func(target *ebpf.Program, fn string) (*ebpf.Program, error)) (_ *built, err error) {
	if len(comps) == 0 || len(comps) > dispatcherMaxProgs {
		return nil, fmt.Errorf("libxdp dispatcher: %d programs (1..%d): %w", len(comps), dispatcherMaxProgs, fi.E2BIG)
	}
	sortComponents(comps)
	prog, err := loadDispatcher(comps)
	if err != nil {
		return nil, err
	}
	b := &built{prog: prog, ifindex: ifindex, mode: mode, comps: comps}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if info, err := b.prog.Info(); err == nil {
		b.id, _ = info.ID()
	}
	for i, c := range comps {
		fn := fmt.Sprintf("prog%d", i)
		if len(comps) == 1 {
			fn = dispatcherProgName
		}
		if c.prog == nil {
			if c.prog, err = load(b.prog, fn); err != nil {
				return nil, err
			}
			if ci, err := c.prog.Info(); err == nil {
				c.id, _ = ci.ID()
				c.name, c.tag = ci.Name, ci.Tag
			}
		}
		l, err := link.AttachFreplace(b.prog, fn, c.prog)
		if err != nil {
			return nil, fmt.Errorf("libxdp dispatcher: link %s (id %d) as %s: %w", c.name, c.id, fn, mapErr(err))
		}
		b.links = append(b.links, l)
	}
	return b, nil
}

// loadDispatcher loads libxdp's dispatcher configured for comps, in
// order.
func loadDispatcher(comps []*component) (*ebpf.Program, error) {
	path, err := findDispatcherObject()
	if err != nil {
		return nil, err
	}
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, fmt.Errorf("libxdp dispatcher %s: %w", path, err)
	}
	cfg := dispatcherConfig{Magic: dispatcherMagic, Version: dispatcherVersion, NumProgsEnabled: uint8(len(comps))}
	for i, c := range comps {
		cfg.ChainCallActions[i] = c.chain | 1<<dispatcherRetval
		cfg.RunPrios[i] = c.runPrio
		cfg.ProgramFlags[i] = c.flags
	}
	// Frags only when every component has them: xdpfab's does not.
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.NativeEndian, &cfg)
	// conf is static, so no ebpf.VariableSpec: it is the whole .rodata.
	rodata, ok := spec.Maps[".rodata"]
	if !ok || rodata.ValueSize != dispatcherConfigSize || rodata.MaxEntries != 1 {
		return nil, fmt.Errorf("libxdp dispatcher %s: no %d-byte configuration in .rodata: %w", path, dispatcherConfigSize, fi.EOPNOTSUPP)
	}
	rodata.Contents = []ebpf.MapKV{{Key: uint32(0), Value: buf.Bytes()}}
	for name := range spec.Programs {
		if name != dispatcherProgName {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("libxdp dispatcher: load: %w", loadErr(err))
	}
	defer coll.Close()
	return coll.DetachProgram(dispatcherProgName), nil
}

// built is a dispatcher newDispatcher made, with its freplace links.
type built struct {
	prog    *ebpf.Program
	id      ebpf.ProgramID
	ifindex int
	mode    Mode
	comps   []*component
	links   []link.Link
	pinned  string
}

func (b *built) close() {
	for _, l := range b.links {
		l.Close()
	}
	if b.prog != nil {
		b.prog.Close()
	}
}

// pin pins the components and their links as libxdp does.
func (b *built) pin() error {
	dir := dispatchDir(b.ifindex, b.id)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("libxdp pins: %w", err)
	}
	b.pinned = dir
	for i, c := range b.comps {
		if err := b.links[i].Pin(filepath.Join(dir, fmt.Sprintf("prog%d-link", i))); err != nil {
			return fmt.Errorf("libxdp pins: %w", err)
		}
		// A handle with no pin of its own, so pinning adds a pin and
		// moves none (the component's program may be pinned elsewhere).
		h, err := ebpf.NewProgramFromID(c.id)
		if err != nil {
			return fmt.Errorf("libxdp pins: %w", mapErr(err))
		}
		err = h.Pin(filepath.Join(dir, fmt.Sprintf("prog%d-prog", i)))
		h.Close()
		if err != nil {
			return fmt.Errorf("libxdp pins: %w", err)
		}
	}
	return nil
}

// unpinDispatch removes a dispatcher's pins (its links go with their last
// reference).
func unpinDispatch(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "prog") && (strings.HasSuffix(e.Name(), "-link") || strings.HasSuffix(e.Name(), "-prog")) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

// netlink XDP attach flags.
const (
	xdpFlagsUpdateIfNoExist = 1 << 0
	xdpFlagsSKBMode         = 1 << 1
	xdpFlagsDrvMode         = 1 << 2
	xdpFlagsReplace         = 1 << 4
)

// attach puts b on the interface in place of old (nil: nothing may be
// attached), in old's mode or else b.mode (ModeAuto: native, then
// generic). It reports the mode used.
func (b *built) attach(old *dispatcher) (Mode, error) {
	try := []Mode{b.mode}
	if old != nil {
		try = []Mode{old.mode}
	} else if b.mode == ModeAuto {
		try = []Mode{ModeNative, ModeGeneric}
	}
	var errs []error
	for _, m := range try {
		flags := uint32(xdpFlagsDrvMode)
		if m == ModeGeneric {
			flags = xdpFlagsSKBMode
		}
		expected := -1
		if old != nil {
			flags |= xdpFlagsReplace
			expected = old.prog.FD()
		} else {
			flags |= xdpFlagsUpdateIfNoExist
		}
		err := setXDP(b.ifindex, b.prog.FD(), expected, flags)
		if err == nil {
			return m, nil
		}
		errs = append(errs, fmt.Errorf("%v: %w", m, err))
	}
	return ModeAuto, errors.Join(errs...)
}

// detachDispatcher removes d from its interface, only if it is still the
// program attached there.
func detachDispatcher(d *dispatcher) error {
	flags := uint32(xdpFlagsReplace | xdpFlagsDrvMode)
	if d.mode == ModeGeneric {
		flags = xdpFlagsReplace | xdpFlagsSKBMode
	}
	return setXDP(d.ifindex, -1, d.prog.FD(), flags)
}
