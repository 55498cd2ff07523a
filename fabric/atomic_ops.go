package fabric

import (
	"fmt"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// AtomicValid is fi_atomicvalid: how many elements one base atomic of
// (dt, op) may carry, or FI_EOPNOTSUPP.
func (ep *Endpoint) AtomicValid(dt fatomic.Datatype, op fatomic.Op) (int, error) {
	return ep.atomicEngine().Valid(dt, op)
}

// FetchAtomicValid is fi_fetch_atomicvalid.
func (ep *Endpoint) FetchAtomicValid(dt fatomic.Datatype, op fatomic.Op) (int, error) {
	return ep.atomicEngine().FetchValid(dt, op)
}

// CompareAtomicValid is fi_compare_atomicvalid.
func (ep *Endpoint) CompareAtomicValid(dt fatomic.Datatype, op fatomic.Op) (int, error) {
	return ep.atomicEngine().CompareValid(dt, op)
}

// atomicEngine returns the engine sized to this endpoint's packets, set
// when the endpoint opens, so the valid counts before Enable are those
// after it.
func (ep *Endpoint) atomicEngine() fatomic.Engine { return ep.amo }

// atomicArgs is an fi_msg_atomic without the context, which travels
// apart: escape analysis would otherwise see the context stored in the op
// and move every iovec slice literal of the calls below to the heap.
type atomicArgs struct {
	iov  []IOC
	desc []mr.Desc
	dest fi.Addr
	rma  RMAIOC
	dt   fatomic.Datatype
	op   fatomic.Op
	data uint64
	// inject marks fi_inject_atomic: no completion, and no descriptor to
	// check under FI_MR_LOCAL (the operand is copied before return).
	inject bool
}

// msgArgs unpacks an fi_msg_atomic: rma_iov_limit is 1.
func msgArgs(call string, msg *MsgAtomic) (atomicArgs, error) {
	if msg == nil || len(msg.RMAIOV) != RMAIovLimit {
		return atomicArgs{}, fmt.Errorf("%s: one remote iovec required (rma_iov_limit %d): %w", call, RMAIovLimit, fi.EINVAL)
	}
	return atomicArgs{iov: msg.MsgIOV, desc: msg.Desc, dest: msg.Addr, rma: msg.RMAIOV[0],
		dt: msg.Datatype, op: msg.Op, data: msg.Data}, nil
}

// Atomic is fi_atomic: op applied with count elements of buf to the
// peer's memory at addr in region key.
func (ep *Endpoint) Atomic(buf []byte, count int, desc mr.Desc, dest fi.Addr, addr, key uint64,
	dt fatomic.Datatype, op fatomic.Op, context any) error {
	a := atomicArgs{iov: []IOC{{buf, count}}, desc: []mr.Desc{desc}, dest: dest, rma: RMAIOC{addr, count, key}, dt: dt, op: op}
	return ep.atomic(fatomic.Base, &a, context, nil, nil, nil, nil, ep.attr.OpFlags)
}

// AtomicV is fi_atomicv.
func (ep *Endpoint) AtomicV(iov []IOC, desc []mr.Desc, dest fi.Addr, addr, key uint64,
	dt fatomic.Datatype, op fatomic.Op, context any) error {
	a := atomicArgs{iov: iov, desc: desc, dest: dest, rma: RMAIOC{addr, iocCount(iov), key}, dt: dt, op: op}
	return ep.atomic(fatomic.Base, &a, context, nil, nil, nil, nil, ep.attr.OpFlags)
}

// AtomicMsg is fi_atomicmsg.
func (ep *Endpoint) AtomicMsg(msg *MsgAtomic, flags fi.Flags) error {
	a, err := msgArgs("atomic", msg)
	if err != nil {
		return err
	}
	return ep.atomic(fatomic.Base, &a, msg.Context, nil, nil, nil, nil, flags)
}

// InjectAtomic is fi_inject_atomic: the operand is copied before the call
// returns and no completion is generated, even without
// FI_SELECTIVE_COMPLETION. It takes no descriptor, so FI_MR_LOCAL does not
// apply to its operand.
func (ep *Endpoint) InjectAtomic(buf []byte, count int, dest fi.Addr, addr, key uint64,
	dt fatomic.Datatype, op fatomic.Op) error {
	a := atomicArgs{iov: []IOC{{buf, count}}, dest: dest, rma: RMAIOC{addr, count, key}, dt: dt, op: op, inject: true}
	return ep.atomic(fatomic.Base, &a, nil, nil, nil, nil, nil, fi.INJECT)
}

// FetchAtomic is fi_fetch_atomic: like Atomic, and the values before the
// operation are in result when the completion is read.
func (ep *Endpoint) FetchAtomic(buf []byte, count int, desc mr.Desc, result []byte, resultDesc mr.Desc,
	dest fi.Addr, addr, key uint64, dt fatomic.Datatype, op fatomic.Op, context any) error {
	a := atomicArgs{iov: []IOC{{buf, count}}, desc: []mr.Desc{desc}, dest: dest, rma: RMAIOC{addr, count, key}, dt: dt, op: op}
	return ep.atomic(fatomic.Fetch, &a, context, nil, nil, []IOC{{result, count}}, []mr.Desc{resultDesc}, ep.attr.OpFlags)
}

// FetchAtomicV is fi_fetch_atomicv.
func (ep *Endpoint) FetchAtomicV(iov []IOC, desc []mr.Desc, resultv []IOC, resultDesc []mr.Desc,
	dest fi.Addr, addr, key uint64, dt fatomic.Datatype, op fatomic.Op, context any) error {
	a := atomicArgs{iov: iov, desc: desc, dest: dest, rma: RMAIOC{addr, iocCount(iov), key}, dt: dt, op: op}
	return ep.atomic(fatomic.Fetch, &a, context, nil, nil, resultv, resultDesc, ep.attr.OpFlags)
}

// FetchAtomicMsg is fi_fetch_atomicmsg.
func (ep *Endpoint) FetchAtomicMsg(msg *MsgAtomic, resultv []IOC, resultDesc []mr.Desc, flags fi.Flags) error {
	a, err := msgArgs("fetch_atomic", msg)
	if err != nil {
		return err
	}
	return ep.atomic(fatomic.Fetch, &a, msg.Context, nil, nil, resultv, resultDesc, flags)
}

// CompareAtomic is fi_compare_atomic: op (the CSWAP family or MSWAP) with
// operand buf and compare values, the old values in result.
func (ep *Endpoint) CompareAtomic(buf []byte, count int, desc mr.Desc, compare []byte, compareDesc mr.Desc,
	result []byte, resultDesc mr.Desc, dest fi.Addr, addr, key uint64, dt fatomic.Datatype, op fatomic.Op, context any) error {
	a := atomicArgs{iov: []IOC{{buf, count}}, desc: []mr.Desc{desc}, dest: dest, rma: RMAIOC{addr, count, key}, dt: dt, op: op}
	return ep.atomic(fatomic.Compare, &a, context, []IOC{{compare, count}}, []mr.Desc{compareDesc},
		[]IOC{{result, count}}, []mr.Desc{resultDesc}, ep.attr.OpFlags)
}

// CompareAtomicV is fi_compare_atomicv.
func (ep *Endpoint) CompareAtomicV(iov []IOC, desc []mr.Desc, comparev []IOC, compareDesc []mr.Desc,
	resultv []IOC, resultDesc []mr.Desc, dest fi.Addr, addr, key uint64, dt fatomic.Datatype, op fatomic.Op, context any) error {
	a := atomicArgs{iov: iov, desc: desc, dest: dest, rma: RMAIOC{addr, iocCount(iov), key}, dt: dt, op: op}
	return ep.atomic(fatomic.Compare, &a, context, comparev, compareDesc, resultv, resultDesc, ep.attr.OpFlags)
}

// CompareAtomicMsg is fi_compare_atomicmsg.
func (ep *Endpoint) CompareAtomicMsg(msg *MsgAtomic, comparev []IOC, compareDesc []mr.Desc,
	resultv []IOC, resultDesc []mr.Desc, flags fi.Flags) error {
	a, err := msgArgs("compare_atomic", msg)
	if err != nil {
		return err
	}
	return ep.atomic(fatomic.Compare, &a, msg.Context, comparev, compareDesc, resultv, resultDesc, flags)
}

func iocCount(iov []IOC) int {
	n := 0
	for _, v := range iov {
		n += v.Count
	}
	return n
}

var classCall = [...]string{fatomic.Base: "atomic", fatomic.Fetch: "fetch_atomic", fatomic.Compare: "compare_atomic"}

// atomic is the one path behind every fi_atomic(3) call: it checks the
// (datatype, op) against the class's valid count, the iovecs against the
// count, then gathers operands (and compare values) into one request and
// lets the completion scatter the old values back.
//
// FI_INJECT (any class) releases the operand and compare buffers at
// return: the engine copies them, so operand and compare bytes together
// must fit inject_size (FI_EMSGSIZE otherwise). The result buffer is an
// output buffer, which FI_INJECT does not affect: it is written when the
// operation completes.
func (ep *Endpoint) atomic(c fatomic.Class, m *atomicArgs, ctx any, cmp []IOC, cmpDesc []mr.Desc, res []IOC, resDesc []mr.Desc, flags fi.Flags) error {
	call := classCall[c]
	if flags&fi.TAGGED != 0 {
		return fmt.Errorf("%s: atomics on tagged buffers: %w", call, fi.EOPNOTSUPP)
	}
	eng := ep.atomicEngine()
	var limit int
	var err error
	switch c {
	case fatomic.Base:
		limit, err = eng.Valid(m.dt, m.op)
	case fatomic.Fetch:
		limit, err = eng.FetchValid(m.dt, m.op)
	default:
		limit, err = eng.CompareValid(m.dt, m.op)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	size := fatomic.Size(m.dt)
	count := m.rma.Count
	if count <= 0 {
		return fmt.Errorf("%s: count %d for %v %v: %w", call, count, m.dt, m.op, fi.EINVAL)
	}
	n := count * size
	readOnly := m.op == fatomic.ATOMIC_READ
	if !readOnly {
		if err := checkIOV(m.iov, count, size); err != nil {
			return fmt.Errorf("%s: operand: %w", call, err)
		}
		if !m.inject {
			if err := ep.checkLocalIOV(m.desc, m.iov, size, fi.WRITE); err != nil {
				return fmt.Errorf("%s: operand: %w", call, err)
			}
		}
	}
	if c == fatomic.Compare {
		if err := checkIOV(cmp, count, size); err != nil {
			return fmt.Errorf("%s: compare: %w", call, err)
		}
		if err := ep.checkLocalIOV(cmpDesc, cmp, size, fi.WRITE); err != nil {
			return fmt.Errorf("%s: compare: %w", call, err)
		}
	}
	if c != fatomic.Base {
		if err := checkIOV(res, count, size); err != nil {
			return fmt.Errorf("%s: result: %w", call, err)
		}
		if err := ep.checkLocalIOV(resDesc, res, size, fi.READ); err != nil {
			return fmt.Errorf("%s: result: %w", call, err)
		}
	}
	// A well-formed request (buffers matching the count, checked above as
	// FI_EINVAL) with more elements than the valid call allows is
	// FI_EMSGSIZE: fi_atomic(3), "the number of atomic operations in a
	// single request exceeds that supported by the underlying provider".
	if count > limit {
		return fmt.Errorf("%s: count %d > %d for %v %v: %w", call, count, limit, m.dt, m.op, fi.EMSGSIZE)
	}
	r := reliable.Request{RKey: m.rma.Key, Addr: m.rma.Addr, Data: m.data,
		Datatype: uint8(m.dt), AtomicOp: uint8(m.op), Count: uint32(count)}
	kind, cqFlags := cntrWrite, fi.ATOMIC|fi.WRITE
	switch c {
	case fatomic.Base:
		r.Opcode = wire.OpAtomic
	case fatomic.Fetch:
		r.Opcode, kind, cqFlags = wire.OpFetchAtomic, cntrRead, fi.ATOMIC|fi.READ
	default:
		r.Opcode, kind, cqFlags = wire.OpCompareAtomic, cntrRead, fi.ATOMIC|fi.READ
	}
	o, err := ep.begin(&r, m.dest, flags, kind, cqFlags, ctx, m.inject)
	if err != nil {
		return wrap(call, err)
	}
	// Single-buffer operands go out as they are; vectors are gathered into
	// the op's scratch buffer, which lives as long as the pool slot, and
	// results scattered from it when the operation completes.
	if len(m.iov) > 1 || len(cmp) > 1 || len(res) > 1 {
		need := 3 * n
		if cap(o.scratch) < need {
			o.scratch = make([]byte, max(need, 3*ep.amo.MaxPayload))
		}
		s := o.scratch[:need]
		if !readOnly {
			r.Payload = gatherIOV(m.iov, s[:n], size)
		}
		if c == fatomic.Compare {
			r.Compare = gatherIOV(cmp, s[n:2*n], size)
		}
		if len(res) > 1 {
			r.Result = s[2*n : 3*n]
			o.result, o.elemSize = r.Result, size
			o.nres = copy(o.resultV[:], res)
		} else if c != fatomic.Base {
			r.Result = res[0].Buf[:n]
		}
	} else {
		if !readOnly {
			r.Payload = m.iov[0].Buf[:n]
		}
		if c == fatomic.Compare {
			r.Compare = cmp[0].Buf[:n]
		}
		if c != fatomic.Base {
			r.Result = res[0].Buf[:n]
		}
	}
	return wrap(call, ep.submit(o, &r))
}

// gatherIOV returns the iovec's elements as one slice: the buffer itself
// when there is one, else a copy into dst of each buffer's Count elements
// of size bytes.
func gatherIOV(iov []IOC, dst []byte, size int) []byte {
	if len(iov) == 1 {
		return iov[0].Buf[:len(dst)]
	}
	off := 0
	for _, v := range iov {
		off += copy(dst[off:], v.Buf[:v.Count*size])
	}
	return dst
}

// checkIOV checks that iov holds count elements of size bytes in all, each
// buffer at least as long as its count says.
func checkIOV(iov []IOC, count, size int) error {
	if len(iov) == 0 || len(iov) > IovLimit {
		return fmt.Errorf("%d iovecs (1..%d): %w", len(iov), IovLimit, fi.EINVAL)
	}
	total := 0
	for i, v := range iov {
		// Count > len/size rather than Count*size > len: a huge count must
		// not overflow into a small product (the count limit comes later).
		if v.Count < 0 || v.Count > len(v.Buf)/size {
			return fmt.Errorf("iovec %d: %d bytes for %d elements of %d: %w", i, len(v.Buf), v.Count, size, fi.EINVAL)
		}
		total += v.Count
	}
	if total != count {
		return fmt.Errorf("iovecs hold %d elements, remote range %d: %w", total, count, fi.EINVAL)
	}
	return nil
}

func (ep *Endpoint) checkLocalIOV(desc []mr.Desc, iov []IOC, size int, access fi.Flags) error {
	for i, v := range iov {
		var d mr.Desc
		if i < len(desc) {
			d = desc[i]
		}
		if err := ep.checkLocal(d, v.Buf[:v.Count*size], access); err != nil {
			return err
		}
	}
	return nil
}
