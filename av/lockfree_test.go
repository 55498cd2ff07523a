package av

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fi"
)

// roundAddr is the address a writer round r stores: both halves of the IP
// and the port carry r, so a lookup that mixed the words of two rounds
// (a torn entry) is seen.
func roundAddr(r uint64) netip.AddrPort {
	var ip [16]byte
	binary.BigEndian.PutUint64(ip[:8], 0xfd00_0000_0000_0000|r)
	binary.BigEndian.PutUint64(ip[8:], r)
	return netip.AddrPortFrom(netip.AddrFrom16(ip), uint16(r)|1)
}

// roundOf returns the round of an address roundAddr made, false for a
// mixture of rounds.
func roundOf(ap netip.AddrPort) (uint64, bool) {
	ip := ap.Addr().As16()
	hi := binary.BigEndian.Uint64(ip[:8]) &^ 0xfd00_0000_0000_0000
	lo := binary.BigEndian.Uint64(ip[8:])
	return lo, hi == lo && ap.Port() == uint16(lo)|1
}

// TestLockFreeReadersConcurrent: lookups that take no lock (AddrPort,
// FIAddr, SourceAddr) run against a writer that inserts and removes
// addresses in rounds, reusing the same indices and growing the table
// (new chunks, a larger hash index) on the way. A reader never sees a torn
// entry (words of two rounds), and never finds an address, in either
// direction, whose Remove had returned before the lookup started.
func TestLockFreeReadersConcurrent(t *testing.T) {
	for _, typ := range []Type{TypeTable, TypeMap} {
		t.Run(typ.String(), func(t *testing.T) {
			a, err := Open(Attr{Type: typ}, nil, WithMirror(nil), WithAddrFormat(fi.FormatSockaddr6))
			require.NoError(t, err)
			defer a.Close()

			const slots = 8
			var (
				handles [slots]atomic.Uint64 // handle of slot's current round, or AddrNotAvail
				rounds  [slots]atomic.Uint64 // round slot holds (valid while handles[s] is set)
				removed atomic.Uint64        // every round below it was removed (Remove returned)
				stop    atomic.Bool
				bad     atomic.Value
				reads   atomic.Int64
			)
			for s := range handles {
				handles[s].Store(uint64(fi.AddrNotAvail))
			}
			fail := func(msg string) { bad.CompareAndSwap(nil, msg); stop.Store(true) }

			var wg sync.WaitGroup
			// A tight reader of the slot written last, where a torn read
			// would show.
			var last atomic.Uint64
			last.Store(uint64(fi.AddrNotAvail))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					for range 256 {
						if ap, ok := a.AddrPort(fi.Addr(last.Load())); ok {
							if _, whole := roundOf(ap); !whole {
								fail("AddrPort returned a torn entry " + ap.String())
								return
							}
						}
					}
					reads.Add(1)
				}
			}()
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; !stop.Load(); n++ {
						s := n % slots
						gone := removed.Load()
						h := fi.Addr(handles[s].Load())
						if h != fi.AddrNotAvail {
							if ap, ok := a.AddrPort(h); ok {
								r, whole := roundOf(ap)
								if !whole {
									fail("AddrPort returned a torn entry " + ap.String())
									return
								}
								if r < gone {
									fail("AddrPort found an address removed before the lookup: " + ap.String())
									return
								}
							}
						}
						// An address removed before the lookup started is gone in
						// the reverse direction too.
						if gone > 0 {
							old := roundAddr(gone - 1)
							if a.FIAddr(old) != fi.AddrNotAvail {
								fail("FIAddr found removed " + old.String())
								return
							}
							if a.SourceAddr(old) != fi.AddrNotAvail {
								fail("SourceAddr found removed " + old.String())
								return
							}
						}
						if r := rounds[s].Load(); r >= gone && r > 0 {
							if got := a.FIAddr(roundAddr(r)); got != fi.AddrNotAvail {
								if back, ok := a.AddrPort(got); ok {
									if _, whole := roundOf(back); !whole {
										fail("AddrPort of FIAddr returned a torn entry")
										return
									}
								}
							}
						}
						reads.Add(1)
					}
				}()
			}

			// The writer: round r replaces the address of slot r%slots with
			// a new one, and every 64 rounds adds a block that grows the
			// table, then removes it.
			deadline := time.Now().Add(2 * time.Second)
			one := make([]fi.Addr, 1)
			r := uint64(1)
			for ; r < 200_000 && time.Now().Before(deadline) && !stop.Load(); r++ {
				s := r % slots
				if h := fi.Addr(handles[s].Load()); h != fi.AddrNotAvail {
					require.NoError(t, a.Remove([]fi.Addr{h}, 0))
					handles[s].Store(uint64(fi.AddrNotAvail))
					// Every round up to the one slot s held is removed (the
					// other slots hold later rounds).
					removed.Store(r - slots + 1)
				}
				_, err := a.InsertAddrPort([]netip.AddrPort{roundAddr(r)}, one, 0, nil)
				require.NoError(t, err)
				rounds[s].Store(r)
				handles[s].Store(uint64(one[0]))
				last.Store(uint64(one[0]))
				if r%64 == 0 {
					blk := make([]netip.AddrPort, 2048)
					for i := range blk {
						blk[i] = roundAddr(1<<40 | r<<12 | uint64(i))
					}
					hs := make([]fi.Addr, len(blk))
					_, err := a.InsertAddrPort(blk, hs, 0, nil)
					require.NoError(t, err)
					require.NoError(t, a.Remove(hs, 0))
				}
			}
			stop.Store(true)
			wg.Wait()
			if msg := bad.Load(); msg != nil {
				t.Fatal(msg)
			}
			require.Positive(t, reads.Load())
			t.Logf("%d writer rounds, %d reader rounds", r, reads.Load())
		})
	}
}
