/*
 * check.h: how the provider's C test programs fail. Each macro prints
 * where and why to stderr and exits 1; the Go test shows that output.
 */
#ifndef XDPFAB_TESTDATA_CHECK_H
#define XDPFAB_TESTDATA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <rdma/fi_errno.h>

/* CHECK: x returns a negative errno on failure. */
#define CHECK(x)                                                                                   \
	do {                                                                                       \
		long r_ = (long)(x);                                                               \
		if (r_ < 0) {                                                                      \
			fprintf(stderr, "%s:%d: %s: %ld (%s)\n", __FILE__, __LINE__, #x, r_,       \
				fi_strerror((int)-r_));                                            \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* ERRNO: x returns -err. */
#define ERRNO(x, err)                                                                              \
	do {                                                                                       \
		long r_ = (long)(x);                                                               \
		if (r_ != -(long)(err)) {                                                          \
			fprintf(stderr, "%s:%d: %s: %ld, want %ld (%s)\n", __FILE__, __LINE__, #x, \
				r_, -(long)(err), fi_strerror(err));                               \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* EXPECT: cond holds, else the printf-style message. */
#define EXPECT(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#endif
