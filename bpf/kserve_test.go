package bpf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath/wire"
)

const (
	portKS4  = 4795 // bound to self4, strict, PORT_KSERVE
	portKS6  = 4796 // bound to self6, strict, PORT_KSERVE
	krKey    = 0x77 // the kernel-resident region's MR key
	userKey  = 0x78 // a key with no kernel-resident region
	ksSrcEP  = 11   // the initiator's endpoint id
	ksDstEP  = 22   // the target's endpoint id
	ksAuth   = 0    // the region demands no auth key
	ksRegion = 2 * KRPage
)

// kserveEnv is the program with a kernel-resident region of ksRegion bytes
// under krKey and a shared state for peer4's endpoint ksSrcEP on portKS4,
// owned by the program, session ses, next 1.
type kserveEnv struct {
	objs   *XdpfabObjects
	region *KernelRegion
	kt     *KTarget
	key    KTKey
	ses    uint32
	next   uint32
}

func newKserveEnv(t testing.TB, peer netip.AddrPort, port uint16) *kserveEnv {
	t.Helper()
	objs := loadTestObjects(t)
	for p, a := range map[uint16]netip.Addr{portKS4: self4, portKS6: self6} {
		require.NoError(t, objs.Ports.Put(htons(p), XdpfabPortConfig{AvId: avID, DomainId: domainID,
			Flags: PortStrict | PortBoundAddr | PortKServe, Addr: a.As16()}))
	}
	r, err := NewKernelRegion(ksRegion)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	mk := XdpfabMrKey{DomainId: domainID, Key: krKey}
	require.NoError(t, objs.KrMem.Put(mk, r.Map))
	require.NoError(t, objs.KrRegions.Put(mk, XdpfabKrRegion{Len: ksRegion, AuthDigest: ksAuth,
		Flags: KREnabled | KRRemoteRead | KRRemoteWrite}))
	kt, err := NewKTarget(objs.Ktarget)
	require.NoError(t, err)
	t.Cleanup(func() { kt.Close() })
	e := &kserveEnv{objs: objs, region: r, kt: kt, key: NewKTKey(peer, port, ksSrcEP), ses: 0x5e55, next: 1}
	require.NoError(t, kt.Create(e.key))
	require.NoError(t, kt.Release(e.key, e.ses, e.next, ksDstEP))
	return e
}

// ksOp is one atomic op of a test request with its operands.
type ksOp struct {
	opcode   wire.Opcode
	dt       atomic.Datatype
	op       atomic.Op
	addr     uint64
	rkey     uint64
	count    int
	operand  []byte
	compare  []byte
	flags    uint16
	noResult bool
}

func (o *ksOp) n() int { return o.count * atomic.Size(o.dt) }

func (o *ksOp) class() atomic.Class {
	switch o.opcode {
	case wire.OpFetchAtomic:
		return atomic.Fetch
	case wire.OpCompareAtomic:
		return atomic.Compare
	}
	return atomic.Base
}

// encodeRequest builds the request seq of session ses with ops, as the
// engine would.
func encodeRequest(ses, seq uint32, flags uint8, ops []ksOp) []byte {
	var b wire.Builder
	b.Reset(make([]byte, 0, 1472), wire.Header{Type: wire.TypeReq, Flags: flags, SrcEP: ksSrcEP, DstEP: ksDstEP,
		AuthKey: ksAuth, Session: ses, Seq: seq, Ack: seq})
	for _, o := range ops {
		rkey := o.rkey
		if rkey == 0 {
			rkey = krKey
		}
		d := wire.OpDesc{Opcode: o.opcode, Datatype: uint8(o.dt), AtomicOp: uint8(o.op), Flags: o.flags | wire.OpFirst | wire.OpLast,
			RKey: rkey, Addr: o.addr, Count: uint32(o.count)}
		if o.opcode != wire.OpAtomic {
			d.RespLen = uint32(o.n())
		}
		if err := b.AddOp(d, o.operand, o.compare); err != nil {
			panic(err)
		}
	}
	return b.Finish()
}

// expectResponse applies ops to a copy of mem with atomic.Reference (the
// oracle) and returns the new memory and the response the user-space
// engine would send for them (every op succeeding), with Ack ack.
func expectResponse(t *testing.T, mem []byte, ses, seq, ack uint32, ops []ksOp) ([]byte, []byte) {
	t.Helper()
	mem = bytes.Clone(mem)
	var b wire.Builder
	b.Reset(make([]byte, 0, 1472), wire.Header{Type: wire.TypeResp, SrcEP: ksDstEP, DstEP: ksSrcEP,
		AuthKey: ksAuth, Session: ses, Seq: seq})
	for _, o := range ops {
		tgt := mem[o.addr : o.addr+uint64(o.n())]
		nt, fetched, err := atomic.Reference(o.dt, o.op, tgt, o.operand, o.compare)
		require.NoError(t, err)
		copy(tgt, nt)
		l := 0
		if o.opcode != wire.OpAtomic {
			l = o.n()
		}
		dst, err := b.AddResp(wire.RespDesc{Opcode: o.opcode, Len: uint32(l)})
		require.NoError(t, err)
		copy(dst, fetched)
	}
	out := b.Finish()
	wire.PutAck(out, ack, 0)
	return mem, out
}

// parsedFrame is an output frame, its checksums verified.
type parsedFrame struct {
	srcMAC, dstMAC []byte
	src, dst       netip.AddrPort
	payload        []byte
}

func parseFrame(t *testing.T, b []byte) parsedFrame {
	t.Helper()
	require.GreaterOrEqual(t, len(b), 14)
	f := parsedFrame{dstMAC: b[0:6], srcMAC: b[6:12]}
	et := binary.BigEndian.Uint16(b[12:])
	var l4 []byte
	switch et {
	case 0x0800:
		ip := b[14:]
		hl := int(ip[0]&0xf) * 4
		require.Zero(t, ipChecksum(ip[:hl]), "IPv4 header checksum")
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		require.Equal(t, len(ip), tot, "IPv4 total length is the frame")
		f.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), 0)
		f.dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), 0)
		l4 = ip[hl:tot]
	case 0x86dd:
		ip := b[14:]
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		require.Equal(t, len(ip)-40, pl, "IPv6 payload length is the frame")
		f.src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[8:24])), 0)
		f.dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[24:40])), 0)
		l4 = ip[40 : 40+pl]
	default:
		t.Fatalf("ethertype %#x", et)
	}
	require.Equal(t, len(l4), int(binary.BigEndian.Uint16(l4[4:])), "UDP length")
	c := binary.BigEndian.Uint16(l4[6:])
	z := bytes.Clone(l4)
	z[6], z[7] = 0, 0
	require.Equal(t, udpChecksum(f.src.Addr(), f.dst.Addr(), z), c, "UDP checksum")
	f.src = netip.AddrPortFrom(f.src.Addr(), binary.BigEndian.Uint16(l4[0:]))
	f.dst = netip.AddrPortFrom(f.dst.Addr(), binary.BigEndian.Uint16(l4[2:]))
	f.payload = l4[8:]
	return f
}

func (e *kserveEnv) counters(t *testing.T) []uint64 { return readCounters(t, e.objs.Counters) }

// serve runs one request and checks that the program answered it with
// XDP_TX: the frame turned around, the payload want.
func (e *kserveEnv) serve(t *testing.T, peer netip.AddrPort, port uint16, req, want []byte) {
	t.Helper()
	in := udp(peer, port, req).build()
	res := run(t, e.objs.XdpfabXdp, in)
	require.Equal(t, uint32(xdpTx), res.action, "action")
	f := parseFrame(t, res.out)
	require.Equal(t, macA, f.dstMAC)
	require.Equal(t, macB, f.srcMAC)
	require.Equal(t, peer.Addr().Unmap(), f.dst.Addr().Unmap())
	require.Equal(t, peer.Port(), f.dst.Port())
	require.Equal(t, port, f.src.Port())
	require.Equal(t, want, f.payload, "response payload")
}

const xdpTx = 3

func randOperands(rng *rand.Rand, o *ksOp, mem []byte) {
	n := o.n()
	o.operand = make([]byte, n)
	for i := range o.operand {
		o.operand[i] = byte(rng.Uint32())
	}
	if o.opcode == wire.OpCompareAtomic {
		o.compare = make([]byte, n)
		for i := range o.compare {
			o.compare[i] = byte(rng.Uint32())
		}
		if rng.IntN(2) == 0 { // equal half the time
			copy(o.compare, mem[o.addr:o.addr+uint64(n)])
		}
	}
	if o.opcode == wire.OpFetchAtomic && o.op == atomic.ATOMIC_READ {
		o.operand = nil
	}
}

// TestKServeOps runs every op the program serves on every datatype it
// serves, single and multi-element, fetch and not: the action is XDP_TX,
// the response the one the user-space engine would send for the oracle's
// results, the region holds the oracle's values, the counters moved; a
// retransmission is answered from the ring, the region untouched.
func TestKServeOps(t *testing.T) {
	e := newKserveEnv(t, peer4, portKS4)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range e.region.Bytes {
		e.region.Bytes[i] = byte(rng.Uint32())
	}
	type class struct {
		opcode wire.Opcode
		ops    []atomic.Op
	}
	base := []atomic.Op{atomic.MIN, atomic.MAX, atomic.SUM, atomic.PROD, atomic.LOR, atomic.LAND, atomic.BOR,
		atomic.BAND, atomic.LXOR, atomic.BXOR, atomic.ATOMIC_WRITE}
	classes := []class{
		{wire.OpAtomic, base},
		{wire.OpFetchAtomic, append(append([]atomic.Op{}, base...), atomic.ATOMIC_READ)},
		{wire.OpCompareAtomic, []atomic.Op{atomic.CSWAP, atomic.CSWAP_NE, atomic.CSWAP_LE, atomic.CSWAP_LT,
			atomic.CSWAP_GE, atomic.CSWAP_GT, atomic.MSWAP}},
	}
	native := map[atomic.Op]bool{atomic.SUM: true, atomic.BOR: true, atomic.BAND: true, atomic.BXOR: true,
		atomic.ATOMIC_READ: true, atomic.ATOMIC_WRITE: true, atomic.CSWAP: true}
	for _, dt := range []atomic.Datatype{atomic.INT32, atomic.UINT32, atomic.INT64, atomic.UINT64} {
		for _, c := range classes {
			for _, op := range c.ops {
				counts := []int{1}
				if native[op] {
					counts = append(counts, 5)
				}
				for _, cnt := range counts {
					name := fmt.Sprintf("%v/%v/%v/x%d", c.opcode, dt, op, cnt)
					t.Run(name, func(t *testing.T) {
						size := atomic.Size(dt)
						o := ksOp{opcode: c.opcode, dt: dt, op: op, count: cnt,
							addr: uint64(rng.IntN((ksRegion-cnt*size)/size)) * uint64(size)}
						if (o.addr%KRPage)+uint64(o.n()) > KRPage { // stay in one page
							o.addr = KRPage
						}
						randOperands(rng, &o, e.region.Bytes)
						ops := []ksOp{o}
						before := e.counters(t)
						seq := e.next
						wantMem, want := expectResponse(t, e.region.Bytes, e.ses, seq, seq+1, ops)
						req := encodeRequest(e.ses, seq, 0, ops)
						e.serve(t, peer4, portKS4, req, want)
						require.Equal(t, wantMem, e.region.Bytes, "region after the op")
						e.next++
						after := e.counters(t)
						require.Equal(t, uint64(1), after[XdpfabXdpfabCounterCNT_TX_SERVED]-before[XdpfabXdpfabCounterCNT_TX_SERVED])
						require.Equal(t, uint64(1), after[XdpfabXdpfabCounterCNT_KERN_OPS]-before[XdpfabXdpfabCounterCNT_KERN_OPS])
						require.Equal(t, uint64(0), after[cntNoXSK]-before[cntNoXSK], "not handed up")

						// The retransmission: same answer (Ack is still
						// seq+1), from the ring; nothing executes.
						retx := encodeRequest(e.ses, seq, wire.HdrRetransmit, ops)
						e.serve(t, peer4, portKS4, retx, want)
						require.Equal(t, wantMem, e.region.Bytes, "a retransmission executes nothing")
						require.Equal(t, uint64(1), e.counters(t)[XdpfabXdpfabCounterCNT_TX_CACHED]-after[XdpfabXdpfabCounterCNT_TX_CACHED])

						if c.opcode != wire.OpAtomic { // user space reads the same values back
							buf := make([]byte, KTDataMax)
							n, ok, err := e.kt.Fetch(e.key, e.ses, seq, buf)
							require.NoError(t, err)
							require.True(t, ok)
							var p wire.Packet
							require.NoError(t, wire.Decode(want, &p))
							require.Equal(t, p.Payload(0), buf[:n])
						}
					})
				}
			}
		}
	}
}

func u64s(v ...uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}

// TestKServeHandUp checks what the program does not serve goes up whole
// and unchanged, counted by reason, and that the state moves between the
// program and user space mid-session without a sequence number running
// twice or being skipped.
func TestKServeHandUp(t *testing.T) {
	e := newKserveEnv(t, peer4, portKS4)
	add := func(addr uint64, v uint64) ksOp {
		return ksOp{opcode: wire.OpFetchAtomic, dt: atomic.UINT64, op: atomic.SUM, addr: addr, count: 1, operand: u64s(v)}
	}
	up := func(t *testing.T, req []byte, reason Counter) {
		t.Helper()
		before := e.counters(t)
		mem := bytes.Clone(e.region.Bytes)
		in := udp(peer4, portKS4, req).build()
		res := run(t, e.objs.XdpfabXdp, in)
		require.Equal(t, uint32(xdpPass), res.action, "handed up (no socket bound: passed)")
		require.Equal(t, in, res.out, "unchanged")
		require.Equal(t, mem, e.region.Bytes, "nothing executed")
		after := e.counters(t)
		require.Equal(t, uint64(1), after[reason]-before[reason], "counted as %v", reason)
		require.Equal(t, uint64(1), after[cntNoXSK]-before[cntNoXSK])
	}
	served := func(t *testing.T, ops ...ksOp) {
		t.Helper()
		wantMem, want := expectResponse(t, e.region.Bytes, e.ses, e.next, e.next+1, ops)
		e.serve(t, peer4, portKS4, encodeRequest(e.ses, e.next, 0, ops), want)
		require.Equal(t, wantMem, e.region.Bytes)
		e.next++
	}

	served(t, add(0, 1))
	t.Run("not kernel-resident", func(t *testing.T) {
		o := add(0, 1)
		o.rkey = userKey
		up(t, encodeRequest(e.ses, e.next, 0, []ksOp{o}), XdpfabXdpfabCounterCNT_UP_REGION)
	})
	t.Run("misaligned", func(t *testing.T) {
		up(t, encodeRequest(e.ses, e.next, 0, []ksOp{add(4, 1)}), XdpfabXdpfabCounterCNT_UP_REGION)
	})
	t.Run("out of range", func(t *testing.T) {
		up(t, encodeRequest(e.ses, e.next, 0, []ksOp{add(ksRegion, 1)}), XdpfabXdpfabCounterCNT_UP_REGION)
	})
	t.Run("crosses a page", func(t *testing.T) {
		o := add(KRPage-8, 0)
		o.count, o.operand = 2, u64s(1, 2)
		up(t, encodeRequest(e.ses, e.next, 0, []ksOp{o}), XdpfabXdpfabCounterCNT_UP_REGION)
	})
	t.Run("CAS-loop op on two elements", func(t *testing.T) {
		o := ksOp{opcode: wire.OpAtomic, dt: atomic.INT64, op: atomic.MIN, count: 2, operand: u64s(1, 2)}
		up(t, encodeRequest(e.ses, e.next, 0, []ksOp{o}), XdpfabXdpfabCounterCNT_UP_OP)
	})
	t.Run("remote CQ data", func(t *testing.T) {
		o := add(0, 1)
		o.flags = wire.OpCQData
		up(t, encodeRequest(e.ses, e.next, 0, []ksOp{o}), XdpfabXdpfabCounterCNT_UP_OP)
	})
	t.Run("RMA read", func(t *testing.T) {
		var b wire.Builder
		b.Reset(make([]byte, 0, 1472), wire.Header{Type: wire.TypeReq, SrcEP: ksSrcEP, DstEP: ksDstEP, Session: e.ses, Seq: e.next})
		require.NoError(t, b.AddOp(wire.OpDesc{Opcode: wire.OpRMARead, RespLen: 8, RKey: krKey, Flags: wire.OpFirst | wire.OpLast}, nil, nil))
		up(t, b.Finish(), XdpfabXdpfabCounterCNT_UP_OP)
	})
	t.Run("float", func(t *testing.T) {
		o := ksOp{opcode: wire.OpFetchAtomic, dt: atomic.DOUBLE, op: atomic.SUM, count: 1, operand: u64s(1)}
		up(t, encodeRequest(e.ses, e.next, 0, []ksOp{o}), XdpfabXdpfabCounterCNT_UP_OP)
	})
	t.Run("gap", func(t *testing.T) {
		up(t, encodeRequest(e.ses, e.next+1, 0, []ksOp{add(0, 1)}), XdpfabXdpfabCounterCNT_UP_NOT_NEXT)
	})
	t.Run("other session", func(t *testing.T) {
		up(t, encodeRequest(e.ses+1, 1, 0, []ksOp{add(0, 1)}), XdpfabXdpfabCounterCNT_UP_NOT_NEXT)
	})
	t.Run("retransmission older than the ring", func(t *testing.T) {
		// seq 1 is in the ring, seq 0 (never served) is not.
		up(t, encodeRequest(e.ses, 0, 0, []ksOp{add(0, 1)}), XdpfabXdpfabCounterCNT_UP_NOT_NEXT)
	})
	t.Run("no shared state", func(t *testing.T) {
		req := encodeRequest(e.ses, e.next, 0, []ksOp{add(0, 1)})
		binary.LittleEndian.PutUint32(req[8:], ksSrcEP+1) // another endpoint of the peer
		up(t, req, XdpfabXdpfabCounterCNT_UP_NO_STATE)
	})
	// The ops are checked before the state is looked up (kserve says
	// why): a request that has no state either and whose op the program
	// does not execute, or whose key is not kernel-resident, counts that.
	t.Run("no shared state, op not executed", func(t *testing.T) {
		o := ksOp{opcode: wire.OpFetchAtomic, dt: atomic.DOUBLE, op: atomic.SUM, count: 1, operand: u64s(1)}
		req := encodeRequest(e.ses, e.next, 0, []ksOp{o})
		binary.LittleEndian.PutUint32(req[8:], ksSrcEP+1)
		up(t, req, XdpfabXdpfabCounterCNT_UP_OP)
	})
	t.Run("no shared state, key not kernel-resident", func(t *testing.T) {
		o := add(0, 1)
		o.rkey = userKey
		req := encodeRequest(e.ses, e.next, 0, []ksOp{o})
		binary.LittleEndian.PutUint32(req[8:], ksSrcEP+1)
		up(t, req, XdpfabXdpfabCounterCNT_UP_REGION)
	})

	// Several ops in one packet: native fetch-adds, a CSWAP, a read, a
	// non-fetching 32-bit OR.
	served(t, add(0, 5), add(8, 7),
		ksOp{opcode: wire.OpCompareAtomic, dt: atomic.UINT64, op: atomic.CSWAP, addr: 16, count: 1, operand: u64s(9), compare: u64s(0)},
		ksOp{opcode: wire.OpFetchAtomic, dt: atomic.INT64, op: atomic.ATOMIC_READ, addr: 0, count: 1},
		ksOp{opcode: wire.OpAtomic, dt: atomic.UINT32, op: atomic.BOR, addr: 24, count: 2, operand: []byte{1, 0, 0, 0, 2, 0, 0, 0}})

	// User space claims the state mid-session: the program hands the
	// next request up, user space (standing in) executes it and releases
	// at next+1; the program serves the one after.
	c, err := e.kt.Claim(e.key)
	require.NoError(t, err)
	require.Equal(t, e.ses, c.Session)
	require.Equal(t, e.next, c.Next)
	require.Equal(t, uint64(2), c.Served)
	up(t, encodeRequest(e.ses, e.next, 0, []ksOp{add(0, 1)}), XdpfabXdpfabCounterCNT_UP_USER_OWNS)
	// A retransmission of what the program served goes up too while
	// user space owns the state; user space answers it from the ring.
	up(t, encodeRequest(e.ses, e.next-1, wire.HdrRetransmit, []ksOp{add(0, 1)}), XdpfabXdpfabCounterCNT_UP_USER_OWNS)
	buf := make([]byte, KTDataMax)
	n, ok, err := e.kt.Fetch(e.key, e.ses, e.next-1, buf)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 8+8+8+8, n)
	binary.LittleEndian.PutUint64(e.region.Bytes[0:], binary.LittleEndian.Uint64(e.region.Bytes[0:])+1) // user space's execution
	require.NoError(t, e.kt.Release(e.key, e.ses, e.next+1, ksDstEP))
	e.next++
	// The request user space executed is not the program's to answer.
	up(t, encodeRequest(e.ses, e.next-1, wire.HdrRetransmit, []ksOp{add(0, 1)}), XdpfabXdpfabCounterCNT_UP_NOT_NEXT)
	served(t, add(0, 1))
	_, ok, err = e.kt.Fetch(e.key, e.ses, e.next-2, buf)
	require.NoError(t, err)
	require.False(t, ok, "the ring holds only what the program delivered")

	// A new session is user space's: handed up even at seq 1.
	up(t, encodeRequest(e.ses+7, 1, 0, []ksOp{add(0, 1)}), XdpfabXdpfabCounterCNT_UP_NOT_NEXT)
}

// TestKServeIPv6 serves a fetch-add from an IPv6 peer.
func TestKServeIPv6(t *testing.T) {
	e := newKserveEnv(t, peer6, portKS6)
	o := ksOp{opcode: wire.OpFetchAtomic, dt: atomic.UINT64, op: atomic.SUM, addr: 64, count: 1, operand: u64s(3)}
	wantMem, want := expectResponse(t, e.region.Bytes, e.ses, 1, 2, []ksOp{o})
	e.serve(t, peer6, portKS6, encodeRequest(e.ses, 1, 0, []ksOp{o}), want)
	require.Equal(t, wantMem, e.region.Bytes)
}

// TestKServePagesAndRegions serves a packet of 16 fetch-adds that move
// between the pages of two kernel-resident regions (the program looks a
// page up once per run of ops on it): every op lands on its own page of
// its own region, the fetched values are the oracle's.
func TestKServePagesAndRegions(t *testing.T) {
	e := newKserveEnv(t, peer4, portKS4)
	const key2 = krKey + 0x100
	r2, err := NewKernelRegion(ksRegion)
	require.NoError(t, err)
	t.Cleanup(func() { r2.Close() })
	mk := XdpfabMrKey{DomainId: domainID, Key: key2}
	require.NoError(t, e.objs.KrMem.Put(mk, r2.Map))
	require.NoError(t, e.objs.KrRegions.Put(mk, XdpfabKrRegion{Len: ksRegion, AuthDigest: ksAuth,
		Flags: KREnabled | KRRemoteRead | KRRemoteWrite}))
	t.Cleanup(func() { _ = e.objs.KrRegions.Delete(mk); _ = e.objs.KrMem.Delete(mk) })
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range e.region.Bytes {
		e.region.Bytes[i] = byte(rng.Uint32())
		r2.Bytes[i] = byte(rng.Uint32())
	}
	// The oracle sees the two regions end to end: region 2's op at addr
	// is at ksRegion+addr there.
	targets := []struct {
		second bool
		addr   uint64
	}{{false, 0}, {false, 0}, {false, KRPage}, {false, 8}, {true, 0}, {true, 0}, {false, KRPage},
		{true, KRPage + 8}, {false, 0}, {true, 8}, {true, KRPage + 8}, {false, KRPage + 16},
		{false, 16}, {true, 0}, {true, KRPage}, {false, 0}}
	require.Len(t, targets, wire.MaxOps)
	var ops, oracle []ksOp
	for i, tg := range targets {
		o := ksOp{opcode: wire.OpFetchAtomic, dt: atomic.UINT64, op: atomic.SUM, addr: tg.addr, count: 1,
			operand: u64s(uint64(i+1) << (4 * (i % 8)))}
		oo := o
		if tg.second {
			o.rkey = key2
			oo.addr += ksRegion
		}
		ops, oracle = append(ops, o), append(oracle, oo)
	}
	both := append(bytes.Clone(e.region.Bytes), r2.Bytes...)
	wantMem, want := expectResponse(t, both, e.ses, e.next, e.next+1, oracle)
	before := e.counters(t)
	e.serve(t, peer4, portKS4, encodeRequest(e.ses, e.next, 0, ops), want)
	require.Equal(t, wantMem[:ksRegion], e.region.Bytes, "region 1")
	require.Equal(t, wantMem[ksRegion:], r2.Bytes, "region 2")
	after := e.counters(t)
	require.Equal(t, uint64(len(ops)), after[XdpfabXdpfabCounterCNT_KERN_OPS]-before[XdpfabXdpfabCounterCNT_KERN_OPS])
}
