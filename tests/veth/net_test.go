package veth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/datapath/lossy"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testenv"
	"github.com/xdpfab/xdpfab/mr"
)

// side is one of the two namespaces: initiators live in A, targets in B.
type side int

const (
	sideA side = iota
	sideB
)

var sides = [...]side{sideA, sideB}

func (s side) String() string { return [...]string{"A", "B"}[s] }

func (s side) other() side { return 1 - s }

// basePort is the UDP port of a side's first node; node i uses basePort+i.
// Ports are fixed before anything opens so a transport case can prepare
// them (the XDP program's port map).
var basePort = [2]uint16{7100, 7200}

// nodeOpts configures one node.
type nodeOpts struct {
	epAttr fabric.EPAttr
	avAttr av.Attr
	memLen int // registered bytes (default 1 MiB + 64 KiB)
	// lossy, if set, makes the endpoint's transport a kernel UDP socket
	// opened in the node's namespace wrapped by datapath/lossy with it.
	lossy *lossy.Config
	// noRemoteCntr binds no counter for remote writes and reads: the XDP
	// program serves atomics only to endpoints without one.
	noRemoteCntr bool
}

// netOpts configures newNet.
type netOpts struct {
	nA, nB int                          // nodes per side (default 1 each)
	domain func(*fabric.DomainAttr)     // adjusts the case's DomainAttr (BusyPoll, ...)
	node   func(s side, i int) nodeOpts // per-node options (default zero)
	// beforeNodes runs once the namespaces and the veth pair exist,
	// before the transport case's setup and the nodes.
	beforeNodes func(*testNet)
	// link, if set, builds A's and B's namespaces and what joins them
	// instead of one veth pair (e.g. through a router namespace); the
	// Veth it returns names A's and B's ends.
	link func(t testing.TB) (a, b *testenv.Netns, v *testenv.Veth)
}

// testNet is two namespaces joined by veth, with nodes on each side and
// every node's AV holding every node of the other side.
type testNet struct {
	ns    [2]*testenv.Netns
	veth  *testenv.Veth
	ports [2][]uint16
	nodes [2][]*node
}

// addr is the veth address of side s.
func (n *testNet) addr(s side) netip.Addr {
	if s == sideA {
		return n.veth.AddrA.Addr()
	}
	return n.veth.AddrB.Addr()
}

// iface is the veth end of side s (in n.ns[s]).
func (n *testNet) iface(s side) string {
	if s == sideA {
		return n.veth.NameA
	}
	return n.veth.NameB
}

// target is B's first node.
func (n *testNet) target() *node { return n.nodes[sideB][0] }

// newNet builds the namespaces, lets the transport case prepare them, and
// opens and connects the nodes. Everything is removed when t ends.
func newNet(t testing.TB, tc transportCase, o netOpts) *testNet {
	t.Helper()
	count := [2]int{max(o.nA, 1), max(o.nB, 1)}
	n := &testNet{}
	if o.link != nil {
		n.ns[sideA], n.ns[sideB], n.veth = o.link(t)
	} else {
		n.ns[sideA], n.ns[sideB] = testenv.NewNetns(t), testenv.NewNetns(t)
		n.veth = testenv.NewVeth(t, n.ns[sideA], n.ns[sideB], testenv.VethOptions{})
	}
	for _, s := range sides {
		for i := range count[s] {
			n.ports[s] = append(n.ports[s], basePort[s]+uint16(i))
		}
	}
	if o.beforeNodes != nil {
		o.beforeNodes(n)
	}
	attr := tc.setup(t, n)
	if o.domain != nil {
		o.domain(&attr)
	}
	for _, s := range sides {
		for i, port := range n.ports[s] {
			var no nodeOpts
			if o.node != nil {
				no = o.node(s, i)
			}
			da := attr
			da.Addr, da.Port = n.addr(s), port
			n.nodes[s] = append(n.nodes[s], openNode(t, fmt.Sprintf("%v%d", s, i), n.ns[s], da, no))
		}
	}
	for _, a := range n.nodes[sideA] {
		for _, b := range n.nodes[sideB] {
			a.peers = append(a.peers, insert(t, a.av, b.ep.GetName()))
			b.peers = append(b.peers, insert(t, b.av, a.ep.GetName()))
		}
	}
	return n
}

func insert(t testing.TB, v *av.AV, name []byte) fi.Addr {
	t.Helper()
	fa := make([]fi.Addr, 1)
	cnt, err := v.Insert([][]byte{name}, fa, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 1, cnt)
	return fa[0]
}

// do runs fn with the calling goroutine's thread inside ns.
func do(t testing.TB, ns *testenv.Netns, fn func() error) {
	t.Helper()
	require.NoError(t, ns.Do(fn), "in netns %s", ns.Name)
}

// node is one domain with one endpoint, its AV, CQs, a counter of the
// operations it executed as a target, and a registered region.
type node struct {
	name       string
	dom        *fabric.Domain
	ep         *fabric.Endpoint
	av         *av.AV
	txCQ, rxCQ *fabric.CQ
	rcntr      *fabric.Cntr
	mem        []byte
	region     *mr.MR
	lossy      *lossy.Transport // the endpoint's transport wrapper, if any
	peers      []fi.Addr        // the other side's nodes, by index
	epClosed   bool
	closed     bool
}

// openNode opens a node whose domain and endpoint (its socket) are created
// inside ns.
func openNode(t testing.TB, name string, ns *testenv.Netns, da fabric.DomainAttr, o nodeOpts) *node {
	t.Helper()
	n := &node{name: name}
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	do(t, ns, func() error {
		if o.lossy != nil {
			// The wrapped transport is the one the case uses: AF_XDP for
			// the xdp cases (the fabric configures it through the
			// wrapper), the kernel socket otherwise.
			var u datapath.Transport
			var err error
			local := netip.AddrPortFrom(da.Addr, da.Port)
			if da.Transport == fabric.TransportXDP {
				u, err = afxdp.Open(afxdp.Options{Local: local})
			} else {
				u, err = udp.Listen(local, udp.Options{})
			}
			if err != nil {
				return err
			}
			if n.lossy, err = lossy.Wrap(u, *o.lossy); err != nil {
				u.Close()
				return err
			}
			o.epAttr.Transport = n.lossy
		}
		if n.dom, err = f.Domain(da, name); err != nil {
			return err
		}
		n.ep, err = n.dom.Endpoint(o.epAttr, name)
		return err
	})
	t.Cleanup(func() { require.NoError(t, n.close()) })
	n.av, err = n.dom.AVOpen(o.avAttr, name)
	require.NoError(t, err)
	n.txCQ, err = n.dom.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec, Format: fabric.CQFormatTagged}, "txcq")
	require.NoError(t, err)
	n.rxCQ, err = n.dom.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec, Format: fabric.CQFormatTagged}, "rxcq")
	require.NoError(t, err)
	n.rcntr, err = n.dom.CntrOpen(fabric.CntrAttr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	require.NoError(t, n.ep.Bind(n.av, 0))
	require.NoError(t, n.ep.Bind(n.txCQ, fi.TRANSMIT))
	require.NoError(t, n.ep.Bind(n.rxCQ, fi.RECV))
	if !o.noRemoteCntr {
		require.NoError(t, n.ep.Bind(n.rcntr, fi.REMOTE_WRITE|fi.REMOTE_READ))
	}
	require.NoError(t, n.ep.Enable())
	if o.memLen == 0 {
		o.memLen = 1<<20 + 64<<10
	}
	n.mem = make([]byte, o.memLen)
	n.region, err = n.dom.MRReg(n.mem, fi.REMOTE_READ|fi.REMOTE_WRITE, 0, 0x1000+uint64(da.Port), 0, nil)
	require.NoError(t, err)
	return n
}

// closeEndpoint closes the node's endpoint (once). Afterwards the node's
// memory may be read directly: Close waits for the datapath goroutines.
func (n *node) closeEndpoint() error {
	if n.epClosed || n.ep == nil {
		return nil
	}
	n.epClosed = true
	return n.ep.Close()
}

// close closes whatever of the node is open, endpoint first.
func (n *node) close() error {
	if n.closed {
		return nil
	}
	n.closed = true
	errs := []error{n.closeEndpoint()}
	add := func(open bool, c func() error) {
		if open {
			errs = append(errs, c())
		}
	}
	add(n.rcntr != nil, func() error { return n.rcntr.Close() })
	add(n.region != nil, func() error { return n.region.Close() })
	add(n.txCQ != nil, func() error { return n.txCQ.Close() })
	add(n.rxCQ != nil, func() error { return n.rxCQ.Close() })
	add(n.av != nil, func() error { return n.av.Close() })
	add(n.dom != nil, func() error { return n.dom.Close() })
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close node %s: %w", n.name, err)
	}
	return nil
}

// compTimeout bounds every wait for one completion in a healthy network.
const compTimeout = 10 * time.Second

// waitComp reads one completion from cq, failing on an error completion.
func waitComp(t testing.TB, cq *fabric.CQ) fabric.CQEntry {
	t.Helper()
	buf := make([]fabric.CQEntry, 1)
	n, err := cq.SRead(buf, int(compTimeout/time.Millisecond))
	if errors.Is(err, fi.EAVAIL) {
		e, rerr := cq.ReadErr(0)
		require.NoError(t, rerr)
		t.Fatalf("error completion: %v (ctx %v)", e.Err, e.Context)
	}
	require.NoError(t, err, "no completion within %v", compTimeout)
	require.Equal(t, 1, n)
	return buf[0]
}

// read reads size bytes of peer's region key at off through RMA.
func (n *node) read(t testing.TB, peer fi.Addr, off uint64, size int, key uint64) []byte {
	t.Helper()
	buf := make([]byte, size)
	require.NoError(t, n.ep.Read(buf, mr.Desc{}, peer, off, key, "rma-read"))
	require.Equal(t, "rma-read", waitComp(t, n.txCQ).Context)
	return buf
}

// write writes data into peer's region key at off through RMA.
func (n *node) write(t testing.TB, peer fi.Addr, off uint64, data []byte, key uint64) {
	t.Helper()
	require.NoError(t, n.ep.Write(data, mr.Desc{}, peer, off, key, "rma-write"))
	require.Equal(t, "rma-write", waitComp(t, n.txCQ).Context)
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// fetchAdds is one initiator's share of a fetch-add workload.
type fetchAdds struct {
	n       *node
	peer    fi.Addr
	key     uint64
	off     uint64 // the uint64 counter's offset in the region
	total   int    // operations to complete
	depth   int    // operations kept in flight
	timeout time.Duration
	// altEvery > 0 sends every altEvery-th fetch-add to the counter at
	// altOff of region altKey instead; run returns its fetched values
	// apart (alt).
	altEvery int
	altKey   uint64
	altOff   uint64
	alt      *[]uint64
}

var one = le64(1)

// run posts w.total uint64 fetch-adds of 1 with w.depth in flight and
// returns the fetched values in completion order. It fails on the first
// error completion and when w.timeout passes. It runs on any goroutine:
// it reports instead of calling t.
func (w fetchAdds) run() ([]uint64, error) {
	deadline := time.Now().Add(w.timeout)
	results := make([][8]byte, w.depth)
	isAlt := make([]bool, w.depth)
	fetched := make([]uint64, 0, w.total)
	posted, done := 0, 0
	post := func(slot int) error {
		for {
			key, off := w.key, w.off
			isAlt[slot] = w.altEvery > 0 && posted%w.altEvery == w.altEvery-1
			if isAlt[slot] {
				key, off = w.altKey, w.altOff
			}
			err := w.n.ep.FetchAtomic(one, 1, mr.Desc{}, results[slot][:], mr.Desc{}, w.peer, off, key,
				fatomic.UINT64, fatomic.SUM, slot)
			if !errors.Is(err, fi.EAGAIN) {
				if err == nil {
					posted++
				}
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: posting still refused with FI_EAGAIN at the deadline", w.n.name)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	for slot := 0; slot < w.depth && posted < w.total; slot++ {
		if err := post(slot); err != nil {
			return fetched, err
		}
	}
	comps := make([]fabric.CQEntry, w.depth)
	for done < w.total {
		if time.Now().After(deadline) {
			return fetched, fmt.Errorf("%s: %d of %d fetch-adds completed within %v", w.n.name, done, w.total, w.timeout)
		}
		k, err := w.n.txCQ.SRead(comps, 100)
		switch {
		case errors.Is(err, fi.EAGAIN):
			continue
		case errors.Is(err, fi.EAVAIL):
			e, rerr := w.n.txCQ.ReadErr(0)
			if rerr != nil {
				return fetched, rerr
			}
			return fetched, fmt.Errorf("%s: fetch-add (slot %v) failed: %w", w.n.name, e.Context, e.Err)
		case err != nil:
			return fetched, err
		}
		for _, c := range comps[:k] {
			slot := c.Context.(int)
			done++
			if isAlt[slot] {
				*w.alt = append(*w.alt, binary.LittleEndian.Uint64(results[slot][:]))
			} else {
				fetched = append(fetched, binary.LittleEndian.Uint64(results[slot][:]))
			}
			if posted < w.total {
				if err := post(slot); err != nil {
					return fetched, err
				}
			}
		}
	}
	return fetched, nil
}

// checkPermutation checks that the fetched values of all initiators are
// 0..N-1, each exactly once: every fetch-add executed exactly once.
func checkPermutation(t testing.TB, all [][]uint64) {
	t.Helper()
	total := 0
	for _, f := range all {
		total += len(f)
	}
	seen := make([]bool, total)
	dups, outside := 0, 0
	for _, f := range all {
		for _, v := range f {
			switch {
			case v >= uint64(total):
				outside++
			case seen[v]:
				dups++
			default:
				seen[v] = true
			}
		}
	}
	require.Zero(t, dups, "fetched values seen twice (an op executed twice)")
	require.Zero(t, outside, "fetched values >= %d (an op executed twice or a stray one)", total)
}
