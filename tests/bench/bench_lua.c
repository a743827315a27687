/*
 * Lua policy cost: nanoseconds per expert access of the Lua policies
 * (the scripts in policies/lua/) next to their C twins, replayed through the policy
 * harness on synthetic traces of real model shapes, with the cache at a
 * quarter of the experts so that most misses evict.
 *
 * Ceilings measured in the same run: the harness floor (a C policy that does
 * nothing: every expert fits) and the C policy itself.  Each row prints
 * ns/access, its ratio to the floor and to the C twin, and the hit rate (the
 * C and Lua rows must show the same: they make the same decisions).  The
 * issue's budget: engine bookkeeping + Lua policy under 5 us per access.
 *
 * Part two: the real engine (virtual movers, a Kimi-shaped model of 8 MoE
 * layers that is never packed) driven like tests/bench/bench_engine.c, with
 * the C policy and its Lua twin: the engine's bookkeeping_ns per access (its
 * own time outside the movers, policy calls included) against the issue's
 * 5000 ns ceiling for Lua policies.
 *
 *   build/release/bench/bench_lua [--part harness|engine] [tokens] [reps] [lua dir] [engine steps]
 *   (run from the repository root, or give the folder of the scripts)
 *
 * Each part is its own table (different columns): one run prints one part's
 * CSV on stdout (default: harness), so the output is one table pandas reads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant.h"
#include "strata/csv.h"
#include "strata/engine.h"
#include "strata/policy.h"
#include "strata/harness.h"
#include "bench_common.h"
#include "strata/synth.h"
#include "strata/tier_assign.h"

/* The C twin of policies/lua/lookahead.lua: the built-in without its
 * adaptation, staging and RAM-landing options (the script's header and
 * test_lua's test_lua_lookahead_and_lfu_match_c say the same); with the
 * built-in's defaults the two are different policies and their counters
 * differ. */
#define STRATA_BENCH_LOOKAHEAD_TWIN "lookahead:adaptive=0:keep_unused=1:stage=0:via_ram=0"




struct pair {
	const char *evict_c, *evict_lua;       /* NULL lua: the C spec for both */
	const char *prefetch_c, *prefetch_lua;
	uint64_t max_ids;                      /* skip on larger models; 0: run on all */
};


/* ---- part two: the engine ---- */



static int engine_run(const char *label, const struct strata_engine_model *m, struct strata_engine_config *c,
		      uint32_t steps, int skew, int hints)
{
	struct strata_error err = { 0 };
	struct strata_engine *e;
	const struct strata_model_spec *s = m->spec;
	bench_rng = 99;
	if (strata_engine_open_model(m, c, &e, &err)) {
		fprintf(stderr, "bench_lua: %s: %s\n", label, err.msg);
		return 1;
	}
	uint64_t b0 = strata_engine_stats(e)->bookkeeping_ns, a0 = strata_engine_stats(e)->accesses;
	uint64_t t0 = cpu_ns();
	int rc = bench_drive(e, s, steps, skew, hints, &err);
	if (rc) {
		fprintf(stderr, "bench_lua: %s: %s\n", label, err.msg);
		strata_engine_close(e);
		return 1;
	}
	double cpu = (double)(cpu_ns() - t0);
	const struct strata_engine_stats *st = strata_engine_stats(e);
	double acc = (double)(st->accesses - a0);
	double bk = (double)(st->bookkeeping_ns - b0) / acc;
	/* ratio: the driver loop's CPU time per access (engine + policy +
	 * driver; an upper bound on the engine's share) to the 5 us ceiling.
	 * bookkeeping_ns is the engine's own wall-clock count: on a shared
	 * machine it includes time other processes held the core. */
	printf("%s,", label);
	strata_csv_write_field(stdout, strata_engine_name(e)); /* "place=...,evict=...": quoted */
	printf(",%.0f,%.1f,%.1f,%.4f,5000,%.3f\n", acc, bk, cpu / acc,
	       (double)st->hits[0] / (double)st->accesses, cpu / acc / 5000.0);
	fflush(stdout);
	strata_engine_close(e);
	return 0;
}

static int engine_part(uint32_t steps, const char *dir)
{
	struct strata_error err = { 0 };
	struct strata_model_spec s;
	if (strata_model_spec_parse("kimi-k3.1:layers=8", &s, &err)) {
		fprintf(stderr, "bench_lua: %s\n", err.msg);
		return 1;
	}
	uint32_t n = strata_model_total_experts(&s);
	uint8_t *tiers = malloc(n);
	double frac[3] = { 0.15, 0.30, 0.55 };
	strata_tier_assign_seeded(&s, frac, 1, tiers, NULL);
	struct strata_engine_model tiered = { .spec = &s, .tier_table = tiers };
	struct strata_engine_model cold = { .spec = &s, .tier_table = NULL };
	struct strata_expert_layout L;
	strata_expert_layout(STRATA_FMT_HOT, s.hidden, s.inter, &L);
	char lru[4096], lfu[4096], look[4096];
	snprintf(lru, sizeof(lru), "%s/lru.lua", dir);
	snprintf(lfu, sizeof(lfu), "%s/lfu.lua", dir);
	snprintf(look, sizeof(look), "%s/lookahead.lua", dir);
	printf("workload,engine,accesses,bookkeeping_ns_per_access,cpu_ns_per_access,vram_hit_rate,ceiling_ns,ratio\n");
	const char *evicts[] = { "lru", lru, "lfu", lfu };
	int rc = 0;
	for (int k = 0; k < 4 && !rc; k++) {
		struct strata_engine_config c;
		strata_engine_config_defaults(&c);
		c.mode = STRATA_ENGINE_VIRTUAL;
		c.place = "cache";
		c.evict = evicts[k];
		c.budget[0] = 2ull * s.top_k * L.bytes;
		c.budget[1] = 0;
		rc = engine_run("virtual/miss-heavy", &cold, &c, steps, 0, 0);
	}
	const char *pre[][2] = { { "lru", STRATA_BENCH_LOOKAHEAD_TWIN }, { lru, look } };
	for (int k = 0; k < 2 && !rc; k++) {
		struct strata_engine_config c;
		strata_engine_config_defaults(&c);
		c.mode = STRATA_ENGINE_VIRTUAL;
		c.place = "static:promote=all";
		c.evict = pre[k][0];
		c.prefetch = pre[k][1];
		c.budget[0] = (uint64_t)n / 8 * L.bytes;
		c.budget[1] = (uint64_t)n / 3 * L.bytes;
		rc = engine_run("virtual/two-tier+prefetch", &tiered, &c, steps / 4, 1, 1);
	}
	free(tiers);
	return rc;
}

static int usage(FILE *f, int rc)
{
	fprintf(f, "usage: bench_lua [--part harness|engine] [tokens=128] [reps=3] [lua dir=policies/lua] "
		   "[engine steps=20000]\n"
		   "  --part harness  Lua policies vs their C twins in the policy harness (default)\n"
		   "  --part engine   the engine (virtual movers) with C and Lua policies\n"
		   "One CSV table on stdout per run; run from the repository root or give the scripts' folder.\n");
	return rc;
}

int main(int argc, char **argv)
{
	int engine = 0;
	while (argc > 1 && !strncmp(argv[1], "--", 2)) {
		if (!strcmp(argv[1], "--help"))
			return usage(stdout, 0);
		if (strcmp(argv[1], "--part") || argc < 3 || (strcmp(argv[2], "harness") && strcmp(argv[2], "engine"))) {
			fprintf(stderr, "bench_lua: unknown option or part: %s%s%s\n", argv[1], argc > 2 ? " " : "",
				argc > 2 ? argv[2] : "");
			return usage(stderr, 2);
		}
		engine = !strcmp(argv[2], "engine");
		argc -= 2;
		argv += 2;
	}
	uint64_t tokens = argc > 1 ? strtoull(argv[1], NULL, 10) : 128;
	int reps = argc > 2 ? atoi(argv[2]) : 3;
	const char *dir = argc > 3 ? argv[3] : "policies/lua";
	if (engine) {
		setenv("STRATA_PROGRESS", "0", 0);
		return engine_part(argc > 4 ? (uint32_t)strtoul(argv[4], NULL, 10) : 20000, dir);
	}
	char lru[4096], lfu[4096], look[4096];
	snprintf(lru, sizeof(lru), "%s/lru.lua", dir);
	snprintf(lfu, sizeof(lfu), "%s/lfu.lua", dir);
	snprintf(look, sizeof(look), "%s/lookahead.lua:depth=2", dir);
	const struct pair pairs[] = {
		{ "lru", lru, "none", "none", 0 },
		{ "lru", "lru", STRATA_BENCH_LOOKAHEAD_TWIN ":depth=2", look, 0 },
		{ "lru", lru, STRATA_BENCH_LOOKAHEAD_TWIN ":depth=2", look, 0 },
		{ "lfu", lfu, "none", "none", 0 },
	};
	static const char *models[] = { "qwen3-30b-a3b", "deepseek-v3", "kimi-k3.1" };
	printf("model,policy,accesses,ns_per_access,ratio_to_floor,ratio_to_c,hit_rate\n");
	for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
		struct strata_harness_trace *t;
		struct strata_harness_config c;
		struct strata_harness_counters k, kc;
		uint64_t n_ids;
		double floor_ns = bench_floor("bench_lua", models[m], tokens, reps, &t, &c, &k, &n_ids);
		printf("%s,floor,%llu,%.1f,1.00,,%.4f\n", models[m], (unsigned long long)t->n_accesses, floor_ns,
		       (double)k.hits / (double)k.accesses);
		for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
			const struct pair *p = &pairs[i];
			if (p->max_ids && n_ids > p->max_ids)
				continue;
			c.evict = p->evict_c;
			c.prefetch = p->prefetch_c;
			double c_ns = measure_harness("bench_lua", t, &c, reps, &kc);
			c.evict = p->evict_lua;
			c.prefetch = p->prefetch_lua;
			double l_ns = measure_harness("bench_lua", t, &c, reps, &k);
			if (memcmp(&k, &kc, sizeof(k)))
				fprintf(stderr, "bench_lua: %s: C and Lua counters differ\n", models[m]);
			const char *pf_c = strcmp(p->prefetch_c, "none") ? p->prefetch_c : NULL;
			const char *base_l = strrchr(p->evict_lua, '/') ? strrchr(p->evict_lua, '/') + 1 : p->evict_lua;
			const char *pf_l = strcmp(p->prefetch_lua, "none")
						   ? (strrchr(p->prefetch_lua, '/') ? strrchr(p->prefetch_lua, '/') + 1
										    : p->prefetch_lua)
						   : NULL;
			printf("%s,%s%s%s,%llu,%.1f,%.2f,1.00,%.4f\n", models[m], p->evict_c, pf_c ? "+" : "",
			       pf_c ? pf_c : "", (unsigned long long)t->n_accesses, c_ns, c_ns / floor_ns,
			       (double)kc.hits / (double)kc.accesses);
			printf("%s,%s%s%s,%llu,%.1f,%.2f,%.2f,%.4f\n", models[m], base_l, pf_l ? "+" : "",
			       pf_l ? pf_l : "", (unsigned long long)t->n_accesses, l_ns, l_ns / floor_ns,
			       l_ns / c_ns, (double)k.hits / (double)k.accesses);
			fflush(stdout);
		}
		strata_harness_trace_free(t);
	}
	return 0;
}
