/*
 * Lookahead prefetch from recorded predictions: before layer L runs, take the
 * hints the driver passes for layers L+1 .. L+depth (a trace's recorded
 * router predictions, or an online predictor's), keep the topn best scored
 * per layer at or above min_score, and ask for them to move into `tier`;
 * with stage=D (-1, the default: depth+1, where there is a RAM tier), the
 * hints for layers L+depth+1 .. L+D are staged from NVMe into RAM only (an
 * early read that a later RAM -> VRAM copy uses).  An NVMe read asked for VRAM
 * lands in RAM instead (via_ram): the engine starts a prefetch only while
 * its links carry no demand move, a read into RAM needs the disk alone, and
 * VRAM keeps what placement put there; the copy into VRAM follows as the next
 * layer's prefetch or on demand.  via_ram=auto (the default) does so only
 * where the RAM tier has a free hole for it (sched.ram_hole, less what the
 * step's earlier requests land there) and has the engine never evict for it
 * (sched.ram_holes_only): a read that displaced an expert placement keeps in
 * RAM would turn that expert's later RAM copies into NVMe reads (with RAM
 * full, auto decides as via_ram=0).  Staging under auto also takes free
 * holes only, so where RAM is full it asks for nothing.  via_ram=1 lands
 * every such read in RAM, evicting for it; via_ram=0 none.  A staged read
 * is priced like any NVMe read (nvme_cost below) and queued behind the
 * step's reads within depth, which it does not make dearer
 * (experiments/lookahead/README.md).
 *
 * The engine schedules the requests (policy.h): this policy sets which source
 * tiers it may read (`from`), the bytes it may have in flight per link
 * (`budget_pcie`, `budget_nvme`) and whether an unused prefetch is dropped
 * when its layer has run (`keep_unused`).
 *
 * adaptive=1 (the default) tunes depth and threshold online from the accuracy
 * it observes (on_route tells which predicted experts were routed): per
 * distance d and per score band it keeps the share of predictions that came
 * true (decayed, half-life `window` predictions), and asks only for hints
 * whose band at their distance is right at least `min_accuracy` of the time
 * when the expert is in RAM (a copy over PCIe) and `min_accuracy_nvme` when
 * it must be read from NVMe (a wrong read costs the slow link a whole
 * expert); the accuracy is the observed share less two standard errors, so
 * a band does not pass by luck.  Until a band has seen `warmup` predictions
 * nothing of it is asked for, so lookahead never moves an expert on a guess
 * it has not seen come true.  And with nvme_cost=1 (the default) an NVMe read
 * also needs the accuracy at which it breaks even (break_even below: the
 * read's disk time against what a right read hides, from the run's cost
 * model): with Mixtral's 45 MB experts on a busy disk it is 88-93%, with the
 * synthetic study's 1 MB ones below min_accuracy_nvme.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strata/arena.h"
#include "strata/policy.h"
#include "strata/types.h"
#include "strata/util.h"

#include "hints.h"

struct lookahead {
	int64_t depth, topn, stage, adaptive, keep_unused, warmup, nvme_cost;
	double min_score, min_accuracy, min_accuracy_nvme, window;
	double nvme_gbps, pcie_gbps, hidden_us; /* nvme_cost: the run's cost model */
	double vram_hits, vram_seen; /* nvme_cost: routed experts found in VRAM (decayed) */
	char tier[STRATA_OPT_STR_MAX], from[STRATA_OPT_STR_MAX], via_ram[STRATA_OPT_STR_MAX];
	char budget_pcie[STRATA_OPT_STR_MAX], budget_nvme[STRATA_OPT_STR_MAX];
	uint32_t dest;
	struct strata_hint *buf;
	uint32_t cap;
	struct hints_score score; /* adaptation */
};

static const struct strata_option lookahead_options[] = {
	{ .name = "depth", .type = STRATA_OPT_INT, .offset = offsetof(struct lookahead, depth),
	  .def = "2", .min = 1, .max = 1024, .help = "layers ahead to prefetch into tier (adaptive: at most)" },
	{ .name = "topn", .type = STRATA_OPT_INT, .offset = offsetof(struct lookahead, topn),
	  .def = "0", .min = 0, .max = 65536, .help = "hints kept per layer, best score first (0: top_k)" },
	{ .name = "min_score", .type = STRATA_OPT_DOUBLE,
	  .offset = offsetof(struct lookahead, min_score), .def = "0", .min = 0, .max = 1,
	  .help = "ignore hints scored below this" },
	{ .name = "tier", .type = STRATA_OPT_STR, .offset = offsetof(struct lookahead, tier),
	  .def = "vram", .choices = "vram|ram", .help = "destination tier" },
	{ .name = "from", .type = STRATA_OPT_STR, .offset = offsetof(struct lookahead, from),
	  .def = "all", .choices = "all|ram|nvme", .help = "source tiers a prefetch into tier may read" },
	{ .name = "stage", .type = STRATA_OPT_INT, .offset = offsetof(struct lookahead, stage),
	  .def = "-1", .min = -1, .max = 1024,
	  .help = "stage hints for layers depth+1..stage from NVMe into RAM, into free holes under via_ram=auto "
		  "(0: off, -1: depth+1)" },
	{ .name = "budget_pcie", .type = STRATA_OPT_STR, .offset = offsetof(struct lookahead, budget_pcie),
	  .def = "none", .help = "prefetch bytes in flight into VRAM (size, or none: no limit)" },
	{ .name = "budget_nvme", .type = STRATA_OPT_STR, .offset = offsetof(struct lookahead, budget_nvme),
	  .def = "none", .help = "prefetch bytes in flight from NVMe (size, or none: no limit)" },
	{ .name = "via_ram", .type = STRATA_OPT_STR, .offset = offsetof(struct lookahead, via_ram),
	  .def = "auto", .choices = "auto|1|0",
	  .help = "an NVMe read for VRAM lands in RAM, the copy into VRAM follows (auto: into a free hole of "
		  "the RAM tier only, never evicting; 1: always; 0: straight into VRAM)" },
	{ .name = "keep_unused", .type = STRATA_OPT_BOOL, .offset = offsetof(struct lookahead, keep_unused),
	  .def = "0", .help = "keep a prefetched expert its layer did not use (0: drop it then)" },
	{ .name = "adaptive", .type = STRATA_OPT_BOOL, .offset = offsetof(struct lookahead, adaptive),
	  .def = "1", .help = "tune depth and threshold from the observed accuracy" },
	{ .name = "min_accuracy", .type = STRATA_OPT_DOUBLE,
	  .offset = offsetof(struct lookahead, min_accuracy), .def = "0.6", .min = 0, .max = 1,
	  .help = "adaptive: accuracy a hint's band needs for a RAM -> VRAM copy" },
	{ .name = "min_accuracy_nvme", .type = STRATA_OPT_DOUBLE,
	  .offset = offsetof(struct lookahead, min_accuracy_nvme), .def = "0.85", .min = 0, .max = 1,
	  .help = "adaptive: accuracy a hint's band needs for an NVMe read" },
	{ .name = "nvme_cost", .type = STRATA_OPT_BOOL, .offset = offsetof(struct lookahead, nvme_cost),
	  .def = "1", .help = "adaptive: an NVMe read also needs its break-even accuracy c/(c+h/m) from the cost "
			      "model: c its disk time (x (1 + VRAM hit rate) into VRAM), h what a right read hides "
			      "(latencies, its copy, a layer's compute), m the step's NVMe reads within depth (a staged "
			      "read: all of them)" },
	{ .name = "warmup", .type = STRATA_OPT_INT, .offset = offsetof(struct lookahead, warmup),
	  .def = "128", .min = 0, .max = 1 << 30, .help = "adaptive: predictions a band needs before it is trusted" },
	{ .name = "window", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct lookahead, window),
	  .def = "2000", .min = 1, .max = 1e12, .help = "adaptive: half-life of the accuracy, in predictions" },
	{ .name = NULL },
};

static int parse_budget(const char *s, uint64_t *out, const char *what, struct strata_error *err)
{
	if (!strcmp(s, "none")) {
		*out = UINT64_MAX;
		return STRATA_OK;
	}
	if (strata_parse_size(s, out, err))
		return STRATA_ERR(err, STRATA_EINVAL, "prefetch lookahead: %s=%s: a size (256M) or none", what, s);
	return STRATA_OK;
}

static int lookahead_init(struct strata_policy *p, struct strata_error *err)
{
	struct lookahead *l = p->priv;
	struct strata_prefetch_sched *s = p->env->sched;
	l->dest = strcmp(l->tier, "ram") ? STRATA_TIER_VRAM : STRATA_TIER_RAM;
	if (!l->topn)
		l->topn = p->env->spec && p->env->spec->top_k ? p->env->spec->top_k : 1;
	if (l->stage < 0) /* one layer deeper into RAM, where there is a RAM tier */
		l->stage = p->env->budget[STRATA_TIER_RAM] ? l->depth + 1 : 0;
	else if (l->stage && l->stage <= l->depth)
		return STRATA_ERR(err, STRATA_EINVAL, "prefetch lookahead: stage=%lld must exceed depth=%lld",
				  (long long)l->stage, (long long)l->depth);
	/* nvme_cost: the link speeds and a layer's compute from the run's cost
	 * model, as expertflow sizes its horizon */
	struct strata_cost_model cm;
	double mb, layer_us = hints_layer_us(p->env, &cm, &mb);
	l->nvme_gbps = cm.nvme_gbps;
	l->pcie_gbps = cm.pcie_gbps;
	l->hidden_us = cm.nvme_lat_us + cm.pcie_lat_us + layer_us;
	uint64_t bp, bn;
	int rc = parse_budget(l->budget_pcie, &bp, "budget_pcie", err);
	if (!rc)
		rc = parse_budget(l->budget_nvme, &bn, "budget_nvme", err);
	if (rc)
		return rc;
	if (s) {
		s->budget[STRATA_LINK_PCIE] = bp;
		s->budget[STRATA_LINK_NVME] = bn;
		s->from[l->dest] = !strcmp(l->from, "ram") ? 1u << STRATA_TIER_RAM
				 : !strcmp(l->from, "nvme") ? 1u << STRATA_TIER_NVME
				 : (1u << STRATA_TIER_RAM) | (1u << STRATA_TIER_NVME);
		s->from[STRATA_TIER_RAM] |= 1u << STRATA_TIER_NVME; /* staging reads NVMe */
		s->keep_unused = l->keep_unused;
		s->ram_holes_only = l->via_ram[0] == 'a' && l->dest == STRATA_TIER_VRAM; /* never evicts for it */
	}
	return STRATA_OK;
}

static void lookahead_free(struct strata_policy *p)
{
	struct lookahead *l = p->priv;
	free(l->buf);
	hints_score_free(&l->score);
}

/* The observed accuracy of a band at distance d, less two standard errors
 * (a band does not pass a threshold by luck); 0 until warmed up. */
static double accuracy(const struct lookahead *l, uint32_t d, uint32_t band)
{
	uint32_t k = d < HINTS_MAX_D ? d : HINTS_MAX_D;
	double n = l->score.seen[k][band];
	if (n < (double)l->warmup || n <= 0)
		return 0;
	double p = l->score.right[k][band] / n;
	return p - 2 * sqrt(p * (1 - p) / n);
}

/* nvme_cost: the accuracy at which an NVMe read of b bytes breaks even when
 * m of the layer-step's hints are NVMe reads.  A wrong read costs the disk
 * its transfer time t (where demand keeps the disk busy, the demand reads
 * behind it wait that long); one that lands in a full VRAM tier also evicts
 * a resident, which a later access would have found there with probability
 * q (the observed VRAM hit rate, counted on the routed experts before their
 * demand fetches) and must read again: c = (1 + q) t.  A right one does not
 * save its transfer where the disk is the bottleneck (the bytes are read
 * either way); it hides what the disk would otherwise idle before the next
 * layer: the read's and its copy's latencies, its copy into VRAM and a
 * layer's compute, h.  The engine starts the step's requests once the disk
 * is free of demand, together, so the step's m reads (its hints that are
 * NVMe reads and pass min_accuracy_nvme, at any distance up to depth) share
 * that window: p h / m >= (1 - p) c gives p >= c / (c + h / m).  A staged
 * read (beyond depth) is queued behind them and shares what they leave: its
 * m counts the staged reads too, theirs does not.  Every term comes from
 * the cost model, the expert's bytes and the access clock's counts, never
 * from the run's clock: sim and replay decide alike. */
static double break_even(const struct lookahead *l, uint64_t b, uint32_t m, bool vram)
{
	double t = (double)b / (l->nvme_gbps * 1e3), h = l->hidden_us + (double)b / (l->pcie_gbps * 1e3);
	double c = vram && l->vram_seen > 0 ? t * (1 + l->vram_hits / l->vram_seen) : t;
	return c > 0 ? c / (c + h / (m ? m : 1)) : 0;
}

/* eid would be an NVMe read: not in RAM (or no RAM tier) and not in VRAM
 * (where it is, asking is redundant). */
static bool nvme_read(const uint8_t *const *res, bool ram, uint32_t eid)
{
	return (!ram || !res[STRATA_TIER_RAM][eid]) && !(res && res[STRATA_TIER_VRAM] && res[STRATA_TIER_VRAM][eid]);
}

static uint32_t lookahead_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
				   struct strata_prefetch_req *out, uint32_t max)
{
	struct lookahead *l = p->priv;
	const struct strata_model_spec *s = p->env->spec;
	uint32_t reach = (uint32_t)(l->stage > l->depth ? l->stage : l->depth);
	if (!max)
		return 0;
	uint32_t n = hints_select(ctx, s, 1, reach, (uint64_t)l->topn, l->min_score, &l->buf, &l->cap);
	uint32_t got = 0;
	uint64_t hole = p->env->sched ? p->env->sched->ram_hole : 0; /* the longest free one, less what lands */
	const uint8_t *const *res = p->env->sched ? p->env->sched->resident : NULL;
	bool ram = res && res[STRATA_TIER_RAM] && p->env->budget[STRATA_TIER_RAM];
	/* via_ram=auto: a read lands in RAM only into a free hole (it evicts nothing) */
	bool fit = l->via_ram[0] == 'a' && l->dest == STRATA_TIER_VRAM && p->env->expert_bytes;
	if (l->adaptive && l->nvme_cost && ctx->experts && res && res[STRATA_TIER_VRAM]) {
		double a = exp2(-(double)ctx->n_experts / l->window); /* before this step's demand fetches */
		l->vram_hits *= a;
		l->vram_seen = l->vram_seen * a + ctx->n_experts;
		for (uint32_t i = 0; i < ctx->n_experts; i++)
			l->vram_hits += res[STRATA_TIER_VRAM][strata_eid(s, ctx->layer, ctx->experts[i])] != 0;
	}
	/* nvme_cost: the hints that would be NVMe reads and pass min_accuracy_nvme,
	 * within depth and in all (staged ones too) */
	uint32_t reads = 0, reads_all = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t d = l->buf[i].layer - ctx->layer, eid = strata_eid(s, l->buf[i].layer, l->buf[i].expert);
		bool r = nvme_read(res, ram, eid) && accuracy(l, d, hints_band(l->buf[i].score)) >= l->min_accuracy_nvme;
		reads += r && d <= l->depth;
		reads_all += r;
	}
	for (uint32_t i = 0; i < n && got < max; i++) {
		uint32_t d = l->buf[i].layer - ctx->layer, band = hints_band(l->buf[i].score);
		uint32_t eid = strata_eid(s, l->buf[i].layer, l->buf[i].expert);
		bool nvme = !ram || !res[STRATA_TIER_RAM][eid];
		bool read = nvme_read(res, ram, eid); /* else redundant */
		uint32_t dest = d <= l->depth ? l->dest : STRATA_TIER_RAM;
		if (dest == STRATA_TIER_VRAM && read && ram && l->via_ram[0] != '0' && strcmp(l->from, "ram") &&
		    (l->via_ram[0] == '1' || fit))
			dest = STRATA_TIER_RAM;
		uint64_t b = 0; /* what it takes of the RAM hole */
		if (fit && dest == STRATA_TIER_RAM && read) {
			b = (p->env->expert_bytes[eid] + STRATA_TIER_ALIGN - 1) / STRATA_TIER_ALIGN * STRATA_TIER_ALIGN;
			if (hole < b) {
				b = 0;
				if (d > l->depth)
					dest = STRATA_TIER_COUNT; /* no room to stage it */
				else
					dest = STRATA_TIER_VRAM; /* no room: straight into VRAM */
			}
		}
		if (l->adaptive) {
			hints_score_add(&l->score, l->buf[i].layer, l->buf[i].expert, d, band);
			double acc = accuracy(l, d, band);
			if (dest == STRATA_TIER_RAM ? acc < l->min_accuracy_nvme
			    : acc < (nvme ? l->min_accuracy_nvme : l->min_accuracy))
				continue;
			if (read && l->nvme_cost && p->env->expert_bytes &&
			    acc < break_even(l, p->env->expert_bytes[eid], d <= l->depth ? reads : reads_all,
					     dest == STRATA_TIER_VRAM))
				continue;
		}
		if (dest == STRATA_TIER_COUNT)
			continue;
		hole -= b;
		out[got].eid = eid;
		out[got].tier = dest;
		got++;
	}
	return got;
}

static void lookahead_on_route(struct strata_policy *p, uint64_t token, uint32_t layer, const uint32_t *experts,
			       uint32_t n)
{
	struct lookahead *l = p->priv;
	if (!l->adaptive)
		return;
	hints_score_route(&l->score, layer, experts, n, exp2(-1.0 / l->window));
}

const struct strata_prefetch_ops strata_prefetch_lookahead = {
	.name = "lookahead", .version = STRATA_POLICY_ABI,
	.help = "prefetch the recorded predictions (hints) for the next depth layers, adaptively",
	.priv_size = sizeof(struct lookahead), .options = lookahead_options,
	.init = lookahead_init, .free = lookahead_free, .on_layer = lookahead_on_layer,
	.on_route = lookahead_on_route,
};
