#!/bin/sh
# make demo-mpi: Open MPI over xdpfab. Two hosts, simulated by two network
# namespaces joined by a veth pair with xdpfab's XDP program attached on
# both ends, run two MPI programs as one rank each (scripts/mpi-run.sh):
#   examples/mpi/onesided.c  through osc rdma + btl ofi (MPI_Win_allocate,
#                            MPI_Fetch_and_op, MPI_Compare_and_swap,
#                            MPI_Accumulate, MPI_Put/MPI_Get + flush)
#   examples/mpi/p2p.c       through pml cm + mtl ofi (send/recv up to
#                            8 MiB, probes, MPI_Bcast, MPI_Allreduce, ...)
# with libfabric allowed to pick xdpfab only, and no other MPI transport
# enabled; after each, what the XDP programs counted. Everything made here
# (namespaces and every process left in them, the veth pair, XDP programs
# and their pins, the temporary directory) is removed when the script
# ends, also on failure or Ctrl-C.
#
# Needs root, Go, gcc, libfabric-dev, openmpi-bin and libopenmpi-dev
# (mpicc, mpirun), iproute2 and util-linux (nsenter, unshare).
set -eu

GO=${GO:-go}
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "demo-mpi: needs root (network namespaces, XDP); run: sudo make demo-mpi" >&2
	exit 1
fi
for tool in "$GO" gcc mpicc mpirun ip nsenter unshare; do
	command -v "$tool" >/dev/null 2>&1 || {
		echo "demo-mpi: $tool not found (apt-get install openmpi-bin libopenmpi-dev libfabric-dev)" >&2
		exit 1
	}
done

id=$$
ns_a=xfmpi-a-$id
ns_b=xfmpi-b-$id
if_a=xfm${id}a
if_b=xfm${id}b
tmp=$(mktemp -d /tmp/xdpfab-demo-mpi.XXXXXX)
bin=$tmp/bin
prov=$tmp/provider

step() { printf '\n== %s\n' "$*"; }

# killns NS: every process still in the namespace (Open MPI's daemons
# detach from mpirun's process group).
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
	if [ -x "$bin/xdpfab" ]; then
		"$bin/xdpfab" -n "$ns_a" detach "$if_a" >/dev/null 2>&1 || true
		"$bin/xdpfab" -n "$ns_b" detach "$if_b" >/dev/null 2>&1 || true
	fi
	ip netns del "$ns_a" 2>/dev/null || true
	ip netns del "$ns_b" 2>/dev/null || true
	rm -rf "$tmp"
	if [ "$status" = 0 ]; then
		step "done; namespaces, processes, XDP programs and pins removed"
	else
		echo "demo-mpi: failed (exit $status); namespaces, processes, XDP programs and pins removed" >&2
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "building xdpfab, the provider ($prov) and examples/mpi (mpicc) into $bin"
mkdir -p "$bin"
"$GO" build -o "$bin/xdpfab" ./cmd/xdpfab
GO=$GO sh scripts/build-provider.sh "$prov"
for p in onesided p2p; do
	mpicc -O2 -Wall -o "$bin/$p" "examples/mpi/$p.c"
done

step "two namespaces joined by veth: $ns_a (10.234.0.1) <-> $ns_b (10.234.0.2)"
ip netns add "$ns_a"
ip netns add "$ns_b"
ip -n "$ns_a" link add "$if_a" type veth peer name "$if_b" netns "$ns_b"
ip -n "$ns_a" addr add 10.234.0.1/24 dev "$if_a"
ip -n "$ns_b" addr add 10.234.0.2/24 dev "$if_b"
for ns in "$ns_a" "$ns_b"; do
	ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set "$if_a" up
ip -n "$ns_b" link set "$if_b" up

step "attaching xdpfab's XDP program on both ends"
"$bin/xdpfab" -n "$ns_a" attach "$if_a" --mode auto
"$bin/xdpfab" -n "$ns_b" attach "$if_b" --mode auto

# counted NS IFACE: the XDP program's redirect_xsk counter (xdpfab
# datagrams handed to AF_XDP).
counted() {
	"$bin/xdpfab" -n "$1" stats "$2" | awk '$1 == "redirect_xsk" { print $2 }'
}

# run MODE PROGRAM: one rank in each namespace, then what the XDP programs
# saw.
run() {
	a0=$(counted "$ns_a" "$if_a")
	b0=$(counted "$ns_b" "$if_b")
	rc=0
	FI_PROVIDER_PATH=$prov sh scripts/mpi-run.sh "$1" "$ns_a" "$ns_b" "$bin/$2" >"$tmp/out" 2>&1 || rc=$?
	grep -v 'not in include list' "$tmp/out" || true
	[ "$rc" = 0 ] || { echo "demo-mpi: mpirun failed (exit $rc)" >&2; exit 1; }
	a1=$(counted "$ns_a" "$if_a")
	b1=$(counted "$ns_b" "$if_b")
	killns "$ns_a"
	killns "$ns_b"
	echo "-- xdpfab datagrams through AF_XDP during the run: $if_a $((a1 - a0)), $if_b $((b1 - b0))"
	if [ $((a1 - a0)) -lt 100 ] || [ $((b1 - b0)) -lt 100 ]; then
		echo "demo-mpi: too little xdpfab traffic: the ranks did not talk over xdpfab" >&2
		exit 1
	fi
}

step "one-sided: osc rdma over btl ofi (pml ob1 over btl ofi), libfabric provider xdpfab only"
run osc onesided

step "one-sided again, XDPFAB_KERNEL_WINDOWS=1: the windows are kernel-resident, their atomics executed by XDP"
k0=$("$bin/xdpfab" -n "$ns_a" stats "$if_a" | awk '$1 == "kern_ops" { print $2 }')
XDPFAB_KERNEL_WINDOWS=1 run osc onesided
k1=$("$bin/xdpfab" -n "$ns_a" stats "$if_a" | awk '$1 == "kern_ops" { print $2 }')
echo "-- atomics executed by the XDP program on $if_a (rank 0's window) during the run: $((k1 - k0))"
if [ $((k1 - k0)) -lt 100 ]; then
	echo "demo-mpi: the XDP program executed too few atomics: the window was not kernel-resident" >&2
	exit 1
fi

step "point-to-point and collectives: pml cm over mtl ofi, libfabric provider xdpfab only"
run mtl p2p

step "what the XDP program saw on $if_b"
"$bin/xdpfab" -n "$ns_b" stats "$if_b"
