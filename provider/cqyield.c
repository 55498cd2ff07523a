/*
 * When a thread spinning on fi_cq_read offers its processor away
 * (sched_yield), as MPI libraries do when they poll idle: an application
 * spinning on fi_cq_read then lets the peer process or the thread that
 * will complete its operation run on an oversubscribed processor, instead
 * of keeping it for its whole time slice (a millisecond or more;
 * tcp;ofi_rxm, which never yields, took 0.14-0.84 ms per spinning
 * ping-pong message when other spinning processes shared the cores).
 *
 * Where: the first read of a wait (a run of empty reads ended by a
 * completion) when the last wait took LONG_WAIT_NS or more, a round
 * trip's (a ping-pong's answer, an atomic's result): a peer process
 * sharing the processor gets it as soon as the request is out (a reader
 * whose completions come closer together, a pipeline, never yields
 * early); and every yield_polls-th read in a row that finds nothing.
 *
 * When not: a yield on a processor nobody else wants returns at once but
 * is still a system call, 1-2 µs in a VM, and a completion that lands
 * during one waits for its end; two spinning processes with a core each
 * (fabtests' spinning ping-pong on this 2-core VM) yielded 1.2 times per
 * message and spent a fifth of their time in sched_yield (perf). So once
 * ALONE_YIELDS yields in a row came back within ALONE_YIELD_NS (nothing
 * else ran: alone), a wait takes no yield, early or counted, in its first
 * QUIET_NS, which a round trip to a peer on another core fits in. A wait
 * that lasts longer (a peer on this processor cannot answer until it gets
 * it) yields every yield_polls reads as before, and a yield that took
 * longer (another thread ran) ends the quiet: the next waits yield early
 * again. A reader alone for a while that finds the peer moved onto its
 * processor loses at most QUIET_NS a wait until a yield takes longer.
 * Many fast yields, not two, make it quiet: with EEVDF a yield may come
 * back at once to a thread still eligible while the peer waits, and a
 * quiet time across waits (20 µs
 * after two fast yields, doubling to 320 µs) was tried: two processes
 * pinned to one core then took 0.3-1.7 ms a message in three runs against
 * 26-425 µs for main's build (load average 18), skipping the very yields
 * that hand the core over.
 *
 * The fields are per CQ; several readers of one CQ (FI_THREAD_SAFE) share
 * them with relaxed atomics: a heuristic, never a correctness question.
 */
#include <sched.h>
#include <time.h>

#include "xdpfab.h"

#define LONG_WAIT_NS 5000
#define ALONE_YIELD_NS 3000
#define ALONE_YIELDS 8
#define QUIET_NS 30000

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* offer yields the processor at now and learns from how long it took
 * whether the reader is alone on it. */
static void offer(struct xf_cq *c, uint64_t now)
{
	sched_yield();
	if (mono_ns() - now >= ALONE_YIELD_NS) {
		__atomic_store_n(&c->alone, 0, __ATOMIC_RELAXED); /* another thread ran */
		return;
	}
	if (__atomic_load_n(&c->alone, __ATOMIC_RELAXED) < ALONE_YIELDS)
		__atomic_add_fetch(&c->alone, 1, __ATOMIC_RELAXED);
}

/* quiet reports whether a counted yield at now is skipped. */
static int quiet(struct xf_cq *c, uint64_t now)
{
	return __atomic_load_n(&c->alone, __ATOMIC_RELAXED) >= ALONE_YIELDS &&
	       now - __atomic_load_n(&c->wait_start, __ATOMIC_RELAXED) < QUIET_NS;
}

int xf_cq_early_yield(struct xf_cq *c)
{
	uint64_t now;

	if (!c->yield_polls || __atomic_load_n(&c->empty, __ATOMIC_RELAXED) != 0 ||
	    !__atomic_load_n(&c->waits_long, __ATOMIC_RELAXED))
		return 0;
	now = mono_ns();
	__atomic_store_n(&c->wait_start, now, __ATOMIC_RELAXED);
	if (!quiet(c, now))
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
		if (c->yield_polls && !first && k % c->yield_polls == 0) {
			uint64_t now = mono_ns();

			if (!quiet(c, now))
				offer(c, now);
		}
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
