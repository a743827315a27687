/*
 * The bounds of strata/bound.h: MIN and PFOO-L against brute-force optima on
 * tiny streams, the counterexamples (the pinned farthest-next-use
 * policy is not the optimum; the RAM tier's optimum over what reaches it),
 * and no policy, prefetching ones included, beating a bound in simulation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "strata/bound.h"
#include "strata/replay.h"
#include "strata/trace.h"

static uint64_t rng(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 33;
}

/* Fewest loads serving eid[0..n) with `slots` slots, starting from cache
 * (bitmask); bypass: a miss may be served without caching it. */
static uint64_t brute_loads(const uint32_t *eid, int n, int i, uint32_t cache, int slots, int bypass)
{
	if (i == n)
		return 0;
	uint32_t x = 1u << eid[i];
	if (cache & x)
		return brute_loads(eid, n, i + 1, cache, slots, bypass);
	uint64_t best = UINT64_MAX;
	if (bypass)
		best = 1 + brute_loads(eid, n, i + 1, cache, slots, bypass);
	if (__builtin_popcount(cache) < slots) {
		uint64_t v = 1 + brute_loads(eid, n, i + 1, cache | x, slots, bypass);
		best = v < best ? v : best;
	} else {
		for (uint32_t c = cache; c; c &= c - 1) {
			uint32_t out = c & -c;
			if (!slots)
				break;
			uint64_t v = 1 + brute_loads(eid, n, i + 1, (cache & ~out) | x, slots, bypass);
			best = v < best ? v : best;
		}
	}
	return best;
}

/* Fewest bytes loaded with cap bytes: after each access keep any subset of
 * (cache + the accessed expert) that fits. */
static uint64_t brute_bytes(const uint32_t *eid, const uint64_t *b, int n, int i, uint32_t cache, uint64_t cap,
			    uint32_t ids)
{
	if (i == n)
		return 0;
	uint32_t x = 1u << eid[i];
	uint64_t cost = cache & x ? 0 : b[eid[i]], best = UINT64_MAX;
	uint32_t avail = cache | x;
	for (uint32_t sub = avail;; sub = (sub - 1) & avail) {
		uint64_t sz = 0;
		for (uint32_t e = 0; e < ids; e++)
			if (sub >> e & 1)
				sz += b[e];
		if (sz <= cap) {
			uint64_t v = brute_bytes(eid, b, n, i + 1, sub, cap, ids);
			best = v < best ? v : best;
		}
		if (!sub)
			break;
	}
	return cost + best;
}

static void test_min_and_pfoo_against_brute_force(void **state)
{
	struct strata_error err = { 0 };
	uint64_t seed = 5;
	for (int round = 0; round < 400; round++) {
		uint32_t eid[10], ids = 2 + rng(&seed) % 4;
		uint64_t pos[10], bytes[8], unit[8];
		int n = 3 + rng(&seed) % 8;
		for (int i = 0; i < n; i++) {
			eid[i] = rng(&seed) % ids;
			pos[i] = (uint64_t)i;
		}
		for (uint32_t e = 0; e < ids; e++) {
			bytes[e] = 1 + rng(&seed) % 5;
			unit[e] = 1;
		}
		int slots = 1 + rng(&seed) % 3;
		struct strata_bound_stream s = { .eid = eid, .pos = pos, .n = (uint64_t)n, .n_ids = ids, .bytes = unit };
		uint64_t min, min1;
		assert_int_equal(strata_bound_min_loads(&s, slots, false, &min, &err), 0);
		assert_int_equal(strata_bound_min_loads(&s, slots + 1, false, &min1, &err), 0);
		/* MIN is the optimum of demand paging, and with a bypass slot a bound on it */
		assert_int_equal(min, brute_loads(eid, n, 0, 0, slots, 0));
		assert_true(min1 <= brute_loads(eid, n, 0, 0, slots, 1));
		/* PFOO-L never above the optimum in bytes (mixed sizes) */
		uint64_t cap = rng(&seed) % 10, pf, loads, tier;
		s.bytes = bytes;
		assert_int_equal(strata_bound_bytes(&s, cap, false, &pf, &err), 0);
		uint64_t opt = brute_bytes(eid, bytes, n, 0, 0, cap, ids);
		if (pf > opt)
			fail_msg("round %d: PFOO-L %llu > optimum %llu", round, (unsigned long long)pf,
				 (unsigned long long)opt);
		assert_int_equal(strata_bound_tier(&s, cap, false, &loads, &tier, &err), 0);
		assert_true(tier <= opt && tier >= pf);
		/* (e): from a given start, MIN is that start's optimum and PFOO-L
		 * stays below it; neither is below the warm (any start) bound */
		uint8_t init[8] = { 0 };
		uint32_t mask = 0;
		for (uint32_t e = 0; e < ids && __builtin_popcount(mask) < slots; e++)
			if (rng(&seed) % 2) {
				init[e] = 1;
				mask |= 1u << e;
			}
		s.bytes = unit;
		s.init = init;
		uint64_t from, warm;
		assert_int_equal(strata_bound_min_loads(&s, slots, false, &from, &err), 0);
		assert_int_equal(from, brute_loads(eid, n, 0, mask, slots, 0));
		assert_int_equal(strata_bound_min_loads(&s, slots, true, &warm, &err), 0);
		assert_true(warm <= from);
		uint32_t fit = 0; /* the start must fit the byte budget */
		uint64_t used = 0;
		for (uint32_t e = 0; e < ids; e++)
			if (init[e] && used + bytes[e] <= cap) {
				used += bytes[e];
				fit |= 1u << e;
			} else {
				init[e] = 0;
			}
		s.bytes = bytes;
		assert_int_equal(strata_bound_bytes(&s, cap, false, &pf, &err), 0);
		uint64_t opt_from = brute_bytes(eid, bytes, n, 0, fit, cap, ids);
		if (pf > opt_from)
			fail_msg("round %d: PFOO-L from a start %llu > optimum %llu", round, (unsigned long long)pf,
				 (unsigned long long)opt_from);
		assert_int_equal(strata_bound_bytes(&s, cap, true, &warm, &err), 0);
		assert_true(warm <= pf);
		/* (c)'s warm bytes: at most the optimum from every start that fits */
		uint64_t best = UINT64_MAX, wt;
		for (uint32_t st = 0; st < 1u << ids; st++) {
			uint64_t sz = 0;
			for (uint32_t e = 0; e < ids; e++)
				sz += st >> e & 1 ? bytes[e] : 0;
			if (sz <= cap) {
				uint64_t v = brute_bytes(eid, bytes, n, 0, st, cap, ids);
				best = v < best ? v : best;
			}
		}
		s.init = NULL;
		assert_int_equal(strata_bound_tier(&s, cap, true, &loads, &wt, &err), 0);
		if (wt > best)
			fail_msg("round %d: warm bound %llu > optimum from the best start %llu", round,
				 (unsigned long long)wt, (unsigned long long)best);
	}
}

/* A synthetic trace in the suite's folder: seed 3, requests interleaved,
 * predictions pred_depth layers ahead (80% right). */
static void gen_trace(char *path, size_t len, const char *name, uint32_t layers, uint32_t experts, uint32_t k,
		      uint32_t prompt, uint32_t gen, uint32_t pred_depth)
{
	struct strata_trace_gen_config g;
	struct strata_error err = { 0 };
	snprintf(path, len, "%s/%s", test_tmpdir, name);
	strata_trace_gen_defaults(&g);
	g.n_moe_layers = layers;
	g.n_experts = experts;
	g.top_k = k;
	g.requests = prompt ? 3 : 2;
	g.prompt_len = prompt;
	g.gen_len = gen;
	g.seed = 3;
	g.pred_depth = pred_depth;
	g.pred_topn = pred_depth ? k : 0;
	g.pred_accuracy = 0.8;
	g.interleave = prompt > 0;
	if (strata_trace_gen(&g, path, STRATA_TRACE_FMT_AUTO, &err))
		fail_msg("%s: %s", path, err.msg);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void sim(const char *model, const char *trace, const char *tiers, uint64_t vram, uint64_t ram,
		const char *place, const char *evict, const char *prefetch, struct strata_replay_result *r)
{
	struct strata_replay_config c;
	struct strata_error err = { 0 };
	strata_replay_config_defaults(&c);
	c.model_dir = model;
	c.trace_path = trace;
	c.tiers = tiers;
	c.engine.mode = STRATA_ENGINE_VIRTUAL;
	c.engine.budget[0] = vram;
	c.engine.budget[1] = ram;
	c.engine.place = place;
	c.engine.evict = evict;
	c.engine.prefetch = prefetch;
	if (strata_replay_run(&c, r, &err))
		fail_msg("%s %s %s: %s", place, evict, prefetch, err.msg);
}

/* Issue 16: one layer, 4 experts, top-2, 2 slots, [[3,2]],[[0,1]],[[1,2]]:
 * the optimum gets 2 hits (keep 2, stream 0), the pinned farthest-next-use
 * eviction 1 (it must evict 3 and 2 for 0 and 1). */
static void test_counterexample_pinning(void **state)
{
	struct strata_error err = { 0 };
	uint32_t eid[] = { 3, 2, 0, 1, 1, 2 };
	uint64_t pos[] = { 0, 0, 1, 1, 2, 2 }, unit[4] = { 1, 1, 1, 1 }, loads, bytes;
	struct strata_bound_stream s = { .eid = eid, .pos = pos, .n = 6, .n_ids = 4, .bytes = unit };
	assert_int_equal(strata_bound_min_loads(&s, 2, false, &loads, &err), 0);
	assert_int_equal(loads, 4); /* textbook MIN: 2 hits */
	assert_int_equal(strata_bound_tier(&s, 2, false, &loads, &bytes, &err), 0);
	assert_int_equal(loads, 4); /* with the streaming slot: still 2 hits at most */
	char path[512];
	snprintf(path, sizeof(path), "%s/cx.jsonl", test_tmpdir);
	write_file(path, "{\"strata_trace\":1,\"layers\":1,\"experts\":4,\"top_k\":2}\n"
			 "{\"layers\":[[3,2]]}\n{\"layers\":[[0,1]]}\n{\"layers\":[[1,2]]}\n");
	/* every expert hot: one size; the VRAM tier holds exactly two */
	struct strata_replay_result r;
	sim("tiny:layers=1,experts=4,top_k=2", path, "100,0,0", 0, 0, "cache", "lru", "none", &r);
	uint64_t two = 2 * (r.stats.bytes_nvme_vram / r.stats.moves_vram); /* every access moved: one size */
	sim("tiny:layers=1,experts=4,top_k=2", path, "100,0,0", two, 0, "cache", "farthest", "none", &r);
	assert_int_equal(r.stats.hits[0], 1);
	assert_int_equal(r.stats.moves_vram, 5);
	assert_int_equal(r.bound_moves_vram, 4); /* 6 accesses, at most 2 hits */
	assert_int_equal(r.bound_violations, 0);
}

/* Issue 16: farthest ranks the RAM tier by the whole trace's next use, so it
 * keeps what RAM never serves; the RAM optimum over the moves into VRAM the
 * run made (bound (d)) serves far more of them. */
static void test_ram_tier_optimum(void **state)
{
	char path[512];
	/* Mixtral's shape, decode only */
	gen_trace(path, sizeof(path), "mx.strace", 32, 8, 2, 0, 64, 0);
	struct strata_replay_result f, l;
	sim("mixtral-8x7b", path, NULL, 4ull << 30, 2ull << 30, "cache", "farthest", "none", &f);
	sim("mixtral-8x7b", path, NULL, 4ull << 30, 2ull << 30, "cache", "lru", "none", &l);
	print_message("farthest: %llu moves into vram, %llu nvme reads (ram hits %llu); the ram optimum over them "
		      "needs %llu\n", (unsigned long long)f.stats.moves_vram, (unsigned long long)f.stats.moves_nvme,
		      (unsigned long long)f.stats.hits[1], (unsigned long long)f.bound_ram_moves_nvme);
	assert_int_equal(f.bound_violations, 0);
	assert_int_equal(l.bound_violations, 0);
	assert_true(f.stats.moves_nvme >= f.bound_ram_moves_nvme);
	/* RAM could serve over a third of the moves into VRAM; farthest serves almost none */
	assert_true((f.stats.moves_vram - f.bound_ram_moves_nvme) * 3 > f.stats.moves_vram);
	assert_true(f.stats.hits[1] * 20 < f.stats.moves_vram - f.bound_ram_moves_nvme);
}

/* Random configurations, prefetching ones included: no counter beats its
 * bound, and decode tok/s never passes the time bound on the virtual clock. */
static void test_no_policy_beats_the_bounds(void **state)
{
	char path[512];
	/* prefill and decode interleaved: many decode segments, each with its warm start */
	gen_trace(path, sizeof(path), "q.strace", 4, 32, 4, 8, 48, 2);
	const char *places[] = { "cache", "static", "static:promote=all", "static:promote=vram", "cache:keep=vram",
				 "future" };
	const char *evicts[] = { "lru", "lfu", "farthest", "fifo", "lfu-decay", "random", "farthest:backed=1" };
	const char *pfs[] = { "none", "lookahead", "lookahead:adaptive=0:depth=2", "oracle:depth=2",
			      "oracle:accuracy=0.5", "history", "lookahead:stage=3:depth=1:adaptive=0",
			      "lookahead:budget_nvme=4M:keep_unused=1:adaptive=0", "oracle:depth=1:stage=12" };
	uint64_t seed = 11;
	int tighter = 0;
	for (int i = 0; i < 80; i++) {
		const char *pl = places[rng(&seed) % 6], *ev = evicts[rng(&seed) % 7], *pf = pfs[rng(&seed) % 9];
		uint64_t v = (8 + rng(&seed) % 64) << 20, ram = (rng(&seed) % 96) << 20;
		struct strata_replay_result r;
		sim("qwen3-30b-a3b:layers=4,experts=32,top_k=4", path, NULL, v, ram, pl, ev, pf, &r);
		if (r.bound_violations || r.stats.moves_vram < r.bound_moves_vram ||
		    r.decode_tok_s > r.bound_tok_s * (1 + 1e-9) || r.decode_tok_s > r.bound_start_tok_s * (1 + 1e-9) ||
		    r.bound_start_tok_s > r.bound_tok_s * (1 + 1e-9))
			fail_msg("%s vram %llu ram %llu: %llu violations (moves %llu >= %llu? tok/s %.2f <= %.2f <= %.2f?)",
				 r.name, (unsigned long long)v, (unsigned long long)ram,
				 (unsigned long long)r.bound_violations, (unsigned long long)r.stats.moves_vram,
				 (unsigned long long)r.bound_moves_vram, r.decode_tok_s, r.bound_start_tok_s, r.bound_tok_s);
		tighter += r.bound_start_tok_s < r.bound_tok_s * (1 - 1e-6);
	}
	/* the run's own start is not the best one in most of them */
	assert_true(tighter > 40);
}

/* The time bounds read the run's own cost model: two models that differ in
 * the NVMe link only give the same bound where the computation bounds the
 * time (released-config's two machines) and bounds in the links' ratio
 * where the NVMe bytes do; the start-state bound (e) charges the first
 * segment's compulsory reads, so it sees the slower disk. */
static void test_bound_reads_the_runs_cost(void **state)
{
	char path[512];
	gen_trace(path, sizeof(path), "c.strace", 4, 32, 4, 0, 48, 0);
	struct strata_replay_result r[2];
	for (int k = 0; k < 2; k++) {
		struct strata_replay_config c;
		struct strata_error err = { 0 };
		strata_replay_config_defaults(&c);
		c.model_dir = "qwen3-30b-a3b:layers=4,experts=32,top_k=4";
		c.trace_path = path;
		c.engine.mode = STRATA_ENGINE_VIRTUAL;
		c.engine.place = "cache";
		c.engine.budget[0] = 8 << 20;
		c.engine.budget[1] = 8 << 20;
		c.engine.cost.nvme_gbps = k ? 1.5 : 12;
		if (strata_replay_run(&c, &r[k], &err))
			fail_msg("%s", err.msg);
		assert_int_equal(r[k].bound_violations, 0);
	}
	print_message("nvme 12 vs 1.5 GB/s: bound %.1f vs %.1f tok/s, from the run's start %.1f vs %.1f, runs %.1f vs %.1f\n",
		      r[0].bound_tok_s, r[1].bound_tok_s, r[0].bound_start_tok_s, r[1].bound_start_tok_s,
		      r[0].decode_tok_s, r[1].decode_tok_s);
	/* the same accesses, 8x slower disk: the NVMe-bound time bounds scale */
	assert_true(r[1].bound_tok_s < r[0].bound_tok_s * 0.5);
	assert_true(r[1].bound_start_tok_s < r[0].bound_start_tok_s * 0.5);
	assert_true(r[1].decode_tok_s < r[0].decode_tok_s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_min_and_pfoo_against_brute_force),
		cmocka_unit_test(test_counterexample_pinning),
		cmocka_unit_test(test_ram_tier_optimum),
		cmocka_unit_test(test_no_policy_beats_the_bounds),
		cmocka_unit_test(test_bound_reads_the_runs_cost),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
