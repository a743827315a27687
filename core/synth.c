/*
 * Synthetic models (see include/strata/synth.h): inverse-CDF sampling tables,
 * per-matrix xoshiro256++ streams, expert packing in any format, the tier
 * table, the representative non-routed tensors, and the threaded writer.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant.h"
#include "strata/synth.h"
#include "strata/tier_assign.h"
#include "strata/util.h"

#define NBINS 65536u
#define POOL_ROWS 4u
#define POOL_COLS 4096u
#define POOL_BLOCKS (POOL_ROWS * POOL_COLS / STRATA_QK) /* 64: six random bits pick a block */

/* Uniform in (0, 1]. */
static inline double rng_open01(struct strata_xoshiro *r) { return ((strata_xoshiro256pp(r) >> 11) + 1) * 0x1.0p-53; }

struct pool {
	int ok;
	uint32_t code_bytes, scale_bytes;
	uint8_t *codes, *scales; /* POOL_BLOCKS blocks each */
};

struct strata_synth {
	struct strata_synth_config cfg;
	float tab[NBINS];   /* unit-variance quantiles at bin midpoints; [0] and [NBINS-1] unused */
	double edge;        /* |x| where the extreme bins start (unit-variance units / tscale) */
	double tscale;      /* 1, or sqrt((dof-2)/dof) for Student-t */
	struct pool pool[STRATA_FMT_COUNT];
	/* BF16 fast path: for matrices with `cols` inputs, tb[k][0] holds
	 * bf16(tab[i] * base) and tb[k][1] bf16(tab[i] * base * outlier_scale),
	 * k = 0 for cols = hidden, 1 for cols = inter. */
	uint32_t tb_cols[2];
	uint16_t (*tb[2])[NBINS];
};

/* ---- tables ----------------------------------------------------------- */

static double pdf(const struct strata_synth *g, double x, double c)
{
	if (g->cfg.dist == STRATA_SYNTH_GAUSSIAN)
		return c * exp(-0.5 * x * x);
	double v = g->cfg.dof;
	return c * pow(1.0 + x * x / v, -0.5 * (v + 1.0));
}

/* Walk x upward from 0, integrating the density (Simpson, relative steps)
 * and recording where the mass from 0 crosses each bin midpoint. */
static int build_table(struct strata_synth *g)
{
	double v = g->cfg.dof, c;
	if (g->cfg.dist == STRATA_SYNTH_GAUSSIAN)
		c = 1.0 / sqrt(2.0 * M_PI);
	else
		c = exp(lgamma(0.5 * (v + 1.0)) - lgamma(0.5 * v)) / sqrt(v * M_PI);
	g->tscale = g->cfg.dist == STRATA_SYNTH_GAUSSIAN ? 1.0 : sqrt((v - 2.0) / v);
	uint32_t j = NBINS / 2;
	double target = (j + 0.5) / NBINS - 0.5, edge_mass = 0.5 - 1.0 / NBINS;
	double x = 0, F = 0, fx = pdf(g, 0, c);
	while (x < 1e7) {
		double h = 1e-3 * (1.0 + x), fm = pdf(g, x + 0.5 * h, c), fh = pdf(g, x + h, c);
		double dm = h / 6.0 * (fx + 4.0 * fm + fh);
		while (j < NBINS - 1 && target < F + dm) {
			double q = x + h * (target - F) / dm;
			g->tab[j] = (float)(q * g->tscale);
			g->tab[NBINS - 1 - j] = -g->tab[j];
			j++;
			target = (j + 0.5) / NBINS - 0.5;
		}
		if (j == NBINS - 1 && edge_mass < F + dm) {
			g->edge = x + h * (edge_mass - F) / dm;
			return 0;
		}
		x += h;
		F += dm;
		fx = fh;
	}
	return -1;
}

/* A sample beyond the edge (positive), unit variance. */
static double tail_sample(const struct strata_synth *g, struct strata_xoshiro *r)
{
	double a = g->edge;
	if (g->cfg.dist == STRATA_SYNTH_GAUSSIAN) {
		for (;;) { /* Marsaglia (1964): exact normal tail beyond a */
			double x = -log(rng_open01(r)) / a, y = -log(rng_open01(r));
			if (2.0 * y >= x * x)
				return a + x;
		}
	}
	return a * pow(rng_open01(r), -1.0 / g->cfg.dof) * g->tscale;
}

static inline int is_tail(uint32_t i) { return ((i + 1) & 0xffffu) <= 1; } /* bin 0 or 65535 */

/* Value of bin i: the table, or a fresh tail sample for the extreme bins. */
static inline float bin_value(const struct strata_synth *g, struct strata_xoshiro *r, uint32_t i)
{
	if (!is_tail(i))
		return g->tab[i];
	return (float)(i ? tail_sample(g, r) : -tail_sample(g, r));
}

/* n unit-variance samples; each 64-bit draw gives four (16 bits each). */
static void gen_row(const struct strata_synth *g, struct strata_xoshiro *r, float *row, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += 4) {
		uint64_t x = strata_xoshiro256pp(r);
		for (uint32_t k = 0; k < 4 && i + k < n; k++)
			row[i + k] = bin_value(g, r, (uint32_t)(x >> (48 - 16 * k)) & 0xffffu);
	}
}

/* Per-column scale of a matrix whose input has `cols` columns: std/sqrt(cols),
 * times outlier_scale on the layer's outlier columns. */
static void col_scales(const struct strata_synth *g, uint32_t layer, uint32_t cols, float *sc)
{
	float base = 1.0f / sqrtf((float)cols);
	for (uint32_t c = 0; c < cols; c++)
		sc[c] = base;
	double frac = g->cfg.outlier_frac;
	if (frac <= 0)
		return;
	uint32_t n = (uint32_t)floor(frac * cols + 0.5);
	if (n < 1)
		n = 1;
	struct strata_xoshiro r;
	strata_xoshiro_seed_stream(&r, g->cfg.seed, STRATA_STREAM_OUTLIER, layer, cols, 0);
	/* partial Fisher-Yates over column ids, without an index array: pick n
	 * distinct columns by rejection (n is a small fraction of cols) */
	for (uint32_t k = 0; k < n;) {
		uint32_t c = (uint32_t)(((strata_xoshiro256pp(&r) >> 32) * cols) >> 32);
		if (sc[c] != base)
			continue;
		sc[c] = base * (float)g->cfg.outlier_scale;
		k++;
	}
}

static void matrix_shape(const struct strata_model_spec *s, int which, uint32_t *rows, uint32_t *cols)
{
	*rows = which == STRATA_SYNTH_DOWN ? s->hidden : s->inter;
	*cols = which == STRATA_SYNTH_DOWN ? s->inter : s->hidden;
}

/* Generate a rows x cols matrix from stream r into either f32 or bf16 rows. */
static void gen_matrix(const struct strata_synth *g, struct strata_xoshiro *r, const float *sc, uint32_t rows, uint32_t cols,
		       float *f32, uint16_t *bf16, float *row)
{
	for (uint32_t i = 0; i < rows; i++) {
		float *o = f32 ? f32 + (uint64_t)i * cols : row;
		gen_row(g, r, o, cols);
		for (uint32_t c = 0; c < cols; c++)
			o[c] *= sc[c];
		if (bf16) {
			uint16_t *b = bf16 + (uint64_t)i * cols;
			for (uint32_t c = 0; c < cols; c++)
				b[c] = strata_f32_to_bf16(o[c]);
		}
	}
}

/* The BF16 fast path: one table load per weight, no float pass.  Gives the
 * same bits as gen_matrix (same stream, same float products rounded once). */
static void gen_matrix_bf16(const struct strata_synth *g, struct strata_xoshiro *r, const float *sc, const uint16_t *tbl,
			    const uint8_t *isout, uint32_t rows, uint32_t cols, uint16_t *out)
{
	/* the stream lives in registers; it goes back to *r around the (rare)
	 * tail samples, which draw from the same stream */
	struct strata_xoshiro st = *r;
	for (uint32_t i = 0; i < rows; i++) {
		uint16_t *o = out + (uint64_t)i * cols;
		for (uint32_t c = 0; c < cols; c += 4) {
			uint64_t x = strata_xoshiro256pp(&st);
			uint32_t q[4] = { (uint32_t)(x >> 48), (uint32_t)(x >> 32) & 0xffffu,
					  (uint32_t)(x >> 16) & 0xffffu, (uint32_t)x & 0xffffu };
			if (__builtin_expect(is_tail(q[0]) | is_tail(q[1]) | is_tail(q[2]) | is_tail(q[3]) ||
					     c + 4 > cols, 0)) {
				*r = st;
				for (uint32_t k = 0; k < 4 && c + k < cols; k++)
					o[c + k] = strata_f32_to_bf16(bin_value(g, r, q[k]) * sc[c + k]);
				st = *r;
				continue;
			}
			o[c] = tbl[(uint32_t)isout[c] << 16 | q[0]];
			o[c + 1] = tbl[(uint32_t)isout[c + 1] << 16 | q[1]];
			o[c + 2] = tbl[(uint32_t)isout[c + 2] << 16 | q[2]];
			o[c + 3] = tbl[(uint32_t)isout[c + 3] << 16 | q[3]];
		}
	}
	*r = st;
}

static void build_bf16_tables(struct strata_synth *g)
{
	const struct strata_model_spec *s = &g->cfg.spec;
	g->tb_cols[0] = s->hidden;
	g->tb_cols[1] = s->inter;
	for (int k = 0; k < 2; k++) {
		float base = 1.0f / sqrtf((float)g->tb_cols[k]), out = base * (float)g->cfg.outlier_scale;
		for (uint32_t i = 0; i < NBINS; i++) {
			g->tb[k][0][i] = strata_f32_to_bf16(g->tab[i] * base);
			g->tb[k][1][i] = strata_f32_to_bf16(g->tab[i] * out);
		}
	}
}

int strata_synth_matrix(const struct strata_synth *g, uint32_t layer, uint32_t e, int which, float *out)
{
	const struct strata_model_spec *s = &g->cfg.spec;
	uint32_t rows, cols;
	if (layer >= s->n_moe_layers || e >= s->n_experts || which < 0 || which > 2)
		return STRATA_EINVAL;
	matrix_shape(s, which, &rows, &cols);
	float *sc = malloc(cols * sizeof(float));
	if (!sc)
		return STRATA_ENOMEM;
	col_scales(g, layer, cols, sc);
	struct strata_xoshiro r;
	strata_xoshiro_seed_stream(&r, g->cfg.seed, STRATA_STREAM_EXPERT, layer, e, (uint64_t)which);
	gen_matrix(g, &r, sc, rows, cols, out, NULL, NULL);
	free(sc);
	return STRATA_OK;
}

/* Zero the alignment gaps inside a packed matrix and after it (up to next). */
static void zero_gaps(uint8_t *m, const struct strata_matrix_layout *L, uint64_t next)
{
	memset(m + L->codes_bytes, 0, L->scales_off - L->codes_bytes);
	memset(m + L->scales_off + L->scales_bytes, 0, next - (L->scales_off + L->scales_bytes));
}

static void fill_random_blocks(const struct pool *p, struct strata_xoshiro *r, const struct strata_matrix_layout *L,
			       uint8_t *m)
{
	uint64_t nblocks = (uint64_t)L->rows * (L->padded_cols / STRATA_QK);
	uint8_t *codes = m + L->codes_off, *scales = m + L->scales_off;
	uint64_t bits = 0;
	for (uint64_t b = 0; b < nblocks; b++) {
		if (b % 10 == 0)
			bits = strata_xoshiro256pp(r);
		uint32_t k = (uint32_t)(bits & (POOL_BLOCKS - 1));
		bits >>= 6;
		memcpy(codes + b * p->code_bytes, p->codes + (uint64_t)k * p->code_bytes, p->code_bytes);
		memcpy(scales + b * p->scale_bytes, p->scales + (uint64_t)k * p->scale_bytes, p->scale_bytes);
	}
}

int strata_synth_expert(const struct strata_synth *g, uint32_t layer, uint32_t e, int fmt, void *dst,
			size_t dst_bytes, float *scratch, struct strata_error *err)
{
	const struct strata_model_spec *s = &g->cfg.spec;
	struct strata_expert_layout E;
	if (layer >= s->n_moe_layers || e >= s->n_experts)
		return STRATA_ERR(err, STRATA_EINVAL, "synth: expert (layer %u, expert %u) outside the model", layer, e);
	if (strata_expert_layout(fmt, s->hidden, s->inter, &E))
		return STRATA_ERR(err, STRATA_EINVAL, "synth: no layout for format %d", fmt);
	if (dst_bytes < E.payload)
		return STRATA_ERR(err, STRATA_EINVAL, "synth: buffer of %zu bytes, expert needs %" PRIu64, dst_bytes,
				  E.payload);
	const struct strata_matrix_layout *M[3] = { &E.gate, &E.up, &E.down };
	const uint64_t off[3] = { E.gate_off, E.up_off, E.down_off };
	const uint64_t next[3] = { E.up_off - E.gate_off, E.down_off - E.up_off, E.payload - E.down_off };
	uint32_t maxc = s->hidden > s->inter ? s->hidden : s->inter;
	float *sc = malloc(maxc * sizeof(float)), *row = malloc((maxc + 1) * sizeof(float));
	float *own = NULL;
	int rc = STRATA_OK, quant = fmt >= STRATA_FMT_HOT;
	if (!sc || !row) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "synth: out of memory");
		goto out;
	}
	if (quant && g->cfg.codes == STRATA_SYNTH_CODES_QUANTIZE && !scratch) {
		own = malloc((uint64_t)s->hidden * s->inter * sizeof(float));
		if (!own) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "synth: out of memory");
			goto out;
		}
		scratch = own;
	}
	for (int w = 0; w < 3; w++) {
		uint32_t rows, cols;
		matrix_shape(s, w, &rows, &cols);
		uint8_t *m = (uint8_t *)dst + off[w];
		struct strata_xoshiro r;
		strata_xoshiro_seed_stream(&r, g->cfg.seed, STRATA_STREAM_EXPERT, layer, e, (uint64_t)w);
		if (quant && g->cfg.codes == STRATA_SYNTH_CODES_RANDOM) {
			if (!g->pool[fmt].ok) {
				rc = STRATA_ERR(err, STRATA_EUNSUPPORTED, "synth: format %s has no quantizer in this build",
						strata_fmt_traits(fmt)->name);
				goto out;
			}
			fill_random_blocks(&g->pool[fmt], &r, M[w], m);
			zero_gaps(m, M[w], next[w]);
			continue;
		}
		col_scales(g, layer, cols, sc);
		if (quant) {
			gen_matrix(g, &r, sc, rows, cols, scratch, NULL, NULL);
			int q = strata_quantize_matrix(fmt, scratch, rows, cols, NULL, m, M[w]->bytes, NULL);
			if (q) {
				rc = STRATA_ERR(err, q == -2 ? STRATA_EUNSUPPORTED : STRATA_EINVAL,
						"synth: quantizing to format %s failed (%s)", strata_fmt_traits(fmt)->name,
						q == -2 ? "no quantizer for it in this build" : "non-finite weights");
				goto out;
			}
		} else if (fmt == STRATA_FMT_BF16 && g->tb[0]) {
			float base = 1.0f / sqrtf((float)cols);
			uint8_t *isout = (uint8_t *)row; /* row has room for cols + 1 floats */
			for (uint32_t c = 0; c < cols; c++)
				isout[c] = sc[c] != base;
			gen_matrix_bf16(g, &r, sc, g->tb[cols == g->tb_cols[0] ? 0 : 1][0], isout, rows, cols,
					(uint16_t *)m);
		} else if (fmt == STRATA_FMT_BF16) {
			gen_matrix(g, &r, sc, rows, cols, NULL, (uint16_t *)m, row);
		} else {
			gen_matrix(g, &r, sc, rows, cols, (float *)m, NULL, NULL);
		}
		zero_gaps(m, M[w], next[w]);
	}
out:
	free(sc);
	free(row);
	free(own);
	return rc;
}

/* ---- tiers ------------------------------------------------------------ */

/* Tiers ranked by a measured popularity (trace or counts file) with the
 * configured split, through the same rule `strata quantize` uses. */
static int synth_tiers_from_popularity(const struct strata_synth_config *c, uint8_t *tiers,
				       struct strata_error *err)
{
	struct strata_popularity pop = { 0 };
	const char *dot = strrchr(c->popularity, '.');
	int is_trace = dot && (!strcmp(dot, ".strace") || !strcmp(dot, ".jsonl"));
	int rc = is_trace ? strata_popularity_from_trace(c->popularity, &pop, err)
			  : strata_popularity_load(c->popularity, &pop, err);
	if (!rc)
		rc = strata_popularity_check(&pop, &c->spec, err);
	if (!rc) {
		struct strata_tier_split split;
		for (int t = 0; t < STRATA_TIER_COUNT; t++)
			split.pct[t] = 100.0 * c->tier_frac[t];
		rc = strata_tier_assign_split(&c->spec, &pop, &split, tiers, err);
	}
	if (rc)
		strata_error_prefix(err, "synth --popularity %s", c->popularity);
	strata_popularity_free(&pop);
	return rc;
}

/* ---- non-routed tensors ----------------------------------------------- */

static uint64_t name_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

static void tensor2(struct strata_tensor_info *t, const char *name, uint32_t fmt, uint64_t r, uint64_t c)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->fmt = fmt;
	t->ndim = c ? 2 : 1;
	t->shape[0] = r;
	t->shape[1] = c;
}

uint32_t strata_synth_tensors(const struct strata_model_spec *s, struct strata_tensor_info *out, uint32_t max)
{
	uint32_t n = 0;
	char name[STRATA_TENSOR_NAME_MAX];
#define ADD(nm, fmt, r, c)                                   \
	do {                                                 \
		if (out && n < max)                          \
			tensor2(&out[n], nm, fmt, r, c);     \
		n++;                                         \
	} while (0)
	ADD("token_embd.weight", STRATA_FMT_BF16, STRATA_SYNTH_VOCAB, s->hidden);
	ADD("output_norm.weight", STRATA_FMT_F32, s->hidden, 0);
	ADD("output.weight", STRATA_FMT_BF16, STRATA_SYNTH_VOCAB, s->hidden);
	uint64_t sh = (uint64_t)s->n_shared * s->shared_inter;
	for (uint32_t l = 0; l < s->n_moe_layers; l++) {
		uint32_t b = s->first_moe_layer + l;
		snprintf(name, sizeof(name), "blk.%u.attn_norm.weight", b);
		ADD(name, STRATA_FMT_F32, s->hidden, 0);
		snprintf(name, sizeof(name), "blk.%u.ffn_gate_inp.weight", b);
		ADD(name, STRATA_FMT_BF16, s->n_experts, s->hidden);
		if (sh) {
			snprintf(name, sizeof(name), "blk.%u.ffn_gate_shexp.weight", b);
			ADD(name, STRATA_FMT_BF16, sh, s->hidden);
			snprintf(name, sizeof(name), "blk.%u.ffn_up_shexp.weight", b);
			ADD(name, STRATA_FMT_BF16, sh, s->hidden);
			snprintf(name, sizeof(name), "blk.%u.ffn_down_shexp.weight", b);
			ADD(name, STRATA_FMT_BF16, s->hidden, sh);
		}
	}
#undef ADD
	return n;
}

int strata_synth_tensor(const struct strata_synth *g, const struct strata_tensor_info *t, void *dst, size_t bytes,
			struct strata_error *err)
{
	uint64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
	uint64_t esz = t->fmt == STRATA_FMT_F32 ? 4 : 2;
	if ((t->ndim != 1 && t->ndim != 2) || (t->fmt != STRATA_FMT_F32 && t->fmt != STRATA_FMT_BF16) ||
	    bytes != rows * cols * esz || cols > UINT32_MAX)
		return STRATA_ERR(err, STRATA_EINVAL, "synth: tensor '%s': unsupported shape or %zu bytes", t->name,
				  bytes);
	struct strata_xoshiro r;
	strata_xoshiro_seed_stream(&r, g->cfg.seed, STRATA_STREAM_TENSOR, name_hash(t->name), 0, 0);
	if (t->ndim == 1) { /* norm weights: around 1 */
		float *row = malloc(rows * sizeof(float));
		if (!row)
			return STRATA_ERR(err, STRATA_ENOMEM, "synth: out of memory");
		gen_row(g, &r, row, (uint32_t)rows);
		for (uint64_t i = 0; i < rows; i++) {
			float v = 1.0f + 0.02f * row[i];
			if (t->fmt == STRATA_FMT_F32)
				((float *)dst)[i] = v;
			else
				((uint16_t *)dst)[i] = strata_f32_to_bf16(v);
		}
		free(row);
		return STRATA_OK;
	}
	float *sc = malloc(cols * sizeof(float)), *row = malloc((cols + 1) * sizeof(float));
	if (!sc || !row) {
		free(sc);
		free(row);
		return STRATA_ERR(err, STRATA_ENOMEM, "synth: out of memory");
	}
	for (uint64_t c = 0; c < cols; c++)
		sc[c] = 1.0f / sqrtf((float)cols);
	int k = cols == g->tb_cols[0] ? 0 : cols == g->tb_cols[1] ? 1 : -1;
	if (t->fmt == STRATA_FMT_BF16 && k >= 0 && g->tb[k]) {
		memset(row, 0, cols); /* no outlier columns in the non-routed tensors */
		gen_matrix_bf16(g, &r, sc, g->tb[k][0], (const uint8_t *)row, (uint32_t)rows, (uint32_t)cols, dst);
	} else if (t->fmt == STRATA_FMT_BF16)
		gen_matrix(g, &r, sc, (uint32_t)rows, (uint32_t)cols, NULL, dst, row);
	else
		gen_matrix(g, &r, sc, (uint32_t)rows, (uint32_t)cols, dst, NULL, NULL);
	free(sc);
	free(row);
	return STRATA_OK;
}

/* ---- set-up ----------------------------------------------------------- */

/* A pool of genuinely quantized blocks for codes=random; returns -1 only
 * when out of memory (a format without a quantizer just has no pool). */
static int build_pool(struct strata_synth *g, int fmt)
{
	const struct strata_fmt_traits *t = strata_fmt_traits(fmt);
	struct strata_matrix_layout L;
	struct pool *p = &g->pool[fmt];
	if (!t->quantize_rows || strata_matrix_layout(fmt, POOL_ROWS, POOL_COLS, &L))
		return 0;
	float *w = malloc((size_t)POOL_ROWS * POOL_COLS * sizeof(float));
	float *sc = malloc(POOL_COLS * sizeof(float));
	uint8_t *q = malloc(L.bytes);
	p->codes = malloc((size_t)POOL_BLOCKS * t->code_bytes + 1);
	p->scales = malloc((size_t)POOL_BLOCKS * t->scale_bytes + 1);
	int rc = -1;
	if (w && sc && q && p->codes && p->scales) {
		struct strata_xoshiro r;
		strata_xoshiro_seed_stream(&r, g->cfg.seed, STRATA_STREAM_POOL, (uint64_t)fmt, 0, 0);
		for (uint32_t c = 0; c < POOL_COLS; c++)
			sc[c] = 1.0f / 64.0f;
		gen_matrix(g, &r, sc, POOL_ROWS, POOL_COLS, w, NULL, NULL);
		if (!strata_quantize_matrix(fmt, w, POOL_ROWS, POOL_COLS, NULL, q, L.bytes, NULL)) {
			memcpy(p->codes, q + L.codes_off, (size_t)POOL_BLOCKS * t->code_bytes);
			memcpy(p->scales, q + L.scales_off, (size_t)POOL_BLOCKS * t->scale_bytes);
			p->code_bytes = t->code_bytes;
			p->scale_bytes = t->scale_bytes;
			p->ok = 1;
		}
		rc = 0;
	}
	free(w);
	free(sc);
	free(q);
	return rc;
}

int strata_synth_init(const struct strata_synth_config *cfg, struct strata_synth **out, struct strata_error *err)
{
	*out = NULL;
	int rc = strata_model_spec_validate(&cfg->spec, err);
	if (rc)
		return rc;
	struct strata_synth_config c = *cfg;
	if (c.dist != STRATA_SYNTH_GAUSSIAN && c.dist != STRATA_SYNTH_STUDENT_T)
		return STRATA_ERR(err, STRATA_EINVAL, "synth: unknown distribution %d", c.dist);
	if (!c.dof)
		c.dof = 5;
	if (!(c.dof > 2 && c.dof <= 1e6))
		return STRATA_ERR(err, STRATA_EINVAL, "synth: Student-t dof %g must be > 2 (finite variance)", c.dof);
	if (!(c.outlier_frac >= 0 && c.outlier_frac <= 0.5))
		return STRATA_ERR(err, STRATA_EINVAL, "synth: outlier fraction %g outside [0, 0.5]", c.outlier_frac);
	if (!c.outlier_scale)
		c.outlier_scale = 10;
	if (!(c.outlier_scale > 0 && c.outlier_scale <= 1e4))
		return STRATA_ERR(err, STRATA_EINVAL, "synth: outlier scale %g outside (0, 1e4]", c.outlier_scale);
	if (c.format != STRATA_SYNTH_BF16 && c.format != STRATA_SYNTH_TIERED)
		return STRATA_ERR(err, STRATA_EINVAL, "synth: unknown format %d", c.format);
	if (c.codes != STRATA_SYNTH_CODES_QUANTIZE && c.codes != STRATA_SYNTH_CODES_RANDOM)
		return STRATA_ERR(err, STRATA_EINVAL, "synth: unknown codes mode %d", c.codes);
	memcpy(c.tier_fmt, strata_tier_fmts_or_default(c.tier_fmt), sizeof(c.tier_fmt));
	for (int t = 0; t < STRATA_TIER_COUNT; t++)
		if (c.tier_fmt[t] < STRATA_FMT_HOT || c.tier_fmt[t] >= STRATA_FMT_COUNT)
			return STRATA_ERR(err, STRATA_EINVAL, "synth: tier %d format %u is not a quantized format", t,
					  c.tier_fmt[t]);
	double sum = c.tier_frac[0] + c.tier_frac[1] + c.tier_frac[2];
	if (sum <= 0)
		memcpy(c.tier_frac, strata_tier_frac_default, sizeof(c.tier_frac));
	else if (fabs(sum - 1) > 1e-3 || c.tier_frac[0] < 0 || c.tier_frac[1] < 0 || c.tier_frac[2] < 0)
		return STRATA_ERR(err, STRATA_EINVAL, "synth: tier fractions must be >= 0 and sum to 1");
	if (c.threads <= 0)
		c.threads = 2;
	if (c.threads > 64)
		c.threads = 64;
	struct strata_synth *g = calloc(1, sizeof(*g));
	if (!g)
		return STRATA_ERR(err, STRATA_ENOMEM, "synth: out of memory");
	g->cfg = c;
	if (build_table(g)) {
		free(g);
		return STRATA_ERR(err, STRATA_EINVAL, "synth: could not build the sampling table");
	}
	g->tb[0] = malloc(2 * sizeof(*g->tb[0]));
	g->tb[1] = malloc(2 * sizeof(*g->tb[1]));
	if (!g->tb[0] || !g->tb[1]) {
		strata_synth_free(g);
		return STRATA_ERR(err, STRATA_ENOMEM, "synth: out of memory");
	}
	build_bf16_tables(g);
	if (c.format == STRATA_SYNTH_TIERED && c.codes == STRATA_SYNTH_CODES_RANDOM)
		for (int f = STRATA_FMT_HOT; f < STRATA_FMT_COUNT; f++)
			if ((f == c.tier_fmt[0] || f == c.tier_fmt[1] || f == c.tier_fmt[2]) && build_pool(g, f)) {
				strata_synth_free(g);
				return STRATA_ERR(err, STRATA_ENOMEM, "synth: out of memory");
			}
	*out = g;
	return STRATA_OK;
}

void strata_synth_free(struct strata_synth *g)
{
	if (!g)
		return;
	for (int f = 0; f < STRATA_FMT_COUNT; f++) {
		free(g->pool[f].codes);
		free(g->pool[f].scales);
	}
	free(g->tb[0]);
	free(g->tb[1]);
	free(g);
}

const struct strata_synth_config *strata_synth_config(const struct strata_synth *g) { return &g->cfg; }

/* ---- writing ---------------------------------------------------------- */

struct job {
	const struct strata_synth *g;
	struct strata_store_writer *w;
	const uint8_t *fmts;
	const struct strata_tensor_info *tensors;
	uint32_t n_tensors, n_experts;
	size_t buf_bytes;
	atomic_uint next;
	atomic_uint_fast64_t done_bytes;
	atomic_int stop, running;
	pthread_mutex_t lock;
	int rc;
	struct strata_error err;
};

static void job_fail(struct job *j, int rc, const struct strata_error *e)
{
	pthread_mutex_lock(&j->lock);
	if (!j->rc) {
		j->rc = rc;
		j->err = *e;
	}
	pthread_mutex_unlock(&j->lock);
	atomic_store(&j->stop, 1);
}

static void *worker(void *arg)
{
	struct job *j = arg;
	const struct strata_model_spec *s = &j->g->cfg.spec;
	struct strata_error e = { 0 };
	void *buf = strata_aligned_alloc(STRATA_EXTENT_ALIGN, j->buf_bytes);
	float *scratch = NULL;
	if (j->g->cfg.format == STRATA_SYNTH_TIERED && j->g->cfg.codes == STRATA_SYNTH_CODES_QUANTIZE)
		scratch = malloc((uint64_t)s->hidden * s->inter * sizeof(float));
	if (!buf || (j->g->cfg.format == STRATA_SYNTH_TIERED && j->g->cfg.codes == STRATA_SYNTH_CODES_QUANTIZE &&
		     !scratch)) {
		job_fail(j, STRATA_ERR(&e, STRATA_ENOMEM, "synth: out of memory for a %zu-byte buffer", j->buf_bytes),
			 &e);
		goto out;
	}
	for (;;) {
		if (atomic_load(&j->stop) || strata_interrupted)
			break;
		uint32_t k = atomic_fetch_add(&j->next, 1);
		if (k >= j->n_tensors + j->n_experts)
			break;
		int rc;
		uint64_t bytes;
		if (k < j->n_tensors) {
			const struct strata_tensor_info *t = &j->tensors[k];
			bytes = t->ext.payload;
			rc = strata_synth_tensor(j->g, t, buf, bytes, &e);
			if (!rc)
				rc = strata_store_writer_add_tensor(j->w, t->name, buf, bytes, &e);
		} else {
			uint32_t eid = k - j->n_tensors, layer = eid / s->n_experts, x = eid % s->n_experts;
			struct strata_expert_layout L;
			strata_expert_layout(j->fmts[eid], s->hidden, s->inter, &L);
			bytes = L.payload;
			rc = strata_synth_expert(j->g, layer, x, j->fmts[eid], buf, j->buf_bytes, scratch, &e);
			if (!rc)
				rc = strata_store_writer_add_expert_aligned(j->w, layer, x, buf, j->buf_bytes, &e);
			if (!rc && strata_store_writer_has_copy(j->w, layer, x)) {
				/* its low-bit copy: the same weights in the cold format */
				strata_expert_layout(STRATA_FMT_COLD, s->hidden, s->inter, &L);
				bytes += L.payload;
				rc = strata_synth_expert(j->g, layer, x, STRATA_FMT_COLD, buf, j->buf_bytes, scratch, &e);
				if (!rc)
					rc = strata_store_writer_add_copy(j->w, layer, x, buf, L.payload, &e);
			}
		}
		if (rc) {
			job_fail(j, rc, &e);
			break;
		}
		atomic_fetch_add(&j->done_bytes, bytes);
	}
out:
	free(buf);
	free(scratch);
	atomic_fetch_sub(&j->running, 1);
	return NULL;
}

int strata_synth_write(const struct strata_synth_config *cfg, const char *dir, struct strata_progress *progress,
		       struct strata_synth_result *res, struct strata_error *err)
{
	struct strata_synth *g = NULL;
	int rc = strata_synth_init(cfg, &g, err);
	if (rc)
		return rc;
	const struct strata_synth_config *c = &g->cfg;
	const struct strata_model_spec *s = &c->spec;
	uint32_t n_total = strata_model_total_experts(s);
	uint32_t n_tensors = strata_synth_tensors(s, NULL, 0);
	uint8_t *tiers = malloc(n_total), *fmts = malloc(n_total);
	struct strata_tensor_info *tensors = calloc(n_tensors, sizeof(*tensors));
	struct strata_store_writer *w = NULL;
	pthread_t *th = NULL;
	struct job j = { 0 };
	int progress_open = 0, started = 0;
	pthread_mutex_init(&j.lock, NULL);
	if (!tiers || !fmts || !tensors) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "synth: out of memory");
		goto out;
	}
	if (c->popularity) {
		if ((rc = synth_tiers_from_popularity(c, tiers, err)))
			goto out;
	} else {
		strata_tier_assign_seeded(s, c->tier_frac, c->seed, tiers, NULL);
	}
	for (uint32_t i = 0; i < n_total; i++)
		fmts[i] = c->format == STRATA_SYNTH_TIERED ? c->tier_fmt[tiers[i]] : STRATA_FMT_BF16;
	/* Fail before writing anything when a tier format cannot be produced. */
	if (c->format == STRATA_SYNTH_TIERED)
		for (int t = 0, f; t < STRATA_TIER_COUNT && (f = c->tier_fmt[t]) >= 0; t++)
			if (!strata_fmt_traits(f)->quantize_rows) {
				rc = STRATA_ERR(err, STRATA_EUNSUPPORTED,
						"synth: --format=tiered needs the %s tier format, which has no quantizer in "
						"this build (use --format=bf16)", strata_fmt_traits(f)->name);
				goto out;
			}
	strata_synth_tensors(s, tensors, n_tensors);
	size_t buf_bytes = 0;
	uint64_t total = 0, expert_bytes = 0, tensor_bytes = 0;
	for (int f = 0; f < STRATA_FMT_COUNT; f++) {
		struct strata_expert_layout L;
		if (!strata_expert_layout(f, s->hidden, s->inter, &L) && L.bytes > buf_bytes)
			buf_bytes = L.bytes;
	}
	struct strata_expert_layout Lc;
	strata_expert_layout(STRATA_FMT_COLD, s->hidden, s->inter, &Lc);
	for (uint32_t i = 0; i < n_total; i++) {
		struct strata_expert_layout L;
		strata_expert_layout(fmts[i], s->hidden, s->inter, &L);
		expert_bytes += L.payload;
		if (c->lowbit_copies && Lc.payload < L.payload)
			expert_bytes += Lc.payload; /* the copy strata_store_writer plans */
	}
	for (uint32_t i = 0; i < n_tensors; i++) {
		uint64_t b = tensors[i].shape[0] * (tensors[i].ndim == 2 ? tensors[i].shape[1] : 1) *
			     (tensors[i].fmt == STRATA_FMT_F32 ? 4 : 2);
		tensors[i].ext.payload = b;
		tensor_bytes += b;
		if (b > buf_bytes)
			buf_bytes = b;
	}
	total = expert_bytes + tensor_bytes;
	struct strata_store_writer_config wc = {
		.dir = dir, .spec = *s, .tier_table = tiers, .fmt_table = fmts, .shard_bytes = c->shard_bytes,
		.n_tensors = n_tensors, .tensors = tensors, .force = c->force, .lowbit_copies = c->lowbit_copies,
	};
	uint64_t t0 = strata_now_ns();
	rc = strata_store_writer_open(&wc, &w, err);
	if (rc)
		goto out;
	j.g = g;
	j.w = w;
	j.fmts = fmts;
	j.tensors = tensors;
	j.n_tensors = n_tensors;
	j.n_experts = n_total;
	j.buf_bytes = buf_bytes;
	if (progress)
		strata_progress_start(progress, "synth", total, "B");
	progress_open = progress != NULL;
	th = calloc((size_t)c->threads, sizeof(*th));
	if (!th) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "synth: out of memory");
		goto out;
	}
	for (int i = 0; i < c->threads; i++) {
		atomic_fetch_add(&j.running, 1);
		if (pthread_create(&th[i], NULL, worker, &j)) {
			atomic_fetch_sub(&j.running, 1);
			break;
		}
		started++;
	}
	if (!started) {
		rc = STRATA_ERR(err, STRATA_EIO, "synth: could not start a thread");
		goto out;
	}
	while (atomic_load(&j.running) > 0) {
		if (strata_interrupted)
			atomic_store(&j.stop, 1);
		if (progress)
			strata_progress_update(progress, atomic_load(&j.done_bytes));
		usleep(20000);
	}
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (j.rc) {
		rc = j.rc;
		if (err)
			*err = j.err;
		goto out;
	}
	if (strata_interrupted) {
		rc = STRATA_ERR(err, STRATA_EINTR, "%s: interrupted; the unfinished shards were removed", dir);
		goto out;
	}
	rc = strata_store_writer_finish(w, err);
	if (progress) {
		strata_progress_update(progress, atomic_load(&j.done_bytes));
		strata_progress_finish(progress);
		progress_open = 0;
	}
	if (!rc && res) {
		memset(res, 0, sizeof(*res));
		res->expert_bytes = expert_bytes;
		res->tensor_bytes = tensor_bytes;
		res->bytes = total;
		res->seconds = (double)(strata_now_ns() - t0) / 1e9;
		res->shards = strata_store_writer_shard_count(w);
	}
	progress_open = 0;
out:
	if (rc && progress_open) /* end the progress line before the error */
		strata_progress_finish(progress);
	strata_store_writer_free(w); /* removes the .tmp files unless finish succeeded */
	pthread_mutex_destroy(&j.lock);
	free(th);
	free(tiers);
	free(fmts);
	free(tensors);
	strata_synth_free(g);
	return rc;
}
