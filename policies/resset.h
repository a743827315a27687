/*
 * A dense set of resident expert ids with O(1) insert and remove, for
 * policies whose victim is a scan of the resident set under a score that
 * depends on the moment (moe-infinity, least-stale).  Internal to policies/.
 */
#ifndef STRATA_POLICIES_RESSET_H
#define STRATA_POLICIES_RESSET_H

#include <stdint.h>
#include <stdlib.h>

#include "strata/policy.h"

#define RESSET_NONE UINT32_MAX

struct resset {
	uint32_t *id, *pos;  /* members, dense; per eid its index or RESSET_NONE */
	uint32_t n, n_ids;
};

static inline int resset_init(struct resset *s, uint32_t n_ids)
{
	size_t n = n_ids ? n_ids : 1;
	s->n = 0;
	s->n_ids = n_ids;
	s->id = malloc(n * sizeof(uint32_t));
	s->pos = malloc(n * sizeof(uint32_t));
	if (!s->id || !s->pos)
		return -1;
	for (uint32_t i = 0; i < n_ids; i++)
		s->pos[i] = RESSET_NONE;
	return 0;
}

static inline void resset_free(struct resset *s)
{
	free(s->id);
	free(s->pos);
}

static inline void resset_add(struct resset *s, uint32_t e)
{
	if (e < s->n_ids && s->pos[e] == RESSET_NONE) {
		s->pos[e] = s->n;
		s->id[s->n++] = e;
	}
}

static inline void resset_del(struct resset *s, uint32_t e)
{
	if (e >= s->n_ids || s->pos[e] == RESSET_NONE)
		return;
	uint32_t i = s->pos[e], last = s->id[--s->n];
	s->id[i] = last;
	s->pos[last] = i;
	s->pos[e] = RESSET_NONE;
}

/* The member of least score(ctx, eid) (ties: the smaller eid) that is not
 * pinned in r nor rejected by skip(ctx, eid) (skip may be NULL), or
 * STRATA_NO_EXPERT: a victim scan, O(members). */
static inline int64_t resset_min(const struct resset *s, const struct strata_residency *r,
				 double (*score)(const void *ctx, uint32_t e),
				 int (*skip)(const void *ctx, uint32_t e), const void *ctx)
{
	int64_t best = STRATA_NO_EXPERT;
	double best_s = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		uint32_t e = s->id[i];
		if ((r && r->pinned && r->pinned[e]) || (skip && skip(ctx, e)))
			continue;
		double x = score(ctx, e);
		if (best < 0 || x < best_s || (x == best_s && e < best)) {
			best = e;
			best_s = x;
		}
	}
	return best;
}

#endif
