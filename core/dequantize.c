/*
 * Strata shards back to a Hugging Face safetensors file: every routed expert
 * dequantized from its tier format (the CPU reference dequantizers of
 * kernels/) and written BF16 under the naming scheme's tensor names, every
 * non-routed tensor copied as stored.  What a model sees when it runs on the
 * tier formats, for evaluating quality in any framework.  The shards' tier
 * table goes into the file's __metadata__ as "strata.tiers" (one digit per
 * expert id, 0 hot, 1 warm, 2 cold).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "strata/quantize.h"
#include "strata/util.h"

int strata_dequantize_store(struct strata_store *s, const char *naming, const char *out, bool progress,
			    struct strata_error *err)
{
	const struct strata_model_spec *sp = strata_store_spec(s);
	const struct strata_naming *nm = strata_naming_find(naming ? naming : "qwen3-moe");
	if (!nm || !strcmp(nm->name, "auto"))
		return STRATA_ERR(err, STRATA_EINVAL, "dequantize: naming '%s' (mixtral, deepseek-v3, qwen3-moe)",
				  naming ? naming : "");
	uint32_t n_exp = strata_model_total_experts(sp);
	uint32_t H = sp->hidden, I = sp->inter;
	struct strata_safetensors_writer *w = NULL;
	void *ext = NULL;
	float *f = NULL;
	uint16_t *b = NULL;
	char *tiers = NULL;
	uint8_t *tbuf = NULL;
	int rc = strata_safetensors_writer_open(out, &w, err);
	if (rc)
		return rc;
	uint64_t max_ext = 0, max_t = 0;
	for (uint32_t l = 0; l < sp->n_moe_layers; l++)
		for (uint32_t e = 0; e < sp->n_experts; e++) {
			const struct strata_extent *x = strata_store_expert(s, l, e);
			if (x->bytes > max_ext)
				max_ext = x->bytes;
		}
	for (uint32_t i = 0; i < strata_store_tensor_count(s); i++)
		if (strata_store_tensor(s, i)->ext.bytes > max_t)
			max_t = strata_store_tensor(s, i)->ext.bytes;
	size_t big = (size_t)H * I;
	ext = strata_aligned_alloc(4096, max_ext ? max_ext : 4096);
	tbuf = strata_aligned_alloc(4096, max_t ? max_t : 4096);
	f = malloc(big * sizeof(float));
	b = malloc(big * sizeof(uint16_t));
	tiers = malloc(n_exp + 1);
	if (!ext || !tbuf || !f || !b || !tiers) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "dequantize: out of memory");
		goto fail;
	}
	const uint8_t *tt = strata_store_tier_table(s);
	for (uint32_t i = 0; i < n_exp; i++)
		tiers[i] = (char)('0' + (tt[i] < STRATA_TIER_COUNT ? tt[i] : 9));
	tiers[n_exp] = 0;
	char sbuf[256];
	strata_model_spec_format(sp, sbuf, sizeof(sbuf));
	if ((rc = strata_safetensors_writer_metadata(w, "format", "pt", err)) ||
	    (rc = strata_safetensors_writer_metadata(w, "strata.spec", sbuf, err)) ||
	    (rc = strata_safetensors_writer_metadata(w, "strata.tiers", tiers, err)))
		goto fail;
	/* declare: tensors as stored, then experts in (layer, expert, gate/up/down) order */
	for (uint32_t i = 0; i < strata_store_tensor_count(s); i++) {
		const struct strata_tensor_info *t = strata_store_tensor(s, i);
		if ((rc = strata_safetensors_writer_declare(w, t->name, t->fmt == STRATA_FMT_F32 ? STRATA_SAFETENSORS_F32 : STRATA_SAFETENSORS_BF16,
						   t->ndim, t->shape, err)))
			goto fail;
	}
	char name[256];
	for (uint32_t l = 0; l < sp->n_moe_layers; l++)
		for (uint32_t e = 0; e < sp->n_experts; e++)
			for (int m = 0; m < STRATA_MAT_COUNT; m++) {
				uint64_t shape[2] = { m == STRATA_MAT_DOWN ? H : I, m == STRATA_MAT_DOWN ? I : H };
				strata_naming_format(nm, sp->first_moe_layer + l, e, m, name, sizeof(name));
				if ((rc = strata_safetensors_writer_declare(w, name, STRATA_SAFETENSORS_BF16, 2, shape, err)))
					goto fail;
			}
	for (uint32_t i = 0; i < strata_store_tensor_count(s); i++) {
		const struct strata_tensor_info *t = strata_store_tensor(s, i);
		if ((rc = strata_store_read_extent(s, &t->ext, tbuf, false, true, err)) ||
		    (rc = strata_safetensors_writer_write_raw(w, tbuf, t->ext.payload, err)))
			goto fail;
	}
	struct strata_progress pg;
	if (progress)
		strata_progress_start(&pg, "dequantize", n_exp, "experts");
	for (uint32_t l = 0; l < sp->n_moe_layers; l++)
		for (uint32_t e = 0; e < sp->n_experts; e++) {
			const struct strata_extent *x = strata_store_expert(s, l, e);
			struct strata_expert_layout lay;
			if ((rc = strata_store_read_extent(s, x, ext, false, true, err)))
				goto fail;
			if (strata_expert_layout((int)x->fmt, H, I, &lay)) {
				rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: expert (%u, %u): format %u has no layout",
						strata_store_dir(s), l, e, x->fmt);
				goto fail;
			}
			const uint64_t off[3] = { lay.gate_off, lay.up_off, lay.down_off };
			for (int m = 0; m < STRATA_MAT_COUNT; m++) {
				uint32_t rows = m == STRATA_MAT_DOWN ? H : I, cols = m == STRATA_MAT_DOWN ? I : H;
				if (strata_dequantize_matrix((int)x->fmt, (const uint8_t *)ext + off[m], rows, cols, f)) {
					rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: expert (%u, %u) %s: cannot dequantize",
							strata_store_dir(s), l, e, strata_matrix_name(m));
					goto fail;
				}
				for (size_t j = 0; j < (size_t)rows * cols; j++)
					b[j] = strata_f32_to_bf16(f[j]);
				if ((rc = strata_safetensors_writer_write_raw(w, b, (uint64_t)rows * cols * 2, err)))
					goto fail;
			}
			if (progress)
				strata_progress_update(&pg, (uint64_t)l * sp->n_experts + e + 1);
		}
	if (progress)
		strata_progress_finish(&pg);
	rc = strata_safetensors_writer_finish(w, err);
	w = NULL;
fail:
	if (w)
		strata_safetensors_writer_abort(w);
	free(ext);
	free(tbuf);
	free(f);
	free(b);
	free(tiers);
	return rc;
}
