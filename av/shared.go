package av

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/bpffs"
)

// A named AV lives in a BPF map of the av_map layout pinned at
// PinPath(name): its address entries (pad 0) are what the XDP program
// reads, and two records with pad recordPad hold what every process must
// agree on, keyed by the AV's av_id:
//
//	port 0: meta: fi_addr = map_addr, auth_key_id = rx_ctx_bits, flags = type | format<<8
//	port 1: version: fi_addr = version, bumped by every change; auth_key_id = next never-used index
//
// Writers serialize with flock on the pin directory; a process re-reads
// the map when the version moved (before each change, and when a lookup
// misses).
const recordPad = 1

const (
	recordMeta    = 0
	recordVersion = 1
)

// PinPath returns where the named AV name of the calling thread's network
// namespace is pinned.
func PinPath(name string) string { return filepath.Join(pinDir(), name) }

// pinDir is the directory of the named AVs of the calling thread's network
// namespace. Names are per network namespace: an AV holds addresses
// (IP, UDP port) of one namespace, and the same address names another
// peer in another namespace (as xdpfab's XDP pins are per namespace).
func pinDir() string { return bpffs.Path("av", netnsID()) }

// Unlink removes the named AV name: its pin goes, the kernel frees the map
// once no process holds it open. Opening the name afterwards creates a new
// AV.
func Unlink(name string) error {
	if err := validName(name); err != nil {
		return fmt.Errorf("av unlink: %w", err)
	}
	if err := os.Remove(AddrArrayPath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("av unlink %q: %w", name, errnoOfSys(err))
	}
	if err := os.Remove(PinPath(name)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("av unlink %q: %w", name, fi.ENOENT)
		}
		return fmt.Errorf("av unlink %q: %w", name, errnoOfSys(err))
	}
	removeEmptyPinDir(pinDir())
	return nil
}

// removeEmptyPinDir removes dir, a namespace's pin directory, if it holds
// no AV, and then the directory of all namespaces' above it and xdpfab's
// bpffs directory if those are empty too, so that the last Unlink leaves
// nothing in bpffs. dir is
// removed under its lock: an opener holding it is between creating its
// pin and unlocking, so the directory is not empty; an opener that locks
// it after the removal sees it unlinked and makes a new one (openPinDir).
func removeEmptyPinDir(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if flockEx(fd) != nil {
		return
	}
	err = unix.Rmdir(dir) // ENOTEMPTY while another AV is pinned there
	unix.Flock(fd, unix.LOCK_UN)
	if err == nil && unix.Rmdir(filepath.Dir(dir)) == nil {
		bpffs.RemoveDirIfEmpty() // xdpfab's own, under the lock Attach takes
	}
}

// openPinDir creates, opens and locks the pin directory of the calling
// thread's network namespace. Unlink of a namespace's last AV removes the
// directory (and its parent once empty) under the lock, so a directory
// found unlinked once locked, or a parent gone while creating, was
// removed in between: make it again. It gives up after a few rounds,
// which only an endless stream of such removals could cause.
func openPinDir() (dir string, fd int, err error) {
	for range 16 {
		dir, err = bpffs.Ensure(pinDir())
		if errors.Is(err, os.ErrNotExist) {
			continue // a parent removed while MkdirAll made the path
		}
		if err != nil {
			return "", -1, errnoOfSys(err)
		}
		fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			return "", -1, fmt.Errorf("open %s: %w", dir, errnoOfSys(err))
		}
		if beforePinLock != nil {
			beforePinLock(dir)
		}
		if err = flockEx(fd); err != nil {
			unix.Close(fd)
			return "", -1, fmt.Errorf("lock %s: %w", dir, errnoOfSys(err))
		}
		var st unix.Stat_t
		if err = unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return "", -1, fmt.Errorf("stat %s: %w", dir, errnoOfSys(err))
		}
		if st.Nlink > 0 {
			return dir, fd, nil // locked, and still the directory of its path
		}
		unix.Close(fd) // drops the lock too
	}
	return "", -1, fmt.Errorf("pin directory %s keeps being removed: %w", pinDir(), fi.EAGAIN)
}

// beforePinLock, when set (by a test), runs between openPinDir's open of
// the directory and its lock: where another process's removal would fall.
var beforePinLock func(dir string)

// flockEx takes fd's exclusive flock, retrying on EINTR.
func flockEx(fd int) error {
	for {
		if err := unix.Flock(fd, unix.LOCK_EX); err != unix.EINTR {
			return err
		}
	}
}

// errnoOfSys keeps err, a failed system call's error, and adds its
// libfabric number, so that errors.Is(err, fi.EACCES) and the like hold
// (a wrapped syscall.Errno alone does not match an fi.Errno). An error
// without errno gets FI_EIO.
func errnoOfSys(err error) error {
	if err == nil {
		return nil
	}
	var e fi.Errno
	if errors.As(err, &e) {
		return err
	}
	n := fi.ErrnoOf(err)
	if n == fi.EOTHER {
		n = fi.EIO
	}
	return fmt.Errorf("%w (%w)", err, n)
}

func validName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 200 || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("AV name %q: %w", name, fi.EINVAL)
	}
	return nil
}

// shared is the cross-process state of a named AV; guarded by the AV's wmu.
type shared struct {
	av      *AV
	m       *ebpf.Map
	arr     *addrArray // the fi_addr array at map_addr (addrarray.go)
	dir     string     // the pin directory (of the namespace the AV was opened in)
	lockFD  int
	version uint64
	loaded  bool
	seen    atomic.Uint64 // version, for moved() without wmu
	// began is the table's next index when the current change began:
	// end writes the array slots of the indices the change added.
	began uint32

	versionKey bpf.XdpfabAvKey // read-only after open
}

// openShared opens or creates the named AV; the AV is not yet visible.
func (av *AV) openShared() error {
	name := av.attr.Name
	if err := validName(name); err != nil {
		return err
	}
	pruneGoneNamespaces()
	dir, fd, err := openPinDir() // locked
	if err != nil {
		return err
	}
	s := &shared{av: av, lockFD: fd, dir: dir}
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	defer s.unlock()

	av.id = sharedID(name)
	s.versionKey = bpf.XdpfabAvKey{AvId: av.id, Port: recordVersion, Pad: recordPad}
	path := PinPath(name)
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: av.readOnly})
	fresh := errors.Is(err, os.ErrNotExist)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if av.readOnly {
			return fmt.Errorf("FI_READ: no AV named %q: %w", name, fi.ENOENT)
		}
		if m, err = s.create(path); err != nil {
			return err
		}
		s.m = m
	case err != nil:
		return fmt.Errorf("open pinned %s: %w", path, errnoOfKernel(err))
	default:
		s.m = m
		if err := s.adopt(); err != nil {
			return err
		}
	}
	av.t = newTable(av.attr.Count, rand.Uint64(), av.attr.Type == TypeTable)
	av.t.retire = av.attr.Type == TypeMap // MAP indices are not reused here anyway
	av.rt.Store(av.t)
	km, err := NewKernelMirror(s.m)
	if err != nil {
		return err
	}
	av.shared = s
	if err := s.sync(); err != nil {
		av.shared = nil
		return err
	}
	arr, created, err := openAddrArray(name, av.readOnly, fresh)
	if err != nil {
		av.shared = nil
		return err
	}
	s.arr = arr
	if created {
		av.fillAddrArray(arr, 0)
		if av.readOnly {
			if err := arr.readOnly(); err != nil {
				av.shared = nil
				return fmt.Errorf("protect %s: %w", AddrArrayPath(name), errnoOfSys(err))
			}
		}
	}
	av.mirror = &arrayMirror{KernelMirror: km, a: arr}
	av.attr.MapAddr = uint64(uintptr(arr.base))
	ok = true
	return nil
}

// create makes and pins the map of a new named AV; the pin lock is held.
func (s *shared) create(path string) (*ebpf.Map, error) {
	av := s.av
	if av.attr.Type == TypeUnspec {
		av.attr.Type = TypeTable
	}
	m, err := ebpf.NewMap(namedMapSpec())
	if err != nil {
		return nil, fmt.Errorf("create AV map: %w", errnoOfKernel(err))
	}
	// meta's fi_addr is unused (it held a handle base before map_addr
	// became the fi_addr array's address).
	meta := bpf.XdpfabAvValue{AuthKeyId: uint32(av.attr.RxCtxBits),
		Flags: uint32(av.attr.Type) | uint32(av.format)<<8}
	if err := m.Update(s.recordKey(recordMeta), &meta, ebpf.UpdateNoExist); err != nil {
		m.Close()
		return nil, fmt.Errorf("write AV metadata: %w", errnoOfKernel(err))
	}
	if err := m.Pin(path); err != nil {
		m.Close()
		return nil, fmt.Errorf("pin %s: %w", path, errnoOfKernel(err))
	}
	return m, nil
}

// adopt checks the attributes against those the AV was created with and
// takes the ones left to the provider.
func (s *shared) adopt() error {
	av := s.av
	spec := namedMapSpec()
	if s.m.Type() != spec.Type || s.m.KeySize() != spec.KeySize || s.m.ValueSize() != spec.ValueSize {
		return fmt.Errorf("%s is not an AV map: %w", PinPath(av.attr.Name), fi.EINVAL)
	}
	var meta bpf.XdpfabAvValue
	if err := s.m.Lookup(s.recordKey(recordMeta), &meta); err != nil {
		return fmt.Errorf("read AV metadata: %w", errnoOfKernel(err))
	}
	typ, format := Type(meta.Flags&0xff), fi.AddrFormat(meta.Flags>>8)
	switch {
	case av.attr.Type != TypeUnspec && av.attr.Type != typ:
		return fmt.Errorf("AV %q is %v, not %v: %w", av.attr.Name, typ, av.attr.Type, fi.EINVAL)
	case uint32(av.attr.RxCtxBits) != meta.AuthKeyId:
		return fmt.Errorf("AV %q has rx_ctx_bits %d, not %d: %w", av.attr.Name, meta.AuthKeyId, av.attr.RxCtxBits, fi.EINVAL)
	case format != av.format:
		return fmt.Errorf("AV %q holds %v addresses, not %v: %w", av.attr.Name, format, av.format, fi.EINVAL)
	}
	av.attr.Type = typ
	return nil
}

func (s *shared) recordKey(port uint16) *bpf.XdpfabAvKey {
	if port == recordVersion {
		return &s.versionKey // no allocation on the lookup-miss path
	}
	return &bpf.XdpfabAvKey{AvId: s.av.id, Port: port, Pad: recordPad}
}

// lock takes the pin lock for a change. The directory may have been
// removed since open (another process unlinked this AV's name, the last in
// the namespace): the lock still serializes this AV's openers, who all
// hold the same directory; a new AV of that name is another directory.
func (s *shared) lock() error {
	if err := flockEx(s.lockFD); err != nil {
		return fmt.Errorf("lock %s: %w", s.dir, errnoOfSys(err))
	}
	return nil
}

func (s *shared) unlock() { unix.Flock(s.lockFD, unix.LOCK_UN) }

// begin starts a change: it takes the pin lock and catches up with the
// other processes; wmu held.
func (s *shared) begin() error {
	if err := s.lock(); err != nil {
		return err
	}
	if err := s.sync(); err != nil {
		s.unlock()
		return err
	}
	s.began = s.av.t.next
	return nil
}

// end publishes a change and drops the pin lock; wmu held.
func (s *shared) end() error {
	defer s.unlock()
	// The slots of the indices the change added and left without an
	// address (failed inserts); those with one were written with their
	// kernel entries (arrayMirror).
	s.av.fillAddrArray(s.arr, s.began)
	v := bpf.XdpfabAvValue{FiAddr: s.version + 1, AuthKeyId: s.av.t.next}
	if err := s.m.Update(s.recordKey(recordVersion), &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("publish AV version: %w", errnoOfKernel(err))
	}
	s.version++
	s.seen.Store(s.version)
	return nil
}

// refresh catches up with other processes if the version moved; wmu held.
func (s *shared) refresh() error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.unlock()
	return s.sync()
}

// sync makes the local table what the map holds, if the version moved;
// wmu and the pin lock held. Entries that stay keep their local state
// (user IDs, which are per process).
func (s *shared) sync() error {
	var ver bpf.XdpfabAvValue
	err := s.m.Lookup(s.recordKey(recordVersion), &ver)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("read AV version: %w", errnoOfKernel(err))
	}
	if s.loaded && ver.FiAddr == s.version {
		return nil
	}
	av := s.av
	type kentry struct {
		ep  endpoint
		h   fi.Addr
		key uint16
	}
	var found []kentry
	var k bpf.XdpfabAvKey
	var v bpf.XdpfabAvValue
	it := s.m.Iterate()
	for it.Next(&k, &v) {
		if k.AvId == av.id && k.Pad == 0 {
			found = append(found, kentry{endpointOfKey(&k), fi.Addr(v.FiAddr), uint16(v.AuthKeyId)})
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read AV map: %w", errnoOfKernel(err))
	}

	av.lock()
	defer av.unlock()
	t := av.t
	keep := make(map[uint32]struct{}, len(found))
	for _, f := range found {
		idx, gen := uint32(f.h), uint16(f.h>>32)
		keep[idx] = struct{}{}
		if ep, g, _, ok := t.get(idx); ok && ep == f.ep && (av.attr.Type == TypeTable || g == gen) {
			continue
		}
		av.dropEntry(idx)
		if old, ok := t.find(&f.ep); ok {
			av.dropEntry(old)
		}
		e := t.put(idx, f.ep, 0) // auth keys are per process
		if av.attr.Type == TypeMap {
			e.setGen(gen)
		}
		t.next = max(t.next, idx+1)
	}
	var stale []uint32
	t.each(func(idx uint32, _ endpoint, _, _ uint16) bool {
		if _, ok := keep[idx]; !ok {
			stale = append(stale, idx)
		}
		return true
	})
	for _, idx := range stale {
		av.dropEntry(idx)
	}
	t.next = max(t.next, ver.AuthKeyId)
	// Free indices: those below next that nobody holds (TABLE reuses them).
	t.free = t.free[:0]
	if t.reuse {
		for idx := uint32(0); idx < t.next; idx++ {
			if _, _, _, ok := t.get(idx); !ok {
				t.free.push(idx)
			}
		}
	}
	s.version, s.loaded = ver.FiAddr, true
	s.seen.Store(s.version)
	return nil
}

// moved reports, without taking any lock, whether another process may have
// changed the AV since this one last caught up.
func (s *shared) moved() bool {
	var ver bpf.XdpfabAvValue
	if err := s.m.Lookup(s.recordKey(recordVersion), &ver); err != nil {
		return false // no change published yet, or the AV is closing
	}
	return ver.FiAddr != s.seen.Load()
}

func (s *shared) close() error {
	err := s.arr.close()
	s.arr = nil
	if s.m != nil {
		err = errors.Join(err, s.m.Close())
	}
	if s.lockFD >= 0 {
		unix.Close(s.lockFD)
		s.lockFD = -1
	}
	return err
}

// sharedMiss is the slow path of a lookup that missed on a named AV:
// another process may have inserted since; catch up and retry.
func (av *AV) sharedMiss(retry func() (endpoint, bool)) (endpoint, bool) {
	if av.shared == nil || !av.shared.moved() {
		return endpoint{}, false
	}
	av.wmu.Lock()
	if av.closed {
		av.wmu.Unlock()
		return endpoint{}, false
	}
	err := av.shared.refresh()
	av.wmu.Unlock()
	if err != nil {
		return endpoint{}, false
	}
	return retry()
}

// sharedMissFIAddr is sharedMiss for a lookup by address.
func (av *AV) sharedMissFIAddr(ep *endpoint) fi.Addr {
	if av.shared == nil {
		return fi.AddrNotAvail // and no closure to allocate
	}
	h := fi.AddrNotAvail
	av.sharedMiss(func() (endpoint, bool) {
		av.mu.RLock()
		defer av.mu.RUnlock()
		if idx, gen, ok := av.t.lookup(ep); ok {
			h = av.handle(idx, gen)
		}
		return *ep, h != fi.AddrNotAvail
	})
	return h
}
