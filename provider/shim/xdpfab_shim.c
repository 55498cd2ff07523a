/*
 * libxdpfab-fi.so: the part of the xdpfab provider that libfabric loads.
 *
 * libfabric dlopens every *-fi.so in its provider directory and calls
 * fi_prov_ini in each, whatever provider the process will use. A Go
 * c-shared library starts the Go runtime (threads, signal handlers) as soon
 * as it is loaded, so this shim is plain C: fi_prov_ini returns a static
 * struct fi_provider and nothing else happens until libfabric calls its
 * getinfo or fabric entry, which it does only when the application's hints
 * do not name another provider (fabric_attr->prov_name) and FI_PROVIDER
 * does not exclude xdpfab. Only then is the Go part, libxdpfab-go.so,
 * loaded (RTLD_LOCAL) and asked.
 *
 * Where the Go part is found: $XDPFAB_GO_LIB (ignored in setuid
 * processes); else libxdpfab-go.so beside this library; else the
 * directory compiled in as XDPFAB_GO_LIBDIR.
 *
 * One runtime per process: libxdpfab-go.so carries the soname
 * libxdpfab-go.so, and before loading a path the shim asks the dynamic
 * loader for an object of that soname already loaded (RTLD_NOLOAD), so two
 * copies of the shim (two directories on FI_PROVIDER_PATH, or a second
 * copy of the Go part) share the first runtime. libfabric itself calls
 * only one of two same-named providers (the other is hidden).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>
#include <rdma/providers/fi_log.h>

#define XDPFAB_GO_SONAME "libxdpfab-go.so"
#ifndef XDPFAB_GO_LIBDIR
#define XDPFAB_GO_LIBDIR "/usr/lib/x86_64-linux-gnu/libfabric"
#endif
#define XDPFAB_PROV_VERSION FI_VERSION(1, 0) /* fabric.ProviderVersion */

typedef int (*getinfo_fn)(uint32_t, const char *, const char *, uint64_t,
			  const struct fi_info *, struct fi_info **);
typedef int (*fabric_fn)(struct fi_fabric_attr *, struct fid_fabric **, void *);
typedef void (*cleanup_fn)(void);

static struct fi_provider xdpfab_prov;

/* The Go part's entries, set once by load_go under load_mu. */
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static int load_state; /* 0 not tried, 1 loaded, -1 failed */
static getinfo_fn go_getinfo;
static fabric_fn go_fabric;
static cleanup_fn go_cleanup;

static void *open_go(void)
{
	char path[PATH_MAX];
	const char *env;
	Dl_info self;
	void *h;

	h = dlopen(XDPFAB_GO_SONAME, RTLD_NOW | RTLD_NOLOAD);
	if (h)
		return h;

	env = secure_getenv("XDPFAB_GO_LIB");
	if (env && *env)
		return dlopen(env, RTLD_NOW | RTLD_LOCAL);

	if (dladdr((void *)&xdpfab_prov, &self) && self.dli_fname) {
		const char *slash = strrchr(self.dli_fname, '/');
		if (slash && (size_t)(slash - self.dli_fname) + sizeof(XDPFAB_GO_SONAME) + 1 < sizeof(path)) {
			snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - self.dli_fname),
				 self.dli_fname, XDPFAB_GO_SONAME);
			h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
			if (h)
				return h;
		}
	}
	return dlopen(XDPFAB_GO_LIBDIR "/" XDPFAB_GO_SONAME, RTLD_NOW | RTLD_LOCAL);
}

static int load_go(void)
{
	int state;
	void *h;

	pthread_mutex_lock(&load_mu);
	if (load_state == 0) {
		load_state = -1;
		h = open_go();
		if (!h) {
			FI_WARN(&xdpfab_prov, FI_LOG_CORE, "cannot load %s: %s\n",
				XDPFAB_GO_SONAME, dlerror());
		} else {
			go_getinfo = (getinfo_fn)dlsym(h, "xdpfab_getinfo");
			go_fabric = (fabric_fn)dlsym(h, "xdpfab_fabric");
			go_cleanup = (cleanup_fn)dlsym(h, "xdpfab_cleanup");
			if (go_getinfo && go_fabric && go_cleanup)
				load_state = 1;
			else
				FI_WARN(&xdpfab_prov, FI_LOG_CORE,
					"%s lacks the xdpfab entry points\n", XDPFAB_GO_SONAME);
			/* A Go library cannot be unloaded: h stays open. */
		}
	}
	state = load_state;
	pthread_mutex_unlock(&load_mu);
	return state;
}

static int shim_getinfo(uint32_t version, const char *node, const char *service,
			uint64_t flags, const struct fi_info *hints, struct fi_info **info)
{
	/* Cheap refusals that need no Go: endpoint types xdpfab does not have. */
	if (hints && hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC &&
	    hints->ep_attr->type != FI_EP_RDM)
		return -FI_ENODATA;
	if (load_go() != 1)
		return -FI_ENODATA;
	return go_getinfo(version, node, service, flags, hints, info);
}

static int shim_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	if (load_go() != 1)
		return -FI_ENODEV;
	return go_fabric(attr, fabric, context);
}

static void shim_cleanup(void)
{
	cleanup_fn fn = NULL;

	pthread_mutex_lock(&load_mu);
	if (load_state == 1)
		fn = go_cleanup;
	pthread_mutex_unlock(&load_mu);
	if (fn)
		fn();
}

static struct fi_provider xdpfab_prov = {
	.version = XDPFAB_PROV_VERSION,
	.fi_version = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION),
	.name = "xdpfab",
	.getinfo = shim_getinfo,
	.fabric = shim_fabric,
	.cleanup = shim_cleanup,
};

__attribute__((visibility("default")))
struct fi_provider *fi_prov_ini(void)
{
	return &xdpfab_prov;
}
