/*
 * Trace replay: drive the engine from a routing trace and a shard set.
 *
 * The trace is cut into steps (strata/trace.h: one decode token, or a chunk
 * of a request's prefill).  Per step and MoE layer the driver
 *   1. hands the engine the recorded lookahead predictions of the step's
 *      tokens as hints (strata_engine_begin_layer),
 *   2. acquires the step's distinct routed experts (strata_engine_acquire),
 *   3. runs the expert computation on them: the CPU reference
 *      (strata_moe_layer_ref), the GPU kernels (strata_moe_layer_gpu, when
 *      the engine runs on a GPU), or none; activations are synthetic but
 *      deterministic (seeded), weights are the trace's gate weights,
 *   4. releases them (strata_engine_release), which tells the policies what
 *      was routed.
 * `strata sim` is the same loop with the engine in virtual mode: no bytes
 * move and compute is charged from the cost model, so the same policies run
 * at millions of expert accesses per second.
 *
 * Same trace + same config + same seed gives the same counters (hits, bytes,
 * evictions, prefetch outcomes); times are measured (real) or modelled
 * (virtual).
 */
#ifndef STRATA_REPLAY_H
#define STRATA_REPLAY_H

#include <stdbool.h>
#include <stdint.h>
#include <inttypes.h>
#include <stdio.h>

#include "strata/engine.h"
#include "strata/error.h"

enum strata_compute {
	STRATA_COMPUTE_NONE = 0,  /* acquire/release only (sim: modelled kernel time) */
	STRATA_COMPUTE_REF = 1,   /* CPU reference on host extents */
	STRATA_COMPUTE_GPU = 2,   /* CUDA kernels on device extents */
	STRATA_COMPUTE_AUTO = 3,  /* gpu when the engine is on a GPU and kernels exist, else ref */
};
const char *strata_compute_name(int c);

/* Everything `strata calibrate` measures: the engine's link/kernel costs plus
 * how kernel time grows with the tokens routed to an expert (prefill). */
struct strata_cost_file {
	struct strata_cost_model cost;
	double kernel_us_per_mb_token;  /* extra per MB for each token beyond the first */
	/* Kernel speed per packed byte of the fast-decode formats q4, q3 relative
	 * to the format kernel_us_per_mb was measured on (strata calibrate times
	 * q4 and q3 experts of the model's shape the same way, same call); 1: the
	 * same.  The sim divides an expert's per-MB kernel time by its format's
	 * speed. */
	double kernel_speed_q4, kernel_speed_q3;
	char machine[128];              /* where it was measured */
	char source[64];                /* "measured", "defaults" */
};
void strata_cost_file_defaults(struct strata_cost_file *c);
int strata_cost_file_load(const char *path, struct strata_cost_file *c, struct strata_error *err);
int strata_cost_file_save(const char *path, const struct strata_cost_file *c, struct strata_error *err);
void strata_cost_file_print(const struct strata_cost_file *c, FILE *f);

/* strata calibrate (core/calibrate.c): NVMe latency/bandwidth on the model's
 * shards (O_DIRECT, io_uring), RAM->VRAM and HBM bandwidth when a GPU is
 * usable, kernel time per packed MB on real extents (GPU kernels or the CPU
 * reference).  Fields not measured keep strata_cost_file_defaults. */
struct strata_calibrate_config {
	const char *model_dir;
	uint64_t read_bytes;     /* NVMe bytes read for bandwidth (default 1 GiB) */
	uint32_t queue_depth;    /* io_uring depth (default 32) */
	int compute;             /* enum strata_compute: kernels timed (none: skip) */
	int use_gpu;             /* -1 auto, 0 never, 1 require */
};
void strata_calibrate_config_defaults(struct strata_calibrate_config *c);
int strata_calibrate(const struct strata_calibrate_config *c, struct strata_cost_file *out, FILE *log,
		     struct strata_error *err);

struct strata_replay_config {
	const char *model_dir;
	const char *trace_path;
	struct strata_engine_config engine;  /* mode, budgets, policy specs, seed, mover, ... */
	int compute;                          /* enum strata_compute */
	uint64_t max_tokens;                  /* 0: whole trace */
	uint32_t prefill_chunk;               /* tokens per prefill step; 0: a request's whole prompt */
	bool hints;                           /* pass recorded predictions (default true) */
	bool future;                          /* give policies the trace's future (farthest, oracle) */
	bool progress;
	double kernel_us_per_mb_token;        /* virtual mode, see strata_cost_file */
	double kernel_speed_q4, kernel_speed_q3; /* virtual mode, see strata_cost_file (0: 1) */
	/* Spec-only models (sim of a model spec, no shards): the hot/warm/cold
	 * split in percent ("15,30,55", the default) and a routing trace whose
	 * per-(layer, expert) counts rank the experts (strata/tier_assign.h: the
	 * most used go hot).  NULL: the default split, experts ranked by
	 * strata synth's seeded order.  Refused with a shard directory. */
	const char *tiers;
	const char *tier_trace;
	/* Spec-only models: each tier's format, "hot,warm,cold" (the default) or
	 * e.g. "q4,warm,cold" (strata_tier_fmts_parse). */
	const char *formats;
};
void strata_replay_config_defaults(struct strata_replay_config *c);

struct strata_replay_result {
	char name[STRATA_POLICY_NAME_MAX + 64]; /* canonical engine config name */
	char trace[256], model[STRATA_NAME_MAX];
	int mode, compute;
	int verify;                            /* enum strata_verify of a real run */
	uint64_t seed, budget[2];
	uint64_t tokens, prefill_tokens, decode_tokens, steps, requests;
	struct strata_engine_stats stats;      /* the engine's counters at the end */
	double hit_rate[3];                    /* share of accesses served from VRAM, RAM, NVMe */
	double prefetch_accuracy;              /* used / issued */
	double prefetch_coverage;              /* used / (used + accesses not served from VRAM) */
	double prefetch_waste;                 /* wasted / issued */
	double prefill_tok_s, decode_tok_s;
	double ttft_ms;                        /* mean over requests: first step start -> first token */
	double lat_p50_ms, lat_p99_ms;         /* per decode token */
	double cold_start_ms;                  /* engine open (initial placement I/O) */
	double run_s;                          /* wall (real) or virtual seconds of the replay loop */
	double wall_s;                         /* host wall time of the whole call */
	double accesses_per_s;                 /* expert accesses per host wall second (whole call) */
	double loop_s;                         /* host wall time of the step loop alone */
	double loop_accesses_per_s;            /* expert accesses per host second of the loop */
	/* Interrupted (SIGINT): strata_replay_run returns STRATA_EINTR with every
	 * field above computed over the steps that finished, and partial set;
	 * writers mark the row ("partial": 1). */
	bool partial;
	/* Real replay whose VRAM tier is host memory (no usable GPU, or --gpu 0):
	 * tables, JSON and CSV say "host stand-in". */
	bool vram_host;
	/* A configuration that makes the compared axis meaningless (an eviction
	 * policy that never ran, a hint-reading prefetch on a trace without
	 * predictions), one sentence per line; "" when none. */
	char warning[640];
	/* Bounds (strata/bound.h), for every policy on this trace, budgets and
	 * cost model: the fewest moves into VRAM and bytes over PCIe (VRAM
	 * budget), the fewest NVMe reads and bytes (both budgets), the fewest NVMe
	 * reads and bytes given this run's moves into VRAM (RAM budget), and
	 * the shortest decode time (and so the highest decode tok/s).
	 * bound_ratio = decode_tok_s / bound_tok_s; bound_violations: how many
	 * of the run's counters beat their bound (0, or a bug). */
	uint64_t bound_moves_vram, bound_bytes_vram, bound_moves_nvme, bound_bytes_nvme;
	uint64_t bound_ram_moves_nvme, bound_ram_bytes_nvme, bound_violations;
	double bound_decode_ms, bound_tok_s, bound_ratio;
	/* Link use over the decode steps (strata/engine.h's link fields; index
	 * STRATA_LINK_PCIE, STRATA_LINK_NVME): busy time and its share of the
	 * decode time (real: wall time with a move outstanding, so what a link
	 * could not be kept busy for shows; virtual: transfer time charged),
	 * NVMe reads as the device saw them, their mean size and mean queue
	 * depth while the disk was busy (real only), and the waits for moves
	 * in flight. */
	double dec_link_busy_ms[2], dec_link_util[2];
	uint64_t dec_nvme_reads, dec_waits;
	double dec_nvme_read_kib, dec_nvme_qd;
	/* (e) of strata/bound.h: the time bound from the residency this run had
	 * as each decode segment began (>= the policy-free bound_tok_s's time:
	 * bound_start_tok_s <= bound_tok_s) */
	double bound_start_tok_s, bound_start_ratio;
};

/* The result columns of `strata replay/sim --csv` and --json, and of the rows of
 * `strata run` sweeps, in order (after config, mode, compute, trace, model, seed,
 * vram_bytes, ram_bytes): X(name, kind, printf format, value), kind U (uint64_t)
 * or D (double), value an expression of `r` (const struct strata_replay_result *)
 * and `s` (&r->stats).  One list, so every writer names the same columns; partial and
 * vram_host_stand_in stay last. */
#define STRATA_REPLAY_COLUMNS(X) \
	X("tokens", U, "%" PRIu64, r->tokens) \
	X("prefill_tokens", U, "%" PRIu64, r->prefill_tokens) \
	X("decode_tokens", U, "%" PRIu64, r->decode_tokens) \
	X("steps", U, "%" PRIu64, r->steps) \
	X("requests", U, "%" PRIu64, r->requests) \
	X("accesses", U, "%" PRIu64, s->accesses) \
	X("hits_vram", U, "%" PRIu64, s->hits[0]) \
	X("hits_ram", U, "%" PRIu64, s->hits[1]) \
	X("hits_nvme", U, "%" PRIu64, s->hits[2]) \
	X("hit_rate_vram", D, "%.6f", r->hit_rate[0]) \
	X("hit_rate_ram", D, "%.6f", r->hit_rate[1]) \
	X("hit_rate_nvme", D, "%.6f", r->hit_rate[2]) \
	X("bytes_nvme_ram", U, "%" PRIu64, s->bytes_nvme_ram) \
	X("bytes_ram_vram", U, "%" PRIu64, s->bytes_ram_vram) \
	X("bytes_nvme_vram", U, "%" PRIu64, s->bytes_nvme_vram) \
	X("evictions_vram", U, "%" PRIu64, s->evictions[0]) \
	X("evictions_ram", U, "%" PRIu64, s->evictions[1]) \
	X("prefetch_issued", U, "%" PRIu64, s->prefetch_issued) \
	X("prefetch_used", U, "%" PRIu64, s->prefetch_used) \
	X("prefetch_wasted", U, "%" PRIu64, s->prefetch_wasted) \
	X("prefetch_redundant", U, "%" PRIu64, s->prefetch_redundant) \
	X("prefetch_late", U, "%" PRIu64, s->prefetch_late) \
	X("prefetch_promoted", U, "%" PRIu64, s->prefetch_promoted) \
	X("prefetch_cancelled", U, "%" PRIu64, s->prefetch_cancelled) \
	X("prefetch_preempted", U, "%" PRIu64, s->prefetch_preempted) \
	X("moves_vram", U, "%" PRIu64, s->moves_vram) \
	X("moves_nvme", U, "%" PRIu64, s->moves_nvme) \
	X("substituted", U, "%" PRIu64, s->substituted) \
	X("substitute_bytes", U, "%" PRIu64, s->substitute_bytes) \
	X("substitute_bytes_saved", U, "%" PRIu64, s->substitute_bytes_saved) \
	X("compactions_vram", U, "%" PRIu64, s->compactions[0]) \
	X("compactions_ram", U, "%" PRIu64, s->compactions[1]) \
	X("compact_bytes_vram", U, "%" PRIu64, s->compact_bytes[0]) \
	X("compact_bytes_ram", U, "%" PRIu64, s->compact_bytes[1]) \
	X("compact_ms", D, "%.3f", s->compact_ns / 1e6) \
	X("prefetch_inflight_max_nvme", U, "%" PRIu64, s->prefetch_inflight_max[STRATA_LINK_NVME]) \
	X("prefetch_inflight_max_pcie", U, "%" PRIu64, s->prefetch_inflight_max[STRATA_LINK_PCIE]) \
	X("prefetch_accuracy", D, "%.6f", r->prefetch_accuracy) \
	X("prefetch_coverage", D, "%.6f", r->prefetch_coverage) \
	X("prefetch_waste", D, "%.6f", r->prefetch_waste) \
	X("stall_ms", D, "%.3f", s->stall_ns / 1e6) \
	X("io_ms", D, "%.3f", s->io_ns / 1e6) \
	X("compute_ms", D, "%.3f", s->compute_ns / 1e6) \
	X("clock_ms", D, "%.3f", s->clock_ns / 1e6) \
	X("bookkeeping_ms", D, "%.3f", (double)s->bookkeeping_ns / 1e6) \
	X("prefill_tok_s", D, "%.3f", r->prefill_tok_s) \
	X("decode_tok_s", D, "%.3f", r->decode_tok_s) \
	X("ttft_ms", D, "%.3f", r->ttft_ms) \
	X("lat_p50_ms", D, "%.4f", r->lat_p50_ms) \
	X("lat_p99_ms", D, "%.4f", r->lat_p99_ms) \
	X("cold_start_ms", D, "%.3f", r->cold_start_ms) \
	X("run_s", D, "%.6f", r->run_s) \
	X("wall_s", D, "%.6f", r->wall_s) \
	X("accesses_per_s", D, "%.0f", r->accesses_per_s) \
	X("loop_s", D, "%.6f", r->loop_s) \
	X("loop_accesses_per_s", D, "%.0f", r->loop_accesses_per_s) \
	X("verified_extents", U, "%" PRIu64, s->verified_extents) \
	X("verified_bytes", U, "%" PRIu64, s->verified_bytes) \
	X("bound_moves_vram", U, "%" PRIu64, r->bound_moves_vram) \
	X("bound_bytes_vram", U, "%" PRIu64, r->bound_bytes_vram) \
	X("bound_moves_nvme", U, "%" PRIu64, r->bound_moves_nvme) \
	X("bound_bytes_nvme", U, "%" PRIu64, r->bound_bytes_nvme) \
	X("bound_ram_moves_nvme", U, "%" PRIu64, r->bound_ram_moves_nvme) \
	X("bound_ram_bytes_nvme", U, "%" PRIu64, r->bound_ram_bytes_nvme) \
	X("bound_decode_ms", D, "%.3f", r->bound_decode_ms) \
	X("bound_tok_s", D, "%.3f", r->bound_tok_s) \
	X("bound_ratio", D, "%.4f", r->bound_ratio) \
	X("bound_start_tok_s", D, "%.3f", r->bound_start_tok_s) \
	X("bound_start_ratio", D, "%.4f", r->bound_start_ratio) \
	X("bound_violations", U, "%" PRIu64, r->bound_violations) \
	X("decode_nvme_busy_ms", D, "%.3f", r->dec_link_busy_ms[STRATA_LINK_NVME]) \
	X("decode_pcie_busy_ms", D, "%.3f", r->dec_link_busy_ms[STRATA_LINK_PCIE]) \
	X("decode_nvme_util", D, "%.4f", r->dec_link_util[STRATA_LINK_NVME]) \
	X("decode_pcie_util", D, "%.4f", r->dec_link_util[STRATA_LINK_PCIE]) \
	X("decode_nvme_reads", U, "%" PRIu64, r->dec_nvme_reads) \
	X("decode_nvme_read_kib", D, "%.1f", r->dec_nvme_read_kib) \
	X("decode_nvme_qd", D, "%.2f", r->dec_nvme_qd) \
	X("decode_waits", U, "%" PRIu64, r->dec_waits) \
	X("preload_bytes_vram", U, "%" PRIu64, s->preload_tier_bytes[0]) \
	X("preload_bytes_ram", U, "%" PRIu64, s->preload_tier_bytes[1]) \
	X("partial", U, "%" PRIu64, (uint64_t)r->partial) \
	X("vram_host_stand_in", U, "%" PRIu64, (uint64_t)r->vram_host)

int strata_replay_run(const struct strata_replay_config *cfg, struct strata_replay_result *res,
		      struct strata_error *err);

void strata_replay_print(const struct strata_replay_result *r, FILE *f);
/* The VRAM tier in words: "device", "host stand-in" (real replay without a
 * GPU) or "modelled" (sim); the JSON's "vram_tier". */
const char *strata_replay_vram_desc(const struct strata_replay_result *r);
int strata_replay_write_json(const struct strata_replay_result *r, const char *path, struct strata_error *err);
/* One header line + one row; append = add a row to an existing file (no header). */
int strata_replay_write_csv(const struct strata_replay_result *r, const char *path, bool append,
			    struct strata_error *err);

#endif
