/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Atomics on kernel-resident regions, served by the XDP program
 * (docs/xdp-atomics.md). Included by xdpfab.c only.
 *
 * A request is served here when every one of its ops is an atomic the
 * program executes exactly as the atomic engine does (32- and 64-bit
 * integers, aligned, within one KR_PAGE of a kernel-resident region the
 * request may access) and it is the next request of the peer's session in
 * a kt_state the program owns. It then executes the ops, records the
 * fetched values in the state's ring, advances next and answers with
 * XDP_TX a response whose UDP payload is byte for byte the one the
 * user-space engine would send. A retransmission of a request the program
 * answered is answered from the ring. Everything else goes up whole, as
 * before, counted by reason (CNT_UP_*).
 *
 * The spin lock allows no helper calls while held, so the state is taken
 * for execution, not locked through it: under the lock the program marks
 * the state busy (seq next is being executed), executes without the lock,
 * and commits (ring entry, next + 1, busy cleared) under the lock again.
 * A copy of that request arriving meanwhile on another CPU is dropped
 * (the executing CPU answers), and user space's claim waits for busy to
 * clear. Every path after marking busy reaches the commit.
 */

/* Wire format (datapath/wire, docs/protocol.md). */
#define W_MAGIC    0xFB
#define W_VERSION  1
#define W_REQ      1
#define W_RESP     2
#define W_HDR_LEN  40
#define W_OP_LEN   48
#define W_RESP_LEN 16
#define W_HDR_FLAGS 0x3   /* HdrRetransmit | HdrHeld */
#define W_OP_FLAGS  0xF   /* OpFence | OpFirst | OpLast | OpCQData */
#define W_OP_CQDATA 0x8

#define OP_ATOMIC  4
#define OP_FETCH   5
#define OP_COMPARE 6

/* enum fi_datatype, enum fi_op */
#define DT_INT32  4
#define DT_UINT32 5
#define DT_INT64  6
#define DT_UINT64 7

#define FOP_MIN 0
#define FOP_MAX 1
#define FOP_SUM 2
#define FOP_PROD 3
#define FOP_LOR 4
#define FOP_LAND 5
#define FOP_BOR 6
#define FOP_BAND 7
#define FOP_LXOR 8
#define FOP_BXOR 9
#define FOP_READ 10
#define FOP_WRITE 11
#define FOP_CSWAP 12
#define FOP_CSWAP_NE 13
#define FOP_CSWAP_LE 14
#define FOP_CSWAP_LT 15
#define FOP_CSWAP_GE 16
#define FOP_CSWAP_GT 17
#define FOP_MSWAP 18

/* Attempts of a compare-and-swap loop before the request goes up. */
#define KT_CAS_TRIES 64
/* Largest response UDP payload: header, 16 descriptors, the data. */
#define KT_RESP_MAX (W_HDR_LEN + KT_MAX_OPS * W_RESP_LEN + KT_DATA_MAX)

struct w_hdr {
	__u8 magic;
	__u8 version;
	__u8 type;
	__u8 flags;
	__u16 nops;
	__u16 rsvd;
	__u32 src_ep;
	__u32 dst_ep;
	__u32 auth;
	__u32 session;
	__u32 seq;
	__u32 ack;
	__u64 sack;
} __attribute__((packed));

struct w_op {
	__u8 opcode;
	__u8 access;
	__u8 datatype;
	__u8 op;
	__u16 flags;
	__u16 rsvd;
	__u32 len;
	__u32 resp_len;
	__u64 rkey;
	__u64 addr;
	__u64 data;
	__u32 count;
	__u32 rsvd2;
} __attribute__((packed));

/* Kernel-resident regions: what may be served, and the memory. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 16);
	__type(key, struct mr_key);
	__type(value, struct kr_region);
} kr_regions SEC(".maps");

struct kr_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__uint(value_size, KR_PAGE);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 1 << 16);
	__type(key, struct mr_key);
	__array(values, struct kr_inner);
} kr_mem SEC(".maps");

/* Shared per-peer target state. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, struct kt_key);
	__type(value, struct kt_state);
} ktarget SEC(".maps");

/* One element of a region's array map, as kt_exec_op takes it. */
struct kr_page {
	__u8 b[KR_PAGE];
};

/* Per-CPU scratch: the fetched values, then the response payload. */
struct kt_scratch {
	__u8 data[KT_DATA_MAX + 8];
	__u8 resp[512 + 8];
	__u32 poff[KT_MAX_OPS];  /* offset of each op's operand from data */
	__u32 olen[KT_MAX_OPS];  /* each op's payload bytes */
	__u32 orlen[KT_MAX_OPS]; /* each op's response bytes */
	__u64 roff[KT_MAX_OPS];  /* each op's target offset in its region */
	__u32 dpos;              /* fetched bytes written so far */
	/* The region the previous op of the request checked against (ops of
	 * one request mostly share their key): checking the next op of the
	 * same key takes no map lookup. Valid within one request only. */
	__u32 rc_valid;
	__u64 rc_key;
	__u64 rc_base;
	__u64 rc_len;
	__u32 rc_flags;
	__u32 rc_auth;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kt_scratch);
} kt_scratch SEC(".maps");

/* Keep in BTF the types only user space reads. */
const struct kt_ctl *unused_kt_ctl __attribute__((unused));

/* Bytes of one element of datatype dt, 0 if the program does not serve it. */
static __always_inline __u32 elem_size(__u8 dt)
{
	if (dt == DT_INT32 || dt == DT_UINT32)
		return 4;
	if (dt == DT_INT64 || dt == DT_UINT64)
		return 8;
	return 0;
}

/* Ops a single atomic instruction executes. */
static __always_inline int native_op(__u8 op)
{
	return op == FOP_SUM || op == FOP_BOR || op == FOP_BAND || op == FOP_BXOR ||
	       op == FOP_READ || op == FOP_WRITE || op == FOP_CSWAP;
}

/* atomic.Class.Has for the opcode's class. */
static __always_inline int class_has(__u8 opcode, __u8 op)
{
	switch (opcode) {
	case OP_ATOMIC:
		return op <= FOP_BXOR || op == FOP_WRITE;
	case OP_FETCH:
		return op <= FOP_WRITE;
	case OP_COMPARE:
		return op >= FOP_CSWAP && op <= FOP_MSWAP;
	}
	return 0;
}

/*
 * new_value is atomic/ops.go's intOp: the value op stores given the old
 * value a, operand b and compare c, and whether it stores at all. Signed
 * orders use the sign bit of the element's width (width 4 or 8).
 */
static __always_inline int new_value(__u8 op, int sgn, int width, __u64 a, __u64 b, __u64 c,
				     __u64 *nv)
{
	__s64 sa = width == 4 ? (__s64)(__s32)a : (__s64)a;
	__s64 sb = width == 4 ? (__s64)(__s32)b : (__s64)b;
	__s64 sc = width == 4 ? (__s64)(__s32)c : (__s64)c;
#define LT(x, y, sx, sy) (sgn ? (sx) < (sy) : (x) < (y))
	*nv = b;
	switch (op) {
	case FOP_MIN:
		return LT(b, a, sb, sa);
	case FOP_MAX:
		return LT(a, b, sa, sb);
	case FOP_SUM:
		*nv = a + b;
		return 1;
	case FOP_PROD:
		*nv = a * b;
		return 1;
	case FOP_LOR:
		*nv = (a != 0 || b != 0);
		return 1;
	case FOP_LAND:
		*nv = (a != 0 && b != 0);
		return 1;
	case FOP_BOR:
		*nv = a | b;
		return 1;
	case FOP_BAND:
		*nv = a & b;
		return 1;
	case FOP_LXOR:
		*nv = ((a != 0) != (b != 0));
		return 1;
	case FOP_BXOR:
		*nv = a ^ b;
		return 1;
	case FOP_READ:
		return 0;
	case FOP_WRITE:
		return 1;
	case FOP_CSWAP:
		return c == a;
	case FOP_CSWAP_NE:
		return c != a;
	case FOP_CSWAP_LE:
		return !LT(a, c, sa, sc); /* c <= a */
	case FOP_CSWAP_LT:
		return LT(c, a, sc, sa);
	case FOP_CSWAP_GE:
		return !LT(c, a, sc, sa); /* c >= a */
	case FOP_CSWAP_GT:
		return LT(a, c, sa, sc);
	case FOP_MSWAP:
		*nv = (b & c) | (a & ~c);
		return 1;
	}
#undef LT
	return 0;
}

/*
 * exec64 and exec32 execute a single-instruction op on one element and
 * return the old value. These are the BPF atomic instructions, the x86
 * locked instructions sync/atomic uses.
 */
static __always_inline __u64 exec64(__u64 *p, __u8 op, __u64 b, __u64 c)
{
	switch (op) {
	case FOP_SUM:
		return __sync_fetch_and_add(p, b);
	case FOP_BOR:
		return __sync_fetch_and_or(p, b);
	case FOP_BAND:
		return __sync_fetch_and_and(p, b);
	case FOP_BXOR:
		return __sync_fetch_and_xor(p, b);
	case FOP_WRITE:
		return __atomic_exchange_n(p, b, __ATOMIC_SEQ_CST);
	case FOP_CSWAP:
		return __sync_val_compare_and_swap(p, c, b);
	}
	return *(volatile __u64 *)p; /* FOP_READ */
}

static __always_inline __u32 exec32(__u32 *p, __u8 op, __u32 b, __u32 c)
{
	switch (op) {
	case FOP_SUM:
		return __sync_fetch_and_add(p, b);
	case FOP_BOR:
		return __sync_fetch_and_or(p, b);
	case FOP_BAND:
		return __sync_fetch_and_and(p, b);
	case FOP_BXOR:
		return __sync_fetch_and_xor(p, b);
	case FOP_WRITE:
		return __atomic_exchange_n(p, b, __ATOMIC_SEQ_CST);
	case FOP_CSWAP:
		return __sync_val_compare_and_swap(p, c, b);
	}
	return *(volatile __u32 *)p; /* FOP_READ */
}

/* What the checking pass learned about a request. */
struct kreq {
	__u32 nops;
	__u32 dlen; /* fetched bytes of the response */
	__u32 rlen; /* response UDP payload bytes */
};

/*
 * region_off checks the op's target against its kernel-resident region,
 * every check user space's mr lookup makes (key, enabled, access, auth
 * key, range), plus alignment and the op staying in one page, and
 * returns 0 with the target's offset in the region in *roff, or -1. The
 * region's fields come from the request's previous op when it had the
 * same key (s's one-entry cache), else from kr_regions, and then its
 * memory must be in kr_mem too.
 */
static __always_inline int region_off(struct kt_scratch *s, __u32 domain_id, __u32 auth,
				      const struct w_op *o, __u32 n, __u64 *roff)
{
	struct mr_key k = {.domain_id = domain_id, .key = o->rkey};
	struct kr_region *r;
	__u64 off;
	__u32 need;

	if (!s->rc_valid || s->rc_key != o->rkey) {
		r = bpf_map_lookup_elem(&kr_regions, &k);
		if (!r || !bpf_map_lookup_elem(&kr_mem, &k))
			return -1;
		s->rc_key = o->rkey;
		s->rc_base = r->base;
		s->rc_len = r->len;
		s->rc_flags = r->flags;
		s->rc_auth = r->auth_digest;
		s->rc_valid = 1;
	}
	if (!(s->rc_flags & KR_ENABLED) || s->rc_auth != auth)
		return -1;
	need = KR_REMOTE_WRITE;
	if (o->opcode != OP_ATOMIC)
		need = o->op == FOP_READ ? KR_REMOTE_READ : KR_REMOTE_READ | KR_REMOTE_WRITE;
	if ((s->rc_flags & need) != need)
		return -1;
	if (o->addr < s->rc_base)
		return -1;
	off = o->addr - s->rc_base;
	if (off > s->rc_len || s->rc_len - off < n)
		return -1;
	if (off & (elem_size(o->datatype) - 1))
		return -1;
	if ((off & (KR_PAGE - 1)) + n > KR_PAGE)
		return -1;
	*roff = off;
	return 0;
}

/*
 * region_page returns the KR_PAGE of kernel-resident memory at offset off
 * of the op's region, which region_off checked in this program run, or
 * NULL.
 */
static __always_inline void *region_page(__u32 domain_id, const struct w_op *o, __u64 off)
{
	struct mr_key k = {.domain_id = domain_id, .key = o->rkey};
	void *inner;
	__u32 page;

	inner = bpf_map_lookup_elem(&kr_mem, &k);
	if (!inner)
		return 0;
	page = off / KR_PAGE;
	return bpf_map_lookup_elem(inner, &page);
}

/*
 * kt_check_op checks op i of the request at off: every field wire.Decode
 * checks, and that the program executes it. It returns -1, with the op's
 * payload and response lengths in the scratch, or the CNT_UP_* reason.
 * A global function: the verifier checks it once, not per op.
 */
__attribute__((noinline)) int kt_check_op(struct xdp_md *ctx, __u32 off, __u32 i, __u32 domain_id)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct w_hdr *h = data + (off & 0x3fff);
	struct w_op *o;
	struct kt_scratch *s;
	__u32 zero = 0, size, n, want;
	__u64 roff;

	s = bpf_map_lookup_elem(&kt_scratch, &zero);
	if (!s || i >= KT_MAX_OPS)
		return CNT_UP_OP;
	if ((void *)(h + 1) > end)
		return CNT_UP_OP;
	o = data + ((off + W_HDR_LEN + i * W_OP_LEN) & 0x3fff);
	if ((void *)(o + 1) > end)
		return CNT_UP_OP;
	if (o->opcode < OP_ATOMIC || o->opcode > OP_COMPARE)
		return CNT_UP_OP;
	want = o->opcode == OP_ATOMIC ? 2 : 3; /* wire.Opcode.Access */
	if (o->access != want || (o->flags & ~W_OP_FLAGS) || (o->flags & W_OP_CQDATA) ||
	    o->rsvd || o->rsvd2)
		return CNT_UP_OP;
	size = elem_size(o->datatype);
	if (!size || o->count == 0 || o->count > KT_DATA_MAX / 4 || !class_has(o->opcode, o->op))
		return CNT_UP_OP;
	n = o->count * size;
	if (n > KT_DATA_MAX)
		return CNT_UP_OP;
	switch (o->opcode) {
	case OP_ATOMIC:
		if (o->len != n || o->resp_len != 0)
			return CNT_UP_OP;
		break;
	case OP_FETCH:
		if ((o->op != FOP_READ && o->len != n) || o->resp_len != n || o->len > n)
			return CNT_UP_OP;
		break;
	default:
		if (o->len != 2 * n || o->resp_len != n)
			return CNT_UP_OP;
	}
	/* A compare-and-swap loop that keeps losing must be able to send
	 * the request up untouched: only alone, on one element. */
	if (!native_op(o->op) && (h->nops > 1 || o->count > 1))
		return CNT_UP_OP;
	if (region_off(s, domain_id, h->auth, o, n, &roff))
		return CNT_UP_REGION;
	s->roff[i & (KT_MAX_OPS - 1)] = roff;
	s->olen[i & (KT_MAX_OPS - 1)] = o->len;
	s->orlen[i & (KT_MAX_OPS - 1)] = o->resp_len;
	return -1;
}

/*
 * check_request decides whether the program can serve the request at
 * off (the UDP payload, plen bytes). It returns -1 and fills q and the
 * operand offsets in s, or the CNT_UP_* reason it cannot.
 */
static __always_inline int check_request(struct xdp_md *ctx, __u32 off, __u32 plen,
					 __u32 domain_id, struct kreq *q, struct kt_scratch *s)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct w_hdr *h = data + off;
	__u32 total, nops, i;
	int why;

	if ((void *)(h + 1) > end)
		return CNT_UP_OP;
	nops = h->nops;
	if ((h->flags & ~W_HDR_FLAGS) || h->rsvd || nops == 0 || nops > KT_MAX_OPS)
		return CNT_UP_OP;
	total = W_HDR_LEN + nops * W_OP_LEN;
	q->nops = nops;
	q->dlen = 0;
	s->rc_valid = 0;
	for (i = 0; i < KT_MAX_OPS; i++) {
		if (i >= nops)
			break;
		why = kt_check_op(ctx, off, i, domain_id);
		if (why >= 0)
			return why;
		s->poff[i] = off + total;
		total += s->olen[i] & 0xffff;
		q->dlen += s->orlen[i] & 0xffff;
	}
	if (total != plen || q->dlen > KT_DATA_MAX)
		return CNT_UP_OP;
	q->rlen = W_HDR_LEN + nops * W_RESP_LEN + q->dlen;
	return -1;
}

/*
 * kt_exec_op executes op i of the checked request at off, its operand at
 * the scratch's poff[i], on pg, the region's page holding its target
 * (exec_request looks it up), writing the old values into its data at
 * dpos. It returns the bytes written, or -1 when a compare-and-swap loop
 * gave up (the op is alone and on one element: nothing executed). A
 * global function: the verifier checks it once.
 */
__attribute__((noinline)) int kt_exec_op(struct xdp_md *ctx, __u32 off, __u32 i, struct kr_page *pg)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct w_hdr *h = data + (off & 0x3fff);
	struct kt_scratch *s;
	struct w_op *o;
	__u32 zero = 0, size, n, in_page = 0, cnt, j, wrote = 0, poff, dpos;
	__u64 roff;
	__u8 *page, op, opcode;
	int sgn;

	s = bpf_map_lookup_elem(&kt_scratch, &zero);
	if (!s || i >= KT_MAX_OPS)
		return 0;
	poff = s->poff[i];
	dpos = s->dpos;
	if ((void *)(h + 1) > end)
		return 0;
	o = data + ((off + W_HDR_LEN + i * W_OP_LEN) & 0x3fff);
	if ((void *)(o + 1) > end)
		return 0;
	size = elem_size(o->datatype);
	if (!size)
		return 0;
	n = o->count * size;
	roff = s->roff[i & (KT_MAX_OPS - 1)];
	in_page = roff & (KR_PAGE - 1);
	if (!pg)
		return 0; /* no page: cannot happen, see "Closing" in docs/xdp-atomics.md */
	page = pg->b;
	op = o->op;
	opcode = o->opcode;
	cnt = o->count;
	sgn = o->datatype == DT_INT32 || o->datatype == DT_INT64;

	if (!native_op(op)) { /* alone, one element: a compare-and-swap loop */
		__u64 b = 0, c = 0, a, nv;
		__u32 eoff = in_page & (KR_PAGE - size);
		int k;

		if (size == 8) {
			__u64 *bp = data + (poff & 0x3fff), *cp = data + ((poff + 8) & 0x3fff);
			__u64 *p = (__u64 *)(page + (eoff & (KR_PAGE - 8)));

			if ((void *)(bp + 1) > end)
				return 0;
			b = *bp;
			if (opcode == OP_COMPARE) {
				if ((void *)(cp + 1) > end)
					return 0;
				c = *cp;
			}
			for (k = 0; k < KT_CAS_TRIES; k++) {
				a = *(volatile __u64 *)p;
				if (!new_value(op, sgn, 8, a, b, c, &nv) ||
				    __sync_val_compare_and_swap(p, a, nv) == a)
					break;
			}
			if (k == KT_CAS_TRIES)
				return -1;
			if (opcode != OP_ATOMIC) {
				*(__u64 *)(s->data + (dpos & (KT_DATA_MAX - 8))) = a;
				wrote = 8;
			}
		} else {
			__u32 *bp = data + (poff & 0x3fff), *cp = data + ((poff + 4) & 0x3fff);
			__u32 *p = (__u32 *)(page + (eoff & (KR_PAGE - 4)));
			__u32 a32;

			if ((void *)(bp + 1) > end)
				return 0;
			b = *bp;
			if (opcode == OP_COMPARE) {
				if ((void *)(cp + 1) > end)
					return 0;
				c = *cp;
			}
			for (k = 0; k < KT_CAS_TRIES; k++) {
				a32 = *(volatile __u32 *)p;
				if (!new_value(op, sgn, 4, a32, b, c, &nv) ||
				    __sync_val_compare_and_swap(p, a32, (__u32)nv) == a32)
					break;
			}
			if (k == KT_CAS_TRIES)
				return -1;
			if (opcode != OP_ATOMIC) {
				*(__u32 *)(s->data + (dpos & (KT_DATA_MAX - 4))) = a32;
				wrote = 4;
			}
		}
		return wrote;
	}

	for (j = 0; j < KT_DATA_MAX / 4; j++) {
		__u32 eoff = in_page + j * size;
		__u64 b = 0, c = 0;

		if (j >= cnt)
			break;
		if (size == 8) {
			__u64 *bp = data + ((poff + j * 8) & 0x3fff);
			__u64 *cp = data + ((poff + n + j * 8) & 0x3fff);
			__u64 old;

			if (op != FOP_READ) {
				if ((void *)(bp + 1) > end)
					break;
				b = *bp;
			}
			if (opcode == OP_COMPARE) {
				if ((void *)(cp + 1) > end)
					break;
				c = *cp;
			}
			old = exec64((__u64 *)(page + (eoff & (KR_PAGE - 8))), op, b, c);
			if (opcode != OP_ATOMIC) {
				*(__u64 *)(s->data + ((dpos + wrote) & (KT_DATA_MAX - 8))) = old;
				wrote += 8;
			}
		} else {
			__u32 *bp = data + ((poff + j * 4) & 0x3fff);
			__u32 *cp = data + ((poff + n + j * 4) & 0x3fff);
			__u32 old;

			if (op != FOP_READ) {
				if ((void *)(bp + 1) > end)
					break;
				b = *bp;
			}
			if (opcode == OP_COMPARE) {
				if ((void *)(cp + 1) > end)
					break;
				c = *cp;
			}
			old = exec32((__u32 *)(page + (eoff & (KR_PAGE - 4))), op, b, c);
			if (opcode != OP_ATOMIC) {
				*(__u32 *)(s->data + ((dpos + wrote) & (KT_DATA_MAX - 4))) = old;
				wrote += 4;
			}
		}
	}
	return wrote;
}

/*
 * exec_request executes the ops of the checked request. It returns the
 * ops executed, or -1 when the only op's compare-and-swap loop gave up
 * (nothing executed).
 */
static __always_inline int exec_request(struct xdp_md *ctx, __u32 off, __u32 domain_id,
					const struct kreq *q, struct kt_scratch *s)
{
	struct kr_page *pg = 0;
	__u64 pg_key = 0, roff;
	__u32 i, pg_no = 0;
	int n;

	s->dpos = 0;
	for (i = 0; i < KT_MAX_OPS; i++) {
		void *data = (void *)(long)ctx->data;
		void *end = (void *)(long)ctx->data_end;
		struct w_op *o = data + ((off + W_HDR_LEN + i * W_OP_LEN) & 0x3fff);

		if (i >= q->nops)
			break;
		/* The page lookup (kr_mem, then the region's array) once per
		 * run of ops on one page of one region, as a request's ops
		 * mostly are, not once per op: at 16 fetch-adds per packet
		 * the per-op lookups were about a sixth of the program's time
		 * (BenchmarkKServeFetchAdds). The op is in the frame
		 * (check_request read it). */
		if ((void *)(o + 1) > end) {
			pg = 0;
		} else {
			roff = s->roff[i & (KT_MAX_OPS - 1)];
			if (!pg || o->rkey != pg_key || roff / KR_PAGE != pg_no) {
				pg = region_page(domain_id, o, roff);
				pg_key = o->rkey;
				pg_no = roff / KR_PAGE;
			}
		}
		n = kt_exec_op(ctx, off, i, pg);
		if (n < 0)
			return -1;
		s->dpos += n;
	}
	return i;
}

/*
 * build_response writes the response UDP payload into s->resp: the
 * header the engine's execute writes (RESP, endpoints swapped, same auth
 * key, session and seq, Ack next, Sack 0), one RespDesc per request op
 * (its opcode, errno 0, its RespLen) and the fetched values. Returns its
 * length.
 */
static __always_inline __u32 build_response(struct xdp_md *ctx, __u32 off, const struct kreq *q,
					    struct kt_scratch *s, __u32 ack)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct w_hdr *h = data + off;
	struct w_hdr *r = (struct w_hdr *)s->resp;
	__u32 i, doff;

	if ((void *)(h + 1) > end)
		return 0;
	r->magic = W_MAGIC;
	r->version = W_VERSION;
	r->type = W_RESP;
	r->flags = 0;
	r->nops = q->nops;
	r->rsvd = 0;
	r->src_ep = h->dst_ep;
	r->dst_ep = h->src_ep;
	r->auth = h->auth;
	r->session = h->session;
	r->seq = h->seq;
	r->ack = ack;
	r->sack = 0;
	for (i = 0; i < KT_MAX_OPS; i++) {
		struct w_op *o = data + ((off + W_HDR_LEN + i * W_OP_LEN) & 0x3fff);
		__u8 *d = s->resp + W_HDR_LEN + i * W_RESP_LEN;

		if (i >= q->nops)
			break;
		if ((void *)(o + 1) > end)
			return 0;
		*(__u32 *)d = o->opcode;
		*(__u32 *)(d + 4) = 0;
		*(__u32 *)(d + 8) = o->resp_len;
		*(__u32 *)(d + 12) = 0;
	}
	doff = W_HDR_LEN + q->nops * W_RESP_LEN;
	for (i = 0; i < KT_DATA_MAX / 4; i++) {
		if (i * 4 >= q->dlen)
			break;
		*(__u32 *)(s->resp + ((doff + i * 4) & 508)) = *(__u32 *)(s->data + i * 4);
	}
	return q->rlen;
}

/*
 * transmit turns the frame into the response: the payload built in
 * s->resp (rlen bytes), addresses and ports swapped, lengths and
 * checksums set, the tail trimmed. Returns XDP_TX, or XDP_DROP when the
 * frame cannot be rewritten.
 */
static __always_inline int transmit(struct xdp_md *ctx, const struct flow *f, struct kt_scratch *s,
				    __u32 rlen)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l3 = f->payload - sizeof(struct udphdr); /* UDP header offset */
	__u32 ulen = sizeof(struct udphdr) + rlen;
	__u32 newlen, i;
	__s64 flen;
	__u64 acc = 0;
	__s64 r;
	struct ethhdr *eth = data;
	struct udphdr *udp;
	__u8 mac[ETH_ALEN];
	__u16 port;

	if (rlen < W_HDR_LEN + W_RESP_LEN || rlen > 512 || (rlen & 3))
		return XDP_DROP;
	newlen = f->payload + rlen;
	flen = end - data;
	asm volatile("" : "+r"(flen)); /* a 64-bit scalar: no 32-bit pointer arithmetic */
	if (bpf_xdp_adjust_tail(ctx, (int)((__s64)newlen - flen)) < 0)
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);

	/* Pseudo-header and UDP header, the source and destination swapped
	 * (the sum does not care). */
	if (f->v4) {
		struct iphdr *ip = data + (f->l3 & 0x3fff);
		__u32 a, sum = 0;
		__u16 *w;

		if ((void *)(ip + 1) > end)
			return XDP_DROP;
		a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
		ip->tot_len = bpf_htons((__u16)(ip->ihl * 4 + ulen));
		ip->ttl = 64;
		ip->check = 0;
		w = (__u16 *)ip;
		if ((void *)(w + 10) > end)
			return XDP_DROP;
		for (i = 0; i < 10; i++)
			sum += w[i];
		/* Options, if any: ihl up to 15 words of 4 bytes. */
		for (i = 10; i < 30; i++) {
			if (i >= (__u32)ip->ihl * 2)
				break;
			if ((void *)(w + i + 1) > end)
				return XDP_DROP;
			sum += w[i];
		}
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		ip->check = ~sum & 0xffff;
		acc += (__u64)ip->saddr + ip->daddr;
	} else {
		struct ipv6hdr *ip6 = data + (f->l3 & 0x3fff);
		struct in6_addr a;
		__u32 w[4];

		if ((void *)(ip6 + 1) > end)
			return XDP_DROP;
		a = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		ip6->payload_len = bpf_htons((__u16)ulen);
		ip6->hop_limit = 64;
		__builtin_memcpy(w, &ip6->saddr, 16);
		acc += (__u64)w[0] + w[1] + w[2] + w[3];
		__builtin_memcpy(w, &ip6->daddr, 16);
		acc += (__u64)w[0] + w[1] + w[2] + w[3];
	}
	udp = data + (l3 & 0x3fff);
	if ((void *)(udp + 1) > end)
		return XDP_DROP;
	port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	udp->len = bpf_htons((__u16)ulen);
	udp->check = 0;
	acc += bpf_htons(IPPROTO_UDP) + bpf_htons((__u16)ulen);
	acc += (__u32)udp->source + udp->dest + udp->len;
	r = bpf_csum_diff(0, 0, (__be32 *)s->resp, rlen & 0x1fc, 0);
	if (r < 0)
		return XDP_DROP;
	acc += (__u32)r;
	{
		__u16 c = ~fold16(acc) & 0xffff;
		udp->check = c ? c : 0xffff;
	}
	/* The payload. */
	for (i = 0; i < 512 / 4; i++) {
		__u32 *p = data + ((f->payload + i * 4) & 0x3fff);

		if (i * 4 >= rlen)
			break;
		if ((void *)(p + 1) > end)
			return XDP_DROP;
		*p = *(__u32 *)(s->resp + ((i * 4) & 508));
	}
	return XDP_TX;
}

/*
 * make_room grows the frame so a response longer than the request (an
 * ATOMIC_READ of several elements) fits; the frame is unchanged when it
 * cannot.
 */
static __always_inline int make_room(struct xdp_md *ctx, const struct flow *f, __u32 rlen)
{
	if (rlen <= f->plen)
		return 0;
	return bpf_xdp_adjust_tail(ctx, (int)(rlen - f->plen));
}

/*
 * kserve serves the request at the UDP payload of the frame if it can.
 * It returns an XDP action when it did (XDP_TX), dropped it, or -1 with
 * the packet left unchanged for the usual path (counted by reason when
 * it is a request).
 */
static __always_inline int kserve(struct xdp_md *ctx, const struct flow *f,
				  const struct port_config *pc)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 off = f->payload & 0x3fff;
	struct w_hdr *h = data + off;
	struct kt_key kk = {};
	struct kt_state *st;
	struct kt_scratch *s;
	struct kreq q = {};
	__u32 zero = 0, seq, ack, slot, i;
	int why, act, done;

	if ((void *)(h + 1) > end)
		return -1;
	if (h->magic != W_MAGIC || h->version != W_VERSION || h->type != W_REQ)
		return -1;
	__builtin_memcpy(kk.addr, f->saddr, 16);
	kk.sport = f->sport;
	kk.dport = f->dport;
	kk.src_ep = h->src_ep;
	/* The request's ops first, the peer's state after: most requests
	 * that go up (messages, RMA, atomics on regions that are not
	 * kernel-resident) fail here, and the state's lookup is the dearer
	 * (a cold hash bucket and element: BenchmarkProgramCold, msg-kserve
	 * and fetch-add-up). A request that also has no state counts
	 * CNT_UP_OP or CNT_UP_REGION. */
	s = bpf_map_lookup_elem(&kt_scratch, &zero);
	if (!s)
		return -1;
	why = check_request(ctx, off, f->plen, pc->domain_id, &q, s);
	if (why >= 0) {
		count(why);
		return -1;
	}
	st = bpf_map_lookup_elem(&ktarget, &kk);
	if (!st) {
		count(CNT_UP_NO_STATE);
		return -1;
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	h = data + off;
	if ((void *)(h + 1) > end)
		return -1;
	seq = h->seq;

	bpf_spin_lock(&st->lock);
	if (st->owner != KT_OWNER_KERNEL) {
		bpf_spin_unlock(&st->lock);
		count(CNT_UP_USER_OWNS);
		return -1;
	}
	if (st->session != h->session || st->dst_ep != h->dst_ep) {
		bpf_spin_unlock(&st->lock);
		count(CNT_UP_NOT_NEXT);
		return -1;
	}
	if (seq == st->next) {
		if (st->busy) {
			bpf_spin_unlock(&st->lock);
			count(CNT_DROP_IN_PROGRESS);
			return XDP_DROP;
		}
		st->busy = 1;
		bpf_spin_unlock(&st->lock);
	} else {
		__u32 back = st->next - seq;
		struct kt_resp *e = &st->ring[seq & (KT_RING - 1)];

		if ((__s32)back > 0 && back <= KT_RING && e->seq == seq &&
		    e->session == h->session && e->dlen == q.dlen) {
			for (i = 0; i < KT_DATA_MAX / 8; i++)
				*(__u64 *)(s->data + i * 8) = *(__u64 *)(e->data + i * 8);
			ack = st->next;
			bpf_spin_unlock(&st->lock);
			if (make_room(ctx, f, q.rlen) < 0) { /* user space answers (kt_control FETCH) */
				count(CNT_UP_OP);
				return -1;
			}
			if (!build_response(ctx, off, &q, s, ack)) {
				count(CNT_DROP_TX_FAIL);
				return XDP_DROP;
			}
			act = transmit(ctx, f, s, q.rlen);
			count(act == XDP_TX ? CNT_TX_CACHED : CNT_DROP_TX_FAIL);
			return act;
		}
		bpf_spin_unlock(&st->lock);
		count(CNT_UP_NOT_NEXT);
		return -1;
	}

	/* Ours: seq next, marked busy. Every path from here commits or
	 * clears busy. */
	done = -2;
	if (make_room(ctx, f, q.rlen) == 0)
		done = exec_request(ctx, off, pc->domain_id, &q, s);
	if (done < 0) {
		bpf_spin_lock(&st->lock);
		st->busy = 0;
		bpf_spin_unlock(&st->lock);
		count(done == -1 ? CNT_UP_CONTENDED : CNT_UP_OP);
		return -1;
	}
	slot = seq & (KT_RING - 1);
	bpf_spin_lock(&st->lock);
	{
		struct kt_resp *e = &st->ring[slot];

		for (i = 0; i < KT_DATA_MAX / 8; i++)
			*(__u64 *)(e->data + i * 8) = *(__u64 *)(s->data + i * 8);
		e->seq = seq;
		e->session = st->session;
		e->dlen = q.dlen;
	}
	st->next = seq + 1;
	st->busy = 0;
	st->served++;
	ack = seq + 1;
	bpf_spin_unlock(&st->lock);
	st->last_ns = bpf_ktime_get_ns();
	count_n(CNT_KERN_OPS, done);

	if (!build_response(ctx, off, &q, s, ack)) {
		count(CNT_DROP_TX_FAIL);
		return XDP_DROP;
	}
	act = transmit(ctx, f, s, q.rlen);
	count(act == XDP_TX ? CNT_TX_SERVED : CNT_DROP_TX_FAIL);
	return act;
}

/*
 * kt_control is user space's side of the kt_state lock, run with
 * BPF_PROG_TEST_RUN on a struct kt_ctl: claim (take ownership, read
 * session and next), release (hand ownership back with the session and
 * next user space reached) and fetch (read one ring entry).
 */
SEC("xdp")
int kt_control(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct kt_ctl *c = data;
	struct kt_key key;
	struct kt_state *st;
	__u32 i;

	if ((void *)(c + 1) > end)
		return XDP_ABORTED;
	key = c->key;
	st = bpf_map_lookup_elem(&ktarget, &key);
	if (!st) {
		c->status = KT_ST_NONE;
		return XDP_PASS;
	}
	switch (c->cmd) {
	case KT_CMD_CLAIM:
		bpf_spin_lock(&st->lock);
		if (st->busy) {
			bpf_spin_unlock(&st->lock);
			c->status = KT_ST_BUSY;
			return XDP_PASS;
		}
		st->owner = KT_OWNER_USER;
		c->session = st->session;
		c->next = st->next;
		c->served = st->served;
		bpf_spin_unlock(&st->lock);
		c->last_ns = st->last_ns;
		c->status = KT_ST_OK;
		return XDP_PASS;
	case KT_CMD_RELEASE:
		bpf_spin_lock(&st->lock);
		if (st->busy) { /* only the owner executes: cannot happen */
			bpf_spin_unlock(&st->lock);
			c->status = KT_ST_BUSY;
			return XDP_PASS;
		}
		st->session = c->session;
		st->next = c->next;
		st->dst_ep = c->dst_ep;
		st->owner = KT_OWNER_KERNEL;
		bpf_spin_unlock(&st->lock);
		c->status = KT_ST_OK;
		return XDP_PASS;
	case KT_CMD_FETCH: {
		__u32 seq = c->seq;
		struct kt_resp *e = &st->ring[seq & (KT_RING - 1)];

		bpf_spin_lock(&st->lock);
		if (e->seq != seq || e->session != c->session || (__s32)(st->next - seq) <= 0 ||
		    st->next - seq > KT_RING) {
			bpf_spin_unlock(&st->lock);
			c->status = KT_ST_MISS;
			return XDP_PASS;
		}
		for (i = 0; i < KT_DATA_MAX / 8; i++)
			*(__u64 *)(c->data + i * 8) = *(__u64 *)(e->data + i * 8);
		c->dlen = e->dlen;
		bpf_spin_unlock(&st->lock);
		c->status = KT_ST_OK;
		return XDP_PASS;
	}
	}
	c->status = KT_ST_BAD_CMD;
	return XDP_PASS;
}
