package fabric_test

import (
	"testing"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
)

// BenchmarkCQOpenClose is fi_cq_open + fi_close of a CQ of the default
// size, per wait object (issue 15: at most 50 µs).
func BenchmarkCQOpenClose(b *testing.B) {
	d := openDomain(b)
	for _, w := range []fi.WaitObj{fi.WaitNone, fi.WaitUnspec, fi.WaitFD} {
		b.Run(w.String(), func(b *testing.B) {
			b.ReportAllocs()
			stop := testenv.CPUTimer(b)
			for b.Loop() {
				cq, err := d.CQOpen(fabric.CQAttr{WaitObj: w}, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := cq.Close(); err != nil {
					b.Fatal(err)
				}
			}
			stop()
		})
	}
}

// BenchmarkCntrOpenClose is fi_cntr_open + fi_close, per wait object.
func BenchmarkCntrOpenClose(b *testing.B) {
	d := openDomain(b)
	for _, w := range []fi.WaitObj{fi.WaitNone, fi.WaitUnspec, fi.WaitFD} {
		b.Run(w.String(), func(b *testing.B) {
			b.ReportAllocs()
			stop := testenv.CPUTimer(b)
			for b.Loop() {
				c, err := d.CntrOpen(fabric.CntrAttr{WaitObj: w}, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
			}
			stop()
		})
	}
}
