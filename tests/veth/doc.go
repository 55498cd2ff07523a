// Package veth is xdpfab's end-to-end suite: the requirements of the
// datapath, checked through the public fabric API between two network
// namespaces joined by a real veth pair, so every packet crosses the
// kernel's IP stack (and, for the XDP transports, the xdpfab XDP program)
// instead of loopback.
//
// Namespace A (10.200.0.1) holds the initiators, namespace B (10.200.0.2)
// the target; each side's Domain and Endpoint are opened inside its
// namespace, so the endpoint's socket lives there. Every test is run once
// per transport case (transportCases in transport_test.go): "udp" (the
// kernel UDP socket) today, the AF_XDP cases once fabric.TransportXDP is
// available. What the tests prove, per test:
//
//   - TestMessagesRMA: messages of 1 B to 64 KiB arrive intact, in order and
//     with their source; RMA writes and reads of 1 B to 1 MiB are byte-exact
//     at unaligned offsets, checked by RMA read and, after the target's
//     endpoint has closed, in the target's memory itself.
//   - TestEveryAtomic: every supported (datatype, op) pair of the base, fetch
//     and compare classes, with edge and random operands, at count 1 and at
//     the largest valid count, leaves in target memory and returns to the
//     initiator exactly what atomic.Reference computes from the previous
//     target contents.
//   - TestExactlyOnceUnderLoss: with 1 %, 5 % and 20 % loss, duplication and
//     reordering (the datapath/lossy wrapper), or random drops and
//     duplicates on the real path (nftables in both namespaces), 4
//     initiators' pipelined uint64 fetch-adds on one counter each execute
//     exactly once: the counter ends at the number of operations and the
//     fetched values are a permutation of 0..N-1. Multi-packet RMA data
//     stays byte-exact.
//   - TestPeerDisappears: when the target's endpoint closes or its interface
//     goes down with operations pending (held back by an nftables blackhole
//     until they are being retransmitted), every pending operation, and
//     every one posted afterwards, completes with FI_ETIMEDOUT or
//     FI_ECONNREFUSED within the retry budget, nothing hangs, and closing
//     everything returns the goroutine count to its baseline.
//   - TestHostileFlood: random bytes and packets forged with datapath/wire
//     (bad version, bad lengths, unknown source, stale and far sequence
//     numbers, stale session, wrong endpoint, wrong rkey) sent at the target
//     during a fetch-add workload change nothing but the drop counters: the
//     workload's result is exact, a forged request with a valid rkey from an
//     unknown source never executes, a wrong rkey is answered with a NAK.
//   - TestUserIDInCompletions: on an AV opened with FI_AV_USER_ID, received
//     messages report the sender's user ID (FI_ADDR_NOTAVAIL before
//     SetUserID).
//   - TestOtherHostTraffic: datagrams that reach B's interface on the
//     endpoint's port but addressed to another host (A routes 10.251.0.77
//     to B's MAC) never reach the endpoint: forged writes from a peer in
//     B's AV do not execute, the XDP program counts them pass_other_host,
//     the endpoint keeps serving.
//   - TestCorruptionInFlight: through a router namespace whose XDP program
//     flips a payload byte of ~5 % of the endpoints' datagrams (checksum
//     left stale), fetch-adds execute exactly once with their operands and
//     RMA writes land byte-exact; the corrupted datagrams are dropped
//     (B's XDP pass_bad_csum, B's Udp InCsumErrors) and retransmitted.
//   - TestGetInfoXDPAttached: GetInfo lists the veth end with xdpfab's
//     program attached first and says so, the other namespace's end
//     without; a domain opened from the Info uses AF_XDP and reports it.
//
// bugs_test.go holds minimal reproductions of defects found by the suite
// in the packages it builds on; each fails until its defect is fixed.
//
// bench_test.go measures fetch-add latency (p50/p99) and rate, 8-byte
// message rate and 4 KiB RMA write bandwidth over the pair, with and
// without busy polling.
//
// The tests need root (testenv.RequirePriv skips them otherwise). Target
// memory is only ever checked through RMA reads or after the target's
// endpoint is closed: the UDP hop is no happens-before edge for the race
// detector.
package veth
