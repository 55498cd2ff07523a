package mr_test

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// mr_vet's verdicts (MR_VET_* of bpf/xdpfab.h).
const (
	vetOK       = 0
	vetNoKey    = 1
	vetRange    = 2
	vetAccess   = 3
	vetDisabled = 4
	vetBusy     = 5
)

// vetProgs caches loadVet's programs by map: loading one takes a while.
var vetProgs sync.Map // *ebpf.Map -> *ebpf.Program

// loadVet loads the object's mr_vet program reading m as its mr_map.
func loadVet(tb testing.TB, m *ebpf.Map) *ebpf.Program {
	tb.Helper()
	if p, ok := vetProgs.Load(m); ok {
		return p.(*ebpf.Program)
	}
	spec, err := bpf.LoadXdpfab()
	require.NoError(tb, err)
	spec.Maps[bpf.XdpfabMapMrMap].MaxEntries = m.MaxEntries()
	var objs struct {
		Prog *ebpf.Program `ebpf:"mr_vet"`
	}
	require.NoError(tb, spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{bpf.XdpfabMapMrMap: m}}))
	vetProgs.Store(m, objs.Prog)
	tb.Cleanup(func() { vetProgs.Delete(m); objs.Prog.Close() })
	return objs.Prog
}

// vetter runs one program on requests without allocating per run.
type vetter struct {
	prog *ebpf.Program
	in   []byte
	out  []byte
	opts ebpf.RunOptions
}

func newVetter(p *ebpf.Program) *vetter {
	v := &vetter{prog: p, in: make([]byte, 64), out: make([]byte, 64)}
	v.opts = ebpf.RunOptions{Data: v.in, DataOut: v.out}
	return v
}

func (v *vetter) run(tb testing.TB, req bpf.XdpfabMrVetReq) (bpf.XdpfabMrVetAns, uint32) {
	binary.LittleEndian.PutUint32(v.in[0:], req.DomainId)
	binary.LittleEndian.PutUint32(v.in[4:], req.Access)
	binary.LittleEndian.PutUint64(v.in[8:], req.Key)
	binary.LittleEndian.PutUint64(v.in[16:], req.Addr)
	binary.LittleEndian.PutUint64(v.in[24:], req.Len)
	v.opts.DataOut = v.out
	act, err := v.prog.Run(&v.opts)
	if err != nil {
		tb.Fatalf("mr_vet: %v", err)
	}
	o := v.opts.DataOut
	ans := bpf.XdpfabMrVetAns{Verdict: binary.LittleEndian.Uint32(o[0:])}
	ans.Value = bpf.XdpfabMrValue{
		Base:     binary.LittleEndian.Uint64(o[8:]),
		Len:      binary.LittleEndian.Uint64(o[16:]),
		Access:   binary.LittleEndian.Uint32(o[24:]),
		RegionId: binary.LittleEndian.Uint32(o[28:]),
		Flags:    binary.LittleEndian.Uint32(o[32:]),
		Pad:      binary.LittleEndian.Uint32(o[36:]),
	}
	return ans, act
}

func vet(tb testing.TB, p *ebpf.Program, req bpf.XdpfabMrVetReq) bpf.XdpfabMrVetAns {
	ans, _ := newVetter(p).run(tb, req)
	return ans
}

// TestVetConcurrentRegClose runs mr_vet on requests in a loop while
// another goroutine registers and closes regions under the same keys:
// every entry XDP answers with is one whole registration (a half-written
// slot would mix the base, length and access of two), the verdict is the
// one that entry gives, and a region whose Close returned before the run
// began is never found.
func TestVetConcurrentRegClose(t *testing.T) {
	tab, m := newBPFTable(t, mr.ModeVirtAddr, 5, 0)
	v := newVetter(loadVet(t, m))
	const gens = 8
	type reg struct {
		buf    []byte
		access fi.Flags
	}
	regs := make([]reg, gens)
	byBase := map[uint64]int{}
	for g := range regs {
		regs[g] = reg{make([]byte, 64*(g+1)), fi.REMOTE_READ}
		if g%2 == 1 {
			regs[g].access |= fi.REMOTE_WRITE
		}
		byBase[addrOfBuf(regs[g].buf)] = g
	}
	keys := []uint64{0x1000, 0x2000}
	var lastClosed [2]atomic.Uint32 // region id of the key's last closed region
	stop := make(chan struct{})
	var writers sync.WaitGroup
	for ki, key := range keys {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for g := 0; ; g++ {
				select {
				case <-stop:
					return
				default:
				}
				r := regs[(g+ki)%gens]
				h, err := tab.Reg(r.buf, r.access, 0, key, 0, nil)
				if err != nil {
					t.Error(err)
					return
				}
				id := h.RegionID()
				if err := h.Close(); err != nil {
					t.Error(err)
					return
				}
				lastClosed[ki].Store(id)
			}
		}()
	}
	var found, missing int
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 200000 && time.Now().Before(deadline); i++ {
		ki := i % len(keys)
		g := i % gens
		closed := lastClosed[ki].Load()
		ans, act := v.run(t, bpf.XdpfabMrVetReq{DomainId: 5, Key: keys[ki], Access: uint32(fi.REMOTE_WRITE),
			Addr: addrOfBuf(regs[g].buf), Len: 8})
		switch ans.Verdict {
		case vetNoKey:
			missing++
			continue
		case vetBusy:
			continue // a writer held the slot on every try: refused, not misread
		}
		found++
		val := ans.Value
		fg, ok := byBase[val.Base]
		if !ok || val.Len != uint64(len(regs[fg].buf)) || val.Access != uint32(regs[fg].access) {
			t.Fatalf("run %d: XDP read a half-written entry: %+v", i, val)
		}
		if val.RegionId <= closed {
			t.Fatalf("run %d: region %d found after its Close returned (last closed %d)", i, val.RegionId, closed)
		}
		want := uint32(vetOK)
		switch {
		case val.Flags&mr.RegionEnabled == 0:
			want = vetDisabled
		case fg != g:
			want = vetRange
		case regs[fg].access&fi.REMOTE_WRITE == 0:
			want = vetAccess
		}
		require.Equal(t, want, ans.Verdict, "verdict on %+v", val)
		require.Equal(t, want == vetOK, act == xdpPassAction)
	}
	close(stop)
	writers.Wait()
	t.Logf("%d runs found an entry, %d found none", found, missing)
	require.NotZero(t, found, "the test must see live entries")
	require.NotZero(t, missing, "and closed ones")
	for _, k := range keys {
		_, ok := kernelEntry(t, m, 5, k)
		require.False(t, ok, "every region closed: nothing left in the table")
	}
}

const xdpPassAction = 2 // XDP_PASS
