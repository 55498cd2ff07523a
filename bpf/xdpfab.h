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
 * MR map: (domain, key) -> the registered region. User space keeps it in
 * step with its MR tables as the kernel-visible registry of MR keys; the
 * program does not read it (xdpfab.c says why).
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

/*
 * Ports map: UDP destination port (network byte order, the map key) -> how
 * the program treats datagrams to it. Only datagrams to the port AND to an
 * address of this host are xdpfab's: with PORT_BOUND_ADDR the endpoint's
 * own address, otherwise (a wildcard bind) any address in local_addrs.
 * Datagrams to any other port or address are not touched.
 */
struct port_config {
	__u32 av_id;     /* AV whose peers may send to this port */
	__u32 domain_id; /* domain whose MR keys requests to this port name */
	__u32 flags;     /* PORT_* */
	__u32 pad;       /* zero */
	__u8 addr[16];   /* with PORT_BOUND_ADDR: the bound address, IPv6 or IPv4-mapped */
};

#define PORT_STRICT     0x1 /* drop datagrams from peers not in the AV */
#define PORT_BOUND_ADDR 0x2 /* addr is the bound address; else the port is bound to every local address */

/*
 * Local addresses map: the addresses of the network namespace the program
 * is attached in (IPv6, or IPv4-mapped), kept by user space (xdp package;
 * the AF_XDP transport follows netlink while it runs). The key is the
 * whole entry; the value is unused.
 */
struct local_addr {
	__u8 addr[16];
};

/* Entries of the XSKMAP (one AF_XDP socket per RX queue). */
#define XSK_MAX_QUEUES 64

/*
 * Metadata the program writes in front of every packet it hands to an
 * AF_XDP socket (bpf_xdp_adjust_meta): in the UMEM frame it ends exactly
 * where the packet starts. Packets passed to the kernel stack carry none
 * that anyone reads. magic is last so a reader finds it at a fixed distance
 * (4 bytes) before the packet.
 */
struct xdp_meta {
	__u64 fi_addr;     /* the peer's fi_addr, FI_ADDR_NOTAVAIL (~0) if unknown */
	__u32 auth_key_id; /* the peer's auth key id from the AV, 0 = none */
	__u8 flags;        /* XDP_META_* */
	__u8 pad[7];       /* zero: magic ends the struct, which is 8-byte aligned */
	__u32 magic;       /* XDPFAB_META_MAGIC */
};

#define XDPFAB_META_MAGIC 0x58464d32 /* "XFM2" */

#define XDP_META_PEER_UNKNOWN 0x1 /* source (IP, port) is not in the AV */
#define XDP_META_CSUM_OK      0x2 /* the UDP checksum was present and verified */

/*
 * Per-CPU outcome counters of the XDP program; Go mirrors this enum (names
 * and descriptions in counters.go, kept in sync by TestCounterNamesInSync).
 * Every packet counts CNT_RX_TOTAL and exactly one of the CNT_PASS_* /
 * CNT_DROP_* / CNT_REDIRECT_XSK outcomes; packets to an xdpfab port and
 * address also count one CNT_PEER_*.
 */
enum xdpfab_counter {
	CNT_RX_TOTAL = 0,      /* packets seen */
	CNT_PASS_NOT_IP,       /* not IPv4/IPv6 (ARP, LLDP, ...): passed */
	CNT_PASS_NOT_UDP,      /* IP but not UDP (ICMP, TCP, IPv6 ext headers): passed */
	CNT_PASS_FRAGMENT,     /* IP fragment: passed */
	CNT_PASS_MALFORMED,    /* truncated or inconsistent L2-L4 headers: passed */
	CNT_PASS_OTHER_PORT,   /* UDP to a port xdpfab does not serve: passed */
	CNT_PASS_OTHER_HOST,   /* UDP to an xdpfab port but not to its address (forwarded, bridged): passed */
	CNT_PEER_KNOWN,        /* source found in the AV */
	CNT_PEER_UNKNOWN,      /* source not in the AV, port not strict: handed up */
	CNT_DROP_UNKNOWN_PEER, /* source not in the AV, strict port: dropped */
	CNT_DROP_NO_CSUM,      /* UDP checksum 0 (none sent): dropped */
	CNT_PASS_BAD_CSUM,     /* UDP checksum wrong (corrupted, or left to offload in-host): passed, the stack decides */
	CNT_PASS_NO_META,      /* metadata could not be added: passed to the stack */
	CNT_REDIRECT_XSK,      /* redirected to the AF_XDP socket of the RX queue */
	CNT_PASS_NO_XSK,       /* xdpfab packet, no socket on its queue: passed */
	CNT_MAX,
};

#endif /* XDPFAB_H */
