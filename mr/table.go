// Package mr implements libfabric memory registration, fi_mr(3).
//
// A Table is the MR registry of one domain: fi_mr_reg, fi_mr_regv and
// fi_mr_regattr are its Reg, RegV and RegAttr, fi_mr_map_raw and
// fi_mr_unmap_key its MapRaw and UnmapKey, and each registration is an *MR
// (fi_mr_desc, fi_mr_key, fi_mr_raw_attr, fi_mr_bind, fi_mr_refresh,
// fi_mr_enable, fi_close). A region is one or more Go byte slices addressed
// by peers as one range, either 0-based (the default) or by virtual address
// (FI_MR_VIRT_ADDR). The target side of the datapath vets every incoming
// request with Table.Lookup, lock-free and allocation-free, which answers
// the slices to operate on or a Denial carrying the errno the initiator
// gets. With AF_XDP the Table also keeps the interface's MR table
// (mr_map) in step through a Mirror on every registration, enable,
// refresh and close, before the call returns: the kernel-visible registry
// of the keys, which XDP code serving kernel-resident regions vets
// requests against (the object's mr_vet does what it does; the main
// program vets no op, the bpf package doc says why) and `xdpfab status`
// counts. The domain's mr_mode bits (Mode) select the rules of fi_mr(3);
// binding an EQ with FI_REG_MR makes registration asynchronous.
//
// The MR table is a kernel table (bpf/xdpfab.h, "Kernel tables"; package
// internal/ktable): a hash table of 32768 buckets of 8 slots (16 MiB,
// fixed, per interface, shared by the processes attached there) in a
// BPF_F_MMAPABLE array map that each process mmaps and writes with plain
// stores under a per-slot seqlock. A registration or close costs memory
// writes (~0.1 µs) where a BPF hash map update and delete cost two bpf(2)
// calls (~3 µs). A Table is the only writer of its domain_id's entries
// (the attachment hands a domain_id to one process, and the Table checks
// its keys), so a registration claims a free slot without searching the
// key's two buckets for it (ktable AddFrom, the first round of the
// key's hash, which reads only the domain_id, done once per Table), the
// region remembers that slot
// (MR.kref), and Enable, Refresh and Close write or kill the entry there,
// without hashing the key (SetAt, DeleteAt; both fall back to the search
// should the slot no longer hold the key). Failure modes: a key whose two
// buckets are full is refused with FI_ENOMR (the table holds up to 262144 keys; at 75% load a
// refusal is rare, at 95% common); a slot held by a writer is answered
// busy (MR_VET_BUSY), never read half-written; a process killed while it
// held a slot leaves that slot busy until the interface is re-attached;
// Close returns after the slot is marked dead, so a lookup that starts
// afterwards refuses the key (one that read the slot before may still act
// on it, as on a request that arrived a moment earlier).
//
// Memory: a registered slice stays reachable and in place while the *MR
// exists, because the MR holds it and Go's collector does not move heap
// objects (a slice passed to Reg escapes to the heap, so it is never on a
// goroutine stack that could move). Memory that is not Go's — unix.Mmap,
// C allocations — is the caller's to keep mapped until Close returns; after
// changing its pages call Refresh. After Close the region keeps the
// buffers reachable until it is filled again, dropped from the pool or
// collected — never before every reader has let go of it (see
// Recycling); a closed *MR no longer keeps them.
//
// Recycling. A registration's state lives in a region object (176 bytes
// with its bookkeeping: key, extent, buffers, state word, bindings,
// kernel slot) that Lookup and the datapath after it (Span.AppendBufs,
// CountRemoteWrite, BoundTo) read without locks. With Config.Epochs set
// (a domain sets epoch.Process) closed regions are filled again instead
// of being left to the collector, which was half the cost of a reg+close.
// Two things make that safe:
//
//   - Handles. An *MR is a handle (16 bytes, handed out from a slab of 32,
//     never reused) naming its region and the generation the region had at
//     registration. Close advances the generation under the Table's lock,
//     so from then on the handle and every copy of it (a Desc kept in a
//     pending operation, a second Close) is stale, and a region is filled
//     again only after its Close: a stale handle is refused as a closed one
//     was (FI_EINVAL from Close, Bind, Enable, Refresh and RawAttr;
//     fi.KeyNotAvail from Key; zero from the getters; CheckLocal's closed
//     descriptor), whatever registration the region holds now. The
//     checks under the lock are exact; the lock-free getters check the
//     generation first and are exact unless the handle is closed
//     concurrently, which fi_close(3) leaves undefined anyway.
//   - A grace period (epoch-based reclamation, internal/epoch). A region
//     that Close removed from the index waits in its Table's limbo until
//     it is stamped with a new epoch — closes are stamped in batches of
//     16, one advance of the epoch (a locked add on a word every domain
//     shares) per batch — and then until every reader of the domain has
//     passed a quiescent point since: a registration takes it only then.
//     The readers are the target pollers: a reliable engine's receive
//     side registers one and announces it online at the start of each
//     received batch and offline at its end (two stores to its own cache
//     line per batch, none per packet), so a Span and its handle are
//     valid until the batch ends, and an idle engine holds nothing back.
//     Every caller of Lookup on such a Table must be a reader: anyone else
//     could be reading a region while it is refilled. A Table without
//     Epochs allocates every region and is safe for any caller.
//
// Failure modes of recycling: a reader that stays online (a handler
// blocked in a batch, a manual-progress application that stops calling
// progress in the middle of nothing: it is offline between calls, so
// only a stuck batch counts) holds back every region closed since;
// registrations then allocate fresh regions, the limbo stops at 1024
// regions (a closed region arriving at a full limbo first moves those
// past the grace period to a free list of at most 1024, else the oldest
// goes to the collector), so a Table keeps at most about 2048 region
// objects (~0.35 MiB) and, while they wait in the limbo, the buffers of up
// to 1024 closed regions reachable (a free region drops its buffers,
// bindings and handle). PoolStats counts fresh, reused and overflowed
// regions. A Table that stops closing keeps up to 15 closed regions
// unstamped, not reusable, until it closes more (a reg+close loop keeps
// about 16 in the limbo). A handle the application keeps keeps its slab of 32 handles
// (512 bytes) reachable. A reader that keeps a Span past its batch, or a
// Lookup caller that is not a reader, defeats the scheme (the region may
// be refilled under it); TestLookupRacingReuse and
// fabric's TestRMAWriteRacingRegionReuse catch that under -race.
//
// Provider choices, where fi_mr(3) leaves them to the provider:
//
//   - Keys are 8 bytes (KeySize). Any requested key but FI_KEY_NOTAVAIL is in
//     range; that one is FI_EKEYREJECTED, a live one FI_ENOKEY. With
//     FI_MR_PROV_KEY the requested key is ignored and the Table returns
//     keys that are unique for its lifetime (a bijective mix of a counter
//     and a random seed: not sequential, never reissued, not a secret).
//   - Addressing: by default a region of several buffers is their
//     concatenation, offsets 0..len-1. With FI_MR_VIRT_ADDR every byte is
//     addressed by its own virtual address, so a request must lie within
//     the buffers (gaps between them are out of range); mr_map holds the
//     extent [lowest address, highest end).
//   - Refusals of remote requests (Denial): unknown, closed or not yet
//     completed key FI_EKEYREJECTED; range outside the region, or wrapping
//     FI_EFAULT; access not granted, or an auth key that differs FI_EACCES;
//     region disabled (FI_MR_RMA_EVENT/FI_MR_ENDPOINT before Enable, during
//     or after a failed Refresh) FI_EOPBADSTATE. Remote reads need
//     FI_REMOTE_READ, writes and atomics FI_REMOTE_WRITE, fetching and
//     compare atomics both (Op.Access).
//   - FI_MR_LOCAL: CheckLocal requires a descriptor of this domain that
//     covers the buffer with the local access bit (FI_SEND, FI_RECV,
//     FI_READ, FI_WRITE); a nil descriptor passes only for an empty buffer.
//     (fi_mr(3) also says desc may be "valid or NULL" with FI_MR_LOCAL set
//     and FI_MR_HMEM unset, contradicting the definition of FI_MR_LOCAL;
//     we keep the stricter rule.) Without FI_MR_LOCAL desc is ignored;
//     with FI_MR_HMEM alone it must be valid or nil, as the page says.
//   - FI_MR_ALLOCATED: registration checks with mincore(2) that every page
//     is resident and fails with FI_EFAULT otherwise.
//   - Refresh is accepted in every mode and required by FI_MR_MMU_NOTIFY: it
//     disables the region, faults its pages in (MADV_POPULATE_*), and
//     re-enables it; when the pages are gone it fails with FI_EFAULT and the
//     region stays disabled until a Refresh succeeds.
//   - Bind: counters with FI_REMOTE_WRITE (FI_REMOTE_READ events are
//     FI_ENOSYS), endpoints with flags 0, anything else FI_ENOSYS. With
//     FI_MR_RMA_EVENT a counter needs a region registered with
//     FI_RMA_EVENT. Regions created disabled take no bindings once
//     enabled; regions enabled from the start accept counters at any time.
//     Close fails with FI_EBUSY while a bound endpoint or counter is open.
//   - FI_MR_ENDPOINT: keys stay unique per domain (one mr_map namespace);
//     MR.BoundTo lets the datapath admit a request only on an endpoint the
//     region is bound to.
//   - Only FI_HMEM_SYSTEM memory: other ifaces are FI_ENOSYS even without
//     FI_HMEM (the page lets a provider ignore iface then; silently
//     treating device memory as host memory would be worse). FI_RMA_PMEM is
//     FI_EBADFLAGS: nothing here makes writes persistent.
//   - Raw keys (fi_mr_raw_attr) are the 8-byte little-endian key; MapRaw
//     returns it and counts the mapping until UnmapKey; a Table with mapped
//     keys or open regions does not close (FI_EBUSY).
//   - Auth keys: a region takes attr.AuthKey, or the domain's when empty,
//     and keeps its AuthDigest (computed once, at registration). Requests
//     present a key as its digest (the wire's auth_key); LookupAuth serves
//     a region only to a request whose digest equals the region's, so a
//     region registered under any key is reachable by peers presenting that
//     key, and one without a key only by peers presenting none (digest 0).
//     Lookup is LookupAuth without a key. Two keys with the same 32-bit
//     digest are not told apart.
//   - At most MaxRegions regions (DefaultMaxRegions by default), then
//     FI_ENOMR; with a Mirror also when the MR table refuses the key.
//
// A Table and its MRs are safe for concurrent use. One lock, the
// Table's, serializes registrations, closes and an MR's Bind, Enable and
// Refresh (a reg+close is one lock section each: Refresh holds it while
// it faults pages in); Lookup, CheckLocal and the getters take none. The
// lock (lock.go) is released with a plain store and its waiters poll
// rather than park; a reg+close takes three locked instructions (the two
// acquires and the kernel slot's claim), where a sync.Mutex and a close
// under it took five (MR.Close says how the kill of the slot is still
// visible to every CPU before Close returns).
package mr

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/epoch"
	"github.com/xdpfab/xdpfab/internal/ktable"
	"github.com/xdpfab/xdpfab/internal/memorder"
)

// Domain attributes of memory registration.
const (
	// IOVLimit is mr_iov_limit: the most buffers one region may hold.
	IOVLimit = 8
	// KeySize is mr_key_size: the size of keys and raw keys in bytes.
	KeySize = 8
	// DefaultMaxRegions is the default limit of live regions, the size of
	// mr_map in bpf/xdpfab.c.
	DefaultMaxRegions = 1 << 20
)

// accessBits are the access permissions fi_mr(3) defines.
const accessBits = fi.SEND | fi.RECV | fi.READ | fi.WRITE | fi.REMOTE_READ | fi.REMOTE_WRITE

// regFlags are the registration flags supported.
const regFlags = fi.RMA_EVENT

// Config describes the domain a Table belongs to.
type Config struct {
	Mode     Mode   // the domain's mr_mode, as fi_getinfo reports it
	DomainID uint32 // xdpfab-wide id of the domain: the domain_id of mr_map keys
	// Mirror is kept in step with the keys (usually a *MapMirror); nil
	// keeps none.
	Mirror Mirror
	// AuthKey is the domain's authorization key, used by registrations
	// that give none; empty means none.
	AuthKey []byte
	// Owner is the object bound to an EQ on the Table's behalf (the
	// domain); nil binds the Table's own identity.
	Owner fi.FID
	// MaxRegions limits live regions; 0 means DefaultMaxRegions.
	MaxRegions int
	// Epochs, when set, recycles region objects (see the package doc,
	// "Recycling"): every goroutine that calls Lookup or LookupAuth, or
	// uses the Span answered, must then be a registered reader of it and
	// use the Span only before its next quiescent point. nil allocates
	// every region afresh and leaves closed ones to the collector.
	Epochs *epoch.Domain
}

// Table is the MR registry of one domain.
type Table struct {
	mode       Mode // effective (FI_MR_BASIC resolved)
	domainID   uint32
	mirror     Mirror
	mapMirror  *MapMirror    // mirror, when it is one: called without the interface
	kprefix    ktable.Prefix // mapMirror's hash prefix of this domain's keys (slotKey's key[0])
	authKey    []byte
	authDigest uint32 // AuthDigest(authKey), computed once
	owner      fi.FID
	maxRegions int
	keySeed    uint64
	epochs     *epoch.Domain // nil: regions are not recycled

	// index maps keys to regions for Lookup, which reads it without locks.
	// It is replaced (grown, rehashed) and its slots written under mu.
	index atomic.Pointer[keyIndex]

	mu tableLock // lock.go: its Unlock is a plain store
	// The fields below are guarded by mu.
	live    int            // regions in index, pending ones included
	tombs   int            // tombstoned slots in index
	nextKey uint64         // FI_MR_PROV_KEY counter
	mapped  map[uint64]int // fi_mr_map_raw'd keys and their map counts
	events  *eq.EQ         // bound with FI_REG_MR: registration is asynchronous
	closed  bool
	pool    regionPool // closed regions waiting for reuse (recycle.go)
	handles []MR       // handles not yet handed out (newHandle)
	nextID  uint32     // the region ids [nextID, endID) are this Table's to give (newRegionID)
	endID   uint32
}

// nextRegionID numbers regions xdpfab-wide (mr_value.region_id); 0 is
// unused. Tables take their ids from it in blocks of regionIDBlock
// (newRegionID), so a registration costs no locked add on a word every
// domain's registrations share.
var nextRegionID atomic.Uint32

const regionIDBlock = 64

// newRegionID returns a region id no other registration of the process
// has (until the 32-bit ids wrap); t.mu is held.
func (t *Table) newRegionID() uint32 {
	if t.nextID == t.endID {
		t.endID = nextRegionID.Add(regionIDBlock)
		t.nextID = t.endID - regionIDBlock
	}
	id := t.nextID
	t.nextID++
	if id == 0 { // wrapped: 0 is reserved
		return t.newRegionID()
	}
	return id
}

// NewTable opens the MR registry of a domain.
func NewTable(cfg Config) (*Table, error) {
	mode, err := cfg.Mode.Effective()
	if err != nil {
		return nil, err
	}
	if cfg.MaxRegions < 0 {
		return nil, fmt.Errorf("mr table: max regions %d: %w", cfg.MaxRegions, fi.EINVAL)
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("mr table: key seed: %w", err)
	}
	t := &Table{
		mode:       mode,
		domainID:   cfg.DomainID,
		mirror:     cfg.Mirror,
		authKey:    append([]byte(nil), cfg.AuthKey...),
		authDigest: AuthDigest(cfg.AuthKey),
		owner:      cfg.Owner,
		maxRegions: cfg.MaxRegions,
		epochs:     cfg.Epochs,
		keySeed:    binary.LittleEndian.Uint64(seed[:]),
		mapped:     map[uint64]int{},
	}
	t.mapMirror, _ = cfg.Mirror.(*MapMirror)
	if t.mapMirror != nil {
		t.kprefix = t.mapMirror.t.Prefix(uint64(t.domainID))
	}
	if t.maxRegions == 0 {
		t.maxRegions = DefaultMaxRegions
	}
	if t.owner == nil {
		b := fi.NewFIDBase(fi.ClassDomain, nil)
		t.owner = &b
	}
	t.index.Store(newKeyIndex(minIndexSize))
	return t, nil
}

// Mode returns the effective mr_mode: what the domain reports and enforces.
func (t *Table) Mode() Mode { return t.mode }

// DomainID returns the domain id used in mr_map keys.
func (t *Table) DomainID() uint32 { return t.domainID }

// IOVLimit returns mr_iov_limit.
func (t *Table) IOVLimit() int { return IOVLimit }

// KeySize returns mr_key_size.
func (t *Table) KeySize() int { return KeySize }

// Count returns the number of live regions (pending asynchronous ones
// included).
func (t *Table) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}

// BindEQ is fi_domain_bind(domain, eq, FI_REG_MR): from now on
// registrations complete asynchronously, reporting FI_MR_COMPLETE (or an
// error entry) on q. flags must be fi.REG_MR.
func (t *Table) BindEQ(q *eq.EQ, flags fi.Flags) error {
	if q == nil {
		return fmt.Errorf("mr bind eq: nil EQ: %w", fi.EINVAL)
	}
	if flags != fi.REG_MR {
		return fmt.Errorf("mr bind eq: flags %#x, want FI_REG_MR: %w", uint64(flags), fi.EBADFLAGS)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("mr bind eq: table closed: %w", fi.EINVAL)
	}
	if t.events != nil {
		return fmt.Errorf("mr bind eq: an EQ is already bound: %w", fi.EALREADY)
	}
	if err := q.Ref(t.owner); err != nil {
		return fmt.Errorf("mr bind eq: %w", err)
	}
	t.events = q
	return nil
}

// Close releases the Table (the domain's fi_close). It fails with FI_EBUSY
// while regions are open or raw keys mapped, and unbinds the EQ.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("mr table close: already closed: %w", fi.EINVAL)
	}
	if t.live > 0 {
		return fmt.Errorf("mr table close: %d region(s) open: %w", t.live, fi.EBUSY)
	}
	if n := len(t.mapped); n > 0 {
		return fmt.Errorf("mr table close: %d raw key(s) mapped: %w", n, fi.EBUSY)
	}
	if t.events != nil {
		t.events.Unref(t.owner)
		t.events = nil
	}
	t.pool.drop()
	t.closed = true
	return nil
}

// Attr is fi_mr_attr. The buffers of IOV make up the region; iov_count and
// auth_key_size are the slice lengths.
type Attr struct {
	IOV          [][]byte
	Access       fi.Flags // FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE
	Offset       uint64   // reserved: must be 0
	RequestedKey uint64   // ignored with FI_MR_PROV_KEY
	Context      any      // returned with the FI_MR_COMPLETE event
	AuthKey      []byte   // empty: the domain's
	Iface        HMEMIface
	Device       uint64 // device union; ignored for FI_HMEM_SYSTEM
}

// Reg is fi_mr_reg: it registers buf.
func (t *Table) Reg(buf []byte, access fi.Flags, offset, requestedKey uint64, flags fi.Flags, context any) (*MR, error) {
	iov := [1][]byte{buf}
	return t.register("mr reg", iov[:], context, &Attr{Access: access, Offset: offset, RequestedKey: requestedKey}, flags)
}

// RegV is fi_mr_regv: it registers the buffers of iov as one region.
func (t *Table) RegV(iov [][]byte, access fi.Flags, offset, requestedKey uint64, flags fi.Flags, context any) (*MR, error) {
	return t.register("mr regv", iov, context, &Attr{Access: access, Offset: offset, RequestedKey: requestedKey}, flags)
}

// RegAttr is fi_mr_regattr.
func (t *Table) RegAttr(attr *Attr, flags fi.Flags) (*MR, error) {
	if attr == nil {
		return nil, fmt.Errorf("mr regattr: nil attr: %w", fi.EINVAL)
	}
	return t.register("mr regattr", attr.IOV, attr.Context, attr, flags)
}

// register implements the three calls. iov and context are passed apart
// from a so that a (and the caller's iov array) need not escape.
func (t *Table) register(op string, iov [][]byte, context any, a *Attr, flags fi.Flags) (*MR, error) {
	switch {
	case flags&^regFlags != 0:
		return nil, fmt.Errorf("%s: flags %#x: %w", op, uint64(flags&^regFlags), fi.EBADFLAGS)
	case a.Offset != 0:
		return nil, fmt.Errorf("%s: offset %d is reserved and must be 0: %w", op, a.Offset, fi.EINVAL)
	case len(iov) == 0 || len(iov) > IOVLimit:
		return nil, fmt.Errorf("%s: %d buffers, want 1..%d: %w", op, len(iov), IOVLimit, fi.EINVAL)
	case a.Access&^accessBits != 0:
		return nil, fmt.Errorf("%s: access %#x: %w", op, uint64(a.Access&^accessBits), fi.EINVAL)
	case a.Iface != HMEMSystem:
		return nil, fmt.Errorf("%s: iface %v: only FI_HMEM_SYSTEM memory is supported: %w", op, a.Iface, fi.ENOSYS)
	case t.mode&ModeProvKey == 0 && a.RequestedKey == fi.KeyNotAvail:
		return nil, fmt.Errorf("%s: requested key %#x out of range: %w", op, a.RequestedKey, fi.EKEYREJECTED)
	}
	var length uint64
	lo, hi := ^uint64(0), uint64(0)
	for i, b := range iov {
		if len(b) == 0 {
			return nil, fmt.Errorf("%s: buffer %d is empty (len must be > 0): %w", op, i, fi.EINVAL)
		}
		va := addrOf(b)
		lo, hi = min(lo, va), max(hi, va+uint64(len(b)))
		length += uint64(len(b))
	}
	if t.mode&ModeAllocated != 0 {
		for i, b := range iov {
			ok, err := resident(b)
			if err != nil || !ok {
				return nil, fmt.Errorf("%s: FI_MR_ALLOCATED: buffer %d is not backed by physical pages: %w", op, i, fi.EFAULT)
			}
		}
	}
	digest := t.authDigest
	var extra *regionExtra
	if len(a.AuthKey) > 0 {
		extra = &regionExtra{authKey: append([]byte(nil), a.AuthKey...)}
		digest = AuthDigest(extra.authKey)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("%s: domain closed: %w", op, fi.EINVAL)
	}
	if t.live >= t.maxRegions {
		t.mu.Unlock()
		return nil, fmt.Errorf("%s: %d regions registered: %w", op, t.live, fi.ENOMR)
	}
	key := a.RequestedKey
	if t.mode&ModeProvKey != 0 {
		key = t.provKey()
	} else if t.index.Load().find(key) != nil {
		t.mu.Unlock()
		return nil, fmt.Errorf("%s: key %#x is in use: %w", op, key, fi.ENOKEY)
	}
	// The region is ours alone until insert publishes it: a fresh one,
	// or one every reader let go of (takeRegion); stale handles of its
	// earlier registrations read only its generation.
	r := t.takeRegion()
	r.key = key
	r.access = a.Access
	r.authDigest = digest
	r.rmaEvent = flags&fi.RMA_EVENT != 0
	r.regionID = t.newRegionID()
	r.extra = extra
	// Regions associated with RMA events or endpoints start disabled.
	r.explicitEnable = t.mode&ModeEndpoint != 0 || (t.mode&ModeRMAEvent != 0 && flags&fi.RMA_EVENT != 0)
	if len(iov) <= len(r.inlineSegs) {
		r.segs = r.inlineSegs[:len(iov)]
	} else {
		r.segs = make([]segment, len(iov))
	}
	var off uint64
	for i, b := range iov {
		start := off
		if t.mode&ModeVirtAddr != 0 {
			start = addrOf(b)
		}
		// Field by field: a composite literal was built on the stack and
		// copied with 16-byte loads of 8-byte stores, which stall store
		// forwarding (~13% of register in a profile).
		sg := &r.segs[i]
		sg.buf = b[:len(b):len(b)]
		sg.start, sg.va = start, addrOf(b)
		off += uint64(len(b))
	}
	if t.mode&ModeVirtAddr != 0 {
		r.base, r.length = lo, hi-lo
	} else {
		r.base, r.length = 0, length
	}
	m := t.newHandle()
	r.ctx = context
	m.r, m.gen = r, r.gen.Load()
	r.handle = m
	q := t.events
	if q != nil {
		if r.extra == nil {
			r.extra = new(regionExtra)
		}
		r.extra.done = make(chan struct{})
	}
	t.insert(r)
	t.mu.Unlock()

	if q == nil {
		if err := t.publish(r); err != nil {
			m.Close() // releases the region: its registration failed
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		return m, nil
	}
	// Asynchronous: the handle is complete before the event can exist.
	// The goroutine touches r only before done is closed: Close, which
	// recycles r, waits for that.
	done := r.extra.done
	go func() {
		err := t.publish(r)
		close(done)
		if err != nil {
			// The EQ reports what the call could not; if the EQ is
			// overrun or closed there is nobody left to tell.
			_ = q.PostErr(eq.ErrEntry{FID: m, Context: context, Err: fi.ErrnoOf(err)})
			return
		}
		_ = q.Post(eq.Entry{Event: eq.MRComplete, FID: m, Context: context})
	}()
	return m, nil
}

// publish completes a registration: it writes the mirror entry and makes
// the key usable, or withdraws the key when the mirror refuses it.
func (t *Table) publish(r *region) error {
	if err := t.mirrorUpdate(r, !r.explicitEnable); err != nil {
		r.state.Store(stFailed)
		t.mu.Lock()
		t.remove(r)
		t.mu.Unlock()
		return err
	}
	st := uint32(stComplete)
	if !r.explicitEnable {
		st |= stEnabled
	}
	r.state.Store(st)
	return nil
}

func (t *Table) mirrorKey(r *region) bpf.XdpfabMrKey {
	return bpf.XdpfabMrKey{DomainId: t.domainID, Key: r.key}
}

// mirrorEntry is the key and value of one mirror call. Mirror's methods
// take pointers, which escape through the interface, so they are taken
// from mirrorScratch, not allocated per call; a *MapMirror is called
// directly with pointers to the stack.
type mirrorEntry struct {
	key   bpf.XdpfabMrKey
	value bpf.XdpfabMrValue
}

var mirrorScratch = sync.Pool{New: func() any { return new(mirrorEntry) }}

func (t *Table) mirrorUpdate(r *region, enabled bool) error {
	if t.mirror == nil {
		return nil
	}
	var flags uint32
	if enabled {
		flags = RegionEnabled
	}
	var err error
	if mm := t.mapMirror; mm != nil {
		// r's mirror calls are serialized (registration, then Table.mu),
		// so r.kref is only touched by one goroutine at a time.
		var k ktable.Key
		var v ktable.Value
		t.slotKey(&k, r)
		slotValue(&v, r, flags)
		if r.kref == 0 {
			r.kref, err = mm.add(t.kprefix, &k, &v)
		} else {
			r.kref, err = mm.setAt(r.kref, &k, &v)
		}
	} else {
		v := bpf.XdpfabMrValue{Base: r.base, Len: r.length, Access: uint32(r.access), RegionId: r.regionID, Flags: flags}
		e := mirrorScratch.Get().(*mirrorEntry)
		e.key, e.value = t.mirrorKey(r), v
		err = t.mirror.Update(&e.key, &e.value)
		mirrorScratch.Put(e)
	}
	if err != nil {
		return mirrorError("update", err)
	}
	return nil
}

func (t *Table) mirrorDelete(r *region) error {
	if t.mirror == nil {
		return nil
	}
	var err error
	if mm := t.mapMirror; mm != nil {
		var k ktable.Key
		t.slotKey(&k, r)
		mm.deleteAt(r.kref, &k)
		r.kref = 0
	} else {
		e := mirrorScratch.Get().(*mirrorEntry)
		e.key = t.mirrorKey(r)
		err = t.mirror.Delete(&e.key)
		mirrorScratch.Put(e)
	}
	if err != nil {
		return mirrorError("delete", err)
	}
	return nil
}

// mirrorError maps a mirror failure to a libfabric errno: a full map is
// FI_ENOMR (registration limit exceeded).
func mirrorError(op string, err error) error {
	errno := fi.ErrnoOf(err)
	switch {
	case errors.Is(err, syscall.E2BIG):
		errno = fi.ENOMR
	case errno == fi.EOTHER:
		errno = fi.EIO
	}
	if errors.Is(err, errno) {
		return fmt.Errorf("mr map %s: %w", op, err)
	}
	return fmt.Errorf("mr map %s: %w (%v)", op, errno, err)
}

// provKey returns a key no region of this Table has had; t.mu is held.
// A bijective mix of a counter gives unique, non-sequential keys.
func (t *Table) provKey() uint64 {
	for {
		t.nextKey++
		k := mix64(t.nextKey + t.keySeed)
		if k != fi.KeyNotAvail && t.index.Load().find(k) == nil {
			return k
		}
	}
}

// mix64 is SplitMix64's finalizer, a bijection of uint64.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// MapRaw is fi_mr_map_raw: it converts a peer's raw key (RawAttr) into the
// key to use in data transfers, and records the mapping until UnmapKey.
// Our raw keys carry the whole key, so baseAddr (the peer's base address,
// which the initiator adds to its offsets with FI_MR_VIRT_ADDR) is not
// needed to form it.
func (t *Table) MapRaw(baseAddr uint64, rawKey []byte, flags fi.Flags) (uint64, error) {
	if flags != 0 {
		return 0, fmt.Errorf("mr map raw: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	if len(rawKey) != KeySize {
		return 0, fmt.Errorf("mr map raw: key size %d, want %d: %w", len(rawKey), KeySize, fi.EINVAL)
	}
	key := binary.LittleEndian.Uint64(rawKey)
	if key == fi.KeyNotAvail {
		return 0, fmt.Errorf("mr map raw: key %#x: %w", key, fi.EINVAL)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, fmt.Errorf("mr map raw: domain closed: %w", fi.EINVAL)
	}
	t.mapped[key]++
	return key, nil
}

// UnmapKey is fi_mr_unmap_key: it releases one MapRaw of key.
func (t *Table) UnmapKey(key uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.mapped[key]
	if !ok {
		return fmt.Errorf("mr unmap key: %#x is not mapped: %w", key, fi.EINVAL)
	}
	if n == 1 {
		delete(t.mapped, key)
	} else {
		t.mapped[key] = n - 1
	}
	return nil
}

// IsMapped reports whether key has been mapped with MapRaw and not yet
// unmapped: with FI_MR_RAW an initiator may target only such keys.
func (t *Table) IsMapped(key uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mapped[key] > 0
}

// keyIndex is an open-addressing hash table of regions by key (linear
// probing). Readers load slots atomically without locks; writers hold
// Table.mu and store slots with release stores (memorder.Pointer: a MOV,
// not sync/atomic's locked XCHG; the region's fields are written before
// it is put, which makes it visible to every CPU a moment later, at the
// latest at the writer's next locked instruction: a lock acquire, or the
// locked add that stamps closed regions for reuse, see Table.retire), and never modify an index once a newer one is stored, so a
// reader holding an old index sees a consistent (if stale) snapshot — the
// region's own state word then refuses anything closed since. With
// recycling a region it lists is refilled only after the reader's next
// quiescent point, by which time it loads the index afresh.
type keyIndex struct {
	slots []memorder.Pointer[region]
	shift uint8 // 64 - log2(len(slots))
}

const minIndexSize = 64

// tombstone marks a deleted slot so probe chains stay intact.
var tombstone = new(region)

func newKeyIndex(size int) *keyIndex {
	return &keyIndex{slots: make([]memorder.Pointer[region], size), shift: uint8(64 - bits.TrailingZeros(uint(size)))}
}

func (ix *keyIndex) home(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> ix.shift }

func (ix *keyIndex) find(key uint64) *region {
	mask := uint64(len(ix.slots) - 1)
	for i := ix.home(key); ; i = (i + 1) & mask {
		r := ix.slots[i].Load()
		if r == nil {
			return nil
		}
		if r.key == key && r != tombstone {
			return r
		}
	}
}

// insert adds r, whose key is absent; t.mu is held. The index stays at most
// half full (tombstones included) so probes are short and always end.
func (t *Table) insert(r *region) {
	ix := t.index.Load()
	if (t.live+t.tombs+1)*2 > len(ix.slots) {
		size := minIndexSize
		for size < (t.live+1)*4 {
			size *= 2
		}
		nix := newKeyIndex(size)
		for i := range ix.slots {
			if o := ix.slots[i].Load(); o != nil && o != tombstone {
				nix.put(o)
			}
		}
		t.index.Store(nix)
		t.tombs = 0
		ix = nix
	}
	if ix.put(r) {
		t.tombs--
	}
	t.live++
}

// put stores r in the first free or tombstoned slot of its probe chain and
// reports whether that slot was a tombstone.
func (ix *keyIndex) put(r *region) bool {
	mask := uint64(len(ix.slots) - 1)
	for i := ix.home(r.key); ; i = (i + 1) & mask {
		o := ix.slots[i].Load()
		if o == nil || o == tombstone {
			ix.slots[i].Store(r)
			return o == tombstone
		}
	}
}

// remove deletes r from the index; t.mu is held.
func (t *Table) remove(r *region) {
	ix := t.index.Load()
	mask := uint64(len(ix.slots) - 1)
	for i := ix.home(r.key); ; i = (i + 1) & mask {
		o := ix.slots[i].Load()
		if o == nil {
			return
		}
		if o == r {
			ix.slots[i].Store(tombstone)
			t.live--
			t.tombs++
			return
		}
	}
}
