/*
 * LFU and LFU with exponential decay.  The victim is the resident expert of
 * least (frequency score, last access, eid), pinned ones skipped.
 *
 * lfu keeps one list per count, each in (last access, eid) order, and a
 * bitmap of the counts that have members: an access moves an expert from
 * the list of count c to the tail of the list of c + 1 (its last access is
 * the newest), O(1); the victim is the head of the lowest non-empty list.
 * (A heap did the same in O(log n), sifting an expert down past every
 * expert of its old count on each access.)  lfu-decay's scores are doubles:
 * an indexed min-heap keyed by (score, last access) gives its victim in O(1)
 * and each access in O(log n).
 *
 * lfu: the score is the number of accesses while resident (history=1 keeps
 * counts across evictions, "perfect LFU" over what this tier saw).
 * lfu-decay: each access adds 1 and the score halves every `half_life`
 * tokens (one token = n_moe_layers * top_k accesses of the clock; the
 * default of 4 tokens beat LRU and every other half-life tried on the
 * synthetic Qwen3-shaped trace at a quarter of the experts cached).  Scores
 * are kept inflated, V = sum 2^(t_i/H), in log2 form, so an access updates
 * one key and comparisons never need a sweep over the resident set.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "eheap.h"
#include "strata/policy.h"

struct lfnode {
	uint64_t count, last;
	uint32_t prev, next;
	uint32_t in;
};

struct lfu {
	int history;          /* option (lfu) */
	double half_life;     /* option (lfu-decay), tokens */
	struct eheap h;
	uint32_t *aside;
	double *logv;         /* lfu-decay: log2 V per eid, -INFINITY for none */
	double h_clock;       /* half-life in clock units */
	int decay;
	/* lfu: per eid its count, last access (the list order), list links and
	 * membership in one record; per count a list (head, tail) and a bit
	 * "has members" */
	struct lfnode *nd;
	uint32_t *head, *tail;
	uint64_t *bits;
	uint64_t n_cnt;       /* counts with a list (a multiple of 64) */
	/* An insert not applied yet (NONE: none).  A driver inserts and then
	 * accesses at once (the engine's demand fetch): applied together, the
	 * expert goes straight to its place instead of to count 0 (lfu) or the
	 * heap's root (lfu-decay, key 0) and back.  Any other call applies it
	 * first, so every answer is the one the two steps give. */
	uint32_t pend;
	uint64_t pend_now;
	uint64_t lo;          /* no count below lo has members */
};

#define NONE UINT32_MAX

static const struct strata_option lfu_options[] = {
	{ .name = "history", .type = STRATA_OPT_BOOL, .offset = offsetof(struct lfu, history),
	  .def = "0", .help = "keep counts of evicted experts (perfect LFU)" },
	{ .name = NULL },
};

static const struct strata_option decay_options[] = {
	{ .name = "half_life", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct lfu, half_life),
	  .def = "4", .min = 0.001, .max = 1e12,
	  .help = "tokens after which an access counts half" },
	{ .name = "history", .type = STRATA_OPT_BOOL, .offset = offsetof(struct lfu, history),
	  .def = "0", .help = "keep scores of evicted experts" },
	{ .name = NULL },
};

static int common_init(struct strata_policy *p, int decay, struct strata_error *err)
{
	struct lfu *l = p->priv;
	uint32_t n = p->env->n_ids;
	l->decay = decay;
	l->pend = NONE;
	if (decay) {
		if (eheap_init(&l->h, n) || !(l->aside = malloc(sizeof(uint32_t) * (n ? n : 1))))
			goto oom;
		l->logv = malloc(sizeof(double) * (n ? n : 1));
		if (!l->logv)
			goto oom;
		for (uint32_t i = 0; i < n; i++)
			l->logv[i] = -INFINITY;
		const struct strata_model_spec *s = p->env->spec;
		double per_token = s ? (double)s->n_moe_layers * s->top_k : 1.0;
		l->h_clock = l->half_life * (per_token > 0 ? per_token : 1.0);
	} else {
		l->nd = calloc(n ? n : 1, sizeof(*l->nd));
		l->h.n_ids = n;
		if (!l->nd)
			goto oom;
	}
	return STRATA_OK;
oom:
	return STRATA_ERR(err, STRATA_ENOMEM, "evict %s: out of memory", decay ? "lfu-decay" : "lfu");
}

static int lfu_init(struct strata_policy *p, struct strata_error *err)
{
	return common_init(p, 0, err);
}

static int decay_init(struct strata_policy *p, struct strata_error *err)
{
	return common_init(p, 1, err);
}

static void lfu_free(struct strata_policy *p)
{
	struct lfu *l = p->priv;
	eheap_free(&l->h);
	free(l->aside);
	free(l->logv);
	free(l->nd);
	free(l->head);
	free(l->tail);
	free(l->bits);
}

/* Non-negative doubles order like their bit patterns; 0 means "no count". */
static uint64_t decay_key(double logv)
{
	if (logv == -INFINITY)
		return 0;
	double x = logv + 1100.0; /* log2 V >= log2(2^-1074) */
	if (x < 0)
		x = 0;
	uint64_t k;
	memcpy(&k, &x, sizeof(k));
	return k + 1;
}

/* ---- lfu: lists by count ---------------------------------------------- */

/* Lists up to count c; -1 (and the policy's error set) when memory runs out. */
static int grow(struct strata_policy *p, struct lfu *l, uint64_t c)
{
	if (c < l->n_cnt)
		return 0;
	uint64_t cap = l->n_cnt ? l->n_cnt : 64;
	while (cap <= c)
		cap *= 2;
	uint32_t *h = realloc(l->head, sizeof(*h) * cap);
	if (h)
		l->head = h;
	uint32_t *t = h ? realloc(l->tail, sizeof(*t) * cap) : NULL;
	if (t)
		l->tail = t;
	uint64_t *b = t ? realloc(l->bits, sizeof(*b) * (cap / 64)) : NULL;
	if (!b) {
		if (!p->error.code)
			STRATA_ERR(&p->error, STRATA_ENOMEM, "evict lfu: out of memory (count %llu)",
				   (unsigned long long)c);
		return -1;
	}
	l->bits = b;
	for (uint64_t i = l->n_cnt; i < cap; i++)
		l->head[i] = l->tail[i] = NONE;
	memset(&l->bits[l->n_cnt / 64], 0, sizeof(*b) * ((cap - l->n_cnt) / 64));
	l->n_cnt = cap;
	return 0;
}

/* Put eid in the list of its count, in (last, eid) order: at the tail but
 * for ties of last (several prefetches, or the preload, in one clock tick). */
static void list_add(struct strata_policy *p, struct lfu *l, uint32_t eid, uint64_t last)
{
	uint64_t c = l->nd[eid].count;
	if (grow(p, l, c))
		return;
	uint32_t t = l->tail[c];
	while (t != NONE && (l->nd[t].last > last || (l->nd[t].last == last && t > eid)))
		t = l->nd[t].prev;
	uint32_t n = t == NONE ? l->head[c] : l->nd[t].next;
	l->nd[eid].prev = t;
	l->nd[eid].next = n;
	if (t == NONE)
		l->head[c] = eid;
	else
		l->nd[t].next = eid;
	if (n == NONE)
		l->tail[c] = eid;
	else
		l->nd[n].prev = eid;
	l->nd[eid].last = last;
	l->nd[eid].in = 1;
	l->bits[c / 64] |= 1ull << (c % 64);
	if (c < l->lo)
		l->lo = c;
}

/* Take eid out of the list of count c (its count when it was put there). */
static void list_del(struct lfu *l, uint32_t eid, uint64_t c)
{
	uint32_t a = l->nd[eid].prev, b = l->nd[eid].next;
	if (a == NONE)
		l->head[c] = b;
	else
		l->nd[a].next = b;
	if (b == NONE)
		l->tail[c] = a;
	else
		l->nd[b].prev = a;
	l->nd[eid].in = 0;
	if (l->head[c] == NONE)
		l->bits[c / 64] &= ~(1ull << (c % 64));
}

/* The lowest count >= c with members, or UINT64_MAX. */
static uint64_t next_count(const struct lfu *l, uint64_t c)
{
	uint64_t w = c / 64, nw = l->n_cnt / 64;
	if (w >= nw)
		return UINT64_MAX;
	uint64_t bits = l->bits[w] & (~0ull << (c % 64));
	while (!bits) {
		if (++w == nw)
			return UINT64_MAX;
		bits = l->bits[w];
	}
	return w * 64 + (uint64_t)__builtin_ctzll(bits);
}

/* Apply a pending insert. */
static void flush(struct strata_policy *p, struct lfu *l)
{
	uint32_t e = l->pend;
	if (e == NONE)
		return;
	l->pend = NONE;
	if (l->decay)
		eheap_put(&l->h, e, decay_key(l->logv[e]), l->pend_now);
	else
		list_add(p, l, e, l->pend_now);
}

static void lfu_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lfu *l = p->priv;
	if (eid >= l->h.n_ids)
		return;
	flush(p, l);
	if (l->decay) {
		if (!l->history)
			l->logv[eid] = -INFINITY;
	} else {
		if (l->nd[eid].in)
			list_del(l, eid, l->nd[eid].count);
		if (!l->history)
			l->nd[eid].count = 0;
	}
	l->pend = eid;
	l->pend_now = now;
}

static void lfu_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lfu *l = p->priv;
	if (eid >= l->h.n_ids)
		return;
	bool pending = l->pend == eid; /* inserted just before: in the tier */
	if (pending)
		l->pend = NONE;
	else
		flush(p, l);
	if (l->decay) {
		double x = (double)now / l->h_clock, v = l->logv[eid];
		v = v == -INFINITY ? x : fmax(v, x) + log2(1.0 + exp2(-fabs(v - x)));
		l->logv[eid] = v;
		if (pending || eheap_has(&l->h, eid))
			eheap_put(&l->h, eid, decay_key(v), now);
	} else if (pending) {
		l->nd[eid].count++;
		list_add(p, l, eid, now);
	} else {
		if (l->nd[eid].in) {
			list_del(l, eid, l->nd[eid].count++);
			list_add(p, l, eid, now);
		} else {
			l->nd[eid].count++;
		}
	}
}

static void lfu_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct lfu *l = p->priv;
	flush(p, l);
	if (l->decay)
		eheap_remove(&l->h, eid);
	else if (eid < l->h.n_ids && l->nd[eid].in)
		list_del(l, eid, l->nd[eid].count);
}

static int skip_pinned(const void *ctx, uint32_t e)
{
	const struct strata_residency *r = ctx;
	return r && r->pinned && r->pinned[e];
}

static int64_t lfu_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct lfu *l = p->priv;
	flush(p, l);
	if (l->decay)
		return eheap_min_where(&l->h, skip_pinned, r, l->aside, l->h.n_ids);
	uint64_t c = next_count(l, l->lo);
	if (c != UINT64_MAX)
		l->lo = c; /* nothing below c has members */
	for (; c != UINT64_MAX; c = next_count(l, c + 1)) {
		for (uint32_t e = l->head[c]; e != NONE; e = l->nd[e].next)
			if (!skip_pinned(r, e))
				return e;
	}
	return STRATA_NO_EXPERT;
}

const struct strata_evict_ops strata_evict_lfu = {
	.name = "lfu", .version = STRATA_POLICY_ABI,
	.help = "least frequently used leaves first (ties: least recent)",
	.priv_size = sizeof(struct lfu), .options = lfu_options,
	.init = lfu_init, .free = lfu_free, .on_insert = lfu_on_insert, .on_access = lfu_on_access,
	.on_remove = lfu_on_remove, .victim = lfu_victim,
};

const struct strata_evict_ops strata_evict_lfu_decay = {
	.name = "lfu-decay", .version = STRATA_POLICY_ABI,
	.help = "LFU whose counts halve every half_life tokens (recency-weighted frequency)",
	.priv_size = sizeof(struct lfu), .options = decay_options,
	.init = decay_init, .free = lfu_free, .on_insert = lfu_on_insert, .on_access = lfu_on_access,
	.on_remove = lfu_on_remove, .victim = lfu_victim,
};
