/*
 * The C side of libxdpfab-go.so: the fid structures libfabric's inline
 * calls see and the ops tables behind them. Each provider object is a C
 * struct that begins with the libfabric fid structure (so the pointer the
 * application holds is the provider's) followed by the Go handle of the
 * object (a runtime/cgo.Handle): fid.context stays the application's.
 *
 * fi_cq_read is served from a completion ring in C memory (cqring.h)
 * without entering Go while it has completions.
 */
#ifndef XDPFAB_PROVIDER_H
#define XDPFAB_PROVIDER_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "cqring.h"

/* Set in a child process after fork: the Go runtime did not survive the
 * fork (only the forking thread did), so nothing may enter Go there. */
extern volatile int xf_forked;

void xf_runtime_init(void);

/* Entries the C shim (libxdpfab-fi.so) looks up with dlsym. */
int xdpfab_getinfo(uint32_t version, const char *node, const char *service,
		   uint64_t flags, const struct fi_info *hints, struct fi_info **info);
int xdpfab_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
void xdpfab_cleanup(void);

#define XF_CONTAINER(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* Every op that would enter Go first checks the fork guard. */
#define XF_GUARD()                     \
	do {                           \
		if (xf_forked)         \
			return -FI_EOTHER; \
	} while (0)

struct xf_fabric {
	struct fid_fabric fabric;
	uintptr_t h;
};

struct xf_domain {
	struct fid_domain domain;
	uintptr_t h;
};

struct xf_ep {
	struct fid_ep ep;
	uintptr_t h;
};

struct xf_av {
	struct fid_av av;
	uintptr_t h;
};

struct xf_eq {
	struct fid_eq eq;
	uintptr_t h;
};

/* ring holds the CQ's success completions (cqring.h): fi_cq_read takes
 * them without entering Go, and enters Go only when the ring is empty and
 * the Go CQ holds something (an error) or manual is set (the read drives
 * or polls progress). NULL: every read goes through Go. */
struct xf_cq {
	struct fid_cq cq;
	uintptr_t h;
	int format;
	int manual; /* an empty read calls Go (manual progress: drives it; auto: polls, Engine.Poll) */
	unsigned yield_polls; /* sched_yield every this many empty reads in a row (0: never): cqyield.c */
	unsigned empty;       /* empty reads in a row */
	int waits_long;       /* the last wait (run of empty reads) took a round trip: the next one yields at once (cqyield.c) */
	uint64_t wait_start;  /* CLOCK_MONOTONIC ns of the run's first empty read */
	unsigned alone;       /* yields in a row that came back at once, at most ALONE_YIELDS (cqyield.c) */
	size_t entry_size;
	struct xf_cqring *ring;
};

struct xf_cntr {
	struct fid_cntr cntr;
	uintptr_t h;
};

struct xf_mr {
	struct fid_mr mr;
	uintptr_t h;
};

/* A wait set (fi_wait_open) and a poll set (fi_poll_open): waitpoll.c. */
struct xf_wait {
	struct fid_wait wait;
	uintptr_t h;
};

struct xf_poll {
	struct fid_poll poll;
	uintptr_t h;
};

struct fid_fabric *xf_fabric_new(uintptr_t h, void *context);
void xf_fabric_free(struct fid_fabric *f);
struct fid_domain *xf_domain_new(uintptr_t h, void *context);
struct fid_ep *xf_ep_new(uintptr_t h, void *context);
struct fid_av *xf_av_new(uintptr_t h, void *context);
void xf_av_attr_out(struct fi_av_attr *attr, int type, uint64_t map_addr);
struct fid_eq *xf_eq_new(uintptr_t h, void *context);
struct fid_cq *xf_cq_new(uintptr_t h, void *context, int format, struct xf_cqring *ring, int manual, unsigned yield_polls);
struct fid_cntr *xf_cntr_new(uintptr_t h, void *context);
struct fid_mr *xf_mr_new(uintptr_t h, void *context, uint64_t key);
void xf_mr_set_key(struct fid_mr *mr, uint64_t key);
struct fid_wait *xf_wait_new(uintptr_t h);
struct fid_poll *xf_poll_new(uintptr_t h);
void xf_free(void *p);

/* The yielding of a reader spinning on fi_cq_read (cqyield.c): early_yield
 * is called by the first read of a wait and reports whether it began one
 * (and may have yielded); counted_read counts a read's outcome n. */
int xf_cq_early_yield(struct xf_cq *c);
ssize_t xf_cq_counted_read(struct xf_cq *c, ssize_t n, int first);

/* The Go handle of one of xdpfab's fids (0 for anything else). */
uintptr_t xf_fid_handle(struct fid *fid);
/* The same for wait and poll sets (waitpoll.c), which xf_fid_handle
 * consults. */
uintptr_t xf_waitpoll_handle(struct fid *fid);
/* The Go handle of an MR descriptor (fi_mr_desc), 0 for NULL or foreign. */
uintptr_t xf_desc_handle(void *desc);

/* Modes of the send and RMA entries (the Go side has the same numbers). */
enum { XF_PLAIN = 0, XF_DATA = 1, XF_INJECT = 2, XF_INJECTDATA = 3, XF_MSG = 4 };
/* Added to a mode: the tagged form of the call. */
#define XF_TAGGED 8

/* The data-transfer ops tables (msg.c, tagged.c, rma.c). */
extern struct fi_ops_msg xf_msg_ops;
extern struct fi_ops_tagged xf_tagged_ops;
extern struct fi_ops_rma xf_rma_ops;

#define XF_EP(e) XF_CONTAINER(e, struct xf_ep, ep)

/* Empty slots: -FI_ENOSYS, never NULL. */
int xf_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int xf_no_control(struct fid *fid, int command, void *arg);
int xf_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops, void *context);
int xf_no_tostr(const struct fid *fid, char *buf, size_t len);
int xf_no_ops_set(struct fid *fid, const char *name, uint64_t flags, void *ops, void *context);

/* Helpers for the Go side. */
struct fi_info *xf_allocinfo(void);
void xf_freeinfo(struct fi_info *info);

#endif
