#!/bin/sh
# make bench-control: xdpfab's control-plane costs beside libfabric's own
# providers (udp;ofi_rxd, tcp;ofi_rxm, sockets: scripts/bench-control/
# peers.c, built with gcc -lfabric) and a plain syscall baseline (one BPF
# map update + delete), measured side by side: ROUNDS rounds (default 5)
# in which the peers' program and xdpfab's benchmarks take turns, the
# order swapped every round, so that a change of the machine's load
# (other work shares it) reaches both sides alike. It prints per figure
# the median over the rounds and the spread (lowest..highest), and each
# ratio as xdpfab's median over the fastest peer's median, in wall time
# and in CPU time of the measuring thread. MR reg+close, the figure
# closest to its peers' and the one a single short run moves most, is
# measured MR_PAIRS times a round (default 3), each time the peers'
# row and xdpfab's benchmarks back to back. Needs root for the kernel-map
# figures, gcc and libfabric-dev.
set -eu
GO=${GO:-go}
ROUNDS=${ROUNDS:-5}
MR_PAIRS=${MR_PAIRS:-3}
cd "$(dirname "$0")/.."
root=$(pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

# Build everything first: no compiler runs between the rounds.
gcc -O2 -Wall -o "$out/peers" scripts/bench-control/peers.c -lfabric
for p in mr av xdp fabric; do
	$GO test -c -o "$out/$p.test" "./$p/"
done

peers() { # round [group...]: the groups given, all but mr when none
	round=$1
	shift
	for p in "udp;ofi_rxd" "tcp;ofi_rxm" sockets; do
		groups=${*:-"av_open cq cntr av_insert"}
		# rxd's fi_av_lookup fails on addresses no peer answered, and
		# its AV close then hangs: its 1M inserts (7-11 s, ten times
		# sockets') are left out rather than waited for every round.
		[ "$p" = "udp;ofi_rxd" ] && groups=$(echo "$groups" | sed 's/ *av_insert//')
		# rxm's take 3-10 s, six times sockets': every other round.
		[ "$p" = "tcp;ofi_rxm" ] && [ $((round % 2)) -eq 0 ] && groups=$(echo "$groups" | sed 's/ *av_insert//')
		# A provider that fails part way still reports what it measured.
		# shellcheck disable=SC2086
		{ timeout 120 "$out/peers" "$p" $groups 2>/dev/null || true; } | sed "s/^/$round /" >>"$out/peers.txt"
	done
}

bench() { # round pkg regexp benchtime
	(cd "$root/$2" && "$out/$2.test" -test.run '^$' -test.bench "$3" -test.benchmem -test.benchtime "$4") |
		grep '^Benchmark' | sed "s/^/$1 /" >>"$out/go.txt"
}

# The MR row of both sides, back to back, the order swapped each time.
# xdpfab's runs 1M reg+closes (peers.c 200000): a 200000-op run of a
# fresh Go process still pays for its heap's growth (page faults of new
# spans), which a C loop reusing one malloc'd object does not.
mrpairs() { # round
	i=1
	while [ "$i" -le "$MR_PAIRS" ]; do
		if [ $(((i + $1) % 2)) -eq 0 ]; then
			peers "$1" mr
			bench "$1" mr 'RegClose$|RegCloseBPF$' 1000000x
		else
			bench "$1" mr 'RegClose$|RegCloseBPF$' 1000000x
			peers "$1" mr
		fi
		i=$((i + 1))
	done
}

xdpfab() { # round
	bench "$1" mr 'KernelMapUpdateDelete$' 50000x
	bench "$1" av 'OpenClose' 2000x
	bench "$1" xdp 'AVOpenCloseAttached' 300x
	bench "$1" av 'Insert1M/.*/FI_AV_TABLE' 1x
	bench "$1" av 'Lookup/FI_AV_TABLE/(AddrPort|FIAddr)/hot1k' 2000000x
	bench "$1" fabric '(CQ|Cntr)OpenClose/FI_WAIT_NONE' 5000x
}

: >"$out/peers.txt"
: >"$out/go.txt"
r=1
while [ "$r" -le "$ROUNDS" ]; do
	echo "== round $r of $ROUNDS" >&2
	mrpairs "$r"
	if [ $((r % 2)) -eq 1 ]; then
		peers "$r"
		xdpfab "$r"
	else
		xdpfab "$r"
		peers "$r"
	fi
	r=$((r + 1))
done

awk -v rounds="$ROUNDS" -v pairs="$MR_PAIRS" '
# Values are kept in ns; a figure is a list of per-round values.
function add(list, key, v) { list[key] = (key in list) ? list[key] " " v : v }
function median(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	lo = a[1]; hi = a[n]; cnt = n
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
}
function human(v) {
	if (v < 1e4) return sprintf("%.1f ns", v)
	if (v < 1e7) return sprintf("%.1f us", v / 1e3)
	if (v < 1e9) return sprintf("%.1f ms", v / 1e6)
	return sprintf("%.3f s", v / 1e9)
}
# "median (lowest..highest)", of the list s.
function fig(s,   m) {
	m = median(s)
	return sprintf("%10s (%s..%s)", human(m), human(lo), human(hi))
}
FNR == NR {
	if ($4 == "error") { err[$2 " " $3] = 1; next }
	v = $4; c = $6; if ($5 == "s") { v *= 1e9; c *= 1e9 }
	add(pw, $2 SUBSEP $3, v); if (c != "") add(pc, $2 SUBSEP $3, c)
	ops[$3] = 1; provs[$2] = 1
	next
}
/Benchmark/ {
	n = $2; sub(/-[0-9]+$/, "", n)
	add(gw, n, $4)
	for (i = 5; i < NF; i++) {
		if ($(i+1) == "cpu-ns/op") add(gc, n, $i)
		if ($(i+1) == "cpu-s/op") add(gc, n, $i * 1e9)
	}
}
# fastest sets fw/fwho (wall) and fc/fcho (cpu): the peers lowest median for op.
function fastest(op,   p, m) {
	fwho = ""; fcho = ""
	for (p in provs) {
		if ((p SUBSEP op) in pw) { m = median(pw[p, op]); if (fwho == "" || m < fw) { fw = m; fwho = p } }
		if ((p SUBSEP op) in pc) { m = median(pc[p, op]); if (fcho == "" || m < fc) { fc = m; fcho = p } }
	}
}
function show(op, name, bench,   w, c, line) {
	if (!(bench in gw)) return
	fastest(op)
	w = median(gw[bench])
	line = sprintf("%-44s wall %s", name, fig(gw[bench]))
	if (fwho != "") line = line sprintf("   %-12s %s   ratio %6.2f", fwho, fig(pw[fwho, op]), w / fw)
	print line
	if (!(bench in gc)) return
	c = median(gc[bench])
	line = sprintf("%-44s cpu  %s", "", fig(gc[bench]))
	if (fcho != "") line = line sprintf("   %-12s %s   ratio %6.2f", fcho, fig(pc[fcho, op]), c / fc)
	print line
}
END {
	printf "== libfabric providers (scripts/bench-control/peers.c): median (lowest..highest) of %d rounds (MR: %d runs)\n", rounds, rounds * pairs
	nops = split("mr_reg_close_4k av_open_close av_insert_1m av_lookup_hot cq_open_close cntr_open_close", order, " ")
	for (i = 1; i <= nops; i++)
		for (p in provs) {
			op = order[i]
			if ((p SUBSEP op) in pw)
				printf "%-12s %-16s wall %s   cpu %s\n", p, op, fig(pw[p, op]), fig(pc[p, op])
			else if ((p " " op) in err)
				printf "%-12s %-16s error (see peers.c)\n", p, op
		}
	printf "== xdpfab (go test -bench): median (lowest..highest) of %d rounds (MR reg+close: %d runs)\n", rounds, rounds * pairs
	for (b in gw) {
		line = sprintf("%-48s wall %s", b, fig(gw[b]))
		if (b in gc) line = line sprintf("   cpu %s", fig(gc[b]))
		print line | "sort"
	}
	close("sort")
	print "== side by side: ratio = xdpfab median / fastest peer median, wall time, then CPU time of the measuring thread"
	show("mr_reg_close_4k", "MR reg+close 4 KiB, MR table in step", "BenchmarkRegCloseBPF")
	show("mr_reg_close_4k", "MR reg+close 4 KiB, no kernel table", "BenchmarkRegClose")
	show("syscall", "BPF map update+delete (syscall baseline)", "BenchmarkKernelMapUpdateDelete")
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
