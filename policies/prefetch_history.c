/*
 * History prefetch, an online predictor needing no recorded hints: before
 * layer L of a token runs, score every expert of layers L+1 .. L+depth by
 *   (1 - mix) * how often it was chosen at that layer in the last `window`
 *               tokens
 * + mix       * P(expert at L+d | experts this token chose at L-1), from an
 *               online cross-layer transition table,
 * and prefetch the topn best per layer.  The router's choices arrive through
 * on_route after each layer runs; they feed both the window and the table.
 *
 * The table is sparse: one row per (source layer, distance, source expert),
 * allocated on first use, holding the `row` most frequent destinations with
 * space-saving counts (a full row replaces its least counted entry), so
 * memory stays bounded for 900-expert models.
 */
#include <stdlib.h>
#include <string.h>

#include "strata/policy.h"
#include "strata/store.h"

struct trow {
	uint32_t total, n;
	struct { uint32_t dst, cnt; } e[];
};

struct history {
	int64_t depth, topn, window, row;
	double mix;
	char tier[STRATA_OPT_STR_MAX];
	uint32_t dest, L, E, K, D;
	/* window ring: slot w holds one token's choices for every layer */
	uint32_t *ring;       /* [window][L][K] */
	uint8_t *ring_n;      /* [window][L]: experts recorded (0 = none) */
	uint64_t *ring_tok;   /* [window] token, UINT64_MAX = empty */
	uint32_t slot, filled;
	struct trow **rows;   /* [L][D][E], NULL until used */
	float *score;         /* [E] scratch */
	uint32_t *touched;    /* [E] scratch */
	uint8_t *seen;        /* [E] scratch */
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
	  .def = "16", .min = 1, .max = 4096, .help = "destinations kept per transition row" },
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
	h->D = (uint32_t)h->depth + 1;
	if (!h->topn)
		h->topn = h->K;
	size_t W = (size_t)h->window;
	h->ring = malloc(sizeof(uint32_t) * W * h->L * h->K + 1);
	h->ring_n = calloc(W * h->L + 1, 1);
	h->ring_tok = malloc(sizeof(uint64_t) * W);
	h->rows = calloc((size_t)h->L * h->D * h->E + 1, sizeof(struct trow *));
	h->score = calloc(h->E + 1, sizeof(float));
	h->touched = malloc(sizeof(uint32_t) * (h->E + 1));
	h->seen = calloc(h->E + 1, 1);
	if (!h->ring || !h->ring_n || !h->ring_tok || !h->rows || !h->score || !h->touched || !h->seen)
		return STRATA_ERR(err, STRATA_ENOMEM, "prefetch history: out of memory");
	for (size_t w = 0; w < W; w++)
		h->ring_tok[w] = UINT64_MAX;
	return STRATA_OK;
}

static void history_free(struct strata_policy *p)
{
	struct history *h = p->priv;
	if (h->rows)
		for (size_t i = 0; i < (size_t)h->L * h->D * h->E; i++)
			free(h->rows[i]);
	free(h->rows);
	free(h->ring);
	free(h->ring_n);
	free(h->ring_tok);
	free(h->score);
	free(h->touched);
	free(h->seen);
}

static struct trow **row_at(struct history *h, uint32_t layer, uint32_t dist, uint32_t src)
{
	return &h->rows[((size_t)layer * h->D + (dist - 1)) * h->E + src];
}

static void row_add(struct history *h, struct trow **rp, uint32_t dst)
{
	struct trow *r = *rp;
	if (!r) {
		r = calloc(1, sizeof(*r) + sizeof(r->e[0]) * (size_t)h->row);
		if (!r)
			return; /* losing a statistic is harmless */
		*rp = r;
	}
	r->total++;
	uint32_t min_i = 0;
	for (uint32_t i = 0; i < r->n; i++) {
		if (r->e[i].dst == dst) {
			r->e[i].cnt++;
			return;
		}
		if (r->e[i].cnt < r->e[min_i].cnt)
			min_i = i;
	}
	if (r->n < (uint32_t)h->row) {
		r->e[r->n].dst = dst;
		r->e[r->n].cnt = 1;
		r->n++;
	} else {
		r->e[min_i].dst = dst; /* space-saving: inherit the evicted count */
		r->e[min_i].cnt++;
	}
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

static void bump(struct history *h, uint32_t e, float v, uint32_t *nt)
{
	if (!h->seen[e]) {
		h->seen[e] = 1;
		h->score[e] = 0;
		h->touched[(*nt)++] = e;
	}
	h->score[e] += v;
}

static uint32_t history_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
				 struct strata_prefetch_req *out, uint32_t max)
{
	struct history *h = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	uint32_t got = 0;
	int64_t slot = slot_of(h, ctx->token);
	for (uint32_t d = 1; d <= (uint32_t)h->depth && got < max; d++) {
		uint32_t t = ctx->layer + d;
		if (t >= h->L)
			break;
		uint32_t nt = 0;
		/* window: each earlier choice of t counts 1/filled */
		if (h->filled && h->mix < 1) {
			float v = (float)((1 - h->mix) / h->filled);
			for (uint32_t w = 0; w < (uint32_t)h->window; w++) {
				if (h->ring_tok[w] == UINT64_MAX || h->ring_tok[w] == ctx->token)
					continue;
				uint32_t k = h->ring_n[(size_t)w * h->L + t];
				const uint32_t *c = h->ring + ((size_t)w * h->L + t) * h->K;
				for (uint32_t i = 0; i < k; i++)
					bump(h, c[i], v, &nt);
			}
		}
		/* transitions from this token's layer L-1 */
		if (slot >= 0 && ctx->layer >= 1 && h->mix > 0) {
			uint32_t sl = ctx->layer - 1, dist = t - sl;
			uint32_t ns = h->ring_n[(size_t)slot * h->L + sl];
			const uint32_t *src = h->ring + ((size_t)slot * h->L + sl) * h->K;
			for (uint32_t a = 0; a < ns; a++) {
				const struct trow *r = *row_at(h, sl, dist, src[a]);
				if (!r || !r->total)
					continue;
				float base = (float)(h->mix / ns / r->total);
				for (uint32_t i = 0; i < r->n; i++)
					bump(h, r->e[i].dst, base * (float)r->e[i].cnt, &nt);
			}
		}
		/* the topn best, ties by expert number: selection, nt is small */
		for (uint32_t pick = 0; pick < (uint32_t)h->topn && got < max; pick++) {
			int64_t best = -1;
			for (uint32_t i = 0; i < nt; i++) {
				uint32_t e = h->touched[i];
				if (!h->seen[e])
					continue;
				if (best < 0 || h->score[e] > h->score[best] ||
				    (h->score[e] == h->score[best] && e < (uint32_t)best))
					best = e;
			}
			if (best < 0)
				break;
			h->seen[best] = 0;
			out[got].eid = strata_eid(s, t, (uint32_t)best);
			out[got].tier = h->dest;
			got++;
		}
		for (uint32_t i = 0; i < nt; i++)
			h->seen[h->touched[i]] = 0;
	}
	return got;
}

const struct strata_prefetch_ops strata_prefetch_history = {
	.name = "history", .version = STRATA_POLICY_ABI,
	.help = "predict from the last tokens' choices and a cross-layer transition table",
	.priv_size = sizeof(struct history), .options = history_options,
	.init = history_init, .free = history_free, .on_layer = history_on_layer,
	.on_route = history_on_route,
};
