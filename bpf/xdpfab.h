/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Layouts shared by the XDP program and Go. This header is the one place
 * they are defined: bpf2go generates the Go types from the BTF of these
 * structs (XdpfabAvKey, ...), so the two sides cannot drift.
 *
 * All multi-byte fields are host (little-endian) order unless the field
 * comment says network order.
 */
#ifndef XDPFAB_H
#define XDPFAB_H

#include <linux/types.h>

/*
 * AV map: peer (IP, UDP port) of one address vector -> its fi_addr.
 * IPv4 addresses are stored IPv4-mapped (::ffff:a.b.c.d) so one key serves
 * both families.
 */
struct av_key {
	__u32 av_id;    /* xdpfab-wide id of the address vector */
	__u16 port;     /* peer UDP port, network byte order */
	__u16 pad;      /* zero */
	__u8 addr[16];  /* peer IPv6 address, or IPv4-mapped */
};

struct av_value {
	__u64 fi_addr;     /* the handle the AV returned for this peer */
	__u32 auth_key_id; /* auth key the address is bound to, 0 = none */
	__u32 flags;       /* AV_ENTRY_* */
};

#define AV_ENTRY_USER_ID_SET 0x1 /* a user id is set for this fi_addr */

/*
 * MR map: (domain, key) -> the registered region, so the XDP program can vet
 * an RMA or atomic request before user space sees it.
 */
struct mr_key {
	__u32 domain_id; /* xdpfab-wide id of the domain owning the key */
	__u32 pad;       /* zero */
	__u64 key;       /* the MR key peers use */
};

struct mr_value {
	__u64 base;      /* lowest valid remote address: 0, or the VA with FI_MR_VIRT_ADDR */
	__u64 len;       /* region length in bytes */
	__u32 access;    /* FI_* access bits of the registration (bits 8..13) */
	__u32 region_id; /* xdpfab-wide id of the region */
	__u32 flags;     /* MR_REGION_* */
	__u32 pad;       /* zero */
};

#define MR_REGION_ENABLED 0x1 /* region may be accessed (enabled, not closed) */

/* Per-CPU outcome counters of the XDP program; Go mirrors this enum. */
enum xdpfab_counter {
	CNT_RX_TOTAL = 0,   /* packets seen */
	CNT_PASS_NOT_OURS,  /* not an xdpfab packet: passed to the stack */
	CNT_MAX,
};

#endif /* XDPFAB_H */
