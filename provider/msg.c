/*
 * fi_ops_msg. The single-buffer calls pass their buffer to Go as
 * scalars; the vector and msg forms pass the application's iovec and
 * descriptor arrays, which Go views in place (iov_limit is
 * fabric.IovLimit; Go checks the count).
 */
#include "xdpfab.h"
#include "_cgo_export.h"

static ssize_t xf_msg_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, void *context)
{
	XF_GUARD();
	return xfgo_ep_recv(XF_EP(ep)->h, buf, len, xf_desc_handle(desc), src, 0, 0, context, 0);
}

static ssize_t xf_msg_recvv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
			    fi_addr_t src, void *context)
{
	XF_GUARD();
	return xfgo_ep_recvv(XF_EP(ep)->h, (struct iovec *)iov, desc, count, src, 0, 0, 0, context, XF_PLAIN);
}

static ssize_t xf_msg_recvmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	XF_GUARD();
	if (!msg)
		return -FI_EINVAL;
	return xfgo_ep_recvv(XF_EP(ep)->h, (struct iovec *)msg->msg_iov, msg->desc, msg->iov_count, msg->addr, 0, 0,
			     flags, msg->context, XF_MSG);
}

static ssize_t xf_msg_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest,
			   void *context)
{
	XF_GUARD();
	return xfgo_ep_send(XF_EP(ep)->h, (void *)buf, len, xf_desc_handle(desc), dest, 0, 0, context, XF_PLAIN);
}

static ssize_t xf_msg_sendv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
			    fi_addr_t dest, void *context)
{
	XF_GUARD();
	return xfgo_ep_sendv(XF_EP(ep)->h, (struct iovec *)iov, desc, count, dest, 0, 0, 0, context, XF_PLAIN);
}

static ssize_t xf_msg_sendmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	XF_GUARD();
	if (!msg)
		return -FI_EINVAL;
	return xfgo_ep_sendv(XF_EP(ep)->h, (struct iovec *)msg->msg_iov, msg->desc, msg->iov_count, msg->addr,
			     msg->data, 0, flags, msg->context, XF_MSG);
}

static ssize_t xf_msg_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest)
{
	XF_GUARD();
	return xfgo_ep_send(XF_EP(ep)->h, (void *)buf, len, 0, dest, 0, 0, NULL, XF_INJECT);
}

static ssize_t xf_msg_senddata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
			       fi_addr_t dest, void *context)
{
	XF_GUARD();
	return xfgo_ep_send(XF_EP(ep)->h, (void *)buf, len, xf_desc_handle(desc), dest, data, 0, context, XF_DATA);
}

static ssize_t xf_msg_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest)
{
	XF_GUARD();
	return xfgo_ep_send(XF_EP(ep)->h, (void *)buf, len, 0, dest, data, 0, NULL, XF_INJECTDATA);
}

struct fi_ops_msg xf_msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = xf_msg_recv,
	.recvv = xf_msg_recvv,
	.recvmsg = xf_msg_recvmsg,
	.send = xf_msg_send,
	.sendv = xf_msg_sendv,
	.sendmsg = xf_msg_sendmsg,
	.inject = xf_msg_inject,
	.senddata = xf_msg_senddata,
	.injectdata = xf_msg_injectdata,
};
