#!/bin/sh
# make demo: two hosts, simulated by two network namespaces joined by a
# veth pair, with xdpfab's XDP program attached on both ends, do remote
# atomics on each other's memory (examples/remote-atomics), then measure
# the link with `xdpfab bench`, with auto and with manual progress.
# Everything made here (namespaces, the veth
# pair, XDP programs and their pins, the temporary directory) is removed
# when the script ends, also on failure or Ctrl-C.
#
# Needs root, Go, iproute2 (ip) and util-linux (nsenter).
set -eu

GO=${GO:-go}
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "demo: needs root (network namespaces, XDP); run: sudo make demo" >&2
	exit 1
fi
for tool in "$GO" ip nsenter; do
	command -v "$tool" >/dev/null 2>&1 || { echo "demo: $tool not found" >&2; exit 1; }
done

id=$$
ns_srv=xfdemo-srv-$id
ns_cli=xfdemo-cli-$id
if_srv=xfd${id}s
if_cli=xfd${id}c
ip_srv=10.233.0.2
ip_cli=10.233.0.1
port=7471
bench_port=7472
tmp=$(mktemp -d /tmp/xdpfab-demo.XXXXXX)
bin=$tmp/bin
meet=$tmp/rendezvous
pids=

step() { printf '\n== %s\n' "$*"; }

cleanup() {
	status=$?
	trap - EXIT INT TERM
	for pid in $pids; do
		kill "$pid" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	# Detach before the namespaces go: deleting a namespace deletes the
	# veth, and the program's pins would be left behind.
	if [ -x "$bin/xdpfab" ]; then
		"$bin/xdpfab" -n "$ns_srv" detach "$if_srv" >/dev/null 2>&1 || true
		"$bin/xdpfab" -n "$ns_cli" detach "$if_cli" >/dev/null 2>&1 || true
	fi
	ip netns del "$ns_srv" 2>/dev/null || true
	ip netns del "$ns_cli" 2>/dev/null || true
	rm -rf "$tmp"
	if [ "$status" = 0 ]; then
		step "done; namespaces, XDP programs and pins removed"
	else
		echo "demo: failed (exit $status); namespaces, XDP programs and pins removed" >&2
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "building xdpfab and examples/remote-atomics into $bin"
mkdir -p "$bin" "$meet"
"$GO" build -o "$bin/xdpfab" ./cmd/xdpfab
"$GO" build -o "$bin/remote-atomics" ./examples/remote-atomics

step "two namespaces joined by veth: $ns_cli ($ip_cli) <-> $ns_srv ($ip_srv)"
ip netns add "$ns_srv"
ip netns add "$ns_cli"
ip -n "$ns_cli" link add "$if_cli" type veth peer name "$if_srv" netns "$ns_srv"
ip -n "$ns_cli" addr add "$ip_cli/24" dev "$if_cli"
ip -n "$ns_srv" addr add "$ip_srv/24" dev "$if_srv"
for ns in "$ns_cli" "$ns_srv"; do
	ip -n "$ns" link set lo up
done
ip -n "$ns_cli" link set "$if_cli" up
ip -n "$ns_srv" link set "$if_srv" up

step "attaching xdpfab's XDP program on both ends"
"$bin/xdpfab" -n "$ns_srv" attach "$if_srv" --mode auto --port "$port" --port "$bench_port"
"$bin/xdpfab" -n "$ns_cli" attach "$if_cli" --mode auto --port "$port" --port "$bench_port"

step "remote atomics: server in $ns_srv, client in $ns_cli (addresses and keys exchanged through $meet)"
# nsenter switches only the network namespace, so the programs still see
# the host's bpffs with xdpfab's pins (`ip netns exec` remounts /sys).
nsenter --net="/run/netns/$ns_srv" -- "$bin/remote-atomics" -role server -addr "$ip_srv:$port" -dir "$meet" &
srv=$!
pids="$pids $srv"
nsenter --net="/run/netns/$ns_cli" -- "$bin/remote-atomics" -role client -addr "$ip_cli:$port" -dir "$meet"
wait "$srv"
pids=

step "what the XDP program saw on the server's interface"
"$bin/xdpfab" -n "$ns_srv" stats "$if_srv"

# bench_pair FLAGS...: xdpfab bench serve in the server namespace and
# xdpfab bench run against it from the client's, with the same flags.
bench_pair() {
	"$bin/xdpfab" -n "$ns_srv" bench serve --addr "$ip_srv:$bench_port" --duration 60s "$@" >"$tmp/serve.out" &
	srv=$!
	pids="$srv"
	tries=0
	until grep -q "run: xdpfab bench run" "$tmp/serve.out" 2>/dev/null; do
		tries=$((tries + 1))
		if [ "$tries" -gt 100 ] || ! kill -0 "$srv" 2>/dev/null; then
			echo "demo: bench serve did not start" >&2
			cat "$tmp/serve.out" >&2
			exit 1
		fi
		sleep 0.1
	done
	cat "$tmp/serve.out"
	"$bin/xdpfab" -n "$ns_cli" bench run --peer "$ip_srv:$bench_port" --addr "$ip_cli" --duration 4s "$@"
	kill -TERM "$srv"
	wait "$srv" || true
	pids=
	tail -n 1 "$tmp/serve.out"
}

step "xdpfab bench between the namespaces (auto progress, the default)"
bench_pair

step "the same with FI_PROGRESS_MANUAL (the CQ readers drive the datapath)"
bench_pair --manual-progress
