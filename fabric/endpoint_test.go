package fabric_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/eq"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// bare is an endpoint with nothing bound, plus objects to bind.
type bare struct {
	dom  *fabric.Domain
	ep   *fabric.Endpoint
	av   *av.AV
	cq   *fabric.CQ
	cntr *fabric.Cntr
}

func newBare(t *testing.T, attr fabric.EPAttr) *bare {
	t.Helper()
	b := &bare{dom: openDomain(t)}
	var err error
	b.ep, err = b.dom.Endpoint(attr, nil)
	require.NoError(t, err)
	b.av, err = av.Open(av.Attr{}, nil, av.WithMirror(nil))
	require.NoError(t, err)
	b.cq, err = b.dom.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	b.cntr, err = b.dom.CntrOpen(fabric.CntrAttr{}, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		if !b.ep.Closed() {
			require.NoError(t, b.ep.Close())
		}
		require.NoError(t, b.cntr.Close())
		require.NoError(t, b.cq.Close())
		require.NoError(t, b.av.Close())
	})
	return b
}

func TestEndpointOpenAttrs(t *testing.T) {
	d := openDomain(t)
	for _, tc := range []struct {
		name string
		attr fabric.EPAttr
		want error
	}{
		{"type MSG", fabric.EPAttr{Type: 1}, fi.ENOPROTOOPT},
		{"negative tx size", fabric.EPAttr{TxSize: -1}, fi.EINVAL},
		{"huge rx size", fabric.EPAttr{RxSize: 1<<16 + 1}, fi.EINVAL},
		{"op flag", fabric.EPAttr{OpFlags: fi.MULTI_RECV}, fi.EBADFLAGS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Endpoint(tc.attr, nil)
			require.ErrorIs(t, err, tc.want)
		})
	}
	ep, err := d.Endpoint(fabric.EPAttr{Type: fabric.EPRDM}, "ctx")
	require.NoError(t, err)
	require.Equal(t, "ctx", ep.Context())
	require.Equal(t, fi.ClassEP, ep.Class())
	name := ep.GetName()
	require.Len(t, name, 16, "sockaddr_in")
	require.Equal(t, ep.LocalAddr().Port(), binary.BigEndian.Uint16(name[2:4]))
	require.True(t, ep.LocalAddr().Addr().IsLoopback())
	require.NoError(t, ep.Close())
	require.ErrorIs(t, ep.Close(), fi.EINVAL)
	require.True(t, ep.Closed())
}

func TestEndpointBindRules(t *testing.T) {
	b := newBare(t, fabric.EPAttr{})
	ep := b.ep
	require.ErrorIs(t, ep.Bind(b.av, fi.SEND), fi.EBADFLAGS)
	require.NoError(t, ep.Bind(b.av, 0))
	require.ErrorIs(t, ep.Bind(b.av, 0), fi.EINVAL, "AV twice")

	require.ErrorIs(t, ep.Bind(b.cq, 0), fi.EBADFLAGS, "CQ without a direction")
	require.ErrorIs(t, ep.Bind(b.cq, fi.SELECTIVE_COMPLETION), fi.EBADFLAGS)
	require.ErrorIs(t, ep.Bind(b.cq, fi.TRANSMIT|fi.READ), fi.EBADFLAGS)
	require.NoError(t, ep.Bind(b.cq, fi.TRANSMIT))
	require.ErrorIs(t, ep.Bind(b.cq, fi.TRANSMIT), fi.EINVAL, "transmit CQ twice")
	require.ErrorIs(t, ep.Bind(b.cq, fi.TRANSMIT|fi.RECV), fi.EINVAL)

	require.ErrorIs(t, ep.Bind(b.cntr, 0), fi.EBADFLAGS)
	require.ErrorIs(t, ep.Bind(b.cntr, fi.TRANSMIT|fi.COMPLETION), fi.EBADFLAGS)
	require.NoError(t, ep.Bind(b.cntr, fi.SEND|fi.REMOTE_WRITE))
	require.ErrorIs(t, ep.Bind(b.cntr, fi.REMOTE_WRITE), fi.EINVAL, "REMOTE_WRITE counter twice")
	require.NoError(t, ep.Bind(b.cntr, fi.READ))

	q, err := eq.Open(eq.Attr{}, nil)
	require.NoError(t, err)
	defer q.Close()
	require.ErrorIs(t, ep.Bind(q, 0), fi.EINVAL, "an EQ does not bind to an endpoint")

	closedCQ, err := b.dom.CQOpen(fabric.CQAttr{}, nil)
	require.NoError(t, err)
	require.NoError(t, closedCQ.Close())
	require.ErrorIs(t, ep.Bind(closedCQ, fi.RECV), fi.EINVAL, "closed CQ")
	closedCntr, err := b.dom.CntrOpen(fabric.CntrAttr{}, nil)
	require.NoError(t, err)
	require.NoError(t, closedCntr.Close())
	require.ErrorIs(t, ep.Bind(closedCntr, fi.RECV), fi.EINVAL, "closed counter")

	require.NoError(t, ep.Enable())
	require.ErrorIs(t, ep.Enable(), fi.EOPBADSTATE, "enable twice")
	require.ErrorIs(t, ep.Bind(b.cq, fi.RECV), fi.EOPBADSTATE, "bind after enable")
	require.ErrorIs(t, ep.Bind(b.cntr, fi.WRITE), fi.EOPBADSTATE)
	require.ErrorIs(t, b.cntr.Close(), fi.EBUSY, "counter bound")
	require.NoError(t, ep.Close())
	require.ErrorIs(t, ep.Bind(b.cq, fi.RECV), fi.EINVAL, "bind after close")
	require.ErrorIs(t, ep.Enable(), fi.EINVAL, "enable after close")
}

func TestEndpointEnableRequirements(t *testing.T) {
	t.Run("no AV", func(t *testing.T) {
		b := newBare(t, fabric.EPAttr{})
		require.NoError(t, b.ep.Bind(b.cq, fi.TRANSMIT|fi.RECV))
		require.ErrorIs(t, b.ep.Enable(), fi.ENOAV)
	})
	t.Run("no CQ or counter", func(t *testing.T) {
		b := newBare(t, fabric.EPAttr{})
		require.NoError(t, b.ep.Bind(b.av, 0))
		require.ErrorIs(t, b.ep.Enable(), fi.ENOCQ)
		require.NoError(t, b.ep.Bind(b.cntr, fi.WRITE))
		require.NoError(t, b.ep.Enable(), "a counter alone is enough")
	})
	t.Run("data calls before Enable", func(t *testing.T) {
		b := newBare(t, fabric.EPAttr{})
		require.NoError(t, b.ep.Bind(b.av, 0))
		require.NoError(t, b.ep.Bind(b.cq, fi.TRANSMIT|fi.RECV))
		peer := (&side{av: b.av}).insert(t, b.ep.GetName())
		buf := make([]byte, 8)
		for name, call := range map[string]func() error{
			"send":   func() error { return b.ep.Send(buf, mr.Desc{}, peer, nil) },
			"inject": func() error { return b.ep.Inject(buf, peer) },
			"recv":   func() error { return b.ep.Recv(buf, mr.Desc{}, fi.AddrUnspec, nil) },
			"write":  func() error { return b.ep.Write(buf, mr.Desc{}, peer, 0, 1, nil) },
			"read":   func() error { return b.ep.Read(buf, mr.Desc{}, peer, 0, 1, nil) },
			"atomic": func() error {
				return b.ep.Atomic(buf, 1, mr.Desc{}, peer, 0, 1, fatomic.UINT64, fatomic.SUM, nil)
			},
			"fetch": func() error {
				return b.ep.FetchAtomic(buf, 1, mr.Desc{}, buf, mr.Desc{}, peer, 0, 1, fatomic.UINT64, fatomic.SUM, nil)
			},
		} {
			require.ErrorIs(t, call(), fi.EOPBADSTATE, name)
		}
		require.NoError(t, b.ep.Enable())
		require.NoError(t, b.ep.Close())
		require.ErrorIs(t, b.ep.Send(buf, mr.Desc{}, peer, nil), fi.EOPBADSTATE, "after close")
		require.ErrorIs(t, b.ep.Recv(buf, mr.Desc{}, fi.AddrUnspec, nil), fi.EOPBADSTATE, "after close")
	})
}

func TestDomainCloseAndInfo(t *testing.T) {
	f, err := fabric.OpenFabric("", "fctx")
	require.NoError(t, err)
	require.Equal(t, fabric.ProviderName, f.Name())
	for _, tc := range []struct {
		addr   string
		format fi.AddrFormat
	}{{"127.0.0.1", fi.FormatSockaddr4}, {"::1", fi.FormatSockaddr6}} {
		d, err := f.Domain(fabric.DomainAttr{Addr: netip.MustParseAddr(tc.addr), Transport: fabric.TransportUDP,
			MRMode: mr.ModeLocal | mr.ModeProvKey}, nil)
		require.NoError(t, err)
		info := d.Info()
		require.Equal(t, fabric.ProviderName, info.FabricAttr.ProvName)
		require.Equal(t, tc.format, info.AddrFormat)
		require.Equal(t, mr.ModeLocal|mr.ModeProvKey, info.DomainAttr.MRMode)
		require.Equal(t, fabric.MaxMsgSize, info.EPAttr.MaxMsgSize)
		require.Equal(t, fabric.InjectSize, info.TxAttr.InjectSize)
		require.Equal(t, mr.IOVLimit, info.DomainAttr.MRIovLimit)
		require.Equal(t, mr.KeySize, info.DomainAttr.MRKeySize)
		for _, c := range []fi.Flags{fi.MSG, fi.RMA, fi.ATOMIC, fi.SOURCE, fi.AV_USER_ID, fi.DIRECTED_RECV, fi.RMA_EVENT} {
			require.NotZero(t, info.Caps&c, "caps %#x lack %#x", uint64(info.Caps), uint64(c))
		}

		ep, err := d.Endpoint(fabric.EPAttr{}, nil)
		require.NoError(t, err)
		if tc.format == fi.FormatSockaddr6 {
			require.Len(t, ep.GetName(), 28, "sockaddr_in6")
		}
		// The domain's max_atomic_size is what an endpoint's valid calls allow.
		n, err := ep.AtomicValid(fatomic.UINT8, fatomic.SUM)
		require.NoError(t, err)
		require.Equal(t, d.MaxAtomicSize(), n)
		require.ErrorIs(t, d.Close(), fi.EBUSY, "endpoint open")
		require.NoError(t, ep.Close())
		require.NoError(t, d.Close())
		require.ErrorIs(t, d.Close(), fi.EINVAL)
		_, err = d.Endpoint(fabric.EPAttr{}, nil)
		require.ErrorIs(t, err, fi.EINVAL, "endpoint on a closed domain")
	}
	_, err = f.Domain(fabric.DomainAttr{Transport: 99}, nil)
	require.ErrorIs(t, err, fi.EINVAL)
	require.NoError(t, f.Close())
}

// TestSelectiveCompletion: with FI_SELECTIVE_COMPLETION only operations
// posted with FI_COMPLETION (per call, or in EPAttr.OpFlags) write success
// completions; failures always do; counters count everything.
func TestSelectiveCompletion(t *testing.T) {
	a, b := pair(t, sideOpts{cqFlags: fi.SELECTIVE_COMPLETION, cntrs: fi.WRITE | fi.SEND},
		sideOpts{cqFlags: fi.SELECTIVE_COMPLETION, cntrs: fi.RECV})

	require.NoError(t, a.ep.Write([]byte("x"), mr.Desc{}, a.peer, 0, regionKey, "quiet"))
	require.NoError(t, a.ep.WriteMsg(rmaMsg([]byte("y"), a.peer, 1, regionKey, "asked", 0), fi.COMPLETION))
	require.Equal(t, "asked", comp(t, a.txCQ).Context, "only the write that asked completes")
	require.Equal(t, uint64(2), a.cntr[fi.WRITE].Read(), "the counter counts both")
	require.NoError(t, a.ep.Write([]byte("z"), mr.Desc{}, a.peer, 0, 0xbad, "failed"))
	e := errComp(t, a.txCQ)
	require.Equal(t, "failed", e.Context, "errors complete without FI_COMPLETION")
	require.NoError(t, a.ep.WriteMsg(rmaMsg([]byte("z"), a.peer, 0, 0xbad, "failed2", 0), fi.COMPLETION))
	require.Equal(t, "failed2", errComp(t, a.txCQ).Context)
	noComp(t, a.txCQ)
	one := binary.LittleEndian.AppendUint64(nil, 1)
	amsg := &fabric.MsgAtomic{MsgIOV: []fabric.IOC{{Buf: one, Count: 1}}, Addr: a.peer,
		RMAIOV: []fabric.RMAIOC{{Addr: 8, Count: 1, Key: regionKey}}, Datatype: fatomic.UINT64, Op: fatomic.SUM, Context: "amsg"}
	require.NoError(t, a.ep.AtomicMsg(amsg, 0))
	amsg.Context = "amsg+completion"
	require.NoError(t, a.ep.AtomicMsg(amsg, fi.COMPLETION))
	require.Equal(t, "amsg+completion", comp(t, a.txCQ).Context)
	require.Equal(t, uint64(4), a.cntr[fi.WRITE].Read(), "both atomics counted")
	noComp(t, a.txCQ)

	// Receives follow the same rule at a selective receive CQ: the
	// default op flags (0) ask for no completion, the counter still counts
	// and the data is there.
	rbuf := make([]byte, 8)
	require.NoError(t, b.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, "r"))
	require.NoError(t, a.ep.Send([]byte("quiet"), mr.Desc{}, a.peer, "s"))
	require.NoError(t, b.cntr[fi.RECV].Wait(1, waitMs))
	noComp(t, b.rxCQ)
	noComp(t, a.txCQ)
	require.Equal(t, uint64(1), a.cntr[fi.SEND].Read())
	// A truncated receive is an error and completes anyway.
	require.NoError(t, b.ep.Recv(rbuf[:2], mr.Desc{}, fi.AddrUnspec, "trunc"))
	require.NoError(t, a.ep.Send([]byte("too long"), mr.Desc{}, a.peer, "s"))
	require.Equal(t, fi.ETRUNC, errComp(t, b.rxCQ).Err)

	// EPAttr.OpFlags = FI_COMPLETION: every call without a flags argument
	// completes.
	c, d := pair(t, sideOpts{cqFlags: fi.SELECTIVE_COMPLETION, ep: fabric.EPAttr{OpFlags: fi.COMPLETION}},
		sideOpts{cqFlags: fi.SELECTIVE_COMPLETION, ep: fabric.EPAttr{OpFlags: fi.COMPLETION}})
	require.NoError(t, d.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, "r"))
	require.NoError(t, c.ep.Send([]byte("loud"), mr.Desc{}, c.peer, "s"))
	require.Equal(t, "s", comp(t, c.txCQ).Context)
	require.Equal(t, "r", comp(t, d.rxCQ).Context)
	require.NoError(t, c.ep.Write([]byte("w"), mr.Desc{}, c.peer, 0, regionKey, "w"))
	require.Equal(t, "w", comp(t, c.txCQ).Context)
	require.NoError(t, c.ep.WriteMsg(rmaMsg([]byte("w"), c.peer, 0, regionKey, "wm", 0), 0))
	noComp(t, c.txCQ) // the *Msg call's flags replace the defaults
	require.NoError(t, c.ep.Inject([]byte("i"), c.peer))
	noComp(t, c.txCQ)

	// Without FI_SELECTIVE_COMPLETION every operation completes.
	e2, f2 := pair(t, sideOpts{}, sideOpts{})
	require.NoError(t, e2.ep.WriteMsg(rmaMsg([]byte("w"), e2.peer, 0, regionKey, "wm", 0), 0))
	require.Equal(t, "wm", comp(t, e2.txCQ).Context)
	_ = f2
}

// TestConcurrentPosting: FI_THREAD_SAFE: goroutines posting on one
// endpoint at once each get their own completions, and every atomic lands
// exactly once.
func TestConcurrentPosting(t *testing.T) {
	const workers, per = 4, 200
	a, b := pair(t, sideOpts{ep: fabric.EPAttr{TxSize: 64}, cntrs: fi.READ | fi.SEND}, sideOpts{})
	for range workers * per {
		require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, nil))
	}
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			one := binary.LittleEndian.AppendUint64(nil, 1)
			res := make([]byte, 8)
			for i := 0; i < per; {
				var err error
				if i%2 == 0 {
					err = a.ep.FetchAtomic(one, 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
						fatomic.UINT64, fatomic.SUM, w)
				} else {
					err = a.ep.Send([]byte{byte(w)}, mr.Desc{}, a.peer, w)
				}
				if errors.Is(err, fi.EAGAIN) {
					runtime.Gosched() // TxSize outstanding: wait for completions
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				i++
			}
			errs <- nil
		}()
	}
	perWorker := map[any]int{}
	buf := make([]fabric.CQEntry, 16)
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; n < workers*per; {
		require.True(t, time.Now().Before(deadline), "%d of %d completions", n, workers*per)
		k, err := a.txCQ.SRead(buf, 100)
		if errors.Is(err, fi.EAGAIN) {
			continue
		}
		require.NoError(t, err)
		for _, e := range buf[:k] {
			perWorker[e.Context]++
		}
		n += k
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	for w := range workers {
		require.Equal(t, per, perWorker[w], "worker %d", w)
	}
	require.Equal(t, uint64(workers*per/2), a.cntr[fi.READ].Read())
	require.Equal(t, uint64(workers*per/2), a.cntr[fi.SEND].Read())
	got := make([]byte, 8)
	require.NoError(t, a.ep.Read(got, mr.Desc{}, a.peer, 0, regionKey, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(workers*per/2), binary.LittleEndian.Uint64(got), "every fetch-add applied once")
	queued(t, b.rxCQ, workers*per/2)
}

// TestInject: no completion, the data arrives, the buffer is free at once.
func TestInject(t *testing.T) {
	a, b := pair(t, sideOpts{cntrs: fi.SEND | fi.WRITE}, sideOpts{})
	rbuf := make([]byte, 16)
	require.NoError(t, b.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, "r"))
	buf := []byte("injected")
	require.NoError(t, a.ep.Inject(buf, a.peer))
	copy(buf, "XXXXXXXX") // reusable as soon as Inject returns
	c := comp(t, b.rxCQ)
	require.Equal(t, "injected", string(rbuf[:c.Len]))
	require.NoError(t, a.cntr[fi.SEND].Wait(1, waitMs))
	noComp(t, a.txCQ)

	w := []byte("written!")
	require.NoError(t, a.ep.InjectWrite(w, a.peer, 64, regionKey))
	copy(w, "XXXXXXXX")
	require.NoError(t, a.cntr[fi.WRITE].Wait(1, waitMs))
	noComp(t, a.txCQ)
	got := make([]byte, 8)
	require.NoError(t, a.ep.Read(got, mr.Desc{}, a.peer, 64, regionKey, nil))
	comp(t, a.txCQ)
	require.Equal(t, "written!", string(got))

	op := binary.LittleEndian.AppendUint64(nil, 41)
	require.NoError(t, a.ep.InjectAtomic(op, 1, a.peer, 128, regionKey, fatomic.UINT64, fatomic.SUM))
	binary.LittleEndian.PutUint64(op, 1000)
	require.NoError(t, a.ep.InjectAtomic(binary.LittleEndian.AppendUint64(nil, 1), 1, a.peer, 128, regionKey,
		fatomic.UINT64, fatomic.SUM))
	require.NoError(t, a.cntr[fi.WRITE].Wait(3, waitMs))
	noComp(t, a.txCQ)
	require.NoError(t, a.ep.FetchAtomic(nil, 1, mr.Desc{}, got, mr.Desc{}, a.peer, 128, regionKey,
		fatomic.UINT64, fatomic.ATOMIC_READ, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(42), binary.LittleEndian.Uint64(got))

	require.ErrorIs(t, a.ep.Inject(make([]byte, fabric.InjectSize+1), a.peer), fi.EMSGSIZE)
	require.ErrorIs(t, a.ep.InjectWrite(make([]byte, fabric.InjectSize+1), a.peer, 0, regionKey), fi.EMSGSIZE)
	// The largest inject works.
	big := bytes.Repeat([]byte{7}, fabric.InjectSize)
	require.NoError(t, b.ep.Recv(make([]byte, fabric.InjectSize), mr.Desc{}, fi.AddrUnspec, "big"))
	require.NoError(t, a.ep.Inject(big, a.peer))
	require.Equal(t, fabric.InjectSize, comp(t, b.rxCQ).Len)
}

// TestTxSizeBoundsOutstanding: TxSize operations outstanding make the next
// post fail with FI_EAGAIN (nothing queues without bound); a peer that
// never answers fails them with FI_ETIMEDOUT and the slots come back.
func TestTxSizeBoundsOutstanding(t *testing.T) {
	const tx = 4
	a, b := pair(t, sideOpts{ep: fabric.EPAttr{TxSize: tx}, cntrs: fi.WRITE}, sideOpts{})
	dead := a.silentPeer(t)
	for i := range tx {
		require.NoError(t, a.ep.Write([]byte{1}, mr.Desc{}, dead, 0, regionKey, i))
	}
	for range 3 {
		require.ErrorIs(t, a.ep.Write([]byte{1}, mr.Desc{}, dead, 0, regionKey, nil), fi.EAGAIN)
		require.ErrorIs(t, a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, regionKey, nil), fi.EAGAIN,
			"the bound is per endpoint")
		require.ErrorIs(t, a.ep.Inject([]byte{1}, a.peer), fi.EAGAIN)
	}
	start := time.Now()
	var failed []any
	for range tx {
		e := errComp2(t, a.txCQ, 15*time.Second)
		failed = append(failed, e.Context)
		require.Equal(t, fi.ETIMEDOUT, e.Err)
		require.Equal(t, dead, e.Src)
	}
	require.ElementsMatch(t, []any{0, 1, 2, 3}, failed)
	t.Logf("unreachable peer reported after %v", time.Since(start))
	require.Equal(t, uint64(tx), a.cntr[fi.WRITE].ReadErr())
	for i := range tx {
		require.NoError(t, a.ep.Write([]byte{byte(i)}, mr.Desc{}, a.peer, uint64(i), regionKey, i), "slots came back")
	}
	for i := range tx {
		require.Equal(t, i, comp(t, a.txCQ).Context)
	}
	_ = b
}

// errComp2 is errComp with a longer timeout.
func errComp2(t *testing.T, cq *fabric.CQ, d time.Duration) fabric.CQErrEntry {
	t.Helper()
	buf := make([]fabric.CQEntry, 1)
	_, err := cq.SRead(buf, int(d/time.Millisecond))
	require.ErrorIs(t, err, fi.EAVAIL)
	e, err := cq.ReadErr(0)
	require.NoError(t, err)
	return e
}

// TestCQSizeBoundsOutstanding: an operation is only accepted when its
// completion has room in the CQ.
func TestCQSizeBoundsOutstanding(t *testing.T) {
	a, b := pair(t, sideOpts{txCQ: &fabric.CQAttr{Size: 2, WaitObj: fi.WaitUnspec}}, sideOpts{rxCQ: &fabric.CQAttr{Size: 2, WaitObj: fi.WaitUnspec}})
	require.NoError(t, a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, regionKey, 0))
	require.NoError(t, a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, regionKey, 1))
	require.ErrorIs(t, a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, regionKey, 2), fi.EAGAIN)
	queued(t, a.txCQ, 2)
	require.ErrorIs(t, a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, regionKey, 2), fi.EAGAIN, "completions unread")
	require.Equal(t, 0, comp(t, a.txCQ).Context)
	require.NoError(t, a.ep.Write([]byte{1}, mr.Desc{}, a.peer, 0, regionKey, 2), "a read entry frees a slot")
	require.Equal(t, 1, comp(t, a.txCQ).Context)
	require.Equal(t, 2, comp(t, a.txCQ).Context)

	require.NoError(t, b.ep.Recv(make([]byte, 1), mr.Desc{}, fi.AddrUnspec, nil))
	require.NoError(t, b.ep.Recv(make([]byte, 1), mr.Desc{}, fi.AddrUnspec, nil))
	require.ErrorIs(t, b.ep.Recv(make([]byte, 1), mr.Desc{}, fi.AddrUnspec, nil), fi.EAGAIN)
}

func TestRxSizeBoundsPostedReceives(t *testing.T) {
	_, b := pair(t, sideOpts{}, sideOpts{ep: fabric.EPAttr{RxSize: 3}})
	for range 3 {
		require.NoError(t, b.ep.Recv(make([]byte, 1), mr.Desc{}, fi.AddrUnspec, nil))
	}
	require.ErrorIs(t, b.ep.Recv(make([]byte, 1), mr.Desc{}, fi.AddrUnspec, nil), fi.EAGAIN)
}

// TestUnexpectedMessages: messages sent before any receive is posted wait
// and are delivered, in order, to the receives posted later, also one
// whose receive is posted while it is still arriving.
func TestUnexpectedMessages(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	msgs := [][]byte{[]byte("first"), bytes.Repeat([]byte("big"), 100_000), []byte("third")}
	for i, m := range msgs {
		require.NoError(t, a.ep.Send(m, mr.Desc{}, a.peer, i))
	}
	for i := range msgs {
		require.Equal(t, i, comp(t, a.txCQ).Context, "sends complete once buffered at the target")
	}
	noComp(t, b.rxCQ)
	for i, m := range msgs {
		buf := make([]byte, len(m)+10)
		require.NoError(t, b.ep.Recv(buf, mr.Desc{}, fi.AddrUnspec, i))
		e, src := compFrom(t, b.rxCQ)
		require.Equal(t, i, e.Context)
		require.Equal(t, len(m), e.Len)
		require.Equal(t, m, buf[:e.Len])
		require.Equal(t, b.peer, src)
	}
	// A receive posted while a long unexpected message is arriving takes
	// it: the part buffered so far is copied, the rest lands directly.
	long := make([]byte, 4<<20)
	for i := range long {
		long[i] = byte(i / 1000)
	}
	buf := make([]byte, len(long))
	require.NoError(t, a.ep.Send(long, mr.Desc{}, a.peer, "long"))
	require.NoError(t, b.ep.Recv(buf, mr.Desc{}, fi.AddrUnspec, "late"))
	require.Equal(t, "late", comp(t, b.rxCQ).Context)
	require.True(t, bytes.Equal(long, buf))
	comp(t, a.txCQ)
}

// TestUnexpectedLimit: past MaxUnexpectedBytes a message is refused with
// FI_ENORX at the sender instead of growing memory.
func TestUnexpectedLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 64 MiB")
	}
	a, b := pair(t, sideOpts{}, sideOpts{})
	big := make([]byte, fabric.MaxUnexpectedBytes/2)
	require.NoError(t, a.ep.Send(big, mr.Desc{}, a.peer, 0))
	require.NoError(t, a.ep.Send(big, mr.Desc{}, a.peer, 1))
	comp(t, a.txCQ)
	comp(t, a.txCQ)
	require.NoError(t, a.ep.Send([]byte("one more"), mr.Desc{}, a.peer, 2))
	require.Equal(t, fi.ENORX, errComp(t, a.txCQ).Err)
	// Receiving drains the queue; then messages are accepted again.
	for range 2 {
		require.NoError(t, b.ep.Recv(make([]byte, len(big)), mr.Desc{}, fi.AddrUnspec, nil))
		comp(t, b.rxCQ)
	}
	require.NoError(t, a.ep.Send([]byte("again"), mr.Desc{}, a.peer, 3))
	comp(t, a.txCQ)
}

// TestUnexpectedCountLimit: past MaxUnexpectedMsgs buffered messages the
// next is refused with FI_ENORX.
func TestUnexpectedCountLimit(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	buf := make([]fabric.CQEntry, 64)
	for i := range fabric.MaxUnexpectedMsgs {
		require.NoError(t, a.ep.Send([]byte{byte(i)}, mr.Desc{}, a.peer, nil))
		if i%64 == 63 {
			block(t, a.txCQ, buf, 64)
		}
	}
	require.NoError(t, a.ep.Send([]byte("over"), mr.Desc{}, a.peer, "over"))
	e := errComp(t, a.txCQ)
	require.Equal(t, "over", e.Context)
	require.Equal(t, fi.ENORX, e.Err)
	rbuf := make([]byte, 4)
	for i := range fabric.MaxUnexpectedMsgs {
		require.NoError(t, b.ep.Recv(rbuf, mr.Desc{}, fi.AddrUnspec, nil))
		require.Equal(t, byte(i), comp(t, b.rxCQ).Buf[0])
	}
}

// TestDirectedRecv: a receive for a given fi_addr only matches that peer.
func TestDirectedRecv(t *testing.T) {
	b := newSide(t, sideOpts{})
	a1, a2 := newSide(t, sideOpts{}), newSide(t, sideOpts{})
	link(t, a1, b)
	link(t, a2, b)
	from1, from2 := b.av.FIAddr(a1.ep.LocalAddr()), b.av.FIAddr(a2.ep.LocalAddr())

	buf2 := make([]byte, 8)
	require.NoError(t, b.ep.Recv(buf2, mr.Desc{}, from2, "for a2"))
	require.NoError(t, a1.ep.Send([]byte("from a1"), mr.Desc{}, a1.peer, nil))
	comp(t, a1.txCQ)
	noComp(t, b.rxCQ) // a1's message does not match; it waits unexpected
	require.NoError(t, a2.ep.Send([]byte("from a2"), mr.Desc{}, a2.peer, nil))
	e, src := compFrom(t, b.rxCQ)
	require.Equal(t, "for a2", e.Context)
	require.Equal(t, from2, src)
	require.Equal(t, "from a2", string(buf2[:e.Len]))

	// Unexpected messages from both; a directed receive for a2 skips a1's
	// older one.
	require.NoError(t, a2.ep.Send([]byte("a2 again"), mr.Desc{}, a2.peer, nil))
	comp(t, a2.txCQ)
	require.NoError(t, b.ep.Recv(buf2, mr.Desc{}, from2, "a2 again"))
	e, src = compFrom(t, b.rxCQ)
	require.Equal(t, "a2 again", e.Context)
	require.Equal(t, from2, src)
	require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "any"))
	e, src = compFrom(t, b.rxCQ)
	require.Equal(t, "any", e.Context)
	require.Equal(t, from1, src)
	require.Equal(t, "from a1", string(e.Buf))
}

func TestRecvTruncation(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	for _, size := range []int{10, 5000, 200_000} {
		msg := make([]byte, size)
		for i := range msg {
			msg[i] = byte(i)
		}
		buf := make([]byte, 1000)
		room := min(size-1, len(buf))
		require.NoError(t, b.ep.Recv(buf[:room], mr.Desc{}, fi.AddrUnspec, size))
		require.NoError(t, a.ep.Send(msg, mr.Desc{}, a.peer, nil))
		comp(t, a.txCQ)
		e := errComp(t, b.rxCQ)
		require.Equal(t, size, e.Context)
		require.Equal(t, fi.ETRUNC, e.Err)
		require.Equal(t, room, e.Len)
		require.Equal(t, size-room, e.OLen)
		require.Equal(t, msg[:room], buf[:room])
		if room < len(buf) {
			require.Zero(t, buf[room], "nothing written past the posted buffer")
		}
	}
	// The next message is unaffected.
	require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "next"))
	require.NoError(t, a.ep.Send([]byte("ok"), mr.Desc{}, a.peer, nil))
	require.Equal(t, 2, comp(t, b.rxCQ).Len)
}

// TestSegmentedWriteOutOfRange: a multi-packet write that runs past the
// end of the region fails without writing the part that fits, and counts
// nothing at the target; the next transfer is unaffected.
func TestSegmentedWriteOutOfRange(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{cntrs: fi.REMOTE_WRITE | fi.REMOTE_READ})
	mc, err := b.dom.CntrOpen(fabric.CntrAttr{}, nil)
	require.NoError(t, err)
	require.NoError(t, b.region.Bind(mc, fi.REMOTE_WRITE))
	defer func() { require.NoError(t, mc.Close()) }() // before the region's cleanup
	end := uint64(len(b.mem))
	data := bytes.Repeat([]byte{0xab}, 64<<10)
	require.NoError(t, a.ep.Write(data, mr.Desc{}, a.peer, end-4096, regionKey, "over"))
	e := errComp(t, a.txCQ)
	require.Equal(t, "over", e.Context)
	require.Equal(t, fi.ErrnoOf(mr.OutOfRange), e.Err)
	got := make([]byte, 8192)
	require.NoError(t, a.ep.Read(got, mr.Desc{}, a.peer, end-8192, regionKey, nil))
	comp(t, a.txCQ)
	require.Equal(t, make([]byte, 8192), got, "nothing written near the end")
	require.Zero(t, b.cntr[fi.REMOTE_WRITE].Read())
	require.Zero(t, mc.Read())

	// A read running past the end fails too and is not counted.
	require.NoError(t, a.ep.Read(make([]byte, 64<<10), mr.Desc{}, a.peer, end-4096, regionKey, "read over"))
	require.Equal(t, fi.ErrnoOf(mr.OutOfRange), errComp(t, a.txCQ).Err)
	require.Equal(t, uint64(1), b.cntr[fi.REMOTE_READ].Read(), "only the good read above")

	require.NoError(t, a.ep.Write(data, mr.Desc{}, a.peer, end-uint64(len(data)), regionKey, "fits"))
	require.Equal(t, "fits", comp(t, a.txCQ).Context)
	require.Equal(t, uint64(1), b.cntr[fi.REMOTE_WRITE].Read())
	require.Equal(t, uint64(1), mc.Read())
	require.NoError(t, a.ep.Read(got, mr.Desc{}, a.peer, end-8192, regionKey, nil))
	comp(t, a.txCQ)
	require.Equal(t, data[:8192], got)
}

// TestMRLocal: with FI_MR_LOCAL every local buffer needs a descriptor of a
// region covering it with the access the operation needs.
func TestMRLocal(t *testing.T) {
	local := fabric.DomainAttr{MRMode: mr.ModeLocal}
	a, b := pair(t, sideOpts{dom: local}, sideOpts{dom: local})
	require.Equal(t, mr.ModeLocal, a.dom.Info().DomainAttr.MRMode&mr.ModeLocal)
	buf := a.mem[:64]
	desc := a.region.Desc()
	other := make([]byte, 64)
	sendOnly, err := a.dom.MRReg(other, fi.SEND, 0, 0x99, 0, nil)
	require.NoError(t, err)
	defer sendOnly.Close()

	require.ErrorIs(t, a.ep.Send(other, mr.Desc{}, a.peer, nil), fi.EINVAL, "no descriptor")
	require.ErrorIs(t, a.ep.Send(other, desc, a.peer, nil), fi.EFAULT, "buffer outside the region")
	require.ErrorIs(t, a.ep.Read(other, sendOnly.Desc(), a.peer, 0, regionKey, nil), fi.EACCES, "no FI_READ access")
	require.ErrorIs(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, nil), fi.EINVAL)
	require.ErrorIs(t, a.ep.Write(other, mr.Desc{}, a.peer, 0, regionKey, nil), fi.EINVAL)
	one := binary.LittleEndian.AppendUint64(nil, 1)
	res := make([]byte, 8)
	require.ErrorIs(t, a.ep.Atomic(one, 1, mr.Desc{}, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil), fi.EINVAL)
	copy(buf, one)
	require.ErrorIs(t, a.ep.FetchAtomic(buf[:8], 1, desc, res, mr.Desc{}, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil),
		fi.EINVAL, "result buffer without descriptor")
	require.ErrorIs(t, a.ep.CompareAtomic(buf[:8], 1, desc, res, mr.Desc{}, buf[8:16], desc, a.peer, 0, regionKey,
		fatomic.UINT64, fatomic.CSWAP, nil), fi.EINVAL, "compare buffer without descriptor")
	noComp(t, a.txCQ)

	require.NoError(t, b.ep.Recv(b.mem[:64], b.region.Desc(), fi.AddrUnspec, "r"))
	require.NoError(t, a.ep.Send(other, sendOnly.Desc(), a.peer, "s"))
	comp(t, a.txCQ)
	comp(t, b.rxCQ)
	require.NoError(t, a.ep.FetchAtomic(buf[:8], 1, desc, buf[8:16], desc, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil))
	comp(t, a.txCQ)
	require.NoError(t, a.ep.Read(buf[16:24], desc, a.peer, 0, regionKey, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(1), binary.LittleEndian.Uint64(buf[16:24]))
	// Inject copies the buffer: no descriptor needed (fi_inject has none).
	require.NoError(t, b.ep.Recv(b.mem[:64], b.region.Desc(), fi.AddrUnspec, "r"))
	require.NoError(t, a.ep.Inject(other, a.peer))
	comp(t, b.rxCQ)
}

// TestAVUserID: FI_SOURCE reports user IDs from an AV opened with
// FI_AV_USER_ID (FI_ADDR_NOTAVAIL before SetUserID) or given per insert.
func TestAVUserID(t *testing.T) {
	t.Run("av flag", func(t *testing.T) {
		a := newSide(t, sideOpts{})
		b := newSide(t, sideOpts{av: av.Attr{Flags: fi.AV_USER_ID}})
		link(t, a, b)
		recvFrom := func() fi.Addr {
			require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, nil))
			require.NoError(t, a.ep.Send([]byte("id?"), mr.Desc{}, a.peer, nil))
			comp(t, a.txCQ)
			_, src := compFrom(t, b.rxCQ)
			return src
		}
		require.Equal(t, fi.AddrNotAvail, recvFrom(), "no user ID set yet")
		require.NoError(t, b.av.SetUserID(b.peer, 0xabc, 0))
		require.Equal(t, fi.Addr(0xabc), recvFrom())
		// Sending still takes the handle.
		require.NoError(t, a.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, nil))
		require.NoError(t, b.ep.Send([]byte("back"), mr.Desc{}, b.peer, nil))
		comp(t, b.txCQ)
		comp(t, a.rxCQ)
	})
	t.Run("per insert", func(t *testing.T) {
		a := newSide(t, sideOpts{})
		b := newSide(t, sideOpts{})
		a.peer = a.insert(t, b.ep.GetName())
		fa := []fi.Addr{0x1234}
		n, err := b.av.Insert([][]byte{a.ep.GetName()}, fa, fi.AV_USER_ID, nil)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		b.peer = fa[0]
		require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, nil))
		require.NoError(t, a.ep.Send([]byte("id?"), mr.Desc{}, a.peer, nil))
		_, src := compFrom(t, b.rxCQ)
		require.Equal(t, fi.Addr(0x1234), src)
		require.NoError(t, b.ep.Write([]byte("h"), mr.Desc{}, b.peer, 0, regionKey, nil))
		comp(t, b.txCQ)
	})
}

// TestPeerDisappears: operations to an endpoint that closes complete with
// FI_ETIMEDOUT within the retry budget, and closing everything leaves no
// goroutine behind.
func TestPeerDisappears(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		a, b := pair(t, sideOpts{}, sideOpts{})
		require.NoError(t, a.ep.Write([]byte("alive"), mr.Desc{}, a.peer, 0, regionKey, "alive"))
		comp(t, a.txCQ)
		b.close(t)
		start := time.Now()
		for i := range 5 {
			require.NoError(t, a.ep.Write([]byte("gone"), mr.Desc{}, a.peer, 0, regionKey, i))
		}
		// And a peer whose port was never open again.
		require.NoError(t, a.ep.Write([]byte("gone"), mr.Desc{}, a.deadPeer(t), 0, regionKey, 5))
		// Every operation fails; in which order the engine reports a
		// failed peer's operations is its business.
		var got []any
		for range 6 {
			e := errComp2(t, a.txCQ, 15*time.Second)
			require.Contains(t, []fi.Errno{fi.ETIMEDOUT, fi.ECONNREFUSED}, e.Err, "context %v", e.Context)
			if e.Context != 5 {
				got = append(got, e.Context)
			}
		}
		require.ElementsMatch(t, []any{0, 1, 2, 3, 4}, got)
		t.Logf("peer loss reported after %v", time.Since(start))
		a.close(t)
	}()
	after := settleGoroutines(before)
	require.LessOrEqual(t, after, before, "goroutines leaked: %d before, %d after", before, after)
}

// TestCloseWithOpsInFlight: Close completes outstanding operations with
// FI_ECANCELED; the CQ, counter, AV and domain then close cleanly.
func TestCloseWithOpsInFlight(t *testing.T) {
	before := runtime.NumGoroutine()
	a := newSide(t, sideOpts{cntrs: fi.WRITE | fi.READ})
	dead := a.silentPeer(t)
	for i := range 8 {
		require.NoError(t, a.ep.Write([]byte("never"), mr.Desc{}, dead, 0, regionKey, i))
	}
	res := make([]byte, 8)
	require.NoError(t, a.ep.FetchAtomic(nil, 1, mr.Desc{}, res, mr.Desc{}, dead, 0, regionKey,
		fatomic.UINT64, fatomic.ATOMIC_READ, "fetch"))
	require.NoError(t, a.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "recv"))
	require.ErrorIs(t, a.dom.Close(), fi.EBUSY, "endpoint open")
	require.NoError(t, a.ep.Close())
	for i := range 8 {
		e := errComp(t, a.txCQ)
		require.Equal(t, i, e.Context)
		require.Equal(t, fi.ECANCELED, e.Err)
	}
	e := errComp(t, a.txCQ)
	require.Equal(t, "fetch", e.Context)
	require.Equal(t, fi.ECANCELED, e.Err)
	require.Equal(t, uint64(8), a.cntr[fi.WRITE].ReadErr())
	require.Equal(t, uint64(1), a.cntr[fi.READ].ReadErr())
	noComp(t, a.txCQ)
	a.close(t)
	after := settleGoroutines(before)
	require.LessOrEqual(t, after, before, "goroutines leaked: %d before, %d after", before, after)
}

// elems returns n elements of dt with values that every op handles
// exactly: small integers (as floats for the float types).
func elems(dt fatomic.Datatype, n int, seed int) []byte {
	size := fatomic.Size(dt)
	out := make([]byte, n*size)
	for i := range n {
		v := uint64((i*7+seed*13)%23 + 1)
		e := out[i*size : (i+1)*size]
		switch dt {
		case fatomic.FLOAT:
			binary.LittleEndian.PutUint32(e, math.Float32bits(float32(v)))
		case fatomic.FLOAT_COMPLEX:
			binary.LittleEndian.PutUint32(e, math.Float32bits(float32(v)))
			binary.LittleEndian.PutUint32(e[4:], math.Float32bits(float32(v+1)))
		case fatomic.DOUBLE:
			binary.LittleEndian.PutUint64(e, math.Float64bits(float64(v)))
		case fatomic.DOUBLE_COMPLEX:
			binary.LittleEndian.PutUint64(e, math.Float64bits(float64(v)))
			binary.LittleEndian.PutUint64(e[8:], math.Float64bits(float64(v+1)))
		case fatomic.LONG_DOUBLE:
			putLongDouble(e, v)
		case fatomic.LONG_DOUBLE_COMPLEX:
			putLongDouble(e, v)
			putLongDouble(e[16:], v+1)
		default: // integers, little-endian, value in the low byte
			e[0] = byte(v)
		}
	}
	return out
}

// putLongDouble encodes the positive integer v as an x87 80-bit extended
// value (explicit integer bit) in the 16-byte FI_LONG_DOUBLE layout.
func putLongDouble(e []byte, v uint64) {
	exp := 63
	for v>>exp == 0 {
		exp--
	}
	binary.LittleEndian.PutUint64(e, v<<(63-exp))
	binary.LittleEndian.PutUint16(e[8:], uint16(16383+exp))
}

func TestAtomicValidAgreesWithEngine(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	eng := fatomic.Engine{MaxPayload: a.dom.MaxAtomicSize()}
	for dt := range fatomic.Datatype(fatomic.NumDatatypes) {
		for op := range fatomic.Op(fatomic.NumOps) {
			for _, tc := range []struct {
				name string
				ep   func(fatomic.Datatype, fatomic.Op) (int, error)
				ref  func(fatomic.Datatype, fatomic.Op) (int, error)
			}{
				{"atomic", a.ep.AtomicValid, eng.Valid},
				{"fetch", a.ep.FetchAtomicValid, eng.FetchValid},
				{"compare", a.ep.CompareAtomicValid, eng.CompareValid},
			} {
				n, err := tc.ep(dt, op)
				wn, werr := tc.ref(dt, op)
				require.Equal(t, wn, n, "%s %v %v", tc.name, dt, op)
				require.Equal(t, werr == nil, err == nil, "%s %v %v: %v vs %v", tc.name, dt, op, err, werr)
				if err != nil {
					require.ErrorIs(t, err, fi.EOPNOTSUPP)
				}
			}
		}
	}
}

// TestAtomicLargestCount: for every datatype the largest valid count of
// each class works end to end with the results the reference model
// predicts, and one more element is refused before anything is sent.
func TestAtomicLargestCount(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	for dt := range fatomic.Datatype(fatomic.NumDatatypes) {
		size := fatomic.Size(dt)
		for _, tc := range []struct {
			class fatomic.Class
			op    fatomic.Op
		}{{fatomic.Base, fatomic.SUM}, {fatomic.Fetch, fatomic.SUM}, {fatomic.Compare, fatomic.CSWAP}} {
			t.Run(fmt.Sprintf("%v/%v", dt, tc.op), func(t *testing.T) {
				var n int
				var err error
				switch tc.class {
				case fatomic.Base:
					n, err = a.ep.AtomicValid(dt, tc.op)
				case fatomic.Fetch:
					n, err = a.ep.FetchAtomicValid(dt, tc.op)
				default:
					n, err = a.ep.CompareAtomicValid(dt, tc.op)
				}
				if err != nil {
					t.Skipf("%v", err)
				}
				target := elems(dt, n, 1)
				operand := elems(dt, n+1, 2)
				compare := slices2(target, n, size) // equal on even elements
				res := make([]byte, (n+1)*size)
				require.NoError(t, a.ep.Write(target, mr.Desc{}, a.peer, 0, regionKey, nil))
				comp(t, a.txCQ)
				post := func(count int) error {
					switch tc.class {
					case fatomic.Base:
						return a.ep.Atomic(operand, count, mr.Desc{}, a.peer, 0, regionKey, dt, tc.op, "amo")
					case fatomic.Fetch:
						return a.ep.FetchAtomic(operand, count, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey, dt, tc.op, "amo")
					}
					cmp := append(compare, make([]byte, size)...)
					return a.ep.CompareAtomic(operand, count, mr.Desc{}, cmp, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
						dt, tc.op, "amo")
				}
				require.ErrorIs(t, post(n+1), fi.EMSGSIZE, "count %d", n+1)
				require.NoError(t, post(n))
				require.Equal(t, "amo", comp(t, a.txCQ).Context)
				wantTarget, wantFetched, err := fatomic.Reference(dt, tc.op, target, operand[:n*size], compare)
				require.NoError(t, err)
				got := make([]byte, n*size)
				require.NoError(t, a.ep.Read(got, mr.Desc{}, a.peer, 0, regionKey, nil))
				comp(t, a.txCQ)
				require.Equal(t, wantTarget, got, "target after %d elements", n)
				if tc.class != fatomic.Base {
					require.Equal(t, wantFetched, res[:n*size], "fetched values")
				}
			})
		}
	}
}

// slices2 returns a compare buffer equal to target on even elements and
// different on odd ones.
func slices2(target []byte, n, size int) []byte {
	c := bytes.Clone(target)
	for i := 1; i < n; i += 2 {
		copy(c[i*size:(i+1)*size], target[((i+1)%n)*size:((i+1)%n+1)*size])
	}
	return c
}

// split cuts buf (count elements of size) into iovecs of the given counts;
// each buffer has spare room after its elements, which must be ignored.
func split(buf []byte, size int, counts ...int) []fabric.IOC {
	var iov []fabric.IOC
	off := 0
	for _, c := range counts {
		b := make([]byte, c*size+size+3)
		for i := range b {
			b[i] = 0xee
		}
		copy(b, buf[off:off+c*size])
		iov = append(iov, fabric.IOC{Buf: b, Count: c})
		off += c * size
	}
	return iov
}

// join concatenates the counted elements of iov.
func join(iov []fabric.IOC, size int) []byte {
	var out []byte
	for _, v := range iov {
		out = append(out, v.Buf[:v.Count*size]...)
	}
	return out
}

func TestAtomicVectors(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	for _, dt := range []fatomic.Datatype{fatomic.UINT8, fatomic.UINT64, fatomic.DOUBLE, fatomic.LONG_DOUBLE_COMPLEX} {
		size := fatomic.Size(dt)
		for _, counts := range [][]int{{3, 5}, {1, 2, 5}} {
			n := 0
			for _, c := range counts {
				n += c
			}
			t.Run(fmt.Sprintf("%v/%v", dt, counts), func(t *testing.T) {
				target := elems(dt, n, 3)
				reset := func() {
					require.NoError(t, a.ep.Write(target, mr.Desc{}, a.peer, 0, regionKey, nil))
					comp(t, a.txCQ)
				}
				remote := func() []byte {
					got := make([]byte, n*size)
					require.NoError(t, a.ep.Read(got, mr.Desc{}, a.peer, 0, regionKey, nil))
					comp(t, a.txCQ)
					return got
				}
				operand := elems(dt, n, 4)

				reset()
				require.NoError(t, a.ep.AtomicV(split(operand, size, counts...), nil, a.peer, 0, regionKey, dt, fatomic.SUM, "v"))
				require.Equal(t, "v", comp(t, a.txCQ).Context)
				want, _, err := fatomic.Reference(dt, fatomic.SUM, target, operand, nil)
				require.NoError(t, err)
				require.Equal(t, want, remote(), "atomicv gathers the operand")

				reset()
				resv := split(make([]byte, n*size), size, counts...)
				require.NoError(t, a.ep.FetchAtomicV(split(operand, size, counts...), nil, resv, nil, a.peer, 0, regionKey,
					dt, fatomic.SUM, "fv"))
				require.Equal(t, "fv", comp(t, a.txCQ).Context)
				require.Equal(t, target, join(resv, size), "fetch_atomicv scatters the old values")
				for _, v := range resv {
					require.Equal(t, bytes.Repeat([]byte{0xee}, size+3), v.Buf[v.Count*size:], "spare room untouched")
				}
				require.Equal(t, want, remote())

				reset()
				compare := slices2(target, n, size)
				rcounts := []int{n - 1, 1}
				resv = split(make([]byte, n*size), size, rcounts...)
				require.NoError(t, a.ep.CompareAtomicV(split(operand, size, counts...), nil,
					split(compare, size, counts[len(counts)-1], n-counts[len(counts)-1]), nil,
					resv, nil, a.peer, 0, regionKey, dt, fatomic.CSWAP, "cv"))
				require.Equal(t, "cv", comp(t, a.txCQ).Context)
				want, fetched, err := fatomic.Reference(dt, fatomic.CSWAP, target, operand, compare)
				require.NoError(t, err)
				require.Equal(t, fetched, join(resv, size))
				require.Equal(t, want, remote())
			})
		}
	}
}

func TestAtomicPostingErrors(t *testing.T) {
	a, _ := pair(t, sideOpts{}, sideOpts{})
	one := binary.LittleEndian.AppendUint64(nil, 1)
	res := make([]byte, 8)
	msg := func(rma ...fabric.RMAIOC) *fabric.MsgAtomic {
		return &fabric.MsgAtomic{MsgIOV: []fabric.IOC{{Buf: one, Count: 1}}, Addr: a.peer, RMAIOV: rma,
			Datatype: fatomic.UINT64, Op: fatomic.SUM}
	}
	r := fabric.RMAIOC{Addr: 0, Count: 1, Key: regionKey}
	require.ErrorIs(t, a.ep.AtomicMsg(msg(r, r), 0), fi.EINVAL, "two remote iovecs")
	require.ErrorIs(t, a.ep.AtomicMsg(msg(), 0), fi.EINVAL, "no remote iovec")
	require.ErrorIs(t, a.ep.AtomicMsg(msg(r), fi.TAGGED), fi.EOPNOTSUPP)
	require.ErrorIs(t, a.ep.AtomicMsg(msg(r), fi.MULTI_RECV), fi.EBADFLAGS)
	// FI_INJECT leaves output buffers alone: fetch and compare take it
	// (TestFetchCompareAtomicMsgInject checks the copies and results).
	require.NoError(t, a.ep.FetchAtomicMsg(msg(r), []fabric.IOC{{Buf: res, Count: 1}}, nil, fi.INJECT))
	comp(t, a.txCQ)
	cas := msg(r)
	cas.Op = fatomic.CSWAP
	require.NoError(t, a.ep.CompareAtomicMsg(cas, []fabric.IOC{{Buf: one, Count: 1}}, nil,
		[]fabric.IOC{{Buf: res, Count: 1}}, nil, fi.INJECT))
	comp(t, a.txCQ)
	require.ErrorIs(t, a.ep.FetchAtomicMsg(msg(r), nil, nil, 0), fi.EINVAL, "no result iovec")
	require.ErrorIs(t, a.ep.AtomicV(nil, nil, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil), fi.EINVAL)
	nine := make([]fabric.IOC, fabric.IovLimit+1)
	for i := range nine {
		nine[i] = fabric.IOC{Buf: make([]byte, 8), Count: 1}
	}
	require.ErrorIs(t, a.ep.AtomicV(nine, nil, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil), fi.EINVAL, "iov_limit")
	require.NoError(t, a.ep.AtomicV(nine[:fabric.IovLimit], nil, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil))
	comp(t, a.txCQ)
	require.ErrorIs(t, a.ep.AtomicV([]fabric.IOC{{Buf: one, Count: -1}, {Buf: one, Count: 2}}, nil, a.peer, 0, regionKey,
		fatomic.UINT64, fatomic.SUM, nil), fi.EINVAL, "negative count")
	require.ErrorIs(t, a.ep.Atomic(one, 0, mr.Desc{}, a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil), fi.EINVAL, "count 0")
	require.ErrorIs(t, a.ep.Atomic(one, 1, mr.Desc{}, a.peer, 0, regionKey, fatomic.UINT64, fatomic.CSWAP, nil),
		fi.EOPNOTSUPP, "compare op in the base class")
	require.ErrorIs(t, a.ep.CompareAtomic(one, 1, mr.Desc{}, nil, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
		fatomic.UINT64, fatomic.CSWAP, nil), fi.EINVAL, "no compare values")
	require.ErrorIs(t, a.ep.Atomic(one, 1, mr.Desc{}, a.peer, 0, regionKey, fatomic.Datatype(99), fatomic.SUM, nil), fi.EOPNOTSUPP)
	noComp(t, a.txCQ)
}

// TestIPv6Loopback: endpoints on ::1 exchange messages, RMA and atomics,
// and report sources like IPv4 ones.
func TestIPv6Loopback(t *testing.T) {
	v6 := sideOpts{dom: fabric.DomainAttr{Addr: netip.MustParseAddr("::1")}}
	a, b := pair(t, v6, v6)
	require.Len(t, a.ep.GetName(), 28)
	require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, "r"))
	require.NoError(t, a.ep.Send([]byte("six"), mr.Desc{}, a.peer, nil))
	comp(t, a.txCQ)
	_, src := compFrom(t, b.rxCQ)
	require.Equal(t, b.peer, src)
	res := make([]byte, 8)
	require.NoError(t, a.ep.FetchAtomic(binary.LittleEndian.AppendUint64(nil, 5), 1, mr.Desc{}, res, mr.Desc{},
		a.peer, 0, regionKey, fatomic.UINT64, fatomic.SUM, nil))
	comp(t, a.txCQ)
	require.NoError(t, a.ep.FetchAtomic(nil, 1, mr.Desc{}, res, mr.Desc{}, a.peer, 0, regionKey,
		fatomic.UINT64, fatomic.ATOMIC_READ, nil))
	comp(t, a.txCQ)
	require.Equal(t, uint64(5), binary.LittleEndian.Uint64(res))
}

// TestUnknownPeerNotServed: without AcceptUnknown an endpoint drops
// requests from peers missing from its AV: nothing executes, and the
// sender's operation fails once its retries run out.
func TestUnknownPeerNotServed(t *testing.T) {
	b := newSide(t, sideOpts{cntrs: fi.REMOTE_WRITE | fi.RECV})
	stranger := newSide(t, sideOpts{})
	stranger.peer = stranger.insert(t, b.ep.GetName())
	require.NoError(t, b.ep.Recv(make([]byte, 8), mr.Desc{}, fi.AddrUnspec, nil))
	require.NoError(t, stranger.ep.Write([]byte("intrude"), mr.Desc{}, stranger.peer, 0, regionKey, "w"))
	require.NoError(t, stranger.ep.Send([]byte("hello"), mr.Desc{}, stranger.peer, "s"))
	for range 2 {
		e := errComp2(t, stranger.txCQ, 15*time.Second)
		require.Equal(t, fi.ETIMEDOUT, e.Err, "context %v", e.Context)
	}
	require.Zero(t, b.cntr[fi.REMOTE_WRITE].Read())
	require.Zero(t, b.cntr[fi.RECV].Read())
	noComp(t, b.rxCQ)
	require.NotZero(t, b.ep.Stats().Drops[reliable.DropUnknownSource])
	require.NoError(t, b.ep.Close())
	require.Equal(t, make([]byte, 7), b.mem[:7], "memory untouched (read after the endpoint closed)")
}

// TestMREndpointMode: with FI_MR_ENDPOINT a region serves remote requests
// only once bound to the endpoint and enabled; another endpoint's region is
// an unknown key to peers.
func TestMREndpointMode(t *testing.T) {
	a, b := newNode(t, nodeOpts{}), newNode(t, nodeOpts{})
	connect(t, a, b)
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	d, err := f.Domain(fabric.DomainAttr{Addr: netip.MustParseAddr("127.0.0.1"), MRMode: mr.ModeEndpoint}, nil)
	require.NoError(t, err)
	ep, err := d.Endpoint(fabric.EPAttr{}, nil)
	require.NoError(t, err)
	avt, err := d.AVOpen(av.Attr{}, nil)
	require.NoError(t, err)
	cq, err := d.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec}, nil)
	require.NoError(t, err)
	require.NoError(t, ep.Bind(avt, 0))
	require.NoError(t, ep.Bind(cq, fi.TRANSMIT|fi.RECV))
	require.NoError(t, ep.Enable())
	fa := make([]fi.Addr, 1)
	_, err = avt.Insert([][]byte{a.ep.GetName()}, fa, 0, nil)
	require.NoError(t, err)
	_, err = a.av.Insert([][]byte{ep.GetName()}, fa, 0, nil)
	require.NoError(t, err)
	target := fa[0]

	region, err := d.MRReg(make([]byte, 64), fi.REMOTE_READ|fi.REMOTE_WRITE, 0, 0x5151, 0, nil)
	require.NoError(t, err)
	read := func() fi.Errno {
		require.NoError(t, a.ep.Read(make([]byte, 8), mr.Desc{}, target, 0, 0x5151, nil))
		buf := make([]fabric.CQEntry, 1)
		_, err := a.txCQ.SRead(buf, 5000)
		if errors.Is(err, fi.EAVAIL) {
			e, rerr := a.txCQ.ReadErr(0)
			require.NoError(t, rerr)
			return e.Err
		}
		require.NoError(t, err)
		return fi.SUCCESS
	}
	require.NotEqual(t, fi.SUCCESS, read(), "not bound, not enabled: refused")
	require.NoError(t, region.Bind(ep, 0))
	require.NoError(t, region.Enable())
	require.Equal(t, fi.SUCCESS, read(), "bound to the endpoint and enabled: served")

	require.NoError(t, ep.Close())
	require.NoError(t, region.Close())
	require.NoError(t, cq.Close())
	require.NoError(t, avt.Close())
	require.NoError(t, d.Close())
}
