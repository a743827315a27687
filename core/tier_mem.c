/*
 * Memory tiers: a VRAM or pinned-RAM arena of a fixed byte budget, its
 * backing (device, host stand-in, NUMA-placed pinned RAM, virtual) and the
 * GPU's NUMA node (see include/strata/tier_mem.h).
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
#include "strata/tier_mem.h"
#include "strata/util.h"

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
