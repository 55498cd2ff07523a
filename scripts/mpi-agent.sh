#!/bin/sh
# mpirun's launch agent for ranks in network namespaces on this machine
# (mpirun --mca plm_rsh_agent scripts/mpi-agent.sh): where mpirun would run
#   ssh HOST COMMAND...
# this runs COMMAND (Open MPI's orted) inside the network namespace named
# HOST (/run/netns/HOST, as `ip netns add HOST` makes it). The host names
# given to mpirun (--host A,B) are namespace names.
#
# Only the network namespace is switched (nsenter --net): `ip netns exec`
# would also remount /sys, hiding the host's bpffs where xdpfab's XDP
# program is pinned (see the xdp package doc). The daemon also gets a UTS
# namespace of its own whose host name is HOST: Open MPI keys its session
# directories (/tmp/ompi.HOSTNAME.UID/...) and PMIx stores by host name,
# and two daemons of one job under the machine's one name race for the
# same directories (orte_session_dir "File exists", a daemon that never
# reports back).
set -eu
[ $# -ge 2 ] || { echo "mpi-agent.sh: usage: mpi-agent.sh HOST COMMAND..." >&2; exit 2; }
host=$1
shift
case $host in
*/* | .* | "") echo "mpi-agent.sh: $host is not a network namespace name" >&2; exit 2 ;;
esac
ns=/run/netns/$host
[ -e "$ns" ] || { echo "mpi-agent.sh: no network namespace $host ($ns)" >&2; exit 2; }
# ssh hands the remote shell one command line; so does this.
exec nsenter --net="$ns" -- unshare --uts -- sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
