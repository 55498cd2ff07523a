#!/bin/sh
# make bench-control: xdpfab's control-plane costs beside libfabric's own
# providers (udp;ofi_rxd, tcp;ofi_rxm, sockets: scripts/bench-control/
# peers.c, built with gcc -lfabric) and a plain syscall baseline (one BPF
# map update + delete), measured in one run, with ratios to the fastest
# peer. Needs root for the kernel-map figures, gcc and libfabric-dev.
set -eu
GO=${GO:-go}
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

gcc -O2 -Wall -o "$out/peers" scripts/bench-control/peers.c -lfabric
for p in "udp;ofi_rxd" "tcp;ofi_rxm" sockets; do
	# A provider that fails part way (rxd cannot look addresses up that
	# no peer answered) still reports what it measured.
	timeout 300 "$out/peers" "$p" >>"$out/peers.txt" 2>/dev/null || true
done

bench() { # pkg regexp benchtime
	$GO test -run '^$' -bench "$2" -benchmem -benchtime "$3" "$1" | grep '^Benchmark' >>"$out/go.txt"
}
bench ./mr/ 'RegClose$|RegCloseBPF$|KernelMapUpdateDelete$' 200000x
bench ./av/ 'OpenClose' 2000x
bench ./xdp/ 'AVOpenCloseAttached' 500x
bench ./av/ 'Insert1M/.*/FI_AV_TABLE' 1x
bench ./av/ 'Lookup/FI_AV_TABLE/(AddrPort|FIAddr)/hot1k' 2000000x
bench ./fabric/ '(CQ|Cntr)OpenClose/FI_WAIT_NONE' 5000x

echo "== libfabric providers (scripts/bench-control/peers.c)"
cat "$out/peers.txt"
echo "== xdpfab (go test -bench ... -benchmem)"
cat "$out/go.txt"
echo "== side by side (ratio: xdpfab / fastest peer; wall time, then CPU time of the measuring thread)"
awk '
FNR == NR {
	if ($3 == "error") next
	v = $3; c = $5; if ($4 == "s") { v *= 1e9; c *= 1e9 }
	if (!($2 in best) || v < best[$2]) { best[$2] = v; who[$2] = $1 }
	if (c != "" && (!($2 in bestc) || c < bestc[$2])) { bestc[$2] = c; whoc[$2] = $1 }
	next
}
function show(op, name, bench,   v, c, w) {
	if (!(bench in go)) return
	v = go[bench]
	w = (op in best) ? sprintf("   fastest peer %-12s %12.1f ns   ratio %6.2f", who[op], best[op], v / best[op]) : ""
	if (bench in cpu) {
		c = cpu[bench]
		w = w sprintf("   | cpu %12.1f ns", c)
		if (op in bestc)
			w = w sprintf("   fastest peer %-12s %12.1f ns   ratio %6.2f", whoc[op], bestc[op], c / bestc[op])
	}
	printf "%-16s %-44s %14.1f ns%s\n", op, name, v, w
}
# ns/op is wall time, as the peers measure it; cpu-ns/op (cpu-s/op) is the
# CPU time of the benchmark thread, which time spent descheduled on a
# loaded machine does not inflate (peers.c measures both).
/^Benchmark/ {
	n = $1; sub(/-[0-9]+$/, "", n); go[n] = $3
	for (i = 4; i < NF; i++) {
		if ($(i+1) == "cpu-ns/op") cpu[n] = $i
		if ($(i+1) == "cpu-s/op") cpu[n] = $i * 1e9
	}
}
END {
	show("mr_reg_close_4k", "MR reg+close, MR table in step", "BenchmarkRegCloseBPF")
	show("mr_reg_close_4k", "MR reg+close, no kernel table", "BenchmarkRegClose")
	show("syscall", "BPF map update+delete (baseline)", "BenchmarkKernelMapUpdateDelete")
	show("av_open_close", "AV open+close, kernel table", "BenchmarkOpenClose/kernel")
	show("av_open_close", "AV open+close, no kernel table", "BenchmarkOpenClose/nomirror")
	show("av_open_close", "AV open+close, XDP attached (fabric)", "BenchmarkAVOpenCloseAttached")
	show("av_insert_1m", "AV insert 1M, kernel table in step", "BenchmarkInsert1M/kernel/FI_AV_TABLE")
	show("av_insert_1m", "AV insert 1M, no kernel table", "BenchmarkInsert1M/nomirror/FI_AV_TABLE")
	show("av_lookup_hot", "AV lookup fi_addr->peer (AddrPort)", "BenchmarkLookup/FI_AV_TABLE/AddrPort/hot1k")
	# peers.c measures fi_av_lookup (fi_addr -> address) only: libfabric
	# has no public reverse lookup, so FIAddr has no peer figure.
	show("av_reverse_hot", "AV lookup peer->fi_addr (FIAddr, no peer op)", "BenchmarkLookup/FI_AV_TABLE/FIAddr/hot1k")
	show("cq_open_close", "CQ open+close", "BenchmarkCQOpenClose/FI_WAIT_NONE")
	show("cntr_open_close", "counter open+close", "BenchmarkCntrOpenClose/FI_WAIT_NONE")
}' "$out/peers.txt" "$out/go.txt"
