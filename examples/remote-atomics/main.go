// Command remote-atomics is a two-host tour of xdpfab's remote atomics.
//
// The server registers a small "board" of memory and waits; the client
// increments a counter on it with fetch-add, takes and releases a lock
// word with compare-and-swap, folds temperature readings into a min and a
// max kept as float64s on the server, and sends a message when done. The
// server then writes a report back into the client's own registered
// memory with an RMA write. The hosts exchange their addresses and memory
// keys through two small files in a shared directory:
//
//	remote-atomics -role server -addr 10.233.0.2:7471 -dir /tmp/rendezvous
//	remote-atomics -role client -addr 10.233.0.1 -dir /tmp/rendezvous
//
// With xdpfab's XDP program attached on the interfaces (`xdpfab attach`)
// the endpoints use AF_XDP; without it, the kernel UDP socket. `make demo`
// runs both roles in two network namespaces.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/mr"
)

// The server's board: what lives at which offset of its registered region.
const (
	offCounter = 0  // uint64, incremented by the client's fetch-adds
	offLock    = 8  // uint64 lock word: 0 when free, else the holder's id
	offMin     = 16 // float64, lowest reading (FI_MIN)
	offMax     = 24 // float64, highest reading (FI_MAX)
	boardSize  = 32

	mailboxSize = 128 // the client's region, where the server writes its report
)

// peerInfo is what each host publishes for the other: its endpoint name
// (fi_getname, the bytes a peer inserts into its AV) and its region's key.
type peerInfo struct {
	Addr string `json:"addr"` // for people reading the file
	Name []byte `json:"name"`
	Key  uint64 `json:"key"`
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "remote-atomics:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("remote-atomics", flag.ContinueOnError)
	role := fs.String("role", "", "server or client")
	addr := fs.String("addr", "", "this host's IP address, optionally with :PORT")
	dir := fs.String("dir", "", "directory both hosts can read, to exchange addresses and keys")
	count := fs.Int("n", 10000, "fetch-adds per phase")
	timeout := fs.Duration("timeout", 30*time.Second, "give up waiting for the other host after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	local, err := netip.ParseAddrPort(*addr)
	if err != nil {
		ip, err2 := netip.ParseAddr(*addr)
		if err2 != nil {
			return fmt.Errorf("-addr %q: want IP or IP:PORT", *addr)
		}
		local = netip.AddrPortFrom(ip, 0)
	}
	if *dir == "" || (*role != "server" && *role != "client") || *count < 1 {
		return errors.New("usage: remote-atomics -role server|client -addr IP[:PORT] -dir DIR [-n N]")
	}

	// Both roles open the same objects: a domain on the local address, an
	// endpoint with an address vector and a completion queue, and a
	// registered memory region that the other host may read and write.
	h, err := openHost(local, *role)
	if err != nil {
		return err
	}
	defer h.close()
	fmt.Fprintf(out, "%s: endpoint %s (transport %s), region key %#x\n",
		*role, h.ep.LocalAddr(), transportName(h.dom.Transport()), h.region.Key())

	// Publish our name and key, read the other host's, and put its address
	// into our AV: from then on it is an fi.Addr for the data calls.
	other := map[string]string{"server": "client", "client": "server"}[*role]
	if err := publish(filepath.Join(*dir, *role+".json"), h); err != nil {
		return err
	}
	peer, err := await(filepath.Join(*dir, other+".json"), *timeout)
	if err != nil {
		return err
	}
	addrs := make([]fi.Addr, 1)
	if _, err := h.av.Insert([][]byte{peer.Name}, addrs, 0, nil); err != nil {
		return err
	}
	h.peer, h.peerKey = addrs[0], peer.Key
	fmt.Fprintf(out, "%s: %s is at %s, key %#x\n", *role, other, peer.Addr, peer.Key)

	if *role == "server" {
		return serve(h, out, *timeout)
	}
	return client(h, out, *count)
}

// host is one side's objects.
type host struct {
	dom     *fabric.Domain
	ep      *fabric.Endpoint
	av      *av.AV
	cq      *fabric.CQ
	rcntr   *fabric.Cntr // counts writes the peer made into our region
	mem     []byte
	region  *mr.MR
	peer    fi.Addr
	peerKey uint64
}

func openHost(local netip.AddrPort, role string) (*host, error) {
	h := &host{}
	if err := h.open(local, role); err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

func (h *host) open(local netip.AddrPort, role string) error {
	// The server's board starts with an empty min/max: +Inf and -Inf. It
	// is filled before registration; afterwards only the peer's operations
	// (and, once the client is done, our own reads) touch it.
	if role == "server" {
		h.mem = make([]byte, boardSize)
		binary.LittleEndian.PutUint64(h.mem[offMin:], math.Float64bits(math.Inf(1)))
		binary.LittleEndian.PutUint64(h.mem[offMax:], math.Float64bits(math.Inf(-1)))
	} else {
		h.mem = make([]byte, mailboxSize)
	}

	f, err := fabric.OpenFabric("", nil)
	if err != nil {
		return err
	}
	// TransportAuto: AF_XDP when xdpfab is attached on the interface that
	// holds the address, else the kernel UDP socket (logged).
	h.dom, err = f.Domain(fabric.DomainAttr{Addr: local.Addr(), Port: local.Port(), Transport: fabric.TransportAuto}, nil)
	if err != nil {
		return err
	}
	if h.ep, err = h.dom.Endpoint(fabric.EPAttr{}, nil); err != nil {
		return err
	}
	if h.av, err = h.dom.AVOpen(av.Attr{}, nil); err != nil {
		return err
	}
	if h.cq, err = h.dom.CQOpen(fabric.CQAttr{WaitObj: fi.WaitUnspec}, nil); err != nil {
		return err
	}
	if h.rcntr, err = h.dom.CntrOpen(fabric.CntrAttr{WaitObj: fi.WaitUnspec}, nil); err != nil {
		return err
	}
	for _, b := range []struct {
		obj   fi.FID
		flags fi.Flags
	}{{h.av, 0}, {h.cq, fi.TRANSMIT | fi.RECV}, {h.rcntr, fi.REMOTE_WRITE}} {
		if err := h.ep.Bind(b.obj, b.flags); err != nil {
			return err
		}
	}
	if err := h.ep.Enable(); err != nil {
		return err
	}
	// Requested keys: 0xB0A2D for the board, 0x3A11 for the mailbox.
	key := map[string]uint64{"server": 0xB0A2D, "client": 0x3A11}[role]
	h.region, err = h.dom.MRReg(h.mem, fi.REMOTE_READ|fi.REMOTE_WRITE, 0, key, 0, nil)
	return err
}

// close releases what openHost opened, the endpoint first: the objects
// bound to it refuse to close while it is open.
func (h *host) close() {
	if h.ep != nil {
		h.ep.Close()
	}
	if h.region != nil {
		h.region.Close()
	}
	if h.rcntr != nil {
		h.rcntr.Close()
	}
	if h.cq != nil {
		h.cq.Close()
	}
	if h.av != nil {
		h.av.Close()
	}
	if h.dom != nil {
		h.dom.Close()
	}
}

// wait reads the completion of one operation. Every operation completes
// once the target has executed it, so fetched values are in place.
func (h *host) wait() error {
	buf := make([]fabric.CQEntry, 1)
	_, err := h.cq.SRead(buf, 10_000)
	if errors.Is(err, fi.EAVAIL) {
		e, _ := h.cq.ReadErr(0)
		return fmt.Errorf("operation failed at the peer: %w", e.Err)
	}
	return err
}

func client(h *host, out io.Writer, n int) error {
	one := u64(1)
	old := make([]byte, 8)

	// 1. Fetch-add, one at a time: each call returns the counter's value
	//    before the add, so we see 0, 1, 2, ... and time each round trip.
	start := time.Now()
	for i := range n {
		if err := h.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, h.peer, offCounter, h.peerKey,
			atomic.UINT64, atomic.SUM, nil); err != nil {
			return err
		}
		if err := h.wait(); err != nil {
			return err
		}
		if got := binary.LittleEndian.Uint64(old); got != uint64(i) {
			return fmt.Errorf("fetch-add %d returned %d", i, got)
		}
	}
	el := time.Since(start)
	fmt.Fprintf(out, "client: fetch-add x%d, one in flight: %v, %.0f ops/s, %v per round trip; returned 0..%d in order\n",
		n, el.Round(time.Millisecond), float64(n)/el.Seconds(), (el / time.Duration(n)).Round(time.Microsecond), n-1)

	// 2. Plain adds (fi_atomic: nothing fetched) with up to 64 in flight:
	//    the datapath applies each exactly once, so the counter ends at 2n.
	const window = 64
	start = time.Now()
	for posted, done := 0, 0; done < n; done++ {
		for posted < n && posted-done < window {
			if err := h.ep.Atomic(one, 1, mr.Desc{}, h.peer, offCounter, h.peerKey, atomic.UINT64, atomic.SUM, nil); err != nil {
				return err
			}
			posted++
		}
		if err := h.wait(); err != nil {
			return err
		}
	}
	el = time.Since(start)
	if err := h.ep.FetchAtomic(one, 1, mr.Desc{}, old, mr.Desc{}, h.peer, offCounter, h.peerKey,
		atomic.UINT64, atomic.ATOMIC_READ, nil); err != nil {
		return err
	}
	if err := h.wait(); err != nil {
		return err
	}
	fmt.Fprintf(out, "client: add x%d, %d in flight: %v, %.0f ops/s; counter now %d\n",
		n, window, el.Round(time.Millisecond), float64(n)/el.Seconds(), binary.LittleEndian.Uint64(old))

	// 3. Compare-and-swap on the lock word: take it (0 -> 42), fail to take
	//    it again (it holds 42, not 0), release it (42 -> 0).
	cas := func(compare, swap uint64) (uint64, error) {
		if err := h.ep.CompareAtomic(u64(swap), 1, mr.Desc{}, u64(compare), mr.Desc{}, old, mr.Desc{},
			h.peer, offLock, h.peerKey, atomic.UINT64, atomic.CSWAP, nil); err != nil {
			return 0, err
		}
		if err := h.wait(); err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint64(old), nil
	}
	for _, step := range []struct {
		what          string
		compare, swap uint64
		want          uint64 // the value the lock held
	}{{"take the lock (0 -> 42)", 0, 42, 0}, {"take it again (0 -> 7)", 0, 7, 42}, {"release it (42 -> 0)", 42, 0, 42}} {
		was, err := cas(step.compare, step.swap)
		if err != nil {
			return err
		}
		result := "swapped"
		if was != step.compare {
			result = "not swapped"
		}
		fmt.Fprintf(out, "client: compare-and-swap, %s: lock was %d, %s\n", step.what, was, result)
		if was != step.want {
			return fmt.Errorf("lock held %d, want %d", was, step.want)
		}
	}

	// 4. Fold readings into the server's min and max (float64, FI_MIN and
	//    FI_MAX), then read both back with FI_ATOMIC_READ.
	readings := []float64{21.5, 19.25, 23.75, -3.5, 18}
	for _, r := range readings {
		for _, op := range []struct {
			off uint64
			op  atomic.Op
		}{{offMin, atomic.MIN}, {offMax, atomic.MAX}} {
			if err := h.ep.Atomic(f64(r), 1, mr.Desc{}, h.peer, op.off, h.peerKey, atomic.DOUBLE, op.op, nil); err != nil {
				return err
			}
			if err := h.wait(); err != nil {
				return err
			}
		}
	}
	minmax := make([]byte, 16)
	if err := h.ep.FetchAtomic(make([]byte, 16), 2, mr.Desc{}, minmax, mr.Desc{}, h.peer, offMin, h.peerKey,
		atomic.DOUBLE, atomic.ATOMIC_READ, nil); err != nil {
		return err
	}
	if err := h.wait(); err != nil {
		return err
	}
	fmt.Fprintf(out, "client: min/max of readings %v: min %g, max %g\n", readings,
		math.Float64frombits(binary.LittleEndian.Uint64(minmax)), math.Float64frombits(binary.LittleEndian.Uint64(minmax[8:])))

	// 5. Tell the server we are done, and wait for its report to land in
	//    our mailbox: the remote-write counter counts its RMA write.
	if err := h.ep.Send([]byte("done"), mr.Desc{}, h.peer, nil); err != nil {
		return err
	}
	if err := h.wait(); err != nil {
		return err
	}
	if err := h.rcntr.Wait(1, 10_000); err != nil {
		return fmt.Errorf("no report from the server: %w", err)
	}
	fmt.Fprintf(out, "client: the server wrote into our memory: %s\n", cstring(h.mem))

	// The counter moved when our endpoint executed the write; the answer
	// that completes the write at the server may still be on its way, or
	// need resending. Like TCP's TIME_WAIT, the side that receives the last
	// operation keeps its endpoint open a moment before closing it.
	time.Sleep(linger)
	return nil
}

// linger is how long the client keeps its endpoint open after the last
// operation it serves: several retransmission timeouts on a LAN.
const linger = 250 * time.Millisecond

func serve(h *host, out io.Writer, timeout time.Duration) error {
	// Wait for the client's "done" message. Messages arrive in order after
	// the client's atomics, so once it is here the board is final, and the
	// completion we read makes the datapath's writes visible to us.
	msg := make([]byte, 16)
	if err := h.ep.Recv(msg, mr.Desc{}, fi.AddrUnspec, nil); err != nil {
		return err
	}
	buf := make([]fabric.CQEntry, 1)
	var err error
	for deadline := time.Now().Add(timeout); ; {
		if _, err = h.cq.SRead(buf, 1000); !errors.Is(err, fi.EAGAIN) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("waiting for the client: %w", err)
	}
	report := fmt.Sprintf("counter=%d lock=%d min=%g max=%g",
		binary.LittleEndian.Uint64(h.mem[offCounter:]), binary.LittleEndian.Uint64(h.mem[offLock:]),
		math.Float64frombits(binary.LittleEndian.Uint64(h.mem[offMin:])),
		math.Float64frombits(binary.LittleEndian.Uint64(h.mem[offMax:])))
	fmt.Fprintf(out, "server: client says %q; board: %s\n", msg[:buf[0].Len], report)

	// Write the report into the client's mailbox (RMA write, its key).
	if err := h.ep.Write([]byte(report+"\x00"), mr.Desc{}, h.peer, 0, h.peerKey, nil); err != nil {
		return err
	}
	return h.wait()
}

// publish writes our name and key where the other host looks for them
// (via a rename, so it never reads half a file).
func publish(path string, h *host) error {
	b, err := json.Marshal(peerInfo{Addr: h.ep.LocalAddr().String(), Name: h.ep.GetName(), Key: h.region.Key()})
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// await polls for the other host's file.
func await(path string, timeout time.Duration) (peerInfo, error) {
	var p peerInfo
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err == nil {
			return p, json.Unmarshal(b, &p)
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return p, fmt.Errorf("waiting for %s: %w", path, err)
		}
	}
}

func u64(v uint64) []byte  { return binary.LittleEndian.AppendUint64(nil, v) }
func f64(v float64) []byte { return u64(math.Float64bits(v)) }

// cstring is b up to its first NUL byte.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func transportName(k fabric.TransportKind) string {
	if k == fabric.TransportXDP {
		return "AF_XDP"
	}
	return "kernel UDP socket"
}
