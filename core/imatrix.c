/*
 * Importance matrices (mean x^2 per input column) for `strata quantize`:
 * safetensors or JSON files, see include/strata/imatrix.h.  Safetensors
 * entries stay on disk and are read on demand (pread: thread-safe), after
 * one streaming pass at load that checks every value; JSON entries are held
 * in memory (such files are small: per layer, not per expert).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/json.h"
#include "strata/imatrix.h"
#include "strata/safetensors.h"
#include "strata/types.h"
#include "strata/util.h"

struct strata_imatrix {
	struct strata_model_spec spec;
	char path[1024];
	struct strata_safetensors *st;                     /* safetensors file, or NULL */
	const struct strata_safetensors_tensor **layer_t;  /* [moe_layer * 3 + m] */
	const struct strata_safetensors_tensor **expert_t; /* [eid * 3 + m] */
	float **layer_v;                          /* JSON: [moe_layer * 3 + m] */
	uint32_t count;
};

static int mat_from_name(const char *s)
{
	for (int m = 0; m < STRATA_MAT_COUNT; m++)
		if (!strcmp(s, strata_matrix_name(m)))
			return m;
	return -1;
}

static uint32_t mat_len(const struct strata_model_spec *s, int m)
{
	return m == STRATA_MAT_DOWN ? s->inter : s->hidden;
}

/* model layer L -> MoE layer index, or -1 */
static int64_t moe_layer(const struct strata_model_spec *s, uint64_t L)
{
	if (L < s->first_moe_layer || L >= (uint64_t)s->first_moe_layer + s->n_moe_layers)
		return -1;
	return (int64_t)(L - s->first_moe_layer);
}

static int parse_u(const char **p, uint64_t *out)
{
	char *end;
	if (**p < '0' || **p > '9')
		return -1;
	errno = 0;
	*out = strtoull(*p, &end, 10);
	if (errno)
		return -1;
	*p = end;
	return 0;
}

static int check_values(const char *path, const char *what, const float *v, uint64_t n, uint64_t base,
			struct strata_error *err)
{
	for (uint64_t i = 0; i < n; i++)
		if (!isfinite(v[i]) || v[i] < 0)
			return STRATA_ERR(err, STRATA_ECORRUPT, "%s: %s[%llu] = %g: importance must be finite and >= 0",
					  path, what, (unsigned long long)(base + i), (double)v[i]);
	return STRATA_OK;
}

static int load_st(struct strata_imatrix *im, struct strata_error *err)
{
	const struct strata_model_spec *s = &im->spec;
	int rc = strata_safetensors_open(im->path, &im->st, err);
	if (rc)
		return rc;
	uint64_t total = strata_model_total_experts(s);
	im->layer_t = calloc((size_t)s->n_moe_layers * STRATA_MAT_COUNT, sizeof(*im->layer_t));
	im->expert_t = calloc(total * STRATA_MAT_COUNT, sizeof(*im->expert_t));
	float *buf = malloc(65536 * sizeof(float));
	if (!im->layer_t || !im->expert_t || !buf) {
		free(buf);
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < strata_safetensors_tensor_count(im->st) && !rc; i++) {
		const struct strata_safetensors_tensor *t = strata_safetensors_tensor_at(im->st, i);
		const char *p = t->name;
		uint64_t L, E = UINT64_MAX;
		int m = -1;
		if (!strncmp(p, "layers.", 7)) {
			p += 7;
			if (!parse_u(&p, &L) && *p == '.') {
				p++;
				if (!strncmp(p, "experts.", 8)) {
					p += 8;
					if (parse_u(&p, &E) || *p != '.')
						E = UINT64_MAX - 1;
					else
						p++;
				}
				m = E == UINT64_MAX - 1 ? -1 : mat_from_name(p);
			}
		}
		if (m < 0) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT,
					"%s: tensor '%s': expected layers.{L}.{gate,up,down} or layers.{L}.experts.{E}.{gate,up,down}",
					im->path, t->name);
			break;
		}
		int64_t ml = moe_layer(s, L);
		if (ml < 0 || (E != UINT64_MAX && E >= s->n_experts)) {
			rc = STRATA_ERR(err, STRATA_ESHAPE, "%s: tensor '%s': the model has MoE layers %u..%u and %u experts",
					im->path, t->name, s->first_moe_layer, s->first_moe_layer + s->n_moe_layers - 1,
					s->n_experts);
			break;
		}
		if (t->ndim != 1 || t->shape[0] != mat_len(s, m) || !strata_safetensors_dtype_is_float(t->dtype)) {
			rc = STRATA_ERR(err, STRATA_ESHAPE, "%s: tensor '%s': want a float vector of %u entries (%s input size)",
					im->path, t->name, mat_len(s, m), m == STRATA_MAT_DOWN ? "inter" : "hidden");
			break;
		}
		for (uint64_t done = 0; done < t->numel && !rc; done += 65536) {
			uint64_t n = t->numel - done < 65536 ? t->numel - done : 65536;
			rc = strata_safetensors_read_f32(im->st, t, done, n, buf, err);
			if (!rc)
				rc = check_values(im->path, t->name, buf, n, done, err);
		}
		if (rc)
			break;
		if (E == UINT64_MAX)
			im->layer_t[ml * STRATA_MAT_COUNT + m] = t;
		else
			im->expert_t[((uint64_t)ml * s->n_experts + E) * STRATA_MAT_COUNT + m] = t;
		im->count++;
	}
	free(buf);
	return rc;
}

static int load_json(struct strata_imatrix *im, struct strata_error *err)
{
	const struct strata_model_spec *s = &im->spec;
	struct strata_json_doc *doc;
	int rc = strata_json_parse_file(im->path, 0, &doc, err);
	if (rc)
		return rc;
	const struct strata_json *layers = strata_json_get(strata_json_root(doc), "layers");
	if (!layers || layers->type != STRATA_JSON_OBJECT) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: no \"layers\" object", im->path);
		goto out;
	}
	im->layer_v = calloc((size_t)s->n_moe_layers * STRATA_MAT_COUNT, sizeof(*im->layer_v));
	if (!im->layer_v) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < layers->len && !rc; i++) {
		const struct strata_json *lv = &layers->items[i];
		const char *p = lv->key;
		uint64_t L;
		if (parse_u(&p, &L) || *p) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: layers key '%s' is not a layer number", im->path, lv->key);
			break;
		}
		int64_t ml = moe_layer(s, L);
		if (ml < 0) {
			rc = STRATA_ERR(err, STRATA_ESHAPE, "%s: layer %s is not a MoE layer of the model (%u..%u)", im->path,
					lv->key, s->first_moe_layer, s->first_moe_layer + s->n_moe_layers - 1);
			break;
		}
		if (lv->type != STRATA_JSON_OBJECT) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: layers['%s'] is not an object", im->path, lv->key);
			break;
		}
		for (uint32_t k = 0; k < lv->len && !rc; k++) {
			const struct strata_json *a = &lv->items[k];
			int m = mat_from_name(a->key);
			if (m < 0) {
				rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: layers['%s']: unknown matrix '%s' (gate, up, down)",
						im->path, lv->key, a->key);
				break;
			}
			if (a->type != STRATA_JSON_ARRAY || a->len != mat_len(s, m)) {
				rc = STRATA_ERR(err, STRATA_ESHAPE, "%s: layers['%s'].%s: want an array of %u numbers", im->path,
						lv->key, a->key, mat_len(s, m));
				break;
			}
			float *v = malloc(a->len * sizeof(float));
			if (!v) {
				rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
				break;
			}
			for (uint32_t c = 0; c < a->len; c++)
				v[c] = a->items[c].type == STRATA_JSON_NUMBER ? (float)a->items[c].num : -1.0f;
			char what[96];
			snprintf(what, sizeof(what), "layers['%s'].%s", lv->key, a->key);
			if ((rc = check_values(im->path, what, v, a->len, 0, err))) {
				free(v);
				break;
			}
			free(im->layer_v[ml * STRATA_MAT_COUNT + m]);
			im->layer_v[ml * STRATA_MAT_COUNT + m] = v;
			im->count++;
		}
	}
out:
	strata_json_free(doc);
	return rc;
}

int strata_imatrix_load(const char *path, const struct strata_model_spec *s, struct strata_imatrix **out,
			struct strata_error *err)
{
	*out = NULL;
	struct strata_imatrix *im = calloc(1, sizeof(*im));
	if (!im)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	im->spec = *s;
	snprintf(im->path, sizeof(im->path), "%s", path);
	FILE *f = fopen(path, "rb");
	int rc;
	if (!f) {
		rc = strata_error_set(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, errno, __FILE__, __LINE__,
				      "%s: cannot open importance matrix", path);
	} else {
		int c;
		while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\t' || c == '\r')
			;
		fclose(f);
		rc = c == '{' ? load_json(im, err) : load_st(im, err);
	}
	if (!rc && !im->count)
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: importance matrix holds no entries", path);
	if (rc) {
		strata_imatrix_free(im);
		return rc;
	}
	*out = im;
	return STRATA_OK;
}

int strata_imatrix_get(struct strata_imatrix *im, uint32_t layer, uint32_t expert, int m, float *out, bool *found,
		       struct strata_error *err)
{
	*found = false;
	const struct strata_model_spec *s = &im->spec;
	if (layer >= s->n_moe_layers || expert >= s->n_experts || m < 0 || m >= STRATA_MAT_COUNT)
		return STRATA_ERR(err, STRATA_EINVAL, "imatrix: no entry (%u, %u, %d)", layer, expert, m);
	if (im->layer_v) {
		const float *v = im->layer_v[layer * STRATA_MAT_COUNT + m];
		if (v) {
			memcpy(out, v, mat_len(s, m) * sizeof(float));
			*found = true;
		}
		return STRATA_OK;
	}
	const struct strata_safetensors_tensor *t = im->expert_t[((uint64_t)layer * s->n_experts + expert) * STRATA_MAT_COUNT + m];
	if (!t)
		t = im->layer_t[layer * STRATA_MAT_COUNT + m];
	if (!t)
		return STRATA_OK;
	int rc = strata_safetensors_read_f32(im->st, t, 0, t->numel, out, err);
	if (!rc)
		*found = true;
	return rc;
}

uint32_t strata_imatrix_count(const struct strata_imatrix *im)
{
	return im->count;
}

void strata_imatrix_free(struct strata_imatrix *im)
{
	if (!im)
		return;
	if (im->layer_v)
		for (uint32_t i = 0; i < im->spec.n_moe_layers * STRATA_MAT_COUNT; i++)
			free(im->layer_v[i]);
	free(im->layer_v);
	free(im->layer_t);
	free(im->expert_t);
	strata_safetensors_close(im->st);
	free(im);
}
