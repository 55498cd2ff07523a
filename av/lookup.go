package av

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// Remove is fi_av_remove: it removes the addresses fiAddrs refer to, or
// with fi.AUTH_KEY the authorization keys (FI_EBUSY while an endpoint is
// enabled against one or an address is bound to it). It removes all or,
// when one handle is invalid or repeated, none (FI_EINVAL). A removed
// handle stays invalid until an insert returns it again; FI_AV_MAP handles
// carry a generation, so a stale one is detected even then. Remove also
// takes the handles of a LostError, whose indices it releases.
func (av *AV) Remove(fiAddrs []fi.Addr, flags fi.Flags) (err error) {
	switch {
	case flags&fi.AV_USER_ID != 0:
		return fmt.Errorf("av remove: per-remove FI_AV_USER_ID is not supported: %w", fi.EINVAL)
	case flags&^fi.AUTH_KEY != 0:
		return fmt.Errorf("av remove: flags %#x: %w", uint64(flags&^fi.AUTH_KEY), fi.EBADFLAGS)
	}
	av.wmu.Lock()
	defer av.wmu.Unlock()
	if av.closed {
		return fmt.Errorf("av remove: closed: %w", fi.EINVAL)
	}
	if av.readOnly {
		return fmt.Errorf("av remove: AV opened read-only: %w", fi.EACCES)
	}
	if av.shared != nil {
		if err := av.shared.begin(); err != nil {
			return fmt.Errorf("av remove: %w", err)
		}
		defer func() {
			if serr := av.shared.end(); serr != nil {
				err = errors.Join(err, fmt.Errorf("av remove: %w", serr))
			}
		}()
	}
	// Inserts held back by FI_MORE go to the kernel before removes do, or a
	// later flush would bring a removed address back. What the kernel
	// refuses fails in its own insert (FI_ADDR_NOTAVAIL in its slot, its
	// index held: see LostError), not in this remove, which goes on.
	av.flush()
	if flags&fi.AUTH_KEY != 0 {
		return av.removeAuthKeys(fiAddrs)
	}

	av.lock()
	idxs := make([]uint32, 0, len(fiAddrs))
	var held []uint32
	seen := make(map[uint32]struct{}, len(fiAddrs))
	for i, a := range fiAddrs {
		idx, _, _, ok := av.resolve(a)
		isHeld := false
		if !ok {
			idx, isHeld = av.resolveHeld(a)
			ok = isHeld
		}
		if _, dup := seen[idx]; !ok || dup {
			av.unlock()
			return fmt.Errorf("av remove: fi_addr[%d] = %v is not in the AV: %w", i, a, fi.EINVAL)
		}
		seen[idx] = struct{}{}
		if isHeld {
			held = append(held, idx)
		} else {
			idxs = append(idxs, idx)
		}
	}
	for _, idx := range held {
		av.t.unhold(idx) // its address left the AV and the kernel map already
	}
	keys := make([]bpf.XdpfabAvKey, 0, len(idxs))
	removed := make([]netip.AddrPort, 0, len(idxs))
	for _, idx := range idxs {
		ep, _ := av.dropEntry(idx)
		keys = append(keys, kernelKey(av.id, ep))
		removed = append(removed, ep.addrPort())
	}
	av.unlock()
	// Bound endpoints drop their state about the removed peers once the
	// kernel map no longer admits them (also if deleting from it failed:
	// the AV no longer holds them), still under wmu, so that a later
	// insert of the same address starts afresh.
	defer av.forget(removed)
	if av.mirror == nil {
		return nil
	}
	for len(keys) > 0 {
		n := min(len(keys), batchLen)
		if _, err := av.mirror.Delete(keys[:n]); err != nil {
			return fmt.Errorf("av remove: kernel AV map: %w", errnoOfKernel(err))
		}
		keys = keys[n:]
	}
	return nil
}

// Lookup is fi_av_lookup: it writes the address fiAddr refers to, in the
// AV's format, into buf, truncated to len(buf), and returns the size the
// whole address needs (which may exceed len(buf)).
func (av *AV) Lookup(fiAddr fi.Addr, buf []byte) (int, error) {
	av.mu.RLock()
	_, ep, _, ok := av.resolve(fiAddr)
	av.mu.RUnlock()
	if !ok {
		if ep, ok = av.sharedMiss(func() (endpoint, bool) {
			av.mu.RLock()
			defer av.mu.RUnlock()
			_, ep, _, ok := av.resolve(fiAddr)
			return ep, ok
		}); !ok {
			return 0, fmt.Errorf("av lookup: %v: %w", fiAddr, fi.EINVAL)
		}
	}
	var tmp [80]byte
	out := appendAddr(tmp[:0], av.format, ep)
	copy(buf, out)
	return len(out), nil
}

// Straddr is fi_av_straddr: it writes addr (one address in the AV's
// format, inserted or not) as text (fi_sockaddr_in://10.0.0.1:7471,
// fi_sockaddr_in6://[fe80::1]:7471) into buf, truncated to len(buf), and
// returns the size the whole text needs. On an FI_SOCKADDR_IN6 AV an
// IPv4-mapped address stays in IPv6 form (fi_sockaddr_in6://[::ffff:10.0.0.1]:7471).
func (av *AV) Straddr(addr []byte, buf []byte) (int, error) {
	ep, errno := parseAddr(av.format, addr)
	if errno != 0 {
		return 0, fmt.Errorf("av straddr: %w", errno)
	}
	var tmp [80]byte
	out := appendAddrStrIn(tmp[:0], av.format, ep)
	copy(buf, out)
	return len(out), nil
}

// RxAddr is fi_rx_addr: the address of receive context rxIndex of the
// endpoint at fiAddr, for an AV with rxCtxBits receive-context bits.
func RxAddr(fiAddr fi.Addr, rxIndex, rxCtxBits int) fi.Addr {
	if rxCtxBits <= 0 || rxCtxBits > 64 {
		return fiAddr
	}
	return fi.Addr(uint64(rxIndex)<<(64-rxCtxBits)) | fiAddr
}

// RxIndex returns the receive context fi_rx_addr put in fiAddr.
func (av *AV) RxIndex(fiAddr fi.Addr) int {
	if av.attr.RxCtxBits == 0 || fiAddr == fi.AddrNotAvail {
		return 0
	}
	return int(uint64(fiAddr) >> (64 - av.attr.RxCtxBits))
}

// AddrPort returns the peer fiAddr refers to, for sending (receive-context
// bits ignored). It takes no allocation, and no lock unless it overlaps a
// change of the AV (see table.seq).
func (av *AV) AddrPort(fiAddr fi.Addr) (netip.AddrPort, bool) {
	ap, _, ok := av.AddrPortAuthKey(fiAddr)
	return ap, ok
}

// AddrPortAuthKey is AddrPort that also returns the handle of the
// authorization key the address was inserted with (fi.AUTH_KEY), as
// InsertAuthKey returned it, or fi.AddrNotAvail for an address without
// one. The key cannot be removed while the address is bound to it, so the
// handle stays valid as long as the address does. For the data path: no
// allocation, no lock unless the lookup overlaps a change of the AV.
func (av *AV) AddrPortAuthKey(fiAddr fi.Addr) (netip.AddrPort, fi.Addr, bool) {
	// The common case, a live dense entry, is read in place without a
	// lock, in this one call (AddrPort inlines to it): readDense's body
	// by hand. Anything else (a read that overlapped a change, a range
	// member, a removed or stale handle, a miss) goes the long way.
	a := fiAddr & av.idxMask
	if a <= maxIndex || av.attr.Type == TypeMap && a < authKeyTag {
		t := av.rt.Load()
		s := t.seq.Load()
		d := t.dir.Load()
		if c := uint32(a) >> chunkShift; s&1 == 0 && d != nil && int(c) < len(d.c) {
			if ch := d.c[c].Load(); ch != nil {
				e := &ch.e[a&chunkMask]
				m, w0, w1 := e.meta.Load(), e.ip0.Load(), e.ip1.Load()
				if t.seq.Load() == s && metaState(m)&entryUsed != 0 && (av.attr.Type != TypeMap || fi.Addr(metaGen(m)) == a>>32) {
					if w0 == 0 && uint32(w1) == 0xffff0000 { // IPv4, addrPortOfWords's first case: no call
						return netip.AddrPortFrom(addr4OfWord(w1), metaPort(m)), keyHandle(metaKey(m)), true
					}
					return addrPortOfWords(w0, w1, metaPort(m)), keyHandle(metaKey(m)), true
				}
			}
		}
	}
	return av.addrPortAuthKeySlow(fiAddr)
}

func (av *AV) addrPortAuthKeySlow(fiAddr fi.Addr) (netip.AddrPort, fi.Addr, bool) {
	ap, key, ok := av.addrPortAuthKey(fiAddr)
	if !ok && av.shared != nil {
		// Another process may have inserted it since this one caught up.
		av.sharedMiss(func() (endpoint, bool) {
			ap, key, ok = av.addrPortAuthKey(fiAddr)
			return endpoint{}, ok
		})
	}
	return ap, key, ok
}

func (av *AV) addrPortAuthKey(fiAddr fi.Addr) (netip.AddrPort, fi.Addr, bool) {
	// The common case, a dense entry, is read in place and without a
	// lock; what overlapped a change, and ranges, are read under mu.
	a := fiAddr & av.idxMask
	if a <= maxIndex || av.attr.Type == TypeMap && a < authKeyTag {
		if w0, w1, m, ok := av.rt.Load().readDense(uint32(a)); ok && metaGen(m) != 0 {
			if metaState(m)&entryUsed == 0 || av.attr.Type == TypeMap && fi.Addr(metaGen(m)) != a>>32 {
				return netip.AddrPort{}, fi.AddrNotAvail, false
			}
			return addrPortOfWords(w0, w1, metaPort(m)), keyHandle(metaKey(m)), true
		}
	}
	av.mu.RLock()
	defer av.mu.RUnlock()
	_, ep, key, ok := av.resolve(fiAddr)
	if !ok {
		return netip.AddrPort{}, fi.AddrNotAvail, false
	}
	return addrPortOf(&ep.ip, ep.port), keyHandle(key), true
}

// keyHandle returns the handle of auth key id, fi.AddrNotAvail for 0.
func keyHandle(id uint16) fi.Addr {
	if id == 0 {
		return fi.AddrNotAvail
	}
	return authKeyTag | fi.Addr(id)
}

// addrPortOfWords is addrPortOf for an address held as an entry's two
// little-endian words, building an IPv4 address without going through
// 16 bytes.
func addrPortOfWords(w0, w1 uint64, port uint16) netip.AddrPort {
	if w0 == 0 && uint32(w1) == 0xffff0000 { // ::ffff:a.b.c.d
		return netip.AddrPortFrom(addr4OfWord(w1), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(ipOfWords(w0, w1)), port)
}

// addr4OfWord returns the IPv4 address of an IPv4-mapped entry whose
// second word is w1 (bytes 12..15 in its high half). The bytes go
// through an array stored whole, so AddrFrom4's big-endian assembly
// compiles to one byte swap; built from four shifted bytes it was a
// dozen shifts and ors, a fifth of a hot lookup.
func addr4OfWord(w1 uint64) netip.Addr {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(w1>>32))
	return netip.AddrFrom4(b)
}

// addrPortOf returns ip (IPv4 unmapped) and port as a netip.AddrPort.
func addrPortOf(ip *[16]byte, port uint16) netip.AddrPort {
	a := netip.AddrFrom16(*ip)
	if [12]byte(ip[:12]) == v4Prefix {
		a = a.Unmap()
	}
	return netip.AddrPortFrom(a, port)
}

// FIAddr returns the handle of peer ap (IPv4 or IPv4-mapped alike), or
// FI_ADDR_NOTAVAIL when ap is not in the AV. Allocation-free.
func (av *AV) FIAddr(ap netip.AddrPort) fi.Addr {
	ep := endpoint{ip: ap.Addr().As16(), port: ap.Port()}
	return av.fiAddrOf(&ep)
}

// FIAddr16 is FIAddr for a peer given as the kernel map keys it: the IPv6
// or IPv4-mapped address and the port in host order, as a datapath parsing
// packets has them, without a round trip through netip.
func (av *AV) FIAddr16(ip *[16]byte, port uint16) fi.Addr {
	ep := endpoint{ip: *ip, port: port}
	return av.fiAddrOf(&ep)
}

func (av *AV) fiAddrOf(ep *endpoint) fi.Addr {
	if idx, m, found, ok := av.rt.Load().readFind(ep); ok && found {
		return av.handle(idx, metaGen(m))
	}
	av.mu.RLock()
	idx, gen, ok := av.t.lookup(ep)
	h := av.handle(idx, gen)
	av.mu.RUnlock()
	if !ok {
		return av.sharedMissFIAddr(ep)
	}
	return h
}

// SourceAddr returns what a completion reports as the source of a message
// from ap (FI_SOURCE): the user ID when one applies, else the handle. On an
// AV opened with FI_AV_USER_ID that is the ID set with SetUserID, or
// FI_ADDR_NOTAVAIL until then; otherwise an ID given with a per-insert
// FI_AV_USER_ID, or the handle. FI_ADDR_NOTAVAIL for unknown peers.
// Allocation-free.
func (av *AV) SourceAddr(ap netip.AddrPort) fi.Addr {
	ep := endpoint{ip: ap.Addr().As16(), port: ap.Port()}
	return av.sourceOf(&ep)
}

// Resolve is FIAddr and SourceAddr of ap from one lookup: a message's
// arrival needs both (its sender for directed receives, its source for
// the completion), and the table's hash probe is the cost of each.
// Allocation-free.
func (av *AV) Resolve(ap netip.AddrPort) (h, src fi.Addr) {
	ep := endpoint{ip: ap.Addr().As16(), port: ap.Port()}
	t := av.rt.Load()
	s := t.seq.Load()
	if idx, m, found, ok := t.readFind(&ep); ok && found {
		h = av.handle(idx, metaGen(m))
		src = h
		switch {
		case metaState(m)&entryUserID != 0:
			src = t.userID(idx)
		case av.attr.Flags&fi.AV_USER_ID != 0:
			src = fi.AddrNotAvail
		}
		if t.seq.Load() == s {
			return h, src
		}
	}
	return av.fiAddrOf(&ep), av.sourceOf(&ep)
}

// SourceAddr16 is SourceAddr for a peer given as in FIAddr16.
func (av *AV) SourceAddr16(ip *[16]byte, port uint16) fi.Addr {
	ep := endpoint{ip: *ip, port: port}
	return av.sourceOf(&ep)
}

func (av *AV) sourceOf(ep *endpoint) fi.Addr {
	if a, ok := av.readSource(ep); ok {
		return a
	}
	av.mu.RLock()
	a, ok := av.sourceLocked(ep)
	av.mu.RUnlock()
	if !ok && av.shared != nil {
		if av.sharedMissFIAddr(ep) == fi.AddrNotAvail {
			return fi.AddrNotAvail
		}
		av.mu.RLock()
		a, _ = av.sourceLocked(ep)
		av.mu.RUnlock()
	}
	return a
}

// readSource is sourceLocked without a lock for a dense entry, ok false
// when the read overlapped a change or found nothing.
func (av *AV) readSource(ep *endpoint) (fi.Addr, bool) {
	t := av.rt.Load()
	s := t.seq.Load()
	idx, m, found, ok := t.readFind(ep)
	if !ok || !found {
		return 0, false
	}
	a := av.handle(idx, metaGen(m))
	switch {
	case metaState(m)&entryUserID != 0:
		a = t.userID(idx)
	case av.attr.Flags&fi.AV_USER_ID != 0:
		a = fi.AddrNotAvail
	}
	return a, t.seq.Load() == s
}

func (av *AV) sourceLocked(ep *endpoint) (fi.Addr, bool) {
	idx, gen, ok := av.t.lookup(ep)
	if !ok {
		return fi.AddrNotAvail, false
	}
	if e := av.t.dense(idx); e != nil && e.gen() != 0 && e.state()&entryUserID != 0 {
		return av.t.userID(idx), true
	}
	if av.attr.Flags&fi.AV_USER_ID != 0 {
		return fi.AddrNotAvail, true
	}
	return av.handle(idx, gen), true
}

// AuthKeySource returns what an FI_SOURCE_ERR error event reports for a
// message under auth key handle key: its user ID on an FI_AV_USER_ID AV
// (FI_ADDR_NOTAVAIL until SetUserID), else the handle itself.
func (av *AV) AuthKeySource(key fi.Addr) fi.Addr {
	av.mu.RLock()
	defer av.mu.RUnlock()
	id, ok := av.authKeyID(key)
	switch {
	case !ok:
		return fi.AddrNotAvail
	case av.attr.Flags&fi.AV_USER_ID != 0:
		return av.keys[id-1].userID
	}
	return authKeyTag | fi.Addr(id)
}

// SetUserID is fi_av_set_user_id: on an AV opened with FI_AV_USER_ID it
// sets the user ID completions report for fiAddr, or with fi.AUTH_KEY for
// the auth key handle fiAddr.
func (av *AV) SetUserID(fiAddr, userID fi.Addr, flags fi.Flags) error {
	if flags&^fi.AUTH_KEY != 0 {
		return fmt.Errorf("av set_user_id: flags %#x: %w", uint64(flags&^fi.AUTH_KEY), fi.EBADFLAGS)
	}
	if av.attr.Flags&fi.AV_USER_ID == 0 {
		return fmt.Errorf("av set_user_id: AV not opened with FI_AV_USER_ID: %w", fi.EINVAL)
	}
	av.wmu.Lock()
	defer av.wmu.Unlock()
	if av.closed {
		return fmt.Errorf("av set_user_id: closed: %w", fi.EINVAL)
	}
	if flags&fi.AUTH_KEY != 0 {
		av.lock()
		defer av.unlock()
		id, ok := av.authKeyID(fiAddr)
		if !ok {
			return fmt.Errorf("av set_user_id: auth key %v: %w", fiAddr, fi.EINVAL)
		}
		av.keys[id-1].userID = userID
		return nil
	}
	// Inserts held back by FI_MORE are written first, so the entry this
	// writes is not overwritten by a pending one. A refusal fails in its
	// own insert (see Remove), not here.
	av.flush()
	av.lock()
	idx, ep, key, ok := av.resolve(fiAddr)
	if !ok {
		if av.shared != nil {
			av.unlock()
			err := av.shared.refresh()
			av.lock()
			if err != nil {
				av.unlock()
				return fmt.Errorf("av set_user_id: %w", err)
			}
			idx, ep, key, ok = av.resolve(fiAddr)
		}
		if !ok {
			av.unlock()
			return fmt.Errorf("av set_user_id: %v: %w", fiAddr, fi.EINVAL)
		}
	}
	e := av.t.materialize(idx)
	av.t.setUserID(idx, userID)
	e.setState(e.state() | entryUserID)
	h := av.handle(idx, e.gen())
	av.unlock()
	if av.mirror == nil || av.shared != nil {
		return nil // a named AV's user IDs are per process: not in the shared map
	}
	k := []bpf.XdpfabAvKey{kernelKey(av.id, ep)}
	v := []bpf.XdpfabAvValue{{FiAddr: uint64(h), AuthKeyId: uint32(key), Flags: entryFlagUserIDSet}}
	if _, err := av.mirror.Update(k, v); err != nil {
		return fmt.Errorf("av set_user_id: kernel AV map: %w", errnoOfKernel(err))
	}
	return nil
}

// InsertAuthKey is fi_av_insert_auth_key: it stores an authorization key
// of AuthKeySize bytes (FI_EINVAL otherwise) and returns its handle, to be
// used with fi.AUTH_KEY. It needs WithAVAuthKey; flags must be 0.
func (av *AV) InsertAuthKey(key []byte, flags fi.Flags) (fi.Addr, error) {
	switch {
	case flags != 0:
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	case !av.authKeys:
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: domain without FI_AV_AUTH_KEY: %w", fi.EINVAL)
	case len(key) != AuthKeySize:
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: %d-byte key, want %d: %w", len(key), AuthKeySize, fi.EINVAL)
	}
	av.wmu.Lock()
	defer av.wmu.Unlock()
	switch {
	case av.closed:
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: closed: %w", fi.EINVAL)
	case av.readOnly:
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: AV opened read-only: %w", fi.EACCES)
	}
	av.lock()
	defer av.unlock()
	var id int // index into keys: the lowest free id - 1
	switch {
	case av.keyFree > 0:
		id = av.keyLow
		for av.keys[id].used {
			id++
		}
		av.keyFree--
	case len(av.keys) == maxAuthKeys:
		return fi.AddrNotAvail, fmt.Errorf("av insert_auth_key: all %d auth key handles in use: %w", maxAuthKeys, fi.ENOSPC)
	default:
		av.keys = append(av.keys, authKey{})
		id = len(av.keys) - 1
	}
	av.keyLow = id + 1
	av.keys[id] = authKey{key: [AuthKeySize]byte(key), used: true, userID: fi.AddrNotAvail}
	return authKeyTag | fi.Addr(id+1), nil
}

// LookupAuthKey is fi_av_lookup_auth_key: it writes the auth key of an
// auth key handle, or the key an address was inserted with, into buf
// (truncated to len(buf)) and returns the key's size. An address inserted
// without a key gives FI_ENOKEY.
func (av *AV) LookupAuthKey(fiAddr fi.Addr, buf []byte) (int, error) {
	av.mu.RLock()
	defer av.mu.RUnlock()
	id, ok := av.authKeyID(fiAddr)
	if !ok {
		_, _, key, found := av.resolve(fiAddr)
		if !found {
			return 0, fmt.Errorf("av lookup_auth_key: %v: %w", fiAddr, fi.EINVAL)
		}
		if key == 0 {
			return 0, fmt.Errorf("av lookup_auth_key: %v has no auth key: %w", fiAddr, fi.ENOKEY)
		}
		id = key
	}
	copy(buf, av.keys[id-1].key[:])
	return AuthKeySize, nil
}

// removeAuthKeys removes auth key handles; wmu held.
func (av *AV) removeAuthKeys(handles []fi.Addr) error {
	av.lock()
	defer av.unlock()
	for i, h := range handles {
		id, ok := av.authKeyID(h)
		if !ok {
			return fmt.Errorf("av remove: auth key fi_addr[%d] = %#x: %w", i, uint64(h), fi.EINVAL)
		}
		switch k := &av.keys[id-1]; {
		case k.enabled > 0:
			return fmt.Errorf("av remove: auth key %#x: %d endpoint(s) enabled against it: %w", uint64(h), k.enabled, fi.EBUSY)
		case k.addrs > 0:
			return fmt.Errorf("av remove: auth key %#x: %d address(es) bound to it: %w", uint64(h), k.addrs, fi.EBUSY)
		}
	}
	for _, h := range handles {
		id, ok := av.authKeyID(h)
		if ok { // a handle listed twice is removed once
			av.keys[id-1] = authKey{}
			av.keyFree++
			av.keyLow = min(av.keyLow, int(id)-1)
		}
	}
	av.trimKeys()
	return nil
}

// trimKeys drops the unused ids at the end of keys, and the array behind
// them once it is mostly empty, so that the memory of the auth keys
// follows the keys held (up to maxAuthKeys of them) rather than the most
// ever held; mu held. No reference to a removed id remains: addresses and
// enabled endpoints keep their keys from being removed.
func (av *AV) trimKeys() {
	n := len(av.keys)
	for n > 0 && !av.keys[n-1].used {
		n--
	}
	av.keyFree -= len(av.keys) - n
	av.keyLow = min(av.keyLow, n)
	clear(av.keys[n:])
	av.keys = av.keys[:n]
	if cap(av.keys) > 64 && 4*n < cap(av.keys) {
		av.keys = append([]authKey(nil), av.keys...)
	}
}
