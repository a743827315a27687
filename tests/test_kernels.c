/*
 * GPU kernels against the CPU reference (kernels/kernels.h, kernels/moe.h).
 * Fresh random inputs every run (the seed is printed), outputs poisoned with
 * NaN before every kernel, errors measured as ||gpu - ref|| / ||ref|| with a
 * bound per format.  Skips with a message on a machine without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"
#include "moe.h"
#include "quant.h"
#include "quant_scalar.h"
#include "quant_tables.h"
#include "quant_tiers.h"
#include "strata/gpu.h"
#include "testutil.h"

static uint64_t g_seed;

static uint64_t rnd_u64(void)
{
	g_seed ^= g_seed << 13;
	g_seed ^= g_seed >> 7;
	g_seed ^= g_seed << 17;
	return g_seed;
}
static float rnd_f(void) { return (float)((rnd_u64() >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }
/* Gaussian-ish (sum of 4 uniforms), with a few larger outliers like real weights. */
static float rnd_w(void)
{
	float v = (rnd_f() + rnd_f() + rnd_f() + rnd_f()) * 0.5f;
	return (rnd_u64() & 255) == 0 ? v * 6.0f : v;
}

static void *dmalloc(size_t n)
{
	void *d = NULL;
	struct strata_error err = { 0 };
	assert_int_equal(strata_gpu_malloc(&d, n, &err), STRATA_OK);
	return d;
}
static void h2d(void *d, const void *h, size_t n)
{
	struct strata_error err = { 0 };
	assert_int_equal(strata_gpu_memcpy_h2d_async(d, h, n, NULL, &err), STRATA_OK);
	assert_int_equal(strata_gpu_sync(&err), STRATA_OK);
}
static void d2h(void *h, const void *d, size_t n)
{
	struct strata_error err = { 0 };
	assert_int_equal(strata_gpu_memcpy_d2h_async(h, d, n, NULL, &err), STRATA_OK);
	assert_int_equal(strata_gpu_sync(&err), STRATA_OK);
}
static void poison(void *d, size_t n)
{
	struct strata_error err = { 0 };
	assert_int_equal(strata_gpu_memset(d, 0xff, n, &err), STRATA_OK); /* 0xffffffff is a NaN */
}

static int gpu_fmt_ok(int fmt)
{
	struct strata_error err = { 0 };
	return strata_gpu_moe_check(fmt, 1024, 512, &err) == STRATA_OK;
}

/* A packed rows x cols matrix of fmt with random weights of RMS about `rms`.
 * Tier formats get random code streams and random bf16 block scales: every
 * stream is a valid encoding, and the reference Viterbi encoder is far too
 * slow for test-sized matrices.  The scalar formats (q4, q3) run their
 * reference quantizer on random weights. */
static void random_matrix(int fmt, uint32_t rows, uint32_t cols, float rms, uint8_t *dst)
{
	struct strata_matrix_layout L;
	assert_int_equal(strata_matrix_layout(fmt, rows, cols, &L), 0);
	memset(dst, 0, L.bytes);
	if (fmt >= STRATA_FMT_HOT && !strata_fmt_is_scalar(fmt)) {
		for (uint64_t i = 0; i < L.codes_bytes; i++)
			dst[L.codes_off + i] = (uint8_t)rnd_u64();
		uint16_t *sc = (uint16_t *)(dst + L.scales_off);
		for (uint64_t i = 0; i < L.scales_bytes / 2; i++)
			sc[i] = strata_f32_to_bf16(rms * (0.5f + fabsf(rnd_f())));
		return;
	}
	float *w = malloc((size_t)rows * cols * sizeof(float));
	assert_non_null(w);
	for (size_t j = 0; j < (size_t)rows * cols; j++)
		w[j] = rnd_w() * rms;
	assert_int_equal(strata_quantize_matrix(fmt, w, rows, cols, NULL, dst, L.bytes, NULL), 0);
	free(w);
}

/* A matrix of a scalar format for the stack tests, which need hundreds of
 * experts a case (quantizing takes ~0.2 s a Qwen-sized matrix): two random
 * matrices per format and shape quantized once per process, each use one of
 * them with its rows rotated by a random offset (codes and scales are
 * row-major), so that the experts of a stack still differ.  Other formats
 * (random codes: cheap) and layouts as random_matrix. */
static void stack_matrix(int fmt, uint32_t rows, uint32_t cols, float rms, uint8_t *dst)
{
	static struct {
		int fmt;
		uint32_t rows, cols;
		uint8_t *m[2];
	} pool[32];
	static int np;
	struct strata_matrix_layout L;
	assert_int_equal(strata_matrix_layout(fmt, rows, cols, &L), 0);
	int i = 0;
	while (i < np && !(pool[i].fmt == fmt && pool[i].rows == rows && pool[i].cols == cols))
		i++;
	if (!strata_fmt_is_scalar(fmt) || L.codes_bytes % rows || L.scales_bytes % rows || i == 32) {
		random_matrix(fmt, rows, cols, rms, dst);
		return;
	}
	if (i == np) {
		pool[i].fmt = fmt, pool[i].rows = rows, pool[i].cols = cols;
		for (int k = 0; k < 2; k++) {
			assert_non_null(pool[i].m[k] = malloc(L.bytes));
			random_matrix(fmt, rows, cols, rms, pool[i].m[k]);
		}
		np++;
	}
	const uint8_t *src = pool[i].m[rnd_u64() & 1];
	const uint32_t off = (uint32_t)(rnd_u64() % rows);
	const uint64_t cr = L.codes_bytes / rows, sr = L.scales_bytes / rows;
	memcpy(dst, src, L.bytes);
	for (uint32_t r = 0; r < rows; r++) {
		const uint32_t q = (r + off) % rows;
		memcpy(dst + L.codes_off + r * cr, src + L.codes_off + q * cr, cr);
		memcpy(dst + L.scales_off + r * sr, src + L.scales_off + q * sr, sr);
	}
}

/* Host extent of fmt with random weights (scale ~ 1/sqrt(cols)), its
 * matrices made by fill (random_matrix, stack_matrix). */
static uint8_t *make_expert_by(int fmt, uint32_t hidden, uint32_t inter, struct strata_expert_layout *E,
			       void (*fill)(int, uint32_t, uint32_t, float, uint8_t *))
{
	assert_int_equal(strata_expert_layout(fmt, hidden, inter, E), 0);
	uint8_t *ext = calloc(1, E->bytes);
	assert_non_null(ext);
	fill(fmt, inter, hidden, 1.0f / sqrtf((float)hidden), ext + E->gate_off);
	fill(fmt, inter, hidden, 1.0f / sqrtf((float)hidden), ext + E->up_off);
	fill(fmt, hidden, inter, 1.0f / sqrtf((float)inter), ext + E->down_off);
	return ext;
}
static uint8_t *make_expert(int fmt, uint32_t hidden, uint32_t inter, struct strata_expert_layout *E)
{
	return make_expert_by(fmt, hidden, inter, E, random_matrix);
}

static double rel_err(const float *a, const float *ref, const float *base, size_t n, int *nonfinite)
{
	double num = 0, den = 0;
	*nonfinite = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(a[i]))
			(*nonfinite)++;
		double d = (double)a[i] - ref[i], r = (double)ref[i] - (base ? base[i] : 0.0f);
		num += d * d;
		den += r * r;
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- dequantization: bit-exact against the reference ---- */

/* Make c (NULL: the defaults) the kernel configuration. */
static void kernel_config(const struct strata_moe_config *c)
{
	struct strata_moe_config d;
	struct strata_error err = { 0 };
	if (!c) {
		strata_gpu_moe_config_defaults(&d);
		c = &d;
	}
	int rc = strata_gpu_moe_configure(c, &err);
	if (rc)
		fprintf(stderr, "kernel config: %s\n", err.msg);
	assert_int_equal(rc, STRATA_OK);
}

/* The kernel configuration without a GPU: defaults, the text form, and
 * clear errors for values the kernels do not have. */
static void test_moe_config(void **state)
{
	(void)state;
	struct strata_moe_config c, d;
	struct strata_error err = { 0 };
	strata_gpu_moe_config_defaults(&d);
	assert_int_equal(d.prefill_min, 17);
	assert_int_equal(d.dec_warps, -1);
	assert_int_equal(d.split, 0);
	assert_int_equal(d.bf16_warps, -1);
	assert_int_equal(d.bf16_kc, 512);
	assert_int_equal(strata_gpu_moe_config_validate(&d, &err), STRATA_OK);
	c = d;
	assert_int_equal(strata_gpu_moe_config_parse("dec=12x4u,split=2,bf16dec=8x8,bf16_kc=64,prefill_min=off", &c,
						     &err),
			 STRATA_OK);
	assert_int_equal(c.dec_warps, 12);
	assert_int_equal(c.dec_stages, -4);
	assert_int_equal(c.split, 2);
	assert_int_equal(c.bf16_warps, 8);
	assert_int_equal(c.bf16_depth, 8);
	assert_int_equal(c.bf16_kc, 64);
	assert_int_equal(c.prefill_min, UINT32_MAX);
	c = d;
	assert_int_equal(strata_gpu_moe_config_parse("dec=off,bf16dec=auto", &c, &err), STRATA_OK);
	assert_int_equal(c.dec_warps, 0);
	assert_int_equal(c.bf16_warps, -1);
	assert_int_equal(d.sq_dec, -1);
	assert_int_equal(d.sq_pf, 0);
	assert_int_equal(d.sq_xs, 1);
	assert_int_equal(d.sq_gv, 1);
	assert_int_equal(d.sq_pdl, 1);
	c = d;
	assert_int_equal(strata_gpu_moe_config_parse("sqdec=off,sq_pf=1,sq_xs=0,sq_gv=0,sq_pdl=0", &c, &err), STRATA_OK);
	assert_int_equal(c.sq_dec, 0);
	assert_int_equal(c.sq_pf, 1);
	assert_int_equal(c.sq_xs, 0);
	assert_int_equal(c.sq_gv, 0);
	assert_int_equal(c.sq_pdl, 0);
	assert_int_equal(d.sq_l2pf, 0);
	assert_int_equal(strata_gpu_moe_config_parse("sq_gv=2,sq_l2pf=2", &c, &err), STRATA_OK);
	assert_int_equal(c.sq_gv, 2);
	assert_int_equal(c.sq_l2pf, 2);
	assert_int_equal(d.dec_tr, -1);
	assert_int_equal(strata_gpu_moe_config_parse("dec_tr=2", &c, &err), STRATA_OK);
	assert_int_equal(c.dec_tr, 2);
	assert_int_equal(strata_gpu_moe_config_parse("dec_tr=1", &c, &err), STRATA_OK);
	assert_int_equal(c.dec_tr, 1);
	assert_int_equal(strata_gpu_moe_config_parse("dec_tr=3", &c, &err), STRATA_OK);
	assert_int_equal(c.dec_tr, 3);
	assert_int_equal(strata_gpu_moe_config_parse("dec_tr=auto", &c, &err), STRATA_OK);
	assert_int_equal(c.dec_tr, -1);
	assert_int_equal(strata_gpu_moe_config_parse("dec_tr=0", &c, &err), STRATA_OK);
	assert_int_equal(c.dec_tr, 0);
	c = d;
	assert_int_equal(strata_gpu_moe_config_parse("dec=12x2t", &c, &err), STRATA_OK);
	assert_int_equal(c.dec_warps, 12);
	assert_int_equal(c.dec_stages, STRATA_MOE_DEC_TAB + 2);
	assert_int_equal(d.pf_path, 0);
	c = d;
	assert_int_equal(strata_gpu_moe_config_parse("prefill=sm90", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 1);
	assert_int_equal(strata_gpu_moe_config_parse("prefill=mma", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 2);
	assert_int_equal(strata_gpu_moe_config_parse("prefill=sm90ws", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 3);
	assert_int_equal(strata_gpu_moe_config_parse("prefill=sm90p", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 4);
	assert_int_equal(strata_gpu_moe_config_parse("prefill=sm90p1", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 5);
	assert_int_equal(strata_gpu_moe_config_parse("prefill=sm90p3", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 6);
	assert_int_equal(strata_gpu_moe_config_parse("prefill=sm90pc", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 7);
	assert_int_equal(strata_gpu_moe_config_parse("prefill=sm90ph", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 8);
	assert_int_equal(strata_gpu_moe_config_parse("prefill=sm90pp", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 9);
	assert_int_equal(strata_gpu_moe_config_parse("prefill=sm90pp2", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 10);
	assert_int_equal(strata_gpu_moe_config_parse("prefill=auto", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_path, 0);
	/* auto's token count for tier experts as BF16 tiles */
	assert_int_equal(d.pf_tiles_min, 32);
	assert_int_equal(strata_gpu_moe_config_parse("prefill_tiles=200", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_tiles_min, 200);
	assert_int_equal(strata_gpu_moe_config_parse("prefill_tiles=off", &c, &err), STRATA_OK);
	assert_int_equal(c.pf_tiles_min, UINT32_MAX);
	/* the row-streaming kernel's q3 loop and warps at one token */
	assert_int_equal(d.sq_q3i, 1);
	assert_int_equal(d.sq_gvw, 16);
	assert_int_equal(strata_gpu_moe_config_parse("sq_q3i=0,sq_gvw=8", &c, &err), STRATA_OK);
	assert_int_equal(c.sq_q3i, 0);
	assert_int_equal(c.sq_gvw, 8);
	assert_int_equal(strata_gpu_moe_config_parse("sq_gvw=12,sq_q3i=2,sq_gvl=41", &c, &err), STRATA_OK);
	assert_int_equal(c.sq_gvw, 12);
	assert_int_equal(c.sq_q3i, 2);
	assert_int_equal(c.sq_gvl, 41);
	assert_int_equal(d.sq_gvl, 0);
	/* its staging: one pass over up to two slices per thread, x loaded
	 * before the first weights, by default */
	assert_int_equal(d.sq_gvs, 2);
	assert_int_equal(strata_gpu_moe_config_parse("sq_gvs=0", &c, &err), STRATA_OK);
	assert_int_equal(c.sq_gvs, 0);
	assert_int_equal(strata_gpu_moe_config_parse("sq_gvs=1", &c, &err), STRATA_OK);
	assert_int_equal(c.sq_gvs, 1);
	/* several rows per lane at 1 - 2 tokens: on by default */
	assert_int_equal(d.sq_gvx, 1);
	assert_int_equal(strata_gpu_moe_config_parse("sq_gvx=0", &c, &err), STRATA_OK);
	assert_int_equal(c.sq_gvx, 0);
	/* the one-launch small-layer kernel: auto by default (tier formats) */
	assert_int_equal(d.small, -1);
	assert_true((STRATA_MOE_SMALL_AUTO_FMTS >> STRATA_FMT_HOT & 1) && !(STRATA_MOE_SMALL_AUTO_FMTS >> STRATA_FMT_Q4 & 1));
	assert_int_equal(strata_gpu_moe_config_parse("small=1", &c, &err), STRATA_OK);
	assert_int_equal(c.small, 1);
	assert_int_equal(strata_gpu_moe_config_parse("small=auto", &c, &err), STRATA_OK);
	assert_int_equal(c.small, -1);
	assert_int_equal(strata_gpu_moe_config_parse("small=off", &c, &err), STRATA_OK);
	assert_int_equal(c.small, 0);
	assert_int_equal(strata_gpu_moe_config_parse("small=0", &c, &err), STRATA_OK);
	assert_int_equal(c.small, 0);
	/* small=2: the skewed shared-memory row pitch; small_ts: phase timestamps */
	assert_int_equal(d.small_ts, 0);
	assert_int_equal(strata_gpu_moe_config_parse("small=3", &c, &err), STRATA_OK);
	assert_int_equal(c.small, 3);
	assert_int_equal(strata_gpu_moe_config_parse("small=2,small_ts=1", &c, &err), STRATA_OK);
	assert_int_equal(c.small, 2);
	assert_int_equal(c.small_ts, 1);
	/* the persistent stack kernel: the pieces in flight, 4 by default; 0 off */
	assert_int_equal(d.pstack, 4);
	assert_int_equal(strata_gpu_moe_config_parse("pstack=2", &c, &err), STRATA_OK);
	assert_int_equal(c.pstack, 2);
	assert_int_equal(strata_gpu_moe_config_parse("pstack=8", &c, &err), STRATA_OK);
	assert_int_equal(c.pstack, 8);
	static const char *const bad[] = { "dec=9x4", "dec=12", "split=65", "split=-1", "bf16dec=16x5",
					   "bf16_kc=16", "prefill_min=0", "prefill_min=17x", "poison=2", "warps=8",
					   "dec", "sqdec=8x4", "sq_pf=2", "sq_xs=2", "sq_gv=on", "sq_gv=3", "sq_l2pf=3", "sq_pdl=2", "dec=12x4t", "dec=10x2t", "dec=8x2tt",
					   "dec=8x2u", "bf16dec=8x8t", "prefill=wgmma", "prefill=sm90p2", "prefill=sm90pf",
					   "prefill=sm90pq", "prefill=sm90pp3",
					   "prefill_tiles=0", "prefill_tiles=on", "sq_q3i=3", "sq_gvw=4", "sq_gvw=16x", "sq_gvl=6", "sq_gvl=16", "sq_gvl=123", "sq_gvl=-1",
					   "sq_gvs=3", "sq_gvs=on", "sq_gvx=2", "sq_gvx=on", "dec_tr=4", "dec_tr=on", "dec_tr=-1",
					   "small=4", "small=on", "small=-1", "small_ts=2", "small_ts=on", "pstack=9", "pstack=on", "pstack=-1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		c = d;
		memset(&err, 0, sizeof(err));
		assert_int_equal(strata_gpu_moe_config_parse(bad[i], &c, &err), STRATA_EINVAL);
		assert_non_null(strstr(err.msg, "kernel config"));
	}
	/* configure refuses a bad one and keeps the last good one */
	c = d;
	c.split = 1000;
	assert_int_equal(strata_gpu_moe_configure(&c, &err), STRATA_EINVAL);
	struct strata_moe_config now;
	strata_gpu_moe_config_get(&now);
	assert_int_equal(now.split, d.split);
	c = d;
	c.split = 3;
	kernel_config(&c);
	strata_gpu_moe_config_get(&now);
	assert_int_equal(now.split, 3);
	kernel_config(NULL);
	strata_gpu_moe_config_get(&now);
	assert_int_equal(now.split, 0);
}

static void test_dequant_exact(void **state)
{
	if (!test_have_gpu("test_dequant_exact"))
		return;
	const int fmts[] = { STRATA_FMT_F32, STRATA_FMT_BF16, STRATA_FMT_HOT, STRATA_FMT_WARM, STRATA_FMT_COLD,
			     STRATA_FMT_Q4, STRATA_FMT_Q3 };
	const uint32_t shapes[][2] = { { 48, 1024 }, { 33, 800 }, { 3, 512 } };
	for (size_t f = 0; f < sizeof(fmts) / sizeof(fmts[0]); f++) {
		const struct strata_fmt_traits *tr = strata_fmt_traits(fmts[f]);
		if (!gpu_fmt_ok(fmts[f]) || !tr->quantize_rows) {
			fprintf(stderr, "note: test_dequant_exact[%s] not run: no GPU decoder or reference yet\n", tr->name);
			continue;
		}
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			uint32_t rows = shapes[s][0], cols = shapes[s][1];
			struct strata_matrix_layout L;
			assert_int_equal(strata_matrix_layout(fmts[f], rows, cols, &L), 0);
			size_t n = (size_t)rows * cols;
			float *ref = malloc(n * 4), *got = malloc(n * 4);
			uint8_t *pk = malloc(L.bytes);
			if (s == 2 && fmts[f] >= STRATA_FMT_HOT) {
				/* one small matrix through the real encoder too */
				float *w = malloc(n * sizeof(float));
				for (size_t i = 0; i < n; i++)
					w[i] = rnd_w() * 0.05f;
				assert_int_equal(strata_quantize_matrix(fmts[f], w, rows, cols, NULL, pk, L.bytes, NULL), 0);
				free(w);
			} else {
				random_matrix(fmts[f], rows, cols, 0.05f, pk);
			}
			assert_int_equal(strata_dequantize_matrix(fmts[f], pk, rows, cols, ref), 0);
			void *dp = dmalloc(L.bytes);
			float *dout = dmalloc(n * 4);
			h2d(dp, pk, L.bytes);
			poison(dout, n * 4);
			struct strata_error err = { 0 };
			assert_int_equal(strata_gpu_dequantize(fmts[f], dp, rows, cols, dout, NULL, &err), STRATA_OK);
			d2h(got, dout, n * 4);
			size_t bad = 0;
			for (size_t i = 0; i < n; i++)
				if (memcmp(&got[i], &ref[i], 4))
					bad++;
			if (bad)
				fprintf(stderr, "dequant %s %ux%u: %zu of %zu values differ (first ref %g got %g)\n",
					tr->name, rows, cols, bad, n, ref[0], got[0]);
			assert_int_equal(bad, 0);
			strata_gpu_free(dp);
			strata_gpu_free(dout);
			free(ref), free(got), free(pk);
		}
	}
}

/* ---- the fused MoE layer ---- */

struct moe_case {
	const char *name;
	int fmt;            /* -1: mix bf16 / f32 / tiers across experts; -2: the same without
			     * f32; -3: the tier formats only; -4: every format (with q4, q3);
			     * -5 / -6: the tier formats and q4 / q3 */
	uint32_t hidden, inter, n_tokens, n_experts, top_k;
	uint32_t pf_min;    /* the kernel configuration's prefill_min for the case (0: default) */
};

/* Whether name is an item of the list whose items sep separates (a NULL or
 * empty list has every name): the selections by environment variable
 * (STRATA_TESTS, STRATA_TEST_PREFILL: commas; STRATA_CFGS: ';'). */
static int in_list_sep(const char *list, const char *name, char sep)
{
	if (!list || !*list)
		return 1;
	const size_t len = strlen(name);
	const char seps[2] = { sep, 0 };
	for (const char *q = list; *q; q += *q == sep) {
		const size_t n = strcspn(q, seps);
		if (n == len && !strncmp(q, name, len))
			return 1;
		q += n;
	}
	return 0;
}

static int in_list(const char *list, const char *name) { return in_list_sep(list, name, ','); }

/* Relative error bound per format, f32 sums: bf16 operands on the tensor cores
 * for bf16/f32 experts (measured ~3e-3); the tier formats multiply their exact
 * fp16 codebook values with fp16 activations (measured ~4e-4), so a wrong
 * codebook value on the MMA path shows up against a tighter bound. */
static double bound_for(int fmt, int tier_bf16)
{
	/* q4, q3: exact fp16 codes on the decode kernel (~4e-4), BF16 copies on
	 * the other paths (as bf16); tier experts as BF16 tiles (tier_bf16):
	 * bf16(scale * f) and bf16 activations, as bf16 experts (kernels/FORMATS.md
	 * allows that rounding) */
	return fmt == STRATA_FMT_F32			 ? 1.5e-2
	     : strata_fmt_is_scalar(fmt)		 ? 1e-2
	     : fmt >= STRATA_FMT_HOT && !tier_bf16 ? 3e-3
							 : 1e-2;
}

/* Whether tier experts with up to T tokens may take the BF16-tile prefill
 * kernel (prefill=sm90p, sm90p1, sm90p3, sm90pc, sm90pp, sm90pp2, or auto from prefill_tiles
 * tokens, on an sm_90a GPU) under the current kernel configuration with
 * prefill_min pf_min (0: the configuration's).  Its fp16-tile variant
 * (sm90ph) keeps the fp16 paths' bound (measured <= 5.3e-4). */
static int tier_bf16_tiles(uint32_t T, uint32_t pf_min)
{
	static int usable = -1;
	if (usable < 0)
		usable = strata_gpu_moe_prefill_sm90_usable();
	struct strata_moe_config kc;
	strata_gpu_moe_config_get(&kc);
	return usable && T >= (pf_min ? pf_min : kc.prefill_min) &&
	       ((kc.pf_path >= 4 && kc.pf_path <= 7) || kc.pf_path >= 9 || (kc.pf_path == 0 && T >= kc.pf_tiles_min));
}

/* Tokens of the range-guard cases (outliers != 0): t % 4 == 1 has 1-3
 * activations of magnitude 1e5 .. 1e6 (beyond fp16), t % 4 == 2 the whole row
 * times 2000 (inside fp16, but gate * up beyond it), the others are ordinary. */
static int big_token(uint32_t t) { return t % 4 == 1 || t % 4 == 2; }

/* ||a - ref|| / ||ref - base|| over the rows of tokens with big_token(t) == big. */
static double rel_err_rows(const float *a, const float *ref, const float *base, uint32_t T, uint32_t H, int big)
{
	double num = 0, den = 0;
	for (uint32_t t = 0; t < T; t++) {
		if (big_token(t) != big)
			continue;
		for (size_t i = (size_t)t * H; i < (size_t)(t + 1) * H; i++) {
			double d = (double)a[i] - ref[i], r = (double)ref[i] - base[i];
			num += d * d;
			den += r * r;
		}
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Whether a mixed case (struct moe_case's fmt < 0) has experts of format f. */
static int mix_has(int mix, int f)
{
	const int tier = f >= STRATA_FMT_HOT && f <= STRATA_FMT_COLD, scalar = strata_fmt_is_scalar(f);
	switch (mix) {
	case -2: return f != STRATA_FMT_F32 && !scalar;
	case -3: return tier;
	case -4: return 1;
	case -5: return tier || f == STRATA_FMT_Q4;
	case -6: return tier || f == STRATA_FMT_Q3;
	default: return !scalar;
	}
}

/* Routing of T tokens: each picks k distinct experts of ne at random, with
 * weights in [0.1, 1): assignment t * k + i is (ae, at = t, aw). */
static void random_routing(uint32_t T, uint32_t k, uint32_t ne, uint32_t *ae, uint32_t *at, float *aw)
{
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t i = 0; i < k; i++) {
			uint32_t e;
			int dup;
			do {
				e = (uint32_t)(rnd_u64() % ne);
				dup = 0;
				for (uint32_t q = 0; q < i; q++)
					dup |= ae[t * k + q] == e;
			} while (dup);
			ae[t * k + i] = e;
			at[t * k + i] = t;
			aw[t * k + i] = 0.1f + 0.9f * fabsf(rnd_f());
		}
}

/* One MoE case against the reference.  outliers: activations as big_token()
 * says; pf_min: the kernel configuration's prefill_min for the call (0: default). */
static void run_moe_case_ex(const struct moe_case *mc, int outliers, uint32_t pf_min)
{
	struct strata_error err = { 0 };
	uint32_t H = mc->hidden, I = mc->inter, T = mc->n_tokens, NE = mc->n_experts;
	int mix[] = { STRATA_FMT_BF16, STRATA_FMT_F32, STRATA_FMT_HOT, STRATA_FMT_WARM, STRATA_FMT_COLD,
		      STRATA_FMT_Q4, STRATA_FMT_Q3 };
	uint8_t *fmts = malloc(NE);
	uint32_t nf = 0;
	int usable[7];
	for (int i = 0; i < 7; i++)
		if (mix_has(mc->fmt, mix[i]) &&
		    gpu_fmt_ok(mix[i]) && strata_fmt_traits(mix[i])->quantize_rows &&
		    strata_gpu_moe_check(mix[i], H, I, &err) == STRATA_OK)
			usable[nf++] = mix[i];
	if (mc->fmt >= 0 && (!gpu_fmt_ok(mc->fmt) || !strata_fmt_traits(mc->fmt)->quantize_rows)) {
		fprintf(stderr, "note: moe[%s] not run: format %s has no GPU decoder or reference yet\n", mc->name,
			strata_fmt_traits(mc->fmt)->name);
		free(fmts);
		return;
	}
	uint8_t **hext = malloc(NE * sizeof(*hext));
	void **dext = malloc(NE * sizeof(*dext));
	for (uint32_t e = 0; e < NE; e++) {
		fmts[e] = (uint8_t)(mc->fmt >= 0 ? mc->fmt : usable[e % nf]);
		struct strata_expert_layout E;
		hext[e] = make_expert(fmts[e], H, I, &E);
		dext[e] = dmalloc(E.bytes);
		h2d(dext[e], hext[e], E.bytes);
	}
	/* routing: every token picks top_k distinct experts */
	uint32_t NA = T * mc->top_k;
	uint32_t *ae = malloc(NA * 4), *at = malloc(NA * 4);
	float *aw = malloc(NA * 4);
	random_routing(T, mc->top_k, NE, ae, at, aw);
	/* the bound of the call's formats, with the BF16-tile one for tier experts
	 * when the expert with the most tokens may take those tiles */
	uint32_t *cnt = calloc(NE, 4), most = 0;
	for (uint32_t a = 0; a < NA; a++)
		most = ++cnt[ae[a]] > most ? cnt[ae[a]] : most;
	free(cnt);
	const int tier_bf16 = tier_bf16_tiles(most, pf_min);
	double bound = 0;
	for (uint32_t e = 0; e < NE; e++) {
		double b = bound_for(fmts[e], tier_bf16);
		bound = b > bound ? b : bound;
	}
	size_t nx = (size_t)T * H;
	float *x = malloc(nx * 4), *y0 = malloc(nx * 4), *yref = malloc(nx * 4), *yg = malloc(nx * 4);
	for (size_t i = 0; i < nx; i++)
		x[i] = rnd_w(), y0[i] = rnd_f();
	for (uint32_t t = 0; outliers && t < T; t++) {
		if (t % 4 == 1) {
			for (uint32_t q = 0; q <= t % 3; q++) /* the first one in the row's last 8 columns */
				x[(size_t)t * H + (q ? rnd_u64() % H : H - 1 - (t / 4) % 8)] =
					(rnd_f() < 0 ? -1e5f : 1e5f) * powf(10.0f, fabsf(rnd_f()));
		} else if (t % 4 == 2) {
			for (uint32_t i = 0; i < H; i++)
				x[(size_t)t * H + i] *= 2000.0f;
		}
	}
	memcpy(yref, y0, nx * 4);
	struct strata_moe_call c = {
		.hidden = H, .inter = I, .n_tokens = T, .x = x, .y = yref, .n_experts = NE,
		.extents = (const void *const *)hext, .fmts = fmts, .n_assign = NA, .assign_expert = ae,
		.assign_token = at, .assign_weight = aw,
	};
	assert_int_equal(strata_moe_layer_ref(&c, &err), STRATA_OK);
	float *dx = dmalloc(nx * 4), *dy = dmalloc(nx * 4);
	h2d(dx, x, nx * 4);
	h2d(dy, y0, nx * 4);
	c.x = dx, c.y = dy, c.extents = (const void *const *)dext;
	struct strata_moe_config kc, saved;
	strata_gpu_moe_config_get(&saved);
	kc = saved;
	kc.poison = 1;
	if (pf_min)
		kc.prefill_min = pf_min;
	kernel_config(&kc);
	int rc = strata_moe_layer_gpu(&c, &err);
	if (rc)
		fprintf(stderr, "moe[%s]: %s\n", mc->name, err.msg);
	assert_int_equal(rc, STRATA_OK);
	assert_int_equal(strata_gpu_sync(&err), STRATA_OK);
	d2h(yg, dy, nx * 4);
	int nonfinite;
	double re = rel_err(yg, yref, y0, nx, &nonfinite);
	printf("moe[%s] fmt=%s H=%u I=%u T=%u E=%u k=%u: rel err %.3g (bound %.3g)\n", mc->name,
	       mc->fmt >= 0 ? strata_fmt_traits(mc->fmt)->name : "mixed", H, I, T, NE, mc->top_k, re, bound);
	assert_int_equal(nonfinite, 0);
	assert_true(re < bound);
	if (outliers) {
		/* each class on its own: the big rows must not hide the ordinary ones */
		double rb = rel_err_rows(yg, yref, y0, T, H, 1), ro = rel_err_rows(yg, yref, y0, T, H, 0);
		printf("moe[%s]: rel err big tokens %.3g, ordinary tokens %.3g\n", mc->name, rb, ro);
		assert_true(rb < bound);
		assert_true(ro < bound);
	}
	/* Second run on the same inputs: the per-expert counters were reset by the kernel. */
	h2d(dy, y0, nx * 4);
	assert_int_equal(strata_moe_layer_gpu(&c, &err), STRATA_OK);
	d2h(yg, dy, nx * 4);
	double re2 = rel_err(yg, yref, y0, nx, &nonfinite);
	assert_int_equal(nonfinite, 0);
	assert_true(re2 < bound);
	kernel_config(&saved);
	for (uint32_t e = 0; e < NE; e++) {
		strata_gpu_free(dext[e]);
		free(hext[e]);
	}
	strata_gpu_free(dx);
	strata_gpu_free(dy);
	free(hext), free(dext), free(fmts), free(ae), free(at), free(aw), free(x), free(y0), free(yref), free(yg);
}

static void run_moe_case(const struct moe_case *mc) { run_moe_case_ex(mc, 0, mc->pf_min); }

/* cases[0..n) (outliers as in run_moe_case_ex, each with its own pf_min)
 * under the kernel configuration kc (NULL: the defaults). */
static void run_moe_cases(const struct strata_moe_config *kc, const struct moe_case *cases, size_t n, int outliers)
{
	kernel_config(kc);
	for (size_t c = 0; c < n; c++)
		run_moe_case_ex(&cases[c], outliers, cases[c].pf_min);
}

static const struct moe_case moe_cases[] = {
	/* decode: 8-token tiles */
	{ "decode-1", STRATA_FMT_BF16, 1024, 512, 1, 6, 4, 0 },
	{ "decode-4-f32", STRATA_FMT_F32, 512, 256, 4, 5, 3, 0 },
	{ "decode-8-odd", STRATA_FMT_BF16, 544, 96, 8, 3, 2, 0 },
	/* 16-token tiles */
	{ "decode-16", STRATA_FMT_BF16, 768, 320, 16, 4, 3, 0 },
	/* prefill (>= 17 tokens per expert: the tiled prefill path) */
	{ "prefill-150", STRATA_FMT_BF16, 512, 256, 150, 4, 2, 0 },
	/* 32-token tiles of the persistent kernel (17..63 tokens per expert; the
	 * prefill path held off) */
	{ "tile32-40", STRATA_FMT_BF16, 512, 256, 40, 2, 2, UINT32_MAX },
	{ "tile32-hot", STRATA_FMT_HOT, 512, 256, 50, 2, 2, UINT32_MAX },
	/* many slots: > STRATA_MOE_MAX_SLOTS experts, several launches */
	{ "slots-300", STRATA_FMT_BF16, 256, 64, 40, 300, 8, 0 },
	/* many assignments: > STRATA_MOE_MAX_ASSIGN, expert split across launches */
	{ "assign-1300", STRATA_FMT_BF16, 256, 96, 1300, 3, 1, UINT32_MAX },
	/* the tier formats (skip until their GPU decoders exist) */
	{ "hot-1", STRATA_FMT_HOT, 1024, 512, 1, 4, 4, 0 },
	{ "warm-4", STRATA_FMT_WARM, 768, 384, 4, 4, 2, 0 },
	{ "cold-16", STRATA_FMT_COLD, 1280, 256, 16, 3, 2, 0 },
	{ "hot-prefill", STRATA_FMT_HOT, 512, 256, 100, 2, 2, 0 },
	{ "tier-padded", STRATA_FMT_WARM, 640, 320, 3, 3, 2, 0 },
	/* several formats in one launch */
	{ "mixed-5", -1, 1024, 256, 5, 10, 4, 0 },
	/* warp-streaming decode kernel (<= 8 tokens per expert; fmt -2: bf16 and
	 * tier formats mixed, which the persistent kernel takes): partial 16-row
	 * gate|up and 32-row down tasks, padded tier rows, bf16 rows ending in
	 * half a 64-weight chunk */
	{ "dec-mixed-8", -2, 1024, 320, 8, 12, 4, 0 },
	{ "dec-hot-rows", STRATA_FMT_HOT, 520, 200, 2, 3, 2, 0 },
	{ "dec-cold-7", STRATA_FMT_COLD, 2048, 768, 7, 8, 2, 0 },
	{ "dec-bf16-odd", STRATA_FMT_BF16, 544, 96, 6, 5, 3, 0 },
	/* tiled prefill path (moe_prefill.cuh), 128 x 128 tiles (65 .. 191 tokens
	 * for an expert): every format it takes, partial token tiles (128
	 * tokens), partial row tiles, padded tier rows, bf16 K not a multiple of
	 * the 64-weight K step, calls where some experts take the prefill path
	 * and others (f32) the persistent kernel, or experts on both the 64 x 64
	 * and the 128 x 128 tiles */
	{ "pf-hot", STRATA_FMT_HOT, 1024, 512, 200, 3, 2, 0 },
	{ "pf-warm-padded", STRATA_FMT_WARM, 640, 320, 150, 2, 2, 0 },
	{ "pf-cold", STRATA_FMT_COLD, 768, 1280, 160, 2, 1, 0 },
	{ "pf-bf16-odd", STRATA_FMT_BF16, 544, 96, 140, 2, 2, 0 },
	{ "pf-bf16-300", STRATA_FMT_BF16, 512, 384, 300, 3, 2, 0 },
	{ "pf-mixed", -1, 1024, 256, 200, 5, 3, 0 },
	{ "pf-some-small", STRATA_FMT_HOT, 512, 256, 120, 4, 2, 0 },
	/* >= 192 tokens per expert: the 64-row x 256-token tile (partial token,
	 * row and K tiles; a mixed call has experts on both tiles) */
	{ "pfw-hot", STRATA_FMT_HOT, 1024, 512, 400, 2, 2, 0 },
	{ "pfw-warm-padded", STRATA_FMT_WARM, 672, 336, 300, 2, 2, 0 },
	{ "pfw-cold", STRATA_FMT_COLD, 768, 1280, 260, 1, 1, 0 },
	{ "pfw-bf16-odd", STRATA_FMT_BF16, 544, 96, 300, 2, 2, 0 },
	{ "pfw-mixed", -1, 1024, 256, 400, 5, 3, 0 },
	/* <= 64 tokens per expert on the prefill path: the 64-row x 64-token tile
	 * (prefill path forced; partial token, row and K tiles; a mixed call with
	 * f32 experts on the persistent kernel) */
	{ "pfs-hot", STRATA_FMT_HOT, 1024, 512, 40, 2, 2, 1 },
	{ "pfs-warm-padded", STRATA_FMT_WARM, 640, 320, 24, 2, 2, 1 },
	{ "pfs-cold", STRATA_FMT_COLD, 768, 1280, 63, 2, 1, 1 },
	{ "pfs-bf16-odd", STRATA_FMT_BF16, 544, 96, 63, 2, 2, 1 },
	{ "pfs-mixed", -1, 1024, 256, 50, 5, 3, 1 },
	/* default threshold: 17 .. 64 tokens take the 64 x 64 tile, <= 16 the
	 * persistent kernel (pfs-some-small: about 16 per expert, both in one
	 * call); hidden 8448: more than 4 8-float chunks per pf_prep thread */
	{ "pfs-default", STRATA_FMT_HOT, 768, 384, 48, 2, 2, 0 },
	{ "pfs-some-small", STRATA_FMT_COLD, 512, 256, 40, 5, 2, 0 },
	{ "pfs-bf16-wide-row", STRATA_FMT_BF16, 8448, 64, 40, 1, 1, 0 },
};

static void test_moe_layer(void **state)
{
	if (!test_have_gpu("test_moe_layer"))
		return;
	run_moe_cases(NULL, moe_cases, sizeof(moe_cases) / sizeof(moe_cases[0]), 0);
}

/* fp16 range guard on the decode paths (activations as big_token(): beyond
 * the fp16 range, or rows x 2000; T >= 2 so that tokens 1 and 2 are big):
 * outputs stay finite and within the format's bound for big and ordinary
 * tokens (the warp-streaming kernel recomputes such a tier block, the
 * persistent kernel such a unit, with power-of-two scaled activations). */
static void test_moe_outliers(void **state)
{
	if (!test_have_gpu("test_moe_outliers"))
		return;
	static const struct moe_case cases[] = {
		{ "big-hot-2", STRATA_FMT_HOT, 1024, 512, 2, 2, 2, 0 },
		{ "big-warm-4", STRATA_FMT_WARM, 768, 384, 4, 4, 2, 0 },
		{ "big-tiers-8", -3, 1024, 320, 8, 12, 4, 0 },
		{ "big-mixed-8", -2, 1024, 320, 8, 12, 4, 0 },
		{ "big-cold-rows", STRATA_FMT_COLD, 520, 200, 3, 3, 2, 0 },
		/* 9..16 tokens per expert: the warp-streaming kernel's two-tile tasks,
		 * then the persistent kernel's 16-token tiles; 17..63: its 32-token tiles */
		{ "big-hot-12", STRATA_FMT_HOT, 1024, 512, 12, 2, 2, UINT32_MAX },
		{ "big-warm-40", STRATA_FMT_WARM, 768, 384, 40, 2, 1, UINT32_MAX },
	};
	for (int dec = 0; dec < 2; dec++) {
		/* the decode cases on the warp-streaming kernel, then on the persistent one */
		struct strata_moe_config kc;
		strata_gpu_moe_config_defaults(&kc);
		kc.dec_warps = dec ? 0 : 12, kc.dec_stages = 4;
		run_moe_cases(&kc, cases, sizeof(cases) / sizeof(cases[0]), 1);
	}
	kernel_config(NULL);
}

/* Every variant of the warp-streaming decode kernel (warps x stages; forced,
 * so also on shapes too small for it to pay), and the persistent kernel
 * forced for decode (0), on tier-only decode cases: partial 16-row gate|up
 * and 32-row down tasks, padded rows, several token tiles.  Each variant runs
 * without split-K (the default), with at most 3 parts (unequal parts: 8
 * blocks as 3 + 3 + 2) and with one part per block. */
static void test_moe_decode_variants(void **state)
{
	if (!test_have_gpu("test_moe_decode_variants"))
		return;
	static const int v[][2] = { { 0, 0 },  { 8, 4 },  { 8, 5 },  { 12, 3 },
				    { 12, 4 }, { 12, -4 }, { 16, 3 },
				    /* the codebook through the shared table */
				    { 8, STRATA_MOE_DEC_TAB + 2 }, { 12, STRATA_MOE_DEC_TAB + 2 },
				    { 7, STRATA_MOE_DEC_TAB + 3 } };
	static const struct moe_case cases[] = {
		{ "var-hot", STRATA_FMT_HOT, 1024, 512, 1, 6, 4, 0 },
		{ "var-tiers", -3, 768, 288, 8, 9, 3, 0 },
		{ "var-cold-rows", STRATA_FMT_COLD, 520, 200, 3, 3, 2, 0 },
		{ "var-warm-7", STRATA_FMT_WARM, 2048, 768, 7, 8, 2, 0 },
		/* bf16 in the launch: the persistent kernel whatever the variant */
		{ "var-mixed", -2, 768, 288, 8, 9, 3, 0 },
		/* 9..16 tokens per expert: tasks of two 8-token tiles (12 x 4 whatever
		 * the variant, but for 0) */
		{ "var16-hot", STRATA_FMT_HOT, 1024, 512, 16, 2, 2, 0 },
		{ "var16-tiers", -3, 768, 288, 12, 4, 3, 0 },
		{ "var16-cold-rows", STRATA_FMT_COLD, 520, 200, 13, 3, 2, 0 },
	};
	static const uint32_t split[] = { 0, 3, 64 };
	/* STRATA_TEST_DEC=12x2t,12x4,...: only those variants (e.g. under
	 * compute-sanitizer in a short device call) */
	const char *only = getenv("STRATA_TEST_DEC");
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		for (size_t j = 0; j < (v[i][0] ? 3u : 1u); j++) {
			if (only && *only) {
				struct strata_moe_config oc;
				struct strata_error oe = { 0 };
				char item[32];
				int keep = 0;
				for (const char *q = only; *q && !keep;) {
					size_t n = strcspn(q, ",");
					snprintf(item, sizeof(item), "dec=%.*s", (int)(n < 24 ? n : 24), q);
					strata_gpu_moe_config_defaults(&oc);
					keep = !strata_gpu_moe_config_parse(item, &oc, &oe) && oc.dec_warps == v[i][0] &&
					       oc.dec_stages == v[i][1];
					q += n + (q[n] == ',');
				}
				if (!keep)
					continue;
			}
			printf("decode variant %dx%d, split %u\n", v[i][0], v[i][1], split[j]);
			struct strata_moe_config kc;
			strata_gpu_moe_config_defaults(&kc);
			kc.dec_warps = v[i][0], kc.dec_stages = v[i][1], kc.split = split[j];
			run_moe_cases(&kc, cases, sizeof(cases) / sizeof(cases[0]), 0);
		}
	kernel_config(NULL);
}

/* The default split-K choice of the warp-streaming decode kernel: tier experts
 * with at most 4 tokens each, in a launch of two to four unsplit tasks per
 * warp (12 warps per SM; 2048 x 1024 experts make 64 gate|up + 64 down tasks),
 * are cut into parts; the same launch with 6 tokens per expert is not. */
static void test_moe_decode_autosplit(void **state)
{
	(void)state;
	if (!test_have_gpu("test_moe_decode_autosplit"))
		return;
	kernel_config(NULL);
	uint32_t ne = (2 * 12 * (uint32_t)strata_gpu_sm_count() + 127) / 128 + 1;
	if (ne > STRATA_MOE_MAX_SLOTS)
		ne = STRATA_MOE_MAX_SLOTS;
	/* every token to every expert */
	const struct moe_case split = { "autosplit-2", -3, 2048, 1024, 2, ne, ne, 0 };
	const struct moe_case whole = { "autosplit-6", -3, 2048, 1024, 6, ne, ne, 0 };
	uint64_t n0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_DECODE_SPLIT);
	run_moe_case(&split);
	uint64_t n1 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_DECODE_SPLIT);
	run_moe_case(&whole);
	uint64_t n2 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_DECODE_SPLIT);
	printf("autosplit: %u experts, split launches %llu at 2 tokens, %llu at 6\n", ne,
	       (unsigned long long)(n1 - n0), (unsigned long long)(n2 - n1));
	assert_int_equal(n1 - n0, 2); /* two calls, one launch each */
	assert_int_equal(n2 - n1, 0);
}

/* The bf16 decode kernel (moe_dec_bf16.cuh: launches of <= 8 tokens per
 * expert, all bf16) in every compiled variant (warps x ring depth) and with
 * K chunks of 32 weights (one unit per task: the ring spans many tasks, 32
 * split-K chunks per gate|up row), 64, the default and one chunk per row (h
 * formed in registers), against the persistent kernel (0); tokens shared
 * between experts, tasks shorter than the ring, uneven last chunks (hidden
 * 4160), down tasks that wait for their slot's h.  The second run of each
 * case checks that the split-K scratch and counters were left zero. */
static void test_moe_bf16_decode(void **state)
{
	if (!test_have_gpu("test_moe_bf16_decode"))
		return;
	static const struct {
		int nw, depth;
		uint32_t kc;
	} v[] = { { 0, 0, 0 }, { 16, 4, 0 }, { 12, 6, 64 }, { 8, 8, 32 }, { 16, 4, 1u << 20 }, { 12, 6, 0 },
		  { 8, 8, 0 } };
	static const struct moe_case cases[] = {
		{ "bf16dec-1", STRATA_FMT_BF16, 1024, 512, 1, 6, 4, 0 },
		{ "bf16dec-4", STRATA_FMT_BF16, 768, 320, 4, 5, 3, 0 },
		{ "bf16dec-8-odd", STRATA_FMT_BF16, 544, 96, 8, 3, 2, 0 },
		{ "bf16dec-7-shared", STRATA_FMT_BF16, 2048, 768, 7, 20, 6, 0 },
		{ "bf16dec-wide", STRATA_FMT_BF16, 4160, 160, 2, 3, 2, 0 },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		printf("bf16 decode variant %dx%d kc %u\n", v[i].nw, v[i].depth, v[i].kc);
		struct strata_moe_config kc;
		strata_gpu_moe_config_defaults(&kc);
		kc.bf16_warps = v[i].nw, kc.bf16_depth = v[i].depth;
		if (v[i].kc)
			kc.bf16_kc = v[i].kc;
		uint64_t n0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_BF16_DECODE);
		run_moe_cases(&kc, cases, sizeof(cases) / sizeof(cases[0]), 0);
		/* two calls per case, one launch each; none on the persistent kernel */
		uint64_t n = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_BF16_DECODE) - n0;
		assert_int_equal(n, v[i].nw ? 2 * sizeof(cases) / sizeof(cases[0]) : 0);
	}
	kernel_config(NULL);
}

/* fp16 range guard: activations beyond the fp16 range (and rows whose
 * gate * up is) through a tier expert layer with T tokens per expert (two
 * experts, top-2: every token goes to both); pf_min as in run_moe_case_ex
 * (1: the tiled prefill path whatever T; UINT32_MAX: the persistent kernel). */
static void run_range_case(int fmt, uint32_t hidden, uint32_t inter, uint32_t T, uint32_t pf_min)
{
	char name[64];
	snprintf(name, sizeof(name), "range-%s-%u%s", strata_fmt_traits(fmt)->name, T,
		 pf_min == UINT32_MAX ? "-persistent" : "");
	const struct moe_case mc = { name, fmt, hidden, inter, T, 2, 2, pf_min };
	run_moe_case_ex(&mc, 1, pf_min);
}

static void test_moe_range(void **state)
{
	if (!test_have_gpu("test_moe_range"))
		return;
	/* tiled prefill path: 128 x 128 tiles (16 warps), 64 x 256 (>= 192
	 * tokens), 64 x 64 (<= 64 tokens); padded tier rows (inter 320, 336) */
	run_range_case(STRATA_FMT_HOT, 1024, 512, 160, 0);
	run_range_case(STRATA_FMT_WARM, 640, 320, 200, 0);
	run_range_case(STRATA_FMT_COLD, 672, 336, 100, 0);
	run_range_case(STRATA_FMT_HOT, 768, 384, 40, 1);
	run_range_case(STRATA_FMT_COLD, 512, 256, 63, 1);
	run_range_case(STRATA_FMT_WARM, 8448, 128, 64, 0); /* hidden 8448: > 4 chunks per pf_prep thread */
	run_range_case(STRATA_FMT_BF16, 512, 256, 100, 0); /* bf16 has the range: no guard needed */
	/* the decode paths: test_moe_outliers */
}

/* Whether name holds one of the comma-separated items of list (a NULL or
 * empty list: every name). */
static int case_in(const char *list, const char *name)
{
	if (!list || !*list)
		return 1;
	char buf[256], *save = NULL;
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (strstr(name, tok))
			return 1;
	return 0;
}

/* Whether STRATA_CASES (name,...: a short memcheck run) picks a case. */
static int case_picked(const char *name) { return case_in(getenv("STRATA_CASES"), name); }

/* Whether STRATA_CFGS (kernel configurations separated by ';', "default" for
 * the default one: a short run of a test that loops over configurations)
 * picks configuration cfg. */
static int cfg_picked(const char *cfg) { return in_list_sep(getenv("STRATA_CFGS"), *cfg ? cfg : "default", ';'); }

/* The sm_90a prefill kernel (moe_prefill_sm90.cuh) against the reference,
 * forced for every prefill expert (prefill=sm90; sm90ws: tier experts on
 * the warp-specialized tile; sm90p / sm90p1 / sm90p3: tier experts as BF16
 * tiles of 256 tokens from two / one / three producer warpgroups, bf16 bound, their launches
 * counted; sm90pc: activations staged by the MMA warpgroups; sm90pp: sm90pc
 * persistent (a CTA per SM running every gridDim.x-th tile: mixed formats,
 * token tiles and row tiles in one CTA), sm90pp2: two steps per producer
 * hand-over; sm90ph: the same
 * tile as fp16 tiles with per-row exponents, fp16 activations (the range-guard
 * cases: flagged down tiles staging h through registers); prefill_min=1),
 * then the same calls on the mma.sync kernel (prefill=mma): bf16 and tier experts,
 * one to three token tiles (bf16 256 tokens, tiers 128 or 256), partial token, row
 * and K tiles (bf16 K not a multiple of the 64-weight step), padded tier
 * rows, mixed calls (f32 experts on the persistent kernel), few tokens;
 * activations beyond the fp16 range (the gate|up segment exponents and the
 * down tiles that fold per 32 columns).  On a GPU or build without sm_90a
 * the sm90 setting falls back to the mma kernel (said, and checked). */
static void test_moe_prefill_sm90(void **state)
{
	if (!test_have_gpu("test_moe_prefill_sm90"))
		return;
	static const struct moe_case cases[] = {
		{ "s90-bf16-256", STRATA_FMT_BF16, 1024, 512, 256, 2, 2, 1 },
		{ "s90-bf16-300", STRATA_FMT_BF16, 512, 384, 300, 3, 2, 1 },
		{ "s90-bf16-odd", STRATA_FMT_BF16, 544, 96, 140, 2, 2, 1 },
		{ "s90-hot", STRATA_FMT_HOT, 1024, 512, 200, 3, 2, 1 },
		{ "s90-hot-256", STRATA_FMT_HOT, 1536, 768, 256, 2, 2, 1 },
		{ "s90-warm-padded", STRATA_FMT_WARM, 640, 320, 150, 2, 2, 1 },
		{ "s90-cold", STRATA_FMT_COLD, 768, 1280, 160, 2, 1, 1 },
		{ "s90-mixed", -1, 1024, 256, 200, 5, 3, 1 },
		{ "s90-few", STRATA_FMT_HOT, 512, 256, 40, 2, 2, 1 },
		{ "s90-bf16-few", STRATA_FMT_BF16, 512, 256, 20, 2, 2, 1 },
		{ "s90-cold-520", STRATA_FMT_COLD, 512, 320, 520, 2, 2, 1 }, /* 3 token tiles of 256 */
		{ "s90-tiers-300", -3, 768, 384, 300, 3, 3, 1 },
	};
	static const char *const cfgs[] = { "prefill=sm90pp", "prefill=sm90pp2", "prefill=sm90ph", "prefill=sm90p",
					    "prefill=sm90pc", "prefill=sm90p1", "prefill=sm90p3", "prefill=sm90",
					    "prefill=sm90ws", "prefill=mma" };
	const int usable = strata_gpu_moe_prefill_sm90_usable();
	if (!usable)
		printf("note: test_moe_prefill_sm90: this GPU or build is not sm_90a; prefill=sm90 falls back to the mma kernel\n");
	/* STRATA_TEST_PREFILL=sm90p,auto,...: only those prefill values (e.g. under
	 * compute-sanitizer in a short device call) */
	const char *only = getenv("STRATA_TEST_PREFILL");
	for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
		struct strata_moe_config kc;
		struct strata_error err = { 0 };
		if (!in_list(only, cfgs[i] + strlen("prefill=")))
			continue;
		strata_gpu_moe_config_defaults(&kc);
		assert_int_equal(strata_gpu_moe_config_parse(cfgs[i], &kc, &err), STRATA_OK);
		kernel_config(&kc);
		printf("prefill kernels, kernel config '%s'\n", cfgs[i]);
		const int bf16_tiles = kc.pf_path >= 4;
		const uint64_t n0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_PREFILL_SM90),
			       p0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_PREFILL_SM90P);
		/* STRATA_CASES=name,...: only those cases (range cases: range-FMT-T),
		 * without the launch counts below */
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
			if (case_picked(cases[c].name))
				run_moe_case(&cases[c]);
		if (case_picked("range-hot-160"))
			run_range_case(STRATA_FMT_HOT, 1024, 512, 160, 1);
		if (case_picked("range-warm-200"))
			run_range_case(STRATA_FMT_WARM, 640, 320, 200, 1);
		if (case_picked("range-cold-100"))
			run_range_case(STRATA_FMT_COLD, 672, 336, 100, 1);
		if (case_picked("range-bf16-100"))
			run_range_case(STRATA_FMT_BF16, 512, 256, 100, 1);
		const uint64_t n = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_PREFILL_SM90) - n0;
		const uint64_t np = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_PREFILL_SM90P) - p0;
		printf("prefill kernels '%s': %llu sm90 launches, %llu of them tier experts as BF16 tiles\n", cfgs[i],
		       (unsigned long long)n, (unsigned long long)np);
		if (getenv("STRATA_CASES"))
			continue;
		/* two launches (gate|up, down) per format group and call, two calls per case */
		if (usable && kc.pf_path != 2)
			assert_true(n >= 2 * 2 * (sizeof(cases) / sizeof(cases[0]) + 4));
		else
			assert_int_equal(n, 0);
		/* sm90p / sm90p1: every case and range case with tier experts (8 + 3) */
		if (usable && bf16_tiles)
			assert_true(np >= 2 * 2 * 11);
		else
			assert_int_equal(np, 0);
	}
	/* auto: tier experts with >= prefill_tiles tokens (default 32) take the
	 * BF16 tiles on an sm_90a GPU, fewer tokens the mma.sync kernel; off:
	 * never.  Two experts, top-2: each expert has every token. */
	static const struct {
		const char *cfg;
		struct moe_case mc;
		int tiles;
	} autos[] = {
		{ "prefill=auto", { "s90-auto-300", STRATA_FMT_HOT, 1024, 512, 300, 2, 2, 0 }, 1 },
		{ "prefill=auto", { "s90-auto-tiers-128", -3, 768, 384, 128, 3, 3, 0 }, 1 },
		{ "prefill=auto", { "s90-auto-24", STRATA_FMT_WARM, 640, 320, 24, 2, 2, 0 }, 0 },
		{ "prefill=auto,prefill_tiles=off", { "s90-auto-off", STRATA_FMT_COLD, 768, 384, 300, 2, 2, 0 }, 0 },
		{ "prefill=auto,prefill_tiles=20", { "s90-auto-24-on", STRATA_FMT_COLD, 768, 384, 24, 2, 2, 0 }, 1 },
	};
	for (size_t i = 0; i < sizeof(autos) / sizeof(autos[0]) && in_list(only, "auto"); i++) {
		struct strata_moe_config kc;
		struct strata_error err = { 0 };
		strata_gpu_moe_config_defaults(&kc);
		assert_int_equal(strata_gpu_moe_config_parse(autos[i].cfg, &kc, &err), STRATA_OK);
		kernel_config(&kc);
		const uint64_t p0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_PREFILL_SM90P);
		run_moe_case(&autos[i].mc);
		const uint64_t np = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_PREFILL_SM90P) - p0;
		printf("prefill kernels '%s', %s: %llu launches of tier experts as BF16 tiles\n", autos[i].cfg,
		       autos[i].mc.name, (unsigned long long)np);
		if (usable && autos[i].tiles)
			assert_true(np >= 4);
		else
			assert_int_equal(np, 0);
	}
	kernel_config(NULL);
}

/* The scalar formats (q4, q3): decode (<= 16 tokens per expert) on the
 * warp-streaming kernel with split-K parts as it chooses, forced variants
 * and one part per block; more tokens, and every call with that kernel off,
 * as BF16 copies (the tiled prefill path, the persistent kernel); calls that
 * mix them with every other format (-4); padded rows (520 x 200), two token
 * tiles (13, 16 tokens); activations beyond the fp16 range on each path. */
static void test_moe_scalar(void **state)
{
	if (!test_have_gpu("test_moe_scalar"))
		return;
	static const struct moe_case cases[] = {
		{ "q4-1", STRATA_FMT_Q4, 1024, 512, 1, 6, 4, 0 },
		{ "q3-4", STRATA_FMT_Q3, 768, 384, 4, 4, 2, 0 },
		{ "q4-16", STRATA_FMT_Q4, 1024, 512, 16, 2, 2, 0 },
		{ "q3-rows", STRATA_FMT_Q3, 520, 200, 3, 3, 2, 0 },
		{ "q4-rows-13", STRATA_FMT_Q4, 520, 200, 13, 3, 2, 0 },
		{ "q4-prefill", STRATA_FMT_Q4, 512, 256, 100, 2, 2, 0 },
		{ "q3-prefill-40", STRATA_FMT_Q3, 768, 384, 40, 2, 2, 0 },
		{ "sq-mixed-5", -4, 1024, 256, 5, 14, 4, 0 },
		{ "sq-mixed-pf", -4, 1024, 256, 200, 7, 3, 0 },
	};
	/* sq_gv=0: moe_dec_sq.cuh's kernel for the <= 4-token cases too (the
	 * default, first, runs them on the row-streaming kernel) */
	static const char *const cfgs[] = { "", "sq_gv=0", "sq_gv=0,sq_pf=1", "sq_gv=0,sq_xs=0", "dec=off",
					    "dec=8x4,split=64", "dec=12x4u,split=3", "sqdec=off" };
	for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
		struct strata_moe_config kc;
		struct strata_error err = { 0 };
		strata_gpu_moe_config_defaults(&kc);
		assert_int_equal(strata_gpu_moe_config_parse(cfgs[i][0] ? cfgs[i] : "split=auto", &kc, &err), STRATA_OK);
		kernel_config(&kc);
		printf("scalar formats, kernel config '%s'\n", cfgs[i]);
		const int off = kc.dec_warps == 0;
		const uint64_t n0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_DECODE),
			       x0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_STAGED),
			       g0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_GEMV);
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
			if (!off || (cases[c].hidden % 32 == 0 && cases[c].inter % 32 == 0)) /* BF16 copies: see below */
				run_moe_case(&cases[c]);
		const struct moe_case big[] = { { "big-q4-2", STRATA_FMT_Q4, 1024, 512, 2, 2, 2, 0 },
						{ "big-q3-rows-12", STRATA_FMT_Q3, 520, 200, 12, 2, 2, 0 },
						{ "big-q4-60", STRATA_FMT_Q4, 768, 384, 60, 2, 2, 0 },
						{ "big-q3-rows-3", STRATA_FMT_Q3, 520, 200, 3, 2, 2, 0 } };
		for (size_t c = 0; c < sizeof(big) / sizeof(big[0]); c++)
			if (!off || (big[c].hidden % 32 == 0 && big[c].inter % 32 == 0))
				run_moe_case_ex(&big[c], 1, 0);
		/* the default configuration runs the <= 8-token cases on the scalar
		 * decode kernel (moe_dec_sq.cuh) with x staged in shared memory (these
		 * x fit), sq_pf=1 and sq_xs=0 on that kernel with x through L1, the
		 * forced variants on dec_kernel */
		const uint64_t n = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_DECODE) - n0;
		const uint64_t nx = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_STAGED) - x0;
		const uint64_t ng = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_GEMV) - g0;
		printf("scalar decode kernel launches: %llu, x staged: %llu, row-streaming: %llu\n",
		       (unsigned long long)n, (unsigned long long)nx, (unsigned long long)ng);
		const int def = i == 0;
		if (i >= 1 && i <= 3)
			assert_true(n > 0);
		else if (!def)
			assert_true(n == 0);
		if (i == 1)
			assert_true(nx > 0);
		else if (!def)
			assert_true(nx == 0);
		if (def)
			assert_true(ng > 0);
		else
			assert_true(ng == 0);
	}
	kernel_config(NULL);
	/* More than 16 tokens at a shape the BF16 copies cannot run: a clear error. */
	struct strata_error err = { 0 };
	struct strata_expert_layout E;
	assert_int_equal(strata_expert_layout(STRATA_FMT_Q4, 520, 200, &E), 0);
	uint8_t *dext = dmalloc(E.bytes);
	float *dx = dmalloc(20 * 520 * 4), *dy = dmalloc(20 * 520 * 4);
	assert_int_equal(strata_gpu_memset(dext, 0, E.bytes, &err), STRATA_OK);
	const void *ext[1] = { dext };
	uint8_t fmt = STRATA_FMT_Q4;
	uint32_t ae[20], at[20];
	float aw[20];
	for (int i = 0; i < 20; i++)
		ae[i] = 0, at[i] = (uint32_t)i, aw[i] = 1;
	struct strata_moe_call c = { .hidden = 520, .inter = 200, .n_tokens = 20, .x = dx, .y = dy, .n_experts = 1,
				     .extents = ext, .fmts = &fmt, .n_assign = 20, .assign_expert = ae,
				     .assign_token = at, .assign_weight = aw };
	assert_int_equal(strata_moe_layer_gpu(&c, &err), STRATA_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "multiples of 32"));
	strata_gpu_free(dext), strata_gpu_free(dx), strata_gpu_free(dy);
}


/* The row-streaming q4/q3 kernel (moe_dec_gv.cuh) at the Kimi-K2 and
 * Qwen3-30B-A3B expert shapes, 1 - 4 tokens, padded rows, and mixed with tier
 * experts in one call, against the CPU reference on fresh random inputs (h
 * poisoned with NaN): each case's two calls each run one gate|up + down pair
 * of it under every configuration but sq_gv=0 (nor for a large q4 launch of
 * 3 tokens, "-ring": the ring kernel is faster there). */
static void test_moe_scalar_gv(void **state)
{
	if (!test_have_gpu("test_moe_scalar_gv"))
		return;
	static const struct moe_case cases[] = {
		{ "gv-kimi-q4-1", STRATA_FMT_Q4, 7168, 1536, 1, 2, 2, 0 },
		{ "gv-kimi-q3-3", STRATA_FMT_Q3, 7168, 1536, 3, 2, 2, 0 },
		{ "gv-qwen-q4-4", STRATA_FMT_Q4, 2048, 768, 4, 8, 8, 0 },
		{ "gv-qwen-q3-1", STRATA_FMT_Q3, 2048, 768, 1, 8, 8, 0 },
		{ "gv-q4-rows-3", STRATA_FMT_Q4, 520, 200, 3, 3, 2, 0 },
		{ "gv-mix-q4-2", -5, 1024, 512, 2, 8, 7, 0 },  /* 7 of 8: a q4 expert in every token's */
		{ "gv-mix-q3-4", -6, 768, 384, 4, 8, 7, 0 },
		{ "gv-many-q4-1", STRATA_FMT_Q4, 512, 256, 1, 40, 24, 0 },
		/* every compile-time lanes-per-row variant (2 - 16 lanes) of both
		 * formats at 1, 2 and 4 tokens, and the run-time one */
		{ "gv-q3-l8-1", STRATA_FMT_Q3, 1024, 512, 1, 8, 7, 0 },
		{ "gv-many-q3-2", STRATA_FMT_Q3, 512, 256, 2, 40, 24, 0 },
		{ "gv-qwen-q4-2", STRATA_FMT_Q4, 2048, 768, 2, 8, 8, 0 },
		{ "gv-qwen-q3-2", STRATA_FMT_Q3, 2048, 768, 2, 8, 8, 0 },
		{ "gv-q3-l8d-1", STRATA_FMT_Q3, 4096, 1024, 1, 16, 8, 0 },
		{ "gv-q4-l8d-4", STRATA_FMT_Q4, 4096, 1024, 4, 8, 8, 0 },
		/* q4 at 3 tokens over 5 Kimi-shaped experts: the ring kernel */
		{ "gv-kimi-q4-3-ring", STRATA_FMT_Q4, 7168, 1536, 3, 5, 5, 0 },
		{ "gv-kimi-q3-1", STRATA_FMT_Q3, 7168, 1536, 1, 2, 2, 0 },
		{ "gv-q4-l8-1", STRATA_FMT_Q4, 1024, 512, 1, 8, 7, 0 },
		/* x rows of 513 - 1024 8-column slices in all (sq_gvs=1: two slices
		 * per thread in one pass), with padded columns (2592 of 2816) */
		{ "gv-pad-q4-2", STRATA_FMT_Q4, 2592, 224, 2, 3, 2, 0 },
		{ "gv-pad-q3-2", STRATA_FMT_Q3, 2592, 224, 2, 3, 2, 0 },
	};
	/* The default on every case; sq_gv=2 (the earlier q4 loop) and 0 (the
	 * ring kernel) on the padded rows and the Qwen shape; q3's fp16 loop
	 * (sq_q3i=0) on three q3 cases and its integer loop at 3 - 4 tokens
	 * (sq_q3i=2); 12 and 8 warps (sq_gvw) on one-token cases (compile-time
	 * and run-time lanes per row); lanes per row forced (sq_gvl); the staging
	 * with one slice per thread or two passes (sq_gvs=0), and with two slices
	 * per thread loaded after the first weights (sq_gvs=1), on the cases whose
	 * x rows the default stages two slices per thread.  At 1 - 2 tokens the
	 * default takes several rows per lane (sq_gvx=1; 8, 16 and 32 lanes per
	 * row set) in at least one launch of every case (Qwen's q3 down rows of
	 * 12 chunks keep a row per lane) but the mixed ones (not counted) and
	 * gv-pad-q3-2 (44 chunks per gate|up row, 4 per down row: none fits); a
	 * row per lane (sq_gvx=0) on the one-token cases, lanes per row forced
	 * (sq_gvl), and q3's fp16 loop (sq_q3i=0), which has none.  cases: the
	 * names holding one of these (NULL: all). */
	static const struct {
		const char *cfg, *cases;
	} cfgs[] = {
		{ "", NULL },
		{ "sq_gv=2", "gv-q4-rows-3,gv-qwen-q4-4" },
		{ "sq_gv=0", "gv-q4-rows-3,gv-qwen-q4-4" },
		{ "sq_q3i=0", "gv-q3-l8-1,gv-many-q3-2,gv-kimi-q3-1" },
		{ "sq_q3i=2", "gv-kimi-q3-3,gv-mix-q3-4" },
		{ "sq_gvw=12", "gv-kimi-q4-1,gv-kimi-q3-1,gv-q4-l8-1,gv-q3-l8-1,gv-q3-l8d-1,gv-many-q4-1" },
		{ "sq_gvw=8", "gv-kimi-q4-1,gv-kimi-q3-1,gv-q4-l8-1,gv-q3-l8-1,gv-q3-l8d-1,gv-many-q4-1" },
		{ "sq_gvl=41", "gv-q4-l8-1,gv-q3-l8-1,gv-kimi-q4-1" },
		{ "sq_gvl=52", "gv-q4-l8-1,gv-q3-l8-1,gv-many-q3-2" },
		{ "sq_gvl=3", "gv-q4-l8-1,gv-q4-rows-3" },
		{ "sq_gvs=0", "gv-kimi-q4-1,gv-kimi-q3-1,gv-qwen-q4-4,gv-pad-q4-2,gv-pad-q3-2" },
		{ "sq_gvs=1", "gv-kimi-q4-1,gv-kimi-q3-1,gv-pad-q4-2,gv-pad-q3-2" },
		{ "sq_gvx=0", "gv-kimi-q4-1,gv-kimi-q3-1,gv-qwen-q3-1,gv-many-q4-1,gv-q3-l8-1,gv-q3-l8d-1,gv-q4-l8-1" },
		{ "sq_gvl=54", "gv-kimi-q4-1,gv-q4-l8-1" },
	};
	for (size_t ci = 0; ci < sizeof(cfgs) / sizeof(cfgs[0]); ci++) {
		struct strata_moe_config kc;
		struct strata_error err = { 0 };
		strata_gpu_moe_config_defaults(&kc);
		assert_int_equal(strata_gpu_moe_config_parse(cfgs[ci].cfg, &kc, &err), STRATA_OK);
		kernel_config(&kc);
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			/* STRATA_CASES=name,...: only the cases whose names hold one of
			 * these (a short memcheck run) */
			if (!case_in(cfgs[ci].cases, cases[c].name) || !case_picked(cases[c].name) || !cfg_picked(cfgs[ci].cfg))
				continue;
			const uint64_t g0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_GEMV);
			const uint64_t x0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_GEMV_XR);
			run_moe_case(&cases[c]);
			const uint64_t ng = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_GEMV) - g0;
			const uint64_t nx = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_GEMV_XR) - x0;
			printf("moe[%s] %s: row-streaming launches %llu (several rows per lane %llu)\n", cases[c].name,
			       *cfgs[ci].cfg ? cfgs[ci].cfg : "default", (unsigned long long)ng, (unsigned long long)nx);
			assert_true(ng == (kc.sq_gv && !strstr(cases[c].name, "-ring") ? 2u : 0u));
			if (!kc.sq_gvx || cases[c].n_tokens > 2 || (!kc.sq_q3i && strstr(cases[c].name, "q3")))
				assert_true(nx == 0);
			else if ((!*cfgs[ci].cfg || !strcmp(cfgs[ci].cfg, "sq_gvl=54")) && !strstr(cases[c].name, "-mix-"))
				assert_true(nx == (strcmp(cases[c].name, "gv-pad-q3-2") ? 2u : 0u));
		}
	}
	kernel_config(NULL);
}

/* ---- a stack of layers (strata_gpu_moe_stack) ---- */

/* The tier row-streaming kernel (moe_dec_tr.cuh; kernel configuration
 * dec_tr=1: FMA decoder, 2: codebook table, 3: both) against the CPU reference on
 * fresh random inputs (h poisoned with NaN), one token per expert: the
 * Kimi-K2 and Qwen3-30B-A3B expert shapes of every tier format (compile-time
 * lanes per row, and the run-time variant for Qwen's 3-block down rows),
 * padded rows, more experts than a launch's slots.  Each call must run
 * exactly `pairs` gate|up + down pairs of it (two calls per case), none
 * under dec_tr=0, none with two tokens per expert, and under dec_tr=auto
 * (the default) only for launches of at least STRATA_MOE_TR_AUTO_WEIGHTS
 * weights ("tr-auto-*": six Kimi-sized experts; "tr-kimi-*": smaller). */
static void test_moe_dec_tr(void **state)
{
	(void)state;
	if (!test_have_gpu("test_moe_dec_tr"))
		return;
	static const struct {
		struct moe_case mc;
		unsigned pairs;
	} cases[] = {
		{ { "tr-kimi-hot-1", STRATA_FMT_HOT, 7168, 1536, 1, 3, 3, 0 }, 1 },
		{ { "tr-kimi-warm-1", STRATA_FMT_WARM, 7168, 1536, 1, 3, 2, 0 }, 1 },
		{ { "tr-kimi-cold-1", STRATA_FMT_COLD, 7168, 1536, 1, 2, 2, 0 }, 1 },
		{ { "tr-qwen-hot-1", STRATA_FMT_HOT, 2048, 768, 1, 8, 8, 0 }, 1 },
		{ { "tr-qwen-cold-1", STRATA_FMT_COLD, 2048, 768, 1, 8, 6, 0 }, 1 },
		{ { "tr-rows-warm-1", STRATA_FMT_WARM, 520, 200, 1, 3, 2, 0 }, 1 },
		{ { "tr-rows-hot-1", STRATA_FMT_HOT, 1040, 72, 1, 5, 4, 0 }, 1 },
		{ { "tr-many-cold-1", STRATA_FMT_COLD, 512, 256, 1, 300, 280, 0 }, 2 },
		{ { "tr-hot-2", STRATA_FMT_HOT, 1024, 512, 2, 2, 2, 0 }, 0 },
		{ { "tr-auto-warm-1", STRATA_FMT_WARM, 7168, 1536, 1, 6, 6, 0 }, 1 },
		{ { "tr-auto-cold-1", STRATA_FMT_COLD, 7168, 1536, 1, 6, 6, 0 }, 1 },
		{ { "tr-auto-hot-1", STRATA_FMT_HOT, 7168, 1536, 1, 6, 6, 0 }, 1 },
	};
	for (int tr = 3; tr >= -1; tr--) {
		struct strata_moe_config kc;
		strata_gpu_moe_config_defaults(&kc);
		kc.dec_tr = tr;
		kernel_config(&kc);
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			if (!case_picked(cases[c].mc.name) || (!tr && c))
				continue;
			const uint64_t g0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_TIER_GEMV);
			run_moe_case(&cases[c].mc);
			const uint64_t ng = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_TIER_GEMV) - g0;
			printf("moe[%s] dec_tr=%d: tier row-streaming launches %llu\n", cases[c].mc.name, tr,
			       (unsigned long long)ng);
			const struct moe_case *m = &cases[c].mc;
			const int taken = tr > 0 || (tr < 0 && (uint64_t)m->top_k * 3 * m->hidden * m->inter >=
								    STRATA_MOE_TR_AUTO_WEIGHTS);
			assert_true(ng == (taken ? 2u * cases[c].pairs : 0u));
		}
	}
	kernel_config(NULL);
}

struct stack_case {
	const char *name;
	uint32_t hidden, inter, n_tokens, n_experts, top_k, layers;
	int fmt[6]; /* per layer: a format, or -5 / -6: experts alternating q4 / q3 and warm */
	uint32_t k_odd; /* one token: odd layers route it to their first k_odd of top_k experts (0: all) */
	uint32_t x_back; /* 1: layers 2, 5, 8, ... read the output of the layer two back as x (not a chain) */
};

/* The layer whose output is layer l's x in stack case sc (l > 0). */
static uint32_t stack_src(const struct stack_case *sc, uint32_t l)
{
	return sc->x_back && l % 3 == 2 ? l - 2 : l - 1;
}

/* The default kernel configuration with small and pstack set. */
static struct strata_moe_config stack_cfg(int small, int pstack)
{
	struct strata_moe_config kc;
	strata_gpu_moe_config_defaults(&kc);
	kc.small = small, kc.pstack = pstack;
	return kc;
}

/* One stack: layer l reads layer l-1's y (layer 0 a random x; with
 * x_back, layers 2, 5, ... layer l-2's), each y starts as random values (a
 * residual stream), every layer its own experts and routing, its routing
 * weights scaled so that its output is the size of its residual (the
 * activations neither vanish nor grow).  Each layer's GPU output is checked
 * against the CPU reference applied to the GPU's input of that layer (the
 * GPU output of the layer it reads): a layer that
 * read its x before the previous layer had finished adding into it, or whose
 * down launch read h after the next layer's gate|up launch overwrote it,
 * gives a wrong y.  The h scratch is poisoned with NaN before the stack.
 * Runs the stack chained, chained with the L2 prefetch and as plain
 * launches, under kernel configuration kc_in (with poison on).  Returns the
 * stack's launches through the codebook table (STRATA_GPU_LAUNCH_PSTACK_TAB),
 * the same in each run. */
static uint64_t run_stack_case(const struct stack_case *sc, const struct strata_moe_config *kc_in, uint64_t ps_launches)
{
	const int small = kc_in->small, pstack = kc_in->pstack;
	struct strata_error err = { 0 };
	const uint32_t H = sc->hidden, I = sc->inter, T = sc->n_tokens, NE = sc->n_experts, K = sc->top_k, L = sc->layers;
	const size_t nx = (size_t)T * H;
	uint8_t **hext = calloc((size_t)L * NE, sizeof(*hext)), *fmts = malloc((size_t)L * NE);
	void **dext = calloc((size_t)L * NE, sizeof(*dext));
	uint32_t *ae = malloc((size_t)L * T * K * 4), *at = malloc((size_t)L * T * K * 4);
	float *aw = malloc((size_t)L * T * K * 4);
	float *x0 = malloc(nx * 4), *r = malloc(L * nx * 4), *yg = malloc(L * nx * 4), *yref = malloc(nx * 4);
	struct strata_moe_call *calls = calloc(L, sizeof(*calls));
	assert_true(hext && fmts && dext && ae && at && aw && x0 && r && yg && yref && calls && NE <= 64);
	double bound[6] = { 0 };
	uint64_t gv_layers = 0, ntab = UINT64_MAX;
	for (uint32_t l = 0; l < L; l++) {
		const uint32_t lf = l < 6 ? l : 5; /* sc->fmt and bound: past the sixth layer as the sixth */
		const size_t a0 = (size_t)l * T * K;
		random_routing(T, K, NE, ae + a0, at + a0, aw + a0);
		uint8_t routed[64] = { 0 };
		for (uint32_t a = 0; a < T * K; a++)
			routed[ae[a0 + a]] = 1;
		for (uint32_t e = 0; e < NE; e++) {
			const int f = sc->fmt[lf];
			uint8_t *fm = &fmts[l * NE + e];
			*fm = (uint8_t)(f >= 0 ? f : e % 2 ? STRATA_FMT_WARM : f == -5 ? STRATA_FMT_Q4 : STRATA_FMT_Q3);
			struct strata_expert_layout E;
			/* experts no token picks: zeros (never read) */
			if (routed[e]) {
				hext[l * NE + e] = make_expert_by(*fm, H, I, &E, stack_matrix);
			} else {
				assert_int_equal(strata_expert_layout(*fm, H, I, &E), 0);
				assert_non_null(hext[l * NE + e] = calloc(1, E.bytes));
			}
			dext[l * NE + e] = dmalloc(E.bytes);
			h2d(dext[l * NE + e], hext[l * NE + e], E.bytes);
			/* T: the most tokens any expert of the layer can have */
			const double b = bound_for(*fm, tier_bf16_tiles(T, 0));
			bound[lf] = b > bound[lf] ? b : bound[lf];
		}
		/* the row-streaming kernel takes the layer's q4/q3 experts when each has
		 * at most 4 tokens (more: BF16 copies, as plain launches in a stack) */
		uint32_t most = 0, cnt[64] = { 0 };
		for (uint32_t a = 0; a < T * K; a++)
			if (strata_fmt_is_scalar(fmts[l * NE + ae[a0 + a]]) && ++cnt[ae[a0 + a]] > most)
				most = cnt[ae[a0 + a]];
		gv_layers += most && most <= 4;
	}
	for (size_t i = 0; i < nx; i++)
		x0[i] = rnd_w();
	/* residuals: each layer's output is scaled to their size below */
	for (size_t i = 0; i < L * nx; i++)
		r[i] = 0.05f * rnd_w();
	float *dx = dmalloc(nx * 4), *dy = dmalloc(L * nx * 4);
	h2d(dx, x0, nx * 4);
	h2d(dy, r, L * nx * 4);
	for (uint32_t l = 0; l < L; l++)
		calls[l] = (struct strata_moe_call){
			.hidden = H, .inter = I, .n_tokens = T, .x = l ? dy + stack_src(sc, l) * nx : dx, .y = dy + l * nx,
			.n_experts = NE, .extents = (const void *const *)(dext + l * NE), .fmts = fmts + l * NE,
			.n_assign = T * (sc->k_odd && l % 2 ? sc->k_odd : K), .assign_expert = ae + (size_t)l * T * K,
			.assign_token = at + (size_t)l * T * K,
			.assign_weight = aw + (size_t)l * T * K,
		};
	/* Each layer's routing weights scaled so that its output is the size of
	 * its residual (the CPU reference along the stack): a layer is quadratic
	 * in its input (silu(gate) x up), so a stack whose synthetic experts gain
	 * grows doubly exponentially (a 1024 x 512 cold stack overflowed to inf
	 * by its fifth layer) and one whose experts lose vanishes into its
	 * residuals. */
	{
		float *xc = malloc(L * nx * 4), *yc = malloc(nx * 4);
		assert_true(xc && yc);
		for (uint32_t l = 0; l < L; l++) {
			struct strata_moe_call c = calls[l];
			memcpy(yc, r + l * nx, nx * 4);
			c.x = l ? xc + stack_src(sc, l) * nx : x0, c.y = yc, c.extents = (const void *const *)(hext + l * NE);
			assert_int_equal(strata_moe_layer_ref(&c, &err), STRATA_OK);
			double o = 0, rr = 0;
			for (size_t i = 0; i < nx; i++) {
				const double d = (double)yc[i] - r[l * nx + i];
				o += d * d, rr += (double)r[l * nx + i] * r[l * nx + i];
			}
			assert_true(isfinite(o) && o > 0);
			const float g = (float)sqrt(rr / o);
			for (size_t a = 0; a < (size_t)T * K; a++)
				aw[(size_t)l * T * K + a] *= g;
			for (size_t i = 0; i < nx; i++)
				xc[l * nx + i] = r[l * nx + i] + g * (yc[i] - r[l * nx + i]);
		}
		free(xc), free(yc);
	}
	/* the same stack chained, chained with the L2 prefetch, as plain launches */
	static const unsigned flags[] = { 0, STRATA_MOE_STACK_L2PF, STRATA_MOE_STACK_PLAIN };
	for (int f = 0; f < 3; f++) {
		struct strata_moe_config kc = *kc_in;
		kc.poison = 1;
		kernel_config(&kc);
		h2d(dy, r, L * nx * 4);
		const uint64_t c0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_CHAINED);
		const uint64_t g0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_GEMV);
		const uint64_t s0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SMALL);
		const uint64_t p0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_PSTACK);
		const uint64_t t0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_PSTACK_TAB);
		int rc = strata_gpu_moe_stack(calls, L, flags[f], &err);
		if (rc)
			fprintf(stderr, "stack[%s]: %s\n", sc->name, err.msg);
		assert_int_equal(rc, STRATA_OK);
		assert_int_equal(strata_gpu_sync(&err), STRATA_OK);
		const uint64_t chained = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_CHAINED) - c0;
		const uint64_t gv = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SCALAR_GEMV) - g0;
		const uint64_t nsm = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SMALL) - s0;
		const uint64_t nps = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_PSTACK) - p0;
		const uint64_t nt = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_PSTACK_TAB) - t0;
		d2h(yg, dy, L * nx * 4);
		kernel_config(NULL);
		double worst = 0, mag = 0;
		for (uint32_t l = 0; l < L; l++) {
			memcpy(yref, r + l * nx, nx * 4);
			struct strata_moe_call c = calls[l];
			c.x = l ? yg + stack_src(sc, l) * nx : x0, c.y = yref, c.extents = (const void *const *)(hext + l * NE);
			assert_int_equal(strata_moe_layer_ref(&c, &err), STRATA_OK);
			int nonfinite;
			const double re = rel_err(yg + l * nx, yref, r + l * nx, nx, &nonfinite);
			/* the layer's output against its residual: must be visible in y */
			double num = 0, den = 0;
			for (size_t i = 0; i < nx; i++) {
				const double o = (double)yref[i] - r[l * nx + i];
				num += o * o, den += (double)r[l * nx + i] * r[l * nx + i];
			}
			mag += sqrt(num / den) / L;
			worst = re > worst ? re : worst;
			const double bl = bound[l < 6 ? l : 5];
			if (nonfinite || re >= bl)
				fprintf(stderr, "stack[%s] flags=%u layer %u: rel err %.3g (bound %.3g), %d not finite\n",
					sc->name, flags[f], l, re, bl, nonfinite);
			assert_int_equal(nonfinite, 0);
			assert_true(re < bl);
		}
		printf("stack[%s] H=%u I=%u T=%u E=%u k=%u layers=%u flags=%u: worst layer rel err %.3g, "
		       "layer output / residual %.3g, chained launches %llu, row-streaming layer launches %llu, "
		       "small-layer launches %llu, pstack launches %llu (codebook table %llu)\n",
		       sc->name, H, I, T, NE, K, L, flags[f], worst, mag, (unsigned long long)chained,
		       (unsigned long long)gv, (unsigned long long)nsm, (unsigned long long)nps, (unsigned long long)nt);
		assert_true(mag > 0.05); /* each layer's output is a visible part of the next layer's input */
		/* pstack on: the whole stack in ps_launches launches of the persistent
		 * stack kernel and nothing else, or (0) every layer as below */
		assert_true(nps == (pstack ? ps_launches : 0u));
		/* through the table: all of them or none, in every run */
		assert_true(nt == 0 || nt == nps);
		assert_true(ntab == UINT64_MAX || nt == ntab);
		ntab = nt;
		if (nps) {
			assert_true(chained == 0 && gv == 0 && nsm == 0);
			continue;
		}
		/* every layer chained but those on the row-streaming q4/q3 kernel
		 * (plain in a stack), none plain; at 17 or more tokens per expert (the
		 * prefill path, BF16 copies of q4/q3 experts) no launch is chained */
		assert_true(flags[f] & STRATA_MOE_STACK_PLAIN || T > 16 ? chained == 0 : chained >= L - gv);
		assert_true(gv < L || chained == 0); /* a stack of row-streaming layers only: none chained */
		/* the layers with q4 / q3 experts ran on the row-streaming kernel, one
		 * pair each; with small=1 (one format, one token per expert in every
		 * layer of those cases) every layer on the one-launch kernel */
		assert_true(gv == (small ? 0 : gv_layers));
		assert_true(nsm == (small ? L : 0u));
	}
	for (uint32_t i = 0; i < L * NE; i++) {
		strata_gpu_free(dext[i]);
		free(hext[i]);
	}
	strata_gpu_free(dx), strata_gpu_free(dy);
	free(hext), free(fmts), free(dext), free(ae), free(at), free(aw), free(x0), free(r), free(yg), free(yref);
	free(calls);
	return ntab;
}

/* Stacks on the chained launches (with and without the L2 prefetch) and on
 * plain launches: Qwen3-30B-A3B-shaped q4 and q3 (the row-streaming kernel,
 * plain launches in a stack too),
 * hot (the persistent kernel), layers of different formats, mixed layers
 * (two launches per layer), 20 tokens per expert (the prefill path, BF16
 * copies of q4/q3 experts: plain launches), a Kimi-shaped q4 stack (no
 * prefetch: too big), a stack that is not a chain (layers reading the
 * output of the layer two back). */
static void test_moe_stack(void **state)
{
	(void)state;
	struct strata_error err = { 0 };
	if (!test_have_gpu("test_moe_stack")) {
		assert_int_equal(strata_gpu_moe_stack(NULL, 0, 0, &err), STRATA_EUNSUPPORTED);
		return;
	}
	static const struct stack_case cases[] = {
		{ "stack-qwen-q4", 2048, 768, 1, 8, 8, 3, { STRATA_FMT_Q4, STRATA_FMT_Q4, STRATA_FMT_Q4 }, 0, 0 },
		{ "stack-qwen-q3", 2048, 768, 3, 6, 4, 2, { STRATA_FMT_Q3, STRATA_FMT_Q3 }, 0, 0 },
		{ "stack-qwen-hot", 2048, 768, 1, 8, 8, 3, { STRATA_FMT_HOT, STRATA_FMT_HOT, STRATA_FMT_HOT }, 0, 0 },
		{ "stack-mix", 1024, 512, 2, 6, 4, 6,
		  { STRATA_FMT_Q4, STRATA_FMT_HOT, STRATA_FMT_Q3, -5, STRATA_FMT_COLD, -6 }, 0, 0 },
		{ "stack-big-q4", 512, 256, 20, 2, 2, 3, { STRATA_FMT_Q4, STRATA_FMT_HOT, -6 }, 0, 0 },
		{ "stack-kimi-q4", 7168, 1536, 1, 1, 1, 2, { STRATA_FMT_Q4, STRATA_FMT_Q4 }, 0, 0 },
		/* layers 2 and 5 read the output of layers 0 and 3 (not a chain) */
		{ "stack-back-mix", 1024, 512, 1, 6, 4, 6,
		  { STRATA_FMT_Q4, STRATA_FMT_HOT, STRATA_FMT_Q3, STRATA_FMT_WARM, STRATA_FMT_COLD, STRATA_FMT_HOT }, 0, 1 },
	};
	/* the small-layer kernel off (test_moe_small runs these stacks on it) */
	const struct strata_moe_config k0 = stack_cfg(0, 0);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
		if (case_picked(cases[c].name))
			run_stack_case(&cases[c], &k0, 0);
	/* bad calls */
	struct strata_moe_call two[2] = { { 0 } };
	assert_int_equal(strata_gpu_moe_stack(two, 0, 0, &err), STRATA_EINVAL);
	assert_int_equal(strata_gpu_moe_stack(two, 2, 8, &err), STRATA_EINVAL);
	two[1].stream = (strata_gpu_stream *)&err;
	assert_int_equal(strata_gpu_moe_stack(two, 2, 0, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "layer 1"));
}

static void check_small_phases(uint32_t n, int early_issue);

/* Stacks in one launch per 16 layers (kernel configuration pstack=2) against
 * the CPU reference, every layer applied to its GPU input (h poisoned with
 * NaN).  The persistent stack kernel (moe_dec_ps.cuh, two pieces in
 * flight): Qwen3-30B-A3B-shaped q4 and q3 stacks of 8 experts a layer, q4 of
 * 6, 16 (q4) and 12 (q3) experts a layer over 18 and 17 layers (two
 * launches), fewer gate|up row sets than CTAs, layers of 8 and 3 (q4) and
 * of 12 and 5 (q3) experts in one launch, stacks that are not chains (a
 * layer reading the output of the layer two back).  The small-layer kernel
 * over the stack (moe_dec_small.cuh): Qwen-shaped hot and warm stacks, 16
 * cold experts a layer over 18 layers (two launches), fewer tasks than
 * CTAs.  Each must run in exactly the launches given, and the stacks
 * neither takes (q4 and q3 layers, hot and warm layers, two tokens, a layer
 * of hot experts among q4, x rows wider than a slice per thread, rows of
 * 1.5 x 32 q4 or 0.5 x 16 q3 chunks (a gate|up piece is two q3 row sets of
 * 16 lanes each: rows of 16 q3 chunks are taken), hot rows that divide
 * unevenly) in none.  Then two of them with one and with eight pieces in
 * flight. */
static void test_moe_pstack(void **state)
{
	(void)state;
	if (!test_have_gpu("test_moe_pstack"))
		return;
	enum { Q4 = STRATA_FMT_Q4, Q3 = STRATA_FMT_Q3, HOT = STRATA_FMT_HOT, WARM = STRATA_FMT_WARM, COLD = STRATA_FMT_COLD };
	static const struct {
		struct stack_case sc;
		uint64_t launches;
	} cases[] = {
		{ { "ps-qwen-q4", 2048, 768, 1, 8, 8, 3, { Q4, Q4, Q4, Q4, Q4, Q4 }, 0, 0 }, 1 },
		{ { "ps-qwen-k6", 2048, 768, 1, 64, 6, 2, { Q4, Q4, Q4, Q4, Q4, Q4 }, 0, 0 }, 1 },
		{ { "ps-many-q4", 1024, 512, 1, 16, 16, 18, { Q4, Q4, Q4, Q4, Q4, Q4 }, 0, 0 }, 2 },
		{ { "ps-few-q4", 1024, 256, 1, 8, 2, 4, { Q4, Q4, Q4, Q4, Q4, Q4 }, 0, 0 }, 1 },
		{ { "ps-qwen-q3", 2048, 768, 1, 8, 8, 3, { Q3, Q3, Q3, Q3, Q3, Q3 }, 0, 0 }, 1 },
		{ { "ps-many-q3", 2048, 512, 1, 16, 12, 17, { Q3, Q3, Q3, Q3, Q3, Q3 }, 0, 0 }, 2 },
		{ { "ps-q4q3", 2048, 768, 1, 8, 8, 2, { Q4, Q3 }, 0, 0 }, 0 },
		{ { "ps-rows-q3", 512, 256, 1, 8, 8, 2, { Q3, Q3 }, 0, 0 }, 0 },
		/* gate|up rows of 16 q3 chunks: a chunk per lane of a row set */
		{ { "ps-half-q3", 1024, 512, 1, 8, 8, 2, { Q3, Q3 }, 0, 0 }, 1 },
		{ { "ps-qwen-t2", 2048, 768, 2, 8, 8, 2, { Q4, Q4 }, 0, 0 }, 0 },
		{ { "ps-mix", 2048, 768, 1, 8, 8, 2, { Q4, STRATA_FMT_HOT }, 0, 0 }, 0 },
		{ { "ps-kimi-q4", 7168, 1536, 1, 1, 1, 2, { Q4, Q4 }, 0, 0 }, 0 },
		{ { "ps-wide-q4", 1536, 512, 1, 8, 8, 2, { Q4, Q4 }, 0, 0 }, 0 },
		{ { "ps-qwen-hot", 2048, 768, 1, 8, 8, 3, { HOT, HOT, HOT, HOT, HOT, HOT }, 0, 0 }, 1 },
		{ { "ps-qwen-warm", 2048, 768, 1, 64, 6, 2, { WARM, WARM, WARM, WARM, WARM, WARM }, 0, 0 }, 1 },
		{ { "ps-many-cold", 1024, 512, 1, 16, 16, 18, { COLD, COLD, COLD, COLD, COLD, COLD }, 0, 0 }, 2 },
		{ { "ps-few-hot", 1024, 256, 1, 8, 2, 4, { HOT, HOT, HOT, HOT, HOT, HOT }, 0, 0 }, 1 },
		{ { "ps-hot-warm", 2048, 768, 1, 8, 8, 2, { HOT, WARM }, 0, 0 }, 0 },
		{ { "ps-rows-hot", 1040, 72, 1, 5, 4, 2, { HOT, HOT }, 0, 0 }, 0 },
		{ { "ps-hot-t2", 2048, 768, 2, 8, 8, 2, { HOT, HOT }, 0, 0 }, 0 },
		/* layers of 8 and 3 experts in one launch (q4 / q3 only): the h
		 * counters' per-layer targets */
		{ { "ps-var-q4", 2048, 768, 1, 8, 8, 4, { Q4, Q4, Q4, Q4, Q4, Q4 }, 3, 0 }, 1 },
		{ { "ps-var-q3", 2048, 512, 1, 16, 12, 5, { Q3, Q3, Q3, Q3, Q3, Q3 }, 5, 0 }, 1 },
		/* layers 2 and 5 read layer 0's and 3's output (a grid barrier
		 * before each: not a chain) */
		{ { "ps-back-q4", 2048, 768, 1, 8, 8, 6, { Q4, Q4, Q4, Q4, Q4, Q4 }, 0, 1 }, 1 },
		{ { "ps-back-q3", 2048, 512, 1, 16, 8, 6, { Q3, Q3, Q3, Q3, Q3, Q3 }, 0, 1 }, 1 },
		{ { "ps-back-hot", 2048, 768, 1, 8, 8, 6, { HOT, HOT, HOT, HOT, HOT, HOT }, 0, 1 }, 1 },
	};
	const struct strata_moe_config ps2 = stack_cfg(0, 2);
	struct strata_moe_config tab = stack_cfg(0, 1);
	tab.dec_tr = 2;
	/* on the default dec_tr (auto) cold stacks go through the table where it
	 * fits (16 cold experts of 1024 x 512: surely), the others not */
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
		if (case_picked(cases[c].sc.name)) {
			const uint64_t nt = run_stack_case(&cases[c].sc, &ps2, cases[c].launches);
			if (cases[c].sc.fmt[0] != COLD)
				assert_true(nt == 0);
			if (!strcmp(cases[c].sc.name, "ps-many-cold"))
				assert_true(nt == cases[c].launches);
		}
	for (int win = 1; win <= 8; win += 7)
		for (size_t c = 0; c < 4; c += 3)
			if (case_picked(cases[c].sc.name)) {
				const struct strata_moe_config kw = stack_cfg(0, win);
				run_stack_case(&cases[c].sc, &kw, cases[c].launches);
			}
	/* dec_tr=2: the tier stacks through the codebook table where it fits
	 * beside a CTA's share (16 cold experts of 1024 x 512, two hot ones of
	 * 1024 x 256: surely; the Qwen-shaped ones: the hot share does not fit,
	 * the warm one may), else on the FMA decoder as before */
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const char *n = cases[c].sc.name;
		const int f0 = cases[c].sc.fmt[0];
		if ((f0 != HOT && f0 != WARM && f0 != COLD) || !cases[c].launches || !case_picked(n))
			continue;
		const uint64_t nt = run_stack_case(&cases[c].sc, &tab, cases[c].launches);
		if (!strcmp(n, "ps-many-cold") || !strcmp(n, "ps-few-hot"))
			assert_true(nt == cases[c].launches);
		if (!strcmp(n, "ps-qwen-hot"))
			assert_true(nt == 0);
	}
	/* small_ts=1 on the small-layer kernel over a stack (the Qwen hot stack)
	 * and on the persistent stack kernel (q4): each layer of each of the
	 * three runs recorded as a launch of its own, phases in order (the
	 * persistent kernel's producer issues a layer's pieces before its start) */
	static const struct {
		const char *name;
		int pstack;
	} tsc[] = { { "ps-qwen-hot", 1 }, { "ps-qwen-q4", 2 } };
	for (size_t i = 0; i < 2; i++)
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
			if (!strcmp(cases[c].sc.name, tsc[i].name) && case_picked(tsc[i].name)) {
				struct strata_moe_config kt = stack_cfg(0, tsc[i].pstack);
				kt.small_ts = 1;
				struct strata_error err = { 0 };
				uint32_t got = 0;
				assert_int_equal(strata_gpu_small_phases(NULL, NULL, 0, &got, &err), STRATA_OK); /* drop older records */
				run_stack_case(&cases[c].sc, &kt, cases[c].launches);
				check_small_phases(3 * cases[c].sc.layers, i == 1);
			}
	kernel_config(NULL);
}

/* The timestamps of the last n small-layer launches (small_ts=1): all there,
 * every CTA's start before its end and its phases in order (early_issue:
 * but ISSUED, which the persistent stack kernel's producer passes for a
 * layer before the layer starts). */
static void check_small_phases(uint32_t n, int early_issue)
{
	struct strata_error err = { 0 };
	const size_t per = (size_t)STRATA_SMALL_TS_CTAS * STRATA_SMALL_TS_WORDS;
	uint64_t *ts = malloc(STRATA_SMALL_TS_LAUNCHES * per * sizeof(uint64_t));
	uint32_t grid[STRATA_SMALL_TS_LAUNCHES], got = 0;
	assert_non_null(ts);
	assert_int_equal(strata_gpu_small_phases(ts, grid, STRATA_SMALL_TS_LAUNCHES, &got, &err), STRATA_OK);
	assert_true(got == n);
	for (uint32_t l = 0; l < got; l++)
		for (uint32_t b = 0; b < grid[l]; b++) {
			const uint64_t *w = ts + l * per + (size_t)b * STRATA_SMALL_TS_WORDS;
			assert_true(w[0] && w[0] <= w[1]);
			uint64_t last = 0;
			for (int ph = 0; ph < STRATA_SMALL_TS_N; ph++) {
				if (!w[2 + ph] || (early_issue && ph == STRATA_SMALL_TS_ISSUED))
					continue;
				assert_true(w[2 + ph] >= last);
				last = w[2 + ph];
			}
			assert_true(w[2 + STRATA_SMALL_TS_START] && w[2 + STRATA_SMALL_TS_END]);
		}
	free(ts);
}

/* The one-launch small-layer kernel (moe_dec_small.cuh; kernel configuration
 * small=1, and 2 with its phase timestamps) against the CPU reference on fresh random inputs (h poisoned with
 * NaN), one token per expert: the Qwen3-30B-A3B expert shape in every format
 * it takes (rows and batches dividing evenly), padded rows (its masked
 * variant), more experts than a launch's slots, a Kimi-K2-shaped hot expert;
 * each call must run exactly `launches` launches of it (two calls per case),
 * none where its share does not fit (two Kimi-K2-shaped q4 experts) or with
 * two tokens per expert.  Then stacks of such layers (chained, chained with
 * the L2 prefetch, plain): every layer on it, each layer checked against the
 * reference applied to its GPU input. */
static void test_moe_small(void **state)
{
	(void)state;
	if (!test_have_gpu("test_moe_small"))
		return;
	static const struct {
		struct moe_case mc;
		unsigned launches;
	} cases[] = {
		{ { "sm-qwen-q4-1", STRATA_FMT_Q4, 2048, 768, 1, 8, 8, 0 }, 1 },
		{ { "sm-qwen-q3-1", STRATA_FMT_Q3, 2048, 768, 1, 8, 8, 0 }, 1 },
		{ { "sm-qwen-hot-1", STRATA_FMT_HOT, 2048, 768, 1, 8, 8, 0 }, 1 },
		{ { "sm-qwen-warm-1", STRATA_FMT_WARM, 2048, 768, 1, 8, 8, 0 }, 1 },
		{ { "sm-qwen-cold-1", STRATA_FMT_COLD, 2048, 768, 1, 8, 8, 0 }, 1 },
		{ { "sm-rows-q4-1", STRATA_FMT_Q4, 520, 200, 1, 3, 2, 0 }, 1 },
		{ { "sm-rows-q3-1", STRATA_FMT_Q3, 520, 200, 1, 3, 2, 0 }, 1 },
		{ { "sm-rows-hot-1", STRATA_FMT_HOT, 1040, 72, 1, 5, 4, 0 }, 1 },
		{ { "sm-rows-warm-1", STRATA_FMT_WARM, 520, 200, 1, 3, 2, 0 }, 1 },
		{ { "sm-many-cold-1", STRATA_FMT_COLD, 512, 256, 1, 300, 280, 0 }, 2 },
		{ { "sm-many-q4-1", STRATA_FMT_Q4, 512, 256, 1, 40, 24, 0 }, 1 },
		{ { "sm-kimi-hot-1", STRATA_FMT_HOT, 7168, 1536, 1, 1, 1, 0 }, 1 },
		{ { "sm-kimi-q4-1", STRATA_FMT_Q4, 7168, 1536, 1, 2, 2, 0 }, 0 },
		{ { "sm-qwen-q4-2", STRATA_FMT_Q4, 2048, 768, 2, 8, 8, 0 }, 0 },
	};
	/* small=1; small=2 (each code row its own copy, at a skewed pitch), with
	 * the phase timestamps on: every launch's CTAs recorded, their phases in
	 * order; small=3 (thread 0 issues the copies) */
	for (int v = 1; v <= 3; v++) {
		struct strata_moe_config kc;
		strata_gpu_moe_config_defaults(&kc);
		kc.small = v;
		kc.small_ts = v == 2;
		kernel_config(&kc);
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			if (!case_picked(cases[c].mc.name))
				continue;
			const uint64_t g0 = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SMALL);
			run_moe_case(&cases[c].mc);
			const uint64_t ng = strata_gpu_moe_launches(STRATA_GPU_LAUNCH_SMALL) - g0;
			printf("moe[%s] small=%d: small-layer launches %llu\n", cases[c].mc.name, v, (unsigned long long)ng);
			assert_true(ng == 2u * cases[c].launches);
			if (v == 2)
				check_small_phases((uint32_t)ng, 0);
		}
	}
	kernel_config(NULL);
	static const struct stack_case stacks[] = {
		{ "sstack-qwen-q4", 2048, 768, 1, 8, 8, 3, { STRATA_FMT_Q4, STRATA_FMT_Q4, STRATA_FMT_Q4 }, 0, 0 },
		{ "sstack-qwen-q3", 2048, 768, 1, 8, 8, 2, { STRATA_FMT_Q3, STRATA_FMT_Q3 }, 0, 0 },
		{ "sstack-qwen-hot", 2048, 768, 1, 8, 8, 2, { STRATA_FMT_HOT, STRATA_FMT_HOT }, 0, 0 },
		{ "sstack-mix", 1024, 512, 1, 6, 4, 5,
		  { STRATA_FMT_Q4, STRATA_FMT_HOT, STRATA_FMT_Q3, STRATA_FMT_WARM, STRATA_FMT_COLD }, 0, 0 },
	};
	for (int v = 1; v <= 2; v++)
		for (size_t c = 0; c < sizeof(stacks) / sizeof(stacks[0]); c++)
			if (case_picked(stacks[c].name)) {
				const struct strata_moe_config kv = stack_cfg(v, 0);
				run_stack_case(&stacks[c], &kv, 0);
			}
	kernel_config(NULL);
}

/* ---- cuBLAS BF16 paths ---- */

static void test_bf16_cublas(void **state)
{
	if (!test_have_gpu("test_bf16_cublas"))
		return;
	struct strata_error err = { 0 };
	const uint32_t R = 384, C = 512, N = 7;
	uint16_t *w = malloc((size_t)R * C * 2);
	float *x = malloc((size_t)N * C * 4), *y = malloc((size_t)N * R * 4), *ref = malloc((size_t)N * R * 4);
	for (size_t i = 0; i < (size_t)R * C; i++)
		w[i] = strata_f32_to_bf16(rnd_w() * 0.05f);
	for (size_t i = 0; i < (size_t)N * C; i++)
		x[i] = rnd_w();
	for (uint32_t n = 0; n < N; n++)
		for (uint32_t r = 0; r < R; r++) {
			double a = 0;
			for (uint32_t k = 0; k < C; k++)
				a += (double)strata_bf16_to_f32(w[(size_t)r * C + k]) * x[(size_t)n * C + k];
			ref[(size_t)n * R + r] = (float)(0.5 * a);
		}
	uint16_t *dw = dmalloc((size_t)R * C * 2);
	float *dx = dmalloc((size_t)N * C * 4), *dy = dmalloc((size_t)N * R * 4);
	h2d(dw, w, (size_t)R * C * 2);
	h2d(dx, x, (size_t)N * C * 4);
	poison(dy, (size_t)N * R * 4);
	/* beta = 0 must overwrite the NaN poison */
	assert_int_equal(strata_gpu_linear_bf16(dw, R, C, dx, N, dy, 0.5f, 0.0f, NULL, &err), STRATA_OK);
	d2h(y, dy, (size_t)N * R * 4);
	int nonfinite;
	double re = rel_err(y, ref, NULL, (size_t)N * R, &nonfinite);
	printf("linear_bf16 %ux%u n=%u: rel err %.3g\n", R, C, N, re);
	assert_int_equal(nonfinite, 0);
	assert_true(re < 1e-2);

	/* shared expert through cuBLAS against the reference SwiGLU */
	const uint32_t H = 512, I = 256;
	struct strata_expert_layout E;
	uint8_t *ext = make_expert(STRATA_FMT_BF16, H, I, &E);
	float *x2 = malloc((size_t)N * H * 4), *y0 = malloc((size_t)N * H * 4), *yr = malloc((size_t)N * H * 4),
	      *yg = malloc((size_t)N * H * 4), *wts = malloc(N * 4);
	for (size_t i = 0; i < (size_t)N * H; i++)
		x2[i] = rnd_w(), y0[i] = rnd_f();
	for (uint32_t n = 0; n < N; n++)
		wts[n] = 0.75f;
	memcpy(yr, y0, (size_t)N * H * 4);
	assert_int_equal(strata_expert_forward_ref(STRATA_FMT_BF16, ext, H, I, x2, N, wts, yr), 0);
	void *dext = dmalloc(E.bytes);
	float *dx2 = dmalloc((size_t)N * H * 4), *dy2 = dmalloc((size_t)N * H * 4);
	h2d(dext, ext, E.bytes);
	h2d(dx2, x2, (size_t)N * H * 4);
	h2d(dy2, y0, (size_t)N * H * 4);
	assert_int_equal(strata_gpu_expert_bf16(dext, H, I, dx2, N, 0.75f, dy2, NULL, &err), STRATA_OK);
	d2h(yg, dy2, (size_t)N * H * 4);
	re = rel_err(yg, yr, y0, (size_t)N * H, &nonfinite);
	printf("expert_bf16 H=%u I=%u n=%u: rel err %.3g\n", H, I, N, re);
	assert_int_equal(nonfinite, 0);
	assert_true(re < 1e-2);
	strata_gpu_free(dw), strata_gpu_free(dx), strata_gpu_free(dy);
	strata_gpu_free(dext), strata_gpu_free(dx2), strata_gpu_free(dy2);
	free(w), free(x), free(y), free(ref), free(ext), free(x2), free(y0), free(yr), free(yg), free(wts);
}

/* ---- the decode ceiling kernel decodes and multiplies real weights ---- */

static float half_to_f32(uint32_t h)
{
	uint32_t e = (h >> 10) & 31, m = h & 1023;
	float v = e ? ldexpf((float)(m | 1024), (int)e - 25) : ldexpf((float)m, -24);
	return (h & 0x8000) ? -v : v;
}

/* One warp of the ceiling kernel (strata_gpu_decode_ceiling_trace) per tier
 * format and decoder (HFMA2s, shared table): every decoded weight must be the
 * codebook value of its window (as in a block of the format), and each lane's
 * sum of MMA accumulators must match the product rebuilt on the CPU from the
 * fragment layout of mma.m16n8k16.  (The timed ceiling: test_decode_ceiling_rate.) */
static void test_decode_ceiling(void **state)
{
	struct strata_error err = { 0 };
	double wps = -1;
	if (!test_have_gpu("test_decode_ceiling")) {
		assert_int_equal(strata_gpu_decode_ceiling(STRATA_FMT_HOT, STRATA_CEIL_FMA, &wps, NULL, &err),
				 STRATA_EUNSUPPORTED);
		return;
	}
	assert_int_equal(strata_gpu_decode_ceiling(STRATA_FMT_BF16, STRATA_CEIL_FMA, &wps, NULL, &err), STRATA_EINVAL);
	assert_int_equal(strata_gpu_decode_ceiling(STRATA_FMT_HOT, 2, &wps, NULL, &err), STRATA_EINVAL);
	enum { LW = STRATA_CEIL_LANE_WORDS, IT = 5 };
	for (int fd = 0; fd < 6; fd++) {
		const int fmt = STRATA_FMT_HOT + fd / 2, dec = fd % 2 ? STRATA_CEIL_TABLE : STRATA_CEIL_FMA;
		uint32_t in[32 * LW], *pairs = malloc(IT * 512 * 4);
		float sink[32];
		assert_non_null(pairs);
		for (int l = 0; l < 32; l++)
			for (int k = 0; k < LW; k++) {
				uint32_t v = (uint32_t)rnd_u64();
				/* B fragment: fp16 pairs in +-[2^-4, 2) */
				if (k >= 8)
					v = (v & 0x83ff83ffu) | (11u + (v >> 10) % 5) << 10 | (11u + (v >> 26) % 5) << 26;
				in[l * LW + k] = v;
			}
		memset(pairs, 0xff, IT * 512 * 4);
		assert_int_equal(strata_gpu_decode_ceiling_trace(fmt, dec, IT, in, pairs, sink, &err), STRATA_OK);
		size_t bad = 0;
		double ref[32] = { 0 }, mag[32] = { 0 };
		for (uint32_t it = 0; it < IT; it++) {
			/* weights: w[r][lane][i] */
			float w[4][32][8];
			for (int l = 0; l < 32; l++)
				for (int r = 0; r < 4; r++) {
					uint64_t v = in[l * LW + 2 * r] | (uint64_t)in[l * LW + 2 * r + 1] << 32;
					uint32_t x = (uint32_t)(v >> ((l + 11 * it) & 31));
					for (int i = 0; i < 8; i++) {
						uint32_t rel = strata_tier_bitpos(fmt, i) - strata_tier_bitpos(fmt, 0);
						float want = strata_tcq_table[(x >> rel) & STRATA_TCQ_MASK];
						uint32_t p = pairs[((it * 4 + r) * 4 + i / 2) * 32 + l];
						w[r][l][i] = half_to_f32(p >> (16 * (i & 1)) & 0xffff);
						if (w[r][l][i] != want && bad++ < 5)
							fprintf(stderr, "decode ceiling %s/%d: it %u lane %d row %d weight %d: %g, want %g\n",
								strata_fmt_traits(fmt)->name, dec, it, l, r, i, w[r][l][i], want);
					}
				}
			/* the MMAs: tile m, k-step h; A[row][k], B[k][col] from the fragments */
			for (int m = 0; m < 2; m++)
				for (int h = 0; h < 2; h++) {
					float A[16][16], B[16][8];
					for (int l = 0; l < 32; l++) {
						int g = l >> 2, t = l & 3;
						for (int j = 0; j < 2; j++) {
							/* pair 2h + j holds k = 2t + 8j, 2t + 8j + 1 */
							for (int e = 0; e < 2; e++) {
								A[g][2 * t + 8 * j + e] = w[2 * m][l][2 * (2 * h + j) + e];
								A[g + 8][2 * t + 8 * j + e] = w[2 * m + 1][l][2 * (2 * h + j) + e];
								uint32_t bw = in[l * LW + 8 + 2 * h + j];
								B[2 * t + 8 * j + e][g] = half_to_f32(bw >> (16 * e) & 0xffff);
							}
						}
					}
					for (int l = 0; l < 32; l++) {
						int g = l >> 2, t = l & 3;
						for (int q = 0; q < 4; q++) {
							int row = g + 8 * (q >> 1), col = 2 * t + (q & 1);
							for (int k = 0; k < 16; k++) {
								double pr = (double)A[row][k] * B[k][col];
								ref[l] += pr;
								mag[l] += fabs(pr);
							}
						}
					}
				}
		}
		assert_int_equal(bad, 0);
		for (int l = 0; l < 32; l++) {
			if (!(fabs(sink[l] - ref[l]) <= 1e-4 * mag[l] + 1e-6))
				fprintf(stderr, "decode ceiling %s: lane %d sum %.9g, want %.9g (|terms| %.3g)\n",
					strata_fmt_traits(fmt)->name, l, sink[l], ref[l], mag[l]);
			assert_true(fabs(sink[l] - ref[l]) <= 1e-4 * mag[l] + 1e-6);
		}
		free(pairs);
	}
	assert_int_equal(strata_gpu_decode_ceiling_trace(STRATA_FMT_BF16, STRATA_CEIL_FMA, 1, NULL, NULL, NULL, &err),
			 STRATA_EINVAL);
	assert_int_equal(strata_gpu_decode_ceiling_trace(STRATA_FMT_HOT, 2, 1, NULL, NULL, NULL, &err), STRATA_EINVAL);
}

/* The timed decode ceiling of every tier format and decoder: a finite
 * positive rate at 8 or more warps per SM (a separate test, so a
 * compute-sanitizer run can leave the long timed launches out). */
static void test_decode_ceiling_rate(void **state)
{
	(void)state;
	if (!test_have_gpu("test_decode_ceiling_rate"))
		return;
	struct strata_error err = { 0 };
	for (int fd = 0; fd < 6; fd++) {
		const int fmt = STRATA_FMT_HOT + fd / 2, dec = fd % 2 ? STRATA_CEIL_TABLE : STRATA_CEIL_FMA;
		double wps = -1;
		uint32_t wpsm = 0;
		assert_int_equal(strata_gpu_decode_ceiling(fmt, dec, &wps, &wpsm, &err), STRATA_OK);
		printf("decode ceiling %s, %s: %.3g weights/s (%u warps per SM)\n", strata_fmt_traits(fmt)->name,
		       dec ? "table" : "fma", wps, wpsm);
		assert_true(isfinite(wps) && wps > 0 && wpsm >= 8);
	}
}

/* ---- bad calls fail cleanly ---- */

static void test_moe_errors(void **state)
{
	struct strata_error err = { 0 };
	/* shape checks need no GPU on a CUDA build; on a build without CUDA every call is unsupported */
	int rc = strata_gpu_moe_check(STRATA_FMT_BF16, 100, 64, &err);
	assert_true(rc == STRATA_EUNSUPPORTED);
	if (!test_have_gpu("test_moe_errors"))
		return;
	assert_int_equal(strata_gpu_moe_check(STRATA_FMT_BF16, 1024, 512, &err), STRATA_OK);
	assert_int_equal(strata_gpu_moe_check(STRATA_FMT_COUNT + 3, 1024, 512, &err), STRATA_EUNSUPPORTED);
	float *dx = dmalloc(4096), *dy = dmalloc(4096);
	uint8_t *dext = dmalloc(1 << 20);
	const void *ext[1] = { dext };
	uint8_t fmt = 9;
	uint32_t ae = 0, at = 0;
	float aw = 1;
	struct strata_moe_call c = { .hidden = 256, .inter = 64, .n_tokens = 1, .x = dx, .y = dy, .n_experts = 1,
				     .extents = ext, .fmts = &fmt, .n_assign = 1, .assign_expert = &ae,
				     .assign_token = &at, .assign_weight = &aw };
	assert_int_equal(strata_moe_layer_gpu(&c, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "format"));
	fmt = STRATA_FMT_BF16;
	at = 5; /* token out of range */
	assert_int_equal(strata_moe_layer_gpu(&c, &err), STRATA_EINVAL);
	at = 0;
	ae = 1; /* expert out of range */
	assert_int_equal(strata_moe_layer_gpu(&c, &err), STRATA_EINVAL);
	ae = 0;
	ext[0] = dext + 8; /* misaligned extent */
	assert_int_equal(strata_moe_layer_gpu(&c, &err), STRATA_EINVAL);
	ext[0] = dext;
	c.hidden = 100; /* passthrough needs multiples of 32 */
	assert_int_equal(strata_moe_layer_gpu(&c, &err), STRATA_EUNSUPPORTED);
	c.hidden = 256;
	assert_int_equal(strata_moe_layer_gpu(&c, &err), STRATA_OK);
	assert_int_equal(strata_gpu_sync(&err), STRATA_OK);
	strata_gpu_free(dx), strata_gpu_free(dy), strata_gpu_free(dext);
}

static int setup(void **state)
{
	const char *s = getenv("STRATA_TEST_SEED");
	g_seed = s ? strtoull(s, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^ 0x9e3779b97f4a7c15ull;
	if (!g_seed)
		g_seed = 1;
	printf("test_kernels: seed %llu (STRATA_TEST_SEED to repeat)\n", (unsigned long long)g_seed);
	struct strata_error err = { 0 };
	if (strata_gpu_count() > 0 && strata_gpu_init(0, &err)) {
		fprintf(stderr, "strata_gpu_init: %s\n", err.msg);
		return -1;
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_moe_config),
		cmocka_unit_test(test_dequant_exact),
		cmocka_unit_test(test_moe_layer),
		cmocka_unit_test(test_moe_decode_variants),
		cmocka_unit_test(test_moe_decode_autosplit),
		cmocka_unit_test(test_moe_bf16_decode),
		cmocka_unit_test(test_moe_outliers),
		cmocka_unit_test(test_moe_range),
		cmocka_unit_test(test_moe_prefill_sm90),
		cmocka_unit_test(test_moe_scalar),
		cmocka_unit_test(test_moe_scalar_gv),
		cmocka_unit_test(test_moe_dec_tr),
		cmocka_unit_test(test_moe_stack),
		cmocka_unit_test(test_moe_pstack),
		cmocka_unit_test(test_moe_small),
		cmocka_unit_test(test_bf16_cublas),
		cmocka_unit_test(test_moe_errors),
		cmocka_unit_test(test_decode_ceiling),
		cmocka_unit_test(test_decode_ceiling_rate),
	};
	/* STRATA_TESTS=name,name,...: only those (a short device call) */
	const char *only = getenv("STRATA_TESTS");
	if (only && *only) {
		struct CMUnitTest sel[sizeof(tests) / sizeof(tests[0])];
		size_t n = 0;
		for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
			if (in_list(only, tests[i].name))
				sel[n++] = tests[i];
		}
		if (!n) {
			fprintf(stderr, "test_kernels: STRATA_TESTS=%s names no test\n", only);
			return 1;
		}
		return _cmocka_run_group_tests("test_kernels", sel, n, setup, NULL);
	}
	return cmocka_run_group_tests(tests, setup, NULL);
}
