package main

import (
	"flag"
	"fmt"
	"strings"
)

// Help. `xdpfab -h`, `--help` and `help` print the overview; `xdpfab
// COMMAND -h|--help` and `xdpfab help COMMAND` print the command's
// synopsis and flags. Both go to stdout and exit 0, as with ip, bpftool
// and xdp-loader. A usage error prints the message and the same text to
// stderr and exits 2.

// usage is the overview.
const usage = `usage:
  xdpfab [-n NETNS] attach IFACE [--mode auto|native|generic] [--port N]... [--av-id N] [--domain-id N] [--strict] [--multiprog [--priority N]]
  xdpfab [-n NETNS] detach IFACE
  xdpfab [-n NETNS] status [IFACE] [-o text|json]
  xdpfab [-n NETNS] stats [IFACE] [--watch] [--interval D] [--count N] [-o text|json] [--listen ADDR]
  xdpfab [-n NETNS] info [-p PROV] [-e EPTYPE] [-c CAPS] [-a ADDRFMT] [-n NODE] [-s SERVICE] [--src] [-v] [-o text|json]
  xdpfab [-n NETNS] bench serve|run|local|peers|incast [flags]   (xdpfab bench help)
  xdpfab --version
  xdpfab help [COMMAND]

global flags:
  -n NETNS     run in the network namespace NETNS (a name under /var/run/netns),
               keeping the host's bpffs (which ip netns exec hides)
  --version    print xdpfab's version and its XDP program's hash
  -h, --help   print this help

'xdpfab help COMMAND' or 'xdpfab COMMAND --help' shows a command's flags.

Exit status: 0 success; also status and stats without IFACE when nothing is
attached in the namespace (they list nothing). 1 error; also an IFACE where
xdpfab is not attached (as ip link show NOSUCH). 2 usage error.
`

// cmdDoc documents one command for its help.
type cmdDoc struct {
	synopsis string // after "xdpfab [-n NETNS] "
	text     string
}

// docs by flag set name.
var docs = map[string]cmdDoc{
	"attach": {"attach IFACE [--mode auto|native|generic] [--port N]... [--av-id N] [--domain-id N] [--strict] [--multiprog [--priority N]]",
		`Loads xdpfab's XDP program onto IFACE, an interface of the network namespace,
and pins it, its link and maps under /sys/fs/bpf/xdpfab/NETNS/IFINDEX, so it
stays attached after xdpfab exits and library processes find the maps.
Idempotent: where xdpfab is already attached (in a compatible mode) it only
sets the ports. --port ports belong to no process: they stay until detach.
Another XDP program attached alone on IFACE is left alone (exit 1, naming it).
With --multiprog, or when IFACE runs libxdp's multi-program dispatcher
(xdp-loader, xdp-filter), xdpfab becomes one program of that dispatcher, at
--priority, and xdp-loader status lists it; detach then removes only
xdpfab's program. The dispatcher is libxdp's own xdp-dispatcher.o (install
xdp-tools or libxdp).
`},
	"detach": {"detach IFACE",
		`Removes xdpfab's program, pins and owner records from IFACE, an interface of
the network namespace, leaving the interface as it was. xdpfab on an
interface of the same name in another namespace is never touched. Exits 1,
changing nothing, when xdpfab is not attached to IFACE.
`},
	"status": {"status [IFACE] [-o text|json]",
		`Shows xdpfab's attachment on IFACE, or on every interface of the network
namespace: mode, program and link ids, pin directory, ports with the process
owning each, owners, AV and MR map occupancy, bound AF_XDP sockets. Entries
left by owners that died (kill -9) are removed first. Without IFACE and with
nothing attached it says so and exits 0; an IFACE without xdpfab exits 1.
`},
	"stats": {"stats [IFACE] [--watch] [--interval D] [--count N] [-o text|json] [--listen ADDR]",
		`Prints the XDP program's per-outcome counters of IFACE, or of every interface
of the network namespace with xdpfab, and next to them the counters of every
process with xdpfab endpoints in the namespace: operations by kind, errors,
timeouts, retransmits, duplicates suppressed, session resets, packets per
operation, smoothed RTT, operations in flight, and each AF_XDP socket's
XDP_STATISTICS. Processes serve them on an abstract unix socket
(@xdpfab-metrics-PID-*, see package metrics). --watch prints one line of rates
per interface, endpoint and socket each interval; -o json one object per
interface and sample. --listen serves all of it in Prometheus text format at
http://ADDR/metrics until interrupted. Without IFACE and with nothing attached
it says so and exits 0; an IFACE without xdpfab exits 1.
`},
	"info": {"info [-p PROV] [-e EPTYPE] [-c CAPS] [-m MODE] [-a ADDRFMT] [-n NODE] [-s SERVICE] [--src] [-d DOMAIN] [-f FABRIC] [-v] [-o text|json]",
		`Prints what fi_getinfo (fabric.GetInfo) answers, as libfabric's fi_info does:
one entry per usable local address of the network namespace (those with
xdpfab's XDP program attached first), with its capabilities, sizes, modes,
transport and whether XDP is attached. The flags are hints: an entry that
cannot meet them is left out, and when none is left it fails (exit 1,
FI_ENODATA). -v prints every attribute; -o json the same as JSON.
`},
	"bench serve":  {"bench serve --addr IP[:PORT] [flags]", "A target for xdpfab bench run (xdpfab bench help).\n"},
	"bench run":    {"bench run --peer IP[:PORT] [flags]", "Measures a target of xdpfab bench serve (xdpfab bench help).\n"},
	"bench local":  {"bench local [flags]", "Both ends of xdpfab bench in this process over loopback (xdpfab bench help).\n"},
	"bench peers":  {"bench peers [flags]", "Memory per peer and rate against the number of peers of one target (xdpfab bench peers help).\n"},
	"bench incast": {"bench incast [flags]", "Many initiators in their own namespaces on a bridge to one target: aggregate rate, fairness, loss (xdpfab bench incast help).\n"},
}

// helpRequest is what parsing returns for -h or --help: run prints text
// to stdout and exits 0.
type helpRequest struct{ text string }

func (h *helpRequest) Error() string { return "help requested" }

// commandHelp is the help of the command whose flags fs holds.
func commandHelp(fs *flag.FlagSet) string {
	var b strings.Builder
	d := docs[fs.Name()]
	fmt.Fprintf(&b, "usage: xdpfab [-n NETNS] %s\n", d.synopsis)
	if d.text != "" {
		b.WriteString("\n" + d.text)
	}
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			b.WriteString("\nflags:\n")
			first = false
		}
		name, text := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		line := "  " + dash + f.Name
		if name != "" {
			line += " " + name
		}
		switch f.DefValue {
		case "", "0", "false", "[]", "0s":
		default:
			text += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(&b, "%s\n        %s\n", line, text)
	})
	return b.String()
}

// wantsHelp reports whether args ask for help (-h, --help) before any
// "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--h", "--help":
			return true
		}
	}
	return false
}
