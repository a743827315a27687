/*
 * Oracle prefetch: reads the experts actually routed for the next `depth`
 * layers from the run's future (wrapping into the next token's first layers)
 * and prefetches them, each replaced by a wrong expert with probability
 * 1 - accuracy (seeded).  accuracy=1 is the perfect predictor, the bound a
 * real predictor is judged against; sweeping it shows how much prediction
 * quality is worth.
 *
 * With stage=D (> depth) the true experts of layers depth+1 .. D ahead that
 * are in neither VRAM nor RAM are also asked for into RAM: disk reads issued
 * early, copied on to VRAM when their layer comes within depth (or on
 * demand).  Only where RAM has the room: free bytes, or residents not used
 * again before the last staged layer (the ones `evict=farthest` gives up
 * first), so staging never displaces an expert used sooner or another staged
 * one; nearest layers first, staging stops at the first expert without room.
 * Off by default.
 */
#include <stdlib.h>
#include <string.h>

#include "strata/policy.h"
#include "strata/types.h"
#include "strata/util.h"

struct oracle {
	int64_t depth, seed, wrap, stage;
	double accuracy;
	char tier[STRATA_OPT_STR_MAX];
	uint32_t dest;
	uint64_t state;
	uint32_t *buf;
	uint8_t *mark;       /* per layer-local expert: in the true set */
	uint64_t *room;      /* stage: RAM residents as (next use, eid), farthest first */
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
	{ .name = "stage", .type = STRATA_OPT_INT, .offset = offsetof(struct oracle, stage), .def = "0", .min = 0,
	  .max = 1 << 20, .help = "also read layers depth+1..stage ahead from NVMe into RAM (0: off)" },
	{ .name = "wrap", .type = STRATA_OPT_BOOL, .offset = offsetof(struct oracle, wrap), .def = "1",
	  .help = "look past the token's last layer into the next token (0: the horizon of recorded hints)" },
	{ .name = NULL },
};

static int oracle_init(struct strata_policy *p, struct strata_error *err)
{
	struct oracle *o = p->priv;
	uint32_t e = p->env->spec->n_experts;
	o->dest = strcmp(o->tier, "ram") ? STRATA_TIER_VRAM : STRATA_TIER_RAM;
	if (o->stage && o->stage <= o->depth)
		return STRATA_ERR(err, STRATA_EINVAL, "prefetch oracle: stage=%lld must exceed depth=%lld",
				  (long long)o->stage, (long long)o->depth);
	o->state = p->env->seed ^ ((uint64_t)o->seed * 0x2545f4914f6cdd1dull) ^ 0x6f7261636c65ull;
	o->buf = malloc(sizeof(uint32_t) * (e ? e : 1));
	o->mark = calloc(e ? e : 1, 1);
	if (o->stage && !(o->room = malloc(sizeof(uint64_t) * 2 * (p->env->n_ids + 1))))
		return STRATA_ERR(err, STRATA_ENOMEM, "prefetch oracle: out of memory");
	if (!o->buf || !o->mark)
		return STRATA_ERR(err, STRATA_ENOMEM, "prefetch oracle: out of memory");
	return STRATA_OK;
}

static void oracle_free(struct strata_policy *p)
{
	struct oracle *o = p->priv;
	free(o->buf);
	free(o->mark);
	free(o->room);
}

static int cmp_later(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	return x[0] > y[0] ? -1 : x[0] < y[0];
}

/* The next use at or after now. */
static uint64_t use_from(const struct strata_future *f, uint32_t eid, uint64_t now)
{
	return f->next_use(f, eid, now ? now - 1 : 0);
}

/* RAM's residents by next use, farthest first; returns their count and the
 * free bytes in *free_b (0 without a RAM tier). */
static uint32_t ram_room(struct strata_policy *p, uint64_t now, uint64_t *free_b)
{
	struct oracle *o = p->priv;
	const struct strata_policy_env *env = p->env;
	const uint8_t *ram = env->sched ? env->sched->resident[STRATA_TIER_RAM] : NULL;
	uint64_t used = 0;
	uint32_t n = 0;
	*free_b = 0;
	if (!ram || !env->budget[STRATA_TIER_RAM])
		return 0;
	for (uint32_t i = 0; i < env->n_ids; i++)
		if (ram[i]) {
			used += env->expert_bytes[i];
			o->room[2 * n] = use_from(env->future, i, now);
			o->room[2 * n++ + 1] = i;
		}
	qsort(o->room, n, 2 * sizeof(uint64_t), cmp_later);
	*free_b = used < env->budget[STRATA_TIER_RAM] ? env->budget[STRATA_TIER_RAM] - used : 0;
	return n;
}

static uint32_t oracle_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
				struct strata_prefetch_req *out, uint32_t max)
{
	struct oracle *o = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	const struct strata_future *f = p->env->future;
	uint32_t got = 0, E = s->n_experts, n_room = 0, vi = 0;
	uint64_t free_b = 0, horizon = 0;
	bool staging = false, stop = false;
	for (int64_t d = 1; d <= (o->stage > o->depth ? o->stage : o->depth) && got < max && !stop; d++) {
		bool staged = d > o->depth;
		if (staged && !staging) {
			n_room = ram_room(p, ctx->now, &free_b);
			staging = true;
			if (!n_room && !free_b)
				break;
			/* the clock past the last staged layer: only residents used
			 * after it give room, so a staged expert never displaces another */
			horizon = ctx->now + f->routed(f, ctx->token, ctx->layer, o->buf, E);
			for (int64_t k = 1; k <= o->stage; k++) {
				uint64_t a = ctx->layer + (uint64_t)k;
				horizon += f->routed(f, ctx->token + a / s->n_moe_layers, (uint32_t)(a % s->n_moe_layers),
						     o->buf, E);
			}
		}
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
			uint32_t eid = strata_eid(s, layer, e);
			if (staged) {
				const uint8_t *const *res = p->env->sched->resident; /* ram_room checked sched */
				if ((res[STRATA_TIER_VRAM] && res[STRATA_TIER_VRAM][eid]) || res[STRATA_TIER_RAM][eid])
					continue; /* only disk reads are staged */
				/* free bytes first, then residents used past the horizon */
				uint64_t need = p->env->expert_bytes[eid];
				while (free_b < need && vi < n_room && o->room[2 * vi] >= horizon)
					free_b += p->env->expert_bytes[o->room[2 * vi++ + 1]];
				if (free_b < need) {
					stop = true; /* a sooner use would leave: stage no further */
					break;
				}
				free_b -= need;
			}
			out[got].eid = eid;
			out[got].tier = staged ? STRATA_TIER_RAM : o->dest;
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
