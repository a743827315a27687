/*
 * The expert cache engine.  Given "moe layer L needs experts {...}", it makes
 * every expert resident in the tier where it will run (VRAM on a GPU build
 * with a device; the host stand-in otherwise), moving bytes NVMe -> RAM -> VRAM
 * with the asynchronous movers, and returns pointers.  Placement, eviction
 * and prefetch policies decide what stays where; the engine enforces budgets
 * and pins, and counts everything.
 *
 * One engine serves one run and one thread (the replay driver); the movers
 * run their own I/O and copy queues underneath.
 *
 * Two clocks: in real mode bytes move and time is wall time; in virtual mode
 * (strata sim) movers only advance a virtual clock by calibrated costs, so the
 * same policies run fast without moving bytes.
 */
#ifndef STRATA_ENGINE_H
#define STRATA_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/error.h"
#include "strata/policy.h"
#include "strata/store.h"

enum strata_engine_mode {
	STRATA_ENGINE_REAL = 0,    /* move bytes, wall clock */
	STRATA_ENGINE_VIRTUAL = 1, /* cost model, virtual clock (strata sim) */
};

enum strata_nvme_mover {
	STRATA_NVME_URING = 0,     /* io_uring + O_DIRECT (default) */
	STRATA_NVME_MMAP = 1,      /* mmap + memcpy baseline */
	STRATA_NVME_PREAD = 2,     /* pread, O_DIRECT: synchronous fallback */
};

/* Link costs for virtual mode, and what calibrate measures. */
struct strata_cost_model {
	double nvme_gbps, nvme_lat_us;   /* NVMe -> RAM */
	double pcie_gbps, pcie_lat_us;   /* RAM -> VRAM */
	double hbm_gbps;                 /* VRAM read by kernels; a VRAM -> VRAM copy (read+write) */
	double host_gbps;                /* a RAM -> RAM copy (memmove, read+write): RAM-tier compaction */
	double kernel_us_per_mb;         /* expert compute per packed MB */
	double kernel_fixed_us;          /* per layer launch */
	uint32_t nvme_queue_depth;       /* concurrent NVMe reads */
};

struct strata_engine_config {
	int mode;                  /* enum strata_engine_mode */
	uint64_t budget[2];        /* bytes for VRAM and RAM tiers */
	const char *place;         /* policy specs, e.g. "static", "lru", "lookahead:depth=2" */
	const char *evict;         /* applied to both cached tiers */
	const char *prefetch;
	uint64_t seed;
	int use_gpu;               /* -1 auto, 0 host stand-in, 1 require a GPU */
	int nvme_mover;            /* enum strata_nvme_mover */
	uint32_t queue_depth;      /* io_uring depth / copy streams in flight */
	int numa_node;             /* -1: the GPU's node (hwloc), else forced */
	int verify;                /* enum strata_verify (strata/store.h): which NVMe reads are
				    * checked against the extent checksums (default: each expert's
				    * first read, preload included); a mismatch is STRATA_ECORRUPT
				    * naming the shard.  The movers check (strata/mover.h), so a
				    * staged read into VRAM is hashed in its bounce buffers. */
	const struct strata_future *future; /* for farthest / oracle; may be NULL */
	struct strata_cost_model cost; /* virtual mode */
	uint32_t scratch_slots;    /* streaming slots in the run tier (0: top_k) */
	uint32_t copy_streams;     /* RAM -> VRAM copy streams (0: 2) */
	uint32_t copy;             /* RAM -> VRAM issue mode, STRATA_COPY_* (0: batch) */
	uint64_t bounce_bytes;     /* staged NVMe -> VRAM bounce buffer size (0: 4 MiB) */
	/* Real mode: bytes of prefetch moves handed to the movers at once per
	 * link (index STRATA_LINK_NVME: reads, into RAM or staged into VRAM;
	 * STRATA_LINK_PCIE: RAM -> VRAM copies), at least one move, and only
	 * while no demand move is outstanding on the link (a demand arriving
	 * later shares the device with at most these).  0: the defaults, 32 MiB
	 * of reads (about five experts of a few MB: the disk's queue stays
	 * deep) and 16 MiB of copies.  Timing only: no decision depends on it. */
	uint64_t prefetch_inflight[STRATA_LINK_COUNT];
	/* Virtual mode only: do not time each begin_step/acquire/release on the
	 * wall clock (bookkeeping_ns stays 0).  strata sim sets it and reports
	 * its loop's wall time as bookkeeping instead: in a sim the engine is
	 * nearly all of that loop, and the six clock reads per layer were ~10 %
	 * of it. */
	bool no_wall_bookkeeping;
	/* Record every move into VRAM (expert, layer-step) for the RAM tier's
	 * bound (strata/bound.h (d)); strata_engine_vram_loads reads them. */
	bool record_loads;
	/* Instead of a spec: an ops struct of the caller's (default options), as
	 * in the policy harness; lets a test drive a deliberately broken policy. */
	const void *place_ops, *evict_ops, *prefetch_ops;
	/* Precision on miss (below, "Precision on miss"): NULL or "full" fetch
	 * every miss whole; "lowbit[:gate=G,from=nvme|ram]" reads an expert's
	 * low-bit copy instead on a miss with a low gate weight. */
	const char *on_miss;
	/* A per-move timeline, CSV (NULL: none; costs nothing then): one row per
	 * move the engine issued, as it completes (link, kind, expert, bytes,
	 * when it was asked for, handed to its mover, submitted, done and
	 * collected), and rows for the engine's own spans (a stall on a move,
	 * the layer's computation, a compaction's copies); times in ns from the
	 * engine's open, on the virtual clock in a sim.  Written alike in both
	 * modes, so a sim and a replay of the same run list the same moves
	 * (strata replay --move-log; experiments/gpu-replay/movelog.py). */
	const char *move_log;
};
/* The cost model a run times with when none is given (the defaults of
 * strata_engine_config_defaults). */
void strata_cost_model_defaults(struct strata_cost_model *c);
void strata_engine_config_defaults(struct strata_engine_config *c);

struct strata_engine_stats {
	uint64_t accesses;                 /* expert requests */
	uint64_t hits[3];                  /* served from VRAM, RAM, NVMe */
	uint64_t bytes_nvme_ram, bytes_ram_vram, bytes_nvme_vram;
	uint64_t evictions[2];
	uint64_t prefetch_issued, prefetch_used, prefetch_wasted, prefetch_redundant, prefetch_late;
	double stall_ns;                   /* waiting for movers inside acquire */
	double io_ns;                      /* NVMe busy time */
	double compute_ns;                 /* reported by the driver */
	double clock_ns;                   /* wall or virtual time of the run */
	uint64_t bookkeeping_ns;           /* engine's own time outside movers */
	uint64_t prefetch_dropped;         /* no room in the target tier */
	uint64_t streamed;                 /* accesses served through a scratch slot */
	uint64_t admit_fallback;           /* of those: admit asked for VRAM, but with every unpinned
					    * expert evicted no hole was large enough (the pinned experts
					    * fragment the tier, or its budget is 0) */
	uint64_t preloaded[2];             /* experts placed at open, per tier */
	uint64_t preload_bytes;
	uint64_t preload_tier_bytes[2];    /* of those bytes, per tier (all read from NVMe) */
	uint64_t scratch_bytes;            /* run-tier memory outside the budget, for streaming */
	uint64_t used[2];                  /* bytes resident now, per tier (<= budget) */
	uint64_t verified_extents;         /* NVMe reads checked against their checksums */
	uint64_t verified_bytes;
	/* moves, preload included: into VRAM (from RAM or NVMe, kept or streamed),
	 * and reads from NVMe (into RAM or staged into VRAM): what strata/bound.h
	 * bounds from below */
	uint64_t moves_vram, moves_nvme;
	/* prefetch scheduling (policy.h): pending requests that became demand
	 * fetches, pending ones whose layer ran without them, and pending ones
	 * a newer prediction withdrew (early preemption) */
	uint64_t prefetch_promoted, prefetch_cancelled, prefetch_preempted;
	/* Link use, preload included (a driver subtracts what it saw at open):
	 * per link (STRATA_LINK_NVME, STRATA_LINK_PCIE) the time it was busy
	 * (real: wall time with a move outstanding on its mover, staged moves
	 * counted on both; virtual: the transfer time charged); NVMe reads as
	 * the device saw them (a staged move is one read per bounce buffer),
	 * their bytes, the integral of the reads outstanding over time (mean
	 * queue depth = nvme_qd_ns / link_busy_ns[NVME]) and the most at once
	 * (real only); waits: acquires and evictions that blocked on a move
	 * still in flight. */
	double link_busy_ns[2];
	uint64_t nvme_reads, nvme_read_bytes;
	double nvme_qd_ns;
	uint64_t nvme_qd_max;
	uint64_t waits;
	/* precision on miss: accesses served by an expert's low-bit copy, the
	 * copy bytes moved for them (in bytes_nvme_vram and moves_vram/nvme
	 * too), and the bytes the whole experts would have moved beyond that */
	uint64_t substituted, substitute_bytes, substitute_bytes_saved;
	/* room for mixed sizes, per tier: when a miss or prefetch found enough
	 * free bytes but no hole to hold them, the engine slid extents together
	 * instead of evicting more (strata/arena.h): compactions and the bytes
	 * they moved (VRAM -> VRAM copies at HBM speed, RAM -> RAM memmoves) */
	uint64_t compactions[2], compact_bytes[2];
	double compact_ns;                 /* the engine's time in them (virtual: charged) */
	/* real mode, timing only: RAM extents a compaction moved while their
	 * read was in flight; the bytes landed where they were read and moved
	 * on completion, instead of the engine waiting for the disk */
	uint64_t compact_relocated;
	/* real mode: the most bytes of prefetch moves in the movers at once,
	 * per link (cfg.prefetch_inflight bounds it, one move aside) */
	uint64_t prefetch_inflight_max[2];
};

struct strata_engine;

/*
 * Open over a shard store: the tier table, formats and extents come from it.
 * Checks: VRAM budget 0 (stream everything) or at least top_k experts of the
 * largest size (else STRATA_EBUDGET with the numbers); policies load from the
 * specs (errors name the policy); real mode allocates the tiers (VRAM arena
 * on the GPU or the host stand-in, the RAM tier pinned on the GPU's NUMA
 * node), opens the movers and preloads: every expert whose placement
 * initial_tier is VRAM, in id order while the VRAM budget allows, then those
 * for RAM (and VRAM ones that did not fit) while the RAM budget allows.  In
 * virtual mode preload costs virtual time, so clock_ns after open is the cold
 * start.  The store must outlive the engine.
 */
int strata_engine_open(struct strata_store *store, const struct strata_engine_config *cfg,
		       struct strata_engine **out, struct strata_error *err);

/* A model without shard files, for virtual mode only (strata sim of a model
 * too large to pack): sizes come from strata_expert_layout of each format. */
struct strata_engine_model {
	const struct strata_model_spec *spec;
	const uint8_t *tier_table;   /* per eid; NULL: every expert cold */
	const uint8_t *fmt_table;    /* per eid enum strata_fmt; NULL: the format of its tier */
};
int strata_engine_open_model(const struct strata_engine_model *m, const struct strata_engine_config *cfg,
			     struct strata_engine **out, struct strata_error *err);
void strata_engine_close(struct strata_engine *e);

/*
 * Prefetch scheduling (the contract prefetch policies build on; the rules are
 * in strata/policy.h, "How the engine schedules", and core/sched.c holds
 * the decisions the engine and the policy harness share):
 *   - begin_step/begin_layer: the policy's requests join the pending FIFO,
 *     each targeted at the next run of its expert's layer; pending requests
 *     start while their source is allowed (env->sched->from) and each link
 *     they cross has room in its budget (env->sched->budget: bytes of started
 *     prefetches whose target has not run).  Starting = room made in the
 *     tier (evictions), the expert marked resident (later accesses count as
 *     hits there), the move queued at low priority.
 *   - acquire(layer): pending requests targeted at this layer-step are
 *     promoted (routed: the demand fetch moves it, once) or cancelled; a
 *     started one still waiting for its link is handed over at demand
 *     priority when it is needed.
 *   - release(layer): the started prefetches targeted at it settle: unused
 *     ones are wasted and, unless env->sched->keep_unused, leave the tier; a
 *     used one that placement would not have kept (admit() asked when it
 *     started lacked its tier, as static placement without promotion)
 *     leaves too; the budget is freed and pending requests that now fit
 *     start.
 *   - links: a prefetch move is handed to its mover only while no demand
 *     move is outstanding on its link (real: the disk for reads, staged
 *     ones included, PCIe for copies; and never between begin_step and
 *     its acquire, whose demand goes first; at most a few MiB of them per
 *     mover, submitted at once), or where its links' backlog fell below
 *     the move's own time before the clock (virtual): demand moves never
 *     queue behind prefetches still waiting.  In the movers, demand moves
 *     go ahead of prefetches already handed over (strata_move.low).
 * Everything but the link timing depends on the access clock only, so sim
 * and replay decide and count the same.
 */

/* Before moe layer `layer` of token `token`: run the prefetch policy with the
 * lookahead hints and queue or start the moves it asks for (above). */
int strata_engine_begin_layer(struct strata_engine *e, uint64_t token, uint32_t layer,
			      const struct strata_hint *hints, uint32_t n_hints,
			      struct strata_error *err);
/* The same when the router already ran: the layer's experts are pinned
 * before prefetching (so prefetch cannot evict them), the eviction (both
 * tiers) and placement policies get on_step with the batch's n_tokens (0
 * where the caller does not know it: a policy then estimates it, as
 * llama.cpp's batch bypass does from n / top_k), and the experts are handed
 * to the prefetch policy (ctx->experts), exactly as the policy harness does;
 * the following acquire must ask for the same experts.  Prefer this one. */
int strata_engine_begin_step(struct strata_engine *e, uint64_t token, uint32_t layer, uint32_t n_tokens,
			     const uint32_t *experts, uint32_t n, const struct strata_hint *hints,
			     uint32_t n_hints, struct strata_error *err);
/* Make experts (layer-local ids) resident where they run, pin them, and fill
 * ptrs[i] with their extents (device pointers on a GPU, host otherwise; NULL
 * in virtual mode).  Blocks (or advances the virtual clock) until all are in
 * place.  Per expert, in order, with now = the access clock:
 *   in VRAM: hits[VRAM], evict(vram) on_access, place on_access(VRAM);
 *   in RAM: hits[RAM], evict(ram) on_access, place admit(RAM) + on_access;
 *   else: hits[NVME], place admit(NVME) + on_access; with the RAM bit the
 *     expert is kept in RAM (room allowing), NVMe -> RAM then RAM -> VRAM;
 *     without, NVMe -> VRAM staged.
 *   Then with admit's VRAM bit it is kept in VRAM (room is made by the
 *   vram evict policy: on_insert, on_access), without it streams through a
 *   scratch slot (outside the budget), freed at release.  When the policy
 *   runs out of victims before a hole is large enough, it streams too
 *   (admit_fallback).
 * An expert whose prefetch is still in flight counts as a hit in the tier it
 * is going to (decisions never depend on timing), plus prefetch_late; a
 * prefetch move still waiting for its link is promoted to demand priority.
 * Errors: STRATA_EBUDGET (more experts to stream than scratch slots), STRATA_EPOLICY
 * (a victim that is pinned, not resident or out of range, naming the
 * policy), STRATA_EIO/ECORRUPT (a read failed, naming the shard). */
int strata_engine_acquire(struct strata_engine *e, uint32_t layer, const uint32_t *experts,
			  uint32_t n, const void **ptrs, struct strata_error *err);
/* Unpin after the computation, free scratch slots, settle the layer's
 * prefetches (above); tells prefetch (on_route) what was routed. */
int strata_engine_release(struct strata_engine *e, uint64_t token, uint32_t layer,
			  const uint32_t *experts, uint32_t n, struct strata_error *err);
/*
 * Precision on miss (HOBBIT, Tang et al. 2024, "token-level dynamic expert
 * loading": a cache-miss expert that matters little to the token is computed
 * from a low-precision copy, which moves in a fraction of the time).  With
 * cfg.on_miss = "lowbit[:gate=G,from=nvme|ram]" (policies/README.md):
 *   - the driver gives, before each acquire, every expert's gate weight in the
 *     step (strata_engine_set_gates: the largest over the step's tokens routed
 *     to it; without it no expert substitutes);
 *   - in acquire, an expert that is not in VRAM (nor on its way there), would
 *     come from a source that stalls (from=nvme: only a read from NVMe, the
 *     default; from=ram: a RAM-tier copy too), has a low-bit copy
 *     (strata_store_copy; for a model without shards, every expert larger
 *     than the cold format has one) and whose gate weight is below G
 *     (default 0.1) is served by reading its copy from NVMe straight into a
 *     scratch slot: accesses and hits[source] count as usual, placement sees
 *     on_access (not admit: nothing is admitted, the whole expert does not
 *     move), no tier changes, substituted++, and the copy is freed at
 *     release.  strata_engine_served_fmt says which format to compute with.
 *   - The decision reads only residency and the gate weights, so sim and
 *     replay substitute the same accesses.  The store must hold copies
 *     (`--lowbit-copies`): STRATA_EINVAL otherwise.
 */
/* Gate weights for the next acquire: gates[i] for the i-th expert it will
 * be given (n of them).  NULL: none (no substitution). */
int strata_engine_set_gates(struct strata_engine *e, const float *gates, uint32_t n, struct strata_error *err);
/* Whether an access to eid with this gate weight may be served by its copy
 * under the engine's on_miss option when it misses (for bounds). */
bool strata_engine_may_substitute(const struct strata_engine *e, uint32_t eid, float gate);
/* Between acquire and release: the format of the bytes acquire handed over
 * for (layer, expert): its copy's when substituted, else the expert's own. */
int strata_engine_served_fmt(const struct strata_engine *e, uint32_t layer, uint32_t expert);
/* The format of eid's copy (-1: none, or on_miss is not lowbit). */
int strata_engine_copy_fmt(const struct strata_engine *e, uint32_t eid);
/* Whether the engine reads gate weights (on_miss=lowbit): a driver may skip them. */
bool strata_engine_reads_gates(const struct strata_engine *e);
/* The on_miss=lowbit option table (strata policies prints it). */
struct strata_option;
const struct strata_option *strata_engine_on_miss_options(void);

/* Real mode: collect the moves that finished and hand waiting prefetches to
 * the links that fell idle, without blocking (a driver calls it while it
 * waits for its computation; acquire and release do the same).  Virtual
 * mode: nothing.  The first I/O error. */
int strata_engine_poll(struct strata_engine *e, struct strata_error *err);
/* Virtual mode: charge compute time for a layer; real mode: record it. */
void strata_engine_add_compute(struct strata_engine *e, double ns);
/* Real mode, with cfg.move_log: a compute row for the layer just computed,
 * from wall clock t0 (strata_now_ns) to t1, when the driver saw it end;
 * launched: when its launch call returned (its submitted_ns); gpu_ns: when
 * the device finished it (0: t1).  (A sim's rows come from
 * strata_engine_add_compute.) */
void strata_engine_log_compute(struct strata_engine *e, uint64_t t0, uint64_t launched, uint64_t gpu_ns, uint64_t t1);

const struct strata_engine_stats *strata_engine_stats(const struct strata_engine *e);
/* Extent bytes per eid (n_moe_layers * n_experts entries), as the engine moves them. */
const uint64_t *strata_engine_expert_bytes(const struct strata_engine *e);
/* The moves into VRAM so far (cfg.record_loads): expert and layer-step (the
 * count of releases before it) of each; valid until the next engine call. */
void strata_engine_vram_loads(const struct strata_engine *e, const uint32_t **eid, const uint64_t **pos,
			      uint64_t *n);
/* Per eid, nonzero while resident in tier (STRATA_TIER_VRAM or RAM; an
 * expert on its way in counts); valid until the engine is closed. */
const uint8_t *strata_engine_resident(const struct strata_engine *e, int tier);
/* Canonical config name: "place=static,evict=lru,prefetch=lookahead-depth=2". */
const char *strata_engine_name(const struct strata_engine *e);
bool strata_engine_on_gpu(const struct strata_engine *e);
/* Whether the prefetch policy reads the hints passed to begin_step (false
 * when it declares STRATA_POLICY_F_NO_HINTS): a driver may skip them. */
bool strata_engine_reads_hints(const struct strata_engine *e);
/* One line per tier for logs: "vram: 8.00 GiB device", "ram: 32.00 GiB
 * pinned, NUMA node 0 (hwloc), cuda-registered" (the NUMA node used). */
const char *strata_engine_tier_desc(const struct strata_engine *e, int tier);

#endif
