package fabric_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wait"
)

// openPoll opens a poll set on d, closed at cleanup unless the test did.
func openPoll(t testing.TB, d *fabric.Domain) *fabric.PollSet {
	t.Helper()
	p, err := d.PollOpen(fabric.PollAttr{})
	require.NoError(t, err)
	require.Equal(t, fi.ClassPoll, p.Class())
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			require.ErrorIs(t, err, fi.EINVAL) // closed by the test
		}
	})
	return p
}

// pollUntil polls p until it reports want among its contexts (or fails
// after waitMs) and returns everything that Poll reported.
func pollUntil(t testing.TB, p *fabric.PollSet, want any) []any {
	t.Helper()
	ctx := make([]any, 8)
	deadline := time.Now().Add(waitMs * time.Millisecond)
	for time.Now().Before(deadline) {
		n, err := p.Poll(ctx)
		require.NoError(t, err)
		for _, c := range ctx[:n] {
			if c == want {
				return append([]any(nil), ctx[:n]...)
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatalf("poll never reported %v", want)
	return nil
}

// pollNone checks that p reports nothing.
func pollNone(t testing.TB, p *fabric.PollSet) {
	t.Helper()
	ctx := make([]any, 8)
	n, err := p.Poll(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "unexpected events %v", ctx[:n])
}

// TestPollSetCQs: a poll set reports a CQ while it holds completions of a
// real send over loopback, under auto and manual progress (where Poll
// itself must drive the endpoints: nothing else reads the CQs), and stops
// once they are read.
func TestPollSetCQs(t *testing.T) {
	for name, progress := range map[string]fabric.Progress{"auto": fabric.ProgressAuto, "manual": fabric.ProgressManual} {
		t.Run(name, func(t *testing.T) {
			dom := fabric.DomainAttr{Progress: progress}
			a, b := pair(t, sideOpts{dom: dom}, sideOpts{dom: dom})
			pa, pb := openPoll(t, a.dom), openPoll(t, b.dom)
			require.NoError(t, pa.Add(a.txCQ, 0))
			require.NoError(t, pa.Add(a.rxCQ, 0))
			require.NoError(t, pb.Add(b.txCQ, 0))
			require.NoError(t, pb.Add(b.rxCQ, 0))
			pollNone(t, pa)
			pollNone(t, pb)

			buf := make([]byte, 64)
			require.NoError(t, b.ep.Recv(buf, b.region.Desc(), fi.AddrUnspec, "recv"))
			require.NoError(t, a.ep.Send([]byte("poll me"), a.region.Desc(), a.peer, "send"))
			// Under manual progress each side's Poll drives its endpoint:
			// the sender's retransmits and acks, the receiver's receive.
			done := make(chan []any, 1)
			go func() {
				defer close(done)
				ctx := make([]any, 4)
				for deadline := time.Now().Add(waitMs * time.Millisecond); time.Now().Before(deadline); {
					n, err := pb.Poll(ctx)
					if err != nil || n > 0 {
						done <- append([]any(nil), ctx[:n]...)
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}()
			got := pollUntil(t, pa, "txcq")
			require.Equal(t, []any{"txcq"}, got, "only the CQ with a completion")
			require.Equal(t, []any{"rxcq"}, <-done, "the receiver's poll reports its receive CQ")
			require.Equal(t, "send", comp(t, a.txCQ).Context)
			require.Equal(t, "recv", comp(t, b.rxCQ).Context)
			require.Equal(t, "poll me", string(buf[:7]))
			pollNone(t, pa)
			pollNone(t, pb)
		})
	}
}

// TestPollSetCQError: an error completion makes its CQ reported too (the
// read then fails with FI_EAVAIL), and reading it ends the report.
func TestPollSetCQError(t *testing.T) {
	a := newSide(t, sideOpts{})
	p := openPoll(t, a.dom)
	require.NoError(t, p.Add(a.txCQ, 0))
	dead := a.deadPeer(t)
	require.NoError(t, a.ep.Send([]byte("x"), a.region.Desc(), dead, "lost"))
	pollUntil(t, p, "txcq")
	e := errComp(t, a.txCQ)
	require.Equal(t, "lost", e.Context)
	pollNone(t, p)
}

// TestPollSetCounters: a counter is reported once per change of its
// success or error count, counted by a real send or by the application,
// and not again until it changes.
func TestPollSetCounters(t *testing.T) {
	a, b := pair(t, sideOpts{cntrs: fi.SEND}, sideOpts{cntrs: fi.RECV})
	pa, pb := openPoll(t, a.dom), openPoll(t, b.dom)
	send, recv := a.cntr[fi.SEND], b.cntr[fi.RECV]
	require.NoError(t, pa.Add(send, 0))
	require.NoError(t, pb.Add(recv, 0))
	pollNone(t, pa)

	buf := make([]byte, 16)
	require.NoError(t, b.ep.Recv(buf, b.region.Desc(), fi.AddrUnspec, nil))
	require.NoError(t, a.ep.Send([]byte("count"), a.region.Desc(), a.peer, nil))
	require.Equal(t, []any{fi.SEND}, pollUntil(t, pa, fi.SEND))
	require.Equal(t, []any{fi.RECV}, pollUntil(t, pb, fi.RECV))
	require.Equal(t, uint64(1), send.Read())
	pollNone(t, pa)
	pollNone(t, pb)

	require.NoError(t, send.AddErr(1))
	require.Equal(t, []any{fi.SEND}, pollUntil(t, pa, fi.SEND), "an error count change")
	pollNone(t, pa)
	require.NoError(t, send.Set(1))
	pollNone(t, pa) // set to the value it had: nothing changed
	require.NoError(t, send.Add(2))
	require.Equal(t, []any{fi.SEND}, pollUntil(t, pa, fi.SEND))
	pollNone(t, pa)
}

// TestPollSetCheckpointStartsAtZero: a counter that counted before it
// joined is reported at the first Poll, as libfabric's util poll sets do.
func TestPollSetCheckpointStartsAtZero(t *testing.T) {
	d := openDomain(t)
	c, err := d.CntrOpen(fabric.CntrAttr{}, "c")
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Add(3))
	p := openPoll(t, d)
	require.NoError(t, p.Add(c, 0))
	require.Equal(t, []any{"c"}, pollUntil(t, p, "c"))
	pollNone(t, p)
}

// TestPollSetShortContextArray: with room for one context, members with
// events are reported in turn and none is lost.
func TestPollSetShortContextArray(t *testing.T) {
	d := openDomain(t)
	p := openPoll(t, d)
	var cs []*fabric.Cntr
	for _, name := range []string{"c0", "c1", "c2"} {
		c, err := d.CntrOpen(fabric.CntrAttr{}, name)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, p.Add(c, 0))
		cs = append(cs, c)
	}
	cq, err := d.CQOpen(fabric.CQAttr{}, "cq")
	require.NoError(t, err)
	defer cq.Close()
	require.NoError(t, p.Add(cq, 0))
	for _, c := range cs {
		require.NoError(t, c.Add(1))
	}
	ctx := make([]any, 1)
	var got []any
	for range cs {
		n, err := p.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		got = append(got, ctx[0])
	}
	require.ElementsMatch(t, []any{"c0", "c1", "c2"}, got)
	pollNone(t, p)
	n, err := p.Poll(nil)
	require.NoError(t, err, "an empty context array is no error")
	require.Zero(t, n)
}

// TestPollSetDoesNotConsumeWaitSetPending: Poll reads a counter without
// marking it seen, so a counter in a wait set stays pending for fi_wait.
func TestPollSetDoesNotConsumeWaitSetPending(t *testing.T) {
	d := openDomain(t)
	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	c, err := d.CntrOpen(fabric.CntrAttr{WaitObj: fi.WaitSet, WaitSet: set}, "c")
	require.NoError(t, err)
	p := openPoll(t, d)
	require.NoError(t, p.Add(c, 0))
	require.ErrorIs(t, set.Wait(0), fi.ETIMEDOUT)
	require.NoError(t, c.Add(1))
	require.Equal(t, []any{"c"}, pollUntil(t, p, "c"))
	require.NoError(t, set.Wait(0), "still pending in the wait set")
	require.ErrorIs(t, wait.TryWait(set), fi.EAGAIN)
	c.Read()
	require.ErrorIs(t, set.Wait(0), fi.ETIMEDOUT)
	require.NoError(t, p.Del(c, 0))
	require.NoError(t, c.Close())
	require.NoError(t, set.Close())
}

// TestPollSetMemberClosed: a member closed while in the set is never
// reported (a closed CQ counts as pending for wait sets) and leaves it.
func TestPollSetMemberClosed(t *testing.T) {
	d := openDomain(t)
	p := openPoll(t, d)
	cq, err := d.CQOpen(fabric.CQAttr{}, "cq")
	require.NoError(t, err)
	c, err := d.CntrOpen(fabric.CntrAttr{}, "c")
	require.NoError(t, err)
	require.NoError(t, p.Add(cq, 0))
	require.NoError(t, p.Add(c, 0))
	require.NoError(t, c.Add(1))
	require.NoError(t, cq.Close())
	require.NoError(t, c.Close())
	require.Equal(t, 2, p.Len())
	pollNone(t, p)
	require.Zero(t, p.Len(), "closed members left the set")
	require.ErrorIs(t, p.Add(cq, 0), fi.EINVAL, "a closed CQ cannot join")
	require.ErrorIs(t, p.Del(cq, 0), fi.ENOENT)
}

// TestPollSetBadInput: every misuse fails with its errno and changes
// nothing.
func TestPollSetBadInput(t *testing.T) {
	d := openDomain(t)
	_, err := d.PollOpen(fabric.PollAttr{Flags: 1})
	require.ErrorIs(t, err, fi.EBADFLAGS)

	p := openPoll(t, d)
	cq, err := d.CQOpen(fabric.CQAttr{}, "cq")
	require.NoError(t, err)
	defer cq.Close()
	c, err := d.CntrOpen(fabric.CntrAttr{}, "c")
	require.NoError(t, err)
	defer c.Close()
	other := openDomain(t)
	otherCQ, err := other.CQOpen(fabric.CQAttr{}, nil)
	require.NoError(t, err)
	defer otherCQ.Close()
	q, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	defer q.Close()
	set, err := wait.Open(wait.Attr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	defer set.Close()
	ep, err := d.Endpoint(fabric.EPAttr{}, nil)
	require.NoError(t, err)
	defer ep.Close()

	for _, tc := range []struct {
		name string
		obj  fi.FID
	}{
		{"nil", nil},
		{"nil CQ", (*fabric.CQ)(nil)},
		{"nil counter", (*fabric.Cntr)(nil)},
		{"nil EQ", (*eq.EQ)(nil)},
		{"EQ", q},
		{"wait set", set},
		{"endpoint", ep},
		{"domain", d},
		{"poll set", p},
		{"CQ of another domain", otherCQ},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, p.Add(tc.obj, 0), fi.EINVAL)
			require.ErrorIs(t, p.Del(tc.obj, 0), fi.EINVAL)
		})
	}
	require.Zero(t, p.Len())

	require.ErrorIs(t, p.Add(cq, fi.SEND), fi.EBADFLAGS)
	require.ErrorIs(t, p.Del(cq, 0), fi.ENOENT, "not a member")
	require.ErrorIs(t, p.Del(c, 0), fi.ENOENT, "not a member")
	require.NoError(t, p.Add(cq, 0))
	require.ErrorIs(t, p.Add(cq, 0), fi.EALREADY)
	require.ErrorIs(t, p.Del(cq, fi.SEND), fi.EBADFLAGS)
	require.Equal(t, 1, p.Len())
	require.NoError(t, p.Del(cq, 0))
	require.ErrorIs(t, p.Del(cq, 0), fi.ENOENT, "deleted twice")

	// Closing with members is allowed (libfabric's poll sets); the closed
	// set refuses everything.
	require.NoError(t, p.Add(c, 0))
	require.NoError(t, p.Close())
	require.ErrorIs(t, p.Close(), fi.EINVAL)
	_, err = p.Poll(make([]any, 1))
	require.ErrorIs(t, err, fi.EINVAL)
	require.ErrorIs(t, p.Add(cq, 0), fi.EINVAL)
	require.ErrorIs(t, p.Del(c, 0), fi.EINVAL)
	require.NoError(t, c.Add(1), "the counter itself still works")
}

// TestPollNoAllocs: fi_poll runs in applications' progress loops; once
// the set exists it allocates nothing, with or without events.
func TestPollNoAllocs(t *testing.T) {
	d := openDomain(t)
	p := openPoll(t, d)
	cq, err := d.CQOpen(fabric.CQAttr{}, "cq")
	require.NoError(t, err)
	defer cq.Close()
	c, err := d.CntrOpen(fabric.CntrAttr{}, "c")
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, p.Add(cq, 0))
	require.NoError(t, p.Add(c, 0))
	ctx := make([]any, 4)
	allocs := testing.AllocsPerRun(100, func() {
		_ = c.Add(1)
		if n, err := p.Poll(ctx); err != nil || n != 1 {
			panic("poll did not report the counter")
		}
	})
	require.Zero(t, allocs)
}
