/*
 * LRU and FIFO eviction: a doubly linked list over expert ids, most recent at
 * the head.  LRU moves an expert to the head on every access; FIFO only on
 * insertion.  The victim is the tail-most unpinned expert: O(1) unless the
 * tail is pinned (at most the current layer's experts).
 */
#include <stdlib.h>

#include "strata/policy.h"

struct lru {
	int32_t *prev, *next; /* per eid; -1 ends */
	int32_t head, tail;
	uint8_t *in;          /* per eid: on the list */
	uint32_t n_ids;
	int move_on_access;   /* 1 for LRU, 0 for FIFO */
};

static int list_init(struct strata_policy *p, int move, struct strata_error *err)
{
	struct lru *l = p->priv;
	l->n_ids = p->env->n_ids;
	l->prev = malloc(sizeof(int32_t) * (l->n_ids ? l->n_ids : 1));
	l->next = malloc(sizeof(int32_t) * (l->n_ids ? l->n_ids : 1));
	l->in = calloc(l->n_ids ? l->n_ids : 1, 1);
	if (!l->prev || !l->next || !l->in)
		return STRATA_ERR(err, STRATA_ENOMEM, "evict %s: out of memory", move ? "lru" : "fifo");
	l->head = l->tail = -1;
	l->move_on_access = move;
	return STRATA_OK;
}

static int lru_init(struct strata_policy *p, struct strata_error *err)
{
	return list_init(p, 1, err);
}

static int fifo_init(struct strata_policy *p, struct strata_error *err)
{
	return list_init(p, 0, err);
}

static void lru_free(struct strata_policy *p)
{
	struct lru *l = p->priv;
	free(l->prev);
	free(l->next);
	free(l->in);
}

static void unlink_eid(struct lru *l, uint32_t e)
{
	int32_t pv = l->prev[e], nx = l->next[e];
	if (pv >= 0)
		l->next[pv] = nx;
	else
		l->head = nx;
	if (nx >= 0)
		l->prev[nx] = pv;
	else
		l->tail = pv;
	l->in[e] = 0;
}

static void push_head(struct lru *l, uint32_t e)
{
	l->prev[e] = -1;
	l->next[e] = l->head;
	if (l->head >= 0)
		l->prev[l->head] = (int32_t)e;
	else
		l->tail = (int32_t)e;
	l->head = (int32_t)e;
	l->in[e] = 1;
}

static void lru_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lru *l = p->priv;
	if (eid >= l->n_ids)
		return;
	if (l->in[eid])
		unlink_eid(l, eid);
	push_head(l, eid);
}

static void lru_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lru *l = p->priv;
	if (eid >= l->n_ids || !l->move_on_access)
		return;
	if (l->in[eid])
		unlink_eid(l, eid);
	push_head(l, eid);
}

static void lru_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct lru *l = p->priv;
	if (eid < l->n_ids && l->in[eid])
		unlink_eid(l, eid);
}

static int64_t lru_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct lru *l = p->priv;
	for (int32_t e = l->tail; e >= 0; e = l->prev[e])
		if (!(r && r->pinned && r->pinned[e]))
			return e;
	return STRATA_NO_EXPERT;
}

const struct strata_evict_ops strata_evict_lru = {
	.name = "lru", .version = STRATA_POLICY_ABI,
	.help = "least recently used leaves first",
	.priv_size = sizeof(struct lru),
	.init = lru_init, .free = lru_free, .on_insert = lru_on_insert, .on_access = lru_on_access,
	.on_remove = lru_on_remove, .victim = lru_victim,
};

const struct strata_evict_ops strata_evict_fifo = {
	.name = "fifo", .version = STRATA_POLICY_ABI,
	.help = "first in, first out (accesses do not refresh): a cheap baseline",
	.priv_size = sizeof(struct lru),
	.init = fifo_init, .free = lru_free, .on_insert = lru_on_insert, .on_access = lru_on_access,
	.on_remove = lru_on_remove, .victim = lru_victim,
};
