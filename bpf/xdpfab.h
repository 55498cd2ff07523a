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
 *
 * Reading a verdict: flags has XDP_META_VETTED for every request (and for a
 * payload that is not xdpfab at all); reason REASON_OK means every op may
 * be executed. Otherwise bad_ops names the ops to NAK without touching
 * memory (reason is that of the first of them); bad_ops == 0 with a reason
 * means the packet as a whole is malformed and must be dropped.
 */
struct xdp_meta {
	__u64 fi_addr;     /* the peer's fi_addr, FI_ADDR_NOTAVAIL (~0) if unknown */
	__u32 auth_key_id; /* the peer's auth key id from the AV, 0 = none */
	__u32 region_id;   /* region named by the first RMA/atomic op that has one, 0 = none */
	__u16 bad_ops;     /* bit i set: op descriptor i failed vetting */
	__u8 reason;       /* enum xdpfab_reason of the first failed op, REASON_OK if none */
	__u8 flags;        /* XDP_META_* */
	__u32 magic;       /* XDPFAB_META_MAGIC */
};

#define XDPFAB_META_MAGIC 0x58464d31 /* "XFM1" */

#define XDP_META_PEER_UNKNOWN 0x1 /* source (IP, port) is not in the AV */
#define XDP_META_VETTED       0x2 /* a request was vetted: see reason and bad_ops */
#define XDP_META_CSUM_OK      0x4 /* the UDP checksum was present and verified */

/*
 * Verdict on an RMA or atomic request, in xdp_meta.reason. Anything but
 * REASON_OK means user space must NAK the request without touching memory.
 */
enum xdpfab_reason {
	REASON_OK = 0,        /* not a request, or a request that passed every check */
	REASON_BAD_HEADER,    /* xdpfab header or op descriptor truncated or inconsistent */
	REASON_MR_NO_KEY,     /* no MR with that key in the port's domain */
	REASON_MR_DISABLED,   /* the region is not enabled */
	REASON_MR_RANGE,      /* [addr, addr+len) not inside the region */
	REASON_MR_ACCESS,     /* the registration lacks the access the op needs */
	REASON_MAX,
};

/*
 * Per-CPU outcome counters of the XDP program; Go mirrors this enum (names
 * and descriptions in counters.go, kept in sync by TestCounterNamesInSync).
 * Every packet counts CNT_RX_TOTAL and exactly one of the CNT_PASS_* /
 * CNT_DROP_* / CNT_REDIRECT_XSK outcomes; packets to an xdpfab port also
 * count one CNT_PEER_* and, if they carry a request, one CNT_REQ_*.
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
	CNT_REQ_OK,            /* request vetted and good */
	CNT_REQ_BAD_HEADER,    /* request header malformed */
	CNT_REQ_MR_NO_KEY,     /* request names an unknown MR key */
	CNT_REQ_MR_DISABLED,   /* request names a disabled region */
	CNT_REQ_MR_RANGE,      /* request out of the region's range */
	CNT_REQ_MR_ACCESS,     /* request needs access the MR lacks */
	CNT_PASS_NO_META,      /* metadata could not be added: passed to the stack */
	CNT_REDIRECT_XSK,      /* redirected to the AF_XDP socket of the RX queue */
	CNT_PASS_NO_XSK,       /* xdpfab packet, no socket on its queue: passed */
	CNT_MAX,
};

/*
 * The parts of the wire format (datapath/wire, docs/protocol.md) the program
 * reads: a fixed 40-byte common header at the start of the UDP payload,
 * then num_ops fixed 48-byte op descriptors, then the ops' payloads. All
 * fields little-endian.
 */
#define WIRE_MAGIC    0xFB
#define WIRE_VERSION  1
#define WIRE_MAX_OPS  16
#define WIRE_TYPE_REQ 1

struct wire_hdr {
	__u8 magic;    /* WIRE_MAGIC */
	__u8 version;  /* WIRE_VERSION */
	__u8 type;     /* WIRE_TYPE_* */
	__u8 flags;
	__u16 num_ops; /* op descriptors that follow */
	__u16 rsvd;
	__u32 src_ep;
	__u32 dst_ep;
	__u32 auth_key;
	__u32 session;
	__u32 seq;
	__u32 ack;
	__u64 sack;
};

struct wire_op {
	__u8 opcode;    /* WIRE_OP_* */
	__u8 access;    /* WIRE_ACCESS_* the op needs; must match the opcode */
	__u8 datatype;  /* enum fi_datatype (atomics) */
	__u8 atomic_op; /* enum fi_op (atomics) */
	__u16 flags;
	__u16 rsvd;
	__u32 len;      /* payload bytes of this op in this packet */
	__u32 resp_len; /* response bytes wanted */
	__u64 rkey;
	__u64 addr;
	__u64 data;     /* remote CQ data */
	__u32 count;    /* atomics: element count */
	__u32 rsvd2;
};

_Static_assert(sizeof(struct wire_hdr) == 40, "wire header is 40 bytes");
_Static_assert(sizeof(struct wire_op) == 48, "op descriptor is 48 bytes");

/* Opcodes. */
#define WIRE_OP_MSG            1
#define WIRE_OP_RMA_WRITE      2
#define WIRE_OP_RMA_READ       3
#define WIRE_OP_ATOMIC         4
#define WIRE_OP_FETCH_ATOMIC   5
#define WIRE_OP_COMPARE_ATOMIC 6

#define WIRE_ACCESS_READ  0x1
#define WIRE_ACCESS_WRITE 0x2

/* MR access bits (rdma/fabric.h). */
#define FI_REMOTE_READ_  (1u << 12)
#define FI_ATOMIC_READ_  10 /* enum fi_op FI_ATOMIC_READ */
#define FI_REMOTE_WRITE_ (1u << 13)

#endif /* XDPFAB_H */
