/*
 * Calibration and tiering: which routed experts get the hot, warm and cold
 * formats (and start in VRAM, RAM and NVMe).
 *
 * Expert popularity is a count per (MoE layer, expert); layers are MoE-layer
 * indexes 0 .. n_moe_layers-1 (the first MoE layer is 0, as in strata_eid).
 * It comes from a counts file:
 *   - JSON as written by Fiddler's popularity benchmark:
 *       {"total_input_tokens": N, "expert_popularity": [[c00, c01, ...], [c10, ...], ...]}
 *     one inner array per layer, one count per expert (other keys ignored);
 *   - CSV "layer,expert,count", one row per pair (a header line and '#'
 *     comments allowed; missing pairs count 0; repeated pairs add up);
 * or from a routing trace (strata_popularity_from_trace).
 *
 * Assignment is per layer: experts are ranked by count, highest first, ties
 * broken by lower expert id; the first n_hot go hot, the next n_warm warm,
 * the rest cold.  With a split of percentages (default 15/30/55) the counts
 * are n_hot = round(n * h / 100), n_hot + n_warm = round(n * (h + w) / 100)
 * (halves round up), so they always sum to n and each is within one expert of
 * its share.  With a byte budget (routed-expert extents only, 4 KiB padded,
 * non-routed tensors excluded) see strata_tier_assign_budget.
 */
#ifndef STRATA_TIER_ASSIGN_H
#define STRATA_TIER_ASSIGN_H

#include <stdint.h>

#include "strata/error.h"
#include "strata/model.h"
#include "strata/types.h"

struct strata_popularity {
	uint32_t n_layers;  /* MoE layers */
	uint32_t n_experts; /* routed experts per layer */
	double *count;      /* n_layers * n_experts, [layer * n_experts + expert] */
	char source[256];   /* file it came from, for messages */
};

/* Zeroed table of the given shape. */
int strata_popularity_init(struct strata_popularity *p, uint32_t n_layers, uint32_t n_experts,
			   struct strata_error *err);
/* Load a counts file (JSON or CSV, told apart by the first non-blank byte). */
int strata_popularity_load(const char *path, struct strata_popularity *out, struct strata_error *err);
/* Count every (layer, expert) routing of a Strata trace (binary .strace or
 * its JSONL twin, see strata/trace.h): one count per token that picked the
 * expert in its top-k, prefill and decode alike. */
int strata_popularity_from_trace(const char *path, struct strata_popularity *out, struct strata_error *err);
void strata_popularity_free(struct strata_popularity *p);
/* STRATA_ESHAPE unless the table has the model's MoE layers and experts. */
int strata_popularity_check(const struct strata_popularity *p, const struct strata_model_spec *s,
			    struct strata_error *err);

/* Percentages of experts per tier (hot, warm, cold); they sum to 100. */
struct strata_tier_split {
	double pct[STRATA_TIER_COUNT];
};
/* The default split, percent of each layer's experts (hot, warm, cold): the
 * released runtime's 15/30/55, written here once. */
#define STRATA_TIER_DEFAULT_HOT 15
#define STRATA_TIER_DEFAULT_WARM 30
#define STRATA_TIER_DEFAULT_COLD 55
#define STRATA_TIER_SPLIT_DEFAULT { { STRATA_TIER_DEFAULT_HOT, STRATA_TIER_DEFAULT_WARM, STRATA_TIER_DEFAULT_COLD } }
/* The same as fractions (0.15, 0.30, 0.55). */
extern const double strata_tier_frac_default[STRATA_TIER_COUNT];

/* The one --tiers syntax (synth, inspect, sim, quantize, sweeps): three
 * non-negative numbers hot,warm,cold, either percentages summing to 100
 * (+-0.01: "15,30,55") or fractions summing to 1 (+-1e-4: "0.15,0.30,0.55");
 * the sum tells them apart.  out holds percentages. */
int strata_tier_split_parse(const char *text, struct strata_tier_split *out, struct strata_error *err);
/* Experts per tier for a layer of n experts (see the rounding rule above). */
void strata_tier_split_counts(uint32_t n, const struct strata_tier_split *split, uint32_t counts[STRATA_TIER_COUNT]);

/* Experts of one layer ranked hottest first (ties: lower id first).  p may
 * be NULL (all ties: expert id order).  order: n_experts entries. */
void strata_tier_rank(const struct strata_popularity *p, uint32_t layer, uint32_t n_experts, uint32_t *order);

/* Fill tiers (one byte per expert id, enum strata_tier) by the split.  p may
 * be NULL; if given it must match the spec's shape. */
int strata_tier_assign_split(const struct strata_model_spec *s, const struct strata_popularity *p,
			     const struct strata_tier_split *split, uint8_t *tiers, struct strata_error *err);

enum strata_budget_mode {
	STRATA_BUDGET_LAYER = 0,  /* budget / n_moe_layers for every layer, same counts in each */
	STRATA_BUDGET_GLOBAL = 1, /* one pool: layers with skewed popularity get more upgrades */
};

/*
 * Fill tiers so the routed experts' extents fit in budget bytes.  Start with
 * every expert cold (STRATA_EBUDGET if even that does not fit, naming the
 * bytes needed); then, in popularity order, upgrade experts cold -> warm while
 * the budget allows; then, in the same order, warm -> hot while it allows.
 * Warm first because cold -> warm is by far the larger quality step per byte
 * (cosine ~0.90 -> ~0.97 for 36 more bytes per 256 weights, against ~0.97 ->
 * ~0.98 for 8 more), so coverage beats a few hot experts.  The result is
 * monotone in popularity: no expert is in a better tier than a more popular
 * one (of its layer; in global mode, of the model, with popularity taken as
 * the expert's share of its layer's count).  Extent sizes come from
 * strata_expert_layout of the tier formats.
 */
int strata_tier_assign_budget(const struct strata_model_spec *s, const struct strata_popularity *p,
			      uint64_t budget, int mode, uint8_t *tiers, struct strata_error *err);

/* Extent bytes of one expert in each tier format (hot, warm, cold). */
int strata_tier_expert_bytes(const struct strata_model_spec *s, uint64_t bytes[STRATA_TIER_COUNT],
			     struct strata_error *err);

/*
 * Seeded tier table (the tiers of a synthetic model, strata synth without
 * --popularity): in each MoE layer, experts get a random popularity rank (a
 * Zipf-like popularity with exponent 1 over the ranks, seeded per layer) and
 * the most popular round(E * hot) are hot, the next round(E * (hot + warm)) -
 * round(E * hot) warm, the rest cold (round = nearest, halves up).  frac:
 * shares of each tier; NULL or all 0: strata_tier_frac_default.  Writes
 * one byte per expert id.  pop, if not NULL, receives each expert's
 * normalized popularity (sums to 1 per layer).
 */
void strata_tier_assign_seeded(const struct strata_model_spec *spec, const double frac[STRATA_TIER_COUNT],
			       uint64_t seed, uint8_t *tiers, double *pop);
/* Experts per tier of one layer under that rule. */
void strata_tier_frac_counts(uint32_t n_experts, const double frac[STRATA_TIER_COUNT],
			     uint32_t out[STRATA_TIER_COUNT]);
/* strata_tier_split_parse ("15,30,55" or "0.15,0.30,0.55") as fractions. */
int strata_tier_frac_parse(const char *text, double frac[STRATA_TIER_COUNT], struct strata_error *err);

/*
 * The packed format of each tier (enum strata_fmt): the trellis formats hot,
 * warm, cold by default; any quantized format may stand for any tier, e.g.
 * the fast-decode q4 for the hot tier ("q4,warm,cold").  text is three format
 * names (kernels/quant.h) separated by commas, hot first; f32 and bf16 are
 * refused (a tier holds quantized experts).  STRATA_EINVAL names the bad entry.
 */
#define STRATA_TIER_FMTS_DEFAULT { 2, 3, 4 } /* STRATA_FMT_HOT, _WARM, _COLD */
/* fmts, or the default when fmts is NULL or all zero (configs leave it so). */
const uint8_t *strata_tier_fmts_or_default(const uint8_t *fmts);
int strata_tier_fmts_parse(const char *text, uint8_t fmts[STRATA_TIER_COUNT], struct strata_error *err);
/* "hot,warm,cold" of a tier format table (the inverse of the above), into buf. */
const char *strata_tier_fmts_name(const uint8_t fmts[STRATA_TIER_COUNT], char *buf, size_t len);

/*
 * Tiers of a model given by its spec only (a sim of "kimi-k3.1:layers=8",
 * which has no shard header to read them from), as strata synth would write
 * them: with neither split nor tier_trace, the seeded table at the default
 * fractions; else ranked by tier_trace's counts (or, without one, the seeded
 * table's Zipf weights) and split by split ("H,W,C" percent; NULL: the
 * default).  tiers: one byte per expert id.
 */
int strata_tier_assign_spec(const struct strata_model_spec *spec, const char *split, const char *tier_trace,
			    uint64_t seed, uint8_t *tiers, struct strata_error *err);

#endif
