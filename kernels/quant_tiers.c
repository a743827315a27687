/*
 * Tier formats hot / warm / cold (kernels/FORMATS.md): reference encoder and
 * decoder.
 *
 * Each 256-weight block is one tail-biting bitshift trellis code (QTIP-style):
 * weight i decodes as scale * table[12-bit window at bitpos(i)], windows of
 * consecutive weights overlap, so the encoder picks the whole bit stream at
 * once with a Viterbi search over the 4096 window states, minimizing the
 * importance-weighted squared error.  Per block:
 *   1. start scale: the weighted RMS without the two largest |x| (the
 *      codebook's stretched tail states code outliers on their own), times a
 *      per-format factor over the table's bulk RMS;
 *   2. tail-biting: a Viterbi over the weights around the wrap point (32 or,
 *      for cold, 64 each side) with a free start picks the window of weight 0,
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
#include <pthread.h>
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
#define FORBIDDEN 1e30f /* cost of a state the path may not use */
#define QK STRATA_QK

/* The step is ~all of the encoder's time and its indexing is fixed by
 * NS/k alone (checked by the tests in every build); sanitizer checks on its
 * vector loads would make the asan suites crawl. */
#if defined(__SANITIZE_ADDRESS__)
#define TCQ_HOT __attribute__((no_sanitize_address, no_sanitize("undefined")))
#else
#define TCQ_HOT
#endif

/*
 * The search.  A state is a window; stepping to the next weight (walking
 * down) shifts the window left by k and puts the k new bits at the bottom:
 * s' = ((p << k) | n) & mask.  The predecessors of s' are p = t * M + (s' >> k),
 * t < 2^k, M = NS >> k.  After weight j the path cost of state s is
 *     cost_j(s) = best_j[s >> k_j] + h_j (x_j - sT[s])^2,
 *     best_j[m] = min_t cost_{j-1}(t * M_j + m),
 * so only the best_j arrays (M_j floats) are stored; cost_j is formed on the
 * fly inside the next step's minimum, and the back-track recomputes the 2^k
 * candidate costs of the one state it follows instead of storing arg-mins.
 */

/* The step, 16 lanes where the CPU has AVX-512 (picked at run time, x86-64
 * builds with FMA contraction, as the 8-lane path has), else 8 (AVX) or 4. */
/* A step's body for run-time (kp, kn) and weighting: the call of FN's
 * compile-time specialization (kp, kn, weighted, best, next, tab, x, h) from a
 * function with parameters kp, kn, best, next, x and h. */
#define TCQ_STEP_CASE(FN, tab, a, b)                                                     \
	case a * 4 + b:                                                                  \
		if (h)                                                                   \
			FN(a, b, 1, best, next, tab, x, *h);                             \
		else                                                                     \
			FN(a, b, 0, best, next, tab, x, 1.0f);                           \
		break;
#define TCQ_DISPATCH(FN, tab)                                                            \
	switch (kp * 4 + kn) {                                                           \
		TCQ_STEP_CASE(FN, tab, 1, 1) TCQ_STEP_CASE(FN, tab, 1, 2) TCQ_STEP_CASE(FN, tab, 1, 3) \
		TCQ_STEP_CASE(FN, tab, 2, 1) TCQ_STEP_CASE(FN, tab, 2, 2) TCQ_STEP_CASE(FN, tab, 2, 3) \
		TCQ_STEP_CASE(FN, tab, 3, 1) TCQ_STEP_CASE(FN, tab, 3, 2) TCQ_STEP_CASE(FN, tab, 3, 3) \
	}

#if defined(__AVX2__) || defined(__AVX__)
#define VW 8
#define TCQ_VMIN(a, b) __builtin_ia32_minps256(a, b)
#elif defined(__SSE__)
#define VW 4
#define TCQ_VMIN(a, b) __builtin_ia32_minps(a, b)
#else
#define VW 4
#define TCQ_VMIN(a, b) ((tcq_vf_base)(((tcq_vi_base)((b) < (a)) & (tcq_vi_base)(b)) | (~(tcq_vi_base)((b) < (a)) & (tcq_vi_base)(a))))
#endif
#define TCQ_W VW
#define TCQ_SFX _base
#define TCQ_TARGET
#include "quant_tcq_step.h"
#undef TCQ_W
#undef TCQ_SFX
#undef TCQ_TARGET
#undef TCQ_VMIN

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__FMA__) && defined(__AVX2__)
#define TCQ_AVX512 1
#include <immintrin.h>
#define TCQ_W 16
#define TCQ_SFX _avx512
#define TCQ_TARGET __attribute__((target("avx512f")))
#define TCQ_VMIN(a, b) ((tcq_vf_avx512)_mm512_min_ps((__m512)(a), (__m512)(b)))
#include "quant_tcq_step.h"

/*
 * The 16-lane step without a shuffle per state vector.  The plain step's
 * lanes are 16 consecutive states, whose 16 >> kp distinct predecessor
 * minima need a permute (a shuffle-port operation) per vector.  Here lane l
 * of the vector at state s0 (16-aligned) is state s0 + pi(l),
 * pi(l) = (l % G) << kp | l / G, G = 16 >> kp, so its predecessor minimum is
 * best[(s0 >> kp) + l % G]: G consecutive floats repeated, a broadcast load.
 * The scaled codebook is read from a copy permuted the same way (one per
 * kp), and the two output vectors are put back in state order once per
 * output (a permute per 2^kn inputs).  The same operations on the same values
 * per state, minima exact: the same best arrays as the plain step.
 */
#define TCQ_PERM_TABLES 3 /* kp = 1, 2, 3 */

static uint32_t tcq_lane_state(int kp, uint32_t l)
{
	uint32_t g = 16u >> kp;
	return (l % g) << kp | l / g;
}

TCQ_TARGET TCQ_HOT static inline tcq_vf_avx512 tcq_bcast_avx512(const float *p, const int kp)
{
	if (kp == 1)
		return (tcq_vf_avx512)_mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)p)));
	if (kp == 2)
		return (tcq_vf_avx512)_mm512_broadcast_f32x4(_mm_loadu_ps(p));
	double d;
	memcpy(&d, p, sizeof(d));
	return (tcq_vf_avx512)_mm512_castpd_ps(_mm512_set1_pd(d));
}

TCQ_TARGET TCQ_HOT static inline void tcq_step_perm(const int kp, const int kn, const int weighted,
						    const float *restrict best, float *restrict next,
						    const float *restrict sTp, float x, float h)
{
	const uint32_t Kn = 1u << kn, Mn = NS >> kn;
	const tcq_vf_avx512 X = (tcq_vf_avx512){ 0 } + x, H = (tcq_vf_avx512){ 0 } + h;
	__m512i inv;
	{
		int32_t iv[16];
		for (uint32_t l = 0; l < 16; l++)
			iv[tcq_lane_state(kp, l)] = (int32_t)l;
		inv = _mm512_loadu_si512(iv);
	}
	for (uint32_t m = 0; m < Mn; m += 32) {
		tcq_vf_avx512 acc0 = (tcq_vf_avx512){ 0 } + FORBIDDEN, acc1 = acc0;
#pragma GCC unroll 8
		for (uint32_t t = 0; t < Kn; t++) {
			uint32_t s0 = t * Mn + m, s1 = s0 + 16;
			tcq_vf_avx512 e0 = X - tcq_vld_avx512(sTp + s0);
			tcq_vf_avx512 e1 = X - tcq_vld_avx512(sTp + s1);
			tcq_vf_avx512 d0 = weighted ? H * e0 * e0 : e0 * e0;
			tcq_vf_avx512 d1 = weighted ? H * e1 * e1 : e1 * e1;
			acc0 = TCQ_VMIN(tcq_bcast_avx512(best + (s0 >> kp), kp) + d0, acc0);
			acc1 = TCQ_VMIN(tcq_bcast_avx512(best + (s1 >> kp), kp) + d1, acc1);
		}
		_mm512_storeu_ps(next + m, _mm512_permutexvar_ps(inv, (__m512)acc0));
		_mm512_storeu_ps(next + m + 16, _mm512_permutexvar_ps(inv, (__m512)acc1));
	}
}

/* sTp: TCQ_PERM_TABLES permuted copies of the scaled codebook (kp = 1..3). */
TCQ_TARGET TCQ_HOT static void tcq_step_perm_any(int kp, int kn, const float *best, float *next,
						 const float *sTp, float x, const float *h)
{
	const float *tab = sTp + (size_t)(kp - 1) * NS;
	TCQ_DISPATCH(tcq_step_perm, tab);
}
#undef TCQ_W
#undef TCQ_SFX
#undef TCQ_TARGET
#undef TCQ_VMIN
#endif
#define TCQ_PAD 16 /* floats past the save array that expand() may read */

typedef void tcq_step_fn(int kp, int kn, const float *best, float *next, const float *sT, float x,
			 const float *h);

typedef uint32_t tcq_argmin_fn(int k, const float *best, const float *sT, float x, float h);

/* STRATA_TCQ_ISA=base keeps the build's own width, =avx512 the plain 16-lane
 * step (benchmarks and tests compare them; all give the same codes).
 * Returns whether the step reads the permuted codebook copies. */
static int tcq_pick_step(tcq_step_fn **step, tcq_argmin_fn **argmin)
{
	*step = tcq_step_any_base;
	*argmin = tcq_argmin_base;
#ifdef TCQ_AVX512
	const char *env = getenv("STRATA_TCQ_ISA");
	if (!(env && !strcmp(env, "base")) && __builtin_cpu_supports("avx512f")) {
		*argmin = tcq_argmin_avx512;
		if (env && !strcmp(env, "avx512")) {
			*step = tcq_step_any_avx512;
			return 0;
		}
		*step = tcq_step_perm_any;
		return 1;
	}
#endif
	return 0;
}

struct tcq {
	int fmt;
	uint32_t nbits, nwords;
	uint8_t k[QK];          /* bits shifted in at weight i */
	uint32_t pos[QK];       /* first bit of weight i's window */
	float *save;            /* per step j, best_j (see below) */
	float *sT;              /* scale * table */
	float *sTs;             /* what the step reads: sT, or its permuted copies */
	size_t off[QK + 1];     /* offsets of the steps' arrays in save */
	tcq_step_fn *step;      /* the step at this CPU's vector width */
	tcq_argmin_fn *argmin;  /* and the end-state search */
};

/*
 * Viterbi over the weights ord[0..n-1] (ord[j+1] = ord[j] - 1 mod 256).
 * init < 0: free start, else start in state init.  fin < 0: best end state,
 * else end in state fin.  states[j] is the window of weight ord[j] on the
 * best path.
 */
static void tcq_viterbi(struct tcq *q, const float *x, const float *h, const int *ord, int n,
			int init, int fin, uint32_t *states)
{
	/* best_0 from the start costs (0 for allowed states, FORBIDDEN otherwise). */
	int k0 = q->k[ord[0]];
	uint32_t M0 = NS >> k0;
	float *b0 = q->save;
	for (uint32_t m = 0; m < M0; m++)
		b0[m] = init < 0 ? 0.0f : FORBIDDEN;
	if (init >= 0)
		b0[(uint32_t)init % M0] = 0.0f;
	q->off[0] = 0;
	for (int j = 0; j + 1 < n; j++) {
		int i = ord[j], kp = q->k[i], kn = q->k[ord[j + 1]];
		q->off[j + 1] = q->off[j] + (NS >> kp);
		q->step(kp, kn, q->save + q->off[j], q->save + q->off[j + 1], q->sTs, x[i],
			     h ? h + i : NULL);
	}
	/* The last weight: full cost per state, then the end state. */
	int il = ord[n - 1], kl = q->k[il];
	const float *bl = q->save + q->off[n - 1];
	float hl = h ? h[il] : 1.0f;
	uint32_t s = fin >= 0 ? (uint32_t)fin : 0;
	if (fin < 0)
		s = q->argmin(kl, bl, q->sT, x[il], hl);
	/* Back-track: the predecessor of s is the t minimizing cost_{j-1}(t*M + m),
	 * recomputed from the stored minima (ties may resolve differently from
	 * the forward pass; any minimizer continues a valid best-cost path). */
	for (int j = n - 1; j >= 0; j--) {
		states[j] = s;
		if (j == 0)
			break;
		int k = q->k[ord[j]], ip = ord[j - 1], kp = q->k[ip];
		uint32_t M = NS >> k, m = s >> k, next = m;
		const float *bp = q->save + q->off[j - 1];
		float hp = h ? h[ip] : 1.0f, bc = INFINITY;
		for (uint32_t t = 0; t < (1u << k); t++) {
			uint32_t p = t * M + m;
			float e = x[ip] - q->sT[p], c = bp[p >> kp] + hp * e * e;
			if (c < bc) {
				bc = c;
				next = p;
			}
		}
		s = next;
	}
}

/* Scale (relative to the trimmed weighted RMS) the search starts from,
 * tuned with bench_quant on Gaussian blocks (+-3% costs ~0.0003 cosine; the
 * least-squares refit after the search absorbs the rest; a second search at
 * the refitted scale gained < 0.0002 for twice the time). */
static float start_factor(int fmt)
{
	return fmt == STRATA_FMT_COLD ? 0.97f : 1.08f;
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
	q->sT = aligned_alloc(64, NS * sizeof(float));
	q->save = malloc((save + TCQ_PAD) * sizeof(float)); /* every step writes its array before the next reads it */
	if (!q->sT || !q->save)
		return -1;
	memset(q->save + save, 0, TCQ_PAD * sizeof(float));
	int perm = tcq_pick_step(&q->step, &q->argmin);
	/* The search runs on blocks normalized to unit trimmed RMS, so one
	 * start scale serves every block. */
	float sc = start_factor(fmt) / STRATA_TCQ_TABLE_RMS;
	for (uint32_t s = 0; s < NS; s++)
		q->sT[s] = sc * strata_tcq_table[s];
	q->sTs = q->sT;
#ifdef TCQ_AVX512
	if (perm) {
		q->sTs = aligned_alloc(64, TCQ_PERM_TABLES * NS * sizeof(float));
		if (!q->sTs)
			return -1;
		for (int kp = 1; kp <= TCQ_PERM_TABLES; kp++)
			for (uint32_t s0 = 0; s0 < NS; s0 += 16)
				for (uint32_t l = 0; l < 16; l++)
					q->sTs[(kp - 1) * NS + s0 + l] = q->sT[s0 + tcq_lane_state(kp, l)];
	}
#else
	(void)perm;
#endif
	return 0;
}

static void tcq_free(struct tcq *q)
{
	if (q->sTs != q->sT)
		free(q->sTs);
	free(q->sT);
	free(q->save);
}

/*
 * Each thread keeps one encoder state per format (search array, scaled and
 * permuted codebooks: ~1 MB, a function of the format and the CPU's step
 * alone), freed when the thread exits: strata quantize hands its threads
 * small row blocks, which would otherwise each allocate, fault in and fill
 * it.  Every search writes the arrays it reads, so a state reused gives the
 * codes a fresh one gives.
 */
struct tcq_cache {
	struct tcq q[3]; /* hot, warm, cold */
	int ready[3];
};
static pthread_key_t tcq_key;
static int tcq_key_ok;

static void tcq_cache_free(void *p)
{
	struct tcq_cache *c = p;
	for (int i = 0; i < 3; i++)
		if (c->ready[i])
			tcq_free(&c->q[i]);
	free(c);
}

static void tcq_key_init(void)
{
	tcq_key_ok = !pthread_key_create(&tcq_key, tcq_cache_free);
}

/* This thread's state for fmt, NULL out of memory; *own: the caller must
 * tcq_free it (no thread-specific storage). */
static struct tcq *tcq_get(int fmt, struct tcq *tmp, int *own)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, tcq_key_init);
	*own = 0;
	struct tcq_cache *c = tcq_key_ok ? pthread_getspecific(tcq_key) : NULL;
	if (tcq_key_ok && !c && (c = calloc(1, sizeof(*c))) && pthread_setspecific(tcq_key, c)) {
		free(c);
		c = NULL;
	}
	int i = fmt - STRATA_FMT_HOT;
	struct tcq *q = c ? &c->q[i] : tmp;
	if (c && c->ready[i]) {
		tcq_step_fn *step;
		tcq_argmin_fn *argmin;
		tcq_pick_step(&step, &argmin);
		if (step == q->step && argmin == q->argmin)
			return q;
		tcq_free(q); /* STRATA_TCQ_ISA changed */
		c->ready[i] = 0;
	}
	if (tcq_init(q, fmt)) {
		tcq_free(q);
		return NULL;
	}
	if (c)
		c->ready[i] = 1;
	else
		*own = 1;
	return q;
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
	/* Clamped so that scale * table stays finite (weights near FLT_MAX). */
	double lim = 3.0e38 / 40.5, sd = tt > 0 ? xt / tt : 0.0;
	float s = (float)(sd > lim ? lim : sd < -lim ? -lim : sd);
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

/* Weights each side of the wrap point in the tail-biting pre-search: cold
 * windows span ~9 weights and need the longer context (32 instead of 64
 * costs cold 0.0005 cosine, hot/warm < 0.0001). */
static int tb_half(int fmt)
{
	return fmt == STRATA_FMT_COLD ? 64 : 32;
}

/* Quantize one block; h may be NULL.  Writes codes (nbits/8 bytes) and scale. */
static void tcq_block(struct tcq *q, const float *x, const float *h, uint8_t *codes, uint16_t *scale)
{
	/* Start scale: weighted RMS without the two largest |x|, which the
	 * codebook's stretched tail states code on their own. */
	uint32_t a = 0, b = 1;
	if (fabsf(x[b]) > fabsf(x[a]))
		a = 1, b = 0;
	for (uint32_t i = 2; i < QK; i++) {
		float v = fabsf(x[i]);
		if (v > fabsf(x[a]))
			b = a, a = i;
		else if (v > fabsf(x[b]))
			b = i;
	}
	double ss = 0, hs = 0;
	for (uint32_t i = 0; i < QK; i++) {
		if (i == a || i == b)
			continue;
		double hi = h ? h[i] : 1.0;
		ss += hi * x[i] * x[i];
		hs += hi;
	}
	memset(codes, 0, q->nbits / 8);
	if (ss == 0 || hs == 0) {
		/* All but one or two weights zero: scale from those two. */
		ss = (double)x[a] * x[a] + (double)x[b] * x[b];
		hs = QK;
		if (ss == 0) {
			*scale = 0;
			return;
		}
	}
	/* Search on the block normalized to unit trimmed RMS, so neither huge
	 * nor denormal-sized weights reach the float arithmetic of the search. */
	double inv = 1.0 / sqrt(ss / hs);
	float xs[QK];
	for (uint32_t i = 0; i < QK; i++)
		xs[i] = (float)(x[i] * inv);

	/* Tail-biting: pick weight 0's window with the wrap point mid-sequence,
	 * then search the whole block from and back to that state. */
	int ord[QK], half = tb_half(q->fmt);
	uint32_t st[QK], win[QK];
	for (int j = 0; j < 2 * half; j++)
		ord[j] = (half - 1 - j + QK) % QK;
	tcq_viterbi(q, xs, h, ord, 2 * half, -1, -1, st);
	int s0 = (int)st[half - 1];
	for (int j = 0; j < (int)QK; j++)
		ord[j] = QK - 1 - j;
	tcq_viterbi(q, xs, h, ord, QK, s0, s0, st);
	for (uint32_t j = 0; j < QK; j++)
		win[QK - 1 - j] = st[j];

	/* Weight i's own k bits are the low bits of its window, at bit pos[i]
	 * of the stream (k <= 3: within two bytes). */
	for (uint32_t i = 0; i < QK; i++) {
		uint32_t p = q->pos[i], k = q->k[i], v = (win[i] & ((1u << k) - 1)) << (p & 7);
		codes[p >> 3] |= (uint8_t)v;
		if ((p & 7) + k > 8)
			codes[(p >> 3) + 1] |= (uint8_t)(v >> 8);
	}
	*scale = refit_scale(x, h, win);
}

static int tier_quantize_rows(int fmt, const float *w, uint32_t rows, uint32_t cols, const float *imatrix,
			      void *codes, void *scales)
{
	if (cols % QK)
		return -2;
	size_t n = (size_t)rows * cols;
	for (size_t i = 0; i < n; i++)
		if (!isfinite(w[i]))
			return -1;
	for (uint32_t i = 0; imatrix && i < cols; i++)
		if (!isfinite(imatrix[i]) || imatrix[i] < 0)
			return -1;
	struct tcq tmp;
	int own;
	struct tcq *q = tcq_get(fmt, &tmp, &own);
	if (!q)
		return -2;
	uint32_t cb = strata_tier_code_bytes(fmt), nb = cols / QK;
	float h[QK];
	/* blocks of all rows in order; the importance of block b of a row is that of its columns */
	for (size_t bb = 0; bb < (size_t)rows * nb; bb++) {
		uint32_t b = (uint32_t)(bb % nb);
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
		tcq_block(q, w + bb * QK, hb, (uint8_t *)codes + bb * cb, &sc);
		memcpy((uint8_t *)scales + bb * STRATA_TIER_SCALE_BYTES, &sc, sizeof(sc));
	}
	if (own)
		tcq_free(q);
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
	static int fn##_quantize_rows(const float *w, uint32_t rows, uint32_t cols,            \
				      const float *imatrix, void *codes, void *scales)          \
	{                                                                                       \
		return tier_quantize_rows(FMT, w, rows, cols, imatrix, codes, scales);           \
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
	.quantize_rows = hot_quantize_rows, .dequantize_row = hot_dequantize_row,
};
const struct strata_fmt_traits strata_fmt_warm = {
	.name = "warm", .block = QK, .code_bytes = STRATA_WARM_CODE_BYTES,
	.scale_bytes = STRATA_TIER_SCALE_BYTES, .bpw = 2.5625,
	.quantize_rows = warm_quantize_rows, .dequantize_row = warm_dequantize_row,
};
const struct strata_fmt_traits strata_fmt_cold = {
	.name = "cold", .block = QK, .code_bytes = STRATA_COLD_CODE_BYTES,
	.scale_bytes = STRATA_TIER_SCALE_BYTES, .bpw = 1.4375,
	.quantize_rows = cold_quantize_rows, .dequantize_row = cold_dequantize_row,
};
