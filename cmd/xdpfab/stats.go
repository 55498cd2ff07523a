package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vishvananda/netns"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/datapath/afxdp"
	"github.com/xdpfab/xdpfab/metrics"
	"github.com/xdpfab/xdpfab/xdp"
)

// statsRecord is one interface's counters in `stats -o json`, with the
// processes serving endpoints on it. A record with an empty Iface holds
// the processes' endpoints on no xdpfab interface (the kernel UDP socket).
type statsRecord struct {
	Iface     string             `json:"iface"`
	Time      time.Time          `json:"time"`
	Counters  map[string]uint64  `json:"counters"`
	Rates     map[string]float64 `json:"rates,omitempty"` // per second, since the previous sample
	Processes []metrics.Process  `json:"processes"`
}

func cmdStats(args []string, stdout io.Writer, stop <-chan struct{}) error {
	fs := newFlagSet("stats")
	out := outputFlag("text")
	fs.Var(&out, "o", "output `FORMAT`: text or json (one JSON object per interface and sample)")
	watch := fs.Bool("watch", false, "print one line of rates per interface and process every --interval until interrupted (or --count samples)")
	interval := fs.Duration("interval", time.Second, "sampling interval with --watch")
	count := fs.Int("count", 0, "with --watch, stop after `N` samples (0: until interrupted)")
	listen := fs.String("listen", "", "serve every counter in Prometheus text format on `ADDR` (host:port, at /metrics) until interrupted")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *interval <= 0 || *count < 0 {
		return fmt.Errorf("%w: --interval must be positive and --count not negative", errUsage)
	}
	if len(pos) > 1 {
		return fmt.Errorf("%w: at most one interface", errUsage)
	}
	iface := ""
	if len(pos) == 1 {
		// An interface must have xdpfab (exit 1 otherwise, as status).
		a, err := xdp.Open(pos[0])
		if err != nil {
			return err
		}
		iface = a.Iface
		a.Close()
	}
	gather := func() (*metrics.Report, error) {
		r, err := metrics.Gather()
		if err != nil {
			return nil, err
		}
		return filterReport(r, iface), nil
	}
	if *listen != "" {
		return serveMetrics(*listen, gather, stdout, stop)
	}
	done, release := interrupted(stop)
	defer release()
	var prev *metrics.Report
	var prevAt time.Time
	for sample := 1; ; sample++ {
		now := time.Now()
		r, err := gather()
		if err != nil {
			return err
		}
		switch {
		case len(r.XDP) == 0 && len(r.Processes) == 0:
			// As status: an empty list, not an error.
			if out == "text" && sample == 1 {
				fmt.Fprintln(stdout, notAttachedAnywhere)
			}
		case out == "json":
			if err := printStatsJSON(stdout, r, prev, now.Sub(prevAt), now); err != nil {
				return err
			}
		case *watch:
			if prev != nil {
				printWatchLines(stdout, r, prev, now.Sub(prevAt), now)
			}
		default:
			printStatsTable(stdout, r, now)
		}
		prev, prevAt = r, now
		if !*watch || (*count > 0 && sample >= *count) {
			return nil
		}
		if !sleep(*interval, done) {
			return nil
		}
	}
}

// filterReport keeps what concerns iface ("" keeps everything).
func filterReport(r *metrics.Report, iface string) *metrics.Report {
	if iface == "" {
		return r
	}
	out := &metrics.Report{XDP: []metrics.XDP{}, Processes: []metrics.Process{}}
	ifindex := 0
	for _, x := range r.XDP {
		if x.Iface == iface {
			out.XDP = append(out.XDP, x)
			ifindex = x.Ifindex
		}
	}
	for _, p := range r.Processes {
		q := p
		q.Endpoints, q.Rings = []metrics.Endpoint{}, []afxdp.RingStats{}
		for _, ep := range p.Endpoints {
			if ep.Iface == iface {
				q.Endpoints = append(q.Endpoints, ep)
			}
		}
		for _, rs := range p.Rings {
			if rs.Ifindex == ifindex {
				q.Rings = append(q.Rings, rs)
			}
		}
		if len(q.Endpoints) > 0 || len(q.Rings) > 0 {
			out.Processes = append(out.Processes, q)
		}
	}
	return out
}

// processesOn returns the processes' endpoints and rings on the interface
// ifindex, or with ifindex 0 their endpoints on no xdpfab interface.
func processesOn(r *metrics.Report, iface string, ifindex int) []metrics.Process {
	ps := []metrics.Process{}
	for _, p := range r.Processes {
		q := p
		q.Endpoints, q.Rings = []metrics.Endpoint{}, []afxdp.RingStats{}
		for _, ep := range p.Endpoints {
			if ep.Iface == iface || (ifindex == 0 && !onXDP(r, ep.Iface)) {
				q.Endpoints = append(q.Endpoints, ep)
			}
		}
		for _, rs := range p.Rings {
			if ifindex != 0 && rs.Ifindex == ifindex {
				q.Rings = append(q.Rings, rs)
			}
		}
		if len(q.Endpoints) > 0 || len(q.Rings) > 0 {
			ps = append(ps, q)
		}
	}
	return ps
}

func onXDP(r *metrics.Report, iface string) bool {
	for _, x := range r.XDP {
		if iface != "" && x.Iface == iface {
			return true
		}
	}
	return false
}

func printStatsJSON(w io.Writer, r, prev *metrics.Report, dt time.Duration, at time.Time) error {
	enc := json.NewEncoder(w)
	for _, x := range r.XDP {
		rec := statsRecord{Iface: x.Iface, Time: at, Counters: map[string]uint64{}, Processes: processesOn(r, x.Iface, x.Ifindex)}
		for _, c := range x.Counters {
			rec.Counters[c.Name] = c.Value
		}
		if px := findXDP(prev, x.Ifindex); px != nil {
			rec.Rates = map[string]float64{}
			for i, c := range x.Counters {
				rec.Rates[c.Name] = rate(c.Value, px.Counters[i].Value, dt)
			}
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	if rest := processesOn(r, "", 0); len(rest) > 0 {
		return enc.Encode(statsRecord{Time: at, Counters: map[string]uint64{}, Processes: rest})
	}
	return nil
}

func findXDP(r *metrics.Report, ifindex int) *metrics.XDP {
	if r == nil {
		return nil
	}
	for i := range r.XDP {
		if r.XDP[i].Ifindex == ifindex {
			return &r.XDP[i]
		}
	}
	return nil
}

func rate(now, before uint64, dt time.Duration) float64 {
	if now < before || dt <= 0 {
		return 0 // a counter that went back: the program was replaced
	}
	return float64(now-before) / dt.Seconds()
}

// printStatsTable prints every counter: the XDP program's per interface,
// then each process's endpoints and AF_XDP sockets.
func printStatsTable(w io.Writer, r *metrics.Report, at time.Time) {
	for _, x := range r.XDP {
		fmt.Fprintf(w, "%s at %s\n", x.Iface, at.Format(time.RFC3339))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for i, c := range x.Counters {
			fmt.Fprintf(tw, "  %s\t%d\t%s\n", c.Name, c.Value, bpf.Counter(i).Description())
		}
		tw.Flush()
		printProcesses(w, processesOn(r, x.Iface, x.Ifindex))
	}
	if rest := processesOn(r, "", 0); len(rest) > 0 {
		fmt.Fprintf(w, "endpoints on the kernel UDP socket at %s\n", at.Format(time.RFC3339))
		printProcesses(w, rest)
	}
}

func printProcesses(w io.Writer, ps []metrics.Process) {
	for _, p := range ps {
		for _, ep := range p.Endpoints {
			e := &ep.Engine
			fmt.Fprintf(w, "  endpoint %s (%s) of pid %d (%s)\n", ep.Addr, ep.Transport, p.PID, p.Comm)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "    ops\t%s\n", opsLine(e.Ops))
			fmt.Fprintf(tw, "    op errors\t%s\n", opsLine(e.OpErrors))
			fmt.Fprintf(tw, "    in flight\t%d\n", e.InFlight)
			fmt.Fprintf(tw, "    request packets\t%d\t%.3f per op\n", e.RequestPackets, e.PacketsPerOp)
			fmt.Fprintf(tw, "    retransmits\t%d\t%d fast, %d spurious\n", e.Retransmits, e.FastRetransmits, e.SpuriousRetransmits)
			fmt.Fprintf(tw, "    timeouts\t%d\t%d peers unreachable\n", e.Timeouts, e.PeersUnreachable)
			fmt.Fprintf(tw, "    executed as target\t%d request packets\n", e.Delivered)
			fmt.Fprintf(tw, "    duplicates suppressed\t%d\n", e.DuplicatesSuppressed)
			fmt.Fprintf(tw, "    session resets\t%d\n", e.SessionResets)
			fmt.Fprintf(tw, "    srtt\t%v\n", time.Duration(e.SRTTSeconds*1e9).Round(time.Microsecond))
			if d := dropsLine(e.Drops); d != "" {
				fmt.Fprintf(tw, "    drops\t%s\n", d)
			}
			if a := ep.AFXDP; a != nil {
				fmt.Fprintf(tw, "    rx\t%d AF_XDP\t%d kernel socket\n", a.RxXSK, a.RxKernel)
				fmt.Fprintf(tw, "    tx\t%d AF_XDP\t%d kernel socket\n", a.TxXSK, a.TxNoHop+a.TxOtherLink)
			} else if u := ep.UDP; u != nil {
				fmt.Fprintf(tw, "    rx\t%d\n    tx\t%d\n", u.RxPackets, u.TxPackets)
			}
			tw.Flush()
		}
		for _, rs := range p.Rings {
			fmt.Fprintf(w, "  AF_XDP socket queue %d (%s) of pid %d: rx_dropped %d, rx_invalid_descs %d, tx_invalid_descs %d, rx_ring_full %d, rx_fill_ring_empty_descs %d, tx_ring_empty_descs %d\n",
				rs.Queue, rs.Bind, p.PID, rs.RxDropped, rs.RxInvalidDescs, rs.TxInvalidDescs, rs.RxRingFull, rs.RxFillRingEmptyDescs, rs.TxRingEmptyDescs)
		}
	}
}

func opsLine(m map[string]uint64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

func dropsLine(m map[string]uint64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// printWatchLines prints one line per interface and one per process
// endpoint with the rates since the previous sample, as xdp-bench does.
func printWatchLines(w io.Writer, r, prev *metrics.Report, dt time.Duration, at time.Time) {
	ts := at.Format("15:04:05")
	for _, x := range r.XDP {
		px := findXDP(prev, x.Ifindex)
		if px == nil {
			continue
		}
		var rx, xsk, pass, drop float64
		for i, c := range x.Counters {
			v := rate(c.Value, px.Counters[i].Value, dt)
			switch name := c.Name; {
			case name == "rx_total":
				rx = v
			case name == "redirect_xsk":
				xsk = v
			case strings.HasPrefix(name, "pass_"):
				pass += v
			case strings.HasPrefix(name, "drop_"):
				drop += v
			}
		}
		fmt.Fprintf(w, "%s %s rx %.0f/s xsk %.0f/s pass %.0f/s drop %.0f/s\n", ts, x.Iface, rx, xsk, pass, drop)
	}
	for _, p := range r.Processes {
		pp := findProcess(prev, p.PID)
		for _, ep := range p.Endpoints {
			var pe *metrics.Endpoint
			if pp != nil {
				pe = findEndpoint(pp, ep.Addr)
			}
			if pe == nil {
				continue
			}
			e, b := &ep.Engine, &pe.Engine
			fmt.Fprintf(w, "%s pid %d %s %s ops %.0f/s exec %.0f/s retx %.0f/s timeouts %.0f/s dups %.0f/s resets %.0f/s pkts/op %.2f srtt %v inflight %d\n",
				ts, p.PID, ep.Addr, ep.Transport, rate(e.TotalOps(), b.TotalOps(), dt), rate(e.Delivered, b.Delivered, dt), rate(e.Retransmits, b.Retransmits, dt),
				rate(e.Timeouts, b.Timeouts, dt), rate(e.DuplicatesSuppressed, b.DuplicatesSuppressed, dt),
				rate(e.SessionResets, b.SessionResets, dt), e.PacketsPerOp, time.Duration(e.SRTTSeconds*1e9).Round(time.Microsecond), e.InFlight)
		}
		for _, rs := range p.Rings {
			var before *afxdp.RingStats
			if pp != nil {
				for i := range pp.Rings {
					if pp.Rings[i].Ifindex == rs.Ifindex && pp.Rings[i].Queue == rs.Queue {
						before = &pp.Rings[i]
					}
				}
			}
			if before == nil {
				continue
			}
			fmt.Fprintf(w, "%s pid %d ifindex %d queue %d rx_dropped %.0f/s rx_ring_full %.0f/s fill_ring_empty %.0f/s tx_invalid %.0f/s tx_ring_empty %.0f/s\n",
				ts, p.PID, rs.Ifindex, rs.Queue, rate(rs.RxDropped, before.RxDropped, dt), rate(rs.RxRingFull, before.RxRingFull, dt),
				rate(rs.RxFillRingEmptyDescs, before.RxFillRingEmptyDescs, dt), rate(rs.TxInvalidDescs, before.TxInvalidDescs, dt),
				rate(rs.TxRingEmptyDescs, before.TxRingEmptyDescs, dt))
		}
	}
}

func findProcess(r *metrics.Report, pid int) *metrics.Process {
	for i := range r.Processes {
		if r.Processes[i].PID == pid {
			return &r.Processes[i]
		}
	}
	return nil
}

func findEndpoint(p *metrics.Process, addr string) *metrics.Endpoint {
	for i := range p.Endpoints {
		if p.Endpoints[i].Addr == addr {
			return &p.Endpoints[i]
		}
	}
	return nil
}

// serveMetrics serves gather's reports at http://addr/metrics until
// interrupted. Each scrape gathers in the network namespace the command
// runs in (-n), whichever thread serves it.
func serveMetrics(addr string, gather func() (*metrics.Report, error), stdout io.Writer, stop <-chan struct{}) error {
	ns, err := netns.Get()
	if err != nil {
		return err
	}
	defer ns.Close()
	inNS := func() (*metrics.Report, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			return nil, err
		}
		defer orig.Close()
		if !orig.Equal(ns) {
			if err := netns.Set(ns); err != nil {
				return nil, err
			}
			defer func() {
				if netns.Set(orig) != nil {
					// Keep the thread locked: Go retires it with the goroutine.
					runtime.LockOSThread()
				}
			}()
		}
		return gather()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.HandlerFor(inNS))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "serving metrics on http://%s/metrics\n", ln.Addr())
	done, release := interrupted(stop)
	defer release()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-done:
		srv.Close()
		<-errc
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}
