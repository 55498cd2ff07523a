package mr

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/ktable"
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

// MR is a registered memory region (struct fid_mr). Every registration
// allocates one, so it holds only what every region needs (one
// allocation, 176 bytes): what few regions have lives in side objects —
// bindings, made on the first Bind, and an own authorization key or the
// done channel of an asynchronous registration (regionExtra).
type MR struct {
	// Read by Lookup on every request, so they share cache lines. Except
	// state, they are set at registration and read-only after.
	key          uint64
	state        atomic.Uint32 // st* bits; written under mu (or before done closes)
	authDigest   uint32        // AuthDigest(authKey): what LookupAuth compares
	access       fi.Flags
	base, length uint64 // remote extent: [base, base+length)
	segs         []segment
	table        *Table

	fi.FIDBase

	// Set at registration, then read-only.
	regionID       uint32
	explicitEnable bool // created disabled: needs Enable
	rmaEvent       bool // registered with FI_RMA_EVENT
	closed         bool // Close has run (or is past its checks); guarded by mu
	// kref is the MR table slot of the region's entry (MapMirror), 0
	// while it has none; written by the region's mirror calls, which
	// are serialized (registration, then mu).
	kref       ktable.Ref
	extra      *regionExtra // nil: domain's auth key, synchronous registration
	inlineSegs [1]segment   // segs of a single-buffer region, saving an allocation

	// binds holds the counters and endpoints bound, nil until the first
	// Bind. CountRemoteWrite and BoundTo read it without locks; Bind
	// replaces it (copy on write) under mu.
	binds atomic.Pointer[bindings]

	mu sync.Mutex
}

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
func (m *MR) bound() bindings {
	if b := m.binds.Load(); b != nil {
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
	if m.state.Load()&(stComplete|stClosed) != stComplete || m.table.mode&ModeRaw != 0 {
		return fi.KeyNotAvail
	}
	return m.key
}

// Access returns the access bits of the registration.
func (m *MR) Access() fi.Flags { return m.access }

// Len returns the number of bytes registered.
func (m *MR) Len() uint64 {
	var n uint64
	for i := range m.segs {
		n += uint64(len(m.segs[i].buf))
	}
	return n
}

// Base returns the lowest address peers use: 0, or with FI_MR_VIRT_ADDR the
// lowest virtual address of the region.
func (m *MR) Base() uint64 { return m.base }

// RegionID returns the xdpfab-wide region id (mr_value.region_id).
func (m *MR) RegionID() uint32 { return m.regionID }

// AuthKey returns the authorization key of the region (nil: none).
func (m *MR) AuthKey() []byte {
	if e := m.extra; e != nil && e.authKey != nil {
		return e.authKey
	}
	return m.table.authKey
}

// AuthDigest returns AuthDigest of the region's authorization key: the
// value a request's header must carry for LookupAuth to serve the region
// (0: the region has no key).
func (m *MR) AuthDigest() uint32 { return m.authDigest }

// Enabled reports whether peers may access the region now.
func (m *MR) Enabled() bool { return m.state.Load() == stComplete|stEnabled }

// RawAttr is fi_mr_raw_attr: it stores the raw key in rawKey and returns
// the base address peers use and the raw key size. A rawKey shorter than the
// key fails with FI_ETOOSMALL, still answering the size needed.
func (m *MR) RawAttr(rawKey []byte, flags fi.Flags) (baseAddr uint64, keySize int, err error) {
	if flags != 0 {
		return 0, KeySize, fmt.Errorf("mr raw attr: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	switch st := m.state.Load(); {
	case st&(stClosed|stFailed) != 0:
		return 0, KeySize, fmt.Errorf("mr raw attr: region closed or failed: %w", fi.EINVAL)
	case st&stComplete == 0:
		return 0, KeySize, fmt.Errorf("mr raw attr: registration not completed: %w", fi.EOPBADSTATE)
	}
	if len(rawKey) < KeySize {
		return m.base, KeySize, fmt.Errorf("mr raw attr: buffer of %d bytes, key needs %d: %w", len(rawKey), KeySize, fi.ETOOSMALL)
	}
	binary.LittleEndian.PutUint64(rawKey, m.key)
	return m.base, KeySize, nil
}

// lockCompleted waits for the registration to finish and locks m. It fails
// when the region is closed or its registration failed.
func (m *MR) lockCompleted(op string) error {
	m.waitDone()
	m.mu.Lock()
	if m.closed || m.state.Load()&stFailed != 0 {
		m.mu.Unlock()
		return fmt.Errorf("%s: region closed or its registration failed: %w", op, fi.EINVAL)
	}
	return nil
}

// Bind is fi_mr_bind: it associates the region with a counter (flags
// fi.REMOTE_WRITE: the counter advances on every remote write or atomic
// that modifies the region, see CountRemoteWrite) or with an endpoint
// (flags 0; needed with FI_MR_ENDPOINT before Enable).
func (m *MR) Bind(obj fi.FID, flags fi.Flags) error {
	if obj == nil {
		return fmt.Errorf("mr bind: nil object: %w", fi.EINVAL)
	}
	if err := m.lockCompleted("mr bind"); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if m.explicitEnable && m.state.Load()&stEnabled != 0 {
		return fmt.Errorf("mr bind: region already enabled: %w", fi.EOPBADSTATE)
	}
	if o, ok := obj.(domainMember); ok && o.MRTable() != m.table {
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
		case m.table.mode&ModeRMAEvent != 0 && !m.rmaEvent:
			return fmt.Errorf("mr bind: FI_MR_RMA_EVENT: region not registered with FI_RMA_EVENT: %w", fi.EINVAL)
		case c.Closed():
			return fmt.Errorf("mr bind: counter closed: %w", fi.EINVAL)
		case slices.Contains(m.bound().cntrs, c):
			return fmt.Errorf("mr bind: counter already bound: %w", fi.EALREADY)
		}
		b := m.bound()
		b.cntrs = append(slices.Clip(b.cntrs), c)
		m.binds.Store(&b)
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
		case slices.Contains(m.bound().eps, ep):
			return fmt.Errorf("mr bind: endpoint already bound: %w", fi.EALREADY)
		}
		b := m.bound()
		b.eps = append(slices.Clip(b.eps), ep)
		m.binds.Store(&b)
	default:
		return fmt.Errorf("mr bind: binding to %v is not supported: %w", obj.Class(), fi.ENOSYS)
	}
	return nil
}

// CountRemoteWrite advances every counter bound with FI_REMOTE_WRITE by
// one. The target datapath calls it after a remote RMA write or atomic
// modified the region. It does not allocate.
func (m *MR) CountRemoteWrite() {
	if b := m.binds.Load(); b != nil {
		for _, c := range b.cntrs {
			_ = c.Add(1) // a counter's Add does not fail for a valid value
		}
	}
}

// BoundTo reports whether the region is bound to ep. With FI_MR_ENDPOINT,
// where regions belong to endpoints, the target datapath refuses a request
// that arrived on an endpoint the region is not bound to (as an unknown
// key). It takes no locks and does not allocate.
func (m *MR) BoundTo(ep fi.FID) bool {
	if b := m.binds.Load(); b != nil {
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
	if err := m.lockCompleted("mr enable"); err != nil {
		return err
	}
	defer m.mu.Unlock()
	st := m.state.Load()
	if st&stEnabled != 0 {
		return nil
	}
	if m.table.mode&ModeEndpoint != 0 && !slices.ContainsFunc(m.bound().eps, func(ep Endpoint) bool { return !ep.Closed() }) {
		return fmt.Errorf("mr enable: FI_MR_ENDPOINT: region not bound to an open endpoint: %w", fi.EOPBADSTATE)
	}
	if err := m.table.mirrorUpdate(m, st&stStale == 0); err != nil {
		return fmt.Errorf("mr enable: %w", err)
	}
	m.state.Store(st | stEnabled)
	return nil
}

// Refresh is fi_mr_refresh: after the pages under the region changed
// (FI_MR_MMU_NOTIFY) it disables the region, faults in the pages of iov (or
// of the whole region when iov is empty), and re-enables the region.
// Buffers of iov must lie within the region. When pages are no longer
// mapped it fails with FI_EFAULT and the region stays disabled until a
// Refresh succeeds.
func (m *MR) Refresh(iov [][]byte, flags fi.Flags) error {
	if flags != 0 {
		return fmt.Errorf("mr refresh: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	for i, b := range iov {
		if len(b) == 0 || !m.covers(addrOf(b), uint64(len(b))) {
			return fmt.Errorf("mr refresh: buffer %d is not within the region: %w", i, fi.EINVAL)
		}
	}
	if err := m.lockCompleted("mr refresh"); err != nil {
		return err
	}
	defer m.mu.Unlock()
	st := m.state.Load()
	m.state.Store(st | stStale) // peers fail while the refresh is occurring
	if st&stEnabled != 0 && st&stStale == 0 {
		if err := m.table.mirrorUpdate(m, false); err != nil {
			return fmt.Errorf("mr refresh: %w", err)
		}
	}
	write := m.access&(fi.REMOTE_WRITE|fi.RECV|fi.READ) != 0
	if len(iov) == 0 {
		iov = make([][]byte, len(m.segs))
		for i, s := range m.segs {
			iov[i] = s.buf
		}
	}
	for i, b := range iov {
		if err := populate(b, write); err != nil {
			return fmt.Errorf("mr refresh: buffer %d: %v: %w", i, err, fi.EFAULT)
		}
	}
	if st&stEnabled != 0 {
		if err := m.table.mirrorUpdate(m, true); err != nil {
			return fmt.Errorf("mr refresh: %w", err)
		}
	}
	m.state.Store(st &^ stStale)
	return nil
}

// Close is fi_close: it deregisters the region. From the moment it returns
// the key is refused — by Lookup and by the XDP program — and may be
// registered again. It fails with FI_EBUSY while a bound endpoint or
// counter is open. Closing a region whose asynchronous registration failed
// only releases the handle. If the mirror cannot delete the entry the
// region is closed all the same and the error is returned: Lookup, the
// datapath's final check, refuses the key whatever the kernel entry says.
func (m *MR) Close() error {
	m.waitDone()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("mr close: already closed: %w", fi.EINVAL)
	}
	st := m.state.Load()
	if st&stFailed != 0 {
		m.closed = true
		m.state.Store(st | stClosed)
		return nil
	}
	b := m.bound()
	for _, ep := range b.eps {
		if !ep.Closed() {
			return fmt.Errorf("mr close: bound endpoint still open: %w", fi.EBUSY)
		}
	}
	for _, c := range b.cntrs {
		if !c.Closed() {
			return fmt.Errorf("mr close: bound counter still open: %w", fi.EBUSY)
		}
	}
	m.closed = true
	m.state.Store(st | stClosed) // Lookup refuses from here on
	err := m.table.mirrorDelete(m)
	t := m.table
	t.mu.Lock()
	t.remove(m)
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("mr close: %w", err)
	}
	return nil
}

// waitDone waits for the registration to complete or fail. A synchronous
// registration is complete when m is returned: no channel operation (a
// receive locks the channel, even a closed one).
func (m *MR) waitDone() {
	if e := m.extra; e != nil && e.done != nil {
		<-e.done
	}
}

// covers reports whether every byte of [va, va+n) lies in the region's
// buffers (by virtual address).
func (m *MR) covers(va, n uint64) bool {
	end := va + n
	if end < va {
		return false
	}
	for pos := va; pos < end; {
		next := pos
		for i := range m.segs {
			s := &m.segs[i]
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
