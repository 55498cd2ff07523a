/*
 * waitpoll: xdpfab's wait sets and poll sets through libfabric's calls
 * (waitpoll_test.go runs it over loopback).
 *
 * Side A opens an FI_WAIT_FD wait set and its CQs and counter with
 * FI_WAIT_SET on it, and a poll set holding them; side B is plain. B sends
 * to A and A to B: fi_wait on the set returns, fi_poll names exactly the
 * CQs and counter with something new and each named CQ has a completion
 * for fi_cq_read; after A read everything, fi_trywait on the set succeeds
 * and the set's fd becomes readable when B sends again (under manual
 * progress, FI_XDPFAB_DATA_PROGRESS=manual, fi_wait returns instead: it
 * drives A's endpoint, as fi_poll does). Around that, every
 * misuse gets its errno: bad attributes, a wait_set that is not a wait
 * set, closing a wait set with members (FI_EBUSY), adding what is not a CQ
 * or counter, adding twice, deleting a non-member, bad fi_poll arguments.
 *
 * Side C opens its EQ, CQs and counter with FI_WAIT_MUTEX_COND: FI_GETWAIT
 * gives each its own struct fi_mutex_cond, and (auto progress) C sleeps
 * on its receive CQ's cond, checking with fi_trywait under the mutex, until
 * a send from B, made by another thread only once C sleeps, wakes it.
 * A fabric with a domain, EQ or wait set open refuses fi_close (FI_EBUSY).
 *
 * Prints "ok" and exits 0, or says what is wrong and exits 1.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
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

#define BUF 64

struct side {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_eq *eq;
	struct fid_domain *dom;
	struct fid_cq *txcq, *rxcq;
	struct fid_cntr *cntr;
	struct fid_av *av;
	struct fid_ep *ep;
	fi_addr_t peer;
	char buf[2 * BUF];
};

static struct fid_wait *ws; /* A's wait set */

enum side_wait { WAIT_PLAIN, WAIT_IN_SET, WAIT_MUTEX_COND };

static void open_side(struct side *s, enum side_wait how)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .size = 64, .wait_obj = FI_WAIT_UNSPEC};
	struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
	struct fi_av_attr av_attr = {.type = FI_AV_MAP};

	hints->caps = FI_MSG;
	hints->ep_attr->type = FI_EP_RDM;
	hints->fabric_attr->prov_name = strdup("xdpfab");
	CHECK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &s->info));
	fi_freeinfo(hints);
	CHECK(fi_fabric(s->info->fabric_attr, &s->fabric, NULL));
	CHECK(fi_domain(s->fabric, s->info, &s->dom, NULL));
	if (how == WAIT_MUTEX_COND)
		eq_attr.wait_obj = cq_attr.wait_obj = cntr_attr.wait_obj = FI_WAIT_MUTEX_COND;
	if (how == WAIT_IN_SET) {
		struct fi_wait_attr wa = {.wait_obj = FI_WAIT_FD};
		struct fid_poll *not_wait;

		ERRNO(fi_wait_open(s->fabric, NULL, &ws), FI_EINVAL);
		wa.flags = 1;
		ERRNO(fi_wait_open(s->fabric, &wa, &ws), FI_EBADFLAGS);
		wa.flags = 0;
		wa.wait_obj = FI_WAIT_SET;
		ERRNO(fi_wait_open(s->fabric, &wa, &ws), FI_EINVAL);
		wa.wait_obj = FI_WAIT_POLLFD;
		ERRNO(fi_wait_open(s->fabric, &wa, &ws), FI_ENOSYS);
		wa.wait_obj = FI_WAIT_FD;
		CHECK(fi_wait_open(s->fabric, &wa, &ws));
		EXPECT(ws->fid.fclass == FI_CLASS_WAIT, "wait set class %zu", ws->fid.fclass);

		/* FI_WAIT_SET needs one of xdpfab's wait sets. */
		cq_attr.wait_obj = FI_WAIT_SET;
		ERRNO(fi_cq_open(s->dom, &cq_attr, &s->txcq, NULL), FI_EINVAL);
		CHECK(fi_poll_open(s->dom, &(struct fi_poll_attr){0}, &not_wait));
		cq_attr.wait_set = (struct fid_wait *)not_wait;
		ERRNO(fi_cq_open(s->dom, &cq_attr, &s->txcq, NULL), FI_EINVAL);
		CHECK(fi_close(&not_wait->fid));

		eq_attr.wait_obj = cq_attr.wait_obj = cntr_attr.wait_obj = FI_WAIT_SET;
		eq_attr.wait_set = cq_attr.wait_set = cntr_attr.wait_set = ws;
	}
	CHECK(fi_eq_open(s->fabric, &eq_attr, &s->eq, NULL));
	CHECK(fi_cq_open(s->dom, &cq_attr, &s->txcq, &s->txcq));
	CHECK(fi_cq_open(s->dom, &cq_attr, &s->rxcq, &s->rxcq));
	CHECK(fi_cntr_open(s->dom, &cntr_attr, &s->cntr, &s->cntr));
	CHECK(fi_av_open(s->dom, &av_attr, &s->av, NULL));
	CHECK(fi_endpoint(s->dom, s->info, &s->ep, NULL));
	CHECK(fi_ep_bind(s->ep, &s->eq->fid, 0));
	CHECK(fi_ep_bind(s->ep, &s->av->fid, 0));
	CHECK(fi_ep_bind(s->ep, &s->txcq->fid, FI_TRANSMIT));
	CHECK(fi_ep_bind(s->ep, &s->rxcq->fid, FI_RECV));
	CHECK(fi_ep_bind(s->ep, &s->cntr->fid, FI_SEND | FI_RECV));
	CHECK(fi_enable(s->ep));
}

static void close_side(struct side *s)
{
	CHECK(fi_close(&s->ep->fid));
	CHECK(fi_close(&s->cntr->fid));
	CHECK(fi_close(&s->rxcq->fid));
	CHECK(fi_close(&s->txcq->fid));
	CHECK(fi_close(&s->av->fid));
	CHECK(fi_close(&s->eq->fid));
	CHECK(fi_close(&s->dom->fid));
}

static void link_sides(struct side *a, struct side *b)
{
	char name[BUF];
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

static void read_one(struct fid_cq *cq, const char *what)
{
	struct fi_cq_entry e;
	ssize_t n = fi_cq_sread(cq, &e, 1, NULL, 5000);

	EXPECT(n == 1, "%s: fi_cq_sread: %zd", what, n);
}

struct delayed_send {
	struct side *from;
	pthread_mutex_t *gate;
	struct fi_context ctx;
};

/* send_when_asleep sends from one side once it gets the gate, the mutex
 * the receiver holds until it waits on its cond. */
static void *send_when_asleep(void *arg)
{
	struct delayed_send *d = arg;

	pthread_mutex_lock(d->gate);
	pthread_mutex_unlock(d->gate);
	CHECK(fi_send(d->from->ep, d->from->buf, 5, NULL, d->from->peer, &d->ctx));
	return NULL;
}

/* mutex_cond_phase: side C's queues have FI_WAIT_MUTEX_COND. */
static void mutex_cond_phase(struct side *b, int manual)
{
	static struct side c;
	struct fi_mutex_cond mc_eq = {0}, mc_rx = {0}, mc_tx = {0}, mc_cntr = {0};
	struct fid *rxfid;
	enum fi_wait_obj wobj;
	struct fi_context crx;
	struct delayed_send d;
	pthread_t thread;
	int waits = 0;

	open_side(&c, WAIT_MUTEX_COND);
	link_sides(&c, b);
	rxfid = &c.rxcq->fid;
	CHECK(fi_control(&c.rxcq->fid, FI_GETWAITOBJ, &wobj));
	EXPECT(wobj == FI_WAIT_MUTEX_COND, "CQ FI_GETWAITOBJ %d", wobj);
	CHECK(fi_control(&c.eq->fid, FI_GETWAIT, &mc_eq));
	CHECK(fi_control(&c.rxcq->fid, FI_GETWAIT, &mc_rx));
	CHECK(fi_control(&c.txcq->fid, FI_GETWAIT, &mc_tx));
	CHECK(fi_control(&c.cntr->fid, FI_GETWAIT, &mc_cntr));
	EXPECT(mc_eq.mutex && mc_eq.cond && mc_rx.mutex && mc_rx.cond && mc_tx.mutex && mc_tx.cond &&
		       mc_cntr.mutex && mc_cntr.cond,
	       "FI_GETWAIT gave a NULL mutex or cond");
	EXPECT(mc_rx.mutex != mc_tx.mutex && mc_rx.cond != mc_cntr.cond && mc_eq.mutex != mc_rx.mutex,
	       "two queues share one pair");
	{
		struct fi_mutex_cond again;

		CHECK(fi_control(&c.rxcq->fid, FI_GETWAIT, &again));
		EXPECT(again.mutex == mc_rx.mutex && again.cond == mc_rx.cond, "FI_GETWAIT twice: another pair");
	}

	if (!manual) { /* under manual progress nothing moves while C sleeps */
		CHECK(fi_recv(c.ep, c.buf + BUF, BUF, NULL, FI_ADDR_UNSPEC, &crx));
		strcpy(b->buf, "to c");
		d.from = b;
		d.gate = mc_rx.mutex;
		pthread_mutex_lock(mc_rx.mutex);
		EXPECT(pthread_create(&thread, NULL, send_when_asleep, &d) == 0, "pthread_create");
		while (fi_trywait(c.fabric, &rxfid, 1) == 0) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 5;
			EXPECT(pthread_cond_timedwait(mc_rx.cond, mc_rx.mutex, &ts) != ETIMEDOUT,
			       "no wake-up on the CQ's cond in 5 s");
			waits++;
		}
		pthread_mutex_unlock(mc_rx.mutex);
		pthread_join(thread, NULL);
		EXPECT(waits >= 1, "C never slept");
		read_one(c.rxcq, "C receive");
		EXPECT(strcmp(c.buf + BUF, "to c") == 0, "C received %.8s", c.buf + BUF);
		read_one(b->txcq, "B send to C");
	}
	ERRNO(fi_close(&c.fabric->fid), FI_EBUSY); /* its domain and EQ are open */
	close_side(&c);
	CHECK(fi_close(&c.fabric->fid));
	fi_freeinfo(c.info);
}

int main(void)
{
	static struct side a, b;
	struct fi_context arx, atx, brx, btx;
	struct fid_poll *ps;
	struct fid *wfid;
	void *ctx[8];
	int fd, got_tx = 0, got_rx = 0, got_cntr = 0;
	enum fi_wait_obj wobj;
	double end;
	int manual;

	open_side(&a, WAIT_IN_SET);
	open_side(&b, WAIT_PLAIN);
	link_sides(&a, &b);
	manual = a.info->domain_attr->data_progress == FI_PROGRESS_MANUAL;
	wfid = &ws->fid;

	CHECK(fi_control(&ws->fid, FI_GETWAIT, &fd));
	EXPECT(fd >= 0, "FI_GETWAIT fd %d", fd);
	CHECK(fi_control(&ws->fid, FI_GETWAITOBJ, &wobj));
	EXPECT(wobj == FI_WAIT_FD, "FI_GETWAITOBJ %d", wobj);
	CHECK(fi_control(&a.cntr->fid, FI_GETWAITOBJ, &wobj));
	EXPECT(wobj == FI_WAIT_SET, "counter FI_GETWAITOBJ %d", wobj);
	ERRNO(fi_wait(ws, 0), FI_ETIMEDOUT);
	CHECK(fi_trywait(a.fabric, &wfid, 1));
	ERRNO(fi_close(&ws->fid), FI_EBUSY);

	ERRNO(fi_poll_open(a.dom, &(struct fi_poll_attr){.flags = 1}, &ps), FI_EBADFLAGS);
	CHECK(fi_poll_open(a.dom, &(struct fi_poll_attr){0}, &ps));
	EXPECT(ps->fid.fclass == FI_CLASS_POLL, "poll set class %zu", ps->fid.fclass);
	ERRNO(fi_poll_add(ps, &a.av->fid, 0), FI_EINVAL);
	ERRNO(fi_poll_add(ps, &a.eq->fid, 0), FI_EINVAL);
	ERRNO(fi_poll_add(ps, &a.ep->fid, 0), FI_EINVAL);
	ERRNO(fi_poll_add(ps, &ws->fid, 0), FI_EINVAL);
	ERRNO(fi_poll_add(ps, &b.txcq->fid, 0), FI_EINVAL); /* another domain's */
	ERRNO(fi_poll_add(ps, NULL, 0), FI_EINVAL);
	ERRNO(fi_poll_add(ps, &a.txcq->fid, FI_SEND), FI_EBADFLAGS);
	ERRNO(fi_poll_del(ps, &a.txcq->fid, 0), FI_ENOENT);
	CHECK(fi_poll_add(ps, &a.txcq->fid, 0));
	CHECK(fi_poll_add(ps, &a.rxcq->fid, 0));
	CHECK(fi_poll_add(ps, &a.cntr->fid, 0));
	ERRNO(fi_poll_add(ps, &a.txcq->fid, 0), FI_EALREADY);
	ERRNO(fi_poll(ps, NULL, 1), FI_EINVAL);
	ERRNO(fi_poll(ps, ctx, -1), FI_EINVAL);
	EXPECT(fi_poll(ps, ctx, 8) == 0, "events before any traffic");

	/* B sends to A, A to B. */
	CHECK(fi_recv(a.ep, a.buf + BUF, BUF, NULL, FI_ADDR_UNSPEC, &arx));
	CHECK(fi_recv(b.ep, b.buf + BUF, BUF, NULL, FI_ADDR_UNSPEC, &brx));
	strcpy(b.buf, "to a");
	CHECK(fi_send(b.ep, b.buf, 5, NULL, b.peer, &btx));
	strcpy(a.buf, "to b");
	CHECK(fi_send(a.ep, a.buf, 5, NULL, a.peer, &atx));
	CHECK(fi_wait(ws, 5000));

	for (end = now() + 5; (!got_tx || !got_rx || !got_cntr) && now() < end;) {
		int n = fi_poll(ps, ctx, 8);

		fi_cntr_read(b.cntr); /* B's progress, when it is manual */

		EXPECT(n >= 0 && n <= 3, "fi_poll: %d", n);
		for (int i = 0; i < n; i++) {
			struct fi_cq_entry e;

			if (ctx[i] == &a.txcq || ctx[i] == &a.rxcq) {
				struct fid_cq *cq = ctx[i] == &a.txcq ? a.txcq : a.rxcq;
				ssize_t r = fi_cq_read(cq, &e, 1);

				if (r == -FI_EAVAIL) {
					struct fi_cq_err_entry err = {0};

					fi_cq_readerr(cq, &err, 0);
					EXPECT(0, "%s: completion error %d (%s)", cq == a.txcq ? "A send" : "A receive",
					       err.err, fi_strerror(err.err));
				}
				EXPECT(r == 1, "fi_poll named a CQ, fi_cq_read: %zd", r);
				if (cq == a.txcq)
					got_tx = 1;
				else
					got_rx = 1;
			} else if (ctx[i] == &a.cntr) {
				got_cntr = fi_cntr_read(a.cntr) == 2;
			} else {
				EXPECT(0, "fi_poll: unknown context %p", ctx[i]);
			}
		}
	}
	EXPECT(got_tx && got_rx && got_cntr, "poll saw tx %d rx %d cntr %d", got_tx, got_rx, got_cntr);
	EXPECT(strcmp(a.buf + BUF, "to a") == 0, "A received %.8s", a.buf + BUF);
	read_one(b.txcq, "B send");
	read_one(b.rxcq, "B receive");
	EXPECT(fi_poll(ps, ctx, 8) == 0, "events after everything was read");

	/* Everything read: the set may be slept on, and B's next send wakes
	 * its fd. Under manual progress nothing moves while A sleeps on the
	 * fd (only calls into xdpfab drive it), so there fi_wait, which
	 * drives A's endpoint, waits for the send instead. */
	CHECK(fi_trywait(a.fabric, &wfid, 1));
	CHECK(fi_recv(a.ep, a.buf + BUF, BUF, NULL, FI_ADDR_UNSPEC, &arx));
	CHECK(fi_send(b.ep, b.buf, 5, NULL, b.peer, &btx));
	if (manual) {
		CHECK(fi_wait(ws, 5000));
	} else {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		EXPECT(poll(&pfd, 1, 5000) == 1, "the wait set's fd did not become readable");
	}
	ERRNO(fi_trywait(a.fabric, &wfid, 1), FI_EAGAIN);
	read_one(a.rxcq, "A second receive");
	read_one(b.txcq, "B second send");

	CHECK(fi_poll_del(ps, &a.txcq->fid, 0));
	ERRNO(fi_poll_del(ps, &a.txcq->fid, 0), FI_ENOENT);
	CHECK(fi_close(&ps->fid)); /* with members left, as libfabric allows */

	mutex_cond_phase(&b, manual);

	close_side(&a);
	ERRNO(fi_close(&a.fabric->fid), FI_EBUSY); /* the wait set is open */
	CHECK(fi_close(&ws->fid)); /* its members are gone */
	CHECK(fi_close(&a.fabric->fid));
	close_side(&b);
	CHECK(fi_close(&b.fabric->fid));
	fi_freeinfo(a.info);
	fi_freeinfo(b.info);
	printf("ok\n");
	return 0;
}
