/*
 * cqring: the provider's CQ as C sees it (fi_cq_read served from the
 * completion ring, cqring.h), over loopback between two endpoints of one
 * process (cqring_test.go runs it, with automatic and manual progress):
 *
 *   cqring order     completions come out in completion order across the
 *                    ring and the Go CQ: a success, an error (a truncated
 *                    receive: FI_EAVAIL, then fi_cq_readerr), a success;
 *                    fi_cq_readerr finds nothing while a success is older;
 *                    fi_cq_readfrom reports the sender; the CQ format's
 *                    fields are right.
 *   cqring threads N  N threads drain one CQ at once while the main thread
 *                    posts RMA writes: every completion is read exactly
 *                    once.
 *
 * Prints "ok ..." and exits 0, or says what is wrong and exits 1.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "check.h"

struct side {
	struct fid_domain *dom;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	fi_addr_t peer;
};

static struct fi_info *info;
static struct fid_fabric *fabric;

static void open_side(struct side *s)
{
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .size = 256, .wait_obj = FI_WAIT_NONE};

	CHECK(fi_domain(fabric, info, &s->dom, NULL));
	CHECK(fi_endpoint(s->dom, info, &s->ep, NULL));
	CHECK(fi_av_open(s->dom, &av_attr, &s->av, NULL));
	CHECK(fi_cq_open(s->dom, &cq_attr, &s->cq, NULL));
	CHECK(fi_ep_bind(s->ep, &s->av->fid, 0));
	CHECK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(s->ep));
}

static void link_sides(struct side *a, struct side *b)
{
	char name[64];
	size_t len = sizeof(name);

	CHECK(fi_getname(&b->ep->fid, name, &len));
	EXPECT(fi_av_insert(a->av, name, 1, &a->peer, 0, NULL) == 1, "av insert");
	len = sizeof(name);
	CHECK(fi_getname(&a->ep->fid, name, &len));
	EXPECT(fi_av_insert(b->av, name, 1, &b->peer, 0, NULL) == 1, "av insert");
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* read_one polls cq until it returns something other than -FI_EAGAIN (or
 * 10 s pass). */
static ssize_t read_one(struct fid_cq *cq, struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	double end = now() + 10;
	ssize_t n;

	do {
		n = src ? fi_cq_readfrom(cq, e, 1, src) : fi_cq_read(cq, e, 1);
	} while (n == -FI_EAGAIN && now() < end);
	return n;
}

/* sent reads the completion of the send with context ctx from cq. */
static void sent(struct fid_cq *cq, void *ctx)
{
	struct fi_cq_tagged_entry e;
	ssize_t n = read_one(cq, &e, NULL);

	EXPECT(n == 1, "send completion: %zd", n);
	EXPECT(e.op_context == ctx, "send completion context %p, want %p", e.op_context, ctx);
	EXPECT(e.flags & FI_SEND, "send completion flags %#llx", (unsigned long long)e.flags);
}

static int order(void)
{
	struct side a, b;
	char r1[16], r2[4], r3[16];
	int c1, c2, c3, s1, s2, s3;
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err = {0};
	fi_addr_t src = FI_ADDR_UNSPEC;
	ssize_t n;

	open_side(&a);
	open_side(&b);
	link_sides(&a, &b);

	/* r1: a success, into the ring; r2: truncated (8 bytes into 4), an
	 * error completion; r3: a success after the error. The sends' own
	 * completions are read at the end: with manual progress b's reads
	 * must run first for them to be acknowledged. */
	CHECK(fi_trecv(b.ep, r1, sizeof(r1), NULL, FI_ADDR_UNSPEC, 7, 0, &c1));
	CHECK(fi_trecv(b.ep, r2, sizeof(r2), NULL, FI_ADDR_UNSPEC, 8, 0, &c2));
	CHECK(fi_trecv(b.ep, r3, sizeof(r3), NULL, FI_ADDR_UNSPEC, 9, 0, &c3));
	CHECK(fi_tsenddata(a.ep, "first", 6, NULL, 0x1234, a.peer, 7, &s1));
	CHECK(fi_tsend(a.ep, "second!", 8, NULL, a.peer, 8, &s2));
	CHECK(fi_tsend(a.ep, "third", 6, NULL, a.peer, 9, &s3));

	/* Let b's receives complete (with manual progress, reading drives
	 * them; fi_cq_readerr first: r1, a success, is older than r2). */
	double end = now() + 10;
	while ((n = fi_cq_readerr(b.cq, &err, 0)) == -FI_EAGAIN && now() < end) {
		n = fi_cq_readfrom(b.cq, &e, 1, &src);
		if (n == 1)
			break;
	}
	EXPECT(n == 1, "r1: %zd", n);
	EXPECT(e.op_context == &c1, "r1 context %p, want %p", e.op_context, (void *)&c1);
	EXPECT((e.flags & (FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA)) == (FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA),
	       "r1 flags %#llx", (unsigned long long)e.flags);
	EXPECT(e.len == 6 && e.tag == 7 && e.data == 0x1234 && e.buf == r1, "r1 len %zu tag %llu data %#llx buf %p",
	       e.len, (unsigned long long)e.tag, (unsigned long long)e.data, e.buf);
	EXPECT(strcmp(r1, "first") == 0, "r1 holds %s", r1);
	EXPECT(src == b.peer, "r1 source %llu, want %llu", (unsigned long long)src, (unsigned long long)b.peer);

	n = read_one(b.cq, &e, NULL);
	EXPECT(n == -FI_EAVAIL, "after r1: %zd, want -FI_EAVAIL", n);
	n = fi_cq_read(b.cq, &e, 1);
	EXPECT(n == -FI_EAVAIL, "again: %zd, want -FI_EAVAIL", n);
	n = fi_cq_readerr(b.cq, &err, 0);
	EXPECT(n == 1, "fi_cq_readerr: %zd", n);
	EXPECT(err.op_context == &c2 && err.err == FI_ETRUNC, "r2 error context %p err %d", err.op_context, err.err);
	n = fi_cq_readerr(b.cq, &err, 0);
	EXPECT(n == -FI_EAGAIN, "second fi_cq_readerr: %zd", n);

	n = read_one(b.cq, &e, NULL);
	EXPECT(n == 1 && e.op_context == &c3 && e.len == 6 && e.tag == 9, "r3: %zd context %p", n, e.op_context);
	n = fi_cq_read(b.cq, &e, 1);
	EXPECT(n == -FI_EAGAIN, "empty: %zd", n);
	sent(a.cq, &s1);
	sent(a.cq, &s2);
	sent(a.cq, &s3);

	/* The ring again once the error is read: a burst of 100, in order,
	 * read 7 at a time. */
	static char bufs[100][8];
	static int ctx[100];
	for (int i = 0; i < 100; i++)
		CHECK(fi_trecv(b.ep, bufs[i], 8, NULL, FI_ADDR_UNSPEC, 100 + i, 0, &ctx[i]));
	for (int i = 0; i < 100; i++) {
		while ((n = fi_tinject(a.ep, &i, sizeof(i), a.peer, 100 + i)) == -FI_EAGAIN)
			fi_cq_read(a.cq, &e, 1); /* nothing completes; it drives a */
		CHECK(n);
	}
	struct fi_cq_tagged_entry batch[7];
	int next = 0;
	end = now() + 10;
	while (next < 100 && now() < end) {
		n = fi_cq_read(b.cq, batch, 7);
		if (n == -FI_EAGAIN)
			continue;
		EXPECT(n > 0, "burst read: %zd", n);
		for (ssize_t i = 0; i < n; i++, next++)
			EXPECT(batch[i].op_context == &ctx[next] && batch[i].tag == (uint64_t)(100 + next),
			       "burst entry %d: context %p tag %llu", next, batch[i].op_context,
			       (unsigned long long)batch[i].tag);
	}
	EXPECT(next == 100, "burst: %d of 100", next);

	CHECK(fi_close(&a.ep->fid));
	CHECK(fi_close(&b.ep->fid));
	CHECK(fi_close(&a.cq->fid));
	CHECK(fi_close(&b.cq->fid));
	CHECK(fi_close(&a.av->fid));
	CHECK(fi_close(&b.av->fid));
	CHECK(fi_close(&a.dom->fid));
	CHECK(fi_close(&b.dom->fid));
	printf("ok order\n");
	return 0;
}

#define WRITES 20000

static struct side ta, tb;
static atomic_int seen[WRITES];
static atomic_int total, posting_done;

static void *drain(void *arg)
{
	struct fi_cq_tagged_entry e[16];
	double end = now() + 60;

	while (atomic_load(&total) < WRITES && now() < end) {
		ssize_t n = fi_cq_read(ta.cq, e, 16);

		if (n == -FI_EAGAIN)
			continue;
		EXPECT(n > 0, "reader: %zd", n);
		for (ssize_t i = 0; i < n; i++) {
			int k = (int)((char *)e[i].op_context - (char *)seen) / (int)sizeof(seen[0]);
			EXPECT(k >= 0 && k < WRITES, "context %p", e[i].op_context);
			EXPECT(atomic_fetch_add(&seen[k], 1) == 0, "write %d completed twice", k);
		}
		atomic_fetch_add(&total, (int)n);
	}
	return NULL;
}

static int threads(int nthreads)
{
	static uint64_t mem[64];
	struct fid_mr *mr;
	pthread_t th[16];

	open_side(&ta);
	open_side(&tb);
	link_sides(&ta, &tb);
	CHECK(fi_mr_reg(tb.dom, mem, sizeof(mem), FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
	uint64_t key = fi_mr_key(mr);
	uint64_t addr = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)mem : 0;

	for (int i = 0; i < nthreads; i++)
		pthread_create(&th[i], NULL, drain, NULL);
	/* tb's CQ must be read for manual progress to serve the writes. */
	double end = now() + 60;
	for (int i = 0; i < WRITES && now() < end;) {
		struct fi_cq_tagged_entry e;
		uint64_t v = i;
		ssize_t n = fi_write(ta.ep, &v, sizeof(v), NULL, ta.peer, addr + (i % 64) * 8, key, &seen[i]);

		fi_cq_read(tb.cq, &e, 1);
		if (n == -FI_EAGAIN)
			continue;
		CHECK(n);
		i++;
	}
	while (atomic_load(&total) < WRITES && now() < end) {
		struct fi_cq_tagged_entry e;

		fi_cq_read(tb.cq, &e, 1);
	}
	atomic_store(&posting_done, 1);
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	EXPECT(atomic_load(&total) == WRITES, "%d of %d completions read", atomic_load(&total), WRITES);
	for (int i = 0; i < WRITES; i++)
		EXPECT(atomic_load(&seen[i]) == 1, "write %d completed %d times", i, atomic_load(&seen[i]));
	struct fi_cq_tagged_entry e;
	EXPECT(fi_cq_read(ta.cq, &e, 1) == -FI_EAGAIN, "a completion too many");
	CHECK(fi_close(&mr->fid));
	printf("ok threads %d writes %d\n", nthreads, WRITES);
	return 0;
}

int main(int argc, char **argv)
{
	struct fi_info *hints = fi_allocinfo();

	if (argc < 2) {
		fprintf(stderr, "usage: cqring order | threads N\n");
		return 2;
	}
	hints->caps = FI_MSG | FI_TAGGED | FI_RMA;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	hints->fabric_attr->prov_name = strdup("xdpfab");
	CHECK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	if (strcmp(argv[1], "order") == 0)
		return order();
	if (strcmp(argv[1], "threads") == 0 && argc == 3)
		return threads(atoi(argv[2]) > 16 ? 16 : atoi(argv[2]));
	return 2;
}
