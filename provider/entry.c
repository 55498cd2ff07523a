/* The C entries of libxdpfab-go.so the shim calls, and the fork guard. */
#include <pthread.h>

#include "xdpfab.h"
#include "_cgo_export.h"

volatile int xf_forked;

static void xf_atfork_child(void)
{
	xf_forked = 1;
}

/* Called once from the Go package's init. */
void xf_runtime_init(void)
{
	pthread_atfork(NULL, NULL, xf_atfork_child);
}

int xdpfab_getinfo(uint32_t version, const char *node, const char *service,
		   uint64_t flags, const struct fi_info *hints, struct fi_info **info)
{
	if (xf_forked)
		return -FI_ENODATA; /* other providers still work in the child */
	return xfgo_getinfo(version, (char *)node, (char *)service, flags,
			    (struct fi_info *)hints, info);
}

int xdpfab_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	if (xf_forked)
		return -FI_EOTHER;
	return xfgo_fabric(attr, fabric, context);
}

void xdpfab_cleanup(void)
{
	if (xf_forked)
		return;
	xfgo_cleanup();
}

struct fi_info *xf_allocinfo(void)
{
	return fi_dupinfo(NULL);
}

void xf_freeinfo(struct fi_info *info)
{
	fi_freeinfo(info);
}
