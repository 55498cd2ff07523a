package fabric

import (
	"math/rand/v2"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// TestRecvQueueRuns checks matching over runs of equal specs against the
// page's rule, the oldest posted receive that accepts the message, found
// by a plain scan of the queue, through random posts, matches and
// removals from anywhere (cancel), also of multi-recv-like receives that
// stay queued when matched.
func TestRecvQueueRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	specs := []matchSpec{
		{src: fi.AddrUnspec, tag: 0x10, ignore: 0x0f, tagged: true},
		{src: fi.AddrUnspec, tag: 0x20, ignore: 0, tagged: true},
		{src: fi.AddrUnspec, tag: 0, ignore: ^uint64(0), tagged: true}, // any tag
		{src: 3, tag: 0x10, ignore: 0x0f, tagged: true},
	}
	r := &receiver{directed: true}
	q := &r.tposted
	var live []*postedRecv
	scan := func(m *rxMsg) *postedRecv {
		for pr := q.head; pr != nil; pr = pr.next {
			if r.accepts(&pr.spec, m) {
				return pr
			}
		}
		return nil
	}
	check := func(step int) {
		n, runs := 0, 0
		for run := q.runs.head; run != nil; run = run.next {
			runs++
			k := 0
			for pr := run.first; ; pr = pr.next {
				if pr == nil || pr.run != run || pr.spec != run.spec {
					t.Fatalf("step %d: run %d broken", step, runs)
				}
				k++
				if pr == run.last {
					break
				}
			}
			if k != run.n {
				t.Fatalf("step %d: run holds %d receives, counts %d", step, k, run.n)
			}
			n += k
		}
		if n != q.n || n != len(live) {
			t.Fatalf("step %d: runs cover %d receives, queue %d, posted %d", step, n, q.n, len(live))
		}
	}
	for step := 0; step < 20000; step++ {
		switch op := rng.IntN(10); {
		case op < 4 && len(live) < 64: // post, often the same spec again
			pr := &postedRecv{spec: specs[rng.IntN(len(specs))]}
			if rng.IntN(3) > 0 && q.tail != nil {
				pr.spec = q.tail.spec
			}
			q.push(pr)
			live = append(live, pr)
		case op < 8: // a message arrives: the oldest receive that takes it
			m := &rxMsg{tagged: true, tag: uint64(rng.IntN(0x30)), from: fi.Addr(rng.IntN(5))}
			want, got := scan(m), r.findPosted(m)
			if want != got {
				t.Fatalf("step %d: findPosted %p, the oldest taking tag %#x from %d is %p", step, got, m.tag, m.from, want)
			}
			if got != nil && rng.IntN(4) > 0 { // else it stays, as a multi-recv buffer does
				q.remove(got)
				for i, pr := range live {
					if pr == got {
						live = append(live[:i], live[i+1:]...)
						break
					}
				}
			}
		default: // cancel any
			if len(live) > 0 {
				i := rng.IntN(len(live))
				q.remove(live[i])
				live = append(live[:i], live[i+1:]...)
			}
		}
		check(step)
	}
}
