package xdp

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestDispatcherConfig loads libxdp's dispatcher the way Attach does and
// reads its configuration back from the kernel the way libxdp does
// (check_dispatcher_version): one read-only map of one 124-byte value with
// the magic, version, program count, chain call actions (with the
// dispatcher's own return value) and run priorities in run order. It
// needs no freplace support, so it runs where the dispatcher itself
// cannot be used.
func TestDispatcherConfig(t *testing.T) {
	testenv.RequirePriv(t)
	if _, err := findDispatcherObject(); err != nil {
		t.Skip(err)
	}
	if binary.Size(dispatcherConfig{}) != dispatcherConfigSize {
		t.Fatalf("dispatcherConfig is %d bytes, libxdp's struct %d", binary.Size(dispatcherConfig{}), dispatcherConfigSize)
	}
	comps := []*component{
		{name: ProgramName, runPrio: DefaultRunPriority, chain: 1 << xdpPass},
		{name: "xdpfilt_dny_udp", runPrio: 10, chain: 1 << xdpPass},
		{name: "aaa", runPrio: DefaultRunPriority, chain: 1<<xdpPass | 1<<1},
	}
	sortComponents(comps)
	if comps[0].name != "xdpfilt_dny_udp" || comps[1].name != "aaa" || comps[2].name != ProgramName {
		t.Fatalf("run order %s, %s, %s: want priority first, then name", comps[0].name, comps[1].name, comps[2].name)
	}
	prog, err := loadDispatcher(comps)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != dispatcherProgName {
		t.Fatalf("kernel name %q, libxdp looks for %q", info.Name, dispatcherProgName)
	}
	ids, _ := info.MapIDs()
	if len(ids) != 1 {
		t.Fatalf("%d maps, libxdp wants exactly one", len(ids))
	}
	m, err := ebpf.NewMapFromID(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	minfo, err := m.Info()
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	const bpfFRdonlyProg = 1 << 7
	if minfo.Flags&bpfFRdonlyProg == 0 {
		t.Fatalf("config map flags %#x lack BPF_F_RDONLY_PROG, which libxdp checks", minfo.Flags)
	}
	cfg, err := readDispatcherConfig(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Magic != dispatcherMagic || cfg.Version != dispatcherVersion || cfg.NumProgsEnabled != 3 || cfg.IsXDPFrags != 0 {
		t.Fatalf("config header %+v", cfg)
	}
	for i, c := range comps {
		if cfg.RunPrios[i] != c.runPrio || cfg.ChainCallActions[i] != c.chain|1<<dispatcherRetval || cfg.ProgramFlags[i] != 0 {
			t.Fatalf("slot %d: prio %d chain %#x flags %#x, want %s's", i, cfg.RunPrios[i], cfg.ChainCallActions[i], cfg.ProgramFlags[i], c.name)
		}
	}
	// readDispatcher recognises it as a dispatcher, with no components
	// pinned: it has none to read.
	d, err := readDispatcher(mustID(t, prog), 1, ModeGeneric)
	if err == nil && d != nil {
		d.close()
		t.Fatal("a dispatcher without its pins read as complete")
	}
}

func mustID(t *testing.T, p *ebpf.Program) ebpf.ProgramID {
	t.Helper()
	id := progIDOf(p)
	if id == 0 {
		t.Fatal("no program id")
	}
	return id
}
