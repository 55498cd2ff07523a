package mr

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// Op is the kind of a remote request as the target sees it.
type Op uint8

// Remote operation kinds.
const (
	OpRead          Op = iota // RMA read: the region is the source
	OpWrite                   // RMA write: the region is the destination
	OpAtomic                  // atomic without result: the region is modified
	OpFetchAtomic             // fetching atomic: modified and its old value returned
	OpCompareAtomic           // compare atomic: modified and its old value returned
)

var opNames = [...]string{"read", "write", "atomic", "fetch-atomic", "compare-atomic"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Access returns the access bits a region must grant for o: FI_REMOTE_READ
// to be read, FI_REMOTE_WRITE to be written or atomically modified, both
// when an atomic also returns the previous contents. Unknown kinds need
// every remote bit and then some, so they are always refused.
func (o Op) Access() fi.Flags {
	switch o {
	case OpRead:
		return fi.REMOTE_READ
	case OpWrite, OpAtomic:
		return fi.REMOTE_WRITE
	case OpFetchAtomic, OpCompareAtomic:
		return fi.REMOTE_READ | fi.REMOTE_WRITE
	}
	return ^fi.Flags(0)
}

// Denial is why a remote request was refused. It is an error that unwraps
// to the errno the initiator gets.
type Denial uint8

// Reasons for refusing a remote request.
const (
	UnknownKey     Denial = iota + 1 // no such key: never registered, closed, or not completed
	OutOfRange                       // the range leaves the region, or wraps
	AccessDenied                     // the region does not grant the access
	RegionDisabled                   // not enabled yet, or being refreshed
	AuthKeyDenied                    // the peer's authorization key differs
)

var denials = [...]struct {
	text  string
	errno fi.Errno
}{
	UnknownKey:     {"unknown memory region key", fi.EKEYREJECTED},
	OutOfRange:     {"address range outside the memory region", fi.EFAULT},
	AccessDenied:   {"access not granted by the memory region", fi.EACCES},
	RegionDisabled: {"memory region disabled", fi.EOPBADSTATE},
	AuthKeyDenied:  {"authorization key does not match the memory region", fi.EACCES},
}

func (d Denial) valid() bool { return d > 0 && int(d) < len(denials) }

// Errno returns the libfabric error the initiator is told.
func (d Denial) Errno() fi.Errno {
	if !d.valid() {
		return fi.EOTHER
	}
	return denials[d].errno
}

func (d Denial) Error() string {
	if !d.valid() {
		return fmt.Sprintf("mr: denial %d", uint8(d))
	}
	return "mr: " + denials[d].text
}

// Unwrap lets errors.Is(err, fi.EACCES) and fi.ErrnoOf see the errno.
func (d Denial) Unwrap() error { return d.Errno() }

// The denials as error values, so returning one does not allocate.
var (
	errUnknownKey     error = UnknownKey
	errOutOfRange     error = OutOfRange
	errAccessDenied   error = AccessDenied
	errRegionDisabled error = RegionDisabled
	errAuthKeyDenied  error = AuthKeyDenied
)

// Span is the part of a region a request may operate on: Len bytes from
// remote address Addr. First is the first contiguous piece of them — all
// of them unless the range crosses from one registered buffer into the
// next, in which case AppendBufs lists every piece.
type Span struct {
	MR    *MR // the region, e.g. for CountRemoteWrite
	Addr  uint64
	Len   uint64
	First []byte
}

// Contiguous reports whether First holds the whole span.
func (s *Span) Contiguous() bool { return uint64(len(s.First)) == s.Len }

// AppendBufs appends the pieces of the span, sub-slices of the registered
// buffers in address order, to dst. With a dst of capacity IOVLimit it does
// not allocate. Like every use of a Span, it must come before the reader's
// next quiescent point (see the package doc, "Recycling").
func (s *Span) AppendBufs(dst [][]byte) [][]byte {
	if s.MR == nil {
		return dst
	}
	end := s.Addr + s.Len
	for pos := s.Addr; pos < end; {
		b := s.MR.r.piece(pos, end)
		if b == nil {
			break // cannot happen for a span Lookup answered
		}
		dst = append(dst, b)
		pos += uint64(len(b))
	}
	return dst
}

// piece returns the bytes from remote address pos up to end or the end of
// the buffer holding pos, nil when no buffer holds pos.
func (r *region) piece(pos, end uint64) []byte {
	for i := range r.segs {
		s := &r.segs[i]
		if off := pos - s.start; off < uint64(len(s.buf)) {
			return s.buf[off : off+min(end-pos, uint64(len(s.buf))-off)]
		}
	}
	return nil
}

// Lookup vets a remote request on the target: may a peer apply access
// (see Op.Access) to length bytes at addr (a region offset, or a virtual
// address with FI_MR_VIRT_ADDR) of the region with key? It answers the
// bytes to operate on, or a Denial. It takes no locks, does not allocate,
// and refuses a key from the moment its Close returns. Regions with an
// authorization key are refused; use LookupAuth for them. A length of 0 is
// allowed anywhere from the region's start to one past its end. A request
// admitted just before a concurrent Close may still complete on the bytes,
// which stay valid Go memory (fi_mr(3): operations active while a region is
// closed may fail or access it). On a Table with Config.Epochs the
// caller must be a registered reader of that domain, and the Span and its
// MR are valid until its next quiescent point (see the package doc,
// "Recycling").
func (t *Table) Lookup(key, addr, length uint64, access fi.Flags) (Span, error) {
	return t.LookupAuth(key, addr, length, access, 0)
}

// LookupAuth is Lookup for a peer that presents the authorization key
// whose AuthDigest is authDigest, as a request's header carries it: the
// region is served only when that equals the digest of the region's own key
// (fi_mr_attr.auth_key, or the domain's when the registration gave none),
// and a peer presenting no key (0) reaches only regions without one.
// Otherwise it answers AuthKeyDenied.
func (t *Table) LookupAuth(key, addr, length uint64, access fi.Flags, authDigest uint32) (Span, error) {
	r := t.index.Load().find(key)
	if r == nil {
		return Span{}, errUnknownKey
	}
	st := r.state.Load()
	if st&(stComplete|stClosed) != stComplete {
		return Span{}, errUnknownKey
	}
	if st != stComplete|stEnabled {
		return Span{}, errRegionDisabled
	}
	if access == 0 || access&^(fi.REMOTE_READ|fi.REMOTE_WRITE) != 0 || access&^r.access != 0 {
		return Span{}, errAccessDenied
	}
	if r.authDigest != authDigest {
		return Span{}, errAuthKeyDenied
	}
	end := addr + length
	if end < addr || addr < r.base || end > r.base+r.length {
		return Span{}, errOutOfRange
	}
	sp := Span{MR: r.handle, Addr: addr, Len: length}
	if length == 0 {
		return sp, nil
	}
	sp.First = r.piece(addr, end)
	if sp.First == nil { // addr in a gap between buffers (FI_MR_VIRT_ADDR)
		return Span{}, errOutOfRange
	}
	for pos := addr + uint64(len(sp.First)); pos < end; {
		b := r.piece(pos, end)
		if b == nil {
			return Span{}, errOutOfRange
		}
		pos += uint64(len(b))
	}
	return sp, nil
}

// Errors of CheckLocal, allocated once.
var (
	errDescMissing  = fmt.Errorf("mr: FI_MR_LOCAL: buffer needs a descriptor: %w", fi.EINVAL)
	errDescForeign  = fmt.Errorf("mr: descriptor of another domain: %w", fi.EINVAL)
	errDescClosed   = fmt.Errorf("mr: descriptor of a closed or incomplete region: %w", fi.EINVAL)
	errDescDisabled = fmt.Errorf("mr: descriptor of a disabled region: %w", fi.EOPBADSTATE)
	errDescRange    = fmt.Errorf("mr: buffer outside the descriptor's region: %w", fi.EFAULT)
	errDescAccess   = fmt.Errorf("mr: descriptor's region lacks the local access: %w", fi.EACCES)
)

// CheckLocal vets the desc an application passed with a local buffer of a
// data transfer: with FI_MR_LOCAL it must describe an enabled region of
// this domain whose buffers cover buf and which grants access (FI_SEND for
// a send source, FI_RECV for a receive buffer, FI_READ for an RMA read
// result, FI_WRITE for an RMA write source). Without FI_MR_LOCAL desc is
// ignored, except that with FI_MR_HMEM it must be valid or nil. It does not
// allocate.
func (t *Table) CheckLocal(desc Desc, buf []byte, access fi.Flags) error {
	m := desc.m
	switch {
	case t.mode&ModeLocal == 0 && (t.mode&ModeHMEM == 0 || m == nil):
		return nil
	case m == nil:
		if len(buf) == 0 {
			return nil
		}
		return errDescMissing
	case m.r.table != t:
		return errDescForeign
	case !m.live():
		return errDescClosed
	}
	r := m.r
	st := r.state.Load()
	switch {
	case st&(stComplete|stClosed) != stComplete:
		return errDescClosed
	case st != stComplete|stEnabled:
		return errDescDisabled
	case access&^r.access != 0:
		return errDescAccess
	case len(buf) > 0 && !r.covers(addrOf(buf), uint64(len(buf))):
		return errDescRange
	}
	return nil
}

// AuthDigest is what a request carries in the wire header's auth_key field
// for an authorization key (docs/protocol.md): the key's 32-bit FNV-1a
// hash, never 0, which stands for no key (an empty key's digest is 0; a key
// hashing to 0 is sent as 1). The key itself never crosses the wire: a
// target serves a region with a key only to requests carrying its digest
// (LookupAuth). This is the one definition the initiator and target use.
func AuthDigest(key []byte) uint32 {
	if len(key) == 0 {
		return 0
	}
	h := uint32(2166136261)
	for _, b := range key {
		h ^= uint32(b)
		h *= 16777619
	}
	if h == 0 {
		h = 1
	}
	return h
}
