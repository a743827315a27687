/*
 * The conformance suite: every built-in policy (and the example plugin) runs
 * over the same seeded trace through the policy harness, and its counters
 * must match the golden table exactly.  The goldens are pinned by
 * independent checks: LRU and Belady against straightforward reference
 * models on the same trace, Belady against a brute-force optimum on tiny
 * sequences, and each policy's decisions on hand-made cases.
 *
 * Changing a policy's behaviour changes its golden row: rerun with
 * STRATA_GOLDEN_PRINT=1 to print the table, check the change is intended, and
 * paste it below.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/policy.h"
#include "strata/harness.h"
#include "strata/sched.h"
#include "strata/store.h"
#include "testutil.h"

#define MIB (1ull << 20)
#define TRACE_SPEC "tiny:layers=4,experts=16,top_k=2"
#define TRACE_TOKENS 64
#define TRACE_SEED 1

static struct strata_model_spec spec;
static struct strata_harness_trace *trace;
static uint8_t tier_table[64];
static uint64_t var_bytes[64];

static int suite_setup(void **state)
{
	struct strata_error err = { 0 };
	if (strata_model_spec_parse(TRACE_SPEC, &spec, &err) ||
	    strata_harness_trace_gen(&spec, TRACE_TOKENS, TRACE_SEED, &trace, &err)) {
		fprintf(stderr, "setup: %s\n", err.msg);
		return -1;
	}
	/* a tier table: the 8 most used experts hot, the next 16 warm */
	uint64_t uses[64] = { 0 };
	for (uint32_t i = 0; i < trace->n_steps; i++)
		for (uint32_t j = 0; j < trace->steps[i].n; j++)
			uses[strata_eid(&spec, trace->steps[i].layer, trace->steps[i].experts[j])]++;
	for (int e = 0; e < 64; e++) {
		int rank = 0;
		for (int o = 0; o < 64; o++)
			rank += uses[o] > uses[e] || (uses[o] == uses[e] && o < e);
		tier_table[e] = rank < 8 ? STRATA_TIER_VRAM : rank < 24 ? STRATA_TIER_RAM : STRATA_TIER_NVME;
		var_bytes[e] = (uint64_t)(e % 3 + 1) * MIB;
	}
	return 0;
}

static int suite_teardown(void **state)
{
	strata_harness_trace_free(trace);
	return 0;
}

static const char *plugin_path(void)
{
	static char path[PATH_MAX];
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return "skeleton.so";
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(path, sizeof(path), "%s/../plugins/skeleton.so", self);
	return path;
}

/* ---- golden counters ---- */

struct golden {
	const char *place, *evict, *prefetch;
	uint32_t budget_mib;
	int var_sizes;
	uint64_t hits, misses, bypasses, inserts, evictions, preloaded;
	uint64_t pf_issued, pf_used, pf_wasted, pf_redundant, pf_dropped;
};

static const struct golden goldens[] = {
#include "conformance_golden.inc"
};

static void run_row(const struct golden *g, struct strata_harness_counters *k)
{
	struct strata_harness_config c;
	strata_harness_config_defaults(&c);
	c.budget = g->budget_mib * MIB;
	c.expert_bytes = MIB;
	c.bytes_per_id = g->var_sizes ? var_bytes : NULL;
	c.tier_table = tier_table;
	c.place = g->place;
	c.evict = strcmp(g->evict, "@plugin") ? g->evict : plugin_path();
	c.prefetch = g->prefetch;
	c.seed = 42;
	struct strata_error err = { 0 };
	int rc = strata_harness_run(trace, &c, k, &err);
	if (rc)
		fprintf(stderr, "%s/%s/%s: %s\n", g->place ? g->place : "-", g->evict, g->prefetch, err.msg);
	assert_int_equal(rc, STRATA_OK);
}

static void check_invariants(const struct golden *g, const struct strata_harness_counters *k)
{
	assert_int_equal(k->accesses, trace->n_accesses);
	assert_int_equal(k->hits + k->misses, k->accesses);
	assert_int_equal(k->inserts + k->bypasses, k->misses);
	assert_true(k->prefetch_used + k->prefetch_wasted <= k->prefetch_issued);
	/* every expert that entered either left or is still there */
	assert_true(k->evictions + k->prefetch_unused_dropped <= k->inserts + k->prefetch_issued + k->preloaded);
	assert_true((k->inserts + k->prefetch_issued + k->preloaded - k->evictions - k->prefetch_unused_dropped) *
		    (g->var_sizes ? 1 : MIB) <= (uint64_t)g->budget_mib * MIB);
	if (!g->var_sizes)
		assert_int_equal(k->bytes_fetched, (k->misses + k->prefetch_issued) * MIB);
}

static void test_golden_counters(void **state)
{
	int print = getenv("STRATA_GOLDEN_PRINT") != NULL;
	int bad = 0;
	for (size_t i = 0; i < sizeof(goldens) / sizeof(goldens[0]); i++) {
		const struct golden *g = &goldens[i];
		struct strata_harness_counters k;
		run_row(g, &k);
		check_invariants(g, &k);
		if (print) {
			printf("{ %s%s%s, \"%s\", \"%s\", %u, %d, %llu, %llu, %llu, %llu, %llu, %llu, "
			       "%llu, %llu, %llu, %llu, %llu },\n",
			       g->place ? "\"" : "", g->place ? g->place : "NULL", g->place ? "\"" : "",
			       g->evict, g->prefetch, g->budget_mib, g->var_sizes,
			       (unsigned long long)k.hits, (unsigned long long)k.misses,
			       (unsigned long long)k.bypasses, (unsigned long long)k.inserts,
			       (unsigned long long)k.evictions, (unsigned long long)k.preloaded,
			       (unsigned long long)k.prefetch_issued, (unsigned long long)k.prefetch_used,
			       (unsigned long long)k.prefetch_wasted, (unsigned long long)k.prefetch_redundant,
			       (unsigned long long)k.prefetch_dropped);
			continue;
		}
		uint64_t got[] = { k.hits, k.misses, k.bypasses, k.inserts, k.evictions, k.preloaded,
				   k.prefetch_issued, k.prefetch_used, k.prefetch_wasted,
				   k.prefetch_redundant, k.prefetch_dropped };
		uint64_t want[] = { g->hits, g->misses, g->bypasses, g->inserts, g->evictions, g->preloaded,
				    g->pf_issued, g->pf_used, g->pf_wasted, g->pf_redundant, g->pf_dropped };
		if (memcmp(got, want, sizeof(got))) {
			fprintf(stderr, "golden mismatch: place=%s evict=%s prefetch=%s budget=%u MiB%s\n",
				g->place ? g->place : "-", g->evict, g->prefetch, g->budget_mib,
				g->var_sizes ? " (var sizes)" : "");
			static const char *names[] = { "hits", "misses", "bypasses", "inserts", "evictions",
						       "preloaded", "pf_issued", "pf_used", "pf_wasted",
						       "pf_redundant", "pf_dropped" };
			for (int f = 0; f < 11; f++)
				if (got[f] != want[f])
					fprintf(stderr, "  %s: got %llu, want %llu\n", names[f],
						(unsigned long long)got[f], (unsigned long long)want[f]);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
}

/* Every built-in appears in the golden table: a new policy needs its row. */
static void test_goldens_cover_every_builtin(void **state)
{
	for (int r = 0; r < STRATA_ROLE_COUNT; r++) {
		for (unsigned i = 0;; i++) {
			const struct strata_evict_ops *h = strata_policy_builtin_at(r, i);
			if (!h)
				break;
			int found = 0;
			size_t n = strlen(h->name);
			for (size_t g = 0; g < sizeof(goldens) / sizeof(goldens[0]) && !found; g++) {
				const char *s = r == STRATA_ROLE_PLACE ? goldens[g].place
					      : r == STRATA_ROLE_EVICT ? goldens[g].evict : goldens[g].prefetch;
				found = s && !strncmp(s, h->name, n) && (s[n] == '\0' || s[n] == ':');
			}
			if (!found)
				fprintf(stderr, "%s %s has no golden row\n", strata_role_name(r), h->name);
			assert_true(found);
		}
	}
}

/* Same config twice: same counters (random and history are seeded). */
static void test_repeatable(void **state)
{
	for (size_t i = 0; i < sizeof(goldens) / sizeof(goldens[0]); i++) {
		struct strata_harness_counters a, b;
		run_row(&goldens[i], &a);
		run_row(&goldens[i], &b);
		assert_memory_equal(&a, &b, sizeof(a));
	}
}

/* ---- reference models on the same trace ---- */

/* The flattened accesses of the trace, with step boundaries. */
struct flat {
	uint32_t *eid;
	uint32_t *step_of;
	uint64_t n;
};

static struct flat flatten(const struct strata_harness_trace *t)
{
	struct flat f = { malloc(sizeof(uint32_t) * t->n_accesses), malloc(sizeof(uint32_t) * t->n_accesses),
			  0 };
	for (uint32_t i = 0; i < t->n_steps; i++)
		for (uint32_t j = 0; j < t->steps[i].n; j++) {
			f.eid[f.n] = strata_eid(&t->spec, t->steps[i].layer, t->steps[i].experts[j]);
			f.step_of[f.n++] = i;
		}
	return f;
}

enum ref_kind { REF_LRU, REF_FARTHEST };

/* A literal model: on a miss, evict (among resident experts not in the
 * current step) the least recently touched one (LRU) or the one used
 * farthest ahead, ties to the smaller eid (Belady), until the new one fits. */
static void reference(const struct strata_harness_trace *t, int kind, uint64_t budget,
		      const uint64_t *bytes, uint64_t *hits, uint64_t *evictions)
{
	struct flat f = flatten(t);
	uint32_t n_ids = strata_model_total_experts(&t->spec);
	uint8_t *res = calloc(n_ids, 1);
	uint64_t *stamp = calloc(n_ids, sizeof(uint64_t)), tick = 0, used = 0;
	*hits = *evictions = 0;
	for (uint64_t i = 0; i < f.n; i++) {
		uint32_t e = f.eid[i];
		if (res[e]) {
			(*hits)++;
			stamp[e] = ++tick;
			continue;
		}
		while (used + bytes[e] > budget) {
			int64_t best = -1;
			uint64_t best_key = 0;
			for (uint32_t c = 0; c < n_ids; c++) {
				if (!res[c])
					continue;
				int pinned = 0;
				for (uint64_t k = i; k < f.n && f.step_of[k] == f.step_of[i]; k++)
					pinned |= f.eid[k] == c;
				for (uint64_t k = i; k-- > 0 && f.step_of[k] == f.step_of[i];)
					pinned |= f.eid[k] == c;
				if (pinned)
					continue;
				uint64_t key;
				if (kind == REF_LRU) {
					key = UINT64_MAX - stamp[c]; /* oldest = largest key */
				} else {
					key = UINT64_MAX;
					for (uint64_t k = i + 1; k < f.n; k++)
						if (f.eid[k] == c) {
							key = k;
							break;
						}
				}
				if (best < 0 || key > best_key) {
					best = c;
					best_key = key;
				}
			}
			assert_true(best >= 0);
			res[best] = 0;
			used -= bytes[best];
			(*evictions)++;
		}
		res[e] = 1;
		used += bytes[e];
		stamp[e] = ++tick;
	}
	free(res);
	free(stamp);
	free(f.eid);
	free(f.step_of);
}

static void test_lru_and_belady_match_reference(void **state)
{
	uint64_t uniform[64];
	for (int i = 0; i < 64; i++)
		uniform[i] = MIB;
	const struct {
		const char *evict;
		int kind;
		uint32_t budget_mib;
		int var;
	} cases[] = {
		{ "lru", REF_LRU, 3, 0 },  { "lru", REF_LRU, 12, 0 },    { "lru", REF_LRU, 40, 0 },
		{ "lru", REF_LRU, 20, 1 }, { "farthest", REF_FARTHEST, 3, 0 }, { "farthest", REF_FARTHEST, 12, 0 },
		{ "farthest", REF_FARTHEST, 40, 0 }, { "farthest", REF_FARTHEST, 20, 1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct strata_harness_config c;
		strata_harness_config_defaults(&c);
		c.budget = cases[i].budget_mib * MIB;
		c.expert_bytes = MIB;
		c.bytes_per_id = cases[i].var ? var_bytes : NULL;
		c.evict = cases[i].evict;
		struct strata_harness_counters k;
		struct strata_error err = { 0 };
		assert_int_equal(strata_harness_run(trace, &c, &k, &err), 0);
		uint64_t hits, ev;
		reference(trace, cases[i].kind, c.budget, cases[i].var ? var_bytes : uniform, &hits, &ev);
		if (k.hits != hits || k.evictions != ev)
			fprintf(stderr, "%s budget %u%s: hits %llu/%llu evictions %llu/%llu (harness/ref)\n",
				cases[i].evict, cases[i].budget_mib, cases[i].var ? " var" : "",
				(unsigned long long)k.hits, (unsigned long long)hits,
				(unsigned long long)k.evictions, (unsigned long long)ev);
		assert_int_equal(k.hits, hits);
		assert_int_equal(k.evictions, ev);
	}
}

/* Belady is optimal: equal to a brute-force minimum over every eviction
 * choice on small single-expert sequences (demand paging, one size). */
#define BF_E 6
#define BF_LEN 16
static int bf_memo[BF_LEN + 1][1 << BF_E];

static int brute(const uint32_t *seq, int pos, unsigned mask, int cap)
{
	if (pos == BF_LEN)
		return 0;
	if (bf_memo[pos][mask] >= 0)
		return bf_memo[pos][mask];
	unsigned x = 1u << seq[pos];
	int best;
	if (mask & x) {
		best = brute(seq, pos + 1, mask, cap);
	} else if (__builtin_popcount(mask) < cap) {
		best = 1 + brute(seq, pos + 1, mask | x, cap);
	} else {
		best = INT32_MAX;
		for (unsigned y = 0; y < BF_E; y++)
			if (mask & (1u << y)) {
				int v = 1 + brute(seq, pos + 1, (mask & ~(1u << y)) | x, cap);
				if (v < best)
					best = v;
			}
	}
	return bf_memo[pos][mask] = best;
}

static void test_belady_is_optimal(void **state)
{
	struct strata_model_spec s1;
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("tiny:layers=1,experts=6,top_k=1", &s1, &err), 0);
	uint64_t rng = 12345;
	int checked = 0, belady_beats_lru = 0;
	for (int trial = 0; trial < 150; trial++) {
		uint32_t seq[BF_LEN];
		struct strata_harness_step steps[BF_LEN];
		for (int i = 0; i < BF_LEN; i++) {
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			seq[i] = (uint32_t)((rng >> 33) % BF_E);
			steps[i] = (struct strata_harness_step){ .token = (uint64_t)i, .layer = 0, .n = 1,
								 .experts = &seq[i] };
		}
		struct strata_harness_trace *t;
		assert_int_equal(strata_harness_trace_build(&s1, steps, BF_LEN, &t, &err), 0);
		for (int cap = 2; cap <= 4; cap++) {
			memset(bf_memo, 0xff, sizeof(bf_memo));
			int opt = brute(seq, 0, 0, cap);
			struct strata_harness_config c;
			strata_harness_config_defaults(&c);
			c.expert_bytes = 100;
			c.budget = 100ull * cap;
			c.evict = "farthest";
			struct strata_harness_counters k, l;
			assert_int_equal(strata_harness_run(t, &c, &k, &err), 0);
			c.evict = "lru";
			assert_int_equal(strata_harness_run(t, &c, &l, &err), 0);
			assert_int_equal((int)k.misses, opt);
			assert_true(l.misses >= k.misses);
			belady_beats_lru += l.misses > k.misses;
			checked++;
		}
		strata_harness_trace_free(t);
	}
	assert_int_equal(checked, 450);
	assert_true(belady_beats_lru > 50); /* the sequences are not trivial */
}

/* A hand-checked case: capacity 3, sequence 1 2 3 4 1 2 5 1 2 3 4 5 (the
 * textbook one): Belady 7 misses, LRU 10, FIFO 9. */
static void test_textbook_sequence(void **state)
{
	struct strata_model_spec s1;
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("tiny:layers=1,experts=8,top_k=1", &s1, &err), 0);
	static const uint32_t seq[] = { 1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5 };
	struct strata_harness_step steps[12];
	for (int i = 0; i < 12; i++)
		steps[i] = (struct strata_harness_step){ .token = (uint64_t)i, .n = 1, .experts = &seq[i] };
	struct strata_harness_trace *t;
	assert_int_equal(strata_harness_trace_build(&s1, steps, 12, &t, &err), 0);
	const struct { const char *evict; uint64_t misses; } want[] = {
		{ "farthest", 7 }, { "lru", 10 }, { "fifo", 9 },
	};
	for (int i = 0; i < 3; i++) {
		struct strata_harness_config c;
		strata_harness_config_defaults(&c);
		c.budget = 3 * c.expert_bytes;
		c.evict = want[i].evict;
		struct strata_harness_counters k;
		assert_int_equal(strata_harness_run(t, &c, &k, &err), 0);
		assert_int_equal(k.misses, want[i].misses);
		assert_int_equal(k.evictions, want[i].misses - 3);
	}
	strata_harness_trace_free(t);
}

/* ---- each policy's decisions on hand-made cases ---- */

/* place=future on a hand-made trace (one layer, 8 experts of 1 MiB, top-1):
 * first uses 5, 3, 3, 7, 1, 5, 2; never 0, 4, 6.  VRAM 2 MiB takes the first
 * two (5, 3), RAM 2 MiB the next two (7, 1), 2 starts on NVMe; a fetch is kept
 * in VRAM only when used again, a prefetched disk read also in RAM.  Then
 * farthest:backed=1: VRAM gives up an expert with a RAM copy first. */
static void test_future_placement(void **state)
{
	struct strata_model_spec s1;
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("tiny:layers=1,experts=8,top_k=1", &s1, &err), 0);
	uint32_t seq[] = { 5, 3, 3, 7, 1, 5, 2 };
	struct strata_harness_step steps[7];
	for (int i = 0; i < 7; i++)
		steps[i] = (struct strata_harness_step){ .token = (uint64_t)i, .n = 1, .experts = &seq[i] };
	struct strata_harness_trace *t;
	assert_int_equal(strata_harness_trace_build(&s1, steps, 7, &t, &err), 0);
	uint64_t bytes[8];
	for (int e = 0; e < 8; e++)
		bytes[e] = MIB;
	uint8_t ram[8] = { 0 };
	struct strata_prefetch_sched sched;
	strata_prefetch_sched_defaults(&sched);
	sched.resident[STRATA_TIER_RAM] = ram;
	struct strata_policy_env env = { .spec = &s1, .n_ids = 8, .expert_bytes = bytes, .seed = 1,
					 .budget = { 2 * MIB, 2 * MIB, UINT64_MAX }, .sched = &sched,
					 .future = strata_harness_trace_future(t) };
	struct strata_policy *p = NULL;
	assert_int_equal(strata_policy_create(STRATA_ROLE_PLACE, "future", &env, -1, &p, &err), 0);
	const struct strata_place_ops *po = strata_place_ops_of(p);
	const int want[8] = { STRATA_TIER_NVME, STRATA_TIER_RAM, STRATA_TIER_NVME, STRATA_TIER_VRAM,
			      STRATA_TIER_NVME, STRATA_TIER_VRAM, STRATA_TIER_NVME, STRATA_TIER_RAM };
	for (uint32_t e = 0; e < 8; e++)
		assert_int_equal(po->initial_tier(p, e), want[e]);
	const uint32_t V = 1u << STRATA_TIER_VRAM, R = 1u << STRATA_TIER_RAM;
	assert_int_equal(po->admit(p, 3, STRATA_TIER_RAM, 1), V);     /* 3 again at 2 */
	assert_int_equal(po->admit(p, 3, STRATA_TIER_RAM, 2), 0);     /* its last use: stream */
	assert_int_equal(po->admit(p, 1, STRATA_TIER_RAM, 4), 0);
	assert_int_equal(po->admit(p, 5, STRATA_TIER_NVME, 0), V);     /* a demand read: not into RAM */
	assert_int_equal(po->admit(p, 2, STRATA_TIER_NVME, 3), V | R); /* a prefetch of 2 (used at 6) */
	assert_int_equal(po->admit(p, 2, STRATA_TIER_NVME, 6), 0);
	strata_policy_destroy(p);
	/* without a future it is refused, like farthest and oracle */
	env.future = NULL;
	assert_int_equal(strata_policy_create(STRATA_ROLE_PLACE, "future", &env, -1, &p, &err), STRATA_EINVAL);
	env.future = strata_harness_trace_future(t);
	/* farthest:backed=1 in VRAM: 5 (next use 5) and 2 (6) resident, 3 (2) too;
	 * plain farthest evicts 2, backed evicts 5 once 5 has a RAM copy */
	uint8_t pinned[8] = { 0 }, res[8] = { 0 };
	struct strata_residency r = { .pinned = pinned, .resident = res };
	for (int b = 0; b < 2; b++) {
		assert_int_equal(strata_policy_create(STRATA_ROLE_EVICT, b ? "farthest:backed=1" : "farthest", &env,
						      STRATA_TIER_VRAM, &p, &err), 0);
		const struct strata_evict_ops *eo = strata_evict_ops_of(p);
		uint32_t in[3] = { 5, 2, 3 };
		for (int i = 0; i < 3; i++) {
			eo->on_insert(p, in[i], 1);
			res[in[i]] = 1;
		}
		assert_int_equal(eo->victim(p, 1, &r), 2);
		ram[5] = 1;
		assert_int_equal(eo->victim(p, 1, &r), b ? 5 : 2);
		pinned[5] = 1; /* a pinned backed expert is not chosen: the farthest unbacked is */
		assert_int_equal(eo->victim(p, 1, &r), 2);
		pinned[5] = ram[5] = 0;
		memset(res, 0, sizeof(res));
		strata_policy_destroy(p);
	}
	strata_harness_trace_free(t);
}


struct direct {
	struct strata_policy_env env;
	uint8_t pinned[64], resident[64];
	struct strata_residency r;
};

static void direct_init(struct direct *d, const struct strata_future *future)
{
	memset(d, 0, sizeof(*d));
	d->env.spec = &spec;
	d->env.n_ids = 64;
	d->env.seed = 9;
	d->env.future = future;
	d->r.pinned = d->pinned;
	d->r.resident = d->resident;
}

static struct strata_policy *mk(struct direct *d, int role, const char *s)
{
	struct strata_policy *p = NULL;
	struct strata_error err = { 0 };
	int rc = strata_policy_create(role, s, &d->env, role == STRATA_ROLE_EVICT ? 0 : -1, &p, &err);
	if (rc)
		fprintf(stderr, "%s: %s\n", s, err.msg);
	assert_int_equal(rc, 0);
	return p;
}

static void ins(struct direct *d, struct strata_policy *p, uint32_t e, uint64_t now)
{
	strata_evict_ops_of(p)->on_insert(p, e, now);
	d->resident[e] = 1;
}

static void acc(struct strata_policy *p, uint32_t e, uint64_t now)
{
	strata_evict_ops_of(p)->on_access(p, e, now);
}

static int64_t vic(struct direct *d, struct strata_policy *p, uint64_t now)
{
	return strata_evict_ops_of(p)->victim(p, now, &d->r);
}

static void rem(struct direct *d, struct strata_policy *p, uint32_t e)
{
	strata_evict_ops_of(p)->on_remove(p, e);
	d->resident[e] = 0;
}

static void test_evict_decisions(void **state)
{
	struct direct d;
	direct_init(&d, NULL);
	/* lru */
	struct strata_policy *p = mk(&d, STRATA_ROLE_EVICT, "lru");
	assert_int_equal(vic(&d, p, 0), STRATA_NO_EXPERT);
	ins(&d, p, 0, 0), ins(&d, p, 1, 1), ins(&d, p, 2, 2);
	acc(p, 0, 3);
	assert_int_equal(vic(&d, p, 4), 1);
	d.pinned[1] = 1;
	assert_int_equal(vic(&d, p, 4), 2);
	d.pinned[1] = 0;
	rem(&d, p, 1);
	assert_int_equal(vic(&d, p, 4), 2);
	strata_policy_destroy(p);
	/* fifo ignores accesses */
	p = mk(&d, STRATA_ROLE_EVICT, "fifo");
	ins(&d, p, 0, 0), ins(&d, p, 1, 1), ins(&d, p, 2, 2);
	acc(p, 0, 3);
	assert_int_equal(vic(&d, p, 4), 0);
	strata_policy_destroy(p);
	/* lfu: fewest accesses, ties to the least recent */
	for (int hist = 0; hist < 2; hist++) {
		p = mk(&d, STRATA_ROLE_EVICT, hist ? "lfu:history=1" : "lfu");
		ins(&d, p, 0, 0), ins(&d, p, 1, 1), ins(&d, p, 2, 2);
		acc(p, 0, 3), acc(p, 0, 4), acc(p, 1, 5), acc(p, 2, 6);
		assert_int_equal(vic(&d, p, 7), 1);
		acc(p, 1, 7);
		assert_int_equal(vic(&d, p, 8), 2);
		rem(&d, p, 0);
		ins(&d, p, 0, 9); /* without history: back to zero, the first victim */
		assert_int_equal(vic(&d, p, 10), hist ? 2 : 0);
		strata_policy_destroy(p);
	}
	/* lfu-decay: the tiny spec has 4 layers x top-2 = 8 accesses per token;
	 * half_life=0.125 token = 1 clock unit: recency dominates */
	p = mk(&d, STRATA_ROLE_EVICT, "lfu-decay:half_life=0.125");
	ins(&d, p, 0, 0), ins(&d, p, 1, 0);
	acc(p, 0, 0), acc(p, 0, 1), acc(p, 0, 2), acc(p, 1, 10);
	assert_int_equal(vic(&d, p, 11), 0);
	strata_policy_destroy(p);
	p = mk(&d, STRATA_ROLE_EVICT, "lfu-decay:half_life=100000");
	ins(&d, p, 0, 0), ins(&d, p, 1, 0);
	acc(p, 0, 0), acc(p, 0, 1), acc(p, 0, 2), acc(p, 1, 10);
	assert_int_equal(vic(&d, p, 11), 1);
	strata_policy_destroy(p);
	/* random: seeded, never pinned, every resident possible */
	int64_t seq_a[32], seq_b[32], seq_c[32];
	const char *specs[3] = { "random", "random", "random:seed=5" };
	int64_t *seqs[3] = { seq_a, seq_b, seq_c };
	for (int s = 0; s < 3; s++) {
		p = mk(&d, STRATA_ROLE_EVICT, specs[s]);
		for (uint32_t e = 0; e < 8; e++)
			ins(&d, p, e, e);
		d.pinned[3] = 1;
		for (int i = 0; i < 32; i++) {
			seqs[s][i] = vic(&d, p, 8);
			assert_true(seqs[s][i] >= 0 && seqs[s][i] < 8 && seqs[s][i] != 3);
		}
		d.pinned[3] = 0;
		strata_policy_destroy(p);
	}
	assert_memory_equal(seq_a, seq_b, sizeof(seq_a));
	assert_memory_not_equal(seq_a, seq_c, sizeof(seq_a));
	memset(d.resident, 0, sizeof(d.resident));
}

static void step(struct strata_policy *p, uint64_t token, uint32_t layer, const uint32_t *x, uint32_t n,
		 uint32_t n_tokens)
{
	struct strata_step st = { .token = token, .layer = layer, .n_tokens = n_tokens, .experts = x,
				  .n_experts = n };
	if (p->role == STRATA_ROLE_EVICT)
		strata_evict_ops_of(p)->on_step(p, &st);
	else
		strata_place_ops_of(p)->on_step(p, &st);
}

/* The published baselines (tiny spec: 4 layers x 16 experts, top-2, so a
 * token is 8 clock ticks and eid = layer * 16 + expert). */
static void test_baseline_decisions(void **state)
{
	struct direct d;
	direct_init(&d, NULL);
	/* llama: misses go most-recent in id order, whatever order they came in */
	struct strata_policy *p = mk(&d, STRATA_ROLE_EVICT, "llama:slots=2");
	static const uint32_t s31[] = { 3, 1 }, s5[] = { 5 }, s1[] = { 1 }, s0[] = { 0 };
	step(p, 0, 0, s31, 2, 1);
	ins(&d, p, 3, 0), acc(p, 3, 0), ins(&d, p, 1, 1), acc(p, 1, 1);
	step(p, 1, 0, s5, 1, 1);
	assert_int_equal(vic(&d, p, 8), 1); /* plain LRU would say 3 */
	/* hits go most-recent */
	step(p, 2, 0, s1, 1, 1);
	acc(p, 1, 16);
	assert_int_equal(vic(&d, p, 16), 3);
	/* a layer below its slots takes room from the oldest layer over or at them */
	step(p, 2, 1, s0, 1, 1);
	ins(&d, p, 16, 17), acc(p, 16, 17);
	assert_int_equal(vic(&d, p, 18), 3);
	/* a batch of two tokens leaves the order alone */
	step(p, 3, 0, s31, 2, 2);
	acc(p, 3, 24);
	step(p, 4, 0, s5, 1, 1);
	assert_int_equal(vic(&d, p, 32), 3);
	rem(&d, p, 3), rem(&d, p, 1), rem(&d, p, 16);
	strata_policy_destroy(p);
	/* place llama: an insert cap per step; batches bypass; VRAM starts empty */
	p = mk(&d, STRATA_ROLE_PLACE, "llama:inserts=1");
	const struct strata_place_ops *po = strata_place_ops_of(p);
	uint32_t both = (1u << STRATA_TIER_VRAM) | (1u << STRATA_TIER_RAM), ram = 1u << STRATA_TIER_RAM;
	assert_int_equal(po->initial_tier(p, 0), STRATA_TIER_RAM);
	step(p, 0, 0, s31, 2, 1);
	assert_int_equal(po->admit(p, 3, STRATA_TIER_RAM, 0), both);
	assert_int_equal(po->admit(p, 1, STRATA_TIER_RAM, 1), ram);
	step(p, 1, 0, s31, 2, 0); /* unknown count: 2 experts of top-2, one token */
	assert_int_equal(po->admit(p, 3, STRATA_TIER_RAM, 8), both);
	step(p, 2, 0, s31, 2, 4);
	assert_int_equal(po->admit(p, 3, STRATA_TIER_RAM, 16), ram);
	strata_policy_destroy(p);

	/* lfru: each earlier use adds weight tokens (16 ticks at weight 2) */
	for (int w = 0; w < 2; w++) {
		p = mk(&d, STRATA_ROLE_EVICT, w ? "lfru:weight=2" : "lfru:weight=0");
		ins(&d, p, 0, 0), acc(p, 0, 0), acc(p, 0, 1); /* key 1 + 16 */
		ins(&d, p, 1, 10), acc(p, 1, 10);                /* key 10 */
		ins(&d, p, 2, 20), acc(p, 2, 20);
		assert_int_equal(vic(&d, p, 21), w ? 1 : 0);
		rem(&d, p, 0), rem(&d, p, 1), rem(&d, p, 2);
		strata_policy_destroy(p);
	}

	/* least-stale: expected next use = last + EWMA gap, furthest leaves */
	p = mk(&d, STRATA_ROLE_EVICT, "least-stale:prior=4");
	ins(&d, p, 0, 0), acc(p, 0, 0), acc(p, 0, 4), acc(p, 0, 8); /* next 12 */
	ins(&d, p, 1, 1), acc(p, 1, 1), acc(p, 1, 9);                /* next 17 */
	assert_int_equal(vic(&d, p, 10), 1);
	ins(&d, p, 2, 9), acc(p, 2, 9); /* seen once: 9 + 4 tokens = 41 */
	assert_int_equal(vic(&d, p, 10), 2);
	static const uint32_t s2[] = { 2 };
	step(p, 2, 0, s2, 1, 1); /* the current step's expert stays */
	assert_int_equal(vic(&d, p, 10), 1);
	/* long past every expectation: the one away longest leaves */
	step(p, 50, 1, s0, 1, 1);
	assert_int_equal(vic(&d, p, 100), 0);
	rem(&d, p, 0), rem(&d, p, 1), rem(&d, p, 2);
	strata_policy_destroy(p);

	/* moe-infinity: decay x row-normalised activations x frequency */
	p = mk(&d, STRATA_ROLE_EVICT, "moe-infinity");
	static const uint32_t s12[] = { 1, 2 };
	step(p, 0, 0, s12, 2, 1);
	step(p, 1, 0, s1, 1, 1);
	step(p, 1, 1, s1, 1, 1); /* layer 1 runs: layer 0 is 3 layers ahead */
	ins(&d, p, 1, 0), ins(&d, p, 2, 1), ins(&d, p, 17, 2);
	/* e1: .5 x 2/3 x 2/5; e2: .5 x 1/3 x 1/5; e17: .25 x 1 x 1/5 */
	assert_int_equal(vic(&d, p, 3), 2);
	d.pinned[2] = 1;
	assert_int_equal(vic(&d, p, 3), 17);
	d.pinned[2] = 0;
	rem(&d, p, 1), rem(&d, p, 2), rem(&d, p, 17);
	strata_policy_destroy(p);
	p = mk(&d, STRATA_ROLE_PREFETCH, "moe-infinity:topn=1");
	const struct strata_prefetch_ops *pf = strata_prefetch_ops_of(p);
	struct strata_prefetch_req req[8];
	struct strata_layer_ctx ctx = { .token = 2, .layer = 0 };
	assert_int_equal(pf->on_layer(p, &ctx, req, 8), 0); /* nothing learnt yet */
	pf->on_route(p, 0, 1, s12, 2);
	pf->on_route(p, 1, 1, s1, 1);
	assert_int_equal(pf->on_layer(p, &ctx, req, 8), 1);
	assert_int_equal(req[0].eid, 17);
	ctx.layer = 3; /* nothing after the last layer */
	assert_int_equal(pf->on_layer(p, &ctx, req, 8), 0);
	strata_policy_destroy(p);
	memset(d.resident, 0, sizeof(d.resident));
}

/* lfru with weight 0 is LRU, on every budget of the golden trace. */
static void test_lfru_weight0_is_lru(void **state)
{
	for (uint32_t b = 3; b <= 40; b += 37 / 4) {
		struct strata_harness_counters k[2];
		for (int i = 0; i < 2; i++) {
			struct strata_harness_config c;
			strata_harness_config_defaults(&c);
			c.budget = b * MIB;
			c.evict = i ? "lfru:weight=0" : "lru";
			struct strata_error err = { 0 };
			assert_int_equal(strata_harness_run(trace, &c, &k[i], &err), 0);
		}
		assert_memory_equal(&k[0], &k[1], sizeof(k[0]));
	}
}

static void test_belady_decisions(void **state)
{
	/* layer 0 of the tiny spec; accesses: 0:e1 1:e2 2:e3 3:e1 4:e3 5:e2 6:e4 */
	static const uint32_t seq[] = { 1, 2, 3, 1, 3, 2, 4 };
	struct strata_harness_step steps[7];
	for (int i = 0; i < 7; i++)
		steps[i] = (struct strata_harness_step){ .token = (uint64_t)i, .n = 1, .experts = &seq[i] };
	struct strata_harness_trace *t;
	struct strata_error err = { 0 };
	struct strata_model_spec s1;
	assert_int_equal(strata_model_spec_parse("tiny:layers=1,experts=8,top_k=1", &s1, &err), 0);
	assert_int_equal(strata_harness_trace_build(&s1, steps, 7, &t, &err), 0);
	const struct strata_future *f = strata_harness_trace_future(t);
	assert_int_equal(f->next_use(f, 1, 0), 3);
	assert_int_equal(f->next_use(f, 1, 3), STRATA_NEVER);
	assert_int_equal(f->next_use(f, 2, 0), 1);
	assert_int_equal(f->next_use(f, 9, 0), STRATA_NEVER);
	uint32_t out[4];
	assert_int_equal(f->routed(f, 4, 0, out, 4), 1);
	assert_int_equal(out[0], 3);
	assert_int_equal(f->routed(f, 7, 0, out, 4), 0);
	assert_int_equal(f->n_tokens, 7);
	struct direct d;
	direct_init(&d, f);
	d.env.spec = &s1;
	d.env.n_ids = 8;
	struct strata_policy *p = mk(&d, STRATA_ROLE_EVICT, "farthest");
	ins(&d, p, 1, 0), acc(p, 1, 0);
	ins(&d, p, 2, 1), acc(p, 2, 1);
	ins(&d, p, 3, 2), acc(p, 3, 2);
	/* at 2: next uses 1->3, 2->5, 3->4: the farthest is 2 */
	assert_int_equal(vic(&d, p, 2), 2);
	d.pinned[2] = 1;
	assert_int_equal(vic(&d, p, 2), 3);
	d.pinned[2] = 0;
	acc(p, 1, 3); /* 1 is never used again: now the victim */
	assert_int_equal(vic(&d, p, 3), 1);
	/* an access the policy never hears of: key 3 is stale at 5, refreshed */
	rem(&d, p, 1);
	assert_int_equal(vic(&d, p, 5), 3); /* 3: never again; 2: at 5 */
	strata_policy_destroy(p);
	strata_harness_trace_free(t);
}

/* A synthetic future for test_belady_random: each eid's uses at sorted
 * positions, two eids sometimes at one position (a trace never does that; the
 * policy must still break the tie by eid), positions past the policy's first
 * index block. */
struct synth_future {
	uint64_t pos[64][40];
	uint32_t n[64];
};

static uint64_t synth_next_use(const struct strata_future *f, uint32_t eid, uint64_t now)
{
	const struct synth_future *sf = f->priv;
	if (eid >= 64)
		return STRATA_NEVER;
	for (uint32_t i = 0; i < sf->n[eid]; i++)
		if (sf->pos[eid][i] > now)
			return sf->pos[eid][i];
	return STRATA_NEVER;
}

static uint64_t lcg(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 33;
}

/* Belady against a literal model (every resident key refreshed when stale,
 * the largest next use wins, ties to the smaller eid), driven directly with
 * random inserts, reported and unreported accesses, removals and pins. */
static void test_belady_random(void **state)
{
	static struct synth_future sf;
	uint64_t seed = 42;
	for (uint32_t e = 0; e < 64; e++) {
		uint64_t t = lcg(&seed) % 50;
		sf.n[e] = e % 9 == 0 ? 0 : (uint32_t)(lcg(&seed) % 40); /* some never used */
		for (uint32_t i = 0; i < sf.n[e]; i++) {
			t += 1 + lcg(&seed) % (e % 5 == 0 ? 40000 : 300); /* some far beyond 2^18 */
			sf.pos[e][i] = t;
		}
	}
	struct strata_future f = { .next_use = synth_next_use, .n_tokens = 1, .priv = &sf };
	struct direct d;
	direct_init(&d, &f);
	struct strata_policy *p = mk(&d, STRATA_ROLE_EVICT, "farthest");
	uint64_t key[64] = { 0 };
	int checked = 0;
	for (uint64_t now = 0; now < 20000; now += lcg(&seed) % 3) {
		uint32_t e = (uint32_t)(lcg(&seed) % 64), op = (uint32_t)(lcg(&seed) % 10);
		if (op < 3 && !d.resident[e]) {
			ins(&d, p, e, now);
			key[e] = synth_next_use(&f, e, now ? now - 1 : 0);
		} else if (op < 6 && d.resident[e]) {
			acc(p, e, now);
			key[e] = synth_next_use(&f, e, now);
		} else if (op < 7 && d.resident[e]) {
			rem(&d, p, e);
		} else if (op < 8) {
			d.pinned[e] ^= 1;
		} else {
			/* a victim query; positions the clock passed without an
			 * on_access are accesses the policy never heard of (stale keys) */
			int64_t best = -1;
			for (uint32_t c = 0; c < 64; c++) {
				if (!d.resident[c])
					continue;
				if (key[c] < now)
					key[c] = synth_next_use(&f, c, now ? now - 1 : 0);
				if (!d.pinned[c] && (best < 0 || key[c] > key[best]))
					best = c;
			}
			assert_int_equal(vic(&d, p, now), best < 0 ? STRATA_NO_EXPERT : best);
			checked++;
		}
	}
	assert_true(checked > 1000);
	assert_null(strata_policy_error(p));
	strata_policy_destroy(p);
}

static void test_prefetch_decisions(void **state)
{
	const struct strata_future *f = strata_harness_trace_future(trace);
	struct direct d;
	direct_init(&d, f);
	struct strata_prefetch_req req[64];
	/* lookahead: depth, topn, min_score, tier */
	static const struct strata_hint hints[] = {
		{ 1, 5, 0.9f }, { 1, 6, 0.2f }, { 1, 7, 0.5f }, { 2, 8, 0.7f }, { 3, 9, 1.0f },
		{ 0, 3, 1.0f }, /* not ahead: ignored */
	};
	struct strata_layer_ctx ctx = { .token = 0, .layer = 0, .now = 0, .hints = hints, .n_hints = 6 };
	struct strata_policy *p = mk(&d, STRATA_ROLE_PREFETCH, "lookahead:adaptive=0:depth=1");
	uint32_t n = strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 64);
	assert_int_equal(n, 2); /* depth 1, top_k = 2 */
	assert_int_equal(req[0].eid, strata_eid(&spec, 1, 5));
	assert_int_equal(req[1].eid, strata_eid(&spec, 1, 7));
	assert_int_equal(req[0].tier, STRATA_TIER_VRAM);
	assert_int_equal(strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 1), 1);
	strata_policy_destroy(p);
	p = mk(&d, STRATA_ROLE_PREFETCH, "lookahead:adaptive=0:depth=3:topn=1:min_score=0.6:tier=ram");
	n = strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 64);
	assert_int_equal(n, 3);
	assert_int_equal(req[0].eid, strata_eid(&spec, 1, 5));
	assert_int_equal(req[1].eid, strata_eid(&spec, 2, 8));
	assert_int_equal(req[2].eid, strata_eid(&spec, 3, 9));
	assert_int_equal(req[2].tier, STRATA_TIER_RAM);
	strata_policy_destroy(p);

	/* oracle: accuracy 1 is the truth (wrapping into the next token) */
	p = mk(&d, STRATA_ROLE_PREFETCH, "oracle:depth=2");
	struct strata_layer_ctx oc = { .token = 5, .layer = 3 };
	n = strata_prefetch_ops_of(p)->on_layer(p, &oc, req, 64);
	assert_int_equal(n, 4);
	uint32_t truth[4];
	f->routed(f, 6, 0, truth, 2);
	f->routed(f, 6, 1, truth + 2, 2);
	for (int i = 0; i < 4; i++)
		assert_int_equal(req[i].eid, strata_eid(&spec, (uint32_t)i / 2, truth[i]));
	/* past the end of the trace: nothing */
	oc.token = TRACE_TOKENS - 1;
	assert_int_equal(strata_prefetch_ops_of(p)->on_layer(p, &oc, req, 64), 0);
	strata_policy_destroy(p);
	/* accuracy 0: never in the true set; 0.5: about half */
	for (int a = 0; a < 2; a++) {
		p = mk(&d, STRATA_ROLE_PREFETCH, a ? "oracle:accuracy=0.5" : "oracle:accuracy=0");
		uint32_t right = 0, total = 0;
		for (uint64_t tok = 0; tok + 1 < TRACE_TOKENS; tok++)
			for (uint32_t l = 0; l < spec.n_moe_layers; l++) {
				struct strata_layer_ctx c2 = { .token = tok, .layer = l };
				n = strata_prefetch_ops_of(p)->on_layer(p, &c2, req, 64);
				uint32_t tl = (l + 1) % spec.n_moe_layers;
				uint64_t tt = tok + (l + 1) / spec.n_moe_layers;
				uint32_t m = f->routed(f, tt, tl, truth, 4);
				for (uint32_t i = 0; i < n; i++) {
					total++;
					for (uint32_t j = 0; j < m; j++)
						right += req[i].eid == strata_eid(&spec, tl, truth[j]);
				}
			}
		assert_int_equal(total, (TRACE_TOKENS - 1) * spec.n_moe_layers * spec.top_k);
		if (!a)
			assert_int_equal(right, 0);
		else
			assert_true(right > total * 2 / 5 && right < total * 3 / 5);
		strata_policy_destroy(p);
	}

	/* history: a trace that repeats itself is learnt exactly */
	p = mk(&d, STRATA_ROLE_PREFETCH, "history:mix=1");
	static const uint32_t route[4][2] = { { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } };
	for (uint64_t tok = 0; tok < 4; tok++) {
		for (uint32_t l = 0; l < 4; l++) {
			struct strata_layer_ctx c3 = { .token = tok, .layer = l, .experts = route[l],
						       .n_experts = 2 };
			n = strata_prefetch_ops_of(p)->on_layer(p, &c3, req, 64);
			if (tok == 0)
				assert_int_equal(n, 0);
			if (tok >= 1 && l + 1 < 4) {
				/* the table, seen once, predicts layer l+1 from l */
				assert_int_equal(n, 2);
				assert_int_equal(req[0].eid, strata_eid(&spec, l + 1, route[l + 1][0]));
				assert_int_equal(req[1].eid, strata_eid(&spec, l + 1, route[l + 1][1]));
			}
			strata_prefetch_ops_of(p)->on_route(p, tok, l, route[l], 2);
		}
	}
	strata_policy_destroy(p);
	/* without the layer's experts in ctx: keyed on layer l-1 at distance 2 */
	p = mk(&d, STRATA_ROLE_PREFETCH, "history:mix=1:depth=2");
	for (uint64_t tok = 0; tok < 3; tok++)
		for (uint32_t l = 0; l < 4; l++) {
			struct strata_layer_ctx c5 = { .token = tok, .layer = l };
			n = strata_prefetch_ops_of(p)->on_layer(p, &c5, req, 64);
			if (tok >= 1 && l >= 1 && l + 1 < 4) {
				assert_int_equal(n, 2);
				assert_int_equal(req[0].eid, strata_eid(&spec, l + 1, route[l + 1][0]));
			}
			strata_prefetch_ops_of(p)->on_route(p, tok, l, route[l], 2);
		}
	strata_policy_destroy(p);
	/* the window alone (mix=0) predicts from earlier tokens, layer 0 too */
	p = mk(&d, STRATA_ROLE_PREFETCH, "history:mix=0:depth=2");
	for (uint64_t tok = 0; tok < 3; tok++)
		for (uint32_t l = 0; l < 4; l++) {
			struct strata_layer_ctx c4 = { .token = tok, .layer = l };
			n = strata_prefetch_ops_of(p)->on_layer(p, &c4, req, 64);
			if (tok == 0)
				assert_int_equal(n, 0);
			else if (l == 0) {
				assert_int_equal(n, 4);
				assert_int_equal(req[0].eid, strata_eid(&spec, 1, 3));
				assert_int_equal(req[3].eid, strata_eid(&spec, 2, 6));
			}
			strata_prefetch_ops_of(p)->on_route(p, tok, l, route[l], 2);
		}
	strata_policy_destroy(p);
}

/* Adaptive lookahead with a RAM tier: every distance is scored on its own
 * (a hint first seen two layers ahead is scored again at one layer ahead, so
 * the distance-1 band warms up while staging is on); after the warm-up, a
 * RAM-resident expert predicted one layer ahead is copied into VRAM, an
 * NVMe one lands in RAM with via_ram=1 (straight into VRAM without), one two
 * layers ahead is staged into RAM (stage=-1: depth+1). */
static void test_lookahead_adaptive_tiers(void **state)
{
	struct direct d;
	direct_init(&d, NULL);
	uint8_t in_vram[64] = { 0 }, in_ram[64] = { 0 };
	struct strata_prefetch_sched sched;
	strata_prefetch_sched_defaults(&sched);
	sched.resident[STRATA_TIER_VRAM] = in_vram;
	sched.resident[STRATA_TIER_RAM] = in_ram;
	d.env.sched = &sched;
	d.env.budget[STRATA_TIER_VRAM] = 1u << 20;
	d.env.budget[STRATA_TIER_RAM] = 1u << 30;
	in_ram[strata_eid(&spec, 1, 1)] = 1;
	static const uint32_t route[2] = { 1, 2 };
	struct strata_prefetch_req req[64];
	for (int v = 0; v < 2; v++) {
		struct strata_policy *p = mk(&d, STRATA_ROLE_PREFETCH, v ? "lookahead:depth=1:warmup=64:stage=-1:via_ram=0"
									 : "lookahead:depth=1:warmup=64:stage=-1:via_ram=1");
		uint32_t n = 0;
		for (uint64_t tok = 0; tok < 20; tok++)
			for (uint32_t l = 0; l < spec.n_moe_layers; l++) {
				struct strata_hint h[4];
				uint32_t nh = 0;
				for (uint32_t a = l + 1; a <= l + 2 && a < spec.n_moe_layers; a++)
					for (int j = 0; j < 2; j++)
						h[nh++] = (struct strata_hint){ a, route[j], 1.0f };
				struct strata_layer_ctx c = { .token = tok, .layer = l, .hints = h, .n_hints = nh };
				n = strata_prefetch_ops_of(p)->on_layer(p, &c, req, 64);
				if (tok == 0)
					assert_int_equal(n, 0); /* nothing before a band has been seen come true */
				if (tok == 19 && l == 0)
					break;
				strata_prefetch_ops_of(p)->on_route(p, tok, l, route, 2);
			}
		/* the last on_layer: layer 0, hints for layers 1 (d=1) and 2 (d=2) */
		assert_int_equal(n, 4);
		int want[4] = { STRATA_TIER_VRAM, v ? STRATA_TIER_VRAM : STRATA_TIER_RAM, STRATA_TIER_RAM, STRATA_TIER_RAM };
		uint32_t eid[4] = { strata_eid(&spec, 1, 1), strata_eid(&spec, 1, 2), strata_eid(&spec, 2, 1),
				    strata_eid(&spec, 2, 2) };
		for (int i = 0; i < 4; i++) {
			assert_int_equal(req[i].eid, eid[i]);
			assert_int_equal(req[i].tier, want[i]);
		}
		strata_policy_destroy(p);
	}
}

/* via_ram=auto (the default): an NVMe read for VRAM lands in RAM only into
 * the free hole the engine publishes (sched.ram_hole, less what earlier
 * requests of the step land there), else straight into VRAM; a RAM copy and
 * an expert already in VRAM are asked for VRAM; a staged hint without room is
 * not asked for; the engine is told never to evict for a landing
 * (ram_holes_only).  via_ram=1 lands every such read in RAM, via_ram=0 none. */
static void test_lookahead_via_ram_auto(void **state)
{
	struct direct d;
	direct_init(&d, NULL);
	uint8_t in_vram[64] = { 0 }, in_ram[64] = { 0 };
	uint64_t bytes[64];
	for (int i = 0; i < 64; i++)
		bytes[i] = 1000000; /* 1003520 bytes in the tier (4 KiB pages) */
	struct strata_prefetch_sched sched;
	strata_prefetch_sched_defaults(&sched);
	sched.resident[STRATA_TIER_VRAM] = in_vram;
	sched.resident[STRATA_TIER_RAM] = in_ram;
	d.env.sched = &sched;
	d.env.expert_bytes = bytes;
	d.env.budget[STRATA_TIER_VRAM] = 1u << 30;
	d.env.budget[STRATA_TIER_RAM] = 1u << 30;
	in_ram[strata_eid(&spec, 1, 1)] = 1;
	in_vram[strata_eid(&spec, 1, 4)] = 1;
	/* layer 0: hints for layer 1 (experts 1-4) and layer 2 (expert 5) */
	struct strata_hint h[5] = { { 1, 1, 1.0f }, { 1, 2, 0.9f }, { 1, 3, 0.8f }, { 1, 4, 0.7f }, { 2, 5, 1.0f } };
	struct strata_layer_ctx c = { .token = 0, .layer = 0, .hints = h, .n_hints = 5 };
	struct strata_prefetch_req req[16];
	enum { V = STRATA_TIER_VRAM, R = STRATA_TIER_RAM };
	static const struct {
		const char *spec;
		uint64_t hole;
		bool holes_only;
		uint32_t n, tier[5];
	} cases[] = {
		/* room for one expert: 1/2 lands in RAM, 1/3 goes straight into VRAM */
		{ "lookahead:adaptive=0:topn=4:depth=1:stage=0", 1100000, true, 4, { V, R, V, V } },
		{ "lookahead:adaptive=0:topn=4:depth=1:stage=0", 3000000, true, 4, { V, R, R, V } },
		{ "lookahead:adaptive=0:topn=4:depth=1:stage=0", 0, true, 4, { V, V, V, V } },
		{ "lookahead:adaptive=0:topn=4:depth=1:stage=0:via_ram=1", 0, false, 4, { V, R, R, V } },
		{ "lookahead:adaptive=0:topn=4:depth=1:stage=0:via_ram=0", 3000000, false, 4, { V, V, V, V } },
		/* staging 2/5 (stage=-1: depth+1, the default) needs room too, after 1/2 and 1/3 */
		{ "lookahead:adaptive=0:topn=4:depth=1", 1100000, true, 4, { V, R, V, V } },
		{ "lookahead:adaptive=0:topn=4:depth=1:stage=-1", 3100000, true, 5, { V, R, R, V, R } },
		{ "lookahead:adaptive=0:topn=4:depth=1:via_ram=1", 0, false, 5, { V, R, R, V, R } },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		strata_prefetch_sched_defaults(&sched);
		sched.resident[STRATA_TIER_VRAM] = in_vram;
		sched.resident[STRATA_TIER_RAM] = in_ram;
		sched.ram_hole = cases[k].hole;
		struct strata_policy *p = mk(&d, STRATA_ROLE_PREFETCH, cases[k].spec);
		assert_int_equal(sched.ram_holes_only, cases[k].holes_only);
		uint32_t n = strata_prefetch_ops_of(p)->on_layer(p, &c, req, 16);
		if (n != cases[k].n)
			fail_msg("%s, hole %llu: %u requests, want %u", cases[k].spec, (unsigned long long)cases[k].hole, n,
				 cases[k].n);
		for (uint32_t i = 0; i < n; i++)
			if (req[i].tier != cases[k].tier[i])
				fail_msg("%s, hole %llu: request %u (expert %u) into tier %u, want %u", cases[k].spec,
					 (unsigned long long)cases[k].hole, i, req[i].eid, req[i].tier, cases[k].tier[i]);
		strata_policy_destroy(p);
	}
}

/* 400 tokens of hints for experts 1 and 2 of the next `ahead` layers, right
 * 90% of the time (expert 1 always routed, expert 2 on 8 tokens of 10, else
 * expert 3), then one more on_layer at layer 0: its requests into req, their
 * count returned. */
static uint32_t lookahead_warm(struct strata_policy *p, uint32_t ahead, struct strata_prefetch_req *req, uint32_t max)
{
	uint32_t n = 0;
	for (uint64_t tok = 0; tok <= 400; tok++)
		for (uint32_t l = 0; l < spec.n_moe_layers; l++) {
			uint32_t route[2] = { 1, tok % 10 < 8 ? 2 : 3 };
			struct strata_hint h[8];
			uint32_t nh = 0;
			for (uint32_t a = l + 1; a <= l + ahead && a < spec.n_moe_layers && nh + 2 <= 8; a++) {
				h[nh++] = (struct strata_hint){ a, 1, 1.0f };
				h[nh++] = (struct strata_hint){ a, 2, 1.0f };
			}
			struct strata_layer_ctx c = { .token = tok, .layer = l, .hints = h, .n_hints = nh,
						      .experts = route, .n_experts = 2 };
			n = strata_prefetch_ops_of(p)->on_layer(p, &c, req, max);
			if (tok == 400)
				break; /* the last on_layer: layer 0 */
			strata_prefetch_ops_of(p)->on_route(p, tok, l, route, 2);
		}
	return n;
}

/* nvme_cost (the default): an NVMe read also needs the accuracy at which it
 * breaks even, c / (c + h / m) from the cost model (default: 6 GB/s NVMe,
 * 50 GB/s PCIe).  A band right 90% of the time (hint 1 always routed, hint 2
 * on 8 tokens of 10) asks for 1 MB reads (break-even 0.74 with m = 2 reads)
 * but not for 40 MB ones (0.934); nvme_cost=0 asks for them; with expert 1
 * in RAM one read is left (m = 1: 0.877, asked) and its RAM copy is asked
 * either way; where the routed experts of layers 0 and 3 are in VRAM (hit
 * rate 0.5) a read into VRAM also costs the resident it evicts (0.914: not
 * asked), while one into a free RAM hole does not (0.877: asked, into RAM). */
static void test_lookahead_nvme_cost(void **state)
{
	struct direct d;
	direct_init(&d, NULL);
	uint8_t in_vram[64], in_ram[64];
	uint64_t bytes[64];
	struct strata_prefetch_sched sched;
	d.env.sched = &sched;
	d.env.expert_bytes = bytes;
	d.env.budget[STRATA_TIER_VRAM] = 1u << 30;
	d.env.budget[STRATA_TIER_RAM] = 1u << 30;
	enum { V = STRATA_TIER_VRAM, R = STRATA_TIER_RAM };
	static const struct {
		const char *spec;
		uint64_t bytes, hole;
		bool ram1, vram03;
		uint32_t n, tier[2];
	} cases[] = {
		{ "lookahead:depth=1", 1000000, 0, false, false, 2, { V, V } },
		{ "lookahead:depth=1", 40000000, 0, false, false, 0, { 0 } },
		{ "lookahead:depth=1:nvme_cost=0", 40000000, 0, false, false, 2, { V, V } },
		{ "lookahead:depth=1", 40000000, 0, true, false, 2, { V, V } },
		{ "lookahead:depth=1", 40000000, 0, true, true, 1, { V } },
		{ "lookahead:depth=1", 40000000, 1u << 30, true, true, 2, { V, R } },
		{ "lookahead:depth=1:nvme_cost=0", 40000000, 0, true, true, 2, { V, V } },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		memset(in_vram, 0, sizeof(in_vram));
		memset(in_ram, 0, sizeof(in_ram));
		for (int i = 0; i < 64; i++)
			bytes[i] = cases[k].bytes;
		for (uint32_t l = 0; l < spec.n_moe_layers; l++) {
			in_ram[strata_eid(&spec, l, 1)] = cases[k].ram1;
			if (cases[k].vram03 && (l == 0 || l == 3))
				in_vram[strata_eid(&spec, l, 1)] = in_vram[strata_eid(&spec, l, 2)] = 1;
		}
		strata_prefetch_sched_defaults(&sched);
		sched.resident[V] = in_vram;
		sched.resident[R] = in_ram;
		sched.ram_hole = cases[k].hole;
		struct strata_policy *p = mk(&d, STRATA_ROLE_PREFETCH, cases[k].spec);
		struct strata_prefetch_req req[16];
		uint32_t n = lookahead_warm(p, 1, req, 16); /* the last: hints for layer 1 */
		if (n != cases[k].n)
			fail_msg("case %zu (%s): %u requests, want %u", k, cases[k].spec, n, cases[k].n);
		for (uint32_t i = 0; i < n; i++) {
			assert_int_equal(req[i].eid, strata_eid(&spec, 1, 1 + i));
			if (req[i].tier != cases[k].tier[i])
				fail_msg("case %zu (%s): request %u into tier %u, want %u", k, cases[k].spec, i, req[i].tier,
					 cases[k].tier[i]);
		}
		strata_policy_destroy(p);
	}
}

/* stage=-1 (the default: one layer deeper than depth into RAM) and what the
 * staged reads cost the ones within depth under nvme_cost.  Expert 1 is in
 * RAM on every layer, expert 2 on NVMe only; the hints name both for the next
 * two layers, right 90% of the time (as in test_lookahead_nvme_cost), and RAM
 * has a free hole.  With 1 MB experts the default copies 1/1 into VRAM, reads
 * 1/2 into RAM and stages layer 2's hints into RAM (2/1 is already there: the
 * engine counts it redundant); stage=0 stops at layer 1.  With 40 MB ones the
 * read within depth shares its window with the reads within depth only (m =
 * 1: break-even 0.877, asked), not with the staged one queued behind it; the
 * staged read shares it with both (m = 2: 0.934, not asked). */
static void test_lookahead_stage(void **state)
{
	struct direct d;
	direct_init(&d, NULL);
	uint8_t in_vram[64] = { 0 }, in_ram[64] = { 0 };
	uint64_t bytes[64];
	struct strata_prefetch_sched sched;
	d.env.sched = &sched;
	d.env.expert_bytes = bytes;
	d.env.budget[STRATA_TIER_VRAM] = 1u << 30;
	d.env.budget[STRATA_TIER_RAM] = 1u << 30;
	for (uint32_t l = 0; l < spec.n_moe_layers; l++)
		in_ram[strata_eid(&spec, l, 1)] = 1;
	enum { V = STRATA_TIER_VRAM, R = STRATA_TIER_RAM };
	static const struct {
		const char *spec;
		uint64_t bytes;
		uint32_t n, layer[4], expert[4], tier[4];
	} cases[] = {
		{ "lookahead:depth=1", 1000000, 4, { 1, 1, 2, 2 }, { 1, 2, 1, 2 }, { V, R, R, R } },
		{ "lookahead:depth=1:stage=0", 1000000, 2, { 1, 1 }, { 1, 2 }, { V, R } },
		{ "lookahead:depth=1", 40000000, 3, { 1, 1, 2 }, { 1, 2, 1 }, { V, R, R } },
		{ "lookahead:depth=1:stage=0", 40000000, 2, { 1, 1 }, { 1, 2 }, { V, R } },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		for (int i = 0; i < 64; i++)
			bytes[i] = cases[k].bytes;
		strata_prefetch_sched_defaults(&sched);
		sched.resident[V] = in_vram;
		sched.resident[R] = in_ram;
		sched.ram_hole = 1u << 30;
		struct strata_policy *p = mk(&d, STRATA_ROLE_PREFETCH, cases[k].spec);
		struct strata_prefetch_req req[16];
		uint32_t n = lookahead_warm(p, 2, req, 16); /* the last: hints for layers 1 and 2 */
		if (n != cases[k].n)
			fail_msg("case %zu (%s): %u requests, want %u", k, cases[k].spec, n, cases[k].n);
		for (uint32_t i = 0; i < n; i++)
			if (req[i].eid != strata_eid(&spec, cases[k].layer[i], cases[k].expert[i]) ||
			    req[i].tier != cases[k].tier[i])
				fail_msg("case %zu (%s): request %u is expert %u into tier %u, want %u/%u into %u", k,
					 cases[k].spec, i, req[i].eid, req[i].tier, cases[k].layer[i], cases[k].expert[i],
					 cases[k].tier[i]);
		strata_policy_destroy(p);
	}
}

/* ---- the harness itself: errors name the policy ---- */

static void ins_noop(struct strata_policy *p, uint32_t e, uint64_t n) { }
static void rem_noop(struct strata_policy *p, uint32_t e) { }
static int64_t victim_first_pinned(struct strata_policy *p, uint64_t n, const struct strata_residency *r)
{
	for (uint32_t e = 0; e < p->env->n_ids; e++)
		if (r->pinned[e] && r->resident[e])
			return e;
	for (uint32_t e = 0; e < p->env->n_ids; e++)
		if (r->resident[e])
			return e;
	return STRATA_NO_EXPERT;
}
static int64_t victim_absent(struct strata_policy *p, uint64_t n, const struct strata_residency *r)
{
	for (uint32_t e = 0; e < p->env->n_ids; e++)
		if (!r->resident[e])
			return e;
	return STRATA_NO_EXPERT;
}
static int64_t victim_fails(struct strata_policy *p, uint64_t n, const struct strata_residency *r)
{
	STRATA_ERR(&p->error, STRATA_ESCRIPT, "failing.lua:3: attempt to index a nil value");
	return STRATA_NO_EXPERT;
}
static uint32_t bad_prefetch(struct strata_policy *p, const struct strata_layer_ctx *c,
			     struct strata_prefetch_req *out, uint32_t max)
{
	out[0].eid = 1000;
	out[0].tier = 0;
	return 1;
}

static void test_harness_errors(void **state)
{
	static const struct strata_evict_ops broken_pin = {
		.name = "broken", .version = STRATA_POLICY_ABI, .on_insert = ins_noop,
		.on_access = ins_noop, .on_remove = rem_noop, .victim = victim_first_pinned,
	};
	static const struct strata_evict_ops broken_absent = {
		.name = "ghost", .version = STRATA_POLICY_ABI, .on_insert = ins_noop,
		.on_access = ins_noop, .on_remove = rem_noop, .victim = victim_absent,
	};
	static const struct strata_prefetch_ops broken_pf = {
		.name = "wild", .version = STRATA_POLICY_ABI, .on_layer = bad_prefetch,
	};
	struct strata_harness_config c;
	strata_harness_config_defaults(&c);
	c.budget = 4 * c.expert_bytes;
	c.evict_ops = &broken_pin;
	struct strata_harness_counters k;
	struct strata_error err = { 0 };
	assert_int_equal(strata_harness_run(trace, &c, &k, &err), STRATA_EPOLICY);
	assert_non_null(strstr(err.msg, "evict broken: chose expert"));
	assert_non_null(strstr(err.msg, "pinned by the running layer"));
	c.evict_ops = &broken_absent;
	assert_int_equal(strata_harness_run(trace, &c, &k, &err), STRATA_EPOLICY);
	assert_non_null(strstr(err.msg, "evict ghost: chose expert 0, which is not resident"));
	/* an op that records a failure (as the Lua adapter does) fails the run */
	static const struct strata_evict_ops failing = {
		.name = "failing", .version = STRATA_POLICY_ABI, .on_insert = ins_noop,
		.on_access = ins_noop, .on_remove = rem_noop, .victim = victim_fails,
	};
	c.evict_ops = &failing;
	assert_int_equal(strata_harness_run(trace, &c, &k, &err), STRATA_ESCRIPT);
	assert_string_equal(err.msg, "failing.lua:3: attempt to index a nil value");
	c.evict_ops = NULL;
	c.prefetch_ops = &broken_pf;
	assert_int_equal(strata_harness_run(trace, &c, &k, &err), STRATA_EPOLICY);
	assert_string_equal(err.msg, "prefetch wild: asked for expert 1000 of 64");
	c.prefetch_ops = NULL;
	/* a budget that cannot hold one layer's two experts */
	c.budget = c.expert_bytes;
	assert_int_equal(strata_harness_run(trace, &c, &k, &err), STRATA_EBUDGET);
	assert_non_null(strstr(err.msg, "budget 1048576 bytes cannot hold expert"));
	assert_non_null(strstr(err.msg, "(evict lru)"));
	/* bad policy specs fail open and name the policy */
	c.budget = 8 * c.expert_bytes;
	c.evict = "farthest";
	c.hide_future = 1;
	assert_int_equal(strata_harness_run(trace, &c, &k, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "evict farthest: needs the future"));
	c.hide_future = 0;
	c.evict = "lru";
	c.prefetch = "lookahead:depth=0";
	assert_int_equal(strata_harness_run(trace, &c, &k, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "prefetch lookahead: option depth=0: out of range"));
	/* bad traces */
	static const uint32_t big[] = { 99 };
	struct strata_harness_step st = { .n = 1, .experts = big };
	struct strata_harness_trace *t;
	assert_int_equal(strata_harness_trace_build(&spec, &st, 1, &t, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "expert 99 >= 16"));
	st.layer = 9;
	assert_int_equal(strata_harness_trace_build(&spec, &st, 1, &t, &err), STRATA_EINVAL);
	assert_int_equal(strata_harness_trace_gen(&spec, 0, 1, &t, &err), STRATA_EINVAL);
}

/* Static placement preloads the hot tier; promote=none streams misses. */
static void test_static_placement(void **state)
{
	struct strata_harness_config c;
	strata_harness_config_defaults(&c);
	c.budget = 8 * MIB;
	c.expert_bytes = MIB;
	c.tier_table = tier_table;
	c.place = "static";
	struct strata_harness *h;
	struct strata_error err = { 0 };
	assert_int_equal(strata_harness_open(trace, &c, &h, &err), 0);
	for (uint32_t e = 0; e < 64; e++)
		assert_int_equal(strata_harness_resident(h, e), tier_table[e] == STRATA_TIER_VRAM);
	assert_int_equal(strata_harness_replay(h, &err), 0);
	const struct strata_harness_counters *k = strata_harness_counters(h);
	assert_int_equal(k->preloaded, 8);
	assert_int_equal(k->inserts, 0);
	assert_int_equal(k->evictions, 0);
	assert_int_equal(k->bypasses, k->misses);
	/* the set never changed */
	for (uint32_t e = 0; e < 64; e++)
		assert_int_equal(strata_harness_resident(h, e), tier_table[e] == STRATA_TIER_VRAM);
	assert_string_equal(strata_harness_policy(h, STRATA_ROLE_PLACE)->name, "static");
	assert_string_equal(strata_harness_policy(h, STRATA_ROLE_EVICT)->name, "lru");
	strata_harness_close(h);
}

/* ---- ProMoE stride prefetch, early preemption, ExpertFlow's horizon ---- */

/* A hand-made run of one token through 4 layers of a top-1 model with
 * promoe:stride=2:inflight=1: layer 0 predicts expert 5 for layer 2, layer 1
 * predicts 6 (the truth).  With preemption the newer guess withdraws the
 * older pending one and every layer after the first hits; without it the
 * stale request for 5 takes the link first and layer 2 misses. */
static void run_preempt_case(const char *pf, struct strata_harness_counters *k)
{
	struct strata_model_spec s1;
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("tiny:layers=4,experts=16,top_k=1", &s1, &err), 0);
	static const uint32_t x0[] = { 0 }, x1[] = { 3 }, x2[] = { 6 }, x3[] = { 9 };
	static const struct strata_hint h0[] = { { 1, 3, 0.9f }, { 2, 5, 0.9f } };
	static const struct strata_hint h1[] = { { 2, 6, 0.9f }, { 3, 9, 0.9f } };
	const struct strata_harness_step steps[] = {
		{ .token = 0, .layer = 0, .n = 1, .experts = x0, .hints = h0, .n_hints = 2 },
		{ .token = 0, .layer = 1, .n = 1, .experts = x1, .hints = h1, .n_hints = 2 },
		{ .token = 0, .layer = 2, .n = 1, .experts = x2 },
		{ .token = 0, .layer = 3, .n = 1, .experts = x3 },
	};
	struct strata_harness_trace *t = NULL;
	assert_int_equal(strata_harness_trace_build(&s1, steps, 4, &t, &err), 0);
	struct strata_harness_config c;
	strata_harness_config_defaults(&c);
	c.budget = 8 * MIB;
	c.expert_bytes = MIB;
	c.place = "cache";
	c.prefetch = pf;
	int rc = strata_harness_run(t, &c, k, &err);
	if (rc)
		fprintf(stderr, "%s: %s\n", pf, err.msg);
	assert_int_equal(rc, 0);
	strata_harness_trace_free(t);
}

/* The scheduler alone: what a fake owner was asked to start, in order. */
struct fake_owner {
	uint32_t started[8], n;
	uint64_t redundant, dropped, promoted, cancelled, preempted;
};
static int fake_source(void *o, uint32_t eid, int tier) { return STRATA_TIER_NVME; }
static int fake_start(void *o, uint32_t eid, int tier, int src, struct strata_error *err)
{
	struct fake_owner *f = o;
	f->started[f->n++] = eid;
	return STRATA_OK;
}

static void nearest_first(bool preempt, struct fake_owner *f)
{
	memset(f, 0, sizeof(*f));
	struct strata_pfq_owner w = { .o = f, .source = fake_source, .start = fake_start,
				      .redundant = &f->redundant, .dropped = &f->dropped, .promoted = &f->promoted,
				      .cancelled = &f->cancelled, .preempted = &f->preempted };
	struct strata_prefetch_sched s;
	strata_prefetch_sched_defaults(&s);
	s.budget[STRATA_LINK_PCIE] = s.budget[STRATA_LINK_NVME] = 1; /* one in flight */
	s.preempt = preempt;
	uint64_t bytes[64];
	for (int i = 0; i < 64; i++)
		bytes[i] = 1;
	struct strata_pfq q;
	struct strata_error err = { 0 };
	assert_int_equal(strata_pfq_init(&q, 16), 0);
	/* layer-step 0 of layer 0 asks for A (layer 1) and C (layer 3) */
	const struct strata_prefetch_req r0[] = { { 16 + 1, 0 }, { 48 + 7, 0 } };
	strata_pfq_begin(&q, &w, &s, 0, 0, r0, 2, 16);
	for (int i = 0; i < 2; i++) {
		strata_pfq_add(&q, &w, r0[i].eid, STRATA_TIER_VRAM, r0[i].eid / 16, 0);
		assert_int_equal(strata_pfq_dispatch(&q, &s, bytes, &w, &err), 0);
	}
	/* layer-step 1 of layer 1 asks for B (layer 2); C is not superseded */
	const struct strata_prefetch_req r1[] = { { 32 + 4, 0 } };
	strata_pfq_begin(&q, &w, &s, 1, 1, r1, 1, 16);
	strata_pfq_add(&q, &w, r1[0].eid, STRATA_TIER_VRAM, 2, 1);
	assert_int_equal(strata_pfq_dispatch(&q, &s, bytes, &w, &err), 0);
	struct strata_pf done[4];
	assert_int_equal(strata_pfq_take_started(&q, 1, 1, done, 4), 1); /* A's layer ran */
	assert_int_equal(strata_pfq_dispatch(&q, &s, bytes, &w, &err), 0);
	assert_int_equal(f->preempted, 0);
	strata_pfq_free(&q);
}

/* How many requests a fresh prefetch instance of spec makes for ctx. */
static uint32_t asks(struct direct *d, const char *spec_s, const struct strata_layer_ctx *ctx)
{
	struct strata_prefetch_req req[64];
	struct strata_policy *p = mk(d, STRATA_ROLE_PREFETCH, spec_s);
	uint32_t n = strata_prefetch_ops_of(p)->on_layer(p, ctx, req, 64);
	strata_policy_destroy(p);
	return n;
}

static void test_promoe_expertflow_decisions(void **state)
{
	struct direct d;
	direct_init(&d, NULL);
	struct strata_prefetch_req req[64];
	static const struct strata_hint hints[] = {
		{ 1, 5, 0.9f }, { 1, 6, 0.8f }, { 1, 7, 0.1f }, { 2, 8, 0.7f }, { 2, 9, 0.6f },
		{ 3, 9, 1.0f }, { 3, 10, 0.5f }, { 0, 3, 1.0f },
	};
	struct strata_layer_ctx ctx = { .token = 0, .layer = 0, .hints = hints, .n_hints = 8 };

	/* promoe: stride alone, or refined with the nearer layers; topn best */
	struct strata_policy *p = mk(&d, STRATA_ROLE_PREFETCH, "promoe:refine=0");
	uint32_t n = strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 64);
	assert_int_equal(n, 2);
	assert_int_equal(req[0].eid, strata_eid(&spec, 2, 8));
	assert_int_equal(req[1].eid, strata_eid(&spec, 2, 9));
	strata_policy_destroy(p);
	p = mk(&d, STRATA_ROLE_PREFETCH, "promoe:stride=3:topn=1:tier=ram");
	n = strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 64);
	assert_int_equal(n, 3); /* nearest target first */
	assert_int_equal(req[0].eid, strata_eid(&spec, 1, 5));
	assert_int_equal(req[1].eid, strata_eid(&spec, 2, 8));
	assert_int_equal(req[2].eid, strata_eid(&spec, 3, 9));
	assert_int_equal(req[2].tier, STRATA_TIER_RAM);
	assert_int_equal(strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 2), 2);
	strata_policy_destroy(p);
	/* promoe sets the scheduling: preemption and one layer's experts in flight */
	struct strata_prefetch_sched sched;
	strata_prefetch_sched_defaults(&sched);
	uint64_t bytes[64];
	uint8_t in_ram[64];
	for (int i = 0; i < 64; i++)
		bytes[i] = (uint64_t)(i % 2 + 1) * MIB;
	d.env.sched = &sched;
	d.env.expert_bytes = bytes;
	p = mk(&d, STRATA_ROLE_PREFETCH, "promoe");
	assert_true(sched.preempt);
	assert_false(sched.keep_unused);
	assert_int_equal(sched.budget[STRATA_LINK_PCIE], 2 * 2 * MIB); /* top_k of the largest */
	assert_int_equal(sched.budget[STRATA_LINK_NVME], 2 * 2 * MIB);
	strata_policy_destroy(p);
	strata_prefetch_sched_defaults(&sched);
	p = mk(&d, STRATA_ROLE_PREFETCH, "promoe:inflight=-1:preempt=0");
	assert_false(sched.preempt);
	assert_int_equal(sched.budget[STRATA_LINK_NVME], UINT64_MAX);
	strata_policy_destroy(p);

	/* the scheduler: a newer prediction withdraws the older pending one */
	struct strata_harness_counters k1, k0;
	run_preempt_case("promoe:stride=2:inflight=1:topn=1", &k1);
	assert_int_equal(k1.prefetch_preempted, 1);
	assert_int_equal(k1.hits, 3);
	assert_int_equal(k1.prefetch_used, 3);
	assert_int_equal(k1.prefetch_wasted, 0);
	run_preempt_case("promoe:stride=2:inflight=1:topn=1:preempt=0", &k0);
	assert_int_equal(k0.prefetch_preempted, 0);
	assert_int_equal(k0.hits, 2);
	assert_int_equal(k0.prefetch_wasted, 1);  /* the stale guess for layer 2 */
	assert_int_equal(k0.prefetch_promoted, 1); /* the right one was still waiting */
	/* ... and queued requests start nearest target first */
	struct fake_owner fo;
	nearest_first(true, &fo);
	assert_int_equal(fo.n, 2);
	assert_int_equal(fo.started[0], 17);
	assert_int_equal(fo.started[1], 36); /* B (layer 2) before C (layer 3) */
	nearest_first(false, &fo);
	assert_int_equal(fo.n, 2);
	assert_int_equal(fo.started[1], 55); /* first come, first started */
	/* on the golden trace, preemption acts and is counted */
	struct golden g = { .place = "cache", .evict = "lru", .budget_mib = 12 };
	g.prefetch = "promoe";
	run_row(&g, &k1);
	assert_true(k1.prefetch_preempted > 0);
	g.prefetch = "promoe:preempt=0";
	run_row(&g, &k0);
	assert_int_equal(k0.prefetch_preempted, 0);

	/* expertflow: the horizon from the transfer time ... */
	strata_prefetch_sched_defaults(&sched);
	for (int i = 0; i < 64; i++) {
		bytes[i] = MIB;
		in_ram[i] = 1;
	}
	sched.resident[STRATA_TIER_RAM] = in_ram;
	d.env.budget[STRATA_TIER_VRAM] = 64 * MIB;
	/* a layer of compute longer than any move: the next layer only */
	p = mk(&d, STRATA_ROLE_PREFETCH, "expertflow:layer_us=1000000");
	n = strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 64);
	assert_int_equal(n, 2);
	assert_int_equal(req[0].eid, strata_eid(&spec, 1, 5));
	assert_int_equal(req[1].eid, strata_eid(&spec, 1, 6));
	strata_policy_destroy(p);
	/* default cost model (no env->cost): 2 RAM copies of 1 MiB at 50 GB/s +
	 * 10 us = 62 us, over 40 us of compute: 2 layers ahead */
	assert_int_equal(asks(&d, "expertflow:layer_us=40", &ctx), 4);
	/* ... the same from NVMe (6 GB/s + 80 us each: 510 us): every layer with hints */
	memset(in_ram, 0, sizeof(in_ram));
	assert_int_equal(asks(&d, "expertflow:layer_us=40", &ctx), 6);
	/* ... or a faster link given as an option: 2 x (80 + 2.1) us over 100: 2 ahead */
	assert_int_equal(asks(&d, "expertflow:layer_us=100:nvme_gbps=500:pcie_gbps=500", &ctx), 4);
	/* ... within the memory: half of 4 MiB holds one layer of 2 x 1 MiB */
	d.env.budget[STRATA_TIER_VRAM] = 4 * MIB;
	assert_int_equal(asks(&d, "expertflow:layer_us=40", &ctx), 2);
	assert_int_equal(asks(&d, "expertflow:layer_us=40:mem_share=0", &ctx), 6);
	d.env.budget[STRATA_TIER_VRAM] = 64 * MIB;
	/* ... and shortened to the distances whose guesses come true */
	p = mk(&d, STRATA_ROLE_PREFETCH, "expertflow:layer_us=40");
	static const uint32_t right1[] = { 5, 6 }, wrong[] = { 0, 1 };
	for (int it = 0; it < 40; it++) {
		strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 64);
		strata_prefetch_ops_of(p)->on_route(p, 0, 1, right1, 2);
		strata_prefetch_ops_of(p)->on_route(p, 0, 2, wrong, 2);
		strata_prefetch_ops_of(p)->on_route(p, 0, 3, wrong, 2);
	}
	n = strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 64);
	assert_int_equal(n, 2);
	assert_int_equal(req[0].eid, strata_eid(&spec, 1, 5));
	for (int it = 0; it < 80; it++) {
		strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 64);
		strata_prefetch_ops_of(p)->on_route(p, 0, 1, wrong, 2);
	}
	assert_int_equal(strata_prefetch_ops_of(p)->on_layer(p, &ctx, req, 64), 0);
	strata_policy_destroy(p);
	struct strata_error err = { 0 };
	assert_int_not_equal(strata_policy_create(STRATA_ROLE_PREFETCH, "expertflow:max_depth=9", &d.env, -1, &p,
						  &err), 0);
	d.env.sched = NULL;
	d.env.expert_bytes = NULL;
	d.env.budget[STRATA_TIER_VRAM] = 0;

	/* two ways to ask for the next layer's predictions with no budget agree */
	g.prefetch = "expertflow:layer_us=1000000";
	run_row(&g, &k1);
	g.prefetch = "promoe:stride=1:refine=0:inflight=-1";
	run_row(&g, &k0);
	assert_memory_equal(&k1, &k0, sizeof(k1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden_counters),
		cmocka_unit_test(test_goldens_cover_every_builtin),
		cmocka_unit_test(test_repeatable),
		cmocka_unit_test(test_lru_and_belady_match_reference),
		cmocka_unit_test(test_belady_is_optimal),
		cmocka_unit_test(test_textbook_sequence),
		cmocka_unit_test(test_evict_decisions),
		cmocka_unit_test(test_baseline_decisions),
		cmocka_unit_test(test_lfru_weight0_is_lru),
		cmocka_unit_test(test_belady_decisions),
		cmocka_unit_test(test_belady_random),
		cmocka_unit_test(test_prefetch_decisions),
		cmocka_unit_test(test_promoe_expertflow_decisions),
		cmocka_unit_test(test_lookahead_adaptive_tiers),
		cmocka_unit_test(test_lookahead_via_ram_auto),
		cmocka_unit_test(test_lookahead_nvme_cost),
		cmocka_unit_test(test_lookahead_stage),
		cmocka_unit_test(test_harness_errors),
		cmocka_unit_test(test_static_placement),
		cmocka_unit_test(test_future_placement),
	};
	return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}
