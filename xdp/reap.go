package xdp

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/ktable"
)

// reap removes what dead owners left and their records; it returns the
// live ones (this process's included) and how many were reaped.
func (r *registry) reap() (live []Owner, reaped int, err error) {
	peers, err := r.scan()
	if err != nil {
		return nil, 0, err
	}
	defer closePeers(peers)
	var alive []Owner
	if r.own != nil {
		alive = append(alive, r.own.rec)
	}
	for _, p := range peers {
		if p.live {
			alive = append(alive, p.rec)
		}
	}
	var errs []error
	for _, p := range peers {
		if p.live {
			continue
		}
		if err := r.a.removeOwned(&p.rec, alive); err != nil {
			// Keep the record: the next reap tries again.
			errs = append(errs, fmt.Errorf("xdp: %s: entries of dead owner %d (%s): %w", r.a.Iface, p.rec.PID, p.rec.Comm, err))
			continue
		}
		if err := os.Remove(p.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		reaped++
	}
	for i := range alive {
		alive[i].normalize()
	}
	slices.SortFunc(alive, func(x, y Owner) int { return x.PID - y.PID })
	return alive, reaped, errors.Join(errs...)
}

// removeOwned deletes the entries dead owned from the attachment's maps,
// leaving what a live owner claims.
func (a *Attachment) removeOwned(dead *Owner, live []Owner) error {
	claimed := map[uint16]bool{}
	liveIDs := map[uint32]bool{}
	for _, o := range live {
		for _, p := range o.Ports {
			claimed[p.Port] = true
		}
		for _, id := range o.AVIDs {
			liveIDs[id] = true
		}
		for _, id := range o.DomainIDs {
			liveIDs[id] = true
		}
	}
	var errs []error
	for _, p := range dead.Ports {
		if claimed[p.Port] {
			continue
		}
		cur, ok, err := a.port(p.Port)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok && cur == p.PortConfig {
			if err := a.deletePort(p.Port); err != nil && !errors.Is(err, fi.ENOENT) {
				errs = append(errs, err)
			}
		}
	}
	avIDs := map[uint32]bool{}
	for _, id := range dead.AVIDs {
		if id&namedAVBit == 0 && !liveIDs[id] {
			avIDs[id] = true
		}
	}
	// An AV's entries are its kernel table, av_map's entry under its
	// av_id: deleting that drops them all (the kernel frees the table
	// once no program run holds it).
	for id := range avIDs {
		if err := a.AVMap.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("delete AV %d: %w", id, mapErr(err)))
		}
	}
	domIDs := map[uint32]bool{}
	for _, id := range dead.DomainIDs {
		if !liveIDs[id] {
			domIDs[id] = true
		}
	}
	if len(domIDs) > 0 {
		t, err := ktable.OpenUncounted(a.MRMap, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("MR table: %w", err))
		} else {
			t.DeleteIf(func(k *ktable.Key) bool { return domIDs[uint32(k[0])] })
			errs = append(errs, t.Close())
		}
	}
	return errors.Join(errs...)
}

// namedAVBit marks the av_ids of named AVs (package av): shared by every
// process opening the name, and kept after they all close.
const namedAVBit = 1 << 31
