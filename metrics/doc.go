// Package metrics makes xdpfab observable: the counters of every
// endpoint's reliability engine and transport, of the AF_XDP sockets
// (XDP_STATISTICS) and of the XDP program, as a Report (JSON) and in
// Prometheus text format through github.com/prometheus/client_golang.
//
// Model. The datapath keeps its counters in atomics where the events
// happen (reliable.Stats, afxdp.Stats, udp.Stats; the XDP program's in a
// per-CPU map), so reading them takes no lock the datapath holds. An
// endpoint registers itself here when it opens (fabric does it;
// Register), and Local builds the process's Report from the registered
// endpoints on demand: nothing is sampled or copied in between. Handler
// serves that report to Prometheus from inside the application;
// Collector lets an application add it to its own registry.
//
// The channel to the CLI. `xdpfab stats` runs in another process and must
// see every process's counters. Each process that has endpoints serves a
// snapshot of them on an abstract unix socket, one per network namespace it
// has endpoints in, named "xdpfab-metrics-PID-RANDOM" (Listen, Discover,
// Fetch). A client connects, reads one JSON Process and the server hangs
// up. Why that channel:
//
//   - Cleanup. An abstract socket has no file: the kernel frees its name
//     when the last descriptor closes, so a process killed with -9 leaves
//     nothing behind, and there is no stale entry to reap (unlike a
//     pathname socket next to the owner records in /run/xdpfab, whose
//     file survives the process, or pinned per-CPU maps, which survive it
//     in bpffs and need an owner to unpin them).
//   - Namespaces. The abstract socket namespace belongs to the network
//     namespace, as the attachments do: the CLI in one namespace finds the
//     sockets of that namespace in /proc/thread-self/net/unix and never
//     another namespace's, with no key to get wrong. A process with
//     endpoints in two namespaces serves one socket in each, with the
//     endpoints of that namespace only.
//   - No shared layout. A snapshot in JSON carries the counters the
//     process has, named, so a CLI and a library of different versions
//     still understand each other (unknown fields are ignored); maps would
//     freeze a binary layout between them.
//   - Cost. Nothing happens until somebody asks: the datapath keeps
//     counting in its atomics, and the snapshot is built per request.
//   - Permissions. An abstract socket has no mode bits, so the server
//     checks the peer's credentials (SO_PEERCRED) and answers only root
//     and its own user; anyone else is disconnected unanswered.
//
// Metric names: xdpfab_xdp_packets_total{counter=...} for the XDP
// program's outcomes; xdpfab_engine_* per endpoint (ops by kind,
// retransmits, timeouts, duplicates suppressed, session resets, request
// packets and packets per op, smoothed RTT, ops in flight, drops by
// reason); xdpfab_transport_* per endpoint; xdpfab_xsk_* per AF_XDP socket
// (rx_dropped, rx_invalid_descs, tx_invalid_descs, rx_ring_full,
// rx_fill_ring_empty_descs, tx_ring_empty_descs).
package metrics
