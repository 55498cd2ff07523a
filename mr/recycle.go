package mr

import "github.com/xdpfab/xdpfab/internal/epoch"

// Recycling of region objects (the package doc, "Recycling", gives the
// model). A closed region waits in its Table's limbo, stamped with an
// epoch retired after its Close, until every reader of the Table's epoch
// domain has passed a quiescent point since (epoch.Domain.Safe); it then
// moves to the free list, its references dropped, and a registration
// fills it again. Both are bounded: a reader that holds reclamation back
// costs fresh allocations, never growth.
//
// Closes are stamped in batches of retireBatch: the batch's regions wait
// unstamped (never reusable) until the last of them is closed, and then
// one epoch.Domain.Retire stamps them all. Retire is a locked add on the
// epoch word every domain's tables share, and it is also what orders the
// batch's unlinking stores (release stores, see keyIndex) before any
// reader's later load of the epoch: the stamp is only sound when taken by
// a locked instruction after the unlinks. A reg+close loop then keeps
// about retireBatch regions in the limbo (allocated once, while the first
// batch fills), and a Table that stops closing leaves at most
// retireBatch-1 regions unstamped until it closes more.

// Bounds of a Table's pool: at most limboMax closed regions wait for the
// grace period or a registration (when one more arrives, those past the
// grace period move to the free list, else the oldest goes to the
// collector) and at most freeMax wait to be filled. With a region of 176
// bytes a Table keeps at most ~0.35 MiB of them, plus, while they wait in
// limbo, the buffers of up to limboMax closed regions.
const (
	limboMax    = 1024
	freeMax     = 1024
	retireBatch = 16
)

// unstamped is the stamp of a region whose batch has not been retired:
// above every epoch, so never at or below Safe.
const unstamped = ^uint64(0)

// limboEntry is a closed region and the stamp it waits for.
type limboEntry struct {
	r     *region
	stamp uint64
}

// regionPool holds a Table's closed regions; guarded by Table.mu.
type regionPool struct {
	limbo      []limboEntry // ring of limboMax, made on first use; oldest at head, stamps ascending
	head, n    int
	unstamped  int // the newest entries of limbo, waiting for their batch's stamp
	free       []*region
	fresh      uint64 // regions allocated
	reused     uint64 // registrations that reused a region
	overflowed uint64 // closed regions left to the collector (limbo full)
}

// takeRegion returns a region to fill: a free one, else the oldest of the
// limbo if every reader has let go of it, else a new one. The caller sets
// every field a registration has; this resets the others. t.mu is held.
func (t *Table) takeRegion() *region {
	p := &t.pool
	if n := len(p.free); n > 0 {
		r := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.reused++
		return r
	}
	if p.n > 0 {
		e := &p.limbo[p.head]
		if r := e.r; e.stamp <= t.epochs.Safe() {
			*e = limboEntry{}
			p.head = (p.head + 1) % limboMax
			p.n--
			p.reused++
			if r.binds.Load() != nil {
				r.binds.Store(nil)
			}
			r.kref = 0
			r.state.Store(0)
			return r
		}
	}
	p.fresh++
	return &region{table: t}
}

// handleSlab is how many handles newHandle allocates at once. Handles are
// never reused (that is their point), but allocating them one by one was
// a fifth of a reg+close; a slab makes it one allocation per handleSlab
// registrations, and a handle the application keeps keeps its slab
// (handleSlab × 16 bytes) reachable.
const handleSlab = 32

// newHandle returns a zero handle never handed out before. t.mu is held.
func (t *Table) newHandle() *MR {
	if len(t.handles) == 0 {
		t.handles = make([]MR, handleSlab)
	}
	m := &t.handles[0]
	t.handles = t.handles[1:]
	return m
}

// retire puts r, closed, unlinked from the index and its generation
// advanced, into the limbo, and stamps the batch when r completes it.
// Without epochs the collector has it: nothing tells when a lock-free
// reader let go of it. t.mu is held.
func (t *Table) retire(r *region) {
	if t.epochs == nil || t.closed {
		return
	}
	p := &t.pool
	if p.limbo == nil {
		p.limbo = make([]limboEntry, limboMax)
	}
	if p.n == limboMax {
		p.reclaim(t.epochs.Safe())
	}
	if p.n == limboMax { // a reader holds reclamation back: let the oldest go
		p.limbo[p.head] = limboEntry{} // stamped: retireBatch < limboMax
		p.head = (p.head + 1) % limboMax
		p.n--
		p.overflowed++
	}
	p.limbo[(p.head+p.n)%limboMax] = limboEntry{r: r, stamp: unstamped}
	p.n++
	p.unstamped++
	if p.unstamped == retireBatch {
		// After every unlink of the batch (t.mu is held): see the
		// comment at the top of this file.
		stamp := t.epochs.Retire()
		for i := p.n - p.unstamped; i < p.n; i++ {
			p.limbo[(p.head+i)%limboMax].stamp = stamp
		}
		p.unstamped = 0
	}
}

// reclaim moves the limbo's regions stamped at or before safe (no reader
// can reach them) to the free list, dropping what they reference so that
// a pooled region keeps no application buffer, counter or endpoint alive.
// It runs when the limbo is full; in the steady state a registration
// takes the limbo's oldest region directly (takeRegion).
func (p *regionPool) reclaim(safe uint64) {
	for p.n > 0 && len(p.free) < freeMax {
		e := &p.limbo[p.head]
		r := e.r
		if e.stamp > safe {
			return
		}
		*e = limboEntry{}
		p.head = (p.head + 1) % limboMax
		p.n--
		r.segs = nil
		r.inlineSegs = [1]segment{}
		r.handle = nil
		r.extra = nil
		r.ctx = nil
		r.binds.Store(nil)
		r.kref = 0
		r.state.Store(0)
		p.free = append(p.free, r)
	}
}

// drop lets the collector have every pooled region (Table.Close).
func (p *regionPool) drop() {
	p.limbo = nil
	p.head, p.n, p.unstamped = 0, 0, 0
	clear(p.free)
	p.free = nil
}

// Epochs returns the epoch domain the Table recycles regions in (nil: it
// does not).
func (t *Table) Epochs() *epoch.Domain { return t.epochs }

// PoolStats counts a Table's region objects: Fresh were allocated, Reused
// registrations filled a recycled one, Overflowed closed regions were
// left to the collector because the limbo was full (a reader held
// reclamation back), Waiting are in the limbo now and Free ready.
type PoolStats struct {
	Fresh, Reused, Overflowed uint64
	Waiting, Free             int
}

// PoolStats returns the Table's region pool counts.
func (t *Table) PoolStats() PoolStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &t.pool
	return PoolStats{Fresh: p.fresh, Reused: p.reused, Overflowed: p.overflowed, Waiting: p.n, Free: len(p.free)}
}
