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
 * up marked "unknown" otherwise. It verifies the UDP checksum (udp_csum), so
 * that a datagram corrupted on the way never reaches user space, and writes
 * the peer's fi_addr into the packet's metadata (struct xdp_meta). The
 * packet then goes to the AF_XDP socket of its RX queue; with no socket
 * bound there it falls back to the kernel stack, so the kernel-socket
 * transport still works.
 *
 * The program vets no op it hands up: the target checks each against its
 * MR table, which alone can (package doc, "No MR verdict"). mr_map, the
 * interface's MR table that user space keeps in step with plain stores
 * (xdpfab.h, "Kernel tables"), is read by mr_vet; xdpfab_xdp does not read
 * it. Requests on kernel-resident regions the program can execute itself
 * are served here (kserve.h) and answered with XDP_TX.
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

/*
 * An AV's kernel table (xdpfab.h, "Kernel tables"). Tables of any size fit
 * (BPF_F_INNER_MAP); this template's size is never used.
 */
struct av_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, struct avt_bucket);
};

/* av_id -> the AV's kernel table. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, AV_MAP_MAX_AVS);
	__type(key, __u32);
	__array(values, struct av_table);
} av_map SEC(".maps");

/* The interface's MR table: read by mr_vet, not by xdpfab_xdp. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1 + MR_TABLE_BUCKETS);
	__type(key, __u32);
	__type(value, struct kt_bucket);
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

/* Keep in BTF the types only user space reads, for bpf2go -type. */
const struct xdp_meta *unused_xdp_meta __attribute__((unused));
const struct av_key *unused_av_key __attribute__((unused));
const struct av_value *unused_av_value __attribute__((unused));
const struct mr_key *unused_mr_key __attribute__((unused));
const struct mr_value *unused_mr_value __attribute__((unused));
const struct mr_vet_req *unused_mr_vet_req __attribute__((unused));
const struct mr_vet_ans *unused_mr_vet_ans __attribute__((unused));
const struct kt_bucket *unused_kt_bucket __attribute__((unused));
const struct avt_bucket *unused_avt_bucket __attribute__((unused));
const struct avt_header *unused_avt_header __attribute__((unused));

#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88A8
#define IP_MF_ 0x2000
#define IP_OFFSET_ 0x1FFF
#define FI_ADDR_NOTAVAIL_ (~0ULL)

static __always_inline void count_n(enum xdpfab_counter c, __u64 n)
{
	__u32 idx = c;
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += n;
}

static __always_inline void count(enum xdpfab_counter c) { count_n(c, 1); }

/*
 * Kernel tables (xdpfab.h): lookups. kt_hash must stay equal to
 * internal/ktable's hash (TestHashMatchesProgram).
 */
static __always_inline __u64 kt_mix(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static __always_inline __u64 kt_hash(__u64 seed, const __u64 *key)
{
	__u64 h = kt_mix(seed ^ key[0]);
	h = kt_mix(h ^ key[1]);
	return kt_mix(h ^ key[2]);
}

#define KT_FOUND 0
#define KT_MISS  1
#define KT_BUSY  2 /* a slot holding the key was being written on every try */

/* Reads of a slot a writer may be changing: volatile, kept in order. */
#define KT_READ(x) (*(volatile typeof(x) *)&(x))
#define KT_TRIES 4

/*
 * kt_slot_read copies the value of slot s if it stably holds key, under
 * the seqlock protocol: KT_FOUND, KT_MISS (holds another key, or none, or
 * was deleted meanwhile), or KT_BUSY.
 */
static __always_inline int kt_slot_read(struct kt_slot *s, const __u64 *key, __u64 *val)
{
	for (int r = 0; r < KT_TRIES; r++) {
		__u32 seq = KT_READ(s->seq);
		__u32 state;
		__u64 k0, k1, k2;

		if (seq & 1)
			continue;
		asm volatile("" ::: "memory");
		state = KT_READ(s->state);
		k0 = KT_READ(s->key[0]);
		k1 = KT_READ(s->key[1]);
		k2 = KT_READ(s->key[2]);
		val[0] = KT_READ(s->val[0]);
		val[1] = KT_READ(s->val[1]);
		val[2] = KT_READ(s->val[2]);
		val[3] = KT_READ(s->val[3]);
		asm volatile("" ::: "memory");
		if (KT_READ(s->seq) != seq)
			continue;
		if (state != KT_USED || k0 != key[0] || k1 != key[1] || k2 != key[2])
			return KT_MISS;
		return KT_FOUND;
	}
	return KT_BUSY;
}

/*
 * kt_find looks key up in the kernel table map (an array map of
 * kt_buckets, or an inner map found in av_map) and copies its value words
 * into val: KT_FOUND, KT_MISS or KT_BUSY.
 */
static __always_inline int kt_find(void *map, const __u64 *key, __u64 *val)
{
	struct kt_bucket *b;
	__u32 idx = 0, b1;
	__u64 h, nb;

	b = bpf_map_lookup_elem(map, &idx);
	if (!b)
		return KT_MISS;
	nb = KT_READ(b->slot[0].key[1]);
	if (KT_READ(b->slot[0].key[2]) != KT_MAGIC || nb < 2 || (nb & (nb - 1)))
		return KT_MISS;
	h = kt_hash(KT_READ(b->slot[0].key[0]), key);
	b1 = 1 + (h & (nb - 1));
	for (int j = 0; j < 2; j++) {
		idx = b1;
		if (j) {
			idx = 1 + ((h >> 32) & (nb - 1));
			if (idx == b1)
				idx = 1 + (((h >> 32) ^ 1) & (nb - 1));
		}
		b = bpf_map_lookup_elem(map, &idx);
		if (!b)
			continue;
		for (int i = 0; i < KT_WAYS; i++) {
			struct kt_slot *s = &b->slot[i];
			int r;

			/* A slot holding another key is passed without the
			 * seqlock's second read (xdpfab.h says why). */
			if (KT_READ(s->key[0]) != key[0] || KT_READ(s->key[1]) != key[1] ||
			    KT_READ(s->key[2]) != key[2])
				continue;
			r = kt_slot_read(s, key, val);
			if (r != KT_MISS)
				return r;
		}
	}
	return KT_MISS;
}

/*
 * avt_slot_read copies the value of peer table slot s into out if it
 * stably holds the peer (port, addr), under the seqlock protocol:
 * KT_FOUND, KT_MISS or KT_BUSY, as kt_slot_read.
 */
static __always_inline int avt_slot_read(struct avt_slot *s, __u16 port, const __u64 *addr,
					 struct av_value *out)
{
	for (int r = 0; r < KT_TRIES; r++) {
		__u32 seq = KT_READ(s->seq);
		__u64 a0, a1, fa;
		__u16 p, auth;

		if (seq & 1)
			continue;
		asm volatile("" ::: "memory");
		p = KT_READ(s->port);
		auth = KT_READ(s->auth_key_id);
		a0 = KT_READ(s->addr[0]);
		a1 = KT_READ(s->addr[1]);
		fa = KT_READ(s->fi_addr);
		asm volatile("" ::: "memory");
		if (KT_READ(s->seq) != seq)
			continue;
		if (p != port || a0 != addr[0] || a1 != addr[1])
			return KT_MISS;
		out->fi_addr = fa;
		out->auth_key_id = auth;
		out->flags = (seq & AVT_SEQ_USER_ID_SET) ? AV_ENTRY_USER_ID_SET : 0;
		return KT_FOUND;
	}
	return KT_BUSY;
}

/*
 * avt4_slot_read is avt_slot_read for a compact peer table's slot s and
 * the IPv4 peer (port, addr4).
 */
static __always_inline int avt4_slot_read(struct avt4_slot *s, __u16 port, __u32 addr4,
					  struct av_value *out)
{
	for (int r = 0; r < KT_TRIES; r++) {
		__u16 seq = KT_READ(s->seq);
		__u16 p, auth, hi;
		__u32 a, lo;

		if (seq & 1)
			continue;
		asm volatile("" ::: "memory");
		p = KT_READ(s->port);
		auth = KT_READ(s->auth_key_id);
		hi = KT_READ(s->fi_addr_hi);
		a = KT_READ(s->addr4);
		lo = KT_READ(s->fi_addr_lo);
		asm volatile("" ::: "memory");
		if (KT_READ(s->seq) != seq)
			continue;
		if (p != port || a != addr4)
			return KT_MISS;
		out->fi_addr = (__u64)hi << 32 | lo;
		out->auth_key_id = auth;
		out->flags = (seq & AVT4_SEQ_USER_ID_SET) ? AV_ENTRY_USER_ID_SET : 0;
		return KT_FOUND;
	}
	return KT_BUSY;
}

/*
 * av_find4 looks the IPv4 peer (port, addr4) up in buckets b1 and b2 of
 * the compact peer table table.
 */
static __always_inline int av_find4(void *table, __u32 b1, __u32 b2, __u16 port, __u32 addr4,
				    struct av_value *out)
{
	struct avt4_bucket *b;
	__u32 idx;

	for (int j = 0; j < 2; j++) {
		idx = j ? b2 : b1;
		b = bpf_map_lookup_elem(table, &idx);
		if (!b)
			continue;
		for (int i = 0; i < AVT4_WAYS; i++) {
			struct avt4_slot *s = &b->slot[i];
			int r;

			if (KT_READ(s->port) != port || KT_READ(s->addr4) != addr4)
				continue;
			r = avt4_slot_read(s, port, addr4, out);
			if (r != KT_MISS)
				return r;
		}
	}
	return KT_MISS;
}

/*
 * av_find looks the peer ak up in the peer table of AV ak->av_id
 * (xdpfab.h, "Peer tables" and "Compact peer tables").
 */
static __always_inline int av_find(const struct av_key *ak, struct av_value *out)
{
	struct avt_header *hd;
	struct avt_bucket *b;
	__u64 key[3], addr[2], h, nb, magic;
	__u32 idx = 0, b1, b2;
	void *table;

	table = bpf_map_lookup_elem(&av_map, &ak->av_id);
	if (!table)
		return KT_MISS;
	hd = bpf_map_lookup_elem(table, &idx);
	if (!hd)
		return KT_MISS;
	nb = KT_READ(hd->nb);
	magic = KT_READ(hd->magic);
	if ((magic != AVT_MAGIC && magic != AVT4_MAGIC) || nb < 2 || nb > 0xffffffffULL)
		return KT_MISS;
	__builtin_memcpy(addr, ak->addr, sizeof(addr));
	key[0] = ak->port;
	key[1] = addr[0];
	key[2] = addr[1];
	h = kt_hash(KT_READ(hd->seed), key);
	b1 = 1 + (((h & 0xffffffffULL) * nb) >> 32);
	b2 = 1 + (((h >> 32) * nb) >> 32);
	if (b2 == b1)
		b2 = b1 == nb ? 1 : b1 + 1;
	if (magic == AVT4_MAGIC) {
		/* IPv4 peers only: ::ffff:a.b.c.d */
		if (addr[0] != 0 || (__u32)addr[1] != 0xffff0000U)
			return KT_MISS;
		return av_find4(table, b1, b2, ak->port, addr[1] >> 32, out);
	}
	for (int j = 0; j < 2; j++) {
		idx = j ? b2 : b1;
		b = bpf_map_lookup_elem(table, &idx);
		if (!b)
			continue;
		for (int i = 0; i < AVT_WAYS; i++) {
			struct avt_slot *s = &b->slot[i];
			int r;

			if (KT_READ(s->port) != ak->port || KT_READ(s->addr[0]) != addr[0] ||
			    KT_READ(s->addr[1]) != addr[1])
				continue;
			r = avt_slot_read(s, ak->port, addr, out);
			if (r != KT_MISS)
				return r;
		}
	}
	return KT_MISS;
}

/*
 * mr_find looks (domain_id, key) up in the interface's MR table.
 */
static __always_inline int mr_find(__u32 domain_id, __u64 mkey, struct mr_value *out)
{
	__u64 key[3] = {domain_id, mkey, 0}, val[4];
	int r;

	r = kt_find(&mr_map, key, val);
	if (r == KT_FOUND)
		__builtin_memcpy(out, val, sizeof(*out));
	return r;
}

/* What the L2-L4 parse found in an xdpfab candidate. */
struct flow {
	__u8 saddr[16]; /* v4-mapped for IPv4 */
	__u8 daddr[16]; /* v4-mapped for IPv4 */
	__u8 v4;        /* IPv4 (else IPv6) */
	__u32 l3;       /* offset of the IP header from data */
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
		f->l3 = off;
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
		f->l3 = off;
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

	__builtin_memcpy(&b0, &f->daddr[0], 8);
	__builtin_memcpy(&b1, &f->daddr[8], 8);
	/* An IPv6 datagram to an IPv4-mapped address (never used on the
	 * wire, RFC 4291) must not pass for IPv4 traffic to that address. */
	if (!f->v4 && b0 == 0 && (__u32)b1 == bpf_htonl(0xffff))
		return 0;
	if (!(pc->flags & PORT_BOUND_ADDR))
		return bpf_map_lookup_elem(&local_addrs, f->daddr) != 0;
	__builtin_memcpy(&a0, &pc->addr[0], 8);
	__builtin_memcpy(&a1, &pc->addr[8], 8);
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
 * through bpf_csum_diff (the kernel's csum_partial) in 256-byte chunks;
 * what is left, in 64-bit loads each added as its two 32-bit halves, and
 * the last bytes by hand.
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
	/* Under 256 bytes are left: summed here, 8 bytes a load, which
	 * costs less than a helper call (BenchmarkProgram, payload-200B). */
	for (int i = 0; i < 256 / 8; i++) {
		__u64 *p = data + ((off + done) & 0x3fff);
		__u64 x;

		if (len - done < 8)
			break;
		if ((void *)(p + 1) > end)
			return CSUM_BAD;
		x = *p;
		acc += (x & 0xffffffff) + (x >> 32);
		done += 8;
	}
	if (len - done >= 4) {
		__u32 *p = data + ((off + done) & 0x3fff);

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

static __always_inline int finish(struct xdp_md *ctx, __u64 fi_addr,
				  __u32 auth_key_id, __u8 flags)
{
	struct xdp_meta *meta;
	void *data;
	int act;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*meta)) < 0) {
		/* The driver keeps no metadata: user space could not tell the
		 * sender, or that the checksum was verified: the stack gets it. */
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
	meta->flags = flags;
	__builtin_memset(meta->pad, 0, sizeof(meta->pad));
	meta->magic = XDPFAB_META_MAGIC;

	act = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	count(act == XDP_REDIRECT ? CNT_REDIRECT_XSK : CNT_PASS_NO_XSK);
	return act;
}

#include "kserve.h"

SEC("xdp")
int xdpfab_xdp(struct xdp_md *ctx)
{
	struct flow f;
	struct av_key ak = {};
	struct av_value peer;
	struct port_config *pc;
	__u64 fi_addr = FI_ADDR_NOTAVAIL_;
	__u32 auth_key_id = 0;
	__u8 flags = 0;
	int why, found;

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
	found = av_find(&ak, &peer);
	if (found == KT_FOUND) {
		count(CNT_PEER_KNOWN);
		fi_addr = peer.fi_addr;
		auth_key_id = peer.auth_key_id;
	} else if (found == KT_BUSY) {
		/* The peer's entry is being written: the stack delivers the
		 * datagram to the endpoint's kernel socket, whose reader
		 * resolves the peer in Go. */
		count(CNT_PASS_AV_BUSY);
		return XDP_PASS;
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
	/* A request the program can execute on kernel-resident regions is
	 * answered here (kserve.h), on ports whose endpoint shares its
	 * target state: a peer's state exists only once user space admitted
	 * it, so an unknown peer (non-strict port) may be served too. */
	if (pc->flags & PORT_KSERVE) {
		int act = kserve(ctx, &f, pc);
		if (act >= 0)
			return act;
	}
	return finish(ctx, fi_addr, auth_key_id, flags);
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

/*
 * mr_vet vets one request against the MR table as XDP code serving
 * kernel-resident regions does: BPF_PROG_TEST_RUN data is a struct
 * mr_vet_req, overwritten with a struct mr_vet_ans. Tests and `xdpfab`
 * run it; it is never attached.
 */
SEC("xdp")
int mr_vet(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct mr_vet_req req;
	struct mr_vet_ans *ans = data;
	struct mr_value v = {};
	__u32 verdict;
	int r;

	if (data + sizeof(req) > end || data + sizeof(*ans) > end)
		return XDP_ABORTED;
	__builtin_memcpy(&req, data, sizeof(req));
	r = mr_find(req.domain_id, req.key, &v);
	if (r == KT_BUSY)
		verdict = MR_VET_BUSY;
	else if (r == KT_MISS)
		verdict = MR_VET_NOKEY;
	else if (!(v.flags & MR_REGION_ENABLED))
		verdict = MR_VET_DISABLED;
	else if (req.addr < v.base || req.len > v.len || req.addr - v.base > v.len - req.len)
		verdict = MR_VET_RANGE;
	else if ((v.access & req.access) != req.access)
		verdict = MR_VET_ACCESS;
	else
		verdict = MR_VET_OK;
	ans->verdict = verdict;
	ans->pad = 0;
	__builtin_memcpy(&ans->value, &v, sizeof(v));
	return verdict == MR_VET_OK ? XDP_PASS : XDP_DROP;
}

char __license[] SEC("license") = "Dual BSD/GPL";
