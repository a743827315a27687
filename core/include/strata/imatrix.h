#ifndef STRATA_IMATRIX_H
#define STRATA_IMATRIX_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/error.h"
#include "strata/model.h"

/*
 * Importance matrix (core/imatrix.c): mean x^2 per input column of each
 * routed matrix, which weights the quantization error (strata quantize,
 * strata_quantize_matrix's imatrix).  Files:
 *   safetensors, F32 (or any float) 1-D tensors named
 *     layers.{L}.{gate,up,down}               one per MoE layer, all its experts
 *     layers.{L}.experts.{E}.{gate,up,down}   optional per-expert override
 *   (L: the model's layer number as in "model.layers.{L}"; gate and up have
 *   hidden entries, down has inter);
 *   or JSON {"layers": {"L": {"gate": [...], "up": [...], "down": [...]}, ...}}.
 * Values must be finite and >= 0.  Layers or matrices absent get NULL
 * (unweighted).  Entries for unknown layers/matrices or of the wrong length
 * are errors naming the file and entry.
 */
struct strata_imatrix;
int strata_imatrix_load(const char *path, const struct strata_model_spec *s, struct strata_imatrix **out,
			struct strata_error *err);
/* Fill out (hidden or inter floats) for (moe_layer, expert, matrix); *found =
 * false (out untouched) if the file has none.  Thread-safe. */
int strata_imatrix_get(struct strata_imatrix *im, uint32_t moe_layer, uint32_t expert, int matrix, float *out,
		       bool *found, struct strata_error *err);
uint32_t strata_imatrix_count(const struct strata_imatrix *im); /* matrices (layer-level + per-expert) held */
void strata_imatrix_free(struct strata_imatrix *im);

#endif
