/*
 * struct fid_ep and its ops: fi_ops_ep, cm, msg, rma, atomic, tagged and
 * collective tables here; msg.c, tagged.c and rma.c hold the fi_ops_msg,
 * fi_ops_tagged and fi_ops_rma tables. The atomic calls pass the
 * fi_msg_atomic (built here for the non-msg forms) to Go.
 */
#include <rdma/fi_collective.h>

#include "xdpfab.h"
#include "_cgo_export.h"

#define EP(e) XF_EP(e)


static int xf_ep_close(struct fid *fid)
{
	XF_GUARD();
	return xfgo_ep_close(EP(fid)->h);
}

static int xf_ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	XF_GUARD();
	return xfgo_ep_bind(EP(fid)->h, xf_fid_handle(bfid), flags);
}

static int xf_ep_control(struct fid *fid, int command, void *arg)
{
	XF_GUARD();
	return xfgo_ep_control(EP(fid)->h, command, arg);
}

struct fi_ops xf_ep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = xf_ep_close,
	.bind = xf_ep_bind,
	.control = xf_ep_control,
	.ops_open = xf_no_ops_open,
	.tostr = xf_no_tostr,
	.ops_set = xf_no_ops_set,
};

/* ---- fi_ops_ep ---- */

static ssize_t xf_ep_cancel(fid_t fid, void *context)
{
	XF_GUARD();
	return xfgo_ep_cancel(EP(fid)->h, context);
}

static int xf_ep_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen)
{
	XF_GUARD();
	return xfgo_ep_getopt(EP(fid)->h, level, optname, optval, optlen);
}

static int xf_ep_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen)
{
	XF_GUARD();
	return xfgo_ep_setopt(EP(fid)->h, level, optname, (void *)optval, optlen);
}

static int xf_ep_tx_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr, struct fid_ep **tx_ep,
			void *context)
{
	return -FI_ENOSYS;
}

static int xf_ep_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr, struct fid_ep **rx_ep,
			void *context)
{
	return -FI_ENOSYS;
}

static ssize_t xf_ep_size_left(struct fid_ep *ep) { return -FI_ENOSYS; }

static struct fi_ops_ep xf_ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = xf_ep_cancel,
	.getopt = xf_ep_getopt,
	.setopt = xf_ep_setopt,
	.tx_ctx = xf_ep_tx_ctx,
	.rx_ctx = xf_ep_rx_ctx,
	.rx_size_left = xf_ep_size_left,
	.tx_size_left = xf_ep_size_left,
};

/* ---- cm ---- */

static int xf_cm_setname(fid_t fid, void *addr, size_t addrlen)
{
	XF_GUARD();
	return xfgo_ep_setname(EP(fid)->h, addr, addrlen);
}

static int xf_cm_getname(fid_t fid, void *addr, size_t *addrlen)
{
	XF_GUARD();
	return xfgo_ep_getname(EP(fid)->h, addr, addrlen);
}

static int xf_cm_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen) { return -FI_ENOSYS; }
static int xf_cm_connect(struct fid_ep *ep, const void *addr, const void *param, size_t paramlen)
{
	return -FI_ENOSYS;
}
static int xf_cm_listen(struct fid_pep *pep) { return -FI_ENOSYS; }
static int xf_cm_accept(struct fid_ep *ep, const void *param, size_t paramlen) { return -FI_ENOSYS; }
static int xf_cm_reject(struct fid_pep *pep, fid_t handle, const void *param, size_t paramlen)
{
	return -FI_ENOSYS;
}
static int xf_cm_shutdown(struct fid_ep *ep, uint64_t flags) { return -FI_ENOSYS; }
static int xf_cm_join(struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc, void *context)
{
	return -FI_ENOSYS;
}

static struct fi_ops_cm xf_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = xf_cm_setname,
	.getname = xf_cm_getname,
	.getpeer = xf_cm_getpeer,
	.connect = xf_cm_connect,
	.listen = xf_cm_listen,
	.accept = xf_cm_accept,
	.reject = xf_cm_reject,
	.shutdown = xf_cm_shutdown,
	.join = xf_cm_join,
};

/* ---- atomic ---- */

enum { XF_BASE = 0, XF_FETCH = 1, XF_COMPARE = 2 };

static ssize_t atomic(struct fid_ep *ep, int class, const struct fi_msg_atomic *msg, const struct fi_ioc *comparev,
		      void **compare_desc, size_t compare_count, struct fi_ioc *resultv, void **result_desc,
		      size_t result_count, uint64_t flags, int mode)
{
	XF_GUARD();
	return xfgo_ep_atomic(EP(ep)->h, class, (struct fi_msg_atomic *)msg, (struct fi_ioc *)comparev,
			      compare_desc, compare_count, resultv, result_desc, result_count, flags, mode);
}

#define ATOMIC_MSG(iov_, desc_, count_, dest, addr_, key_, dt, op_, ctx)                                   \
	struct fi_rma_ioc rma_ioc = {.addr = (addr_), .count = 0, .key = (key_)};                           \
	struct fi_msg_atomic msg = {.msg_iov = (iov_), .desc = (desc_), .iov_count = (count_), .addr = (dest), \
				    .rma_iov = &rma_ioc, .rma_iov_count = 1, .datatype = (dt), .op = (op_), \
				    .context = (ctx)};                                                      \
	for (size_t i_ = 0; i_ < (count_); i_++)                                                            \
		rma_ioc.count += (iov_)[i_].count

static ssize_t xf_atomic_write(struct fid_ep *ep, const void *buf, size_t count, void *desc, fi_addr_t dest,
			       uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op, void *context)
{
	struct fi_ioc ioc = {.addr = (void *)buf, .count = count};
	void *d[1] = {desc};
	ATOMIC_MSG(&ioc, d, 1, dest, addr, key, dt, op, context);
	return atomic(ep, XF_BASE, &msg, NULL, NULL, 0, NULL, NULL, 0, 0, XF_PLAIN);
}

static ssize_t xf_atomic_writev(struct fid_ep *ep, const struct fi_ioc *iov, void **desc, size_t count,
				fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op,
				void *context)
{
	ATOMIC_MSG(iov, desc, count, dest, addr, key, dt, op, context);
	return atomic(ep, XF_BASE, &msg, NULL, NULL, 0, NULL, NULL, 0, 0, XF_PLAIN);
}

static ssize_t xf_atomic_writemsg(struct fid_ep *ep, const struct fi_msg_atomic *msg, uint64_t flags)
{
	return atomic(ep, XF_BASE, msg, NULL, NULL, 0, NULL, NULL, 0, flags, XF_MSG);
}

static ssize_t xf_atomic_inject(struct fid_ep *ep, const void *buf, size_t count, fi_addr_t dest, uint64_t addr,
				uint64_t key, enum fi_datatype dt, enum fi_op op)
{
	struct fi_ioc ioc = {.addr = (void *)buf, .count = count};
	ATOMIC_MSG(&ioc, NULL, 1, dest, addr, key, dt, op, NULL);
	return atomic(ep, XF_BASE, &msg, NULL, NULL, 0, NULL, NULL, 0, 0, XF_INJECT);
}

static ssize_t xf_atomic_readwrite(struct fid_ep *ep, const void *buf, size_t count, void *desc, void *result,
				   void *result_desc, fi_addr_t dest, uint64_t addr, uint64_t key,
				   enum fi_datatype dt, enum fi_op op, void *context)
{
	struct fi_ioc ioc = {.addr = (void *)buf, .count = count};
	struct fi_ioc res = {.addr = result, .count = count};
	void *d[1] = {desc}, *rd[1] = {result_desc};
	ATOMIC_MSG(&ioc, d, 1, dest, addr, key, dt, op, context);
	return atomic(ep, XF_FETCH, &msg, NULL, NULL, 0, &res, rd, 1, 0, XF_PLAIN);
}

static ssize_t xf_atomic_readwritev(struct fid_ep *ep, const struct fi_ioc *iov, void **desc, size_t count,
				    struct fi_ioc *resultv, void **result_desc, size_t result_count,
				    fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
				    enum fi_op op, void *context)
{
	ATOMIC_MSG(iov, desc, count, dest, addr, key, dt, op, context);
	return atomic(ep, XF_FETCH, &msg, NULL, NULL, 0, resultv, result_desc, result_count, 0, XF_PLAIN);
}

static ssize_t xf_atomic_readwritemsg(struct fid_ep *ep, const struct fi_msg_atomic *msg, struct fi_ioc *resultv,
				      void **result_desc, size_t result_count, uint64_t flags)
{
	return atomic(ep, XF_FETCH, msg, NULL, NULL, 0, resultv, result_desc, result_count, flags, XF_MSG);
}

static ssize_t xf_atomic_compwrite(struct fid_ep *ep, const void *buf, size_t count, void *desc,
				   const void *compare, void *compare_desc, void *result, void *result_desc,
				   fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
				   enum fi_op op, void *context)
{
	struct fi_ioc ioc = {.addr = (void *)buf, .count = count};
	struct fi_ioc cmp = {.addr = (void *)compare, .count = count};
	struct fi_ioc res = {.addr = result, .count = count};
	void *d[1] = {desc}, *cd[1] = {compare_desc}, *rd[1] = {result_desc};
	ATOMIC_MSG(&ioc, d, 1, dest, addr, key, dt, op, context);
	return atomic(ep, XF_COMPARE, &msg, &cmp, cd, 1, &res, rd, 1, 0, XF_PLAIN);
}

static ssize_t xf_atomic_compwritev(struct fid_ep *ep, const struct fi_ioc *iov, void **desc, size_t count,
				    const struct fi_ioc *comparev, void **compare_desc, size_t compare_count,
				    struct fi_ioc *resultv, void **result_desc, size_t result_count,
				    fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
				    enum fi_op op, void *context)
{
	ATOMIC_MSG(iov, desc, count, dest, addr, key, dt, op, context);
	return atomic(ep, XF_COMPARE, &msg, comparev, compare_desc, compare_count, resultv, result_desc,
		      result_count, 0, XF_PLAIN);
}

static ssize_t xf_atomic_compwritemsg(struct fid_ep *ep, const struct fi_msg_atomic *msg,
				      const struct fi_ioc *comparev, void **compare_desc, size_t compare_count,
				      struct fi_ioc *resultv, void **result_desc, size_t result_count,
				      uint64_t flags)
{
	return atomic(ep, XF_COMPARE, msg, comparev, compare_desc, compare_count, resultv, result_desc,
		      result_count, flags, XF_MSG);
}

static int xf_atomic_writevalid(struct fid_ep *ep, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	XF_GUARD();
	return xfgo_ep_atomicvalid(EP(ep)->h, XF_BASE, dt, op, count);
}

static int xf_atomic_readwritevalid(struct fid_ep *ep, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	XF_GUARD();
	return xfgo_ep_atomicvalid(EP(ep)->h, XF_FETCH, dt, op, count);
}

static int xf_atomic_compwritevalid(struct fid_ep *ep, enum fi_datatype dt, enum fi_op op, size_t *count)
{
	XF_GUARD();
	return xfgo_ep_atomicvalid(EP(ep)->h, XF_COMPARE, dt, op, count);
}

static struct fi_ops_atomic xf_atomic_ops = {
	.size = sizeof(struct fi_ops_atomic),
	.write = xf_atomic_write,
	.writev = xf_atomic_writev,
	.writemsg = xf_atomic_writemsg,
	.inject = xf_atomic_inject,
	.readwrite = xf_atomic_readwrite,
	.readwritev = xf_atomic_readwritev,
	.readwritemsg = xf_atomic_readwritemsg,
	.compwrite = xf_atomic_compwrite,
	.compwritev = xf_atomic_compwritev,
	.compwritemsg = xf_atomic_compwritemsg,
	.writevalid = xf_atomic_writevalid,
	.readwritevalid = xf_atomic_readwritevalid,
	.compwritevalid = xf_atomic_compwritevalid,
};

/* ---- collective: FI_COLLECTIVE is not offered ---- */

static ssize_t xf_coll_barrier(struct fid_ep *ep, fi_addr_t coll_addr, void *context) { return -FI_ENOSYS; }
static ssize_t xf_coll_broadcast(struct fid_ep *ep, void *buf, size_t count, void *desc, fi_addr_t coll_addr,
				 fi_addr_t root_addr, enum fi_datatype datatype, uint64_t flags, void *context)
{
	return -FI_ENOSYS;
}
#define XF_COLL_RESULT(name)                                                                            \
	static ssize_t name(struct fid_ep *ep, const void *buf, size_t count, void *desc, void *result,     \
			    void *result_desc, fi_addr_t coll_addr, enum fi_datatype datatype, uint64_t flags, \
			    void *context)                                                              \
	{                                                                                               \
		return -FI_ENOSYS;                                                                      \
	}
#define XF_COLL_OP(name)                                                                                \
	static ssize_t name(struct fid_ep *ep, const void *buf, size_t count, void *desc, void *result,     \
			    void *result_desc, fi_addr_t coll_addr, enum fi_datatype datatype, enum fi_op op,  \
			    uint64_t flags, void *context)                                              \
	{                                                                                               \
		return -FI_ENOSYS;                                                                      \
	}
#define XF_COLL_ROOT(name)                                                                              \
	static ssize_t name(struct fid_ep *ep, const void *buf, size_t count, void *desc, void *result,     \
			    void *result_desc, fi_addr_t coll_addr, fi_addr_t root_addr,                  \
			    enum fi_datatype datatype, uint64_t flags, void *context)                   \
	{                                                                                               \
		return -FI_ENOSYS;                                                                      \
	}
XF_COLL_RESULT(xf_coll_alltoall)
XF_COLL_RESULT(xf_coll_allgather)
XF_COLL_OP(xf_coll_allreduce)
XF_COLL_OP(xf_coll_reduce_scatter)
XF_COLL_ROOT(xf_coll_scatter)
XF_COLL_ROOT(xf_coll_gather)
static ssize_t xf_coll_reduce(struct fid_ep *ep, const void *buf, size_t count, void *desc, void *result,
			      void *result_desc, fi_addr_t coll_addr, fi_addr_t root_addr, enum fi_datatype datatype,
			      enum fi_op op, uint64_t flags, void *context)
{
	return -FI_ENOSYS;
}
static ssize_t xf_coll_msg(struct fid_ep *ep, const struct fi_msg_collective *msg, struct fi_ioc *resultv,
			   void **result_desc, size_t result_count, uint64_t flags)
{
	return -FI_ENOSYS;
}
static ssize_t xf_coll_barrier2(struct fid_ep *ep, fi_addr_t coll_addr, uint64_t flags, void *context)
{
	return -FI_ENOSYS;
}

static struct fi_ops_collective xf_coll_ops = {
	.size = sizeof(struct fi_ops_collective),
	.barrier = xf_coll_barrier,
	.broadcast = xf_coll_broadcast,
	.alltoall = xf_coll_alltoall,
	.allreduce = xf_coll_allreduce,
	.allgather = xf_coll_allgather,
	.reduce_scatter = xf_coll_reduce_scatter,
	.reduce = xf_coll_reduce,
	.scatter = xf_coll_scatter,
	.gather = xf_coll_gather,
	.msg = xf_coll_msg,
	.barrier2 = xf_coll_barrier2,
};

struct fid_ep *xf_ep_new(uintptr_t h, void *context)
{
	struct xf_ep *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->ep.fid.fclass = FI_CLASS_EP;
	e->ep.fid.context = context;
	e->ep.fid.ops = &xf_ep_fi_ops;
	e->ep.ops = &xf_ep_ops;
	e->ep.cm = &xf_cm_ops;
	e->ep.msg = &xf_msg_ops;
	e->ep.rma = &xf_rma_ops;
	e->ep.tagged = &xf_tagged_ops;
	e->ep.atomic = &xf_atomic_ops;
	e->ep.collective = &xf_coll_ops;
	e->h = h;
	return &e->ep;
}
