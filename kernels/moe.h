/*
 * One MoE layer's routed-expert computation, as the replay driver calls it.
 * Two implementations of the same contract:
 *   strata_moe_layer_ref  CPU reference (kernels/moe_ref.c), host pointers
 *   strata_moe_layer_gpu  fused dequant CUDA kernels (kernels/moe_gpu.cu and friends), device pointers
 * Both compute, for every assignment a (a token routed to an expert slot),
 *   y[token_a] += weight_a * down_e( silu(gate_e x_a) * up_e x_a )
 * with expert e's weights read from its packed extent (kernels/quant.h
 * layout, format fmts[e]), never materialized as BF16/F32 in global memory on
 * the GPU path.
 */
#ifndef STRATA_MOE_H
#define STRATA_MOE_H

#include <stdint.h>

#include "strata/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct strata_moe_call {
	uint32_t hidden, inter;
	uint32_t n_tokens;             /* tokens in this step (1..N) */
	const float *x;                /* n_tokens x hidden activations */
	float *y;                      /* n_tokens x hidden, accumulated into */
	uint32_t n_experts;            /* distinct active experts */
	const void *const *extents;    /* [n_experts] packed extents */
	const uint8_t *fmts;           /* [n_experts] enum strata_fmt */
	uint32_t n_assign;             /* routed (token, expert) pairs */
	const uint32_t *assign_expert; /* [n_assign] index into extents */
	const uint32_t *assign_token;  /* [n_assign] token row */
	const float *assign_weight;    /* [n_assign] router weight */
	void *stream;                  /* strata_gpu_stream* for the GPU path, NULL = default */
};
/* GPU path: x, y and extents[e] are device pointers (extents 16-byte
 * aligned); the arrays extents[], fmts[] and assign_*[] themselves are host
 * memory (copied into the launch, no synchronisation).  See kernels/kernels.h. */

/* The GPU path runs a call in up to three parts, each with launches of its
 * own (kernels/moe_gpu.cu, moe_layer_parts): the trellis and bf16 experts;
 * the q4/q3 experts with at most STRATA_MOE_SQ_DEC_TOKENS tokens (their
 * decode kernel); the q4/q3 experts with more (BF16 copies).  The replay's
 * cost model charges a layer's fixed kernel cost once per part. */
#define STRATA_MOE_SQ_DEC_TOKENS 16

int strata_moe_layer_ref(const struct strata_moe_call *c, struct strata_error *err);
/* STRATA_EUNSUPPORTED on a build or machine without a GPU. */
int strata_moe_layer_gpu(const struct strata_moe_call *c, struct strata_error *err);

#ifdef __cplusplus
}
#endif
#endif
