/*
 * reopen: one process opens and closes xdpfab's whole object tree again
 * and again, as fabtests' fi_rdm_multi_client's client does (reopen_test.go
 * runs it over loopback):
 *
 *   reopen N   a server (fabric, domain, EQ, CQs, counter, AV, MR, endpoint
 *              opened once) serves N clients in turn; each client is a
 *              fresh fi_getinfo, fabric, EQ, domain, CQs, counter, AV, MR
 *              and endpoint that sends its address to the server, gets a
 *              reply to the fi_addr the server's fi_av_insert gave it, and
 *              closes everything (fabtests' ft_free_res order) and frees
 *              its fi_info. Both sides open their AVs with the av_type
 *              fi_getinfo answered, as fabtests does.
 *
 * Prints "ok ..." and exits 0, or says what is wrong and exits 1.
 */
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

#include "check.h"

#define BUF 256

/* tree is every object one side opens. */
struct tree {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_eq *eq;
	struct fid_domain *dom;
	struct fid_cq *txcq, *rxcq;
	struct fid_cntr *cntr;
	struct fid_av *av;
	struct fid_mr *mr;
	struct fid_ep *ep;
	char buf[2 * BUF];
};

static void open_tree(struct tree *t)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .size = 64, .wait_obj = FI_WAIT_NONE};
	struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
	struct fi_av_attr av_attr = {.type = FI_AV_UNSPEC};

	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
	hints->fabric_attr->prov_name = strdup("xdpfab");
	CHECK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &t->info));
	fi_freeinfo(hints);

	CHECK(fi_fabric(t->info->fabric_attr, &t->fabric, NULL));
	CHECK(fi_eq_open(t->fabric, &eq_attr, &t->eq, NULL));
	CHECK(fi_domain(t->fabric, t->info, &t->dom, NULL));
	CHECK(fi_cq_open(t->dom, &cq_attr, &t->txcq, &t->txcq));
	CHECK(fi_cq_open(t->dom, &cq_attr, &t->rxcq, &t->rxcq));
	CHECK(fi_cntr_open(t->dom, &cntr_attr, &t->cntr, NULL));
	if (t->info->domain_attr->av_type != FI_AV_UNSPEC)
		av_attr.type = t->info->domain_attr->av_type;
	CHECK(fi_av_open(t->dom, &av_attr, &t->av, NULL));
	CHECK(fi_mr_reg(t->dom, t->buf, sizeof(t->buf), FI_SEND | FI_RECV, 0, 0, 0, &t->mr, NULL));
	CHECK(fi_endpoint(t->dom, t->info, &t->ep, NULL));
	CHECK(fi_ep_bind(t->ep, &t->eq->fid, 0));
	CHECK(fi_ep_bind(t->ep, &t->av->fid, 0));
	CHECK(fi_ep_bind(t->ep, &t->txcq->fid, FI_TRANSMIT));
	CHECK(fi_ep_bind(t->ep, &t->rxcq->fid, FI_RECV));
	CHECK(fi_ep_bind(t->ep, &t->cntr->fid, FI_SEND));
	CHECK(fi_enable(t->ep));
}

/* close_tree closes in fabtests' ft_close_fids order and frees the info. */
static void close_tree(struct tree *t)
{
	CHECK(fi_close(&t->mr->fid));
	CHECK(fi_close(&t->ep->fid));
	CHECK(fi_close(&t->cntr->fid));
	CHECK(fi_close(&t->rxcq->fid));
	CHECK(fi_close(&t->txcq->fid));
	CHECK(fi_close(&t->av->fid));
	CHECK(fi_close(&t->eq->fid));
	CHECK(fi_close(&t->dom->fid));
	CHECK(fi_close(&t->fabric->fid));
	fi_freeinfo(t->info);
	memset(t, 0, sizeof(*t));
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* wait_one reads one completion from cq within 10 s. Under manual
 * progress the other side moves only when its CQs are read: each try also
 * reads drive, a CQ of the other side that has nothing to report then. */
static void wait_one(struct fid_cq *cq, struct fid_cq *drive, const char *what)
{
	struct fi_cq_entry e;
	double end = now() + 10;
	ssize_t n;

	do {
		n = fi_cq_read(cq, &e, 1);
		if (n == -FI_EAGAIN)
			EXPECT(fi_cq_read(drive, &e, 1) == -FI_EAGAIN, "%s: a completion on the idle CQ", what);
	} while (n == -FI_EAGAIN && now() < end);
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = {0};

		fi_cq_readerr(cq, &err, 0);
		EXPECT(0, "%s: completion error %d (%s)", what, err.err, fi_strerror(err.err));
	}
	EXPECT(n == 1, "%s: fi_cq_read: %zd", what, n);
}

static void post_recv(struct tree *t, struct fi_context *ctx)
{
	CHECK(fi_recv(t->ep, t->buf + BUF, BUF, fi_mr_desc(t->mr), FI_ADDR_UNSPEC, ctx));
}

int main(int argc, char **argv)
{
	static struct tree srv, cli;
	struct fi_context srx, stx, crx, ctx;
	fi_addr_t prev = FI_ADDR_NOTAVAIL;
	int n = argc == 3 && strcmp(argv[1], "clients") == 0 ? atoi(argv[2]) : -1;

	if (n <= 0) {
		fprintf(stderr, "usage: reopen clients N\n");
		return 2;
	}
	open_tree(&srv);
	post_recv(&srv, &srx);
	for (int i = 0; i < n; i++) {
		char name[BUF];
		size_t len = sizeof(name);
		fi_addr_t server, client;
		uint64_t sent;

		open_tree(&cli);
		post_recv(&cli, &crx);

		/* The client learns the server's address and sends its own. */
		CHECK(fi_getname(&srv.ep->fid, name, &len));
		EXPECT(fi_av_insert(cli.av, name, 1, &server, 0, NULL) == 1, "client %d: av insert", i);
		len = BUF;
		CHECK(fi_getname(&cli.ep->fid, cli.buf, &len));
		CHECK(fi_send(cli.ep, cli.buf, len, fi_mr_desc(cli.mr), server, &ctx));
		wait_one(cli.txcq, srv.txcq, "client send");
		CHECK(fi_cntr_wait(cli.cntr, 1, 10000));
		sent = fi_cntr_read(cli.cntr);
		EXPECT(sent == 1, "client %d: send counter %llu", i, (unsigned long long)sent);

		/* The server inserts it and replies to the fi_addr it got. */
		wait_one(srv.rxcq, cli.rxcq, "server receive");
		EXPECT(fi_av_insert(srv.av, srv.buf + BUF, 1, &client, 0, NULL) == 1, "server: av insert %d", i);
		EXPECT(client != prev, "client %d got the fi_addr of client %d", i, i - 1);
		prev = client;
		post_recv(&srv, &srx);
		snprintf(srv.buf, BUF, "reply %d", i);
		CHECK(fi_send(srv.ep, srv.buf, strlen(srv.buf) + 1, fi_mr_desc(srv.mr), client, &stx));
		wait_one(srv.txcq, cli.txcq, "server send");
		wait_one(cli.rxcq, srv.rxcq, "client receive");
		snprintf(name, sizeof(name), "reply %d", i);
		EXPECT(strcmp(cli.buf + BUF, name) == 0, "client %d got %.16s", i, cli.buf + BUF);

		close_tree(&cli);
	}
	CHECK(fi_cancel(&srv.ep->fid, &srx));
	close_tree(&srv);
	printf("ok clients %d\n", n);
	return 0;
}
