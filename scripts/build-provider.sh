#!/bin/sh
# Builds xdpfab's libfabric provider into OUTDIR (make provider):
#   libxdpfab-fi.so  the C shim libfabric loads (exports fi_prov_ini only)
#   libxdpfab-go.so  the Go part (-buildmode=c-shared), loaded by the shim
#                    only when a process asks libfabric for xdpfab
# Needs gcc and libfabric-dev. GO names the go command; LIBDIR is where
# the shim looks for the Go part when it is not beside it (install-provider's
# directory).
set -eu
out=${1:?usage: build-provider.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
CC=${CC:-gcc}
LIBDIR=${LIBDIR:-/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/libfabric}
mkdir -p "$out"
cd "$root"
"$GO" build -buildmode=c-shared -trimpath \
	-ldflags='-extldflags=-Wl,-soname,libxdpfab-go.so' \
	-o "$out/libxdpfab-go.so" ./provider
rm -f "$out/libxdpfab-go.h"
"$CC" -shared -fPIC -O2 -Wall -Werror -fvisibility=hidden \
	-DXDPFAB_GO_LIBDIR="\"$LIBDIR\"" \
	-Wl,--version-script=provider/shim/exports.map -Wl,-z,defs \
	-o "$out/libxdpfab-fi.so" provider/shim/xdpfab_shim.c -lfabric -ldl -lpthread
