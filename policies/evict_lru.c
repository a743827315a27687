/*
 * LRU and FIFO eviction: a doubly linked list over expert ids, most recent at
 * the head.  LRU moves an expert to the head on every access; FIFO only on
 * insertion.  The victim is the tail-most unpinned expert: O(1) unless the
 * tail is pinned (at most the current layer's experts).
 */
#include <stdlib.h>

#include "strata/policy.h"

/* One node per eid, both links together (an unlink touches one line, not
 * three arrays).  prev -2: not on the list; -1 ends it. */
struct lnode {
	int32_t prev, next;
};

#define OFF_LIST (-2)

struct lru {
	struct lnode *n;      /* per eid */
	int32_t head, tail;
	uint32_t n_ids;
	int move_on_access;   /* 1 for LRU, 0 for FIFO */
};

static int list_init(struct strata_policy *p, int move, struct strata_error *err)
{
	struct lru *l = p->priv;
	l->n_ids = p->env->n_ids;
	l->n = malloc(sizeof(*l->n) * (l->n_ids ? l->n_ids : 1));
	if (!l->n)
		return STRATA_ERR(err, STRATA_ENOMEM, "evict %s: out of memory", move ? "lru" : "fifo");
	for (uint32_t i = 0; i < l->n_ids; i++)
		l->n[i].prev = OFF_LIST;
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
	free(l->n);
}

static void unlink_eid(struct lru *l, uint32_t e)
{
	int32_t pv = l->n[e].prev, nx = l->n[e].next;
	if (pv >= 0)
		l->n[pv].next = nx;
	else
		l->head = nx;
	if (nx >= 0)
		l->n[nx].prev = pv;
	else
		l->tail = pv;
	l->n[e].prev = OFF_LIST;
}

static void push_head(struct lru *l, uint32_t e)
{
	l->n[e].prev = -1;
	l->n[e].next = l->head;
	if (l->head >= 0)
		l->n[l->head].prev = (int32_t)e;
	else
		l->tail = (int32_t)e;
	l->head = (int32_t)e;
}

static void lru_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lru *l = p->priv;
	if (eid >= l->n_ids)
		return;
	if (l->n[eid].prev != OFF_LIST)
		unlink_eid(l, eid);
	push_head(l, eid);
}

static void lru_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lru *l = p->priv;
	if (eid >= l->n_ids || !l->move_on_access)
		return;
	if (l->n[eid].prev != OFF_LIST)
		unlink_eid(l, eid);
	push_head(l, eid);
}

static void lru_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct lru *l = p->priv;
	if (eid < l->n_ids && l->n[eid].prev != OFF_LIST)
		unlink_eid(l, eid);
}

static int64_t lru_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct lru *l = p->priv;
	for (int32_t e = l->tail; e >= 0; e = l->n[e].prev)
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
