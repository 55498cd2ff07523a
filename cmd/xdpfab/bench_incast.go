package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	fiatomic "github.com/xdpfab/xdpfab/atomic"
	"github.com/xdpfab/xdpfab/datapath/reliable"
	"github.com/xdpfab/xdpfab/datapath/udp"
	"github.com/xdpfab/xdpfab/datapath/wire"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/ethtool"
	"github.com/xdpfab/xdpfab/metrics"
)

// xdpfab bench incast: many initiators, each in a network namespace of
// its own, on one Linux bridge (in a namespace of its own too) to one
// target endpoint (issue 17). The target is `xdpfab bench serve` in its
// namespace, on AF_XDP by default (xdpfab attached on its veth); the
// initiators are reliability engines in this process, each on a kernel
// UDP socket opened in its own namespace, each keeping --depth uint64
// fetch-adds in flight on the target's counter for --duration. Phases: a
// single initiator alone (--reps times, different initiators: the best
// is the baseline), then every --initiators count at once, then the same
// with --loss percent of the packets the bridge forwards dropped (an
// nftables rule of family bridge in the bridge's namespace, which sees
// AF_XDP traffic too). Every phase checks that every fetch-add executed
// exactly once; the target's XDP_STATISTICS (rx_ring_full, rx_dropped)
// are read with `xdpfab stats` before and after each phase. Everything it
// makes (namespaces, bridge, veths, the XDP attachment, the target
// process) is removed at the end, also on error or interrupt, and a run
// killed outright has its namespaces swept by the next one.

const benchIncastUsage = `usage:
  xdpfab bench incast [--initiators 16,64] [--reps 3] [--depth 64] [--duration 3s] [--loss 5]
                      [--transport xdp|udp] [--mode native|generic] [-o text|json]

Needs root. Builds a bridge namespace, a target namespace and max(--initiators)
initiator namespaces (10.236.0.0/16), runs one target (xdpfab bench serve over
--transport, default AF_XDP with xdpfab attached in --mode) and the initiators in
this process (kernel UDP sockets, one per namespace, their veths sending full
UDP checksums so that the XDP program hands the requests to AF_XDP), each keeping --depth
fetch-adds in flight for --duration. Phases: one initiator alone (--reps
times: the best rate is the baseline), each count of --initiators at once,
and with --loss percent (0: none) dropped by the bridge. Prints per phase the
aggregate rate and its ratio to the best single initiator (lossy phases: to
the lossless one of the same count), Jain's fairness index over the
initiators' rates, their min and max, retransmissions, the target's
rx_ring_full and rx_dropped over the phase, and whether every fetch-add
executed exactly once. Removes everything it made at the end.
`

type incastOptions struct {
	counts    []int
	reps      int
	depth     int
	duration  time.Duration
	loss      int
	transport string
	mode      string
	out       string
	port      uint16
	key       uint64
	busyPoll  bool // the target's receive goroutine spins (bench serve --busy-poll); bench peers --net veth
}

func parseIncastFlags(args []string) (*incastOptions, error) {
	fs := flag.NewFlagSet("bench incast", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := &incastOptions{port: 7473, key: benchKey}
	counts := fs.String("initiators", "16,64", "initiator counts, comma-separated")
	fs.IntVar(&o.reps, "reps", 3, "single-initiator runs (the best is the baseline)")
	fs.IntVar(&o.depth, "depth", 64, "fetch-adds in flight per initiator")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "length of each phase")
	fs.IntVar(&o.loss, "loss", 5, "percent of forwarded packets the bridge drops in the lossy phases (0: none)")
	fs.StringVar(&o.transport, "transport", "xdp", "the target's transport: xdp or udp")
	fs.StringVar(&o.mode, "mode", "native", "XDP attach mode for the target: native or generic")
	fs.StringVar(&o.out, "o", "text", "output `FORMAT`: text or json")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	for _, s := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 250 {
			return nil, fmt.Errorf("%w: --initiators: %q is not a count in 1..250", errUsage, s)
		}
		o.counts = append(o.counts, n)
	}
	switch {
	case o.reps < 1 || o.reps > 250 || o.depth < 1 || o.depth > 4096:
		return nil, fmt.Errorf("%w: --reps in 1..250, --depth in 1..4096", errUsage)
	case o.duration <= 0 || o.duration > 10*time.Minute:
		return nil, fmt.Errorf("%w: --duration in (0, 10m]", errUsage)
	case o.loss < 0 || o.loss > 50:
		return nil, fmt.Errorf("%w: --loss in 0..50", errUsage)
	case o.transport != "xdp" && o.transport != "udp":
		return nil, fmt.Errorf("%w: --transport takes xdp or udp", errUsage)
	case o.mode != "native" && o.mode != "generic":
		return nil, fmt.Errorf("%w: --mode takes native or generic", errUsage)
	case o.out != "text" && o.out != "json":
		return nil, fmt.Errorf("%w: -o takes text or json", errUsage)
	}
	return o, nil
}

// incastPhase is one row of the report.
type incastPhase struct {
	Name       string    `json:"phase"`
	Initiators int       `json:"initiators"`
	LossPct    int       `json:"loss_pct"`
	Ops        int64     `json:"ops"`
	Rate       float64   `json:"ops_per_sec"`
	Ratio      float64   `json:"ratio"` // to the best single initiator; lossy phases: to the lossless phase of the count
	Jain       float64   `json:"jain_fairness"`
	Rates      []float64 `json:"initiator_ops_per_sec"`
	Retx       uint64    `json:"retransmits"`
	RingFull   uint64    `json:"target_rx_ring_full"`
	RxDropped  uint64    `json:"target_rx_dropped"`
	Failed     int64     `json:"failed"`
	ExactOnce  bool      `json:"exactly_once"`
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when one
// has everything.
func jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

func cmdBenchIncast(args []string, stdout, stderr io.Writer, stop <-chan struct{}) error {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, benchIncastUsage)
		return nil
	}
	o, err := parseIncastFlags(args)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("bench incast: needs root (namespaces, a bridge, XDP)")
	}
	done, release := interrupted(stop)
	defer release()
	nIni := o.reps
	for _, n := range o.counts {
		nIni = max(nIni, n)
	}
	sweepIncastNets()
	fmt.Fprintf(stderr, "bench incast: building %d initiator namespaces on a bridge...\n", nIni)
	net, err := buildIncastNet(nIni, o)
	defer net.close()
	if err != nil {
		return err
	}
	tgt, err := net.startTarget(o)
	if err != nil {
		return err
	}
	defer tgt.kill()
	inis, err := net.openInitiators(o, netip.AddrPortFrom(net.tgtAddr, o.port))
	defer closeIncastInis(inis)
	if err != nil {
		return err
	}
	var rows []incastPhase
	var base uint64 // the target's counter before the phase
	run := func(name string, set []*incastIni, loss int) (*incastPhase, error) {
		select {
		case <-done:
			return nil, errors.New("interrupted")
		default:
		}
		fmt.Fprintf(stderr, "bench incast: %s...\n", name)
		if loss > 0 {
			if err := net.setLoss(loss); err != nil {
				return nil, err
			}
			defer net.clearLoss()
		}
		full0, drop0 := net.rings()
		r, err := runIncastPhase(set, o, base)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		full1, drop1 := net.rings()
		r.Name, r.LossPct, r.RingFull, r.RxDropped = name, loss, full1-full0, drop1-drop0
		base += uint64(r.Ops)
		rows = append(rows, *r)
		return &rows[len(rows)-1], nil
	}
	best := 0.0
	for i := range o.reps {
		r, err := run(fmt.Sprintf("single #%d", i+1), inis[i:i+1], 0)
		if err != nil {
			return err
		}
		best = max(best, r.Rate)
	}
	lossless := map[int]float64{}
	for _, n := range o.counts {
		r, err := run(fmt.Sprintf("incast %d", n), inis[:n], 0)
		if err != nil {
			return err
		}
		lossless[n] = r.Rate
	}
	if o.loss > 0 {
		for _, n := range o.counts {
			if _, err := run(fmt.Sprintf("incast %d, %d%% loss", n, o.loss), inis[:n], o.loss); err != nil {
				return err
			}
		}
	}
	for i := range rows {
		r := &rows[i]
		if r.LossPct > 0 {
			r.Ratio = r.Rate / lossless[r.Initiators]
		} else {
			r.Ratio = r.Rate / best
		}
	}
	st, err := tgt.stop()
	if err != nil {
		return err
	}
	if counter := st.counter; counter != base {
		fmt.Fprintf(stderr, "bench incast: target counter %d, want %d\n", counter, base)
		for i := range rows {
			rows[i].ExactOnce = false
		}
	}
	if o.out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "xdpfab bench incast: initiators in their own namespaces on a bridge, one target (%s), %d fetch-adds in flight each, %v per phase\n",
			o.transport, o.depth, o.duration)
		fmt.Fprintf(stdout, "%-20s %10s %10s %8s %8s %10s %10s %8s %10s %10s %s\n", "phase", "ops", "ops/s", "ratio", "Jain", "min/ini", "max/ini",
			"retx", "ring full", "rx drop", "exactly once")
		for _, r := range rows {
			lo, hi := minMax(r.Rates)
			fmt.Fprintf(stdout, "%-20s %10d %10s %7.2fx %8.3f %10s %10s %8d %10d %10d %v\n", r.Name, r.Ops, si(r.Rate), r.Ratio, r.Jain,
				si(lo), si(hi), r.Retx, r.RingFull, r.RxDropped, r.ExactOnce)
		}
		fmt.Fprintln(stdout, "ratio: to the best single initiator; lossy phases: to the lossless phase of the same count")
	}
	for _, r := range rows {
		if !r.ExactOnce || r.Failed > 0 {
			return fmt.Errorf("%s: %d failed operations, exactly once %v", r.Name, r.Failed, r.ExactOnce)
		}
	}
	return nil
}

func minMax(xs []float64) (lo, hi float64) {
	for i, x := range xs {
		if i == 0 || x < lo {
			lo = x
		}
		hi = max(hi, x)
	}
	return lo, hi
}

// incastNetPrefix names the namespaces: prefix + pid + "-" + role.
const incastNetPrefix = "xfinc"

// incastNet is the topology: a bridge namespace, a target namespace and
// the initiators' namespaces, each joined to the bridge by a veth pair.
type incastNet struct {
	self     string
	br, tgt  string
	inis     []string
	tgtAddr  netip.Addr
	iniAddrs []netip.Addr
	made     []string // namespaces created, to delete
	attached bool
	// iniAttached: xdpfab is attached on the first initiator namespace's
	// veth too (bench peers --ini xdp).
	iniAttached bool
	lossOn      bool
}

func incastAddr(i int) netip.Addr { // initiators: 10.236.1.1 on
	return netip.AddrFrom4([4]byte{10, 236, byte(1 + i/250), byte(1 + i%250)})
}

func (n *incastNet) ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func buildIncastNet(nIni int, o *incastOptions) (*incastNet, error) {
	self, err := os.Executable()
	if err != nil {
		return &incastNet{}, err
	}
	pfx := fmt.Sprintf("%s%d-", incastNetPrefix, os.Getpid())
	n := &incastNet{self: self, br: pfx + "br", tgt: pfx + "t", tgtAddr: netip.AddrFrom4([4]byte{10, 236, 0, 1})}
	addNS := func(name string) error {
		if err := n.ip("netns", "add", name); err != nil {
			return err
		}
		n.made = append(n.made, name)
		return n.ip("-n", name, "link", "set", "lo", "up")
	}
	if err := addNS(n.br); err != nil {
		return n, err
	}
	if err := n.ip("-n", n.br, "link", "add", "br0", "type", "bridge"); err != nil {
		return n, err
	}
	if err := n.ip("-n", n.br, "link", "set", "br0", "up"); err != nil {
		return n, err
	}
	// join creates ns with its end (xe0, addr) and the bridge's port.
	join := func(ns, port string, addr netip.Addr) error {
		if err := addNS(ns); err != nil {
			return err
		}
		for _, a := range [][]string{
			{"-n", n.br, "link", "add", port, "type", "veth", "peer", "name", "xe0", "netns", ns},
			{"-n", n.br, "link", "set", port, "master", "br0", "up"},
			{"-n", ns, "addr", "add", addr.String() + "/16", "dev", "xe0"},
			{"-n", ns, "link", "set", "xe0", "up"},
		} {
			if err := n.ip(a...); err != nil {
				return err
			}
		}
		return nil
	}
	if err := join(n.tgt, "pt", n.tgtAddr); err != nil {
		return n, err
	}
	for i := range nIni {
		ns := fmt.Sprintf("%si%d", pfx, i)
		a := incastAddr(i)
		if err := join(ns, fmt.Sprintf("p%d", i), a); err != nil {
			return n, err
		}
		n.inis = append(n.inis, ns)
		n.iniAddrs = append(n.iniAddrs, a)
		// The initiators' kernel sockets send full UDP checksums, as over
		// a NIC: with veth's transmit checksum offload on, every request
		// reached the target's XDP program with a checksum it cannot
		// verify and went to the target's kernel socket instead of its
		// AF_XDP rings (pass_bad_csum; package ethtool).
		if err := inNetns(ns, func() error { return ethtool.SetTxChecksum("xe0", false) }); err != nil {
			return n, err
		}
	}
	if o.transport == "xdp" {
		out, err := exec.Command(n.self, "-n", n.tgt, "attach", "xe0", "--mode", o.mode, "--port", strconv.Itoa(int(o.port))).CombinedOutput()
		if err != nil {
			return n, fmt.Errorf("attach xdpfab in %s: %w: %s", n.tgt, err, bytes.TrimSpace(out))
		}
		n.attached = true
	}
	return n, nil
}

// close removes everything: the XDP attachment (its pins), then the
// namespaces (which take their veths and the bridge with them).
func (n *incastNet) close() {
	if n.attached {
		_ = exec.Command(n.self, "-n", n.tgt, "detach", "xe0").Run()
	}
	if n.iniAttached {
		_ = exec.Command(n.self, "-n", n.inis[0], "detach", "xe0").Run()
	}
	for _, ns := range n.made {
		_ = n.ip("netns", "del", ns)
	}
}

// sweepIncastNets deletes namespaces of earlier runs whose process is gone.
func sweepIncastNets() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), incastNetPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if _, err := strconv.Atoi(pid); err != nil || pid == strconv.Itoa(os.Getpid()) {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", pid)); err == nil {
			continue
		}
		_ = exec.Command("ip", "netns", "del", e.Name()).Run()
	}
}

// setLoss makes the bridge drop pct % of the target's traffic, both ways.
func (n *incastNet) setLoss(pct int) error {
	rules := [][]string{
		{"add", "table", "bridge", "xfinc"},
		{"add", "chain", "bridge", "xfinc", "fw", "{ type filter hook forward priority 0; }"},
		{"add", "rule", "bridge", "xfinc", "fw", "ip", "daddr", n.tgtAddr.String(), "meta", "l4proto", "udp", "numgen", "random", "mod", "100", "<", strconv.Itoa(pct), "counter", "drop"},
		{"add", "rule", "bridge", "xfinc", "fw", "ip", "saddr", n.tgtAddr.String(), "meta", "l4proto", "udp", "numgen", "random", "mod", "100", "<", strconv.Itoa(pct), "counter", "drop"},
	}
	n.lossOn = true
	for _, r := range rules {
		out, err := exec.Command("ip", append([]string{"netns", "exec", n.br, "nft"}, r...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nft %s: %w: %s", strings.Join(r, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

func (n *incastNet) clearLoss() {
	if n.lossOn {
		_ = exec.Command("ip", "netns", "exec", n.br, "nft", "delete", "table", "bridge", "xfinc").Run()
		n.lossOn = false
	}
}

// rings sums the target namespace's AF_XDP sockets' rx_ring_full and
// rx_dropped (XDP_STATISTICS, through xdpfab stats); zero without AF_XDP.
func (n *incastNet) rings() (full, dropped uint64) {
	out, err := exec.Command(n.self, "-n", n.tgt, "stats", "-o", "json").Output()
	if err != nil {
		return 0, 0
	}
	seen := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var rec struct {
			Processes []metrics.Process `json:"processes"`
		}
		if dec.Decode(&rec) != nil {
			return full, dropped
		}
		for _, p := range rec.Processes {
			for _, r := range p.Rings {
				k := fmt.Sprint(p.PID, r.Ifindex, r.Queue)
				if !seen[k] {
					seen[k] = true
					full += r.RxRingFull
					dropped += r.RxDropped
				}
			}
		}
	}
}

// startTarget runs xdpfab bench serve in the target namespace.
func (n *incastNet) startTarget(o *incastOptions) (*peersTarget, error) {
	addr := netip.AddrPortFrom(n.tgtAddr, o.port)
	args := []string{"-n", n.tgt, "bench", "serve", "--addr", addr.String(), "--transport", o.transport,
		"--key", strconv.FormatUint(o.key, 10)}
	if o.busyPoll {
		args = append(args, "--busy-poll")
	}
	cmd := exec.Command(n.self, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive this process
	return startServe(cmd, addr)
}

// incastIni is one initiator: an engine on a socket in its namespace,
// keeping depth fetch-adds in flight until told to stop.
type incastIni struct {
	e       *reliable.Engine
	peer    reliable.Peer
	key     uint64
	results [][]byte
	ctxs    []any
	stop    atomic.Bool
	counted atomic.Int64 // completed before stop
	pending atomic.Int64 // submitted, not completed
	failed  atomic.Int64
	mu      sync.Mutex
	vals    []uint64 // fetched values of the phase
	drained chan struct{}
	once    sync.Once
}

func (n *incastNet) openInitiators(o *incastOptions, target netip.AddrPort) ([]*incastIni, error) {
	var inis []*incastIni
	for i, ns := range n.inis {
		x := &incastIni{peer: reliable.Peer{Addr: target, EP: 1}, key: o.key}
		for s := range o.depth {
			x.results = append(x.results, make([]byte, 8))
			x.ctxs = append(x.ctxs, s)
		}
		tr, err := listenInNetns(ns, netip.AddrPortFrom(n.iniAddrs[i], 0))
		if err != nil {
			return inis, fmt.Errorf("initiator %d: %w", i, err)
		}
		x.e, err = reliable.New(tr, reliable.Config{EndpointID: 1, OnComplete: x.onComplete, MaxOps: max(4096, o.depth)})
		if err != nil {
			tr.Close()
			return inis, err
		}
		inis = append(inis, x)
	}
	return inis, nil
}

func closeIncastInis(inis []*incastIni) {
	for _, x := range inis {
		x.e.Close()
	}
}

// listenInNetns opens a kernel UDP socket inside the named namespace.
func listenInNetns(name string, addr netip.AddrPort) (*udp.Transport, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	h, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer h.Close()
	if err := netns.Set(h); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	tr, lerr := udp.Listen(addr, udp.Options{})
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: Go ends it with the goroutine.
		if tr != nil {
			tr.Close()
		}
		return nil, err
	}
	runtime.UnlockOSThread()
	return tr, lerr
}

func (x *incastIni) submit(slot int) bool {
	x.pending.Add(1)
	r := reliable.Request{Peer: x.peer, Opcode: wire.OpFetchAtomic, RKey: x.key, Addr: 0,
		Datatype: uint8(fiatomic.UINT64), AtomicOp: uint8(fiatomic.SUM), Count: 1,
		Payload: benchOne[:], Result: x.results[slot], Context: x.ctxs[slot]}
	if err := x.e.Submit(&r); err != nil {
		x.failed.Add(1)
		x.pending.Add(-1)
		return false
	}
	return true
}

func (x *incastIni) onComplete(c reliable.Completion) {
	slot := c.Context.(int)
	if c.Err != fi.SUCCESS {
		x.failed.Add(1)
	} else {
		v := binary.LittleEndian.Uint64(x.results[slot])
		x.mu.Lock()
		x.vals = append(x.vals, v)
		x.mu.Unlock()
	}
	if !x.stop.Load() {
		x.counted.Add(1)
		if x.submit(slot) {
			x.pending.Add(-1)
			return
		}
	}
	if x.pending.Add(-1) == 0 && x.stop.Load() {
		x.once.Do(func() { close(x.drained) })
	}
}

// runIncastPhase runs set for o.duration and checks the fetched values:
// base.. base+ops-1, each once.
func runIncastPhase(set []*incastIni, o *incastOptions, base uint64) (*incastPhase, error) {
	retx0 := uint64(0)
	for _, x := range set {
		x.stop.Store(false)
		x.counted.Store(0)
		x.failed.Store(0)
		x.vals = x.vals[:0]
		x.drained = make(chan struct{})
		x.once = sync.Once{}
		retx0 += x.e.Stats().Retransmits
	}
	start := time.Now()
	for _, x := range set {
		for s := range o.depth {
			x.submit(s)
		}
	}
	time.Sleep(o.duration)
	counts := make([]int64, len(set))
	for i, x := range set {
		x.stop.Store(true)
		counts[i] = x.counted.Load()
	}
	el := time.Since(start)
	limit := time.After(30 * time.Second)
	for _, x := range set {
		if x.pending.Load() == 0 {
			x.once.Do(func() { close(x.drained) })
		}
		select {
		case <-x.drained:
		case <-limit:
			return nil, fmt.Errorf("operations still pending 30s after the phase")
		}
	}
	r := &incastPhase{Initiators: len(set)}
	var all []uint64
	for i, x := range set {
		rate := float64(counts[i]) / el.Seconds()
		r.Rates = append(r.Rates, rate)
		r.Rate += rate
		r.Failed += x.failed.Load()
		r.Retx += x.e.Stats().Retransmits
		x.mu.Lock()
		all = append(all, x.vals...)
		x.mu.Unlock()
	}
	r.Retx -= retx0
	r.Ops = int64(len(all))
	r.Jain = jain(r.Rates)
	seen := make([]bool, len(all))
	r.ExactOnce = r.Failed == 0
	for _, v := range all {
		i := v - base
		if i >= uint64(len(all)) || seen[i] {
			r.ExactOnce = false
			break
		}
		seen[i] = true
	}
	return r, nil
}
