package eq_test

import (
	"testing"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
)

// BenchmarkWriteRead is one Write and one Read on a WAIT_NONE EQ: the
// cost of reporting and consuming one event (libfabric's util EQ: ~28 ns).
func BenchmarkWriteRead(b *testing.B) {
	q, err := eq.Open(eq.Attr{Size: 1024, Flags: fi.WRITE}, nil)
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
