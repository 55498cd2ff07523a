package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	fatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/datapath/rxpoll"
	"github.com/xdpfab/xdpfab/fabric"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/spinyield"
	"github.com/xdpfab/xdpfab/metrics"
	"github.com/xdpfab/xdpfab/mr"
)

// xdpfab bench measures two endpoints through the public fabric API:
//
//	bench serve --addr IP[:PORT]    a target: registers a region, receives messages
//	bench run --peer IP[:PORT]      the client: nine timed phases against a target
//	bench local                     both ends in this process over loopback
//
// The target's region has a fixed key (benchKey) so a client needs only
// the target's address. Layout: a uint64 counter at benchCounterOff that
// the fetch-add phases increment, and benchWriteSlots 4 KiB slots from
// benchWriteOff that the RMA write phase fills.
//
// Beside the target, serve runs a plain kernel UDP echo server at PORT+1
// (no xdpfab: the XDP program passes other ports to the kernel stack), so
// run can measure a UDP ping-pong on the same wire and quote the fetch-add
// round trip as a ratio of it.
const (
	benchKey        = 0xBE7C4
	benchPort       = 7471
	benchCounterOff = 0
	benchWriteOff   = 4096
	benchWriteSize  = 4096
	benchWriteSlots = 256
	benchRegionLen  = benchWriteOff + benchWriteSlots*benchWriteSize
	benchMsgSize    = 8
	// benchRecvs is how many receives the target keeps posted (the
	// endpoint's default rx size); --depth may not exceed it, so a message
	// never waits in the unexpected queue for long.
	benchRecvs = 1024
	// benchOpTimeout bounds the wait for any one completion: the reliable
	// datapath reports an unreachable peer before it.
	benchOpTimeout = 10 * time.Second
	// udpResend is how long the UDP ping-pong waits for an echo before it
	// counts the datagram lost and sends it again.
	udpResend = 100 * time.Millisecond
	// echoSpinIdle is how long a spinning UDP echo keeps spinning after
	// its last datagram before it waits in poll(2): it spins through a
	// ping-pong phase without taking a core from the target in the others.
	echoSpinIdle = 20 * time.Millisecond
)

const benchUsage = `usage:
  xdpfab [-n NETNS] bench serve --addr IP[:PORT] [--key K] [--transport auto|udp|xdp] [--busy-poll] [--manual-progress] [--duration D]
                              [--shared-poll [--poll-spin D]]
  xdpfab [-n NETNS] bench run --peer IP[:PORT] [--addr LOCAL_IP] [--key K] [--transport auto|udp|xdp] [--busy-poll] [--manual-progress]
                              [--duration D] [--depth N] [--count N] [--phases REGEXP] [-o text|json]
  xdpfab bench local [--addr IP] [--transport auto|udp|xdp] [--busy-poll] [--duration D] [--depth N] [--count N] [--phases REGEXP] [-o text|json]
  xdpfab bench peers [--peers 1,100,1000,10000] [--ops N] [--inflight N] [--net lo,veth] [-o text|json]   (xdpfab bench peers help)
  xdpfab bench incast [--initiators 16,64] [--depth N] [--duration D] [--loss PCT] [-o text|json]   (xdpfab bench incast help)

serve registers a region with key K (default 0xbe7c4) at IP:PORT (default port 7471)
and serves until interrupted or for --duration; beside it, a plain kernel UDP echo
server at IP:PORT+1. run measures nine phases, each for a ninth of --duration
(default 5s) and at most --count operations: 8 B UDP ping-pong with the echo server,
one in flight (kernel sockets, no xdpfab: the baseline), uint64 fetch-add round trips
one in flight (p50/p99 latency), fetch-add at --depth in flight (default 64), the
same with each burst posted with FI_MORE, 8 B send/recv messages and 4 KiB RMA
writes at --depth in flight, and tagged messages (bench_tagged.go): 8 B tagged
sends at --depth in flight, a tagged ping-pong one in flight, 1 MiB tagged sends
(rendezvous) 8 in flight. --phases REGEXP runs only the phases whose names
match it (each still a ninth of --duration). run's local address defaults to the one the route to
the peer uses. --transport auto takes AF_XDP where xdpfab is attached on the
address's interface (xdpfab attach), else the kernel UDP socket; --busy-poll makes
each endpoint's receive goroutine spin while traffic flows (a core per endpoint;
completion readers still wait in fi_cq_sread), and the UDP ping-pong spins too.
--shared-poll serves the endpoints' kernel UDP sockets from the process's shared
receive poller (DomainAttr.SharedPoll), which with --poll-spin D looks for the next
datagram for D before it parks (rxpoll.SetSpin; bench peers --rx tgtspin).
`

// benchOptions are the flags serve, run and local share.
type benchOptions struct {
	addr      string
	key       uint64
	transport fabric.TransportKind
	busyPoll  bool
	manual    bool // FI_PROGRESS_MANUAL: CQ reads drive the datapath
	// sharedPoll: the endpoints' receive side on the process's shared
	// poller (DomainAttr.SharedPoll), spinning pollSpin before it parks.
	sharedPoll bool
	pollSpin   time.Duration
	duration   time.Duration
	// run and local only
	peer  string
	depth int
	count uint64
	out   outputFlag
	// phases, when set, selects the phases whose names it matches; the
	// others are skipped (each selected phase still runs duration/9).
	phases *regexp.Regexp
	// logf receives the domains' notices (why auto chose the kernel socket).
	logf func(format string, args ...any)
}

// transportFlag is --transport auto|udp|xdp.
type transportFlag fabric.TransportKind

func (t *transportFlag) String() string {
	return [...]string{"auto", "udp", "xdp"}[*t]
}

func (t *transportFlag) Set(s string) error {
	switch s {
	case "auto":
		*t = transportFlag(fabric.TransportAuto)
	case "udp":
		*t = transportFlag(fabric.TransportUDP)
	case "xdp":
		*t = transportFlag(fabric.TransportXDP)
	default:
		return fmt.Errorf("transport %q is not auto, udp or xdp", s)
	}
	return nil
}

func parseBenchFlags(sub string, args []string) (*benchOptions, error) {
	fs := newFlagSet("bench " + sub)
	o := &benchOptions{out: "text"}
	tr := transportFlag(fabric.TransportAuto)
	fs.StringVar(&o.addr, "addr", "", "local address")
	fs.Uint64Var(&o.key, "key", benchKey, "the target region's key")
	fs.Var(&tr, "transport", "auto, udp or xdp")
	fs.BoolVar(&o.busyPoll, "busy-poll", false, "the endpoints' receive goroutines spin on the transport instead of blocking")
	fs.BoolVar(&o.manual, "manual-progress", false, "FI_PROGRESS_MANUAL: no receive goroutine, CQ reads drive the datapath")
	fs.BoolVar(&o.sharedPoll, "shared-poll", false, "the endpoints' receive side on the process's shared poller (kernel UDP socket)")
	fs.DurationVar(&o.pollSpin, "poll-spin", 0, "with --shared-poll: how long the poller spins for the next datagram before it parks")
	defDuration := 5 * time.Second
	if sub == "serve" {
		defDuration = 0
	}
	fs.DurationVar(&o.duration, "duration", defDuration, "serve: how long to serve (0: until interrupted); run: total time of the nine phases")
	if sub != "serve" {
		fs.StringVar(&o.peer, "peer", "", "the target's IP[:PORT]")
		fs.IntVar(&o.depth, "depth", 64, "operations in flight in the pipelined phases")
		// The default must not bind before the phase's time is up: at
		// 1_000_000 the kernel-resident FI_MORE phase of a 9 s run (1 s
		// phases) stopped at exactly 1.00 M ops/s.
		fs.Uint64Var(&o.count, "count", 1_000_000_000, "at most this many operations per phase")
		fs.Var(&o.out, "o", "output `FORMAT`: text or json")
		fs.Func("phases", "run only the phases whose names match `REGEXP` (for example 'tagged ping|udp ping')", func(s string) error {
			re, err := regexp.Compile(s)
			if err != nil {
				return fmt.Errorf("--phases: %w", err)
			}
			o.phases = re
			return nil
		})
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) != 0 {
		return nil, fmt.Errorf("%w: bench %s takes no arguments", errUsage, sub)
	}
	o.transport = fabric.TransportKind(tr)
	switch {
	case o.duration < 0:
		return nil, fmt.Errorf("%w: --duration must not be negative", errUsage)
	case o.pollSpin < 0 || (o.pollSpin > 0 && !o.sharedPoll):
		return nil, fmt.Errorf("%w: --poll-spin must not be negative, and needs --shared-poll", errUsage)
	case sub != "serve" && o.duration == 0:
		return nil, fmt.Errorf("%w: --duration must be positive", errUsage)
	case sub != "serve" && (o.depth < 1 || o.depth > benchRecvs):
		return nil, fmt.Errorf("%w: --depth must be in 1..%d", errUsage, benchRecvs)
	case sub != "serve" && o.count == 0:
		return nil, fmt.Errorf("%w: --count must be positive", errUsage)
	case sub == "serve" && o.addr == "":
		return nil, fmt.Errorf("%w: bench serve needs --addr IP[:PORT]", errUsage)
	case sub == "run" && o.peer == "":
		return nil, fmt.Errorf("%w: bench run needs --peer IP[:PORT]", errUsage)
	}
	return o, nil
}

// parseAddrPort takes IP:PORT, [IPv6]:PORT or a bare IP (port def).
func parseAddrPort(s string, def uint16) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: %q is not IP or IP:PORT", errUsage, s)
	}
	return netip.AddrPortFrom(a, def), nil
}

func cmdBench(args []string, stdout, stderr io.Writer, stop <-chan struct{}) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: bench needs serve, run or local", errUsage)
	}
	sub := args[0]
	switch sub {
	case "peers": // bench_peers.go
		return cmdBenchPeers(args[1:], stdout, stderr, stop)
	case "incast": // bench_incast.go
		return cmdBenchIncast(args[1:], stdout, stderr, stop)
	case "serve", "run", "local":
	case "help", "-h", "--help":
		fmt.Fprint(stdout, benchUsage)
		return nil
	default:
		return fmt.Errorf("%w: unknown bench command %q", errUsage, sub)
	}
	o, err := parseBenchFlags(sub, args[1:])
	if err != nil {
		return err
	}
	o.logf = func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	done, release := interrupted(stop)
	defer release()
	switch sub {
	case "serve":
		return benchServe(o, stdout, done)
	case "run":
		return benchRun(o, stdout, stderr, done)
	default:
		return benchLocal(o, stdout, stderr, done)
	}
}

// benchNode is one end: a domain with one endpoint, its AV and one CQ
// for both directions.
type benchNode struct {
	dom *fabric.Domain
	ep  *fabric.Endpoint
	av  *av.AV
	cq  *fabric.CQ
}

func openBenchNode(local netip.AddrPort, o *benchOptions, acceptUnknown bool) (_ *benchNode, err error) {
	f, err := fabric.OpenFabric("", nil)
	if err != nil {
		return nil, err
	}
	n := &benchNode{}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if o.pollSpin > 0 {
		rxpoll.SetSpin(o.pollSpin) // the process's poller: one setting for all its endpoints
	}
	n.dom, err = f.Domain(fabric.DomainAttr{Addr: local.Addr(), Port: local.Port(),
		Transport: o.transport, BusyPoll: o.busyPoll, Progress: progressOf(o.manual), SharedPoll: o.sharedPoll, Logf: o.logf}, nil)
	if err != nil {
		return nil, err
	}
	// An AF_XDP queue the previous bench on this interface closed is
	// freed some time later; afxdp.Open waits for it (ReleaseWait).
	n.ep, err = n.dom.Endpoint(fabric.EPAttr{AcceptUnknown: acceptUnknown, RxSize: benchRxSize}, nil)
	if err != nil {
		return nil, err
	}
	// On AF_XDP the AV lives in the XDP program's AV map too (AVOpen).
	n.av, err = n.dom.AVOpen(av.Attr{}, nil)
	if errors.Is(err, fi.EPERM) && n.dom.Transport() == fabric.TransportUDP {
		// Unprivileged on the kernel socket: no BPF map can be made, and
		// only the XDP program would read it.
		n.av, err = av.Open(av.Attr{}, nil, av.WithMirror(nil))
	}
	if err != nil {
		return nil, err
	}
	n.cq, err = n.dom.CQOpen(fabric.CQAttr{Format: fabric.CQFormatMsg, WaitObj: fi.WaitUnspec}, nil)
	if err != nil {
		return nil, err
	}
	if err = n.ep.Bind(n.av, 0); err != nil {
		return nil, err
	}
	if err = n.ep.Bind(n.cq, fi.TRANSMIT|fi.RECV); err != nil {
		return nil, err
	}
	if err = n.ep.Enable(); err != nil {
		return nil, err
	}
	return n, nil
}

// Close closes what was opened, endpoint first (it holds the others).
func (n *benchNode) Close() error {
	var errs []error
	if n.ep != nil {
		errs = append(errs, n.ep.Close())
	}
	if n.cq != nil {
		errs = append(errs, n.cq.Close())
	}
	if n.av != nil {
		errs = append(errs, n.av.Close())
	}
	if n.dom != nil {
		errs = append(errs, n.dom.Close())
	}
	return errors.Join(errs...)
}

// reap reads at least one completion into buf within benchOpTimeout. An
// error completion is returned alone, as failed. It waits in SRead in every
// mode: with manual progress SRead drives the datapath itself, and with
// --busy-poll the endpoint's receive goroutine already spins, so a spinning
// reader would only take the core it needs (on 2 cores busy-poll round
// trips were 30 times slower with one).
func (n *benchNode) reap(buf []fabric.CQEntry) (k int, failed *fabric.CQErrEntry, err error) {
	var deadline time.Time // set on the first empty read: the clock costs at a million reads a second
	for {
		k, err = n.cq.SRead(buf, 100)
		switch {
		case err == nil:
			return k, nil, nil
		case errors.Is(err, fi.EAVAIL):
			e, rerr := n.cq.ReadErr(0)
			if rerr != nil {
				return 0, nil, rerr
			}
			return 0, &e, nil
		case !errors.Is(err, fi.EAGAIN):
			return 0, nil, err
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(benchOpTimeout)
		} else if now.After(deadline) {
			return 0, nil, fmt.Errorf("no completion within %v: %w", benchOpTimeout, fi.ETIMEDOUT)
		}
	}
}

// benchTarget is the serving end: a registered region and posted receives.
type benchTarget struct {
	*benchNode
	mem    []byte
	region *mr.MR
	bufs   [][]byte // receive buffers, benchRecvs of them
	ctxs   []any    // ctxs[i] = i, boxed once, for every receive (bench_tagged.go)
	msgs   uint64   // messages received
	tagged benchTaggedTarget
	kernel benchKernelTarget
	// cpuPublished is when publishCPU last wrote the CPU time.
	cpuPublished time.Time
}

func openBenchTarget(local netip.AddrPort, o *benchOptions) (*benchTarget, error) {
	n, err := openBenchNode(local, o, true) // clients are not in the AV
	if err != nil {
		return nil, err
	}
	t := &benchTarget{benchNode: n, mem: make([]byte, benchRegionLen)}
	t.region, err = n.dom.MRReg(t.mem, fi.REMOTE_READ|fi.REMOTE_WRITE, 0, o.key, 0, nil)
	if err != nil {
		n.Close()
		return nil, err
	}
	t.bufs = make([][]byte, benchRecvs)
	for i := range t.bufs {
		t.bufs[i] = make([]byte, benchMsgSize)
	}
	t.openTagged()
	t.openKernel(o)
	t.ctxs = make([]any, t.pingIdx()+1)
	for i := range t.ctxs {
		t.ctxs[i] = i
	}
	return t, nil
}

// serve keeps every receive posted until done is closed or, if until is
// not zero, until then.
func (t *benchTarget) serve(done <-chan struct{}, until time.Time) error {
	for i := range t.ctxs {
		if err := t.repost(i); err != nil {
			return err
		}
	}
	comps := make([]fabric.CQEntry, 256)
	for {
		select {
		case <-done:
			return nil
		default:
		}
		t.publishCPU()
		if !until.IsZero() && time.Now().After(until) {
			return nil
		}
		var k int
		var err error
		k, err = t.cq.SRead(comps, 100)
		if errors.Is(err, fi.EAVAIL) {
			e, rerr := t.cq.ReadErr(0)
			if rerr != nil {
				return rerr
			}
			// A client's oversized message fails alone; repost and go on.
			if i, ok := e.Context.(int); ok && e.Err == fi.ETRUNC {
				err = t.repost(i)
			} else {
				err = fmt.Errorf("receive: %w", e.Err)
			}
		}
		if err != nil && !errors.Is(err, fi.EAGAIN) {
			return err
		}
		for _, c := range comps[:k] {
			i, ok := c.Context.(int)
			if !ok {
				continue // not a receive
			}
			t.msgs++
			if i == t.pingIdx() {
				if err := t.pong(c.Len); err != nil {
					return err
				}
			}
			if err := t.repost(i); err != nil {
				return err
			}
		}
	}
}

// Close closes the endpoint, then returns the counter (safe to read once
// the datapath has stopped).
func (t *benchTarget) Close() (counter uint64, err error) {
	if t.ep != nil {
		err = t.ep.Close()
		t.ep = nil
	}
	counter = binary.LittleEndian.Uint64(t.mem[benchCounterOff:])
	return counter, errors.Join(err, t.closeKernel(), t.region.Close(), t.benchNode.Close())
}

func benchServe(o *benchOptions, stdout io.Writer, done <-chan struct{}) error {
	local, err := parseAddrPort(o.addr, benchPort)
	if err != nil {
		return err
	}
	t, echo, err := openTargetWithEcho(local, o)
	if err != nil {
		return err
	}
	name := t.ep.LocalAddr()
	fmt.Fprintf(stdout, "xdpfab bench serve: target %s, region key %#x (%d bytes), transport %s, busy-poll %s\n",
		name, o.key, benchRegionLen, transportName(t.dom.Transport()), onOff(o.busyPoll))
	fmt.Fprintf(stdout, "  kernel UDP echo (the ping-pong baseline) at %s\n", echo.addr)
	fmt.Fprintf(stdout, "  run: xdpfab bench run --peer %s --key %#x\n", name, o.key)
	var until time.Time
	if o.duration > 0 {
		until = time.Now().Add(o.duration)
	}
	serr := t.serve(done, until)
	msgs := t.msgs
	xsk, kernel := afxdpRx() // before Close unregisters the endpoint
	eerr := echo.Close()
	counter, cerr := t.Close()
	fmt.Fprintf(stdout, "xdpfab bench serve: stopped; %d messages received, counter %d, %d UDP datagrams echoed, AF_XDP rx %d rings %d kernel socket\n",
		msgs, counter, echo.echoed.Load(), xsk, kernel)
	return errors.Join(serr, eerr, cerr)
}

// afxdpRx sums this process's AF_XDP endpoints' received packets, those
// that came through their rings and those that came through their kernel
// sockets (metrics.Local): what reached xdpfab's fast path. A datagram the
// XDP program passes to the stack (a checksum it cannot verify, no socket
// on the queue) still arrives, through the kernel socket.
func afxdpRx() (rings, kernel uint64) {
	for _, p := range metrics.Local().Processes {
		for _, ep := range p.Endpoints {
			if ep.AFXDP != nil {
				rings += ep.AFXDP.RxXSK
				kernel += ep.AFXDP.RxKernel
			}
		}
	}
	return rings, kernel
}

// openTargetWithEcho opens the bench target at local and its UDP echo
// beside it (openTargetEcho). With port 0 the kernel picks the target's
// port, and the port after it may be another socket's on a shared host:
// then both close and the pair is tried again on another port, a bounded
// number of times.
func openTargetWithEcho(local netip.AddrPort, o *benchOptions) (*benchTarget, *udpEcho, error) {
	for attempt := 0; ; attempt++ {
		t, err := openBenchTarget(local, o)
		if err != nil {
			return nil, nil, err
		}
		echo, err := openTargetEcho(t, o)
		if err == nil {
			return t, echo, nil
		}
		t.Close()
		if local.Port() != 0 || attempt == 15 || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, err
		}
	}
}

// openTargetEcho opens the UDP echo beside target t: its address, port+1.
// Manual progress spins like busy polling while traffic flows: both read
// without blocking then.
func openTargetEcho(t *benchTarget, o *benchOptions) (*udpEcho, error) {
	at, err := echoAddr(t.ep.LocalAddr())
	if err != nil {
		return nil, err
	}
	return openUDPEcho(at, o.busyPoll || o.manual)
}

func benchLocal(o *benchOptions, stdout, stderr io.Writer, done <-chan struct{}) error {
	if o.addr == "" {
		o.addr = "127.0.0.1"
	}
	a, err := netip.ParseAddr(o.addr)
	if err != nil {
		return fmt.Errorf("%w: --addr %q is not an IP address", errUsage, o.addr)
	}
	t, echo, err := openTargetWithEcho(netip.AddrPortFrom(a, 0), o)
	if err != nil {
		return err
	}
	stopServe := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- t.serve(stopServe, time.Time{}) }()
	o.peer = t.ep.LocalAddr().String()
	rerr := benchRun(o, stdout, stderr, done)
	close(stopServe)
	serr := <-served
	eerr := echo.Close()
	_, cerr := t.Close()
	return errors.Join(rerr, serr, eerr, cerr)
}

// localAddrFor returns the address this host would send to peer from,
// without sending anything (a connected UDP socket's local address).
func localAddrFor(peer netip.AddrPort) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(peer))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %s (set --addr): %w", peer, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// benchReport is the summary, printed as a table or as JSON.
type benchReport struct {
	Local     string `json:"local"`
	Peer      string `json:"peer"`
	Key       uint64 `json:"key"`
	Transport string `json:"transport"` // this end's: udp or xdp
	BusyPoll  bool   `json:"busy_poll"`
	Depth     int    `json:"depth"`
	// CPUs is the CPUs this process may run on (its affinity, e.g. under
	// taskset): where the client's ends of the ping-pongs ran.
	CPUs string `json:"cpus"`
	// Complete is false when the run was interrupted: phases not run are
	// absent.
	Complete bool `json:"complete"`
	// UDPPingPong is the baseline: 8 B datagrams to the target's kernel
	// UDP echo at PORT+1, one in flight, through kernel sockets only.
	UDPPingPong     *phaseResult `json:"udp_ping_pong,omitempty"`
	FetchAddLatency *phaseResult `json:"fetch_add_latency,omitempty"`
	FetchAddRate    *phaseResult `json:"fetch_add_rate,omitempty"`
	// FetchAddBatchedRate is FetchAddRate with each refill burst posted
	// by FetchAtomicMsg, all but the burst's last with FI_MORE.
	FetchAddBatchedRate *phaseResult `json:"fetch_add_batched_rate,omitempty"`
	SendRate            *phaseResult `json:"send_rate,omitempty"`
	WriteBandwidth      *phaseResult `json:"write_bandwidth,omitempty"`
	// The tagged phases (bench_tagged.go).
	TaggedSendRate  *phaseResult `json:"tagged_send_rate,omitempty"`
	TaggedPingPong  *phaseResult `json:"tagged_ping_pong,omitempty"`
	TaggedBandwidth *phaseResult `json:"tagged_bandwidth,omitempty"`
	// The kernel-resident phases (bench_kernel.go).
	KernelFetchAddLatency *phaseResult `json:"kernel_fetch_add_latency,omitempty"`
	KernelCSwapLatency    *phaseResult `json:"kernel_cswap_latency,omitempty"`
	KernelFetchAddRate    *phaseResult `json:"kernel_fetch_add_rate,omitempty"`
	// KernelFetchAddBatchedRate is KernelFetchAddRate with each refill
	// burst posted with FI_MORE.
	KernelFetchAddBatchedRate *phaseResult `json:"kernel_fetch_add_batched_rate,omitempty"`
	// Counter is the target's counter after the run and CounterAdded how
	// far this run moved it; it equals FetchAdds unless another client
	// was adding too.
	Counter      uint64 `json:"counter"`
	CounterAdded uint64 `json:"counter_added"`
	FetchAdds    uint64 `json:"fetch_adds"`
}

// phaseResult is one phase's figures.
type phaseResult struct {
	Ops         uint64   `json:"ops"`
	OpBytes     int      `json:"op_bytes"`
	Depth       int      `json:"depth"`
	Seconds     float64  `json:"seconds"`
	OpsPerSec   float64  `json:"ops_per_sec"`
	BytesPerSec float64  `json:"bytes_per_sec"`
	Latency     *latency `json:"latency_us,omitempty"`
	// RNRRetries counts messages the target refused for want of a posted
	// receive (FI_ENORX) and that were sent again.
	RNRRetries uint64 `json:"rnr_retries,omitempty"`
	// Lost counts UDP ping-pong datagrams (or their echoes) not back
	// within udpResend and sent again.
	Lost uint64 `json:"lost,omitempty"`
	// TargetCPUPerOp is the target process's CPU time per op, ns
	// (bench_kernel.go), for the pipelined fetch-add phases.
	TargetCPUPerOp float64 `json:"target_cpu_ns_per_op,omitempty"`
	// InitiatorUserPerOp and InitiatorSysPerOp are this process's (the
	// initiator's) user and system CPU time per op during the phase, ns,
	// for the same phases: what a rate costs the initiator, a figure that
	// other work on the machine moves far less than the rate itself. On
	// veth the system time includes the softirq work of the packets this
	// process sends, the target's XDP program's among it.
	InitiatorUserPerOp float64 `json:"initiator_user_ns_per_op,omitempty"`
	InitiatorSysPerOp  float64 `json:"initiator_sys_ns_per_op,omitempty"`
	// PacketsPerOp is the request packets the initiator sent per op in
	// the phase, retransmissions included (the same phases): each packet
	// costs both ends a transmission and a reception, whatever it holds.
	PacketsPerOp float64 `json:"packets_per_op,omitempty"`
}

// latency is a round-trip distribution in microseconds.
type latency struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

func latencyOf(samples []time.Duration) *latency {
	if len(samples) == 0 {
		return nil
	}
	slices.Sort(samples)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	// Nearest rank: the smallest sample with at least q of them at or below.
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(samples))+0.999999) - 1
		return samples[max(0, min(i, len(samples)-1))]
	}
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return &latency{P50: us(rank(0.50)), P99: us(rank(0.99)), Mean: us(sum / time.Duration(len(samples))),
		Min: us(samples[0]), Max: us(samples[len(samples)-1])}
}

// benchClient runs the phases against one target.
type benchClient struct {
	*benchNode
	o        *benchOptions
	peer     fi.Addr
	done     <-chan struct{}
	progress *progress
	comps    []fabric.CQEntry
	ctxs     []any    // ctxs[i] = i, boxed once
	results  [][]byte // fetch results, one per slot
	one      []byte   // the fetch-add operand, uint64 1
	udp      int      // the UDP ping-pong's socket, connected to udpPeer
	udpPeer  netip.AddrPort
}

// benchRun runs the client against o.peer and prints the report.
func benchRun(o *benchOptions, stdout, stderr io.Writer, done <-chan struct{}) error {
	peer, err := parseAddrPort(o.peer, benchPort)
	if err != nil {
		return err
	}
	var local netip.Addr
	if o.addr != "" {
		ap, err := parseAddrPort(o.addr, 0)
		if err != nil {
			return err
		}
		local = ap.Addr()
	} else if local, err = localAddrFor(peer); err != nil {
		return err
	}
	n, err := openBenchNode(netip.AddrPortFrom(local, 0), o, false)
	if err != nil {
		return err
	}
	defer n.Close()
	// The ping-pong's socket is opened here, on this thread, so in the
	// namespace of `xdpfab -n`.
	udpPeer, err := echoAddr(peer)
	if err != nil {
		return err
	}
	udp, err := udpSocket(netip.AddrPortFrom(local, 0), udpPeer, o.busyPoll || o.manual)
	if err != nil {
		return err
	}
	defer unix.Close(udp)
	fa := make([]fi.Addr, 1)
	if _, err := n.av.InsertAddrPort([]netip.AddrPort{peer}, fa, 0, nil); err != nil {
		return err
	}
	c := &benchClient{benchNode: n, o: o, peer: fa[0], done: done,
		progress: newProgress(stderr), comps: make([]fabric.CQEntry, 64),
		one: binary.LittleEndian.AppendUint64(nil, 1), udp: udp, udpPeer: udpPeer}
	c.ctxs = make([]any, o.depth)
	c.results = make([][]byte, o.depth)
	for i := range c.ctxs {
		c.ctxs[i] = i
		c.results[i] = make([]byte, 8)
	}
	rep := &benchReport{Local: n.ep.LocalAddr().String(), Peer: peer.String(), Key: o.key,
		Transport: transportName(n.dom.Transport()), BusyPoll: o.busyPoll, Depth: o.depth, CPUs: cpuAffinity()}
	err = c.runPhases(rep)
	c.progress.clear()
	if err != nil {
		return err
	}
	if o.out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printReport(stdout, rep)
	return nil
}

func (c *benchClient) runPhases(rep *benchReport) error {
	start, err := c.readCounter()
	if err != nil {
		return fmt.Errorf("reach the target %s with key %#x (is `xdpfab bench serve` running there?): %w",
			rep.Peer, c.o.key, err)
	}
	phase := c.o.duration / 9
	fetchAdd := func(slot int, _ bool) error {
		return c.ep.FetchAtomic(c.one, 1, mr.Desc{}, c.results[slot], mr.Desc{}, c.peer, benchCounterOff,
			c.o.key, fatomic.UINT64, fatomic.SUM, c.ctxs[slot])
	}
	// The batched fetch-add's messages, one per slot, made once: posting
	// allocates nothing per operation.
	fetchAddMore := c.fetchAddMsgs(benchCounterOff, c.o.key)
	msg := make([]byte, benchMsgSize)
	send := func(slot int, _ bool) error { return c.ep.Send(msg, mr.Desc{}, c.peer, c.ctxs[slot]) }
	block := make([]byte, benchWriteSize)
	for i := range block {
		block[i] = byte(i)
	}
	write := func(slot int, _ bool) error {
		off := benchWriteOff + uint64(slot%benchWriteSlots)*benchWriteSize
		return c.ep.Write(block, mr.Desc{}, c.peer, off, c.o.key, c.ctxs[slot])
	}
	pipe := func(name string, depth, opBytes int, batch bool, post func(int, bool) error) func() (*phaseResult, error) {
		return func() (*phaseResult, error) { return c.pipelined(name, phase, depth, opBytes, batch, post) }
	}
	pingPong := fmt.Sprintf("udp ping-pong %d B, 1 in flight", benchMsgSize)
	phases := []struct {
		name string
		dst  **phaseResult
		run  func() (*phaseResult, error)
		adds bool
	}{
		{pingPong, &rep.UDPPingPong, func() (*phaseResult, error) { return c.udpPingPong(pingPong, phase) }, false},
		{"fetch-add, 1 in flight", &rep.FetchAddLatency, pipe("fetch-add, 1 in flight", 1, 8, false, fetchAdd), true},
		{fmt.Sprintf("fetch-add, %d in flight", c.o.depth), &rep.FetchAddRate,
			c.withTargetCPU(pipe(fmt.Sprintf("fetch-add, %d in flight", c.o.depth), c.o.depth, 8, false, fetchAdd)), true},
		{fmt.Sprintf("fetch-add, %d in flight, FI_MORE", c.o.depth), &rep.FetchAddBatchedRate,
			pipe(fmt.Sprintf("fetch-add, %d in flight, FI_MORE", c.o.depth), c.o.depth, 8, true, fetchAddMore), true},
		{fmt.Sprintf("send %d B, %d in flight", benchMsgSize, c.o.depth), &rep.SendRate,
			pipe(fmt.Sprintf("send %d B, %d in flight", benchMsgSize, c.o.depth), c.o.depth, benchMsgSize, false, send), false},
		{fmt.Sprintf("RMA write %d KiB, %d in flight", benchWriteSize/1024, c.o.depth), &rep.WriteBandwidth,
			pipe(fmt.Sprintf("RMA write %d KiB, %d in flight", benchWriteSize/1024, c.o.depth), c.o.depth, benchWriteSize, false, write), false},
	}
	for _, tp := range c.taggedPhases(rep, phase, pipe) {
		phases = append(phases, struct {
			name string
			dst  **phaseResult
			run  func() (*phaseResult, error)
			adds bool
		}{tp.name, tp.dst, tp.run, false})
	}
	if c.hasKernelRegion() {
		for _, kp := range c.kernelPhases(rep, pipe) {
			phases = append(phases, struct {
				name string
				dst  **phaseResult
				run  func() (*phaseResult, error)
				adds bool
			}{kp.name, kp.dst, kp.run, kp.adds})
		}
	}
	interrupted := false
	for _, p := range phases {
		if c.o.phases != nil && !c.o.phases.MatchString(p.name) {
			continue
		}
		r, err := p.run()
		if r != nil && r.Ops > 0 {
			*p.dst = r
			if p.adds {
				rep.FetchAdds += r.Ops
			}
		}
		if errors.Is(err, errInterrupted) {
			interrupted = true
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	end, err := c.readCounter()
	if err != nil {
		return err
	}
	rep.Counter, rep.CounterAdded = end, end-start
	rep.Complete = !interrupted
	return nil
}

var errInterrupted = errors.New("interrupted")

func progressOf(manual bool) fabric.Progress {
	if manual {
		return fabric.ProgressManual
	}
	return fabric.ProgressAuto
}

// readCounter reads the target's counter with an RMA read.
func (c *benchClient) readCounter() (uint64, error) {
	buf := c.results[0]
	if err := c.ep.Read(buf, mr.Desc{}, c.peer, benchCounterOff, c.o.key, c.ctxs[0]); err != nil {
		return 0, err
	}
	_, failed, err := c.reap(c.comps[:1])
	if err != nil {
		return 0, err
	}
	if failed != nil {
		return 0, fmt.Errorf("RMA read of the counter: %w", failed.Err)
	}
	return binary.LittleEndian.Uint64(buf), nil
}

// pipelined keeps depth operations in flight (post starts one in a free
// slot) for at most dur and c.o.count operations, then waits for the last
// ones. With depth 1 it records every round trip's latency. With batch it
// refills the free slots in bursts sized up front, and post's more is set
// for all but a burst's last operation (FI_MORE); the deadline, count and
// interrupt are checked between bursts. On interrupt it returns what was
// measured with errInterrupted.
func (c *benchClient) pipelined(name string, dur time.Duration, depth, opBytes int, batch bool,
	post func(slot int, more bool) error) (*phaseResult, error) {
	free := make([]int, 0, depth)
	for i := depth - 1; i >= 0; i-- {
		free = append(free, i)
	}
	var samples []time.Duration
	postedAt := make([]time.Time, depth)
	var posted, completed, rnr, reaps uint64
	start := time.Now()
	deadline := start.Add(dur)
	stopping := false
	var stopErr error
	burst := 0 // operations left to post in this burst
	c.progress.begin(name, start)
	for {
		var now time.Time
		checked := false // the deadline and interrupt, once per refill
		for !stopping && len(free) > 0 {
			// The clock is read once per refill of the free slots, and per
			// operation only where round trips are timed (depth 1): at a
			// million operations a second a clock read per post cost the
			// initiator 4 % of its CPU (perf, kernel-resident fetch-adds).
			if !checked || depth == 1 {
				now = time.Now()
			}
			if burst == 0 {
				if posted >= c.o.count || (!checked && now.After(deadline)) {
					stopping = true
					break
				}
				if !checked {
					checked = true
					select {
					case <-c.done:
						stopping, stopErr = true, errInterrupted
						continue
					default:
					}
				}
				burst = 1
				if batch {
					burst = int(min(uint64(len(free)), c.o.count-posted))
				}
			}
			slot := free[len(free)-1]
			if depth == 1 {
				postedAt[slot] = now
			}
			err := post(slot, burst > 1)
			if errors.Is(err, fi.EAGAIN) {
				// The endpoint or CQ is full: reap first. Operations held
				// by FI_MORE go out by themselves shortly.
				burst = 0
				break
			}
			if err != nil {
				return nil, err
			}
			free = free[:len(free)-1]
			posted++
			burst--
		}
		if completed == posted {
			if stopping {
				break
			}
			// EAGAIN with nothing of ours in flight: the CQ is full of
			// someone else's completions. Let them drain, then retry.
			if time.Now().After(deadline) {
				stopping = true
			}
			time.Sleep(time.Millisecond)
			continue
		}
		k, failed, err := c.reap(c.comps)
		if err != nil {
			return nil, err
		}
		if failed != nil {
			if failed.Err != fi.ENORX {
				return nil, fmt.Errorf("operation failed: %w", failed.Err)
			}
			// Receiver not ready: the target has no receive posted and
			// its unexpected-message queue is full. Retry the message
			// (as an RNR retry would) after giving the target a moment
			// to repost.
			rnr++
			free = append(free, failed.Context.(int))
			posted--
			time.Sleep(50 * time.Microsecond)
			continue
		}
		// The progress line needs the clock now and then only.
		reaps++
		timed := depth == 1 || reaps%16 == 0
		if timed {
			now = time.Now()
		}
		for _, e := range c.comps[:k] {
			slot := e.Context.(int)
			if depth == 1 {
				samples = append(samples, now.Sub(postedAt[slot]))
			}
			free = append(free, slot)
		}
		completed += uint64(k)
		if timed {
			c.progress.update(completed, now)
		}
	}
	secs := time.Since(start).Seconds()
	r := &phaseResult{Ops: completed, OpBytes: opBytes, Depth: depth, Seconds: secs,
		OpsPerSec: float64(completed) / secs, BytesPerSec: float64(completed) * float64(opBytes) / secs,
		Latency: latencyOf(samples), RNRRetries: rnr}
	return r, stopErr
}

func printReport(w io.Writer, r *benchReport) {
	fmt.Fprintf(w, "xdpfab bench: %s -> %s, key %#x, transport %s, busy-poll %s, cpus %s\n",
		r.Local, r.Peer, r.Key, r.Transport, onOff(r.BusyPoll), r.CPUs)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  phase\tops\ttime\trate\t")
	row := func(name string, p *phaseResult, unit, extra string) {
		if p == nil {
			fmt.Fprintf(tw, "  %s\t-\t\tnot run\t\n", name)
			return
		}
		fmt.Fprintf(tw, "  %s\t%d\t%.2fs\t%s %s\t%s\n", name, p.Ops, p.Seconds, si(p.OpsPerSec), unit, extra)
	}
	rtt := func(p *phaseResult) string {
		if p == nil || p.Latency == nil {
			return ""
		}
		return fmt.Sprintf("round trip p50 %s  p99 %s  mean %s", us(p.Latency.P50), us(p.Latency.P99), us(p.Latency.Mean))
	}
	pp := rtt(r.UDPPingPong)
	if p := r.UDPPingPong; p != nil && p.Lost > 0 {
		pp += fmt.Sprintf("  lost %d", p.Lost)
	}
	row(fmt.Sprintf("udp ping-pong %d B, 1 in flight (kernel sockets, no xdpfab)", benchMsgSize), r.UDPPingPong, "ops/s", pp)
	row("fetch-add uint64, 1 in flight", r.FetchAddLatency, "ops/s", rtt(r.FetchAddLatency))
	row(fmt.Sprintf("fetch-add uint64, %d in flight", r.Depth), r.FetchAddRate, "ops/s", "")
	row(fmt.Sprintf("fetch-add uint64, %d in flight, FI_MORE", r.Depth), r.FetchAddBatchedRate, "ops/s", "")
	rnr := ""
	if p := r.SendRate; p != nil && p.RNRRetries > 0 {
		rnr = fmt.Sprintf("%d resent after FI_ENORX (receiver not ready)", p.RNRRetries)
	}
	row(fmt.Sprintf("send %d B, %d in flight", benchMsgSize, r.Depth), r.SendRate, "msgs/s", rnr)
	bw := ""
	if p := r.WriteBandwidth; p != nil {
		bw = fmt.Sprintf("%sB/s (%.2f Gbit/s)", si(p.BytesPerSec), p.BytesPerSec*8/1e9)
	}
	row(fmt.Sprintf("RMA write %d KiB, %d in flight", benchWriteSize/1024, r.Depth), r.WriteBandwidth, "ops/s", bw)
	taggedRows(r, row, rtt)
	kernelRows(r, row, rtt)
	tw.Flush()
	taggedRatios(w, r)
	kernelRatios(w, r)
	if fa, pp := r.FetchAddLatency, r.UDPPingPong; fa != nil && fa.Latency != nil && pp != nil && pp.Latency != nil {
		fmt.Fprintf(w, "  fetch-add round trip p50 = %.2f× UDP ping-pong p50\n", fa.Latency.P50/pp.Latency.P50)
	}
	check := "as expected"
	if r.CounterAdded != r.FetchAdds {
		check = fmt.Sprintf("%d fetch-adds completed: another client?", r.FetchAdds)
	}
	fmt.Fprintf(w, "  target counter %d: +%d this run, %s\n", r.Counter, r.CounterAdded, check)
	if !r.Complete {
		fmt.Fprintln(w, "  interrupted: later phases were not run")
	}
}

// si formats v with a k/M/G prefix and three significant digits.
// cpuAffinity lists the CPUs this process may run on, as ranges
// ("0-1", "0"), or "?" if the kernel will not say.
func cpuAffinity() string {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return "?"
	}
	var b strings.Builder
	for i := 0; i < len(set)*64; i++ {
		if !set.IsSet(i) || (i > 0 && set.IsSet(i-1)) {
			continue
		}
		j := i
		for j+1 < len(set)*64 && set.IsSet(j+1) {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			fmt.Fprintf(&b, "%d", i)
		} else {
			fmt.Fprintf(&b, "%d-%d", i, j)
		}
	}
	return b.String()
}

func si(v float64) string {
	for _, p := range []struct {
		f float64
		s string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= p.f {
			return strconv.FormatFloat(v/p.f, 'f', 3-digits(v/p.f), 64) + " " + p.s
		}
	}
	return strconv.FormatFloat(v, 'f', 3-digits(v), 64) + " "
}

// digits is the number of integer digits of v (1..3 for v < 1000).
func digits(v float64) int {
	switch {
	case v >= 100:
		return 3
	case v >= 10:
		return 2
	}
	return 1
}

func us(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2fms", v/1000)
	}
	return fmt.Sprintf("%.1fµs", v)
}

func transportName(k fabric.TransportKind) string {
	t := transportFlag(k)
	return t.String()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// progress is the line on stderr while a phase runs: rewritten in place
// on a terminal, else one line a second.
type progress struct {
	w     io.Writer
	tty   bool
	every time.Duration
	name  string
	start time.Time
	last  time.Time
	shown bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, every: time.Second}
	if f, ok := w.(*os.File); ok {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			p.tty, p.every = true, 200*time.Millisecond
		}
	}
	return p
}

// begin starts a phase; the line keeps its pace across phases, so short
// phases still show one.
func (p *progress) begin(name string, now time.Time) {
	p.name, p.start = name, now
	if p.last.IsZero() {
		p.last = now
	}
}

func (p *progress) update(ops uint64, now time.Time) {
	if now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	rate := float64(ops) / now.Sub(p.start).Seconds()
	line := fmt.Sprintf("bench: %s: %d ops, %s ops/s", p.name, ops, si(rate))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.shown = true
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// clear removes the in-place line before the summary.
func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// udpEcho is the kernel UDP echo server serve runs at PORT+1, the
// baseline the fetch-add round trip is compared with: it sends every
// datagram back to its sender, whatever it holds.
type udpEcho struct {
	fd     int
	addr   netip.AddrPort
	stop   atomic.Bool
	wg     sync.WaitGroup
	echoed atomic.Uint64
}

// echoAddr is where the target at t serves the UDP echo: port t+1.
func echoAddr(t netip.AddrPort) (netip.AddrPort, error) {
	if t.Port() == 0 || t.Port() == 65535 {
		return netip.AddrPort{}, fmt.Errorf("%w: no UDP echo port after port %d", errUsage, t.Port())
	}
	return netip.AddrPortFrom(t.Addr(), t.Port()+1), nil
}

// udpSocket opens a kernel UDP socket bound to local (on the calling
// thread, so in its network namespace) and, if peer is valid, connected
// to it. Blocking sockets get a receive timeout of udpResend, so a
// receive never waits longer.
func udpSocket(local, peer netip.AddrPort, busy bool) (fd int, err error) {
	family := unix.AF_INET
	if !local.Addr().Unmap().Is4() {
		family = unix.AF_INET6
	}
	fd, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("UDP socket: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if !busy {
		tv := unix.NsecToTimeval(udpResend.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return -1, fmt.Errorf("UDP socket: SO_RCVTIMEO: %w", err)
		}
	}
	if err := unix.Bind(fd, sockaddrOf(local, family)); err != nil {
		return -1, fmt.Errorf("UDP socket: bind %s: %w", local, err)
	}
	if peer.IsValid() {
		if err := unix.Connect(fd, sockaddrOf(peer, family)); err != nil {
			return -1, fmt.Errorf("UDP socket: connect %s: %w", peer, err)
		}
	}
	return fd, nil
}

func sockaddrOf(ap netip.AddrPort, family int) unix.Sockaddr {
	if family == unix.AF_INET {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// openUDPEcho opens the echo socket at addr on the calling thread and
// starts serving it; busy spins with MSG_DONTWAIT receives while
// datagrams come (until echoSpinIdle after the last; yielding as
// internal/spinyield says), else receives block (with a timeout, to
// notice Close).
func openUDPEcho(addr netip.AddrPort, busy bool) (*udpEcho, error) {
	fd, err := udpSocket(addr, netip.AddrPort{}, busy)
	if err != nil {
		return nil, fmt.Errorf("UDP echo: %w", err)
	}
	// The port bound, should addr's be 0.
	if sa, err := unix.Getsockname(fd); err == nil {
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			addr = netip.AddrPortFrom(addr.Addr(), uint16(sa.Port))
		case *unix.SockaddrInet6:
			addr = netip.AddrPortFrom(addr.Addr(), uint16(sa.Port))
		}
	}
	e := &udpEcho{fd: fd, addr: addr}
	flags := 0
	if busy {
		flags = unix.MSG_DONTWAIT
	}
	e.wg.Go(func() { e.serve(flags) })
	return e, nil
}

func (e *udpEcho) serve(flags int) {
	buf := make([]byte, 64<<10) // any datagram fits: none is cut short
	var last time.Time          // when the last datagram came
	var yielder spinyield.Yielder
	for !e.stop.Load() {
		n, from, err := unix.Recvfrom(e.fd, buf, flags)
		if err != nil || from == nil {
			// EAGAIN (timeout or nothing yet), EINTR, or an error an
			// ICMP message left on the socket: none stops the echo.
			if flags&unix.MSG_DONTWAIT != 0 && err == unix.EAGAIN {
				if now := time.Now(); now.Sub(last) > echoSpinIdle {
					// Idle: wait for a datagram without spinning (and
					// look at stop every udpResend).
					pfd := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}}
					_, _ = unix.Poll(pfd, int(udpResend/time.Millisecond))
				} else {
					// Spinning: give the processor away as xdpfab's
					// polling readers do, so a client on the same core
					// runs.
					yielder.EmptyRound(now)
				}
			}
			continue
		}
		last = time.Now()
		yielder.Reset()
		// A full socket buffer drops the echo, as the network may.
		if unix.Sendto(e.fd, buf[:n], unix.MSG_DONTWAIT, from) == nil {
			e.echoed.Add(1)
		}
	}
}

// Close stops the echo and closes its socket.
func (e *udpEcho) Close() error {
	e.stop.Store(true)
	e.wg.Wait()
	return unix.Close(e.fd)
}

// recvConnected is recv(2) on a connected socket: unlike unix.Recvfrom it
// does not allocate the source address, so a round trip allocates nothing.
func recvConnected(fd int, buf []byte, flags int) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(buf))),
		uintptr(len(buf)), uintptr(flags), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// udpPingPong sends 8-byte datagrams (a sequence number) to the echo
// server on c.udp, one in flight, for at most dur and c.o.count round
// trips, and records every round trip from the first send to the echo.
// An echo not back within udpResend counts the datagram lost and sends it
// again; echoes of earlier datagrams are skipped. With --busy-poll or
// manual progress it spins on non-blocking receives and gives the
// processor away as xdpfab's polling readers do (internal/spinyield), so
// on a core shared with the echo both spin alike. On interrupt it returns
// what was measured with errInterrupted.
func (c *benchClient) udpPingPong(name string, dur time.Duration) (*phaseResult, error) {
	flags := 0
	if c.o.busyPoll || c.o.manual {
		flags = unix.MSG_DONTWAIT
	}
	out, in := make([]byte, benchMsgSize), make([]byte, 64)
	var samples []time.Duration
	var seq, lost uint64
	start := time.Now()
	deadline := start.Add(dur)
	var stopErr error
	c.progress.begin(name, start)
ops:
	for seq < c.o.count {
		select {
		case <-c.done:
			stopErr = errInterrupted
			break ops
		default:
		}
		sentAt := time.Now()
		if sentAt.After(deadline) {
			break
		}
		seq++
		binary.LittleEndian.PutUint64(out, seq)
		resendAt, giveUp := sentAt.Add(udpResend), sentAt.Add(benchOpTimeout)
		if _, err := unix.Write(c.udp, out); err != nil {
			return nil, c.udpErr(err)
		}
		var yielder spinyield.Yielder
		for {
			n, err := recvConnected(c.udp, in, flags)
			if err == nil {
				if n == benchMsgSize && binary.LittleEndian.Uint64(in) == seq {
					break
				}
				continue // the echo of a datagram sent before, or not ours
			}
			if err != unix.EAGAIN && err != unix.EINTR {
				return nil, c.udpErr(err)
			}
			now := time.Now()
			if now.Before(resendAt) {
				if flags&unix.MSG_DONTWAIT != 0 {
					yielder.EmptyRound(now) // as xdpfab's polling readers do
				}
				continue
			}
			if now.After(giveUp) {
				return nil, fmt.Errorf("no echo from %s within %v: %w", c.udpPeer, benchOpTimeout, fi.ETIMEDOUT)
			}
			select {
			case <-c.done:
				stopErr = errInterrupted
				break ops
			default:
			}
			lost++
			resendAt = now.Add(udpResend)
			if _, err := unix.Write(c.udp, out); err != nil {
				return nil, c.udpErr(err)
			}
		}
		now := time.Now()
		samples = append(samples, now.Sub(sentAt))
		c.progress.update(uint64(len(samples)), now)
	}
	secs := time.Since(start).Seconds()
	ops := uint64(len(samples))
	r := &phaseResult{Ops: ops, OpBytes: benchMsgSize, Depth: 1, Seconds: secs,
		OpsPerSec: float64(ops) / secs, BytesPerSec: float64(ops) * benchMsgSize / secs,
		Latency: latencyOf(samples), Lost: lost}
	return r, stopErr
}

func (c *benchClient) udpErr(err error) error {
	if errors.Is(err, unix.ECONNREFUSED) {
		return fmt.Errorf("no UDP echo at %s (is `xdpfab bench serve` running there, a version with the echo?): %w",
			c.udpPeer, err)
	}
	return fmt.Errorf("UDP to %s: %w", c.udpPeer, err)
}

// fetchAddMsgs returns a post function for the FI_MORE phases: a fetch-add
// of 1 to the uint64 at off under key, as fi_fetch_atomicmsg with FI_MORE
// while more of the burst follows. The messages are made once, one per
// slot, so posting allocates nothing.
func (c *benchClient) fetchAddMsgs(off, key uint64) func(slot int, more bool) error {
	type atomicMsg struct {
		msg     fabric.MsgAtomic
		res     []fabric.IOC
		resDesc []mr.Desc
	}
	operand, desc := []fabric.IOC{{Buf: c.one, Count: 1}}, []mr.Desc{{}}
	target := []fabric.RMAIOC{{Addr: off, Count: 1, Key: key}}
	msgs := make([]atomicMsg, c.o.depth)
	for i := range msgs {
		msgs[i] = atomicMsg{
			msg: fabric.MsgAtomic{MsgIOV: operand, Desc: desc, Addr: c.peer, RMAIOV: target,
				Datatype: fatomic.UINT64, Op: fatomic.SUM, Context: c.ctxs[i]},
			res: []fabric.IOC{{Buf: c.results[i], Count: 1}}, resDesc: []mr.Desc{{}},
		}
	}
	return func(slot int, more bool) error {
		var flags fi.Flags
		if more {
			flags = fi.MORE
		}
		m := &msgs[slot]
		return c.ep.FetchAtomicMsg(&m.msg, m.res, m.resDesc, flags)
	}
}
