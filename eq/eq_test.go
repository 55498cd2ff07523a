package eq_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// obj is a stand-in fabric object (an AV, MR or endpoint) for events to
// point at.
type obj struct{ fi.FIDBase }

func newObj(class fi.Class, ctx any) *obj { return &obj{fi.NewFIDBase(class, ctx)} }

func open(t *testing.T, attr eq.Attr) *eq.EQ {
	t.Helper()
	q, err := eq.Open(attr, t.Name())
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func TestOpenSizes(t *testing.T) {
	sizes := []int{1, 2, 3, 7, 63, 64, 65, 100, 1000, 1023, 1024, 1025, 4097, 65535, 65536}
	for s := 1; s <= 65536; s *= 2 {
		sizes = append(sizes, s)
	}
	for _, w := range []fi.WaitObj{fi.WaitNone, fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield} {
		for _, size := range sizes {
			q, err := eq.Open(eq.Attr{Size: size, WaitObj: w}, nil)
			require.NoError(t, err, "size %d %v", size, w)
			require.Equal(t, size, q.Attr().Size)
			require.NoError(t, q.Close(), "size %d %v", size, w)
		}
	}
	q, err := eq.Open(eq.Attr{}, "ctx")
	require.NoError(t, err)
	require.Equal(t, eq.DefaultSize, q.Attr().Size)
	require.Equal(t, fi.ClassEQ, q.Class())
	require.Equal(t, "ctx", q.Context())
	require.NoError(t, q.Close())

	for _, size := range []int{-1, eq.MaxSize + 1} {
		_, err := eq.Open(eq.Attr{Size: size}, nil)
		require.ErrorIs(t, err, fi.EINVAL, "size %d", size)
	}
	q, err = eq.Open(eq.Attr{Size: eq.MaxSize}, nil) // memory grows on demand
	require.NoError(t, err)
	require.NoError(t, q.Close())
}

func TestOpenAttrErrors(t *testing.T) {
	_, err := eq.Open(eq.Attr{Flags: fi.READ}, nil)
	require.ErrorIs(t, err, fi.EBADFLAGS)
	for _, w := range []fi.WaitObj{fi.WaitPollFD, 42, -1} {
		_, err = eq.Open(eq.Attr{WaitObj: w}, nil)
		require.ErrorIs(t, err, fi.EINVAL, "%v", w)
	}
	_, err = eq.Open(eq.Attr{WaitObj: fi.WaitSet}, nil)
	require.ErrorIs(t, err, fi.EINVAL, "FI_WAIT_SET needs a set")
	for _, v := range []int{-1, runtime.NumCPU()} {
		_, err = eq.Open(eq.Attr{Flags: fi.AFFINITY, SignalingVector: v}, nil)
		require.ErrorIs(t, err, fi.EINVAL, "vector %d", v)
	}
	// The hint is accepted in range, and ignored without FI_AFFINITY.
	q := open(t, eq.Attr{Flags: fi.AFFINITY, SignalingVector: runtime.NumCPU() - 1})
	require.Equal(t, fi.AFFINITY, q.Attr().Flags)
	open(t, eq.Attr{SignalingVector: -7})
	// The wait set is ignored unless WaitObj is FI_WAIT_SET.
	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	q = open(t, eq.Attr{WaitObj: fi.WaitFD, WaitSet: set})
	require.Nil(t, q.Attr().WaitSet)
	require.NoError(t, set.Close(), "the FD EQ did not join the set")
}

func TestWaitObjectsOpen(t *testing.T) {
	for _, w := range []fi.WaitObj{fi.WaitNone, fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield} {
		q, err := eq.Open(eq.Attr{Size: 4, WaitObj: w}, nil)
		require.NoError(t, err, "%v", w)
		var got fi.WaitObj = -1
		require.NoError(t, q.Control(wait.GetWaitObj, &got))
		require.Equal(t, w, got)
		require.NoError(t, q.Close())
	}
}

func TestReadEmpty(t *testing.T) {
	q := open(t, eq.Attr{Size: 4})
	_, err := q.Read(0)
	require.ErrorIs(t, err, fi.EAGAIN)
	_, err = q.Read(fi.PEEK)
	require.ErrorIs(t, err, fi.EAGAIN)
	_, err = q.ReadErr(0)
	require.ErrorIs(t, err, fi.EAGAIN)
	_, err = q.Read(fi.SEND)
	require.ErrorIs(t, err, fi.EBADFLAGS)
	_, err = q.ReadErr(fi.PEEK)
	require.ErrorIs(t, err, fi.EAGAIN, "FI_PEEK is accepted by fi_eq_readerr")
	_, err = q.ReadErr(fi.SEND)
	require.ErrorIs(t, err, fi.EBADFLAGS)
}

func TestWriteNeedsFIWrite(t *testing.T) {
	q := open(t, eq.Attr{Size: 4})
	err := q.Write(eq.Entry{Event: eq.Notify}, 0)
	require.ErrorIs(t, err, fi.ENOSYS)
	_, err = q.Read(0)
	require.ErrorIs(t, err, fi.EAGAIN, "the rejected write queued nothing")
	require.NoError(t, q.Post(eq.Entry{Event: eq.AVComplete}), "providers post without FI_WRITE")

	w := open(t, eq.Attr{Size: 4, Flags: fi.WRITE})
	require.ErrorIs(t, w.Write(eq.Entry{}, fi.PEEK), fi.EBADFLAGS)
	require.NoError(t, w.Write(eq.Entry{Event: eq.Notify, Data: 9}, 0))
	e, err := w.Read(0)
	require.NoError(t, err)
	require.Equal(t, eq.Entry{Event: eq.Notify, Data: 9}, e)
}

// TestOverrun follows fi_eq(3) NOTES: exactly size writes succeed, the next
// fails with FI_EOVERRUN and so does every later one; reads return the size
// valid events, then an FI_EOVERRUN error event, for good.
func TestOverrun(t *testing.T) {
	for _, size := range []int{1, 2, 5, 64, 65, 100, 1024, 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			q := open(t, eq.Attr{Size: size, Flags: fi.WRITE})
			for i := range size {
				require.NoError(t, q.Write(eq.Entry{Event: eq.Notify, Data: uint64(i)}, 0), "write %d", i)
			}
			require.ErrorIs(t, q.Write(eq.Entry{Event: eq.Notify}, 0), fi.EOVERRUN)
			require.ErrorIs(t, q.Write(eq.Entry{Event: eq.Notify}, 0), fi.EOVERRUN)
			require.ErrorIs(t, q.Post(eq.Entry{Event: eq.AVComplete}), fi.EOVERRUN)
			require.ErrorIs(t, q.PostErr(eq.ErrEntry{Err: fi.EIO}), fi.EOVERRUN)
			for i := range size {
				e, err := q.Read(0)
				require.NoError(t, err, "read %d", i)
				require.Equal(t, uint64(i), e.Data)
			}
			for range 3 {
				_, err := q.Read(0)
				require.ErrorIs(t, err, fi.EAVAIL)
				ee, err := q.ReadErr(0)
				require.NoError(t, err)
				require.Equal(t, fi.EOVERRUN, ee.Err)
				require.Same(t, q, ee.FID)
				require.Equal(t, q.Context(), ee.Context)
			}
			// Still fatal after the error was read.
			require.ErrorIs(t, q.Write(eq.Entry{}, 0), fi.EOVERRUN)
		})
	}
}

func TestOverrunWithErrorEntries(t *testing.T) {
	q := open(t, eq.Attr{Size: 3})
	require.NoError(t, q.Post(eq.Entry{Event: eq.AVComplete, Data: 1}))
	require.NoError(t, q.PostErr(eq.ErrEntry{Err: fi.EINVAL, Data: 2}))
	require.NoError(t, q.Post(eq.Entry{Event: eq.AVComplete, Data: 3}))
	require.ErrorIs(t, q.PostErr(eq.ErrEntry{Err: fi.EINVAL}), fi.EOVERRUN, "errors count toward size")
	e, err := q.Read(0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), e.Data)
	ee, err := q.ReadErr(0)
	require.NoError(t, err)
	require.Equal(t, fi.EINVAL, ee.Err)
	require.Equal(t, uint64(2), ee.Data)
	e, err = q.Read(0)
	require.NoError(t, err)
	require.Equal(t, uint64(3), e.Data)
	ee, err = q.ReadErr(0)
	require.NoError(t, err)
	require.Equal(t, fi.EOVERRUN, ee.Err)
}

// TestPeek: five peeks see the head without consuming it, five reads then
// take the five events in order.
func TestPeek(t *testing.T) {
	q := open(t, eq.Attr{Size: 8, Flags: fi.WRITE})
	for i := range 5 {
		require.NoError(t, q.Write(eq.Entry{Event: eq.Notify, Data: uint64(i)}, 0))
	}
	for range 5 {
		e, err := q.Read(fi.PEEK)
		require.NoError(t, err)
		require.Equal(t, uint64(0), e.Data)
	}
	for i := range 5 {
		e, err := q.Read(fi.PEEK)
		require.NoError(t, err)
		require.Equal(t, uint64(i), e.Data, "peek before read %d", i)
		e, err = q.Read(0)
		require.NoError(t, err)
		require.Equal(t, uint64(i), e.Data)
	}
	_, err := q.Read(fi.PEEK)
	require.ErrorIs(t, err, fi.EAGAIN)
}

// TestPeekThenRead alternates a peek and a read over events whose FID and
// context differ, checking both each time (fabtests' eq_write_read_self).
func TestPeekThenRead(t *testing.T) {
	q := open(t, eq.Attr{Size: 32, Flags: fi.WRITE})
	fabric := newObj(fi.ClassFabric, nil)
	for i := range 5 {
		var fid fi.FID = q
		if i&1 != 0 {
			fid = fabric
		}
		require.NoError(t, q.Write(eq.Entry{Event: eq.Notify, FID: fid, Context: i}, 0))
	}
	for i := range 10 {
		var flags fi.Flags
		if i&1 == 0 {
			flags = fi.PEEK
		}
		e, err := q.Read(flags)
		require.NoError(t, err, "iter %d", i)
		require.Equal(t, eq.Notify, e.Event)
		require.Equal(t, i/2, e.Context, "iter %d", i)
		var want fi.FID = q
		if i&2 != 0 {
			want = fabric
		}
		require.Same(t, want, e.FID, "iter %d", i)
	}
	_, err := q.Read(0)
	require.ErrorIs(t, err, fi.EAGAIN)
	_, err = q.ReadErr(0)
	require.ErrorIs(t, err, fi.EAGAIN, "events only: nothing for ReadErr")
}

// TestOrderAcrossGrowth: the ring grows on demand while its head has
// wrapped; the order is kept.
func TestOrderAcrossGrowth(t *testing.T) {
	q := open(t, eq.Attr{Size: 1000})
	next, want := uint64(0), uint64(0)
	post := func(n int) {
		for range n {
			require.NoError(t, q.Post(eq.Entry{Data: next}))
			next++
		}
	}
	read := func(n int) {
		for range n {
			e, err := q.Read(0)
			require.NoError(t, err)
			require.Equal(t, want, e.Data)
			want++
		}
	}
	post(50)
	read(30)
	post(60) // wraps the initial ring
	read(10)
	post(900) // 970 queued: grows several times with a wrapped head
	post(30)  // exactly full
	require.ErrorIs(t, q.Post(eq.Entry{}), fi.EOVERRUN)
	read(1000)
	_, err := q.Read(0)
	require.ErrorIs(t, err, fi.EAVAIL)
}

func TestControlCompletions(t *testing.T) {
	q := open(t, eq.Attr{Size: 8})
	av, mr, mc := newObj(fi.ClassAV, "av"), newObj(fi.ClassMR, "mr"), newObj(fi.ClassMC, "mc")
	opCtx := new(int)
	want := []eq.Entry{
		{Event: eq.AVComplete, FID: av, Context: opCtx, Data: 17},
		{Event: eq.MRComplete, FID: mr, Context: "mr"},
		{Event: eq.JoinComplete, FID: mc, Context: "join", Data: 1},
	}
	for _, e := range want {
		require.NoError(t, q.Post(e))
	}
	for _, w := range want {
		e, err := q.Read(0)
		require.NoError(t, err)
		require.Equal(t, w.Event, e.Event)
		require.Same(t, w.FID, e.FID)
		require.Equal(t, w.Context, e.Context)
		require.Equal(t, w.Data, e.Data)
	}
	require.Equal(t, "FI_AV_COMPLETE", eq.AVComplete.String())
	require.Equal(t, "FI_JOIN_COMPLETE", eq.JoinComplete.String())
	require.Equal(t, "Event(99)", eq.Event(99).String())
}

// TestCMEntries: connection events carry their data bytes (copied at
// write time) and the peer information.
func TestCMEntries(t *testing.T) {
	q := open(t, eq.Attr{Size: 8, Flags: fi.WRITE})
	pep, ep := newObj(fi.ClassPEP, nil), newObj(fi.ClassEP, nil)
	data := []byte("hello, listener")
	info := struct{ Peer string }{"10.0.0.2:7"}
	require.NoError(t, q.Write(eq.Entry{Event: eq.ConnReq, FID: pep, CMData: data, Info: info}, 0))
	require.NoError(t, q.Post(eq.Entry{Event: eq.Connected, FID: ep, CMData: []byte{1, 2, 3}}))
	require.NoError(t, q.Post(eq.Entry{Event: eq.Shutdown, FID: ep}))
	data[0] = 'J' // the queue kept its own copy

	e, err := q.Read(fi.PEEK)
	require.NoError(t, err)
	require.Equal(t, []byte("hello, listener"), e.CMData)
	e, err = q.Read(0)
	require.NoError(t, err)
	require.Equal(t, eq.ConnReq, e.Event)
	require.Same(t, pep, e.FID)
	require.Equal(t, []byte("hello, listener"), e.CMData)
	require.Equal(t, info, e.Info)

	e, err = q.Read(0)
	require.NoError(t, err)
	require.Equal(t, eq.Connected, e.Event)
	require.Equal(t, []byte{1, 2, 3}, e.CMData)

	e, err = q.Read(0)
	require.NoError(t, err)
	require.Equal(t, eq.Shutdown, e.Event)
	require.Same(t, ep, e.FID)
	require.Empty(t, e.CMData)
}

// TestErrorEntries: while an error entry is at the head Read answers
// FI_EAVAIL; ReadErr returns err, prov_errno and err_data; errors stay in
// stream order.
func TestErrorEntries(t *testing.T) {
	q := open(t, eq.Attr{Size: 8})
	av := newObj(fi.ClassAV, "av")
	opCtx := new(int)
	errData := []byte("address 3: no route")
	require.NoError(t, q.Post(eq.Entry{Event: eq.AVComplete, FID: av, Data: 2}))
	require.NoError(t, q.PostErr(eq.ErrEntry{FID: av, Context: opCtx, Data: 3, Err: fi.EHOSTUNREACH, ProvErrno: 113, ErrData: errData}))
	errData[0] = 'X'

	_, err := q.ReadErr(0)
	require.ErrorIs(t, err, fi.EAGAIN, "the head is an event")
	e, err := q.Read(0)
	require.NoError(t, err)
	require.Equal(t, uint64(2), e.Data)

	for range 2 {
		_, err = q.Read(0)
		require.ErrorIs(t, err, fi.EAVAIL)
		_, err = q.Read(fi.PEEK)
		require.ErrorIs(t, err, fi.EAVAIL)
	}
	ee, err := q.ReadErr(0)
	require.NoError(t, err)
	require.Same(t, av, ee.FID)
	require.Same(t, opCtx, ee.Context)
	require.Equal(t, uint64(3), ee.Data)
	require.Equal(t, fi.EHOSTUNREACH, ee.Err)
	require.Equal(t, 113, ee.ProvErrno)
	require.Equal(t, []byte("address 3: no route"), ee.ErrData)
	require.Equal(t, "no route to host: address 3: no route", q.Strerror(ee.ProvErrno, ee.ErrData))

	_, err = q.ReadErr(0)
	require.ErrorIs(t, err, fi.EAGAIN)
	_, err = q.Read(0)
	require.ErrorIs(t, err, fi.EAGAIN)

	require.ErrorIs(t, q.PostErr(eq.ErrEntry{Err: 0}), fi.EINVAL)
	require.ErrorIs(t, q.PostErr(eq.ErrEntry{Err: -fi.EIO}), fi.EINVAL)
}

func TestStrerror(t *testing.T) {
	q := open(t, eq.Attr{Size: 1})
	require.Equal(t, "Success", q.Strerror(0, nil))
	require.Equal(t, "connection refused", q.Strerror(111, nil))
	require.Equal(t, "connection refused", q.Strerror(-111, nil))
	require.Equal(t, "Queue has been overrun", q.Strerror(int(fi.EOVERRUN), nil))
	require.Equal(t, "Unknown error 9999: 0x00ff10", q.Strerror(9999, []byte{0, 0xff, 0x10}))
	require.Equal(t, "input/output error: disk on fire", q.Strerror(5, []byte("disk on fire")))
}

// TestCloseBusy: an EQ with a bound object cannot be closed (FI_EBUSY);
// once unbound it can, queued events are lost and every call then fails.
func TestCloseBusy(t *testing.T) {
	q, err := eq.Open(eq.Attr{Size: 4, Flags: fi.WRITE, WaitObj: fi.WaitFD}, nil)
	require.NoError(t, err)
	av, mr := newObj(fi.ClassAV, nil), newObj(fi.ClassMR, nil)
	require.ErrorIs(t, q.Ref(nil), fi.EINVAL)
	require.NoError(t, q.Ref(av))
	require.NoError(t, q.Ref(av))
	require.NoError(t, q.Ref(mr))
	require.NoError(t, q.Post(eq.Entry{Event: eq.AVComplete}))
	require.ErrorIs(t, q.Close(), fi.EBUSY)
	q.Unref(av)
	require.ErrorIs(t, q.Close(), fi.EBUSY, "av bound twice")
	q.Unref(av)
	q.Unref(mr)
	q.Unref(mr) // extra Unref is harmless
	_, err = q.Read(fi.PEEK)
	require.NoError(t, err, "Close failures left the EQ usable")
	require.NoError(t, q.Close())

	require.ErrorIs(t, q.Close(), fi.EINVAL)
	_, err = q.Read(0)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = q.ReadErr(0)
	require.ErrorIs(t, err, fi.EINVAL)
	_, err = q.SRead(0, 0)
	require.ErrorIs(t, err, fi.EINVAL)
	require.ErrorIs(t, q.Write(eq.Entry{}, 0), fi.EINVAL)
	require.ErrorIs(t, q.Post(eq.Entry{}), fi.EINVAL)
	require.ErrorIs(t, q.PostErr(eq.ErrEntry{Err: fi.EIO}), fi.EINVAL)
	require.ErrorIs(t, q.Ref(av), fi.EINVAL)
	require.ErrorIs(t, q.TryWait(), fi.EINVAL)
	var fd int
	require.ErrorIs(t, q.Control(wait.GetWait, &fd), fi.EINVAL)
}

func TestControl(t *testing.T) {
	for _, w := range []fi.WaitObj{fi.WaitNone, fi.WaitUnspec, fi.WaitYield} {
		q := open(t, eq.Attr{WaitObj: w})
		var fd int
		require.ErrorIs(t, q.Control(wait.GetWait, &fd), fi.ENODATA, "%v", w)
		require.ErrorIs(t, q.Control(wait.Command(999), nil), fi.ENOSYS, "%v", w)
	}
	q := open(t, eq.Attr{WaitObj: fi.WaitFD})
	var mc wait.MutexCond
	require.ErrorIs(t, q.Control(wait.GetWait, &mc), fi.EINVAL, "FD wants *int")
	require.ErrorIs(t, q.Control(wait.GetWait, nil), fi.EINVAL)
	require.ErrorIs(t, q.Control(wait.GetWaitObj, new(int)), fi.EINVAL)
	require.ErrorIs(t, q.Control(wait.Command(999), nil), fi.ENOSYS)
	fd := -1
	require.NoError(t, q.Control(wait.GetWait, &fd))
	require.GreaterOrEqual(t, fd, 0)

	q = open(t, eq.Attr{WaitObj: fi.WaitMutexCond})
	require.ErrorIs(t, q.Control(wait.GetWait, &fd), fi.EINVAL, "MUTEX_COND wants *wait.MutexCond")
	require.NoError(t, q.Control(wait.GetWait, &mc))
	require.NotNil(t, mc.Mutex)
	require.Same(t, mc.Mutex, mc.Cond.L)
}

func TestTryWaitKinds(t *testing.T) {
	q := open(t, eq.Attr{})
	require.ErrorIs(t, q.TryWait(), fi.ENOSYS, "FI_WAIT_NONE has nothing to block on")
	for _, w := range []fi.WaitObj{fi.WaitUnspec, fi.WaitYield, fi.WaitMutexCond, fi.WaitFD} {
		q := open(t, eq.Attr{WaitObj: w})
		require.NoError(t, q.TryWait(), "%v", w)
		require.NoError(t, q.Post(eq.Entry{}))
		require.ErrorIs(t, q.TryWait(), fi.EAGAIN, "%v", w)
		require.ErrorIs(t, wait.TryWait(q), fi.EAGAIN, "%v", w)
		_, err := q.Read(0)
		require.NoError(t, err)
		require.NoError(t, q.TryWait(), "%v", w)
		require.NoError(t, q.PostErr(eq.ErrEntry{Err: fi.EIO}))
		require.ErrorIs(t, q.TryWait(), fi.EAGAIN, "%v: error entries are pending too", w)
	}
}

func TestEntryErrorsMatch(t *testing.T) {
	q := open(t, eq.Attr{Size: 1})
	_, err := q.Read(0)
	require.True(t, errors.Is(err, fi.EAGAIN))
	require.Equal(t, fi.EAGAIN, fi.ErrnoOf(err))
}
