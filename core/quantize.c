/*
 * Safetensors MoE model -> Strata shards: naming schemes, spec inference and
 * the parallel quantize loop.  See include/strata/quantize.h.
 *
 * The quantize loop hands out tasks from one atomic counter to N worker
 * threads: the non-routed tensors, then row blocks of the routed experts'
 * matrices (see "the quantize loop" below).  A worker reads a block (pread,
 * converted to float), quantizes it into its expert's buffer; the last block
 * of an expert sends the expert to the shard writer and, holding the job
 * lock, folds its statistics into the report.  The store writer takes
 * experts from several threads at once.  The first error wins and stops
 * every worker; the writer is then aborted so no shard that looks valid is
 * left behind.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"
#include "strata/json.h"
#include "strata/quantize.h"
#include "strata/tier_assign.h"
#include "strata/util.h"

const struct strata_naming strata_namings[] = {
	{ .name = "mixtral", .about = "model.layers.{L}.block_sparse_moe.experts.{E}.{w1,w3,w2}.weight",
	  .experts_infix = "block_sparse_moe.experts.", .matrix = { "w1", "w3", "w2" }, .default_top_k = 2 },
	{ .name = "deepseek-v3", .about = "model.layers.{L}.mlp.experts.{E}.{gate,up,down}_proj.weight, shared experts",
	  .experts_infix = "mlp.experts.", .matrix = { "gate_proj", "up_proj", "down_proj" },
	  .shared_infix = "mlp.shared_experts.", .default_top_k = 8 },
	{ .name = "qwen3-moe", .about = "model.layers.{L}.mlp.experts.{E}.{gate,up,down}_proj.weight",
	  .experts_infix = "mlp.experts.", .matrix = { "gate_proj", "up_proj", "down_proj" }, .default_top_k = 8 },
	{ .name = NULL },
};

const struct strata_naming *strata_naming_find(const char *name)
{
	for (const struct strata_naming *n = strata_namings; n->name; n++)
		if (!strcmp(n->name, name))
			return n;
	return NULL;
}

static bool parse_index(const char **p, uint32_t *out)
{
	const char *s = *p;
	if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
		return false;
	uint64_t v = 0;
	while (*s >= '0' && *s <= '9') {
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > 1000000)
			return false;
		s++;
	}
	*out = (uint32_t)v;
	*p = s;
	return true;
}

/* "model.layers.{L}." prefix: the layer number and what follows, or NULL. */
static const char *layer_prefix(const char *t, uint32_t *layer)
{
	static const char pre[] = "model.layers.";
	if (strncmp(t, pre, sizeof(pre) - 1))
		return NULL;
	const char *p = t + sizeof(pre) - 1;
	if (!parse_index(&p, layer) || *p != '.')
		return NULL;
	return p + 1;
}

bool strata_naming_match(const struct strata_naming *n, const char *tensor, uint32_t *layer, uint32_t *expert,
			 int *matrix)
{
	const char *p = layer_prefix(tensor, layer);
	size_t il = strlen(n->experts_infix);
	if (!p || strncmp(p, n->experts_infix, il))
		return false;
	p += il;
	if (!parse_index(&p, expert) || *p++ != '.')
		return false;
	for (int m = 0; m < STRATA_MAT_COUNT; m++) {
		size_t ml = strlen(n->matrix[m]);
		if (!strncmp(p, n->matrix[m], ml) && !strcmp(p + ml, ".weight")) {
			*matrix = m;
			return true;
		}
	}
	return false;
}

void strata_naming_format(const struct strata_naming *n, uint32_t layer, uint32_t expert, int matrix, char *buf,
			  size_t len)
{
	snprintf(buf, len, "model.layers.%u.%s%u.%s.weight", layer, n->experts_infix, expert, n->matrix[matrix]);
}

static int detect_naming(struct strata_safetensors *st, const struct strata_naming **out, struct strata_error *err)
{
	const struct strata_naming *mix = strata_naming_find("mixtral"), *ds = strata_naming_find("deepseek-v3");
	uint32_t n_mix = 0, n_mlp = 0, deepseek_hint = 0;
	for (uint32_t i = 0; i < strata_safetensors_tensor_count(st); i++) {
		const char *name = strata_safetensors_tensor_at(st, i)->name;
		uint32_t l, e;
		int m;
		n_mix += strata_naming_match(mix, name, &l, &e, &m);
		n_mlp += strata_naming_match(ds, name, &l, &e, &m);
		deepseek_hint += strstr(name, ".mlp.shared_experts.") || strstr(name, "e_score_correction_bias");
	}
	if (n_mix && n_mlp)
		return STRATA_ERR(err, STRATA_EINVAL,
				  "%s: tensors match both the mixtral and the mlp.experts naming: pick one with --naming",
				  strata_safetensors_file_path(st, 0));
	if (n_mix)
		*out = mix;
	else if (n_mlp)
		*out = deepseek_hint ? ds : strata_naming_find("qwen3-moe");
	else
		return STRATA_ERR(err, STRATA_ENOTFOUND,
				  "%s: no routed-expert tensors of any known naming (mixtral: %s; deepseek-v3 / qwen3-moe: %s)",
				  strata_safetensors_file_path(st, 0), mix->about, ds->about);
	return STRATA_OK;
}

/* config.json next to the model, if any: a few integers. */
struct hf_config {
	int64_t top_k, n_hidden_layers, n_shared;
	uint32_t fp8_block[2]; /* quantization_config.weight_block_size, default 128 x 128 */
};

/* A non-negative integer key: its value, left alone when absent, -2 when
 * present but not a non-negative integer (the caller names it). */
static void cfg_int(const struct strata_json *root, const char *key, int64_t *out)
{
	const struct strata_json *v = strata_json_get(root, key);
	if (v && v->type == STRATA_JSON_NUMBER && v->is_int && v->i >= 0)
		*out = v->i;
	else if (v && v->type != STRATA_JSON_NULL)
		*out = -2;
}

static int read_hf_config(const char *model_path, struct hf_config *c, struct strata_error *err)
{
	c->top_k = c->n_hidden_layers = c->n_shared = -1;
	c->fp8_block[0] = c->fp8_block[1] = 128;
	char dir[PATH_MAX], path[PATH_MAX + 16];
	struct stat sb;
	snprintf(dir, sizeof(dir), "%s", model_path);
	if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) {
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		else
			strcpy(dir, ".");
	}
	snprintf(path, sizeof(path), "%s/config.json", dir);
	if (stat(path, &sb))
		return STRATA_OK;
	struct strata_json_doc *doc;
	int rc = strata_json_parse_file(path, 16u << 20, &doc, err);
	if (rc)
		return rc;
	const struct strata_json *root = strata_json_root(doc);
	cfg_int(root, "num_experts_per_tok", &c->top_k);
	cfg_int(root, "num_hidden_layers", &c->n_hidden_layers);
	cfg_int(root, "n_shared_experts", &c->n_shared);
	const struct strata_json *bs = strata_json_get(strata_json_get(root, "quantization_config"), "weight_block_size");
	if (bs && bs->type == STRATA_JSON_ARRAY && bs->len == 2)
		for (int k = 0; k < 2; k++)
			if (bs->items[k].is_uint && bs->items[k].u > 0 && bs->items[k].u <= 65536)
				c->fp8_block[k] = (uint32_t)bs->items[k].u;
	strata_json_free(doc);
	return STRATA_OK;
}

void strata_quantize_model_close(struct strata_quantize_model *m)
{
	if (!m)
		return;
	strata_safetensors_close(m->st);
	free(m->experts);
	free(m->nonrouted);
	free(m);
}

static const char *base_name(const char *path, char *buf, size_t len)
{
	snprintf(buf, len, "%s", path);
	size_t l = strlen(buf);
	while (l > 1 && buf[l - 1] == '/')
		buf[--l] = '\0';
	char *s = strrchr(buf, '/');
	const char *b = s ? s + 1 : buf;
	memmove(buf, b, strlen(b) + 1);
	char *dot = strstr(buf, ".safetensors");
	if (dot)
		*dot = '\0';
	return buf;
}

static bool is_fp8(int dtype)
{
	return dtype == STRATA_SAFETENSORS_F8_E4M3 || dtype == STRATA_SAFETENSORS_F8_E5M2;
}

/* "X_scale_inv" where X exists: DeepSeek-V3's per-block FP8 dequant scales */
static bool is_scale_of_other(struct strata_safetensors *st, const char *name)
{
	static const char suf[] = "_scale_inv";
	size_t n = strlen(name);
	if (n <= sizeof(suf) - 1 || strcmp(name + n - (sizeof(suf) - 1), suf) || n >= 512)
		return false;
	char base[512];
	memcpy(base, name, n - (sizeof(suf) - 1));
	base[n - (sizeof(suf) - 1)] = '\0';
	return strata_safetensors_find(st, base) != NULL;
}

static const struct strata_safetensors_tensor *scale_of(const struct strata_quantize_model *m, const struct strata_safetensors_tensor *t)
{
	char name[512];
	snprintf(name, sizeof(name), "%s_scale_inv", t->name);
	return strata_safetensors_find(m->st, name);
}

static int check_fp8_scale(const struct strata_quantize_model *m, const struct strata_safetensors_tensor *t, struct strata_error *err)
{
	if (!is_fp8(t->dtype))
		return STRATA_OK;
	const char *f = strata_safetensors_file_path(m->st, t->file);
	const struct strata_safetensors_tensor *sc = scale_of(m, t);
	if (t->ndim != 2)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "%s: FP8 tensor '%s' is %u-D; only 2-D FP8 weights are read", f,
				  t->name, t->ndim);
	if (!sc)
		return STRATA_ERR(err, STRATA_ENOTFOUND, "%s: FP8 tensor '%s' has no '%s_scale_inv' block scales", f, t->name,
				  t->name);
	uint64_t r = (t->shape[0] + m->fp8_block[0] - 1) / m->fp8_block[0];
	uint64_t c = (t->shape[1] + m->fp8_block[1] - 1) / m->fp8_block[1];
	if (sc->ndim != 2 || sc->shape[0] != r || sc->shape[1] != c || !strata_safetensors_dtype_is_float(sc->dtype) ||
	    is_fp8(sc->dtype))
		return STRATA_ERR(err, STRATA_ESHAPE,
				  "%s: '%s' must be a float [%" PRIu64 ", %" PRIu64 "] (blocks of %u x %u over [%" PRIu64 ", %" PRIu64
				  "])",
				  strata_safetensors_file_path(m->st, sc->file), sc->name, r, c, m->fp8_block[0], m->fp8_block[1],
				  t->shape[0], t->shape[1]);
	return STRATA_OK;
}

int strata_quantize_read_rows(struct strata_quantize_model *m, const struct strata_safetensors_tensor *t, uint64_t row0, uint64_t nrows,
			float *out, struct strata_error *err)
{
	uint64_t cols = t->ndim >= 2 ? t->shape[t->ndim - 1] : t->numel;
	uint64_t rows = cols ? t->numel / cols : 0;
	if (row0 > rows || nrows > rows - row0)
		return STRATA_ERR(err, STRATA_EINVAL, "tensor '%s': rows [%" PRIu64 ", +%" PRIu64 ") out of range", t->name,
				  row0, nrows);
	int rc = strata_safetensors_read_f32(m->st, t, row0 * cols, nrows * cols, out, err);
	if (rc || !is_fp8(t->dtype))
		return rc;
	const struct strata_safetensors_tensor *sc = scale_of(m, t);
	if (!sc)
		return STRATA_ERR(err, STRATA_ENOTFOUND, "FP8 tensor '%s' has no block scales", t->name);
	uint64_t scols = sc->shape[1];
	float *srow = malloc(scols * sizeof(float));
	if (!srow)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	uint64_t have = UINT64_MAX;
	for (uint64_t r = 0; r < nrows && !rc; r++) {
		uint64_t br = (row0 + r) / m->fp8_block[0];
		if (br != have) {
			if ((rc = strata_safetensors_read_f32(m->st, sc, br * scols, scols, srow, err)))
				break;
			have = br;
		}
		float *o = out + r * cols;
		for (uint64_t c = 0; c < cols; c++)
			o[c] *= srow[c / m->fp8_block[1]];
	}
	free(srow);
	return rc;
}

int strata_quantize_model_open(const char *path, const struct strata_quantize_open_options *opt, struct strata_quantize_model **out,
			 struct strata_error *err)
{
	*out = NULL;
	struct strata_quantize_open_options none = { 0 };
	if (!opt)
		opt = &none;
	struct strata_quantize_model *m = calloc(1, sizeof(*m));
	if (!m)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	snprintf(m->path, sizeof(m->path), "%s", path);
	uint32_t *layer_of = NULL, *expert_of = NULL;
	int8_t *mat_of = NULL;
	int rc = strata_safetensors_open(path, &m->st, err);
	if (rc)
		goto fail;
	struct strata_safetensors *st = m->st;
	const char *where = path;
	struct hf_config hc;
	if ((rc = read_hf_config(path, &hc, err)))
		goto fail;
	if (!opt->naming || !strcmp(opt->naming, "auto")) {
		if ((rc = detect_naming(st, &m->naming, err)))
			goto fail;
	} else if (!(m->naming = strata_naming_find(opt->naming))) {
		rc = STRATA_ERR(err, STRATA_EINVAL, "unknown naming '%s' (mixtral, deepseek-v3, qwen3-moe, auto)", opt->naming);
		goto fail;
	}
	const struct strata_naming *nm = m->naming;
	uint32_t n = strata_safetensors_tensor_count(st);
	layer_of = malloc(n * sizeof(*layer_of));
	expert_of = malloc(n * sizeof(*expert_of));
	mat_of = malloc(n);
	if (!layer_of || !expert_of || !mat_of) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		goto fail;
	}
	/* pass 1: classify; find the MoE layer range and expert count */
	uint32_t lo = UINT32_MAX, hi = 0, max_e = 0, max_layer = 0, n_exp = 0;
	bool any_layer = false;
	for (uint32_t i = 0; i < n; i++) {
		const struct strata_safetensors_tensor *t = strata_safetensors_tensor_at(st, i);
		uint32_t l, e;
		int mat;
		mat_of[i] = -1;
		if (is_scale_of_other(st, t->name)) {
			mat_of[i] = -3; /* an FP8 block scale: consumed with its weight */
			continue;
		}
		if (layer_prefix(t->name, &l)) {
			if (hc.n_hidden_layers >= 0 && l >= (uint64_t)hc.n_hidden_layers) {
				mat_of[i] = -2; /* skipped (MTP) */
				m->n_skipped++;
				continue;
			}
			any_layer = true;
			if (l > max_layer)
				max_layer = l;
		}
		if (strata_naming_match(nm, t->name, &l, &e, &mat)) {
			mat_of[i] = (int8_t)mat;
			layer_of[i] = l;
			expert_of[i] = e;
			lo = l < lo ? l : lo;
			hi = l > hi ? l : hi;
			max_e = e > max_e ? e : max_e;
			n_exp++;
		} else if (layer_prefix(t->name, &l) && strstr(t->name, nm->experts_infix)) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT,
					"%s: tensor '%s' is under the %s experts but is not one of %s/%s/%s.weight", where,
					t->name, nm->name, nm->matrix[0], nm->matrix[1], nm->matrix[2]);
			goto fail;
		}
	}
	if (!n_exp) {
		rc = STRATA_ERR(err, STRATA_ENOTFOUND, "%s: no tensor matches the %s naming (%s)", where, nm->name, nm->about);
		goto fail;
	}
	struct strata_model_spec *s = &m->spec;
	memset(s, 0, sizeof(*s));
	char bn[PATH_MAX];
	snprintf(s->name, sizeof(s->name), "%s", opt->name ? opt->name : base_name(path, bn, sizeof(bn)));
	s->first_moe_layer = lo;
	s->n_moe_layers = hi - lo + 1;
	s->n_experts = max_e + 1;
	s->n_layers = (any_layer ? max_layer : hi) + 1;
	if (s->n_moe_layers > 65535 || s->n_experts > 65535) {
		rc = STRATA_ERR(err, STRATA_EINVAL, "%s: %u MoE layers x %u experts is too many", where, s->n_moe_layers,
				s->n_experts);
		goto fail;
	}
	uint64_t total = (uint64_t)s->n_moe_layers * s->n_experts;
	m->experts = calloc(total * STRATA_MAT_COUNT, sizeof(*m->experts));
	m->nonrouted = calloc(n, sizeof(*m->nonrouted));
	if (!m->experts || !m->nonrouted) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct strata_safetensors_tensor *t = strata_safetensors_tensor_at(st, i);
		if (mat_of[i] <= -2)
			continue;
		if (mat_of[i] < 0) {
			m->nonrouted[m->n_nonrouted++] = t;
			s->nonrouted_params += t->numel;
			continue;
		}
		m->experts[((uint64_t)(layer_of[i] - lo) * s->n_experts + expert_of[i]) * STRATA_MAT_COUNT + mat_of[i]] = t;
	}
	/* every expert present with 3 matrices of one shape and a float dtype */
	const struct strata_safetensors_tensor *g0 = NULL;
	for (uint64_t k = 0; k < total * STRATA_MAT_COUNT && !g0; k += STRATA_MAT_COUNT)
		g0 = m->experts[k];
	if (!g0 || g0->ndim != 2) {
		rc = STRATA_ERR(err, STRATA_ESHAPE, "%s: tensor '%s' is %u-D, a 2-D [inter, hidden] matrix expected",
				strata_safetensors_file_path(st, g0 ? g0->file : 0), g0 ? g0->name : "?", g0 ? g0->ndim : 0);
		goto fail;
	}
	/* the first expert's first present matrix fixes the sizes */
	{
		int gm = 0;
		for (uint64_t k = 0; k < total * STRATA_MAT_COUNT; k++)
			if (m->experts[k] == g0) {
				gm = (int)(k % STRATA_MAT_COUNT);
				break;
			}
		uint64_t r = g0->shape[0], c = g0->shape[1];
		if (gm == STRATA_MAT_DOWN) {
			s->hidden = (uint32_t)r;
			s->inter = (uint32_t)c;
		} else {
			s->inter = (uint32_t)r;
			s->hidden = (uint32_t)c;
		}
		if (r > UINT32_MAX || c > UINT32_MAX || !r || !c) {
			rc = STRATA_ERR(err, STRATA_ESHAPE, "%s: tensor '%s': bad matrix size", where, g0->name);
			goto fail;
		}
	}
	for (uint32_t l = 0; l < s->n_moe_layers; l++)
		for (uint32_t e = 0; e < s->n_experts; e++)
			for (int mat = 0; mat < STRATA_MAT_COUNT; mat++) {
				const struct strata_safetensors_tensor *t =
					m->experts[((uint64_t)l * s->n_experts + e) * STRATA_MAT_COUNT + mat];
				char want[160];
				strata_naming_format(nm, l + lo, e, mat, want, sizeof(want));
				if (!t) {
					rc = STRATA_ERR(err, STRATA_ENOTFOUND,
							"%s: missing tensor '%s' (layers %u..%u hold routed experts 0..%u)", where,
							want, lo, hi, max_e);
					goto fail;
				}
				uint64_t r = mat == STRATA_MAT_DOWN ? s->hidden : s->inter;
				uint64_t c = mat == STRATA_MAT_DOWN ? s->inter : s->hidden;
				if (t->ndim != 2 || t->shape[0] != r || t->shape[1] != c) {
					char got[96] = "";
					size_t o = 0;
					for (uint32_t d = 0; d < t->ndim && o < sizeof(got) - 24; d++)
						o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%" PRIu64, d ? ", " : "",
								      t->shape[d]);
					rc = STRATA_ERR(err, STRATA_ESHAPE,
							"%s: tensor '%s' has shape [%s], expected [%" PRIu64 ", %" PRIu64
							"] (hidden %u, inter %u from '%s')",
							strata_safetensors_file_path(st, t->file), t->name, got, r, c, s->hidden, s->inter,
							g0->name);
					goto fail;
				}
				if (!strata_safetensors_dtype_is_float(t->dtype)) {
					rc = STRATA_ERR(err, STRATA_EUNSUPPORTED,
							"%s: tensor '%s' has dtype %s; routed experts must be BF16, F16 or F32",
							strata_safetensors_file_path(st, t->file), t->name, strata_safetensors_dtype_name(t->dtype));
					goto fail;
				}
			}
	for (uint32_t i = 0; i < m->n_nonrouted; i++) {
		const struct strata_safetensors_tensor *t = m->nonrouted[i];
		if (!strata_safetensors_dtype_is_float(t->dtype)) {
			rc = STRATA_ERR(err, STRATA_EUNSUPPORTED,
					"%s: tensor '%s' has dtype %s; non-routed tensors must be BF16, F16, F32 or F64%s",
					strata_safetensors_file_path(st, t->file), t->name, strata_safetensors_dtype_name(t->dtype),
					t->dtype == STRATA_SAFETENSORS_F8_E4M3 ? " (an FP8 checkpoint: convert it to BF16 first)" : "");
			goto fail;
		}
		if (strlen(t->name) >= STRATA_TENSOR_NAME_MAX || t->ndim > 4) {
			rc = STRATA_ERR(err, STRATA_EUNSUPPORTED, "%s: tensor '%s': name over %d bytes or more than 4 dimensions",
					strata_safetensors_file_path(st, t->file), t->name, STRATA_TENSOR_NAME_MAX - 1);
			goto fail;
		}
	}
	m->fp8_block[0] = hc.fp8_block[0];
	m->fp8_block[1] = hc.fp8_block[1];
	for (uint64_t k = 0; k < total * STRATA_MAT_COUNT + m->n_nonrouted; k++) {
		const struct strata_safetensors_tensor *t =
			k < total * STRATA_MAT_COUNT ? m->experts[k] : m->nonrouted[k - total * STRATA_MAT_COUNT];
		if ((rc = check_fp8_scale(m, t, err)))
			goto fail;
	}
	/* shared experts (DeepSeek): counted in nonrouted_params, sized for the spec */
	if (nm->shared_infix) {
		char sname[160];
		snprintf(sname, sizeof(sname), "model.layers.%u.%sgate_proj.weight", lo, nm->shared_infix);
		const struct strata_safetensors_tensor *t = strata_safetensors_find(st, sname);
		if (t && t->ndim == 2) {
			s->n_shared = hc.n_shared > 0 ? (uint32_t)hc.n_shared : 1;
			s->shared_inter = (uint32_t)(t->shape[0] / s->n_shared);
		}
	}
	/* experts per token: --top-k, else config.json, else the naming's
	 * default; a value outside 1..experts is refused, never clamped */
	if (!opt->top_k && (hc.top_k == -2 || hc.top_k == 0 || hc.top_k > (int64_t)s->n_experts)) {
		rc = STRATA_ERR(err, STRATA_EINVAL, "%s: config.json: num_experts_per_tok is %s%lld, not a whole "
				"number in 1..%u (the experts per layer); --top-k overrides it", where,
				hc.top_k == -2 ? "not a non-negative integer: " : "",
				(long long)(hc.top_k == -2 ? 0 : hc.top_k), s->n_experts);
		goto fail;
	}
	s->top_k = opt->top_k ? opt->top_k : hc.top_k > 0 ? (uint32_t)hc.top_k : nm->default_top_k;
	if (s->top_k > s->n_experts) {
		rc = STRATA_ERR(err, STRATA_EINVAL, "%s: %s %u is out of range: 1..%u (the experts per layer)", where,
				opt->top_k ? "--top-k" : "the naming's default top-k", s->top_k, s->n_experts);
		goto fail;
	}
	/* every MoE layer needs its router: "model.layers.{L}.<infix without experts.>gate.weight" */
	for (uint32_t l = s->first_moe_layer; l < s->first_moe_layer + s->n_moe_layers; l++) {
		char gname[200];
		size_t il = strlen(nm->experts_infix) - strlen("experts.");
		snprintf(gname, sizeof(gname), "model.layers.%u.%.*sgate.weight", l, (int)il, nm->experts_infix);
		const struct strata_safetensors_tensor *g = strata_safetensors_find(st, gname);
		if (!g) {
			rc = STRATA_ERR(err, STRATA_ENOTFOUND, "%s: MoE layer %u has experts but no router gate tensor "
					"'%s' (an incomplete checkpoint?)", where, l, gname);
			goto fail;
		}
		if (g->ndim != 2 || g->shape[0] != s->n_experts || g->shape[1] != s->hidden) {
			rc = STRATA_ERR(err, STRATA_ESHAPE, "%s: router gate '%s' has shape [%llu, %llu], expected "
					"[%u, %u] (experts x hidden)", where, gname, (unsigned long long)g->shape[0],
					g->ndim > 1 ? (unsigned long long)g->shape[1] : 0ull, s->n_experts, s->hidden);
			goto fail;
		}
	}
	if ((rc = strata_model_spec_validate(s, err))) {
		strata_error_prefix(err, "%s: ", where);
		goto fail;
	}
	free(layer_of);
	free(expert_of);
	free(mat_of);
	*out = m;
	return STRATA_OK;
fail:
	free(layer_of);
	free(expert_of);
	free(mat_of);
	strata_quantize_model_close(m);
	return rc;
}

/* ---- the quantize loop -------------------------------------------------- */

/*
 * Work items ("tasks", handed out in order from one atomic counter): first
 * the non-routed tensors, one task each, then the routed experts, each cut
 * into row blocks of about QZ_TASK_PARAMS weights of one matrix, so every
 * thread stays busy to the end however few or unequal the experts are (a
 * cold expert costs ~1.5x a hot one).  The blocks of one expert land in one
 * of `n_slots` expert buffers (slot eid % n_slots); whoever finishes the
 * expert's last block writes it out, folds its statistics into the report
 * and hands the buffer, zeroed, to expert eid + n_slots.  The codes of a row
 * do not depend on which rows it is quantized with, and an expert's
 * statistics are summed block by block in block order, so the shards and the
 * report are the same at any thread count.
 */
enum { QZ_TASK_PARAMS = 32768 };

struct qz_part {          /* one task of an expert: rows [row0, row0 + nrows) of a matrix */
	uint8_t mat;
	uint32_t row0, nrows;
};

struct qz_slot {
	uint64_t eid;                 /* expert this buffer holds now (atomic; changes under the job lock) */
	uint32_t left;                /* its tasks not yet done (atomic) */
	uint8_t *packed, *copy;       /* the expert's extent, its low-bit copy */
	struct strata_quant_acc *acc; /* [n_parts]: each task's sums */
	uint32_t imx_used;            /* atomic */
};

struct qz_times {                 /* one worker's seconds, by what it was doing */
	uint64_t cpu, read, encode, write, tensors, wait, end;
};

struct qz_job {
	struct strata_quantize_model *m;
	const struct strata_quantize_config *cfg;
	struct strata_store_writer *w;
	struct strata_quantize_report *rep;
	pthread_mutex_t lock;
	pthread_cond_t freed;         /* a slot was handed to its next expert, or the job failed */
	uint64_t next;                /* next task (atomic) */
	uint64_t n_tasks, total;      /* tasks; experts */
	struct qz_part *parts;        /* [n_parts]: the tasks of every expert */
	uint32_t n_parts, n_slots;
	struct qz_slot *slots;
	volatile int failed;
	struct strata_error err;
	struct strata_progress prog;
	uint64_t done_bytes;
	size_t task_floats, packed_bytes, imx_floats;
	struct qz_times *times;       /* [threads] */
};

static int fail_job(struct qz_job *j, const struct strata_error *e)
{
	pthread_mutex_lock(&j->lock);
	if (!j->failed) {
		j->failed = 1;
		j->err = *e;
	}
	pthread_cond_broadcast(&j->freed);
	pthread_mutex_unlock(&j->lock);
	return e->code;
}

static void describe_nonfinite(const float *w, uint64_t n, uint64_t cols, uint64_t row0, char *buf, size_t len)
{
	for (uint64_t i = 0; i < n; i++)
		if (!isfinite(w[i])) {
			snprintf(buf, len, "%s at [%" PRIu64 ", %" PRIu64 "]", isnan(w[i]) ? "NaN" : "Inf", row0 + i / cols,
				 i % cols);
			return;
		}
	snprintf(buf, len, "a non-finite value");
}

/* Non-routed tensor i, stored BF16 (1-D: F32) as the writer expects; chunk
 * and cap: the caller's conversion buffer, grown as needed. */
static int add_tensor(struct qz_job *j, uint32_t i, float **chunk, size_t *cap, struct strata_error *err)
{
	struct strata_quantize_model *m = j->m;
	enum { CHUNK = 1 << 20 };
	const struct strata_safetensors_tensor *t = m->nonrouted[i];
	int f32 = t->ndim <= 1, rc = 0;
	size_t bytes = (size_t)t->numel * (f32 ? 4 : 2);
	uint64_t cols = t->ndim >= 2 ? t->shape[t->ndim - 1] : t->numel;
	uint64_t rows = cols ? t->numel / cols : 0;
	uint64_t per = cols && cols < CHUNK ? CHUNK / cols : 1;
	if (!f32 && per * cols > *cap) {
		free(*chunk);
		*cap = per * cols;
		if (!(*chunk = malloc(*cap * sizeof(float)))) {
			*cap = 0;
			return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		}
	}
	void *buf = malloc(bytes ? bytes : 1);
	if (!buf)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory for tensor '%s' (%zu bytes)", t->name, bytes);
	/* by whole rows, so FP8 block scales apply per row */
	for (uint64_t r0 = 0; r0 < rows && !rc;) {
		uint64_t nr = rows - r0 < per ? rows - r0 : per;
		uint64_t done = r0 * cols, n = nr * cols;
		float *dst = f32 ? (float *)buf + done : *chunk;
		if ((rc = strata_quantize_read_rows(m, t, r0, nr, dst, err)))
			break;
		for (uint64_t k = 0; k < n; k++) {
			if (!isfinite(dst[k])) {
				rc = STRATA_ERR(err, STRATA_ECORRUPT,
						"%s: tensor '%s': %s at element %" PRIu64 " (row %" PRIu64
						"): weights must be finite",
						strata_safetensors_file_path(m->st, t->file), t->name, isnan(dst[k]) ? "NaN" : "Inf",
						done + k, (done + k) / cols);
				break;
			}
			if (!f32)
				((uint16_t *)buf)[done + k] = strata_f32_to_bf16(dst[k]);
		}
		r0 += nr;
	}
	if (!rc)
		rc = strata_store_writer_add_tensor(j->w, t->name, buf, bytes, err);
	free(buf);
	if (!rc) {
		pthread_mutex_lock(&j->lock);
		j->rep->tensors++;
		j->rep->tensor_params += t->numel;
		j->rep->tensor_bytes += bytes;
		j->rep->in_bytes += t->bytes;
		j->done_bytes += t->bytes;
		strata_progress_update(&j->prog, j->done_bytes);
		pthread_mutex_unlock(&j->lock);
	}
	return rc;
}

/* The expert in slot sl is complete: write it, fold its statistics into the
 * report, zero the buffers and hand them to expert eid + n_slots. */
static int finish_expert(struct qz_job *j, struct qz_slot *sl, uint64_t eid, struct qz_times *tm,
			 struct strata_error *e)
{
	const struct strata_model_spec *s = &j->m->spec;
	uint32_t layer = (uint32_t)(eid / s->n_experts), ex = (uint32_t)(eid % s->n_experts);
	int tier = j->cfg->tiers[eid];
	struct strata_expert_layout lay, cl;
	strata_expert_layout(strata_tier_fmts_or_default(j->cfg->tier_fmt)[tier], s->hidden, s->inter, &lay);
	bool cp = strata_store_writer_has_copy(j->w, layer, ex) &&
		  !strata_expert_layout(STRATA_FMT_COLD, s->hidden, s->inter, &cl);
	struct strata_quantize_tier_stats local = { .cos_min = 2 };
	uint64_t in_bytes = 0;
	for (int mat = 0; mat < STRATA_MAT_COUNT; mat++) {
		struct strata_quant_acc a = { 0 };
		for (uint32_t k = 0; k < j->n_parts; k++)
			if (j->parts[k].mat == mat) {
				a.dot += sl->acc[k].dot;
				a.nw += sl->acc[k].nw;
				a.nq += sl->acc[k].nq;
				a.nd += sl->acc[k].nd;
			}
		struct strata_quant_stats qs;
		strata_quant_acc_stats(&a, &qs);
		local.matrices++;
		local.cos_sum += qs.cosine;
		local.rmse_sum += qs.rel_rmse;
		if (qs.cosine < local.cos_min)
			local.cos_min = qs.cosine;
		in_bytes += j->m->experts[eid * STRATA_MAT_COUNT + mat]->bytes;
	}
	uint64_t t0 = strata_now_ns();
	/* safe from several threads (planned offsets, pwrite); the buffer is
	 * 4 KiB aligned and at least lay.bytes long, so the writer may use
	 * O_DIRECT */
	int rc = strata_store_writer_add_expert_aligned(j->w, layer, ex, sl->packed, j->packed_bytes, e);
	if (!rc && cp)
		rc = strata_store_writer_add_copy(j->w, layer, ex, sl->copy, cl.payload, e);
	memset(sl->packed, 0, j->packed_bytes);
	if (sl->copy)
		memset(sl->copy, 0, j->packed_bytes);
	memset(sl->acc, 0, j->n_parts * sizeof(*sl->acc));
	uint32_t imx_used = __atomic_load_n(&sl->imx_used, __ATOMIC_RELAXED);
	sl->imx_used = 0;
	__atomic_store_n(&sl->left, j->n_parts, __ATOMIC_RELAXED);
	tm->write += strata_now_ns() - t0;
	pthread_mutex_lock(&j->lock);
	if (!j->failed && !rc) {
		struct strata_quantize_tier_stats *ts = &j->rep->tier[tier];
		ts->experts++;
		ts->matrices += local.matrices;
		ts->cos_sum += local.cos_sum;
		ts->rmse_sum += local.rmse_sum;
		if (local.cos_min < ts->cos_min)
			ts->cos_min = local.cos_min;
		ts->params += strata_model_expert_params(s);
		ts->payload += lay.payload;
		ts->bytes += lay.bytes;
		j->rep->imatrix_used += imx_used;
		j->rep->in_bytes += in_bytes;
		j->done_bytes += in_bytes;
		strata_progress_update(&j->prog, j->done_bytes);
	}
	__atomic_store_n(&sl->eid, eid + j->n_slots, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&j->freed);
	pthread_mutex_unlock(&j->lock);
	return rc;
}

/* Task k of expert eid: read its rows, quantize them into the slot (and the
 * low-bit copy); the last task of the expert finishes it. */
static int run_part(struct qz_job *j, uint64_t eid, uint32_t k, float *w, float *imx, struct qz_times *tm,
		    struct strata_error *e)
{
	struct strata_quantize_model *m = j->m;
	const struct strata_model_spec *s = &m->spec;
	struct qz_slot *sl = &j->slots[eid % j->n_slots];
	if (__atomic_load_n(&sl->eid, __ATOMIC_ACQUIRE) != eid) {
		/* the expert n_slots before this one still has blocks in flight */
		uint64_t t0 = strata_now_ns();
		pthread_mutex_lock(&j->lock);
		while (__atomic_load_n(&sl->eid, __ATOMIC_ACQUIRE) != eid && !j->failed)
			pthread_cond_wait(&j->freed, &j->lock);
		pthread_mutex_unlock(&j->lock);
		tm->wait += strata_now_ns() - t0;
		if (j->failed)
			return STRATA_EIO;
	}
	const struct qz_part *p = &j->parts[k];
	uint32_t layer = (uint32_t)(eid / s->n_experts), ex = (uint32_t)(eid % s->n_experts);
	int fmt = strata_tier_fmts_or_default(j->cfg->tier_fmt)[j->cfg->tiers[eid]];
	struct strata_expert_layout lay, cl;
	if (strata_expert_layout(fmt, s->hidden, s->inter, &lay))
		return STRATA_ERR(e, STRATA_EINVAL, "no layout for format %d", fmt);
	bool cp = strata_store_writer_has_copy(j->w, layer, ex) &&
		  !strata_expert_layout(STRATA_FMT_COLD, s->hidden, s->inter, &cl);
	const struct strata_matrix_layout *ml = p->mat == 0 ? &lay.gate : p->mat == 1 ? &lay.up : &lay.down;
	uint64_t off = p->mat == 0 ? lay.gate_off : p->mat == 1 ? lay.up_off : lay.down_off;
	const struct strata_safetensors_tensor *t = m->experts[eid * STRATA_MAT_COUNT + p->mat];
	uint32_t rows = ml->rows, cols = ml->cols;
	uint64_t t0 = strata_now_ns();
	int rc = strata_quantize_read_rows(m, t, p->row0, p->nrows, w, e);
	bool have = false;
	if (!rc && j->cfg->imatrix)
		rc = strata_imatrix_get(j->cfg->imatrix, layer, ex, p->mat, imx, &have, e);
	uint64_t t1 = strata_now_ns();
	tm->read += t1 - t0;
	if (rc)
		return rc;
	if (have && p->row0 == 0)
		__atomic_fetch_add(&sl->imx_used, 1, __ATOMIC_RELAXED);
	int q = strata_quantize_matrix_rows(fmt, w, p->row0, p->nrows, rows, cols, have ? imx : NULL, sl->packed + off,
					    ml->bytes, &sl->acc[k]);
	if (q == -1) {
		char what[96];
		describe_nonfinite(w, (uint64_t)p->nrows * cols, cols, p->row0, what, sizeof(what));
		rc = STRATA_ERR(e, STRATA_ECORRUPT, "%s: tensor '%s': %s: weights must be finite",
				strata_safetensors_file_path(m->st, t->file), t->name, what);
	} else if (q) {
		rc = STRATA_ERR(e, STRATA_EUNSUPPORTED, "tensor '%s': quantizing a %ux%u matrix to format %s failed (%d)",
				t->name, rows, cols, strata_fmt_traits(fmt) ? strata_fmt_traits(fmt)->name : "?", q);
	} else if (cp) {
		const struct strata_matrix_layout *cm = p->mat == 0 ? &cl.gate : p->mat == 1 ? &cl.up : &cl.down;
		uint64_t co = p->mat == 0 ? cl.gate_off : p->mat == 1 ? cl.up_off : cl.down_off;
		if (strata_quantize_matrix_rows(STRATA_FMT_COLD, w, p->row0, p->nrows, rows, cols, have ? imx : NULL,
						sl->copy + co, cm->bytes, NULL))
			rc = STRATA_ERR(e, STRATA_EUNSUPPORTED, "tensor '%s': its %ux%u low-bit copy (format %s) failed",
					t->name, rows, cols, strata_fmt_traits(STRATA_FMT_COLD)->name);
	}
	tm->encode += strata_now_ns() - t1;
	if (rc)
		return rc;
	if (__atomic_sub_fetch(&sl->left, 1, __ATOMIC_ACQ_REL) == 0)
		rc = finish_expert(j, sl, eid, tm, e);
	return rc;
}

struct qz_worker_arg {
	struct qz_job *j;
	uint32_t index;
};

static void *qz_worker(void *arg)
{
	struct qz_worker_arg *a = arg;
	struct qz_job *j = a->j;
	struct qz_times *tm = &j->times[a->index];
	uint64_t c0 = strata_thread_cpu_ns();
	struct strata_error e = { 0 };
	float *w = malloc(j->task_floats * sizeof(float));
	float *imx = malloc(j->imx_floats * sizeof(float));
	float *chunk = NULL;
	size_t chunk_cap = 0;
	if (!w || !imx) {
		STRATA_ERR(&e, STRATA_ENOMEM, "out of memory for quantize buffers (%zu bytes)",
			   (j->task_floats + j->imx_floats) * sizeof(float));
		fail_job(j, &e);
		goto out;
	}
	for (;;) {
		uint64_t task = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
		if (task >= j->n_tasks || j->failed)
			break;
		if (strata_interrupted) {
			STRATA_ERR(&e, STRATA_EINTR, "interrupted");
			fail_job(j, &e);
			break;
		}
		int rc;
		if (task < j->m->n_nonrouted) {
			uint64_t t0 = strata_now_ns();
			rc = add_tensor(j, (uint32_t)task, &chunk, &chunk_cap, &e);
			tm->tensors += strata_now_ns() - t0;
		} else {
			task -= j->m->n_nonrouted;
			rc = run_part(j, task / j->n_parts, (uint32_t)(task % j->n_parts), w, imx, tm, &e);
		}
		if (rc) {
			fail_job(j, &e); /* keeps the first error */
			break;
		}
	}
out:
	free(w);
	free(imx);
	free(chunk);
	tm->cpu = strata_thread_cpu_ns() - c0;
	tm->end = strata_now_ns();
	return NULL;
}

/* Cut one expert into tasks of about QZ_TASK_PARAMS weights (whole rows of
 * one matrix each); returns how many (parts NULL: only count). */
static uint32_t plan_parts(const struct strata_model_spec *s, struct qz_part *parts)
{
	uint32_t n = 0;
	for (int mat = 0; mat < STRATA_MAT_COUNT; mat++) {
		uint32_t rows = mat == 2 ? s->hidden : s->inter, cols = mat == 2 ? s->inter : s->hidden;
		uint32_t per = cols >= QZ_TASK_PARAMS ? 1 : QZ_TASK_PARAMS / cols;
		for (uint32_t r0 = 0; r0 < rows; r0 += per, n++)
			if (parts)
				parts[n] = (struct qz_part){ .mat = (uint8_t)mat, .row0 = r0,
							     .nrows = rows - r0 < per ? rows - r0 : per };
	}
	return n;
}

int strata_quantize_run(struct strata_quantize_model *m, const struct strata_quantize_config *cfg,
			struct strata_quantize_report *rep, struct strata_error *err)
{
	const struct strata_model_spec *s = &m->spec;
	uint64_t t0 = strata_now_ns();
	memset(rep, 0, sizeof(*rep));
	rep->spec = *s;
	snprintf(rep->naming, sizeof(rep->naming), "%s", m->naming->name);
	rep->skipped = m->n_skipped;
	uint64_t total = strata_model_total_experts(s);
	if (!cfg->tiers)
		return STRATA_ERR(err, STRATA_EINVAL, "quantize: no tier table");
	for (uint64_t i = 0; i < total; i++)
		if (cfg->tiers[i] >= STRATA_TIER_COUNT)
			return STRATA_ERR(err, STRATA_EINVAL, "quantize: tier %u for expert %" PRIu64, cfg->tiers[i], i);
	size_t packed = 0;
	const uint8_t *tf = strata_tier_fmts_or_default(cfg->tier_fmt);
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		struct strata_expert_layout lay;
		const struct strata_fmt_traits *tr = strata_fmt_traits(tf[t]);
		if (tf[t] < STRATA_FMT_HOT || !tr || strata_expert_layout(tf[t], s->hidden, s->inter, &lay))
			return STRATA_ERR(err, STRATA_EINVAL, "quantize: tier %d format %u is not a quantized format", t,
					  tf[t]);
		if (lay.bytes > packed)
			packed = lay.bytes;
		rep->tier[t].fmt = tf[t];
		rep->tier[t].bpw = tr->bpw;
		rep->tier[t].cos_min = 2;
	}
	struct strata_tensor_info *ti = calloc(m->n_nonrouted ? m->n_nonrouted : 1, sizeof(*ti));
	if (!ti)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	uint64_t in_total = 0;
	for (uint32_t i = 0; i < m->n_nonrouted; i++) {
		const struct strata_safetensors_tensor *t = m->nonrouted[i];
		snprintf(ti[i].name, sizeof(ti[i].name), "%s", t->name);
		ti[i].fmt = t->ndim <= 1 ? STRATA_FMT_F32 : STRATA_FMT_BF16;
		ti[i].ndim = t->ndim;
		for (uint32_t d = 0; d < t->ndim; d++)
			ti[i].shape[d] = t->shape[d];
		in_total += t->bytes;
	}
	for (uint64_t k = 0; k < total * STRATA_MAT_COUNT; k++)
		in_total += m->experts[k]->bytes;
	uint8_t *fmts = malloc(total ? total : 1);
	if (!fmts) {
		free(ti);
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	}
	for (uint64_t i = 0; i < total; i++)
		fmts[i] = tf[cfg->tiers[i]];
	struct strata_store_writer_config wc = {
		.dir = cfg->out, .spec = *s, .tier_table = cfg->tiers, .fmt_table = fmts,
		.shard_bytes = cfg->shard_bytes, .n_tensors = m->n_nonrouted, .tensors = ti, .force = cfg->force,
		.lowbit_copies = cfg->lowbit_copies,
	};
	struct qz_job j = { .m = m, .cfg = cfg, .rep = rep, .total = total };
	uint32_t nt = 0;
	pthread_mutex_init(&j.lock, NULL);
	pthread_cond_init(&j.freed, NULL);
	int rc = strata_store_writer_open(&wc, &j.w, err);
	free(ti);
	free(fmts);
	if (rc)
		goto done;
	uint64_t t_open = strata_now_ns();
	j.n_parts = plan_parts(s, NULL);
	j.n_tasks = m->n_nonrouted + total * j.n_parts;
	nt = cfg->threads ? cfg->threads : 1;
	if (nt > j.n_tasks)
		nt = (uint32_t)j.n_tasks;
	/* more buffers than threads: a thread seldom waits for an expert still
	 * being finished by others */
	j.n_slots = (uint32_t)(total < nt + 2 ? total : nt + 2);
	j.parts = calloc(j.n_parts, sizeof(*j.parts));
	j.slots = calloc(j.n_slots ? j.n_slots : 1, sizeof(*j.slots));
	j.times = calloc(nt, sizeof(*j.times));
	pthread_t *th = calloc(nt, sizeof(*th));
	struct qz_worker_arg *args = calloc(nt, sizeof(*args));
	rc = !j.parts || !j.slots || !j.times || !th || !args ? STRATA_ERR(err, STRATA_ENOMEM, "out of memory") : 0;
	if (!rc)
		plan_parts(s, j.parts);
	for (uint32_t k = 0; !rc && k < j.n_parts; k++) {
		size_t f = (size_t)j.parts[k].nrows * (j.parts[k].mat == 2 ? s->inter : s->hidden);
		if (f > j.task_floats)
			j.task_floats = f;
	}
	j.imx_floats = s->hidden > s->inter ? s->hidden : s->inter;
	j.packed_bytes = packed;
	for (uint32_t i = 0; !rc && i < j.n_slots; i++) {
		struct qz_slot *sl = &j.slots[i];
		sl->eid = i;
		sl->left = j.n_parts;
		sl->packed = strata_aligned_alloc(STRATA_EXTENT_ALIGN, packed);
		sl->copy = cfg->lowbit_copies ? strata_aligned_alloc(STRATA_EXTENT_ALIGN, packed) : NULL;
		sl->acc = calloc(j.n_parts, sizeof(*sl->acc));
		if (!sl->packed || (cfg->lowbit_copies && !sl->copy) || !sl->acc) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "out of memory for quantize buffers (%u x %zu bytes)",
					j.n_slots, packed);
			break;
		}
		memset(sl->packed, 0, packed);
		if (sl->copy)
			memset(sl->copy, 0, packed);
	}
	rep->threads = nt;
	rep->buffer_bytes = (uint64_t)nt * (j.task_floats * 4 + j.imx_floats * 4) +
			    (uint64_t)j.n_slots * packed * (cfg->lowbit_copies ? 2 : 1);
	strata_progress_start(&j.prog, "quantize", in_total, "B");
	if (!cfg->progress)
		j.prog.enabled = 0;
	if (!rc) {
		/* the non-routed tensors are the first tasks: a bad one fails
		 * before hours of expert quantization */
		uint32_t started = 0;
		for (uint32_t i = 0; i < nt; i++)
			args[i] = (struct qz_worker_arg){ .j = &j, .index = i };
		for (uint32_t i = 1; i < nt; i++) {
			if (pthread_create(&th[i], NULL, qz_worker, &args[i]))
				break;
			started = i;
		}
		qz_worker(&args[0]);
		for (uint32_t i = 1; i <= started; i++)
			pthread_join(th[i], NULL);
		for (uint32_t i = started + 1; i < nt; i++) /* never ran */
			j.times[i].end = j.times[0].end;
		if (j.failed) {
			*err = j.err;
			rc = j.err.code ? j.err.code : STRATA_EIO;
		}
	}
	uint64_t t_work = strata_now_ns();
	if (!rc)
		rc = strata_store_writer_finish(j.w, err);
	if (rc)
		strata_store_writer_abort(j.w); /* removes every .tmp shard; frees */
	else
		strata_store_writer_free(j.w);
	strata_progress_finish(&j.prog);
	uint64_t t_end = strata_now_ns();
	if (!rc) {
		struct strata_quantize_times *q = &rep->time;
		uint64_t last = 0;
		for (uint32_t i = 0; i < nt; i++)
			last = j.times[i].end > last ? j.times[i].end : last;
		for (uint32_t i = 0; i < nt; i++) {
			const struct qz_times *x = &j.times[i];
			q->cpu += x->cpu / 1e9;
			q->read += x->read / 1e9;
			q->encode += x->encode / 1e9;
			q->write += x->write / 1e9;
			q->tensors += x->tensors / 1e9;
			q->wait += x->wait / 1e9;
			q->tail += (last - x->end) / 1e9;
		}
		q->open = (t_open - t0) / 1e9;
		q->work = (t_work - t_open) / 1e9;
		q->finish = (t_end - t_work) / 1e9;
	}
	for (uint32_t i = 0; j.slots && i < j.n_slots; i++) {
		free(j.slots[i].packed);
		free(j.slots[i].copy);
		free(j.slots[i].acc);
	}
	free(j.slots);
	free(j.parts);
	free(j.times);
	free(th);
	free(args);
done:
	pthread_cond_destroy(&j.freed);
	pthread_mutex_destroy(&j.lock);
	if (rc)
		return rc;
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		if (!rep->tier[t].matrices)
			rep->tier[t].cos_min = 0;
		rep->out_bytes += rep->tier[t].bytes;
	}
	rep->out_bytes += rep->tensor_bytes;
	rep->routed_bf16_bytes = total * strata_model_expert_params(s) * 2;
	rep->bf16_bytes = rep->routed_bf16_bytes + s->nonrouted_params * 2;
	rep->seconds = (double)(strata_now_ns() - t0) / 1e9;
	rep->time.busy_share = rep->seconds > 0 && nt ? rep->time.cpu / (rep->seconds * nt) : 0;
	return STRATA_OK;
}

int strata_quantize_plan(struct strata_quantize_model *m, const uint8_t *tiers, const uint8_t *tier_fmt,
			 struct strata_quantize_report *rep, struct strata_error *err)
{
	const struct strata_model_spec *s = &m->spec;
	memset(rep, 0, sizeof(*rep));
	rep->spec = *s;
	snprintf(rep->naming, sizeof(rep->naming), "%s", m->naming->name);
	rep->skipped = m->n_skipped;
	uint64_t total = strata_model_total_experts(s);
	struct strata_expert_layout lay[STRATA_TIER_COUNT];
	const uint8_t *tf = strata_tier_fmts_or_default(tier_fmt);
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		const struct strata_fmt_traits *tr = strata_fmt_traits(tf[t]);
		if (tf[t] < STRATA_FMT_HOT || !tr || strata_expert_layout(tf[t], s->hidden, s->inter, &lay[t]))
			return STRATA_ERR(err, STRATA_EINVAL, "quantize: tier %d format %u is not a quantized format", t,
					  tf[t]);
		rep->tier[t].fmt = tf[t];
		rep->tier[t].bpw = tr->bpw;
	}
	for (uint64_t i = 0; i < total; i++) {
		if (tiers[i] >= STRATA_TIER_COUNT)
			return STRATA_ERR(err, STRATA_EINVAL, "quantize: tier %u for expert %" PRIu64, tiers[i], i);
		struct strata_quantize_tier_stats *x = &rep->tier[tiers[i]];
		x->experts++;
		x->params += strata_model_expert_params(s);
		x->payload += lay[tiers[i]].payload;
		x->bytes += lay[tiers[i]].bytes;
		rep->out_bytes += lay[tiers[i]].bytes;
	}
	for (uint64_t k = 0; k < total * STRATA_MAT_COUNT; k++)
		rep->in_bytes += m->experts[k]->bytes;
	for (uint32_t i = 0; i < m->n_nonrouted; i++) {
		const struct strata_safetensors_tensor *t = m->nonrouted[i];
		rep->tensors++;
		rep->tensor_params += t->numel;
		rep->tensor_bytes += t->numel * (t->ndim <= 1 ? 4 : 2);
		rep->in_bytes += t->bytes;
	}
	rep->out_bytes += rep->tensor_bytes;
	rep->routed_bf16_bytes = total * strata_model_expert_params(s) * 2;
	rep->bf16_bytes = rep->routed_bf16_bytes + s->nonrouted_params * 2;
	return STRATA_OK;
}
