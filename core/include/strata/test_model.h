/* The test-model writer (core/test_model.c). */
#ifndef STRATA_TEST_MODEL_H
#define STRATA_TEST_MODEL_H

#include <stdint.h>

#include "strata/error.h"
#include "strata/model.h"

/*
 * Write a small Hugging Face-style test model into dir: config.json,
 * model.safetensors (n_files 1) or model-0000i-of-0000n.safetensors plus
 * model.safetensors.index.json, with the given scheme's names, spec shape
 * (dense layers before first_moe_layer, shared experts if n_shared), a vocab
 * of 64, tensors in dtype (STRATA_SAFETENSORS_BF16/F16/F32), weights N(0, 0.02) from
 * seed with a few heavy-tailed outliers.  naming: a scheme of strata/quantize.h
 * (NULL: "mixtral").
 */
int strata_test_model_write(const char *dir, const char *naming, const struct strata_model_spec *s, int dtype,
			    uint32_t n_files, uint64_t seed, struct strata_error *err);

#endif
