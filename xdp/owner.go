package xdp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
)

// Owners. A process that puts entries into an attachment's maps (a port
// with SetPort, AV entries under an av_id from NewAVID, MR entries under a
// domain_id from NewDomainID) has an owner record: a file
// RunDir/NETNS/IFINDEX/prog-ID/owner-PID-RANDOM holding its pid, start
// time, command and what it owns, on which it holds an exclusive flock
// for as long as it owns anything there. The kernel drops that lock when
// the process dies, however it dies (kill -9 included), so a non-blocking
// flock that succeeds proves the owner dead, with no pid to be reused
// and no clock to trust: a pidfd would prove the same for a pid but not
// tie the pid to the record across pid namespaces. Records are read and
// written under an flock of their directory, which also serialises the
// id allocation.
//
// Dead owners are reaped when a process opens the attachment (Open,
// Attach), sets a port, takes an id and reads the status: their port
// entries (if no live owner claims the port and it still has the config
// the dead owner set), the AV entries of their av_ids and the MR entries
// of their domain_ids are deleted, then their record. Named AVs' entries
// (av_ids with the top bit, package av) are never an owner's: like a named
// AV closed normally, they stay until the name is unlinked. Ports set by
// Options.Ports (xdpfab attach --port) belong to nobody and stay.
//
// Records live on tmpfs (/run), which vanishes at boot with bpffs; they
// are keyed by the program id, so a record never outlives its attachment
// in meaning: Detach removes the interface's records.

// RunDir holds the owner records.
const RunDir = "/run/xdpfab"

// Ids handed out by NewAVID and NewDomainID: from idBase up, below the
// named-AV bit, clear of the small numbers av.Open and fabric count from
// in processes that do not allocate here. Domain ids come from one
// counter per attachment, wrapping, so one is not given again for
// 2^31 - 2^24 allocations; av_ids are the lowest free (NewAVID says why).
// No id is handed out while a live owner holds it.
const (
	idBase  = 1 << 24
	idLimit = 1 << 31
)

// Owner is a live process owning entries in an attachment's maps.
type Owner struct {
	PID       int      `json:"pid"`        // in the owner's pid namespace
	StartTime uint64   `json:"start_time"` // clock ticks after boot (/proc/PID/stat field 22)
	Comm      string   `json:"comm"`
	Ports     []Port   `json:"ports"`      // ports it set (SetPort), with the config it set
	AVIDs     []uint32 `json:"av_ids"`     // av_ids it was given (NewAVID)
	DomainIDs []uint32 `json:"domain_ids"` // domain_ids it was given (NewDomainID)
}

func (o *Owner) empty() bool { return len(o.Ports) == 0 && len(o.AVIDs) == 0 && len(o.DomainIDs) == 0 }

// normalize makes the lists non-nil (JSON [] rather than null) and sorted.
func (o *Owner) normalize() {
	if o.Ports == nil {
		o.Ports = []Port{}
	}
	if o.AVIDs == nil {
		o.AVIDs = []uint32{}
	}
	if o.DomainIDs == nil {
		o.DomainIDs = []uint32{}
	}
	slices.SortFunc(o.Ports, func(x, y Port) int { return int(x.Port) - int(y.Port) })
	slices.Sort(o.AVIDs)
	slices.Sort(o.DomainIDs)
}

func ownerDir(ns NetnsID, ifindex int, prog ebpf.ProgramID) string {
	return filepath.Join(RunDir, ns.String(), strconv.Itoa(ifindex), "prog-"+strconv.FormatUint(uint64(prog), 10))
}

// ownRecord is this process's record in one owner directory.
type ownRecord struct {
	path string
	f    *os.File // flocked (LOCK_EX) while the record exists
	rec  Owner
}

// mine holds this process's records, by directory. The mutex also
// serialises this process's registry transactions (the directory flock is
// per open file description, so it would not).
var mine = struct {
	sync.Mutex
	m map[string]*ownRecord
}{m: map[string]*ownRecord{}}

// registry is one transaction on an attachment's owner directory: the
// process mutex and the directory flock are held.
type registry struct {
	a   *Attachment
	dir string
	own *ownRecord // this process's record, nil if none
}

// withRegistry runs fn in a registry transaction. Without create, a
// missing directory means there are no records: fn is not run.
func (a *Attachment) withRegistry(create bool, fn func(r *registry) error) error {
	if a.progID == 0 {
		return fmt.Errorf("xdp: %s: program id unknown: %w", a.Iface, fi.EINVAL)
	}
	dir := ownerDir(a.Netns, a.Ifindex, a.progID)
	mine.Lock()
	defer mine.Unlock()
	var lock *os.File
	var err error
	// Detach may remove the directories between MkdirAll and Open.
	for try := 0; ; try++ {
		if create {
			if err = os.MkdirAll(dir, 0o700); err != nil {
				return fmt.Errorf("xdp: owner records: %w", err)
			}
		}
		lock, err = os.Open(dir)
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		if !create {
			// Detach removed the records: this process's is gone too.
			if own := mine.m[dir]; own != nil {
				own.f.Close()
				delete(mine.m, dir)
			}
			return nil
		}
		if try == 3 {
			return fmt.Errorf("xdp: owner records: %w", err)
		}
	}
	if err != nil {
		return fmt.Errorf("xdp: owner records: %w", err)
	}
	defer lock.Close()
	if err := flock(lock, unix.LOCK_EX); err != nil {
		return fmt.Errorf("xdp: lock %s: %w", dir, err)
	}
	r := &registry{a: a, dir: dir, own: mine.m[dir]}
	return fn(r)
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// peer is another record of the directory, and whether its owner lives.
type peer struct {
	path string
	rec  Owner
	live bool
	f    *os.File // open; holds the owner's lock if it is dead
}

// scan reads every record of the directory but this process's.
func (r *registry) scan() ([]*peer, error) {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("xdp: owner records: %w", err)
	}
	var peers []*peer
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "owner-") {
			continue
		}
		path := filepath.Join(r.dir, e.Name())
		if r.own != nil && path == r.own.path {
			continue
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			closePeers(peers)
			return nil, fmt.Errorf("xdp: owner record: %w", err)
		}
		p := &peer{path: path, f: f}
		switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
		case err == nil: // nobody holds it: its owner is dead
		case errors.Is(err, unix.EWOULDBLOCK):
			p.live = true
		default:
			f.Close()
			closePeers(peers)
			return nil, fmt.Errorf("xdp: probe owner record %s: %w", path, err)
		}
		b, err := readAll(f)
		if err == nil && len(bytes.TrimSpace(b)) > 0 {
			// A record is written whole under the directory lock; one
			// that does not parse is a dead owner's that died creating
			// it (and owns nothing yet), or not ours to read.
			_ = json.Unmarshal(b, &p.rec)
		}
		p.rec.normalize()
		peers = append(peers, p)
	}
	return peers, nil
}

func readAll(f *os.File) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(f)
	return buf.Bytes(), err
}

func closePeers(ps []*peer) {
	for _, p := range ps {
		p.f.Close()
	}
}

// mineRecord returns this process's record in the directory, creating it
// (locked) if there is none.
func (r *registry) mineRecord() (*ownRecord, error) {
	if r.own != nil {
		var st unix.Stat_t
		if unix.Fstat(int(r.own.f.Fd()), &st) == nil && st.Nlink > 0 {
			return r.own, nil
		}
		// Detach removed the directory under it: start a new record.
		r.own.f.Close()
		delete(mine.m, r.dir)
	}
	pid := os.Getpid()
	path := filepath.Join(r.dir, fmt.Sprintf("owner-%d-%08x", pid, rand.Uint32()))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("xdp: create owner record: %w", err)
	}
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("xdp: lock owner record %s: %w", path, err)
	}
	own := &ownRecord{path: path, f: f, rec: Owner{PID: pid, StartTime: selfStart(), Comm: selfCommOnce()}}
	if r.own != nil {
		own.rec.Ports, own.rec.AVIDs, own.rec.DomainIDs = r.own.rec.Ports, r.own.rec.AVIDs, r.own.rec.DomainIDs
	}
	mine.m[r.dir] = own
	r.own = own
	return own, nil
}

// save writes this process's record, or removes it when it owns nothing
// any more.
func (r *registry) save() error {
	own := r.own
	if own == nil {
		return nil
	}
	if own.rec.empty() {
		err := os.Remove(own.path)
		own.f.Close()
		delete(mine.m, r.dir)
		r.own = nil
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("xdp: remove owner record: %w", err)
		}
		return nil
	}
	rec := own.rec
	rec.normalize()
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := own.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("xdp: write owner record: %w", err)
	}
	if err := own.f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("xdp: write owner record: %w", err)
	}
	return nil
}

// selfStart and selfCommOnce read the process's start time and command
// once: a record is created whenever the process comes to own something
// again (an AV open after the last AV closed: an open+close loop creates
// and removes it every time), and the two /proc reads were a fifth of an
// attached AV's open+close. The start time never changes; a command
// renamed later (prctl PR_SET_NAME) keeps showing the first name.
var (
	selfStart    = sync.OnceValue(selfStartTime)
	selfCommOnce = sync.OnceValue(selfComm)
)

func selfComm() string {
	b, _ := os.ReadFile("/proc/self/comm")
	return strings.TrimSpace(string(b))
}

// selfStartTime is field 22 of /proc/self/stat: the process's start, in
// clock ticks after boot.
func selfStartTime() uint64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The command (field 2) is in parentheses and may hold anything.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field 22 is f[19].
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// removeOwnerRecords removes the owner records of an interface (its
// attachment is gone), and the directories it leaves empty. The pin lock
// is held.
func removeOwnerRecords(ns NetnsID, ifindex int) {
	dir := filepath.Join(RunDir, ns.String(), strconv.Itoa(ifindex))
	_ = os.RemoveAll(dir)
	removeIfEmpty(filepath.Dir(dir))
	removeIfEmpty(RunDir)
}
