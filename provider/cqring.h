/*
 * The completion ring of a CQ: memory C reads without entering Go, so that
 * fi_cq_read on a CQ with completions costs no call into Go (an empty
 * one calls Go to drive or poll progress: xf_cq.manual). The Go side
 * (cqring.go, the CQ's fabric.CQSink) writes success completions into
 * it in the CQ's format; errors, and what follows an error until it is
 * read, stay in the Go CQ, read through Go (held says so).
 *
 * Protocol. prod and cons count slots from 0 and never wrap (64 bits).
 * One producer at a time (the Go CQ's lock): it fills slot[prod & mask]
 * when prod - cons <= mask, then stores prod + 1 (release). Readers, any
 * number at once (FI_THREAD_SAFE): load cons and prod (acquire), copy
 * slots [cons, min(prod, cons + count)), then claim them by a CAS of cons;
 * a failed CAS means another reader took them (and the producer may have
 * reused them): the copies are dropped and the read starts over. Go and C
 * use the same protocol (Go's sync/atomic on these fields).
 */
#ifndef XDPFAB_CQRING_H
#define XDPFAB_CQRING_H

#include <stdint.h>
#include <sys/types.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>

struct xf_cq_slot {
	struct fi_cq_tagged_entry e; /* every format is a prefix of it */
	fi_addr_t src;               /* fi_cq_readfrom's source */
};

struct xf_cqring {
	uint64_t prod; /* written by the Go producer only */
	uint8_t pad0[56];
	uint64_t cons; /* claimed by readers with CAS */
	uint8_t pad1[56];
	uint32_t held;  /* nonzero: the Go CQ holds completions too (or is closed) */
	uint32_t mask;  /* slots - 1, slots a power of two */
	struct xf_cq_slot *slot; /* right after the struct */
};

struct xf_cqring *xf_cqring_new(uint32_t slots);
void xf_cqring_free(struct xf_cqring *r);

/* Takes up to count completions into buf (entries of entry_size bytes,
 * the CQ format's) and their sources into src (if not NULL); returns how
 * many (0: the ring is empty). */
ssize_t xf_cqring_read(struct xf_cqring *r, size_t entry_size, void *buf, size_t count, fi_addr_t *src);

#endif
