/*
 * p2p: MPI point-to-point messages and collectives between two ranks,
 * every result checked. Run over xdpfab with pml cm and mtl ofi
 * (scripts/demo-mpi.sh, tests/mpi) every message is a tagged libfabric
 * message (fi_tsend/fi_tsenddata/fi_tinject, fi_trecv, FI_PEEK/FI_CLAIM
 * for probes); the collectives are built from them.
 *
 * Prints one line per check and "p2p: OK" at the end; exits non-zero
 * (MPI_Abort) at the first wrong value.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, peer;

static void fail(const char *what, long long got, long long want)
{
	fprintf(stderr, "p2p: rank %d: %s: got %lld, want %lld\n", rank, what, got, want);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

static unsigned char pattern(int from, size_t i, size_t len, int round)
{
	return (unsigned char)(from * 61 + i * 13 + (i >> 10) + len + round * 29);
}

static void fill(unsigned char *b, int from, size_t len, int round)
{
	for (size_t i = 0; i < len; i++)
		b[i] = pattern(from, i, len, round);
}

static void check(const char *what, const unsigned char *b, int from, size_t len, int round)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != pattern(from, i, len, round)) {
			fprintf(stderr, "p2p: rank %d: %s: %zu-byte message differs at byte %zu\n", rank, what, len, i);
			fail(what, b[i], pattern(from, i, len, round));
		}
}

static void check_status(const char *what, MPI_Status *st, int source, int tag, int count)
{
	int n;

	MPI_Get_count(st, MPI_BYTE, &n);
	if (st->MPI_SOURCE != source)
		fail(what, st->MPI_SOURCE, source);
	if (st->MPI_TAG != tag)
		fail(what, st->MPI_TAG, tag);
	if (n != count)
		fail(what, n, count);
}

int main(int argc, char **argv)
{
	int size;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (rank == 0)
			fprintf(stderr, "p2p: needs exactly 2 ranks, got %d\n", size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	peer = 1 - rank;

	static const size_t sizes[] = {0, 1, 8, 1000, 4096, 9000, 65536, 1 << 20, 8 << 20};
	const int nsizes = sizeof(sizes) / sizeof(sizes[0]);
	size_t max = sizes[nsizes - 1];
	unsigned char *out = malloc(max), *in = malloc(max);
	if (!out || !in)
		MPI_Abort(MPI_COMM_WORLD, 3);

	/* Ping-pong with MPI_Send/MPI_Recv at every size: rank 0 sends,
	 * rank 1 checks and answers with its own pattern. */
	for (int s = 0; s < nsizes; s++) {
		size_t len = sizes[s];
		MPI_Status st;
		memset(in, 0, len);
		if (rank == 0) {
			fill(out, 0, len, s);
			MPI_Send(out, (int)len, MPI_BYTE, 1, 100 + s, MPI_COMM_WORLD);
			MPI_Recv(in, (int)len, MPI_BYTE, 1, 200 + s, MPI_COMM_WORLD, &st);
			check_status("MPI_Recv status", &st, 1, 200 + s, (int)len);
			check("MPI_Recv", in, 1, len, s);
		} else {
			MPI_Recv(in, (int)len, MPI_BYTE, 0, 100 + s, MPI_COMM_WORLD, &st);
			check_status("MPI_Recv status", &st, 0, 100 + s, (int)len);
			check("MPI_Recv", in, 0, len, s);
			fill(out, 1, len, s);
			MPI_Send(out, (int)len, MPI_BYTE, 0, 200 + s, MPI_COMM_WORLD);
		}
	}
	printf("p2p: rank %d: MPI_Send/MPI_Recv: %d sizes, 0 B to %zu B\n", rank, nsizes, max);

	/* Both ranks at once, non-blocking, receives posted with wildcards:
	 * MPI_Isend/MPI_Irecv(MPI_ANY_SOURCE, MPI_ANY_TAG) and MPI_Waitall. */
	for (int s = 0; s < nsizes; s++) {
		size_t len = sizes[s];
		MPI_Request req[2];
		MPI_Status st[2];
		fill(out, rank, len, s + 50);
		memset(in, 0, len);
		MPI_Irecv(in, (int)len, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req[0]);
		MPI_Isend(out, (int)len, MPI_BYTE, peer, 300 + s, MPI_COMM_WORLD, &req[1]);
		MPI_Waitall(2, req, st);
		check_status("MPI_Irecv status", &st[0], peer, 300 + s, (int)len);
		check("MPI_Irecv", in, peer, len, s + 50);
	}
	printf("p2p: rank %d: MPI_Isend/MPI_Irecv(MPI_ANY_SOURCE, MPI_ANY_TAG): %d sizes both ways at once\n", rank,
	       nsizes);

	/* Tag matching and unexpected messages: rank 0 starts tags 3, 2, 1
	 * (small, large, small; non-blocking, since a large send may wait to
	 * be matched); rank 1 waits for tag 3 to be there without receiving
	 * it (MPI_Probe), then receives 1, 2, 3. Tag 1 goes by MPI_Issend,
	 * which completes only once matched. */
	if (rank == 0) {
		MPI_Request req[3];
		unsigned char *bufs[3] = {out, out + (4 << 20), out + (6 << 20)};
		for (int t = 3; t >= 1; t--) {
			size_t len = t == 2 ? (2 << 20) : 777;
			fill(bufs[t - 1], 0, len, t);
			if (t == 1)
				MPI_Issend(bufs[t - 1], (int)len, MPI_BYTE, 1, t, MPI_COMM_WORLD, &req[t - 1]);
			else
				MPI_Isend(bufs[t - 1], (int)len, MPI_BYTE, 1, t, MPI_COMM_WORLD, &req[t - 1]);
		}
		MPI_Waitall(3, req, MPI_STATUSES_IGNORE);
	} else {
		MPI_Status st;
		MPI_Probe(0, 3, MPI_COMM_WORLD, &st);
		check_status("MPI_Probe status", &st, 0, 3, 777);
		for (int t = 1; t <= 3; t++) {
			size_t len = t == 2 ? (2 << 20) : 777;
			memset(in, 0, len);
			MPI_Recv(in, (int)len, MPI_BYTE, 0, t, MPI_COMM_WORLD, &st);
			check_status("out-of-order MPI_Recv status", &st, 0, t, (int)len);
			check("out-of-order MPI_Recv", in, 0, len, t);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	printf("p2p: rank %d: tags received out of send order, MPI_Probe, MPI_Issend\n", rank);

	/* MPI_Iprobe and matched probes (MPI_Improbe/MPI_Mrecv). */
	if (rank == 0) {
		int v[4] = {7, 8, 9, 10};
		MPI_Send(v, 4, MPI_INT, 1, 42, MPI_COMM_WORLD);
		MPI_Send(v, 2, MPI_INT, 1, 43, MPI_COMM_WORLD);
	} else {
		int flag = 0, v[4] = {0};
		MPI_Message msg;
		MPI_Status st;
		double deadline = MPI_Wtime() + 30;
		while (!flag && MPI_Wtime() < deadline)
			MPI_Iprobe(0, 42, MPI_COMM_WORLD, &flag, &st);
		if (!flag)
			fail("MPI_Iprobe found the message", 0, 1);
		check_status("MPI_Iprobe status", &st, 0, 42, 4 * (int)sizeof(int));
		MPI_Recv(v, 4, MPI_INT, 0, 42, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		if (v[0] != 7 || v[3] != 10)
			fail("MPI_Recv after MPI_Iprobe", v[3], 10);
		flag = 0;
		while (!flag && MPI_Wtime() < deadline)
			MPI_Improbe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st);
		if (!flag)
			fail("MPI_Improbe found the message", 0, 1);
		check_status("MPI_Improbe status", &st, 0, 43, 2 * (int)sizeof(int));
		memset(v, 0, sizeof(v));
		MPI_Mrecv(v, 2, MPI_INT, &msg, &st);
		if (v[0] != 7 || v[1] != 8 || v[2] != 0)
			fail("MPI_Mrecv", v[1], 8);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	printf("p2p: rank %d: MPI_Iprobe, MPI_Improbe/MPI_Mrecv\n", rank);

	/* A rank to itself (MPI_Sendrecv): with pml cm the message goes to
	 * the rank's own libfabric endpoint. */
	for (int s = 0; s < nsizes; s++) {
		size_t len = sizes[s];
		MPI_Status st;
		fill(out, rank, len, s + 70);
		memset(in, 0, len);
		MPI_Sendrecv(out, (int)len, MPI_BYTE, rank, 400 + s, in, (int)len, MPI_BYTE, rank, 400 + s,
			     MPI_COMM_WORLD, &st);
		check_status("MPI_Sendrecv to self status", &st, rank, 400 + s, (int)len);
		check("MPI_Sendrecv to self", in, rank, len, s + 70);
	}
	printf("p2p: rank %d: MPI_Sendrecv to itself: %d sizes\n", rank, nsizes);

	/* Collectives of two ranks. */
	for (int s = 0; s < nsizes; s++) {
		size_t len = sizes[s];
		int root = s % 2;
		if (rank == root)
			fill(out, root, len, s + 100);
		else
			memset(out, 0, len);
		MPI_Bcast(out, (int)len, MPI_BYTE, root, MPI_COMM_WORLD);
		check("MPI_Bcast", out, root, len, s + 100);
	}
	long long sum = 0, mine = 1000 * (rank + 1);
	MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (sum != 3000)
		fail("MPI_Allreduce(MPI_SUM)", sum, 3000);
	enum { NV = 100000 };
	double *dv = malloc(NV * sizeof(double)), *dr = malloc(NV * sizeof(double));
	if (!dv || !dr)
		MPI_Abort(MPI_COMM_WORLD, 3);
	for (int i = 0; i < NV; i++)
		dv[i] = rank == 0 ? i : NV - i;
	MPI_Allreduce(dv, dr, NV, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	for (int i = 0; i < NV; i++)
		if (dr[i] != (i > NV - i ? i : NV - i))
			fail("MPI_Allreduce(MPI_MAX) element", (long long)dr[i], i > NV - i ? i : NV - i);
	int gathered[2] = {-1, -1}, me = 10 + rank;
	MPI_Allgather(&me, 1, MPI_INT, gathered, 1, MPI_INT, MPI_COMM_WORLD);
	if (gathered[0] != 10 || gathered[1] != 11)
		fail("MPI_Allgather", gathered[peer], 10 + peer);
	for (int i = 0; i < 100; i++)
		MPI_Barrier(MPI_COMM_WORLD);
	printf("p2p: rank %d: MPI_Bcast (%d sizes), MPI_Allreduce (sum, max of %d doubles), MPI_Allgather, "
	       "MPI_Barrier\n",
	       rank, nsizes, NV);
	free(dv);
	free(dr);
	free(out);
	free(in);

	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("p2p: OK\n");
	MPI_Finalize();
	return 0;
}
