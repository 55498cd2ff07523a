#!/bin/sh
# Builds libfabric's test suite, fabtests 1.17.0, once into a cache
# directory outside the repository and prints its prefix:
#   scripts/fabtests.sh            -> ${XDPFAB_FABTESTS:-${XDG_CACHE_HOME:-/var/cache}/xdpfab/fabtests}
# The build is ../shared/third_party/build-fabtests.sh (relative to the
# repository root), used as it is; a prefix that already holds the
# binaries is left alone. tests/fabtests runs the binaries unmodified.
#   scripts/fabtests.sh check      -> exits 0 when the prefix holds them, 1 if not (builds nothing)
#   scripts/fabtests.sh install    -> builds them if missing (the protocol of
#                                     an sh: line in scripts/deps.txt)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${XDPFAB_FABTESTS:-${XDG_CACHE_HOME:-/var/cache}/xdpfab/fabtests}
# ../shared beside the repository; for a git worktree, beside the main
# checkout; for a clone of a local repository (CI clones main elsewhere),
# beside the repository it was cloned from.
rel=shared/third_party/build-fabtests.sh
builder=$root/../$rel
if [ ! -f "$builder" ] && common=$(git -C "$root" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
	builder=$(dirname "$common")/../$rel
fi
if [ ! -f "$builder" ] && origin=$(git -C "$root" config --get remote.origin.url 2>/dev/null) && [ -d "$origin" ]; then
	builder=$(cd "$origin" && pwd)/../$rel
fi
case ${1:-} in
check) [ -x "$prefix/bin/fi_rdm_atomic" ]; exit ;;
'' | install) ;;
*) echo "usage: fabtests.sh [check|install]" >&2; exit 2 ;;
esac
if [ ! -x "$prefix/bin/fi_rdm_atomic" ]; then
	[ -f "$builder" ] || { echo "fabtests.sh: $builder not found" >&2; exit 1; }
	bash "$builder" "$prefix" >&2
fi
echo "$prefix"
