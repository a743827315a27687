/*
 * A small Hugging Face-style test model (safetensors + config.json) for
 * `strata quantize --make-test-model`, the tests and the benchmarks: see
 * include/strata/test_model.h.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/quantize.h"
#include "strata/safetensors.h"
#include "strata/test_model.h"
#include "strata/util.h"

struct rng {
	uint64_t s;
	int have;
	double spare;
};

static double gauss(struct rng *r)
{
	if (r->have) {
		r->have = 0;
		return r->spare;
	}
	double u = ((double)(strata_splitmix64(&r->s) >> 11) + 0.5) / 9007199254740992.0;
	double v = ((double)(strata_splitmix64(&r->s) >> 11) + 0.5) / 9007199254740992.0;
	double rad = sqrt(-2 * log(u));
	r->spare = rad * sin(2 * M_PI * v);
	r->have = 1;
	return rad * cos(2 * M_PI * v);
}

struct tm_tensor {
	char name[160];
	uint32_t ndim;
	uint64_t shape[2];
	int norm; /* 1-D norm weight: ones */
};

static int tm_add(struct tm_tensor **v, uint32_t *n, uint32_t *cap, const char *name, uint32_t ndim, uint64_t r,
		  uint64_t c)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 64;
		struct tm_tensor *nv = realloc(*v, *cap * sizeof(**v));
		if (!nv)
			return -1;
		*v = nv;
	}
	struct tm_tensor *t = &(*v)[(*n)++];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->ndim = ndim;
	t->shape[0] = r;
	t->shape[1] = c;
	t->norm = ndim == 1;
	return 0;
}

int strata_test_model_write(const char *dir, const char *naming, const struct strata_model_spec *s, int dtype,
			    uint32_t n_files, uint64_t seed, struct strata_error *err)
{
	const struct strata_naming *nm = strata_naming_find(naming ? naming : "mixtral");
	if (!nm)
		return STRATA_ERR(err, STRATA_EINVAL, "unknown naming '%s'", naming);
	if (dtype != STRATA_SAFETENSORS_BF16 && dtype != STRATA_SAFETENSORS_F16 && dtype != STRATA_SAFETENSORS_F32)
		return STRATA_ERR(err, STRATA_EINVAL, "test model dtype must be BF16, F16 or F32");
	int rc = strata_model_spec_validate(s, err);
	if (rc)
		return rc;
	if (!n_files)
		n_files = 1;
	if (mkdir(dir, 0755) && errno != EEXIST)
		return STRATA_ERRNO(err, STRATA_EIO, "%s: mkdir", dir);
	struct tm_tensor *v = NULL;
	uint32_t n = 0, cap = 0;
	const uint64_t vocab = 64, h = s->hidden;
	char name[200];
	int bad = tm_add(&v, &n, &cap, "model.embed_tokens.weight", 2, vocab, h);
	for (uint32_t l = 0; l < s->n_layers && !bad; l++) {
		static const char *const attn[] = { "q_proj", "k_proj", "v_proj", "o_proj" };
		snprintf(name, sizeof(name), "model.layers.%u.input_layernorm.weight", l);
		bad |= tm_add(&v, &n, &cap, name, 1, h, 0);
		for (int a = 0; a < 4; a++) {
			snprintf(name, sizeof(name), "model.layers.%u.self_attn.%s.weight", l, attn[a]);
			bad |= tm_add(&v, &n, &cap, name, 2, h, h);
		}
		snprintf(name, sizeof(name), "model.layers.%u.post_attention_layernorm.weight", l);
		bad |= tm_add(&v, &n, &cap, name, 1, h, 0);
		int moe = l >= s->first_moe_layer && l < s->first_moe_layer + s->n_moe_layers;
		if (!moe) {
			static const char *const mlp[] = { "gate_proj", "up_proj", "down_proj" };
			for (int k = 0; k < 3; k++) {
				snprintf(name, sizeof(name), "model.layers.%u.mlp.%s.weight", l, mlp[k]);
				bad |= tm_add(&v, &n, &cap, name, 2, k == 2 ? h : s->inter, k == 2 ? s->inter : h);
			}
			continue;
		}
		snprintf(name, sizeof(name), "model.layers.%u.%s.weight", l,
			 !strcmp(nm->name, "mixtral") ? "block_sparse_moe.gate" : "mlp.gate");
		bad |= tm_add(&v, &n, &cap, name, 2, s->n_experts, h);
		for (uint32_t e = 0; e < s->n_experts; e++)
			for (int k = 0; k < STRATA_MAT_COUNT; k++) {
				strata_naming_format(nm, l, e, k, name, sizeof(name));
				bad |= tm_add(&v, &n, &cap, name, 2, k == STRATA_MAT_DOWN ? h : s->inter,
					      k == STRATA_MAT_DOWN ? s->inter : h);
			}
		if (nm->shared_infix && s->n_shared) {
			uint64_t si = (uint64_t)s->n_shared * (s->shared_inter ? s->shared_inter : s->inter);
			static const char *const mlp[] = { "gate_proj", "up_proj", "down_proj" };
			for (int k = 0; k < 3; k++) {
				snprintf(name, sizeof(name), "model.layers.%u.%s%s.weight", l, nm->shared_infix, mlp[k]);
				bad |= tm_add(&v, &n, &cap, name, 2, k == 2 ? h : si, k == 2 ? si : h);
			}
			snprintf(name, sizeof(name), "model.layers.%u.mlp.gate.e_score_correction_bias", l);
			bad |= tm_add(&v, &n, &cap, name, 1, s->n_experts, 0);
		}
	}
	bad |= tm_add(&v, &n, &cap, "model.norm.weight", 1, h, 0);
	bad |= tm_add(&v, &n, &cap, "lm_head.weight", 2, vocab, h);
	if (bad) {
		free(v);
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	}
	if (n_files > n)
		n_files = n;
	struct rng r = { .s = seed ^ 0x5eedull };
	float *buf = NULL;
	size_t buf_cap = 0;
	char path[PATH_MAX];
	FILE *idx = NULL;
	char idx_path[PATH_MAX], idx_tmp[PATH_MAX + 8];
	if (n_files > 1) {
		snprintf(idx_path, sizeof(idx_path), "%s/model.safetensors.index.json", dir);
		snprintf(idx_tmp, sizeof(idx_tmp), "%s.tmp", idx_path);
		idx = fopen(idx_tmp, "w");
		if (!idx) {
			free(v);
			return STRATA_ERRNO(err, STRATA_EIO, "%s: cannot create", idx_tmp);
		}
		fprintf(idx, "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {");
	}
	for (uint32_t f = 0; f < n_files && !rc; f++) {
		uint32_t a = (uint32_t)((uint64_t)n * f / n_files), b = (uint32_t)((uint64_t)n * (f + 1) / n_files);
		char fname[128];
		if (n_files > 1)
			snprintf(fname, sizeof(fname), "model-%05u-of-%05u.safetensors", f + 1, n_files);
		else
			snprintf(fname, sizeof(fname), "model.safetensors");
		snprintf(path, sizeof(path), "%s/%s", dir, fname);
		struct strata_safetensors_writer *w;
		if ((rc = strata_safetensors_writer_open(path, &w, err)))
			break;
		rc = strata_safetensors_writer_metadata(w, "format", "pt", err);
		for (uint32_t i = a; i < b && !rc; i++) {
			uint64_t shape[2] = { v[i].shape[0], v[i].shape[1] };
			rc = strata_safetensors_writer_declare(w, v[i].name, v[i].norm ? STRATA_SAFETENSORS_F32 : dtype, v[i].ndim, shape, err);
			if (idx)
				fprintf(idx, "%s\n    \"%s\": \"%s\"", i ? "," : "", v[i].name, fname);
		}
		for (uint32_t i = a; i < b && !rc; i++) {
			uint64_t rows = v[i].ndim == 1 ? 1 : v[i].shape[0], cols = v[i].ndim == 1 ? v[i].shape[0] : v[i].shape[1];
			if (cols > buf_cap) {
				float *nb = realloc(buf, cols * sizeof(float));
				if (!nb) {
					rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
					break;
				}
				buf = nb;
				buf_cap = cols;
			}
			for (uint64_t row = 0; row < rows && !rc; row++) {
				for (uint64_t c = 0; c < cols; c++) {
					if (v[i].norm) {
						buf[c] = 1.0f + 0.01f * (float)gauss(&r);
						continue;
					}
					double x = 0.02 * gauss(&r);
					/* a few heavy-tailed outliers, as real checkpoints have */
					if ((strata_splitmix64(&r.s) & 1023) == 0)
						x *= 10;
					buf[c] = (float)x;
				}
				rc = strata_safetensors_writer_write_f32(w, buf, cols, err);
			}
		}
		if (!rc)
			rc = strata_safetensors_writer_finish(w, err);
		else
			strata_safetensors_writer_abort(w);
	}
	free(buf);
	if (idx) {
		fprintf(idx, "\n  }\n}\n");
		if (fclose(idx) && !rc)
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: write", idx_tmp);
		if (!rc && rename(idx_tmp, idx_path))
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: rename", idx_tmp);
		if (rc)
			unlink(idx_tmp);
	}
	if (!rc) {
		snprintf(path, sizeof(path), "%s/config.json", dir);
		struct strata_outfile o;
		if (!(rc = strata_outfile_open(&o, path, 0, err))) {
			FILE *c = o.f;
			int ds = !strcmp(nm->name, "deepseek-v3");
			fprintf(c,
				"{\n  \"model_type\": \"%s\",\n  \"num_hidden_layers\": %u,\n  \"hidden_size\": %u,\n"
				"  \"%s\": %u,\n  \"%s\": %u,\n  \"num_experts_per_tok\": %u",
				!strcmp(nm->name, "mixtral") ? "mixtral" : ds ? "deepseek_v3" : "qwen3_moe", s->n_layers,
				s->hidden, !strcmp(nm->name, "mixtral") ? "intermediate_size" : "moe_intermediate_size",
				s->inter, !strcmp(nm->name, "mixtral") ? "num_local_experts" : ds ? "n_routed_experts" : "num_experts",
				s->n_experts, s->top_k);
			if (ds)
				fprintf(c, ",\n  \"first_k_dense_replace\": %u,\n  \"n_shared_experts\": %u", s->first_moe_layer,
					s->n_shared);
			fprintf(c, "\n}\n");
			rc = strata_outfile_commit(&o, err);
		}
	}
	free(v);
	return rc;
}
