#!/bin/sh
# make bench-veth: `xdpfab bench` over a veth pair between two network
# namespaces, side by side in one run: AF_XDP vs the kernel UDP socket, each
# with blocking progress, busy polling and FI_PROGRESS_MANUAL. Prints each
# run's summary, which includes a kernel UDP ping-pong to bench serve's echo
# at port+1 (the XDP program passes that port to the kernel stack) and the
# fetch-add round trip as a ratio of it. Everything made here is removed at the end, also on
# failure or Ctrl-C. Needs root, Go, iproute2 and util-linux (nsenter).
#
# BASE=<git revision> measures that revision's build side by side with the
# work tree's in the same run: every configuration runs with the base
# build, then with the work tree's, each with its own XDP program attached
# (the program serves the kernel-resident phases), so a change is judged
# by ratios from one run on a shared, noisy machine.
#
# PHASES=REGEXP runs only the phases whose names match (bench run
# --phases), e.g. PHASES='^(udp ping-pong|tagged ping-pong|fetch-add)'.
#
# PLACEMENT says where the two processes run (taskset), each placement a
# run of every configuration, so a ratio compares a UDP ping-pong and an
# xdpfab phase that had the same placement:
#   split   the client on one CPU, the target on another (CPUs 0 and 1):
#           each end that waits has its own CPU, idle while it sleeps
#   shared  both on CPU 0: every message switches from one process to the
#           other
#   free    unpinned: the scheduler places them, and may move them between
#           and within phases (what a run before PLACEMENT measured)
# The default is "split shared" (just "shared" on one CPU).
set -eu
GO=${GO:-go}
DURATION=${DURATION:-4s}
COUNT=${COUNT:-1000000000} # operations per phase at most: the phases' time ends them
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
ncpu=$(getconf _NPROCESSORS_ONLN)
if [ "$ncpu" -ge 2 ]; then
	PLACEMENT=${PLACEMENT:-split shared}
else
	PLACEMENT=${PLACEMENT:-shared}
fi
for pl in $PLACEMENT; do
	case $pl in
	split) [ "$ncpu" -ge 2 ] || { echo "bench-veth: placement split needs 2 CPUs" >&2; exit 2; } ;;
	shared | free) ;;
	*) echo "bench-veth: unknown placement $pl (split, shared, free)" >&2; exit 2 ;;
	esac
done

cleanup() {
	status=$?
	trap - EXIT INT TERM
	[ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null || true
	wait 2>/dev/null || true
	if [ -n "${attached:-}" ] && [ -x "$bin/$attached" ]; then
		"$bin/$attached" -n "$ns_srv" detach "$if_srv" >/dev/null 2>&1 || true
		"$bin/$attached" -n "$ns_cli" detach "$if_cli" >/dev/null 2>&1 || true
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
builds=xdpfab
if [ -n "${BASE:-}" ]; then
	base_rev=$(git rev-parse --short "$BASE")
	mkdir -p "$tmp/base"
	git archive "$base_rev" | tar -x -C "$tmp/base"
	(cd "$tmp/base" && "$GO" build -o "$bin/xdpfab.base" ./cmd/xdpfab)
	builds="xdpfab.base xdpfab"
fi
ip netns add "$ns_srv"
ip netns add "$ns_cli"
ip -n "$ns_cli" link add "$if_cli" type veth peer name "$if_srv" netns "$ns_srv"
ip -n "$ns_cli" addr add "$ip_cli/24" dev "$if_cli"
ip -n "$ns_srv" addr add "$ip_srv/24" dev "$if_srv"
for ns in "$ns_cli" "$ns_srv"; do ip -n "$ns" link set lo up; done
ip -n "$ns_cli" link set "$if_cli" up
ip -n "$ns_srv" link set "$if_srv" up

attached=
attach() { # build: its XDP program on both ends
	[ "$attached" = "$1" ] && return
	if [ -n "$attached" ]; then
		"$bin/$attached" -n "$ns_srv" detach "$if_srv" >/dev/null
		"$bin/$attached" -n "$ns_cli" detach "$if_cli" >/dev/null
	fi
	"$bin/$1" -n "$ns_srv" attach "$if_srv" --mode native --port "$port" >/dev/null
	"$bin/$1" -n "$ns_cli" attach "$if_cli" --mode native --port "$port" >/dev/null
	attached=$1
}

run() { # transport, extra flags...
	for b in $builds; do
		attach "$b"
		run1 "$b" "$@"
	done
}

# pin: the command that runs the target (srv) or the client (cli) in the
# current placement.
pin() {
	case $placement in
	split) [ "$1" = srv ] && echo "taskset -c 1" || echo "taskset -c 0" ;;
	shared) echo "taskset -c 0" ;;
	free) ;;
	esac
}

run1() { # build, transport, extra flags...
	b=$1
	tr=$2
	shift 2
	label=" [$placement]"
	[ -z "${BASE:-}" ] || { [ "$b" = xdpfab.base ] && label="$label [base $base_rev]" || label="$label [work tree]"; }
	# The previous target's output goes first: the wait below must not
	# find its "run:" line before this target has started.
	rm -f "$tmp/serve.out"
	nsenter --net="/run/netns/$ns_srv" -- $(pin srv) "$bin/$b" bench serve --addr "$ip_srv:$port" \
		--transport "$tr" "$@" --duration 120s >"$tmp/serve.out" 2>&1 &
	srv_pid=$!
	i=0
	until grep -q "run: xdpfab bench run" "$tmp/serve.out" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 100 ] || { cat "$tmp/serve.out" >&2; exit 1; }
		sleep 0.1
	done
	printf '\n== transport %s %s%s\n' "$tr" "$*" "$label"
	nsenter --net="/run/netns/$ns_cli" -- $(pin cli) "$bin/$b" bench run --peer "$ip_srv:$port" --addr "$ip_cli" \
		--transport "$tr" "$@" --duration "$DURATION" --count "$COUNT" ${PHASES:+--phases "$PHASES"} 2>"$tmp/run.err" || {
		# The progress line went to run.err too: the error is its last line.
		tr '\r' '\n' <"$tmp/run.err" | tail -n 2 >&2
		exit 1
	}
	kill -INT "$srv_pid" 2>/dev/null || true
	wait "$srv_pid" 2>/dev/null || true
	srv_pid=
}

for placement in $PLACEMENT; do
	for tr in ${TRANSPORTS:-xdp udp}; do
		run "$tr"
		[ -n "${NO_BUSY:-}" ] || run "$tr" --busy-poll
		run "$tr" --manual-progress
	done
done
