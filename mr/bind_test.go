package mr_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// notCounter has the counter class but not what an MR needs of one.
type notCounter struct{ fi.FIDBase }

func TestBind(t *testing.T) {
	tab, _ := newTable(t, 0)
	buf := make([]byte, 64)
	m, err := tab.Reg(buf, remoteBits, 0, 1, 0, nil)
	require.NoError(t, err)
	c := newCounter()

	requireErrno(t, m.Bind(nil, 0), fi.EINVAL)
	requireErrno(t, m.Bind(c, 0), fi.EINVAL, "a counter tracks FI_REMOTE_WRITE")
	requireErrno(t, m.Bind(c, fi.REMOTE_READ), fi.ENOSYS, "no events on remote reads")
	requireErrno(t, m.Bind(c, fi.REMOTE_WRITE|fi.SEND), fi.EBADFLAGS)
	requireErrno(t, m.Bind(&notCounter{fi.NewFIDBase(fi.ClassCntr, nil)}, fi.REMOTE_WRITE), fi.EINVAL)
	q, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	requireErrno(t, m.Bind(q, 0), fi.ENOSYS, "MRs report to counters, not EQs")
	cq := fi.NewFIDBase(fi.ClassCQ, nil)
	requireErrno(t, m.Bind(&cq, fi.REMOTE_WRITE), fi.ENOSYS)
	closed := newCounter()
	closed.closed.Store(true)
	requireErrno(t, m.Bind(closed, fi.REMOTE_WRITE), fi.EINVAL, "closed counter")

	// An enabled-from-the-start region takes counters at any time.
	require.NoError(t, m.Bind(c, fi.REMOTE_WRITE))
	requireErrno(t, m.Bind(c, fi.REMOTE_WRITE), fi.EALREADY)
	ep := newEndpoint()
	require.NoError(t, m.Bind(ep, 0), "endpoint binding without FI_MR_ENDPOINT")

	sp, err := tab.Lookup(1, 0, 8, fi.REMOTE_WRITE)
	require.NoError(t, err)
	sp.MR.CountRemoteWrite()
	require.Equal(t, uint64(1), c.n.Load())

	requireErrno(t, m.Close(), fi.EBUSY, "counter and endpoint open")
	c.closed.Store(true)
	requireErrno(t, m.Close(), fi.EBUSY, "endpoint open")
	_, err = tab.Lookup(1, 0, 8, fi.REMOTE_WRITE)
	require.NoError(t, err, "a refused close leaves the region registered")
	ep.closed.Store(true)
	require.NoError(t, m.Close())
	requireErrno(t, m.Bind(newCounter(), fi.REMOTE_WRITE), fi.EINVAL, "closed region")
	requireErrno(t, m.Enable(), fi.EINVAL, "closed region")
}

// TestAsyncReg: with an EQ bound with FI_REG_MR registration returns at
// once and completes with FI_MR_COMPLETE; the handle is valid first.
func TestAsyncReg(t *testing.T) {
	tab, mm := newTable(t, 0)
	q, err := eq.Open(eq.Attr{Size: 16}, nil)
	require.NoError(t, err)
	requireErrno(t, tab.BindEQ(nil, fi.REG_MR), fi.EINVAL)
	requireErrno(t, tab.BindEQ(q, 0), fi.EBADFLAGS)
	require.NoError(t, tab.BindEQ(q, fi.REG_MR))
	requireErrno(t, tab.BindEQ(q, fi.REG_MR), fi.EALREADY)
	requireErrno(t, q.Close(), fi.EBUSY, "the domain is bound to the EQ")

	// Hold the completion inside the mirror update.
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	mm.setHook(func(bpf.XdpfabMrKey, bpf.XdpfabMrValue) { entered <- struct{}{}; <-gate })
	buf := make([]byte, 64)
	m, err := tab.Reg(buf, remoteBits, 0, 0xC0DE, 0, "reg-ctx")
	require.NoError(t, err)
	require.NotNil(t, m, "the handle exists before the event")
	<-entered
	require.Equal(t, fi.KeyNotAvail, m.Key(), "not completed yet")
	_, _, err = m.RawAttr(make([]byte, 8), 0)
	requireErrno(t, err, fi.EOPBADSTATE)
	_, err = tab.Lookup(0xC0DE, 0, 8, fi.REMOTE_READ)
	require.ErrorIs(t, err, mr.UnknownKey, "not in the kernel map yet either")
	_, err = q.Read(0)
	requireErrno(t, err, fi.EAGAIN)
	_, err = tab.Reg(buf, remoteBits, 0, 0xC0DE, 0, nil)
	requireErrno(t, err, fi.ENOKEY, "the key is taken already")
	_, err = tab.Reg(nil, remoteBits, 0, 5, 0, "bad")
	requireErrno(t, err, fi.EINVAL, "a failing call ...")
	close(gate)
	mm.setHook(nil)

	e := readEvent(t, q)
	require.Equal(t, eq.MRComplete, e.Event)
	require.Equal(t, fi.FID(m), e.FID)
	require.Equal(t, "reg-ctx", e.Context)
	require.Equal(t, uint64(0xC0DE), m.Key(), "completed")
	_, err = tab.Lookup(0xC0DE, 0, 8, fi.REMOTE_READ)
	require.NoError(t, err)
	_, err = q.Read(0)
	requireErrno(t, err, fi.EAGAIN, "... reports no event")

	// A registration that fails asynchronously reports an error entry.
	mm.failNext(fi.ENOMEM)
	m2, err := tab.Reg(buf, remoteBits, 0, 0xBEEF, 0, "fail-ctx")
	require.NoError(t, err)
	var ee eq.ErrEntry
	require.Eventually(t, func() bool {
		ee, err = q.ReadErr(0)
		return err == nil
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, fi.ENOMEM, ee.Err)
	require.Equal(t, "fail-ctx", ee.Context)
	require.Equal(t, fi.FID(m2), ee.FID)
	require.Equal(t, fi.KeyNotAvail, m2.Key())
	requireErrno(t, m2.Bind(newCounter(), fi.REMOTE_WRITE), fi.EINVAL)
	require.NoError(t, m2.Close(), "the failed handle is released")
	_, err = q.Read(0)
	requireErrno(t, err, fi.EAGAIN)

	// Operations on a pending region wait for its completion.
	gate = make(chan struct{})
	mm.setHook(func(bpf.XdpfabMrKey, bpf.XdpfabMrValue) { <-gate })
	m3, err := tab.Reg(buf, remoteBits, 0, 3, 0, nil)
	require.NoError(t, err)
	closed := make(chan error)
	go func() { closed <- m3.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned before the registration completed")
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	require.NoError(t, <-closed)
	mm.setHook(nil)
	require.Equal(t, eq.MRComplete, readEvent(t, q).Event)

	require.NoError(t, m.Close())
	require.NoError(t, tab.Close())
	require.NoError(t, q.Close(), "closing the domain unbinds the EQ")
}

func readEvent(t *testing.T, q *eq.EQ) eq.Entry {
	t.Helper()
	var e eq.Entry
	require.Eventually(t, func() bool {
		var err error
		e, err = q.Read(0)
		return err == nil
	}, 5*time.Second, time.Millisecond)
	return e
}

// TestAsyncOwner: the EQ binding is made on behalf of the configured owner.
func TestAsyncOwner(t *testing.T) {
	owner := fi.NewFIDBase(fi.ClassDomain, "dom")
	tab, err := mr.NewTable(mr.Config{Owner: &owner})
	require.NoError(t, err)
	q, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	require.NoError(t, tab.BindEQ(q, fi.REG_MR))
	q.Unref(&owner) // as the owner's own unbinding would
	require.NoError(t, q.Close())
	requireErrno(t, tab.BindEQ(q, fi.REG_MR), fi.EALREADY)
	require.NoError(t, tab.Close())
	requireErrno(t, tab.BindEQ(q, fi.REG_MR), fi.EINVAL, "closed table")
}
