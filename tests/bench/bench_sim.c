/*
 * Simulation speed: expert accesses per second of `strata sim` (the engine in
 * virtual mode, C policies, cost model defaults) on a synthetic trace of a
 * real model shape, given by its spec only (no shard files).
 *
 * The ceiling, measured in the same run: a bare loop over the same access
 * sequence doing the least any cache simulator must do per access (read the
 * expert id, test and update one resident flag and one recency stamp, count
 * a hit or a miss).  Each row prints accesses/s of the whole `strata sim` call
 * (trace open, plan, future, engine open, replay loop) and its ratio to that
 * ceiling.  The figure: >= 5 million accesses/s with C policies.
 *
 *   build/release/bench/bench_sim [model-spec] [tokens-per-request] [only]   (CSV on stdout)
 *   default: qwen3-30b-a3b (48 MoE layers x 128 experts, top-8), 8 requests x (64 + 512)
 *   only: run just the configs whose "evict/prefetch" contains it (e.g. "lru/none")
 *
 * The machine this runs on is shared: besides wall-clock rates, each row
 * gives accesses per second of thread CPU time (cpu_accesses_per_s: the
 * whole call, best of two), which other people's load disturbs much less.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strata/replay.h"
#include "strata/trace.h"
#include "strata/util.h"

static double ceiling(const struct strata_trace_plan *p, uint32_t n_ids, uint32_t E, uint32_t cap, uint64_t *hits)
{
	uint8_t *res = calloc(n_ids, 1);
	uint64_t *stamp = calloc(n_ids, sizeof(uint64_t));
	uint32_t resident = 0;
	uint64_t h = 0, t0 = strata_now_ns();
	for (uint64_t s = 0; s < p->n_steps; s++)
		for (uint32_t l = 0; l < p->n_layers; l++)
			for (uint64_t a = p->off[s * p->n_layers + l]; a < p->off[s * p->n_layers + l + 1]; a++) {
				uint32_t eid = l * E + p->ids[a];
				if (res[eid]) {
					h++;
				} else if (resident < cap) {
					res[eid] = 1;
					resident++;
				}
				stamp[eid] = a;
			}
	double secs = (double)(strata_now_ns() - t0) / 1e9;
	*hits = h + stamp[0] * 0; /* keep the stores */
	free(res);
	free(stamp);
	return (double)p->n_accesses / secs;
}

static double thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const char *model = argc > 1 ? argv[1] : "qwen3-30b-a3b";
	uint32_t gen = argc > 2 ? (uint32_t)atoi(argv[2]) : 512;
	const char *only = argc > 3 ? argv[3] : NULL;
	struct strata_error err = { 0 };
	struct strata_model_spec spec;
	if (strata_model_spec_parse(model, &spec, &err)) {
		fprintf(stderr, "bench_sim: %s\n", err.msg);
		return 1;
	}
	char dir[] = "/tmp/strata-bench-sim-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	char trace[256];
	snprintf(trace, sizeof(trace), "%s/t.strace", dir);
	struct strata_trace_gen_config g;
	strata_trace_gen_defaults(&g);
	g.n_moe_layers = spec.n_moe_layers;
	g.n_experts = spec.n_experts;
	g.top_k = spec.top_k;
	g.requests = 8;
	g.prompt_len = 64;
	g.gen_len = gen;
	g.interleave = true;
	g.pred_depth = 1;
	g.pred_topn = spec.top_k;
	g.zipf_alpha = 0.8;
	int rc = 1;
	if (strata_trace_gen(&g, trace, STRATA_TRACE_FMT_BINARY, &err)) {
		fprintf(stderr, "bench_sim: %s\n", err.msg);
		goto out;
	}
	/* ceiling over the same plan the driver builds */
	struct strata_trace *t;
	struct strata_trace_plan plan;
	if (strata_trace_open(trace, &t, &err) || strata_trace_plan_build(t, 0, 0, &plan, &err)) {
		fprintf(stderr, "bench_sim: %s\n", err.msg);
		goto out;
	}
	uint32_t n_ids = spec.n_moe_layers * spec.n_experts;
	uint64_t ch = 0;
	double ceil_rate = 0;
	for (int r = 0; r < 3; r++) {
		double x = ceiling(&plan, n_ids, spec.n_experts, n_ids / 4, &ch);
		if (x > ceil_rate)
			ceil_rate = x;
	}
	uint64_t accesses = plan.n_accesses;
	strata_trace_plan_free(&plan);
	strata_trace_close(t);
	/* budgets: a fifth of the experts in VRAM, two fifths in RAM (cold-format sizes) */
	uint64_t per_expert = (uint64_t)spec.hidden * spec.inter * 3 * 2 / 8; /* ~2 bpw */
	uint64_t vram = per_expert * n_ids / 5, ram = per_expert * n_ids * 2 / 5;
	static const struct {
		const char *evict, *prefetch;
	} runs[] = {
		{ "lru", "none" },   { "lfu", "none" },       { "farthest", "none" },
		{ "lru", "lookahead" }, { "lfu-decay", "history" }, { "farthest", "oracle" },
	};
	printf("# bench_sim: model %s, %" PRIu64 " expert accesses, ceiling (bare loop) %.1f M accesses/s\n", model,
	       accesses, ceil_rate / 1e6);
	printf("config,accesses,hit_rate_vram,wall_s,accesses_per_s,loop_accesses_per_s,ratio_to_ceiling,cpu_s,"
	       "cpu_accesses_per_s\n");
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		char which[64];
		snprintf(which, sizeof(which), "%s/%s", runs[i].evict, runs[i].prefetch);
		if (only && !strstr(which, only))
			continue;
		struct strata_replay_config c;
		strata_replay_config_defaults(&c);
		c.model_dir = model;
		c.trace_path = trace;
		c.engine.mode = STRATA_ENGINE_VIRTUAL;
		c.engine.budget[0] = vram;
		c.engine.budget[1] = ram;
		c.engine.place = "cache";
		c.engine.evict = runs[i].evict;
		c.engine.prefetch = runs[i].prefetch;
		struct strata_cost_file cf;
		strata_cost_file_defaults(&cf);
		c.engine.cost = cf.cost;
		c.compute = STRATA_COMPUTE_NONE;
		struct strata_replay_result r;
		double best = 0, best_loop = 0, best_cpu = 0;
		for (int rep = 0; rep < 2; rep++) {
			double cpu0 = thread_cpu_s();
			int rrc = strata_replay_run(&c, &r, &err);
			double cpu = thread_cpu_s() - cpu0;
			if (rrc) {
				fprintf(stderr, "bench_sim: %s: %s\n", runs[i].evict, err.msg);
				goto out;
			}
			if (r.accesses_per_s > best)
				best = r.accesses_per_s;
			if (r.loop_accesses_per_s > best_loop)
				best_loop = r.loop_accesses_per_s;
			if (!best_cpu || cpu < best_cpu)
				best_cpu = cpu;
		}
		printf("\"%s\",%" PRIu64 ",%.4f,%.3f,%.0f,%.0f,%.4f,%.3f,%.0f\n", r.name, r.stats.accesses, r.hit_rate[0],
		       r.wall_s, best, best_loop, best_loop / ceil_rate, best_cpu, (double)r.stats.accesses / best_cpu);
		fflush(stdout);
	}
	rc = 0;
out:
	unlink(trace);
	rmdir(dir);
	return rc;
}
