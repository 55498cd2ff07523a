/*
 * fi_ops_tagged: the msg entries (msg.c) with XF_TAGGED added to the
 * mode and the tag (and for receives the ignore bits) passed along.
 */
#include "xdpfab.h"
#include "_cgo_export.h"

static ssize_t xf_tagged_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t tag,
			      uint64_t ignore, void *context)
{
	XF_GUARD();
	return xfgo_ep_recv(XF_EP(ep)->h, buf, len, xf_desc_handle(desc), src, tag, ignore, context, 1);
}

static ssize_t xf_tagged_recvv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
			       fi_addr_t src, uint64_t tag, uint64_t ignore, void *context)
{
	XF_GUARD();
	return xfgo_ep_recvv(XF_EP(ep)->h, (struct iovec *)iov, desc, count, src, tag, ignore, 0, context,
			     XF_PLAIN | XF_TAGGED);
}

static ssize_t xf_tagged_recvmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg, uint64_t flags)
{
	XF_GUARD();
	if (!msg)
		return -FI_EINVAL;
	return xfgo_ep_recvv(XF_EP(ep)->h, (struct iovec *)msg->msg_iov, msg->desc, msg->iov_count, msg->addr,
			     msg->tag, msg->ignore, flags, msg->context, XF_MSG | XF_TAGGED);
}

static ssize_t xf_tagged_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest,
			      uint64_t tag, void *context)
{
	XF_GUARD();
	return xfgo_ep_send(XF_EP(ep)->h, (void *)buf, len, xf_desc_handle(desc), dest, 0, tag, context,
			    XF_PLAIN | XF_TAGGED);
}

static ssize_t xf_tagged_sendv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
			       fi_addr_t dest, uint64_t tag, void *context)
{
	XF_GUARD();
	return xfgo_ep_sendv(XF_EP(ep)->h, (struct iovec *)iov, desc, count, dest, 0, tag, 0, context,
			     XF_PLAIN | XF_TAGGED);
}

static ssize_t xf_tagged_sendmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg, uint64_t flags)
{
	XF_GUARD();
	if (!msg)
		return -FI_EINVAL;
	return xfgo_ep_sendv(XF_EP(ep)->h, (struct iovec *)msg->msg_iov, msg->desc, msg->iov_count, msg->addr,
			     msg->data, msg->tag, flags, msg->context, XF_MSG | XF_TAGGED);
}

static ssize_t xf_tagged_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest, uint64_t tag)
{
	XF_GUARD();
	return xfgo_ep_send(XF_EP(ep)->h, (void *)buf, len, 0, dest, 0, tag, NULL, XF_INJECT | XF_TAGGED);
}

static ssize_t xf_tagged_senddata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
				  fi_addr_t dest, uint64_t tag, void *context)
{
	XF_GUARD();
	return xfgo_ep_send(XF_EP(ep)->h, (void *)buf, len, xf_desc_handle(desc), dest, data, tag, context,
			    XF_DATA | XF_TAGGED);
}

static ssize_t xf_tagged_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data,
				    fi_addr_t dest, uint64_t tag)
{
	XF_GUARD();
	return xfgo_ep_send(XF_EP(ep)->h, (void *)buf, len, 0, dest, data, tag, NULL, XF_INJECTDATA | XF_TAGGED);
}

struct fi_ops_tagged xf_tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = xf_tagged_recv,
	.recvv = xf_tagged_recvv,
	.recvmsg = xf_tagged_recvmsg,
	.send = xf_tagged_send,
	.sendv = xf_tagged_sendv,
	.sendmsg = xf_tagged_sendmsg,
	.inject = xf_tagged_inject,
	.senddata = xf_tagged_senddata,
	.injectdata = xf_tagged_injectdata,
};
