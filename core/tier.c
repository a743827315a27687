/*
 * Tiers and their extent allocator (see include/strata/tier.h).  The arena is
 * a sorted array of free spans: allocation is best fit (exact fit first),
 * release coalesces with both neighbours.  Spans are few (one per hole), so a
 * linear scan is cheaper than a tree here.
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

int strata_arena_init(struct strata_arena *a, uint64_t size, struct strata_error *err)
{
	memset(a, 0, sizeof(*a));
	a->size = size / STRATA_TIER_ALIGN * STRATA_TIER_ALIGN;
	a->cap_free = 16;
	a->free = malloc(sizeof(*a->free) * a->cap_free);
	if (!a->free)
		return STRATA_ERR(err, STRATA_ENOMEM, "arena: out of memory");
	if (a->size) {
		a->free[0] = (struct strata_span){ 0, a->size };
		a->n_free = 1;
	}
	return STRATA_OK;
}

void strata_arena_free(struct strata_arena *a)
{
	free(a->free);
	memset(a, 0, sizeof(*a));
}

int strata_arena_reserve(struct strata_arena *a, uint64_t bytes, uint64_t *off)
{
	bytes = align_up(bytes ? bytes : 1);
	if (bytes > a->size - a->used)
		return STRATA_EBUDGET;
	uint32_t best = UINT32_MAX;
	uint64_t best_len = UINT64_MAX;
	for (uint32_t i = 0; i < a->n_free; i++) {
		uint64_t len = a->free[i].len;
		if (len >= bytes && len < best_len) {
			best = i;
			best_len = len;
			if (len == bytes)
				break;
		}
	}
	if (best == UINT32_MAX)
		return STRATA_EBUDGET;
	struct strata_span *s = &a->free[best];
	*off = s->off;
	s->off += bytes;
	s->len -= bytes;
	if (!s->len) {
		memmove(s, s + 1, sizeof(*s) * (a->n_free - best - 1));
		a->n_free--;
	}
	a->used += bytes;
	return STRATA_OK;
}

void strata_arena_release(struct strata_arena *a, uint64_t off, uint64_t bytes)
{
	bytes = align_up(bytes ? bytes : 1);
	/* first span after off (binary search: holes can number in the thousands) */
	uint32_t lo = 0, hi = a->n_free;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (a->free[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	uint32_t i = lo;
	bool merge_prev = i > 0 && a->free[i - 1].off + a->free[i - 1].len == off;
	bool merge_next = i < a->n_free && off + bytes == a->free[i].off;
	a->used -= bytes;
	if (merge_prev && merge_next) {
		a->free[i - 1].len += bytes + a->free[i].len;
		memmove(&a->free[i], &a->free[i + 1], sizeof(*a->free) * (a->n_free - i - 1));
		a->n_free--;
	} else if (merge_prev) {
		a->free[i - 1].len += bytes;
	} else if (merge_next) {
		a->free[i].off = off;
		a->free[i].len += bytes;
	} else {
		if (a->n_free == a->cap_free) {
			/* Cannot fail the caller here; grow generously and keep going.
			 * At worst (malloc failure) the span leaks from the arena,
			 * which shrinks capacity but never breaks the budget. */
			uint32_t cap = a->cap_free * 2;
			struct strata_span *n = realloc(a->free, sizeof(*n) * cap);
			if (!n)
				return;
			a->free = n;
			a->cap_free = cap;
		}
		memmove(&a->free[i + 1], &a->free[i], sizeof(*a->free) * (a->n_free - i));
		a->free[i] = (struct strata_span){ off, bytes };
		a->n_free++;
	}
}

uint64_t strata_arena_largest_free(const struct strata_arena *a)
{
	uint64_t m = 0;
	for (uint32_t i = 0; i < a->n_free; i++)
		if (a->free[i].len > m)
			m = a->free[i].len;
	return m;
}

int strata_arena_check(const struct strata_arena *a)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < a->n_free; i++) {
		const struct strata_span *s = &a->free[i];
		if (!s->len || s->off % STRATA_TIER_ALIGN || s->len % STRATA_TIER_ALIGN || s->off + s->len > a->size)
			return -1;
		if (i && a->free[i - 1].off + a->free[i - 1].len >= s->off)
			return -2; /* overlapping or not coalesced */
		sum += s->len;
	}
	return sum == a->size - a->used ? 0 : -3;
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
		} else {
			/* Best effort: page-lock so reads land in resident memory;
			 * an RLIMIT_MEMLOCK refusal is reported, not fatal. */
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
