package av

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// BenchmarkLookupPeers: the lookups an endpoint makes per packet — the
// peer of an fi_addr (send) and the fi_addr of a source (receive) —
// against the number of peers in the AV, 1 to 10,000, visited in a
// shuffled order. ns/op must stay flat and allocs/op 0 (issue 17).
func BenchmarkLookupPeers(b *testing.B) {
	for _, typ := range []Type{TypeTable, TypeMap} {
		for _, n := range []int{1, 100, 1000, 10000} {
			a, out, order := peersAV(b, typ, n)
			peers := addrs(n)
			b.Run(fmt.Sprintf("%s/AddrPort/peers=%d", typ, n), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, ok := a.AddrPort(out[order[i]]); !ok {
						b.Fatal("miss")
					}
					if i++; i == n {
						i = 0
					}
				}
			})
			b.Run(fmt.Sprintf("%s/FIAddr/peers=%d", typ, n), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if a.FIAddr(peers[order[i]]) == fi.AddrNotAvail {
						b.Fatal("miss")
					}
					if i++; i == n {
						i = 0
					}
				}
			})
			a.Close()
		}
	}
}

func peersAV(tb testing.TB, typ Type, n int) (*AV, []fi.Addr, []int) {
	a, err := Open(Attr{Type: typ}, nil, WithMirror(nil))
	require.NoError(tb, err)
	out := make([]fi.Addr, n)
	_, err = a.InsertAddrPort(addrs(n), out, 0, nil)
	require.NoError(tb, err)
	return a, out, rand.Perm(n)
}

// TestLookupPeersNoAllocs: with 10,000 peers in the AV, neither lookup
// allocates.
func TestLookupPeersNoAllocs(t *testing.T) {
	const n = 10000
	for _, typ := range []Type{TypeTable, TypeMap} {
		a, out, order := peersAV(t, typ, n)
		peers := addrs(n)
		i := 0
		if allocs := testing.AllocsPerRun(n, func() {
			if _, ok := a.AddrPort(out[order[i]]); !ok {
				t.Fatal("miss")
			}
			if a.FIAddr(peers[order[i]]) != out[order[i]] {
				t.Fatal("reverse lookup differs")
			}
			i = (i + 1) % n
		}); allocs != 0 {
			t.Fatalf("%s: %v allocations per lookup pair", typ, allocs)
		}
		a.Close()
	}
}
