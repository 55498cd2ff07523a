package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

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
	multi := fs.Bool("multiprog", false, "attach as one program of libxdp's multi-program dispatcher, beside xdp-filter, xdp-loader's programs and others (implied when a dispatcher is attached)")
	prio := fs.Uint("priority", 0, "run `PRIORITY` in the dispatcher with --multiprog: lower runs first (default 50, libxdp's)")
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
	if *prio > 1<<31 {
		return fmt.Errorf("%w: --priority is at most 2^31", errUsage)
	}
	opts := xdp.Options{Mode: mode, Ports: map[uint16]xdp.PortConfig{}, MultiProg: *multi, RunPriority: uint32(*prio)}
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
	if d := st.Dispatcher; d != nil {
		fmt.Fprintf(stdout, "  as program %d of %d in libxdp dispatcher %d\n", d.Slot, len(d.Programs), d.ProgramID)
	}
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
	if d := st.Dispatcher; d != nil {
		fmt.Fprintf(w, "  libxdp dispatcher %d, xdpfab is program %d; in run order:\n", d.ProgramID, d.Slot)
		for i, p := range d.Programs {
			fmt.Fprintf(w, "    %d: %s (id %d), priority %d, chain call actions %s\n", i, p.Name, p.ProgramID, p.RunPriority, list(p.ChainCallActions, func(s string) string { return s }))
		}
	}
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
