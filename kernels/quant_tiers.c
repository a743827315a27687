/*
 * Tier formats hot / warm / cold (kernels/FORMATS.md): reference encoder and
 * decoder.
 *
 * Each 256-weight block is one tail-biting bitshift trellis code (QTIP-style):
 * weight i decodes as scale * table[12-bit window at bitpos(i)], windows of
 * consecutive weights overlap, so the encoder picks the whole bit stream at
 * once with a Viterbi search over the 4096 window states.  Per block:
 *   1. scale from the (importance-weighted) RMS, times a per-format factor;
 *   2. tail-biting: a Viterbi over the 128 weights around the wrap point
 *      (weights 63..0,255..192) with a free start picks the window of weight 0,
 *      then the full Viterbi (weights 255..0) starts and ends in that state,
 *      so the circular stream is consistent;
 *   3. least-squares refit of the scale to the chosen codes, rounded to bf16
 *      (and its two bf16 neighbours tried).
 * The search walks weights from 255 down to 0 so that the newly chosen bits
 * of each step are the low bits of the window: the predecessors of a state
 * are then 2^k contiguous runs of the cost array and the whole step is
 * vertical vector arithmetic (GCC vector extensions, 8 or 4 lanes).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_tables.h"
#include "quant_tiers.h"

/* The trellis search costs ~10^4 flops per weight; at -O0 every suite that
 * quantizes anything (this one, `strata quantize`, the engine's) would crawl,
 * so this file is optimized even in debug builds. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__OPTIMIZE__)
#pragma GCC optimize("O2")
#endif

STRATA_STATIC_ASSERT(STRATA_TCQ_TABLE_SIZE == 1 << STRATA_TCQ_L, "table covers every window");

#define NS (1u << STRATA_TCQ_L)
#define QK STRATA_QK

#if defined(__AVX2__) || defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));

static inline vf vld(const float *p)
{
	vf v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static inline void vst(float *p, vf v)
{
	memcpy(p, &v, sizeof(v));
}

static inline vf vset1(float x)
{
	vf v;
	for (int l = 0; l < VW; l++)
		v[l] = x;
	return v;
}

struct tcq {
	int fmt;
	uint32_t nbits, nwords;
	uint8_t k[QK];          /* bits shifted in at weight i */
	uint32_t pos[QK];       /* first bit of weight i's window */
	float *cost, *ncost;    /* NS each */
	float *save;            /* per step, the predecessor-min array with argmin tags */
	float *sT;              /* scale * table */
	size_t off[2 * QK + 1]; /* offsets of the steps' arrays in save */
};

/*
 * One trellis step with k new bits (template on k).  A state is a window;
 * stepping to weight i (walking down) shifts the window left by k and puts the
 * k new bits at the bottom: s' = ((p << k) | n) & mask.  The predecessors of
 * s' are p = t * M + (s' >> k), t < 2^k, M = NS >> k.  The argmin t is kept in
 * the three low mantissa bits of the (non-negative) cost, so min() carries it
 * and no separate back-pointer array is written.
 */
static inline void tcq_step(const int k, const float *restrict cost, float *restrict ncost,
			    float *restrict best, const float *restrict sT, float x, float h)
{
	const uint32_t K = 1u << k, M = NS >> k;
	const vi keep = (vi){ 0 } + ~7;
	for (uint32_t m = 0; m < M; m += VW) {
		vf acc = (vf)((vi)vld(cost + m) & keep);
		for (uint32_t t = 1; t < K; t++) {
			vf c = (vf)(((vi)vld(cost + t * M + m) & keep) | (int32_t)t);
			vi lt = (vi)(c < acc);
			acc = (vf)(((vi)c & lt) | ((vi)acc & ~lt));
		}
		vst(best + m, acc);
	}
	const vf X = vset1(x), H = vset1(h);
	for (uint32_t m = 0; m < M; m += VW) {
		vf b = vld(best + m);
		for (uint32_t j = 0; j < K; j++) {
			vi sel;
			for (int l = 0; l < VW; l++)
				sel[l] = (int32_t)((j * VW + (uint32_t)l) >> k);
			vf bb = __builtin_shuffle(b, sel);
			uint32_t s = (m << k) + j * VW;
			vf e = X - vld(sT + s);
			vst(ncost + s, bb + H * e * e);
		}
	}
}

/*
 * Viterbi over the weights ord[0..n-1] (each the predecessor-successor of the
 * next: ord[j+1] = ord[j] - 1 mod 256).  init < 0: free start, else start in
 * state init.  fin < 0: best end state, else end in state fin.  states[j] is
 * the window of weight ord[j] on the best path.  Returns its cost.
 */
static float tcq_viterbi(struct tcq *q, const float *x, const float *h, const int *ord, int n,
			 int init, int fin, uint32_t *states)
{
	for (uint32_t s = 0; s < NS; s++)
		q->cost[s] = init < 0 || s == (uint32_t)init ? 0.0f : 1e30f;
	q->off[0] = 0;
	for (int j = 0; j < n; j++) {
		int i = ord[j], k = q->k[i];
		float *best = q->save + q->off[j];
		float hi = h ? h[i] : 1.0f;
		q->off[j + 1] = q->off[j] + (NS >> k);
		if (k == 1)
			tcq_step(1, q->cost, q->ncost, best, q->sT, x[i], hi);
		else if (k == 2)
			tcq_step(2, q->cost, q->ncost, best, q->sT, x[i], hi);
		else
			tcq_step(3, q->cost, q->ncost, best, q->sT, x[i], hi);
		float *t = q->cost;
		q->cost = q->ncost;
		q->ncost = t;
	}
	uint32_t s;
	float bc;
	if (fin >= 0) {
		s = (uint32_t)fin;
		bc = q->cost[s];
	} else {
		s = 0;
		bc = q->cost[0];
		for (uint32_t t = 1; t < NS; t++)
			if (q->cost[t] < bc) {
				bc = q->cost[t];
				s = t;
			}
	}
	for (int j = n - 1; j >= 0; j--) {
		int k = q->k[ord[j]];
		uint32_t M = NS >> k, m = s >> k;
		int32_t tag;
		states[j] = s;
		memcpy(&tag, q->save + q->off[j] + m, sizeof(tag));
		s = (uint32_t)(tag & 7) * M + m;
	}
	return bc;
}

static int tcq_init(struct tcq *q, int fmt)
{
	memset(q, 0, sizeof(*q));
	q->fmt = fmt;
	q->nbits = 8 * strata_tier_code_bytes(fmt);
	q->nwords = q->nbits / 32;
	for (uint32_t i = 0; i < QK; i++) {
		q->pos[i] = strata_tier_bitpos(fmt, i);
		uint32_t next = i + 1 < QK ? strata_tier_bitpos(fmt, i + 1) : q->nbits;
		q->k[i] = (uint8_t)(next - q->pos[i]);
	}
	size_t save = 0;
	for (uint32_t i = 0; i < QK; i++)
		save += NS >> q->k[i];
	q->cost = aligned_alloc(64, NS * sizeof(float));
	q->ncost = aligned_alloc(64, NS * sizeof(float));
	q->sT = aligned_alloc(64, NS * sizeof(float));
	q->save = malloc(save * sizeof(float));
	if (!q->cost || !q->ncost || !q->sT || !q->save)
		return -1;
	return 0;
}

static void tcq_free(struct tcq *q)
{
	free(q->cost);
	free(q->ncost);
	free(q->sT);
	free(q->save);
}

/* Weighted squared error of x against scale * table[win]. */
static double block_err(const float *x, const float *h, const uint32_t *win, float scale)
{
	double e = 0;
	for (uint32_t i = 0; i < QK; i++) {
		double d = x[i] - (double)scale * strata_tcq_table[win[i]];
		e += (h ? h[i] : 1.0) * d * d;
	}
	return e;
}

/* Least-squares scale for the given windows, and the best bf16 near it. */
static uint16_t refit_scale(const float *x, const float *h, const uint32_t *win)
{
	double xt = 0, tt = 0;
	for (uint32_t i = 0; i < QK; i++) {
		double t = strata_tcq_table[win[i]], hi = h ? h[i] : 1.0;
		xt += hi * x[i] * t;
		tt += hi * t * t;
	}
	float s = tt > 0 ? (float)(xt / tt) : 0.0f;
	uint16_t b = strata_f32_to_bf16(s), bestb = b;
	double beste = block_err(x, h, win, strata_bf16_to_f32(b));
	for (int d = -1; d <= 1; d += 2) {
		uint16_t c = (uint16_t)(b + d);
		float cs = strata_bf16_to_f32(c);
		if (!isfinite(cs) || (cs > 0) != (s > 0))
			continue;
		double e = block_err(x, h, win, cs);
		if (e < beste) {
			beste = e;
			bestb = c;
		}
	}
	return bestb;
}

/* Scale (relative to the weighted RMS) the search starts from: slightly
 * below 1, because a Gaussian trellis code shrinks its input (a rate-R
 * optimal code reproduces with variance 1 - 2^-2R). */
static float start_factor(int fmt)
{
	return fmt == STRATA_FMT_COLD ? 0.93f : 0.98f;
}

/* Quantize one block; h may be NULL.  Writes codes (nbits/8 bytes) and scale. */
static void tcq_block(struct tcq *q, const float *x, const float *h, uint8_t *codes, uint16_t *scale)
{
	double ss = 0, hs = 0;
	for (uint32_t i = 0; i < QK; i++) {
		double hi = h ? h[i] : 1.0;
		ss += hi * x[i] * x[i];
		hs += hi;
	}
	memset(codes, 0, q->nbits / 8);
	if (ss == 0 || hs == 0) {
		*scale = 0;
		return;
	}
	float sc = (float)sqrt(ss / hs) * start_factor(q->fmt);
	for (uint32_t s = 0; s < NS; s++)
		q->sT[s] = sc * strata_tcq_table[s];

	/* Tail-biting: pick weight 0's window with the wrap point mid-sequence. */
	enum { HALF = 64 };
	int ord[QK];
	uint32_t st[QK], win[QK];
	for (int j = 0; j < 2 * HALF; j++)
		ord[j] = (HALF - 1 - j + QK) % QK;
	tcq_viterbi(q, x, h, ord, 2 * HALF, -1, -1, st);
	int s0 = (int)st[HALF - 1];
	for (int j = 0; j < (int)QK; j++)
		ord[j] = QK - 1 - j;
	tcq_viterbi(q, x, h, ord, QK, s0, s0, st);
	for (uint32_t j = 0; j < QK; j++)
		win[QK - 1 - j] = st[j];

	/* Weight i's own k bits are the low bits of its window. */
	for (uint32_t i = 0; i < QK; i++)
		for (uint32_t b = 0; b < q->k[i]; b++)
			if (win[i] >> b & 1u) {
				uint32_t p = q->pos[i] + b;
				codes[p >> 3] |= (uint8_t)(1u << (p & 7));
			}
	*scale = refit_scale(x, h, win);
}

static int tier_quantize_row(int fmt, const float *w, uint32_t cols, const float *imatrix,
			     void *codes, void *scales)
{
	if (cols % QK)
		return -2;
	for (uint32_t i = 0; i < cols; i++)
		if (!isfinite(w[i]) || (imatrix && (!isfinite(imatrix[i]) || imatrix[i] < 0)))
			return -1;
	struct tcq q;
	if (tcq_init(&q, fmt)) {
		tcq_free(&q);
		return -2;
	}
	uint32_t cb = strata_tier_code_bytes(fmt);
	float h[QK];
	for (uint32_t b = 0; b < cols / QK; b++) {
		const float *hb = NULL;
		if (imatrix) {
			/* Importance plus a small floor so unused columns still get a
			 * sane reconstruction; an all-zero block falls back to MSE. */
			double mean = 0;
			for (uint32_t i = 0; i < QK; i++)
				mean += imatrix[b * QK + i];
			mean /= QK;
			if (mean > 0) {
				for (uint32_t i = 0; i < QK; i++)
					h[i] = (float)((imatrix[b * QK + i] + 1e-3 * mean) / mean);
				hb = h;
			}
		}
		uint16_t sc;
		tcq_block(&q, w + (size_t)b * QK, hb, (uint8_t *)codes + (size_t)b * cb, &sc);
		memcpy((uint8_t *)scales + (size_t)b * STRATA_TIER_SCALE_BYTES, &sc, sizeof(sc));
	}
	tcq_free(&q);
	return 0;
}

static void tier_dequantize_row(int fmt, const void *codes, const void *scales, uint32_t cols,
				float *out)
{
	uint32_t cb = strata_tier_code_bytes(fmt), nw = cb / 4;
	uint32_t words[STRATA_HOT_CODE_BYTES / 4];
	for (uint32_t b = 0; b < cols / QK; b++) {
		uint16_t sb;
		memcpy(words, (const uint8_t *)codes + (size_t)b * cb, cb);
		memcpy(&sb, (const uint8_t *)scales + (size_t)b * STRATA_TIER_SCALE_BYTES, sizeof(sb));
		float sc = strata_bf16_to_f32(sb);
		for (uint32_t i = 0; i < QK; i++)
			out[b * QK + i] = sc * strata_tcq_table[strata_tcq_window(words, nw, strata_tier_bitpos(fmt, i))];
	}
}

#define TIER(fn, FMT)                                                                           \
	static int fn##_quantize_row(const float *w, uint32_t cols, const float *imatrix,       \
				     void *codes, void *scales)                                 \
	{                                                                                       \
		return tier_quantize_row(FMT, w, cols, imatrix, codes, scales);                  \
	}                                                                                       \
	static void fn##_dequantize_row(const void *codes, const void *scales, uint32_t cols,   \
					float *out)                                             \
	{                                                                                       \
		tier_dequantize_row(FMT, codes, scales, cols, out);                              \
	}
TIER(hot, STRATA_FMT_HOT)
TIER(warm, STRATA_FMT_WARM)
TIER(cold, STRATA_FMT_COLD)

const struct strata_fmt_traits strata_fmt_hot = {
	.name = "hot", .block = QK, .code_bytes = STRATA_HOT_CODE_BYTES,
	.scale_bytes = STRATA_TIER_SCALE_BYTES, .bpw = 2.8125,
	.quantize_row = hot_quantize_row, .dequantize_row = hot_dequantize_row,
};
const struct strata_fmt_traits strata_fmt_warm = {
	.name = "warm", .block = QK, .code_bytes = STRATA_WARM_CODE_BYTES,
	.scale_bytes = STRATA_TIER_SCALE_BYTES, .bpw = 2.5625,
	.quantize_row = warm_quantize_row, .dequantize_row = warm_dequantize_row,
};
const struct strata_fmt_traits strata_fmt_cold = {
	.name = "cold", .block = QK, .code_bytes = STRATA_COLD_CODE_BYTES,
	.scale_bytes = STRATA_TIER_SCALE_BYTES, .bpw = 1.4375,
	.quantize_row = cold_quantize_row, .dequantize_row = cold_dequantize_row,
};
