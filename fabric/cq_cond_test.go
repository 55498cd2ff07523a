package fabric_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/wait"
)

// TestCQSReadCondThreshold: with FI_CQ_COND_THRESHOLD, fi_cq_sread's cond
// holds the wait until that many completions are queued, returns what is
// there when the timeout expires first, and an error completion ends it at
// once; with FI_CQ_COND_NONE cond is ignored.
func TestCQSReadCondThreshold(t *testing.T) {
	for name, progress := range map[string]fabric.Progress{"auto": fabric.ProgressAuto, "manual": fabric.ProgressManual} {
		t.Run(name, func(t *testing.T) {
			cond := &fabric.CQAttr{WaitObj: fi.WaitUnspec, WaitCond: fabric.CQCondThreshold}
			a, b := pair(t, sideOpts{dom: fabric.DomainAttr{Progress: progress}},
				sideOpts{dom: fabric.DomainAttr{Progress: progress}, rxCQ: cond})
			for i := range 3 {
				require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, i))
			}
			// Three sends, paced, from another goroutine (which also reads
			// their completions: that drives the sender under manual
			// progress): the read returns all three at once, after the
			// third.
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				one := make([]fabric.CQEntry, 1)
				for i := range 3 {
					time.Sleep(20 * time.Millisecond)
					if err := a.ep.Send([]byte{byte(i)}, mr.Desc{}, a.peer, nil); err != nil {
						t.Error(err)
						return
					}
					if _, err := a.txCQ.SRead(one, waitMs); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			buf := make([]fabric.CQEntry, 8)
			src := make([]fi.Addr, 8)
			n, err := b.rxCQ.SReadCond(buf, src, 3, waitMs)
			require.NoError(t, err)
			require.Equal(t, 3, n, "the wait held for the threshold")
			for i := range 3 {
				require.Equal(t, i, buf[i].Context)
				require.Equal(t, b.peer, src[i])
			}
			<-sent
			if progress == fabric.ProgressManual {
				// Below, one side waits for the other without reading:
				// under manual progress nobody would drive the peer.
				return
			}

			// Timeout before the threshold: what is queued is returned.
			require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "one"))
			require.NoError(t, a.ep.Send([]byte("1"), mr.Desc{}, a.peer, nil))
			comp(t, a.txCQ)
			queued(t, b.rxCQ, 1)
			start := time.Now()
			n, err = b.rxCQ.SReadCond(buf, nil, 5, 100)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, "one", buf[0].Context)
			require.GreaterOrEqual(t, time.Since(start), 75*time.Millisecond, "waited for the threshold first")
			_, err = b.rxCQ.SReadCond(buf, nil, 5, 20)
			require.ErrorIs(t, err, fi.EAGAIN, "nothing queued")

			// An error completion ends the wait at once.
			require.NoError(t, b.ep.Recv(make([]byte, 1), mr.Desc{}, fi.AddrUnspec, "trunc"))
			require.NoError(t, a.ep.Send([]byte("long"), mr.Desc{}, a.peer, nil))
			start = time.Now()
			_, err = b.rxCQ.SReadCond(buf, nil, 5, waitMs)
			require.ErrorIs(t, err, fi.EAVAIL)
			require.Less(t, time.Since(start), time.Duration(waitMs)*time.Millisecond/2)
			e, err := b.rxCQ.ReadErr(0)
			require.NoError(t, err)
			require.Equal(t, fi.ETRUNC, e.Err)
			comp(t, a.txCQ)

			// FI_CQ_COND_NONE (a's CQ): cond is ignored.
			require.NoError(t, a.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "none"))
			require.NoError(t, b.ep.Send([]byte("x"), mr.Desc{}, b.peer, nil))
			n, err = a.rxCQ.SReadCond(buf, nil, 5, waitMs)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		})
	}
	_, err := openDomain(t).CQOpen(fabric.CQAttr{WaitCond: 2}, nil)
	require.ErrorIs(t, err, fi.EINVAL)
}

// TestCQStrerror: fi_cq_strerror describes an error completion's
// prov_errno (and its err_data).
func TestCQStrerror(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	require.NoError(t, a.ep.Write([]byte("x"), mr.Desc{}, a.peer, 0, 0xbad, "bad key"))
	e := errComp(t, a.txCQ)
	s := a.txCQ.Strerror(e.ProvErrno, e.ErrData)
	require.Equal(t, e.Err.Error(), s)
	require.NotEmpty(t, s)
	require.Contains(t, a.txCQ.Strerror(int(fi.ETRUNC), []byte{0xab, 0xcd}), "abcd")
	require.True(t, strings.Contains(strings.ToLower(a.txCQ.Strerror(int(fi.ETRUNC), nil)), "trunc"))
}

// TestCntrWaitSetAndControl: a counter opened with FI_WAIT_SET wakes its
// set when a real operation advances it and is pending until read;
// fi_control(FI_GETWAIT) gives a counter's own fd, or its set's;
// fi_trywait works as for CQs.
func TestCntrWaitSetAndControl(t *testing.T) {
	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitFD}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	a := newSide(t, sideOpts{noEnable: true})
	b := newSide(t, sideOpts{})
	c, err := a.dom.CntrOpen(fabric.CntrAttr{WaitObj: fi.WaitSet, WaitSet: set}, nil)
	require.NoError(t, err)
	require.NoError(t, a.ep.Bind(c, fi.WRITE))
	require.NoError(t, a.ep.Enable())
	link(t, a, b)
	t.Cleanup(func() {
		// The endpoint releases the counter, the counter the domain.
		require.NoError(t, a.ep.Close())
		require.NoError(t, c.Close())
		a.close(t)
	})

	var setFD, cntrFD int
	require.NoError(t, set.Control(wait.GetWait, &setFD))
	require.NoError(t, c.Control(wait.GetWait, &cntrFD))
	require.Equal(t, setFD, cntrFD, "a counter in a set reports the set's wait object")
	require.NoError(t, set.TryWait())
	require.ErrorIs(t, set.Wait(20), fi.ETIMEDOUT)

	require.NoError(t, a.ep.Write([]byte("w"), mr.Desc{}, a.peer, 0, regionKey, nil))
	require.NoError(t, set.Wait(waitMs), "the write's count wakes the set")
	require.ErrorIs(t, set.TryWait(), fi.EAGAIN, "pending until read")
	require.ErrorIs(t, c.TryWait(), fi.EAGAIN)
	require.Equal(t, uint64(1), c.Read())
	require.NoError(t, set.TryWait(), "read: no longer pending")
	require.NoError(t, c.Wait(1, 0), "Wait works on a counter in a set")

	// A counter with its own fd: readable after an update, not before.
	d := openDomain(t)
	own, err := d.CntrOpen(fabric.CntrAttr{WaitObj: fi.WaitFD}, nil)
	require.NoError(t, err)
	defer own.Close()
	fd := -1
	require.NoError(t, own.Control(wait.GetWait, &fd))
	require.GreaterOrEqual(t, fd, 0)
	var kind fi.WaitObj
	require.NoError(t, own.Control(wait.GetWaitObj, &kind))
	require.Equal(t, fi.WaitFD, kind)
	require.NoError(t, own.TryWait())
	require.Equal(t, 0, pollFD(t, fd, 0))
	require.NoError(t, own.AddErr(1))
	require.Equal(t, 1, pollFD(t, fd, waitMs))
	require.ErrorIs(t, own.TryWait(), fi.EAGAIN)
	require.Equal(t, uint64(1), own.ReadErr())
	require.NoError(t, own.TryWait())

	none, err := d.CntrOpen(fabric.CntrAttr{}, nil)
	require.NoError(t, err)
	defer none.Close()
	require.ErrorIs(t, none.Control(wait.GetWait, &fd), fi.ENODATA)
	require.ErrorIs(t, none.TryWait(), fi.ENOSYS)
	_, err = d.CntrOpen(fabric.CntrAttr{WaitObj: fi.WaitSet}, nil)
	require.ErrorIs(t, err, fi.EINVAL, "FI_WAIT_SET without a set")
}
