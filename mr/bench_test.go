package mr_test

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/epoch"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

func benchRegClose(b *testing.B, tab *mr.Table) {
	benchRegCloseEach(b, tab, func() {})
}

// benchRegCloseEach runs each before every registration.
func benchRegCloseEach(b *testing.B, tab *mr.Table, each func()) {
	buf := make([]byte, 4096)
	b.ReportAllocs()
	stop := testenv.CPUTimer(b)
	for b.Loop() {
		each()
		m, err := tab.Reg(buf, remoteBits, 0, unitKey, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Close(); err != nil {
			b.Fatal(err)
		}
	}
	stop()
}

// idleReaderDomain is an epoch domain as a domain's tables see it between
// received batches: one target poller registered, offline.
func idleReaderDomain(b *testing.B) *epoch.Domain {
	d := epoch.New()
	b.Cleanup(d.NewReader().Close)
	return d
}

// BenchmarkRegClose is fi_mr_reg + fi_close without a kernel map, as a
// domain registers: regions recycled, its target poller idle.
func BenchmarkRegClose(b *testing.B) {
	tab, err := mr.NewTable(mr.Config{Epochs: idleReaderDomain(b)})
	if err != nil {
		b.Fatal(err)
	}
	benchRegClose(b, tab)
}

// BenchmarkRegCloseFresh is BenchmarkRegClose without recycling: every
// registration allocates its region (what a Table without Epochs does).
func BenchmarkRegCloseFresh(b *testing.B) {
	tab, err := mr.NewTable(mr.Config{})
	if err != nil {
		b.Fatal(err)
	}
	benchRegClose(b, tab)
}

// BenchmarkRegCloseQuiescing is BenchmarkRegClose with the target poller
// online, passing a quiescent point before every registration (as a busy
// poller does per batch): each batch of closed regions waits out one
// grace period after it is stamped.
func BenchmarkRegCloseQuiescing(b *testing.B) {
	d := epoch.New()
	rd := d.NewReader()
	defer rd.Close()
	tab, err := mr.NewTable(mr.Config{Epochs: d})
	if err != nil {
		b.Fatal(err)
	}
	benchRegCloseEach(b, tab, rd.Quiesce)
	if st := tab.PoolStats(); st.Fresh > mr.RetireBatch+8 { // a batch waits for its stamp, then a grace period
		b.Fatalf("regions not recycled: %+v", st)
	}
}

// BenchmarkRegCloseBPF keeps the kernel's MR table (mr_map) in step
// synchronously, with plain stores into the mmapped table (privileged);
// regions recycled as in BenchmarkRegClose.
func BenchmarkRegCloseBPF(b *testing.B) {
	tab, _ := newBPFTable(b, 0, 1, 0)
	benchRegClose(b, tab)
}

// BenchmarkRegCloseBPFFresh is BenchmarkRegCloseBPF without recycling.
func BenchmarkRegCloseBPFFresh(b *testing.B) {
	tab, _ := newBPFTableConfig(b, mr.Config{DomainID: 1})
	benchRegClose(b, tab)
}

// BenchmarkRegCloseProvKey is the same with provider keys, no kernel map.
func BenchmarkRegCloseProvKey(b *testing.B) {
	tab, err := mr.NewTable(mr.Config{Mode: mr.ModeProvKey, Epochs: idleReaderDomain(b)})
	if err != nil {
		b.Fatal(err)
	}
	benchRegClose(b, tab)
}

// BenchmarkLookup is the target's per-request check among 10000 live
// keys: 64 bytes inside one buffer, or straddling two of an 8-buffer region
// (and then also listing the pieces).
func BenchmarkLookup(b *testing.B) {
	for _, c := range []struct {
		name   string
		mode   mr.Mode
		iov    int
		pieces bool
	}{
		{"offset-1iov", 0, 1, false},
		{"offset-8iov", 0, 8, false},
		{"offset-8iov-pieces", 0, 8, true},
		{"virtaddr-1iov", mr.ModeVirtAddr, 1, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			tab, err := mr.NewTable(mr.Config{Mode: c.mode})
			if err != nil {
				b.Fatal(err)
			}
			bufs := make([][]byte, c.iov)
			for i := range bufs {
				bufs[i] = make([]byte, 4096)
			}
			var base uint64
			for k := range uint64(10000) {
				m, err := tab.RegV(bufs, remoteBits, 0, k*0x9e37, 0, nil)
				if err != nil {
					b.Fatal(err)
				}
				base = m.Base()
			}
			key := uint64(9999 * 0x9e37)
			addr := base + 1024
			if c.iov > 1 {
				addr = base + 4096 - 32
			}
			var n uint64
			var pieces [mr.IOVLimit][]byte
			b.ReportAllocs()
			stop := testenv.CPUTimer(b)
			for b.Loop() {
				sp, err := tab.Lookup(key, addr, 64, fi.REMOTE_WRITE)
				if err != nil {
					b.Fatal(err)
				}
				n += sp.Len
				if c.pieces && len(sp.AppendBufs(pieces[:0])) != 2 {
					b.Fatal("want two pieces")
				}
			}
			stop()
		})
	}
}

// BenchmarkLookupParallel is Lookup from every P at once.
func BenchmarkLookupParallel(b *testing.B) {
	tab, err := mr.NewTable(mr.Config{})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 4096)
	if _, err := tab.Reg(buf, remoteBits, 0, 1, 0, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := tab.Lookup(1, 100, 8, fi.REMOTE_WRITE); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkLookupDenied is a refusal (unknown key).
func BenchmarkLookupDenied(b *testing.B) {
	tab, err := mr.NewTable(mr.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	stop := testenv.CPUTimer(b)
	for b.Loop() {
		if _, err := tab.Lookup(12345, 0, 8, fi.REMOTE_WRITE); err == nil {
			b.Fatal("admitted")
		}
	}
	stop()
}

// BenchmarkCheckLocal is the FI_MR_LOCAL descriptor check.
func BenchmarkCheckLocal(b *testing.B) {
	tab, err := mr.NewTable(mr.Config{Mode: mr.ModeLocal})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 4096)
	m, err := tab.Reg(buf, fi.SEND, 0, 1, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	d := m.Desc()
	b.ReportAllocs()
	stop := testenv.CPUTimer(b)
	for b.Loop() {
		if err := tab.CheckLocal(d, buf[100:200], fi.SEND); err != nil {
			b.Fatal(err)
		}
	}
	stop()
}

// BenchmarkKernelMapUpdateDelete is the syscall baseline: one
// bpf(BPF_MAP_UPDATE_ELEM) and one bpf(BPF_MAP_DELETE_ELEM) on a BPF hash
// map of mr_key -> mr_value, what keeping mr_map in step cost before it
// became a kernel table (privileged).
func BenchmarkKernelMapUpdateDelete(b *testing.B) {
	testenv.RequirePriv(b)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, Flags: unix.BPF_F_NO_PREALLOC, MaxEntries: 1 << 20,
		KeySize: uint32(binary.Size(bpf.XdpfabMrKey{})), ValueSize: uint32(binary.Size(bpf.XdpfabMrValue{}))})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	k := bpf.XdpfabMrKey{DomainId: 1, Key: unitKey}
	v := bpf.XdpfabMrValue{Len: 4096, Flags: mr.RegionEnabled}
	b.ReportAllocs()
	stop := testenv.CPUTimer(b)
	for b.Loop() {
		if err := m.Update(&k, &v, ebpf.UpdateAny); err != nil {
			b.Fatal(err)
		}
		if err := m.Delete(&k); err != nil {
			b.Fatal(err)
		}
	}
	stop()
}
