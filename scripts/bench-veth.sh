#!/bin/sh
# make bench-veth: `xdpfab bench` over a veth pair between two network
# namespaces, side by side in one run: AF_XDP vs the kernel UDP socket, each
# with blocking progress, busy polling and FI_PROGRESS_MANUAL. Prints each
# run's summary, which includes a kernel UDP ping-pong to bench serve's echo
# at port+1 (the XDP program passes that port to the kernel stack) and the
# fetch-add round trip as a ratio of it. Everything made here is removed at the end, also on
# failure or Ctrl-C. Needs root, Go, iproute2 and util-linux (nsenter).
#
# BASE=REF (a git revision, e.g. BASE=main) also builds xdpfab from REF and
# runs every model REPS times (default 3), REF's build and the working
# tree's alternating (server and client of the same build), then prints
# one line per run: the UDP ping-pong, fetch-add and tagged ping-pong p50
# and the tagged ping-pong's ratio to the UDP ping-pong of the same run.
set -eu
GO=${GO:-go}
DURATION=${DURATION:-4s}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-veth: needs root" >&2; exit 1; }

id=$$
ns_srv=xfbench-srv-$id
ns_cli=xfbench-cli-$id
if_srv=xfb${id}s
if_cli=xfb${id}c
ip_srv=10.234.0.2
ip_cli=10.234.0.1
port=7472
tmp=$(mktemp -d /tmp/xdpfab-bench.XXXXXX)
bin=$tmp/bin
srv_pid=

cleanup() {
	status=$?
	trap - EXIT INT TERM
	[ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	if [ -x "$bin/xdpfab" ]; then
		"$bin/xdpfab" -n "$ns_srv" detach "$if_srv" >/dev/null 2>&1 || true
		"$bin/xdpfab" -n "$ns_cli" detach "$if_cli" >/dev/null 2>&1 || true
	fi
	ip netns del "$ns_srv" 2>/dev/null || true
	ip netns del "$ns_cli" 2>/dev/null || true
	rm -rf "$tmp"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$bin"
"$GO" build -o "$bin/xdpfab" ./cmd/xdpfab
if [ -n "${BASE:-}" ]; then
	mkdir "$tmp/base-src" "$tmp/base"
	git archive "$BASE" | tar -x -C "$tmp/base-src"
	(cd "$tmp/base-src" && "$GO" build -o "$tmp/base/xdpfab" ./cmd/xdpfab)
fi
ip netns add "$ns_srv"
ip netns add "$ns_cli"
ip -n "$ns_cli" link add "$if_cli" type veth peer name "$if_srv" netns "$ns_srv"
ip -n "$ns_cli" addr add "$ip_cli/24" dev "$if_cli"
ip -n "$ns_srv" addr add "$ip_srv/24" dev "$if_srv"
for ns in "$ns_cli" "$ns_srv"; do ip -n "$ns" link set lo up; done
ip -n "$ns_cli" link set "$if_cli" up
ip -n "$ns_srv" link set "$if_srv" up
"$bin/xdpfab" -n "$ns_srv" attach "$if_srv" --mode native --port "$port" >/dev/null
"$bin/xdpfab" -n "$ns_cli" attach "$if_cli" --mode native --port "$port" >/dev/null

run() { # transport, extra flags...
	tr=$1
	shift
	x=${X:-$bin/xdpfab}
	nsenter --net="/run/netns/$ns_srv" -- "$x" bench serve --addr "$ip_srv:$port" \
		--transport "$tr" "$@" --duration 120s >"$tmp/serve.out" 2>&1 &
	srv_pid=$!
	i=0
	until grep -q "run: xdpfab bench run" "$tmp/serve.out" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 100 ] || { cat "$tmp/serve.out" >&2; exit 1; }
		sleep 0.1
	done
	if [ -z "${BASE:-}" ]; then
		printf '\n== transport %s %s\n' "$tr" "$*"
		nsenter --net="/run/netns/$ns_cli" -- "$x" bench run --peer "$ip_srv:$port" --addr "$ip_cli" \
			--transport "$tr" "$@" --duration "$DURATION" 2>/dev/null
	else
		nsenter --net="/run/netns/$ns_cli" -- "$x" bench run --peer "$ip_srv:$port" --addr "$ip_cli" \
			--transport "$tr" "$@" --duration "$DURATION" >"$tmp/run.out" 2>"$tmp/run.err" ||
			{ echo "-- $LABEL $tr $* failed:" >&2; tail -n 3 "$tmp/run.err" "$tmp/serve.out" >&2; }
		p50() { grep "$1" "$tmp/run.out" | head -n 1 | sed -n 's/.*p50 \([0-9.]*[µm]*s\).*/\1/p'; }
		printf '%-28s %-6s udp p50 %-8s fetch-add p50 %-8s tagged ping-pong p50 %-8s (%s UDP)\n' \
			"$tr $*" "$LABEL" "$(p50 'udp ping-pong')" "$(p50 'fetch-add uint64, 1 in')" \
			"$(p50 'tagged ping-pong, 1')" \
			"$(sed -n 's/.*tagged ping-pong round trip p50 = \([0-9.]*×\).*/\1/p' "$tmp/run.out")"
	fi
	kill -INT "$srv_pid" 2>/dev/null || true
	wait "$srv_pid" 2>/dev/null || true
	srv_pid=
}

# models: each progress model of a transport, once (or, with BASE, REPS
# times per build, alternating).
models() {
	tr=$1
	if [ -z "${BASE:-}" ]; then
		run "$@"
		return
	fi
	rep=1
	while [ "$rep" -le "${REPS:-3}" ]; do
		X=$tmp/base/xdpfab LABEL=base run "$@"
		X=$bin/xdpfab LABEL=new run "$@"
		rep=$((rep + 1))
	done
}

for tr in ${TRANSPORTS:-xdp udp}; do
	models "$tr"
	[ -n "${NO_BUSY:-}" ] || models "$tr" --busy-poll
	models "$tr" --manual-progress
done
