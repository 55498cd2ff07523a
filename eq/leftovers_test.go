package eq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// TestClosedEQEveryWaitKind: for each wait object kind, a closed EQ
// refuses binding (Ref: FI_EINVAL, and no reference is kept), and every
// operation fails cleanly: reads, writes and posts with FI_EINVAL (Write
// without FI_WRITE, and SRead on kinds that cannot block, with FI_ENOSYS
// as when open), Control and a second Close with FI_EINVAL; Interrupt and
// Unref do nothing. Events queued at Close are gone. An EQ of a wait set
// leaves it, so the set closes and reports nothing pending.
func TestClosedEQEveryWaitKind(t *testing.T) {
	for _, w := range []fi.WaitObj{fi.WaitNone, fi.WaitUnspec, fi.WaitFD, fi.WaitMutexCond, fi.WaitYield, fi.WaitSet} {
		t.Run(w.String(), func(t *testing.T) {
			attr := eq.Attr{Size: 8, Flags: fi.WRITE, WaitObj: w}
			var set *wait.Set
			if w == fi.WaitSet {
				var err error
				set, err = wait.Open(wait.Attr{WaitObj: fi.WaitUnspec}, nil)
				require.NoError(t, err)
				attr.WaitSet = set
			}
			q, err := eq.Open(attr, "ctx")
			require.NoError(t, err)
			av := newObj(fi.ClassAV, nil)
			require.NoError(t, q.Ref(av))
			require.NoError(t, q.Post(eq.Entry{Event: eq.AVComplete, FID: av, CMData: []byte("x")}))
			require.NoError(t, q.PostErr(eq.ErrEntry{FID: av, Err: fi.EIO}))
			require.ErrorIs(t, q.Close(), fi.EBUSY)
			q.Unref(av)
			require.NoError(t, q.Close(), "queued events do not keep it open")

			require.ErrorIs(t, q.Ref(av), fi.EINVAL, "bind to a closed EQ")
			q.Unref(av) // nothing to undo: harmless
			require.ErrorIs(t, q.Close(), fi.EINVAL, "second close: no reference was kept")

			_, err = q.Read(0)
			require.ErrorIs(t, err, fi.EINVAL)
			_, err = q.Read(fi.PEEK)
			require.ErrorIs(t, err, fi.EINVAL)
			_, err = q.ReadErr(0)
			require.ErrorIs(t, err, fi.EINVAL)
			_, err = q.ReadErr(fi.PEEK)
			require.ErrorIs(t, err, fi.EINVAL)
			_, err = q.SRead(0, 0)
			if w == fi.WaitNone || w == fi.WaitSet {
				require.ErrorIs(t, err, fi.ENOSYS)
			} else {
				require.ErrorIs(t, err, fi.EINVAL)
				_, err = q.SRead(-1, 0) // must not block
				require.ErrorIs(t, err, fi.EINVAL)
			}
			require.ErrorIs(t, q.Write(eq.Entry{Event: eq.Notify}, 0), fi.EINVAL)
			require.ErrorIs(t, q.Post(eq.Entry{Event: eq.AVComplete}), fi.EINVAL)
			require.ErrorIs(t, q.PostErr(eq.ErrEntry{Err: fi.EIO}), fi.EINVAL)
			var kind fi.WaitObj
			require.ErrorIs(t, q.Control(wait.GetWaitObj, &kind), fi.EINVAL)
			var fd int
			require.ErrorIs(t, q.Control(wait.GetWait, &fd), fi.EINVAL)
			// A closed EQ answers FI_EINVAL for itself, whatever its wait
			// kind, also when it was in a wait set.
			require.ErrorIs(t, q.TryWait(), fi.EINVAL)
			if set != nil {
				require.NoError(t, set.TryWait(), "the closed EQ left the set")
			}
			q.Interrupt()
			if set != nil {
				require.NoError(t, set.Close(), "the closed EQ left its wait set")
			}

			w2 := eq.Attr{WaitObj: w}
			if w == fi.WaitSet {
				w2.WaitObj = fi.WaitUnspec
			}
			q2, err := eq.Open(w2, nil)
			require.NoError(t, err)
			require.NoError(t, q2.Close())
			require.ErrorIs(t, q2.Write(eq.Entry{}, 0), fi.ENOSYS, "not opened with FI_WRITE")
		})
	}
}
