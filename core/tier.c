/*
 * Tiers and their extent allocator (see include/strata/tier.h).
 *
 * The arena keeps its holes in two treaps sharing one node pool: tree 0
 * ordered by offset (neighbours for coalescing), tree 1 by (len, off) (best
 * fit: the first node not below (bytes, 0)).  A treap's shape depends on its
 * random priorities, but every answer depends only on the key order, so the
 * allocator's decisions are those of a linear best-fit scan over the holes in
 * address order (smallest sufficient hole, lowest offset among equals).
 * A cache simulation holds thousands of holes and reserves after every
 * eviction, which is why this is not a sorted array any more.
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

#define BY_OFF 0
#define BY_LEN 1

/* a < b in tree t */
static inline bool key_less(const struct strata_arena_node *n, int t, uint32_t a, uint32_t b)
{
	if (t == BY_LEN && n[a].len != n[b].len)
		return n[a].len < n[b].len;
	return n[a].off < n[b].off;
}

/* Split tree r of t into keys below node x's (*l) and the rest (*g). */
static void tsplit(struct strata_arena_node *n, int t, uint32_t r, uint32_t x, uint32_t *l, uint32_t *g)
{
	while (r) {
		if (key_less(n, t, r, x)) {
			*l = r;
			l = &n[r].kid[t][1];
			r = *l;
		} else {
			*g = r;
			g = &n[r].kid[t][0];
			r = *g;
		}
	}
	*l = *g = 0;
}

/* Join a and b of t, every key of a below every key of b. */
static uint32_t tmerge(struct strata_arena_node *n, int t, uint32_t a, uint32_t b)
{
	uint32_t root, *link = &root;
	while (a && b) {
		if (n[a].prio > n[b].prio) {
			*link = a;
			link = &n[a].kid[t][1];
			a = *link;
		} else {
			*link = b;
			link = &n[b].kid[t][0];
			b = *link;
		}
	}
	*link = a ? a : b;
	return root;
}

static void tinsert(struct strata_arena *a, int t, uint32_t x)
{
	struct strata_arena_node *n = a->node;
	uint32_t *link = &a->root[t];
	while (*link && n[*link].prio >= n[x].prio)
		link = &n[*link].kid[t][key_less(n, t, x, *link) ? 0 : 1];
	tsplit(n, t, *link, x, &n[x].kid[t][0], &n[x].kid[t][1]);
	*link = x;
}

static void tremove(struct strata_arena *a, int t, uint32_t x)
{
	struct strata_arena_node *n = a->node;
	uint32_t *link = &a->root[t];
	while (*link && *link != x)
		link = &n[*link].kid[t][key_less(n, t, x, *link) ? 0 : 1];
	if (!*link)
		return; /* not in the tree: a caller's bug, strata_arena_check finds it */
	*link = tmerge(n, t, n[x].kid[t][0], n[x].kid[t][1]);
	n[x].kid[t][0] = n[x].kid[t][1] = 0;
}

static uint64_t rightmost_len(const struct strata_arena *a)
{
	uint32_t r = a->root[BY_LEN];
	if (!r)
		return 0;
	while (a->node[r].kid[BY_LEN][1])
		r = a->node[r].kid[BY_LEN][1];
	return a->node[r].len;
}

/* A fresh node (0 when the pool cannot grow). */
static uint32_t node_get(struct strata_arena *a)
{
	uint32_t x = a->free_node;
	if (x) {
		a->free_node = a->node[x].kid[0][0];
	} else {
		if (a->next_node == a->cap_node) {
			uint32_t cap = a->cap_node * 2;
			struct strata_arena_node *m = realloc(a->node, sizeof(*m) * cap);
			if (!m)
				return 0;
			a->node = m;
			a->cap_node = cap;
		}
		x = a->next_node++;
	}
	/* xorshift32: priorities only shape the trees, never the answers */
	uint32_t s = a->seed;
	s ^= s << 13;
	s ^= s >> 17;
	s ^= s << 5;
	a->seed = s;
	memset(&a->node[x], 0, sizeof(a->node[x]));
	a->node[x].prio = s;
	return x;
}

static void node_put(struct strata_arena *a, uint32_t x)
{
	a->node[x].kid[0][0] = a->free_node;
	a->free_node = x;
}

int strata_arena_init(struct strata_arena *a, uint64_t size, struct strata_error *err)
{
	memset(a, 0, sizeof(*a));
	a->size = size / STRATA_TIER_ALIGN * STRATA_TIER_ALIGN;
	a->cap_node = 16;
	a->next_node = 1;
	a->seed = 2463534242u;
	a->node = calloc(a->cap_node, sizeof(*a->node));
	if (!a->node)
		return STRATA_ERR(err, STRATA_ENOMEM, "arena: out of memory");
	if (a->size) {
		uint32_t x = node_get(a);
		a->node[x].off = 0;
		a->node[x].len = a->size;
		tinsert(a, BY_OFF, x);
		tinsert(a, BY_LEN, x);
		a->n_free = 1;
		a->largest = a->size;
	}
	return STRATA_OK;
}

void strata_arena_free(struct strata_arena *a)
{
	free(a->node);
	memset(a, 0, sizeof(*a));
}

int strata_arena_reserve(struct strata_arena *a, uint64_t bytes, uint64_t *off)
{
	bytes = align_up(bytes ? bytes : 1);
	if (bytes > a->largest)
		return STRATA_EBUDGET;
	/* best fit: the first hole not below (bytes, offset 0) */
	struct strata_arena_node *n = a->node;
	uint32_t r = a->root[BY_LEN], best = 0;
	while (r) {
		if (n[r].len >= bytes) {
			best = r;
			r = n[r].kid[BY_LEN][0];
		} else {
			r = n[r].kid[BY_LEN][1];
		}
	}
	if (!best)
		return STRATA_EBUDGET; /* not reached: largest >= bytes */
	bool was_largest = n[best].len == a->largest;
	*off = n[best].off;
	tremove(a, BY_LEN, best);
	if (n[best].len == bytes) {
		tremove(a, BY_OFF, best);
		node_put(a, best);
		a->n_free--;
	} else {
		/* the tail stays between the same neighbours: tree 0 keeps its order */
		n[best].off += bytes;
		n[best].len -= bytes;
		tinsert(a, BY_LEN, best);
	}
	a->used += bytes;
	if (was_largest)
		a->largest = rightmost_len(a);
	return STRATA_OK;
}

void strata_arena_release(struct strata_arena *a, uint64_t off, uint64_t bytes)
{
	bytes = align_up(bytes ? bytes : 1);
	struct strata_arena_node *n = a->node;
	/* the holes either side of off */
	uint32_t r = a->root[BY_OFF], prev = 0, next = 0;
	while (r) {
		if (n[r].off < off) {
			prev = r;
			r = n[r].kid[BY_OFF][1];
		} else {
			next = r;
			r = n[r].kid[BY_OFF][0];
		}
	}
	bool merge_prev = prev && n[prev].off + n[prev].len == off;
	bool merge_next = next && off + bytes == n[next].off;
	uint32_t x;
	a->used -= bytes;
	if (merge_prev && merge_next) {
		tremove(a, BY_LEN, prev);
		tremove(a, BY_LEN, next);
		tremove(a, BY_OFF, next);
		n[prev].len += bytes + n[next].len;
		node_put(a, next);
		a->n_free--;
		x = prev;
	} else if (merge_prev) {
		tremove(a, BY_LEN, prev);
		n[prev].len += bytes;
		x = prev;
	} else if (merge_next) {
		tremove(a, BY_LEN, next);
		n[next].off = off; /* still between the same neighbours */
		n[next].len += bytes;
		x = next;
	} else {
		/* Cannot fail the caller here.  At worst (the pool cannot grow)
		 * the span leaks from the arena, which shrinks capacity but never
		 * breaks the budget. */
		x = node_get(a);
		if (!x)
			return;
		n = a->node;
		n[x].off = off;
		n[x].len = bytes;
		tinsert(a, BY_OFF, x);
		a->n_free++;
	}
	tinsert(a, BY_LEN, x);
	if (n[x].len > a->largest)
		a->largest = n[x].len;
}

uint64_t strata_arena_largest_free(const struct strata_arena *a)
{
	return a->largest;
}

/* In-order walk of tree t: writes node ids to out (at most n), returns the
 * count seen; -1 when the tree breaks its order or heap property. */
static int64_t walk(const struct strata_arena *a, int t, uint32_t *out, uint32_t n)
{
	const struct strata_arena_node *nd = a->node;
	uint32_t depth = 0, cap = 64, *stack = malloc(sizeof(*stack) * cap);
	int64_t cnt = 0;
	uint32_t r = a->root[t], last = 0;
	if (!stack)
		return -1;
	for (;;) {
		while (r) {
			if (r >= a->next_node || depth > a->n_free) {
				free(stack);
				return -1;
			}
			if (depth == cap) {
				uint32_t *m = realloc(stack, sizeof(*m) * cap * 2);
				if (!m) {
					free(stack);
					return -1;
				}
				stack = m;
				cap *= 2;
			}
			stack[depth++] = r;
			r = nd[r].kid[t][0];
		}
		if (!depth)
			break;
		r = stack[--depth];
		for (int k = 0; k < 2; k++)
			if (nd[r].kid[t][k] && nd[nd[r].kid[t][k]].prio > nd[r].prio) {
				free(stack);
				return -1;
			}
		if (last && !key_less(nd, t, last, r)) {
			free(stack);
			return -1;
		}
		if ((uint64_t)cnt < n)
			out[cnt] = r;
		cnt++;
		last = r;
		r = nd[r].kid[t][1];
	}
	free(stack);
	return cnt;
}

uint32_t strata_arena_holes(const struct strata_arena *a, struct strata_span *out, uint32_t n)
{
	uint32_t *ids = malloc(sizeof(*ids) * (a->n_free + 1));
	if (!ids)
		return 0;
	int64_t k = walk(a, BY_OFF, ids, a->n_free);
	uint32_t m = k < 0 ? 0 : (uint32_t)(k < n ? k : n);
	if (m > a->n_free)
		m = a->n_free;
	for (uint32_t i = 0; i < m; i++)
		out[i] = (struct strata_span){ a->node[ids[i]].off, a->node[ids[i]].len };
	free(ids);
	return m;
}

int strata_arena_check(const struct strata_arena *a)
{
	uint32_t *ids = malloc(sizeof(*ids) * (a->n_free + 1));
	if (!ids)
		return -4;
	int rc = 0;
	int64_t k0 = walk(a, BY_OFF, ids, a->n_free);
	if (k0 != a->n_free) {
		rc = -4; /* a tree out of order, or counts disagree */
		goto out;
	}
	uint64_t sum = 0, largest = 0;
	for (uint32_t i = 0; i < a->n_free; i++) {
		const struct strata_arena_node *s = &a->node[ids[i]];
		if (!s->len || s->off % STRATA_TIER_ALIGN || s->len % STRATA_TIER_ALIGN || s->off + s->len > a->size) {
			rc = -1;
			goto out;
		}
		if (i && a->node[ids[i - 1]].off + a->node[ids[i - 1]].len >= s->off) {
			rc = -2; /* overlapping or not coalesced */
			goto out;
		}
		sum += s->len;
		if (s->len > largest)
			largest = s->len;
	}
	if (walk(a, BY_LEN, ids, a->n_free) != a->n_free || largest != a->largest) {
		rc = -4;
		goto out;
	}
	rc = sum == a->size - a->used ? 0 : -3;
out:
	free(ids);
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
