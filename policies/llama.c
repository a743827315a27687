/*
 * llama.cpp's expert cache (ggml-org/llama.cpp PR #27861, src/llama-moe-cache.cpp,
 * `--moe-expert-cache N --moe-expert-cache-inserts M`): N VRAM slots per MoE
 * layer, one LRU list per layer.  Per step (one layer of a decode batch):
 * the step's experts are de-duplicated, the hits move to most-recent, the
 * misses sorted by expert id fill free slots or slots taken from the layer's
 * LRU head, at most M of them per layer per step (the rest are computed from
 * host memory, not cached), and batches of more than one token bypass the
 * cache.  Two roles, composed as `place=llama,evict=llama`:
 *
 * evict llama: per-layer LRU lists.  The victim is the LRU head of the
 * step's layer once that layer holds `slots` experts; while it holds fewer
 * (the tier's byte budget, not the layer's slots, ran out) it is the oldest
 * head among the layers holding more than their slots, else the oldest head
 * of any layer.  With every layer at its slots this is llama.cpp's
 * partition; the byte budget lets a layer borrow room other layers have not
 * used yet.  A step's hits move to most-recent at on_step in id order, its
 * misses after them in id order once the step is over.
 *
 * place llama: nothing preloaded into VRAM (the host holds every expert: RAM
 * is kept), at most `inserts` VRAM admissions per step (0: no cap), none in
 * a step of more than `max_batch` tokens.  Admissions are granted in the
 * order the driver asks (the replay asks in the step's expert order).
 *
 * A step's token count is struct strata_step's n_tokens, or where the
 * driver does not know it (0) at least n_experts / top_k.
 */
#include <stdlib.h>

#include "strata/policy.h"
#include "strata/store.h"

#define NONE (-1)

struct lnode {
	int32_t prev, next;   /* within the layer's list; prev -2: not on it */
	uint64_t stamp;       /* recency: larger is more recent */
	uint64_t step;        /* step serial that last moved it (on_step) */
};

#define OFF_LIST (-2)

struct llama_evict {
	int64_t slots, max_batch;
	uint32_t L, E, K, slots_eff;
	struct lnode *n;                 /* per eid */
	int32_t *head, *tail;            /* per layer: LRU head, MRU tail */
	uint32_t *count;                 /* per layer */
	uint32_t *pend;                  /* misses inserted in the current step */
	uint32_t *hits;                  /* on_step's scratch */
	uint32_t n_pend;
	int64_t layer;                   /* the current step's layer, NONE before any */
	int bypass;
	uint64_t seq, step;
};

/* Tokens in the step: the driver's count, or the fewest that route its experts. */
static uint32_t step_tokens(const struct strata_step *s, uint32_t K)
{
	if (s->n_tokens)
		return s->n_tokens;
	return K ? (s->n_experts + K - 1) / K : 1;
}

static const struct strata_option evict_options[] = {
	{ .name = "slots", .type = STRATA_OPT_INT, .offset = offsetof(struct llama_evict, slots),
	  .def = "0", .min = 0, .max = 1 << 24,
	  .help = "VRAM slots per MoE layer (0: the tier's budget over the layers)" },
	{ .name = "max_batch", .type = STRATA_OPT_INT, .offset = offsetof(struct llama_evict, max_batch),
	  .def = "1", .min = 0, .max = 1 << 24,
	  .help = "steps of more tokens leave the LRU order alone (0: no bypass)" },
	{ .name = NULL },
};

static int evict_init(struct strata_policy *p, struct strata_error *err)
{
	struct llama_evict *l = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	l->L = s && s->n_moe_layers ? s->n_moe_layers : 1;
	l->E = s && s->n_experts ? s->n_experts : p->env->n_ids;
	l->K = s && s->top_k ? s->top_k : 1;
	uint32_t n = p->env->n_ids;
	l->n = malloc(sizeof(*l->n) * (n ? n : 1));
	l->head = malloc(sizeof(int32_t) * l->L);
	l->tail = malloc(sizeof(int32_t) * l->L);
	l->count = calloc(l->L, sizeof(uint32_t));
	l->pend = malloc(sizeof(uint32_t) * (l->E ? l->E : 1));
	l->hits = malloc(sizeof(uint32_t) * (l->E ? l->E : 1));
	if (!l->n || !l->head || !l->tail || !l->count || !l->pend || !l->hits)
		return STRATA_ERR(err, STRATA_ENOMEM, "evict llama: out of memory");
	for (uint32_t i = 0; i < n; i++)
		l->n[i] = (struct lnode){ .prev = OFF_LIST, .next = NONE };
	for (uint32_t i = 0; i < l->L; i++)
		l->head[i] = l->tail[i] = NONE;
	l->layer = NONE;
	l->slots_eff = (uint32_t)l->slots;
	if (!l->slots_eff) {
		/* the tier's budget in experts of mean size, shared by the layers */
		uint64_t sum = 0, budget = p->tier >= 0 ? p->env->budget[p->tier] : 0;
		for (uint32_t i = 0; i < n && p->env->expert_bytes; i++)
			sum += p->env->expert_bytes[i];
		double mean = n && sum ? (double)sum / n : 1.0;
		double per = (double)budget / mean / l->L;
		l->slots_eff = per >= 1.0 ? (per < 1e9 ? (uint32_t)per : 1000000000u) : 1;
	}
	return STRATA_OK;
}

static void evict_free(struct strata_policy *p)
{
	struct llama_evict *l = p->priv;
	free(l->n);
	free(l->head);
	free(l->tail);
	free(l->count);
	free(l->pend);
	free(l->hits);
}

static void unlink_eid(struct llama_evict *l, uint32_t e)
{
	uint32_t layer = e / l->E;
	int32_t pv = l->n[e].prev, nx = l->n[e].next;
	if (pv >= 0)
		l->n[pv].next = nx;
	else
		l->head[layer] = nx;
	if (nx >= 0)
		l->n[nx].prev = pv;
	else
		l->tail[layer] = pv;
	l->n[e].prev = OFF_LIST;
	l->count[layer]--;
}

/* Append e at its layer's most-recent end (unlinking it first if listed). */
static void to_mru(struct llama_evict *l, uint32_t e)
{
	uint32_t layer = e / l->E;
	if (l->n[e].prev != OFF_LIST)
		unlink_eid(l, e);
	l->n[e].prev = l->tail[layer];
	l->n[e].next = NONE;
	if (l->tail[layer] >= 0)
		l->n[l->tail[layer]].next = (int32_t)e;
	else
		l->head[layer] = (int32_t)e;
	l->tail[layer] = (int32_t)e;
	l->n[e].stamp = ++l->seq;
	l->count[layer]++;
}

static int by_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* The previous step is over: its misses go most-recent in id order. */
static void finish_step(struct llama_evict *l)
{
	qsort(l->pend, l->n_pend, sizeof(uint32_t), by_u32);
	for (uint32_t i = 0; i < l->n_pend; i++)
		if (l->n[l->pend[i]].prev != OFF_LIST)
			to_mru(l, l->pend[i]);
	l->n_pend = 0;
}

static void evict_on_step(struct strata_policy *p, const struct strata_step *s)
{
	struct llama_evict *l = p->priv;
	finish_step(l);
	l->step++;
	l->layer = s->layer < l->L ? (int64_t)s->layer : NONE;
	l->bypass = l->max_batch && step_tokens(s, l->K) > (uint64_t)l->max_batch;
	if (l->bypass || l->layer == NONE)
		return;
	/* hits: most-recent in id order (the step's experts are distinct) */
	uint32_t *hits = l->hits, nh = 0;
	for (uint32_t i = 0; i < s->n_experts; i++) {
		if (s->experts[i] >= l->E)
			continue;
		uint32_t e = (uint32_t)l->layer * l->E + s->experts[i];
		l->n[e].step = l->step;
		if (l->n[e].prev != OFF_LIST && nh < l->E)
			hits[nh++] = e;
	}
	qsort(hits, nh, sizeof(uint32_t), by_u32);
	for (uint32_t i = 0; i < nh; i++)
		to_mru(l, hits[i]);
}

static void evict_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct llama_evict *l = p->priv;
	if (eid >= p->env->n_ids)
		return;
	to_mru(l, eid);
	if (!l->bypass && l->n[eid].step == l->step && (int64_t)(eid / l->E) == l->layer &&
	    l->n_pend < l->E)
		l->pend[l->n_pend++] = eid;
}

static void evict_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct llama_evict *l = p->priv;
	if (eid >= p->env->n_ids || l->bypass || l->n[eid].prev == OFF_LIST)
		return;
	if (l->n[eid].step == l->step && (int64_t)(eid / l->E) == l->layer)
		return; /* placed by on_step (a hit) or on_insert (a miss) */
	to_mru(l, eid); /* a driver that gives no steps: plain LRU */
}

static void evict_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct llama_evict *l = p->priv;
	if (eid < p->env->n_ids && l->n[eid].prev != OFF_LIST)
		unlink_eid(l, eid);
}

/* The oldest unpinned expert of a layer, or NONE. */
static int32_t layer_lru(const struct llama_evict *l, uint32_t layer, const struct strata_residency *r)
{
	for (int32_t e = l->head[layer]; e >= 0; e = l->n[e].next)
		if (!(r && r->pinned && r->pinned[e]))
			return e;
	return NONE;
}

static int64_t evict_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct llama_evict *l = p->priv;
	if (l->layer != NONE && l->count[l->layer] >= l->slots_eff) {
		int32_t e = layer_lru(l, (uint32_t)l->layer, r);
		if (e != NONE)
			return e;
	}
	int32_t best = NONE;
	for (int pass = 0; pass < 2 && best == NONE; pass++)
		for (uint32_t y = 0; y < l->L; y++) {
			if (pass == 0 && l->count[y] <= l->slots_eff)
				continue;
			int32_t e = layer_lru(l, y, r);
			if (e != NONE && (best == NONE || l->n[e].stamp < l->n[best].stamp))
				best = e;
		}
	return best == NONE ? STRATA_NO_EXPERT : best;
}

const struct strata_evict_ops strata_evict_llama = {
	.name = "llama", .version = STRATA_POLICY_ABI,
	.help = "llama.cpp's expert cache (PR #27861): per-layer LRU slots, misses fill in id order",
	.priv_size = sizeof(struct llama_evict), .options = evict_options,
	.init = evict_init, .free = evict_free, .on_insert = evict_on_insert,
	.on_access = evict_on_access, .on_remove = evict_on_remove, .victim = evict_victim,
	.on_step = evict_on_step,
};

/* ---- placement: the insert cap and the batch bypass ---- */

struct llama_place {
	int64_t inserts, max_batch;
	uint32_t K, granted;
	int bypass;
};

static const struct strata_option place_options[] = {
	{ .name = "inserts", .type = STRATA_OPT_INT, .offset = offsetof(struct llama_place, inserts),
	  .def = "0", .min = 0, .max = 1 << 24,
	  .help = "VRAM inserts per layer per step (0: no cap; llama.cpp's --moe-expert-cache-inserts)" },
	{ .name = "max_batch", .type = STRATA_OPT_INT, .offset = offsetof(struct llama_place, max_batch),
	  .def = "1", .min = 0, .max = 1 << 24,
	  .help = "steps of more tokens bypass the cache (0: no bypass)" },
	{ .name = NULL },
};

static int place_init(struct strata_policy *p, struct strata_error *err)
{
	struct llama_place *c = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	c->K = s && s->top_k ? s->top_k : 1;
	return STRATA_OK;
}

static int place_initial_tier(struct strata_policy *p, uint32_t eid)
{
	return STRATA_TIER_RAM;
}

static void place_on_step(struct strata_policy *p, const struct strata_step *s)
{
	struct llama_place *c = p->priv;
	c->granted = 0;
	c->bypass = c->max_batch && step_tokens(s, c->K) > (uint64_t)c->max_batch;
}

static uint32_t place_admit(struct strata_policy *p, uint32_t eid, int from_tier, uint64_t now)
{
	struct llama_place *c = p->priv;
	uint32_t keep = 1u << STRATA_TIER_RAM;
	if (c->bypass || (c->inserts && c->granted >= (uint64_t)c->inserts))
		return keep;
	c->granted++;
	return keep | (1u << STRATA_TIER_VRAM);
}

const struct strata_place_ops strata_place_llama = {
	.name = "llama", .version = STRATA_POLICY_ABI,
	.help = "llama.cpp's expert cache admission: empty VRAM, an insert cap per step, large batches bypass",
	.priv_size = sizeof(struct llama_place), .options = place_options,
	.init = place_init, .initial_tier = place_initial_tier, .admit = place_admit,
	.on_step = place_on_step,
};
