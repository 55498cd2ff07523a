// Package bpf holds xdpfab's XDP program, written in C and compiled with
// bpf2go into the committed xdpfab_bpfel.{go,o}, so building xdpfab needs no
// clang. `make generate` rebuilds them and records the hash of the sources in
// sources.sha256; TestGeneratedUpToDate fails when the committed objects are
// older than the C.
//
// xdpfab.h is the single definition of the map layouts shared with Go: the
// generated XdpfabAvKey, XdpfabAvValue, XdpfabMrKey and XdpfabMrValue types
// come from its BTF.
package bpf

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target bpfel -type av_key -type av_value -type mr_key -type mr_value -type xdpfab_counter Xdpfab xdpfab.c -- -I.
