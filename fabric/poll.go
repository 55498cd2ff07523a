package fabric

import (
	"fmt"
	"sync"

	"github.com/xdpfab/xdpfab/fi"
)

// PollAttr is fi_poll_attr.
type PollAttr struct {
	Flags fi.Flags // reserved: must be 0
}

// PollSet is fi_poll_open's poll set (struct fid_poll): CQs and counters of
// one domain that fi_poll progresses and checks together, reporting the
// context of each member that has something new. See the package doc's
// "Poll sets" for the rules; in short, as libfabric's util poll set:
//
//   - a CQ is reported while it is not empty (success or error completions,
//     in the CQ or in its sink), after its manual progress was driven;
//   - a counter is reported when its success or error count differs from
//     what the set last reported for it (its checkpoint, starting at 0/0),
//     after its manual progress was driven.
//
// Only CQs and counters join; EQs, endpoints and everything else fail with
// FI_EINVAL, as libfabric's domain poll sets do.
type PollSet struct {
	fi.FIDBase
	dom *Domain

	mu      sync.Mutex
	members []pollMember // guarded by mu, in Add order
	next    int          // guarded by mu: where the next Poll starts (see Poll)
	closed  bool         // guarded by mu
}

// pollMember is one CQ or counter of a PollSet (exactly one of cq and
// cntr is set), with a counter's checkpoint: the success and error counts
// Poll last reported.
type pollMember struct {
	cq         *CQ
	cntr       *Cntr
	value, err uint64
}

func (m *pollMember) fid() fi.FID {
	if m.cq != nil {
		return m.cq
	}
	return m.cntr
}

// closed reports whether the member's object was closed (it leaves the
// set at the next Poll).
func (m *pollMember) closed() bool {
	if m.cq != nil {
		m.cq.mu.Lock()
		defer m.cq.mu.Unlock()
		return m.cq.closed
	}
	return m.cntr.closed.Load()
}

// PollOpen is fi_poll_open: it returns an empty poll set of the domain.
// fi_poll_open takes no context; Context returns nil.
func (d *Domain) PollOpen(attr PollAttr) (*PollSet, error) {
	if attr.Flags != 0 {
		return nil, fmt.Errorf("poll open: flags %#x are reserved: %w", uint64(attr.Flags), fi.EBADFLAGS)
	}
	if err := d.hold("poll open"); err != nil {
		return nil, err
	}
	return &PollSet{FIDBase: fi.NewFIDBase(fi.ClassPoll, nil), dom: d}, nil
}

// member checks that obj can join p and returns it as a pollMember.
func (p *PollSet) member(op string, obj fi.FID) (pollMember, error) {
	var m pollMember
	var dom *Domain
	switch o := obj.(type) {
	case *CQ:
		if o != nil {
			m, dom = pollMember{cq: o}, o.dom
		}
	case *Cntr:
		if o != nil {
			m, dom = pollMember{cntr: o}, o.dom
		}
	default:
		if obj != nil {
			return m, fmt.Errorf("poll %s: %T is not a CQ or counter: %w", op, obj, fi.EINVAL)
		}
	}
	switch {
	case dom == nil:
		return m, fmt.Errorf("poll %s: nil object: %w", op, fi.EINVAL)
	case dom != p.dom:
		return m, fmt.Errorf("poll %s: %v of another domain: %w", op, obj.Class(), fi.EINVAL)
	}
	return m, nil
}

// index is the position of obj among the members, -1 if absent. p.mu is
// held.
func (p *PollSet) index(obj fi.FID) int {
	for i := range p.members {
		if p.members[i].fid() == obj {
			return i
		}
	}
	return -1
}

// Add is fi_poll_add: obj, a *CQ or *Cntr of the set's domain, joins the
// set. It fails with FI_EBADFLAGS for flags (none are defined), FI_EINVAL
// for nil, another kind of object, one of another domain, a closed object
// or a closed set, and FI_EALREADY when obj is already a member.
func (p *PollSet) Add(obj fi.FID, flags fi.Flags) error {
	if flags != 0 {
		return fmt.Errorf("poll add: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	m, err := p.member("add", obj)
	if err != nil {
		return err
	}
	if m.closed() {
		return fmt.Errorf("poll add: %v is closed: %w", obj.Class(), fi.EINVAL)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("poll add: set closed: %w", fi.EINVAL)
	}
	if p.index(obj) >= 0 {
		return fmt.Errorf("poll add: %v already a member: %w", obj.Class(), fi.EALREADY)
	}
	p.members = append(p.members, m)
	return nil
}

// Del is fi_poll_del: obj leaves the set. It fails with FI_EBADFLAGS for
// flags, FI_EINVAL for an object that could never be a member or a closed
// set, and FI_ENOENT when obj is not a member.
func (p *PollSet) Del(obj fi.FID, flags fi.Flags) error {
	if flags != 0 {
		return fmt.Errorf("poll del: flags %#x: %w", uint64(flags), fi.EBADFLAGS)
	}
	if _, err := p.member("del", obj); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("poll del: set closed: %w", fi.EINVAL)
	}
	i := p.index(obj)
	if i < 0 {
		return fmt.Errorf("poll del: %v is not a member: %w", obj.Class(), fi.ENOENT)
	}
	p.remove(i)
	return nil
}

// remove drops member i. p.mu is held.
func (p *PollSet) remove(i int) {
	copy(p.members[i:], p.members[i+1:])
	p.members[len(p.members)-1] = pollMember{}
	p.members = p.members[:len(p.members)-1]
	if p.next > i {
		p.next--
	}
}

// Poll is fi_poll: it drives the manual progress of every member, then
// writes into contexts the context of each member with something new (see
// PollSet) and returns how many it wrote, 0 when none has. Members that do
// not fit in contexts are not lost: a counter's checkpoint moves only when
// it is reported, and the next Poll starts after the last member reported,
// so a short array sees every member in turn. A member whose object was
// closed leaves the set. A closed set fails with FI_EINVAL.
//
// It allocates nothing: applications call it in their progress loop.
func (p *PollSet) Poll(contexts []any) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, fmt.Errorf("poll: set closed: %w", fi.EINVAL)
	}
	n, start, last := 0, p.next, -1
	for k := 0; k < len(p.members); k++ {
		i := (start + k) % len(p.members)
		m := &p.members[i]
		if m.poll(n < len(contexts)) {
			contexts[n] = m.fid().Context()
			n++
			last = i
		}
	}
	// Closed members leave now, outside the pass above (it indexes
	// members from a fixed start).
	for i := len(p.members) - 1; i >= 0; i-- {
		if p.members[i].closed() {
			if i < last {
				last--
			} else if i == last {
				last = -1
			}
			p.remove(i)
		}
	}
	if n == len(contexts) && last >= 0 && len(p.members) > 0 {
		p.next = (last + 1) % len(p.members)
	} else {
		p.next = 0
	}
	return n, nil
}

// poll drives the member's manual progress and reports whether it has
// something new; report says whether there is room to report it, and only
// then does a counter's checkpoint move. A closed member reports nothing.
func (m *pollMember) poll(report bool) bool {
	if m.cq != nil {
		m.cq.progress.run()
		m.cq.mu.Lock()
		ready := !m.cq.closed && m.cq.count() > 0
		m.cq.mu.Unlock()
		return ready && report
	}
	c := m.cntr
	if c.closed.Load() {
		return false
	}
	c.progress.run()
	// Not Read/ReadErr: they would mark the counter seen, which is the
	// wait set's business (Cntr.pending), not the poll set's.
	v, e := c.value.Load(), c.errs.Load()
	if v == m.value && e == m.err || !report {
		return false
	}
	m.value, m.err = v, e
	return true
}

// Len returns how many members the set has (closed ones included until the
// next Poll).
func (p *PollSet) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.members)
}

// Close is fi_close on the poll set: the members leave it (they are not
// closed). As libfabric's poll sets, it does not wait for members to be
// deleted first. A second Close fails with FI_EINVAL.
func (p *PollSet) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("poll close: already closed: %w", fi.EINVAL)
	}
	p.closed = true
	p.members = nil
	p.dom.release()
	return nil
}
