/* struct fid_fabric and its ops. */
#include "xdpfab.h"
#include "_cgo_export.h"

int xf_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags) { return -FI_ENOSYS; }
int xf_no_control(struct fid *fid, int command, void *arg) { return -FI_ENOSYS; }
int xf_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context)
{
	return -FI_ENOSYS;
}
int xf_no_tostr(const struct fid *fid, char *buf, size_t len) { return -FI_ENOSYS; }
int xf_no_ops_set(struct fid *fid, const char *name, uint64_t flags, void *ops, void *context)
{
	return -FI_ENOSYS;
}

static int xf_fabric_close(struct fid *fid)
{
	XF_GUARD();
	return xfgo_fabric_close(XF_CONTAINER(fid, struct xf_fabric, fabric.fid)->h);
}

static int xf_fabric_domain(struct fid_fabric *f, struct fi_info *info, struct fid_domain **dom, void *context)
{
	XF_GUARD();
	return xfgo_fabric_domain(XF_CONTAINER(f, struct xf_fabric, fabric)->h, info, dom, context);
}

static int xf_fabric_passive_ep(struct fid_fabric *f, struct fi_info *info, struct fid_pep **pep, void *context)
{
	return -FI_ENOSYS; /* FI_EP_MSG only */
}

static int xf_fabric_eq_open(struct fid_fabric *f, struct fi_eq_attr *attr, struct fid_eq **eq, void *context)
{
	XF_GUARD();
	return xfgo_fabric_eq_open(XF_CONTAINER(f, struct xf_fabric, fabric)->h, attr, eq, context);
}

static int xf_fabric_wait_open(struct fid_fabric *f, struct fi_wait_attr *attr, struct fid_wait **waitset)
{
	XF_GUARD();
	return xfgo_wait_open(XF_CONTAINER(f, struct xf_fabric, fabric)->h, attr, waitset);
}

static int xf_fabric_trywait(struct fid_fabric *f, struct fid **fids, int count)
{
	XF_GUARD();
	return xfgo_fabric_trywait(fids, count);
}

static int xf_fabric_domain2(struct fid_fabric *f, struct fi_info *info, struct fid_domain **dom,
			     uint64_t flags, void *context)
{
	if (flags)
		return -FI_EBADFLAGS;
	return xf_fabric_domain(f, info, dom, context);
}

static struct fi_ops xf_fabric_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = xf_fabric_close,
	.bind = xf_no_bind,
	.control = xf_no_control,
	.ops_open = xf_no_ops_open,
	.tostr = xf_no_tostr,
	.ops_set = xf_no_ops_set,
};

static struct fi_ops_fabric xf_fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = xf_fabric_domain,
	.passive_ep = xf_fabric_passive_ep,
	.eq_open = xf_fabric_eq_open,
	.wait_open = xf_fabric_wait_open,
	.trywait = xf_fabric_trywait,
	.domain2 = xf_fabric_domain2,
};

struct fid_fabric *xf_fabric_new(uintptr_t h, void *context)
{
	struct xf_fabric *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->fabric.fid.fclass = FI_CLASS_FABRIC;
	f->fabric.fid.context = context;
	f->fabric.fid.ops = &xf_fabric_fi_ops;
	f->fabric.ops = &xf_fabric_ops;
	f->h = h;
	return &f->fabric;
}

void xf_fabric_free(struct fid_fabric *f)
{
	free(XF_CONTAINER(f, struct xf_fabric, fabric));
}
