package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	fiatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/rxpoll"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
)

// xdpfab bench peers: memory per peer and rate against the number of
// peers of one target endpoint (issue 17). Each phase starts a fresh
// target, `xdpfab bench serve` over the kernel UDP socket on loopback, as
// a child process, so its RSS and CPU time are the target's alone; then
// N initiator endpoints in this process (reliability engines, one UDP
// socket each) do --ops uint64 fetch-adds each on the target's counter.
// The same number of operations is in flight in every phase (--inflight,
// handed round-robin across the peers), and requests are not coalesced
// unless --coalesce, so every phase sends one packet per operation and
// the rates compare what many peers cost, not packing. With --net veth
// the target is on AF_XDP in a namespace instead (bench_peers_veth.go).

const benchPeersUsage = `usage:
  xdpfab bench peers [--peers 1,100,1000,10000] [--ops N] [--min-ops N] [--inflight N] [--addr IP] [--coalesce] [--rx shared,ring,spin,tgtspin,spinall,own] [--spin D]
                     [--net lo,veth] [--ini kernel,xdp] [--mode native|generic] [--cpuprofile FILE] [-o text|json]

For each peer count: a fresh target (xdpfab bench serve on the kernel UDP socket, a
child process) and that many initiator endpoints in this process, each doing --ops
fetch-adds (default 200; more where few peers, so that a phase does at least
--min-ops, default 20000) on the target's counter, --inflight (default 64) in flight
across all of them. Prints the aggregate rate and its ratio to the single-peer phase,
that ratio in operations per CPU-second of the target and the initiators together
("per CPU": steadier than the rate on a machine whose other load moves), the target's RSS growth over the phase and per peer, its CPU time per operation, the
initiators' retransmissions and the spurious part of them (the first transmission
was answered), and checks that every fetch-add executed exactly once (distinct fetched values, the final
counter). --rx shared (the default) has the process's shared receive poller serve
every initiator's socket (reliable.Config.SharedPoll, udp.Options.SharedPoll); --rx
own gives each initiator a receive goroutine of its own, its socket in Go's
netpoller; --rx ring is shared with the initiators' sends batched across their
sockets: what the poller's round of handlers sends (the completions' next
operations, a datagram on each of many sockets) goes out at the round's end in one
io_uring_enter (udp.Options.RingSend) instead of a sendmmsg per socket; --rx spin is shared with the poller spinning --spin (default 50us) for
the next ready socket before it parks (rxpoll.SetSpin); --rx shared,spin,own runs
them all for each peer count, one after the other, each row's ratio to the first
phase of its own kind; --rx tgtspin is shared with the target's endpoint on its
process's shared poller, spinning (bench serve --shared-poll --poll-spin), and
--rx spinall both spinning. --net veth (root) runs the phases with the target on
xdpfab's fast path instead: bench incast's topology with one initiator namespace
(10.236.0.0/16), xdpfab attached (--mode) on the target's veth and bench serve on
AF_XDP there (spinning on its rings, --busy-poll, for tgtspin and spinall), every
initiator's kernel UDP socket in the initiators' namespace, whose veth sends full
UDP checksums (with veth's checksum offload the XDP program would pass every request
to the target's kernel socket; -o json counts where the target's packets came in); --net lo,veth alternates
the two at each peer count, each kind's ratio to its own single peer; the report
names the transport each target got (udp or xdp). --ini xdp (with --net veth) puts
the initiators on xdpfab's fast path too: xdpfab attached on their veth (its ports
map sized for them), every initiator endpoint an AF_XDP transport there, all of
them sharing the interface's AF_XDP socket and served by the shared poller (rx
shared and ring alike; own: a receive goroutine each), the XDP program steering
each response to its endpoint by port; --ini kernel,xdp alternates the two at each
peer count, each its own kind. The report's ini RSS/peer is the initiators'
process's RSS growth on opening the peers, per peer. --cpuprofile writes a pprof CPU profile of the initiators' process over
the measured part of each phase (FILE.<peers> when there are several).
`

type peersOptions struct {
	peers    []int
	ops      int
	minOps   int
	inflight int
	addr     netip.Addr
	coalesce bool
	ownRx    bool // the phase's initiators have receive goroutines of their own
	spin     time.Duration
	spinRx   bool     // the phase's shared poller spins (--rx spin)
	spinTgt  bool     // the target's endpoint on its process's shared poller, spinning (--rx tgtspin, spinall)
	ringTx   bool     // the initiators' sends batched across sockets through io_uring (--rx ring)
	rxModes  []string // --rx, in order
	out      string
	key      uint64
	profile  string
	nets     []string // --net, in order: lo, veth
	mode     string   // --mode: the veth target's XDP attach mode
	veth     *incastNet
	inVeth   bool     // the phase runs over the veth topology
	inis     []string // --ini, in order: kernel, xdp
	iniXDP   bool     // the phase's initiators are AF_XDP transports (--ini xdp)
}

func parsePeersFlags(args []string) (*peersOptions, error) {
	fs := flag.NewFlagSet("bench peers", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := &peersOptions{}
	peers := fs.String("peers", "1,100,1000,10000", "peer counts, comma-separated")
	fs.IntVar(&o.ops, "ops", 200, "fetch-adds per peer")
	fs.IntVar(&o.minOps, "min-ops", 20000, "fetch-adds per phase at least (more per peer where few peers)")
	fs.IntVar(&o.inflight, "inflight", 64, "operations in flight across all peers")
	addr := fs.String("addr", "127.0.0.1", "loopback address for the target and the initiators")
	fs.BoolVar(&o.coalesce, "coalesce", false, "let the engines pack requests (packets per op then differ between phases)")
	fs.StringVar(&o.out, "o", "text", "output `FORMAT`: text or json")
	rx := fs.String("rx", "shared", "initiators' receive side: shared (one poller), ring (shared, sends of a round in one io_uring_enter), spin (one poller spinning before it parks), own (a goroutine each), comma-separated")
	fs.DurationVar(&o.spin, "spin", 50*time.Microsecond, "how long the shared poller spins before it parks with --rx spin")
	fs.StringVar(&o.profile, "cpuprofile", "", "write the initiators' CPU profile to `FILE`")
	fs.Uint64Var(&o.key, "key", 0xbe7c4, "region key")
	nets := fs.String("net", "lo", "where: lo (kernel UDP over loopback), veth (the target on AF_XDP over a veth pair), comma-separated")
	fs.StringVar(&o.mode, "mode", "native", "with --net veth: XDP attach mode for the target (and --ini xdp's initiators), native or generic")
	inis := fs.String("ini", "kernel", "with --net veth: the initiators' transport, kernel (a UDP socket each) or xdp (AF_XDP), comma-separated")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	for _, s := range strings.Split(*peers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 60000 {
			return nil, fmt.Errorf("%w: --peers: %q is not a count in 1..60000", errUsage, s)
		}
		o.peers = append(o.peers, n)
	}
	a, err := netip.ParseAddr(*addr)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: --addr: %v", errUsage, err)
	case o.ops < 1 || o.inflight < 1 || o.inflight > 4096:
		return nil, fmt.Errorf("%w: --ops and --inflight (at most 4096) must be positive", errUsage)
	case o.out != "text" && o.out != "json":
		return nil, fmt.Errorf("%w: -o takes text or json", errUsage)
	}
	for _, m := range strings.Split(*rx, ",") {
		if m = strings.TrimSpace(m); m != "shared" && m != "spin" && m != "tgtspin" && m != "spinall" && m != "own" && m != "ring" {
			return nil, fmt.Errorf("%w: --rx takes shared, ring, spin, tgtspin, spinall and own", errUsage)
		}
		o.rxModes = append(o.rxModes, strings.TrimSpace(m))
	}
	for _, m := range strings.Split(*nets, ",") {
		if m = strings.TrimSpace(m); m != "lo" && m != "veth" {
			return nil, fmt.Errorf("%w: --net takes lo and veth", errUsage)
		}
		o.nets = append(o.nets, m)
	}
	for _, m := range strings.Split(*inis, ",") {
		if m = strings.TrimSpace(m); m != "kernel" && m != "xdp" {
			return nil, fmt.Errorf("%w: --ini takes kernel and xdp", errUsage)
		}
		o.inis = append(o.inis, m)
	}
	if slices.Contains(o.inis, "xdp") && !slices.Contains(o.nets, "veth") {
		return nil, fmt.Errorf("%w: --ini xdp needs --net veth", errUsage)
	}

	if o.mode != "native" && o.mode != "generic" {
		return nil, fmt.Errorf("%w: --mode takes native or generic", errUsage)
	}
	o.addr = a
	return o, nil
}

// peersPhase is one row of the report.
type peersPhase struct {
	Peers int    `json:"peers"`
	Net   string `json:"net"` // lo or veth
	Rx    string `json:"rx"`  // the initiators' receive side: shared or own
	// Ini is the initiators' transport: kernel (a UDP socket each) or
	// xdp (AF_XDP, --ini xdp).
	Ini string `json:"ini"`
	// IniTxXSK, IniRxXSK and IniRxKernel are the AF_XDP initiators'
	// frames sent and datagrams received through the rings, and
	// datagrams received through their kernel sockets, over the measured
	// phase (0 for kernel initiators).
	IniTxXSK    uint64 `json:"ini_tx_afxdp"`
	IniRxXSK    uint64 `json:"ini_rx_afxdp"`
	IniRxKernel uint64 `json:"ini_rx_kernel_socket"`
	// IniRSSPerPeer is the initiators' process's RSS growth on opening
	// the phase's peers, per peer.
	IniRSSPerPeer float64 `json:"ini_rss_bytes_per_peer"`
	// Transport is the target's, as its banner said: udp or xdp.
	Transport string  `json:"target_transport"`
	Ops       int     `json:"ops"`
	Seconds   float64 `json:"seconds"`
	Rate      float64 `json:"ops_per_sec"`
	RateRatio float64 `json:"rate_vs_first"` // to the first phase of the same Net and Rx (the single peer)
	// RSSGrowth is the target's RSS after the phase minus before it;
	// PerPeer that over the peers.
	RSSGrowth   int64   `json:"target_rss_growth_bytes"`
	PerPeer     float64 `json:"target_bytes_per_peer"`
	TargetCPUus float64 `json:"target_cpu_us_per_op"`
	// InitCPUus is the initiators' process's CPU time per operation.
	InitCPUus float64 `json:"initiator_cpu_us_per_op"`
	// CPURatio is operations per CPU-second of both processes together
	// against the first phase of the same kind's: what RateRatio would be
	// with the machine to themselves and busy, steadier than the rate on a
	// machine whose other load moves.
	CPURatio    float64 `json:"ops_per_cpu_vs_first"`
	Retransmits uint64  `json:"retransmits"`
	// TargetRxRings and TargetRxKernel are the packets an AF_XDP target
	// received over its life (warm-up included) through its rings and
	// through its kernel socket (0 for a udp target): with --net veth
	// nearly all should come through the rings.
	TargetRxRings  uint64 `json:"target_rx_afxdp_rings"`
	TargetRxKernel uint64 `json:"target_rx_kernel_socket"`
	// Spurious is the part of Retransmits whose first transmission was
	// answered (reliable.Stats.SpuriousRetransmits): a timeout that fired
	// early, not a loss.
	Spurious    uint64 `json:"spurious_retransmits"`
	Failed      int    `json:"failed"`
	ExactlyOnce bool   `json:"exactly_once"`
}

func cmdBenchPeers(args []string, stdout, stderr io.Writer, stop <-chan struct{}) error {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, benchPeersUsage)
		return nil
	}
	o, err := parsePeersFlags(args)
	if err != nil {
		return err
	}
	done, release := interrupted(stop)
	defer release()
	if slices.Contains(o.nets, "veth") {
		if os.Geteuid() != 0 {
			return errors.New("bench peers: --net veth needs root (namespaces, veths, XDP)")
		}
		sweepIncastNets()
		fmt.Fprintf(stderr, "bench peers: building the veth topology...\n")
		net, err := buildPeersVeth(o)
		defer net.close()
		if err != nil {
			return err
		}
		o.veth = net
	}
	var rows []peersPhase
	first := map[string]peersPhase{} // each kind's (net and receive side) first phase
	for _, n := range o.peers {
		for _, nt := range o.nets {
			inis := []string{"kernel"}
			if nt == "veth" {
				inis = o.inis
			}
			for _, ini := range inis {
				for _, m := range o.rxModes {
					select {
					case <-done:
						return errors.New("interrupted")
					default:
					}
					fmt.Fprintf(stderr, "bench peers: %d peers x %d fetch-adds, net %s, ini %s, rx %s...\n", n, o.ops, nt, ini, m)
					po := *o
					po.ownRx, po.spinRx, po.spinTgt = m == "own", m == "spin" || m == "spinall", m == "tgtspin" || m == "spinall"
					po.inVeth = nt == "veth"
					po.ringTx = m == "ring"
					po.iniXDP = ini == "xdp"
					r, err := runPeersPhase(&po, n, stderr)
					if err != nil {
						return fmt.Errorf("%d peers, net %s, ini %s, rx %s: %w", n, nt, ini, m, err)
					}
					r.Net, r.Rx, r.Ini = nt, m, ini
					kind := nt + "/" + ini + "/" + m
					if f, ok := first[kind]; ok && f.Rate > 0 {
						r.RateRatio = r.Rate / f.Rate
						if cpu := r.TargetCPUus + r.InitCPUus; cpu > 0 {
							r.CPURatio = (f.TargetCPUus + f.InitCPUus) / cpu
						}
					} else {
						first[kind], r.RateRatio, r.CPURatio = *r, 1, 1
					}
					rows = append(rows, *r)
				}
			}
		}
	}
	if o.out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	fmt.Fprintf(stdout, "xdpfab bench peers: one target endpoint (net lo: kernel UDP over loopback; veth: AF_XDP, the initiators' kernel sockets in a namespace of their own), %d fetch-adds per peer, %d in flight, coalescing %s; rx shared: the initiators' sockets served by one poller, ring: and their sends of a poller round in one io_uring_enter, spin: the poller spinning %v before it parks, tgtspin: the target's, spinall: both, own: a receive goroutine each\n",
		o.ops, o.inflight, onOff(o.coalesce), o.spin)
	fmt.Fprintf(stdout, "%8s %5s %4s %6s %7s %10s %12s %9s %9s %14s %12s %12s %12s %12s %8s %8s %s\n", "peers", "net", "tgt", "ini", "rx", "ops", "ops/s", "vs 1st", "per CPU", "target RSS +", "per peer", "ini RSS/peer", "tgt CPU/op", "ini CPU/op", "retx", "spurious", "exactly once")
	for _, r := range rows {
		fmt.Fprintf(stdout, "%8d %5s %4s %6s %7s %10d %12s %8.2fx %8.2fx %13.1fM %11.0fB %11.0fB %10.2fus %10.2fus %8d %8d %v\n", r.Peers, r.Net, r.Transport, r.Ini, r.Rx, r.Ops, si(r.Rate), r.RateRatio, r.CPURatio,
			float64(r.RSSGrowth)/(1<<20), r.PerPeer, r.IniRSSPerPeer, r.TargetCPUus, r.InitCPUus, r.Retransmits, r.Spurious, r.ExactlyOnce)
	}
	for _, r := range rows {
		if !r.ExactlyOnce || r.Failed > 0 {
			return fmt.Errorf("%d peers, net %s, ini %s, rx %s: %d failed operations, exactly once %v", r.Peers, r.Net, r.Ini, r.Rx, r.Failed, r.ExactlyOnce)
		}
	}
	return nil
}

// peersTarget is the child process serving one phase.
type peersTarget struct {
	cmd       *exec.Cmd
	addr      netip.AddrPort
	out       chan string // its output lines
	transport string      // the one it serves on, from its banner: udp or xdp
}

// startPeersTarget starts `xdpfab bench serve` on a free port pair, or
// over the veth topology on AF_XDP.
func startPeersTarget(o *peersOptions) (*peersTarget, error) {
	if o.inVeth {
		return o.veth.startPeersTarget(o)
	}
	port, err := freePortPair(o.addr)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr := netip.AddrPortFrom(o.addr, port)
	args := []string{"bench", "serve", "--addr", addr.String(), "--transport", "udp", "--key", strconv.FormatUint(o.key, 10)}
	if o.spinTgt {
		args = append(args, "--shared-poll", "--poll-spin", o.spin.String())
	}
	return startServe(exec.Command(self, args...), addr)
}

// serveTimeout bounds how long a target takes to serve: on AF_XDP it may
// first wait up to 30 s for the kernel to release the interface's queues
// from the previous phase's target.
const serveTimeout = time.Minute

// startServe starts cmd, an `xdpfab bench serve` serving addr, and waits
// for its banner, which names the transport it got.
func startServe(cmd *exec.Cmd, addr netip.AddrPort) (*peersTarget, error) {
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := &peersTarget{cmd: cmd, addr: addr, out: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			t.out <- sc.Text()
		}
		close(t.out)
	}()
	timeout := time.After(serveTimeout)
	for {
		select {
		case l, ok := <-t.out:
			if !ok {
				_ = cmd.Wait()
				return nil, errors.New("target exited before serving")
			}
			if strings.HasPrefix(l, "xdpfab bench serve: target") {
				if _, rest, ok := strings.Cut(l, ", transport "); ok {
					t.transport, _, _ = strings.Cut(rest, ",")
				}
				return t, nil
			}
		case <-timeout:
			t.kill()
			return nil, fmt.Errorf("target not serving after %v", serveTimeout)
		}
	}
}

func (t *peersTarget) kill() {
	_ = t.cmd.Process.Kill()
	_ = t.cmd.Wait()
}

// targetStop is what a target reports when it stops: its final counter
// and, on AF_XDP, where its packets arrived (bench serve's afxdpRx).
type targetStop struct {
	counter           uint64
	rxRings, rxKernel uint64
}

// stop interrupts the target and returns what it reported.
func (t *peersTarget) stop() (targetStop, error) {
	_ = t.cmd.Process.Signal(syscall.SIGINT)
	var st targetStop
	found := false
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-t.out:
			if !ok {
				err := t.cmd.Wait()
				if !found {
					return st, fmt.Errorf("target's final counter not reported (%v)", err)
				}
				return st, err
			}
			if i := strings.Index(l, "counter "); strings.HasPrefix(l, "xdpfab bench serve: stopped") && i >= 0 {
				f := strings.Fields(l[i+len("counter "):])
				if len(f) > 0 {
					v, err := strconv.ParseUint(strings.TrimSuffix(f[0], ","), 10, 64)
					st.counter, found = v, err == nil
				}
				if j := strings.Index(l, "AF_XDP rx "); j >= 0 {
					_, _ = fmt.Sscanf(l[j:], "AF_XDP rx %d rings %d kernel socket", &st.rxRings, &st.rxKernel)
				}
			}
		case <-timeout:
			t.kill()
			return st, errors.New("target did not stop")
		}
	}
}

// rss returns the target's resident set in bytes.
func (t *peersTarget) rss() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", t.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, errors.New("statm: short")
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize()), err
}

// selfRSS returns this process's resident set in bytes (0 if unknown).
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// cpu returns the target's user+system CPU time.
func (t *peersTarget) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", t.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // fields from 3 (state) on
	if len(f) < 13 {
		return 0, errors.New("stat: short")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * time.Second / 100, nil // USER_HZ
}

// selfCPU returns this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// freePortPair finds a port p with p and p+1 free for UDP on addr (serve
// uses p+1 for its echo).
func freePortPair(addr netip.Addr) (uint16, error) {
	for range 50 {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
		if err != nil {
			return 0, err
		}
		p := c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
		c.Close()
		if p == 65535 {
			continue
		}
		c2, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, p+1)))
		if err == nil {
			c2.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free port pair")
}

// peersLoad drives total fetch-adds over the initiators, inflight at a
// time: each completion hands its slot to the next operation, whose peer
// is its number modulo the peer count, so every peer gets exactly ops.
type peersLoad struct {
	inis    []*reliable.Engine
	xdps    []*afxdp.Transport // the initiators' transports with --ini xdp
	peer    reliable.Peer
	key     uint64
	total   int
	issued  atomic.Int64
	done    atomic.Int64
	failed  atomic.Int64
	results [][]byte // per slot
	ctxs    []any    // slot numbers, boxed once
	values  []uint64 // fetched value of each operation, by operation number
	opOf    []int64  // the operation each slot carries
	finish  chan struct{}
	errOnce sync.Once
	err     error
}

func (l *peersLoad) submit(slot int) {
	j := l.issued.Add(1) - 1
	if j >= int64(l.total) {
		return
	}
	l.opOf[slot] = j
	e := l.inis[int(j)%len(l.inis)]
	r := reliable.Request{Peer: l.peer, Opcode: wire.OpFetchAtomic, RKey: l.key, Addr: 0,
		Datatype: uint8(fiatomic.UINT64), AtomicOp: uint8(fiatomic.SUM), Count: 1,
		Payload: benchOne[:], Result: l.results[slot], Context: l.ctxs[slot]}
	if err := e.Submit(&r); err != nil {
		l.errOnce.Do(func() { l.err = err; close(l.finish) })
	}
}

var benchOne = [8]byte{1}

func (l *peersLoad) onComplete(c reliable.Completion) {
	slot := c.Context.(int)
	if c.Err != fi.SUCCESS {
		l.failed.Add(1)
	} else {
		l.values[l.opOf[slot]] = binary.LittleEndian.Uint64(l.results[slot]) + 1 // 0: not completed
	}
	if l.done.Add(1) == int64(l.total) {
		l.errOnce.Do(func() { close(l.finish) })
		return
	}
	l.submit(slot)
}

// run does the load and waits for it (at most limit).
func (l *peersLoad) run(inflight int, limit time.Duration) error {
	l.values = make([]uint64, l.total)
	l.finish = make(chan struct{})
	for s := 0; s < inflight; s++ {
		l.submit(s)
	}
	select {
	case <-l.finish:
		return l.err
	case <-time.After(limit):
		return fmt.Errorf("stuck: %d of %d operations completed", l.done.Load(), l.total)
	}
}

// exactlyOnce checks the fetched values: base..base+total-1, each once.
func (l *peersLoad) exactlyOnce(base uint64) bool {
	seen := make([]bool, l.total)
	for _, v := range l.values {
		if v == 0 {
			return false
		}
		i := v - 1 - base
		if i >= uint64(l.total) || seen[i] {
			return false
		}
		seen[i] = true
	}
	return true
}

func newPeersLoad(o *peersOptions, target netip.AddrPort, n, total int) (*peersLoad, error) {
	slots := min(o.inflight, total)
	l := &peersLoad{peer: reliable.Peer{Addr: target, EP: 1}, key: o.key, total: total,
		results: make([][]byte, slots), ctxs: make([]any, slots), opOf: make([]int64, slots)}
	for i := range slots {
		l.results[i] = make([]byte, 8)
		l.ctxs[i] = i
	}
	coalesce := -1
	if o.coalesce {
		coalesce = 0
	}
	ns, local := "", netip.AddrPortFrom(o.addr, 0)
	if o.inVeth {
		ns, local = o.veth.peersVethLocal()
	}
	// Every socket opened in one pass through the namespace (a socket
	// stays in the namespace it was made in).
	err := inNetns(ns, func() error {
		for i := range n {
			var tr datapath.Transport
			var err error
			if o.iniXDP {
				var x *afxdp.Transport
				if x, err = openXDPInitiator(local, slots, n, !o.ownRx); err == nil {
					l.xdps = append(l.xdps, x)
					tr = x
				}
			} else {
				tr, err = udp.Listen(local, udp.Options{Batch: 8, SocketBuffer: 256 << 10, SharedPoll: !o.ownRx, RingSend: o.ringTx})
			}
			if err != nil {
				return fmt.Errorf("initiator %d: %w", i, err)
			}
			e, err := reliable.New(tr, reliable.Config{EndpointID: 1, OnComplete: l.onComplete,
				MaxOps: slots, CoalesceAt: coalesce, // a slow peer may have several
				SharedPoll: !o.ownRx})
			if err != nil {
				tr.Close()
				return err
			}
			l.inis = append(l.inis, e)
		}
		return nil
	})
	if err == nil && len(l.xdps) > 0 {
		// The target's next hop, resolved before the phase: the
		// endpoints' first requests go out on their rings, not through
		// their kernel sockets (the resolver is the device's, shared).
		err = l.xdps[0].ResolvePath(target.Addr())
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// retransmits sums the initiators' retransmissions and the spurious part
// of them.
func (l *peersLoad) retransmits() (all, spurious uint64) {
	for _, e := range l.inis {
		s := e.Stats()
		all += s.Retransmits
		spurious += s.SpuriousRetransmits
	}
	return all, spurious
}

func (l *peersLoad) close() {
	var wg sync.WaitGroup
	for _, e := range l.inis {
		wg.Add(1)
		go func() { defer wg.Done(); e.Close() }()
	}
	wg.Wait()
}

func runPeersPhase(o *peersOptions, n int, stderr io.Writer) (*peersPhase, error) {
	if o.spinRx {
		rxpoll.SetSpin(o.spin)
		defer rxpoll.SetSpin(0)
	}
	t, err := startPeersTarget(o)
	if err != nil {
		return nil, err
	}
	defer t.kill()
	// Warm the target (its pools, its code) with one peer before the
	// baseline; that peer stays as it would.
	warm, err := newPeersLoad(o, t.addr, 1, o.ops)
	if err != nil {
		return nil, err
	}
	err = warm.run(o.inflight, time.Minute)
	warm.close()
	if err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	base := uint64(o.ops)
	total := n * max(o.ops, (o.minOps+n-1)/n)
	runtime.GC()
	iniRSS0 := selfRSS()
	l, err := newPeersLoad(o, t.addr, n, total)
	if err != nil {
		return nil, err
	}
	runtime.GC()
	iniRSS1 := selfRSS()
	defer l.close()
	time.Sleep(200 * time.Millisecond)
	rss0, err1 := t.rss()
	iniXSK0 := l.xdpStats()
	cpu0, err2 := t.cpu()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	if o.profile != "" {
		name := o.profile
		if len(o.peers) > 1 {
			name = fmt.Sprintf("%s.%d", name, n) // one profile per phase
		}
		f, err := os.Create(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
	}
	icpu0 := selfCPU()
	start := time.Now()
	err = l.run(o.inflight, 30*time.Minute) // 10,000 initiator engines on a loaded machine are slow
	el := time.Since(start)
	icpu := selfCPU() - icpu0
	if o.profile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return nil, err
	}
	rss1, err1 := t.rss()
	cpu1, err2 := t.cpu()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	r := &peersPhase{Peers: n, Ops: total, Transport: t.transport, Seconds: el.Seconds(), Rate: float64(total) / el.Seconds(),
		RSSGrowth: rss1 - rss0, TargetCPUus: float64(cpu1-cpu0) / float64(time.Microsecond) / float64(total),
		InitCPUus: float64(icpu) / float64(time.Microsecond) / float64(total),
		Failed:    int(l.failed.Load())}
	r.Retransmits, r.Spurious = l.retransmits()
	r.IniRSSPerPeer = float64(iniRSS1-iniRSS0) / float64(n)
	if o.iniXDP {
		x := l.xdpStats()
		r.IniTxXSK, r.IniRxXSK, r.IniRxKernel = x.TxXSK-iniXSK0.TxXSK, x.RxXSK-iniXSK0.RxXSK, x.RxKernel-iniXSK0.RxKernel
	}
	r.PerPeer = float64(r.RSSGrowth) / float64(n)
	r.ExactlyOnce = r.Failed == 0 && l.exactlyOnce(base)
	st, err := t.stop()
	if err != nil {
		return nil, err
	}
	r.TargetRxRings, r.TargetRxKernel = st.rxRings, st.rxKernel
	if counter := st.counter; counter != base+uint64(total) {
		fmt.Fprintf(stderr, "bench peers: target counter %d, want %d\n", counter, base+uint64(total))
		r.ExactlyOnce = false
	}
	return r, nil
}
