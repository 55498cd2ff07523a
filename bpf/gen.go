// Package bpf holds xdpfab's XDP program, written in C and compiled with
// bpf2go into the committed xdpfab_bpfel.{go,o}, so building xdpfab needs no
// clang. `make generate` rebuilds them and records the hash of the sources in
// sources.sha256; TestGeneratedUpToDate fails when the committed objects are
// older than the C.
//
// xdpfab.h is the single definition of the layouts shared with Go: the
// generated XdpfabAvKey, XdpfabAvValue, XdpfabMrKey, XdpfabMrValue,
// XdpfabPortConfig and XdpfabXdpMeta types and the counter and reason enums
// come from its BTF; counters.go and meta.go add names, descriptions and the
// #define constants, which tests check against the object.
//
// The program (xdpfab_xdp) touches only UDP datagrams to a port in the
// ports map. It drops datagrams from peers not in the port's AV when the
// port is strict, vets RMA and atomic requests against the MR map, and
// redirects the rest, with an xdp_meta in front carrying the peer's fi_addr
// and the verdict, to the AF_XDP socket of the RX queue, falling back to
// the kernel stack when no socket is bound. Provider choices: IPv6
// extension headers other than none are not walked (such packets pass to
// the stack); checksums are left to the stack and user space; a request's
// verdict is the reason of its first failed op plus a bitmap of failed ops
// (bad_ops), and a request whose header is malformed has reason
// REASON_BAD_HEADER with bad_ops zero; fetching and compare atomics need
// both FI_REMOTE_READ and FI_REMOTE_WRITE.
package bpf

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3 -I/usr/include/x86_64-linux-gnu" -target bpfel -type av_key -type av_value -type mr_key -type mr_value -type xdpfab_counter -type xdpfab_reason -type port_config -type local_addr -type xdp_meta Xdpfab xdpfab.c -- -I.
