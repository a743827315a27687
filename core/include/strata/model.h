/*
 * Model shapes.  A spec says how many MoE layers a model has, how many routed
 * experts each holds, how many the router picks, and the matrix sizes of one
 * routed expert (gate and up: inter x hidden, down: hidden x inter; SwiGLU).
 * Everything else (attention, embeddings, lm_head, dense FFNs, shared experts)
 * is counted in nonrouted_params and stored BF16.
 *
 * Experts are named by (moe_layer, expert) with moe_layer in [0, n_moe_layers);
 * a flat id is moe_layer * n_experts + expert (strata_eid).
 */
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "strata/error.h"

#define STRATA_NAME_MAX 48

struct strata_model_spec {
	char name[STRATA_NAME_MAX]; /* preset name, or "custom" */
	uint32_t n_layers;       /* transformer layers in all */
	uint32_t first_moe_layer; /* first layer with routed experts; layers before are dense */
	uint32_t n_moe_layers;   /* MoE layers: first_moe_layer .. first_moe_layer + n_moe_layers - 1 */
	uint32_t n_experts;      /* routed experts per MoE layer */
	uint32_t top_k;          /* experts the router picks per token and layer */
	uint32_t hidden;         /* model width: expert input and output size */
	uint32_t inter;          /* routed expert intermediate size */
	uint32_t n_shared;       /* shared (always active) experts per MoE layer */
	uint32_t shared_inter;   /* intermediate size of one shared expert */
	uint64_t nonrouted_params; /* parameters outside routed experts, whole model */
};

static inline uint32_t strata_eid(const struct strata_model_spec *s, uint32_t layer, uint32_t e)
{
	return layer * s->n_experts + e;
}

static inline uint64_t strata_model_expert_params(const struct strata_model_spec *s)
{
	return 3ull * s->hidden * s->inter;
}

static inline uint32_t strata_model_total_experts(const struct strata_model_spec *s)
{
	return s->n_moe_layers * s->n_experts;
}

/* The model card's two size figures, defined once for `strata inspect` and
 * `strata quantize` (docs/quantize.md, "The model card"):
 *   bpw       = packed payload bytes * 8 / weights: the format's bits per weight,
 *               block scales included, the 4 KiB extent padding not (hot 2.8125,
 *               warm 2.5625, cold 1.4375 when rows are whole blocks);
 *   reduction = the routed experts' BF16 bytes (2 per weight) / their extent
 *               bytes (4 KiB padded: what shards and tiers hold), printed
 *               "N.NNx smaller than BF16". */
static inline double strata_card_bpw(uint64_t payload_bytes, uint64_t params)
{
	return params ? (double)payload_bytes * 8.0 / (double)params : 0.0;
}

static inline double strata_card_reduction(uint64_t params, uint64_t extent_bytes)
{
	return extent_bytes ? 2.0 * (double)params / (double)extent_bytes : 0.0;
}

/* Built-in presets, NULL-terminated by name == NULL. */
struct strata_model_preset {
	const char *name;
	const char *about;
	struct strata_model_spec spec;
};
extern const struct strata_model_preset strata_model_presets[];

/*
 * Fill *out from a preset name plus optional comma-separated overrides:
 *   "kimi-k3.1", "qwen3-30b-a3b:layers=4,experts=32", "custom:layers=2,experts=8,top_k=2,
 *   hidden=1024,inter=512"
 * Scaling keys: layers (MoE layers kept), experts (routed experts per layer),
 * top_k, hidden, inter, shared, shared_inter, nonrouted (parameters).  Scaling a
 * preset down keeps the expert size, so per-expert I/O stays realistic.
 * top_k is clamped to experts.  Returns STRATA_ENOTFOUND / STRATA_EINVAL.
 */
int strata_model_spec_parse(const char *text, struct strata_model_spec *out, struct strata_error *err);
int strata_model_spec_validate(const struct strata_model_spec *s, struct strata_error *err);
/* Canonical text form that strata_model_spec_parse reads back ("custom:layers=...,..."). */
void strata_model_spec_format(const struct strata_model_spec *s, char *buf, size_t len);

#endif
