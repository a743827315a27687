/*
 * The policy harness (see include/strata/harness.h): seeded traces
 * with their future, and a single-tier cache driver that replays them
 * through policies and counts what happened.  Kept small and literal: it is
 * the reference the engine's policy calls are compared with.
 */
#include <stdlib.h>
#include <string.h>

#include "strata/harness.h"
#include "strata/sched.h"
#include "strata/store.h"
#include "strata/util.h"

/* ---- traces ---- */

struct trace_priv {
	uint32_t *experts;          /* all steps' experts */
	struct strata_hint *hints;  /* all steps' hints */
	uint32_t n_ids;
	uint64_t *use_off;          /* [n_ids + 1] into use_pos */
	uint64_t *use_pos;          /* clock values of each eid's accesses, ascending */
	uint32_t *by_tl;            /* step indexes sorted by (token, layer) */
};

static uint64_t future_next_use(const struct strata_future *f, uint32_t eid, uint64_t now)
{
	const struct trace_priv *tp = f->priv;
	if (eid >= tp->n_ids)
		return STRATA_NEVER;
	uint64_t lo = tp->use_off[eid], hi = tp->use_off[eid + 1];
	while (lo < hi) { /* first position > now */
		uint64_t mid = lo + (hi - lo) / 2;
		if (tp->use_pos[mid] <= now)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < tp->use_off[eid + 1] ? tp->use_pos[lo] : STRATA_NEVER;
}

static const struct strata_harness_trace *trace_of_future(const struct strata_future *f)
{
	return (const struct strata_harness_trace *)((const char *)f -
						     offsetof(struct strata_harness_trace, future));
}

static uint32_t future_routed(const struct strata_future *f, uint64_t token, uint32_t layer,
			      uint32_t *out, uint32_t max)
{
	const struct strata_harness_trace *t = trace_of_future(f);
	const struct trace_priv *tp = f->priv;
	uint32_t lo = 0, hi = t->n_steps;
	while (lo < hi) { /* first step >= (token, layer) */
		uint32_t mid = lo + (hi - lo) / 2;
		const struct strata_harness_step *s = &t->steps[tp->by_tl[mid]];
		if (s->token < token || (s->token == token && s->layer < layer))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == t->n_steps)
		return 0;
	const struct strata_harness_step *s = &t->steps[tp->by_tl[lo]];
	if (s->token != token || s->layer != layer)
		return 0;
	uint32_t n = s->n < max ? s->n : max;
	memcpy(out, s->experts, n * sizeof(uint32_t));
	return n;
}

static int by_token_layer(const void *a, const void *b, void *arg)
{
	const struct strata_harness_step *steps = arg;
	const struct strata_harness_step *x = &steps[*(const uint32_t *)a];
	const struct strata_harness_step *y = &steps[*(const uint32_t *)b];
	if (x->token != y->token)
		return x->token < y->token ? -1 : 1;
	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* Build indexes once steps, experts and hints are in place. */
static int trace_index(struct strata_harness_trace *t, struct strata_error *err)
{
	struct trace_priv *tp = t->priv;
	const struct strata_model_spec *s = &t->spec;
	tp->n_ids = strata_model_total_experts(s);
	tp->use_off = calloc((size_t)tp->n_ids + 1, sizeof(uint64_t));
	tp->use_pos = malloc(sizeof(uint64_t) * (t->n_accesses + 1));
	tp->by_tl = malloc(sizeof(uint32_t) * (t->n_steps + 1));
	if (!tp->use_off || !tp->use_pos || !tp->by_tl)
		return STRATA_ERR(err, STRATA_ENOMEM, "harness trace: out of memory");
	t->n_tokens = 0;
	for (uint32_t i = 0; i < t->n_steps; i++) {
		const struct strata_harness_step *st = &t->steps[i];
		if (st->layer >= s->n_moe_layers)
			return STRATA_ERR(err, STRATA_EINVAL, "harness trace: step %u: layer %u >= %u MoE layers",
					  i, st->layer, s->n_moe_layers);
		for (uint32_t j = 0; j < st->n; j++) {
			if (st->experts[j] >= s->n_experts)
				return STRATA_ERR(err, STRATA_EINVAL,
						  "harness trace: step %u: expert %u >= %u experts", i,
						  st->experts[j], s->n_experts);
			tp->use_off[strata_eid(s, st->layer, st->experts[j]) + 1]++;
		}
		if (st->token + 1 > t->n_tokens)
			t->n_tokens = st->token + 1;
		tp->by_tl[i] = i;
	}
	for (uint32_t e = 0; e < tp->n_ids; e++)
		tp->use_off[e + 1] += tp->use_off[e];
	uint64_t *fill = malloc(sizeof(uint64_t) * (tp->n_ids + 1));
	if (!fill)
		return STRATA_ERR(err, STRATA_ENOMEM, "harness trace: out of memory");
	memcpy(fill, tp->use_off, sizeof(uint64_t) * (tp->n_ids + 1));
	uint64_t clock = 0;
	for (uint32_t i = 0; i < t->n_steps; i++) {
		const struct strata_harness_step *st = &t->steps[i];
		for (uint32_t j = 0; j < st->n; j++)
			tp->use_pos[fill[strata_eid(s, st->layer, st->experts[j])]++] = clock++;
	}
	free(fill);
	qsort_r(tp->by_tl, t->n_steps, sizeof(uint32_t), by_token_layer, t->steps);
	t->future.next_use = future_next_use;
	t->future.routed = future_routed;
	t->future.n_tokens = t->n_tokens;
	t->future.priv = tp;
	return STRATA_OK;
}

static struct strata_harness_trace *trace_alloc(const struct strata_model_spec *spec, uint32_t n_steps,
						uint64_t n_exp, uint64_t n_hints)
{
	struct strata_harness_trace *t = calloc(1, sizeof(*t));
	struct trace_priv *tp = calloc(1, sizeof(*tp));
	if (!t || !tp) {
		free(t);
		free(tp);
		return NULL;
	}
	t->priv = tp;
	t->spec = *spec;
	t->n_steps = n_steps;
	t->steps = calloc(n_steps + 1, sizeof(*t->steps));
	tp->experts = malloc(sizeof(uint32_t) * (n_exp + 1));
	tp->hints = malloc(sizeof(struct strata_hint) * (n_hints + 1));
	if (!t->steps || !tp->experts || !tp->hints) {
		strata_harness_trace_free(t);
		return NULL;
	}
	return t;
}

void strata_harness_trace_free(struct strata_harness_trace *t)
{
	if (!t)
		return;
	struct trace_priv *tp = t->priv;
	if (tp) {
		free(tp->experts);
		free(tp->hints);
		free(tp->use_off);
		free(tp->use_pos);
		free(tp->by_tl);
		free(tp);
	}
	free(t->steps);
	free(t);
}

int strata_harness_trace_build(const struct strata_model_spec *spec,
			       const struct strata_harness_step *steps, uint32_t n_steps,
			       struct strata_harness_trace **out, struct strata_error *err)
{
	*out = NULL;
	uint64_t n_exp = 0, n_hints = 0;
	for (uint32_t i = 0; i < n_steps; i++) {
		n_exp += steps[i].n;
		n_hints += steps[i].n_hints;
	}
	struct strata_harness_trace *t = trace_alloc(spec, n_steps, n_exp, n_hints);
	if (!t)
		return STRATA_ERR(err, STRATA_ENOMEM, "harness trace: out of memory");
	struct trace_priv *tp = t->priv;
	uint64_t at = 0, ah = 0;
	for (uint32_t i = 0; i < n_steps; i++) {
		struct strata_harness_step *d = &t->steps[i];
		*d = steps[i];
		memcpy(tp->experts + at, steps[i].experts, steps[i].n * sizeof(uint32_t));
		d->experts = tp->experts + at;
		at += steps[i].n;
		if (steps[i].n_hints)
			memcpy(tp->hints + ah, steps[i].hints, steps[i].n_hints * sizeof(struct strata_hint));
		d->hints = tp->hints + ah;
		ah += steps[i].n_hints;
	}
	t->n_accesses = n_exp;
	int rc = trace_index(t, err);
	if (rc) {
		strata_harness_trace_free(t);
		return rc;
	}
	*out = t;
	return STRATA_OK;
}

static void shuffle(uint32_t *a, uint32_t n, uint64_t *rng)
{
	for (uint32_t i = 0; i < n; i++)
		a[i] = i;
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(strata_splitmix64(rng) % i);
		uint32_t x = a[i - 1];
		a[i - 1] = a[j];
		a[j] = x;
	}
}

#define HINT_DEPTH 2

int strata_harness_trace_gen(const struct strata_model_spec *spec, uint64_t n_tokens, uint64_t seed,
			     struct strata_harness_trace **out, struct strata_error *err)
{
	*out = NULL;
	const uint32_t L = spec->n_moe_layers, E = spec->n_experts;
	const uint32_t K = spec->top_k < E ? spec->top_k : E;
	if (!L || !E || !K || !n_tokens || n_tokens * L > UINT32_MAX / 2)
		return STRATA_ERR(err, STRATA_EINVAL, "harness trace: bad shape (%u layers, %u experts, top-%u, %llu tokens)",
				  L, E, K, (unsigned long long)n_tokens);
	uint32_t n_steps = (uint32_t)(n_tokens * L);
	struct strata_harness_trace *t =
		trace_alloc(spec, n_steps, (uint64_t)n_steps * K, (uint64_t)n_steps * HINT_DEPTH * K);
	uint32_t *perm = malloc(sizeof(uint32_t) * L * E);  /* popularity rank -> expert */
	uint32_t *follow = malloc(sizeof(uint32_t) * L * E); /* layer-to-layer map */
	uint64_t *cum = malloc(sizeof(uint64_t) * E);
	uint8_t *taken = calloc(E, 1);
	int rc = STRATA_OK;
	if (!t || !perm || !follow || !cum || !taken) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "harness trace: out of memory");
		goto done;
	}
	struct trace_priv *tp = t->priv;
	uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 0x7472616365ull;
	for (uint32_t l = 0; l < L; l++) {
		shuffle(perm + (size_t)l * E, E, &rng);
		shuffle(follow + (size_t)l * E, E, &rng);
	}
	uint64_t total = 0; /* Zipf(1)-like weights, integers only */
	for (uint32_t r = 0; r < E; r++)
		cum[r] = (total += 1000000 / (r + 1));
	uint32_t *ex = tp->experts;
	for (uint64_t tok = 0; tok < n_tokens; tok++) {
		for (uint32_t l = 0; l < L; l++) {
			uint32_t *cur = ex + ((size_t)tok * L + l) * K;
			const uint32_t *prev_tok = tok ? cur - (size_t)L * K : NULL;
			const uint32_t *prev_layer = l ? cur - K : NULL;
			for (uint32_t j = 0; j < K; j++) {
				uint32_t e = E, u = (uint32_t)(strata_splitmix64(&rng) % 100);
				if (u < 40 && prev_tok)
					e = prev_tok[strata_splitmix64(&rng) % K];
				else if (u < 65 && prev_layer)
					e = follow[(size_t)l * E + prev_layer[strata_splitmix64(&rng) % K]];
				for (int tries = 0; e >= E || taken[e]; tries++) {
					if (tries >= 8) { /* the least popular free one */
						for (uint32_t r = E; r-- > 0;)
							if (!taken[perm[(size_t)l * E + r]]) {
								e = perm[(size_t)l * E + r];
								break;
							}
						break;
					}
					uint64_t x = strata_splitmix64(&rng) % total;
					uint32_t r = 0;
					while (cum[r] <= x)
						r++;
					e = perm[(size_t)l * E + r];
				}
				taken[e] = 1;
				cur[j] = e;
			}
			for (uint32_t j = 0; j < K; j++)
				taken[cur[j]] = 0;
			struct strata_harness_step *st = &t->steps[tok * L + l];
			st->token = tok;
			st->layer = l;
			st->n = K;
			st->experts = cur;
		}
		/* hints for layers l+1, l+2 of this token: right 75% of the time */
		for (uint32_t l = 0; l < L; l++) {
			struct strata_harness_step *st = &t->steps[tok * L + l];
			struct strata_hint *h = tp->hints + ((size_t)tok * L + l) * HINT_DEPTH * K;
			st->hints = h;
			st->n_hints = 0;
			for (uint32_t d = 1; d <= HINT_DEPTH && l + d < L; d++) {
				const uint32_t *truth = ex + ((size_t)tok * L + l + d) * K;
				for (uint32_t j = 0; j < K; j++) {
					uint32_t e = truth[j];
					if (strata_splitmix64(&rng) % 4 == 0)
						e = (uint32_t)(strata_splitmix64(&rng) % E);
					h[st->n_hints].layer = l + d;
					h[st->n_hints].expert = e;
					h[st->n_hints].score = (float)(strata_splitmix64(&rng) % 1000) / 1000.0f;
					st->n_hints++;
				}
			}
		}
	}
	t->n_accesses = (uint64_t)n_steps * K;
	rc = trace_index(t, err);
done:
	free(perm);
	free(follow);
	free(cum);
	free(taken);
	if (rc) {
		strata_harness_trace_free(t);
		return rc;
	}
	*out = t;
	return STRATA_OK;
}

/* ---- the driver ---- */

struct strata_harness {
	const struct strata_harness_trace *trace;
	struct strata_policy_env env;
	uint64_t *bytes;             /* owned per-eid sizes */
	struct strata_policy *pol[STRATA_ROLE_COUNT];
	uint8_t *resident, *pinned, *prefetched, *transient;
	struct strata_residency res;
	uint64_t used, budget, clock;
	struct strata_prefetch_req *reqs;
	uint32_t max_reqs;
	struct strata_prefetch_sched sched;
	struct strata_pfq pfq;             /* the engine's scheduling decisions (strata/sched.h) */
	struct strata_pf *pf_done;
	uint32_t *step_eids;
	uint64_t lstep;
	struct strata_harness_counters c;
};

void strata_harness_config_defaults(struct strata_harness_config *c)
{
	memset(c, 0, sizeof(*c));
	c->expert_bytes = 1u << 20;
	c->budget = 16ull << 20;
	c->evict = strata_policy_default(STRATA_ROLE_EVICT);
	c->seed = 1;
}

/* A policy that failed inside an op (a Lua hook raised an error) fails the
 * run with its own message. */
static int policy_failed(const struct strata_harness *h, struct strata_error *err)
{
	for (int r = 0; r < STRATA_ROLE_COUNT; r++) {
		const struct strata_error *pe = h->pol[r] ? strata_policy_error(h->pol[r]) : NULL;
		if (pe) {
			if (err)
				*err = *pe;
			return pe->code;
		}
	}
	return STRATA_OK;
}

static int make_room(struct strata_harness *h, uint64_t need, struct strata_error *err)
{
	struct strata_policy *ev = h->pol[STRATA_ROLE_EVICT];
	const struct strata_evict_ops *ops = strata_evict_ops_of(ev);
	while (h->used + need > h->budget) {
		int64_t v = ops->victim(ev, h->clock, &h->res);
		int rc = policy_failed(h, err);
		if (rc)
			return rc;
		if (v == STRATA_NO_EXPERT)
			return STRATA_EBUDGET;
		if (v < 0 || v >= h->env.n_ids || !h->resident[v] || h->pinned[v])
			return STRATA_ERR(err, STRATA_EPOLICY,
					  "evict %s: chose expert %lld, which is %s", ev->name, (long long)v,
					  v < 0 || v >= h->env.n_ids ? "out of range"
					  : !h->resident[v] ? "not resident" : "pinned by the running layer");
		ops->on_remove(ev, (uint32_t)v);
		h->resident[v] = 0;
		h->transient[v] = 0;
		h->res.n_resident--;
		h->used -= h->bytes[v];
		h->c.evictions++;
		if (h->prefetched[v]) {
			h->prefetched[v] = 0;
			h->c.prefetch_wasted++;
		}
	}
	return STRATA_OK;
}

static void insert(struct strata_harness *h, uint32_t eid, uint64_t now)
{
	struct strata_policy *ev = h->pol[STRATA_ROLE_EVICT];
	h->resident[eid] = 1;
	h->res.n_resident++;
	h->used += h->bytes[eid];
	strata_evict_ops_of(ev)->on_insert(ev, eid, now);
}

int strata_harness_open(const struct strata_harness_trace *t, const struct strata_harness_config *c,
			struct strata_harness **out, struct strata_error *err)
{
	*out = NULL;
	struct strata_harness *h = calloc(1, sizeof(*h));
	if (!h)
		return STRATA_ERR(err, STRATA_ENOMEM, "harness: out of memory");
	int rc = STRATA_OK;
	uint32_t n = strata_model_total_experts(&t->spec);
	h->trace = t;
	h->budget = c->budget;
	h->bytes = malloc(sizeof(uint64_t) * (n + 1));
	h->resident = calloc(n + 1, 1);
	h->pinned = calloc(n + 1, 1);
	h->prefetched = calloc(n + 1, 1);
	h->transient = calloc(n + 1, 1);
	h->max_reqs = n < 4096 ? n + 1 : 4096;
	h->reqs = malloc(sizeof(*h->reqs) * h->max_reqs);
	if (strata_pfq_init(&h->pfq, 2 * h->max_reqs + 64) == STRATA_OK)
		h->pf_done = malloc(sizeof(*h->pf_done) * h->pfq.cap);
	h->step_eids = malloc(sizeof(uint32_t) * (t->spec.n_experts + 1));
	if (!h->bytes || !h->resident || !h->pinned || !h->prefetched || !h->reqs || !h->pf_done || !h->step_eids || !h->transient) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "harness: out of memory");
		goto fail;
	}
	for (uint32_t e = 0; e < n; e++)
		h->bytes[e] = c->bytes_per_id ? c->bytes_per_id[e] : c->expert_bytes;
	h->env.spec = &t->spec;
	h->env.n_ids = n;
	h->env.tier_table = c->tier_table;
	h->env.expert_bytes = h->bytes;
	h->env.budget[STRATA_TIER_VRAM] = c->budget;
	h->env.budget[STRATA_TIER_RAM] = 0;
	h->env.budget[STRATA_TIER_NVME] = UINT64_MAX;
	h->env.seed = c->seed;
	h->env.future = c->hide_future ? NULL : &t->future;
	strata_prefetch_sched_defaults(&h->sched);
	h->sched.resident[STRATA_TIER_VRAM] = h->resident;
	h->env.sched = &h->sched;
	h->res.pinned = h->pinned;
	h->res.resident = h->resident;
	/* placement stays NULL when not given: the harness then asks none */
	const char *spec[STRATA_ROLE_COUNT] = { c->place, c->evict, c->prefetch };
	for (int r = STRATA_ROLE_EVICT; r < STRATA_ROLE_COUNT; r++)
		if (!spec[r])
			spec[r] = strata_policy_default(r);
	const void *ops[STRATA_ROLE_COUNT] = { c->place_ops, c->evict_ops, c->prefetch_ops };
	for (int r = 0; r < STRATA_ROLE_COUNT && !rc; r++) {
		int tier = r == STRATA_ROLE_EVICT ? STRATA_TIER_VRAM : -1;
		if (ops[r])
			rc = strata_policy_create_ops(r, ops[r], NULL, &h->env, tier, &h->pol[r], err);
		else if (spec[r])
			rc = strata_policy_create(r, spec[r], &h->env, tier, &h->pol[r], err);
	}
	if (rc)
		goto fail;
	struct strata_policy *pl = h->pol[STRATA_ROLE_PLACE];
	if (pl) {
		for (uint32_t e = 0; e < n; e++)
			if (strata_place_ops_of(pl)->initial_tier(pl, e) == STRATA_TIER_VRAM &&
			    h->used + h->bytes[e] <= h->budget) {
				insert(h, e, 0);
				h->c.preloaded++;
			}
	}
	rc = policy_failed(h, err);
	if (rc)
		goto fail;
	*out = h;
	return STRATA_OK;
fail:
	strata_harness_close(h);
	return rc;
}

/* The scheduler's view of the one-tier cache: every expert comes from NVMe. */
static int pf_source(void *o, uint32_t eid, int t)
{
	const struct strata_harness *h = o;
	return h->resident[eid] ? -1 : STRATA_TIER_NVME;
}

static int pf_start(void *o, uint32_t eid, int t, int src, struct strata_error *err)
{
	struct strata_harness *h = o;
	if (h->bytes[eid] > h->budget)
		return STRATA_EBUDGET;
	int rc = make_room(h, h->bytes[eid], err);
	if (rc)
		return rc;
	insert(h, eid, h->clock);
	h->prefetched[eid] = 1;
	struct strata_policy *pl = h->pol[STRATA_ROLE_PLACE];
	h->transient[eid] = pl && !(strata_place_ops_of(pl)->admit(pl, eid, src, h->clock) & (1u << STRATA_TIER_VRAM));
	h->c.prefetch_issued++;
	h->c.bytes_fetched += h->bytes[eid];
	return STRATA_OK;
}

static struct strata_pfq_owner pf_owner(struct strata_harness *h)
{
	return (struct strata_pfq_owner){ .o = h, .source = pf_source, .start = pf_start,
					  .redundant = &h->c.prefetch_redundant, .dropped = &h->c.prefetch_dropped,
					  .promoted = &h->c.prefetch_promoted, .cancelled = &h->c.prefetch_cancelled,
					  .preempted = &h->c.prefetch_preempted };
}

int strata_harness_step(struct strata_harness *h, const struct strata_harness_step *s,
			struct strata_error *err)
{
	const struct strata_model_spec *spec = h->env.spec;
	struct strata_policy *ev = h->pol[STRATA_ROLE_EVICT];
	struct strata_policy *pl = h->pol[STRATA_ROLE_PLACE];
	struct strata_policy *pf = h->pol[STRATA_ROLE_PREFETCH];
	const struct strata_evict_ops *eo = strata_evict_ops_of(ev);
	int rc = STRATA_OK;
	if (s->layer >= spec->n_moe_layers)
		return STRATA_ERR(err, STRATA_EINVAL, "harness: layer %u >= %u", s->layer, spec->n_moe_layers);
	for (uint32_t i = 0; i < s->n; i++) {
		if (s->experts[i] >= spec->n_experts)
			return STRATA_ERR(err, STRATA_EINVAL, "harness: expert %u >= %u", s->experts[i],
					  spec->n_experts);
		h->pinned[strata_eid(spec, s->layer, s->experts[i])] = 1;
	}

	struct strata_step step = { .token = s->token, .layer = s->layer, .n_tokens = 1,
				    .experts = s->experts, .n_experts = s->n, .now = h->clock };
	eo->on_step(ev, &step);
	if (pl)
		strata_place_ops_of(pl)->on_step(pl, &step);
	struct strata_layer_ctx ctx = { .token = s->token, .layer = s->layer, .now = h->clock,
					.hints = s->hints, .n_hints = s->hints ? s->n_hints : 0,
					.experts = s->experts, .n_experts = s->n };
	uint32_t nr = strata_prefetch_ops_of(pf)->on_layer(pf, &ctx, h->reqs, h->max_reqs);
	rc = policy_failed(h, err);
	if (rc)
		goto out;
	if (nr > h->max_reqs) {
		rc = STRATA_ERR(err, STRATA_EPOLICY, "prefetch %s: returned %u requests, room for %u",
				pf->name, nr, h->max_reqs);
		goto out;
	}
	struct strata_pfq_owner w = pf_owner(h);
	strata_pfq_begin(&h->pfq, &w, &h->sched, s->layer, h->lstep, h->reqs, nr, spec->n_experts);
	for (uint32_t i = 0; i < nr; i++) {
		uint32_t eid = h->reqs[i].eid;
		if (eid >= h->env.n_ids) {
			rc = STRATA_ERR(err, STRATA_EPOLICY, "prefetch %s: asked for expert %u of %u",
					pf->name, eid, h->env.n_ids);
			goto out;
		}
		int t = h->reqs[i].tier == STRATA_TIER_RAM ? STRATA_TIER_RAM : STRATA_TIER_VRAM;
		strata_pfq_add(&h->pfq, &w, eid, t, eid / spec->n_experts, h->lstep);
		if ((rc = strata_pfq_dispatch(&h->pfq, &h->sched, h->bytes, &w, err)))
			goto out;
	}
	for (uint32_t i = 0; i < s->n; i++)
		h->step_eids[i] = strata_eid(spec, s->layer, s->experts[i]);
	strata_pfq_resolve_pending(&h->pfq, &w, s->layer, h->lstep, h->step_eids, s->n);

	for (uint32_t i = 0; i < s->n; i++) {
		uint32_t eid = strata_eid(spec, s->layer, s->experts[i]);
		uint64_t now = h->clock++;
		h->c.accesses++;
		if (h->resident[eid]) {
			h->c.hits++;
			if (h->prefetched[eid]) {
				h->prefetched[eid] = 0;
				h->c.prefetch_used++;
			}
			eo->on_access(ev, eid, now);
			if (pl)
				strata_place_ops_of(pl)->on_access(pl, eid, STRATA_TIER_VRAM, now);
			continue;
		}
		h->c.misses++;
		h->c.bytes_fetched += h->bytes[eid];
		uint32_t mask = (1u << STRATA_TIER_VRAM) | (1u << STRATA_TIER_RAM);
		if (pl) {
			mask = strata_place_ops_of(pl)->admit(pl, eid, STRATA_TIER_NVME, now);
			strata_place_ops_of(pl)->on_access(pl, eid, STRATA_TIER_NVME, now);
		}
		if (!(mask & (1u << STRATA_TIER_VRAM))) {
			h->c.bypasses++;
			continue;
		}
		rc = make_room(h, h->bytes[eid], err);
		if (rc == STRATA_EBUDGET) {
			rc = STRATA_ERR(err, STRATA_EBUDGET,
					"harness: budget %llu bytes cannot hold expert %u (%llu bytes) with"
					" layer %u's experts pinned (evict %s)",
					(unsigned long long)h->budget, eid,
					(unsigned long long)h->bytes[eid], s->layer, ev->name);
			goto out;
		}
		if (rc)
			goto out;
		insert(h, eid, now);
		eo->on_access(ev, eid, now);
		h->c.inserts++;
	}
	/* the layer ran: its started prefetches settle as in the engine */
	uint32_t got;
	for (uint32_t i = 0; i < s->n; i++)
		h->pinned[strata_eid(spec, s->layer, s->experts[i])] = 0;
	while ((got = strata_pfq_take_started(&h->pfq, s->layer, h->lstep, h->pf_done, h->pfq.cap))) {
		for (uint32_t i = 0; i < got; i++) {
			uint32_t eid = h->pf_done[i].eid;
			if (!h->resident[eid])
				continue;
			int unused = h->prefetched[eid], transient = h->transient[eid];
			h->prefetched[eid] = h->transient[eid] = 0;
			h->c.prefetch_wasted += unused;
			if ((unused && !h->sched.keep_unused) || transient) {
				eo->on_remove(ev, eid);
				h->resident[eid] = 0;
				h->res.n_resident--;
				h->used -= h->bytes[eid];
				h->c.prefetch_unused_dropped++;
			}
		}
	}
	if (h->pfq.n_pend && (rc = strata_pfq_dispatch(&h->pfq, &h->sched, h->bytes, &w, err)))
		goto out;
	h->lstep++;
	strata_prefetch_ops_of(pf)->on_route(pf, s->token, s->layer, s->experts, s->n);
	rc = policy_failed(h, err);
out:
	for (uint32_t i = 0; i < s->n; i++)
		if (s->experts[i] < spec->n_experts)
			h->pinned[strata_eid(spec, s->layer, s->experts[i])] = 0;
	return rc;
}

int strata_harness_replay(struct strata_harness *h, struct strata_error *err)
{
	for (uint32_t i = 0; i < h->trace->n_steps; i++) {
		int rc = strata_harness_step(h, &h->trace->steps[i], err);
		if (rc)
			return rc;
	}
	return STRATA_OK;
}

const struct strata_harness_counters *strata_harness_counters(const struct strata_harness *h)
{
	return &h->c;
}

struct strata_policy *strata_harness_policy(const struct strata_harness *h, int role)
{
	return role >= 0 && role < STRATA_ROLE_COUNT ? h->pol[role] : NULL;
}

int strata_harness_resident(const struct strata_harness *h, uint32_t eid)
{
	return eid < h->env.n_ids && h->resident[eid];
}

void strata_harness_close(struct strata_harness *h)
{
	if (!h)
		return;
	for (int r = 0; r < STRATA_ROLE_COUNT; r++)
		strata_policy_destroy(h->pol[r]);
	free(h->bytes);
	free(h->resident);
	free(h->pinned);
	free(h->prefetched);
	free(h->transient);
	strata_pfq_free(&h->pfq);
	free(h->pf_done);
	free(h->step_eids);
	free(h->reqs);
	free(h);
}

int strata_harness_run(const struct strata_harness_trace *t, const struct strata_harness_config *c,
		       struct strata_harness_counters *out, struct strata_error *err)
{
	struct strata_harness *h;
	int rc = strata_harness_open(t, c, &h, err);
	if (rc)
		return rc;
	rc = strata_harness_replay(h, err);
	if (!rc && out)
		*out = h->c;
	strata_harness_close(h);
	return rc;
}
