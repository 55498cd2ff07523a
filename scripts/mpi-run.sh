#!/bin/sh
# Runs an MPI program as two ranks, one in each of two network namespaces,
# with every MPI message carried by xdpfab (Open MPI 4.1 from Debian's
# openmpi-bin, libfabric loading xdpfab from FI_PROVIDER_PATH):
#
#   scripts/mpi-run.sh osc|mtl NETNS_A NETNS_B PROGRAM [ARGS...]
#
#   osc  pml ob1 over btl ofi (one-sided and two-sided) + btl self; MPI
#        windows through osc rdma, whose puts, gets and atomics are btl
#        ofi's fi_write, fi_read and fi_*atomic.
#   mtl  pml cm over mtl ofi: every message a tagged libfabric message.
#
# Either way the ofi components may only pick xdpfab (provider include
# lists) and no other transport is enabled (no vader/sm shared memory, no
# tcp btl), so the ranks talk over xdpfab or not at all. mpirun runs in
# NETNS_A; it starts Open MPI's daemons through scripts/mpi-agent.sh (the
# host names are the namespace names); its own control traffic (TCP between
# mpirun and the daemons) crosses the veth beside xdpfab's.
#
# Environment: FI_PROVIDER_PATH (required: the directory holding
# libxdpfab-fi.so), XDPFAB_MPI_TIMEOUT (seconds, default 120: mpirun
# --timeout kills the job after it), MPIRUN (default mpirun).
set -eu
[ $# -ge 4 ] || { echo "usage: mpi-run.sh osc|mtl NETNS_A NETNS_B PROGRAM [ARGS...]" >&2; exit 2; }
mode=$1 a=$2 b=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
: "${FI_PROVIDER_PATH:?FI_PROVIDER_PATH must name the directory holding libxdpfab-fi.so}"
export FI_PROVIDER_PATH

case $mode in
osc) transport="--mca pml ob1 --mca btl ofi,self --mca btl_ofi_provider_include xdpfab --mca btl_ofi_mode 2 --mca osc rdma" ;;
mtl) transport="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include xdpfab --mca btl self" ;;
*) echo "mpi-run.sh: mode $mode: want osc or mtl" >&2; exit 2 ;;
esac

# XDPFAB_KERNEL_WINDOWS=1 (the provider adopts one-sided windows as
# kernel-resident regions) reaches both ranks.
kwin=
if [ -n "${XDPFAB_KERNEL_WINDOWS:-}" ]; then
	export XDPFAB_KERNEL_WINDOWS
	kwin="-x XDPFAB_KERNEL_WINDOWS"
fi

root=
if [ "$(id -u)" = 0 ]; then
	root=--allow-run-as-root
fi

# shellcheck disable=SC2086 # $transport and $root are word lists
exec nsenter --net="/run/netns/$a" -- "${MPIRUN:-mpirun}" $root \
	-np 2 --host "$a,$b" --timeout "${XDPFAB_MPI_TIMEOUT:-120}" \
	--mca plm_rsh_agent "$here/mpi-agent.sh" --mca plm_rsh_no_tree_spawn 1 --mca routed direct \
	$transport \
	-x FI_PROVIDER_PATH $kwin \
	"$@"
