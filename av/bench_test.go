package av

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/ktable"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// TestConcurrent runs inserts, removes and both lookups from many
// goroutines (meant for -race), on a synchronous and an FI_EVENT AV, then
// checks the kernel copy.
func TestConcurrent(t *testing.T) {
	for _, flags := range []fi.Flags{0, fi.EVENT} {
		a, f := openTest(t, Attr{Type: TypeMap, Flags: flags | fi.SYMMETRIC})
		wait := func(int64) {}
		if flags&fi.EVENT != 0 {
			w, stop := newDrainedEQ(t, a)
			defer stop()
			wait = w
		}
		const workers, per = 8, 400
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := make([]netip.AddrPort, per)
				for i := range mine {
					mine[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(w), byte(i >> 8), byte(i)}), 9000)
				}
				for lo := 0; lo < per; lo += 50 {
					out := fiAddrs(50)
					more := fi.Flags(0)
					if lo%100 == 0 {
						more = fi.MORE
					}
					_, err := a.InsertAddrPort(mine[lo:lo+50], out, more, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if flags&fi.EVENT == 0 {
						if err := a.Remove(out[:10], 0); err != nil {
							t.Error(err)
							return
						}
					}
					for _, p := range mine[:lo+50] {
						if h := a.FIAddr(p); h != fi.AddrNotAvail {
							if got, ok := a.AddrPort(h); ok && got != p {
								t.Errorf("AddrPort(FIAddr(%v)) = %v", p, got)
								return
							}
						}
						a.SourceAddr(p)
					}
				}
				if _, err := a.InsertSym(fmt.Sprintf("10.200.%d.1", w), 4, "100", 8, fiAddrs(32), 0, nil); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		// An empty insert without FI_MORE writes what FI_MORE inserts left
		// pending (on the FI_EVENT AV it is queued behind everything else).
		_, err := a.InsertAddrPort(nil, nil, 0, nil)
		require.NoError(t, err)
		wait(workers*(per/50+1) + 1) // every insert call has completed
		f.requireInStep(t, a)
		if flags&fi.EVENT == 0 {
			require.Equal(t, workers*(per/50*40+32), a.Count())
		} else {
			require.Equal(t, workers*(per+32), a.Count())
		}
	}
}

func openEQ(t *testing.T) *eq.EQ {
	q, err := eq.Open(eq.Attr{Size: 1 << 16}, nil)
	require.NoError(t, err)
	return q
}

// newDrainedEQ binds an EQ to a and keeps reading it; wait(n) returns
// once n FI_AV_COMPLETE events have been read.
func newDrainedEQ(t *testing.T, a *AV) (wait func(n int64), stop func()) {
	q, done := openEQ(t), make(chan struct{})
	require.NoError(t, a.Bind(q, 0))
	var completions atomic.Int64
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if e, err := q.Read(0); err == nil {
				if e.Event == eq.AVComplete {
					completions.Add(1)
				}
			} else if errors.Is(err, fi.EAVAIL) {
				q.ReadErr(0)
			} else {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	wait = func(n int64) {
		for deadline := time.Now().Add(10 * time.Second); completions.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions", completions.Load(), n)
			}
		}
	}
	return wait, func() { close(done) }
}

func rawAddrs(n int) [][]byte {
	out := make([][]byte, n)
	buf := make([]byte, n*SockaddrInLen)
	for i, p := range addrs(n) {
		b := buf[i*SockaddrInLen : (i+1)*SockaddrInLen : (i+1)*SockaddrInLen]
		copy(b, sin(p.String()))
		out[i] = b
	}
	return out
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkInsert1M inserts 1,000,000 sockaddr_in addresses in one call
// into a fresh AV opened with count 1,000,000 (as bench-control's peers
// are), with its kernel map ("kernel", privileged) or without
// kernel copy ("nomirror"). retained-B/entry is the Go heap the AV holds
// afterwards per address; B/op / 1e6 is everything allocated per address;
// cpu-s/op the CPU time of the inserting thread.
func BenchmarkInsert1M(b *testing.B) {
	const n = 1_000_000
	in := rawAddrs(n)
	for _, mode := range []string{"kernel", "nomirror"} {
		for _, typ := range []Type{TypeTable, TypeMap} {
			b.Run(mode+"/"+typ.String(), func(b *testing.B) {
				var opts []Option
				if mode == "kernel" {
					testenv.RequirePriv(b)
				} else {
					opts = append(opts, WithMirror(nil))
				}
				out := make([]fi.Addr, n)
				var retained uint64
				var cpu int64
				b.ReportAllocs()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				for b.Loop() {
					b.StopTimer()
					before := heapInUse()
					b.StartTimer()
					start := testenv.ThreadCPU(b)
					a, err := Open(Attr{Type: typ, Count: n}, nil, opts...)
					if err != nil {
						b.Fatal(err)
					}
					got, err := a.Insert(in, out, 0, nil)
					if err != nil || got != n {
						b.Fatal(got, err)
					}
					cpu += testenv.ThreadCPU(b) - start
					b.StopTimer()
					retained = heapInUse() - before
					if mode == "kernel" && a.KernelMap() == nil {
						b.Fatal("no kernel map")
					}
					a.Close()
					if mode == "kernel" {
						// The kernel frees the closed map's million
						// elements in a worker; let that not eat into the
						// next round.
						time.Sleep(time.Second)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(retained)/n, "retained-B/entry")
				// The inserting thread's CPU time, kernel work in its
				// syscalls included (see testenv.CPUTimer): wall time on a loaded
				// machine is mostly time spent descheduled.
				b.ReportMetric(float64(cpu)/1e9/float64(b.N), "cpu-s/op")
			})
		}
	}
}

// BenchmarkLookup measures the hot-path lookups on an AV of 1,000,000
// addresses: fi_addr -> peer (send) and peer -> fi_addr / source
// (receive), over a working set of 1024 peers (cache-resident, as a busy
// endpoint's peers are) and over all 1,000,000 in a shuffled order (every
// lookup a cache miss). The AV is opened with its count, and the hot set
// is every 976th handle read from the insert's output array, as
// bench-control's peers.c does for fi_av_lookup; that loop has no
// counterpart of FIAddr (libfabric has no public reverse lookup).
func BenchmarkLookup(b *testing.B) {
	const n = 1_000_000
	peers := addrs(n)
	for _, typ := range []Type{TypeTable, TypeMap} {
		a, err := Open(Attr{Type: typ, Count: n}, nil, WithMirror(nil))
		require.NoError(b, err)
		out := make([]fi.Addr, n)
		_, err = a.InsertAddrPort(peers, out, 0, nil)
		require.NoError(b, err)
		for _, set := range []struct {
			name  string
			order []int
		}{{"hot1k", hotSet(n, 1024)}, {"all1M", rand.Perm(n)}} {
			b.Run(typ.String()+"/AddrPort/"+set.name, func(b *testing.B) {
				b.ReportAllocs()
				stop := testenv.CPUTimer(b)
				i := 0
				for b.Loop() {
					if _, ok := a.AddrPort(out[set.order[i]]); !ok {
						b.Fatal("miss")
					}
					if i++; i == len(set.order) {
						i = 0
					}
				}
				stop()
			})
			b.Run(typ.String()+"/FIAddr/"+set.name, func(b *testing.B) {
				b.ReportAllocs()
				stop := testenv.CPUTimer(b)
				i := 0
				for b.Loop() {
					if a.FIAddr(peers[set.order[i]]) == fi.AddrNotAvail {
						b.Fatal("miss")
					}
					if i++; i == len(set.order) {
						i = 0
					}
				}
				stop()
			})
			keys := make([][16]byte, len(set.order))
			for i, o := range set.order {
				keys[i] = peers[o].Addr().As16()
			}
			b.Run(typ.String()+"/FIAddr16/"+set.name, func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if a.FIAddr16(&keys[i], 7471) == fi.AddrNotAvail {
						b.Fatal("miss")
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
			})
			b.Run(typ.String()+"/SourceAddr/"+set.name, func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					a.SourceAddr(peers[set.order[i]])
					if i++; i == len(set.order) {
						i = 0
					}
				}
			})
		}
		a.Close()
	}
}

// hotSet returns k indices spread over 0..n-1.
func hotSet(n, k int) []int {
	s := make([]int, k)
	for i := range s {
		s[i] = i * (n / k)
	}
	return s
}

// BenchmarkInsertSym inserts nodes x 1000 addresses with InsertSym on an
// FI_SYMMETRIC AV; retained-B is the Go heap the AV holds afterwards,
// which must not grow with the count.
func BenchmarkInsertSym(b *testing.B) {
	for _, mode := range []string{"nomirror", "kernel"} {
		for _, nodes := range []int{1, 1000} {
			b.Run(fmt.Sprintf("%s/%dx1000", mode, nodes), func(b *testing.B) {
				var opts []Option
				if mode == "kernel" {
					testenv.RequirePriv(b)
				} else {
					opts = append(opts, WithMirror(nil))
				}
				var retained uint64
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					before := heapInUse()
					b.StartTimer()
					a, err := Open(Attr{Type: TypeTable, Flags: fi.SYMMETRIC}, nil, opts...)
					if err != nil {
						b.Fatal(err)
					}
					got, err := a.InsertSym("10.0.0.1", nodes, "1000", 1000, nil, 0, nil)
					if err != nil || got != nodes*1000 {
						b.Fatal(got, err)
					}
					b.StopTimer()
					retained = heapInUse() - before
					a.Close()
					b.StartTimer()
				}
				b.ReportMetric(float64(retained), "retained-B")
			})
		}
	}
}

// BenchmarkTableFloor1M is the memory floor of BenchmarkInsert1M/kernel:
// it makes the peer table an AV opened with count 1,000,000 gets, maps it
// and stores one word in each of its pages, with no hashing, tags or
// entries: "compact" the table an AV starts with (IPv4 peers,
// ktable.AVTable4Buckets: 83334 buckets of 256 bytes, 20 MiB), "wide"
// the one of 32-byte slots an IPv6 peer makes it rebuild
// (ktable.AVTableBuckets: 187500 buckets, 46 MiB). On a VM whose
// hypervisor shadows the guest's page tables each first touch of a 4 KiB
// page traps out of the guest (~12-15 µs a page on the development VM,
// whatever the order, and also for pages the kernel writes for a bpf(2)
// call), so this floor, not the insert's own work, is most of
// Insert1M/kernel's kernel share there. cpu-us/page is per 4 KiB page of
// the table.
func BenchmarkTableFloor1M(b *testing.B) {
	testenv.RequirePriv(b)
	spec, err := avTableSpec()
	require.NoError(b, err)
	for _, kind := range []struct {
		name   string
		nb     int
		create func(*ebpf.MapSpec, int, uint64) (*ktable.AVTable, error)
	}{
		{"compact", ktable.AVTable4Buckets(1_000_000), ktable.CreateAVTable4},
		{"wide", ktable.AVTableBuckets(1_000_000), ktable.CreateAVTable},
	} {
		b.Run(kind.name, func(b *testing.B) {
			size := (1 + kind.nb) * ktable.AVTBucketSize
			if pg := os.Getpagesize(); size%pg != 0 {
				size += pg - size%pg
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu int64
			for b.Loop() {
				start := testenv.ThreadCPU(b)
				t, err := kind.create(spec, kind.nb, ktable.RandomSeed())
				if err != nil {
					b.Fatal(err)
				}
				mem, err := unix.Mmap(t.Map().FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
				if err != nil {
					b.Fatal(err)
				}
				for off := ktable.AVTBucketSize; off < size; off += os.Getpagesize() {
					mem[off] = 0 // the header's bucket aside, the table is all zero
				}
				cpu += testenv.ThreadCPU(b) - start
				b.StopTimer()
				require.NoError(b, unix.Munmap(mem))
				require.NoError(b, t.Close())
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu)/1e9/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(cpu)/1e3/float64(b.N)/float64(size/os.Getpagesize()), "cpu-us/page")
			b.ReportMetric(float64(size)/(1<<20), "table-MiB")
		})
	}
}

// BenchmarkKernelFloor1M writes 1,000,000 av_map entries with plain
// BPF_MAP_UPDATE_BATCH calls of batchLen from one goroutine, no AV
// involved: the kernel's share of BenchmarkInsert1M/kernel on this machine.
func BenchmarkKernelFloor1M(b *testing.B) {
	testenv.RequirePriv(b)
	const n = 1_000_000
	keys := make([]bpf.XdpfabAvKey, n)
	vals := make([]bpf.XdpfabAvValue, n)
	for i, p := range addrs(n) {
		keys[i] = kernelKey(1, endpoint{ip: p.Addr().As16(), port: p.Port()})
		vals[i].FiAddr = uint64(i)
	}
	for b.Loop() {
		b.StopTimer()
		m, err := NewKernelMap(0)
		require.NoError(b, err)
		b.StartTimer()
		for lo := 0; lo < n; lo += batchLen {
			hi := min(lo+batchLen, n)
			if _, err := m.BatchUpdate(keys[lo:hi], vals[lo:hi], nil); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		m.Close()
		time.Sleep(time.Second) // let the kernel free the elements
		b.StartTimer()
	}
}

// BenchmarkOpenClose is fi_av_open + fi_close of an unnamed FI_AV_TABLE
// AV: with its kernel table in the process's av_map ("kernel",
// privileged; the av_map comes and goes with the AV, as in an open/close
// loop) and without kernel copy ("nomirror").
func BenchmarkOpenClose(b *testing.B) {
	for _, mode := range []string{"kernel", "nomirror"} {
		b.Run(mode, func(b *testing.B) {
			var opts []Option
			if mode == "kernel" {
				testenv.RequirePriv(b)
			} else {
				opts = append(opts, WithMirror(nil))
			}
			b.ReportAllocs()
			for b.Loop() {
				a, err := Open(Attr{Type: TypeTable}, nil, opts...)
				if err != nil {
					b.Fatal(err)
				}
				if err := a.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
