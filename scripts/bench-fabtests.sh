#!/bin/sh
# make bench-fabtests: libfabric's own benchmarks (fabtests 1.17.0,
# unmodified) over xdpfab beside Debian's libfabric software providers,
# in one run on one veth pair between two network namespaces (xdpfab's
# XDP program attached on both ends, so xdpfab uses AF_XDP):
#
#   fi_rdm_pingpong 8 B          latency, usec/xfer (lower is better)
#   fi_rdm_tagged_bw 8 B         message rate, k msgs/s (higher is better)
#   fi_rma_bw -o write 4 KiB     MB/s (higher is better)
#   fi_rdm_atomic -o sum uint64  latency of one fi_atomic, usec (lower)
#   fi_rdm_atomic -o cswap uint64  latency of one fi_compare_atomic, usec
#
# each with fabtests' completion methods spin (fi_cq_read in a loop) and
# sread (fi_cq_sread), for:
#
#   xdpfab         the provider's default, automatic progress
#   xdpfab-manual  FI_XDPFAB_DATA_PROGRESS=manual: fi_cq_read drives progress
#   udp;ofi_rxd    libfabric's RDM over UDP
#   tcp;ofi_rxm    libfabric's RDM over TCP
#
# A subset runs with ROWS (an extended regular expression over the row
# names, e.g. ROWS='pingpong|rma_bw'), METHODS (default "spin sread")
# and CONFIGS (default "xdpfab xdpfab-manual udp;ofi_rxd tcp;ofi_rxm");
# the ratio columns need the configurations they compare.
#
# BASE=REF (a git revision, e.g. BASE=main) also builds the provider of
# REF and adds the configurations xdpfab@base and xdpfab-manual@base
# (unless CONFIGS is given, which may name them): an old build and the
# working tree's side by side in one run, interleaved like the others,
# with the columns new/base and manual/base (above 1: the working tree
# ahead).
#
# MTU=N sets the veth pair's MTU (default: the kernel's 1500) for every
# configuration alike. With xdpfab's program attached natively a veth
# takes at most 3506 (a frame must fit one page for XDP); xdpfab's
# packets follow the MTU (fabric/mtu.go), TCP's segments too.
#
# Every cell is the median of REPS runs (default 3), the configurations
# interleaved run by run so that a burst of load elsewhere on the machine
# hits them alike; the ratio columns say how many times better xdpfab is
# than each of the others (above 1: xdpfab ahead). The table goes to
# stdout (and $XDPFAB_BENCH_OUT if set); each run's output is kept in the
# temporary directory until the end and shown for runs that failed.
#
# Everything made here (namespaces, their processes, the veth pair, XDP
# programs and pins, the temporary directory) is removed when the script
# ends, also on failure or Ctrl-C. Needs root, Go, gcc, libfabric-dev,
# iproute2, util-linux; fabtests is built once by scripts/fabtests.sh.
set -eu

GO=${GO:-go}
REPS=${REPS:-3}
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench-fabtests: needs root (network namespaces, XDP)" >&2
	exit 1
fi

id=$$
ns_a=xfbf-a-$id
ns_b=xfbf-b-$id
if_a=xfb${id}a
if_b=xfb${id}b
ip_a=10.235.0.1
ip_b=10.235.0.2
port=9228
tmp=$(mktemp -d /tmp/xdpfab-bench-fabtests.XXXXXX)
prov=$tmp/provider
results=$tmp/results

killns() {
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		pids=$(ip netns pids "$1" 2>/dev/null) || return 0
		[ -n "$pids" ] || return 0
		# shellcheck disable=SC2086
		kill -9 $pids 2>/dev/null || true
		sleep 0.2
	done
}

cleanup() {
	status=$?
	trap - EXIT INT TERM
	killns "$ns_a"
	killns "$ns_b"
	if [ -x "$tmp/xdpfab" ]; then
		"$tmp/xdpfab" -n "$ns_a" detach "$if_a" >/dev/null 2>&1 || true
		"$tmp/xdpfab" -n "$ns_b" detach "$if_b" >/dev/null 2>&1 || true
	fi
	ip netns del "$ns_a" 2>/dev/null || true
	ip netns del "$ns_b" 2>/dev/null || true
	rm -rf "$tmp"
	[ "$status" = 0 ] || echo "bench-fabtests: failed (exit $status); everything it made is removed" >&2
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== building xdpfab, the provider and (once) fabtests" >&2
"$GO" build -o "$tmp/xdpfab" ./cmd/xdpfab
GO=$GO sh scripts/build-provider.sh "$prov"
bin=$(sh scripts/fabtests.sh)/bin
if [ -n "${BASE:-}" ]; then
	echo "== building the provider of $BASE" >&2
	mkdir "$tmp/base-src"
	git archive "$BASE" | tar -x -C "$tmp/base-src"
	GO=$GO sh "$tmp/base-src/scripts/build-provider.sh" "$tmp/provider-base"
fi

echo "== $ns_a ($ip_a) <-> $ns_b ($ip_b), xdpfab's XDP program on both ends" >&2
ip netns add "$ns_a"
ip netns add "$ns_b"
ip -n "$ns_a" link add "$if_a" type veth peer name "$if_b" netns "$ns_b"
ip -n "$ns_a" addr add "$ip_a/24" dev "$if_a"
ip -n "$ns_b" addr add "$ip_b/24" dev "$if_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
if [ -n "${MTU:-}" ]; then
	ip -n "$ns_a" link set "$if_a" mtu "$MTU"
	ip -n "$ns_b" link set "$if_b" mtu "$MTU"
fi
ip -n "$ns_a" link set "$if_a" up
ip -n "$ns_b" link set "$if_b" up
"$tmp/xdpfab" -n "$ns_a" attach "$if_a" --mode auto >&2
"$tmp/xdpfab" -n "$ns_b" attach "$if_b" --mode auto >&2

# The rows: name|fabtests binary and arguments|field of -m's output|better
tests="pingpong 8 B (usec)|fi_rdm_pingpong -S 8 -I 1000|usec/xfer|low
tagged_bw 8 B (k msgs/s)|fi_rdm_tagged_bw -S 8 -I 5000|Mxfers/sec|high
rma_bw write 4 KiB (MB/s)|fi_rma_bw -e rdm -o write -S 4096 -I 2000|MB/sec|high
atomic sum uint64 (usec)|fi_rdm_atomic -o sum -z uint64 -I 500|usec/xfer|low
atomic cswap uint64 (usec)|fi_rdm_atomic -o cswap -z uint64 -I 500|usec/xfer|low"
if [ -n "${ROWS:-}" ]; then
	tests=$(echo "$tests" | awk -F'|' -v re="$ROWS" '$1 ~ re')
	[ -n "$tests" ] || { echo "bench-fabtests: ROWS=$ROWS matches no row" >&2; exit 2; }
fi
default_configs="xdpfab xdpfab-manual udp;ofi_rxd tcp;ofi_rxm"
[ -z "${BASE:-}" ] || default_configs="xdpfab xdpfab@base xdpfab-manual xdpfab-manual@base udp;ofi_rxd tcp;ofi_rxm"
configs=${CONFIGS:-$default_configs}
methods=${METHODS:-"spin sread"}

# listening: is something in ns A bound to the test port yet?
listening() {
	nsenter --net="/run/netns/$ns_a" ss -Hanu "sport = :$port" 2>/dev/null | grep -q . ||
		nsenter --net="/run/netns/$ns_a" ss -Hltn "sport = :$port" 2>/dev/null | grep -q .
}

# one CONFIG METHOD "ARGS": one server/client run; prints the client's -m line.
one() {
	cfg=$1 method=$2 args=$3
	dir=$prov
	case $cfg in
	*@base) dir=$tmp/provider-base ;;
	esac
	case $cfg in
	xdpfab | xdpfab@base) prov_name=xdpfab progress=auto ;;
	xdpfab-manual | xdpfab-manual@base) prov_name=xdpfab progress=manual ;;
	*) prov_name=$cfg progress=auto ;;
	esac
	killns "$ns_a"
	killns "$ns_b"
	# shellcheck disable=SC2086 # args is a word list
	FI_PROVIDER_PATH=$dir FI_XDPFAB_DATA_PROGRESS=$progress timeout 120 \
		nsenter --net="/run/netns/$ns_a" $bin/$args -p "$prov_name" -c "$method" -m -s "$ip_a" -B "$port" \
		>"$tmp/server.out" 2>&1 &
	srv=$!
	tries=0
	until listening; do
		tries=$((tries + 1))
		if [ "$tries" -gt 300 ] || ! kill -0 "$srv" 2>/dev/null; then
			break
		fi
		sleep 0.05
	done
	rc=0
	# shellcheck disable=SC2086
	FI_PROVIDER_PATH=$dir FI_XDPFAB_DATA_PROGRESS=$progress timeout 120 \
		nsenter --net="/run/netns/$ns_b" $bin/$args -p "$prov_name" -c "$method" -m -s "$ip_b" -P "$port" "$ip_a" \
		>"$tmp/client.out" 2>&1 || rc=$?
	wait "$srv" || rc=$((rc + 1000))
	if [ "$rc" != 0 ] || ! grep -q '^- {' "$tmp/client.out"; then
		{
			echo "-- failed ($rc): $cfg $method $args"
			tail -n 5 "$tmp/server.out" "$tmp/client.out"
		} >>"$tmp/failures"
		return 0
	fi
	grep '^- {' "$tmp/client.out" | head -n 1
}

: >"$results"
rep=1
while [ "$rep" -le "$REPS" ]; do
	echo "== round $rep of $REPS" >&2
	echo "$tests" | while IFS='|' read -r name args field _; do
		for method in $methods; do
			for cfg in $configs; do
				line=$(one "$cfg" "$method" "$args")
				v=$(echo "$line" | tr ',{}' '\n\n\n' | awk -F': ' -v f="$field" '$1 ~ f"$" { print $2 }')
				[ -n "$v" ] || v=fail
				printf '%s|%s|%s|%s\n' "$name" "$method" "$cfg" "$v" >>"$results"
				printf '   %-28s %-5s %-14s %s\n' "$name" "$method" "$cfg" "$v" >&2
			done
		done
	done
	rep=$((rep + 1))
done

# The table: medians, and xdpfab's advantage over the others.
table=$(awk -F'|' -v tests="$tests" -v configs="$configs" -v methods="$methods" -v base="${BASE:+1}" '
function median(key,   n, i, j, t, a) {
	n = cnt[key]
	if (n == 0) return "-"
	for (i = 1; i <= n; i++) a[i] = val[key, i]
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function fmt(v) { return v == "-" ? "-" : (v >= 100 ? sprintf("%.0f", v) : sprintf("%.2f", v)) }
function ratio(x, o, better) {
	if (x == "-" || o == "-" || x == 0 || o == 0) return "-"
	return sprintf("%.2fx", better == "low" ? o / x : x / o)
}
{
	if ($4 == "fail") next
	v = $4
	if ($1 ~ /k msgs/) v = v * 1000
	key = $1 SUBSEP $2 SUBSEP $3
	val[key, ++cnt[key]] = v
}
END {
	nc = split(configs, cf, " ")
	nt = split(tests, tl, "\n")
	nm = split(methods, ml, " ")
	# The ratio columns by name: xdpfab, xdpfab-manual against rxd, rxm.
	for (c = 1; c <= nc; c++) col[cf[c]] = c
	printf "| %-28s | %-5s |", "test", "comp"
	for (c = 1; c <= nc; c++) printf " %13s |", cf[c]
	printf " %-17s | %-17s | %-17s | %-17s |", "xdpfab/rxd", "xdpfab/rxm", "manual/rxd", "manual/rxm"
	if (base) printf " %-17s | %-17s |", "new/base", "manual/base"
	printf "\n|%s|%s|", "------------------------------", "-------"
	for (c = 1; c <= nc; c++) printf "%s|", "---------------"
	printf "%s|%s|%s|%s|", "-------------------", "-------------------", "-------------------", "-------------------"
	if (base) printf "%s|%s|", "-------------------", "-------------------"
	printf "\n"
	for (t = 1; t <= nt; t++) {
		split(tl[t], parts, "|")
		name = parts[1]; better = parts[4]
		for (m = 1; m <= nm; m++) {
			method = ml[m]
			printf "| %-28s | %-5s |", name, method
			for (c = 1; c <= nc; c++) { med[cf[c]] = median(name SUBSEP method SUBSEP cf[c]); printf " %13s |", fmt(med[cf[c]]) }
			x = med["xdpfab"]; xm = med["xdpfab-manual"]; rd = med["udp;ofi_rxd"]; rm = med["tcp;ofi_rxm"]
			printf " %-17s | %-17s | %-17s | %-17s |", ratio(x, rd, better), ratio(x, rm, better),
				ratio(xm, rd, better), ratio(xm, rm, better)
			if (base) printf " %-17s | %-17s |", ratio(x, med["xdpfab@base"], better), ratio(xm, med["xdpfab-manual@base"], better)
			printf "\n"
			delete med
		}
	}
}' "$results")

echo
echo "fabtests 1.17.0 over one veth pair, median of $REPS runs each ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo "ratios: how many times better xdpfab is (above 1: ahead); xdpfab = automatic progress, manual = FI_XDPFAB_DATA_PROGRESS=manual"
echo
echo "$table"
if [ -n "${XDPFAB_BENCH_OUT:-}" ]; then
	echo "$table" >"$XDPFAB_BENCH_OUT"
fi
if [ -s "$tmp/failures" ]; then
	echo
	echo "runs that failed (left out of the medians):"
	cat "$tmp/failures"
fi
