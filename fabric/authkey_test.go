package fabric_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// Authorization keys end to end (fi_mr(3) auth_key, fi_av(3)
// fi_av_insert_auth_key / FI_AUTH_KEY): a request presents the key of its
// destination's AV entry, else its domain's; a region serves only requests
// presenting its own key (fi_mr_attr.auth_key, else its domain's), a
// keyless region only requests presenting none.

// authInitiator is an endpoint whose AV holds authorization keys
// (FI_AV_AUTH_KEY), inserted before Enable so the endpoint is enabled
// against them.
type authInitiator struct {
	ep   *fabric.Endpoint
	av   *av.AV
	txCQ *fabric.CQ
	keys []fi.Addr // handles of the keys given to newAuthInitiator, in order
}

func newAuthInitiator(t testing.TB, domKey []byte, keys ...[]byte) *authInitiator {
	t.Helper()
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	d, err := f.Domain(fabric.DomainAttr{Addr: netip.MustParseAddr("127.0.0.1"), Transport: fabric.TransportUDP,
		AuthKey: domKey}, "dom")
	require.NoError(t, err)
	s := &authInitiator{}
	s.ep, err = d.Endpoint(fabric.EPAttr{}, "ep")
	require.NoError(t, err)
	s.av, err = av.Open(av.Attr{}, "av", av.WithAVAuthKey(), av.WithMirror(nil))
	require.NoError(t, err)
	for _, k := range keys {
		h, err := s.av.InsertAuthKey(k, 0)
		require.NoError(t, err)
		s.keys = append(s.keys, h)
	}
	s.txCQ, err = d.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec}, "txcq")
	require.NoError(t, err)
	require.NoError(t, s.ep.Bind(s.av, 0))
	require.NoError(t, s.ep.Bind(s.txCQ, fi.TRANSMIT))
	require.NoError(t, s.ep.Enable())
	t.Cleanup(func() {
		require.NoError(t, s.ep.Close())
		require.NoError(t, s.txCQ.Close())
		require.NoError(t, s.av.Close())
		require.NoError(t, d.Close())
	})
	return s
}

// insert puts name into the AV bound to auth key handle key (FI_AUTH_KEY),
// or to none for fi.AddrNotAvail.
func (s *authInitiator) insert(t testing.TB, name []byte, key fi.Addr) fi.Addr {
	t.Helper()
	fa := []fi.Addr{key}
	var flags fi.Flags
	if key != fi.AddrNotAvail {
		flags = fi.AUTH_KEY
	}
	n, err := s.av.Insert([][]byte{name}, fa, flags, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return fa[0]
}

// peerOp is one initiator endpoint and its destination handle for a target.
type peerOp struct {
	ep   *fabric.Endpoint
	cq   *fabric.CQ
	dest fi.Addr
}

// authTarget opens a target endpoint (serving any peer) in a domain with
// domKey, without the default region.
func authTarget(t testing.TB, domKey []byte) *side {
	t.Helper()
	return newSide(t, sideOpts{dom: fabric.DomainAttr{AuthKey: domKey}, ep: fabric.EPAttr{AcceptUnknown: true},
		memLen: -1, noRxCQ: true})
}

// regAuth registers mem (filled with fill first) on s's domain under key
// (nil: the domain's) with remote read and write access.
func regAuth(t testing.TB, s *side, size int, fill byte, rkey uint64, key []byte) *mr.MR {
	t.Helper()
	mem := bytes.Repeat([]byte{fill}, size) // written before registration publishes it
	m, err := s.dom.MRRegAttr(&mr.Attr{IOV: [][]byte{mem}, Access: fi.REMOTE_READ | fi.REMOTE_WRITE,
		RequestedKey: rkey, AuthKey: key}, 0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

// denied checks that fetch-add, RMA write and RMA read on region rkey
// each end in an FI_EACCES error completion without touching the local
// result or read buffers.
func denied(t *testing.T, p peerOp, rkey uint64) {
	t.Helper()
	res := bytes.Repeat([]byte{0x5a}, 8)
	require.NoError(t, p.ep.FetchAtomic(le(1), 1, mr.Desc{}, res, mr.Desc{}, p.dest, 0, rkey,
		fatomic.UINT64, fatomic.SUM, "fetch"))
	e := errComp(t, p.cq)
	require.Equal(t, fi.EACCES, e.Err)
	require.Equal(t, "fetch", e.Context)
	require.Equal(t, bytes.Repeat([]byte{0x5a}, 8), res, "result of a refused fetch")

	require.NoError(t, p.ep.Write([]byte("intruder"), mr.Desc{}, p.dest, 16, rkey, "write"))
	e = errComp(t, p.cq)
	require.Equal(t, fi.EACCES, e.Err)
	require.Equal(t, "write", e.Context)

	rbuf := bytes.Repeat([]byte{0x5a}, 8)
	require.NoError(t, p.ep.Read(rbuf, mr.Desc{}, p.dest, 0, rkey, "read"))
	e = errComp(t, p.cq)
	require.Equal(t, fi.EACCES, e.Err)
	require.Equal(t, "read", e.Context)
	require.Equal(t, bytes.Repeat([]byte{0x5a}, 8), rbuf, "buffer of a refused read")
}

// remoteRead reads n bytes at off of region rkey through p, which must be
// served.
func remoteRead(t *testing.T, p peerOp, off uint64, n int, rkey uint64) []byte {
	t.Helper()
	buf := make([]byte, n)
	require.NoError(t, p.ep.Read(buf, mr.Desc{}, p.dest, off, rkey, "read"))
	require.Equal(t, "read", comp(t, p.cq).Context)
	return buf
}

// served checks that p may fetch-add, write and read region rkey, whose
// first 24 bytes hold fill when it is called (untouched by refused ops).
func served(t *testing.T, p peerOp, rkey uint64, fill byte) {
	t.Helper()
	orig := bytes.Repeat([]byte{fill}, 24)
	require.Equal(t, orig, remoteRead(t, p, 0, 24, rkey), "memory before (refused ops left it untouched)")

	res := make([]byte, 8)
	require.NoError(t, p.ep.FetchAtomic(le(3), 1, mr.Desc{}, res, mr.Desc{}, p.dest, 0, rkey,
		fatomic.UINT64, fatomic.SUM, "fetch"))
	require.Equal(t, "fetch", comp(t, p.cq).Context)
	before := binary.LittleEndian.Uint64(orig)
	require.Equal(t, before, binary.LittleEndian.Uint64(res))

	require.NoError(t, p.ep.Write([]byte("welcome!"), mr.Desc{}, p.dest, 16, rkey, "write"))
	require.Equal(t, "write", comp(t, p.cq).Context)

	got := remoteRead(t, p, 0, 24, rkey)
	require.Equal(t, before+3, binary.LittleEndian.Uint64(got[:8]))
	require.Equal(t, orig[8:16], got[8:16])
	require.Equal(t, "welcome!", string(got[16:]))
}

// TestAuthKeyRegionKeyViaAV: a region registered with key K2 in a domain
// whose key is K1 is refused (FI_EACCES, memory untouched) to a peer
// presenting K1 (its domain's key), and served to a peer presenting K2
// through an AV entry inserted with FI_AUTH_KEY, which in turn is refused
// the regions under the domain's key K1.
func TestAuthKeyRegionKeyViaAV(t *testing.T) {
	k1, k2 := []byte("domain-1"), []byte("region-2")
	target := authTarget(t, k1)
	r2 := regAuth(t, target, 4096, 0x22, 0x22, k2)
	rDom := regAuth(t, target, 4096, 0x11, 0x11, nil)
	require.Equal(t, k1, rDom.AuthKey())
	require.Equal(t, k2, r2.AuthKey())

	viaDomain := newSide(t, sideOpts{dom: fabric.DomainAttr{AuthKey: k1}, memLen: -1, noRxCQ: true})
	pDomain := peerOp{viaDomain.ep, viaDomain.txCQ, viaDomain.insert(t, target.ep.GetName())}

	// The initiator's own domain has key K1 too: the AV entry's key wins.
	keyed := newAuthInitiator(t, k1, k2)
	pK2 := peerOp{keyed.ep, keyed.txCQ, keyed.insert(t, target.ep.GetName(), keyed.keys[0])}
	var kb [av.AuthKeySize]byte
	n, err := keyed.av.LookupAuthKey(pK2.dest, kb[:])
	require.NoError(t, err)
	require.Equal(t, k2, kb[:n])

	denied(t, pDomain, r2.Key())
	served(t, pK2, r2.Key(), 0x22)

	denied(t, pK2, rDom.Key())
	served(t, pDomain, rDom.Key(), 0x11)
}

// TestAuthKeyKeylessRegions: in a domain without a key, a region without
// key is refused to peers presenting a key (through the AV or their
// domain) and served to a peer presenting none; a region with a key is
// refused to the peer presenting none and served to peers presenting it,
// whichever way they present it.
func TestAuthKeyKeylessRegions(t *testing.T) {
	k := []byte("region-k")
	target := authTarget(t, nil)
	plain := regAuth(t, target, 4096, 0x33, 0x33, nil)
	keyedRegion := regAuth(t, target, 4096, 0x44, 0x44, k)
	require.Nil(t, plain.AuthKey())
	require.Zero(t, plain.AuthDigest())

	none := newSide(t, sideOpts{memLen: -1, noRxCQ: true})
	pNone := peerOp{none.ep, none.txCQ, none.insert(t, target.ep.GetName())}
	viaAV := newAuthInitiator(t, nil, k)
	pAV := peerOp{viaAV.ep, viaAV.txCQ, viaAV.insert(t, target.ep.GetName(), viaAV.keys[0])}
	viaDomain := newSide(t, sideOpts{dom: fabric.DomainAttr{AuthKey: k}, memLen: -1, noRxCQ: true})
	pDomain := peerOp{viaDomain.ep, viaDomain.txCQ, viaDomain.insert(t, target.ep.GetName())}
	// An AV with auth keys whose entry for the target has none presents
	// the initiator's domain key.
	otherKey := newAuthInitiator(t, []byte("other-key"), k)
	pOther := peerOp{otherKey.ep, otherKey.txCQ, otherKey.insert(t, target.ep.GetName(), fi.AddrNotAvail)}

	for _, p := range []peerOp{pAV, pDomain, pOther} {
		denied(t, p, plain.Key())
	}
	denied(t, pNone, keyedRegion.Key())
	denied(t, pOther, keyedRegion.Key())

	served(t, pNone, plain.Key(), 0x33)
	served(t, pAV, keyedRegion.Key(), 0x44)
	require.Equal(t, []byte("welcome!"), remoteRead(t, pDomain, 16, 8, keyedRegion.Key()),
		"the peer presenting the key through its domain reaches the same region")
}

// TestAuthKeyInsertedAfterEnable: an auth key inserted after the endpoint
// was enabled does not apply to it (fi_av_insert_auth_key), so an
// operation to an address bound to it fails at once with FI_EACCES; the
// endpoint's other destinations are unaffected.
func TestAuthKeyInsertedAfterEnable(t *testing.T) {
	k := []byte("late-key")
	target := authTarget(t, nil)
	keyedRegion := regAuth(t, target, 4096, 0x55, 0x55, k)
	other := authTarget(t, nil)
	plain := regAuth(t, other, 4096, 0x66, 0x66, nil)

	s := newAuthInitiator(t, nil)
	late, err := s.av.InsertAuthKey(k, 0)
	require.NoError(t, err)
	dest := s.insert(t, target.ep.GetName(), late)
	require.ErrorIs(t, s.ep.Write([]byte("x"), mr.Desc{}, dest, 0, keyedRegion.Key(), "w"), fi.EACCES)
	res := make([]byte, 8)
	require.ErrorIs(t, s.ep.FetchAtomic(le(1), 1, mr.Desc{}, res, mr.Desc{}, dest, 0, keyedRegion.Key(),
		fatomic.UINT64, fatomic.SUM, "f"), fi.EACCES)
	noComp(t, s.txCQ)

	p := peerOp{s.ep, s.txCQ, s.insert(t, other.ep.GetName(), fi.AddrNotAvail)}
	served(t, p, plain.Key(), 0x66)
}

// TestAuthKeyAllocs: an operation to a destination bound to an auth key
// allocates nothing per operation (the digest is looked up, not computed).
func TestAuthKeyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	k := []byte("alloc-k!")
	target := authTarget(t, nil)
	r := regAuth(t, target, 4096, 0, 0x77, k)
	s := newAuthInitiator(t, []byte("domain"), []byte("unused!!"), k)
	dest := s.insert(t, target.ep.GetName(), s.keys[1])
	one := le(1)
	res := make([]byte, 8)
	buf := make([]fabric.CQEntry, 1)
	op := func() {
		if err := s.ep.FetchAtomic(one, 1, mr.Desc{}, res, mr.Desc{}, dest, 0, r.Key(),
			fatomic.UINT64, fatomic.SUM, opCtx); err != nil {
			t.Fatal(err)
		}
		block(t, s.txCQ, buf, 1)
	}
	for range 200 {
		op()
	}
	allocs := testing.AllocsPerRun(500, op)
	require.Zero(t, allocs)
	require.Equal(t, uint64(200+500), binary.LittleEndian.Uint64(res), "every fetch-add was served (AllocsPerRun runs once more)")
}
