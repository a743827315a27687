/*
 * A dense set of resident expert ids with O(1) insert and remove, for
 * policies whose victim is a scan of the resident set under a score that
 * depends on the moment (moe-infinity, least-stale).  Internal to policies/.
 */
#ifndef STRATA_POLICIES_RESSET_H
#define STRATA_POLICIES_RESSET_H

#include <stdint.h>
#include <stdlib.h>

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

#endif
