package mr_test

import (
	"testing"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// MEASUREMENT (issue 11 item 10): the user-space check with and without
// trusting the XDP verdict, one region of 10000, 1 buffer.
func BenchmarkTmpLookupTrusted(b *testing.B) {
	tab, err := mr.NewTable(mr.Config{})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 4096)
	for k := range uint64(10000) {
		if _, err := tab.Reg(buf, remoteBits, 0, k*0x9e37, 0, nil); err != nil {
			b.Fatal(err)
		}
	}
	key := uint64(9999 * 0x9e37)
	b.Run("LookupAuth", func(b *testing.B) {
		for b.Loop() {
			if _, err := tab.LookupAuth(key, 1024, 64, fi.REMOTE_WRITE, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("LookupTrusted", func(b *testing.B) {
		for b.Loop() {
			if _, err := tab.LookupTrusted(key, 1024, 64, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
