/*
 * onesided: MPI one-sided communication between two ranks, every result
 * checked. Run over xdpfab it goes through Open MPI's osc rdma and btl ofi
 * (scripts/demo-mpi.sh, tests/mpi): fi_write/fi_read for MPI_Put/MPI_Get,
 * fi_fetch_atomic/fi_compare_atomic for MPI_Fetch_and_op and
 * MPI_Compare_and_swap and for osc rdma's locks around MPI_Accumulate.
 *
 * Prints one line per check and "onesided: OK" at the end; exits non-zero
 * (MPI_Abort) at the first wrong value.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 200 /* fetch-and-add rounds per rank */
#define ACC_N 1024 /* doubles accumulated by each rank */

static int rank, size;

static void fail(const char *what, long long got, long long want)
{
	fprintf(stderr, "onesided: rank %d: %s: got %lld, want %lld\n", rank, what, got, want);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Window layout (int64 slots, then doubles, then a byte area). */
enum { SLOT_COUNTER, SLOT_CAS, SLOT_SWAP, SLOT_N };
#define ACC_OFF (SLOT_N * sizeof(int64_t))
#define BYTES_OFF (ACC_OFF + ACC_N * sizeof(double))
#define BYTES_N (4 << 20)
#define WIN_SIZE (BYTES_OFF + BYTES_N)

static unsigned char pattern(int from, size_t i, size_t len) { return (unsigned char)(from * 131 + i * 7 + len); }

int main(int argc, char **argv)
{
	unsigned char *base;
	MPI_Win win;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (rank == 0)
			fprintf(stderr, "onesided: needs exactly 2 ranks, got %d\n", size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int peer = 1 - rank;

	MPI_Win_allocate(WIN_SIZE, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
	int64_t *slots = (int64_t *)base;
	double *acc = (double *)(base + ACC_OFF);
	unsigned char *bytes = base + BYTES_OFF;
	slots[SLOT_COUNTER] = 0;
	slots[SLOT_CAS] = -1;
	slots[SLOT_SWAP] = 0;
	for (int i = 0; i < ACC_N; i++)
		acc[i] = 0.5 * i;
	memset(bytes, 0, BYTES_N);
	MPI_Barrier(MPI_COMM_WORLD);

	/* MPI_Fetch_and_op: both ranks add 1 to rank 0's counter ROUNDS
	 * times; each rank's fetched values strictly increase, and the
	 * counter ends at 2*ROUNDS. */
	MPI_Win_lock_all(0, win);
	int64_t one = 1, prev = -1;
	for (int i = 0; i < ROUNDS; i++) {
		int64_t old;
		MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, SLOT_COUNTER * sizeof(int64_t), MPI_SUM, win);
		MPI_Win_flush(0, win);
		if (old <= prev || old < 0 || old >= 2 * ROUNDS)
			fail("MPI_Fetch_and_op(MPI_SUM) fetched", old, prev + 1);
		prev = old;
	}
	/* MPI_REPLACE (an atomic swap): both ranks swap 1000+rank into rank
	 * 1's slot; the first fetches 0, the second the first's value.
	 * (Open MPI 4.1's osc rdma hands MPI_MAX, MPI_MIN and the bitwise
	 * ops to btl ofi, which aborts on anything but MPI_SUM and
	 * MPI_REPLACE; they are not used here.) */
	int64_t mine = 1000 + rank, swapped;
	MPI_Fetch_and_op(&mine, &swapped, MPI_INT64_T, 1, SLOT_SWAP * sizeof(int64_t), MPI_REPLACE, win);
	MPI_Win_flush(1, win);
	MPI_Win_unlock_all(win);
	int first = swapped == 0, firsts;
	MPI_Allreduce(&first, &firsts, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (firsts != 1)
		fail("ranks that swapped first", firsts, 1);
	if (!first && swapped != 1000 + peer)
		fail("MPI_REPLACE fetched", swapped, 1000 + peer);

	MPI_Win_lock_all(0, win);
	int64_t counter, last;
	MPI_Fetch_and_op(NULL, &counter, MPI_INT64_T, 0, SLOT_COUNTER * sizeof(int64_t), MPI_NO_OP, win);
	MPI_Fetch_and_op(NULL, &last, MPI_INT64_T, 1, SLOT_SWAP * sizeof(int64_t), MPI_NO_OP, win);
	MPI_Win_flush_all(win);
	if (counter != 2 * ROUNDS)
		fail("counter after MPI_Fetch_and_op", counter, 2 * ROUNDS);
	if (last != 1000 + (first ? peer : rank))
		fail("value after both MPI_REPLACE", last, 1000 + (first ? peer : rank));
	printf("onesided: rank %d: MPI_Fetch_and_op: %d MPI_SUM from each rank, counter %lld; MPI_REPLACE %s\n", rank,
	       ROUNDS, (long long)counter, first ? "first" : "second");

	/* MPI_Compare_and_swap: both ranks try to swap rank 1's -1 for their
	 * rank; exactly one sees -1. */
	int64_t expect = -1, desired = rank, old;
	MPI_Compare_and_swap(&desired, &expect, &old, MPI_INT64_T, 1, SLOT_CAS * sizeof(int64_t), win);
	MPI_Win_flush(1, win);
	MPI_Win_unlock_all(win);
	int won = old == -1, winners;
	MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (winners != 1)
		fail("MPI_Compare_and_swap winners", winners, 1);
	if (!won && old != peer)
		fail("MPI_Compare_and_swap loser saw", old, peer);
	MPI_Win_lock_all(0, win);
	int64_t final_cas;
	MPI_Fetch_and_op(NULL, &final_cas, MPI_INT64_T, 1, SLOT_CAS * sizeof(int64_t), MPI_NO_OP, win);
	MPI_Win_flush(1, win);
	if ((won && final_cas != rank) || (!won && final_cas != peer))
		fail("value after MPI_Compare_and_swap", final_cas, won ? rank : peer);
	/* A compare that does not match leaves the value. */
	int64_t wrong = 12345;
	MPI_Compare_and_swap(&desired, &wrong, &old, MPI_INT64_T, 1, SLOT_CAS * sizeof(int64_t), win);
	MPI_Win_flush(1, win);
	if (old != final_cas)
		fail("MPI_Compare_and_swap mismatch fetched", old, final_cas);
	MPI_Win_unlock_all(win);
	printf("onesided: rank %d: MPI_Compare_and_swap: %s\n", rank, won ? "won" : "lost");
	MPI_Barrier(MPI_COMM_WORLD);

	/* MPI_Accumulate: both ranks add i*(rank+1) to rank 0's doubles,
	 * then MPI_Get_accumulate with MPI_NO_OP reads them. */
	double add[ACC_N], back[ACC_N];
	for (int i = 0; i < ACC_N; i++)
		add[i] = (double)i * (rank + 1);
	MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
	MPI_Accumulate(add, ACC_N, MPI_DOUBLE, 0, ACC_OFF, ACC_N, MPI_DOUBLE, MPI_SUM, win);
	MPI_Win_unlock(0, win);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
	MPI_Get_accumulate(NULL, 0, MPI_DOUBLE, back, ACC_N, MPI_DOUBLE, 0, ACC_OFF, ACC_N, MPI_DOUBLE, MPI_NO_OP, win);
	MPI_Win_unlock(0, win);
	for (int i = 0; i < ACC_N; i++) {
		double want = 0.5 * i + 3.0 * i; /* initial + i*1 + i*2 */
		if (back[i] != want)
			fail("MPI_Accumulate(MPI_SUM) element", (long long)back[i], (long long)want);
	}
	printf("onesided: rank %d: MPI_Accumulate: %d doubles summed from both ranks\n", rank, ACC_N);
	MPI_Barrier(MPI_COMM_WORLD);

	/* MPI_Put and MPI_Get with MPI_Win_flush: each rank writes its
	 * pattern into its own part of the peer's byte area at several
	 * sizes, flushes, reads it back, and after a barrier checks what the
	 * peer wrote into its own memory. */
	static const size_t sizes[] = {1, 8, 64, 1000, 4096, 65536, 1 << 20};
	size_t half = BYTES_N / 2;
	unsigned char *src = malloc(half), *dst = malloc(half);
	if (!src || !dst)
		MPI_Abort(MPI_COMM_WORLD, 3);
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t len = sizes[s];
		MPI_Aint off = BYTES_OFF + rank * half;
		for (size_t i = 0; i < len; i++)
			src[i] = pattern(rank, i, len);
		memset(dst, 0xee, len);
		MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win);
		MPI_Put(src, (int)len, MPI_BYTE, peer, off, (int)len, MPI_BYTE, win);
		MPI_Win_flush(peer, win);
		MPI_Get(dst, (int)len, MPI_BYTE, peer, off, (int)len, MPI_BYTE, win);
		MPI_Win_flush(peer, win);
		MPI_Win_unlock(peer, win);
		if (memcmp(src, dst, len) != 0) {
			size_t i = 0;
			while (src[i] == dst[i])
				i++;
			fprintf(stderr, "onesided: rank %d: MPI_Get of %zu bytes differs at %zu\n", rank, len, i);
			fail("MPI_Get byte", dst[i], src[i]);
		}
		MPI_Barrier(MPI_COMM_WORLD);
		unsigned char *in = bytes + peer * half;
		for (size_t i = 0; i < len; i++)
			if (in[i] != pattern(peer, i, len))
				fail("byte the peer put", in[i], pattern(peer, i, len));
		MPI_Barrier(MPI_COMM_WORLD);
	}
	printf("onesided: rank %d: MPI_Put/MPI_Get with MPI_Win_flush: %zu sizes, 1 B to 1 MiB\n", rank,
	       sizeof(sizes) / sizeof(sizes[0]));
	free(src);
	free(dst);

	MPI_Win_free(&win);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("onesided: OK\n");
	MPI_Finalize();
	return 0;
}
