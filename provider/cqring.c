/*
 * The completion ring's C side (cqring.h): allocation and the reader.
 */
#include <stdlib.h>
#include <string.h>

#include "cqring.h"

struct xf_cqring *xf_cqring_new(uint32_t slots)
{
	struct xf_cqring *r;

	if (slots == 0 || (slots & (slots - 1)) != 0)
		return NULL;
	if (posix_memalign((void **)&r, 64, sizeof(*r) + (size_t)slots * sizeof(struct xf_cq_slot)) != 0)
		return NULL;
	memset(r, 0, sizeof(*r));
	r->mask = slots - 1;
	r->slot = (struct xf_cq_slot *)(r + 1);
	return r;
}

void xf_cqring_free(struct xf_cqring *r) { free(r); }

ssize_t xf_cqring_read(struct xf_cqring *r, size_t entry_size, void *buf, size_t count, fi_addr_t *src)
{
	for (;;) {
		uint64_t cons = __atomic_load_n(&r->cons, __ATOMIC_ACQUIRE);
		uint64_t prod = __atomic_load_n(&r->prod, __ATOMIC_ACQUIRE);
		uint64_t n = prod - cons;

		if (n == 0)
			return 0;
		if (n > count)
			n = count;
		for (uint64_t i = 0; i < n; i++) {
			const struct xf_cq_slot *s = &r->slot[(cons + i) & r->mask];

			memcpy((char *)buf + i * entry_size, &s->e, entry_size);
			if (src)
				src[i] = s->src;
		}
		if (__atomic_compare_exchange_n(&r->cons, &cons, cons + n, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return (ssize_t)n;
	}
}
