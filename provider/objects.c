/*
 * The fids of domains, AVs, EQs, CQs, counters and MRs, and their ops
 * tables (wait and poll sets: waitpoll.c). Each op is one call into Go
 * (xfgo_*), after the fork guard.
 */

#include "xdpfab.h"
#include "_cgo_export.h"

#define DOM(d) XF_CONTAINER(d, struct xf_domain, domain)
#define AV(a) XF_CONTAINER(a, struct xf_av, av)
#define EQ(e) XF_CONTAINER(e, struct xf_eq, eq)
#define CQ(c) XF_CONTAINER(c, struct xf_cq, cq)
#define CNTR(c) XF_CONTAINER(c, struct xf_cntr, cntr)
#define MR(m) XF_CONTAINER(m, struct xf_mr, mr)

void xf_free(void *p) { free(p); }

/* ---- domain ---- */

static int xf_domain_close(struct fid *fid)
{
	XF_GUARD();
	return xfgo_domain_close(DOM(fid)->h);
}

static int xf_domain_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	XF_GUARD();
	return xfgo_domain_bind(DOM(fid)->h, xf_fid_handle(bfid), flags);
}

static int xf_av_open(struct fid_domain *d, struct fi_av_attr *attr, struct fid_av **av, void *context)
{
	XF_GUARD();
	return xfgo_av_open(DOM(d)->h, attr, av, context);
}

static int xf_cq_open(struct fid_domain *d, struct fi_cq_attr *attr, struct fid_cq **cq, void *context)
{
	XF_GUARD();
	return xfgo_cq_open(DOM(d)->h, attr, cq, context);
}

static int xf_endpoint(struct fid_domain *d, struct fi_info *info, struct fid_ep **ep, void *context)
{
	XF_GUARD();
	return xfgo_endpoint(DOM(d)->h, info, ep, context);
}

static int xf_endpoint2(struct fid_domain *d, struct fi_info *info, struct fid_ep **ep, uint64_t flags,
			void *context)
{
	if (flags)
		return -FI_EBADFLAGS;
	return xf_endpoint(d, info, ep, context);
}

static int xf_scalable_ep(struct fid_domain *d, struct fi_info *info, struct fid_ep **sep, void *context)
{
	return -FI_ENOSYS;
}

static int xf_cntr_open(struct fid_domain *d, struct fi_cntr_attr *attr, struct fid_cntr **cntr, void *context)
{
	XF_GUARD();
	return xfgo_cntr_open(DOM(d)->h, attr, cntr, context);
}

static int xf_poll_open(struct fid_domain *d, struct fi_poll_attr *attr, struct fid_poll **pollset)
{
	XF_GUARD();
	return xfgo_poll_open(DOM(d)->h, attr, pollset);
}

static int xf_stx_ctx(struct fid_domain *d, struct fi_tx_attr *attr, struct fid_stx **stx, void *context)
{
	return -FI_ENOSYS;
}

static int xf_srx_ctx(struct fid_domain *d, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context)
{
	return -FI_ENOSYS;
}

static int xf_query_atomic(struct fid_domain *d, enum fi_datatype datatype, enum fi_op op,
			   struct fi_atomic_attr *attr, uint64_t flags)
{
	XF_GUARD();
	return xfgo_query_atomic(DOM(d)->h, datatype, op, attr, flags);
}

static int xf_query_collective(struct fid_domain *d, enum fi_collective_op coll,
			       struct fi_collective_attr *attr, uint64_t flags)
{
	return -FI_ENOSYS;
}

static int xf_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset,
		     uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct fi_mr_attr attr = {.mr_iov = &iov, .iov_count = 1, .access = access, .offset = offset,
				  .requested_key = requested_key, .context = context};

	XF_GUARD();
	return xfgo_mr_regattr(DOM(fid)->h, &attr, flags, mr);
}

static int xf_mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access,
		      uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
		      void *context)
{
	struct fi_mr_attr attr = {.mr_iov = iov, .iov_count = count, .access = access, .offset = offset,
				  .requested_key = requested_key, .context = context};

	XF_GUARD();
	return xfgo_mr_regattr(DOM(fid)->h, &attr, flags, mr);
}

static int xf_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr)
{
	XF_GUARD();
	return xfgo_mr_regattr(DOM(fid)->h, (struct fi_mr_attr *)attr, flags, mr);
}

static struct fi_ops xf_domain_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = xf_domain_close,
	.bind = xf_domain_bind,
	.control = xf_no_control,
	.ops_open = xf_no_ops_open,
	.tostr = xf_no_tostr,
	.ops_set = xf_no_ops_set,
};

static struct fi_ops_domain xf_domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = xf_av_open,
	.cq_open = xf_cq_open,
	.endpoint = xf_endpoint,
	.scalable_ep = xf_scalable_ep,
	.cntr_open = xf_cntr_open,
	.poll_open = xf_poll_open,
	.stx_ctx = xf_stx_ctx,
	.srx_ctx = xf_srx_ctx,
	.query_atomic = xf_query_atomic,
	.query_collective = xf_query_collective,
	.endpoint2 = xf_endpoint2,
};

static struct fi_ops_mr xf_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = xf_mr_reg,
	.regv = xf_mr_regv,
	.regattr = xf_mr_regattr,
};

struct fid_domain *xf_domain_new(uintptr_t h, void *context)
{
	struct xf_domain *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->domain.fid.fclass = FI_CLASS_DOMAIN;
	d->domain.fid.context = context;
	d->domain.fid.ops = &xf_domain_fi_ops;
	d->domain.ops = &xf_domain_ops;
	d->domain.mr = &xf_mr_ops;
	d->h = h;
	return &d->domain;
}

/* ---- av ---- */

static int xf_av_close(struct fid *fid)
{
	XF_GUARD();
	return xfgo_av_close(AV(fid)->h);
}

static int xf_av_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	XF_GUARD();
	return xfgo_av_bind(AV(fid)->h, xf_fid_handle(bfid), flags);
}

static int xf_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr, uint64_t flags,
			void *context)
{
	XF_GUARD();
	return xfgo_av_insert(AV(av)->h, (void *)addr, count, fi_addr, flags, context);
}

static int xf_av_insertsvc(struct fid_av *av, const char *node, const char *service, fi_addr_t *fi_addr,
			   uint64_t flags, void *context)
{
	XF_GUARD();
	return xfgo_av_insertsym(AV(av)->h, (char *)node, 1, (char *)service, 1, fi_addr, flags, context, 1);
}

static int xf_av_insertsym(struct fid_av *av, const char *node, size_t nodecnt, const char *service,
			   size_t svccnt, fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	XF_GUARD();
	return xfgo_av_insertsym(AV(av)->h, (char *)node, nodecnt, (char *)service, svccnt, fi_addr, flags,
				 context, 0);
}

static int xf_av_remove(struct fid_av *av, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
	XF_GUARD();
	return xfgo_av_remove(AV(av)->h, fi_addr, count, flags);
}

static int xf_av_lookup(struct fid_av *av, fi_addr_t fi_addr, void *addr, size_t *addrlen)
{
	XF_GUARD();
	return xfgo_av_lookup(AV(av)->h, fi_addr, addr, addrlen);
}

static const char *xf_av_straddr(struct fid_av *av, const void *addr, char *buf, size_t *len)
{
	if (xf_forked)
		return NULL;
	return xfgo_av_straddr(AV(av)->h, (void *)addr, buf, len) < 0 ? NULL : buf;
}

static int xf_av_set(struct fid_av *av, struct fi_av_set_attr *attr, struct fid_av_set **av_set, void *context)
{
	return -FI_ENOSYS;
}

static struct fi_ops xf_av_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = xf_av_close,
	.bind = xf_av_bind,
	.control = xf_no_control,
	.ops_open = xf_no_ops_open,
	.tostr = xf_no_tostr,
	.ops_set = xf_no_ops_set,
};

static struct fi_ops_av xf_av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = xf_av_insert,
	.insertsvc = xf_av_insertsvc,
	.insertsym = xf_av_insertsym,
	.remove = xf_av_remove,
	.lookup = xf_av_lookup,
	.straddr = xf_av_straddr,
	.av_set = xf_av_set,
};

struct fid_av *xf_av_new(uintptr_t h, void *context)
{
	struct xf_av *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->av.fid.fclass = FI_CLASS_AV;
	a->av.fid.context = context;
	a->av.fid.ops = &xf_av_fi_ops;
	a->av.ops = &xf_av_ops;
	a->h = h;
	return &a->av;
}

/* fi_av_open's outputs in the application's attr: the type chosen for
 * FI_AV_UNSPEC and, for a named AV, map_addr (the address of its fi_addr
 * array in this process, av.AddrArrayPath). */
void xf_av_attr_out(struct fi_av_attr *attr, int type, uint64_t map_addr)
{
	attr->type = (enum fi_av_type)type;
	if (attr->name)
		attr->map_addr = (void *)(uintptr_t)map_addr;
}

/* ---- eq ---- */

static int xf_eq_close(struct fid *fid)
{
	XF_GUARD();
	return xfgo_eq_close(EQ(fid)->h);
}

static int xf_eq_control(struct fid *fid, int command, void *arg)
{
	XF_GUARD();
	return xfgo_eq_control(EQ(fid)->h, command, arg);
}

static ssize_t xf_eq_read(struct fid_eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags)
{
	XF_GUARD();
	return xfgo_eq_read(EQ(eq)->h, event, buf, len, flags, 0, 0);
}

static ssize_t xf_eq_sread(struct fid_eq *eq, uint32_t *event, void *buf, size_t len, int timeout,
			   uint64_t flags)
{
	XF_GUARD();
	return xfgo_eq_read(EQ(eq)->h, event, buf, len, flags, 1, timeout);
}

static ssize_t xf_eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf, uint64_t flags)
{
	XF_GUARD();
	return xfgo_eq_readerr(EQ(eq)->h, buf, flags);
}

static ssize_t xf_eq_write(struct fid_eq *eq, uint32_t event, const void *buf, size_t len, uint64_t flags)
{
	XF_GUARD();
	return xfgo_eq_write(EQ(eq)->h, event, (void *)buf, len, flags);
}

static const char *xf_eq_strerror(struct fid_eq *eq, int prov_errno, const void *err_data, char *buf, size_t len)
{
	const char *s = fi_strerror(prov_errno);

	if (buf && len) {
		strncpy(buf, s, len - 1);
		buf[len - 1] = 0;
		return buf;
	}
	return s;
}

static struct fi_ops xf_eq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = xf_eq_close,
	.bind = xf_no_bind,
	.control = xf_eq_control,
	.ops_open = xf_no_ops_open,
	.tostr = xf_no_tostr,
	.ops_set = xf_no_ops_set,
};

static struct fi_ops_eq xf_eq_ops = {
	.size = sizeof(struct fi_ops_eq),
	.read = xf_eq_read,
	.readerr = xf_eq_readerr,
	.write = xf_eq_write,
	.sread = xf_eq_sread,
	.strerror = xf_eq_strerror,
};

struct fid_eq *xf_eq_new(uintptr_t h, void *context)
{
	struct xf_eq *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->eq.fid.fclass = FI_CLASS_EQ;
	e->eq.fid.context = context;
	e->eq.fid.ops = &xf_eq_fi_ops;
	e->eq.ops = &xf_eq_ops;
	e->h = h;
	return &e->eq;
}

/* ---- cq ---- */

static int xf_cq_close(struct fid *fid)
{
	XF_GUARD();
	return xfgo_cq_close(CQ(fid)->h);
}

static int xf_cq_control(struct fid *fid, int command, void *arg)
{
	XF_GUARD();
	return xfgo_cq_control(CQ(fid)->h, command, arg);
}

/* ring_read serves a read from the CQ's ring: > 0 completions taken,
 * -FI_EAGAIN when nothing is queued anywhere and nothing needs Go, 0 when
 * the read must go through Go (the Go CQ holds completions, manual
 * progress, or no ring). */
static ssize_t ring_read(struct xf_cq *c, void *buf, size_t count, fi_addr_t *src)
{
	ssize_t n;

	if (!c->ring || count == 0 || !buf)
		return 0;
	n = xf_cqring_read(c->ring, c->entry_size, buf, count, src);
	if (n > 0)
		return n;
	if (!c->manual && !__atomic_load_n(&c->ring->held, __ATOMIC_ACQUIRE))
		return -FI_EAGAIN; /* automatic progress: Go would find nothing either */
	return 0;
}

static ssize_t xf_cq_readfrom(struct fid_cq *cq, void *buf, size_t count, fi_addr_t *src_addr)
{
	struct xf_cq *c = CQ(cq);
	ssize_t n;
	int first = 0; /* this read began a wait and yielded first */

	XF_GUARD();
	n = ring_read(c, buf, count, src_addr);
	if ((n == 0 || n == -FI_EAGAIN) && xf_cq_early_yield(c)) {
		first = 1;
		if (n == -FI_EAGAIN)
			n = ring_read(c, buf, count, src_addr);
	}
	if (n == 0)
		n = xfgo_cq_read(c->h, c->format, buf, count, src_addr, 0, 0);
	return xf_cq_counted_read(c, n, first);
}

static ssize_t xf_cq_read(struct fid_cq *cq, void *buf, size_t count)
{
	return xf_cq_readfrom(cq, buf, count, NULL);
}

static ssize_t xf_cq_sreadfrom(struct fid_cq *cq, void *buf, size_t count, fi_addr_t *src_addr,
			       const void *cond, int timeout)
{
	struct xf_cq *c = CQ(cq);
	ssize_t n;

	XF_GUARD();
	/* cond is read (a size_t threshold) only on a CQ opened with
	 * FI_CQ_COND_THRESHOLD; Go decides, counting the ring too. */
	if (cond)
		return xfgo_cq_sreadcond(c->h, c->format, buf, count, src_addr, (void *)cond, timeout);
	n = ring_read(c, buf, count, src_addr);
	if (n > 0)
		return n;
	return xfgo_cq_read(c->h, c->format, buf, count, src_addr, 1, timeout);
}

static ssize_t xf_cq_sread(struct fid_cq *cq, void *buf, size_t count, const void *cond, int timeout)
{
	return xf_cq_sreadfrom(cq, buf, count, NULL, cond, timeout);
}

static ssize_t xf_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	XF_GUARD();
	return xfgo_cq_readerr(CQ(cq)->h, buf, flags);
}

static int xf_cq_signal(struct fid_cq *cq)
{
	XF_GUARD();
	return xfgo_cq_signal(CQ(cq)->h);
}

static const char *xf_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf, size_t len)
{
	return xf_eq_strerror(NULL, prov_errno, err_data, buf, len);
}

static struct fi_ops xf_cq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = xf_cq_close,
	.bind = xf_no_bind,
	.control = xf_cq_control,
	.ops_open = xf_no_ops_open,
	.tostr = xf_no_tostr,
	.ops_set = xf_no_ops_set,
};

static struct fi_ops_cq xf_cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = xf_cq_read,
	.readfrom = xf_cq_readfrom,
	.readerr = xf_cq_readerr,
	.sread = xf_cq_sread,
	.sreadfrom = xf_cq_sreadfrom,
	.signal = xf_cq_signal,
	.strerror = xf_cq_strerror,
};

static size_t cq_entry_size(int format)
{
	switch (format) {
	case FI_CQ_FORMAT_CONTEXT:
		return sizeof(struct fi_cq_entry);
	case FI_CQ_FORMAT_MSG:
		return sizeof(struct fi_cq_msg_entry);
	case FI_CQ_FORMAT_TAGGED:
		return sizeof(struct fi_cq_tagged_entry);
	}
	return sizeof(struct fi_cq_data_entry);
}

struct fid_cq *xf_cq_new(uintptr_t h, void *context, int format, struct xf_cqring *ring, int manual, unsigned yield_polls)
{
	struct xf_cq *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->cq.fid.fclass = FI_CLASS_CQ;
	c->cq.fid.context = context;
	c->cq.fid.ops = &xf_cq_fi_ops;
	c->cq.ops = &xf_cq_ops;
	c->h = h;
	c->format = format;
	c->entry_size = cq_entry_size(format);
	c->ring = ring;
	c->manual = manual;
	c->yield_polls = yield_polls;
	return &c->cq;
}

/* ---- cntr ---- */

static int xf_cntr_close(struct fid *fid)
{
	XF_GUARD();
	return xfgo_cntr_close(CNTR(fid)->h);
}

static int xf_cntr_control(struct fid *fid, int command, void *arg)
{
	XF_GUARD();
	return xfgo_cntr_control(CNTR(fid)->h, command, arg);
}

static uint64_t xf_cntr_read(struct fid_cntr *c)
{
	if (xf_forked)
		return 0;
	return xfgo_cntr_read(CNTR(c)->h, 0);
}

static uint64_t xf_cntr_readerr(struct fid_cntr *c)
{
	if (xf_forked)
		return 0;
	return xfgo_cntr_read(CNTR(c)->h, 1);
}

static int xf_cntr_add(struct fid_cntr *c, uint64_t v)
{
	XF_GUARD();
	return xfgo_cntr_update(CNTR(c)->h, 0, v);
}

static int xf_cntr_set(struct fid_cntr *c, uint64_t v)
{
	XF_GUARD();
	return xfgo_cntr_update(CNTR(c)->h, 1, v);
}

static int xf_cntr_adderr(struct fid_cntr *c, uint64_t v)
{
	XF_GUARD();
	return xfgo_cntr_update(CNTR(c)->h, 2, v);
}

static int xf_cntr_seterr(struct fid_cntr *c, uint64_t v)
{
	XF_GUARD();
	return xfgo_cntr_update(CNTR(c)->h, 3, v);
}

static int xf_cntr_wait(struct fid_cntr *c, uint64_t threshold, int timeout)
{
	XF_GUARD();
	return xfgo_cntr_wait(CNTR(c)->h, threshold, timeout);
}

static struct fi_ops xf_cntr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = xf_cntr_close,
	.bind = xf_no_bind,
	.control = xf_cntr_control,
	.ops_open = xf_no_ops_open,
	.tostr = xf_no_tostr,
	.ops_set = xf_no_ops_set,
};

static struct fi_ops_cntr xf_cntr_ops = {
	.size = sizeof(struct fi_ops_cntr),
	.read = xf_cntr_read,
	.readerr = xf_cntr_readerr,
	.add = xf_cntr_add,
	.set = xf_cntr_set,
	.wait = xf_cntr_wait,
	.adderr = xf_cntr_adderr,
	.seterr = xf_cntr_seterr,
};

struct fid_cntr *xf_cntr_new(uintptr_t h, void *context)
{
	struct xf_cntr *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->cntr.fid.fclass = FI_CLASS_CNTR;
	c->cntr.fid.context = context;
	c->cntr.fid.ops = &xf_cntr_fi_ops;
	c->cntr.ops = &xf_cntr_ops;
	c->h = h;
	return &c->cntr;
}

/* ---- mr ---- */

static int xf_mr_close(struct fid *fid)
{
	XF_GUARD();
	return xfgo_mr_close(MR(fid)->h);
}

static int xf_mr_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	XF_GUARD();
	return xfgo_mr_bind(MR(fid)->h, xf_fid_handle(bfid), flags);
}

static int xf_mr_control(struct fid *fid, int command, void *arg)
{
	XF_GUARD();
	return xfgo_mr_control(MR(fid)->h, command, arg);
}

static struct fi_ops xf_mr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = xf_mr_close,
	.bind = xf_mr_bind,
	.control = xf_mr_control,
	.ops_open = xf_no_ops_open,
	.tostr = xf_no_tostr,
	.ops_set = xf_no_ops_set,
};

struct fid_mr *xf_mr_new(uintptr_t h, void *context, uint64_t key)
{
	struct xf_mr *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->mr.fid.fclass = FI_CLASS_MR;
	m->mr.fid.context = context;
	m->mr.fid.ops = &xf_mr_fi_ops;
	m->mr.mem_desc = &m->mr;
	m->mr.key = key;
	m->h = h;
	return &m->mr;
}

void xf_mr_set_key(struct fid_mr *mr, uint64_t key) { mr->key = key; }

/* ---- handles ---- */

extern struct fi_ops xf_ep_fi_ops;

uintptr_t xf_fid_handle(struct fid *fid)
{
	if (!fid)
		return 0;
	if (fid->ops == &xf_domain_fi_ops)
		return DOM(fid)->h;
	if (fid->ops == &xf_av_fi_ops)
		return AV(fid)->h;
	if (fid->ops == &xf_eq_fi_ops)
		return EQ(fid)->h;
	if (fid->ops == &xf_cq_fi_ops)
		return CQ(fid)->h;
	if (fid->ops == &xf_cntr_fi_ops)
		return CNTR(fid)->h;
	if (fid->ops == &xf_mr_fi_ops)
		return MR(fid)->h;
	if (fid->ops == &xf_ep_fi_ops)
		return XF_CONTAINER(fid, struct xf_ep, ep.fid)->h;
	return xf_waitpoll_handle(fid);
}

uintptr_t xf_desc_handle(void *desc)
{
	struct fid *fid = desc;

	if (!fid || fid->ops != &xf_mr_fi_ops)
		return 0;
	return MR(fid)->h;
}
