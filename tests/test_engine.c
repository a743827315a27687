/* The engine: same decisions as the policy harness (one tier), virtual and
 * real runs count the same, budgets hold under random workloads, pinned
 * experts are never evicted, bad policies and budgets fail with named errors,
 * the bytes handed out are the store's, an I/O error names the shard. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant.h"
#include "strata/engine.h"
#include "strata/gpu.h"
#include "strata/harness.h"
#include "strata/store.h"
#include "strata/synth.h"
#include "strata/tier_assign.h"
#include "strata/util.h"
#include "testutil.h"

static char *dir_u, *dir_t; /* uniform (bf16) and tiered (mixed sizes) models */
static struct strata_store *st_u, *st_t;

/* The bytes of the store's largest expert (budgets in the tests are multiples of it). */
static uint64_t largest_expert(struct strata_store *st)
{
	const struct strata_model_spec *sp = strata_store_spec(st);
	uint64_t maxb = 0;
	for (uint32_t i = 0; i < strata_model_total_experts(sp); i++) {
		uint64_t b = strata_store_expert(st, i / sp->n_experts, i % sp->n_experts)->bytes;
		maxb = b > maxb ? b : maxb;
	}
	return maxb;
}

static int write_model(const char *spec, int format, const char *dir, struct strata_store **out)
{
	struct strata_error err = { 0 };
	struct strata_synth_config c = { .seed = 5, .format = format, .codes = STRATA_SYNTH_CODES_RANDOM };
	if (strata_model_spec_parse(spec, &c.spec, &err) || strata_synth_write(&c, dir, NULL, NULL, &err) ||
	    strata_store_open(dir, out, &err)) {
		fprintf(stderr, "setup: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static int setup(void **state)
{
	setenv("STRATA_PROGRESS", "0", 1);
	dir_u = test_mkdtemp();
	dir_t = test_mkdtemp();
	if (write_model("custom:layers=4,experts=16,top_k=4,hidden=256,inter=128", STRATA_SYNTH_BF16, dir_u, &st_u))
		return -1;
	return write_model("custom:layers=4,experts=32,top_k=4,hidden=512,inter=512", STRATA_SYNTH_TIERED, dir_t,
			   &st_t);
}

static int teardown(void **state)
{
	strata_store_close(st_u);
	strata_store_close(st_t);
	test_rmdir(dir_u);
	test_rmdir(dir_t);
	free(dir_u);
	free(dir_t);
	return 0;
}

static uint64_t ebytes(struct strata_store *s) { return strata_store_expert(s, 0, 0)->bytes; }

/* Drive the engine over a harness trace, like replay does; drive_polls:
 * strata_engine_poll calls between acquire and release, as a GPU replay
 * polls while its kernels run. */
static int drive_polls;
static int drive(struct strata_engine *e, const struct strata_harness_trace *t, struct strata_store *s,
		 int check_data, struct strata_error *err)
{
	const struct strata_model_spec *sp = strata_store_spec(s);
	const void *ptrs[64];
	uint8_t *buf = check_data ? strata_aligned_alloc(4096, 4 << 20) : NULL;
	for (uint32_t i = 0; i < t->n_steps; i++) {
		const struct strata_harness_step *x = &t->steps[i];
		int rc = strata_engine_begin_step(e, x->token, x->layer, 1, x->experts, x->n, x->hints, x->n_hints, err);
		if (!rc)
			rc = strata_engine_acquire(e, x->layer, x->experts, x->n, ptrs, err);
		if (rc) {
			free(buf);
			return rc;
		}
		if (check_data) {
			for (uint32_t j = 0; j < x->n; j++) {
				const struct strata_extent *ex = strata_store_expert(s, x->layer, x->experts[j]);
				assert_int_equal(strata_store_read_extent(s, ex, buf, false, false, err), 0);
				assert_non_null(ptrs[j]);
				if (memcmp(ptrs[j], buf, ex->payload))
					fail_msg("step %u: expert %u/%u (%llu bytes) differs from the store; hits %llu/%llu/%llu",
						 i, x->layer, x->experts[j], (unsigned long long)ex->bytes,
						 (unsigned long long)strata_engine_stats(e)->hits[0],
						 (unsigned long long)strata_engine_stats(e)->hits[1],
						 (unsigned long long)strata_engine_stats(e)->hits[2]);
			}
		}
		for (int k = 0; k < drive_polls && !rc; k++)
			rc = strata_engine_poll(e, err);
		if (rc || (rc = strata_engine_release(e, x->token, x->layer, x->experts, x->n, err))) {
			free(buf);
			return rc;
		}
		(void)sp;
	}
	free(buf);
	return STRATA_OK;
}

struct combo {
	const char *place, *evict, *prefetch;
};

static const struct combo combos[] = {
	{ "cache", "lru", "none" },
	{ "cache", "lfu", "lookahead" },
	{ "cache", "farthest", "none" },
	{ "cache", "lru", "oracle" },
	{ "static", "lru", "none" },
	{ "static:promote=vram", "lfu-decay", "history" },
	{ "cache", "random", "lookahead:depth=2" },
	{ "cache", "lru", "promoe:inflight=1" },
	{ "cache", "lfu", "promoe:stride=3:preempt=0" },
	{ "cache", "lru", "expertflow:layer_us=20" },
};

/* With the RAM tier off, the engine is the harness's one-tier cache: every
 * counter must agree exactly, in virtual and in real (host) mode. */
static void test_matches_harness(void **state)
{
	struct strata_error err = { 0 };
	const struct strata_model_spec *sp = strata_store_spec(st_u);
	struct strata_harness_trace *t;
	assert_int_equal(strata_harness_trace_gen(sp, 40, 3, &t, &err), 0);
	uint64_t eb = ebytes(st_u);
	for (size_t c = 0; c < sizeof(combos) / sizeof(combos[0]); c++) {
		struct strata_harness_config hc;
		strata_harness_config_defaults(&hc);
		hc.budget = 12 * eb;
		hc.expert_bytes = eb;
		hc.tier_table = strata_store_tier_table(st_u);
		hc.place = combos[c].place;
		hc.evict = combos[c].evict;
		hc.prefetch = combos[c].prefetch;
		hc.seed = 9;
		struct strata_harness_counters k;
		assert_int_equal(strata_harness_run(t, &hc, &k, &err), 0);
		for (int mode = 0; mode < 2; mode++) {
			struct strata_engine_config ec;
			strata_engine_config_defaults(&ec);
			ec.mode = mode;
			ec.budget[0] = 12 * eb;
			ec.budget[1] = 0;
			ec.use_gpu = 0;
			ec.place = hc.place;
			ec.evict = hc.evict;
			ec.prefetch = hc.prefetch;
			ec.seed = 9;
			ec.future = strata_harness_trace_future(t);
			struct strata_engine *e;
			assert_int_equal(strata_engine_open(st_u, &ec, &e, &err), 0);
			if (drive(e, t, st_u, mode == STRATA_ENGINE_REAL, &err))
				fail_msg("%s: %s", strata_engine_name(e), err.msg);
			const struct strata_engine_stats *s = strata_engine_stats(e);
			print_message("%-55s %s hits %llu/%llu evictions %llu prefetch %llu used %llu preempted %llu\n",
				      strata_engine_name(e), mode ? "virtual" : "real   ",
				      (unsigned long long)s->hits[0], (unsigned long long)s->accesses,
				      (unsigned long long)s->evictions[0], (unsigned long long)s->prefetch_issued,
				      (unsigned long long)s->prefetch_used, (unsigned long long)s->prefetch_preempted);
			assert_true(s->accesses == k.accesses);
			assert_true(s->hits[0] == k.hits);
			assert_true(s->hits[1] == 0 && s->hits[2] == k.misses);
			assert_true(s->evictions[0] == k.evictions);
			assert_true(s->streamed == k.bypasses);
			assert_true(s->preloaded[0] == k.preloaded);
			assert_true(s->prefetch_issued == k.prefetch_issued);
			assert_true(s->prefetch_used == k.prefetch_used);
			assert_true(s->prefetch_wasted == k.prefetch_wasted);
			assert_true(s->prefetch_redundant == k.prefetch_redundant);
			assert_true(s->prefetch_dropped == k.prefetch_dropped);
			assert_true(s->prefetch_promoted == k.prefetch_promoted);
			assert_true(s->prefetch_cancelled == k.prefetch_cancelled);
			assert_true(s->prefetch_preempted == k.prefetch_preempted);
			strata_engine_close(e);
		}
	}
	strata_harness_trace_free(t);
}

/* Two tiers, mixed extent sizes, random budgets and policies: the same
 * decisions in virtual and real mode, budgets never exceeded, the bytes
 * handed out are the store's, and a virtual rerun is bit-identical. */
static void test_virtual_equals_real_random(void **state)
{
	struct strata_error err = { 0 };
	const struct strata_model_spec *sp = strata_store_spec(st_t);
	struct strata_harness_trace *t;
	assert_int_equal(strata_harness_trace_gen(sp, 24, 11, &t, &err), 0);
	const uint64_t maxb = largest_expert(st_t);
	const char *places[] = { "static", "static:promote=all", "cache", "static:promote=ram" };
	const char *evicts[] = { "lru", "lfu", "farthest", "fifo" };
	const char *pfs[] = { "none", "lookahead", "lookahead:tier=ram", "history" };
	const int movers[] = { STRATA_NVME_URING, STRATA_NVME_PREAD, STRATA_NVME_MMAP };
	uint64_t seed = 77, moved = 0, relocated = 0;
	for (int round = 0; round < 8; round++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		struct strata_engine_config ec;
		strata_engine_config_defaults(&ec);
		ec.use_gpu = 0;
		ec.budget[0] = maxb * (4 + (seed >> 40) % 20);
		ec.budget[1] = maxb * ((seed >> 20) % 30);
		ec.place = places[(seed >> 12) % 4];
		ec.evict = evicts[(seed >> 16) % 4];
		ec.prefetch = pfs[(seed >> 24) % 4];
		ec.nvme_mover = movers[round % 3];
		ec.future = strata_harness_trace_future(t);
		ec.verify = round % 2;
		struct strata_engine_stats s[3];
		for (int run = 0; run < 3; run++) {
			ec.mode = run == 0 ? STRATA_ENGINE_REAL : STRATA_ENGINE_VIRTUAL;
			struct strata_engine *e;
			assert_int_equal(strata_engine_open(st_t, &ec, &e, &err), 0);
			if (getenv("DBG"))
				print_message("round %d run %d: %s mover %d budgets %llu %llu\n", round, run,
					      strata_engine_name(e), ec.nvme_mover, (unsigned long long)ec.budget[0],
					      (unsigned long long)ec.budget[1]);
			if (drive(e, t, st_t, run == 0, &err))
				fail_msg("%s: %s", strata_engine_name(e), err.msg);
			if (getenv("DBG"))
				print_message("round %d run %d: %s mover %d budgets %llu %llu\n", round, run,
					      strata_engine_name(e), ec.nvme_mover, (unsigned long long)ec.budget[0],
					      (unsigned long long)ec.budget[1]);
			s[run] = *strata_engine_stats(e);
			assert_true(s[run].used[0] <= ec.budget[0] && s[run].used[1] <= ec.budget[1]);
			if (run == 0)
				print_message("%-60s vram %4llu ram %4llu nvme %4llu ev %llu/%llu pf %llu/%llu\n",
					      strata_engine_name(e), (unsigned long long)s[0].hits[0],
					      (unsigned long long)s[0].hits[1], (unsigned long long)s[0].hits[2],
					      (unsigned long long)s[0].evictions[0], (unsigned long long)s[0].evictions[1],
					      (unsigned long long)s[0].prefetch_issued,
					      (unsigned long long)s[0].prefetch_used);
			strata_engine_close(e);
		}
		for (int run = 1; run < 3; run++) {
			assert_memory_equal(s[0].hits, s[run].hits, sizeof(s[0].hits));
			assert_memory_equal(s[0].evictions, s[run].evictions, sizeof(s[0].evictions));
			assert_true(s[0].bytes_nvme_ram == s[run].bytes_nvme_ram);
			assert_true(s[0].bytes_ram_vram == s[run].bytes_ram_vram);
			assert_true(s[0].bytes_nvme_vram == s[run].bytes_nvme_vram);
			assert_true(s[0].prefetch_issued == s[run].prefetch_issued);
			assert_true(s[0].prefetch_used == s[run].prefetch_used);
			assert_true(s[0].prefetch_wasted == s[run].prefetch_wasted);
			assert_true(s[0].streamed == s[run].streamed);
			assert_memory_equal(s[0].compactions, s[run].compactions, sizeof(s[0].compactions));
			assert_memory_equal(s[0].compact_bytes, s[run].compact_bytes, sizeof(s[0].compact_bytes));
		}
		moved += s[0].compact_bytes[0] + s[0].compact_bytes[1];
		relocated += s[0].compact_relocated;
		/* determinism of the virtual clock itself */
		assert_true(s[1].clock_ns == s[2].clock_ns && s[1].stall_ns == s[2].stall_ns);
	}
	/* extents were moved to make room, and the real runs read them back
	 * intact where they went (drive compares every acquired pointer) */
	print_message("bytes moved to make room: %llu; extents moved with their read in flight: %llu\n",
		      (unsigned long long)moved, (unsigned long long)relocated);
	assert_true(moved > 0);
	strata_harness_trace_free(t);
}

/* Budgets are checked after every acquire, with pins held. */
static void test_budget_never_exceeded(void **state)
{
	struct strata_error err = { 0 };
	const struct strata_model_spec *sp = strata_store_spec(st_t);
	const uint64_t maxb = largest_expert(st_t);
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	ec.use_gpu = 0;
	ec.mode = STRATA_ENGINE_VIRTUAL;
	ec.budget[0] = maxb * 5 + 4096 * 3;
	ec.budget[1] = maxb * 7 + 4096;
	ec.place = "cache";
	ec.prefetch = "lookahead:tier=ram";
	struct strata_engine *e;
	assert_int_equal(strata_engine_open(st_t, &ec, &e, &err), 0);
	uint64_t s = 3;
	for (int step = 0; step < 3000; step++) {
		uint32_t ex[4], layer = (uint32_t)(step % sp->n_moe_layers);
		for (int j = 0; j < 4; j++) {
			int dup;
			do {
				s = s * 6364136223846793005ull + 1442695040888963407ull;
				ex[j] = (uint32_t)((s >> 33) % (j % 2 ? 6 : sp->n_experts));
				dup = 0;
				for (int k = 0; k < j; k++)
					dup |= ex[k] == ex[j];
			} while (dup);
		}
		struct strata_hint h[2] = { { (layer + 1) % sp->n_moe_layers, ex[0], 1 }, { layer, ex[1], 1 } };
		assert_int_equal(strata_engine_begin_step(e, (uint64_t)step, layer, 1, ex, 4, h, 2, &err), 0);
		assert_int_equal(strata_engine_acquire(e, layer, ex, 4, NULL, &err), 0);
		const struct strata_engine_stats *st = strata_engine_stats(e);
		assert_true(st->used[0] <= ec.budget[0]);
		assert_true(st->used[1] <= ec.budget[1]);
		assert_int_equal(strata_engine_release(e, (uint64_t)step, layer, ex, 4, &err), 0);
	}
	const struct strata_engine_stats *st = strata_engine_stats(e);
	print_message("evictions %llu/%llu, streamed for fragmentation %llu of %llu accesses\n",
		      (unsigned long long)st->evictions[0], (unsigned long long)st->evictions[1],
		      (unsigned long long)st->admit_fallback, (unsigned long long)st->accesses);
	assert_true(st->evictions[0] > 100 && st->evictions[1] > 100);
	assert_true(st->admit_fallback * 20 < st->accesses);
	strata_engine_close(e);
}

/* ---- deliberately broken policies ---------------------------------------- */

struct bad_priv {
	uint8_t mode; /* 0: victim = a pinned expert; 1: a non-resident one */
};
static int64_t bad_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	for (uint32_t i = 0; i < p->env->n_ids; i++)
		if (((struct bad_priv *)p->priv)->mode == 0 ? r->pinned[i] && r->resident[i] : !r->resident[i])
			return i;
	return STRATA_NO_EXPERT;
}
static int bad_init_pinned(struct strata_policy *p, struct strata_error *e)
{
	((struct bad_priv *)p->priv)->mode = 0;
	return 0;
}
static int bad_init_absent(struct strata_policy *p, struct strata_error *e)
{
	((struct bad_priv *)p->priv)->mode = 1;
	return 0;
}
static void nop_insert(struct strata_policy *p, uint32_t eid, uint64_t now) {}
static void nop_remove(struct strata_policy *p, uint32_t eid) {}
static const struct strata_evict_ops evict_pinned = {
	.name = "evict-pinned", .version = STRATA_POLICY_ABI, .priv_size = sizeof(struct bad_priv),
	.init = bad_init_pinned, .on_insert = nop_insert, .on_access = nop_insert, .on_remove = nop_remove,
	.victim = bad_victim,
};
static const struct strata_evict_ops evict_absent = {
	.name = "evict-absent", .version = STRATA_POLICY_ABI, .priv_size = sizeof(struct bad_priv),
	.init = bad_init_absent, .on_insert = nop_insert, .on_access = nop_insert, .on_remove = nop_remove,
	.victim = bad_victim,
};

/* A prefetcher that asks for every expert of the step into RAM, and the odd
 * ones into VRAM too: RAM -> VRAM copies and scratch streams then depend on
 * NVMe -> RAM reads still in flight (chained jobs). */
static uint32_t chain_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
			       struct strata_prefetch_req *out, uint32_t max)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < ctx->n_experts && n + 2 <= max; i++) {
		uint32_t eid = strata_eid(p->env->spec, ctx->layer, ctx->experts[i]);
		out[n++] = (struct strata_prefetch_req){ eid, STRATA_TIER_RAM };
		if (ctx->experts[i] % 2)
			out[n++] = (struct strata_prefetch_req){ eid, STRATA_TIER_VRAM };
	}
	return n;
}
static const struct strata_prefetch_ops prefetch_chain = {
	.name = "chain", .version = STRATA_POLICY_ABI, .on_layer = chain_on_layer,
};

static void test_chained_moves(void **state)
{
	struct strata_error err = { 0 };
	const struct strata_model_spec *sp = strata_store_spec(st_t);
	struct strata_harness_trace *t;
	assert_int_equal(strata_harness_trace_gen(sp, 12, 5, &t, &err), 0);
	const uint64_t maxb = largest_expert(st_t);
	const int movers[] = { STRATA_NVME_URING, STRATA_NVME_PREAD };
	struct strata_engine_stats s[3];
	for (int run = 0; run < 3; run++) {
		struct strata_engine_config ec;
		strata_engine_config_defaults(&ec);
		ec.use_gpu = 0;
		ec.mode = run == 2 ? STRATA_ENGINE_VIRTUAL : STRATA_ENGINE_REAL;
		ec.nvme_mover = movers[run % 2];
		ec.budget[0] = 8 * maxb;
		ec.budget[1] = 10 * maxb;
		ec.place = "static";
		ec.prefetch_ops = &prefetch_chain;
		struct strata_engine *e;
		assert_int_equal(strata_engine_open(st_t, &ec, &e, &err), 0);
		if (drive(e, t, st_t, run < 2, &err))
			fail_msg("%s: %s", strata_engine_name(e), err.msg);
		s[run] = *strata_engine_stats(e);
		strata_engine_close(e);
	}
	assert_true(s[0].prefetch_used > 0 && s[0].streamed > 0 && s[0].hits[1] > 0);
	for (int run = 1; run < 3; run++) {
		assert_memory_equal(s[0].hits, s[run].hits, sizeof(s[0].hits));
		assert_true(s[0].prefetch_used == s[run].prefetch_used && s[0].streamed == s[run].streamed);
	}
	strata_harness_trace_free(t);
}

/* A prefetcher that asks for expert 3 of layer 1 into RAM at every step,
 * with ram_holes_only (holes) or without, and records the RAM hole the engine
 * published before each on_layer. */
static uint64_t holes_seen[4];
static uint32_t holes_calls;
static int holes_init(struct strata_policy *p, struct strata_error *err)
{
	p->env->sched->ram_holes_only = true;
	return STRATA_OK;
}
static uint32_t ram3_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
			      struct strata_prefetch_req *out, uint32_t max)
{
	if (holes_calls < 4)
		holes_seen[holes_calls] = p->env->sched->ram_hole;
	holes_calls++;
	out[0] = (struct strata_prefetch_req){ strata_eid(p->env->spec, 1, 3), STRATA_TIER_RAM };
	return 1;
}
static const struct strata_prefetch_ops prefetch_ram3_holes = {
	.name = "ram3-holes", .version = STRATA_POLICY_ABI, .init = holes_init, .on_layer = ram3_on_layer,
};
static const struct strata_prefetch_ops prefetch_ram3 = {
	.name = "ram3", .version = STRATA_POLICY_ABI, .on_layer = ram3_on_layer,
};

/* sched.ram_holes_only: a prefetch into a full RAM tier is dropped and
 * evicts nothing; without it the same prefetch evicts a RAM resident.  The
 * engine publishes the longest free RAM hole before each on_layer. */
static void test_prefetch_ram_holes_only(void **state)
{
	struct strata_error err = { 0 };
	uint64_t b = (ebytes(st_u) + 4095) / 4096 * 4096;
	struct strata_engine_stats s[2];
	for (int holes = 0; holes < 2; holes++) {
		struct strata_engine_config ec;
		strata_engine_config_defaults(&ec);
		ec.use_gpu = 0;
		ec.mode = STRATA_ENGINE_VIRTUAL;
		ec.budget[0] = 8 * b;
		ec.budget[1] = 2 * b; /* two experts: full after the first step */
		ec.place = "cache";
		ec.prefetch_ops = holes ? &prefetch_ram3_holes : &prefetch_ram3;
		struct strata_engine *e;
		assert_int_equal(strata_engine_open(st_u, &ec, &e, &err), 0);
		holes_calls = 0;
		static const uint32_t ex[2] = { 0, 1 };
		/* step 0 (layer 0): the prefetch of 1/3 goes first (an empty tier), then
		 * the demand of 0/0 and 0/1 fills RAM; layer 1 runs without 1/3, so it
		 * leaves at release (unused).  Step 1 (layer 0 again): RAM is full. */
		for (uint64_t tok = 0; tok < 2; tok++) {
			assert_int_equal(strata_engine_begin_step(e, tok, 0, 1, ex, 2, NULL, 0, &err), 0);
			assert_int_equal(strata_engine_acquire(e, 0, ex, 2, NULL, &err), 0);
			assert_int_equal(strata_engine_release(e, tok, 0, ex, 2, &err), 0);
			assert_int_equal(strata_engine_begin_step(e, tok, 1, 1, ex, 2, NULL, 0, &err), 0);
			assert_int_equal(strata_engine_acquire(e, 1, ex, 2, NULL, &err), 0);
			assert_int_equal(strata_engine_release(e, tok, 1, ex, 2, &err), 0);
		}
		s[holes] = *strata_engine_stats(e);
		assert_int_equal(holes_calls, 4);
		assert_true(holes_seen[0] == 2 * b); /* an empty tier: one hole, all of it */
		if (holes) /* RAM full after step 0's demand: no hole is left */
			assert_true(holes_seen[2] == 0 && holes_seen[3] == 0);
		strata_engine_close(e);
	}
	/* the first prefetch found the empty tier either way; the later two find
	 * it full: without ram_holes_only one of them evicts a resident (the other
	 * is redundant then), with it both are dropped and evict nothing */
	assert_true(s[0].prefetch_issued == 2 && s[0].prefetch_dropped == 0);
	assert_true(s[1].prefetch_issued == 1 && s[1].prefetch_dropped == 2);
	assert_true(s[0].evictions[1] == s[1].evictions[1] + 1);
}

static void test_bad_policy_epolicy(void **state)
{
	const struct strata_evict_ops *bad[2] = { &evict_pinned, &evict_absent };
	const char *why[2] = { "pinned", "not resident" };
	uint64_t eb = ebytes(st_u);
	for (int b = 0; b < 2; b++) {
		for (int mode = 0; mode < 2; mode++) {
			struct strata_error err = { 0 };
			struct strata_engine_config ec;
			strata_engine_config_defaults(&ec);
			ec.mode = mode;
			ec.use_gpu = 0;
			ec.budget[0] = 5 * eb;
			ec.budget[1] = 0;
			ec.place = "cache";
			ec.evict_ops = bad[b];
			struct strata_engine *e;
			assert_int_equal(strata_engine_open(st_u, &ec, &e, &err), 0);
			int rc = STRATA_OK;
			for (uint32_t step = 0; step < 8 && !rc; step++) {
				uint32_t ex[4] = { step % 16, (step + 5) % 16, (step + 9) % 16, (step + 13) % 16 };
				rc = strata_engine_acquire(e, 0, ex, 4, NULL, &err);
				if (!rc)
					rc = strata_engine_release(e, step, 0, ex, 4, &err);
			}
			assert_int_equal(rc, STRATA_EPOLICY);
			assert_non_null(strstr(err.msg, bad[b]->name));
			assert_non_null(strstr(err.msg, why[b]));
			print_message("%s\n", err.msg);
			strata_engine_close(e);
		}
	}
}

static void test_ebudget(void **state)
{
	struct strata_error err = { 0 };
	uint64_t eb = ebytes(st_u);
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	ec.use_gpu = 0;
	ec.budget[0] = 3 * eb; /* top_k = 4 */
	ec.budget[1] = 0;
	struct strata_engine *e;
	assert_int_equal(strata_engine_open(st_u, &ec, &e, &err), STRATA_EBUDGET);
	assert_null(e);
	assert_non_null(strstr(err.msg, "top-4"));
	char num[32];
	snprintf(num, sizeof(num), "%llu", (unsigned long long)(4 * eb));
	assert_non_null(strstr(err.msg, num));
	print_message("%s\n", err.msg);

	/* streaming more experts than scratch slots: EBUDGET naming them */
	ec.budget[0] = 0;
	ec.place = "static";
	assert_int_equal(strata_engine_open(st_u, &ec, &e, &err), 0);
	uint32_t ex[6] = { 0, 1, 2, 3, 4, 5 };
	assert_int_equal(strata_engine_acquire(e, 1, ex, 6, NULL, &err), STRATA_EBUDGET);
	assert_non_null(strstr(err.msg, "scratch"));
	strata_engine_close(e);

	/* budget 0 with a caching placement: no room, every miss streams */
	ec.place = "cache";
	assert_int_equal(strata_engine_open(st_u, &ec, &e, &err), 0);
	assert_int_equal(strata_engine_acquire(e, 1, ex, 4, NULL, &err), 0);
	assert_true(strata_engine_stats(e)->admit_fallback == 4 && strata_engine_stats(e)->streamed == 4);
	assert_int_equal(strata_engine_release(e, 0, 1, ex, 4, &err), 0);
	strata_engine_close(e);

	/* unknown policy: named */
	ec.evict = "lruu";
	assert_int_equal(strata_engine_open(st_u, &ec, &e, &err), STRATA_ENOTFOUND);
	assert_non_null(strstr(err.msg, "lruu"));
}

/* Pinned experts stay: a tiny VRAM tier, every step evicts, never a pinned one
 * (the built-ins are checked by the engine on every victim). */
static void test_pins_survive(void **state)
{
	struct strata_error err = { 0 };
	uint64_t eb = ebytes(st_u);
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	ec.use_gpu = 0;
	ec.budget[0] = 4 * eb;
	ec.budget[1] = 8 * eb;
	ec.place = "cache";
	ec.prefetch = "lookahead";
	struct strata_engine *e;
	assert_int_equal(strata_engine_open(st_u, &ec, &e, &err), 0);
	assert_non_null(strstr(strata_engine_tier_desc(e, 0), "host stand-in"));
	assert_non_null(strstr(strata_engine_tier_desc(e, 1), "pinned"));
	const void *ptrs[4];
	uint8_t *buf = strata_aligned_alloc(4096, eb);
	for (uint32_t step = 0; step < 40; step++) {
		uint32_t L = step % 4, ex[4] = { step % 16, (step * 3 + 1) % 16, (step * 7 + 2) % 16, (step * 5 + 3) % 16 };
		for (int a = 0; a < 4; a++)
			for (int b = 0; b < a; b++)
				if (ex[a] == ex[b])
					ex[a] = (ex[a] + 1 + (uint32_t)b) % 16;
		int dup = 0;
		for (int a = 0; a < 4; a++)
			for (int b = 0; b < a; b++)
				dup |= ex[a] == ex[b];
		if (dup)
			continue;
		/* hints for this very layer ask to prefetch other experts: with 4
		 * slots all pinned, they must be dropped, not evict a pin */
		struct strata_hint h[4];
		for (int j = 0; j < 4; j++)
			h[j] = (struct strata_hint){ L, (ex[j] + 8) % 16, 1 };
		assert_int_equal(strata_engine_begin_step(e, step, L, 1, ex, 4, h, 4, &err), 0);
		assert_int_equal(strata_engine_acquire(e, L, ex, 4, ptrs, &err), 0);
		for (int j = 0; j < 4; j++) {
			const struct strata_extent *x = strata_store_expert(st_u, L, ex[j]);
			assert_int_equal(strata_store_read_extent(st_u, x, buf, false, false, &err), 0);
			assert_memory_equal(ptrs[j], buf, x->payload);
		}
		assert_int_equal(strata_engine_release(e, step, L, ex, 4, &err), 0);
	}
	free(buf);
	strata_engine_close(e);
}

/* A shard truncated under a running engine: the read fails with the file. */
static void test_io_error_names_shard(void **state)
{
	struct strata_error err = { 0 };
	char *dir = test_mkdtemp();
	struct strata_store *s;
	assert_int_equal(write_model("custom:layers=2,experts=8,top_k=2,hidden=256,inter=128", STRATA_SYNTH_BF16, dir,
				     &s), 0);
	const int movers[] = { STRATA_NVME_URING, STRATA_NVME_PREAD, STRATA_NVME_MMAP };
	for (int m = 0; m < 3; m++) {
		struct strata_engine_config ec;
		strata_engine_config_defaults(&ec);
		ec.use_gpu = 0;
		ec.budget[0] = 0;
		ec.budget[1] = 0;
		ec.nvme_mover = movers[m];
		struct strata_engine *e;
		assert_int_equal(strata_engine_open(s, &ec, &e, &err), 0);
		uint32_t ex[2] = { 6, 7 };
		const void *p[2];
		if (m == 0) {
			const struct strata_extent *x = strata_store_expert(s, 1, 6);
			assert_int_equal(truncate(strata_store_shard_path(s, x->shard), (off_t)x->offset), 0);
		}
		int rc = strata_engine_acquire(e, 1, ex, 2, p, &err);
		assert_int_equal(rc, STRATA_EIO);
		assert_non_null(strstr(err.msg, "shard-"));
		assert_non_null(strstr(err.msg, "truncated"));
		print_message("%s\n", err.msg);
		strata_engine_close(e);
	}
	strata_store_close(s);
	test_rmdir(dir);
	free(dir);
}

static int all_hot_initial(struct strata_policy *p, uint32_t eid)
{
	return STRATA_TIER_VRAM;
}

static uint32_t all_hot_admit(struct strata_policy *p, uint32_t eid, int from_tier, uint64_t now)
{
	return 1u << STRATA_TIER_VRAM;
}

/* Every expert hot, preloaded into VRAM at open. */
static const struct strata_place_ops all_hot = {
	.name = "all-hot", .version = STRATA_POLICY_ABI,
	.initial_tier = all_hot_initial, .admit = all_hot_admit,
};

/* A payload byte flipped on disk: by default (each expert's first read) and
 * with --verify (every read) the read fails ECORRUPT naming the shard; only
 * with --no-verify does the engine hand the bytes out as they are.  Through
 * RAM, staged straight into VRAM, and preloaded hot at open; on the host
 * stand-in and (where there is one) on the GPU, where a staged read is hashed
 * in its bounce buffers (bounce buffers smaller than the extent, so chunks
 * arrive and are hashed in pieces). */
static void test_verify_checksums(void **state)
{
	struct strata_error err = { 0 };
	char *dir = test_mkdtemp();
	struct strata_store *s;
	assert_int_equal(write_model("custom:layers=2,experts=8,top_k=2,hidden=256,inter=128", STRATA_SYNTH_BF16, dir,
				     &s), 0);
	/* a copy: the store's extent table goes with strata_store_close below */
	const struct strata_extent xe = *strata_store_expert(s, 1, 3), *x = &xe;
	assert_true(x->bytes > 4096);
	FILE *f = fopen(strata_store_shard_path(s, x->shard), "r+b");
	assert_non_null(f);
	fseek(f, (long)(x->offset + x->payload - 7), SEEK_SET); /* in the last bounce chunk */
	int c = fgetc(f);
	fseek(f, (long)(x->offset + x->payload - 7), SEEK_SET);
	fputc(c ^ 0x5a, f);
	fclose(f);
	strata_store_close(s);
	int gpus = test_have_gpu("verify_checksums on the GPU") ? 2 : 1;
	const int modes[] = { STRATA_VERIFY_FIRST, STRATA_VERIFY_EVERY, STRATA_VERIFY_OFF };
	for (int gpu = 0; gpu < gpus; gpu++)
	for (int mi = 0; mi < 3; mi++) {
		int verify = modes[mi];
		for (int how = 0; how < 3; how++) { /* via RAM, staged NVMe -> VRAM, preloaded hot */
			assert_int_equal(strata_store_open(dir, &s, &err), 0);
			struct strata_engine_config ec;
			strata_engine_config_defaults(&ec);
			ec.use_gpu = gpu;
			ec.budget[0] = how == 2 ? 64 * x->bytes : 0;
			ec.budget[1] = how == 0 ? 4 * x->bytes : 0;
			ec.place = how == 0 ? "static:promote=ram" : "static";
			ec.place_ops = how == 2 ? &all_hot : NULL;
			ec.bounce_bytes = 4096;
			ec.verify = verify;
			struct strata_engine *e = NULL;
			int rc = strata_engine_open(s, &ec, &e, &err);
			uint32_t ex[2] = { 2, 3 };
			const void *p[2];
			if (!rc)
				rc = strata_engine_acquire(e, 1, ex, 2, p, &err);
			if (verify != STRATA_VERIFY_OFF) {
				assert_int_equal(rc, STRATA_ECORRUPT);
				assert_non_null(strstr(err.msg, "shard-"));
				assert_non_null(strstr(err.msg, "checksum"));
				if (how == 2)
					assert_null(e); /* the hot expert failed at open, in preload */
				print_message("%s\n", err.msg);
			} else {
				assert_int_equal(rc, 0);
				assert_int_equal(strata_engine_stats(e)->verified_extents, 0);
				uint8_t b;
				const uint8_t *q = (const uint8_t *)p[1] + x->payload - 7;
				if (gpu) { /* acquired extents are device pointers on a GPU (engine.h), RAM ones too */
					assert_int_equal(strata_gpu_memcpy_d2h_async(&b, q, 1, NULL, &err), 0);
					assert_int_equal(strata_gpu_sync(&err), 0);
				} else {
					b = *q;
				}
				assert_int_equal(b, c ^ 0x5a);
				assert_int_equal(strata_engine_release(e, 0, 1, ex, 2, &err), 0);
			}
			strata_engine_close(e);
			strata_store_close(s);
		}
	}
	/* a clean expert passes the check, and FIRST checks it once per store */
	assert_int_equal(strata_store_open(dir, &s, &err), 0);
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	ec.use_gpu = 0;
	ec.budget[0] = 0;
	ec.budget[1] = 0;
	ec.bounce_bytes = 4096;
	for (int round = 0; round < 2; round++) {
		struct strata_engine *e;
		assert_int_equal(strata_engine_open(s, &ec, &e, &err), 0);
		uint32_t ex[2] = { 1, 2 };
		const void *p[2];
		assert_int_equal(strata_engine_acquire(e, 0, ex, 2, p, &err), 0);
		assert_int_equal(strata_engine_stats(e)->verified_extents, round ? 0 : 2);
		assert_int_equal(strata_engine_release(e, 0, 0, ex, 2, &err), 0);
		strata_engine_close(e);
	}
	strata_store_close(s);
	test_rmdir(dir);
	free(dir);
}

/* strata sim of a model that was never packed: the Kimi-shaped preset. */
/* Mixed sizes: when the free bytes hold a miss but no hole does, the engine
 * moves an extent instead of evicting more.  VRAM of cold + hot + cold
 * bytes, LRU, one expert per step: c0 h1 c2 c3 (evicts c0) c2 c4 (evicts
 * h1: c4 takes its start, H - C stays free) h5: evicting c3 frees C more,
 * H in all but in two holes around c4.  Evicting by bytes alone takes c2
 * too (4 evictions); sliding c4 down makes the hole (3, one compaction
 * moving C bytes). */
static void test_mixed_sizes_room(void **state)
{
	struct strata_error err = { 0 };
	struct strata_model_spec sp;
	assert_int_equal(strata_model_spec_parse("custom:layers=1,experts=8,top_k=1,hidden=256,inter=128", &sp, &err), 0);
	uint8_t fmt[8] = { STRATA_FMT_COLD, STRATA_FMT_HOT, STRATA_FMT_COLD, STRATA_FMT_COLD,
			   STRATA_FMT_COLD, STRATA_FMT_HOT, STRATA_FMT_COLD, STRATA_FMT_COLD };
	uint8_t tiers[8] = { 0 };
	for (int i = 0; i < 8; i++)
		tiers[i] = STRATA_TIER_NVME;
	struct strata_engine_model m = { .spec = &sp, .tier_table = tiers, .fmt_table = fmt };
	struct strata_expert_layout H, C;
	assert_int_equal(strata_expert_layout(STRATA_FMT_HOT, sp.hidden, sp.inter, &H), 0);
	assert_int_equal(strata_expert_layout(STRATA_FMT_COLD, sp.hidden, sp.inter, &C), 0);
	uint64_t h = (H.bytes + 4095) / 4096 * 4096, c = (C.bytes + 4095) / 4096 * 4096;
	assert_true(h > c);
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	ec.mode = STRATA_ENGINE_VIRTUAL;
	ec.budget[0] = 2 * c + h;
	ec.budget[1] = 0;
	ec.place = "cache";
	ec.evict = "lru";
	ec.prefetch = "none";
	struct strata_engine *e;
	assert_int_equal(strata_engine_open_model(&m, &ec, &e, &err), 0);
	static const uint32_t seq[] = { 0, 1, 2, 3, 2, 4, 5 };
	for (uint32_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		assert_int_equal(strata_engine_acquire(e, 0, &seq[i], 1, NULL, &err), 0);
		assert_int_equal(strata_engine_release(e, i, 0, &seq[i], 1, &err), 0);
	}
	const struct strata_engine_stats *s = strata_engine_stats(e);
	print_message("mixed sizes: evictions %llu, compactions %llu moving %llu bytes (cold %llu, hot %llu)\n",
		      (unsigned long long)s->evictions[0], (unsigned long long)s->compactions[0],
		      (unsigned long long)s->compact_bytes[0], (unsigned long long)c, (unsigned long long)h);
	assert_int_equal(s->evictions[0], 3);
	assert_int_equal(s->compactions[0], 1);
	assert_int_equal(s->compact_bytes[0], c);
	assert_int_equal(s->hits[0], 1);
	assert_true(strata_engine_resident(e, STRATA_TIER_VRAM)[2] && strata_engine_resident(e, STRATA_TIER_VRAM)[4] &&
		    strata_engine_resident(e, STRATA_TIER_VRAM)[5]);
	assert_true(s->clock_ns > 0);
	strata_engine_close(e);
}

/* Prefetch reads in flight per link (cfg.prefetch_inflight), real mode: at
 * one byte they go to the disk one move at a time, with room for four
 * experts up to four at once; the decisions are the same either way, and
 * with strata_engine_poll called while the caller computes (a GPU replay
 * polls until its kernels finish: finished moves chain on, waiting
 * prefetches take idle links earlier), and in the sim. */
static void test_prefetch_inflight(void **state)
{
	struct strata_error err = { 0 };
	const struct strata_model_spec *sp = strata_store_spec(st_t);
	struct strata_harness_trace *t;
	assert_int_equal(strata_harness_trace_gen(sp, 24, 5, &t, &err), 0);
	const uint64_t maxb = largest_expert(st_t);
	const uint64_t cap[5] = { 1, 4 * maxb, 0, 1, 1 }; /* 3: polled, 4: virtual */
	struct strata_engine_stats s[5];
	for (int r = 0; r < 5; r++) {
		struct strata_engine_config ec;
		strata_engine_config_defaults(&ec);
		ec.use_gpu = 0;
		ec.budget[0] = 8 * maxb;
		ec.budget[1] = 40 * maxb;
		ec.place = "cache";
		ec.evict = "farthest";
		ec.prefetch = "oracle:depth=2:stage=8";
		ec.future = strata_harness_trace_future(t);
		ec.prefetch_inflight[STRATA_LINK_NVME] = cap[r];
		ec.mode = r == 4 ? STRATA_ENGINE_VIRTUAL : ec.mode;
		struct strata_engine *e;
		assert_int_equal(strata_engine_open(st_t, &ec, &e, &err), 0);
		drive_polls = r == 3 ? 200 : 0;
		int rc = drive(e, t, st_t, r != 4, &err);
		drive_polls = 0;
		if (rc)
			fail_msg("%s: %s", strata_engine_name(e), err.msg);
		s[r] = *strata_engine_stats(e);
		print_message("prefetch_inflight %llu: at most %llu bytes of prefetch reads in flight (extents <= %llu)\n",
			      (unsigned long long)cap[r], (unsigned long long)s[r].prefetch_inflight_max[STRATA_LINK_NVME],
			      (unsigned long long)maxb);
		strata_engine_close(e);
	}
	assert_true(s[0].prefetch_issued > 0);
	assert_true(s[0].prefetch_inflight_max[STRATA_LINK_NVME] <= maxb); /* one at a time */
	assert_true(s[1].prefetch_inflight_max[STRATA_LINK_NVME] > maxb);  /* several at once */
	assert_true(s[1].prefetch_inflight_max[STRATA_LINK_NVME] <= 4 * maxb);
	assert_true(s[2].prefetch_inflight_max[STRATA_LINK_NVME] >= s[1].prefetch_inflight_max[STRATA_LINK_NVME]);
	assert_true(s[3].prefetch_inflight_max[STRATA_LINK_NVME] <= maxb);
	for (int r = 1; r < 5; r++) {
		assert_memory_equal(s[0].hits, s[r].hits, sizeof(s[0].hits));
		assert_true(s[0].prefetch_issued == s[r].prefetch_issued && s[0].prefetch_used == s[r].prefetch_used &&
			    s[0].bytes_nvme_ram == s[r].bytes_nvme_ram && s[0].bytes_ram_vram == s[r].bytes_ram_vram);
	}
	strata_harness_trace_free(t);
}

static void test_open_model_virtual(void **state)
{
	struct strata_error err = { 0 };
	struct strata_model_spec sp;
	assert_int_equal(strata_model_spec_parse("kimi-k3.1:layers=4", &sp, &err), 0);
	uint32_t n = strata_model_total_experts(&sp);
	uint8_t *tiers = malloc(n);
	double frac[3] = { 0.15, 0.30, 0.55 };
	strata_tier_assign_seeded(&sp, frac, 1, tiers, NULL);
	struct strata_engine_model m = { .spec = &sp, .tier_table = tiers };
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	struct strata_engine *e;
	assert_int_equal(strata_engine_open_model(&m, &ec, &e, &err), STRATA_EINVAL); /* real mode refused */
	ec.mode = STRATA_ENGINE_VIRTUAL;
	ec.budget[0] = 4ull << 30;
	ec.budget[1] = 8ull << 30;
	assert_int_equal(strata_engine_open_model(&m, &ec, &e, &err), 0);
	const struct strata_engine_stats *s = strata_engine_stats(e);
	assert_true(s->preloaded[0] > 0 && s->clock_ns > 0); /* cold start costs virtual time */
	double t0 = s->clock_ns;
	for (uint32_t step = 0; step < 64; step++) {
		uint32_t ex[8];
		for (uint32_t j = 0; j < 8 && j < sp.top_k; j++)
			ex[j] = (step * 37 + j * 101) % sp.n_experts;
		uint32_t k = sp.top_k < 8 ? sp.top_k : 8;
		assert_int_equal(strata_engine_acquire(e, step % 4, ex, k, NULL, &err), 0);
		strata_engine_add_compute(e, 100e3);
		assert_int_equal(strata_engine_release(e, step, step % 4, ex, k, &err), 0);
	}
	s = strata_engine_stats(e);
	assert_true(s->clock_ns >= t0 + 64 * 100e3);
	assert_true(s->stall_ns > 0);
	print_message("%s: cold start %.1f ms, run %.1f ms, stall %.1f ms\n", strata_engine_name(e), t0 / 1e6,
		      (s->clock_ns - t0) / 1e6, s->stall_ns / 1e6);
	strata_engine_close(e);
	free(tiers);
}

/* The step's token count reaches the policies (struct strata_step): llama.cpp's
 * cache bypasses batches of more than max_batch tokens.  A prefill batch of 8
 * tokens that all route the same top_k experts looks like one token from the
 * experts alone (n / top_k); given its count, it streams and inserts nothing. */
static void test_step_tokens(void **state)
{
	struct strata_error err = { 0 };
	struct strata_model_spec sp;
	assert_int_equal(strata_model_spec_parse("qwen3-30b-a3b:layers=2,experts=16", &sp, &err), 0);
	uint32_t n = strata_model_total_experts(&sp);
	uint8_t *tiers = malloc(n);
	memset(tiers, STRATA_TIER_RAM, n);
	struct strata_engine_model m = { .spec = &sp, .tier_table = tiers };
	uint64_t inserts[2];
	for (int known = 0; known < 2; known++) {
		struct strata_engine_config ec;
		strata_engine_config_defaults(&ec);
		ec.mode = STRATA_ENGINE_VIRTUAL;
		ec.budget[0] = 1ull << 30;
		ec.budget[1] = 4ull << 30;
		ec.place = "llama";
		ec.evict = "llama";
		struct strata_engine *e;
		assert_int_equal(strata_engine_open_model(&m, &ec, &e, &err), 0);
		uint32_t ex[8];
		for (uint32_t j = 0; j < sp.top_k && j < 8; j++)
			ex[j] = j;
		assert_int_equal(strata_engine_begin_step(e, 0, 0, known ? 8 : 0, ex, sp.top_k, NULL, 0, &err), 0);
		assert_int_equal(strata_engine_acquire(e, 0, ex, sp.top_k, NULL, &err), 0);
		assert_int_equal(strata_engine_release(e, 0, 0, ex, sp.top_k, &err), 0);
		const struct strata_engine_stats *s = strata_engine_stats(e);
		inserts[known] = s->used[0];
		strata_engine_close(e);
	}
	assert_true(inserts[0] > 0);   /* taken for one token: cached in VRAM */
	assert_int_equal(inserts[1], 0); /* 8 tokens: bypassed, streamed */
	free(tiers);
}

static void test_gpu_engine(void **state)
{
	if (!test_have_gpu("gpu_engine"))
		return;
	struct strata_error err = { 0 };
	uint64_t eb = ebytes(st_u);
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	ec.use_gpu = 1;
	ec.budget[0] = 6 * eb;
	ec.budget[1] = 6 * eb;
	ec.place = "static:promote=all";
	struct strata_engine *e;
	assert_int_equal(strata_engine_open(st_u, &ec, &e, &err), 0);
	assert_true(strata_engine_on_gpu(e));
	print_message("%s | %s\n", strata_engine_tier_desc(e, 0), strata_engine_tier_desc(e, 1));
	assert_non_null(strstr(strata_engine_tier_desc(e, 1), "cuda-registered"));
	uint8_t *buf = strata_aligned_alloc(4096, eb), *back = strata_aligned_alloc(4096, eb);
	strata_gpu_stream *s;
	assert_int_equal(strata_gpu_stream_create(&s, &err), 0);
	for (uint32_t step = 0; step < 24; step++) {
		uint32_t ex[4] = { step % 16, (step + 3) % 16, (step + 7) % 16, (step + 11) % 16 };
		const void *p[4];
		assert_int_equal(strata_engine_acquire(e, step % 4, ex, 4, p, &err), 0);
		for (int j = 0; j < 4; j++) {
			const struct strata_extent *x = strata_store_expert(st_u, step % 4, ex[j]);
			strata_store_read_extent(st_u, x, buf, false, false, &err);
			assert_int_equal(strata_gpu_memcpy_d2h_async(back, p[j], x->payload, s, &err), 0);
			assert_int_equal(strata_gpu_stream_sync(s, &err), 0);
			assert_memory_equal(back, buf, x->payload);
		}
		assert_int_equal(strata_engine_release(e, step, step % 4, ex, 4, &err), 0);
	}
	const struct strata_engine_stats *st = strata_engine_stats(e);
	assert_true(st->hits[1] > 0 && st->bytes_ram_vram > 0);
	strata_gpu_stream_destroy(s);
	free(buf);
	free(back);
	strata_engine_close(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matches_harness),
		cmocka_unit_test(test_virtual_equals_real_random),
		cmocka_unit_test(test_budget_never_exceeded),
		cmocka_unit_test(test_chained_moves),
		cmocka_unit_test(test_prefetch_ram_holes_only),
		cmocka_unit_test(test_bad_policy_epolicy),
		cmocka_unit_test(test_ebudget),
		cmocka_unit_test(test_pins_survive),
		cmocka_unit_test(test_io_error_names_shard),
		cmocka_unit_test(test_verify_checksums),
		cmocka_unit_test(test_open_model_virtual),
		cmocka_unit_test(test_mixed_sizes_room),
		cmocka_unit_test(test_prefetch_inflight),
		cmocka_unit_test(test_step_tokens),
		cmocka_unit_test(test_gpu_engine),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
