package fabric_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath/lossy"
	"github.com/xdpfab/xdpfab/datapath/rxpoll"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// TestSharedPollExactlyOnce: initiator endpoints whose domains have
// DomainAttr.SharedPoll, on lossy sockets (loss, duplication and
// reordering), and a target endpoint whose domain has it too, all served
// by the process's one receive poller: every pipelined fetch-add on the
// target's counter completes once, successfully, with a distinct fetched
// value, and the counter ends at their number. The poller runs while the
// endpoints are open and is gone after the last one closes.
func TestSharedPollExactlyOnce(t *testing.T) {
	require.False(t, rxpoll.Running(), "the shared poller runs before the test")
	const inis, depth = 6, 8
	perIni := 400
	if testing.Short() {
		perIni = 100
	}
	shared := fabric.DomainAttr{SharedPoll: true}
	target := newSide(t, sideOpts{dom: shared})
	require.True(t, target.ep.SharedPollForTest(), "the target's domain asked for the shared poller")
	sides := make([]*side, inis)
	impaired := make([]*lossy.Transport, inis)
	for i := range sides {
		u, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{SharedPoll: true})
		require.NoError(t, err)
		w, err := lossy.Wrap(u, lossy.Config{Seed: uint64(i + 1), Loss: 0.05, RecvLoss: 0.05, Duplicate: 0.02, Reorder: 0.05, MaxPacket: 9000})
		require.NoError(t, err)
		impaired[i] = w
		sides[i] = newSide(t, sideOpts{dom: shared, ep: fabric.EPAttr{Transport: w}, memLen: -1})
		require.True(t, sides[i].ep.SharedPollForTest())
		link(t, sides[i], target)
	}
	require.True(t, rxpoll.Running(), "no shared poller with its endpoints open")

	type result struct {
		values []uint64
		err    error
	}
	out := make(chan result, inis)
	for _, s := range sides {
		go func() {
			var r result
			one := binary.LittleEndian.AppendUint64(nil, 1)
			res := make([][]byte, perIni)
			buf := make([]fabric.CQEntry, depth)
			posted, done := 0, 0
			deadline := time.Now().Add(2 * time.Minute)
			for done < perIni {
				for posted < perIni && posted-done < depth {
					res[posted] = make([]byte, 8)
					err := s.ep.FetchAtomic(one, 1, mr.Desc{}, res[posted], mr.Desc{}, s.peer, 0, regionKey,
						fatomic.UINT64, fatomic.SUM, posted)
					if errors.Is(err, fi.EAGAIN) {
						break
					}
					if err != nil {
						r.err = err
						out <- r
						return
					}
					posted++
				}
				n, err := s.txCQ.SRead(buf, 100)
				switch {
				case errors.Is(err, fi.EAVAIL):
					e, _ := s.txCQ.ReadErr(0)
					r.err = fmt.Errorf("error completion %v (context %v)", e.Err, e.Context)
					out <- r
					return
				case err != nil && !errors.Is(err, fi.EAGAIN):
					r.err = err
					out <- r
					return
				case time.Now().After(deadline):
					r.err = fmt.Errorf("stuck after %d of %d fetch-adds", done, perIni)
					out <- r
					return
				}
				for _, c := range buf[:n] {
					r.values = append(r.values, binary.LittleEndian.Uint64(res[c.Context.(int)]))
				}
				done += n
			}
			out <- r
		}()
	}
	seen := make([]bool, inis*perIni)
	for range inis {
		r := <-out
		require.NoError(t, r.err)
		for _, v := range r.values {
			require.Less(t, v, uint64(len(seen)), "fetched value out of range")
			require.False(t, seen[v], "value %d fetched twice: a fetch-add executed twice", v)
			seen[v] = true
		}
	}
	var ls lossy.Stats
	for _, w := range impaired {
		st := w.Stats()
		ls.Dropped += st.Dropped
		ls.Duplicated += st.Duplicated
		ls.Reordered += st.Reordered
	}
	t.Logf("%d fetch-adds; lossy: dropped %d, duplicated %d, reordered %d", inis*perIni, ls.Dropped, ls.Duplicated, ls.Reordered)
	require.Positive(t, ls.Dropped)
	require.Positive(t, ls.Duplicated)
	for _, s := range sides {
		s.close(t)
	}
	target.close(t) // its datapath stopped: its memory is final
	require.Equal(t, uint64(inis*perIni), binary.LittleEndian.Uint64(target.mem), "the target's counter")
	require.False(t, rxpoll.Running(), "the shared poller outlived its endpoints")
}

// TestSharedPollAuto: without DomainAttr.SharedPoll, endpoints opened while
// the process has SharedPollAuto endpoints on the kernel socket use the
// shared poller; those opened below it, and those of a busy-polling or
// manual-progress domain, do not. A domain asking for the shared poller
// with busy polling or manual progress fails to open with FI_EINVAL.
func TestSharedPollAuto(t *testing.T) {
	f, err := fabric.OpenFabric("", nil)
	require.NoError(t, err)
	open := func(attr fabric.DomainAttr) *fabric.Domain {
		attr.Addr, attr.Transport = netip.MustParseAddr("127.0.0.1"), fabric.TransportUDP
		d, err := f.Domain(attr, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, d.Close()) })
		return d
	}
	for _, bad := range []fabric.DomainAttr{{SharedPoll: true, BusyPoll: true}, {SharedPoll: true, Progress: fabric.ProgressManual}} {
		_, err := f.Domain(bad, nil)
		require.ErrorIs(t, err, fi.EINVAL, "%+v", bad)
	}
	d := open(fabric.DomainAttr{})
	manual := open(fabric.DomainAttr{Progress: fabric.ProgressManual})
	base := fabric.UDPEndpointsForTest()
	var eps []*fabric.Endpoint
	defer func() {
		for _, ep := range eps {
			require.NoError(t, ep.Close())
		}
	}()
	for fabric.UDPEndpointsForTest() < fabric.SharedPollAuto {
		ep, err := d.Endpoint(fabric.EPAttr{}, nil)
		require.NoError(t, err)
		require.False(t, ep.SharedPollForTest(), "endpoint %d of %d (%d before the test) uses the shared poller",
			fabric.UDPEndpointsForTest(), fabric.SharedPollAuto, base)
		eps = append(eps, ep)
	}
	ep, err := d.Endpoint(fabric.EPAttr{}, nil)
	require.NoError(t, err)
	eps = append(eps, ep)
	require.True(t, ep.SharedPollForTest(), "endpoint beyond SharedPollAuto without the shared poller")
	ep, err = manual.Endpoint(fabric.EPAttr{}, nil)
	require.NoError(t, err)
	eps = append(eps, ep)
	require.False(t, ep.SharedPollForTest(), "a manual-progress endpoint on the shared poller")
	for _, ep := range eps {
		require.NoError(t, ep.Close())
	}
	eps = nil
	require.Equal(t, base, fabric.UDPEndpointsForTest(), "closed endpoints still counted")
}
