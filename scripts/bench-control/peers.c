/*
 * Control-plane costs of a libfabric provider, for `make bench-control`:
 * fi_mr_reg + fi_close of 4 KiB, fi_av_open + fi_close, fi_av_insert of
 * 1,000,000 sockaddr_in addresses in one call, fi_av_lookup of a hot set
 * of 1024, fi_cq_open + fi_close, fi_cntr_open + fi_close.
 *
 * Usage: peers PROVIDER [GROUP...] (PROVIDER e.g. "udp;ofi_rxd",
 * "tcp;ofi_rxm", "sockets"): the groups named (mr, av_open, cq, cntr,
 * av_insert: the 1M insert and the lookups after it), all without any.
 * av_insert runs last: a provider whose AV close hangs after a failed
 * lookup (udp;ofi_rxd) has reported the others by then.
 * Prints one "PROVIDER OP VALUE UNIT CPU" line per figure: VALUE is wall
 * time, CPU the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID) in
 * the same unit, which time spent descheduled on a loaded machine does
 * not inflate; an op the provider refuses prints "PROVIDER OP error
 * STRING".
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

static const char *prov;
static char **groups;
static int ngroups;

/* want reports whether the group named was asked for (all are, when none
 * was named). */
static int want(const char *group)
{
	if (ngroups == 0)
		return 1;
	for (int i = 0; i < ngroups; i++)
		if (strcmp(groups[i], group) == 0)
			return 1;
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static double cpunow(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* c0 is cpunow() at the start; div turns the elapsed nanoseconds into
 * the figure's unit per op (n, or 1e9 for seconds). */
static void report(const char *op, double v, double c0, double div, const char *unit)
{
	printf("%s %s %.1f %s %.1f\n", prov, op, v, unit, (cpunow() - c0) / div);
	fflush(stdout);
}

static void fail(const char *op, int ret)
{
	printf("%s %s error %s\n", prov, op, fi_strerror(-ret));
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct fi_info *hints, *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	int ret;

	if (argc < 2) {
		fprintf(stderr, "usage: %s PROVIDER [mr|av_open|cq|cntr|av_insert...]\n", argv[0]);
		return 2;
	}
	prov = argv[1];
	groups = argv + 2;
	ngroups = argc - 2;
	hints = fi_allocinfo();
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->addr_format = FI_SOCKADDR_IN;
	hints->fabric_attr->prov_name = strdup(prov);
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	ret = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, 0, hints, &info);
	if (ret) {
		fail("getinfo", ret);
		return 1;
	}
	if ((ret = fi_fabric(info->fabric_attr, &fabric, NULL)) ||
	    (ret = fi_domain(fabric, info, &domain, NULL))) {
		fail("domain", ret);
		return 1;
	}

	/* fi_mr_reg + fi_close, 4 KiB. */
	if (want("mr")) {
		const int n = 200000;
		char *buf = aligned_alloc(4096, 4096);
		double c0 = cpunow(), t0 = now();
		for (int i = 0; i < n; i++) {
			struct fid_mr *mr;
			ret = fi_mr_reg(domain, buf, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, i + 1, 0, &mr, NULL);
			if (ret)
				break;
			fi_close(&mr->fid);
		}
		if (ret)
			fail("mr_reg_close_4k", ret);
		else
			report("mr_reg_close_4k", (now() - t0) / n, c0, n, "ns");
		free(buf);
	}

	/* fi_av_open + fi_close. */
	if (want("av_open")) {
		const int n = 2000;
		struct fi_av_attr attr = {.type = FI_AV_TABLE};
		double c0 = cpunow(), t0 = now();
		for (int i = 0; i < n; i++) {
			struct fid_av *av;
			ret = fi_av_open(domain, &attr, &av, NULL);
			if (ret)
				break;
			fi_close(&av->fid);
		}
		if (ret)
			fail("av_open_close", ret);
		else
			report("av_open_close", (now() - t0) / n, c0, n, "ns");
	}

	/* fi_cq_open + fi_close, default size, no wait object. */
	if (want("cq")) {
		const int n = 2000;
		struct fi_cq_attr attr = {.format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE};
		double c0 = cpunow(), t0 = now();
		for (int i = 0; i < n; i++) {
			struct fid_cq *cq;
			ret = fi_cq_open(domain, &attr, &cq, NULL);
			if (ret)
				break;
			fi_close(&cq->fid);
		}
		if (ret)
			fail("cq_open_close", ret);
		else
			report("cq_open_close", (now() - t0) / n, c0, n, "ns");
	}

	/* fi_cntr_open + fi_close, no wait object. */
	if (want("cntr")) {
		const int n = 2000;
		struct fi_cntr_attr attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE};
		double c0 = cpunow(), t0 = now();
		for (int i = 0; i < n; i++) {
			struct fid_cntr *c;
			ret = fi_cntr_open(domain, &attr, &c, NULL);
			if (ret)
				break;
			fi_close(&c->fid);
		}
		if (ret)
			fail("cntr_open_close", ret);
		else
			report("cntr_open_close", (now() - t0) / n, c0, n, "ns");
	}

	/* fi_av_insert of 1M addresses, then fi_av_lookup on a hot set. */
	if (want("av_insert")) {
		const size_t n = 1000000;
		struct fi_av_attr attr = {.type = FI_AV_TABLE, .count = n};
		struct sockaddr_in *sa = calloc(n, sizeof(*sa));
		fi_addr_t *out = calloc(n, sizeof(*out));
		struct fid_av *av;

		for (size_t i = 0; i < n; i++) {
			sa[i].sin_family = AF_INET;
			sa[i].sin_port = htons(7471);
			sa[i].sin_addr.s_addr = htonl(0x0a000000u | (uint32_t)(i + 1));
		}
		ret = fi_av_open(domain, &attr, &av, NULL);
		if (ret) {
			fail("av_insert_1m", ret);
		} else {
			double c0 = cpunow(), t0 = now();
			ret = fi_av_insert(av, sa, n, out, 0, NULL);
			double t1 = now(), c1 = cpunow();
			if (ret != (int)n) {
				fail("av_insert_1m", ret < 0 ? ret : -FI_EOTHER);
			} else {
				printf("%s av_insert_1m %.2f s %.2f\n", prov, (t1 - t0) / 1e9, (c1 - c0) / 1e9);
				fflush(stdout);
				const int m = 2000000;
				struct sockaddr_in got;
				size_t len;
				c0 = cpunow();
				t0 = now();
				for (int i = 0; i < m; i++) {
					len = sizeof(got);
					if ((ret = fi_av_lookup(av, out[(i & 1023) * (n / 1024)], &got, &len)))
						break;
				}
				if (ret)
					fail("av_lookup_hot", ret);
				else
					report("av_lookup_hot", (now() - t0) / m, c0, m, "ns");
			}
			fi_close(&av->fid);
		}
		free(sa);
		free(out);
	}

	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
