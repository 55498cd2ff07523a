package av

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/ktable"
	"github.com/xdpfab/xdpfab/internal/prefetch"
)

const insertFlags = fi.MORE | fi.SYNC_ERR | fi.AV_USER_ID | fi.AUTH_KEY

// Insert is fi_av_insert: it inserts addrs, each one address in the AV's
// format (what an endpoint's GetName yields: a sockaddr_in, a sockaddr_in6,
// or an FI_ADDR_STR string), and writes their handles to fiAddr, which may
// be nil for FI_AV_TABLE and otherwise holds at least len(addrs) slots.
//
// Synchronously it returns how many addresses were inserted; a failed
// address gets FI_ADDR_NOTAVAIL in its fiAddr slot. With fi.SYNC_ERR, ctx
// must be an []int of at least len(addrs), which receives each address's
// status: 0 or a positive fi.Errno.
//
// On an FI_EVENT AV it returns 0 at once (FI_ENOEQ before Bind); the bound
// EQ then gets one error entry per failed address (Data: its index,
// Context: ctx), then one FI_AV_COMPLETE with Data: the number inserted.
// fiAddr must stay untouched until then. An FI_EVENT insert without
// fi.MORE that follows inserts with it ends their batch: it runs the batch
// before returning and returns the number of its own addresses inserted,
// as a synchronous insert does; its events and the batch's follow as
// usual (see "Provider choices" in the package doc).
//
// Per-insert fi.AV_USER_ID takes fiAddr[i] as the user ID of address i,
// fi.AUTH_KEY takes it as the auth key handle (InsertAuthKey) to bind it
// to; both then overwrite it with the address's handle. fi.MORE lets the
// AV hold the kernel map writes back until an insert without it; if the
// kernel then refuses an address, its fiAddr slot (and FI_SYNC_ERR status)
// is written at that time and its handle stays reserved until Remove (see
// "FI_MORE and late failures" in the package doc, and LostError).
func (av *AV) Insert(addrs [][]byte, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	src := rawSource{format: av.format, addrs: addrs}
	return av.insert("av insert", src, fiAddr, flags, ctx)
}

// InsertAddrPort is Insert for addresses given as netip.AddrPort (IPv4 or
// IPv6 UDP endpoints), whatever the AV's format.
func (av *AV) InsertAddrPort(addrs []netip.AddrPort, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	return av.insert("av insert", apSource{format: av.format, addrs: addrs}, fiAddr, flags, ctx)
}

// InsertSvc is fi_av_insertsvc: it inserts the address of node (host name
// or numeric address) and service (UDP port number or name). node may
// instead be an FI_ADDR_STR address with service "". fiAddr is nil or
// holds one slot.
func (av *AV) InsertSvc(node, service string, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	return av.insert("av insertsvc", &svcSource{format: av.format, node: node, service: service}, fiAddr, flags, ctx)
}

// InsertSym is fi_av_insertsym: it inserts nodecnt x svccnt addresses,
// the services service..service+svccnt-1 of node, then of node+1, and so
// on. node is a numeric address (counted up as an integer) or a host name
// with a numeric suffix ("host10", "host11", ..., keeping the suffix's
// zero padding). On an FI_SYMMETRIC AV, a numeric range is stored as a
// range, in memory independent of its size.
func (av *AV) InsertSym(node string, nodecnt int, service string, svccnt int, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	src, err := newSymSource(av.format, node, nodecnt, service, svccnt)
	if err != nil {
		return 0, fmt.Errorf("av insertsym: %w", err)
	}
	return av.insert("av insertsym", src, fiAddr, flags, ctx)
}

// source yields the addresses of one insert call.
type source interface {
	len() int
	at(i int) (endpoint, fi.Errno)
}

type rawSource struct {
	format fi.AddrFormat
	addrs  [][]byte
}

func (s rawSource) len() int                          { return len(s.addrs) }
func (s rawSource) at(i int) (endpoint, fi.Errno)     { return parseAddr(s.format, s.addrs[i]) }
func (s apSource) len() int                           { return len(s.addrs) }
func (s *parsedSource) len() int                      { return len(s.eps) }
func (s *parsedSource) at(i int) (endpoint, fi.Errno) { return s.eps[i], s.errAt(i) }

type apSource struct {
	format fi.AddrFormat
	addrs  []netip.AddrPort
}

func (s apSource) at(i int) (endpoint, fi.Errno) {
	ep, errno := endpointOf(s.addrs[i])
	if errno == 0 && !formatTakes(s.format, s.addrs[i].Addr()) {
		errno = fi.EINVAL
	}
	return ep, errno
}

// parsedSource is a copy of an asynchronous insert's addresses, taken by
// the call so the caller's buffers are free once it returns.
type parsedSource struct {
	eps  []endpoint
	errs []fi.Errno // nil while every address parsed
}

func (s *parsedSource) errAt(i int) fi.Errno {
	if s.errs == nil {
		return 0
	}
	return s.errs[i]
}

func parseAll(src source) *parsedSource {
	p := &parsedSource{eps: make([]endpoint, src.len())}
	for i := range p.eps {
		ep, errno := src.at(i)
		if errno != 0 {
			if p.errs == nil {
				p.errs = make([]fi.Errno, len(p.eps))
			}
			p.errs[i] = errno
		}
		p.eps[i] = ep
	}
	return p
}

// svcSource resolves one node/service pair when first asked, which for an
// FI_EVENT AV is in the AV's worker, not in the caller.
type svcSource struct {
	format        fi.AddrFormat
	node, service string
	ep            endpoint
	errno         fi.Errno
	done          bool
}

func (s *svcSource) len() int { return 1 }

func (s *svcSource) at(int) (endpoint, fi.Errno) {
	if !s.done {
		s.done = true
		if strings.Contains(s.node, "://") && s.service == "" {
			var a netip.Addr
			a, s.ep, s.errno = parseAddrStrAddr(s.node)
			if s.errno == 0 && !formatTakes(s.format, a) {
				s.errno = fi.EINVAL
			}
		} else if port, errno := resolvePort(s.service); errno != 0 {
			s.errno = errno
		} else {
			s.ep, s.errno = resolveNode(s.format, s.node, port)
		}
	}
	return s.ep, s.errno
}

// formatTakes reports whether an AV of format f stores address a:
// FI_SOCKADDR_IN takes IPv4 addresses (IPv4-mapped ones too),
// FI_SOCKADDR_IN6 IPv6 ones, IPv4-mapped included (a struct sockaddr_in6
// holds ::ffff:a.b.c.d), but no plain IPv4 address. Such a mapped address
// is the same peer, and the same kernel map key, as the IPv4 address.
func formatTakes(f fi.AddrFormat, a netip.Addr) bool {
	switch f {
	case fi.FormatSockaddr4:
		return a.Unmap().Is4()
	case fi.FormatSockaddr6:
		return a.Is6()
	}
	return true
}

func resolvePort(service string) (uint16, fi.Errno) {
	if n, err := strconv.ParseUint(service, 10, 16); err == nil {
		if n == 0 {
			return 0, fi.EINVAL
		}
		return uint16(n), 0
	}
	if service == "" {
		return 0, fi.EINVAL
	}
	n, err := net.LookupPort("udp", service)
	if err != nil || n <= 0 || n > 0xffff {
		return 0, fi.EINVAL
	}
	return uint16(n), 0
}

// resolveTimeout bounds a host name lookup.
const resolveTimeout = 10 * time.Second

// resolveNode returns the endpoint of node (numeric or host name) in the
// family the AV format takes.
func resolveNode(f fi.AddrFormat, node string, port uint16) (endpoint, fi.Errno) {
	if node == "" {
		return endpoint{}, fi.EINVAL
	}
	if a, err := netip.ParseAddr(node); err == nil {
		ep, errno := endpointOf(netip.AddrPortFrom(a, port))
		if errno == 0 && (!formatTakes(f, a) || a.Is4In6() && f == fi.FormatSockaddr4) {
			errno = fi.EINVAL
		}
		return ep, errno
	}
	network := "ip"
	switch f {
	case fi.FormatSockaddr4:
		network = "ip4"
	case fi.FormatSockaddr6:
		network = "ip6"
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, network, node)
	if err != nil || len(addrs) == 0 {
		return endpoint{}, fi.EINVAL
	}
	return endpointOf(netip.AddrPortFrom(addrs[0], port))
}

// symSource enumerates the nodecnt x svccnt addresses of fi_av_insertsym.
type symSource struct {
	format      fi.AddrFormat
	nodes, svcs int
	port        uint16
	numeric     bool
	ip          [16]byte // first node, numeric
	prefix      string   // host name without its numeric suffix
	suffix      uint64
	width       int // digits of the suffix, kept with zero padding
	lastNode    int // node whose resolution is cached, -1 none
	lastEP      endpoint
	lastErr     fi.Errno
}

func newSymSource(f fi.AddrFormat, node string, nodecnt int, service string, svccnt int) (*symSource, error) {
	if nodecnt < 0 || svccnt < 0 || (svccnt > 0 && nodecnt > (maxIndex+1)/svccnt) {
		return nil, fmt.Errorf("nodecnt %d x svccnt %d: %w", nodecnt, svccnt, fi.EINVAL)
	}
	s := &symSource{format: f, nodes: nodecnt, svcs: svccnt, lastNode: -1}
	port, errno := resolvePort(service)
	if errno != 0 || (svccnt > 0 && int(port)+svccnt-1 > 0xffff) {
		return nil, fmt.Errorf("service %q x %d: %w", service, svccnt, fi.EINVAL)
	}
	s.port = port
	if a, err := netip.ParseAddr(node); err == nil {
		ep, errno := endpointOf(netip.AddrPortFrom(a, port))
		if errno != 0 || !formatTakes(f, a) {
			return nil, fmt.Errorf("node %q: %w", node, fi.EINVAL)
		}
		if nodecnt > 0 {
			if _, ok := ipAdd(ep.ip, uint64(nodecnt-1)); !ok {
				return nil, fmt.Errorf("node %q + %d overflows: %w", node, nodecnt-1, fi.EINVAL)
			}
		}
		s.numeric, s.ip = true, ep.ip
		return s, nil
	}
	i := len(node)
	for i > 0 && node[i-1] >= '0' && node[i-1] <= '9' {
		i--
	}
	s.prefix, s.width = node[:i], len(node)-i
	if node == "" || (nodecnt > 1 && s.width == 0) {
		return nil, fmt.Errorf("node %q needs a numeric suffix for nodecnt %d: %w", node, nodecnt, fi.EINVAL)
	}
	if s.width > 0 {
		n, err := strconv.ParseUint(node[i:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("node %q: %w", node, fi.EINVAL)
		}
		s.suffix = n
	}
	return s, nil
}

func (s *symSource) len() int { return s.nodes * s.svcs }

func (s *symSource) at(i int) (endpoint, fi.Errno) {
	node, svc := i/s.svcs, i%s.svcs
	port := s.port + uint16(svc)
	if s.numeric {
		ip, _ := ipAdd(s.ip, uint64(node))
		return endpoint{ip: ip, port: port}, 0
	}
	if node != s.lastNode {
		s.lastNode = node
		s.lastEP, s.lastErr = resolveNode(s.format, s.nodeName(node), s.port)
	}
	ep := s.lastEP
	ep.port = port
	return ep, s.lastErr
}

// nodeName is the host name of node i: the suffix counted up, its zero
// padding kept ("host09" + 1 = "host10").
func (s *symSource) nodeName(i int) string {
	if s.width == 0 {
		return s.prefix
	}
	n := strconv.FormatUint(s.suffix+uint64(i), 10)
	if len(n) < s.width {
		n = strings.Repeat("0", s.width-len(n)) + n
	}
	return s.prefix + n
}

// insertJob is one insert call in progress.
type insertJob struct {
	src       source
	fiAddr    []fi.Addr
	flags     fi.Flags
	ctx       any
	syncErr   syncStatus
	async     bool
	inserted  int
	failed    []failure // async: the error entries to post, in address order
	unflushed int       // entries of the job in the pending kernel batch
	done      bool      // every address processed
	returned  bool      // synchronous call already returned (FI_MORE)
	finished  bool      // completion posted
	// ran, for an asynchronous insert that ends an FI_MORE batch, is
	// closed by the worker once it has run (or aborted) the insert: its
	// caller waits for it and returns inserted.
	ran chan struct{}
}

// syncStatus is FI_SYNC_ERR's status array: an []int from Go, or an
// []int32 over a C program's int array (the C provider's view of it, so
// that statuses written late, after an FI_MORE batch, reach it too).
type syncStatus struct {
	ints   []int
	int32s []int32
}

func (s syncStatus) len() int { return max(len(s.ints), len(s.int32s)) }

func (s syncStatus) set(i, v int) {
	if s.ints != nil {
		s.ints[i] = v
	} else if s.int32s != nil {
		s.int32s[i] = int32(v)
	}
}

type failure struct {
	i   int
	err fi.Errno
}

func (j *insertJob) fail(i int, errno fi.Errno) {
	if j.fiAddr != nil {
		j.fiAddr[i] = fi.AddrNotAvail
	}
	j.syncErr.set(i, int(errno))
	if j.async {
		j.failed = append(j.failed, failure{i, errno})
	}
}

// insert checks the arguments common to every insert call and runs the
// insert now (synchronous AV) or queues it (FI_EVENT).
func (av *AV) insert(op string, src source, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	n := src.len()
	if flags&^insertFlags != 0 {
		return 0, fmt.Errorf("%s: flags %#x: %w", op, uint64(flags&^insertFlags), fi.EBADFLAGS)
	}
	if fiAddr != nil && len(fiAddr) < n {
		return 0, fmt.Errorf("%s: fi_addr has %d slots for %d addresses: %w", op, len(fiAddr), n, fi.EINVAL)
	}
	if fiAddr == nil && av.attr.Type == TypeMap && n > 0 {
		return 0, fmt.Errorf("%s: FI_AV_MAP needs an fi_addr buffer: %w", op, fi.EINVAL)
	}
	if flags&fi.AV_USER_ID != 0 {
		switch {
		case av.attr.Flags&fi.AV_USER_ID != 0:
			return 0, fmt.Errorf("%s: per-insert FI_AV_USER_ID on an AV opened with FI_AV_USER_ID (use SetUserID): %w", op, fi.EINVAL)
		case av.authKeys:
			return 0, fmt.Errorf("%s: per-insert FI_AV_USER_ID with FI_AV_AUTH_KEY: %w", op, fi.EINVAL)
		case flags&fi.AUTH_KEY != 0:
			return 0, fmt.Errorf("%s: FI_AV_USER_ID and FI_AUTH_KEY both read fi_addr: %w", op, fi.EINVAL)
		case fiAddr == nil && n > 0:
			return 0, fmt.Errorf("%s: FI_AV_USER_ID needs the user IDs in fi_addr: %w", op, fi.EINVAL)
		}
	}
	if flags&fi.AUTH_KEY != 0 {
		if !av.authKeys {
			return 0, fmt.Errorf("%s: FI_AUTH_KEY needs a domain with FI_AV_AUTH_KEY: %w", op, fi.EINVAL)
		}
		if fiAddr == nil && n > 0 {
			return 0, fmt.Errorf("%s: FI_AUTH_KEY needs the auth key handles in fi_addr: %w", op, fi.EINVAL)
		}
	}
	j := &insertJob{src: src, fiAddr: fiAddr, flags: flags, ctx: ctx, async: av.async != nil}
	if flags&fi.SYNC_ERR != 0 {
		if j.async {
			return 0, fmt.Errorf("%s: FI_SYNC_ERR on an FI_EVENT AV: %w", op, fi.EINVAL)
		}
		switch se := ctx.(type) {
		case []int:
			j.syncErr.ints = se
		case []int32:
			j.syncErr.int32s = se
		}
		if j.syncErr.len() < n {
			return 0, fmt.Errorf("%s: FI_SYNC_ERR needs an []int or []int32 of %d statuses as context: %w", op, n, fi.EINVAL)
		}
	}

	if av.readOnly {
		return 0, fmt.Errorf("%s: AV opened read-only: %w", op, fi.EACCES)
	}
	if j.async {
		// Not under wmu: an asynchronous insert returns at once, also while
		// the worker runs an earlier one.
		av.epMu.Lock()
		closing, bound := av.closing, av.eq != nil
		av.epMu.Unlock()
		switch {
		case closing:
			return 0, fmt.Errorf("%s: closed: %w", op, fi.EINVAL)
		case !bound:
			return 0, fmt.Errorf("%s: FI_EVENT AV without a bound EQ: %w", op, fi.ENOEQ)
		}
		switch src.(type) {
		case rawSource, apSource:
			j.src = parseAll(src) // the caller's address buffers are its own again
		}
		ends, err := av.async.submit(j)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", op, err)
		}
		if !ends {
			return 0, nil
		}
		// The insert ends an FI_MORE batch: the call carries the batch
		// out and returns what a synchronous insert returns (see
		// "Provider choices" in the package doc). Its events follow.
		<-j.ran
		return j.inserted, nil
	}
	av.wmu.Lock()
	if av.closed {
		av.wmu.Unlock()
		return 0, fmt.Errorf("%s: closed: %w", op, fi.EINVAL)
	}
	defer av.wmu.Unlock()
	return av.insertSync(op, j)
}

// insertSync runs a synchronous insert; wmu held.
func (av *AV) insertSync(op string, j *insertJob) (n int, err error) {
	if av.shared != nil {
		if err := av.shared.begin(); err != nil {
			return 0, fmt.Errorf("%s: %w", op, err)
		}
		// An FI_AV_COMPLETE reader may look the addresses up in another
		// opener at once: the events wait until the change is published.
		av.holdDone = true
		defer func() {
			if serr := av.shared.end(); serr != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", op, serr))
			}
			av.releaseDone()
		}()
	}
	av.run(j)
	if j.flags&fi.MORE == 0 || av.shared != nil {
		// The call's own addresses the kernel refused have failed one by
		// one; only those of earlier FI_MORE calls need an error here.
		if lost, ferr := av.flush(); len(lost) > 0 {
			err = fmt.Errorf("%s: %w", op, &LostError{Handles: lost, Err: ferr})
		}
	}
	j.returned = true
	return j.inserted, err
}

// LostError is the error of a synchronous insert whose kernel map writes
// for earlier synchronous FI_MORE inserts were refused (a full map): those
// addresses left the AV again after their insert had returned their
// handles. Their fi_addr slots were set to FI_ADDR_NOTAVAIL and their
// FI_SYNC_ERR statuses to the error when it happened; their indices stay
// out of use until Remove is called with the handles, so a handle kept
// from the FI_MORE insert never names another address. errors.Is(err,
// fi.ENOSPC) (or the kernel's other errno) holds.
type LostError struct {
	Handles []fi.Addr // the handles the FI_MORE inserts returned
	Err     error     // the kernel's refusal
}

func (e *LostError) Error() string {
	const show = 8
	var b strings.Builder
	fmt.Fprintf(&b, "%d address(es) of earlier FI_MORE inserts removed again (fi_addr", len(e.Handles))
	for i, h := range e.Handles[:min(show, len(e.Handles))] {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %#x", uint64(h))
	}
	if len(e.Handles) > show {
		b.WriteString(", ...")
	}
	fmt.Fprintf(&b, "): %v", e.Err)
	return b.String()
}

func (e *LostError) Unwrap() error { return e.Err }

// blockLen addresses are parsed or resolved outside mu, then placed under
// one mu.Lock.
const blockLen = 256

type block struct {
	eps    [blockLen]endpoint
	errs   [blockLen]fi.Errno
	hashes [blockLen]uint64
	homes  [blockLen]uintptr // addresses of the hashes' home slots, to prefetch
}

// run inserts the job's addresses; wmu held.
func (av *AV) run(j *insertJob) {
	defer func() { j.done = true }()
	if s, ok := j.src.(*symSource); ok && av.symmetricRange(j, s) {
		return
	}
	av.runRange(j, 0, j.src.len())
}

// runRange inserts addresses [from, to) of the job one by one.
func (av *AV) runRange(j *insertJob, from, to int) {
	if av.scratch == nil {
		av.scratch = new(block)
	}
	sc := av.scratch
	for base := from; base < to; base += blockLen {
		m := min(blockLen, to-base)
		for k := range m {
			sc.eps[k], sc.errs[k] = j.src.at(base + k)
		}
		av.lock()
		for k := range m {
			sc.hashes[k] = av.t.hashOf(&sc.eps[k])
			sc.homes[k] = av.t.homeAddr(sc.hashes[k])
		}
		// The block's home slots of a large hash index are cache
		// misses: requested together, ahead of the probes.
		prefetch.Addrs(&sc.homes[0], m)
		for k := range m {
			// Each source checked the family against the AV's format.
			errno := sc.errs[k]
			if errno == 0 {
				errno = av.place(j, base+k, sc.eps[k], sc.hashes[k])
			}
			if errno != 0 {
				j.fail(base+k, errno)
			}
		}
		av.unlock()
		av.kick()
	}
}

// place inserts address i of the job; wmu and mu held.
func (av *AV) place(j *insertJob, i int, ep endpoint, h uint64) fi.Errno {
	var keyID uint16
	if j.flags&fi.AUTH_KEY != 0 {
		id, ok := av.authKeyID(j.fiAddr[i])
		if !ok {
			return fi.ENOKEY
		}
		keyID = id
	}
	if _, dup := av.t.findH(&ep, h); dup {
		return fi.EADDRINUSE
	}
	idx, ok := av.t.alloc()
	if !ok {
		return fi.ENOSPC
	}
	e := av.t.putH(idx, ep, keyID, h)
	var vflags uint32
	if j.flags&fi.AV_USER_ID != 0 {
		av.t.setUserID(idx, j.fiAddr[i])
		e.setState(e.state() | entryUserID)
		vflags = entryFlagUserIDSet
	}
	if keyID != 0 {
		av.keys[keyID-1].addrs++
	}
	handle := av.handle(idx, e.gen())
	if j.fiAddr != nil {
		j.fiAddr[i] = handle
	}
	j.syncErr.set(i, 0)
	j.inserted++
	if av.mirror != nil {
		av.pend.add(kernelPeer(ep, handle, keyID, vflags != 0), pendingOp{j, i, idx})
		j.unflushed++
	}
	return 0
}

// symmetricRange stores a numeric symmetric insert as a range when the AV
// has FI_SYMMETRIC and nothing per address is asked for. Free indices
// below the end are filled one by one first, as FI_AV_TABLE's lowest-index
// rule wants; the rest becomes one range. It returns false to leave the
// insert to the address-by-address path (for example when one of the
// addresses is already in the AV, so that it alone fails).
func (av *AV) symmetricRange(j *insertJob, s *symSource) bool {
	n := s.len()
	if av.attr.Flags&fi.SYMMETRIC == 0 || !s.numeric || av.shared != nil || n < 2 ||
		j.flags&(fi.AV_USER_ID|fi.AUTH_KEY) != 0 {
		return false
	}
	// wmu held: no one else changes the table, reading it needs no mu.
	for i := range n {
		ep, _ := s.at(i)
		if _, dup := av.t.find(&ep); dup {
			return false
		}
	}
	holes := min(len(av.t.free), n)
	if uint64(av.t.next)+uint64(n-holes)-1 > maxIndex {
		return false
	}
	av.runRange(j, 0, holes)
	rest := n - holes
	r := &symRange{
		first: av.t.next, count: uint32(rest), off0: uint64(holes),
		ip: s.ip, port: s.port, nodes: uint64(s.nodes), svcs: uint64(s.svcs),
	}
	av.lock()
	av.t.next += uint32(rest)
	av.t.addRange(r)
	av.unlock()
	j.inserted += rest
	for k := range rest {
		i := holes + k
		h := av.handle(r.first+uint32(k), rangeGen)
		if j.fiAddr != nil {
			j.fiAddr[i] = h
		}
		j.syncErr.set(i, 0)
		if av.mirror != nil {
			av.pend.add(kernelPeer(r.member(uint32(k)), h, 0, false), pendingOp{j, i, r.first + uint32(k)})
			j.unflushed++
			av.kick()
		}
	}
	return true
}

// pending holds the kernel map writes not yet made, gathered in batches
// of batchLen; guarded by wmu. With CPUs to spare, a full batch is written
// by a goroutine of its own while the next one fills, so the Go side and
// the kernel work at the same time; at most maxInflight batches are being
// written.
type pending struct {
	cur      *batch   // filling
	inflight []*batch // being written, oldest first
	spare    []*batch
}

// maxInflight is how many batches are written in the background: none on
// a machine of 2 or 3 CPUs, where the writes measured no faster beside the
// inserting goroutine than after it (the kernel's hash map inserts slowed
// down as much as they overlapped), up to 2 on larger ones.
var maxInflight = min(2, max(0, runtime.NumCPU()/2-1))

// batch is one BPF_MAP_UPDATE_BATCH worth of writes and, once written,
// its result. The entries are gathered as the peer table's slots, which a
// TableMirror takes as they are (no conversion pass, and no key and value
// appended apart); keys and vals are where writeNew turns them into
// av_map entries for any other Mirror.
type batch struct {
	peers []ktable.Peer
	ops   []pendingOp
	keys  []bpf.XdpfabAvKey
	vals  []bpf.XdpfabAvValue
	n     int   // entries written
	err   error // why the write stopped at n
	done  chan struct{}
}

// pendingOp says which address of which insert a pending write is for.
type pendingOp struct {
	job *insertJob
	i   int
	idx uint32
}

func (p *pending) add(e ktable.Peer, op pendingOp) {
	if p.cur == nil {
		if n := len(p.spare); n > 0 {
			p.cur, p.spare = p.spare[n-1], p.spare[:n-1]
		} else {
			p.cur = new(batch) // grows by append: small inserts keep small buffers
		}
	}
	b := p.cur
	b.peers = append(b.peers, e)
	b.ops = append(b.ops, op)
}

// empty reports whether no write is pending or in flight.
func (p *pending) empty() bool { return p.cur == nil && len(p.inflight) == 0 }

// kick starts writing the filling batch once it is full, and settles the
// oldest writes beyond maxInflight; wmu held, mu not.
func (av *AV) kick() {
	p := &av.pend
	if p.cur == nil || len(p.cur.ops) < batchLen {
		return
	}
	b := p.cur
	p.cur = nil
	if maxInflight == 0 {
		b.n, b.err = av.writeNew(b)
		av.applyResult(b) // failures are recorded in the jobs and av.lost
		p.spare = append(p.spare, b)
		return
	}
	b.done = make(chan struct{})
	p.inflight = append(p.inflight, b)
	go func() {
		b.n, b.err = av.writeNew(b)
		close(b.done)
	}()
	for len(p.inflight) > maxInflight {
		av.settle()
	}
}

// writeNew makes pending kernel writes: entries of addresses the AV did
// not hold when they were inserted, which its own kernel table does not
// hold either (a removal deletes from it before the address can be
// inserted again), so a TableMirror enters them without looking for
// them first.
func (av *AV) writeNew(b *batch) (int, error) {
	if tm, ok := av.mirror.(*TableMirror); ok {
		return tm.insertPeers(b.peers)
	}
	b.keys, b.vals = b.keys[:0], b.vals[:0]
	for i := range b.peers {
		k, v := entryOfPeer(av.id, &b.peers[i])
		b.keys, b.vals = append(b.keys, k), append(b.vals, v)
	}
	return av.mirror.Update(b.keys, b.vals)
}

// settle waits for the oldest batch in flight and applies its outcome.
func (av *AV) settle() {
	p := &av.pend
	b := p.inflight[0]
	p.inflight[0] = nil
	p.inflight = p.inflight[1:]
	<-b.done
	av.applyResult(b) // failures are recorded in the jobs and av.lost
	p.spare = append(p.spare, b)
}

// flush writes every pending batch; wmu held, mu not. When the kernel
// refuses an entry, it and the entries of the batch after it (not
// attempted: aborted, FI_ECANCELED) leave the AV again and fail in their
// insert (applyResult). lost are the handles of those whose synchronous
// insert had already returned, also those a batch written since the last
// flush lost (kick), and err the kernel's refusals.
func (av *AV) flush() (lost []fi.Addr, err error) {
	p := &av.pend
	if b := p.cur; b != nil {
		p.cur = nil
		if len(b.ops) > 0 {
			b.n, b.err = av.writeNew(b)
			b.done = nil
			av.applyResult(b)
		}
		p.spare = append(p.spare, b)
	}
	for len(p.inflight) > 0 {
		av.settle()
	}
	lost, err = av.lost, av.lostErr
	av.lost, av.lostErr = nil, nil
	// Keep one batch's buffers for the next insert; those of a large
	// insert's other batches go.
	if len(p.spare) > 1 {
		clear(p.spare[1:])
		p.spare = p.spare[:1]
	}
	return lost, err
}

// applyResult rolls back what the kernel did not take from b, counts b's
// entries as written and completes the inserts that are done, then empties
// b for reuse; wmu held, mu not. A refused address fails in its insert:
// FI_ADDR_NOTAVAIL in its fi_addr slot, its status in the FI_SYNC_ERR
// array, an error entry for an asynchronous insert. When its synchronous
// FI_MORE insert had already returned the handle, its index is held
// rather than freed (see LostError), and the handle and the error are
// recorded in av.lost and av.lostErr for flush.
func (av *AV) applyResult(b *batch) {
	if b.err != nil {
		err := errnoOfKernel(b.err)
		var lost []fi.Addr
		first := fi.ErrnoOf(err)
		av.lock()
		for k := b.n; k < len(b.ops); k++ {
			op := b.ops[k]
			errno := fi.ECANCELED
			if k == b.n {
				errno = first
			}
			if op.job.returned {
				av.holdEntry(op.idx)
				lost = append(lost, fi.Addr(b.peers[k].FiAddr))
			} else {
				av.dropEntry(op.idx)
			}
			op.job.inserted--
			op.job.fail(op.i, errno)
		}
		av.unlock()
		if len(lost) > 0 {
			av.lost = append(av.lost, lost...)
			if av.lostErr == nil {
				av.lostErr = err
			}
		}
	}
	for _, op := range b.ops {
		op.job.unflushed--
		if op.job.unflushed == 0 && op.job.done {
			av.finish(op.job)
		}
	}
	clear(b.ops)
	b.peers, b.ops = b.peers[:0], b.ops[:0]
	b.keys, b.vals = b.keys[:0], b.vals[:0]
	b.n, b.err = 0, nil
}

// dropEntry removes idx from the table, releasing its auth key; mu held.
func (av *AV) dropEntry(idx uint32) (endpoint, bool) {
	if !av.releaseKey(idx) {
		return endpoint{}, false
	}
	return av.t.remove(idx)
}

// holdEntry takes idx out of the table but keeps the index held (see
// table.hold), releasing its auth key; mu held.
func (av *AV) holdEntry(idx uint32) {
	if av.releaseKey(idx) {
		av.t.hold(idx)
	}
}

// releaseKey drops live entry idx's reference to its auth key, if it has
// one, and reports whether idx is live; mu held.
func (av *AV) releaseKey(idx uint32) bool {
	_, _, key, ok := av.t.get(idx)
	if ok && key != 0 {
		av.keys[key-1].addrs--
	}
	return ok
}

// finish posts an asynchronous insert's error entries and completion.
func (av *AV) finish(j *insertJob) {
	if !j.async || j.finished {
		return
	}
	j.finished = true
	if av.holdDone {
		av.heldDone = append(av.heldDone, j)
		return
	}
	av.postDone(j)
}

// releaseDone posts the events finish held back while a named AV's change
// was not yet published; wmu held.
func (av *AV) releaseDone() {
	av.holdDone = false
	for i, j := range av.heldDone {
		av.postDone(j)
		av.heldDone[i] = nil
	}
	av.heldDone = av.heldDone[:0]
}

// postDone posts a finished asynchronous insert's events.
func (av *AV) postDone(j *insertJob) {
	for _, f := range j.failed {
		av.eq.PostErr(eq.ErrEntry{FID: av, Context: j.ctx, Data: uint64(f.i), Err: f.err})
	}
	av.eq.Post(eq.Entry{Event: eq.AVComplete, FID: av, Context: j.ctx, Data: uint64(j.inserted)})
}

// worker runs the inserts of an FI_EVENT AV in call order, so indices
// are assigned in the order of the calls.
type worker struct {
	av       *AV
	mu       sync.Mutex
	queue    []*insertJob // guarded by mu
	stopping bool         // guarded by mu
	more     bool         // the last insert submitted had FI_MORE; guarded by mu
	wake     chan struct{}
	done     chan struct{}
}

func startWorker(av *AV) *worker {
	w := &worker{av: av, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop()
	return w
}

// submit queues j and reports whether it ends an FI_MORE batch (it has
// no FI_MORE and the insert submitted before it had): then j.ran is set,
// and closed once the worker has run j.
func (w *worker) submit(j *insertJob) (ends bool, err error) {
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return false, fmt.Errorf("closed: %w", fi.EINVAL)
	}
	more := j.flags&fi.MORE != 0
	ends = w.more && !more
	w.more = more
	if ends {
		j.ran = make(chan struct{})
	}
	w.queue = append(w.queue, j)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return ends, nil
}

func (w *worker) loop() {
	defer close(w.done)
	for range w.wake {
		for {
			w.mu.Lock()
			if len(w.queue) == 0 {
				stop := w.stopping
				w.mu.Unlock()
				if stop {
					return
				}
				break
			}
			j := w.queue[0]
			w.queue[0] = nil
			w.queue = w.queue[1:]
			abort := w.stopping
			w.mu.Unlock()
			w.av.wmu.Lock()
			if abort {
				w.av.abort(j)
			} else {
				w.av.runAsync(j)
			}
			w.av.wmu.Unlock()
			if j.ran != nil {
				close(j.ran)
			}
		}
	}
}

// stop aborts the queued inserts, lets the running one finish and waits
// for the worker to end.
func (w *worker) stop() {
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-w.done
}

// runAsync runs a queued insert; wmu held.
func (av *AV) runAsync(j *insertJob) {
	if av.shared != nil {
		if err := av.shared.begin(); err != nil {
			for i := range j.src.len() {
				j.fail(i, fi.ErrnoOf(err))
			}
			j.done = true
			av.finish(j)
			return
		}
		av.holdDone = true // see insertSync
	}
	av.run(j)
	if j.flags&fi.MORE == 0 || av.shared != nil {
		av.flush() // completes j and the FI_MORE inserts before it
	}
	if av.shared != nil {
		av.shared.end() // a failure leaves the version: others re-read later
		av.releaseDone()
	}
	if j.unflushed == 0 {
		av.finish(j) // nothing (left) to write to the kernel
	}
}

// abort fails every address of a queued insert with FI_ECANCELED.
func (av *AV) abort(j *insertJob) {
	for i := range j.src.len() {
		j.fail(i, fi.ECANCELED)
	}
	j.done = true
	av.finish(j)
}
