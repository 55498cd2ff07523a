/*
 * When a thread spinning on fi_cq_read offers its processor away
 * (sched_yield), as MPI libraries do when they poll idle: an application
 * spinning on fi_cq_read then lets the peer process or the thread that
 * will complete its operation run on an oversubscribed processor, instead
 * of keeping it for its whole time slice (a millisecond or more; tcp;ofi_rxm,
 * which never yields, took 0.2-1.6 ms per spinning ping-pong message when
 * other spinning processes shared the cores).
 *
 * Where: every yield_polls-th read in a row that finds nothing, and the
 * first read of a wait (a run of empty reads ended by a completion) when
 * the last wait took LONG_WAIT_NS or more, a round trip's (a ping-pong's
 * answer, an atomic's result): a peer process sharing the processor gets
 * it as soon as the request is out instead of 32 reads later, which it
 * added to every message. A reader whose completions come closer together
 * (a pipeline, a stream) never yields early.
 *
 * When not: a yield on a processor nobody else wants returns at once but
 * is still a system call, 1-2 µs in a VM, and a completion that lands
 * during one waits for its end; two spinning processes with a core each
 * (fabtests' spinning ping-pong on this 2-core VM) yielded 1.2 times per
 * message and spent a fifth of their time in sched_yield (perf). So, as
 * internal/spinyield does for the Go API's pollers, ALONE_YIELDS yields in
 * a row that came back within ALONE_YIELD_NS (nothing else ran) make the
 * reader quiet: it offers the processor again only after QUIET_MIN_NS,
 * doubling with every such run up to QUIET_MAX_NS. A yield that took
 * longer (another thread ran: a shared processor) ends the quiet at once,
 * and the next ones are taken as before. A thread that becomes runnable
 * on a quiet reader's processor waits at most QUIET_MAX_NS for its offer,
 * unless the scheduler preempts the reader first.
 *
 * The fields are per CQ; several readers of one CQ (FI_THREAD_SAFE) share
 * them with relaxed atomics: a heuristic, never a correctness question.
 */
#include <sched.h>
#include <time.h>

#include "xdpfab.h"

#define LONG_WAIT_NS 5000
#define ALONE_YIELD_NS 3000
#define ALONE_YIELDS 2
#define QUIET_MIN_NS 20000
#define QUIET_MAX_NS 320000

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* offer yields the processor unless the reader is quiet at now, and
 * learns from how long the yield took; it reports whether it yielded. */
static int offer(struct xf_cq *c, uint64_t now)
{
	uint64_t back;
	unsigned alone, quiet;

	if (now < __atomic_load_n(&c->quiet_until, __ATOMIC_RELAXED))
		return 0;
	sched_yield();
	back = mono_ns();
	if (back - now >= ALONE_YIELD_NS) {
		/* Another thread ran: keep offering. */
		__atomic_store_n(&c->alone, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&c->quiet_ns, 0, __ATOMIC_RELAXED);
		return 1;
	}
	alone = __atomic_add_fetch(&c->alone, 1, __ATOMIC_RELAXED);
	if (alone < ALONE_YIELDS)
		return 1;
	quiet = __atomic_load_n(&c->quiet_ns, __ATOMIC_RELAXED);
	quiet = quiet ? quiet * 2 : QUIET_MIN_NS;
	if (quiet > QUIET_MAX_NS)
		quiet = QUIET_MAX_NS;
	__atomic_store_n(&c->quiet_ns, quiet, __ATOMIC_RELAXED);
	__atomic_store_n(&c->alone, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&c->quiet_until, back + quiet, __ATOMIC_RELAXED);
	return 1;
}

int xf_cq_early_yield(struct xf_cq *c)
{
	uint64_t now;

	if (!c->yield_polls || __atomic_load_n(&c->empty, __ATOMIC_RELAXED) != 0 ||
	    !__atomic_load_n(&c->waits_long, __ATOMIC_RELAXED))
		return 0;
	now = mono_ns();
	__atomic_store_n(&c->wait_start, now, __ATOMIC_RELAXED);
	offer(c, now);
	return 1;
}

ssize_t xf_cq_counted_read(struct xf_cq *c, ssize_t n, int first)
{
	unsigned k;
	int long_wait;

	if (n == -FI_EAGAIN) {
		k = __atomic_add_fetch(&c->empty, 1, __ATOMIC_RELAXED);
		if (k == 1 && !first)
			__atomic_store_n(&c->wait_start, mono_ns(), __ATOMIC_RELAXED);
		if (c->yield_polls && !first && k % c->yield_polls == 0)
			offer(c, mono_ns());
		return n;
	}
	if (n <= 0)
		return n;
	k = __atomic_load_n(&c->empty, __ATOMIC_RELAXED);
	if (k == 0 && !first)
		return n; /* no wait */
	long_wait = mono_ns() - __atomic_load_n(&c->wait_start, __ATOMIC_RELAXED) >= LONG_WAIT_NS;
	if (__atomic_load_n(&c->waits_long, __ATOMIC_RELAXED) != long_wait)
		__atomic_store_n(&c->waits_long, long_wait, __ATOMIC_RELAXED);
	if (k != 0)
		__atomic_store_n(&c->empty, 0, __ATOMIC_RELAXED);
	return n;
}
