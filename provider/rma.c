/*
 * fi_ops_rma. The single-buffer calls pass scalars to Go; readv/writev
 * and readmsg/writemsg pass the application's iovec, descriptor and
 * fi_rma_iov arrays, viewed in place by Go (which checks the limits).
 */
#include "xdpfab.h"
#include "_cgo_export.h"

static ssize_t rma(struct fid_ep *ep, int write, const void *buf, size_t len, void *desc, fi_addr_t peer,
		   uint64_t addr, uint64_t key, uint64_t data, void *context, int mode)
{
	XF_GUARD();
	return xfgo_ep_rma(XF_EP(ep)->h, write, (void *)buf, len, xf_desc_handle(desc), peer, addr, key, data,
			   context, mode);
}

static ssize_t rmav(struct fid_ep *ep, int write, const struct iovec *iov, void **desc, size_t count,
		    fi_addr_t peer, const struct fi_rma_iov *rma_iov, size_t rma_count, uint64_t data,
		    uint64_t flags, void *context, int mode)
{
	XF_GUARD();
	return xfgo_ep_rmav(XF_EP(ep)->h, write, (struct iovec *)iov, desc, count, peer, (struct fi_rma_iov *)rma_iov,
			    rma_count, data, flags, context, mode);
}

static ssize_t xf_rma_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t addr,
			   uint64_t key, void *context)
{
	return rma(ep, 0, buf, len, desc, src, addr, key, 0, context, XF_PLAIN);
}

static ssize_t xf_rma_readv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
			    fi_addr_t src, uint64_t addr, uint64_t key, void *context)
{
	struct fi_rma_iov r = {.addr = addr, .key = key};

	for (size_t i = 0; iov && i < count; i++)
		r.len += iov[i].iov_len;
	return rmav(ep, 0, iov, desc, count, src, &r, 1, 0, 0, context, XF_PLAIN);
}

static ssize_t xf_rma_readmsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return rmav(ep, 0, msg->msg_iov, msg->desc, msg->iov_count, msg->addr, msg->rma_iov, msg->rma_iov_count,
		    msg->data, flags, msg->context, XF_MSG);
}

static ssize_t xf_rma_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest,
			    uint64_t addr, uint64_t key, void *context)
{
	return rma(ep, 1, buf, len, desc, dest, addr, key, 0, context, XF_PLAIN);
}

static ssize_t xf_rma_writev(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
			     fi_addr_t dest, uint64_t addr, uint64_t key, void *context)
{
	struct fi_rma_iov r = {.addr = addr, .key = key};

	for (size_t i = 0; iov && i < count; i++)
		r.len += iov[i].iov_len;
	return rmav(ep, 1, iov, desc, count, dest, &r, 1, 0, 0, context, XF_PLAIN);
}

static ssize_t xf_rma_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return rmav(ep, 1, msg->msg_iov, msg->desc, msg->iov_count, msg->addr, msg->rma_iov, msg->rma_iov_count,
		    msg->data, flags, msg->context, XF_MSG);
}

static ssize_t xf_rma_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest, uint64_t addr,
			     uint64_t key)
{
	return rma(ep, 1, buf, len, NULL, dest, addr, key, 0, NULL, XF_INJECT);
}

static ssize_t xf_rma_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
				fi_addr_t dest, uint64_t addr, uint64_t key, void *context)
{
	return rma(ep, 1, buf, len, desc, dest, addr, key, data, context, XF_DATA);
}

static ssize_t xf_rma_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest,
				 uint64_t addr, uint64_t key)
{
	return rma(ep, 1, buf, len, NULL, dest, addr, key, data, NULL, XF_INJECTDATA);
}

struct fi_ops_rma xf_rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = xf_rma_read,
	.readv = xf_rma_readv,
	.readmsg = xf_rma_readmsg,
	.write = xf_rma_write,
	.writev = xf_rma_writev,
	.writemsg = xf_rma_writemsg,
	.inject = xf_rma_inject,
	.writedata = xf_rma_writedata,
	.injectdata = xf_rma_injectdata,
};
