/*
 * Tiers and their extent allocator (see include/strata/tier.h).
 *
 * A hole is an entry in by_start (off -> len), one in by_end (off + len ->
 * off) and an offset in the class of its length.  Best fit is the smallest
 * length that holds the request and, among holes of that length, the lowest
 * offset: the same choice as a linear scan over holes in address order (the
 * allocator's first form, which tests/test_tier.c keeps as a reference).
 * A cache simulation holds hundreds of holes and reserves after every
 * eviction, which is why this is not a scan any more.
 */
#include <errno.h>
#include <hwloc.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "strata/gpu.h"
#include "strata/store.h"
#include "strata/tier.h"
#include "strata/util.h"

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

static void map_del(struct strata_arena_map *m, uint64_t k)
{
	uint32_t i = map_find(m, k);
	if (i != UINT32_MAX)
		map_del_slot(m, i);
}

/* ---- size classes -------------------------------------------------------- */

/* Open a gap at v[at] (v has n entries, room for n + 1) / close the one at
 * v[at].  Most classes hold a few holes: a short loop beats a memmove call. */
static inline void u64_insert_gap(uint64_t *v, uint32_t n, uint32_t at)
{
	if (n - at > 16) {
		memmove(&v[at + 1], &v[at], sizeof(*v) * (n - at));
		return;
	}
	for (uint32_t i = n; i > at; i--)
		v[i] = v[i - 1];
}

static inline void u64_close_gap(uint64_t *v, uint32_t n, uint32_t at)
{
	if (n - at > 17) {
		memmove(&v[at], &v[at + 1], sizeof(*v) * (n - at - 1));
		return;
	}
	for (uint32_t i = at; i + 1 < n; i++)
		v[i] = v[i + 1];
}

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

/* In offsets sorted descending: the first position whose offset is <= off. */
static inline uint32_t desc_lower(const uint64_t *o, uint32_t n, uint64_t off)
{
	uint32_t base = 0;
	if (!n)
		return 0;
	while (n > 1) {
		uint32_t half = n / 2;
		base = o[base + half - 1] > off ? base + half : base;
		n -= half;
	}
	return base + (o[base] > off);
}

static inline void mark(struct strata_arena *a, uint32_t pos, bool on)
{
	if (on)
		a->nonempty[pos / 64] |= 1ull << (pos % 64);
	else
		a->nonempty[pos / 64] &= ~(1ull << (pos % 64));
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

/* Drop the empty classes (ids change: by_len and by_start are rewritten). */
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
			free(a->cls[i].off);
		}
	}
	uint32_t m = 0;
	for (uint32_t i = 0; i < a->n_cls; i++)
		if (newid[a->order[i]] != UINT32_MAX) {
			a->order_len[m] = a->order_len[i];
			a->order[m++] = newid[a->order[i]];
		}
	struct strata_arena_map *L = &a->by_len, *S = &a->by_start;
	for (uint32_t i = 0; i < L->cap; i++)
		L->slot[i].key = NO_KEY;
	L->n = 0;
	for (uint32_t i = 0; i < n; i++)
		map_put_new(L, a->cls[i].len, i);
	for (uint32_t i = 0; i < S->cap; i++)
		if (S->slot[i].key != NO_KEY)
			S->slot[i].val = newid[S->slot[i].val];
	a->n_cls = n;
	a->n_empty = 0;
	reindex(a);
	free(newid);
}

/* The class of length len, created (empty) if there is none, with room for
 * one more hole; UINT32_MAX when memory runs out. */
static uint32_t class_get(struct strata_arena *a, uint64_t len)
{
	uint32_t j = map_find(&a->by_len, len), c;
	if (j != UINT32_MAX) {
		c = (uint32_t)a->by_len.slot[j].val;
	} else {
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
		uint64_t *off = malloc(sizeof(*off) * 8);
		if (!off || map_reserve(&a->by_len)) {
			free(off);
			return UINT32_MAX;
		}
		c = a->n_cls++;
		a->cls[c] = (struct strata_arena_class){ .len = len, .off = off, .cap = 8 };
		a->n_empty++;
		uint32_t at = asc_lower(a->order_len, c, len);
		memmove(&a->order[at + 1], &a->order[at], sizeof(*a->order) * (c - at));
		memmove(&a->order_len[at + 1], &a->order_len[at], sizeof(*a->order_len) * (c - at));
		a->order[at] = c;
		a->order_len[at] = len;
		map_put_new(&a->by_len, len, c);
		reindex(a);
	}
	struct strata_arena_class *k = &a->cls[c];
	if (k->n == k->cap) {
		uint64_t *o = realloc(k->off, sizeof(*o) * k->cap * 2);
		if (!o)
			return UINT32_MAX;
		k->off = o;
		k->cap *= 2;
	}
	return c;
}

/* ---- the arena ----------------------------------------------------------- */

/* Room for one more hole of length len in every index: its class id, or
 * UINT32_MAX when memory runs out. */
static uint32_t hole_reserve(struct strata_arena *a, uint64_t len)
{
	if (map_reserve(&a->by_start) || map_reserve(&a->by_end))
		return UINT32_MAX;
	return class_get(a, len);
}

/* Put the hole at off into class c (the maps are the caller's). */
static inline void class_insert(struct strata_arena *a, uint32_t c, uint64_t off)
{
	struct strata_arena_class *k = &a->cls[c];
	uint32_t at = desc_lower(k->off, k->n, off);
	u64_insert_gap(k->off, k->n, at);
	k->off[at] = off;
	if (!k->n++) {
		a->n_empty--;
		mark(a, k->pos, true);
	}
	if (k->len > a->largest)
		a->largest = k->len;
}

/* Take the hole at off out of class c (the maps are the caller's). */
static inline void class_remove(struct strata_arena *a, uint32_t c, uint64_t off)
{
	struct strata_arena_class *k = &a->cls[c];
	uint32_t at = desc_lower(k->off, k->n, off);
	if (at < k->n && k->off[at] == off) {
		u64_close_gap(k->off, k->n, at);
		if (!--k->n) {
			a->n_empty++;
			mark(a, k->pos, false);
			if (k->len == a->largest)
				recompute_largest(a);
		}
	}
}

static void hole_add(struct strata_arena *a, uint64_t off, uint32_t c)
{
	map_put_new(&a->by_start, off, c);
	map_put_new(&a->by_end, off + a->cls[c].len, off);
	class_insert(a, c, off);
	a->n_free++;
}

int strata_arena_init(struct strata_arena *a, uint64_t size, struct strata_error *err)
{
	memset(a, 0, sizeof(*a));
	a->size = size / STRATA_TIER_ALIGN * STRATA_TIER_ALIGN;
	uint32_t c = 0;
	if (map_alloc(&a->by_start, 64) || map_alloc(&a->by_end, 64) || map_alloc(&a->by_len, 32) ||
	    (a->size && (c = hole_reserve(a, a->size)) == UINT32_MAX)) {
		strata_arena_free(a);
		return STRATA_ERR(err, STRATA_ENOMEM, "arena: out of memory");
	}
	if (a->size)
		hole_add(a, 0, c);
	return STRATA_OK;
}

void strata_arena_free(struct strata_arena *a)
{
	struct strata_arena_map *m[3] = { &a->by_start, &a->by_end, &a->by_len };
	for (int i = 0; i < 3; i++)
		free(m[i]->slot);
	for (uint32_t i = 0; i < a->n_cls; i++)
		free(a->cls[i].off);
	free(a->cls);
	free(a->order);
	free(a->order_len);
	free(a->nonempty);
	memset(a, 0, sizeof(*a));
}

int strata_arena_reserve(struct strata_arena *a, uint64_t bytes, uint64_t *off)
{
	bytes = align_up(bytes ? bytes : 1);
	if (bytes > a->largest)
		return STRATA_EBUDGET;
	/* requests come in a few sizes, each usually with a class of its own */
	uint32_t j = map_find(&a->by_len, bytes);
	uint32_t i = next_nonempty(a, j != UINT32_MAX ? a->cls[a->by_len.slot[j].val].pos
					     : asc_lower(a->order_len, a->n_cls, bytes));
	if (i == a->n_cls)
		return STRATA_EBUDGET; /* not reached: largest >= bytes */
	uint32_t c = a->order[i], tail = UINT32_MAX;
	uint64_t len = a->order_len[i];
	if (len > bytes) {
		if (map_reserve(&a->by_start) || (tail = class_get(a, len - bytes)) == UINT32_MAX)
			return STRATA_ENOMEM;
		c = (uint32_t)a->by_len.slot[map_find(&a->by_len, len)].val; /* a compaction renumbers */
	}
	/* the lowest hole of the class is its last: no search */
	struct strata_arena_class *k = &a->cls[c];
	uint64_t o = k->off[--k->n];
	map_del(&a->by_start, o);
	if (!k->n) {
		a->n_empty++;
		mark(a, k->pos, false);
		if (len == a->largest)
			recompute_largest(a);
	}
	if (tail != UINT32_MAX) {
		/* the tail keeps the hole's end: rewrite that entry in place */
		a->by_end.slot[map_find(&a->by_end, o + len)].val = o + bytes;
		map_put_new(&a->by_start, o + bytes, tail);
		class_insert(a, tail, o + bytes);
	} else {
		map_del(&a->by_end, o + len);
		a->n_free--;
	}
	*off = o;
	a->used += bytes;
	return STRATA_OK;
}

void strata_arena_release(struct strata_arena *a, uint64_t off, uint64_t bytes)
{
	bytes = align_up(bytes ? bytes : 1);
	uint64_t start = off, end = off + bytes;
	/* Cannot fail the caller here.  At worst (no memory for the indexes)
	 * the span leaks from the arena, which shrinks capacity but never
	 * breaks the budget. */
	if (map_reserve(&a->by_start) || map_reserve(&a->by_end)) {
		a->used -= bytes;
		a->size -= bytes;
		return;
	}
	uint32_t ip = map_find(&a->by_end, off), in = map_find(&a->by_start, end);
	if (ip != UINT32_MAX)
		start = a->by_end.slot[ip].val;
	if (in != UINT32_MAX)
		end += a->cls[a->by_start.slot[in].val].len;
	/* a compaction (in class_get) renumbers classes but moves no map slot */
	uint32_t c = class_get(a, end - start);
	if (c == UINT32_MAX) {
		a->used -= bytes;
		a->size -= bytes;
		return;
	}
	/* the merged hole starts at start (prev's entry, if any, is reused) and
	 * ends at end (next's end entry, if any, is reused) */
	if (ip != UINT32_MAX) {
		map_del_slot(&a->by_end, ip); /* prev ended at off */
		a->n_free--;
	}
	if (in != UINT32_MAX) {
		class_remove(a, (uint32_t)a->by_start.slot[in].val, off + bytes);
		map_del_slot(&a->by_start, in);
		a->by_end.slot[map_find(&a->by_end, end)].val = start;
		a->n_free--;
	} else {
		map_put_new(&a->by_end, end, start);
	}
	if (start < off) {
		uint32_t is = map_find(&a->by_start, start); /* slots move on deletion */
		class_remove(a, (uint32_t)a->by_start.slot[is].val, start);
		a->by_start.slot[is].val = c;
	} else {
		map_put_new(&a->by_start, start, c);
	}
	class_insert(a, c, start);
	a->n_free++;
	a->used -= bytes;
}

uint64_t strata_arena_largest_free(const struct strata_arena *a)
{
	return a->largest;
}

static int span_cmp(const void *x, const void *y)
{
	const struct strata_span *p = x, *q = y;
	return p->off < q->off ? -1 : p->off > q->off;
}

/* Every hole, in offset order (malloc'd, a->n_free of them; NULL on ENOMEM
 * or when by_start holds a different count). */
static struct strata_span *holes_sorted(const struct strata_arena *a)
{
	struct strata_span *h = malloc(sizeof(*h) * (a->n_free + 1));
	uint32_t n = 0;
	if (!h)
		return NULL;
	for (uint32_t i = 0; i < a->by_start.cap; i++)
		if (a->by_start.slot[i].key != NO_KEY) {
			if (n == a->n_free) {
				free(h);
				return NULL;
			}
			h[n++] = (struct strata_span){ a->by_start.slot[i].key, a->cls[a->by_start.slot[i].val].len };
		}
	if (n != a->n_free) {
		free(h);
		return NULL;
	}
	qsort(h, n, sizeof(*h), span_cmp);
	return h;
}

uint32_t strata_arena_holes(const struct strata_arena *a, struct strata_span *out, uint32_t n)
{
	struct strata_span *h = holes_sorted(a);
	if (!h)
		return 0;
	uint32_t m = a->n_free < n ? a->n_free : n;
	memcpy(out, h, sizeof(*h) * m);
	free(h);
	return m;
}

int strata_arena_check(const struct strata_arena *a)
{
	struct strata_span *h = holes_sorted(a);
	if (!h)
		return -4;
	int rc = 0;
	uint64_t sum = 0, largest = 0, in_classes = 0;
	for (uint32_t i = 0; i < a->n_free && !rc; i++) {
		const struct strata_span *s = &h[i];
		uint32_t j = map_find(&a->by_end, s->off + s->len);
		if (!s->len || s->off % STRATA_TIER_ALIGN || s->len % STRATA_TIER_ALIGN || s->off + s->len > a->size)
			rc = -1;
		else if (i && h[i - 1].off + h[i - 1].len >= s->off)
			rc = -2; /* overlapping or not coalesced */
		else if (j == UINT32_MAX || a->by_end.slot[j].val != s->off)
			rc = -4; /* by_end disagrees */
		sum += s->len;
		if (s->len > largest)
			largest = s->len;
	}
	uint32_t empty = 0;
	for (uint32_t i = 0; i < a->n_cls && !rc; i++) {
		uint32_t c = a->order[i];
		const struct strata_arena_class *k = &a->cls[c];
		uint32_t j = map_find(&a->by_len, k->len);
		if (c >= a->n_cls || k->len != a->order_len[i] || (i && a->order_len[i - 1] >= k->len) ||
		    j == UINT32_MAX || a->by_len.slot[j].val != c)
			rc = -4; /* classes out of order or unknown by length */
		for (uint32_t o = 0; o < k->n && !rc; o++) {
			uint32_t s = map_find(&a->by_start, k->off[o]);
			if ((o && k->off[o - 1] <= k->off[o]) || s == UINT32_MAX || a->by_start.slot[s].val != c)
				rc = -4; /* class out of order or not a hole of its length */
		}
		if (!rc && (k->pos != i || !(a->nonempty[i / 64] >> (i % 64) & 1) != !k->n))
			rc = -4; /* position or bitmap stale */
		in_classes += k->n;
		empty += !k->n;
	}
	if (!rc && (a->by_end.n != a->n_free || in_classes != a->n_free || largest != a->largest ||
		    empty != a->n_empty || a->by_len.n != a->n_cls))
		rc = -4;
	if (!rc && sum != a->size - a->used)
		rc = -3;
	free(h);
	return rc;
}

/* ---- NUMA ---------------------------------------------------------------- */

static int node_from_hwloc(const char *bus)
{
	hwloc_topology_t topo;
	int node = -1;
	if (hwloc_topology_init(&topo))
		return -1;
	hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	if (!hwloc_topology_load(topo)) {
		hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(topo, bus);
		hwloc_obj_t anc = pci ? hwloc_get_non_io_ancestor_obj(topo, pci) : NULL;
		if (anc && anc->nodeset && !hwloc_bitmap_iszero(anc->nodeset))
			node = hwloc_bitmap_first(anc->nodeset);
	}
	hwloc_topology_destroy(topo);
	return node;
}

int strata_numa_node_of_gpu(int device, const char **how)
{
	char bus[64];
	*how = "none";
	if (device < 0 || strata_gpu_pci_bus_id(device, bus, sizeof(bus)) || !bus[0])
		return -1;
	int node = node_from_hwloc(bus);
	if (node >= 0) {
		*how = "hwloc";
		return node;
	}
	node = strata_gpu_numa_node(device);
	if (node >= 0)
		*how = "sysfs";
	return node;
}

/* ---- tiers --------------------------------------------------------------- */

static const char *backing_name(int b)
{
	switch (b) {
	case STRATA_BACK_VIRTUAL: return "virtual";
	case STRATA_BACK_HOST: return "host stand-in";
	case STRATA_BACK_DEVICE: return "device";
	case STRATA_BACK_PINNED: return "pinned";
	}
	return "?";
}

int strata_tier_init(struct strata_tier_mem *t, const struct strata_tier_config *c, struct strata_error *err)
{
	char sz[32];
	memset(t, 0, sizeof(*t));
	t->kind = c->kind;
	t->backing = c->backing;
	t->budget = c->budget / STRATA_TIER_ALIGN * STRATA_TIER_ALIGN;
	t->numa_node = -1;
	t->numa_how = "none";
	const char *tname = c->kind == STRATA_TIER_VRAM ? "vram" : c->kind == STRATA_TIER_RAM ? "ram" : "nvme";
	int rc = strata_arena_init(&t->arena, t->budget, err);
	if (rc)
		return rc;
	size_t n = (size_t)t->budget;
	if (n && (c->backing == STRATA_BACK_HOST || c->backing == STRATA_BACK_PINNED)) {
		/* refuse up front what cannot be resident, with the numbers */
		uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
		if (phys && t->budget > phys) {
			char m[32];
			strata_arena_free(&t->arena);
			return STRATA_ERR(err, STRATA_ENOMEM, "%s tier: budget %s exceeds this machine's memory (%s)",
					  tname, strata_fmt_bytes(t->budget, sz, sizeof(sz)),
					  strata_fmt_bytes(phys, m, sizeof(m)));
		}
	}
	if (n && c->backing == STRATA_BACK_HOST) {
		void *p = NULL;
		if (posix_memalign(&p, STRATA_TIER_ALIGN, n))
			goto nomem;
		t->base = p;
	} else if (n && c->backing == STRATA_BACK_DEVICE) {
		void *p;
		rc = strata_gpu_malloc(&p, n, err);
		if (rc) {
			strata_error_prefix(err, "%s tier: allocating %s on the GPU", tname, strata_fmt_bytes(n, sz, sizeof(sz)));
			strata_arena_free(&t->arena);
			return rc;
		}
		t->base = p;
	} else if (n && c->backing == STRATA_BACK_PINNED) {
		int node = c->numa_node;
		const char *how = "forced";
		if (node < 0)
			node = strata_numa_node_of_gpu(c->gpu_device, &how);
		void *p = NULL;
		if (node >= 0 && numa_available() >= 0) {
			if (node > numa_max_node()) {
				strata_arena_free(&t->arena);
				return STRATA_ERR(err, STRATA_EINVAL, "%s tier: NUMA node %d does not exist (max %d)",
						  tname, node, numa_max_node());
			}
			p = numa_alloc_onnode(n, node);
			if (p) {
				t->numa_node = node;
				t->numa_how = how;
			}
		}
		if (!p) {
			/* No node known (no GPU, one node): plain page-aligned memory. */
			p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED)
				goto nomem;
		}
		t->base = p;
		if (c->register_gpu) {
			rc = strata_gpu_host_register(p, n, err);
			if (rc) {
				strata_error_prefix(err, "%s tier: registering %s with CUDA", tname,
						    strata_fmt_bytes(n, sz, sizeof(sz)));
				strata_tier_free(t);
				return rc;
			}
			t->registered = true;
		} else if (c->lock) {
			/* Best effort: an RLIMIT_MEMLOCK refusal is reported in desc,
			 * not fatal. */
			t->locked = mlock(p, n) == 0;
		}
	}
	snprintf(t->desc, sizeof(t->desc), "%s: %s %s", tname, strata_fmt_bytes(t->budget, sz, sizeof(sz)),
		 backing_name(c->backing));
	if (c->backing == STRATA_BACK_PINNED) {
		size_t l = strlen(t->desc);
		if (t->numa_node >= 0)
			snprintf(t->desc + l, sizeof(t->desc) - l, ", NUMA node %d (%s)%s", t->numa_node, t->numa_how,
				 t->registered ? ", cuda-registered" : t->locked ? ", mlocked" : ", not locked");
		else
			snprintf(t->desc + l, sizeof(t->desc) - l, ", no NUMA binding%s",
				 t->registered ? ", cuda-registered" : t->locked ? ", mlocked" : ", not locked");
	}
	return STRATA_OK;
nomem:
	strata_arena_free(&t->arena);
	return STRATA_ERR(err, STRATA_ENOMEM, "%s tier: cannot allocate %s (%s)", tname,
			  strata_fmt_bytes(n, sz, sizeof(sz)), backing_name(c->backing));
}

void strata_tier_free(struct strata_tier_mem *t)
{
	size_t n = (size_t)t->budget;
	if (t->base) {
		switch (t->backing) {
		case STRATA_BACK_HOST:
			free(t->base);
			break;
		case STRATA_BACK_DEVICE:
			strata_gpu_free(t->base);
			break;
		case STRATA_BACK_PINNED:
			if (t->registered)
				strata_gpu_host_unregister(t->base);
			if (t->locked)
				munlock(t->base, n);
			if (t->numa_node >= 0)
				numa_free(t->base, n);
			else
				munmap(t->base, n);
			break;
		}
	}
	strata_arena_free(&t->arena);
	t->base = NULL;
}
