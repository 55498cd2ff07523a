package xdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/xdpfab/xdpfab/fi"
)

// What a process claims in an attachment's maps: ports, av_ids and
// domain_ids, recorded in its owner record (owner.go) before the entries
// are written and dropped after they are removed.

// SetPort makes the program handle UDP datagrams to port (host order),
// replacing its config if it had one. The port belongs to the calling
// process: if it dies without DeletePort, the entry is removed by the
// next process that opens the attachment, sets a port or reads its status.
func (a *Attachment) SetPort(port uint16, cfg PortConfig) error {
	if port == 0 {
		return fmt.Errorf("xdp: %s: port 0: %w", a.Iface, fi.EINVAL)
	}
	return a.withRegistry(true, func(r *registry) error {
		_, _, _ = r.reap()
		own, err := r.mineRecord()
		if err != nil {
			return err
		}
		// Claim first, so that a crash between the two leaves a claim
		// without an entry, never an entry without an owner.
		old := slices.Clone(own.rec.Ports)
		own.rec.Ports = slices.DeleteFunc(own.rec.Ports, func(p Port) bool { return p.Port == port })
		own.rec.Ports = append(own.rec.Ports, Port{Port: port, PortConfig: cfg})
		if err := r.save(); err != nil {
			own.rec.Ports = old
			_ = r.save()
			return err
		}
		if err := a.setPort(port, cfg); err != nil {
			own.rec.Ports = old
			_ = r.save()
			return err
		}
		return nil
	})
}

// DeletePort stops the program handling port; datagrams to it pass to the
// stack again. It also drops the calling process's claim on the port.
func (a *Attachment) DeletePort(port uint16) error {
	err := a.deletePort(port)
	if err != nil && !errors.Is(err, fi.ENOENT) {
		return err // the entry may still be there: keep the claim
	}
	_ = a.withRegistry(false, func(r *registry) error {
		if r.own == nil {
			return nil
		}
		r.own.rec.Ports = slices.DeleteFunc(r.own.rec.Ports, func(p Port) bool { return p.Port == port })
		return r.save()
	})
	return err
}

// NewAVID returns an av_id for an AV whose entries go into the
// attachment's AV map, unique among the processes using the attachment,
// and records it as the calling process's: if the process dies, the AV
// entries with that id are removed. ReleaseAVID gives it back once the
// entries are gone.
//
// Unlike domain ids, av_ids are handed out lowest free first: an AV
// closed normally leaves its kernel table in av_map, empty (package av,
// TableMirror.Park), and the next AV given its id takes that table over,
// so that neither fi_av_open nor fi_close makes a map-in-map update,
// which waits for an RCU grace period (5-20 ms). av_map then holds at
// most as many tables as AVs were ever open at once.
func (a *Attachment) NewAVID() (uint32, error) {
	return a.newID(true, func(o *Owner) *[]uint32 { return &o.AVIDs })
}

// ReleaseAVID drops the calling process's claim on an av_id from NewAVID.
func (a *Attachment) ReleaseAVID(id uint32) error {
	return a.releaseID(id, func(o *Owner) *[]uint32 { return &o.AVIDs })
}

// NewDomainID returns a domain_id for MR entries in the attachment's MR
// map, unique among the processes using the attachment, and records it as
// the calling process's: if the process dies, the MR entries with that id
// are removed. ReleaseDomainID gives it back once the entries are gone.
func (a *Attachment) NewDomainID() (uint32, error) {
	return a.newID(false, func(o *Owner) *[]uint32 { return &o.DomainIDs })
}

// ReleaseDomainID drops the calling process's claim on a domain_id from
// NewDomainID.
func (a *Attachment) ReleaseDomainID(id uint32) error {
	return a.releaseID(id, func(o *Owner) *[]uint32 { return &o.DomainIDs })
}

// newID hands out an id no live owner holds: the lowest one if lowest,
// else the next one of the attachment's counter.
func (a *Attachment) newID(lowest bool, list func(*Owner) *[]uint32) (uint32, error) {
	var id uint32
	err := a.withRegistry(true, func(r *registry) error {
		live, _, _ := r.reap()
		used := map[uint32]bool{}
		for i := range live {
			for _, v := range live[i].AVIDs {
				used[v] = true
			}
			for _, v := range live[i].DomainIDs {
				used[v] = true
			}
		}
		next := uint32(idBase)
		if !lowest {
			var err error
			if next, err = readCounter(r.dir); err != nil {
				return err
			}
		}
		for n := 0; ; n++ {
			if next < idBase || next >= idLimit {
				next = idBase
			}
			if !used[next] {
				break
			}
			if n > len(used) {
				return fmt.Errorf("xdp: %s: no free id: %w", a.Iface, fi.ENOSPC)
			}
			next++
		}
		id = next
		if !lowest {
			if err := writeCounter(r.dir, next+1); err != nil {
				return err
			}
		}
		own, err := r.mineRecord()
		if err != nil {
			return err
		}
		l := list(&own.rec)
		*l = append(*l, id)
		if err := r.save(); err != nil {
			*l = slices.DeleteFunc(*l, func(v uint32) bool { return v == id })
			_ = r.save()
			return err
		}
		return nil
	})
	return id, err
}

func (a *Attachment) releaseID(id uint32, list func(*Owner) *[]uint32) error {
	return a.withRegistry(false, func(r *registry) error {
		if r.own == nil {
			return nil
		}
		l := list(&r.own.rec)
		*l = slices.DeleteFunc(*l, func(v uint32) bool { return v == id })
		return r.save()
	})
}

const counterFile = "next-id"

func readCounter(dir string) (uint32, error) {
	b, err := os.ReadFile(filepath.Join(dir, counterFile))
	if errors.Is(err, os.ErrNotExist) {
		return idBase, nil
	}
	if err != nil {
		return 0, fmt.Errorf("xdp: id counter: %w", err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return idBase, nil
	}
	return uint32(v), nil
}

func writeCounter(dir string, v uint32) error {
	if err := os.WriteFile(filepath.Join(dir, counterFile), []byte(strconv.FormatUint(uint64(v), 10)+"\n"), 0o600); err != nil {
		return fmt.Errorf("xdp: id counter: %w", err)
	}
	return nil
}

// Owners reaps dead owners and returns the live ones, by pid.
func (a *Attachment) Owners() ([]Owner, error) {
	owners := []Owner{}
	err := a.withRegistry(false, func(r *registry) error {
		live, _, err := r.reap()
		if live != nil {
			owners = live
		}
		return err
	})
	return owners, err
}

// reapDeadOwners removes what dead owners left; it reports how many.
func (a *Attachment) reapDeadOwners() (int, error) {
	n := 0
	err := a.withRegistry(false, func(r *registry) (err error) {
		_, n, err = r.reap()
		return err
	})
	return n, err
}
