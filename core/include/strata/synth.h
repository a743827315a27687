/*
 * Synthetic models: seeded, reproducible weights at a model's real shapes,
 * written through the shard store (`strata synth`).
 *
 * Distributions (per weight, before the per-matrix scale 1/sqrt(fan_in)):
 *   gaussian   N(0, 1)
 *   student-t  Student-t with `dof` degrees of freedom, rescaled to unit
 *              variance (heavy tails: kurtosis 3 + 6/(dof-4) for dof > 4)
 *   outlier columns (any distribution): a fraction of the input columns of
 *              every matrix has its scale multiplied by outlier_scale.  The
 *              set is drawn per MoE layer (like activation-outlier channels,
 *              shared by the experts of a layer).
 * Sampling is by inverse CDF from a 65536-bin equal-probability table (bin
 * midpoints, computed once by integrating the density), with the two extreme
 * bins drawn exactly from the tails (Gaussian: Marsaglia's tail method;
 * Student-t: its asymptotic Pareto tail, index dof).  One xoshiro256++
 * output gives four weights (16-bit bin indices), and BF16 experts come
 * straight from per-scale BF16 tables, so generation costs well under 1 ns per
 * weight and writing stays I/O-bound.  Inside the extreme bins' edges the
 * distribution is discretized to 65534 values, finer than BF16 resolution
 * there.
 *
 * Every matrix has its own stream, seeded from (seed, layer, expert, matrix),
 * so a weight does not depend on the thread count or on the order experts are
 * written in; the BF16 synth of a matrix is exactly the BF16 rounding of its
 * float synth (strata_synth_matrix).
 *
 * Formats: STRATA_SYNTH_BF16 writes every expert BF16.  STRATA_SYNTH_TIERED
 * writes each expert in the format of its tier (hot/warm/cold), either by
 * running the reference quantizer (codes=quantize: real codes, slow on big
 * models) or, for throughput-only experiments, with codes=random: each
 * quantized block is a copy of a block picked at random from a small pool of
 * genuinely quantized blocks, so every code/scale is valid for the format but
 * the expert computes nothing meaningful.
 *
 * Non-routed tensors: a small representative set, not the model's full
 * non-routed parameter count (which `strata inspect` reports from the spec):
 * token_embd / output with the vocabulary reduced to STRATA_SYNTH_VOCAB rows,
 * output_norm, and per MoE layer the router (real size), attn_norm and the
 * spec's shared experts at real size (BF16).  Attention projections and dense
 * layers are not written.
 */
#ifndef STRATA_SYNTH_H
#define STRATA_SYNTH_H

#include <stdint.h>

#include "strata/error.h"
#include "strata/model.h"
#include "strata/store.h"
#include "strata/util.h"

#define STRATA_SYNTH_VOCAB 1024u

enum strata_synth_dist {
	STRATA_SYNTH_GAUSSIAN = 0,
	STRATA_SYNTH_STUDENT_T = 1,
};

enum strata_synth_format {
	STRATA_SYNTH_BF16 = 0,   /* every expert BF16 */
	STRATA_SYNTH_TIERED = 1, /* every expert in its tier's format */
};

enum strata_synth_codes {
	STRATA_SYNTH_CODES_QUANTIZE = 0, /* run the reference quantizer */
	STRATA_SYNTH_CODES_RANDOM = 1,   /* random valid blocks (throughput-only) */
};

struct strata_synth_config {
	struct strata_model_spec spec;
	uint64_t seed;
	int dist;             /* enum strata_synth_dist */
	double dof;           /* Student-t degrees of freedom, > 2; 0: 5 */
	double outlier_frac;  /* fraction of input columns that are outliers, [0, 0.5]; 0: none */
	double outlier_scale; /* their scale multiplier; 0: 10 */
	int format;           /* enum strata_synth_format */
	int codes;            /* enum strata_synth_codes (tiered only) */
	double tier_frac[STRATA_TIER_COUNT]; /* hot, warm, cold shares of each layer; all 0: 0.15/0.30/0.55 */
	/* Format of each tier's experts (enum strata_fmt, tiered only), e.g.
	 * q4,warm,cold (strata_tier_fmts_parse); all 0: hot, warm, cold. */
	uint8_t tier_fmt[STRATA_TIER_COUNT];
	/* Rank experts by this popularity instead of the seeded Zipf-like order:
	 * a routing trace (.strace / .jsonl) or a counts file (JSON / CSV, see
	 * strata/tier_assign.h), so the tiers match the traffic a replay will see.
	 * NULL: seeded order. */
	const char *popularity;
	uint64_t shard_bytes; /* 0: 4 GiB */
	int threads;          /* generator/writer threads; 0: 2 */
	bool force;           /* replace a model already in the output directory */
	/* Beside each hot/warm expert, a cold-format copy of the same weights
	 * (strata/store.h, strata_store_copy): what precision on miss reads. */
	bool lowbit_copies;
};

struct strata_synth;

/* Validate cfg and build the sampling tables (a few ms). */
int strata_synth_init(const struct strata_synth_config *cfg, struct strata_synth **out, struct strata_error *err);
void strata_synth_free(struct strata_synth *g);
const struct strata_synth_config *strata_synth_config(const struct strata_synth *g);

/* Matrix ids of one routed expert. */
enum { STRATA_SYNTH_GATE = 0, STRATA_SYNTH_UP = 1, STRATA_SYNTH_DOWN = 2 };

/* The float weights of one routed expert matrix, row-major: gate and up are
 * inter x hidden, down is hidden x inter. */
int strata_synth_matrix(const struct strata_synth *g, uint32_t layer, uint32_t e, int which, float *out);

/* One routed expert packed in fmt (strata_expert_layout(fmt).payload bytes
 * into dst).  scratch: NULL, or inter * hidden floats (the quantizer's input;
 * allocated per call when NULL). */
int strata_synth_expert(const struct strata_synth *g, uint32_t layer, uint32_t e, int fmt, void *dst,
			size_t dst_bytes, float *scratch, struct strata_error *err);

/* The representative non-routed tensors of a spec: with out == NULL returns
 * how many there are; else fills up to max entries and returns the count. */
uint32_t strata_synth_tensors(const struct strata_model_spec *spec, struct strata_tensor_info *out, uint32_t max);
/* Fill one of them (t->ext.payload bytes, or bytes of its shape). */
int strata_synth_tensor(const struct strata_synth *g, const struct strata_tensor_info *t, void *dst,
			size_t bytes, struct strata_error *err);

struct strata_synth_result {
	uint64_t bytes;        /* extent bytes written (experts + tensors) */
	uint64_t expert_bytes;
	uint64_t tensor_bytes;
	uint32_t shards;
	double seconds;        /* wall time including the final fsync */
};

/*
 * Write the whole model to dir (see strata_store_writer_*): tensors first,
 * then experts in id order, cfg->threads threads generating and writing.
 * progress, if not NULL, is started and updated (bytes).  SIGINT (via
 * strata_interrupted) stops with STRATA_EINTR.  On any failure every .tmp file
 * is removed and no shard of this write is left behind.
 */
int strata_synth_write(const struct strata_synth_config *cfg, const char *dir, struct strata_progress *progress,
		       struct strata_synth_result *res, struct strata_error *err);

#endif
