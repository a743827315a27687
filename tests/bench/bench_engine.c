/*
 * The engine's own bookkeeping per expert access (target < 1 us with C
 * policies), with movers that cost nothing to wait for: the virtual movers on
 * a Kimi-shaped model that was never packed, and the host movers on a small
 * synthesized store.  Workloads:
 *   all-hit     every expert preloaded in VRAM (tier table all hot)
 *   miss-heavy  place=cache, VRAM holds 2 x top_k experts, uniform random
 *               routing: nearly every access misses, evicts and moves
 *   two-tier    place=static:promote=all with a RAM tier, Zipf-ish routing
 *               and lookahead prefetch from (75% right) hints
 * Reported: engine bookkeeping_ns / access (time inside the engine minus
 * time blocked on movers) and the driver's wall time / access; the ceiling
 * is the 1000 ns target.  CSV on stdout.
 *
 *   bench_engine [--steps N] [--dir DIR] [--virtual-only] [--evict SPEC] [--prefetch SPEC]
 * --evict/--prefetch replace the eviction (every workload) and prefetch (the
 * two-tier one) policies, e.g. a Lua script: --evict policies/lua/lru.lua
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "strata/csv.h"
#include "strata/engine.h"
#include "strata/store.h"
#include "strata/synth.h"
#include "strata/tier_assign.h"
#include "strata/util.h"
#include "bench_common.h"



static int run(const char *label, struct strata_engine *e, const struct strata_model_spec *s, uint32_t steps,
	       int skew, int hints)
{
	struct strata_error err = { 0 };
	uint64_t b0 = strata_engine_stats(e)->bookkeeping_ns, a0 = strata_engine_stats(e)->accesses;
	uint64_t t0 = strata_now_ns();
	if (bench_drive(e, s, steps, skew, hints, &err)) {
		fprintf(stderr, "%s: %s\n", label, err.msg);
		return 1;
	}
	double wall = (double)(strata_now_ns() - t0);
	const struct strata_engine_stats *st = strata_engine_stats(e);
	double acc = (double)(st->accesses - a0);
	double bk = (double)(st->bookkeeping_ns - b0) / acc;
	double hit = (double)st->hits[0] / (double)st->accesses;
	printf("%s,", label);
	strata_csv_write_field(stdout, strata_engine_name(e)); /* "place=...,evict=...": quoted */
	printf(",%.0f,%.1f,%.1f,%.3f,%llu,1000,%.3f\n", acc, bk, wall / acc, hit,
	       (unsigned long long)(st->evictions[0] + st->evictions[1]), bk / 1000.0);
	fprintf(stderr, "%-26s %-58s %8.0f accesses  bookkeeping %7.1f ns/access  wall %7.1f ns/access  vram hits %.2f\n",
		label, strata_engine_name(e), acc, bk, wall / acc, hit);
	return 0;
}

int main(int argc, char **argv)
{
	uint32_t steps = 200000;
	const char *dir = NULL;
	int host = 1;
	const char *evict = NULL, *prefetch = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--evict") && i + 1 < argc)
			evict = argv[++i];
		else if (!strcmp(argv[i], "--prefetch") && i + 1 < argc)
			prefetch = argv[++i];
		else if (!strcmp(argv[i], "--virtual-only"))
			host = 0;
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--steps N] [--dir DIR] [--virtual-only] [--evict SPEC] [--prefetch SPEC]\n", argv[0]);
			return !strcmp(argv[i], "--help") ? 0 : 2;
		}
	}
	setenv("STRATA_PROGRESS", "0", 0);
	struct strata_error err = { 0 };
	struct strata_model_spec s;
	strata_model_spec_parse("kimi-k3.1:layers=8", &s, &err);
	uint32_t n = strata_model_total_experts(&s);
	uint8_t *hot = calloc(n, 1), *tiers = malloc(n);
	double frac[3] = { 0.15, 0.30, 0.55 };
	strata_tier_assign_seeded(&s, frac, 1, tiers, NULL);
	struct strata_engine_model all_hot = { .spec = &s, .tier_table = hot };
	struct strata_engine_model tiered = { .spec = &s, .tier_table = tiers };
	struct strata_expert_layout L;
	strata_expert_layout(STRATA_FMT_HOT, s.hidden, s.inter, &L);
	printf("workload,engine,accesses,bookkeeping_ns_per_access,wall_ns_per_access,vram_hit_rate,evictions,"
	       "ceiling_ns,ratio\n");

	struct strata_engine_config c;
	struct strata_engine *e;
	/* virtual, all-hit */
	strata_engine_config_defaults(&c);
	c.mode = STRATA_ENGINE_VIRTUAL;
	c.budget[0] = (uint64_t)n * L.bytes;
	c.budget[1] = 0;
	if (evict)
		c.evict = evict;
	if (strata_engine_open_model(&all_hot, &c, &e, &err) || run("virtual/all-hit", e, &s, steps, 0, 0))
		return 1;
	strata_engine_close(e);
	/* virtual, miss-heavy, two evictors */
	const char *ev2[] = { evict ? evict : "lru", "lfu" };
	for (int k = 0; k < (evict ? 1 : 2); k++) {
		strata_engine_config_defaults(&c);
		c.mode = STRATA_ENGINE_VIRTUAL;
		c.place = "cache";
		c.evict = ev2[k];
		c.budget[0] = 2ull * s.top_k * L.bytes;
		c.budget[1] = 0;
		if (strata_engine_open_model(&tiered, &c, &e, &err) || run("virtual/miss-heavy", e, &s, steps / 4, 0, 0)) {
			fprintf(stderr, "%s\n", err.msg);
			return 1;
		}
		strata_engine_close(e);
	}
	/* virtual, two tiers + prefetch */
	strata_engine_config_defaults(&c);
	c.mode = STRATA_ENGINE_VIRTUAL;
	c.place = "static:promote=all";
	c.prefetch = prefetch ? prefetch : "lookahead";
	if (evict)
		c.evict = evict;
	c.budget[0] = 200ull * L.bytes;
	c.budget[1] = 1200ull * L.bytes;
	if (strata_engine_open_model(&tiered, &c, &e, &err) || run("virtual/two-tier+prefetch", e, &s, steps / 4, 1, 1)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	strata_engine_close(e);

	if (!host)
		return 0;
	/* host movers on a small packed model */
	char tmpl[PATH_MAX];
	if (!dir && bench_tmp_path(tmpl, sizeof(tmpl), "bench-engine", 1))
		return 1;
	const char *d = dir ? dir : tmpl;
	struct strata_synth_config sc = { .seed = 1, .format = STRATA_SYNTH_TIERED, .codes = STRATA_SYNTH_CODES_RANDOM };
	strata_model_spec_parse("qwen3-30b-a3b:layers=2,experts=64", &sc.spec, &err);
	struct strata_store *st = NULL;
	int rc = 1;
	e = NULL;
	if ((!dir && strata_synth_write(&sc, d, NULL, NULL, &err)) || strata_store_open(d, &st, &err)) {
		fprintf(stderr, "store: %s\n", err.msg);
		goto out;
	}
	strata_engine_config_defaults(&c);
	c.use_gpu = 0;
	c.budget[0] = 256ull << 20; /* holds the whole model: all hits */
	c.budget[1] = 0;
	c.place = "cache";
	if (evict)
		c.evict = evict;
	if (strata_engine_open(st, &c, &e, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		goto out;
	}
	/* warm: touch every expert once */
	for (uint32_t l = 0; l < sc.spec.n_moe_layers; l++)
		for (uint32_t x = 0; x + sc.spec.top_k <= sc.spec.n_experts; x += sc.spec.top_k) {
			uint32_t ex[16];
			for (uint32_t j = 0; j < sc.spec.top_k; j++)
				ex[j] = x + j;
			strata_engine_acquire(e, l, ex, sc.spec.top_k, NULL, &err);
			strata_engine_release(e, 0, l, ex, sc.spec.top_k, &err);
		}
	rc = run("host/all-hit", e, &sc.spec, steps, 0, 0);
out:
	if (e)
		strata_engine_close(e);
	if (st)
		strata_store_close(st);
	if (!dir) {
		char cmd[PATH_MAX + 16];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
		if (system(cmd))
			fprintf(stderr, "could not remove %s\n", d);
	}
	if (rc)
		return 1;
	free(hot);
	free(tiers);
	return 0;
}
