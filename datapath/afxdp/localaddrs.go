package afxdp

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/xdpfab/xdpfab/xdp"
)

// addrWatch keeps the XDP program's local_addrs map equal to the network
// namespace's addresses while the device is open. The program consults the
// map for ports bound to every address (an entry set by `xdpfab attach
// --port` or xdp.Options.Ports, before an endpoint binds the port to its
// own address): only datagrams to an address of this host are steered to
// the sockets, the rest (forwarded or bridged traffic) passes to the stack.
// While no device is open nothing follows the addresses, but then no
// AF_XDP socket is bound either and the program passes everything anyway.
//
// It subscribes to address changes first and then reads the full list, so
// no change falls between the two; every burst of changes (and a
// subscription lost to a full socket buffer, which is renewed) is answered
// with a full resync, as addresses are few.
type addrWatch struct {
	done   chan struct{}
	exited chan struct{}
}

// watchLocalAddrs starts following the addresses of the calling thread's
// network namespace into att's local_addrs map.
func watchLocalAddrs(att *xdp.Attachment) (*addrWatch, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink: %w", err)
	}
	w := &addrWatch{done: make(chan struct{}), exited: make(chan struct{})}
	subscribe := func() (chan netlink.AddrUpdate, error) {
		ch := make(chan netlink.AddrUpdate, 64)
		err := netlink.AddrSubscribeWithOptions(ch, w.done, netlink.AddrSubscribeOptions{
			Namespace: &ns, ReceiveBufferSize: 1 << 20,
			ErrorCallback: func(error) {}, // a lost subscription closes ch: renewed below
		})
		return ch, err
	}
	ch, err := subscribe()
	if err == nil {
		if err = att.SyncLocalAddrs(nl); err != nil {
			close(w.done)
			for range ch { // until the subscription's goroutine closes it
			}
		}
	}
	if err != nil {
		nl.Close()
		ns.Close()
		return nil, fmt.Errorf("local addresses: %w", err)
	}
	go func() {
		defer close(w.exited)
		defer ns.Close()
		defer nl.Close()
		for {
			for range ch {
				for len(ch) > 0 { // one resync per burst
					<-ch
				}
				_ = att.SyncLocalAddrs(nl) // the next change retries
			}
			select {
			case <-w.done:
				return
			default:
			}
			var err error
			if ch, err = subscribe(); err != nil {
				ch = nil
				<-w.done // cannot follow any more: stop quietly, the map as it is
				return
			}
			_ = att.SyncLocalAddrs(nl)
		}
	}()
	return w, nil
}

// stop ends the watch and waits for its goroutine.
func (w *addrWatch) stop() {
	if w == nil {
		return
	}
	close(w.done)
	<-w.exited
}
