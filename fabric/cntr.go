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

// CntrEventsComp (FI_CNTR_EVENTS_COMP) counts completed operations.
const CntrEventsComp CntrEvents = 0

// CntrAttr is fi_cntr_attr.
type CntrAttr struct {
	Events  CntrEvents
	WaitObj fi.WaitObj // WaitNone disables Wait; anything else blocks in Go
	Flags   fi.Flags
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

	obj      *wait.Object // nil for FI_WAIT_NONE
	progress progressSet  // endpoints whose manual progress reads drive
	closed   atomic.Bool
	refs     atomic.Int32 // endpoints bound to the counter
}

// CntrOpen is fi_cntr_open.
func (d *Domain) CntrOpen(attr CntrAttr, context any) (*Cntr, error) {
	if attr.Events != CntrEventsComp {
		return nil, fmt.Errorf("cntr open: events %d: %w", attr.Events, fi.EINVAL)
	}
	if attr.Flags != 0 {
		return nil, fmt.Errorf("cntr open: flags %#x: %w", uint64(attr.Flags), fi.EBADFLAGS)
	}
	c := &Cntr{FIDBase: fi.NewFIDBase(fi.ClassCntr, context), dom: d, attr: attr}
	c.progress.auto = d.attr.Progress != ProgressManual
	if attr.WaitObj != fi.WaitNone {
		obj, err := wait.NewObject(attr.WaitObj)
		if err != nil {
			return nil, fmt.Errorf("cntr open: %w", err)
		}
		c.obj = obj
	}
	return c, nil
}

// Read is fi_cntr_read.
func (c *Cntr) Read() uint64 { c.progress.run(); return c.value.Load() }

// ReadErr is fi_cntr_readerr.
func (c *Cntr) ReadErr() uint64 { c.progress.run(); return c.errs.Load() }

// Add is fi_cntr_add.
func (c *Cntr) Add(v uint64) error { c.value.Add(v); c.wake(); return nil }

// Set is fi_cntr_set.
func (c *Cntr) Set(v uint64) error { c.value.Store(v); c.wake(); return nil }

// AddErr is fi_cntr_adderr.
func (c *Cntr) AddErr(v uint64) error { c.errs.Add(v); c.wake(); return nil }

// SetErr is fi_cntr_seterr.
func (c *Cntr) SetErr(v uint64) error { c.errs.Store(v); c.wake(); return nil }

func (c *Cntr) wake() {
	c.progress.wake()
	if c.obj != nil {
		c.obj.Signal()
	}
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
	c.progress.close()
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
