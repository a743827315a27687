/*
 * The expert cache engine (see include/strata/engine.h).
 *
 * Bookkeeping is per expert id and per cached tier (VRAM = 0, RAM = 1): a
 * resident flag and arena offset, a pin count, a "prefetched and not yet
 * used" flag, and the job moving bytes in, if any.  Every decision (hits,
 * admissions, victims, prefetches) is taken on this state alone, never on
 * whether a move has finished, so virtual and real runs of the same policies
 * decide the same and count the same; only stall/late figures depend on time.
 *
 * A job is one move into a tier.  A RAM -> VRAM job whose source is itself
 * still arriving (NVMe -> RAM in flight) waits as the child of that job and is
 * queued by its completion callback.  Before a slot is freed (eviction,
 * scratch release) the engine waits for the jobs that write it or read from it.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant.h"
#include "strata/engine.h"
#include "strata/gpu.h"
#include "strata/sched.h"
#include "strata/mover.h"
#include "strata/option.h"
#include "movers/mover_int.h"
#include "strata/tier_mem.h"
#include "strata/util.h"

#define V STRATA_TIER_VRAM
#define R STRATA_TIER_RAM
#define NO_OFF UINT64_MAX

struct job {
	struct strata_move mv;
	struct strata_engine *e;
	struct strata_mover *m;
	struct job *parent, *child; /* child: queued when this one completes */
	struct job *next_free;
	struct job **slot;          /* where the engine keeps it (an inbound or scratch_job) */
	struct job *next_low;       /* in the engine's low-priority queue of its mover */
	uint32_t eid;
	int tier, src_tier;         /* destination; source (RAM or NVMe) */
	int queued, done;
	int mi;                     /* index of its mover in e->ms */
	bool low;                   /* a prefetch: handed to the mover behind demand (sched.h) */
	bool waiting;               /* low, queued by the engine, not yet handed to the mover */
};

/* An expert's state in a cached tier. */
struct tslot {
	uint64_t off;         /* arena offset, NO_OFF when not resident */
	struct job *inbound;  /* the move writing it, if any */
	uint32_t hnd;         /* the arena's handle of the extent */
	uint8_t prefetched;   /* prefetched and not yet used */
	uint8_t transient;    /* prefetched where placement would not keep it: leaves after its layer */
};

/* An expert's state: per cached tier, and its scratch slot when streamed
 * (NO_OFF: none).  One cache line, so a miss or an eviction touches one. */
struct eslot {
	struct tslot t[2];
	uint64_t scratch_off;
	struct job *scratch_job;
};
_Static_assert(sizeof(struct eslot) == 64, "an expert's state fills one cache line");

struct strata_engine {
	struct strata_engine_config cfg;
	struct strata_store *store;
	struct strata_model_spec spec;
	struct strata_policy_env env;
	uint32_t n_ids;
	uint8_t *tier_table;
	uint8_t *fmt;                    /* format per eid */
	uint64_t *bytes;                 /* extent bytes per eid */
	const struct strata_extent **ext;/* per eid, NULL without a store */
	uint64_t max_bytes;
	struct strata_policy *place, *evict[2], *prefetch;
	struct strata_tier_mem tier[2], scratch;
	/* per tier, per eid: the flags policies see (struct strata_residency);
	 * the rest of an expert's state in one 64-byte record */
	uint8_t *resident[2], *pinned[2];
	struct eslot *es;
	struct strata_residency res[2];
	/* step pinned by begin_step */
	uint32_t *step_eids, n_step, max_step;
	int step_layer;
	/* movers */
	bool virt, on_gpu;
	bool no_wall;                    /* virtual and cfg.no_wall_bookkeeping */
	struct strata_mover *nvme, *h2d, *staged;
	struct strata_vlink vl_nvme, vl_pcie;
	strata_gpu_stream *cstream;      /* VRAM compaction's copies (device tier), made on first use */
	void *cbounce;                   /* their bounce buffer: max_bytes of device memory, same */
	struct job *free_jobs;
	struct job **job_blocks;
	uint32_t n_blocks;
	struct strata_error io_err;
	int io_failed;
	/* prefetch requests and their scheduling (policy.h, core/sched.c) */
	struct strata_prefetch_req *reqs;
	uint32_t max_reqs;
	struct strata_prefetch_sched sched;
	struct strata_pfq pfq;
	struct strata_pf *pf_done;
	uint64_t lstep;                  /* layer-steps released so far (the current one's index) */
	/* physical priority: per mover (nvme, staged, h2d), prefetch moves held
	 * behind demand; demand moves outstanding per link; low ones in movers */
	struct strata_mover *ms[3];
	struct job *low_head[3], *low_tail[3];
	uint32_t demand_out[STRATA_LINK_COUNT], low_out[3];
	uint64_t low_inflight[STRATA_LINK_COUNT]; /* bytes of the low moves in the movers, per link */
	uint64_t low_cap[STRATA_LINK_COUNT];      /* cfg.prefetch_inflight, defaults applied */
	uint8_t kick;                    /* real: movers handed moves since their last submit */
	/* loads into VRAM, recorded for the RAM tier's bound (cfg.record_loads) */
	uint32_t *ld_eid;
	uint64_t *ld_pos, n_ld, cap_ld;
	/* precision on miss (cfg.on_miss, engine.h) */
	bool sub_on, sub_ram, have_gates;
	uint32_t n_gates;
	double sub_gate;
	uint64_t *low_bytes;             /* per eid: its copy's extent bytes, 0: none */
	const struct strata_extent **low_ext; /* per eid: its copy in the store (NULL without one) */
	uint8_t *low_fmt;                /* per eid: its copy's format */
	uint8_t *subst;                  /* per eid: acquired as its copy (until release) */
	float *gates;                    /* per expert of the next acquire */
	char sub_name[64];
	/* clocks */
	uint64_t now;                    /* logical access clock */
	double vclock;                   /* virtual ns */
	uint64_t t_open;
	struct strata_engine_stats st;
	char name[3 * STRATA_POLICY_NAME_MAX + 112];
};

void strata_cost_model_defaults(struct strata_cost_model *c)
{
	/* a PCIe 4 NVMe and a PCIe 5 x16 link; `strata calibrate` measures real
	 * ones.  Also the cost file's defaults (strata sim without --cost): one
	 * model for sim, replay and the API, whose policies weigh moves against
	 * it.  The 8 us per layer launch is an assumption, not a measurement
	 * (calibrate on the H200: 37-45 us with our kernels). */
	*c = (struct strata_cost_model){ .nvme_gbps = 6.0, .nvme_lat_us = 80, .pcie_gbps = 50.0,
					 .pcie_lat_us = 10, .hbm_gbps = 4000, .host_gbps = 20, .kernel_us_per_mb = 0.5,
					 .kernel_fixed_us = 8, .nvme_queue_depth = 32 };
}

void strata_engine_config_defaults(struct strata_engine_config *c)
{
	memset(c, 0, sizeof(*c));
	c->mode = STRATA_ENGINE_REAL;
	/* 8 GiB of VRAM and 32 GiB of pinned RAM, but never more than a quarter
	 * (RAM) or an eighth (VRAM stand-in) of this machine's memory: the arenas
	 * are allocated whole at open, and a default must run where it is given */
	uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	c->budget[V] = 8ull << 30;
	c->budget[R] = 32ull << 30;
	if (phys && c->budget[R] > phys / 4)
		c->budget[R] = phys / 4 / STRATA_EXTENT_ALIGN * STRATA_EXTENT_ALIGN;
	if (phys && strata_gpu_count() == 0 && c->budget[V] > phys / 8)
		c->budget[V] = phys / 8 / STRATA_EXTENT_ALIGN * STRATA_EXTENT_ALIGN;
	c->place = strata_policy_default(STRATA_ROLE_PLACE);
	c->evict = strata_policy_default(STRATA_ROLE_EVICT);
	c->prefetch = strata_policy_default(STRATA_ROLE_PREFETCH);
	c->seed = 1;
	c->use_gpu = -1;
	c->nvme_mover = STRATA_NVME_URING;
	c->queue_depth = 32;
	c->numa_node = -1;
	strata_cost_model_defaults(&c->cost);
}

static const char *tname(int t) { return t == V ? "vram" : t == R ? "ram" : "nvme"; }

/* ---- jobs ----------------------------------------------------------------- */

static struct job *job_get(struct strata_engine *e)
{
	if (!e->free_jobs) {
		enum { N = 256 };
		struct job **nb = realloc(e->job_blocks, sizeof(*nb) * (e->n_blocks + 1));
		struct job *blk = calloc(N, sizeof(*blk));
		if (!nb || !blk) {
			free(blk);
			if (nb)
				e->job_blocks = nb;
			return NULL;
		}
		e->job_blocks = nb;
		e->job_blocks[e->n_blocks++] = blk;
		for (int i = 0; i < N; i++) {
			blk[i].next_free = e->free_jobs;
			e->free_jobs = &blk[i];
		}
	}
	struct job *j = e->free_jobs;
	e->free_jobs = j->next_free;
	if (e->virt) {
		/* what a virtual move reads before it is set (issue sets the rest;
		 * queue, submit and reap the mover's fields): not all ~200 bytes */
		j->parent = j->child = NULL;
		j->next_low = NULL;
		j->queued = j->done = 0;
		j->low = j->waiting = false;
		j->mv.src = NULL;
		j->mv.path = NULL;
		j->mv.offset = 0;
		j->mv.not_before_ns = 0;
		j->mv.user = NULL;
	} else {
		memset(j, 0, sizeof(*j));
	}
	j->e = e;
	return j;
}

static void job_put(struct strata_engine *e, struct job *j)
{
	j->next_free = e->free_jobs;
	e->free_jobs = j;
}

static void io_fail(struct strata_engine *e, const struct strata_error *err)
{
	if (!e->io_failed) {
		e->io_err = *err;
		e->io_failed = 1;
	}
}

/* Submit m's queued moves.  In virtual mode, skip the call when the mover has
 * none queued: its submit would do nothing (see strata_mover_virtual_queued). */
static int submit_mover(struct strata_engine *e, struct strata_mover *m, struct strata_error *err)
{
	if (e->virt) {
		if (strata_mover_virtual_queued(m))
			strata_mover_virtual_submit(m); /* cannot fail */
		return STRATA_OK;
	}
	return strata_mover_submit(m, err);
}

static int job_queue(struct job *j);
static void feed_low(struct strata_engine *e);

/* The link whose demand holds back each mover's prefetches (e->ms order:
 * nvme, staged, h2d).  A staged move holds the disk for its whole length
 * but PCIe only for a bounce buffer's copy at a time, so it holds back
 * prefetch reads, not prefetch copies: those overlap the demand reads (the
 * cuda mover keeps them off the demand copies' streams, strata/mover.h). */
static const uint8_t mover_links[3] = {
	1u << STRATA_LINK_NVME, 1u << STRATA_LINK_NVME, 1u << STRATA_LINK_PCIE,
};
/* The link whose prefetch budget each mover's prefetches count against
 * (cfg.prefetch_inflight): the staged mover's reads hold the disk. */
static const uint8_t mover_budget_link[3] = { STRATA_LINK_NVME, STRATA_LINK_NVME, STRATA_LINK_PCIE };
/* cfg.prefetch_inflight's defaults (0 there): 32 MiB of reads, 16 MiB of copies */
static const uint64_t low_cap_default[STRATA_LINK_COUNT] = {
	[STRATA_LINK_NVME] = 32ull << 20,
	[STRATA_LINK_PCIE] = 16ull << 20,
};

static void job_done(struct strata_move *mv)
{
	struct job *j = (struct job *)mv;
	struct strata_engine *e = j->e;
	j->done = 1;
	if (mv->status == STRATA_MOVE_FAILED) {
		struct strata_error err;
		strata_move_error(mv, &err);
		io_fail(e, &err);
	}
	if (j->low) {
		e->low_out[j->mi]--;
		e->low_inflight[mover_budget_link[j->mi]] -= j->mv.bytes;
	} else {
		for (int l = 0; l < STRATA_LINK_COUNT; l++)
			e->demand_out[l] -= mover_links[j->mi] >> l & 1;
	}
	if (j->child) {
		struct job *c = j->child;
		j->child = NULL;
		c->parent = NULL;
		c->mv.not_before_ns = mv->done_ns;
		job_queue(c);
	}
	/* A virtual job is retired as it completes: a completed job in a slot
	 * and an empty slot mean the same everywhere (waits return at once, it
	 * is no one's parent, it is not late), and the pool stays small and
	 * warm instead of holding a job per RAM-resident expert.  Nothing takes
	 * a job from the pool before the waiter reading j->done returns. */
	if (e->virt && *j->slot == j) {
		*j->slot = NULL;
		job_put(e, j);
	} else if (!e->virt && !e->demand_out[STRATA_LINK_NVME] + !e->demand_out[STRATA_LINK_PCIE]) {
		feed_low(e); /* a link fell idle: its prefetches may go */
	}
}

/* Hand j to its mover (demand, or a prefetch whose turn came). */
static int hand_over(struct job *j)
{
	struct strata_engine *e = j->e;
	struct strata_error err;
	j->queued = 1;
	j->mv.low = j->low;
	if (j->low) {
		uint8_t l = mover_budget_link[j->mi];
		e->low_out[j->mi]++;
		e->low_inflight[l] += j->mv.bytes;
		if (e->low_inflight[l] > e->st.prefetch_inflight_max[l])
			e->st.prefetch_inflight_max[l] = e->low_inflight[l];
	} else {
		for (int l = 0; l < STRATA_LINK_COUNT; l++)
			e->demand_out[l] += mover_links[j->mi] >> l & 1;
	}
	if (j->e->virt) {
		strata_mover_virtual_queue(j->m, &j->mv);
		return STRATA_OK;
	}
	if (strata_mover_queue(j->m, &j->mv, &err)) {
		j->done = 1;
		io_fail(j->e, &err);
		return STRATA_EIO;
	}
	return STRATA_OK;
}

/* Demand moves go to the mover at once; a prefetch waits in its mover's
 * low-priority queue until feed_low hands it over (policy.h, point 4). */
static int job_queue(struct job *j)
{
	struct strata_engine *e = j->e;
	if (!j->low)
		return hand_over(j);
	j->waiting = true;
	j->next_low = NULL;
	if (e->virt && (double)j->mv.not_before_ns < e->vclock)
		j->mv.not_before_ns = (uint64_t)e->vclock; /* asked for now: no link carried it before */
	if (e->low_tail[j->mi])
		e->low_tail[j->mi]->next_low = j;
	else
		e->low_head[j->mi] = j;
	e->low_tail[j->mi] = j;
	return STRATA_OK;
}

static void low_unlink(struct strata_engine *e, struct job *j)
{
	struct job **pp = &e->low_head[j->mi], *prev = NULL;
	while (*pp != j) {
		prev = *pp;
		pp = &(*pp)->next_low;
	}
	*pp = j->next_low;
	if (e->low_tail[j->mi] == j)
		e->low_tail[j->mi] = prev;
	j->next_low = NULL;
	j->waiting = false;
}

/* A prefetch still waiting becomes a demand: handed over now, in place.
 * One already in its mover goes ahead of the prefetches there (mv.low). */
static void promote(struct strata_engine *e, struct job *j)
{
	if (j && j->waiting) {
		low_unlink(e, j);
		j->low = false;
		hand_over(j);
		e->kick |= (uint8_t)(1u << j->mi);
	} else if (j && !j->done) {
		j->mv.low = false;
	}
}

/* Submit the movers feed_low or promote handed moves to (real mode). */
static void kick_movers(struct strata_engine *e)
{
	for (int i = 0; i < 3 && e->kick; i++) {
		struct strata_error err;
		if (!(e->kick & (1u << i)))
			continue;
		e->kick &= (uint8_t)~(1u << i);
		if (strata_mover_submit(e->ms[i], &err))
			io_fail(e, &err);
	}
}

/* Hand over the waiting prefetches whose links are free of demand: a real
 * mover gets them while no demand move is outstanding on its links; a
 * virtual one starts each where its links fell idle before the clock (the
 * link would have carried it then; a demand move arriving later queues
 * behind it, as on a device).  Called where the engine runs (begin_step,
 * acquire before its demand moves, release) and, real, as a link empties. */
static void feed_low(struct strata_engine *e)
{
	for (int i = 0; i < 3; i++) {
		struct job *j;
		while ((j = e->low_head[i])) {
			if (e->virt) {
				if (!strata_mover_virtual_start_idle(e->ms[i], &j->mv))
					break;
				low_unlink(e, j);
				j->queued = 1;
				e->low_out[i]++;
				continue;
			}
			uint8_t bl = mover_budget_link[i];
			bool busy = e->low_inflight[bl] && e->low_inflight[bl] + j->mv.bytes > e->low_cap[bl];
			for (int l = 0; l < STRATA_LINK_COUNT; l++)
				busy |= (mover_links[i] >> l & 1) && e->demand_out[l];
			if (busy)
				break;
			low_unlink(e, j);
			hand_over(j);
			e->kick |= (uint8_t)(1u << i);
		}
	}
}

/* A prefetch that never reached its mover need not move at all: drop the
 * job (its slot is being freed).  False when it moved or must (a copy
 * waits on it). */
static bool cancel_waiting(struct strata_engine *e, struct job **slot)
{
	struct job *j = *slot;
	if (!j || !j->waiting || j->child)
		return false;
	low_unlink(e, j);
	j->done = 1;
	*slot = NULL;
	job_put(e, j);
	return true;
}

/* Block (or advance the virtual clock) until j has completed. */
static void job_wait(struct strata_engine *e, struct job *j)
{
	e->st.waits += !j->done;
	while (!j->done) {
		struct strata_error err;
		if (j->waiting) {
			promote(e, j);
			continue;
		}
		if (j->parent) {
			if (!j->parent->done) {
				job_wait(e, j->parent);
				continue;
			}
			j->parent = NULL; /* done without queueing us: do it now */
			if (!j->queued)
				job_queue(j);
			continue;
		}
		if (e->virt) {
			if (submit_mover(e, j->m, &err) == 0)
				strata_mover_virtual_reap(j->m, 1);
		} else {
			kick_movers(e); /* prefetches handed over meanwhile reach their links before we block */
			if (strata_mover_submit(j->m, &err) == 0 && strata_mover_reap(j->m, 1, &err) < 0)
				io_fail(e, &err);
		}
		if (!j->done && !j->m->outstanding) {
			/* cannot happen; never spin */
			STRATA_ERR(&err, STRATA_EIO, "engine: a move was lost by mover %s", j->m->ops->name);
			io_fail(e, &err);
			j->done = 1;
		}
	}
}

static void *slot_ptr(struct strata_engine *e, int tier, uint64_t off)
{
	return strata_tier_ptr(&e->tier[tier], off);
}

/* Start moving eid into (tier, off) from src_tier; low: a prefetch. */
static int issue(struct strata_engine *e, uint32_t eid, int tier, void *dst, int src_tier, struct job **slot,
		 bool low, bool copy)
{
	struct job *j = job_get(e);
	if (!j)
		return STRATA_ENOMEM;
	uint64_t b = copy ? e->low_bytes[eid] : e->bytes[eid];
	j->low = low;
	if (tier == V) {
		e->st.moves_vram++;
		if (e->cfg.record_loads && !copy) { /* a copy is no load of the expert (bound (d)) */
			if (e->n_ld == e->cap_ld) {
				uint64_t cap = e->cap_ld ? 2 * e->cap_ld : 4096;
				uint32_t *a = realloc(e->ld_eid, cap * sizeof(*a));
				if (a)
					e->ld_eid = a;
				uint64_t *p = a ? realloc(e->ld_pos, cap * sizeof(*p)) : NULL;
				if (!p) {
					job_put(e, j);
					return STRATA_ENOMEM;
				}
				e->ld_pos = p;
				e->cap_ld = cap;
			}
			e->ld_eid[e->n_ld] = eid;
			e->ld_pos[e->n_ld++] = e->lstep;
		}
	}
	if (src_tier == STRATA_TIER_NVME)
		e->st.moves_nvme++;
	j->eid = eid;
	j->tier = tier;
	j->src_tier = src_tier;
	j->mv.bytes = b;
	j->mv.dst = dst;
	j->mv.on_done = job_done;
	j->mv.fd = -1;
	if (src_tier == STRATA_TIER_NVME) {
		const struct strata_extent *x = !e->ext || e->virt ? NULL : copy ? e->low_ext[eid] : e->ext[eid];
		if (x) {
			struct strata_error err;
			int fd = strata_store_shard_fd(e->store, x->shard, e->cfg.nvme_mover != STRATA_NVME_MMAP, &err);
			if (fd < 0) {
				job_put(e, j);
				io_fail(e, &err);
				return err.code ? err.code : STRATA_EIO;
			}
			j->mv.fd = fd;
			j->mv.path = strata_store_shard_path(e->store, x->shard);
			j->mv.offset = x->offset;
			if (strata_store_arm_check(e->store, x, e->cfg.verify, &j->mv)) {
				e->st.verified_extents++;
				e->st.verified_bytes += x->payload;
			}
		}
		j->m = tier == R ? e->nvme : e->staged;
		j->mi = tier == R ? 0 : 1;
		if (tier == R)
			e->st.bytes_nvme_ram += b;
		else
			e->st.bytes_nvme_vram += b;
	} else {
		j->m = e->h2d;
		j->mi = 2;
		j->mv.src = slot_ptr(e, R, e->es[eid].t[R].off);
		e->st.bytes_ram_vram += b;
	}
	*slot = j;
	j->slot = slot;
	struct job *src = src_tier == R ? e->es[eid].t[R].inbound : NULL;
	if (src && !low)
		promote(e, src); /* a demand copy waits on a prefetched read: it is demand now */
	if (src && !src->done && src->child)
		job_wait(e, src); /* one dependent per job: a second one waits here */
	if (src && !src->done) {
		j->parent = src;
		src->child = j;
		return STRATA_OK;
	}
	return job_queue(j);
}

/* Wait for every job that writes (tier, eid) or reads from it. */
static void quiesce(struct strata_engine *e, int tier, uint32_t eid)
{
	struct job *j = e->es[eid].t[tier].inbound;
	if (j)
		job_wait(e, j);
	/* a copy out of this RAM slot, into VRAM or a scratch slot, must finish
	 * before the slot is reused (the source of a streamed expert is not
	 * pinned in RAM: decisions never wait on time) */
	if (tier == R && (j = e->es[eid].t[V].inbound) && j->src_tier == R)
		job_wait(e, j);
	if (tier == R && (j = e->es[eid].scratch_job) && j->src_tier == R)
		job_wait(e, j);
}

static void retire(struct strata_engine *e, struct job **slot)
{
	struct job *j = *slot;
	if (j && j->done && !j->child) {
		job_put(e, j);
		*slot = NULL;
	}
}

/* ---- residency ------------------------------------------------------------- */

static int policy_failed_slow(struct strata_engine *e, struct strata_error *err)
{
	struct strata_policy *p[4] = { e->place, e->evict[V], e->evict[R], e->prefetch };
	for (int i = 0; i < 4; i++) {
		const struct strata_error *pe = strata_policy_error(p[i]);
		if (pe) {
			if (err)
				*err = *pe;
			return pe->code;
		}
	}
	return STRATA_OK;
}

/* Called after every call into a policy: the common case (no error) reads
 * four codes, without building a list. */
static inline int policy_failed(struct strata_engine *e, struct strata_error *err)
{
	if (!(e->place->error.code | e->evict[V]->error.code | e->evict[R]->error.code | e->prefetch->error.code))
		return STRATA_OK;
	return policy_failed_slow(e, err);
}

static void drop(struct strata_engine *e, int t, uint32_t eid)
{
	cancel_waiting(e, &e->es[eid].t[t].inbound);
	quiesce(e, t, eid);
	retire(e, &e->es[eid].t[t].inbound);
	if (e->es[eid].t[V].inbound && t == R)
		retire(e, &e->es[eid].t[V].inbound);
	strata_tier_release_h(&e->tier[t], e->es[eid].t[t].hnd);
	e->es[eid].t[t].off = NO_OFF;
	e->es[eid].t[t].transient = 0;
	e->resident[t][eid] = 0;
	e->res[t].n_resident--;
	e->st.used[t] = strata_tier_used(&e->tier[t]);
}

/* A tier's arena could not grow its hole index. */
static int holes_oom(struct strata_error *err, int t)
{
	return STRATA_ERR(err, STRATA_ENOMEM, "engine: out of memory (%s tier's hole index)", tname(t));
}

/* ---- room for mixed sizes --------------------------------------------------- */

static bool room_fixed(void *ctx, uint32_t eid)
{
	const uint8_t *pinned = ctx;
	return pinned[eid] != 0; /* the running layer's: its pointers are out */
}

/* Point a job that has not reached its mover at the extent's new place, or
 * wait for it (it reads or writes the old one). */
static void follow(struct strata_engine *e, struct job *j, bool dst, void *p)
{
	if (!j || j->done)
		return;
	if (!j->queued) {
		if (dst)
			j->mv.dst = p;
		else
			j->mv.src = p;
		return;
	}
	job_wait(e, j);
}

/* eid's extent in tier t moves to p: the jobs writing it, and (RAM) the
 * copies reading it, follow. */
static void follow_extent(struct strata_engine *e, int t, uint32_t eid, void *p)
{
	struct eslot *x = &e->es[eid];
	follow(e, x->t[t].inbound, true, p);
	if (t == R) {
		if (x->t[V].inbound && x->t[V].inbound->src_tier == R)
			follow(e, x->t[V].inbound, false, p);
		if (x->scratch_job && x->scratch_job->src_tier == R)
			follow(e, x->scratch_job, false, p);
	}
}

/* Move eid's extent in tier t into hole `to` (a plan's): copy, then give
 * the old span back. */
static int move_extent(struct strata_engine *e, int t, uint32_t eid, uint32_t to, struct strata_error *err)
{
	struct eslot *x = &e->es[eid];
	uint64_t from = x->t[t].off, off;
	uint32_t h;
	int rc = strata_arena_reserve_in(&e->tier[t].arena, to, e->bytes[eid], &off, &h);
	if (rc)
		return rc == STRATA_ENOMEM ? holes_oom(err, t)
					   : STRATA_ERR(err, STRATA_EINVAL, "engine: %s tier: a planned hole is gone",
							tname(t));
	uint8_t *base = e->tier[t].base;
	follow_extent(e, t, eid, base ? base + off : NULL);
	if (base && e->tier[t].backing == STRATA_BACK_DEVICE)
		rc = strata_gpu_memcpy_d2d_async(base + off, base + from, e->bytes[eid], e->cstream, err);
	else if (base)
		memcpy(base + off, base + from, e->bytes[eid]);
	strata_tier_release_h(&e->tier[t], x->t[t].hnd);
	x->t[t].hnd = h;
	x->t[t].off = off;
	strata_arena_set_tag(&e->tier[t].arena, h, eid);
	return rc;
}

/* A slide's move of one extent (strata_arena_slide): jobs follow, the bytes
 * move down (the spans may overlap).  traffic: the bytes the copies carry
 * (the sim's charge). */
struct slide {
	struct strata_engine *e;
	int t, rc;
	uint64_t traffic;
	struct strata_error *err;
};

static int slide_copy(void *ctx, uint64_t dst, uint64_t src, uint64_t n)
{
	struct slide *s = ctx;
	struct strata_engine *e = s->e;
	uint8_t *base = e->tier[s->t].base;
	if (!base)
		return STRATA_OK;
	return strata_gpu_memcpy_d2d_async(dst == STRATA_ARENA_BOUNCE ? e->cbounce : base + dst,
					   src == STRATA_ARENA_BOUNCE ? e->cbounce : base + src, n, e->cstream, s->err);
}

static void slide_move(void *ctx, uint32_t eid, uint64_t from, uint64_t to, uint64_t len)
{
	struct slide *s = ctx;
	struct strata_engine *e = s->e;
	uint8_t *base = e->tier[s->t].base;
	follow_extent(e, s->t, eid, base ? base + to : NULL);
	e->es[eid].t[s->t].off = to;
	if (s->rc)
		return;
	uint64_t moved = len;
	if (s->t == V && (!base || e->tier[V].backing == STRATA_BACK_DEVICE)) {
		/* one device copy must not overlap itself: whole pieces of up to
		 * an expert through the bounce buffer, in order on one stream,
		 * so a slide is a few large copies whatever its shift */
		s->rc = strata_arena_copy_down(from, to, len, e->max_bytes, slide_copy, s, &moved);
	} else if (base) {
		memmove(base + to, base + from, len);
	}
	s->traffic += moved;
}

/* Bytes a slide may move to make room for `bytes`, per tier: about what a
 * second eviction would cost to undo (VRAM: a copy over PCIe against two
 * HBM passes; RAM: a disk read against a memmove), as a fixed ratio so the
 * decision does not depend on a cost model. */
static const uint64_t slide_ratio[2] = { 32, 4 };

/* Make a hole of `bytes` in tier t when the free bytes suffice but no hole
 * does: move a few extents into holes elsewhere (strata_arena_plan_room) or
 * slide a window together (strata_arena_slide_plan), whichever moves fewer
 * bytes (a slide within slide_ratio of the request).  STRATA_EBUDGET (err
 * untouched): neither. */
static int compact(struct strata_engine *e, int t, uint64_t bytes, struct strata_error *err)
{
	struct strata_arena *a = &e->tier[t].arena;
	struct strata_arena_plan plan;
	uint32_t first = 0, last = 0;
	uint64_t smoved = UINT64_MAX;
	int rc = strata_arena_plan_room(a, bytes, room_fixed, e->pinned[t], &plan);
	if (rc == STRATA_ENOMEM)
		return holes_oom(err, t);
	if (strata_arena_slide_plan(a, bytes, room_fixed, e->pinned[t], &first, &last, &smoved) ||
	    smoved > slide_ratio[t] * bytes)
		smoved = UINT64_MAX;
	bool slide = smoved != UINT64_MAX && (rc || smoved < plan.moved);
	if (rc && !slide)
		return rc;
	rc = STRATA_OK;
	if (e->tier[t].base && e->tier[t].backing == STRATA_BACK_DEVICE &&
	    ((!e->cstream && (rc = strata_gpu_stream_create(&e->cstream, err))) ||
	     (!e->cbounce && (rc = strata_gpu_malloc(&e->cbounce, e->max_bytes, err)))))
		return rc;
	uint64_t t0 = e->virt ? 0 : strata_now_ns(), moved = slide ? smoved : plan.moved, traffic = moved;
	if (slide) {
		struct slide s = { .e = e, .t = t, .err = err };
		if ((rc = strata_arena_slide(a, first, last, slide_move, &s)))
			return holes_oom(err, t);
		rc = s.rc;
		traffic = s.traffic;
	} else {
		for (uint32_t i = 0; i < plan.n && !rc; i++)
			rc = move_extent(e, t, a->blk[plan.h[i]].tag, plan.to[i], err);
	}
	if (!rc && e->cstream && t == V)
		rc = strata_gpu_stream_sync(e->cstream, err);
	if (rc)
		return rc;
	e->st.compactions[t]++;
	e->st.compact_bytes[t] += moved;
	/* the engine's thread waits for the copies: each byte they carry is
	 * read and written at the tier's copy speed (strata calibrate measures
	 * both); a VRAM slide's bytes that go through the bounce buffer count
	 * twice */
	double gbps = t == V ? e->cfg.cost.hbm_gbps : e->cfg.cost.host_gbps;
	double ns = e->virt ? (gbps > 0 ? 2.0 * (double)traffic / gbps : 0) : (double)(strata_now_ns() - t0);
	if (e->virt)
		e->vclock += ns;
	e->st.compact_ns += ns;
	return STRATA_OK;
}

/* Reserve room for eid in tier t (the arena's handle goes to
 * es[eid].t[t].hnd: mark_resident follows): evict in the policy's order
 * until the free bytes hold it, then, if no hole does, compact rather than
 * evict more.  STRATA_EBUDGET (err untouched) when the policy has nothing
 * left to give. */
static int make_room(struct strata_engine *e, int t, uint32_t eid, uint64_t *off, struct strata_error *err)
{
	struct strata_policy *ev = e->evict[t];
	const struct strata_evict_ops *ops = strata_evict_ops_of(ev);
	if (e->bytes[eid] > e->tier[t].budget)
		return STRATA_EBUDGET;
	int got;
	/* a failing reserve is O(1) (one comparison with the longest hole), so
	 * trying again after each eviction costs nothing */
	while ((got = strata_tier_reserve_h(&e->tier[t], e->bytes[eid], off, &e->es[eid].t[t].hnd)) != STRATA_OK) {
		if (got == STRATA_ENOMEM)
			return holes_oom(err, t);
		int rc = compact(e, t, e->bytes[eid], err);
		if (rc == STRATA_OK)
			continue;
		if (rc != STRATA_EBUDGET)
			return rc;
		int64_t v = ops->victim(ev, e->now, &e->res[t]);
		if ((rc = policy_failed(e, err)))
			return rc;
		if (v == STRATA_NO_EXPERT)
			return STRATA_EBUDGET;
		if (v < 0 || v >= e->n_ids || !e->resident[t][v] || e->pinned[t][v])
			return STRATA_ERR(err, STRATA_EPOLICY, "evict %s (%s tier): chose expert %lld, which is %s",
					  ev->name, tname(t), (long long)v,
					  v < 0 || v >= e->n_ids ? "out of range"
					  : !e->resident[t][v] ? "not resident in the tier"
					  : "pinned by the running layer");
		ops->on_remove(ev, (uint32_t)v);
		drop(e, t, (uint32_t)v);
		e->st.evictions[t]++;
		if (e->es[v].t[t].prefetched) {
			e->es[v].t[t].prefetched = 0;
			e->st.prefetch_wasted++;
		}
	}
	e->st.used[t] = strata_tier_used(&e->tier[t]);
	return STRATA_OK;
}

static void mark_resident(struct strata_engine *e, int t, uint32_t eid, uint64_t off)
{
	strata_arena_set_tag(&e->tier[t].arena, e->es[eid].t[t].hnd, eid);
	e->es[eid].t[t].off = off;
	e->resident[t][eid] = 1;
	e->res[t].n_resident++;
}

/* ---- open ------------------------------------------------------------------ */

static int create_policies(struct strata_engine *e, struct strata_error *err)
{
	const struct strata_engine_config *c = &e->cfg;
	const char *spec[3] = { c->place, c->evict, c->prefetch };
	const void *ops[3] = { c->place_ops, c->evict_ops, c->prefetch_ops };
	for (int r = 0; r < STRATA_ROLE_COUNT; r++)
		if (!spec[r])
			spec[r] = strata_policy_default(r);
	struct strata_policy **dst[4] = { &e->place, &e->evict[V], &e->evict[R], &e->prefetch };
	const int role[4] = { STRATA_ROLE_PLACE, STRATA_ROLE_EVICT, STRATA_ROLE_EVICT, STRATA_ROLE_PREFETCH };
	const int tier[4] = { -1, V, R, -1 };
	int rc = STRATA_OK;
	for (int i = 0; i < 4 && !rc; i++) {
		int r = role[i];
		rc = ops[r] ? strata_policy_create_ops(r, ops[r], NULL, &e->env, tier[i], dst[i], err)
			    : strata_policy_create(r, spec[r], &e->env, tier[i], dst[i], err);
	}
	if (!rc)
		snprintf(e->name, sizeof(e->name), "place=%s,evict=%s,prefetch=%s%s%s", e->place->name,
			 e->evict[V]->name, e->prefetch->name, e->sub_on ? ",on_miss=" : "", e->sub_on ? e->sub_name : "");
	return rc;
}

static int open_movers(struct strata_engine *e, struct strata_error *err)
{
	const struct strata_engine_config *c = &e->cfg;
	uint32_t qd = c->queue_depth ? c->queue_depth : 32;
	int rc;
	if (e->virt) {
		const struct strata_cost_model *k = &c->cost;
		strata_vlink_init(&e->vl_nvme, k->nvme_gbps, k->nvme_lat_us, k->nvme_queue_depth ? k->nvme_queue_depth : qd);
		strata_vlink_init(&e->vl_pcie, k->pcie_gbps, k->pcie_lat_us, c->copy_streams ? c->copy_streams : 2);
		struct strata_mover_config mc = { .queue_depth = qd, .clock_ns = &e->vclock };
		mc.links[0] = &e->vl_nvme;
		if ((rc = strata_mover_open(&strata_mover_virtual, &mc, &e->nvme, err)))
			return rc;
		mc.links[0] = &e->vl_pcie;
		if ((rc = strata_mover_open(&strata_mover_virtual, &mc, &e->h2d, err)))
			return rc;
		mc.links[0] = &e->vl_nvme;
		mc.links[1] = &e->vl_pcie;
		return strata_mover_open(&strata_mover_virtual, &mc, &e->staged, err);
	}
	const struct strata_mover_ops *nv = c->nvme_mover == STRATA_NVME_MMAP ? &strata_mover_mmap
					   : c->nvme_mover == STRATA_NVME_PREAD ? &strata_mover_pread
					   : &strata_mover_uring;
	struct strata_mover_config mc = { .queue_depth = qd, .n_streams = c->copy_streams, .copy = c->copy };
	if ((rc = strata_mover_open(nv, &mc, &e->nvme, err)))
		return rc;
	if ((rc = strata_mover_open(e->on_gpu ? &strata_mover_cuda : &strata_mover_host, &mc, &e->h2d, err)))
		return rc;
	struct strata_mover_config sc = { .queue_depth = qd, .stage_read = e->nvme, .stage_copy = e->h2d,
					  .bounce_bytes = c->bounce_bytes, .n_bounce = 8,
					  .bounce_register = e->on_gpu };
	return strata_mover_open(&strata_mover_staged, &sc, &e->staged, err);
}

static int open_tiers(struct strata_engine *e, struct strata_error *err)
{
	const struct strata_engine_config *c = &e->cfg;
	int back_v = e->virt ? STRATA_BACK_VIRTUAL : e->on_gpu ? STRATA_BACK_DEVICE : STRATA_BACK_HOST;
	int back_r = e->virt ? STRATA_BACK_VIRTUAL : STRATA_BACK_PINNED;
	struct strata_tier_config tv = { .kind = V, .backing = back_v, .budget = c->budget[V], .numa_node = -1,
					 .gpu_device = e->on_gpu ? 0 : -1 };
	struct strata_tier_config tr = { .kind = R, .backing = back_r, .budget = c->budget[R],
					 .numa_node = c->numa_node, .gpu_device = e->on_gpu ? 0 : -1,
					 .register_gpu = e->on_gpu };
	uint32_t slots = c->scratch_slots ? c->scratch_slots : e->spec.top_k;
	struct strata_tier_config ts = tv;
	ts.budget = (uint64_t)slots * e->max_bytes;
	int rc = strata_tier_init(&e->tier[V], &tv, err);
	if (!rc)
		rc = strata_tier_init(&e->tier[R], &tr, err);
	if (!rc)
		rc = strata_tier_init(&e->scratch, &ts, err);
	e->st.scratch_bytes = ts.budget;
	return rc;
}

/* Preload: VRAM candidates in id order while they fit, then RAM candidates
 * (VRAM ones that did not fit first, they are the hotter) while they fit. */
static int preload(struct strata_engine *e, struct strata_error *err)
{
	const struct strata_place_ops *po = strata_place_ops_of(e->place);
	uint8_t *want = malloc(e->n_ids + 1);
	if (!want)
		return STRATA_ERR(err, STRATA_ENOMEM, "engine: out of memory");
	for (uint32_t i = 0; i < e->n_ids; i++) {
		int t = po->initial_tier(e->place, i);
		want[i] = (uint8_t)(t == V || t == R ? t : STRATA_TIER_NVME);
	}
	int rc = policy_failed(e, err);
	struct strata_progress pg;
	strata_progress_start(&pg, "preload", e->tier[V].budget + e->tier[R].budget, "B");
	for (int pass = 0; pass < 3 && !rc; pass++) {
		int t = pass == 0 ? V : R;
		for (uint32_t i = 0; i < e->n_ids && !rc; i++) {
			if (pass == 0 ? want[i] != V : pass == 1 ? !(want[i] == V && !e->resident[V][i]) : want[i] != R)
				continue;
			uint64_t off = 0;
			if (e->bytes[i] > e->tier[t].budget - strata_tier_used(&e->tier[t]) ||
			    strata_tier_reserve_h(&e->tier[t], e->bytes[i], &off, &e->es[i].t[t].hnd))
				continue;
			mark_resident(e, t, i, off);
			strata_evict_ops_of(e->evict[t])->on_insert(e->evict[t], i, 0);
			e->st.preloaded[t]++;
			e->st.preload_bytes += e->bytes[i];
			e->st.preload_tier_bytes[t] += e->bytes[i];
			rc = issue(e, i, t, slot_ptr(e, t, off), STRATA_TIER_NVME, &e->es[i].t[t].inbound, false, false);
			strata_progress_update(&pg, e->st.preload_bytes);
			if (strata_interrupted)
				rc = STRATA_ERR(err, STRATA_EINTR, "engine: preload interrupted");
		}
	}
	free(want);
	if (!rc) {
		struct strata_error e2;
		if (strata_mover_drain(e->nvme, &e2) < 0 || strata_mover_drain(e->staged, &e2) < 0)
			io_fail(e, &e2);
	}
	strata_progress_finish(&pg);
	if (!rc && e->io_failed) {
		*err = e->io_err;
		strata_error_prefix(err, "engine: preload");
		rc = err->code ? err->code : STRATA_EIO;
	}
	for (int t = 0; t < 2; t++) {
		e->st.used[t] = strata_tier_used(&e->tier[t]);
		for (uint32_t i = 0; i < e->n_ids; i++)
			retire(e, &e->es[i].t[t].inbound);
	}
	return rc ? rc : policy_failed(e, err);
}

/* ---- precision on miss ------------------------------------------------------ */

struct on_miss_opts {
	double gate;
	char from[STRATA_OPT_STR_MAX];
};

static const struct strata_option on_miss_options[] = {
	{ "gate", STRATA_OPT_DOUBLE, offsetof(struct on_miss_opts, gate), "0.1", 0, 1,
	  "read the low-bit copy when the expert's largest gate weight in the step is below this", NULL },
	{ "from", STRATA_OPT_STR, offsetof(struct on_miss_opts, from), "nvme", 0, 0,
	  "misses that would stall: nvme (whole expert read from NVMe) or ram (a RAM-tier hit too; "
	  "the copy is still read from NVMe)", "nvme|ram" },
	{ NULL, 0, 0, NULL, 0, 0, NULL, NULL },
};

const struct strata_option *strata_engine_on_miss_options(void) { return on_miss_options; }

/* Parse cfg.on_miss and find each expert's copy: the store's, or for a model
 * without shards the cold format wherever it is smaller (what --lowbit-copies
 * writes). */
static int open_on_miss(struct strata_engine *e, struct strata_error *err)
{
	const char *s = e->cfg.on_miss;
	size_t n = s ? strcspn(s, ":") : 0;
	if (!s || !*s || (n == 4 && !strncmp(s, "full", 4)))
		return s && s[n] ? strata_options_apply(NULL, NULL, s + n + 1, "on_miss full", err) : STRATA_OK;
	if (n != 6 || strncmp(s, "lowbit", 6))
		return STRATA_ERR(err, STRATA_EINVAL, "engine: on_miss '%s': unknown (full, or "
				  "lowbit[:gate=G,from=nvme|ram])", s);
	struct on_miss_opts o;
	int rc = strata_options_apply(on_miss_options, &o, s[n] ? s + n + 1 : NULL, "on_miss lowbit", err);
	if (rc)
		return rc;
	e->sub_on = true;
	e->sub_gate = o.gate;
	e->sub_ram = !strcmp(o.from, "ram");
	strata_options_canonical(on_miss_options, &o, "lowbit", e->sub_name, sizeof(e->sub_name));
	uint32_t N = e->n_ids;
	e->low_bytes = calloc(N + 1, sizeof(*e->low_bytes));
	e->low_ext = calloc(N + 1, sizeof(*e->low_ext));
	e->low_fmt = calloc(N + 1, 1);
	e->subst = calloc(N + 1, 1);
	e->gates = calloc(e->max_step + 1, sizeof(float));
	if (!e->low_bytes || !e->low_ext || !e->low_fmt || !e->subst || !e->gates)
		return STRATA_ERR(err, STRATA_ENOMEM, "engine: out of memory");
	struct strata_expert_layout C;
	if (strata_expert_layout(STRATA_FMT_COLD, e->spec.hidden, e->spec.inter, &C))
		return STRATA_ERR(err, STRATA_EINVAL, "engine: no cold-format layout for this shape");
	uint64_t nc = 0;
	for (uint32_t i = 0; i < N; i++) {
		const struct strata_extent *x =
			e->store ? strata_store_copy(e->store, i / e->spec.n_experts, i % e->spec.n_experts) : NULL;
		if (x) {
			e->low_ext[i] = x;
			e->low_bytes[i] = x->bytes;
			e->low_fmt[i] = (uint8_t)x->fmt;
		} else if (!e->store && C.bytes < e->bytes[i]) {
			e->low_bytes[i] = C.bytes;
			e->low_fmt[i] = STRATA_FMT_COLD;
		}
		nc += e->low_bytes[i] != 0;
	}
	if (!nc)
		return STRATA_ERR(err, STRATA_EINVAL, "engine: on_miss=%s: %s holds no low-bit copies (write it with "
				  "`strata synth|quantize --lowbit-copies`)", e->sub_name,
				  e->store ? strata_store_dir(e->store) : "the model (every expert is in the cold format)");
	return STRATA_OK;
}

int strata_engine_set_gates(struct strata_engine *e, const float *gates, uint32_t n, struct strata_error *err)
{
	e->have_gates = false;
	if (!gates || !e->sub_on)
		return STRATA_OK;
	if (n > e->max_step)
		return STRATA_ERR(err, STRATA_EINVAL, "engine: gate weights for %u experts (at most %u)", n, e->max_step);
	memcpy(e->gates, gates, n * sizeof(float));
	e->n_gates = n;
	e->have_gates = true;
	return STRATA_OK;
}

bool strata_engine_may_substitute(const struct strata_engine *e, uint32_t eid, float gate)
{
	return e->sub_on && eid < e->n_ids && e->low_bytes[eid] && gate < e->sub_gate;
}

int strata_engine_served_fmt(const struct strata_engine *e, uint32_t layer, uint32_t expert)
{
	uint32_t eid = strata_eid(&e->spec, layer, expert);
	if (eid >= e->n_ids)
		return -1;
	return e->subst && e->subst[eid] ? e->low_fmt[eid] : e->fmt[eid];
}

int strata_engine_copy_fmt(const struct strata_engine *e, uint32_t eid)
{
	return e->sub_on && eid < e->n_ids && e->low_bytes[eid] ? e->low_fmt[eid] : -1;
}

bool strata_engine_reads_gates(const struct strata_engine *e) { return e->sub_on; }

static int engine_open(struct strata_store *store, const struct strata_model_spec *spec, const uint8_t *tiers,
		       const uint8_t *fmts, const struct strata_engine_config *cfg, struct strata_engine **out,
		       struct strata_error *err)
{
	char a[32], b[32], c[32];
	*out = NULL;
	struct strata_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return STRATA_ERR(err, STRATA_ENOMEM, "engine: out of memory");
	int rc = STRATA_OK;
	e->t_open = strata_now_ns();
	e->cfg = *cfg;
	e->store = store;
	e->spec = *spec;
	e->virt = cfg->mode == STRATA_ENGINE_VIRTUAL;
	e->no_wall = e->virt && cfg->no_wall_bookkeeping;
	e->n_ids = strata_model_total_experts(spec);
	e->step_layer = -1;
	uint32_t n = e->n_ids;
	e->tier_table = malloc(n + 1);
	e->fmt = malloc(n + 1);
	e->bytes = calloc(n + 1, sizeof(uint64_t));
	e->es = aligned_alloc(64, sizeof(*e->es) * (n + 1));
	if (e->es)
		memset(e->es, 0, sizeof(*e->es) * (n + 1));
	e->max_step = spec->n_experts;
	e->step_eids = malloc(sizeof(uint32_t) * (e->max_step + 1));
	e->max_reqs = n < 4096 ? n + 1 : 4096;
	e->reqs = malloc(sizeof(*e->reqs) * e->max_reqs);
	bool ok = e->tier_table && e->fmt && e->bytes && e->es && e->step_eids && e->reqs;
	for (int t = 0; t < 2 && ok; t++) {
		e->resident[t] = calloc(n + 1, 1);
		e->pinned[t] = calloc(n + 1, 1);
		ok = e->resident[t] && e->pinned[t];
		e->res[t].pinned = e->pinned[t];
		e->res[t].resident = e->resident[t];
	}
	if (store && ok && !(e->ext = calloc(n + 1, sizeof(*e->ext))))
		ok = false;
	if (!ok) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "engine: out of memory (%u experts)", n);
		goto fail;
	}
	for (uint32_t i = 0; i < n; i++) {
		e->es[i].t[0].off = e->es[i].t[1].off = e->es[i].scratch_off = NO_OFF;
		e->tier_table[i] = tiers ? tiers[i] : STRATA_TIER_NVME;
		if (store) {
			e->ext[i] = strata_store_expert(store, i / spec->n_experts, i % spec->n_experts);
			e->bytes[i] = e->ext[i]->bytes;
			e->fmt[i] = (uint8_t)e->ext[i]->fmt;
		} else {
			int fmt = fmts ? fmts[i] : STRATA_FMT_HOT + (e->tier_table[i] < 3 ? e->tier_table[i] : 2);
			struct strata_expert_layout L;
			if (strata_expert_layout(fmt, spec->hidden, spec->inter, &L)) {
				rc = STRATA_ERR(err, STRATA_EINVAL, "engine: expert %u: bad format %d", i, fmt);
				goto fail;
			}
			e->bytes[i] = L.bytes;
			e->fmt[i] = (uint8_t)fmt;
		}
		if (e->bytes[i] > e->max_bytes)
			e->max_bytes = e->bytes[i];
	}
	if ((rc = open_on_miss(e, err)))
		goto fail;
	uint64_t need = (uint64_t)spec->top_k * e->max_bytes;
	if (cfg->budget[V] && cfg->budget[V] < need) {
		rc = STRATA_ERR(err, STRATA_EBUDGET,
				"engine: VRAM budget %s (%llu bytes) cannot hold one layer's top-%u experts: %llu bytes"
				" (%u x %s, the largest extent); use 0 to stream every expert, or at least %s",
				strata_fmt_bytes(cfg->budget[V], a, sizeof(a)), (unsigned long long)cfg->budget[V],
				spec->top_k, (unsigned long long)need, spec->top_k,
				strata_fmt_bytes(e->max_bytes, b, sizeof(b)), strata_fmt_bytes(need, c, sizeof(c)));
		goto fail;
	}
	if (!e->virt) {
		int ng = strata_gpu_count();
		if (cfg->use_gpu == 1 && ng <= 0) {
			rc = STRATA_ERR(err, STRATA_EUNSUPPORTED, "engine: a GPU was required and none is usable");
			goto fail;
		}
		if (cfg->use_gpu != 0 && ng > 0) {
			if ((rc = strata_gpu_init(0, err)))
				goto fail;
			e->on_gpu = true;
		}
	}
	e->env.spec = &e->spec;
	e->env.n_ids = n;
	e->env.tier_table = e->tier_table;
	e->env.expert_bytes = e->bytes;
	e->env.budget[V] = cfg->budget[V];
	e->env.budget[R] = cfg->budget[R];
	e->env.budget[STRATA_TIER_NVME] = UINT64_MAX;
	e->env.seed = cfg->seed;
	e->env.future = cfg->future;
	strata_prefetch_sched_defaults(&e->sched);
	e->sched.resident[V] = e->resident[V];
	e->sched.resident[R] = e->resident[R];
	e->env.sched = &e->sched;
	e->env.cost = &e->cfg.cost;
	if (strata_pfq_init(&e->pfq, 2 * e->max_reqs + 64) ||
	    !(e->pf_done = malloc(sizeof(*e->pf_done) * e->pfq.cap))) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "engine: out of memory");
		goto fail;
	}
	if ((rc = create_policies(e, err)) || (rc = open_tiers(e, err)) || (rc = open_movers(e, err)))
		goto fail;
	e->ms[0] = e->nvme;
	e->ms[1] = e->staged;
	e->ms[2] = e->h2d;
	for (int l = 0; l < STRATA_LINK_COUNT; l++)
		e->low_cap[l] = cfg->prefetch_inflight[l] ? cfg->prefetch_inflight[l] : low_cap_default[l];
	if ((rc = preload(e, err)))
		goto fail;
	*out = e;
	return STRATA_OK;
fail:
	strata_engine_close(e);
	return rc;
}

int strata_engine_open(struct strata_store *store, const struct strata_engine_config *cfg,
		       struct strata_engine **out, struct strata_error *err)
{
	if (!store)
		return STRATA_ERR(err, STRATA_EINVAL, "engine: no store");
	return engine_open(store, strata_store_spec(store), strata_store_tier_table(store),
			   strata_store_fmt_table(store), cfg, out, err);
}

int strata_engine_open_model(const struct strata_engine_model *m, const struct strata_engine_config *cfg,
			     struct strata_engine **out, struct strata_error *err)
{
	*out = NULL;
	if (cfg->mode != STRATA_ENGINE_VIRTUAL)
		return STRATA_ERR(err, STRATA_EINVAL, "engine: a model without shard files runs in virtual mode only");
	int rc = strata_model_spec_validate(m->spec, err);
	return rc ? rc : engine_open(NULL, m->spec, m->tier_table, m->fmt_table, cfg, out, err);
}

void strata_engine_close(struct strata_engine *e)
{
	if (!e)
		return;
	struct strata_mover *ms[3] = { e->staged, e->h2d, e->nvme };
	for (int i = 0; i < 3; i++)
		if (ms[i]) {
			struct strata_error err;
			strata_mover_drain(ms[i], &err);
		}
	for (int i = 0; i < 3; i++)
		strata_mover_close(ms[i]);
	if (e->cstream)
		strata_gpu_stream_destroy(e->cstream);
	if (e->cbounce)
		strata_gpu_free(e->cbounce);
	strata_vlink_free(&e->vl_nvme);
	strata_vlink_free(&e->vl_pcie);
	strata_tier_free(&e->tier[V]);
	strata_tier_free(&e->tier[R]);
	strata_tier_free(&e->scratch);
	strata_policy_destroy(e->place);
	strata_policy_destroy(e->evict[V]);
	strata_policy_destroy(e->evict[R]);
	strata_policy_destroy(e->prefetch);
	for (int t = 0; t < 2; t++) {
		free(e->resident[t]);
		free(e->pinned[t]);
	}
	for (uint32_t i = 0; i < e->n_blocks; i++)
		free(e->job_blocks[i]);
	free(e->job_blocks);
	free(e->tier_table);
	free(e->fmt);
	free(e->low_bytes);
	free(e->low_ext);
	free(e->low_fmt);
	free(e->subst);
	free(e->gates);
	free(e->bytes);
	free(e->ext);
	free(e->es);
	free(e->step_eids);
	free(e->reqs);
	strata_pfq_free(&e->pfq);
	free(e->pf_done);
	free(e->ld_eid);
	free(e->ld_pos);
	free(e);
}

/* ---- the run --------------------------------------------------------------- */

/* The wall clock for bookkeeping_ns; 0 when the driver asked for none (a
 * sim: six reads per layer were ~10 % of its time). */
static inline uint64_t wall_ns(const struct strata_engine *e)
{
	return e->no_wall ? 0 : strata_now_ns();
}

static double clock_now(const struct strata_engine *e)
{
	return e->virt ? e->vclock : (double)(strata_now_ns() - e->t_open);
}

static int check_io(struct strata_engine *e, struct strata_error *err)
{
	if (!e->io_failed)
		return STRATA_OK;
	if (err)
		*err = e->io_err;
	return e->io_err.code ? e->io_err.code : STRATA_EIO;
}

/* Collect finished moves without blocking, so completions chain on. */
static void poll_movers(struct strata_engine *e)
{
	struct strata_mover *ms[3] = { e->nvme, e->staged, e->h2d };
	for (int i = 0; i < 3; i++) {
		struct strata_error err;
		if (!ms[i]->outstanding || (e->virt && !strata_mover_virtual_queued(ms[i]) && !strata_mover_virtual_due(ms[i])))
			continue; /* nothing to submit or reap */
		if (submit_mover(e, ms[i], &err))
			io_fail(e, &err);
		else if (e->virt)
			strata_mover_virtual_reap(ms[i], 0);
		else if (strata_mover_reap(ms[i], 0, &err) < 0)
			io_fail(e, &err);
	}
}

int strata_engine_poll(struct strata_engine *e, struct strata_error *err)
{
	if (e->virt)
		return STRATA_OK;
	poll_movers(e);
	feed_low(e);
	kick_movers(e);
	return check_io(e, err);
}

static int check_ids(struct strata_engine *e, uint32_t layer, const uint32_t *x, uint32_t n, struct strata_error *err)
{
	if (layer >= e->spec.n_moe_layers)
		return STRATA_ERR(err, STRATA_EINVAL, "engine: layer %u >= %u MoE layers", layer, e->spec.n_moe_layers);
	for (uint32_t i = 0; i < n; i++)
		if (x[i] >= e->spec.n_experts)
			return STRATA_ERR(err, STRATA_EINVAL, "engine: expert %u >= %u experts per layer", x[i],
					  e->spec.n_experts);
	return STRATA_OK;
}

/* The scheduler's view of the engine (strata/sched.h). */
static int pf_source(void *o, uint32_t eid, int t)
{
	struct strata_engine *e = o;
	if (e->resident[V][eid] || e->resident[t][eid])
		return -1;
	return t == V && e->resident[R][eid] ? R : STRATA_TIER_NVME;
}

static int pf_start(void *o, uint32_t eid, int t, int src, struct strata_error *err)
{
	struct strata_engine *e = o;
	uint64_t off = 0;
	int rc;
	if (t == R && e->sched.ram_holes_only) { /* a free hole or none (EBUDGET: dropped), no eviction */
		rc = strata_tier_reserve_h(&e->tier[R], e->bytes[eid], &off, &e->es[eid].t[R].hnd);
		if (rc == STRATA_ENOMEM)
			return holes_oom(err, R);
		e->st.used[R] = strata_tier_used(&e->tier[R]);
	} else {
		rc = make_room(e, t, eid, &off, err);
	}
	if (rc)
		return rc;
	mark_resident(e, t, eid, off);
	strata_evict_ops_of(e->evict[t])->on_insert(e->evict[t], eid, e->now);
	e->es[eid].t[t].prefetched = 1;
	e->es[eid].t[t].transient = !(strata_place_ops_of(e->place)->admit(e->place, eid, src, e->now) & (1u << t));
	e->st.prefetch_issued++;
	if ((rc = issue(e, eid, t, slot_ptr(e, t, off), src, &e->es[eid].t[t].inbound, true, false)))
		return check_io(e, err) ? check_io(e, err) : STRATA_ERR(err, rc, "engine: out of memory");
	return STRATA_OK;
}

static struct strata_pfq_owner pf_owner(struct strata_engine *e)
{
	return (struct strata_pfq_owner){ .o = e, .source = pf_source, .start = pf_start,
					  .redundant = &e->st.prefetch_redundant, .dropped = &e->st.prefetch_dropped,
					  .promoted = &e->st.prefetch_promoted, .cancelled = &e->st.prefetch_cancelled,
					  .preempted = &e->st.prefetch_preempted };
}

static int prefetch(struct strata_engine *e, uint64_t token, uint32_t layer, const uint32_t *experts, uint32_t n,
		    const struct strata_hint *hints, uint32_t n_hints, struct strata_error *err)
{
	struct strata_policy *pf = e->prefetch;
	struct strata_layer_ctx ctx = { .token = token, .layer = layer, .now = e->now, .hints = hints,
					.n_hints = hints ? n_hints : 0, .experts = experts, .n_experts = n };
	e->sched.ram_hole = e->tier[R].budget ? strata_arena_largest_free(&e->tier[R].arena) : 0;
	uint32_t nr = strata_prefetch_ops_of(pf)->on_layer(pf, &ctx, e->reqs, e->max_reqs);
	int rc = policy_failed(e, err);
	if (rc)
		return rc;
	if (nr > e->max_reqs)
		return STRATA_ERR(err, STRATA_EPOLICY, "prefetch %s: returned %u requests, room for %u", pf->name, nr,
				  e->max_reqs);
	struct strata_pfq_owner w = pf_owner(e);
	strata_pfq_begin(&e->pfq, &w, &e->sched, layer, e->lstep, e->reqs, nr, e->spec.n_experts);
	for (uint32_t i = 0; i < nr; i++) {
		uint32_t eid = e->reqs[i].eid, t = e->reqs[i].tier;
		if (eid >= e->n_ids || (t != V && t != R))
			return STRATA_ERR(err, STRATA_EPOLICY, "prefetch %s: asked for expert %u of %u into tier %u",
					  pf->name, eid, e->n_ids, t);
		/* one at a time, so each sees the room the ones before it took */
		strata_pfq_add(&e->pfq, &w, eid, (int)t, eid / e->spec.n_experts, e->lstep);
		if ((rc = strata_pfq_dispatch(&e->pfq, &e->sched, e->bytes, &w, err)))
			return rc;
	}
	return STRATA_OK;
}

/* After layer-step lstep of `layer` ran: its started prefetches leave flight;
 * the unused are wasted and, unless keep_unused, dropped from their tier;
 * then the pending ones that now fit start. */
static int prefetch_settle(struct strata_engine *e, uint32_t layer, struct strata_error *err)
{
	uint32_t got;
	while ((got = strata_pfq_take_started(&e->pfq, layer, e->lstep, e->pf_done, e->pfq.cap))) {
		for (uint32_t i = 0; i < got; i++) {
			uint32_t eid = e->pf_done[i].eid;
			int t = e->pf_done[i].tier;
			struct tslot *ts = &e->es[eid].t[t];
			if (!e->resident[t][eid])
				continue; /* evicted (and counted) before */
			bool unused = ts->prefetched, transient = ts->transient;
			ts->prefetched = ts->transient = 0;
			e->st.prefetch_wasted += unused;
			/* unused, or used where placement would not have kept it: gone, as
			 * if it had not come (the room is free again) */
			if (((unused && !e->sched.keep_unused) || transient) && !e->pinned[t][eid]) {
				strata_evict_ops_of(e->evict[t])->on_remove(e->evict[t], eid);
				drop(e, t, eid);
			}
		}
	}
	if (!e->pfq.n_pend)
		return STRATA_OK;
	struct strata_pfq_owner w = pf_owner(e);
	return strata_pfq_dispatch(&e->pfq, &e->sched, e->bytes, &w, err);
}

static void unpin_step(struct strata_engine *e)
{
	for (uint32_t i = 0; i < e->n_step; i++)
		e->pinned[V][e->step_eids[i]]--;
	e->n_step = 0;
	e->step_layer = -1;
}

int strata_engine_begin_step(struct strata_engine *e, uint64_t token, uint32_t layer, uint32_t n_tokens,
			     const uint32_t *experts, uint32_t n, const struct strata_hint *hints, uint32_t n_hints,
			     struct strata_error *err)
{
	uint64_t t0 = wall_ns(e);
	double s0 = e->st.stall_ns;
	int rc = check_ids(e, layer, experts, n, err);
	if (rc)
		return rc;
	if (e->n_step)
		unpin_step(e); /* a step that never acquired */
	if (n > e->max_step)
		return STRATA_ERR(err, STRATA_EINVAL, "engine: %u experts in one step (at most %u)", n, e->max_step);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t eid = strata_eid(&e->spec, layer, experts[i]);
		e->step_eids[e->n_step++] = eid;
		e->pinned[V][eid]++;
	}
	e->step_layer = n ? (int)layer : -1;
	if (n) {
		struct strata_step st = { .token = token, .layer = layer, .n_tokens = n_tokens, .experts = experts,
					  .n_experts = n, .now = e->now };
		for (int t = V; t <= R; t++)
			strata_evict_ops_of(e->evict[t])->on_step(e->evict[t], &st);
		strata_place_ops_of(e->place)->on_step(e->place, &st);
	}
	poll_movers(e);
	/* Links without demand take the waiting prefetches now; real, only without a step to
	 * acquire: its demand moves go first, the prefetches follow as they finish (acquire). */
	bool feed = e->virt || !n;
	if (feed)
		feed_low(e);
	rc = prefetch(e, token, layer, n ? experts : NULL, n, hints, n_hints, err);
	if (!rc && feed)
		feed_low(e);
	if (!rc) {
		struct strata_mover *ms[3] = { e->nvme, e->staged, e->h2d };
		for (int i = 0; i < 3 && !rc; i++)
			if (submit_mover(e, ms[i], err))
				rc = STRATA_EIO;
	}
	if (!rc)
		rc = check_io(e, err);
	if (rc)
		unpin_step(e);
	e->st.clock_ns = clock_now(e);
	e->st.bookkeeping_ns += wall_ns(e) - t0 - (e->virt ? 0 : (uint64_t)(e->st.stall_ns - s0));
	return rc;
}

int strata_engine_begin_layer(struct strata_engine *e, uint64_t token, uint32_t layer,
			      const struct strata_hint *hints, uint32_t n_hints, struct strata_error *err)
{
	return strata_engine_begin_step(e, token, layer, 0, NULL, 0, hints, n_hints, err);
}

/* One expert of an acquire: decide, reserve, issue.  *wait gets the job the
 * expert's VRAM copy depends on (NULL if already complete). */
/* A streamed expert's (or copy's) room in the scratch tier. */
static int reserve_scratch(struct strata_engine *e, uint32_t eid, uint64_t bytes, uint64_t *off,
			   struct strata_error *err)
{
	if (!strata_tier_reserve(&e->scratch, bytes, off))
		return STRATA_OK;
	char a[32];
	return STRATA_ERR(err, STRATA_EBUDGET,
			  "engine: no free scratch slot for streamed expert %u/%u: %u slots of %s"
			  " (raise scratch_slots to the experts of one step)",
			  eid / e->spec.n_experts, eid % e->spec.n_experts,
			  e->cfg.scratch_slots ? e->cfg.scratch_slots : e->spec.top_k,
			  strata_fmt_bytes(e->max_bytes, a, sizeof(a)));
}

/* Precision on miss: serve eid's access by reading its low-bit copy into a
 * scratch slot (engine.h); nothing is admitted or evicted. */
static int substitute(struct strata_engine *e, uint32_t eid, int from, uint64_t now, uint64_t *off,
		      struct strata_error *err)
{
	strata_place_ops_of(e->place)->on_access(e->place, eid, from, now);
	int rc = policy_failed(e, err);
	if (rc || (rc = reserve_scratch(e, eid, e->low_bytes[eid], off, err)))
		return rc;
	e->es[eid].scratch_off = *off;
	e->subst[eid] = 1;
	e->st.substituted++;
	e->st.substitute_bytes += e->low_bytes[eid];
	e->st.substitute_bytes_saved += e->bytes[eid] - e->low_bytes[eid];
	return issue(e, eid, V, strata_tier_ptr(&e->scratch, *off), STRATA_TIER_NVME, &e->es[eid].scratch_job, false,
		     true);
}

static int acquire_one(struct strata_engine *e, uint32_t eid, float gate, uint64_t now, uint64_t *vram_off,
		       int *scratch, struct strata_error *err)
{
	struct strata_policy *pl = e->place;
	const struct strata_place_ops *po = strata_place_ops_of(pl);
	int rc;
	*scratch = 0;
	e->st.accesses++;
	if (e->resident[V][eid]) {
		e->st.hits[V]++;
		promote(e, e->es[eid].t[V].inbound);
		if (e->es[eid].t[V].prefetched) {
			e->es[eid].t[V].prefetched = 0;
			e->st.prefetch_used++;
			if (e->es[eid].t[V].inbound && !e->es[eid].t[V].inbound->done)
				e->st.prefetch_late++;
		}
		strata_evict_ops_of(e->evict[V])->on_access(e->evict[V], eid, now);
		po->on_access(pl, eid, V, now);
		*vram_off = e->es[eid].t[V].off;
		return STRATA_OK;
	}
	int from = e->resident[R][eid] ? R : STRATA_TIER_NVME;
	e->st.hits[from]++;
	if (e->sub_on && gate < e->sub_gate && e->low_bytes[eid] && (from == STRATA_TIER_NVME || e->sub_ram)) {
		*scratch = 1;
		return substitute(e, eid, from, now, vram_off, err);
	}
	if (from == R) {
		if (e->es[eid].t[R].prefetched) {
			e->es[eid].t[R].prefetched = 0;
			e->st.prefetch_used++;
			if (e->es[eid].t[R].inbound && !e->es[eid].t[R].inbound->done)
				e->st.prefetch_late++;
		}
		strata_evict_ops_of(e->evict[R])->on_access(e->evict[R], eid, now);
	}
	uint32_t mask = po->admit(pl, eid, from, now);
	po->on_access(pl, eid, from, now);
	if ((rc = policy_failed(e, err)))
		return rc;
	int src = from;
	if (from == STRATA_TIER_NVME && (mask & (1u << R)) && e->tier[R].budget) {
		uint64_t off = 0;
		rc = make_room(e, R, eid, &off, err);
		if (rc == STRATA_OK) {
			mark_resident(e, R, eid, off);
			strata_evict_ops_of(e->evict[R])->on_insert(e->evict[R], eid, now);
			strata_evict_ops_of(e->evict[R])->on_access(e->evict[R], eid, now);
			if ((rc = issue(e, eid, R, slot_ptr(e, R, off), STRATA_TIER_NVME, &e->es[eid].t[R].inbound, false,
					false)))
				return rc;
			src = R;
		} else if (rc != STRATA_EBUDGET) {
			return rc;
		}
	}
	struct job **slot;
	void *dst;
	bool keep = false;
	uint64_t off = 0;
	if (mask & (1u << V)) {
		rc = make_room(e, V, eid, &off, err);
		if (rc == STRATA_OK)
			keep = true;
		else if (rc == STRATA_EBUDGET)
			e->st.admit_fallback++; /* pins fragment the tier (or budget 0): stream it */
		else
			return rc;
	}
	if (keep) {
		mark_resident(e, V, eid, off);
		strata_evict_ops_of(e->evict[V])->on_insert(e->evict[V], eid, now);
		strata_evict_ops_of(e->evict[V])->on_access(e->evict[V], eid, now);
		*vram_off = off;
		slot = &e->es[eid].t[V].inbound;
		dst = slot_ptr(e, V, off);
	} else {
		if ((rc = reserve_scratch(e, eid, e->bytes[eid], &off, err)))
			return rc;
		e->es[eid].scratch_off = off;
		e->st.streamed++;
		*scratch = 1;
		*vram_off = off;
		slot = &e->es[eid].scratch_job;
		dst = strata_tier_ptr(&e->scratch, off);
	}
	rc = issue(e, eid, V, dst, src, slot, false, false);
	return rc ? rc : STRATA_OK;
}

int strata_engine_acquire(struct strata_engine *e, uint32_t layer, const uint32_t *experts, uint32_t n,
			  const void **ptrs, struct strata_error *err)
{
	uint64_t t0 = wall_ns(e);
	int rc = check_ids(e, layer, experts, n, err);
	if (rc)
		return rc;
	bool stepped = e->step_layer == (int)layer && e->n_step == n;
	if (!stepped) {
		if (e->n_step)
			unpin_step(e);
		if (n > e->max_step)
			return STRATA_ERR(err, STRATA_EINVAL, "engine: %u experts in one step (at most %u)", n,
					  e->max_step);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t eid = strata_eid(&e->spec, layer, experts[i]);
			e->step_eids[e->n_step++] = eid;
			e->pinned[V][eid]++;
		}
	}
	e->step_layer = -2; /* acquired: release unpins */
	struct strata_pfq_owner w = pf_owner(e);
	strata_pfq_resolve_pending(&e->pfq, &w, layer, e->lstep, e->step_eids, e->n_step);
	if (e->virt)
		feed_low(e); /* prefetches the links carried while idle go before this demand */
	for (uint32_t i = 0; i < n && !rc; i++) {
		uint32_t eid = strata_eid(&e->spec, layer, experts[i]);
		uint64_t off = 0;
		int scratch;
		rc = acquire_one(e, eid, e->have_gates && i < e->n_gates ? e->gates[i] : INFINITY, e->now++, &off,
				 &scratch, err);
		if (!rc && ptrs)
			ptrs[i] = scratch ? strata_tier_ptr(&e->scratch, off) : slot_ptr(e, V, off);
	}
	e->have_gates = false; /* they were this acquire's */
	if (rc) {
		if (rc == STRATA_ENOMEM && !err->msg[0])
			STRATA_ERR(err, rc, "engine: out of memory");
		int io = check_io(e, NULL);
		if (io && rc != STRATA_EPOLICY && rc != STRATA_EBUDGET)
			rc = check_io(e, err);
		e->st.clock_ns = clock_now(e);
		return rc;
	}
	/* submit everything, then wait for this layer's experts */
	struct strata_mover *ms[3] = { e->nvme, e->staged, e->h2d };
	for (int i = 0; i < 3; i++)
		if (submit_mover(e, ms[i], err))
			return STRATA_EIO;
	uint64_t w0 = e->virt ? 0 : strata_now_ns(); /* the wait is virtual time in a sim */
	double c0 = clock_now(e);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t eid = strata_eid(&e->spec, layer, experts[i]);
		struct job *j = e->es[eid].scratch_off != NO_OFF ? e->es[eid].scratch_job : e->es[eid].t[V].inbound;
		if (j)
			job_wait(e, j);
		retire(e, &e->es[eid].t[V].inbound);
	}
	double stall = clock_now(e) - c0;
	e->st.stall_ns += stall;
	if (!e->virt) {
		feed_low(e); /* this layer's demand is in: the prefetches go while it computes */
		kick_movers(e);
	}
	uint64_t t1 = wall_ns(e);
	e->st.clock_ns = clock_now(e);
	e->st.bookkeeping_ns += t1 - t0 - (e->virt ? 0 : t1 - w0);
	if ((rc = check_io(e, err)))
		return rc;
	return policy_failed(e, err);
}

int strata_engine_release(struct strata_engine *e, uint64_t token, uint32_t layer, const uint32_t *experts,
			  uint32_t n, struct strata_error *err)
{
	uint64_t t0 = wall_ns(e);
	int rc = check_ids(e, layer, experts, n, err);
	if (rc)
		return rc;
	unpin_step(e);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t eid = strata_eid(&e->spec, layer, experts[i]);
		if (e->es[eid].scratch_off != NO_OFF) {
			struct job *j = e->es[eid].scratch_job;
			if (j) {
				job_wait(e, j);
				retire(e, &e->es[eid].scratch_job);
			}
			bool copy = e->subst && e->subst[eid];
			strata_tier_release(&e->scratch, e->es[eid].scratch_off, copy ? e->low_bytes[eid] : e->bytes[eid]);
			e->es[eid].scratch_off = NO_OFF;
			if (copy)
				e->subst[eid] = 0;
		}
	}
	if ((rc = prefetch_settle(e, layer, err)))
		return rc;
	e->lstep++;
	strata_prefetch_ops_of(e->prefetch)->on_route(e->prefetch, token, layer, experts, n);
	poll_movers(e);
	feed_low(e);
	if (!e->virt)
		kick_movers(e); /* the prefetches that may go now move while the caller computes */
	e->st.clock_ns = clock_now(e);
	e->st.bookkeeping_ns += wall_ns(e) - t0;
	if ((rc = check_io(e, err)))
		return rc;
	return policy_failed(e, err);
}

void strata_engine_add_compute(struct strata_engine *e, double ns)
{
	if (ns <= 0)
		return;
	e->st.compute_ns += ns;
	if (e->virt)
		e->vclock += ns;
	e->st.clock_ns = clock_now(e);
}

const struct strata_engine_stats *strata_engine_stats(const struct strata_engine *e)
{
	struct strata_engine *m = (struct strata_engine *)e;
	m->st.clock_ns = clock_now(e);
	m->st.io_ns = e->virt ? e->vl_nvme.busy_ns : e->nvme ? e->nvme->busy_ns : 0;
	if (e->virt) {
		m->st.link_busy_ns[STRATA_LINK_NVME] = e->vl_nvme.busy_ns;
		m->st.link_busy_ns[STRATA_LINK_PCIE] = e->vl_pcie.busy_ns;
		m->st.nvme_reads = e->st.moves_nvme;
		m->st.nvme_read_bytes = e->st.bytes_nvme_ram + e->st.bytes_nvme_vram;
	} else if (e->nvme && e->h2d) {
		m->st.link_busy_ns[STRATA_LINK_NVME] = e->nvme->active_ns;
		m->st.link_busy_ns[STRATA_LINK_PCIE] = e->h2d->active_ns;
		m->st.nvme_reads = e->nvme->moves;
		m->st.nvme_read_bytes = e->nvme->bytes;
		m->st.nvme_qd_ns = e->nvme->qd_ns;
		m->st.nvme_qd_max = e->nvme->max_outstanding;
	}
	m->st.used[V] = strata_tier_used(&e->tier[V]);
	m->st.used[R] = strata_tier_used(&e->tier[R]);
	return &e->st;
}

const char *strata_engine_name(const struct strata_engine *e) { return e->name; }
bool strata_engine_on_gpu(const struct strata_engine *e) { return e->on_gpu; }

bool strata_engine_reads_hints(const struct strata_engine *e)
{
	return !(strata_prefetch_ops_of(e->prefetch)->flags & STRATA_POLICY_F_NO_HINTS);
}

const char *strata_engine_tier_desc(const struct strata_engine *e, int tier)
{
	return tier == V || tier == R ? e->tier[tier].desc : "nvme: shard files";
}

void strata_engine_vram_loads(const struct strata_engine *e, const uint32_t **eid, const uint64_t **pos, uint64_t *n)
{
	*eid = e->ld_eid;
	*pos = e->ld_pos;
	*n = e->n_ld;
}

const uint8_t *strata_engine_resident(const struct strata_engine *e, int tier)
{
	return e->resident[tier == STRATA_TIER_RAM ? R : V];
}

const uint64_t *strata_engine_expert_bytes(const struct strata_engine *e)
{
	return e->bytes;
}
