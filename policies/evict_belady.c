/*
 * Belady's optimal eviction (MIN): the victim is the resident expert whose
 * next use lies farthest in the future, read from env->future (trace replay
 * and simulation know it; live runs do not, so the loader refuses it there).
 * For experts of one size with demand fetching it minimises misses: the upper
 * bound every ablation is measured against.
 *
 * A max-heap (as a min-heap on NEVER - next_use) holds each resident expert's
 * next use, recomputed on every access.  If a driver ever fails to report an
 * access, a key falls into the past and would keep that expert forever; a
 * second min-heap on next use finds such stale keys at victim time and
 * refreshes them, so the answer stays right at O(log n) per step.
 */
#include <string.h>

#include "eheap.h"
#include "strata/policy.h"

struct belady {
	struct eheap far;   /* min on STRATA_NEVER - next: top = farthest */
	struct eheap near;  /* min on next: finds stale keys */
	uint32_t *aside;
	const struct strata_future *f;
};

static int belady_init(struct strata_policy *p, struct strata_error *err)
{
	struct belady *b = p->priv;
	uint32_t n = p->env->n_ids;
	b->f = p->env->future;
	if (eheap_init(&b->far, n) || eheap_init(&b->near, n) ||
	    !(b->aside = malloc(sizeof(uint32_t) * (n ? n : 1))))
		return STRATA_ERR(err, STRATA_ENOMEM, "evict belady: out of memory");
	return STRATA_OK;
}

static void belady_free(struct strata_policy *p)
{
	struct belady *b = p->priv;
	eheap_free(&b->far);
	eheap_free(&b->near);
	free(b->aside);
}

static void set_next(struct belady *b, uint32_t eid, uint64_t next)
{
	eheap_put(&b->far, eid, STRATA_NEVER - next, 0);
	eheap_put(&b->near, eid, next, 0);
}

/* First use at or after now. */
static uint64_t next_from(const struct belady *b, uint32_t eid, uint64_t now)
{
	/* next_use is strictly after its argument.  At now == 0 that misses an
	 * access at 0 itself; only a preload or prefetch inserts then, and the
	 * access at 0 (on_access) sets the right key before any victim choice. */
	if (now == 0)
		return b->f->next_use(b->f, eid, 0);
	return b->f->next_use(b->f, eid, now - 1);
}

static void belady_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct belady *b = p->priv;
	if (eid < b->far.n_ids)
		set_next(b, eid, next_from(b, eid, now));
}

static void belady_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct belady *b = p->priv;
	if (eid < b->far.n_ids && eheap_has(&b->far, eid))
		set_next(b, eid, b->f->next_use(b->f, eid, now));
}

static void belady_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct belady *b = p->priv;
	eheap_remove(&b->far, eid);
	eheap_remove(&b->near, eid);
}

static int skip_pinned(const void *ctx, uint32_t e)
{
	const struct strata_residency *r = ctx;
	return r && r->pinned && r->pinned[e];
}

static int64_t belady_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct belady *b = p->priv;
	/* refresh keys whose use has passed unseen */
	while (b->near.n) {
		uint32_t e = eheap_top(&b->near);
		uint64_t next = b->near.heap[0].k1;
		if (next >= now || next == STRATA_NEVER)
			break;
		set_next(b, e, next_from(b, e, now));
	}
	return eheap_min_where(&b->far, skip_pinned, r, b->aside, b->far.n_ids);
}

const struct strata_evict_ops strata_evict_belady = {
	.name = "belady", .version = STRATA_POLICY_ABI, .flags = STRATA_POLICY_F_NEEDS_FUTURE,
	.help = "optimal: evict the expert used farthest in the future (needs the trace's future)",
	.priv_size = sizeof(struct belady),
	.init = belady_init, .free = belady_free, .on_insert = belady_on_insert,
	.on_access = belady_on_access, .on_remove = belady_on_remove, .victim = belady_victim,
};
