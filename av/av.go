package av

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
)

// Type is enum fi_av_type.
type Type int

// AV types, numbered as in fi_domain.h.
const (
	TypeUnspec Type = iota // FI_AV_UNSPEC: the provider picks (TypeTable)
	TypeMap                // FI_AV_MAP: opaque handles
	TypeTable              // FI_AV_TABLE: indices in insertion order
)

func (t Type) String() string {
	switch t {
	case TypeUnspec:
		return "FI_AV_UNSPEC"
	case TypeMap:
		return "FI_AV_MAP"
	case TypeTable:
		return "FI_AV_TABLE"
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// Attr is struct fi_av_attr.
type Attr struct {
	Type      Type
	RxCtxBits int // bits of an fi_addr reserved for the receive context, 0..MaxRxCtxBits
	Count     int // expected number of addresses: a sizing hint, not a limit
	EPPerNode int // endpoints per node, 0 = unknown: a sizing hint
	Name      string
	MapAddr   uint64   // named AV: ignored at open; Attr reports where its fi_addr array is mapped (addrarray.go)
	Flags     fi.Flags // fi.EVENT, fi.READ, fi.SYMMETRIC, fi.AV_USER_ID
}

// MaxRxCtxBits is the largest Attr.RxCtxBits: fi_rx_addr puts the receive
// context in the top bits, above the bits a handle uses.
const MaxRxCtxBits = 15

// AuthKeySize is the size of an xdpfab authorization key: a 64-bit key
// that peers carry and the datapath checks.
const AuthKeySize = 8

// authKeyTag marks an authorization-key handle: bit 48 is above every
// address handle (TABLE indices are below 2^32, MAP handles below 2^48)
// and below the receive-context bits.
const authKeyTag = fi.Addr(1) << 48

// maxAuthKeys is how many auth keys an AV holds (ids 1..65535).
const maxAuthKeys = 1<<16 - 1

const openFlags = fi.EVENT | fi.READ | fi.SYMMETRIC | fi.AV_USER_ID

// Option configures Open beyond fi_av_attr: what the domain would supply.
type Option func(*options)

type options struct {
	format    fi.AddrFormat
	mirror    Mirror
	mirrorSet bool
	kmap      *ebpf.Map
	authKeys  bool
	id        uint32
	release   func()
}

// WithAddrFormat sets the address format of the domain (fi_info
// addr_format): fi.FormatSockaddr4, fi.FormatSockaddr6, fi.FormatSockaddr
// (either, by sa_family; the default) or fi.FormatStr.
func WithAddrFormat(f fi.AddrFormat) Option { return func(o *options) { o.format = f } }

// WithMirror makes the AV keep m in step instead of a kernel map of its
// own. WithMirror(nil) opens an AV without a kernel copy, for a datapath
// that does not use XDP. Ignored for named AVs, which live in their
// pinned map.
func WithMirror(m Mirror) Option {
	return func(o *options) { o.mirror, o.mirrorSet = m, true }
}

// WithKernelMap makes the AV mirror its entries into m, an AV map shared
// with other AVs (each keys its entries with its own av_id) and with the
// XDP program; the AV does not close m.
func WithKernelMap(m *ebpf.Map) Option { return func(o *options) { o.kmap = m } }

// WithKernelID makes an unnamed AV key its kernel map entries with id
// (not bit 31, which marks named AVs; not 0) instead of an id counted in
// this process: ids must be unique among the processes sharing a kernel
// map, and xdp.Attachment.NewAVID hands out such ids. Close calls release
// once it has removed the AV's entries from the map (not if that failed:
// the id must not be used again while entries carry it). If Open fails,
// release is not called. FI_EINVAL with a name.
func WithKernelID(id uint32, release func()) Option {
	return func(o *options) { o.id, o.release = id, release }
}

// WithAVAuthKey says the domain was opened with FI_AV_AUTH_KEY: the AV
// holds authorization keys (InsertAuthKey), and per-insert FI_AV_USER_ID is
// invalid.
func WithAVAuthKey() Option { return func(o *options) { o.authKeys = true } }

// authKey is one authorization key of the AV.
type authKey struct {
	key     [AuthKeySize]byte
	used    bool
	userID  fi.Addr // FI_ADDR_NOTAVAIL until SetUserID
	addrs   int     // addresses bound to the key
	enabled int     // endpoints enabled against the key
}

// AV is an address vector.
type AV struct {
	fi.FIDBase
	attr     Attr
	format   fi.AddrFormat
	id       uint32 // av_id of the kernel map keys
	authKeys bool   // domain has FI_AV_AUTH_KEY
	readOnly bool
	idxMask  fi.Addr // clears fi_rx_addr's receive-context bits

	// wmu serializes the calls that change the AV (inserts, removes, user
	// IDs, auth keys, endpoint binding, Close). It guards the fields below
	// up to mu, and is held across kernel map syscalls so that mu is not.
	wmu     sync.Mutex
	mirror  Mirror
	procMap bool   // mirrors into the process's AV map (ProcessKernelMap)
	release func() // WithKernelID's, after Close removed the entries
	pend    pending
	// heldDone are asynchronous inserts of a named AV that finished inside
	// a change not yet published to other processes; their events wait
	// for the publication (insertSync). Guarded by wmu.
	heldDone []*insertJob
	holdDone bool
	// lost and lostErr are the handles of synchronous FI_MORE inserts the
	// kernel refused after the insert returned, and the refusals, since
	// the last flush; guarded by wmu.
	lost    []fi.Addr
	lostErr error
	scratch *block
	eq      *eq.EQ  // set under wmu and epMu
	shared  *shared // named AVs
	async   *worker
	closed  bool

	// epMu guards eps and closing, so Close can refuse (FI_EBUSY) or
	// commit to closing, and stop queued inserts, without waiting for wmu.
	// Order: epMu before wmu before mu.
	epMu    sync.Mutex
	eps     map[fi.FID]*boundEP
	closing bool
	// forgetters are the bound endpoints that implement PeerForgetter,
	// replaced (under epMu) on attach and detach so Remove reads them
	// without epMu, which it may not take under wmu.
	forgetters atomic.Pointer[[]PeerForgetter]

	// mu guards the table and auth keys that lookups read. Writers hold
	// wmu as well and take mu with lock, which marks the table changing
	// for lock-free readers (table.seq); lookups take mu.RLock, or no
	// lock at all for a dense entry read through rt.
	mu sync.RWMutex
	t  *table
	// rt is t for lock-free readers, replaced with it (under mu).
	rt   atomic.Pointer[table]
	keys []authKey // id-1 -> key
	dead bool      // closed: lookups find nothing
	// keyFree counts the unused ids below len(keys), all at or above
	// keyLow (an index into keys): InsertAuthKey finds the lowest free
	// id without scanning the used ones below it.
	keyFree, keyLow int
}

// boundEP is an endpoint bound to the AV.
type boundEP struct {
	enabled bool
	keys    []uint16 // auth key ids it was enabled against
}

var lastAVID atomic.Uint32

// Open is fi_av_open. The attributes are validated and resolved: Attr()
// reports the type chosen for TypeUnspec and a named AV's map_addr.
func Open(attr Attr, ctx any, opts ...Option) (*AV, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := validateAttr(&attr, &o); err != nil {
		return nil, fmt.Errorf("av open: %w", err)
	}
	av := &AV{
		FIDBase:  fi.NewFIDBase(fi.ClassAV, ctx),
		attr:     attr,
		format:   o.format,
		authKeys: o.authKeys,
		readOnly: attr.Flags&fi.READ != 0,
		idxMask:  ^fi.Addr(0) >> attr.RxCtxBits,
		eps:      map[fi.FID]*boundEP{},
	}
	if attr.Name != "" {
		if err := av.openShared(); err != nil {
			return nil, fmt.Errorf("av open %q: %w", attr.Name, err)
		}
	} else {
		av.id = lastAVID.Add(1) &^ sharedIDBit
		if o.id != 0 {
			av.id, av.release = o.id, o.release
		}
		av.t = newTable(attr.Count, rand.Uint64(), true)
		av.t.retire = attr.Type == TypeMap
		av.rt.Store(av.t)
		switch {
		case o.mirrorSet:
			av.mirror = o.mirror
		case o.kmap != nil:
			tm, err := NewTableMirror(o.kmap, av.id, attr.Count)
			if err != nil {
				return nil, fmt.Errorf("av open: %w", err)
			}
			av.mirror = tm
		default:
			m, err := acquireProcessMap()
			if err != nil {
				return nil, fmt.Errorf("av open: %w (open with WithMirror(nil) for an AV without kernel copy)", err)
			}
			tm := takePooledTable()
			if tm != nil {
				av.id = tm.id // its table is entered in av_map under its id
			} else if tm, err = NewTableMirror(m, av.id, attr.Count); err != nil {
				releaseProcessMap()
				return nil, fmt.Errorf("av open: %w", err)
			}
			av.procMap = true
			av.mirror = tm
		}
	}
	if attr.Flags&fi.EVENT != 0 {
		av.async = startWorker(av)
	}
	return av, nil
}

func validateAttr(attr *Attr, o *options) error {
	switch attr.Type {
	case TypeUnspec:
		if attr.Name == "" {
			attr.Type = TypeTable
		} // a named AV takes the type it was created with
	case TypeMap, TypeTable:
	default:
		return fmt.Errorf("type %v: %w", attr.Type, fi.EINVAL)
	}
	if attr.RxCtxBits < 0 || attr.RxCtxBits > MaxRxCtxBits {
		return fmt.Errorf("rx_ctx_bits %d outside 0..%d: %w", attr.RxCtxBits, MaxRxCtxBits, fi.EINVAL)
	}
	if attr.Count < 0 || attr.EPPerNode < 0 {
		return fmt.Errorf("count %d, ep_per_node %d: %w", attr.Count, attr.EPPerNode, fi.EINVAL)
	}
	if attr.Flags&^openFlags != 0 {
		return fmt.Errorf("flags %#x: %w", uint64(attr.Flags&^openFlags), fi.EBADFLAGS)
	}
	if attr.Flags&fi.READ != 0 && attr.Name == "" {
		return fmt.Errorf("FI_READ needs a named AV: %w", fi.EINVAL)
	}
	if o.id != 0 && (attr.Name != "" || o.id&sharedIDBit != 0) {
		return fmt.Errorf("kernel id %#x for AV %q (named AVs take theirs from the name; bit 31 marks them): %w", o.id, attr.Name, fi.EINVAL)
	}
	if attr.Name == "" {
		attr.MapAddr = 0 // ignored without a name
	}
	switch o.format {
	case fi.FormatUnspec:
		o.format = fi.FormatSockaddr
	case fi.FormatSockaddr, fi.FormatSockaddr4, fi.FormatSockaddr6, fi.FormatStr:
	default:
		return fmt.Errorf("address format %v: %w", o.format, fi.EINVAL)
	}
	return nil
}

// processMap is the av_map the unnamed AVs of this process share by
// default, each entering its kernel table under its av_id. It is created
// with the first such AV and kept for the life of the process, with the
// tables of closed AVs (pool): entering a table in av_map or taking it
// out waits for an RCU grace period in the kernel (bpf(2) waits for
// running programs after a map-in-map update), 5-20 ms each, which an
// fi_av_open/fi_close loop would otherwise pay twice per AV. Fixed cost:
// the av_map's bucket array (1 MiB for AV_MAP_MAX_AVS) and up to
// poolMax tables of at most poolMaxBuckets buckets (32 KiB each).
var processMap struct {
	sync.Mutex
	m    *ebpf.Map // guarded by the mutex
	refs int       // AVs using m
	pool []*TableMirror
}

// The process map keeps at most poolMax tables of closed AVs, each of at
// most poolMaxBuckets data buckets (a bigger one is dropped).
const (
	poolMax        = 64
	poolMaxBuckets = 64
)

// takePooledTable returns a kept table, empty, nil if there is none.
func takePooledTable() *TableMirror {
	processMap.Lock()
	defer processMap.Unlock()
	n := len(processMap.pool)
	if n == 0 {
		return nil
	}
	tm := processMap.pool[n-1]
	processMap.pool = processMap.pool[:n-1]
	return tm
}

// poolTable empties tm and keeps it for the next AV, if there is room.
func poolTable(tm *TableMirror) bool {
	tm.mu.Lock()
	if tm.t == nil || tm.t.Buckets() > poolMaxBuckets {
		tm.mu.Unlock()
		return false
	}
	tm.t.Reset()
	tm.mu.Unlock()
	processMap.Lock()
	defer processMap.Unlock()
	if len(processMap.pool) >= poolMax {
		return false
	}
	processMap.pool = append(processMap.pool, tm)
	return true
}

func acquireProcessMap() (*ebpf.Map, error) {
	processMap.Lock()
	defer processMap.Unlock()
	if processMap.m == nil {
		m, err := NewKernelMap(0)
		if err != nil {
			return nil, err
		}
		processMap.m = m
	}
	processMap.refs++
	return processMap.m, nil
}

// releaseProcessMap drops an AV's reference; the map stays (see
// processMap).
func releaseProcessMap() error {
	processMap.Lock()
	defer processMap.Unlock()
	processMap.refs--
	return nil
}

// ProcessKernelMap returns the av_map the unnamed AVs of this process
// mirror into by default, nil until the first such AV opens. The XDP
// program of the process is loaded with it as its av_map.
func ProcessKernelMap() *ebpf.Map {
	processMap.Lock()
	defer processMap.Unlock()
	return processMap.m
}

// Attr returns the AV's attributes as resolved by Open.
func (av *AV) Attr() Attr { return av.attr }

// AddrFormat returns the format of the addresses the AV takes and returns.
func (av *AV) AddrFormat() fi.AddrFormat { return av.format }

// ID returns the av_id the AV's entries carry in the kernel map (struct
// av_key). The datapath maps a local port to it.
func (av *AV) ID() uint32 { return av.id }

// KernelMap returns the BPF map the AV mirrors into, nil without one. An
// XDP program attached for this AV is loaded with it as av_map
// (ebpf.CollectionOptions.MapReplacements{bpf.XdpfabMapAvMap: av.KernelMap()});
// for a named AV, another process can instead open the map pinned at
// PinPath(name).
func (av *AV) KernelMap() *ebpf.Map {
	if av.mirror == nil {
		return nil
	}
	return av.mirror.Map()
}

// Count returns the number of addresses in the AV.
func (av *AV) Count() int {
	av.mu.RLock()
	defer av.mu.RUnlock()
	if av.dead {
		return 0
	}
	return av.t.live
}

// Close is fi_close. It fails with FI_EBUSY while an endpoint is bound.
// Inserts still queued on an FI_EVENT AV are aborted: their addresses fail
// with FI_ECANCELED and each gets its completion. An unnamed AV's entries
// leave the kernel map; a named AV stays pinned for other processes until
// Unlink.
func (av *AV) Close() error {
	av.epMu.Lock()
	if av.closing {
		av.epMu.Unlock()
		return fmt.Errorf("av close: %w", fi.EINVAL)
	}
	if len(av.eps) > 0 {
		n := len(av.eps)
		av.epMu.Unlock()
		return fmt.Errorf("av close: %d endpoint(s) bound: %w", n, fi.EBUSY)
	}
	av.closing = true
	av.epMu.Unlock()
	if av.async != nil {
		av.async.stop() // aborts what is queued, finishes what runs
	}

	av.wmu.Lock()
	defer av.wmu.Unlock()
	av.closed = true
	var errs []error
	if _, err := av.flush(); err != nil {
		errs = append(errs, err)
	}
	if av.shared != nil {
		errs = append(errs, av.shared.close())
	} else {
		var err error
		if tm, ok := av.mirror.(*TableMirror); ok {
			switch {
			case av.procMap && poolTable(tm):
				// Emptied and kept, entered in av_map under its id,
				// for the next AV of the process.
			case av.release != nil:
				// An id the attachment hands out again: the table
				// stays in its av_map, empty, for the next AV.
				err = tm.Park()
				errs = append(errs, err)
			default:
				err = tm.Drop() // the whole table at once
				errs = append(errs, err)
			}
		} else if av.mirror != nil {
			err = av.deleteAllFromKernel()
			errs = append(errs, err)
		}
		if err == nil && av.release != nil {
			av.release() // no entry carries the id any more
		}
	}
	if av.procMap {
		errs = append(errs, releaseProcessMap())
	}
	if av.eq != nil {
		av.eq.Unref(av)
	}
	av.mu.Lock()
	// The old table's seq stays odd: a lock-free reader that loaded it
	// falls back to mu and finds the new, empty one.
	av.t.lockWrite()
	av.dead = true
	av.t = newTable(0, 0, false)
	av.rt.Store(av.t)
	av.keys, av.keyFree, av.keyLow = nil, 0, 0
	av.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("av close: %w", err)
	}
	return nil
}

// deleteAllFromKernel removes the AV's entries from a kernel map it shares
// with others; wmu held.
func (av *AV) deleteAllFromKernel() error {
	keys := make([]bpf.XdpfabAvKey, 0, batchLen)
	var err error
	av.t.each(func(_ uint32, ep endpoint, _, _ uint16) bool {
		keys = append(keys, kernelKey(av.id, ep))
		if len(keys) == batchLen {
			_, err = av.mirror.Delete(keys)
			keys = keys[:0]
		}
		return err == nil
	})
	if err == nil {
		_, err = av.mirror.Delete(keys)
	}
	return errnoOfKernel(err)
}

// Bind is fi_av_bind: it associates q with the AV, which reports
// asynchronous inserts there. Flags must be 0; an AV binds one EQ.
func (av *AV) Bind(q *eq.EQ, flags fi.Flags) error {
	if flags != 0 {
		return fmt.Errorf("av bind: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	if q == nil {
		return fmt.Errorf("av bind: nil EQ: %w", fi.EINVAL)
	}
	av.wmu.Lock()
	defer av.wmu.Unlock()
	if av.closed {
		return fmt.Errorf("av bind: closed: %w", fi.EINVAL)
	}
	if av.eq != nil {
		return fmt.Errorf("av bind: an EQ is already bound: %w", fi.EINVAL)
	}
	if err := q.Ref(av); err != nil {
		return fmt.Errorf("av bind: %w", err)
	}
	av.epMu.Lock()
	av.eq = q
	av.epMu.Unlock()
	return nil
}

// PeerForgetter is implemented by endpoints that keep per-peer datapath
// state (fabric.Endpoint). Remove tells each bound one the addresses it
// removed, once they have left the AV (and its kernel map), before Remove
// returns; the endpoint drops its state about them (fi_av_remove: "all
// resources associated with the indicated addresses are released").
// ForgetPeers must not call back into the AV's writing methods.
type PeerForgetter interface {
	ForgetPeers(addrs []netip.AddrPort)
}

// setForgetters rebuilds the forgetters snapshot; epMu held.
func (av *AV) setForgetters() {
	var fs []PeerForgetter
	for ep := range av.eps {
		if f, ok := ep.(PeerForgetter); ok {
			fs = append(fs, f)
		}
	}
	av.forgetters.Store(&fs)
}

// forget tells the bound endpoints that addrs left the AV.
func (av *AV) forget(addrs []netip.AddrPort) {
	fs := av.forgetters.Load()
	if fs == nil || len(addrs) == 0 {
		return
	}
	for _, f := range *fs {
		f.ForgetPeers(addrs)
	}
}

// AttachEndpoint records that ep is bound to the AV (fi_ep_bind), so Close
// fails with FI_EBUSY until DetachEndpoint. For the endpoint package. It
// fails with FI_EINVAL on a closed AV, and on a nil *AV (an endpoint's
// Bind given a typed nil) rather than panicking.
func (av *AV) AttachEndpoint(ep fi.FID) error {
	if av == nil {
		return fmt.Errorf("av attach: nil AV: %w", fi.EINVAL)
	}
	if ep == nil {
		return fmt.Errorf("av attach: nil endpoint: %w", fi.EINVAL)
	}
	av.epMu.Lock()
	defer av.epMu.Unlock()
	if av.closing {
		return fmt.Errorf("av attach: closed: %w", fi.EINVAL)
	}
	if _, ok := av.eps[ep]; ok {
		return fmt.Errorf("av attach: endpoint already bound: %w", fi.EINVAL)
	}
	av.eps[ep] = &boundEP{}
	av.setForgetters()
	return nil
}

// DetachEndpoint undoes AttachEndpoint (the endpoint is closed), disabling
// it first if it is enabled.
func (av *AV) DetachEndpoint(ep fi.FID) error {
	av.epMu.Lock()
	defer av.epMu.Unlock()
	b, ok := av.eps[ep]
	if !ok {
		return fmt.Errorf("av detach: endpoint not bound: %w", fi.EINVAL)
	}
	av.disable(b)
	delete(av.eps, ep)
	av.setForgetters()
	return nil
}

// EnableEndpoint records that the bound endpoint ep is enabled: it is
// configured with the AV's authorization keys as they are now, whose
// handles it returns; keys inserted later do not apply to it
// (fi_av_insert_auth_key), and removing any of them fails with FI_EBUSY
// until DisableEndpoint or DetachEndpoint.
func (av *AV) EnableEndpoint(ep fi.FID) ([]fi.Addr, error) {
	av.epMu.Lock()
	defer av.epMu.Unlock()
	b, ok := av.eps[ep]
	if !ok {
		return nil, fmt.Errorf("av enable: endpoint not bound: %w", fi.EINVAL)
	}
	if b.enabled {
		return nil, fmt.Errorf("av enable: endpoint already enabled: %w", fi.EINVAL)
	}
	av.lock()
	defer av.unlock()
	var handles []fi.Addr
	for i := range av.keys {
		if k := &av.keys[i]; k.used {
			k.enabled++
			b.keys = append(b.keys, uint16(i+1))
			handles = append(handles, authKeyTag|fi.Addr(i+1))
		}
	}
	b.enabled = true
	return handles, nil
}

// DisableEndpoint undoes EnableEndpoint.
func (av *AV) DisableEndpoint(ep fi.FID) error {
	av.epMu.Lock()
	defer av.epMu.Unlock()
	b, ok := av.eps[ep]
	if !ok || !b.enabled {
		return fmt.Errorf("av disable: endpoint not enabled: %w", fi.EINVAL)
	}
	av.disable(b)
	return nil
}

// disable releases the auth keys b was enabled against; epMu held.
func (av *AV) disable(b *boundEP) {
	av.lock()
	for _, id := range b.keys {
		if k := &av.keys[id-1]; k.enabled > 0 {
			k.enabled--
		}
	}
	av.unlock()
	b.keys, b.enabled = nil, false
}

// lock takes mu for writing a change to the table and auth keys.
func (av *AV) lock() {
	av.mu.Lock()
	av.t.lockWrite()
}

func (av *AV) unlock() {
	av.t.unlockWrite()
	av.mu.Unlock()
}

// handle returns the fi_addr of the address at idx.
func (av *AV) handle(idx uint32, gen uint16) fi.Addr {
	if av.attr.Type == TypeMap {
		return fi.Addr(gen)<<32 | fi.Addr(idx)
	}
	return fi.Addr(idx)
}

// resolve returns the index of the live address a refers to (receive
// context bits ignored); mu held.
func (av *AV) resolve(a fi.Addr) (uint32, endpoint, uint16, bool) {
	a &= av.idxMask
	if a&authKeyTag != 0 || a > 1<<48-1 {
		return 0, endpoint{}, 0, false
	}
	idx := uint32(a)
	if av.attr.Type == TypeTable && a > maxIndex {
		return 0, endpoint{}, 0, false
	}
	ep, gen, key, ok := av.t.get(idx)
	if !ok || (av.attr.Type == TypeMap && fi.Addr(gen) != a>>32) {
		return 0, endpoint{}, 0, false
	}
	return idx, ep, key, true
}

// resolveHeld returns the index of the held index a refers to (see
// table.hold; receive context bits ignored); mu held.
func (av *AV) resolveHeld(a fi.Addr) (uint32, bool) {
	a &= av.idxMask
	if a&authKeyTag != 0 || a > 1<<48-1 || av.attr.Type == TypeTable && a > maxIndex {
		return 0, false
	}
	gen, ok := av.t.heldGen(uint32(a))
	if !ok || (av.attr.Type == TypeMap && fi.Addr(gen) != a>>32) {
		return 0, false
	}
	return uint32(a), true
}

// authKeyID returns the id of the live auth key handle a; mu held.
func (av *AV) authKeyID(a fi.Addr) (uint16, bool) {
	a &= av.idxMask
	if a&^authKeyTag == 0 || a&^(authKeyTag|maxAuthKeys) != 0 || a&authKeyTag == 0 {
		return 0, false
	}
	id := uint16(a)
	if int(id) > len(av.keys) || !av.keys[id-1].used {
		return 0, false
	}
	return id, true
}

// sharedIDBit marks the av_ids of named AVs, derived from the name so all
// processes agree; unnamed AVs count up from 1 without it.
const sharedIDBit = 1 << 31

func sharedID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32() | sharedIDBit
}
