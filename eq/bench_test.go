package eq_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
)

// BenchmarkWriteRead is one Write and one Read on a FI_WAIT_NONE EQ: the
// cost of reporting and consuming one event (libfabric's util EQ: ~28 ns
// in C). It must not allocate.
func BenchmarkWriteRead(b *testing.B) {
	benchWriteRead(b, fi.WaitNone)
}

// BenchmarkWriteReadWaitable is the same on EQs with a wait object and
// nobody blocked: what signalling costs on the fast path.
func BenchmarkWriteReadWaitable(b *testing.B) {
	for _, w := range []fi.WaitObj{fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond} {
		b.Run(w.String(), func(b *testing.B) { benchWriteRead(b, w) })
	}
}

func benchWriteRead(b *testing.B, w fi.WaitObj) {
	q, err := eq.Open(eq.Attr{Size: 1024, Flags: fi.WRITE, WaitObj: w}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	ctx := new(int)
	e := eq.Entry{Event: eq.AVComplete, FID: q, Context: ctx}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.Data = uint64(i)
		if err := q.Write(e, 0); err != nil {
			b.Fatal(err)
		}
		if _, err := q.Read(0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPostReadErr is the error path: PostErr and Read (FI_EAVAIL)
// and ReadErr.
func BenchmarkPostReadErr(b *testing.B) {
	q, err := eq.Open(eq.Attr{Size: 1024}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	ee := eq.ErrEntry{FID: q, Err: fi.EIO, ProvErrno: 5}
	b.ReportAllocs()
	for b.Loop() {
		if err := q.PostErr(ee); err != nil {
			b.Fatal(err)
		}
		if _, err := q.Read(0); err != fi.EAVAIL {
			b.Fatal(err)
		}
		if _, err := q.ReadErr(0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSReadWake measures how fast a goroutine blocked in SRead wakes
// on a Write from another goroutine: two goroutines ping-pong one event
// over two EQs, each blocked in SRead while the other writes. ns/wake is
// the time from a Write to the return of the SRead it wakes (two per op).
func BenchmarkSReadWake(b *testing.B) {
	for _, w := range []fi.WaitObj{fi.WaitUnspec, fi.WaitFD, fi.WaitYield} {
		b.Run(w.String(), func(b *testing.B) {
			ping, err := eq.Open(eq.Attr{Size: 4, Flags: fi.WRITE, WaitObj: w}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer ping.Close()
			pong, err := eq.Open(eq.Attr{Size: 4, Flags: fi.WRITE, WaitObj: w}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer pong.Close()
			done := make(chan error, 1)
			go func() {
				for {
					e, err := ping.SRead(-1, 0)
					if err != nil {
						done <- err
						return
					}
					if e.Event == eq.Shutdown {
						done <- nil
						return
					}
					if err := pong.Write(e, 0); err != nil {
						done <- err
						return
					}
				}
			}()
			b.ReportAllocs()
			for b.Loop() {
				if err := ping.Write(eq.Entry{Event: eq.Notify}, 0); err != nil {
					b.Fatal(err)
				}
				if _, err := pong.SRead(-1, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/wake")
			if err := ping.Write(eq.Entry{Event: eq.Shutdown}, 0); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkContendedWriters: four goroutines Write concurrently while one
// drains with SRead; ns/op is per event. Writers hold back when 2048
// events are in flight (the EQ holds 4096; overrun would be fatal).
func BenchmarkContendedWriters(b *testing.B) {
	const writers, window = 4, 2048
	q, err := eq.Open(eq.Attr{Size: 2 * window, Flags: fi.WRITE, WaitObj: fi.WaitUnspec}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	var written, read atomic.Int64
	var claimed atomic.Int64
	n := int64(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			e := eq.Entry{Event: eq.Notify, FID: q}
			for claimed.Add(1) <= n {
				for written.Load()-read.Load() >= window {
					runtime.Gosched()
				}
				if err := q.Write(e, 0); err != nil {
					b.Error(err)
					return
				}
				written.Add(1)
			}
		})
	}
	for i := int64(0); i < n; i++ {
		if _, err := q.SRead(-1, 0); err != nil {
			b.Fatal(err)
		}
		read.Add(1)
	}
	wg.Wait()
}

// BenchmarkContendedWriteRead: four goroutines each Write and Read on one
// FI_WAIT_NONE EQ (two cores).
func BenchmarkContendedWriteRead(b *testing.B) {
	q, err := eq.Open(eq.Attr{Size: 1024, Flags: fi.WRITE}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	b.ReportAllocs()
	b.SetParallelism(max(1, 4/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		e := eq.Entry{Event: eq.Notify, FID: q}
		for pb.Next() {
			if err := q.Write(e, 0); err != nil {
				b.Error(err)
				return
			}
			if _, err := q.Read(0); err != nil && err != fi.EAGAIN {
				b.Error(err)
				return
			}
		}
	})
}
