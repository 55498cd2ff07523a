package epoch

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSafe: an object retired while a reader is online stays unsafe until
// that reader passes a quiescent point or goes offline; readers offline,
// closed or absent hold nothing back.
func TestSafe(t *testing.T) {
	d := New()
	e := d.Retire()
	require.GreaterOrEqual(t, d.Safe(), e, "no reader")

	a, b := d.NewReader(), d.NewReader()
	e = d.Retire()
	require.GreaterOrEqual(t, d.Safe(), e, "readers start offline")

	a.Quiesce()
	b.Quiesce()
	e = d.Retire()
	require.Less(t, d.Safe(), e, "both online since before the retire")
	a.Quiesce()
	require.Less(t, d.Safe(), e, "b has not passed a quiescent point")
	b.Offline()
	require.GreaterOrEqual(t, d.Safe(), e)

	b.Quiesce()
	e = d.Retire()
	require.Less(t, d.Safe(), e)
	b.Close()
	require.Less(t, d.Safe(), e, "a is still online at an older epoch")
	a.Quiesce()
	require.GreaterOrEqual(t, d.Safe(), e)
	a.Close()
	e = d.Retire()
	require.GreaterOrEqual(t, d.Safe(), e)

	var nilReader *Reader // an engine without a domain
	nilReader.Quiesce()
	nilReader.Offline()
	nilReader.Close()
}

// TestReclaimUnderReaders: writers swap an object readers reach through a
// pointer, retire the old one and reuse it (overwrite its value) once Safe
// says so; a reader never sees an object change between its quiescent
// points. Run with -race: a reuse too early is also a reported race.
func TestReclaimUnderReaders(t *testing.T) {
	type obj struct{ v int }
	d := New()
	var cur atomic.Pointer[obj]
	cur.Store(&obj{v: 0})
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		r := d.NewReader()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for i := 0; !stop.Load(); i++ {
				r.Quiesce()
				o := cur.Load()
				v := o.v
				for range 10 {
					if o.v != v {
						t.Errorf("object changed under a reader: %d -> %d", v, o.v)
						return
					}
				}
				if i%64 == 0 {
					r.Offline()
				}
			}
		}()
	}
	type retired struct {
		o     *obj
		stamp uint64
	}
	var limbo []retired
	var free []*obj
	reused := 0
	for i := 1; i <= 20000; i++ {
		var o *obj
		if len(free) > 0 {
			o, free = free[len(free)-1], free[:len(free)-1]
			reused++
		} else {
			o = new(obj)
		}
		o.v = i
		old := cur.Swap(o)
		limbo = append(limbo, retired{old, d.Retire()})
		safe := d.Safe()
		for len(limbo) > 0 && limbo[0].stamp <= safe {
			free = append(free, limbo[0].o)
			limbo = limbo[1:]
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("reused %d of 20000", reused)
	require.NotZero(t, reused)
}
