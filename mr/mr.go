package mr

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/ktable"
	"github.com/xdpfab/xdpfab/internal/memorder"
)

// Counter is what an MR needs from a completion counter bound to it with
// FI_REMOTE_WRITE: a way to count the remote writes that modify the region,
// and whether it is still open (an MR does not close while a bound counter
// is open, fi_mr(3) fi_close).
type Counter interface {
	fi.FID // of class fi.ClassCntr
	Add(v uint64) error
	Closed() bool
}

// domainMember is implemented by counters and endpoints that can name
// their domain's table: Bind refuses those of another domain (FI_EINVAL),
// as libfabric's providers do.
type domainMember interface {
	MRTable() *Table
}

// Endpoint is what an MR needs from an endpoint bound to it: whether it is
// still open (FI_EBUSY on Close while it is).
type Endpoint interface {
	fi.FID // of class fi.ClassEP
	Closed() bool
}

// MR state bits, in MR.state. Lookup admits a region only when the word
// is exactly stComplete|stEnabled.
const (
	stComplete = 1 << iota // registration (and its mirror entry) completed
	stEnabled              // enabled: from the start, or by Enable
	stStale                // Refresh in progress, or failed: refused
	stClosed               // closed: refused, key released
	stFailed               // asynchronous registration failed
)

// segment is one registered buffer.
type segment struct {
	buf   []byte
	start uint64 // remote address of buf[0]: region offset, or va with FI_MR_VIRT_ADDR
	va    uint64 // virtual address of buf[0]
}

// region is one registered memory region: what Lookup and the datapath
// read. Regions are recycled (see the package doc, "Recycling"): an MR
// handle names one registration of a region by the generation it had
// then, and every use of the handle checks that generation first.
type region struct {
	// Read by Lookup on every request, so they share cache lines. Except
	// state, they are set at registration and read-only until the region
	// is recycled, which happens only after every reader has passed a
	// quiescent point since its Close.
	key          uint64
	state        memorder.Uint32 // st* bits; written under Table.mu (or before done closes), release stores
	authDigest   uint32          // AuthDigest(authKey): what LookupAuth compares
	access       fi.Flags
	base, length uint64 // remote extent: [base, base+length)
	segs         []segment
	handle       *MR    // the current registration's handle, which Lookup answers
	table        *Table // set when allocated, never changed: a region stays in its Table's pool

	// gen is the registration's generation: Close advances it under Table.mu,
	// which makes every handle of the registration stale. It is never
	// reset, so a handle never names a later registration. Its writers
	// hold Table.mu, so a release store advances it.
	gen memorder.Uint64

	// Set at registration, then read-only.
	regionID       uint32
	explicitEnable bool // created disabled: needs Enable
	rmaEvent       bool // registered with FI_RMA_EVENT
	// kref is the MR table slot of the region's entry (MapMirror), 0
	// while it has none; written by the region's mirror calls, which
	// are serialized (registration, then Table.mu).
	kref       ktable.Ref
	extra      *regionExtra // nil: domain's auth key, synchronous registration
	ctx        any          // the registration's context (MR.Context)
	inlineSegs [1]segment   // segs of a single-buffer region, saving an allocation

	// binds holds the counters and endpoints bound, nil until the first
	// Bind. CountRemoteWrite and BoundTo read it without locks; Bind
	// replaces it (copy on write) under Table.mu.
	binds atomic.Pointer[bindings]
}

// MR is a registered memory region (struct fid_mr): a handle naming one
// registration of a recycled region object. Every registration takes a
// new one (16 bytes, from a slab); the region behind it is reused once
// the registration is closed and the datapath has let go of it. A handle
// whose registration was closed is stale: its calls are refused as those
// of a closed region (FI_EINVAL, fi.KeyNotAvail, nil context), whatever
// the region holds now.
type MR struct {
	r   *region
	gen uint64 // r.gen while the registration is open
}

// Class is fi.ClassMR.
func (m *MR) Class() fi.Class { return fi.ClassMR }

// Context returns the context given at registration (nil once closed).
// The region keeps it: the handle, which the collector has to allocate
// and sweep per registration, holds only the region and generation.
func (m *MR) Context() any {
	if !m.live() {
		return nil
	}
	return m.r.ctx
}

// live reports whether m's registration is still open. Without Table.mu held
// the answer holds only as long as nobody closes m concurrently (which
// fi_close(3) leaves undefined): the lock-free getters read the region
// after it.
func (m *MR) live() bool { return m.r.gen.Load() == m.gen }

// regionExtra holds what a region has only when registered with its own
// authorization key or asynchronously. Set at registration, then
// read-only.
type regionExtra struct {
	authKey []byte        // the region's own key (nil: the domain's)
	done    chan struct{} // asynchronous: closed once the registration completed or failed
}

// bindings are the objects bound to a region. A bindings is never
// modified once stored in MR.binds.
type bindings struct {
	cntrs []Counter  // bound with FI_REMOTE_WRITE
	eps   []Endpoint // bound with flags 0
}

// bound returns the region's bindings, the zero bindings when it has none.
func (r *region) bound() bindings {
	if b := r.binds.Load(); b != nil {
		return *b
	}
	return bindings{}
}

// Desc is a local memory descriptor (fi_mr_desc's void *). The zero Desc
// is NULL.
type Desc struct{ m *MR }

// MR returns the region d describes, nil for the zero Desc.
func (d Desc) MR() *MR { return d.m }

// Desc is fi_mr_desc.
func (m *MR) Desc() Desc { return Desc{m} }

// Key is fi_mr_key: the key peers use, or fi.KeyNotAvail while an
// asynchronous registration has not completed, after it failed or the
// region was closed, and always with FI_MR_RAW (use RawAttr).
func (m *MR) Key() uint64 {
	r := m.r
	if !m.live() || r.state.Load()&(stComplete|stClosed) != stComplete || r.table.mode&ModeRaw != 0 {
		return fi.KeyNotAvail
	}
	return r.key
}

// Access returns the access bits of the registration (0 once closed).
func (m *MR) Access() fi.Flags {
	if !m.live() {
		return 0
	}
	return m.r.access
}

// Len returns the number of bytes registered (0 once closed).
func (m *MR) Len() uint64 {
	if !m.live() {
		return 0
	}
	var n uint64
	for i := range m.r.segs {
		n += uint64(len(m.r.segs[i].buf))
	}
	return n
}

// Base returns the lowest address peers use: 0, or with FI_MR_VIRT_ADDR the
// lowest virtual address of the region (0 once closed).
func (m *MR) Base() uint64 {
	if !m.live() {
		return 0
	}
	return m.r.base
}

// RegionID returns the xdpfab-wide region id (mr_value.region_id; 0 once
// closed).
func (m *MR) RegionID() uint32 {
	if !m.live() {
		return 0
	}
	return m.r.regionID
}

// AuthKey returns the authorization key of the region (nil: none, or
// closed).
func (m *MR) AuthKey() []byte {
	if !m.live() {
		return nil
	}
	if e := m.r.extra; e != nil && e.authKey != nil {
		return e.authKey
	}
	return m.r.table.authKey
}

// AuthDigest returns AuthDigest of the region's authorization key: the
// value a request's header must carry for LookupAuth to serve the region
// (0: the region has no key, or is closed).
func (m *MR) AuthDigest() uint32 {
	if !m.live() {
		return 0
	}
	return m.r.authDigest
}

// Enabled reports whether peers may access the region now.
func (m *MR) Enabled() bool { return m.live() && m.r.state.Load() == stComplete|stEnabled }

// RawAttr is fi_mr_raw_attr: it stores the raw key in rawKey and returns
// the base address peers use and the raw key size. A rawKey shorter than the
// key fails with FI_ETOOSMALL, still answering the size needed.
func (m *MR) RawAttr(rawKey []byte, flags fi.Flags) (baseAddr uint64, keySize int, err error) {
	if flags != 0 {
		return 0, KeySize, fmt.Errorf("mr raw attr: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	r := m.r
	switch st := r.state.Load(); {
	case !m.live() || st&(stClosed|stFailed) != 0:
		return 0, KeySize, fmt.Errorf("mr raw attr: region closed or failed: %w", fi.EINVAL)
	case st&stComplete == 0:
		return 0, KeySize, fmt.Errorf("mr raw attr: registration not completed: %w", fi.EOPBADSTATE)
	}
	if len(rawKey) < KeySize {
		return r.base, KeySize, fmt.Errorf("mr raw attr: buffer of %d bytes, key needs %d: %w", len(rawKey), KeySize, fi.ETOOSMALL)
	}
	binary.LittleEndian.PutUint64(rawKey, r.key)
	return r.base, KeySize, nil
}

// lockLive takes the Table's lock and checks, under it, that m's
// registration is open: it fails with FI_EINVAL, unlocked, when m is
// stale. Close advances the generation under the lock, and a region is
// refilled only after its Close, so while the lock is held and the check
// passed the region is m's. A region has no lock of its own: its calls
// after registration (Bind, Enable, Refresh, Close) are rare but for
// Close, which takes the Table's lock anyway to unlink the region, so
// one lock section a Close instead of two (Close's fast path checks
// before it takes the lock, and again under it).
func (m *MR) lockLive(op string) (*region, error) {
	r := m.r
	r.table.mu.Lock()
	if r.gen.Load() != m.gen {
		r.table.mu.Unlock()
		return nil, fmt.Errorf("%s: region closed: %w", op, fi.EINVAL)
	}
	return r, nil
}

// lockSettled is lockLive once m's registration has completed or failed:
// an asynchronous one is waited for with the lock released (its
// goroutine takes the lock when the mirror refuses the key).
func (m *MR) lockSettled(op string) (*region, error) {
	for {
		r, err := m.lockLive(op)
		if err != nil {
			return nil, err
		}
		done := r.pending()
		if done == nil {
			return r, nil
		}
		r.table.mu.Unlock()
		<-done
	}
}

// lockCompleted is lockSettled, failing when the registration failed.
func (m *MR) lockCompleted(op string) (*region, error) {
	r, err := m.lockSettled(op)
	if err != nil {
		return nil, err
	}
	if r.state.Load()&stFailed != 0 {
		r.table.mu.Unlock()
		return nil, fmt.Errorf("%s: region closed or its registration failed: %w", op, fi.EINVAL)
	}
	return r, nil
}

// Bind is fi_mr_bind: it associates the region with a counter (flags
// fi.REMOTE_WRITE: the counter advances on every remote write or atomic
// that modifies the region, see CountRemoteWrite) or with an endpoint
// (flags 0; needed with FI_MR_ENDPOINT before Enable).
func (m *MR) Bind(obj fi.FID, flags fi.Flags) error {
	if obj == nil {
		return fmt.Errorf("mr bind: nil object: %w", fi.EINVAL)
	}
	r, err := m.lockCompleted("mr bind")
	if err != nil {
		return err
	}
	defer r.table.mu.Unlock()
	if r.explicitEnable && r.state.Load()&stEnabled != 0 {
		return fmt.Errorf("mr bind: region already enabled: %w", fi.EOPBADSTATE)
	}
	if o, ok := obj.(domainMember); ok && o.MRTable() != r.table {
		return fmt.Errorf("mr bind: the %v belongs to another domain: %w", obj.Class(), fi.EINVAL)
	}
	switch obj.Class() {
	case fi.ClassCntr:
		c, ok := obj.(Counter)
		if !ok {
			return fmt.Errorf("mr bind: %T is not a counter: %w", obj, fi.EINVAL)
		}
		switch {
		case flags&^(fi.REMOTE_WRITE|fi.REMOTE_READ) != 0:
			return fmt.Errorf("mr bind: counter flags %#x: %w", uint64(flags&^(fi.REMOTE_WRITE|fi.REMOTE_READ)), fi.EBADFLAGS)
		case flags&fi.REMOTE_READ != 0:
			return fmt.Errorf("mr bind: counting remote reads is not supported: %w", fi.ENOSYS)
		case flags == 0:
			return fmt.Errorf("mr bind: counter needs FI_REMOTE_WRITE: %w", fi.EINVAL)
		case r.table.mode&ModeRMAEvent != 0 && !r.rmaEvent:
			return fmt.Errorf("mr bind: FI_MR_RMA_EVENT: region not registered with FI_RMA_EVENT: %w", fi.EINVAL)
		case c.Closed():
			return fmt.Errorf("mr bind: counter closed: %w", fi.EINVAL)
		case slices.Contains(r.bound().cntrs, c):
			return fmt.Errorf("mr bind: counter already bound: %w", fi.EALREADY)
		}
		b := r.bound()
		b.cntrs = append(slices.Clip(b.cntrs), c)
		r.binds.Store(&b)
	case fi.ClassEP:
		ep, ok := obj.(Endpoint)
		if !ok {
			return fmt.Errorf("mr bind: %T is not an endpoint: %w", obj, fi.EINVAL)
		}
		switch {
		case flags != 0:
			return fmt.Errorf("mr bind: endpoint flags %#x, want 0: %w", uint64(flags), fi.EBADFLAGS)
		case ep.Closed():
			return fmt.Errorf("mr bind: endpoint closed: %w", fi.EINVAL)
		case slices.Contains(r.bound().eps, ep):
			return fmt.Errorf("mr bind: endpoint already bound: %w", fi.EALREADY)
		}
		b := r.bound()
		b.eps = append(slices.Clip(b.eps), ep)
		r.binds.Store(&b)
	default:
		return fmt.Errorf("mr bind: binding to %v is not supported: %w", obj.Class(), fi.ENOSYS)
	}
	return nil
}

// CountRemoteWrite advances every counter bound with FI_REMOTE_WRITE by
// one. The target datapath calls it, on the handle of a Span that Lookup
// answered, after a remote RMA write or atomic modified the region, before
// its next quiescent point. It does not allocate.
func (m *MR) CountRemoteWrite() {
	if b := m.r.binds.Load(); b != nil {
		for _, c := range b.cntrs {
			_ = c.Add(1) // a counter's Add does not fail for a valid value
		}
	}
}

// BoundTo reports whether the region is bound to ep. With FI_MR_ENDPOINT,
// where regions belong to endpoints, the target datapath refuses a request
// that arrived on an endpoint the region is not bound to (as an unknown
// key). Called like CountRemoteWrite, it takes no locks and does not
// allocate.
func (m *MR) BoundTo(ep fi.FID) bool {
	if b := m.r.binds.Load(); b != nil {
		for _, e := range b.eps {
			if fi.FID(e) == ep {
				return true
			}
		}
	}
	return false
}

// Enable is fi_mr_enable. Regions created disabled — registered with
// FI_RMA_EVENT under FI_MR_RMA_EVENT, or any region under FI_MR_ENDPOINT,
// which must first be bound to an open endpoint (else FI_EOPBADSTATE) —
// become accessible; other regions are enabled already and Enable is a
// no-op.
func (m *MR) Enable() error {
	r, err := m.lockCompleted("mr enable")
	if err != nil {
		return err
	}
	defer r.table.mu.Unlock()
	st := r.state.Load()
	if st&stEnabled != 0 {
		return nil
	}
	if r.table.mode&ModeEndpoint != 0 && !slices.ContainsFunc(r.bound().eps, func(ep Endpoint) bool { return !ep.Closed() }) {
		return fmt.Errorf("mr enable: FI_MR_ENDPOINT: region not bound to an open endpoint: %w", fi.EOPBADSTATE)
	}
	if err := r.table.mirrorUpdate(r, st&stStale == 0); err != nil {
		return fmt.Errorf("mr enable: %w", err)
	}
	r.state.Store(st | stEnabled)
	return nil
}

// Refresh is fi_mr_refresh: after the pages under the region changed
// (FI_MR_MMU_NOTIFY) it disables the region, faults in the pages of iov (or
// of the whole region when iov is empty), and re-enables it.
// Buffers of iov must lie within the region. When pages are no longer
// mapped it fails with FI_EFAULT and the region stays disabled until a
// Refresh succeeds.
// It holds the Table's lock while it faults the pages in, so the
// domain's registrations and closes wait for it (lookups do not).
func (m *MR) Refresh(iov [][]byte, flags fi.Flags) error {
	if flags != 0 {
		return fmt.Errorf("mr refresh: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	r, err := m.lockCompleted("mr refresh")
	if err != nil {
		return err
	}
	defer r.table.mu.Unlock()
	for i, b := range iov {
		if len(b) == 0 || !r.covers(addrOf(b), uint64(len(b))) {
			return fmt.Errorf("mr refresh: buffer %d is not within the region: %w", i, fi.EINVAL)
		}
	}
	st := r.state.Load()
	r.state.StoreSync(st | stStale) // peers fail while the refresh is occurring: visible before the pages are touched
	if st&stEnabled != 0 && st&stStale == 0 {
		if err := r.table.mirrorUpdate(r, false); err != nil {
			return fmt.Errorf("mr refresh: %w", err)
		}
	}
	write := r.access&(fi.REMOTE_WRITE|fi.RECV|fi.READ) != 0
	if len(iov) == 0 {
		iov = make([][]byte, len(r.segs))
		for i, s := range r.segs {
			iov[i] = s.buf
		}
	}
	for i, b := range iov {
		if err := populate(b, write); err != nil {
			return fmt.Errorf("mr refresh: buffer %d: %v: %w", i, err, fi.EFAULT)
		}
	}
	if st&stEnabled != 0 {
		if err := r.table.mirrorUpdate(r, true); err != nil {
			return fmt.Errorf("mr refresh: %w", err)
		}
	}
	r.state.Store(st &^ stStale)
	return nil
}

// Close is fi_close: it deregisters the region. From the moment it returns
// the key is refused — by Lookup and by the XDP program — and may be
// registered again, and m is stale. It fails with FI_EBUSY while a bound
// endpoint or counter is open. Closing a region whose asynchronous
// registration failed only releases the handle. If the mirror cannot
// delete the entry the region is closed all the same and the error is
// returned: Lookup, the datapath's final check, refuses the key whatever
// the kernel entry says. The region object goes back to its Table's pool
// (Table.retire), to be filled again after the grace period.
//
// A registration that completed, is not being refreshed and has no open
// binding (every Close but an asynchronous or failed one's, or a
// refused one's) is closed on a fast path: the region is marked closed
// and its kernel slot killed before the Table's lock is taken, whose
// acquire (a locked compare-and-swap) then makes both visible to every
// CPU; under the lock the generation advances and the region leaves the
// index, and the lock is released with a plain store. One locked
// instruction a Close instead of two (lock and fenced unlock). The checks
// before the lock read what only this registration's own calls change,
// and the generation is checked again under it: a second Close of the
// handle, after this one or at the same time, fails with FI_EINVAL. At
// the same time (which fi_close(3) leaves undefined) it may also have
// killed the kernel entry of a later registration of the same key, made
// in between: XDP then refuses that key until it is registered again.
func (m *MR) Close() error {
	r := m.r
	t := r.table
	st := r.state.Load()
	if r.gen.Load() == m.gen && st&(stComplete|stStale|stClosed|stFailed) == stComplete &&
		(r.extra == nil || r.extra.done == nil) && r.unbound() {
		r.state.Store(st | stClosed) // Lookup refuses from here on
		err := t.mirrorDelete(r)
		t.mu.Lock() // the locked instruction that publishes both before Close returns
		if r.gen.Load() != m.gen {
			t.mu.Unlock()
			return fmt.Errorf("mr close: already closed: %w", fi.EINVAL)
		}
		r.gen.Store(r.gen.Load() + 1) // m and every copy of it are stale from here on
		t.remove(r)
		t.retire(r)
		t.mu.Unlock()
		if err != nil {
			return fmt.Errorf("mr close: %w", err)
		}
		return nil
	}
	return m.closeLocked()
}

// unbound reports whether every endpoint and counter bound to r is closed.
func (r *region) unbound() bool {
	b := r.binds.Load()
	if b == nil {
		return true
	}
	for _, ep := range b.eps {
		if !ep.Closed() {
			return false
		}
	}
	for _, c := range b.cntrs {
		if !c.Closed() {
			return false
		}
	}
	return true
}

// closeLocked is Close's slow path: everything under the Table's lock,
// released with a fenced unlock (the state and kernel slot it writes
// must be visible before Close returns).
func (m *MR) closeLocked() error {
	r, err := m.lockSettled("mr close")
	if err != nil {
		return fmt.Errorf("mr close: already closed: %w", fi.EINVAL)
	}
	t := r.table
	st := r.state.Load()
	if st&stFailed != 0 { // publish removed it from the index
		r.state.Store(st | stClosed)
		r.gen.Store(r.gen.Load() + 1)
		t.retire(r)
		t.mu.Unlock()
		return nil
	}
	if !r.unbound() {
		t.mu.Unlock()
		b := r.bound()
		for _, ep := range b.eps {
			if !ep.Closed() {
				return fmt.Errorf("mr close: bound endpoint still open: %w", fi.EBUSY)
			}
		}
		return fmt.Errorf("mr close: bound counter still open: %w", fi.EBUSY)
	}
	// Lookup refuses from here on. The state, the kernel slot's words,
	// the generation and the index slot are release stores (MOVs, not
	// locked instructions): the fenced unlock below makes them visible
	// to every CPU before Close returns.
	r.state.Store(st | stClosed)
	err = t.mirrorDelete(r)
	r.gen.Store(r.gen.Load() + 1) // m and every copy of it are stale from here on
	t.remove(r)
	t.retire(r)
	t.mu.UnlockFenced()
	if err != nil {
		return fmt.Errorf("mr close: %w", err)
	}
	return nil
}

// pending returns the channel an asynchronous registration closes when
// it completed or failed, nil when it has (or the registration was
// synchronous: complete when its handle is returned, so no channel
// operation, which locks the channel even when it is closed). t.mu is
// held and the registration open (the registering goroutine takes the
// lock only to withdraw a failed key, before it closes the channel).
func (r *region) pending() chan struct{} {
	e := r.extra
	if e == nil || e.done == nil {
		return nil
	}
	select {
	case <-e.done:
		return nil
	default:
		return e.done
	}
}

// covers reports whether every byte of [va, va+n) lies in the region's
// buffers (by virtual address).
func (r *region) covers(va, n uint64) bool {
	end := va + n
	if end < va {
		return false
	}
	for pos := va; pos < end; {
		next := pos
		for i := range r.segs {
			s := &r.segs[i]
			if pos-s.va < uint64(len(s.buf)) {
				next = min(end, s.va+uint64(len(s.buf)))
				break
			}
		}
		if next == pos {
			return false
		}
		pos = next
	}
	return true
}
