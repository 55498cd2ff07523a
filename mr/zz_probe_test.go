package mr_test

import (
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/mr"
)

func BenchmarkProbeGetppid(b *testing.B) {
	for b.Loop() {
		unix.Getppid()
	}
}

func BenchmarkProbeUpdate(b *testing.B) {
	m, _ := mr.CreateMap(mr.MapOptions{})
	defer m.Close()
	k := bpf.XdpfabMrKey{Key: 1}
	v := bpf.XdpfabMrValue{Len: 1}
	for b.Loop() {
		if err := m.Update(&k, &v, ebpf.UpdateAny); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProbeUpdateDelete(b *testing.B) {
	m, _ := mr.CreateMap(mr.MapOptions{})
	defer m.Close()
	k := bpf.XdpfabMrKey{Key: 1}
	v := bpf.XdpfabMrValue{Len: 1}
	for b.Loop() {
		if err := m.Update(&k, &v, ebpf.UpdateAny); err != nil {
			b.Fatal(err)
		}
		if err := m.Delete(&k); err != nil {
			b.Fatal(err)
		}
	}
}
