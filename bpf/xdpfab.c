//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xdpfab's XDP program. This first version declares the maps the AV and MR
 * packages keep in step and passes every packet to the stack, counting it;
 * parsing, steering and vetting come with the XDP datapath.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "xdpfab.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 22);
	__type(key, struct av_key);
	__type(value, struct av_value);
} av_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 20);
	__type(key, struct mr_key);
	__type(value, struct mr_value);
} mr_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, enum xdpfab_counter);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(enum xdpfab_counter c)
{
	__u32 idx = c;
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

SEC("xdp")
int xdpfab_xdp(struct xdp_md *ctx)
{
	count(CNT_RX_TOTAL);
	count(CNT_PASS_NOT_OURS);
	return XDP_PASS;
}

char __license[] SEC("license") = "Dual BSD/GPL";
