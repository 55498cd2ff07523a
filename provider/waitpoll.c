/*
 * The fids of wait sets (struct fid_wait, fi_wait_open on the fabric) and
 * poll sets (struct fid_poll, fi_poll_open on a domain), and their ops
 * tables. Each op is one call into Go (wait.go, poll.go), after the fork
 * guard.
 */
#include "xdpfab.h"
#include "_cgo_export.h"

#define WAIT(w) XF_CONTAINER(w, struct xf_wait, wait)
#define POLL(p) XF_CONTAINER(p, struct xf_poll, poll)

/* ---- wait set ---- */

static int xf_wait_close(struct fid *fid)
{
	XF_GUARD();
	return xfgo_wait_close(WAIT(fid)->h);
}

static int xf_wait_control(struct fid *fid, int command, void *arg)
{
	XF_GUARD();
	return xfgo_wait_control(WAIT(fid)->h, command, arg);
}

static int xf_wait_wait(struct fid_wait *w, int timeout)
{
	XF_GUARD();
	return xfgo_wait_wait(WAIT(w)->h, timeout);
}

static struct fi_ops xf_wait_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = xf_wait_close,
	.bind = xf_no_bind,
	.control = xf_wait_control,
	.ops_open = xf_no_ops_open,
	.tostr = xf_no_tostr,
	.ops_set = xf_no_ops_set,
};

static struct fi_ops_wait xf_wait_ops = {
	.size = sizeof(struct fi_ops_wait),
	.wait = xf_wait_wait,
};

/* fi_wait_open has no context argument: fid.context stays NULL. */
struct fid_wait *xf_wait_new(uintptr_t h)
{
	struct xf_wait *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->wait.fid.fclass = FI_CLASS_WAIT;
	w->wait.fid.ops = &xf_wait_fi_ops;
	w->wait.ops = &xf_wait_ops;
	w->h = h;
	return &w->wait;
}

/* ---- poll set ---- */

static int xf_poll_close(struct fid *fid)
{
	XF_GUARD();
	return xfgo_poll_close(POLL(fid)->h);
}

static int xf_poll_add(struct fid_poll *p, struct fid *event_fid, uint64_t flags)
{
	XF_GUARD();
	return xfgo_poll_update(POLL(p)->h, xf_fid_handle(event_fid), flags, 0);
}

static int xf_poll_del(struct fid_poll *p, struct fid *event_fid, uint64_t flags)
{
	XF_GUARD();
	return xfgo_poll_update(POLL(p)->h, xf_fid_handle(event_fid), flags, 1);
}

static int xf_poll_poll(struct fid_poll *p, void **context, int count)
{
	XF_GUARD();
	return xfgo_poll(POLL(p)->h, context, count);
}

static struct fi_ops xf_poll_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = xf_poll_close,
	.bind = xf_no_bind,
	.control = xf_no_control,
	.ops_open = xf_no_ops_open,
	.tostr = xf_no_tostr,
	.ops_set = xf_no_ops_set,
};

static struct fi_ops_poll xf_poll_ops = {
	.size = sizeof(struct fi_ops_poll),
	.poll = xf_poll_poll,
	.poll_add = xf_poll_add,
	.poll_del = xf_poll_del,
};

/* fi_poll_open has no context argument: fid.context stays NULL. */
struct fid_poll *xf_poll_new(uintptr_t h)
{
	struct xf_poll *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->poll.fid.fclass = FI_CLASS_POLL;
	p->poll.fid.ops = &xf_poll_fi_ops;
	p->poll.ops = &xf_poll_ops;
	p->h = h;
	return &p->poll;
}

uintptr_t xf_waitpoll_handle(struct fid *fid)
{
	if (fid->ops == &xf_wait_fi_ops)
		return WAIT(fid)->h;
	if (fid->ops == &xf_poll_fi_ops)
		return POLL(fid)->h;
	return 0;
}
