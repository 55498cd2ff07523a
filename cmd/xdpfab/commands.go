package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/xdp"
)

func cmdAttach(args []string, stdout io.Writer, _ <-chan struct{}) error {
	fs := newFlagSet("attach")
	modeName := fs.String("mode", "auto", "attach `MODE`: auto (native, else generic), native or generic")
	var ports portList
	fs.Var(&ports, "port", "UDP `PORT` the program handles (repeatable); it belongs to no process and stays until detach")
	avID := fs.Uint("av-id", 0, "AV `ID` of the --port ports")
	domainID := fs.Uint("domain-id", 0, "domain `ID` of the --port ports")
	strict := fs.Bool("strict", false, "drop datagrams to the --port ports from peers not in the AV")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: attach takes one interface", errUsage)
	}
	mode, err := xdp.ParseMode(*modeName)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *avID > 1<<32-1 || *domainID > 1<<32-1 {
		return fmt.Errorf("%w: --av-id and --domain-id are 32-bit", errUsage)
	}
	opts := xdp.Options{Mode: mode, Ports: map[uint16]xdp.PortConfig{}}
	for _, p := range ports {
		opts.Ports[p] = xdp.PortConfig{AVID: uint32(*avID), DomainID: uint32(*domainID), Strict: *strict}
	}
	a, err := xdp.Attach(pos[0], opts)
	if err != nil {
		return err
	}
	defer a.Close()
	st, err := a.Status()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "xdpfab attached to %s in %s mode (program %d), pinned in %s\n", st.Iface, st.Mode, st.ProgramID, st.PinDir)
	return nil
}

func cmdDetach(args []string, stdout io.Writer, _ <-chan struct{}) error {
	pos, err := parseInterspersed(newFlagSet("detach"), args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: detach takes one interface", errUsage)
	}
	if err := xdp.Detach(pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "xdpfab detached from %s\n", pos[0])
	return nil
}

// openAll opens the attachment of the interface named in pos, or those of
// every interface of this network namespace with xdpfab attached (none is
// not an error then).
func openAll(pos []string) ([]*xdp.Attachment, error) {
	if len(pos) > 1 {
		return nil, fmt.Errorf("%w: at most one interface", errUsage)
	}
	if len(pos) == 1 {
		a, err := xdp.Open(pos[0])
		if err != nil {
			return nil, err
		}
		return []*xdp.Attachment{a}, nil
	}
	return xdp.OpenAll()
}

func closeAll(as []*xdp.Attachment) {
	for _, a := range as {
		a.Close()
	}
}

// notAttachedAnywhere is what status and stats say when nothing is
// attached in the namespace (exit 0: an empty list).
const notAttachedAnywhere = "xdpfab is not attached to any interface of this network namespace"

func cmdStatus(args []string, stdout io.Writer, _ <-chan struct{}) error {
	fs := newFlagSet("status")
	out := outputFlag("text")
	fs.Var(&out, "o", "output `FORMAT`: text or json")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	as, err := openAll(pos)
	if err != nil {
		return err
	}
	defer closeAll(as)
	sts := []*xdp.Status{}
	for _, a := range as {
		st, err := a.Status()
		if err != nil {
			return err
		}
		sts = append(sts, st)
	}
	if out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sts)
	}
	if len(sts) == 0 {
		fmt.Fprintln(stdout, notAttachedAnywhere)
		return nil
	}
	for _, st := range sts {
		printStatus(stdout, st)
	}
	return nil
}

func printStatus(w io.Writer, st *xdp.Status) {
	fmt.Fprintf(w, "%s (ifindex %d, netns %v): %s mode, program %d, link %d, pinned in %s\n",
		st.Iface, st.Ifindex, st.Netns, st.Mode, st.ProgramID, st.LinkID, st.PinDir)
	if len(st.Ports) == 0 {
		fmt.Fprintln(w, "  ports: none")
	}
	for _, p := range st.Ports {
		strict := ""
		if p.Strict {
			strict = ", strict"
		}
		owner := "no owner (set by attach --port)"
		if p.Owner != nil {
			owner = fmt.Sprintf("owner pid %d (%s)", p.Owner.PID, p.Owner.Comm)
		}
		addr := "every address"
		if p.Addr.IsValid() {
			addr = p.Addr.String()
		}
		fmt.Fprintf(w, "  port %d (%s): av %d, domain %d%s; %s\n", p.Port.Port, addr, p.AVID, p.DomainID, strict, owner)
	}
	fmt.Fprintf(w, "  AV map: %d of %d entries\n", st.AVEntries, st.AVCapacity)
	fmt.Fprintf(w, "  MR map: %d of %d entries\n", st.MREntries, st.MRCapacity)
	for _, o := range st.Owners {
		fmt.Fprintf(w, "  owner pid %d (%s): ports %s, av ids %s, domain ids %s\n",
			o.PID, o.Comm, list(o.Ports, func(p xdp.Port) string { return fmt.Sprint(p.Port) }),
			list(o.AVIDs, u32), list(o.DomainIDs, u32))
	}
	fmt.Fprintf(w, "  AF_XDP sockets on RX queues: %s\n", list(st.BoundQueues, u32))
}

func u32(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// list joins the elements of s, or says none.
func list[T any](s []T, str func(T) string) string {
	if len(s) == 0 {
		return "none"
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = str(v)
	}
	return strings.Join(out, " ")
}

// statsRecord is one interface's counters in `stats -o json`.
type statsRecord struct {
	Iface    string             `json:"iface"`
	Time     time.Time          `json:"time"`
	Counters map[string]uint64  `json:"counters"`
	Rates    map[string]float64 `json:"rates,omitempty"` // per second, since the previous sample
}

func cmdStats(args []string, stdout io.Writer, stop <-chan struct{}) error {
	fs := newFlagSet("stats")
	out := outputFlag("text")
	fs.Var(&out, "o", "output `FORMAT`: text or json (one JSON object per interface and sample)")
	watch := fs.Bool("watch", false, "print counters and rates every --interval until interrupted (or --count samples)")
	interval := fs.Duration("interval", time.Second, "sampling interval with --watch")
	count := fs.Int("count", 0, "with --watch, stop after `N` samples (0: until interrupted)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *interval <= 0 || *count < 0 {
		return fmt.Errorf("%w: --interval must be positive and --count not negative", errUsage)
	}
	as, err := openAll(pos)
	if err != nil {
		return err
	}
	defer closeAll(as)
	if len(as) == 0 {
		// As status: an empty list, not an error.
		if out == "text" {
			fmt.Fprintln(stdout, notAttachedAnywhere)
		}
		return nil
	}

	done, release := interrupted(stop)
	defer release()
	prev := make([]xdp.Counters, len(as))
	var prevAt time.Time
	for sample := 1; ; sample++ {
		now := time.Now()
		for i, a := range as {
			c, err := a.Counters()
			if err != nil {
				return err
			}
			var rates []float64
			if sample > 1 {
				secs := now.Sub(prevAt).Seconds()
				rates = make([]float64, len(c))
				for j := range c {
					rates[j] = float64(c[j]-prev[i][j]) / secs
				}
			}
			if err := printStats(stdout, out, a.Iface, now, c, rates); err != nil {
				return err
			}
			prev[i] = c
		}
		prevAt = now
		if !*watch || (*count > 0 && sample >= *count) {
			return nil
		}
		if !sleep(*interval, done) {
			return nil
		}
	}
}

func printStats(w io.Writer, out outputFlag, iface string, at time.Time, c xdp.Counters, rates []float64) error {
	if out == "json" {
		rec := statsRecord{Iface: iface, Time: at, Counters: map[string]uint64{}}
		for i, v := range c {
			rec.Counters[bpf.Counter(i).Name()] = v
		}
		if rates != nil {
			rec.Rates = map[string]float64{}
			for i, r := range rates {
				rec.Rates[bpf.Counter(i).Name()] = r
			}
		}
		return json.NewEncoder(w).Encode(rec)
	}
	fmt.Fprintf(w, "%s at %s\n", iface, at.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, v := range c {
		rate := ""
		if rates != nil {
			rate = fmt.Sprintf("%.1f/s", rates[i])
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", bpf.Counter(i).Name(), v, rate, bpf.Counter(i).Description())
	}
	return tw.Flush()
}
