/*
 * Trace replay on the engine (strata replay, strata sim): see strata/replay.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe.h"
#include "quant.h"
#include "quant_scalar.h"
#include "strata/csv.h"
#include "strata/bound.h"
#include "strata/gpu.h"
#include "strata/json.h"
#include "strata/replay.h"
#include "strata/tier_assign.h"
#include "strata/trace.h"
#include "strata/util.h"

const char *strata_compute_name(int c)
{
	switch (c) {
	case STRATA_COMPUTE_NONE: return "none";
	case STRATA_COMPUTE_REF: return "ref";
	case STRATA_COMPUTE_GPU: return "gpu";
	default: return "auto";
	}
}

/* ---- replay ----------------------------------------------------------- */

void strata_replay_config_defaults(struct strata_replay_config *c)
{
	memset(c, 0, sizeof(*c));
	strata_engine_config_defaults(&c->engine);
	c->compute = STRATA_COMPUTE_AUTO;
	c->hints = true;
	c->future = true;
	/* the kernel terms a cost file does not set: its defaults */
	struct strata_cost_file cf;
	strata_cost_file_defaults(&cf);
	c->kernel_us_per_mb_token = cf.kernel_us_per_mb_token;
	c->kernel_speed_q4 = cf.kernel_speed_q4;
	c->kernel_speed_q3 = cf.kernel_speed_q3;
}

/* request id -> dense index */
struct reqmap {
	uint32_t *keys, *vals, cap, n;
};

static int reqmap_get(struct reqmap *m, uint32_t req, uint32_t *out)
{
	if ((m->n + 1) * 2 > m->cap) {
		uint32_t cap = m->cap ? m->cap * 2 : 64;
		uint32_t *k = malloc(cap * 4), *v = malloc(cap * 4);
		if (!k || !v) {
			free(k);
			free(v);
			return -1;
		}
		memset(k, 0xff, cap * 4);
		for (uint32_t i = 0; i < m->cap; i++)
			if (m->keys[i] != UINT32_MAX) {
				uint32_t h = (m->keys[i] * 2654435761u) & (cap - 1);
				while (k[h] != UINT32_MAX)
					h = (h + 1) & (cap - 1);
				k[h] = m->keys[i];
				v[h] = m->vals[i];
			}
		free(m->keys);
		free(m->vals);
		m->keys = k;
		m->vals = v;
		m->cap = cap;
	}
	uint32_t h = (req * 2654435761u) & (m->cap - 1);
	while (m->keys[h] != UINT32_MAX) {
		if (m->keys[h] == req) {
			*out = m->vals[h];
			return 0;
		}
		h = (h + 1) & (m->cap - 1);
	}
	m->keys[h] = req; /* UINT32_MAX as a request id maps every time to a fresh slot: harmless */
	m->vals[h] = m->n;
	*out = m->n++;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pctl(double *v, uint64_t n, double q)
{
	if (!n)
		return 0;
	uint64_t i = (uint64_t)ceil(q * (double)n);
	if (i)
		i--;
	if (i >= n)
		i = n - 1;
	return v[i];
}

struct run {
	const struct strata_replay_config *cfg;
	struct strata_store *store;
	struct strata_trace *trace;
	struct strata_trace_plan plan;
	struct strata_future future;
	int have_future;
	struct strata_engine *eng;
	int compute;
	int virt;
	uint32_t L, E, k, hidden, inter;
	/* per step scratch */
	uint32_t *experts, *idx_of, *stamp, stamp_cur, *tok_per_expert;
	const void **ptrs;
	uint8_t *fmts;
	uint32_t *a_exp, *a_tok;
	float *a_w, *wbuf;
	float *gates;        /* per expert of the step: its largest gate weight (on_miss) */
	bool gated;          /* the engine reads gate weights and the trace has them */
	double fmt_mb[STRATA_FMT_COUNT]; /* payload MB of an expert per format */
	struct strata_hint *hints;
	uint32_t max_hints;
	bool hints_used;     /* cfg->hints, and the prefetch policy reads them */
	float *x, *y;        /* host activations */
	void *dx, *dy;       /* device activations */
	strata_gpu_event *done; /* after a layer's kernels: the engine's movers are polled until it fires */
	strata_gpu_event *start; /* before them (engine.move_log: when the device finished, for its row) */
	uint64_t max_step_tokens;
	struct strata_model_spec spec;
	const uint8_t *fmt_table;
	uint8_t *own_fmt, *own_tier;  /* spec-only model (virtual mode) */
	double *payload_mb;  /* per eid */
	int spec_only;       /* a model spec, no shard directory (virtual mode) */
	/* per request and per decode step, for TTFT and latency percentiles */
	struct reqmap rm;
	double *lat, *req_first, *req_ttft;
	uint8_t *req_prefill;
	uint32_t cap_req;
	uint64_t n_lat;
	uint64_t steps_done;            /* steps run_loop finished (all, unless interrupted) */
	double t_prefill, t_decode;
	/* link use over the decode steps (strata_engine_stats' link fields) */
	double dec_busy[2], dec_qd_ns;
	uint64_t dec_reads, dec_read_bytes, dec_waits;
	/* per decode segment, in order: the VRAM and the VRAM-or-RAM residency
	 * (2 x L x E flags) as it began, for the start-state time bound */
	uint8_t *seg_init;
	uint64_t n_seg;
};

/* The link counters that decode steps add up (struct run's dec_*). */
struct linksnap {
	double busy[2], qd_ns;
	uint64_t reads, read_bytes, waits;
};

static struct linksnap link_snap(struct run *r)
{
	const struct strata_engine_stats *st = strata_engine_stats(r->eng);
	return (struct linksnap){ .busy = { st->link_busy_ns[0], st->link_busy_ns[1] }, .qd_ns = st->nvme_qd_ns,
				  .reads = st->nvme_reads, .read_bytes = st->nvme_read_bytes, .waits = st->waits };
}

static double clock_now(struct run *r)
{
	if (r->virt)
		return strata_engine_stats(r->eng)->clock_ns;
	return (double)strata_now_ns();
}

static void run_free(struct run *r)
{
	if (r->eng)
		strata_engine_close(r->eng);
	if (r->have_future)
		strata_trace_future_free(&r->future);
	strata_trace_plan_free(&r->plan);
	if (r->trace)
		strata_trace_close(r->trace);
	if (r->store)
		strata_store_close(r->store);
	if (r->dx)
		strata_gpu_free(r->dx);
	if (r->dy)
		strata_gpu_free(r->dy);
	if (r->done)
		strata_gpu_event_destroy(r->done);
	if (r->start)
		strata_gpu_event_destroy(r->start);
	free(r->seg_init);
	free(r->experts);
	free(r->idx_of);
	free(r->stamp);
	free(r->tok_per_expert);
	free(r->ptrs);
	free(r->fmts);
	free(r->a_exp);
	free(r->a_tok);
	free(r->a_w);
	free(r->wbuf);
	free(r->gates);
	free(r->hints);
	free(r->x);
	free(r->y);
	free(r->payload_mb);
	free(r->own_fmt);
	free(r->own_tier);
	free(r->rm.keys);
	free(r->rm.vals);
	free(r->lat);
	free(r->req_first);
	free(r->req_ttft);
	free(r->req_prefill);
}

/* Whether a policy may read env->future: a built-in only if it declares it
 * needs it; a script, a plugin or caller-given ops may read it at will.  The
 * future (an index of every access by expert) is built only when some
 * policy may read it. */
static bool may_read_future(int role, const char *spec, const void *ops)
{
	if (ops)
		return true;
	char name[STRATA_POLICY_NAME_MAX];
	const char *s = spec ? spec : strata_policy_default(role);
	size_t n = strcspn(s, ":");
	if (n >= sizeof(name))
		return true;
	memcpy(name, s, n);
	name[n] = 0;
	const struct strata_evict_ops *h = strata_policy_builtin(role, name); /* the common head */
	return !h || (h->flags & STRATA_POLICY_F_NEEDS_FUTURE);
}

/* Index a layer-step's experts (r->experts[0..n)) for the computation and,
 * with count, the tokens of the step routed to each (all the cost model
 * needs: no weights, no assignment list). */
static void index_experts(struct run *r, uint64_t first, uint64_t last, uint32_t l, uint32_t n, bool count)
{
	if (++r->stamp_cur == 0) {
		memset(r->stamp, 0, r->E * sizeof(uint32_t));
		r->stamp_cur = 1;
	}
	for (uint32_t j = 0; j < n; j++) {
		r->stamp[r->experts[j]] = r->stamp_cur;
		r->idx_of[r->experts[j]] = j;
		r->fmts[j] = r->fmt_table[strata_eid(&r->spec, l, r->experts[j])];
		r->tok_per_expert[j] = 0;
	}
	for (uint64_t i = first; i < last && count; i++) {
		const uint16_t *e = strata_trace_experts(r->trace, i, l);
		for (uint32_t j = 0; j < r->k; j++)
			r->tok_per_expert[r->idx_of[e[j]]]++;
	}
}

/* Each expert's largest gate weight over the step's tokens routed to it
 * (after index_experts), into r->gates: what precision on miss compares. */
static void step_gates(struct run *r, uint64_t first, uint64_t last, uint32_t l, uint32_t n)
{
	for (uint32_t j = 0; j < n; j++)
		r->gates[j] = 0;
	for (uint64_t i = first; i < last; i++) {
		const uint16_t *e = strata_trace_experts(r->trace, i, l);
		strata_trace_weights(r->trace, i, l, r->wbuf);
		for (uint32_t j = 0; j < r->k; j++) {
			float *g = &r->gates[r->idx_of[e[j]]];
			*g = r->wbuf[j] > *g ? r->wbuf[j] : *g;
		}
	}
}

/* The cost model's kernel time of a layer-step (after index_experts), us:
 * an expert computed from its low-bit copy reads the copy's bytes; the fixed
 * cost once per part of the GPU path's call (moe.h: trellis and bf16
 * experts, q4/q3 experts on their decode kernel, q4/q3 experts with more
 * tokens as BF16 copies), at least once. */
static double modelled_us(const struct run *r, uint32_t l, uint32_t n)
{
	const struct strata_cost_model *cm = &r->cfg->engine.cost;
	double us = 0;
	unsigned parts = 0;
	for (uint32_t j = 0; j < n; j++)
		parts |= 1u << (!strata_fmt_is_scalar(r->fmts[j])			   ? 0
				: r->tok_per_expert[j] <= STRATA_MOE_SQ_DEC_TOKENS ? 1
										   : 2);
	for (unsigned p = parts ? parts : 1; p; p &= p - 1)
		us += cm->kernel_fixed_us;
	for (uint32_t j = 0; j < n; j++) {
		uint32_t eid = strata_eid(&r->spec, l, r->experts[j]);
		double mb = r->fmts[j] == r->fmt_table[eid] ? r->payload_mb[eid] : r->fmt_mb[r->fmts[j]];
		double extra = r->tok_per_expert[j] > 1 ? (double)(r->tok_per_expert[j] - 1) : 0;
		double speed = r->fmts[j] == STRATA_FMT_Q4 ? r->cfg->kernel_speed_q4
			     : r->fmts[j] == STRATA_FMT_Q3 ? r->cfg->kernel_speed_q3 : 1.0;
		us += mb * (cm->kernel_us_per_mb + extra * r->cfg->kernel_us_per_mb_token) / (speed > 0 ? speed : 1.0);
	}
	return us;
}

/* Until the layer's kernels on the legacy default stream finish: the
 * engine's movers are polled, so finished moves chain on and waiting
 * prefetches take the links that fall idle. */
static int wait_computing(struct run *r, struct strata_error *err)
{
	int rc = strata_gpu_event_record(r->done, NULL, err), q = 0;
	while (!rc && (q = strata_gpu_event_query(r->done, err)) == 0)
		rc = strata_engine_poll(r->eng, err);
	return rc ? rc : q < 0 ? q : STRATA_OK;
}

/* One layer of one step. */
static int run_layer(struct run *r, uint64_t step, uint32_t l, struct strata_error *err)
{
	const struct strata_trace_plan *p = &r->plan;
	uint64_t first = p->step_first[step], last = p->step_first[step + 1];
	uint32_t ntok = (uint32_t)(last - first);
	uint64_t a0 = p->off[step * p->n_layers + l], a1 = p->off[step * p->n_layers + l + 1];
	uint32_t n = (uint32_t)(a1 - a0);
	int rc;
	/* 1. hints: the recorded predictions of the step's tokens */
	uint32_t nh = 0;
	if (r->hints_used)
		for (uint64_t i = first; i < last && nh < r->max_hints; i++)
			nh += strata_trace_hints(r->trace, i, l, r->hints + nh, r->max_hints - nh);
	for (uint32_t j = 0; j < n; j++)
		r->experts[j] = p->ids[a0 + j];
	if (r->gated) {
		index_experts(r, first, last, l, n, false);
		step_gates(r, first, last, l, n);
		if ((rc = strata_engine_set_gates(r->eng, r->gates, n, err)))
			return rc;
	}
	if ((rc = strata_engine_begin_step(r->eng, step, l, ntok, r->experts, n, r->hints, nh, err)))
		return rc;
	/* 2. acquire */
	if ((rc = strata_engine_acquire(r->eng, l, r->experts, n, r->ptrs, err)))
		return rc;
	/* 3. compute */
	if (r->compute != STRATA_COMPUTE_NONE || r->virt) {
		index_experts(r, first, last, l, n, r->virt);
		for (uint32_t j = 0; j < n && r->gated; j++) /* a substituted expert computes from its copy */
			r->fmts[j] = (uint8_t)strata_engine_served_fmt(r->eng, l, r->experts[j]);
		uint32_t na = 0;
		int has_w = strata_trace_info(r->trace)->flags & STRATA_TRACE_F_WEIGHTS;
		for (uint64_t i = first; i < last && !r->virt; i++) {
			const uint16_t *e = strata_trace_experts(r->trace, i, l);
			strata_trace_weights(r->trace, i, l, r->wbuf);
			for (uint32_t j = 0; j < r->k; j++) {
				uint32_t li = r->idx_of[e[j]];
				r->a_exp[na] = li;
				r->a_tok[na] = (uint32_t)(i - first);
				r->a_w[na] = has_w ? r->wbuf[j] : 1.0f / (float)r->k;
				r->tok_per_expert[li]++;
				na++;
			}
		}
		if (r->virt) {
			strata_engine_add_compute(r->eng, modelled_us(r, l, n) * 1e3);
		} else {
			struct strata_moe_call c = {
				.hidden = r->hidden, .inter = r->inter, .n_tokens = ntok,
				.n_experts = n, .extents = r->ptrs, .fmts = r->fmts, .n_assign = na,
				.assign_expert = r->a_exp, .assign_token = r->a_tok, .assign_weight = r->a_w,
			};
			/* y starts at zero each layer (outside the timed region) */
			if (r->compute == STRATA_COMPUTE_GPU)
				rc = strata_gpu_memset(r->dy, 0, (size_t)ntok * r->hidden * sizeof(float), err);
			else
				memset(r->y, 0, (size_t)ntok * r->hidden * sizeof(float));
			uint64_t t0 = strata_now_ns(), gpu_end = 0, launched = 0;
			bool logged = r->cfg->engine.move_log != NULL;
			if (!rc && r->compute == STRATA_COMPUTE_GPU) {
				c.x = r->dx;
				c.y = r->dy;
				if (logged)
					rc = strata_gpu_event_record(r->start, NULL, err);
				if (!rc)
					rc = strata_moe_layer_gpu(&c, err);
				launched = logged ? strata_now_ns() : 0;
				/* wait for the computation's stream only (the legacy default
				 * stream), polling the engine meanwhile: a prefetch that
				 * finishes while the kernels run hands its link to the next
				 * (the links would otherwise carry only what was in flight
				 * when the kernels started, the prefetch budget) */
				if (!rc)
					rc = wait_computing(r, err);
				float ms = 0;
				if (!rc && logged && !strata_gpu_event_elapsed_ms(r->start, r->done, &ms, NULL))
					gpu_end = t0 + (uint64_t)((double)ms * 1e6);
			} else if (!rc) {
				c.x = r->x;
				c.y = r->y;
				rc = strata_moe_layer_ref(&c, err);
			}
			if (rc) {
				strata_error_prefix(err, "step %" PRIu64 " layer %u", step, l);
				return rc;
			}
			uint64_t t1 = strata_now_ns();
			strata_engine_add_compute(r->eng, (double)(t1 - t0));
			if (logged)
				strata_engine_log_compute(r->eng, t0, launched, gpu_end, t1);
		}
	}
	/* 4. release */
	return strata_engine_release(r->eng, step, l, r->experts, n, err);
}

/* The model (a shard directory, or a spec for a sim), the trace, its plan. */
static int open_inputs(struct run *r, struct strata_error *err)
{
	const struct strata_replay_config *cfg = r->cfg;
	int rc;
	struct stat mst;
	r->spec_only = stat(cfg->model_dir, &mst) != 0 && cfg->engine.mode == STRATA_ENGINE_VIRTUAL;
	if (r->spec_only) {
		/* sim of a model given by its shape only ("kimi-k3.1:layers=8"): formats and
		 * tiers as strata synth would write them, sizes from the format layouts */
		if ((rc = strata_model_spec_parse(cfg->model_dir, &r->spec, err))) {
			strata_error_prefix(err, "%s: neither a shard directory nor a model spec", cfg->model_dir);
			return rc;
		}
	} else {
		if (cfg->tiers || cfg->tier_trace || cfg->formats)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: tiers/tier_trace/formats apply to a model spec only "
					  "(a shard directory has its own tier table)", cfg->model_dir);
		if ((rc = strata_store_open(cfg->model_dir, &r->store, err)))
			return rc;
		r->spec = *strata_store_spec(r->store);
	}
	if ((rc = strata_trace_open(cfg->trace_path, &r->trace, err)) ||
	    (rc = strata_trace_check_model(r->trace, &r->spec, err)))
		return rc;
	const struct strata_trace_info *ti = strata_trace_info(r->trace);
	r->L = ti->n_moe_layers;
	r->E = ti->n_experts;
	r->k = ti->top_k;
	r->hidden = r->spec.hidden;
	r->inter = r->spec.inter;
	r->virt = cfg->engine.mode == STRATA_ENGINE_VIRTUAL;
	return strata_trace_plan_build(r->trace, cfg->prefill_chunk, cfg->max_tokens, &r->plan, err);
}

/* The future (an index of every access by expert), built only when some
 * policy may read it. */
static int build_future(struct run *r, struct strata_engine_config *ec, struct strata_error *err)
{
	if (!r->cfg->future || !(may_read_future(STRATA_ROLE_PLACE, ec->place, ec->place_ops) ||
				 may_read_future(STRATA_ROLE_EVICT, ec->evict, ec->evict_ops) ||
				 may_read_future(STRATA_ROLE_PREFETCH, ec->prefetch, ec->prefetch_ops)))
		return STRATA_OK;
	int rc = strata_trace_future_init(&r->future, &r->plan, r->E, err);
	if (rc)
		return rc;
	r->have_future = 1;
	ec->future = &r->future;
	return STRATA_OK;
}

/* Per-step scratch, sized from the plan's largest step. */
static int size_scratch(struct run *r, struct strata_engine_config *ec, struct strata_error *err)
{
	/* streamed experts need a scratch slot each: a prefill step acquires up to
	 * experts-per-layer of them at once */
	uint64_t max_acq = 0;
	for (uint64_t i = 0; i < r->plan.n_steps * r->L; i++)
		if (r->plan.off[i + 1] - r->plan.off[i] > max_acq)
			max_acq = r->plan.off[i + 1] - r->plan.off[i];
	if (ec->scratch_slots < max_acq)
		ec->scratch_slots = (uint32_t)max_acq;
	for (uint64_t s = 0; s < r->plan.n_steps; s++)
		if (r->plan.step_first[s + 1] - r->plan.step_first[s] > r->max_step_tokens)
			r->max_step_tokens = r->plan.step_first[s + 1] - r->plan.step_first[s];
	const struct strata_trace_info *ti = strata_trace_info(r->trace);
	size_t maxa = (size_t)(r->max_step_tokens ? r->max_step_tokens : 1) * r->k;
	size_t maxe = maxa < r->E ? maxa : r->E;
	r->max_hints = ti->pred_depth * ti->pred_topn * (uint32_t)(r->max_step_tokens < 64 ? r->max_step_tokens : 64) + 1;
	r->experts = malloc(maxe * sizeof(uint32_t));
	r->idx_of = calloc(r->E, sizeof(uint32_t));
	r->stamp = calloc(r->E, sizeof(uint32_t));
	r->tok_per_expert = calloc(maxe, sizeof(uint32_t));
	r->ptrs = calloc(maxe, sizeof(void *));
	r->fmts = calloc(maxe, 1);
	r->a_exp = malloc(maxa * sizeof(uint32_t));
	r->a_tok = malloc(maxa * sizeof(uint32_t));
	r->a_w = malloc(maxa * sizeof(float));
	r->wbuf = malloc((r->k + 1) * sizeof(float));
	r->gates = malloc(maxe * sizeof(float));
	r->hints = malloc(r->max_hints * sizeof(struct strata_hint));
	r->payload_mb = malloc((size_t)r->L * r->E * sizeof(double));
	r->lat = malloc((r->plan.n_steps + 1) * sizeof(double));
	if (!r->experts || !r->idx_of || !r->stamp || !r->tok_per_expert || !r->ptrs || !r->fmts || !r->a_exp ||
	    !r->a_tok || !r->a_w || !r->wbuf || !r->gates || !r->hints || !r->payload_mb || !r->lat)
		return STRATA_ERR(err, STRATA_ENOMEM, "replay: out of memory");
	return STRATA_OK;
}

/* Each expert's format and payload size: the store's, or for a spec the
 * tiers strata synth would write (strata_tier_assign_spec). */
static int expert_formats(struct run *r, struct strata_error *err)
{
	if (!r->spec_only) {
		r->fmt_table = strata_store_fmt_table(r->store);
		for (uint32_t l = 0; l < r->L; l++)
			for (uint32_t e = 0; e < r->E; e++)
				r->payload_mb[(size_t)l * r->E + e] =
					(double)strata_store_expert(r->store, l, e)->payload / 1e6;
		return STRATA_OK;
	}
	const struct strata_model_spec *spec = &r->spec;
	size_t ne = (size_t)r->L * r->E;
	r->own_fmt = malloc(ne);
	r->own_tier = malloc(ne);
	if (!r->own_fmt || !r->own_tier)
		return STRATA_ERR(err, STRATA_ENOMEM, "replay: out of memory");
	int rc = strata_tier_assign_spec(spec, r->cfg->tiers, r->cfg->tier_trace, r->cfg->engine.seed, r->own_tier,
					 err);
	if (rc)
		return rc;
	struct strata_expert_layout lay[3];
	uint8_t tf[STRATA_TIER_COUNT] = STRATA_TIER_FMTS_DEFAULT;
	if (r->cfg->formats && (rc = strata_tier_fmts_parse(r->cfg->formats, tf, err)))
		return rc;
	for (int t = 0; t < 3; t++)
		if (strata_expert_layout(tf[t], spec->hidden, spec->inter, &lay[t]))
			return STRATA_ERR(err, STRATA_EINVAL, "%s: no expert layout for this shape", r->cfg->model_dir);
	for (size_t i = 0; i < ne; i++) {
		r->own_fmt[i] = tf[r->own_tier[i]];
		r->payload_mb[i] = (double)lay[r->own_tier[i]].payload / 1e6;
	}
	r->fmt_table = r->own_fmt;
	return STRATA_OK;
}

static int open_engine(struct run *r, const struct strata_engine_config *ec, struct strata_replay_result *res,
		       struct strata_error *err)
{
	double open0 = (double)strata_now_ns();
	int rc;
	if (r->spec_only) {
		struct strata_engine_model em = { .spec = &r->spec, .tier_table = r->own_tier, .fmt_table = r->own_fmt };
		rc = strata_engine_open_model(&em, ec, &r->eng, err);
	} else {
		rc = strata_engine_open(r->store, ec, &r->eng, err);
	}
	if (rc)
		return rc;
	r->hints_used = r->cfg->hints && strata_engine_reads_hints(r->eng);
	r->gated = strata_engine_reads_gates(r->eng) &&
		   (strata_trace_info(r->trace)->flags & STRATA_TRACE_F_WEIGHTS);
	for (int f = 0; f < STRATA_FMT_COUNT; f++) {
		struct strata_expert_layout lay;
		r->fmt_mb[f] = strata_expert_layout(f, r->hidden, r->inter, &lay) ? 0 : (double)lay.payload / 1e6;
	}
	res->cold_start_ms = r->virt ? strata_engine_stats(r->eng)->clock_ns / 1e6
				     : ((double)strata_now_ns() - open0) / 1e6;
	return STRATA_OK;
}

/* The compute backend (none in virtual mode) and its activations. */
/* The GPU computation's one-time costs before the first step: its context
 * and the kernel modules the CUDA runtime loads on a kernel's first launch
 * (64-95 ms of the first layer's call on the H200, run 9 of
 * experiments/gpu-replay: inside the first decode step, 11-16 % of a
 * Kimi-shaped decode).  A serving engine pays them at start-up, so the
 * replay does too (its cold_start_ms): calls shaped like the trace's steps
 * (1 token, 2, the largest step; top_k experts per token, the model's
 * formats in turn) on one zeroed extent, whose results are dropped. */
static int warm_kernels(struct run *r, struct strata_error *err)
{
	uint8_t seen[STRATA_FMT_COUNT] = { 0 }, fmt[STRATA_FMT_COUNT];
	uint32_t nf = 0, total = r->L * r->E;
	uint64_t most = 0;
	for (uint32_t i = 0; i < total && nf < STRATA_FMT_COUNT; i++) {
		uint8_t f = r->fmt_table[i];
		struct strata_expert_layout lay;
		if (f >= STRATA_FMT_COUNT || seen[f] || strata_expert_layout(f, r->hidden, r->inter, &lay))
			continue;
		seen[f] = 1;
		fmt[nf++] = f;
		most = lay.bytes > most ? lay.bytes : most;
	}
	if (!nf)
		return STRATA_OK;
	void *ext = NULL;
	int rc = strata_gpu_malloc(&ext, most, err);
	if (!rc)
		rc = strata_gpu_memset(ext, 0, most, err);
	uint64_t shapes[3] = { 1, r->max_step_tokens < 2 ? r->max_step_tokens : 2, r->max_step_tokens };
	for (int k = 0; k < 3 && !rc; k++) {
		uint32_t nt = (uint32_t)(shapes[k] ? shapes[k] : 1), na = nt * r->k;
		uint32_t n = na < r->E ? na : r->E;
		if (k && shapes[k] == shapes[k - 1])
			continue;
		for (uint32_t j = 0; j < n; j++) {
			r->ptrs[j] = ext;
			r->fmts[j] = fmt[j % nf];
		}
		for (uint32_t a = 0; a < na; a++) {
			r->a_exp[a] = a % n;
			r->a_tok[a] = a / r->k;
			r->a_w[a] = 0;
		}
		struct strata_moe_call c = {
			.hidden = r->hidden, .inter = r->inter, .n_tokens = nt, .n_experts = n, .extents = r->ptrs,
			.fmts = r->fmts, .n_assign = na, .assign_expert = r->a_exp, .assign_token = r->a_tok,
			.assign_weight = r->a_w, .x = r->dx, .y = r->dy,
		};
		rc = strata_moe_layer_gpu(&c, err);
	}
	if (!rc)
		rc = strata_gpu_sync(err);
	strata_gpu_free(ext);
	if (rc)
		strata_error_prefix(err, "replay: warming up the GPU kernels");
	return rc;
}

static int open_compute(struct run *r, struct strata_error *err)
{
	const struct strata_replay_config *cfg = r->cfg;
	int rc;
	r->compute = cfg->compute;
	if (r->virt) {
		r->compute = STRATA_COMPUTE_NONE;
		return STRATA_OK;
	}
	int on_gpu = strata_engine_on_gpu(r->eng);
	if (r->compute == STRATA_COMPUTE_AUTO)
		r->compute = on_gpu ? STRATA_COMPUTE_GPU : STRATA_COMPUTE_REF;
	if (r->compute == STRATA_COMPUTE_GPU && !on_gpu)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED,
				  "--compute gpu needs the engine on a GPU (this run uses the host stand-in)");
	if (r->compute == STRATA_COMPUTE_REF && on_gpu)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED,
				  "--compute ref needs host extents, but the engine runs on the GPU "
				  "(use --compute gpu or --gpu 0)");
	if (r->compute == STRATA_COMPUTE_NONE)
		return STRATA_OK;
	size_t nx = (size_t)(r->max_step_tokens ? r->max_step_tokens : 1) * r->hidden;
	r->x = malloc(nx * sizeof(float));
	r->y = malloc(nx * sizeof(float));
	if (!r->x || !r->y)
		return STRATA_ERR(err, STRATA_ENOMEM, "replay: out of memory (activations)");
	uint64_t sx = cfg->engine.seed ^ 0x5eed5eedull;
	for (size_t i = 0; i < nx; i++)
		r->x[i] = (float)(strata_unit53(strata_splitmix64(&sx)) * 2.0 - 1.0);
	if (r->compute == STRATA_COMPUTE_GPU) {
		if ((rc = strata_gpu_malloc(&r->dx, nx * sizeof(float), err)) ||
		    (rc = strata_gpu_malloc(&r->dy, nx * sizeof(float), err)) ||
		    (rc = strata_gpu_memcpy_h2d_async(r->dx, r->x, nx * sizeof(float), NULL, err)) ||
		    (rc = strata_gpu_memset(r->dy, 0, nx * sizeof(float), err)) || (rc = strata_gpu_sync(err)) ||
		    (rc = strata_gpu_event_create(&r->done, err)) || (rc = strata_gpu_event_create(&r->start, err)) ||
		    (rc = warm_kernels(r, err)))
			return rc;
	}
	return STRATA_OK;
}

/* The dense index of the request of step s's first token, growing the
 * per-request arrays as requests appear. */
static int request_of(struct run *r, uint64_t first, uint32_t *ri, struct strata_error *err)
{
	if (reqmap_get(&r->rm, strata_trace_req(r->trace, first), ri))
		return STRATA_ERR(err, STRATA_ENOMEM, "replay: out of memory");
	if (*ri < r->cap_req)
		return STRATA_OK;
	uint32_t nc = r->cap_req ? r->cap_req * 2 : 64;
	double *a = realloc(r->req_first, nc * sizeof(double)), *b = a ? realloc(r->req_ttft, nc * sizeof(double)) : NULL;
	if (a)
		r->req_first = a;
	if (b)
		r->req_ttft = b;
	uint8_t *c = b ? realloc(r->req_prefill, nc) : NULL;
	if (!c)
		return STRATA_ERR(err, STRATA_ENOMEM, "replay: out of memory");
	r->req_prefill = c;
	for (uint32_t i = r->cap_req; i < nc; i++) {
		r->req_first[i] = -1;
		r->req_ttft[i] = -1;
		r->req_prefill[i] = 0;
	}
	r->cap_req = nc;
	return STRATA_OK;
}

/* A decode segment begins: what VRAM, and VRAM or RAM, hold now. */
static int snapshot_segment(struct run *r, struct strata_error *err)
{
	size_t n = (size_t)r->L * r->E;
	uint8_t *nb = realloc(r->seg_init, 2 * n * (r->n_seg + 1));
	if (!nb)
		return STRATA_ERR(err, STRATA_ENOMEM, "replay: out of memory (decode segments)");
	r->seg_init = nb;
	const uint8_t *v = strata_engine_resident(r->eng, STRATA_TIER_VRAM);
	const uint8_t *m = strata_engine_resident(r->eng, STRATA_TIER_RAM);
	uint8_t *o = nb + 2 * n * r->n_seg++;
	for (size_t i = 0; i < n; i++) {
		o[i] = v[i] != 0;
		o[n + i] = v[i] || m[i];
	}
	return STRATA_OK;
}

/* Every step of the plan through the engine, timing prefill, decode and
 * each request's first token. */
static int run_loop(struct run *r, struct strata_replay_result *res, struct strata_error *err)
{
	const struct strata_replay_config *cfg = r->cfg;
	int rc = STRATA_OK;
	struct strata_progress prog;
	if (cfg->progress)
		strata_progress_start(&prog,
				      r->virt ? "sim"
				      : r->compute == STRATA_COMPUTE_REF && !strata_engine_on_gpu(r->eng)
					      ? "replay (no GPU: host stand-in VRAM, CPU reference compute)"
					      : "replay",
				      r->plan.n_steps, "steps");
	uint64_t loop0 = strata_now_ns();
	r->steps_done = 0;
	for (uint64_t s = 0; s < r->plan.n_steps; s++, r->steps_done = s) {
		if (strata_interrupted) {
			/* keep what finished: the caller computes the metrics over
			 * steps_done steps and marks the result partial */
			res->loop_s = (double)(strata_now_ns() - loop0) / 1e9;
			if (cfg->progress)
				strata_progress_finish(&prog);
			res->partial = true;
			return STRATA_ERR(err, STRATA_EINTR, "interrupted at step %" PRIu64 " of %" PRIu64, s,
					  r->plan.n_steps);
		}
		uint64_t first = r->plan.step_first[s];
		int prefill = strata_trace_phase(r->trace, first) == STRATA_PHASE_PREFILL;
		uint32_t ri = 0;
		if ((rc = request_of(r, first, &ri, err)))
			return rc;
		if (!prefill && (!s || strata_trace_phase(r->trace, r->plan.step_first[s - 1]) == STRATA_PHASE_PREFILL) &&
		    (rc = snapshot_segment(r, err)))
			return rc;
		struct linksnap k0 = prefill ? (struct linksnap){ 0 } : link_snap(r);
		double t0 = clock_now(r);
		for (uint32_t l = 0; l < r->L; l++)
			if ((rc = run_layer(r, s, l, err)))
				return rc;
		double t1 = clock_now(r), dt = t1 - t0;
		if (r->req_first[ri] < 0)
			r->req_first[ri] = t0;
		if (prefill) {
			r->t_prefill += dt;
			if (r->req_prefill[ri] != 2) { /* the last prefill chunk before decoding yields the first token */
				r->req_prefill[ri] = 1;
				r->req_ttft[ri] = t1 - r->req_first[ri];
			}
		} else {
			struct linksnap k1 = link_snap(r);
			for (int i = 0; i < 2; i++)
				r->dec_busy[i] += k1.busy[i] - k0.busy[i];
			r->dec_qd_ns += k1.qd_ns - k0.qd_ns;
			r->dec_reads += k1.reads - k0.reads;
			r->dec_read_bytes += k1.read_bytes - k0.read_bytes;
			r->dec_waits += k1.waits - k0.waits;
			r->t_decode += dt;
			r->lat[r->n_lat++] = dt;
			if (!r->req_prefill[ri] && r->req_ttft[ri] < 0)
				r->req_ttft[ri] = t1 - r->req_first[ri];
			r->req_prefill[ri] = 2; /* decoding: later prefill steps no longer move TTFT */
		}
		if (cfg->progress)
			strata_progress_update(&prog, s + 1);
	}
	res->loop_s = (double)(strata_now_ns() - loop0) / 1e9;
	if (cfg->progress)
		strata_progress_finish(&prog);
	return STRATA_OK;
}

/* The result record from the engine's counters and the loop's timings. */
static void compute_metrics(struct run *r, struct strata_replay_result *res)
{
	const struct strata_replay_config *cfg = r->cfg;
	const struct strata_engine_stats *st = strata_engine_stats(r->eng);
	res->stats = *st;
	if (r->virt) /* the engine kept no wall clock: the whole loop is its bookkeeping */
		res->stats.bookkeeping_ns = (uint64_t)(res->loop_s * 1e9);
	snprintf(res->name, sizeof(res->name), "%s", strata_engine_name(r->eng));
	snprintf(res->trace, sizeof(res->trace), "%s", cfg->trace_path);
	snprintf(res->model, sizeof(res->model), "%s", r->spec.name);
	res->mode = cfg->engine.mode;
	res->compute = r->virt ? STRATA_COMPUTE_NONE : r->compute;
	res->verify = r->virt ? STRATA_VERIFY_OFF : cfg->engine.verify;
	res->seed = cfg->engine.seed;
	res->budget[0] = cfg->engine.budget[0];
	res->budget[1] = cfg->engine.budget[1];
	res->steps = r->steps_done;
	res->tokens = r->plan.step_first[r->steps_done];
	res->vram_host = !r->virt && !strata_engine_on_gpu(r->eng);
	for (uint64_t s = 0; s < r->steps_done; s++) {
		uint64_t nt = r->plan.step_first[s + 1] - r->plan.step_first[s];
		if (strata_trace_phase(r->trace, r->plan.step_first[s]) == STRATA_PHASE_PREFILL)
			res->prefill_tokens += nt;
		else
			res->decode_tokens += nt;
	}
	res->requests = r->rm.n;
	uint64_t acc = st->accesses ? st->accesses : 1;
	for (int i = 0; i < 3; i++)
		res->hit_rate[i] = (double)st->hits[i] / (double)acc;
	uint64_t not_vram = st->accesses - st->hits[0];
	res->prefetch_accuracy = st->prefetch_issued ? (double)st->prefetch_used / (double)st->prefetch_issued : 0;
	res->prefetch_coverage = st->prefetch_used + not_vram
					 ? (double)st->prefetch_used / (double)(st->prefetch_used + not_vram) : 0;
	res->prefetch_waste = st->prefetch_issued ? (double)st->prefetch_wasted / (double)st->prefetch_issued : 0;
	res->prefill_tok_s = r->t_prefill > 0 ? (double)res->prefill_tokens / (r->t_prefill / 1e9) : 0;
	res->decode_tok_s = r->t_decode > 0 ? (double)res->decode_tokens / (r->t_decode / 1e9) : 0;
	for (int i = 0; i < 2; i++) {
		res->dec_link_busy_ms[i] = r->dec_busy[i] / 1e6;
		res->dec_link_util[i] = r->t_decode > 0 ? r->dec_busy[i] / r->t_decode : 0;
	}
	res->dec_nvme_reads = r->dec_reads;
	res->dec_nvme_read_kib = r->dec_reads ? (double)r->dec_read_bytes / (double)r->dec_reads / 1024 : 0;
	res->dec_nvme_qd = r->dec_busy[STRATA_LINK_NVME] > 0 ? r->dec_qd_ns / r->dec_busy[STRATA_LINK_NVME] : 0;
	res->dec_waits = r->dec_waits;
	double ttft_sum = 0;
	uint32_t ttft_n = 0;
	for (uint32_t i = 0; i < r->rm.n; i++)
		if (r->req_ttft[i] >= 0) {
			ttft_sum += r->req_ttft[i];
			ttft_n++;
		}
	res->ttft_ms = ttft_n ? ttft_sum / ttft_n / 1e6 : 0;
	qsort(r->lat, r->n_lat, sizeof(double), cmp_double);
	res->lat_p50_ms = pctl(r->lat, r->n_lat, 0.50) / 1e6;
	res->lat_p99_ms = pctl(r->lat, r->n_lat, 0.99) / 1e6;
}

/* Configurations whose compared axis cannot change the result: say so
 * (res->warning), so a sweep of eviction policies under a placement that
 * never evicts, or of lookahead on a trace without predictions, does not
 * pass for a finding. */
static void axis_warnings(struct run *r, struct strata_replay_result *res)
{
	const struct strata_replay_config *cfg = r->cfg;
	const struct strata_engine_stats *st = &res->stats;
	size_t o = 0, len = sizeof(res->warning);
	res->warning[0] = '\0';
	/* the engine default's own pointer: no eviction policy was asked for */
	bool evict_chosen = cfg->engine.evict && cfg->engine.evict != strata_policy_default(STRATA_ROLE_EVICT);
	if (evict_chosen && st->evictions[0] + st->evictions[1] == 0 && st->accesses)
		o += (size_t)snprintf(res->warning + o, len - o,
				      "no expert was evicted, so the eviction policy (%s) did not affect this run: the "
				      "placement never evicts (place=static keeps misses out of the caches unless "
				      "promote=ram|vram|all; compare eviction policies under place=cache) or the "
				      "budgets hold every expert used\n", cfg->engine.evict);
	const struct strata_trace_info *ti = strata_trace_info(r->trace);
	if (o < len && strata_engine_reads_hints(r->eng) && st->prefetch_issued == 0 &&
	    (!ti->pred_depth || !cfg->hints))
		o += (size_t)snprintf(res->warning + o, len - o,
				      "prefetch %s issued nothing: it reads the trace's recorded predictions and %s "
				      "(strata trace gen --pred-depth N records them; prefetch=oracle or history "
				      "need none)\n", cfg->engine.prefetch ? cfg->engine.prefetch : "",
				      !ti->pred_depth ? "this trace has none" : "--no-hints withholds them");
	if (o < len && strata_engine_reads_gates(r->eng) && !r->gated)
		o += (size_t)snprintf(res->warning + o, len - o,
				      "on_miss %s substituted nothing: it compares gate weights and this trace has none "
				      "(record them: strata trace gen --weights, python3 -m strata.record)\n",
				      cfg->engine.on_miss);
	(void)o;
}

/* The bounds of strata/bound.h for this run, and how many the run broke. */
static int compute_bounds(struct run *r, struct strata_replay_result *res, struct strata_error *err)
{
	const struct strata_trace_plan *p = &r->plan;
	const struct strata_cost_model *cm = &r->cfg->engine.cost;
	const uint64_t *bytes = strata_engine_expert_bytes(r->eng);
	uint64_t cap_v = r->cfg->engine.budget[0], cap_r = r->cfg->engine.budget[1], n = p->n_accesses, biggest = 0;
	uint32_t n_ids = r->L * r->E;
	for (uint32_t i = 0; i < n_ids; i++)
		biggest = bytes[i] > biggest ? bytes[i] : biggest;
	uint32_t *eid = malloc((n + 1) * sizeof(uint32_t));
	uint64_t *pos = malloc((n + 1) * sizeof(uint64_t));
	uint64_t *off = malloc((p->n_steps * r->L + 1) * sizeof(uint64_t));
	if (!eid || !pos || !off) {
		free(eid), free(pos), free(off);
		return STRATA_ERR(err, STRATA_ENOMEM, "replay: out of memory (bounds)");
	}
	/* The stream every policy must move whole.  Under precision on miss an
	 * access that may be served by its copy (low gate weight, a copy) is
	 * left out: whatever a policy does, the accesses it serves whole are a
	 * superset of the rest, and the optimum of a subsequence is no larger. */
	n = 0;
	for (uint64_t ls = 0; ls < p->n_steps * r->L; ls++) {
		uint64_t s = ls / r->L, a0 = p->off[ls], a1 = p->off[ls + 1];
		uint32_t l = (uint32_t)(ls % r->L);
		off[ls] = n;
		if (r->gated) {
			for (uint64_t a = a0; a < a1; a++)
				r->experts[a - a0] = p->ids[a];
			index_experts(r, p->step_first[s], p->step_first[s + 1], l, (uint32_t)(a1 - a0), false);
			step_gates(r, p->step_first[s], p->step_first[s + 1], l, (uint32_t)(a1 - a0));
		}
		for (uint64_t a = a0; a < a1; a++) {
			uint32_t id = l * r->E + p->ids[a];
			if (r->gated && strata_engine_may_substitute(r->eng, id, r->gates[a - a0]))
				continue;
			eid[n] = id;
			pos[n++] = ls;
		}
	}
	off[p->n_steps * r->L] = n;
	struct strata_bound_stream all = { .eid = eid, .pos = pos, .n = n, .n_ids = n_ids, .bytes = bytes };
	int rc = strata_bound_tier(&all, cap_v, false, &res->bound_moves_vram, &res->bound_bytes_vram, err);
	if (!rc)
		rc = strata_bound_tier(&all, cap_v + cap_r, false, &res->bound_moves_nvme, &res->bound_bytes_nvme, err);
	/* (d): the RAM tier over the moves into VRAM this run made */
	struct strata_bound_stream ld = { .n_ids = n_ids, .bytes = bytes };
	strata_engine_vram_loads(r->eng, &ld.eid, &ld.pos, &ld.n);
	if (!rc)
		rc = strata_bound_tier(&ld, cap_r, false, &res->bound_ram_moves_nvme, &res->bound_ram_bytes_nvme, err);
	/* (c): decode segments, each with a free warm start; (e): each from the
	 * residency this run had as it began */
	double t_ns = 0, t0_ns = 0;
	uint64_t seg = 0;
	for (uint64_t s = 0; s < p->n_steps && !rc;) {
		if (strata_trace_phase(r->trace, p->step_first[s]) != STRATA_PHASE_DECODE) {
			s++;
			continue;
		}
		uint64_t s0 = s;
		double cus = 0;
		for (; s < p->n_steps && strata_trace_phase(r->trace, p->step_first[s]) == STRATA_PHASE_DECODE; s++)
			for (uint32_t l = 0; l < r->L; l++) {
				uint64_t a0 = p->off[s * r->L + l], a1 = p->off[s * r->L + l + 1];
				for (uint64_t a = a0; a < a1; a++)
					r->experts[a - a0] = p->ids[a];
				index_experts(r, p->step_first[s], p->step_first[s + 1], l, (uint32_t)(a1 - a0), true);
				if (r->gated) /* an expert that may compute from its copy: the copy's cost */
					step_gates(r, p->step_first[s], p->step_first[s + 1], l, (uint32_t)(a1 - a0));
				for (uint64_t a = a0; a < a1 && r->gated; a++) {
					uint32_t id = l * r->E + p->ids[a];
					int cf = strata_engine_copy_fmt(r->eng, id);
					if (strata_engine_may_substitute(r->eng, id, r->gates[a - a0]) &&
					    r->fmt_mb[cf] < r->payload_mb[id])
						r->fmts[a - a0] = (uint8_t)cf;
				}
				cus += modelled_us(r, l, (uint32_t)(a1 - a0));
			}
		uint64_t a0 = off[s0 * r->L], a1 = off[s * r->L], mv, by[4];
		struct strata_bound_stream st = { .eid = eid + a0, .pos = pos + a0, .n = a1 - a0, .n_ids = n_ids,
						  .bytes = bytes };
		if ((rc = strata_bound_tier(&st, cap_v, true, &mv, &by[0], err)) ||
		    (rc = strata_bound_tier(&st, cap_v + cap_r, true, &mv, &by[1], err)))
			break;
		if (seg < r->n_seg) { /* always, unless the steps ran out of step with the plan */
			st.init = r->seg_init + 2 * (size_t)n_ids * seg;
			if ((rc = strata_bound_tier(&st, cap_v, false, &mv, &by[2], err)))
				break;
			st.init += n_ids;
			if ((rc = strata_bound_tier(&st, cap_v + cap_r, false, &mv, &by[3], err)))
				break;
		} else {
			by[2] = by[0], by[3] = by[1];
		}
		seg++;
		/* a transfer under way as the segment starts (the first one starts
		 * after the preload drained) */
		uint64_t slack = s0 ? biggest : 0;
		for (int i = 0; i < 4; i++)
			by[i] = by[i] > slack ? by[i] - slack : 0;
		/* a replay without the expert computation has none to wait for */
		double c = r->virt || r->compute != STRATA_COMPUTE_NONE ? cus * 1e3 : 0;
		for (int k = 0; k < 2; k++) {
			double t = c, tp = (double)by[2 * k] / cm->pcie_gbps, tn = (double)by[2 * k + 1] / cm->nvme_gbps;
			t = t > tp ? t : tp;
			*(k ? &t0_ns : &t_ns) += t > tn ? t : tn;
		}
	}
	free(eid), free(pos), free(off);
	if (rc)
		return rc;
	const struct strata_engine_stats *st = &res->stats;
	res->bound_decode_ms = t_ns / 1e6;
	res->bound_tok_s = t_ns > 0 ? (double)res->decode_tokens / (t_ns / 1e9) : 0;
	res->bound_ratio = res->bound_tok_s > 0 ? res->decode_tok_s / res->bound_tok_s : 0;
	res->bound_start_tok_s = t0_ns > 0 ? (double)res->decode_tokens / (t0_ns / 1e9) : 0;
	res->bound_start_ratio = res->bound_start_tok_s > 0 ? res->decode_tok_s / res->bound_start_tok_s : 0;
	/* the moves of whole experts: the copies (precision on miss) are not bounded */
	uint64_t into_vram = st->bytes_ram_vram + st->bytes_nvme_vram - st->substitute_bytes;
	uint64_t from_nvme = st->bytes_nvme_ram + st->bytes_nvme_vram - st->substitute_bytes;
	uint64_t mv_vram = st->moves_vram - st->substituted, mv_nvme = st->moves_nvme - st->substituted;
	res->bound_violations = (mv_vram < res->bound_moves_vram) + (into_vram < res->bound_bytes_vram) +
				(mv_nvme < res->bound_moves_nvme) + (from_nvme < res->bound_bytes_nvme) +
				(mv_nvme < res->bound_ram_moves_nvme) + (from_nvme < res->bound_ram_bytes_nvme) +
				/* the time bound is exact for the virtual clock only (real: calibrated bandwidths) */
				(r->virt && res->decode_tok_s > res->bound_tok_s * (1 + 1e-9)) +
				(r->virt && res->decode_tok_s > res->bound_start_tok_s * (1 + 1e-9));
	return STRATA_OK;
}

int strata_replay_run(const struct strata_replay_config *cfg, struct strata_replay_result *res,
		      struct strata_error *err)
{
	uint64_t wall0 = strata_now_ns();
	memset(res, 0, sizeof(*res));
	struct run r = { .cfg = cfg };
	struct strata_engine_config ec = cfg->engine;
	int rc = open_inputs(&r, err);
	ec.no_wall_bookkeeping = r.virt; /* the loop's wall time stands in (compute_metrics) */
	ec.record_loads = true;          /* for the RAM tier's bound */
	if (!rc)
		rc = build_future(&r, &ec, err);
	if (!rc)
		rc = size_scratch(&r, &ec, err);
	if (!rc)
		rc = expert_formats(&r, err);
	if (!rc)
		rc = open_engine(&r, &ec, res, err);
	if (!rc) {
		uint64_t c0 = strata_now_ns(); /* activations and the kernels' warm-up: before the first step */
		rc = open_compute(&r, err);
		if (!r.virt)
			res->cold_start_ms += (double)(strata_now_ns() - c0) / 1e6;
	}
	double run0 = 0;
	if (!rc) {
		run0 = clock_now(&r);
		rc = run_loop(&r, res, err);
	}
	/* interrupted: the steps that finished still make a (partial) result */
	bool have = !rc || (rc == STRATA_EINTR && res->partial);
	if (have) {
		compute_metrics(&r, res);
		res->run_s = (clock_now(&r) - run0) / 1e9;
		axis_warnings(&r, res);
		if (!rc) /* the bounds are of the whole trace: none for a partial run */
			rc = compute_bounds(&r, res, err);
	}
	res->wall_s = (double)(strata_now_ns() - wall0) / 1e9;
	if (have && res->wall_s > 0)
		res->accesses_per_s = (double)res->stats.accesses / res->wall_s;
	if (have && res->loop_s > 0)
		res->loop_accesses_per_s = (double)res->stats.accesses / res->loop_s;
	run_free(&r);
	return rc;
}

/* ---- output ----------------------------------------------------------- */

int strata_replay_write_json(const struct strata_replay_result *r, const char *path, struct strata_error *err)
{
	const struct strata_engine_stats *s = &r->stats;
	struct strata_outfile o;
	int rc = strata_outfile_open(&o, path, 0, err);
	if (rc)
		return rc;
	FILE *f = o.f;
	fprintf(f, "{\n  \"config\": ");
	strata_json_write_str(f, r->name);
	fprintf(f, ",\n  \"mode\": \"%s\",\n  \"compute\": \"%s\",\n  \"vram_tier\": \"%s\",\n  \"verify\": \"%s\",\n  \"trace\": ",
		r->mode == STRATA_ENGINE_VIRTUAL ? "virtual" : "real", strata_compute_name(r->compute),
		strata_replay_vram_desc(r), strata_verify_name(r->verify));
	strata_json_write_str(f, r->trace);
	fprintf(f, ",\n  \"model\": ");
	strata_json_write_str(f, r->model);
	fprintf(f, ",\n  \"seed\": %" PRIu64 ",\n  \"vram_bytes\": %" PRIu64 ",\n  \"ram_bytes\": %" PRIu64, r->seed,
		r->budget[0], r->budget[1]);
#define JX(k, t, fmt, v) fprintf(f, ",\n  \"" k "\": " fmt, v);
	STRATA_REPLAY_COLUMNS(JX)
#undef JX
	fprintf(f, ",\n  \"warnings\": [");
	const char *w = r->warning;
	for (int n = 0; *w; n++) {
		const char *nl = strchr(w, '\n');
		size_t l = nl ? (size_t)(nl - w) : strlen(w);
		char line[sizeof(r->warning)];
		snprintf(line, sizeof(line), "%.*s", (int)l, w);
		fputs(n ? ", " : "", f);
		strata_json_write_str(f, line);
		w += l + (nl != NULL);
	}
	fprintf(f, "]\n}\n");
	return strata_outfile_commit(&o, err);
}

int strata_replay_write_csv(const struct strata_replay_result *r, const char *path, bool append,
			    struct strata_error *err)
{
	const struct strata_engine_stats *s = &r->stats;
	struct strata_outfile o;
	int rc = strata_outfile_open(&o, path, append, err);
	if (rc)
		return rc;
	FILE *f = o.f;
	if (!o.append || o.existing == 0) {
		fprintf(f, "config,mode,compute,trace,model,seed,vram_bytes,ram_bytes");
#define HX(k, t, fmt, v) fputs("," k, f);
		STRATA_REPLAY_COLUMNS(HX)
#undef HX
		fputc('\n', f);
	}
	strata_csv_write_field(f, r->name);
	fprintf(f, ",%s,%s,", r->mode == STRATA_ENGINE_VIRTUAL ? "virtual" : "real", strata_compute_name(r->compute));
	strata_csv_write_field(f, r->trace);
	fputc(',', f);
	strata_csv_write_field(f, r->model);
	fprintf(f, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, r->seed, r->budget[0], r->budget[1]);
#define CX(k, t, fmt, v) fprintf(f, "," fmt, v);
	STRATA_REPLAY_COLUMNS(CX)
#undef CX
	fputc('\n', f);
	return strata_outfile_commit(&o, err);
}

const char *strata_replay_vram_desc(const struct strata_replay_result *r)
{
	return r->mode == STRATA_ENGINE_VIRTUAL ? "modelled" : r->vram_host ? "host stand-in" : "device";
}

void strata_replay_print(const struct strata_replay_result *r, FILE *f)
{
	const struct strata_engine_stats *s = &r->stats;
	char a[32], b[32], c[32];
	fprintf(f, "%s  (%s, compute %s, seed %" PRIu64 "%s%s%s)%s\n", r->name,
		r->mode == STRATA_ENGINE_VIRTUAL ? "simulated" : "real", strata_compute_name(r->compute), r->seed,
		r->mode == STRATA_ENGINE_VIRTUAL ? "" : ", checksums ",
		r->mode == STRATA_ENGINE_VIRTUAL ? "" : r->verify == STRATA_VERIFY_OFF ? "NOT checked (--no-verify)"
						       : r->verify == STRATA_VERIFY_EVERY ? "checked on every read"
											 : "checked on first read",
		r->vram_host ? ", no GPU: the VRAM tier is a host stand-in" : "",
		r->partial ? "  PARTIAL: interrupted, the steps that finished" : "");
	fprintf(f, "  trace     %s: %" PRIu64 " tokens (%" PRIu64 " prefill, %" PRIu64 " decode), %" PRIu64
		   " steps, %" PRIu64 " requests\n", r->trace, r->tokens, r->prefill_tokens, r->decode_tokens, r->steps,
		r->requests);
	fprintf(f, "  accesses  %" PRIu64 ": vram%s %.2f%%  ram %.2f%%  nvme %.2f%%\n", s->accesses,
		r->vram_host ? " (host stand-in)" : "", 100 * r->hit_rate[0], 100 * r->hit_rate[1], 100 * r->hit_rate[2]);
	fprintf(f, "  bytes     nvme->ram %s  ram->vram %s  nvme->vram %s\n",
		strata_fmt_bytes(s->bytes_nvme_ram, a, sizeof(a)), strata_fmt_bytes(s->bytes_ram_vram, b, sizeof(b)),
		strata_fmt_bytes(s->bytes_nvme_vram, c, sizeof(c)));
	fprintf(f, "  evictions vram %" PRIu64 "  ram %" PRIu64, s->evictions[0], s->evictions[1]);
	if (s->compactions[0] + s->compactions[1])
		fprintf(f, "  (compactions vram %" PRIu64 " moving %s, ram %" PRIu64 " moving %s: %.3f ms)",
			s->compactions[0], strata_fmt_bytes(s->compact_bytes[0], a, sizeof(a)), s->compactions[1],
			strata_fmt_bytes(s->compact_bytes[1], b, sizeof(b)), s->compact_ns / 1e6);
	fprintf(f, "\n");
	fprintf(f, "  prefetch  issued %" PRIu64 "  used %" PRIu64 "  wasted %" PRIu64 "  redundant %" PRIu64
		   "  late %" PRIu64 "  accuracy %.1f%%  coverage %.1f%%  waste %.1f%%\n",
		s->prefetch_issued, s->prefetch_used, s->prefetch_wasted, s->prefetch_redundant, s->prefetch_late,
		100 * r->prefetch_accuracy, 100 * r->prefetch_coverage, 100 * r->prefetch_waste);
	fprintf(f, "  time      stall %.3f ms  io %.3f ms  compute %.3f ms  run %.3f s  cold start %.3f ms\n",
		s->stall_ns / 1e6, s->io_ns / 1e6, s->compute_ns / 1e6, r->run_s, r->cold_start_ms);
	if (r->decode_tokens)
		fprintf(f, "  links     decode: nvme busy %.1f%% (%" PRIu64 " reads, %.0f KiB each, queue depth %.1f)"
			   "  pcie busy %.1f%%  waits %" PRIu64 "\n",
			100 * r->dec_link_util[STRATA_LINK_NVME], r->dec_nvme_reads, r->dec_nvme_read_kib, r->dec_nvme_qd,
			100 * r->dec_link_util[STRATA_LINK_PCIE], r->dec_waits);
	fprintf(f, "  speed     prefill %.1f tok/s  decode %.2f tok/s  TTFT %.3f ms  per-token p50 %.3f ms  p99 %.3f ms\n",
		r->prefill_tok_s, r->decode_tok_s, r->ttft_ms, r->lat_p50_ms, r->lat_p99_ms);
	fprintf(f, "  bound     decode %.2f tok/s (this run %.2f of it); moves into vram >= %" PRIu64 " (%" PRIu64
		   " here), nvme reads >= %" PRIu64 " (%" PRIu64 "), given this run's vram moves >= %" PRIu64 "%s\n",
		r->bound_tok_s, r->bound_ratio, r->bound_moves_vram, s->moves_vram, r->bound_moves_nvme, s->moves_nvme,
		r->bound_ram_moves_nvme, r->bound_violations ? "  BEATEN: A BUG" : "");
	fprintf(f, "            decode from this run's residency as each decode segment began %.2f tok/s (%.2f of it)\n",
		r->bound_start_tok_s, r->bound_start_ratio);
	fprintf(f, "  host      %.3f s wall, %.0f expert accesses/s (step loop %.3f s, %.0f accesses/s)\n", r->wall_s,
		r->accesses_per_s, r->loop_s, r->loop_accesses_per_s);
}
