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
 * AV map (av_map): av_id -> the AV's peer table (below, "Peer tables"),
 * an inner BPF_F_MMAPABLE array map sized to the AV's entries. A lookup
 * is keyed by struct av_key (peer IP, UDP port, av_id) and answers struct
 * av_value; named AVs keep these two in a hash map. IPv4 addresses are
 * stored IPv4-mapped (::ffff:a.b.c.d) so one key serves both families.
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

/* Most AVs with a kernel table per interface (entries of av_map). */
#define AV_MAP_MAX_AVS (1 << 16)

/*
 * MR table (mr_map): (domain, key) -> the registered region, one kernel
 * table (below) per interface, shared by the processes attached there.
 * The slot's key words are struct mr_key then 0; its value words are
 * struct mr_value. User space keeps it in step with its MR tables, before
 * fi_mr_reg / fi_close return; the main program does not read it (xdpfab.c
 * says why), mr_vet (xdpfab.c) vets a request against it, and XDP code
 * serving kernel-resident regions looks keys up with kt_find.
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

/* Data buckets of an interface's MR table: 32768 x 8 slots (16 MiB). */
#define MR_TABLE_BUCKETS (1 << 15)

/*
 * Kernel tables: hash tables user space writes with plain stores into a
 * BPF_F_MMAPABLE array map it has mmapped, and XDP reads, so that keeping
 * the kernel in step costs memory writes, not a bpf(2) call per change.
 * The MR table (mr_map) is one; each AV has one (an inner map of av_map).
 *
 * Layout. Array element i is bucket i, KT_WAYS slots of 64 bytes (one
 * cache line each). Bucket 0 is the header: its slot 0 holds state
 * KT_HEADER, key[0] the table's hash seed, key[1] the number of data
 * buckets nb (a power of two, >= 2), key[2] KT_MAGIC, val[1] flags, val[0]
 * the entries in use (low 32 bits) and the tombstones (high 32 bits), one
 * word so that one atomic add keeps both (informational). With flag
 * KT_UNCOUNTED (1; the MR table, which writers in several processes share)
 * writers keep no counts, val[0] stays 0 and readers count by walking the
 * slots: a count kept by every writer cost each write a locked add on one
 * shared word. Data buckets are 1..nb. A key is 3 words (24 bytes), a value 4 words (32 bytes); the
 * tables say how their types fill them, unused words are 0.
 *
 * Placement. h = kt_hash(seed, key); the key lives in bucket 1 + (h & (nb-1))
 * or 1 + ((h >> 32) & (nb-1)) (if the two are equal, the second is
 * 1 + (((h >> 32) ^ 1) & (nb-1))), in any slot of the two. A key is in at
 * most one slot in use. Slots never move: a deleted entry becomes a
 * tombstone (KT_DEAD), which a later insert of any key may reuse; a table
 * is resized by building a new map and swapping it in (AV tables, through
 * av_map), never in place.
 *
 * Seqlock. seq is even while a slot is stable and odd while a writer
 * changes it. A writer claims a slot with a compare-and-swap of seq from
 * the even value it read to that value + 1 (so writers in several
 * processes never write one slot at once), stores key, value and state,
 * then stores seq + 2 (state and seq + 2 may be one 8-byte store: the two
 * words are adjacent and 8-byte aligned). A writer that only kills a slot
 * it holds in use skips the odd phase: one 8-byte store of seq + 2 and
 * KT_DEAD, which a reader sees whole or not at all (if it saw the new
 * state its second read of seq differs from its first). A reader reads seq (retries, a bounded number of
 * times, while it is odd), then state, key and value, then seq again, and
 * uses what it read only if both reads of seq are equal: it never acts on
 * a half-written slot. Readers may skip a slot whose key differs without
 * the second read: slots never move, so missing a key being written there
 * orders the lookup before that write. A writer that owns a slot (seq
 * odd) stores its words with plain stores and releases it with a store
 * of seq ordered after them (on x86-64 a plain MOV: TSO keeps stores in
 * order; internal/ktable says how Go is kept from reordering them); a
 * table with one writer (an AV's) marks a slot odd with such a store
 * instead of a compare-and-swap. The reader's loads are plain loads kept
 * in order by compiler barriers, which x86-64 (TSO, what this object is
 * built for) keeps in order; a weakly ordered CPU would need load-acquire
 * and store-release.
 *
 * A writer that changes a key writes its one slot, so when the call that
 * made the change returns, every lookup that starts afterwards sees it: a
 * closed region or a removed address is refused from then on. A lookup
 * that read the slot before the change may still act on the old entry, as
 * a packet received a moment earlier would have.
 */
#define KT_WAYS 8
#define KT_MAGIC 0x78666b74626c3031ULL /* "xfktbl01" */

enum kt_slot_state {
	KT_FREE = 0,   /* never used since the table was made */
	KT_USED = 1,   /* holds key -> value */
	KT_DEAD = 2,   /* tombstone: deleted, reusable */
	KT_HEADER = 3, /* bucket 0, slot 0 */
};

struct kt_slot {
	__u32 seq;    /* seqlock: odd while being written */
	__u32 state;  /* enum kt_slot_state */
	__u64 key[3];
	__u64 val[4];
};

struct kt_bucket {
	struct kt_slot slot[KT_WAYS];
};

/*
 * Peer tables: an AV's kernel table (an inner map of av_map), the kernel
 * tables above made compact for one AV's peers. A slot is 32 bytes instead
 * of 64 and the buckets need not be a power of two: the time a large
 * insert takes is mostly the first touch of the table's pages (package av
 * says why), and 1,000,000 peers take 46 MiB here instead of 128 (a
 * compact table, below, which an AV starts with, 20 MiB).
 *
 * Layout. Array element i is bucket i, AVT_WAYS slots of 32 bytes. Bucket 0
 * is the header: struct avt_header, then zero. Data buckets are 1..nb, nb
 * any number >= 2. A slot holds a peer of the AV (port, address: the av_id
 * is the table's) and its value (fi_addr, auth key id, and in bit 31 of
 * seq AV_ENTRY_USER_ID_SET). Port 0 marks a free slot: no peer has port 0.
 *
 * Placement. h = kt_hash(seed, {port, addr[0], addr[1]}); the peer lives in
 * bucket 1 + (((h & 0xffffffff) * nb) >> 32) or 1 + (((h >> 32) * nb) >> 32)
 * (if the two are equal, the second is the next bucket, 1 after nb), in any
 * slot of the two. A peer is in at most one slot; a slot whose peer left is
 * free again (no tombstones: a lookup reads both buckets whatever it finds).
 *
 * Seqlock. As for kernel tables, with one writer, the AV, which marks a
 * slot odd with a plain store. Bit 31 of seq is not the counter's: it is
 * the slot's AV_ENTRY_USER_ID_SET (the writer keeps the counter in bits
 * 0..30), so a reader's two reads of seq cover it as well. A reader skips
 * a slot whose port or address differs without the seqlock, as kt_find does.
 */
#define AVT_WAYS 8
#define AVT_MAGIC 0x78666176746c3031ULL /* "xfavtl01" */
#define AVT_SEQ_USER_ID_SET 0x80000000U

struct avt_header {
	__u64 magic; /* AVT_MAGIC, written last */
	__u64 seed;  /* kt_hash seed */
	__u64 nb;    /* data buckets */
	__u64 count; /* peers in the table (informational) */
};

struct avt_slot {
	__u32 seq;         /* seqlock (odd while written); bit 31: AV_ENTRY_USER_ID_SET */
	__u16 port;        /* peer UDP port, network byte order; 0: free slot */
	__u16 auth_key_id; /* auth key the address is bound to, 0 = none */
	__u64 addr[2];     /* struct av_key's addr */
	__u64 fi_addr;     /* struct av_value's fi_addr */
};

struct avt_bucket {
	struct avt_slot slot[AVT_WAYS];
};

/*
 * Compact peer tables: a peer table whose header's magic is AVT4_MAGIC
 * holds IPv4 peers only, in 16-byte slots, AVT4_WAYS to a bucket (the
 * same 256-byte buckets, header and placement as above: the hash is of
 * the same key words, {port, addr[0], addr[1]} of the IPv4-mapped
 * address). An AV starts with one and its writer rebuilds it as a peer
 * table of 32-byte slots (AVT_MAGIC) when a peer that does not fit
 * arrives: an IPv6 address, or an fi_addr past 48 bits. Half the bytes a
 * peer and twice the ways a bucket: a table sized 3/4 full takes 21 bytes
 * of kernel memory a peer instead of 48, and each 4 KiB page of a new
 * table costs a first touch (package av says why that dominates).
 *
 * Seqlock. As for peer tables, in 16 bits: bits 0..14 are the writer's
 * counter (odd while it writes the slot), bit 15 AV_ENTRY_USER_ID_SET.
 */
#define AVT4_WAYS 16
#define AVT4_MAGIC 0x78666176746c3034ULL /* "xfavtl04" */
#define AVT4_SEQ_USER_ID_SET 0x8000U

struct avt4_slot {
	__u16 seq;         /* seqlock (odd while written); bit 15: AV_ENTRY_USER_ID_SET */
	__u16 port;        /* peer UDP port, network byte order; 0: free slot */
	__u16 auth_key_id; /* auth key the address is bound to, 0 = none */
	__u16 fi_addr_hi;  /* bits 32..47 of struct av_value's fi_addr */
	__u32 addr4;       /* the IPv4 address: struct av_key's addr[12..15] */
	__u32 fi_addr_lo;  /* bits 0..31 of fi_addr */
};

struct avt4_bucket {
	struct avt4_slot slot[AVT4_WAYS];
};

/*
 * mr_vet's request and answer (BPF_PROG_TEST_RUN data): the program reads
 * the request from the start of the packet and overwrites it with the
 * answer.
 */
struct mr_vet_req {
	__u32 domain_id;
	__u32 access; /* FI_REMOTE_READ / FI_REMOTE_WRITE bits the op needs */
	__u64 key;
	__u64 addr;   /* first byte, in the region's addressing */
	__u64 len;
};

struct mr_vet_ans {
	__u32 verdict;        /* MR_VET_* */
	__u32 pad;
	struct mr_value value; /* the entry the verdict was taken on (MR_VET_OK, _RANGE, _ACCESS, _DISABLED) */
};

#define MR_VET_OK       0 /* key found, enabled, range and access fit */
#define MR_VET_NOKEY    1 /* no such key in the domain */
#define MR_VET_RANGE    2 /* outside the region, or wrapping */
#define MR_VET_ACCESS   3 /* access not granted */
#define MR_VET_DISABLED 4 /* not enabled */
#define MR_VET_BUSY     5 /* the slot was being written on every try */

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
#define PORT_KSERVE     0x4 /* the endpoint shares target state: requests may be served in XDP (kserve.h) */

/*
 * Local addresses map: the addresses of the network namespace the program
 * is attached in (IPv6, or IPv4-mapped), kept by user space (xdp package;
 * the AF_XDP transport follows netlink while it runs). The key is the
 * whole entry; the value is unused.
 */
struct local_addr {
	__u8 addr[16];
};

/*
 * Kernel-resident regions (docs/xdp-atomics.md). A region registered as
 * kernel-resident lives in a BPF_F_MMAPABLE array map of KR_PAGE-byte
 * elements, mmapped by its owner as the region's bytes; kr_mem maps its
 * (domain, key) to that map and kr_regions to what the program checks
 * before serving an atomic on it. Both are keyed by struct mr_key.
 */
#define KR_PAGE 4096 /* bytes per element of a region's array map */

struct kr_region {
	__u64 base;        /* lowest valid remote address: 0, or the VA with FI_MR_VIRT_ADDR */
	__u64 len;         /* region length in bytes */
	__u32 auth_digest; /* the auth key digest requests must present (mr.AuthDigest, 0 = none) */
	__u32 flags;       /* KR_* */
};

#define KR_ENABLED      0x1 /* enabled, not closed: XDP may serve it */
#define KR_REMOTE_READ  0x2 /* FI_REMOTE_READ granted */
#define KR_REMOTE_WRITE 0x4 /* FI_REMOTE_WRITE granted */

/*
 * Per-peer target state shared by the XDP program and the user-space
 * engine (datapath/reliable's rxPeer): one per (peer address and port,
 * local port, peer endpoint). Exactly one side owns it at a time
 * (KT_OWNER_*); only the owner delivers requests, and ownership moves under
 * the value's spin lock, so neither side runs a sequence number the other
 * ran. The ring remembers what the program answered for the last KT_RING
 * sequence numbers it delivered: a retransmission is answered from it, by
 * the program or (kt_ctl KT_CMD_FETCH) by user space.
 */
#define KT_RING     256 /* responses remembered: the largest engine Window that may share */
#define KT_DATA_MAX 128 /* fetched bytes one XDP-served request may return */
#define KT_MAX_OPS  16  /* wire.MaxOps */

struct kt_key {
	__u8 addr[16];  /* peer address, IPv6 or IPv4-mapped */
	__u16 sport;    /* peer UDP port, network order */
	__u16 dport;    /* local UDP port, network order */
	__u32 src_ep;   /* the peer's endpoint id (header SrcEP) */
};

struct kt_resp {
	__u32 seq;     /* sequence number answered */
	__u32 session; /* its session */
	__u32 dlen;    /* fetched bytes in data */
	__u32 pad;
	__u8 data[KT_DATA_MAX]; /* the fetched values, in op order */
};

#define KT_OWNER_USER   0 /* user space delivers; the program hands every request up */
#define KT_OWNER_KERNEL 1 /* the program delivers what it can */

struct kt_state {
	struct bpf_spin_lock lock;
	__u32 owner;   /* KT_OWNER_* */
	__u32 session; /* the peer's session */
	__u32 next;    /* next sequence number to deliver */
	__u32 dst_ep;  /* this endpoint's id: requests must name it */
	__u32 busy;    /* the program is executing seq next on some CPU */
	__u64 last_ns; /* bpf_ktime_get_ns of the last request the program delivered */
	__u64 served;  /* requests the program delivered */
	struct kt_resp ring[KT_RING]; /* by seq % KT_RING */
};

/*
 * kt_ctl's argument and result (BPF_PROG_TEST_RUN data): user space claims
 * and releases a kt_state, and reads ring entries, under its lock.
 */
struct kt_ctl {
	struct kt_key key;
	__u32 cmd;     /* KT_CMD_* */
	__u32 status;  /* out: KT_ST_* */
	__u32 session; /* CLAIM: out; RELEASE, FETCH: in */
	__u32 next;    /* CLAIM: out; RELEASE: in */
	__u32 dst_ep;  /* RELEASE: in */
	__u32 seq;     /* FETCH: in */
	__u64 last_ns; /* CLAIM: out */
	__u64 served;  /* CLAIM: out */
	__u32 dlen;    /* FETCH: out */
	__u32 pad;
	__u8 data[KT_DATA_MAX]; /* FETCH: out */
};

#define KT_CMD_CLAIM   1 /* owner = user; report session, next */
#define KT_CMD_RELEASE 2 /* set session, next, dst_ep; owner = kernel */
#define KT_CMD_FETCH   3 /* copy out the ring entry of seq in session */

#define KT_ST_OK      1
#define KT_ST_NONE    2 /* no state for the key */
#define KT_ST_BUSY    3 /* the program is executing a request: retry */
#define KT_ST_MISS    4 /* FETCH: the ring does not hold seq */
#define KT_ST_BAD_CMD 5

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
	CNT_TX_SERVED,         /* request executed in XDP on kernel-resident regions, answered with XDP_TX */
	CNT_TX_CACHED,         /* retransmitted request answered from the kt_state ring with XDP_TX */
	CNT_DROP_IN_PROGRESS,  /* retransmission of the request another CPU is executing: dropped, that one answers */
	CNT_DROP_TX_FAIL,      /* served but the response could not be built in the frame: dropped, the ring answers the retransmission */
	CNT_PASS_AV_BUSY,      /* the peer's AV slot was being written on every try: passed to the stack */
	/* Not outcomes: details of the xdpfab requests above. */
	CNT_KERN_OPS,          /* ops executed in XDP (a served request carries 1..16) */
	CNT_UP_NO_STATE,       /* request handed up: no shared state for the peer */
	CNT_UP_USER_OWNS,      /* request handed up: user space owns the peer's state */
	CNT_UP_NOT_NEXT,       /* request handed up: other session, endpoint, or not the next seq, or a duplicate not in the ring */
	CNT_UP_OP,             /* request handed up: an op, datatype, flag or size XDP does not execute */
	CNT_UP_REGION,         /* request handed up: key not kernel-resident, or range, access, auth, alignment, page crossing */
	CNT_UP_CONTENDED,      /* request handed up: a compare-and-swap loop lost too often, nothing executed */
	CNT_MAX,
};

#endif /* XDPFAB_H */
