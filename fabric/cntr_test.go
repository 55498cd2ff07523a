package fabric_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

func openCntr(t *testing.T, d *fabric.Domain, w fi.WaitObj) *fabric.Cntr {
	t.Helper()
	c, err := d.CntrOpen(fabric.CntrAttr{WaitObj: w}, "cntr")
	require.NoError(t, err)
	return c
}

func TestCntrOpenAttrs(t *testing.T) {
	d := openDomain(t)
	_, err := d.CntrOpen(fabric.CntrAttr{Events: 1}, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = d.CntrOpen(fabric.CntrAttr{Flags: fi.SEND}, nil)
	require.ErrorIs(t, err, fi.EBADFLAGS)
	_, err = d.CntrOpen(fabric.CntrAttr{WaitObj: fi.WaitObj(99)}, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	c := openCntr(t, d, fi.WaitNone)
	require.Equal(t, "cntr", c.Context())
	require.Equal(t, fi.ClassCntr, c.Class())
	require.NoError(t, c.Close())
	require.ErrorIs(t, c.Close(), fi.EINVAL)
	require.True(t, c.Closed())
}

func TestCntrReadAddSet(t *testing.T) {
	c := openCntr(t, openDomain(t), fi.WaitNone)
	defer c.Close()
	require.Zero(t, c.Read())
	require.Zero(t, c.ReadErr())
	require.NoError(t, c.Add(3))
	require.NoError(t, c.Add(4))
	require.Equal(t, uint64(7), c.Read())
	require.NoError(t, c.Set(100))
	require.Equal(t, uint64(100), c.Read())
	require.Zero(t, c.ReadErr(), "errors are separate")
	require.NoError(t, c.AddErr(2))
	require.NoError(t, c.AddErr(1))
	require.Equal(t, uint64(3), c.ReadErr())
	require.NoError(t, c.SetErr(0))
	require.Zero(t, c.ReadErr())
	require.Equal(t, uint64(100), c.Read())
	require.ErrorIs(t, c.Wait(1, 10), fi.ENOSYS, "FI_WAIT_NONE")
}

func TestCntrWait(t *testing.T) {
	d := openDomain(t)
	for _, w := range []fi.WaitObj{fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield} {
		t.Run(w.String(), func(t *testing.T) {
			c := openCntr(t, d, w)
			require.NoError(t, c.Set(5))
			require.NoError(t, c.Wait(5, 0), "threshold already reached")
			require.NoError(t, c.Wait(3, 0))

			start := time.Now()
			require.ErrorIs(t, c.Wait(6, 100), fi.ETIMEDOUT)
			require.GreaterOrEqual(t, time.Since(start), 75*time.Millisecond)

			// Reaching the threshold from another goroutine.
			go func() {
				for range 5 {
					time.Sleep(2 * time.Millisecond)
					_ = c.Add(1)
				}
			}()
			require.NoError(t, c.Wait(10, waitMs))
			require.Equal(t, uint64(10), c.Read())

			// An error-count change ends the wait with FI_EAVAIL.
			go func() {
				time.Sleep(10 * time.Millisecond)
				_ = c.AddErr(1)
			}()
			require.ErrorIs(t, c.Wait(1000, waitMs), fi.EAVAIL)
			go func() {
				time.Sleep(10 * time.Millisecond)
				_ = c.SetErr(0)
			}()
			require.ErrorIs(t, c.Wait(1000, waitMs), fi.EAVAIL, "SetErr changes it too")

			// Close wakes a waiter with FI_ECANCELED.
			done := make(chan error, 1)
			go func() { done <- c.Wait(1000, -1) }()
			time.Sleep(10 * time.Millisecond)
			require.NoError(t, c.Close())
			select {
			case err := <-done:
				require.ErrorIs(t, err, fi.ECANCELED)
			case <-time.After(waitMs * time.Millisecond):
				t.Fatal("Close did not wake Wait")
			}
			require.ErrorIs(t, c.Wait(1000, 10), fi.ECANCELED, "closed counter")
		})
	}
}

// cntrValues is the (success, error) count of each bound kind.
func cntrValues(s *side) map[fi.Flags][2]uint64 {
	m := map[fi.Flags][2]uint64{}
	for k, c := range s.cntr {
		m[k] = [2]uint64{c.Read(), c.ReadErr()}
	}
	return m
}

// expectCounts checks that s's counters moved by exactly delta since before.
func expectCounts(t *testing.T, s *side, before map[fi.Flags][2]uint64, delta map[fi.Flags][2]uint64, what string) {
	t.Helper()
	now := cntrValues(s)
	for k := range now {
		want := before[k]
		want[0] += delta[k][0]
		want[1] += delta[k][1]
		require.Equal(t, want, now[k], "%s: counter %v (success, error)", what, fiFlagName(k))
	}
}

func fiFlagName(f fi.Flags) string {
	switch f {
	case fi.SEND:
		return "FI_SEND"
	case fi.RECV:
		return "FI_RECV"
	case fi.READ:
		return "FI_READ"
	case fi.WRITE:
		return "FI_WRITE"
	case fi.REMOTE_READ:
		return "FI_REMOTE_READ"
	case fi.REMOTE_WRITE:
		return "FI_REMOTE_WRITE"
	}
	return "?"
}

// TestCntrEndpointCounts: counters bound to both endpoints advance exactly
// once per operation, on the right side, also for segmented transfers,
// and count failures as errors.
func TestCntrEndpointCounts(t *testing.T) {
	all := fi.SEND | fi.RECV | fi.READ | fi.WRITE | fi.REMOTE_READ | fi.REMOTE_WRITE
	a, b := pair(t, sideOpts{cntrs: all}, sideOpts{cntrs: all})
	type d = [2]uint64
	ok := d{1, 0}
	step := func(what string, post func() error, wantA, wantB map[fi.Flags][2]uint64, wantErr bool) {
		t.Helper()
		ba, bb := cntrValues(a), cntrValues(b)
		require.NoError(t, post(), what)
		if wantErr {
			errComp(t, a.txCQ)
		} else {
			comp(t, a.txCQ)
		}
		// The target counts before it answers, so its counters are final
		// once the initiator's completion is read.
		expectCounts(t, a, ba, wantA, what+" (initiator)")
		expectCounts(t, b, bb, wantB, what+" (target)")
	}

	const big = 1 << 20 // segmented into ~700 packets
	payload := make([]byte, big)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	rbuf := make([]byte, big)

	require.NoError(t, b.ep.Recv(make([]byte, 16), mr.Desc{}, fi.AddrUnspec, nil))
	step("send", func() error { return a.ep.Send([]byte("hi"), mr.Desc{}, a.peer, nil) },
		map[fi.Flags][2]uint64{fi.SEND: ok}, map[fi.Flags][2]uint64{fi.RECV: ok}, false)
	comp(t, b.rxCQ)

	require.NoError(t, b.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, nil))
	step("1 MiB send", func() error { return a.ep.Send(payload, mr.Desc{}, a.peer, nil) },
		map[fi.Flags][2]uint64{fi.SEND: ok}, map[fi.Flags][2]uint64{fi.RECV: ok}, false)
	require.Equal(t, big, comp(t, b.rxCQ).Len)
	require.Equal(t, payload, rbuf)

	step("1 MiB write", func() error { return a.ep.Write(payload, mr.Desc{}, a.peer, 0, regionKey, nil) },
		map[fi.Flags][2]uint64{fi.WRITE: ok}, map[fi.Flags][2]uint64{fi.REMOTE_WRITE: ok}, false)
	clear(rbuf)
	step("1 MiB read", func() error { return a.ep.Read(rbuf, mr.Desc{}, a.peer, 0, regionKey, nil) },
		map[fi.Flags][2]uint64{fi.READ: ok}, map[fi.Flags][2]uint64{fi.REMOTE_READ: ok}, false)
	require.Equal(t, payload, rbuf)

	one := binary.LittleEndian.AppendUint64(nil, 1)
	res := make([]byte, 8)
	step("atomic", func() error {
		return a.ep.Atomic(one, 1, mr.Desc{}, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil)
	}, map[fi.Flags][2]uint64{fi.WRITE: ok}, map[fi.Flags][2]uint64{fi.REMOTE_WRITE: ok}, false)
	step("fetch atomic", func() error {
		return a.ep.FetchAtomic(one, 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil)
	}, map[fi.Flags][2]uint64{fi.READ: ok}, map[fi.Flags][2]uint64{fi.REMOTE_WRITE: ok}, false)
	step("atomic read", func() error {
		return a.ep.FetchAtomic(nil, 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey, fatomic.UINT64, fatomic.ATOMIC_READ, nil)
	}, map[fi.Flags][2]uint64{fi.READ: ok}, map[fi.Flags][2]uint64{fi.REMOTE_READ: ok}, false)
	step("compare atomic", func() error {
		return a.ep.CompareAtomic(one, 1, mr.Desc{}, res, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
			fatomic.UINT64, fatomic.CSWAP, nil)
	}, map[fi.Flags][2]uint64{fi.READ: ok}, map[fi.Flags][2]uint64{fi.REMOTE_WRITE: ok}, false)

	// Failures count as errors at the initiator and not at all at the target.
	bad := d{0, 1}
	step("write to an unknown key", func() error { return a.ep.Write(payload[:100], mr.Desc{}, a.peer, 0, 0xbad, nil) },
		map[fi.Flags][2]uint64{fi.WRITE: bad}, nil, true)
	step("segmented write out of range", func() error {
		return a.ep.Write(payload, mr.Desc{}, a.peer, 4096, regionKey, nil)
	}, map[fi.Flags][2]uint64{fi.WRITE: bad}, nil, true)
	step("read out of range", func() error { return a.ep.Read(rbuf[:64], mr.Desc{}, a.peer, big-8, regionKey, nil) },
		map[fi.Flags][2]uint64{fi.READ: bad}, nil, true)
	step("atomic on an unknown key", func() error {
		return a.ep.Atomic(one, 1, mr.Desc{}, a.peer, 0, 0xbad, fatomic.UINT64, fatomic.SUM, nil)
	}, map[fi.Flags][2]uint64{fi.WRITE: bad}, nil, true)

	// A truncated receive is an error at the receiver, a success at the
	// sender.
	require.NoError(t, b.ep.Recv(make([]byte, 2), mr.Desc{}, fi.AddrUnspec, nil))
	step("truncated send", func() error { return a.ep.Send([]byte("too long"), mr.Desc{}, a.peer, nil) },
		map[fi.Flags][2]uint64{fi.SEND: ok}, map[fi.Flags][2]uint64{fi.RECV: bad}, false)
	require.Equal(t, fi.ETRUNC, errComp(t, b.rxCQ).Err)
}

// TestCntrEndpointOnly: an endpoint with counters and no CQ works, and
// Wait sees the operations complete.
func TestCntrEndpointOnly(t *testing.T) {
	a := newSide(t, sideOpts{noTxCQ: true, noRxCQ: true, cntrs: fi.WRITE | fi.READ})
	b := newSide(t, sideOpts{})
	link(t, a, b)
	for i := range 10 {
		require.NoError(t, a.ep.Write([]byte{byte(i)}, mr.Desc{}, a.peer, uint64(i), regionKey, nil))
	}
	require.NoError(t, a.cntr[fi.WRITE].Wait(10, waitMs))
	buf := make([]byte, 10)
	require.NoError(t, a.ep.Read(buf, mr.Desc{}, a.peer, 0, regionKey, nil))
	require.NoError(t, a.cntr[fi.READ].Wait(1, waitMs))
	require.Equal(t, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, buf)
	// Wait returns FI_EAVAIL when the error count changes while it waits
	// (an error that lands before Wait starts does not count, as in
	// libfabric's util counter). Bad writes keep failing until Wait
	// returns, so one of them lands during the wait however the
	// goroutines are scheduled.
	stop := make(chan struct{})
	posted := make(chan int)
	go func() {
		n := 0
		defer func() { posted <- n }()
		for ; n < 1000; n++ {
			if err := a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, 0xbad, nil); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-stop:
				n++
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	werr := a.cntr[fi.WRITE].Wait(100, waitMs)
	close(stop)
	n := <-posted
	require.ErrorIs(t, werr, fi.EAVAIL)
	require.Eventually(t, func() bool { return a.cntr[fi.WRITE].ReadErr() == uint64(n) },
		5*time.Second, time.Millisecond, "every bad write counts one error")
	require.Equal(t, uint64(10), a.cntr[fi.WRITE].Read(), "failed writes do not count as successes")
	require.ErrorIs(t, a.ep.Recv(make([]byte, 1), mr.Desc{}, fi.AddrUnspec, nil), fi.ENOCQ)
}

// TestCntrMRRemoteWrite: a counter bound to a region with FI_REMOTE_WRITE
// counts each write and modifying atomic into that region once, and
// nothing else.
func TestCntrMRRemoteWrite(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	c := openCntr(t, b.dom, fi.WaitUnspec)
	require.ErrorIs(t, b.region.Bind(c, fi.REMOTE_READ), fi.ENOSYS)
	require.NoError(t, b.region.Bind(c, fi.REMOTE_WRITE))
	other, err := b.dom.MRReg(make([]byte, 64), fi.REMOTE_WRITE, 0, 0x77, 0, nil)
	require.NoError(t, err)

	require.NoError(t, a.ep.Write(make([]byte, 1<<20), mr.Desc{}, a.peer, 0, regionKey, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(1), c.Read(), "one segmented write counts once")
	require.NoError(t, a.ep.Write([]byte("x"), mr.Desc{}, a.peer, 0, 0x77, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(1), c.Read(), "a write to another region does not count")
	require.NoError(t, a.ep.Read(make([]byte, 8), mr.Desc{}, a.peer, 0, regionKey, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(1), c.Read(), "reads do not count")
	one := binary.LittleEndian.AppendUint64(nil, 1)
	require.NoError(t, a.ep.Atomic(one, 1, mr.Desc{}, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(2), c.Read(), "a modifying atomic counts")
	require.NoError(t, a.ep.FetchAtomic(nil, 1, mr.Desc{}, make([]byte, 8), mr.Desc{}, a.peer, 0, regionKey,
		fatomic.UINT64, fatomic.ATOMIC_READ, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(2), c.Read(), "an atomic read does not")
	require.NoError(t, a.ep.Write([]byte("x"), mr.Desc{}, a.peer, 1<<20, regionKey, nil))
	errComp(t, a.txCQ)
	require.Equal(t, uint64(2), c.Read(), "a refused write does not")
	require.NoError(t, c.Wait(2, 0))

	require.ErrorIs(t, b.region.Close(), fi.EBUSY, "region closes after its counter")
	require.NoError(t, c.Close())
	require.NoError(t, other.Close())
}
