/*
 * History prefetch, an online predictor needing no recorded hints: as layer
 * L of a token is about to run, score every expert of layers L+1 .. L+depth by
 *   (1 - mix) * how often it was chosen at that layer in the last `window`
 *               tokens
 * + mix       * P(expert at L+d | the experts this token uses at L), from an
 *               online cross-layer transition table,
 * and prefetch the topn best per layer.  Layer L's experts come in ctx (the
 * request being served); a driver that cannot pass them gets the table
 * keyed on layer L-1's choices instead (distance d+1, so layers up to
 * L+depth-1 only).  The router's choices arrive through on_route after each
 * layer runs; they feed both the window and the table.
 *
 * The table is sparse: one row per (source layer, distance, source expert),
 * allocated on first use: a small hash of 2 x `row` slots (rounded up to a
 * power of two) keyed by destination, each probed at two places.  A
 * destination meeting two occupied slots wears the weaker one down by one
 * count and takes it over at zero, so frequent destinations stay and memory
 * stays bounded for 900-expert models; an update is O(1).
 */
#include <stdlib.h>
#include <string.h>

#include "strata/policy.h"
#include "strata/types.h"

struct trow {
	struct { uint16_t dst, cnt; } e[1]; /* [cap]; cnt 0 = empty */
};

/* Rows come from slabs, so that a layer's rows sit together in memory: the
 * table is touched at random and is mostly cache misses otherwise. */
#define SLAB_ROWS 1024
struct slab {
	struct slab *next;
	uint32_t used;
};
#define SLAB_HEAD 64 /* rows start one cache line in */

struct history {
	int64_t depth, topn, window, row;
	double mix;
	char tier[STRATA_OPT_STR_MAX];
	uint32_t dest, L, E, K, D, cap;
	/* window ring: slot w holds one token's choices for every layer */
	uint32_t *ring;       /* [window][L][K] */
	uint8_t *ring_n;      /* [window][L]: experts recorded (0 = none) */
	uint64_t *ring_tok;   /* [window] token, UINT64_MAX = empty */
	uint32_t slot, filled;
	struct trow **rows;   /* [L][D][E], NULL until used */
	uint32_t *totals;     /* [L][D][E]: destinations counted per row */
	struct slab *slabs;
	size_t row_bytes;
	float *score;         /* [E] scratch */
	uint32_t *touched;    /* [E] scratch */
	uint8_t *seen;        /* [E] scratch */
	uint32_t *best;       /* [topn] scratch */
};

static const struct strata_option history_options[] = {
	{ .name = "depth", .type = STRATA_OPT_INT, .offset = offsetof(struct history, depth),
	  .def = "1", .min = 1, .max = 64, .help = "layers ahead to prefetch" },
	{ .name = "topn", .type = STRATA_OPT_INT, .offset = offsetof(struct history, topn),
	  .def = "0", .min = 0, .max = 65536, .help = "experts per layer (0: top_k)" },
	{ .name = "window", .type = STRATA_OPT_INT, .offset = offsetof(struct history, window),
	  .def = "8", .min = 1, .max = 4096, .help = "recent tokens whose choices are counted" },
	{ .name = "mix", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct history, mix),
	  .def = "0.5", .min = 0, .max = 1, .help = "weight of the transition table vs the window" },
	{ .name = "row", .type = STRATA_OPT_INT, .offset = offsetof(struct history, row),
	  .def = "8", .min = 1, .max = 4096, .help = "destinations kept per transition row" },
	{ .name = "tier", .type = STRATA_OPT_STR, .offset = offsetof(struct history, tier),
	  .def = "vram", .choices = "vram|ram", .help = "destination tier" },
	{ .name = NULL },
};

static int history_init(struct strata_policy *p, struct strata_error *err)
{
	struct history *h = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	h->dest = strcmp(h->tier, "ram") ? STRATA_TIER_VRAM : STRATA_TIER_RAM;
	h->L = s->n_moe_layers;
	h->E = s->n_experts;
	h->K = s->top_k ? s->top_k : 1;
	if (h->K > 255)
		h->K = 255;
	h->D = (uint32_t)h->depth;
	for (h->cap = 2; h->cap < 2 * (uint64_t)h->row; h->cap *= 2)
		;
	/* rows of 16 entries are one 64-byte cache line */
	h->row_bytes = (sizeof(((struct trow *)0)->e[0]) * h->cap + 63) & ~(size_t)63;
	if (h->E > UINT16_MAX)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED,
				  "prefetch history: %u experts per layer, at most %u supported", h->E,
				  UINT16_MAX);
	if (!h->topn)
		h->topn = h->K;
	size_t W = (size_t)h->window;
	h->ring = malloc(sizeof(uint32_t) * W * h->L * h->K + 1);
	h->ring_n = calloc(W * h->L + 1, 1);
	h->ring_tok = malloc(sizeof(uint64_t) * W);
	h->rows = calloc((size_t)h->L * h->D * h->E + 1, sizeof(struct trow *));
	h->totals = calloc((size_t)h->L * h->D * h->E + 1, sizeof(uint32_t));
	h->score = calloc(h->E + 1, sizeof(float));
	h->touched = malloc(sizeof(uint32_t) * (h->E + 1));
	h->seen = calloc(h->E + 1, 1);
	h->best = malloc(sizeof(uint32_t) * ((size_t)h->topn + 1));
	if (!h->ring || !h->ring_n || !h->ring_tok || !h->rows || !h->totals || !h->score || !h->touched ||
	    !h->seen || !h->best)
		return STRATA_ERR(err, STRATA_ENOMEM, "prefetch history: out of memory");
	for (size_t w = 0; w < W; w++)
		h->ring_tok[w] = UINT64_MAX;
	return STRATA_OK;
}

static void history_free(struct strata_policy *p)
{
	struct history *h = p->priv;
	while (h->slabs) {
		struct slab *n = h->slabs->next;
		free(h->slabs);
		h->slabs = n;
	}
	free(h->rows);
	free(h->totals);
	free(h->ring);
	free(h->ring_n);
	free(h->ring_tok);
	free(h->score);
	free(h->touched);
	free(h->seen);
	free(h->best);
}

static size_t row_at(const struct history *h, uint32_t layer, uint32_t dist, uint32_t src)
{
	return ((size_t)layer * h->D + (dist - 1)) * h->E + src;
}

static uint32_t slot_hash(uint32_t dst, uint32_t cap)
{
	return (dst * 0x9e3779b1u) >> 7 & (cap - 1);
}

static void row_add(struct history *h, size_t ri, uint32_t dst)
{
	struct trow **rp = &h->rows[ri];
	uint32_t *total = &h->totals[ri];
	struct trow *r = *rp;
	if (!r) {
		if (!h->slabs || h->slabs->used == SLAB_ROWS) {
			struct slab *sl = aligned_alloc(64, SLAB_HEAD + h->row_bytes * SLAB_ROWS);
			if (!sl)
				return; /* losing a statistic is harmless */
			memset(sl, 0, SLAB_HEAD + h->row_bytes * SLAB_ROWS);
			sl->next = h->slabs;
			h->slabs = sl;
		}
		r = (struct trow *)((char *)h->slabs + SLAB_HEAD + h->row_bytes * h->slabs->used++);
		*rp = r;
	}
	if (*total == UINT32_MAX)
		return;
	(*total)++;
	uint32_t a = slot_hash(dst, h->cap), b = (a + 1) & (h->cap - 1);
	uint32_t hit = r->e[a].cnt && r->e[a].dst == dst ? a
		     : r->e[b].cnt && r->e[b].dst == dst ? b : UINT32_MAX;
	if (hit != UINT32_MAX) {
		if (r->e[hit].cnt == UINT16_MAX) { /* halve the row: ratios stay */
			for (uint32_t i = 0; i < h->cap; i++)
				r->e[i].cnt = (uint16_t)((r->e[i].cnt + 1) / 2);
			*total = *total / 2 + 1;
		}
		r->e[hit].cnt++;
		return;
	}
	uint32_t w = !r->e[a].cnt ? a : !r->e[b].cnt ? b : r->e[b].cnt < r->e[a].cnt ? b : a;
	if (r->e[w].cnt && --r->e[w].cnt)
		return;
	r->e[w].dst = (uint16_t)dst;
	r->e[w].cnt = 1;
}

/* The ring slot of token tok, or -1. */
static int64_t slot_of(const struct history *h, uint64_t tok)
{
	return h->ring_tok[h->slot] == tok ? (int64_t)h->slot : -1;
}

static void history_on_route(struct strata_policy *p, uint64_t token, uint32_t layer,
			     const uint32_t *experts, uint32_t n)
{
	struct history *h = p->priv;
	if (layer >= h->L)
		return;
	if (h->ring_tok[h->slot] != token) {
		if (h->ring_tok[h->slot] != UINT64_MAX)
			h->slot = (h->slot + 1) % (uint32_t)h->window;
		h->ring_tok[h->slot] = token;
		memset(h->ring_n + (size_t)h->slot * h->L, 0, h->L);
		if (h->filled < (uint32_t)h->window)
			h->filled++;
	}
	uint32_t *cur = h->ring + ((size_t)h->slot * h->L + layer) * h->K;
	uint32_t m = 0;
	for (uint32_t i = 0; i < n && m < h->K; i++)
		if (experts[i] < h->E)
			cur[m++] = experts[i];
	h->ring_n[(size_t)h->slot * h->L + layer] = (uint8_t)m;
	/* transitions from this token's earlier layers */
	for (uint32_t dist = 1; dist <= h->D && dist <= layer; dist++) {
		uint32_t sl = layer - dist;
		uint32_t ns = h->ring_n[(size_t)h->slot * h->L + sl];
		const uint32_t *src = h->ring + ((size_t)h->slot * h->L + sl) * h->K;
		for (uint32_t a = 0; a < ns; a++)
			for (uint32_t b = 0; b < m; b++)
				row_add(h, row_at(h, sl, dist, src[a]), cur[b]);
	}
}

static int better(float a, uint32_t ea, float b, uint32_t eb)
{
	return a > b || (a == b && ea < eb);
}

/* Scores live in the caller's locals: a uint8_t store (seen) may alias
 * anything, so fields read through h would be reloaded after every one. */
struct scoring {
	float *score;
	uint8_t *seen;
	uint32_t *touched;
	uint32_t nt;
};

static inline __attribute__((always_inline)) void bump(struct scoring *sc, uint32_t e, float v)
{
	if (!sc->seen[e]) {
		sc->seen[e] = 1;
		sc->score[e] = 0;
		sc->touched[sc->nt++] = e;
	}
	sc->score[e] += v;
}

static uint32_t history_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
				 struct strata_prefetch_req *out, uint32_t max)
{
	struct history *h = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	uint32_t got = 0;
	int64_t slot = slot_of(h, ctx->token);
	const uint32_t W = (uint32_t)h->window, L = h->L, K = h->K, cap = h->cap;
	const uint64_t *ring_tok = h->ring_tok;
	const uint8_t *ring_n = h->ring_n;
	const uint32_t *ring = h->ring;
	for (uint32_t d = 1; d <= (uint32_t)h->depth && got < max; d++) {
		uint32_t t = ctx->layer + d;
		if (t >= L)
			break;
		struct scoring sc = { h->score, h->seen, h->touched, 0 };
		/* window: each earlier choice of t counts 1/filled */
		if (h->filled && h->mix < 1) {
			float v = (float)((1 - h->mix) / h->filled);
			for (uint32_t w = 0; w < W; w++) {
				if (ring_tok[w] == UINT64_MAX || ring_tok[w] == ctx->token)
					continue;
				uint32_t k = ring_n[(size_t)w * L + t];
				const uint32_t *c = ring + ((size_t)w * L + t) * K;
				for (uint32_t i = 0; i < k; i++)
					bump(&sc, c[i], v);
			}
		}
		/* transitions from this token's layer L (or L-1) */
		const uint32_t *src = NULL;
		uint32_t ns = 0, sl = ctx->layer, dist = d;
		if (ctx->experts && ctx->n_experts) {
			src = ctx->experts;
			ns = ctx->n_experts;
		} else if (slot >= 0 && ctx->layer >= 1 && d + 1 <= h->D) {
			sl = ctx->layer - 1;
			dist = d + 1;
			ns = ring_n[(size_t)slot * L + sl];
			src = ring + ((size_t)slot * L + sl) * K;
		}
		if (ns && h->mix > 0) {
			for (uint32_t a = 0; a < ns; a++) {
				if (src[a] >= h->E)
					continue;
				size_t ri = row_at(h, sl, dist, src[a]);
				const struct trow *r = h->rows[ri];
				if (!r || !h->totals[ri])
					continue;
				/* cnt / occurrences of src = P(dst chosen | src chosen);
				 * each occurrence of src adds K destinations */
				float base = (float)(h->mix * K / h->totals[ri]);
				for (uint32_t i = 0; i < cap; i++)
					if (r->e[i].cnt)
						bump(&sc, r->e[i].dst, base * (float)r->e[i].cnt);
			}
		}
		/* the topn best, ties by expert number: insertion into a short
		 * sorted list, most candidates rejected at its tail */
		const float *score = sc.score;
		uint32_t *best = h->best, nt = sc.nt;
		uint32_t k = 0, lim = (uint32_t)h->topn < max - got ? (uint32_t)h->topn : max - got;
		for (uint32_t i = 0; i < nt && lim; i++) {
			uint32_t e = sc.touched[i];
			float v = score[e];
			if (k == lim && !better(v, e, score[best[k - 1]], best[k - 1]))
				continue;
			uint32_t j = k < lim ? k++ : k - 1;
			while (j > 0 && better(v, e, score[best[j - 1]], best[j - 1])) {
				best[j] = best[j - 1];
				j--;
			}
			best[j] = e;
		}
		for (uint32_t i = 0; i < k; i++) {
			out[got].eid = strata_eid(s, t, best[i]);
			out[got].tier = h->dest;
			got++;
		}
		for (uint32_t i = 0; i < nt; i++)
			sc.seen[sc.touched[i]] = 0;
	}
	return got;
}

const struct strata_prefetch_ops strata_prefetch_history = {
	.name = "history", .version = STRATA_POLICY_ABI, .flags = STRATA_POLICY_F_NO_HINTS,
	.help = "predict from the last tokens' choices and a cross-layer transition table",
	.priv_size = sizeof(struct history), .options = history_options,
	.init = history_init, .free = history_free, .on_layer = history_on_layer,
	.on_route = history_on_route,
};
