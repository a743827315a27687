/*
 * ProMoE-style stride prefetch with early preemption (Song et al., "ProMoE:
 * Fast MoE-based LLM Serving using Proactive Caching", arXiv 2410.22134):
 * before layer L runs, a predictor fed with layer L's input guesses the
 * experts of layer L + stride, and those are fetched while layers
 * L .. L+stride-1 compute (a sliding window: every layer asks for the layer
 * `stride` ahead, so each target is asked for once, `stride` layers early).
 * The predictions are the hints the driver passes (a trace's recorded
 * router predictions: the model's own later gates on the current residual,
 * which is what ProMoE's learned predictors approximate).
 *
 * refine=1 also asks, at each layer, for the layers between with this
 * layer's nearer (better) predictions.  Early preemption is the engine's
 * scheduling (policy.h, 5; this policy sets sched->preempt): a newer
 * prediction for a target withdraws the older pending requests for it that
 * it no longer names, and queued prefetches start nearest target first, so
 * a far guess never holds the link against the next layer's; a demand goes
 * ahead of every prefetch on the links and takes over a pending request for
 * its expert.  `inflight` bounds the prefetch bytes in flight per link (in
 * experts of the largest size): ProMoE issues its transfers one after the
 * other in the order of need, so the queue is where preemption acts (with
 * no bound nothing waits and there is nothing to preempt).
 */
#include <string.h>

#include "strata/policy.h"
#include "strata/types.h"

#include "hints.h"

struct promoe {
	int64_t stride, topn, refine, preempt, inflight, keep_unused;
	double min_score;
	char tier[STRATA_OPT_STR_MAX];
	uint32_t dest;
	struct strata_hint *buf;
	uint32_t cap;
};

static const struct strata_option promoe_options[] = {
	{ .name = "stride", .type = STRATA_OPT_INT, .offset = offsetof(struct promoe, stride),
	  .def = "2", .min = 1, .max = 1024, .help = "layers ahead each layer's prediction is for" },
	{ .name = "topn", .type = STRATA_OPT_INT, .offset = offsetof(struct promoe, topn),
	  .def = "0", .min = 0, .max = 65536, .help = "experts asked for per target layer, best first (0: top_k)" },
	{ .name = "min_score", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct promoe, min_score),
	  .def = "0", .min = 0, .max = 1, .help = "ignore predictions scored below this" },
	{ .name = "refine", .type = STRATA_OPT_BOOL, .offset = offsetof(struct promoe, refine),
	  .def = "1", .help = "also ask for the layers before L+stride with L's nearer predictions" },
	{ .name = "preempt", .type = STRATA_OPT_BOOL, .offset = offsetof(struct promoe, preempt),
	  .def = "1", .help = "early preemption: newer predictions withdraw older ones, nearest target first" },
	{ .name = "inflight", .type = STRATA_OPT_INT, .offset = offsetof(struct promoe, inflight),
	  .def = "0", .min = -1, .max = 1 << 20,
	  .help = "prefetched experts in flight per link (0: top_k, -1: no limit)" },
	{ .name = "tier", .type = STRATA_OPT_STR, .offset = offsetof(struct promoe, tier),
	  .def = "vram", .choices = "vram|ram", .help = "destination tier" },
	{ .name = "keep_unused", .type = STRATA_OPT_BOOL, .offset = offsetof(struct promoe, keep_unused),
	  .def = "0", .help = "keep a prefetched expert its layer did not use (0: drop it then)" },
	{ .name = NULL },
};

/* Bytes of n of the run's largest experts (every one then fits alone). */
static uint64_t experts_bytes(const struct strata_policy_env *env, int64_t n)
{
	uint64_t big = 0;
	for (uint32_t i = 0; i < env->n_ids; i++)
		if (env->expert_bytes && env->expert_bytes[i] > big)
			big = env->expert_bytes[i];
	return big && (uint64_t)n > UINT64_MAX / big ? UINT64_MAX : big * (uint64_t)n;
}

static int promoe_init(struct strata_policy *p, struct strata_error *err)
{
	(void)err;
	struct promoe *m = p->priv;
	struct strata_prefetch_sched *s = p->env->sched;
	uint32_t k = p->env->spec && p->env->spec->top_k ? p->env->spec->top_k : 1;
	m->dest = strcmp(m->tier, "ram") ? STRATA_TIER_VRAM : STRATA_TIER_RAM;
	if (!m->topn)
		m->topn = k;
	if (s) {
		uint64_t b = m->inflight < 0 ? UINT64_MAX : experts_bytes(p->env, m->inflight ? m->inflight : k);
		s->budget[STRATA_LINK_PCIE] = s->budget[STRATA_LINK_NVME] = b;
		s->keep_unused = m->keep_unused;
		s->preempt = m->preempt;
	}
	return STRATA_OK;
}

static void promoe_free(struct strata_policy *p)
{
	struct promoe *m = p->priv;
	free(m->buf);
}

static uint32_t promoe_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
				struct strata_prefetch_req *out, uint32_t max)
{
	struct promoe *m = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	uint32_t lo = m->refine ? 1 : (uint32_t)m->stride;
	uint32_t n = hints_select(ctx, s, lo, (uint32_t)m->stride, (uint64_t)m->topn, m->min_score, &m->buf, &m->cap);
	uint32_t got = 0;
	for (uint32_t i = 0; i < n && got < max; i++) { /* nearest target first */
		out[got].eid = strata_eid(s, m->buf[i].layer, m->buf[i].expert);
		out[got].tier = m->dest;
		got++;
	}
	return got;
}

const struct strata_prefetch_ops strata_prefetch_promoe = {
	.name = "promoe", .version = STRATA_POLICY_ABI, .flags = 0,
	.help = "ProMoE: each layer prefetches its prediction stride layers ahead; early preemption",
	.priv_size = sizeof(struct promoe), .options = promoe_options,
	.init = promoe_init, .free = promoe_free, .on_layer = promoe_on_layer,
};
