/*
 * The extent arena: the best-fit allocator inside a memory tier (see
 * include/strata/arena.h).
 *
 * The arena is a list of blocks in address order, each a hole or a reserved
 * extent; a hole is also in the class of its length.  Best fit is the
 * smallest length that holds the request and, among holes of that length,
 * the lowest offset: the same choice as a linear scan over holes in address
 * order (the allocator's first form, which tests/test_tier.c keeps as a
 * reference).  A release finds its block through a hash map of reserved
 * offsets and its neighbours through the list, so coalescing costs no
 * search.  A cache simulation holds hundreds of holes and reserves after
 * every eviction, which is why this is not a scan any more.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "strata/arena.h"

static uint64_t align_up(uint64_t v) { return (v + STRATA_TIER_ALIGN - 1) / STRATA_TIER_ALIGN * STRATA_TIER_ALIGN; }

#define NO_KEY UINT64_MAX

/* ---- offset maps: linear probing, backward-shift deletion --------------- */

static inline uint32_t map_slot(const struct strata_arena_map *m, uint64_t k)
{
	/* offsets and lengths share factors (extent sizes): mix every bit in
	 * (murmur3's finalizer) or linear probing clusters */
	k /= STRATA_TIER_ALIGN;
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (uint32_t)k & (m->cap - 1);
}

static int map_alloc(struct strata_arena_map *m, uint32_t cap)
{
	m->slot = malloc(sizeof(*m->slot) * cap);
	if (!m->slot)
		return -1;
	for (uint32_t i = 0; i < cap; i++)
		m->slot[i].key = NO_KEY;
	m->cap = cap;
	m->n = 0;
	return 0;
}

static void map_put_new(struct strata_arena_map *m, uint64_t k, uint64_t v)
{
	uint32_t i = map_slot(m, k);
	while (m->slot[i].key != NO_KEY)
		i = (i + 1) & (m->cap - 1);
	m->slot[i].key = k;
	m->slot[i].val = v;
	m->n++;
}

static int map_grow(struct strata_arena_map *m)
{
	struct strata_arena_map o = *m;
	if (map_alloc(m, o.cap * 2)) {
		*m = o;
		return -1;
	}
	for (uint32_t i = 0; i < o.cap; i++)
		if (o.slot[i].key != NO_KEY)
			map_put_new(m, o.slot[i].key, o.slot[i].val);
	free(o.slot);
	return 0;
}

/* Room for one more key (load <= 1/4: short probe runs); -1 when memory runs out. */
static inline int map_reserve(struct strata_arena_map *m)
{
	return (m->n + 1) * 4 <= m->cap ? 0 : map_grow(m);
}

/* Slot of k, or UINT32_MAX. */
static inline uint32_t map_find(const struct strata_arena_map *m, uint64_t k)
{
	uint32_t i = map_slot(m, k);
	for (;;) {
		uint64_t x = m->slot[i].key;
		if (x == k)
			return i;
		if (x == NO_KEY)
			return UINT32_MAX;
		i = (i + 1) & (m->cap - 1);
	}
}

static void map_del_slot(struct strata_arena_map *m, uint32_t i)
{
	uint32_t mask = m->cap - 1, j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (m->slot[j].key == NO_KEY)
			break;
		uint32_t h = map_slot(m, m->slot[j].key);
		/* move j back to i unless its home lies cyclically in (i, j] */
		if (((j - h) & mask) >= ((j - i) & mask)) {
			m->slot[i].key = m->slot[j].key;
			m->slot[i].val = m->slot[j].val;
			i = j;
		}
	}
	m->slot[i].key = NO_KEY;
	m->n--;
}

/* ---- size classes -------------------------------------------------------- */

/* First position in ascending v[0..n) with v >= want.  Branch-free: the
 * comparisons are unpredictable, the arrays short. */
static inline uint32_t asc_lower(const uint64_t *v, uint32_t n, uint64_t want)
{
	uint32_t base = 0;
	if (!n)
		return 0;
	while (n > 1) {
		uint32_t half = n / 2;
		base = v[base + half - 1] < want ? base + half : base;
		n -= half;
	}
	return base + (v[base] < want);
}

static inline void mark(struct strata_arena *a, uint32_t pos, bool on)
{
	if (on)
		a->nonempty[pos / 64] |= 1ull << (pos % 64);
	else
		a->nonempty[pos / 64] &= ~(1ull << (pos % 64));
}

/* The class of length len, or UINT32_MAX: a table for short lengths (holes
 * and extents are mostly short), the map for the rest. */
static inline uint32_t cls_find(const struct strata_arena *a, uint64_t len)
{
	uint64_t u = len / STRATA_TIER_ALIGN;
	if (u < a->n_small)
		return a->small[u] - 1;
	uint32_t j = map_find(&a->by_len, len);
	return j == UINT32_MAX ? UINT32_MAX : (uint32_t)a->by_len.slot[j].val;
}

/* First position >= p in order[] of a class with holes (n_cls if none). */
static inline uint32_t next_nonempty(const struct strata_arena *a, uint32_t p)
{
	uint32_t w = p / 64, nw = (a->n_cls + 63) / 64;
	if (w >= nw)
		return a->n_cls;
	uint64_t bits = a->nonempty[w] & (~0ull << (p % 64));
	while (!bits) {
		if (++w == nw)
			return a->n_cls;
		bits = a->nonempty[w];
	}
	return w * 64 + (uint32_t)__builtin_ctzll(bits);
}

static void recompute_largest(struct strata_arena *a)
{
	uint32_t w = (a->n_cls + 63) / 64;
	while (w && !a->nonempty[w - 1])
		w--;
	a->largest = w ? a->order_len[(w - 1) * 64 + 63 - (uint32_t)__builtin_clzll(a->nonempty[w - 1])] : 0;
}

/* Positions and the bitmap from order[] (after it changed). */
static void reindex(struct strata_arena *a)
{
	memset(a->nonempty, 0, sizeof(*a->nonempty) * ((a->n_cls + 63) / 64));
	for (uint32_t p = 0; p < a->n_cls; p++) {
		a->cls[a->order[p]].pos = p;
		if (a->cls[a->order[p]].n)
			mark(a, p, true);
	}
}

/* Drop the empty classes (ids change: by_len and the holes' class ids are
 * rewritten). */
static void compact(struct strata_arena *a)
{
	uint32_t *newid = malloc(sizeof(*newid) * a->n_cls);
	if (!newid)
		return; /* keep them: slower, still right */
	uint32_t n = 0;
	for (uint32_t i = 0; i < a->n_cls; i++) {
		if (a->cls[i].n) {
			newid[i] = n;
			a->cls[n++] = a->cls[i];
		} else {
			newid[i] = UINT32_MAX;
			free(a->cls[i].h);
		}
	}
	uint32_t m = 0;
	for (uint32_t i = 0; i < a->n_cls; i++)
		if (newid[a->order[i]] != UINT32_MAX) {
			a->order_len[m] = a->order_len[i];
			a->order[m++] = newid[a->order[i]];
		}
	struct strata_arena_map *L = &a->by_len;
	for (uint32_t i = 0; i < L->cap; i++)
		L->slot[i].key = NO_KEY;
	L->n = 0;
	memset(a->small, 0, sizeof(*a->small) * a->n_small);
	for (uint32_t i = 0; i < n; i++) {
		map_put_new(L, a->cls[i].len, i);
		if (a->cls[i].len / STRATA_TIER_ALIGN < a->n_small)
			a->small[a->cls[i].len / STRATA_TIER_ALIGN] = i + 1;
	}
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < a->cls[i].n; j++)
			a->blk[a->cls[i].h[j].blk].cls = i;
	a->n_cls = n;
	a->n_empty = 0;
	reindex(a);
	free(newid);
}

/* A new, empty class of length len (the caller checked there is none). */
static uint32_t class_new(struct strata_arena *a, uint64_t len)
{
	uint32_t c;
	/* empty classes cost a bit each in the bitmap and on creation of
	 * a class; drop them once they are most of the classes */
	if (a->n_empty > 256 && a->n_empty > 2 * (a->n_cls - a->n_empty))
		compact(a);
	if (a->n_cls == a->cap_cls) {
		uint32_t cap = a->cap_cls ? a->cap_cls * 2 : 16;
		struct strata_arena_class *k = realloc(a->cls, sizeof(*k) * cap);
		if (k)
			a->cls = k;
		uint32_t *o = k ? realloc(a->order, sizeof(*o) * cap) : NULL;
		if (o)
			a->order = o;
		uint64_t *ol = o ? realloc(a->order_len, sizeof(*ol) * cap) : NULL;
		if (ol)
			a->order_len = ol;
		uint64_t *ne = ol ? realloc(a->nonempty, sizeof(*ne) * (cap / 64 + 1)) : NULL;
		if (!ne)
			return UINT32_MAX;
		a->nonempty = ne;
		a->cap_cls = cap;
	}
	struct strata_arena_hole *ids = malloc(sizeof(*ids) * 8);
	if (!ids || map_reserve(&a->by_len)) {
		free(ids);
		return UINT32_MAX;
	}
	c = a->n_cls++;
	a->cls[c] = (struct strata_arena_class){ .len = len, .h = ids, .cap = 8 };
	a->n_empty++;
	uint32_t at = asc_lower(a->order_len, c, len);
	memmove(&a->order[at + 1], &a->order[at], sizeof(*a->order) * (c - at));
	memmove(&a->order_len[at + 1], &a->order_len[at], sizeof(*a->order_len) * (c - at));
	a->order[at] = c;
	a->order_len[at] = len;
	map_put_new(&a->by_len, len, c);
	if (len / STRATA_TIER_ALIGN < a->n_small)
		a->small[len / STRATA_TIER_ALIGN] = c + 1;
	reindex(a);
	return c;
}

static __attribute__((noinline)) int class_grow(struct strata_arena_class *k)
{
	struct strata_arena_hole *o = realloc(k->h, sizeof(*o) * k->cap * 2);
	if (!o)
		return -1;
	k->h = o;
	k->cap *= 2;
	return 0;
}

/* The class of length len, created (empty) if there is none, with room for
 * one more hole; UINT32_MAX when memory runs out. */
static inline uint32_t class_get(struct strata_arena *a, uint64_t len)
{
	uint32_t c = cls_find(a, len);
	if (c == UINT32_MAX && (c = class_new(a, len)) == UINT32_MAX)
		return UINT32_MAX;
	struct strata_arena_class *k = &a->cls[c];
	if (k->n == k->cap && class_grow(k))
		return UINT32_MAX;
	return c;
}

/* Put hole b into class c (at its end: a class is not kept in order). */
static inline __attribute__((always_inline)) void class_insert(struct strata_arena *a, uint32_t c, uint32_t b)
{
	struct strata_arena_class *k = &a->cls[c];
	k->h[k->n] = (struct strata_arena_hole){ a->blk[b].off, b };
	a->blk[b].cls = c;
	a->blk[b].pos = k->n;
	a->is_hole[b / 64] |= 1ull << (b % 64);
	if (!k->n++) {
		a->n_empty--;
		mark(a, k->pos, true);
	}
	if (k->len > a->largest)
		a->largest = k->len;
}

/* Take the hole at position i out of class k (the last one takes its place). */
static inline __attribute__((always_inline)) void class_take(struct strata_arena *a, struct strata_arena_class *k,
							      uint32_t i)
{
	if (i != --k->n) {
		k->h[i] = k->h[k->n];
		a->blk[k->h[i].blk].pos = i;
	}
	if (!k->n) {
		a->n_empty++;
		mark(a, k->pos, false);
		if (k->len == a->largest)
			recompute_largest(a);
	}
}

/* Take hole b out of its class. */
static inline __attribute__((always_inline)) void class_remove(struct strata_arena *a, uint32_t b)
{
	class_take(a, &a->cls[a->blk[b].cls], a->blk[b].pos);
}

/* Position of the lowest-addressed hole of a non-empty class: a scan without
 * branches on the data (a class holds a few holes; keeping it sorted cost a
 * search and a shift, with their mispredicted loop exits, on every insert
 * and remove). */
static inline uint32_t class_lowest(const struct strata_arena_class *k)
{
	uint32_t best = 0;
	uint64_t bo = k->h[0].off;
	for (uint32_t i = 1; i < k->n; i++) {
		bool lt = k->h[i].off < bo;
		best = lt ? i : best;
		bo = lt ? k->h[i].off : bo;
	}
	return best;
}

/* ---- blocks -------------------------------------------------------------- */

#define NO_BLK UINT32_MAX
#define IN_USE UINT32_MAX /* blk.cls of a reserved block */

/* Room for one more block (an id from the pool); -1 when memory runs out. */
static inline int blk_reserve(struct strata_arena *a)
{
	if (a->free_blk != NO_BLK || a->n_blk < a->cap_blk)
		return 0;
	uint32_t cap = a->cap_blk ? a->cap_blk * 2 : 64;
	struct strata_arena_blk *b = realloc(a->blk, sizeof(*b) * cap);
	if (!b)
		return -1;
	a->blk = b;
	uint64_t *h = realloc(a->is_hole, sizeof(*h) * (cap / 64));
	if (!h)
		return -1;
	memset(h + a->cap_blk / 64, 0, sizeof(*h) * ((cap - a->cap_blk) / 64));
	a->is_hole = h;
	a->cap_blk = cap;
	return 0;
}

/* A block id (after blk_reserve). */
static inline uint32_t blk_new(struct strata_arena *a)
{
	uint32_t i = a->free_blk;
	if (i != NO_BLK)
		a->free_blk = a->blk[i].next;
	else
		i = a->n_blk++;
	return i;
}

static inline void blk_put(struct strata_arena *a, uint32_t i)
{
	a->blk[i].cls = IN_USE;
	a->is_hole[i / 64] &= ~(1ull << (i % 64));
	a->blk[i].next = a->free_blk;
	a->free_blk = i;
}

/* Take block i out of the address list (it is merged into a neighbour). */
static inline void blk_unlink(struct strata_arena *a, uint32_t i)
{
	struct strata_arena_blk *b = &a->blk[i];
	if (b->prev != NO_BLK)
		a->blk[b->prev].next = b->next;
	else
		a->head = b->next;
	if (b->next != NO_BLK)
		a->blk[b->next].prev = b->prev;
	blk_put(a, i);
}

/* ---- the arena ----------------------------------------------------------- */

int strata_arena_init(struct strata_arena *a, uint64_t size, struct strata_error *err)
{
	memset(a, 0, sizeof(*a));
	a->size = a->total = size / STRATA_TIER_ALIGN * STRATA_TIER_ALIGN;
	a->head = a->free_blk = NO_BLK;
	uint32_t c = 0;
	a->n_small = a->size / STRATA_TIER_ALIGN < 8192 ? (uint32_t)(a->size / STRATA_TIER_ALIGN) + 1 : 8192;
	if (!(a->small = calloc(a->n_small, sizeof(*a->small))) || map_alloc(&a->by_used, 64) ||
	    map_alloc(&a->by_len, 32) || blk_reserve(a) ||
	    (a->size && (c = class_get(a, a->size)) == UINT32_MAX)) {
		strata_arena_free(a);
		return STRATA_ERR(err, STRATA_ENOMEM, "arena: out of memory");
	}
	if (a->size) {
		uint32_t b = blk_new(a);
		a->blk[b] = (struct strata_arena_blk){ .off = 0, .len = a->size, .prev = NO_BLK, .next = NO_BLK };
		a->head = b;
		class_insert(a, c, b);
		a->n_free = 1;
	}
	return STRATA_OK;
}

void strata_arena_free(struct strata_arena *a)
{
	free(a->by_used.slot);
	free(a->by_len.slot);
	free(a->small);
	for (uint32_t i = 0; i < a->n_cls; i++)
		free(a->cls[i].h);
	free(a->cls);
	free(a->order);
	free(a->order_len);
	free(a->nonempty);
	free(a->blk);
	free(a->is_hole);
	memset(a, 0, sizeof(*a));
}

/* Hole b, out of its class, becomes a reserved block of `bytes` at its start;
 * the rest (tail: its class, from class_get) stays a hole right after it. */
static inline __attribute__((always_inline)) void occupy(struct strata_arena *a, uint32_t b, uint64_t bytes,
							 uint32_t tail, bool index, uint64_t *off, uint32_t *h)
{
	struct strata_arena_blk *x = &a->blk[b];
	uint64_t o = x->off, len = x->len;
	x->cls = IN_USE;
	x->tag = 0;
	a->is_hole[b / 64] &= ~(1ull << (b % 64));
	if (tail != UINT32_MAX) {
		uint32_t t = blk_new(a);
		x = &a->blk[b]; /* blk_new never moves blk (reserved before); for clarity */
		a->blk[t] = (struct strata_arena_blk){ .off = o + bytes, .len = len - bytes, .prev = b, .next = x->next };
		if (x->next != NO_BLK)
			a->blk[x->next].prev = t;
		x->next = t;
		x->len = bytes;
		class_insert(a, tail, t);
	} else {
		a->n_free--;
	}
	if (index)
		map_put_new(&a->by_used, o, b);
	else
		*h = b;
	*off = o;
	a->used += bytes;
}

/* index: record the block under its offset (strata_arena_release finds it
 * there); a reserve with a handle does not. */
static inline __attribute__((always_inline)) int reserve(struct strata_arena *a, uint64_t bytes, uint64_t *off,
							 uint32_t *h, bool index)
{
	bytes = align_up(bytes ? bytes : 1);
	if (bytes > a->largest)
		return STRATA_EBUDGET;
	/* requests come in a few sizes, each usually with a class of its own */
	uint32_t j = cls_find(a, bytes);
	uint32_t i = next_nonempty(a, j != UINT32_MAX ? a->cls[j].pos : asc_lower(a->order_len, a->n_cls, bytes));
	if (i == a->n_cls)
		return STRATA_EBUDGET; /* not reached: largest >= bytes */
	uint32_t c = a->order[i], tail = UINT32_MAX;
	uint64_t len = a->order_len[i];
	if (index && map_reserve(&a->by_used))
		return STRATA_ENOMEM;
	if (len > bytes) {
		uint32_t n_cls = a->n_cls;
		if (blk_reserve(a) || (tail = class_get(a, len - bytes)) == UINT32_MAX)
			return STRATA_ENOMEM;
		if (a->n_cls < n_cls)
			c = cls_find(a, len); /* a compaction renumbered */
	}
	/* the lowest-addressed hole of the class */
	struct strata_arena_class *k = &a->cls[c];
	uint32_t at = class_lowest(k), b = k->h[at].blk;
	class_take(a, k, at);
	occupy(a, b, bytes, tail, index, off, h);
	return STRATA_OK;
}

int strata_arena_reserve(struct strata_arena *a, uint64_t bytes, uint64_t *off)
{
	return reserve(a, bytes, off, NULL, true);
}

int strata_arena_reserve_h(struct strata_arena *a, uint64_t bytes, uint64_t *off, uint32_t *h)
{
	return reserve(a, bytes, off, h, false);
}

/* Give back reserved block b. */
static inline __attribute__((always_inline)) void release(struct strata_arena *a, uint32_t b)
{
	struct strata_arena_blk *x = &a->blk[b];
	uint64_t off = x->off, bytes = x->len;
	uint32_t p = x->prev, n = x->next;
	/* the neighbours' state from the bitmap: a reserved neighbour's block
	 * (the common case) is not read */
	bool pf = p != NO_BLK && (a->is_hole[p / 64] >> (p % 64) & 1);
	bool nf = n != NO_BLK && (a->is_hole[n / 64] >> (n % 64) & 1);
	uint64_t start = pf ? a->blk[p].off : off, end = off + bytes + (nf ? a->blk[n].len : 0);
	/* Cannot fail the caller here.  At worst (no memory for the class
	 * index) the span leaks from the arena, which shrinks capacity but
	 * never breaks the budget.  A compaction (in class_get) renumbers the
	 * classes of the neighbours, which it rewrites. */
	uint32_t c = class_get(a, end - start);
	if (c == UINT32_MAX) {
		a->used -= bytes;
		a->size -= bytes;
		return;
	}
	if (nf) {
		class_remove(a, n);
		x->len += a->blk[n].len;
		blk_unlink(a, n);
		a->n_free--;
	}
	if (pf) {
		class_remove(a, p);
		a->blk[p].len += x->len;
		blk_unlink(a, b);
		b = p;
		a->n_free--;
	}
	class_insert(a, c, b);
	a->n_free++;
	a->used -= bytes;
}

void strata_arena_release(struct strata_arena *a, uint64_t off, uint64_t bytes)
{
	uint32_t s = map_find(&a->by_used, off);
	if (s == UINT32_MAX)
		return; /* not reserved: nothing to give back */
	uint32_t b = (uint32_t)a->by_used.slot[s].val;
	map_del_slot(&a->by_used, s);
	release(a, b);
}

void strata_arena_release_h(struct strata_arena *a, uint32_t h)
{
	release(a, h);
}

void strata_arena_set_tag(struct strata_arena *a, uint32_t h, uint32_t tag)
{
	a->blk[h].tag = tag;
}

int strata_arena_reserve_in(struct strata_arena *a, uint32_t hole, uint64_t bytes, uint64_t *off, uint32_t *h)
{
	bytes = align_up(bytes ? bytes : 1);
	if (a->blk[hole].cls == IN_USE || a->blk[hole].len < bytes)
		return STRATA_EBUDGET;
	uint32_t tail = UINT32_MAX;
	if (a->blk[hole].len > bytes &&
	    (blk_reserve(a) || (tail = class_get(a, a->blk[hole].len - bytes)) == UINT32_MAX))
		return STRATA_ENOMEM;
	class_remove(a, hole); /* after class_get: a renumbering rewrote its class id */
	occupy(a, hole, bytes, tail, false, off, h);
	return STRATA_OK;
}

/* Best fit for `len` among the holes hs[0..n) outside [lo, hi) not taken
 * yet (the smallest, then the lowest-addressed); n if none. */
static uint32_t fit_outside(const struct strata_arena *a, const uint32_t *hs, const bool *taken, uint32_t n,
			    uint64_t len, uint64_t lo, uint64_t hi)
{
	uint32_t best = n;
	for (uint32_t i = 0; i < n; i++) {
		const struct strata_arena_blk *x = &a->blk[hs[i]];
		if (taken[i] || x->len < len || (x->off >= lo && x->off < hi))
			continue;
		if (best == n || x->len < a->blk[hs[best]].len)
			best = i;
	}
	return best;
}

int strata_arena_plan_room(const struct strata_arena *a, uint64_t bytes, bool (*fixed)(void *ctx, uint32_t tag),
			   void *ctx, struct strata_arena_plan *p)
{
	bytes = align_up(bytes ? bytes : 1);
	p->n = 0;
	if (a->size - a->used < bytes || !a->n_free)
		return STRATA_EBUDGET;
	uint32_t *hs = malloc(sizeof(*hs) * a->n_free), nh = 0;
	bool *taken = calloc(a->n_free, sizeof(*taken));
	if (!hs || !taken) {
		free(hs);
		free(taken);
		return STRATA_ENOMEM;
	}
	for (uint32_t i = a->head; i != NO_BLK; i = a->blk[i].next)
		if (a->blk[i].cls != IN_USE)
			hs[nh++] = i;
	uint64_t best = UINT64_MAX;
	/* windows in address order: the extents j..k (no fixed one), the holes
	 * between and beside them; for each start the first k whose window
	 * holds the bytes (a longer one moves more) */
	for (uint32_t j = a->head; j != NO_BLK; j = a->blk[j].next) {
		const struct strata_arena_blk *x = &a->blk[j];
		if (x->cls != IN_USE || (fixed && fixed(ctx, x->tag)))
			continue;
		uint64_t lo = x->prev != NO_BLK && a->blk[x->prev].cls != IN_USE ? a->blk[x->prev].off : x->off;
		uint64_t cost = 0;
		uint32_t r[STRATA_ARENA_MOVES], n = 0;
		for (uint32_t k = j; k != NO_BLK; k = a->blk[k].next) {
			const struct strata_arena_blk *y = &a->blk[k];
			if (y->cls != IN_USE)
				continue;
			if (n == STRATA_ARENA_MOVES || (fixed && fixed(ctx, y->tag)) || cost + y->len >= best)
				break;
			r[n++] = k;
			cost += y->len;
			uint32_t nx = y->next;
			uint64_t hi = nx != NO_BLK && a->blk[nx].cls != IN_USE ? a->blk[nx].off + a->blk[nx].len
										  : y->off + y->len;
			if (hi - lo < bytes)
				continue;
			/* the window holds the bytes: can its extents go elsewhere?
			 * largest first, each to its own hole */
			uint32_t ord[STRATA_ARENA_MOVES], to[STRATA_ARENA_MOVES];
			for (uint32_t u = 0; u < n; u++) {
				uint32_t v = u;
				while (v && a->blk[ord[v - 1]].len < a->blk[r[u]].len) {
					ord[v] = ord[v - 1];
					v--;
				}
				ord[v] = r[u];
			}
			uint32_t u = 0;
			for (; u < n; u++) {
				uint32_t f = fit_outside(a, hs, taken, nh, a->blk[ord[u]].len, lo, hi);
				if (f == nh)
					break;
				taken[f] = true;
				to[u] = f;
			}
			for (uint32_t v = 0; v < u; v++)
				taken[to[v]] = false;
			if (u == n) {
				best = cost;
				p->n = n;
				p->moved = cost;
				for (uint32_t v = 0; v < n; v++) {
					p->h[v] = ord[v];
					p->to[v] = hs[to[v]];
				}
			}
			break;
		}
	}
	free(hs);
	free(taken);
	return p->n ? STRATA_OK : STRATA_EBUDGET;
}

int strata_arena_slide_plan(const struct strata_arena *a, uint64_t bytes, bool (*fixed)(void *ctx, uint32_t tag),
			    void *ctx, uint32_t *first, uint32_t *last, uint64_t *moved)
{
	bytes = align_up(bytes ? bytes : 1);
	if (a->size - a->used < bytes)
		return STRATA_EBUDGET;
	/* two pointers: for each hole i closing a window, its start s is the
	 * last hole that still leaves the holes of [s, i] enough (the later
	 * the start, the fewer extents to move) */
	uint64_t best = UINT64_MAX, H = 0, M = 0; /* holes, extents in [s, i] */
	uint32_t s = NO_BLK;
	for (uint32_t i = a->head; i != NO_BLK; i = a->blk[i].next) {
		const struct strata_arena_blk *b = &a->blk[i];
		if (b->cls == IN_USE) {
			if (fixed && fixed(ctx, b->tag))
				s = NO_BLK; /* no window spans it */
			else if (s != NO_BLK)
				M += b->len;
			continue;
		}
		if (s == NO_BLK) {
			s = i;
			H = M = 0;
		}
		H += b->len;
		while (s != i && H - a->blk[s].len >= bytes) {
			H -= a->blk[s].len;
			uint32_t k = a->blk[s].next;
			for (; a->blk[k].cls == IN_USE; k = a->blk[k].next)
				M -= a->blk[k].len;
			s = k;
		}
		if (H >= bytes && M < best) {
			best = M;
			*first = s;
			*last = i;
		}
	}
	if (best == UINT64_MAX)
		return STRATA_EBUDGET;
	*moved = best;
	return STRATA_OK;
}

int strata_arena_slide(struct strata_arena *a, uint32_t first, uint32_t last,
		       void (*move)(void *ctx, uint32_t tag, uint64_t from, uint64_t to, uint64_t len), void *ctx)
{
	uint64_t H = 0, cur = a->blk[first].off, end = a->blk[last].off + a->blk[last].len;
	for (uint32_t i = first;; i = a->blk[i].next) {
		H += a->blk[i].cls != IN_USE ? a->blk[i].len : 0;
		if (i == last)
			break;
	}
	uint32_t c = class_get(a, H); /* first: the only step that can fail */
	if (c == UINT32_MAX)
		return STRATA_ENOMEM;
	for (uint32_t i = first;;) {
		struct strata_arena_blk *b = &a->blk[i];
		uint32_t next = b->next;
		if (b->cls != IN_USE) {
			class_remove(a, i);
			a->n_free--;
			if (i != last)
				blk_unlink(a, i); /* the last hole's block becomes the new one */
		} else {
			if (b->off != cur) {
				uint32_t m = map_find(&a->by_used, b->off);
				if (m != UINT32_MAX && a->by_used.slot[m].val == i) {
					map_del_slot(&a->by_used, m);
					map_put_new(&a->by_used, cur, i);
				}
				move(ctx, b->tag, b->off, cur, b->len);
				b->off = cur;
			}
			cur += b->len;
		}
		if (i == last)
			break;
		i = next;
	}
	a->blk[last].off = cur;
	a->blk[last].len = end - cur;
	class_insert(a, c, last);
	a->n_free++;
	return STRATA_OK;
}

int strata_arena_copy_down(uint64_t from, uint64_t to, uint64_t len, uint64_t cap,
			   int (*copy)(void *ctx, uint64_t dst, uint64_t src, uint64_t n), void *ctx,
			   uint64_t *traffic)
{
	uint64_t shift = from - to, piece = shift > cap ? shift : cap, moved = 0;
	int rc = 0;
	for (uint64_t o = 0; shift && o < len && !rc; o += piece) {
		uint64_t n = len - o < piece ? len - o : piece;
		if (shift >= n) {
			rc = copy(ctx, to + o, from + o, n);
			moved += n;
		} else if (!(rc = copy(ctx, STRATA_ARENA_BOUNCE, from + o, n))) {
			/* the piece is in the bounce buffer before its place is
			 * written, and later pieces lie above what this one writes */
			rc = copy(ctx, to + o, STRATA_ARENA_BOUNCE, n);
			moved += 2 * n;
		}
	}
	if (traffic)
		*traffic = moved;
	return rc;
}

uint64_t strata_arena_largest_free(const struct strata_arena *a)
{
	return a->largest;
}

uint32_t strata_arena_holes(const struct strata_arena *a, struct strata_span *out, uint32_t n)
{
	uint32_t m = 0;
	for (uint32_t i = a->head; i != NO_BLK && m < n; i = a->blk[i].next)
		if (a->blk[i].cls != IN_USE)
			out[m++] = (struct strata_span){ a->blk[i].off, a->blk[i].len };
	return m;
}

int strata_arena_check(const struct strata_arena *a)
{
	int rc = 0;
	uint64_t sum = 0, largest = 0, in_classes = 0, at = 0;
	uint32_t holes = 0, used = 0, prev = NO_BLK, steps = 0;
	bool prev_free = false;
	for (uint32_t i = a->head; i != NO_BLK && !rc; prev = i, i = a->blk[i].next) {
		const struct strata_arena_blk *b = &a->blk[i];
		bool f = b->cls != IN_USE;
		if (++steps > a->n_blk || b->prev != prev || b->off != at || !b->len || b->len % STRATA_TIER_ALIGN)
			rc = -1; /* list broken, or blocks not back to back */
		else if (f && prev_free)
			rc = -2; /* not coalesced */
		else if (f != (a->is_hole[i / 64] >> (i % 64) & 1) || (f && (b->cls >= a->n_cls || a->cls[b->cls].len != b->len)))
			rc = -4; /* in the wrong class */
		if (f) {
			holes++;
			sum += b->len;
			if (b->len > largest)
				largest = b->len;
		} else {
			used++;
		}
		prev_free = f;
		at += b->len;
	}
	if (!rc && at != a->total)
		rc = -1;
	uint32_t empty = 0;
	for (uint32_t i = 0; i < a->n_cls && !rc; i++) {
		uint32_t c = a->order[i];
		const struct strata_arena_class *k = &a->cls[c];
		uint32_t j = map_find(&a->by_len, k->len);
		if (c >= a->n_cls || k->len != a->order_len[i] || (i && a->order_len[i - 1] >= k->len) ||
		    j == UINT32_MAX || a->by_len.slot[j].val != c || cls_find(a, k->len) != c)
			rc = -4; /* classes out of order or unknown by length */
		for (uint32_t o = 0; o < k->n && !rc; o++)
			if (a->blk[k->h[o].blk].cls != c || a->blk[k->h[o].blk].pos != o ||
			    a->blk[k->h[o].blk].off != k->h[o].off)
				rc = -4; /* not a hole of its length, or its position stale */
		if (!rc && (k->pos != i || !(a->nonempty[i / 64] >> (i % 64) & 1) != !k->n))
			rc = -4; /* position or bitmap stale */
		in_classes += k->n;
		empty += !k->n;
	}
	if (!rc && (holes != a->n_free || in_classes != a->n_free || largest != a->largest || empty != a->n_empty ||
		    a->by_len.n != a->n_cls || a->by_used.n > used))
		rc = -4;
	if (!rc && sum != a->size - a->used)
		rc = -3;
	return rc;
}
