/*
 * fi_ops_tagged of struct fid_ep (fi_tagged(3)). The single-buffer calls
 * (what MPI's mtl ofi uses on every message) pass scalars to Go; the
 * vector and msg forms pass the caller's iovec array or fi_msg_tagged,
 * which Go reads in place.
 */
#include "xdpfab.h"
#include "_cgo_export.h"

#define EP(e) XF_CONTAINER(e, struct xf_ep, ep)

/* Modes of xfgo_ep_tsend (tagged.go). */
enum { XF_T_PLAIN = 0, XF_T_DATA = 1, XF_T_INJECT = 2, XF_T_INJECTDATA = 3 };

static ssize_t xf_tagged_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t tag,
			      uint64_t ignore, void *context)
{
	XF_GUARD();
	return xfgo_ep_trecv(EP(ep)->h, buf, len, xf_desc_handle(desc), src, tag, ignore, context);
}

static ssize_t xf_tagged_recvv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
			       fi_addr_t src, uint64_t tag, uint64_t ignore, void *context)
{
	struct fi_msg_tagged msg = {.msg_iov = iov, .desc = desc, .iov_count = count, .addr = src, .tag = tag,
				    .ignore = ignore, .context = context};

	XF_GUARD();
	return xfgo_ep_tmsg(EP(ep)->h, 0, &msg, 0, 1);
}

static ssize_t xf_tagged_recvmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg, uint64_t flags)
{
	XF_GUARD();
	return xfgo_ep_tmsg(EP(ep)->h, 0, (struct fi_msg_tagged *)msg, flags, 0);
}

static ssize_t xf_tagged_send(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest,
			      uint64_t tag, void *context)
{
	XF_GUARD();
	return xfgo_ep_tsend(EP(ep)->h, (void *)buf, len, xf_desc_handle(desc), dest, tag, 0, context, XF_T_PLAIN);
}

static ssize_t xf_tagged_sendv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
			       fi_addr_t dest, uint64_t tag, void *context)
{
	struct fi_msg_tagged msg = {.msg_iov = iov, .desc = desc, .iov_count = count, .addr = dest, .tag = tag,
				    .context = context};

	XF_GUARD();
	return xfgo_ep_tmsg(EP(ep)->h, 1, &msg, 0, 1);
}

static ssize_t xf_tagged_sendmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg, uint64_t flags)
{
	XF_GUARD();
	return xfgo_ep_tmsg(EP(ep)->h, 1, (struct fi_msg_tagged *)msg, flags, 0);
}

static ssize_t xf_tagged_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest, uint64_t tag)
{
	XF_GUARD();
	return xfgo_ep_tsend(EP(ep)->h, (void *)buf, len, 0, dest, tag, 0, NULL, XF_T_INJECT);
}

static ssize_t xf_tagged_senddata(struct fid_ep *ep, const void *buf, size_t len, void *desc, uint64_t data,
				  fi_addr_t dest, uint64_t tag, void *context)
{
	XF_GUARD();
	return xfgo_ep_tsend(EP(ep)->h, (void *)buf, len, xf_desc_handle(desc), dest, tag, data, context, XF_T_DATA);
}

static ssize_t xf_tagged_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data,
				    fi_addr_t dest, uint64_t tag)
{
	XF_GUARD();
	return xfgo_ep_tsend(EP(ep)->h, (void *)buf, len, 0, dest, tag, data, NULL, XF_T_INJECTDATA);
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
