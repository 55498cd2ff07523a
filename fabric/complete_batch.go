package fabric

import (
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/fi"
)

// Completions a batch at a time. The engine hands over what one received
// batch (or a timer run) finished together (reliable.Config.
// OnCompleteBatch). Delivered one by one, each operation took its CQ's
// lock to queue its entry, woke the CQ's readers, and took the
// endpoint's lock to return its op slot: at 64 fetch-adds in flight, a
// response completing a dozen of them took those locks a dozen times
// each, against the posting thread taking the same ones. Here the plain
// case, an operation that succeeded, is gathered: its result scattered
// and counter advanced at once, its op slot returned and its entry queued
// with the others', under one endpoint lock and one CQ lock, with one
// wake-up. Anything else (an error, the rendezvous protocol's requests)
// first flushes what was gathered, then goes the one-by-one way, so
// entries reach the CQ in completion order.

// opBatchMax bounds what one flush carries (the batch lives on the stack).
const opBatchMax = 32

// opBatch gathers the successful operations of one engine batch. It
// lives on the stack, zeroed on each call: its entries hold only what a
// success fills (doneItem, 40 bytes), not a whole cqItem (144 bytes,
// the error fields included), which made zeroing the batch the largest
// single cost of a ping-pong message's completion (4.7 KiB of stores,
// which the endpoint lock's atomic then waited to drain).
type opBatch struct {
	cq     *CQ // the CQ the items go to
	items  [opBatchMax]doneItem
	nitems int
	idx    [opBatchMax]int32 // op slots to return
	nidx   int
}

// onCompleteBatch is the engine's OnCompleteBatch.
func (ep *Endpoint) onCompleteBatch(cs []reliable.Completion) {
	var b opBatch
	for i := range cs {
		c := &cs[i]
		if o, ok := c.Context.(*txOp); ok && !o.rndv && c.Err == fi.SUCCESS {
			b.add(ep, o, c.Len)
			continue
		}
		b.flush(ep)
		ep.completeOne(*c)
	}
	b.flush(ep)
	if ep.ctlPending.Load() > 0 {
		ep.kickCtl()
	}
}

// add does finishOp's work for a successful op o of n bytes, except the
// lock-taking parts (queueing the entry, freeing the slot), which it
// gathers for flush.
func (b *opBatch) add(ep *Endpoint, o *txOp, n int) {
	if o.nres > 0 {
		scatter(o.resultV[:o.nres], o.result, o.elemSize)
	}
	if o.cntr >= 0 {
		if cntr := ep.enabledCntr[o.cntr]; cntr != nil {
			cntr.Add(1)
		}
	}
	switch {
	case o.wantComp:
		if b.cq != o.cq {
			b.flush(ep)
			b.cq = o.cq
		}
		b.items[b.nitems] = doneItem{ctx: o.ctx, src: o.dest, flags: o.cqFlags, n: n}
		b.nitems++
	case o.reserved:
		o.cq.unreserve()
	}
	o.ctx, o.result = nil, nil
	clear(o.resultV[:o.nres])
	o.nres = 0
	b.idx[b.nidx] = o.idx
	b.nidx++
	if b.nidx == opBatchMax || b.nitems == opBatchMax {
		b.flush(ep)
	}
}

// flush returns the gathered op slots, then queues the gathered entries:
// slots first, so that an application reading an entry finds its slot
// free to post again.
func (b *opBatch) flush(ep *Endpoint) {
	if b.nidx > 0 {
		ep.mu.Lock()
		ep.freeOps = append(ep.freeOps, b.idx[:b.nidx]...)
		ep.mu.Unlock()
		b.nidx = 0
	}
	if b.nitems > 0 {
		b.cq.pushDone(b.items[:b.nitems])
		clear(b.items[:b.nitems])
		b.nitems = 0
	}
}
