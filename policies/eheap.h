/*
 * An indexed binary min-heap over expert ids with a two-part key (k1, k2),
 * ties broken by the smaller eid, so every order is total and runs are
 * deterministic.  Used by lfu-decay (lfu keeps lists by count, farthest a
 * bitmap of positions): O(log n) insert, update and remove, O(1) top.
 * Internal to policies/.
 */
#ifndef STRATA_POLICIES_EHEAP_H
#define STRATA_POLICIES_EHEAP_H

#include <stdint.h>
#include <stdlib.h>

/* A heap slot carries its keys, so a sift compares within one array instead
 * of chasing three per-eid arrays (the cost of lfu and farthest under churn). */
struct eheap_node {
	uint64_t k1, k2;
	uint32_t e;
};

struct eheap {
	struct eheap_node *heap; /* heap order */
	int32_t *pos;            /* per eid: index in heap, -1 if absent */
	uint32_t n, n_ids;
};

static inline int eheap_init(struct eheap *h, uint32_t n_ids)
{
	size_t n = n_ids ? n_ids : 1;
	h->n = 0;
	h->n_ids = n_ids;
	h->heap = malloc(n * sizeof(*h->heap));
	h->pos = malloc(n * sizeof(*h->pos));
	if (!h->heap || !h->pos)
		return -1;
	for (uint32_t i = 0; i < n_ids; i++)
		h->pos[i] = -1;
	return 0;
}

static inline void eheap_free(struct eheap *h)
{
	free(h->heap);
	free(h->pos);
	h->heap = NULL;
	h->pos = NULL;
}

static inline int eheap_node_less(const struct eheap_node *a, const struct eheap_node *b)
{
	if (a->k1 != b->k1)
		return a->k1 < b->k1;
	if (a->k2 != b->k2)
		return a->k2 < b->k2;
	return a->e < b->e;
}

static inline void eheap_set(struct eheap *h, uint32_t i, const struct eheap_node *x)
{
	h->heap[i] = *x;
	h->pos[x->e] = (int32_t)i;
}

static inline void eheap_up(struct eheap *h, uint32_t i)
{
	struct eheap_node x = h->heap[i];
	while (i > 0) {
		uint32_t parent = (i - 1) / 2;
		if (!eheap_node_less(&x, &h->heap[parent]))
			break;
		eheap_set(h, i, &h->heap[parent]);
		i = parent;
	}
	eheap_set(h, i, &x);
}

/* Put x at position i, whose old element was not larger, moving it down:
 * the hole goes to a leaf along the smaller children (one comparison per
 * level), then x climbs back from there (a few levels: an element that goes
 * down, a decay score just raised or the heap's last one, mostly belongs
 * near the bottom).  Floyd's order of work; half the comparisons of a sift
 * that compares x at every level.  Only the order's minimum is ever read, so
 * the heap's shape decides nothing. */
static inline void eheap_down_from_leaf(struct eheap *h, uint32_t i, const struct eheap_node *x)
{
	uint32_t top = i;
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && eheap_node_less(&h->heap[c + 1], &h->heap[c]))
			c++;
		eheap_set(h, i, &h->heap[c]);
		i = c;
	}
	while (i > top) {
		uint32_t parent = (i - 1) / 2;
		if (!eheap_node_less(x, &h->heap[parent]))
			break;
		eheap_set(h, i, &h->heap[parent]);
		i = parent;
	}
	eheap_set(h, i, x);
}

/* The eid on top (h->n > 0). */
static inline uint32_t eheap_top(const struct eheap *h)
{
	return h->heap[0].e;
}

static inline int eheap_has(const struct eheap *h, uint32_t e)
{
	return e < h->n_ids && h->pos[e] >= 0;
}

/* Insert e, or move it to its new key if present. */
static inline void eheap_put(struct eheap *h, uint32_t e, uint64_t k1, uint64_t k2)
{
	if (e >= h->n_ids)
		return;
	struct eheap_node x = { k1, k2, e };
	if (h->pos[e] < 0) {
		eheap_set(h, h->n++, &x);
		eheap_up(h, h->n - 1);
	} else {
		/* a smaller key can only go up, a larger one only down */
		uint32_t i = (uint32_t)h->pos[e];
		if (eheap_node_less(&x, &h->heap[i])) {
			eheap_set(h, i, &x);
			eheap_up(h, i);
		} else {
			eheap_down_from_leaf(h, i, &x);
		}
	}
}

static inline void eheap_remove(struct eheap *h, uint32_t e)
{
	if (!eheap_has(h, e))
		return;
	uint32_t i = (uint32_t)h->pos[e];
	h->pos[e] = -1;
	if (--h->n == i)
		return;
	struct eheap_node moved = h->heap[h->n];
	if (eheap_node_less(&moved, &h->heap[i])) {
		eheap_set(h, i, &moved);
		eheap_up(h, i);
	} else {
		eheap_down_from_leaf(h, i, &moved);
	}
}

/* Smallest element not rejected by skip(ctx, eid), or -1.  The heap is
 * searched without changing it: a node that is not rejected is the smallest
 * of its subtree, so only the children of rejected nodes are visited (pins
 * cover one layer's experts at most), and a subtree whose root is not below
 * the best found so far is skipped.  The order is total (ties by eid), so
 * the answer is the one a remove-and-put-back search gives.  aside: room
 * for aside_max >= n heap indices, the search's stack. */
static inline int64_t eheap_min_where(struct eheap *h, int (*skip)(const void *ctx, uint32_t e),
				      const void *ctx, uint32_t *aside, uint32_t aside_max)
{
	if (!h->n || !aside_max)
		return -1;
	uint32_t sp = 0, best = UINT32_MAX;
	aside[sp++] = 0;
	while (sp) {
		uint32_t i = aside[--sp];
		if (best != UINT32_MAX && !eheap_node_less(&h->heap[i], &h->heap[best]))
			continue;
		if (!skip(ctx, h->heap[i].e)) {
			best = i;
			continue;
		}
		uint32_t c = 2 * i + 1;
		/* each node is pushed once at most: sp stays below n <= aside_max */
		if (c < h->n)
			aside[sp++] = c;
		if (c + 1 < h->n)
			aside[sp++] = c + 1;
	}
	return best == UINT32_MAX ? -1 : (int64_t)h->heap[best].e;
}

#endif
