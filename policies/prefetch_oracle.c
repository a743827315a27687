/*
 * Oracle prefetch: reads the experts actually routed for the next `depth`
 * layers from the run's future (wrapping into the next token's first layers)
 * and prefetches them, each replaced by a wrong expert with probability
 * 1 - accuracy (seeded).  accuracy=1 is the perfect predictor, the bound a
 * real predictor is judged against; sweeping it shows how much prediction
 * quality is worth.
 */
#include <stdlib.h>
#include <string.h>

#include "strata/policy.h"
#include "strata/types.h"
#include "strata/util.h"

struct oracle {
	int64_t depth, seed, wrap;
	double accuracy;
	char tier[STRATA_OPT_STR_MAX];
	uint32_t dest;
	uint64_t state;
	uint32_t *buf;
	uint8_t *mark;       /* per layer-local expert: in the true set */
};

static const struct strata_option oracle_options[] = {
	{ .name = "depth", .type = STRATA_OPT_INT, .offset = offsetof(struct oracle, depth),
	  .def = "1", .min = 1, .max = 1024, .help = "layers ahead to prefetch" },
	{ .name = "accuracy", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct oracle, accuracy),
	  .def = "1", .min = 0, .max = 1, .help = "chance each predicted expert is the right one" },
	{ .name = "tier", .type = STRATA_OPT_STR, .offset = offsetof(struct oracle, tier),
	  .def = "vram", .choices = "vram|ram", .help = "destination tier" },
	{ .name = "seed", .type = STRATA_OPT_INT, .offset = offsetof(struct oracle, seed), .def = "0",
	  .help = "mixed with the run's seed for the wrong guesses" },
	{ .name = "wrap", .type = STRATA_OPT_BOOL, .offset = offsetof(struct oracle, wrap), .def = "1",
	  .help = "look past the token's last layer into the next token (0: the horizon of recorded hints)" },
	{ .name = NULL },
};

static int oracle_init(struct strata_policy *p, struct strata_error *err)
{
	struct oracle *o = p->priv;
	uint32_t e = p->env->spec->n_experts;
	o->dest = strcmp(o->tier, "ram") ? STRATA_TIER_VRAM : STRATA_TIER_RAM;
	o->state = p->env->seed ^ ((uint64_t)o->seed * 0x2545f4914f6cdd1dull) ^ 0x6f7261636c65ull;
	o->buf = malloc(sizeof(uint32_t) * (e ? e : 1));
	o->mark = calloc(e ? e : 1, 1);
	if (!o->buf || !o->mark)
		return STRATA_ERR(err, STRATA_ENOMEM, "prefetch oracle: out of memory");
	return STRATA_OK;
}

static void oracle_free(struct strata_policy *p)
{
	struct oracle *o = p->priv;
	free(o->buf);
	free(o->mark);
}

static uint32_t oracle_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
				struct strata_prefetch_req *out, uint32_t max)
{
	struct oracle *o = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	const struct strata_future *f = p->env->future;
	uint32_t got = 0, E = s->n_experts;
	for (int64_t d = 1; d <= o->depth && got < max; d++) {
		uint64_t at = ctx->layer + (uint64_t)d;
		uint64_t tok = ctx->token + at / s->n_moe_layers;
		uint32_t layer = (uint32_t)(at % s->n_moe_layers);
		if (tok >= f->n_tokens || (!o->wrap && tok != ctx->token))
			break;
		uint32_t n = f->routed(f, tok, layer, o->buf, E);
		if (n > E)
			n = E;
		for (uint32_t i = 0; i < n; i++)
			if (o->buf[i] < E)
				o->mark[o->buf[i]] = 1;
		for (uint32_t i = 0; i < n && got < max; i++) {
			uint32_t e = o->buf[i];
			if (e >= E)
				continue;
			/* draw for every expert, so accuracy=1 and <1 stay in step */
			double u = (double)(strata_splitmix64(&o->state) >> 11) * 0x1.0p-53;
			if (u >= o->accuracy && n < E) {
				/* a uniformly chosen expert outside the true set */
				uint32_t k = (uint32_t)(strata_splitmix64(&o->state) % (E - n));
				for (uint32_t c = 0; c < E; c++)
					if (!o->mark[c] && k-- == 0) {
						e = c;
						break;
					}
			}
			out[got].eid = strata_eid(s, layer, e);
			out[got].tier = o->dest;
			got++;
		}
		for (uint32_t i = 0; i < n; i++)
			if (o->buf[i] < E)
				o->mark[o->buf[i]] = 0;
	}
	return got;
}

const struct strata_prefetch_ops strata_prefetch_oracle = {
	.name = "oracle", .version = STRATA_POLICY_ABI, .flags = STRATA_POLICY_F_NEEDS_FUTURE | STRATA_POLICY_F_NO_HINTS,
	.help = "prefetch the true future routing of the next depth layers, right with p=accuracy",
	.priv_size = sizeof(struct oracle), .options = oracle_options,
	.init = oracle_init, .free = oracle_free, .on_layer = oracle_on_layer,
};
