//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xdpfab's XDP program.
 *
 * It parses Ethernet (at most one VLAN tag), IPv4 or IPv6 and UDP, and
 * touches only datagrams to a UDP port listed in the ports map and to the
 * address that port is bound to (or, for a port bound to every address, to
 * an address in local_addrs); everything else (ARP, ICMP, TCP, other UDP,
 * traffic for other hosts, IP fragments, IPv6 extension headers, malformed
 * or truncated frames) goes to the kernel stack unchanged.
 *
 * For an xdpfab datagram it looks the source (IP, port) up in the AV map of
 * the port's AV: a peer not in the AV is dropped on a strict port and handed
 * up marked "unknown" otherwise. RMA and atomic requests are vetted against
 * the MR map (key, range, access) and the verdict is written into the
 * packet's metadata (struct xdp_meta) together with the peer's fi_addr, so
 * user space NAKs a bad request without touching memory. The packet then
 * goes to the AF_XDP socket of its RX queue; with no socket bound there it
 * falls back to the kernel stack, so the kernel-socket transport still
 * works.
 *
 * Room for serving atomics in XDP: the MR map already yields the region_id
 * of a vetted request; a later step can keep kernel-resident regions in a
 * BPF_F_MMAPABLE array indexed by region_id and execute the atomic right
 * after vet_request, answering with XDP_TX instead of redirecting.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
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

/* UDP destination port, network byte order -> its config. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u16);
	__type(value, struct port_config);
} ports SEC(".maps");

/* The namespace's own addresses, for ports bound to every address. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, struct local_addr);
	__type(value, __u32);
} local_addrs SEC(".maps");

/* RX queue index -> AF_XDP socket. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XSK_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, enum xdpfab_counter);
	__type(value, __u64);
} counters SEC(".maps");

/* MEASUREMENT KNOB (item 10): 0 skips MR vetting. */
volatile const __u32 vet_mr = 1;

/* Keep in BTF the types only user space reads, for bpf2go -type. */
const struct xdp_meta *unused_xdp_meta __attribute__((unused));
const enum xdpfab_reason *unused_xdpfab_reason __attribute__((unused));

#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88A8
#define IP_MF_ 0x2000
#define IP_OFFSET_ 0x1FFF
#define FI_ADDR_NOTAVAIL_ (~0ULL)

static __always_inline void count(enum xdpfab_counter c)
{
	__u32 idx = c;
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

/* What the L2-L4 parse found in an xdpfab candidate. */
struct flow {
	__u8 saddr[16]; /* v4-mapped for IPv4 */
	__u8 daddr[16]; /* v4-mapped for IPv4 */
	__u8 v4;        /* IPv4 (else IPv6) */
	__u16 sport;    /* network order */
	__u16 dport;    /* network order */
	__u32 payload;  /* offset of the UDP payload from data */
	__u32 plen;     /* UDP payload length (from the UDP header) */
};

/*
 * parse_l2_l4 fills f for a well-formed unfragmented UDP datagram and
 * returns -1, or returns the CNT_PASS_* counter saying why the packet is not
 * one.
 */
static __always_inline int parse_l2_l4(struct xdp_md *ctx, struct flow *f)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	__u16 proto;
	__u32 off;

	if ((void *)(eth + 1) > end)
		return CNT_PASS_MALFORMED;
	proto = eth->h_proto;
	off = sizeof(*eth);
	if (proto == bpf_htons(ETH_P_8021Q_) || proto == bpf_htons(ETH_P_8021AD_)) {
		/* One tag: TCI then the inner ethertype. */
		__u16 *tag = data + off;
		if ((void *)(tag + 2) > end)
			return CNT_PASS_MALFORMED;
		proto = tag[1];
		off += 4;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;
		__u32 ihl, tot;
		if ((void *)(ip + 1) > end)
			return CNT_PASS_MALFORMED;
		ihl = (__u32)ip->ihl * 4;
		tot = bpf_ntohs(ip->tot_len);
		if (ip->version != 4 || ihl < sizeof(*ip) || tot < ihl ||
		    data + off + tot > end)
			return CNT_PASS_MALFORMED;
		if (ip->protocol != IPPROTO_UDP)
			return CNT_PASS_NOT_UDP;
		if (ip->frag_off & bpf_htons(IP_MF_ | IP_OFFSET_))
			return CNT_PASS_FRAGMENT;
		__builtin_memset(f->saddr, 0, 10);
		f->saddr[10] = 0xff;
		f->saddr[11] = 0xff;
		__builtin_memcpy(&f->saddr[12], &ip->saddr, 4);
		__builtin_memset(f->daddr, 0, 10);
		f->daddr[10] = 0xff;
		f->daddr[11] = 0xff;
		__builtin_memcpy(&f->daddr[12], &ip->daddr, 4);
		f->v4 = 1;
		off += ihl;
		tot -= ihl;
		udp = data + off;
		if ((void *)(udp + 1) > end || tot < sizeof(*udp))
			return CNT_PASS_MALFORMED;
		if (bpf_ntohs(udp->len) < sizeof(*udp) || bpf_ntohs(udp->len) > tot)
			return CNT_PASS_MALFORMED;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;
		__u32 plen;
		if ((void *)(ip6 + 1) > end)
			return CNT_PASS_MALFORMED;
		plen = bpf_ntohs(ip6->payload_len);
		if (ip6->version != 6 || data + off + sizeof(*ip6) + plen > end)
			return CNT_PASS_MALFORMED;
		if (ip6->nexthdr == IPPROTO_FRAGMENT)
			return CNT_PASS_FRAGMENT;
		/* Extension headers are not walked: not ours. */
		if (ip6->nexthdr != IPPROTO_UDP)
			return CNT_PASS_NOT_UDP;
		__builtin_memcpy(f->saddr, &ip6->saddr, 16);
		__builtin_memcpy(f->daddr, &ip6->daddr, 16);
		f->v4 = 0;
		off += sizeof(*ip6);
		udp = data + off;
		if ((void *)(udp + 1) > end || plen < sizeof(*udp))
			return CNT_PASS_MALFORMED;
		if (bpf_ntohs(udp->len) < sizeof(*udp) || bpf_ntohs(udp->len) > plen)
			return CNT_PASS_MALFORMED;
	} else {
		return CNT_PASS_NOT_IP;
	}

	f->sport = udp->source;
	f->dport = udp->dest;
	f->payload = off + sizeof(*udp);
	f->plen = bpf_ntohs(udp->len) - sizeof(*udp);
	return -1;
}

/*
 * to_us reports whether the datagram is addressed to the port's endpoint:
 * to its bound address, or, for a port bound to every address, to one the
 * namespace holds. Anything else reached this host only to be forwarded or
 * bridged (or by a static neighbour entry): not ours.
 */
static __always_inline int to_us(const struct port_config *pc, const struct flow *f)
{
	__u64 a0, a1, b0, b1;

	if (!(pc->flags & PORT_BOUND_ADDR))
		return bpf_map_lookup_elem(&local_addrs, f->daddr) != 0;
	__builtin_memcpy(&a0, &pc->addr[0], 8);
	__builtin_memcpy(&a1, &pc->addr[8], 8);
	__builtin_memcpy(&b0, &f->daddr[0], 8);
	__builtin_memcpy(&b1, &f->daddr[8], 8);
	return a0 == b0 && a1 == b1;
}

/*
 * Longest UDP datagram (header included) the program checksums: a 4 KiB
 * AF_XDP frame's worth. A longer one cannot be redirected into a frame
 * anyway; it passes to the stack like a bad one.
 */
#define CSUM_MAX_LEN 4096

enum csum_verdict {
	CSUM_OK,   /* present and right */
	CSUM_NONE, /* 0: the sender computed none */
	CSUM_BAD,  /* wrong, or not checkable here */
};

/* fold16 folds a 64-bit one's complement accumulator to 16 bits. */
static __always_inline __u64 fold16(__u64 acc)
{
	acc = (acc & 0xffffffff) + (acc >> 32);
	acc = (acc & 0xffffffff) + (acc >> 32);
	acc = (acc & 0xffff) + (acc >> 16);
	acc = (acc & 0xffff) + (acc >> 16);
	return acc;
}

/*
 * udp_csum verifies the UDP checksum of the datagram f describes (RFC 768,
 * RFC 8200 8.1). Words are summed as loaded (little-endian): the one's
 * complement sum is byte-order independent up to a swap, and a correct
 * datagram sums to 0xffff, which a swap leaves alone. The payload goes
 * through bpf_csum_diff (the kernel's csum_partial) in 256- and 32-byte
 * chunks, the last bytes by hand.
 */
static __always_inline int udp_csum(struct xdp_md *ctx, const struct flow *f)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 off = f->payload - sizeof(struct udphdr);
	__u32 len = f->plen + sizeof(struct udphdr);
	__u32 done = 0;
	__u64 acc = 0;
	__u32 w[4];
	struct udphdr *udp;

	udp = data + (off & 0x3fff);
	if ((void *)(udp + 1) > end)
		return CSUM_BAD;
	if (udp->check == 0)
		return CSUM_NONE;
	if (len > CSUM_MAX_LEN)
		return CSUM_BAD;

	/* Pseudo-header: addresses, protocol, UDP length. */
	if (f->v4) {
		__builtin_memcpy(&w[0], &f->saddr[12], 4);
		__builtin_memcpy(&w[1], &f->daddr[12], 4);
		acc += (__u64)w[0] + w[1];
	} else {
		__builtin_memcpy(w, f->saddr, 16);
		acc += (__u64)w[0] + w[1] + w[2] + w[3];
		__builtin_memcpy(w, f->daddr, 16);
		acc += (__u64)w[0] + w[1] + w[2] + w[3];
	}
	acc += bpf_htons(IPPROTO_UDP) + bpf_htons((__u16)len);

	for (int i = 0; i < CSUM_MAX_LEN / 256; i++) {
		void *p = data + ((off + done) & 0x3fff);
		__s64 r;

		if (len - done < 256)
			break;
		if (p + 256 > end)
			return CSUM_BAD;
		r = bpf_csum_diff(0, 0, p, 256, 0);
		if (r < 0)
			return CSUM_BAD;
		acc += (__u32)r;
		done += 256;
	}
	for (int i = 0; i < 256 / 32; i++) {
		void *p = data + ((off + done) & 0x3fff);
		__s64 r;

		if (len - done < 32)
			break;
		if (p + 32 > end)
			return CSUM_BAD;
		r = bpf_csum_diff(0, 0, p, 32, 0);
		if (r < 0)
			return CSUM_BAD;
		acc += (__u32)r;
		done += 32;
	}
	for (int i = 0; i < 32 / 4; i++) {
		__u32 *p = data + ((off + done) & 0x3fff);

		if (len - done < 4)
			break;
		if ((void *)(p + 1) > end)
			return CSUM_BAD;
		acc += *p;
		done += 4;
	}
	if (len - done > 0) { /* 1 to 3 bytes, zero-padded */
		__u8 *p = data + ((off + done) & 0x3fff);
		__u32 rest = len - done;

		if ((void *)(p + 3) > end) {
			/* The frame may end right after the datagram. */
			if ((void *)(p + 1) > end)
				return CSUM_BAD;
			acc += p[0];
			if (rest > 1) {
				if ((void *)(p + 2) > end)
					return CSUM_BAD;
				acc += (__u32)p[1] << 8;
			}
			if (rest > 2)
				return CSUM_BAD;
		} else {
			acc += p[0];
			if (rest > 1)
				acc += (__u32)p[1] << 8;
			if (rest > 2)
				acc += (__u32)p[2] << 16;
		}
	}
	return fold16(acc) == 0xffff ? CSUM_OK : CSUM_BAD;
}

/* Result of vetting a request. */
struct vet {
	__u32 region_id; /* region of the first op naming one */
	__u16 bad_ops;   /* bit i: op i failed */
	__u8 reason;     /* reason of the first failed op */
	__u8 vetted;     /* the packet was a request and was vetted */
};

/*
 * mr_cache holds the MR map entry the last op of a request looked up, so
 * that the request's next op naming the same key skips the hash lookup
 * (the larger part of vetting an op).
 */
struct mr_cache {
	__u64 key;
	__u32 state; /* MR_CACHE_* */
	__u32 pad;
	struct mr_value mr; /* copy of the entry when state is MR_CACHE_FOUND */
};

#define MR_CACHE_EMPTY   0
#define MR_CACHE_FOUND   1 /* key is in the map: mr is its entry */
#define MR_CACHE_MISSING 2 /* key is not in the map */

/*
 * check_mr vets an access of len bytes at addr needing access bits need
 * against the MR (domain, key), through the request's cache.
 */
static __always_inline __u8 check_mr(__u32 domain, __u64 key, __u64 addr,
				      __u64 len, __u32 need, __u32 *region_id,
				      struct mr_cache *c)
{
	struct mr_value *mr;

	if (c->state == MR_CACHE_EMPTY || c->key != key) {
		struct mr_key k = {.domain_id = domain, .key = key};
		struct mr_value *found = bpf_map_lookup_elem(&mr_map, &k);

		c->key = key;
		c->state = MR_CACHE_MISSING;
		if (found) {
			c->mr = *found;
			c->state = MR_CACHE_FOUND;
		}
	}
	if (c->state != MR_CACHE_FOUND)
		return REASON_MR_NO_KEY;
	mr = &c->mr;
	*region_id = mr->region_id;
	if (!(mr->flags & MR_REGION_ENABLED))
		return REASON_MR_DISABLED;
	/* No overflow: addr - base and len - size are only formed when
	 * they cannot wrap. */
	if (addr < mr->base || len > mr->len || addr - mr->base > mr->len - len)
		return REASON_MR_RANGE;
	if ((mr->access & need) != need)
		return REASON_MR_ACCESS;
	return REASON_OK;
}

/*
 * Bytes one element of an fi_datatype occupies (rdma/fi_atomic.h numbering:
 * FI_INT8 = 0 ... FI_LONG_DOUBLE_COMPLEX = 13, FI_INT128 = 14,
 * FI_UINT128 = 15); 0 for an unknown datatype.
 */
static __always_inline __u64 datatype_size(__u8 dt)
{
	switch (dt) {
	case 0: case 1:
		return 1;
	case 2: case 3:
		return 2;
	case 4: case 5: case 8:
		return 4;
	case 6: case 7: case 9: case 10:
		return 8;
	case 11: case 12: case 14: case 15:
		return 16;
	case 13:
		return 32;
	}
	return 0;
}

/*
 * vet_op checks one op descriptor and returns its reason in the low byte
 * and the region it names (0 if none) in the upper 32 bits. It is a global
 * function so the verifier checks it once, not once per op of the loop.
 */
__attribute__((noinline)) __u64 vet_op(const struct wire_op *d, __u32 domain,
					struct mr_cache *cache)
{
	__u32 region_id = 0;
	__u64 span, elem;
	__u8 want, r;
	__u32 need;

	if (!d || !cache)
		return REASON_BAD_HEADER;
	switch (d->opcode) {
	case WIRE_OP_MSG:
		return d->access == 0 ? REASON_OK : REASON_BAD_HEADER;
	case WIRE_OP_RMA_WRITE:
		want = WIRE_ACCESS_WRITE;
		span = d->len;
		break;
	case WIRE_OP_RMA_READ:
		want = WIRE_ACCESS_READ;
		span = d->resp_len;
		break;
	case WIRE_OP_ATOMIC:
	case WIRE_OP_FETCH_ATOMIC:
	case WIRE_OP_COMPARE_ATOMIC:
		/* The bytes an atomic touches follow from count and
		 * datatype; the wire lengths must agree with them. */
		elem = datatype_size(d->datatype);
		if (!elem)
			return REASON_BAD_HEADER;
		span = elem * d->count;
		if (d->opcode == WIRE_OP_ATOMIC) {
			want = WIRE_ACCESS_WRITE;
			if (d->len != span || d->resp_len != 0)
				return REASON_BAD_HEADER;
		} else if (d->opcode == WIRE_OP_FETCH_ATOMIC) {
			want = WIRE_ACCESS_READ | WIRE_ACCESS_WRITE;
			if (d->resp_len != span)
				return REASON_BAD_HEADER;
			/* ATOMIC_READ ignores its operand: senders may omit it. */
			if (d->len != span && !(d->atomic_op == FI_ATOMIC_READ_ && d->len == 0))
				return REASON_BAD_HEADER;
		} else {
			want = WIRE_ACCESS_READ | WIRE_ACCESS_WRITE;
			if (d->len != 2 * span || d->resp_len != span)
				return REASON_BAD_HEADER;
		}
		break;
	default:
		return REASON_BAD_HEADER;
	}
	if (d->access != want)
		return REASON_BAD_HEADER;
	need = 0;
	if (want & WIRE_ACCESS_READ)
		need |= FI_REMOTE_READ_;
	if (want & WIRE_ACCESS_WRITE)
		need |= FI_REMOTE_WRITE_;
	/* An ATOMIC_READ only reads the target: remote read access suffices,
	 * as the target's own check (fabric) requires. */
	if (d->opcode == WIRE_OP_FETCH_ATOMIC && d->atomic_op == FI_ATOMIC_READ_)
		need = FI_REMOTE_READ_;
	r = check_mr(domain, d->rkey, d->addr, span, need, &region_id, cache);
	return (__u64)region_id << 32 | r;
}

/* same_op reports whether two op descriptors are byte for byte equal. */
static __always_inline int same_op(const struct wire_op *a, const struct wire_op *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] &&
	       x[3] == y[3] && x[4] == y[4] && x[5] == y[5];
}

static __always_inline void fail_op(struct vet *v, __u32 i, __u8 reason)
{
	if (v->reason == REASON_OK)
		v->reason = reason;
	v->bad_ops |= (__u16)(1u << (i & 15));
}

/*
 * vet_request vets every op of a request datagram to an xdpfab port.
 * Datagrams that are not requests (responses, acks) are left to user space;
 * a payload that is not a well-formed request header is BAD_HEADER.
 */
static __always_inline void vet_request(struct xdp_md *ctx, struct flow *f,
					__u32 domain, struct vet *v)
{
	struct wire_hdr h;
	struct wire_op d, prev = {};
	struct mr_cache cache = {};
	__u64 prev_res = 0;
	__u32 nops, descs;
	__u64 total; /* 64-bit: sixteen 32-bit lengths cannot wrap it */

	if (f->plen < sizeof(h) ||
	    bpf_xdp_load_bytes(ctx, f->payload, &h, sizeof(h)) < 0 ||
	    h.magic != WIRE_MAGIC || h.version != WIRE_VERSION) {
		v->vetted = 1;
		v->reason = REASON_BAD_HEADER;
		return;
	}
	if (h.type != WIRE_TYPE_REQ)
		return;
	v->vetted = 1;
	nops = h.num_ops;
	descs = sizeof(h) + nops * sizeof(d);
	if (nops == 0 || nops > WIRE_MAX_OPS || descs > f->plen) {
		v->reason = REASON_BAD_HEADER;
		return;
	}
	total = descs;
	for (__u32 i = 0; i < WIRE_MAX_OPS; i++) {
		__u64 res;
		__u32 region;
		__u8 r;

		if (i >= nops)
			break;
		/* Direct packet access (a helper call per op cost more than
		 * the rest of a repeated op's vetting): parse_l2_l4 checked
		 * that the whole datagram is in [data, data_end). The mask
		 * only bounds the offset for the verifier: descriptors end
		 * within the first ~900 bytes (headers + 40 + 16 * 48). */
		void *data = (void *)(long)ctx->data;
		void *end = (void *)(long)ctx->data_end;
		__u32 off = (f->payload + sizeof(h) + i * sizeof(d)) & 0x3fff;
		const struct wire_op *p = data + off;

		asm volatile("" : "+r"(p)); /* keep the check on this register */
		if ((void *)(p + 1) > end) {
			fail_op(v, i, REASON_BAD_HEADER);
			return;
		}
		d = *p;
		total += d.len;
		/* A pipeline packs runs of identical ops (64 fetch-adds on
		 * one counter): an op equal to the one before has its
		 * verdict, without a second MR lookup (a 16-op packet cost
		 * 2 us here, most of it in vet_op). */
		if (i > 0 && same_op(&d, &prev)) {
			res = prev_res;
		} else {
			res = vet_op(&d, domain, &cache);
			prev = d;
			prev_res = res;
		}
		r = res & 0xff;
		region = res >> 32;
		if (region && !v->region_id)
			v->region_id = region;
		if (r != REASON_OK)
			fail_op(v, i, r);
		/* Hook for serving atomics on kernel-resident regions in
		 * XDP: a single good atomic op on such a region could be
		 * executed here and answered with XDP_TX. */
	}
	/* The payloads must fill the datagram exactly (a lying len would
	 * make user space read another op's bytes). */
	if (total != f->plen && v->reason == REASON_OK)
		v->reason = REASON_BAD_HEADER;
}

static __always_inline void count_vet(struct vet *v)
{
	if (!v->vetted)
		return;
	switch (v->reason) {
	case REASON_OK:
		count(CNT_REQ_OK);
		break;
	case REASON_MR_NO_KEY:
		count(CNT_REQ_MR_NO_KEY);
		break;
	case REASON_MR_DISABLED:
		count(CNT_REQ_MR_DISABLED);
		break;
	case REASON_MR_RANGE:
		count(CNT_REQ_MR_RANGE);
		break;
	case REASON_MR_ACCESS:
		count(CNT_REQ_MR_ACCESS);
		break;
	default:
		count(CNT_REQ_BAD_HEADER);
	}
}

static __always_inline int finish(struct xdp_md *ctx, __u64 fi_addr,
				  __u32 auth_key_id, __u8 flags, struct vet *v)
{
	struct xdp_meta *meta;
	void *data;
	int act;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*meta)) < 0) {
		/* The driver keeps no metadata: user space could not tell a
		 * vetted request from a good one, so the stack gets it. */
		count(CNT_PASS_NO_META);
		return XDP_PASS;
	}
	meta = (void *)(long)ctx->data_meta;
	data = (void *)(long)ctx->data;
	if ((void *)(meta + 1) > data) {
		count(CNT_PASS_NO_META);
		return XDP_PASS;
	}
	meta->fi_addr = fi_addr;
	meta->auth_key_id = auth_key_id;
	meta->region_id = v->region_id;
	meta->bad_ops = v->bad_ops;
	meta->reason = v->reason;
	meta->flags = flags | (v->vetted ? XDP_META_VETTED : 0);
	meta->magic = XDPFAB_META_MAGIC;

	act = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	count(act == XDP_REDIRECT ? CNT_REDIRECT_XSK : CNT_PASS_NO_XSK);
	return act;
}

SEC("xdp")
int xdpfab_xdp(struct xdp_md *ctx)
{
	struct flow f;
	struct av_key ak = {};
	struct av_value *peer;
	struct port_config *pc;
	struct vet v = {};
	__u64 fi_addr = FI_ADDR_NOTAVAIL_;
	__u32 auth_key_id = 0;
	__u8 flags = 0;
	int why;

	count(CNT_RX_TOTAL);
	why = parse_l2_l4(ctx, &f);
	if (why >= 0) {
		count(why);
		return XDP_PASS;
	}
	pc = bpf_map_lookup_elem(&ports, &f.dport);
	if (!pc) {
		count(CNT_PASS_OTHER_PORT);
		return XDP_PASS;
	}
	if (!to_us(pc, &f)) {
		count(CNT_PASS_OTHER_HOST);
		return XDP_PASS;
	}

	ak.av_id = pc->av_id;
	ak.port = f.sport;
	__builtin_memcpy(ak.addr, f.saddr, sizeof(ak.addr));
	peer = bpf_map_lookup_elem(&av_map, &ak);
	if (peer) {
		count(CNT_PEER_KNOWN);
		fi_addr = peer->fi_addr;
		auth_key_id = peer->auth_key_id;
	} else if (pc->flags & PORT_STRICT) {
		count(CNT_DROP_UNKNOWN_PEER);
		return XDP_DROP;
	} else {
		count(CNT_PEER_UNKNOWN);
		flags |= XDP_META_PEER_UNKNOWN;
	}

	/* Only a datagram that arrived intact reaches user space, which
	 * would execute a corrupted atomic or RMA payload. A wrong checksum
	 * goes to the stack, which knows what XDP cannot: whether an in-host
	 * sender (a kernel socket on veth) left the checksum to offload,
	 * then delivers it to the endpoint's kernel socket, or not, then
	 * drops it (UDP InCsumErrors) and the sender retransmits. */
	switch (udp_csum(ctx, &f)) {
	case CSUM_NONE:
		count(CNT_DROP_NO_CSUM);
		return XDP_DROP;
	case CSUM_BAD:
		count(CNT_PASS_BAD_CSUM);
		return XDP_PASS;
	}
	flags |= XDP_META_CSUM_OK;

	if (vet_mr) {
		vet_request(ctx, &f, pc->domain_id, &v);
		count_vet(&v);
	}
	return finish(ctx, fi_addr, auth_key_id, flags, &v);
}

/*
 * xsk_probe reports which XSKMAP slots hold a socket: user space cannot
 * read an XSKMAP (lookups from the syscall side return EOPNOTSUPP), so
 * `xdpfab status` runs this with BPF_PROG_TEST_RUN on an 8-byte buffer and
 * reads back a bitmap of the occupied RX queues.
 */
SEC("xdp")
int xsk_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 *out = data;
	__u64 bits = 0;

	if ((void *)(out + 1) > end)
		return XDP_ABORTED;
	for (__u32 q = 0; q < XSK_MAX_QUEUES; q++) {
		__u32 k = q;
		if (bpf_map_lookup_elem(&xsks, &k))
			bits |= 1ULL << q;
	}
	*out = bits;
	return XDP_PASS;
}

char __license[] SEC("license") = "Dual BSD/GPL";
