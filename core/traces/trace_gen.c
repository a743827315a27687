/*
 * `strata trace gen`: seeded synthetic routing traces for tests and what-ifs.
 *
 * Per layer, experts get a random popularity order and Zipf(alpha) weights.
 * For each token and layer, each of the top_k slots is drawn as:
 *   with reuse_prob  an expert this request used in the same layer within the
 *                    last reuse_window tokens (temporal locality);
 *   else with layer_corr  the image of the previous layer's expert in the same
 *                    slot under a fixed random per-layer map (cross-layer
 *                    correlation, what lookahead predictors exploit);
 *   else             a Zipf draw from the layer's popularity.
 * Duplicates are redrawn.  Requests are a prefill burst (prompt_len tokens)
 * then a decode stream (gen_len tokens); with interleave, requests arrive
 * staggered and their decode tokens alternate round-robin, as in a server
 * batching streams.  Synthetic predictions copy the true expert of layer l+d
 * with probability pred_accuracy, else a popular wrong one.
 * Everything comes from one xoshiro256** stream seeded by `seed`.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strata/trace.h"
#include "strata/util.h"
#include "trace_int.h"

static double rng_unit(struct strata_xoshiro *r) { return strata_unit53(strata_xoshiro256ss(r)); }
static uint32_t rng_below(struct strata_xoshiro *r, uint32_t n) { return (uint32_t)(rng_unit(r) * n) % n; }

void strata_trace_gen_defaults(struct strata_trace_gen_config *c)
{
	memset(c, 0, sizeof(*c));
	c->n_moe_layers = 8;
	c->n_experts = 64;
	c->top_k = 4;
	c->seed = 1;
	c->requests = 4;
	c->prompt_len = 64;
	c->gen_len = 256;
	c->zipf_alpha = 1.0;
	c->reuse_prob = 0.3;
	c->reuse_window = 8;
	c->layer_corr = 0.5;
	c->weights = true;
	c->pred_accuracy = 0.8;
}

struct gen {
	const struct strata_trace_gen_config *c;
	struct strata_xoshiro rng;
	uint32_t L, E, k;
	uint32_t *perm;    /* [L][E] rank -> expert */
	double *cdf;       /* [E] Zipf CDF over ranks */
	uint32_t *cmap;    /* [L][E] expert of layer l-1 -> expert of layer l */
	uint16_t *hist;    /* [R][L][W*k] recent experts per request and layer */
	uint32_t *hist_n;  /* [R][L] entries filled (ring) */
	uint32_t W;
};

static uint32_t zipf(struct gen *g, uint32_t layer)
{
	double u = rng_unit(&g->rng);
	uint32_t a = 0, b = g->E - 1;
	while (a < b) {
		uint32_t m = (a + b) / 2;
		if (g->cdf[m] < u)
			a = m + 1;
		else
			b = m;
	}
	return g->perm[(size_t)layer * g->E + a];
}

static int has(const uint16_t *v, uint32_t n, uint32_t e)
{
	for (uint32_t i = 0; i < n; i++)
		if (v[i] == e)
			return 1;
	return 0;
}

static void gen_token(struct gen *g, uint32_t req, uint16_t *ids, float *w)
{
	const struct strata_trace_gen_config *c = g->c;
	uint32_t L = g->L, k = g->k;
	for (uint32_t l = 0; l < L; l++) {
		uint16_t *out = ids + (size_t)l * k;
		uint16_t *h = g->hist + ((size_t)req * L + l) * g->W * k;
		uint32_t hn = g->hist_n[(size_t)req * L + l];
		uint32_t hfill = hn < g->W * k ? hn : g->W * k;
		for (uint32_t j = 0; j < k; j++) {
			uint32_t e = 0;
			int ok = 0;
			for (int tries = 0; tries < 32 && !ok; tries++) {
				double u = rng_unit(&g->rng);
				if (u < c->reuse_prob && hfill)
					e = h[rng_below(&g->rng, hfill)];
				else if (l > 0 && rng_unit(&g->rng) < c->layer_corr)
					e = g->cmap[(size_t)l * g->E + ids[(size_t)(l - 1) * k + j]];
				else
					e = zipf(g, l);
				ok = !has(out, j, e);
			}
			for (uint32_t r = 0; !ok && r < g->E; r++) { /* fallback: most popular unused */
				e = g->perm[(size_t)l * g->E + r];
				ok = !has(out, j, e);
			}
			out[j] = (uint16_t)e;
		}
		/* weights: sorted exponentials, normalised (descending, as routers report) */
		if (w) {
			float *wl = w + (size_t)l * k;
			double sum = 0;
			for (uint32_t j = 0; j < k; j++) {
				wl[j] = (float)-log(1.0 - rng_unit(&g->rng) * 0.999999);
				sum += wl[j];
			}
			for (uint32_t a = 1; a < k; a++)
				for (uint32_t b = a; b > 0 && wl[b] > wl[b - 1]; b--) {
					float t = wl[b];
					wl[b] = wl[b - 1];
					wl[b - 1] = t;
				}
			for (uint32_t j = 0; j < k; j++)
				wl[j] = (float)(wl[j] / sum);
		}
		/* remember for temporal reuse */
		for (uint32_t j = 0; j < k; j++)
			h[(hn + j) % (g->W * k)] = out[j];
		g->hist_n[(size_t)req * L + l] = hn + k;
	}
}

static void gen_pred(struct gen *g, const uint16_t *ids, uint16_t *pred, float *pw)
{
	const struct strata_trace_gen_config *c = g->c;
	uint32_t L = g->L, k = g->k, D = c->pred_depth, N = c->pred_topn;
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t d = 1; d <= D; d++) {
			float *s;
			uint16_t *p = pred_slots(pred, pw, L, D, N, l, d, &s);
			if (!p)
				continue;
			const uint16_t *truth = ids + (size_t)(l + d) * k;
			for (uint32_t j = 0; j < N; j++) {
				uint32_t e = 0;
				int ok = 0;
				if (j < k && rng_unit(&g->rng) < c->pred_accuracy) {
					e = truth[j];
					ok = !has(p, j, e);
				}
				for (int tries = 0; tries < 32 && !ok; tries++) {
					e = zipf(g, l + d);
					ok = !has(p, j, e) && !has(truth, k, e);
				}
				for (uint32_t r = 0; !ok && r < g->E; r++) {
					e = g->perm[(size_t)(l + d) * g->E + r];
					ok = !has(p, j, e);
				}
				if (ok) {
					p[j] = (uint16_t)e;
					s[j] = (float)(1.0 / (1.0 + j)) * (float)pow(0.8, d - 1);
				}
			}
		}
}

static uint32_t jitter(struct gen *g, uint32_t len, uint32_t min)
{
	double j = g->c->len_jitter;
	double v = len;
	if (j > 0)
		v = len * (1.0 + j * (2 * rng_unit(&g->rng) - 1));
	uint32_t r = (uint32_t)llround(v);
	return r < min ? min : r;
}

int strata_trace_gen(const struct strata_trace_gen_config *c, const char *path, int format,
		     struct strata_error *err)
{
	if (!c->n_moe_layers || !c->n_experts || !c->top_k || c->top_k > c->n_experts ||
	    c->n_experts >= STRATA_TRACE_NO_EXPERT || c->top_k > STRATA_TRACE_MAX_TOPK)
		return STRATA_ERR(err, STRATA_EINVAL, "gen: bad shape (layers %u, experts %u, top_k %u)",
				  c->n_moe_layers, c->n_experts, c->top_k);
	if (!c->requests || !c->gen_len)
		return STRATA_ERR(err, STRATA_EINVAL, "gen: need at least one request and gen_len >= 1");
	if (c->zipf_alpha < 0 || c->reuse_prob < 0 || c->reuse_prob > 1 || c->layer_corr < 0 || c->layer_corr > 1 ||
	    c->pred_accuracy < 0 || c->pred_accuracy > 1 || c->len_jitter < 0 || c->len_jitter >= 1)
		return STRATA_ERR(err, STRATA_EINVAL,
				  "gen: probabilities must lie in [0, 1], alpha >= 0 and jitter in [0, 1)");
	if (c->pred_depth && (c->pred_depth > STRATA_TRACE_MAX_DEPTH || !c->pred_topn ||
			      c->pred_topn > STRATA_TRACE_MAX_TOPN))
		return STRATA_ERR(err, STRATA_EINVAL, "gen: prediction depth 1..%d and topn 1..%d",
				  STRATA_TRACE_MAX_DEPTH, STRATA_TRACE_MAX_TOPN);
	struct gen g = { .c = c, .L = c->n_moe_layers, .E = c->n_experts, .k = c->top_k };
	g.W = c->reuse_window ? c->reuse_window : 1;
	strata_xoshiro_seed(&g.rng, c->seed);
	size_t LE = (size_t)g.L * g.E;
	g.perm = malloc(LE * sizeof(uint32_t));
	g.cmap = malloc(LE * sizeof(uint32_t));
	g.cdf = malloc(g.E * sizeof(double));
	g.hist = calloc((size_t)c->requests * g.L * g.W * g.k, sizeof(uint16_t));
	g.hist_n = calloc((size_t)c->requests * g.L, sizeof(uint32_t));
	size_t DN = (size_t)g.L * c->pred_depth * c->pred_topn;
	uint16_t *ids = malloc((size_t)g.L * g.k * 2), *pred = malloc((DN + 1) * 2);
	float *w = malloc((size_t)g.L * g.k * 4), *pw = malloc((DN + 1) * 4);
	uint32_t *plen = malloc(c->requests * sizeof(uint32_t)), *glen = malloc(c->requests * sizeof(uint32_t));
	uint32_t *done = calloc(c->requests, sizeof(uint32_t));
	struct strata_trace_writer *wr = NULL;
	struct strata_progress pg = { 0 };
	uint64_t emitted = 0;
	int rc = STRATA_OK;
	if (!g.perm || !g.cmap || !g.cdf || !g.hist || !g.hist_n || !ids || !pred || !w || !pw || !plen || !glen ||
	    !done) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "gen: out of memory");
		goto out;
	}
	double sum = 0;
	for (uint32_t r = 0; r < g.E; r++)
		sum += g.cdf[r] = pow(r + 1.0, -c->zipf_alpha);
	double acc = 0;
	for (uint32_t r = 0; r < g.E; r++) {
		acc += g.cdf[r] / sum;
		g.cdf[r] = acc;
	}
	g.cdf[g.E - 1] = 1.0;
	for (uint32_t l = 0; l < g.L; l++) {
		uint32_t *p = g.perm + (size_t)l * g.E, *m = g.cmap + (size_t)l * g.E;
		for (uint32_t e = 0; e < g.E; e++)
			p[e] = m[e] = e;
		for (uint32_t e = g.E - 1; e > 0; e--) {
			uint32_t a = rng_below(&g.rng, e + 1), t = p[e];
			p[e] = p[a];
			p[a] = t;
			a = rng_below(&g.rng, e + 1);
			t = m[e];
			m[e] = m[a];
			m[a] = t;
		}
	}
	for (uint32_t r = 0; r < c->requests; r++) {
		plen[r] = c->prompt_len ? jitter(&g, c->prompt_len, 1) : 0;
		glen[r] = jitter(&g, c->gen_len, 1);
	}
	struct strata_trace_writer_config wc = {
		.path = path, .format = format, .n_moe_layers = g.L, .n_experts = g.E, .top_k = g.k,
		.flags = (c->weights ? STRATA_TRACE_F_WEIGHTS : 0) | (c->pred_depth ? STRATA_TRACE_F_PRED : 0),
		.pred_depth = c->pred_depth, .pred_topn = c->pred_topn, .model = c->model,
	};
	uint64_t n_tokens = 0;
	for (uint32_t r = 0; r < c->requests; r++)
		n_tokens += (uint64_t)plen[r] + glen[r];
	if ((rc = strata_trace_writer_open(&wc, &wr, err)) || (rc = strata_trace_writer_reserve(wr, n_tokens, err)))
		goto out;
	if (c->progress)
		strata_progress_start(&pg, "trace gen", n_tokens, "tokens");
#define EMIT(req_, phase_, pos_)                                                                         \
	do {                                                                                             \
		gen_token(&g, (req_), ids, c->weights ? w : NULL);                                       \
		if (c->pred_depth)                                                                       \
			gen_pred(&g, ids, pred, pw);                                                     \
		struct strata_trace_token tk = { .req = (req_), .pos = (pos_), .phase = (phase_),       \
						 .experts = ids, .weights = c->weights ? w : NULL,      \
						 .pred = c->pred_depth ? pred : NULL, .pred_w = pw };   \
		if ((rc = strata_trace_writer_add(wr, &tk, err)))                                        \
			goto out;                                                                        \
		if (c->progress)                                                                         \
			strata_progress_update(&pg, ++emitted);                                          \
	} while (0)
	if (!c->interleave) {
		for (uint32_t r = 0; r < c->requests; r++) {
			for (uint32_t t = 0; t < plen[r]; t++)
				EMIT(r, STRATA_PHASE_PREFILL, t);
			for (uint32_t t = 0; t < glen[r]; t++)
				EMIT(r, STRATA_PHASE_DECODE, plen[r] + t);
		}
	} else {
		uint32_t stagger = c->gen_len / c->requests ? c->gen_len / c->requests : 1;
		uint32_t next = 0, active = 0;
		for (uint64_t round = 0; next < c->requests || active; round++) {
			if (!active && next < c->requests && round < (uint64_t)next * stagger)
				round = (uint64_t)next * stagger;
			while (next < c->requests && round >= (uint64_t)next * stagger) {
				for (uint32_t t = 0; t < plen[next]; t++)
					EMIT(next, STRATA_PHASE_PREFILL, t);
				next++;
				active++;
			}
			for (uint32_t r = 0; r < next; r++) {
				if (done[r] >= glen[r])
					continue;
				EMIT(r, STRATA_PHASE_DECODE, plen[r] + done[r]);
				if (++done[r] == glen[r])
					active--;
			}
		}
	}
#undef EMIT
	rc = strata_trace_writer_finish(wr, err);
	wr = NULL;
out:
	if (pg.what) /* the line ends before an error is printed */
		strata_progress_finish(&pg);
	if (wr)
		strata_trace_writer_abort(wr);
	free(g.perm);
	free(g.cmap);
	free(g.cdf);
	free(g.hist);
	free(g.hist_n);
	free(ids);
	free(pred);
	free(w);
	free(pw);
	free(plen);
	free(glen);
	free(done);
	return rc;
}
