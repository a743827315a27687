/*
 * ExpertFlow-style adaptive horizon (Shen et al., "ExpertFlow: Adaptive
 * Expert Scheduling and Memory Coordination for Efficient MoE Inference",
 * arXiv 2510.26730): instead of a fixed lookahead step, the number of layers
 * ahead whose predicted experts are fetched (the step size S) is chosen at
 * run time from the transfer cost and from how often the predictions come
 * true.  A short horizon leaves transfers on the critical path; a long one
 * fetches on worse guesses and holds memory longer.
 *
 * Our reading, before layer L runs:
 *   need   = the time to move one layer's predicted experts that are not in
 *            `tier` (bytes / link speed + latency; RAM -> VRAM over PCIe,
 *            otherwise an NVMe read), averaged over layers (EWMA), divided by
 *            one layer's compute time: S_need = ceil(need), at least 1, at
 *            most max_depth (the horizon that hides the transfers) and at
 *            most what mem_share of the tier's budget holds (S x topn
 *            experts of the mean size; the memory coordination: a deeper
 *            horizon would evict what the next layers need);
 *   accuracy(d) = the share of the predictions made d layers ahead that
 *            came true (decayed, half-life `window` predictions; it starts
 *            at 1 and moves to the observed share over `warmup` predictions);
 *   S      = S_need, shortened to the distances d <= S whose accuracy(d)
 *            is at least min_accuracy (0: no prefetch at all while even the
 *            next layer's guesses are poor);
 * and the topn best hints for layers L+1 .. L+S are asked for.  Link speeds
 * and the compute time come from the run's cost model (env->cost: `strata
 * calibrate` measures it, sim and replay time with it; the engine's defaults
 * where the driver has none), or from the options.  The predictions are the
 * hints the driver passes (a trace's recorded router predictions).
 */
#include <math.h>
#include <string.h>

#include "strata/engine.h"
#include "strata/policy.h"
#include "strata/types.h"

#include "hints.h"

struct expertflow {
	int64_t max_depth, topn, warmup, keep_unused, preempt;
	double min_accuracy, window, pcie_gbps, nvme_gbps, layer_us, mem_share;
	char tier[STRATA_OPT_STR_MAX];
	uint32_t dest, mem_cap; /* mem_cap: the horizon the tier's memory allows */
	double pcie_lat_us, nvme_lat_us, move_us; /* move_us: EWMA of one layer's transfer */
	struct strata_hint *buf;
	uint32_t cap;
	struct hints_score score;
};

static const struct strata_option expertflow_options[] = {
	{ .name = "max_depth", .type = STRATA_OPT_INT, .offset = offsetof(struct expertflow, max_depth),
	  .def = "4", .min = 1, .max = HINTS_MAX_D, .help = "longest horizon, in layers" },
	{ .name = "topn", .type = STRATA_OPT_INT, .offset = offsetof(struct expertflow, topn),
	  .def = "0", .min = 0, .max = 65536, .help = "experts asked for per layer, best first (0: top_k)" },
	{ .name = "min_accuracy", .type = STRATA_OPT_DOUBLE,
	  .offset = offsetof(struct expertflow, min_accuracy), .def = "0.6", .min = 0, .max = 1,
	  .help = "share of right guesses each distance within the horizon needs" },
	{ .name = "warmup", .type = STRATA_OPT_INT, .offset = offsetof(struct expertflow, warmup),
	  .def = "16", .min = 0, .max = 1 << 30, .help = "predictions a distance's accuracy is shrunk towards 1 over" },
	{ .name = "window", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct expertflow, window),
	  .def = "500", .min = 1, .max = 1e12, .help = "half-life of the accuracy, in predictions" },
	{ .name = "pcie_gbps", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct expertflow, pcie_gbps),
	  .def = "0", .min = 0, .max = 1e6, .help = "RAM -> VRAM GB/s (0: the run's cost model)" },
	{ .name = "nvme_gbps", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct expertflow, nvme_gbps),
	  .def = "0", .min = 0, .max = 1e6, .help = "NVMe read GB/s (0: the run's cost model)" },
	{ .name = "layer_us", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct expertflow, layer_us),
	  .def = "0", .min = 0, .max = 1e9,
	  .help = "one layer's compute in us (0: the cost model's kernel time for top_k experts)" },
	{ .name = "mem_share", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct expertflow, mem_share),
	  .def = "0.5", .min = 0, .max = 1,
	  .help = "share of the tier's budget the horizon's experts may take (0: no limit)" },
	{ .name = "tier", .type = STRATA_OPT_STR, .offset = offsetof(struct expertflow, tier),
	  .def = "vram", .choices = "vram|ram", .help = "destination tier" },
	{ .name = "keep_unused", .type = STRATA_OPT_BOOL, .offset = offsetof(struct expertflow, keep_unused),
	  .def = "0", .help = "keep a prefetched expert its layer did not use (0: drop it then)" },
	{ .name = "preempt", .type = STRATA_OPT_BOOL, .offset = offsetof(struct expertflow, preempt),
	  .def = "0", .help = "the engine's early preemption (see promoe)" },
	{ .name = NULL },
};

static int expertflow_init(struct strata_policy *p, struct strata_error *err)
{
	struct expertflow *f = p->priv;
	const struct strata_policy_env *env = p->env;
	uint32_t k = env->spec && env->spec->top_k ? env->spec->top_k : 1;
	struct strata_cost_model cm;
	double mb, layer_us = hints_layer_us(env, &cm, &mb);
	f->dest = strcmp(f->tier, "ram") ? STRATA_TIER_VRAM : STRATA_TIER_RAM;
	if (!f->topn)
		f->topn = k;
	if (f->pcie_gbps <= 0)
		f->pcie_gbps = cm.pcie_gbps;
	if (f->nvme_gbps <= 0)
		f->nvme_gbps = cm.nvme_gbps;
	f->pcie_lat_us = cm.pcie_lat_us;
	f->nvme_lat_us = cm.nvme_lat_us;
	if (f->layer_us <= 0)
		f->layer_us = layer_us;
	/* the horizon's experts (topn per layer) within mem_share of the tier */
	double room = f->mem_share > 0 && mb > 0 && env->budget[f->dest] != UINT64_MAX
		    ? f->mem_share * (double)env->budget[f->dest] / 1e6 / (mb * (double)f->topn) : 1e9;
	f->mem_cap = room < 1 ? 1 : room > (double)f->max_depth ? (uint32_t)f->max_depth : (uint32_t)room;
	if (!(f->pcie_gbps > 0 && f->nvme_gbps > 0 && f->layer_us > 0))
		return STRATA_ERR(err, STRATA_EINVAL,
				  "prefetch expertflow: link speeds and layer time must be > 0 (pcie %g GB/s,"
				  " nvme %g GB/s, layer %g us)", f->pcie_gbps, f->nvme_gbps, f->layer_us);
	f->move_us = -1; /* no transfer seen yet */
	if (env->sched) {
		env->sched->keep_unused = f->keep_unused;
		env->sched->preempt = f->preempt;
	}
	return STRATA_OK;
}

static void expertflow_free(struct strata_policy *p)
{
	struct expertflow *f = p->priv;
	free(f->buf);
	hints_score_free(&f->score);
}

/* The share of predictions d layers ahead that came true, shrunk towards 1
 * over the first `warmup` of them. */
static double accuracy(const struct expertflow *f, uint32_t d)
{
	uint32_t k = d < HINTS_MAX_D ? d : HINTS_MAX_D;
	double seen = 0, right = 0;
	for (uint32_t b = 0; b < HINTS_BANDS; b++) {
		seen += f->score.seen[k][b];
		right += f->score.right[k][b];
	}
	return (right + (double)f->warmup) / (seen + (double)f->warmup + 1e-300);
}

/* Microseconds to move eid into the destination tier, 0 if it is there. */
static double move_us(const struct expertflow *f, const struct strata_policy_env *env, uint32_t eid)
{
	const struct strata_prefetch_sched *s = env->sched;
	const uint8_t *in_v = s ? s->resident[STRATA_TIER_VRAM] : NULL;
	const uint8_t *in_r = s ? s->resident[STRATA_TIER_RAM] : NULL;
	if ((in_v && in_v[eid]) || (f->dest == STRATA_TIER_RAM && in_r && in_r[eid]))
		return 0;
	double bytes = env->expert_bytes ? (double)env->expert_bytes[eid] : 0;
	if (f->dest == STRATA_TIER_VRAM && in_r && in_r[eid])
		return f->pcie_lat_us + bytes / (f->pcie_gbps * 1e3);
	double gbps = f->dest == STRATA_TIER_VRAM && f->pcie_gbps < f->nvme_gbps ? f->pcie_gbps : f->nvme_gbps;
	return f->nvme_lat_us + bytes / (gbps * 1e3);
}

static uint32_t expertflow_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
				    struct strata_prefetch_req *out, uint32_t max)
{
	struct expertflow *f = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	uint32_t n = hints_select(ctx, s, 1, (uint32_t)f->max_depth, (uint64_t)f->topn, 0, &f->buf, &f->cap);
	if (!n)
		return 0;
	/* the transfer of the nearest predicted layer, averaged over layers */
	double t = 0;
	for (uint32_t i = 0; i < n && f->buf[i].layer == f->buf[0].layer; i++)
		t += move_us(f, p->env, strata_eid(s, f->buf[i].layer, f->buf[i].expert));
	f->move_us = f->move_us < 0 ? t : 0.75 * f->move_us + 0.25 * t;
	double need = ceil(f->move_us / f->layer_us);
	uint32_t cap = need < 1 ? 1 : need > (double)f->mem_cap ? f->mem_cap : (uint32_t)need, h = 0;
	while (h < cap && accuracy(f, h + 1) >= f->min_accuracy)
		h++;
	uint32_t got = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t d = f->buf[i].layer - ctx->layer;
		hints_score_add(&f->score, f->buf[i].layer, f->buf[i].expert, d, hints_band(f->buf[i].score));
		if (d > h || got >= max)
			continue;
		out[got].eid = strata_eid(s, f->buf[i].layer, f->buf[i].expert);
		out[got].tier = f->dest;
		got++;
	}
	return got;
}

static void expertflow_on_route(struct strata_policy *p, uint64_t token, uint32_t layer, const uint32_t *experts,
				uint32_t n)
{
	(void)token;
	struct expertflow *f = p->priv;
	hints_score_route(&f->score, layer, experts, n, exp2(-1.0 / f->window));
}

const struct strata_prefetch_ops strata_prefetch_expertflow = {
	.name = "expertflow", .version = STRATA_POLICY_ABI,
	.help = "ExpertFlow: prefetch horizon from the transfer time and the observed accuracy per distance",
	.priv_size = sizeof(struct expertflow), .options = expertflow_options,
	.init = expertflow_init, .free = expertflow_free, .on_layer = expertflow_on_layer,
	.on_route = expertflow_on_route,
};
