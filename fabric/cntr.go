package fabric

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
	"github.com/xdpfab/xdpfab/wait"
)

// CntrEvents is enum fi_cntr_events.
type CntrEvents int

// CntrEventsComp (FI_CNTR_EVENTS_COMP) counts completed operations, the
// one kind libfabric 1.17 defines.
const CntrEventsComp CntrEvents = 0

// CntrAttr is fi_cntr_attr.
type CntrAttr struct {
	Events  CntrEvents
	WaitObj fi.WaitObj // WaitNone disables Wait; anything else blocks in Go
	WaitSet *wait.Set  // the set to join with fi.WaitSet
	Flags   fi.Flags   // reserved: 0
}

// Cntr is a completion counter (fi_cntr): a success count and an error count
// that endpoints (and MRs bound with FI_REMOTE_WRITE) advance, readable
// without locks and waitable up to a threshold.
type Cntr struct {
	fi.FIDBase
	dom  *Domain // that opened it: endpoints and regions of other domains cannot bind it
	attr CntrAttr

	value atomic.Uint64
	errs  atomic.Uint64

	// obj is the counter's own wait object (nil for FI_WAIT_NONE), for
	// FI_WAIT_SET a private one, as the CQ's (see CQ.obj); set is the
	// wait set joined with FI_WAIT_SET.
	obj *wait.Object
	set *wait.Set
	// changes counts updates of either value; seen is changes as the last
	// Read or ReadErr found it: the counter is pending in its wait set
	// (and for TryWait) while they differ.
	changes  atomic.Uint64
	seen     atomic.Uint64
	progress progressSet // endpoints whose manual progress reads drive
	closed   atomic.Bool
	refs     atomic.Int32 // endpoints bound to the counter
}

// CntrOpen is fi_cntr_open.
func (d *Domain) CntrOpen(attr CntrAttr, context any) (*Cntr, error) {
	if err := d.hold("cntr open"); err != nil {
		return nil, err
	}
	c, err := d.cntrOpen(attr, context)
	if err != nil {
		d.release()
	}
	return c, err
}

func (d *Domain) cntrOpen(attr CntrAttr, context any) (*Cntr, error) {
	if attr.Events != CntrEventsComp {
		return nil, fmt.Errorf("cntr open: events %d: %w", attr.Events, fi.EINVAL)
	}
	if attr.Flags != 0 {
		return nil, fmt.Errorf("cntr open: flags %#x: %w", uint64(attr.Flags), fi.EBADFLAGS)
	}
	c := &Cntr{FIDBase: fi.NewFIDBase(fi.ClassCntr, context), dom: d, attr: attr}
	c.progress.auto = d.attr.Progress != ProgressManual
	switch attr.WaitObj {
	case fi.WaitNone:
	case fi.WaitSet:
		if attr.WaitSet == nil {
			return nil, fmt.Errorf("cntr open: FI_WAIT_SET without a wait set: %w", fi.EINVAL)
		}
		obj, err := wait.NewObject(fi.WaitUnspec)
		if err != nil {
			return nil, fmt.Errorf("cntr open: %w", err)
		}
		if err := attr.WaitSet.Add((*cntrMember)(c)); err != nil {
			obj.Close()
			return nil, fmt.Errorf("cntr open: %w", err)
		}
		c.obj, c.set = obj, attr.WaitSet
	default:
		obj, err := wait.NewObject(attr.WaitObj)
		if err != nil {
			return nil, fmt.Errorf("cntr open: %w", err)
		}
		c.obj = obj
	}
	return c, nil
}

// cntrMember lets a counter join a wait.Set: it is pending while it has
// changed since it was last read.
type cntrMember Cntr

func (m *cntrMember) Pending() bool { return (*Cntr)(m).pending() }

func (c *Cntr) pending() bool { return c.changes.Load() != c.seen.Load() || c.closed.Load() }

// Attr returns the counter's attributes.
func (c *Cntr) Attr() CntrAttr { return c.attr }

// Read is fi_cntr_read.
func (c *Cntr) Read() uint64 {
	c.progressRead()
	return c.value.Load()
}

// ReadErr is fi_cntr_readerr.
func (c *Cntr) ReadErr() uint64 {
	c.progressRead()
	return c.errs.Load()
}

// progressRead is the progress a Read or ReadErr makes: manual progress
// drives the endpoints (progressSet.run); auto progress polls them
// (progressSet.poll, Engine.Poll) when the counter has not changed since
// the last read, as an fi_cq_read that finds its CQ empty does, so a
// thread spinning on fi_cntr_read (fi_rdm_cntr_pingpong) receives its
// completions itself while the receive goroutine stands down, instead of
// waiting for that goroutine's wake-up per packet.
func (c *Cntr) progressRead() {
	c.progress.run()
	if c.changes.Load() == c.seen.Load() {
		c.progress.poll()
	}
	c.seen.Store(c.changes.Load())
}

// Add is fi_cntr_add.
func (c *Cntr) Add(v uint64) error { c.value.Add(v); c.wake(); return nil }

// Set is fi_cntr_set.
func (c *Cntr) Set(v uint64) error { c.value.Store(v); c.wake(); return nil }

// AddErr is fi_cntr_adderr.
func (c *Cntr) AddErr(v uint64) error { c.errs.Add(v); c.wake(); return nil }

// SetErr is fi_cntr_seterr.
func (c *Cntr) SetErr(v uint64) error { c.errs.Store(v); c.wake(); return nil }

func (c *Cntr) wake() {
	c.changes.Add(1)
	c.progress.wake()
	if c.obj != nil {
		c.obj.Signal()
	}
	if c.set != nil {
		c.set.Signal()
	}
}

// Control is fi_control on the counter: wait.GetWait returns the eventfd
// (into an *int) or the mutex/cond pair (into a *wait.MutexCond) to wait
// on outside xdpfab, the set's for a counter in a wait set;
// wait.GetWaitObj returns the kind. FI_WAIT_NONE: FI_ENODATA.
func (c *Cntr) Control(cmd wait.Command, arg any) error {
	switch {
	case c.set != nil:
		return c.set.Control(cmd, arg)
	case c.obj != nil:
		return c.obj.Control(cmd, arg)
	}
	return fmt.Errorf("cntr control: FI_WAIT_NONE: %w", fi.ENODATA)
}

// TryWait is fi_trywait for the counter: FI_EAGAIN when it changed since
// it was last read, else its wait object is armed so that a poll on it
// wakes on the next change.
func (c *Cntr) TryWait() error {
	switch {
	case c.closed.Load():
		return fmt.Errorf("cntr trywait: closed: %w", fi.EINVAL)
	case c.set != nil:
		return c.set.TryWait()
	case c.obj == nil:
		return fmt.Errorf("cntr trywait: FI_WAIT_NONE: %w", fi.ENOSYS)
	}
	c.obj.Reset()
	if c.pending() {
		return fi.EAGAIN
	}
	return nil
}

// Wait is fi_cntr_wait: it blocks until the counter reaches threshold, the
// error count changes (FI_EAVAIL), timeoutMs milliseconds pass (FI_ETIMEDOUT;
// negative waits forever) or the counter is closed (FI_ECANCELED). It fails
// with FI_ENOSYS on a counter opened with FI_WAIT_NONE.
func (c *Cntr) Wait(threshold uint64, timeoutMs int) error {
	if c.obj == nil {
		return fmt.Errorf("cntr wait: opened with FI_WAIT_NONE: %w", fi.ENOSYS)
	}
	errs0 := c.errs.Load()
	ready := func() bool {
		return c.value.Load() >= threshold || c.errs.Load() != errs0 || c.closed.Load()
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	deadline := time.Now().Add(timeout)
	var err error
	if c.progress.manual() {
		if !c.progress.spin(timeoutMs, ready) {
			err = fi.ETIMEDOUT
		}
	} else {
		// Auto progress: wait by receiving where possible, as SRead does.
		var held, waited bool
		if timeoutMs != 0 {
			held, waited = c.progress.assistedWait(deadline, timeoutMs < 0, ready)
		}
		switch {
		case held:
		case waited:
			err = fi.ETIMEDOUT
		default:
			if timeoutMs > 0 {
				timeout = max(time.Until(deadline), 0)
			}
			err = c.obj.Wait(timeout, ready)
		}
	}
	switch {
	case c.value.Load() >= threshold:
		return nil
	case c.errs.Load() != errs0:
		return fmt.Errorf("cntr wait: error count changed: %w", fi.EAVAIL)
	case c.closed.Load():
		return fmt.Errorf("cntr wait: counter closed: %w", fi.ECANCELED)
	case err != nil && errors.Is(err, fi.ETIMEDOUT):
		return fi.ETIMEDOUT
	}
	return fmt.Errorf("cntr wait: %w", err)
}

// Close is fi_close: FI_EBUSY while an endpoint is bound. (An MR bound to
// the counter does not hold it: the MR's Close is what fails while its
// counter is open, fi_mr(3).)
func (c *Cntr) Close() error {
	if n := c.refs.Load(); n > 0 {
		return fmt.Errorf("cntr close: %d object(s) bound: %w", n, fi.EBUSY)
	}
	if c.closed.Swap(true) {
		return fmt.Errorf("cntr close: already closed: %w", fi.EINVAL)
	}
	if c.obj != nil {
		c.obj.Signal()
		c.obj.Close()
	}
	if c.set != nil {
		c.set.Remove((*cntrMember)(c))
	}
	c.progress.close()
	c.dom.release()
	return nil
}

// Closed reports whether the counter was closed (mr.Counter: an MR bound to
// a closed counter stops counting into it).
func (c *Cntr) Closed() bool { return c.closed.Load() }

// MRTable is the memory-registration table of the counter's domain:
// mr.MR.Bind refuses a counter of another domain with it.
func (c *Cntr) MRTable() *mr.Table { return c.dom.mrs }

// ref and unref track bindings for Close.
func (c *Cntr) ref()   { c.refs.Add(1) }
func (c *Cntr) unref() { c.refs.Add(-1) }
