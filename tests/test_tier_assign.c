/* Tier assignment: split math, ties, byte budgets, counts files (JSON, CSV), shape errors. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/tier_assign.h"
#include "testutil.h"

static const char *write_file(const char *name, const char *text)
{
	static char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", test_tmpdir, name);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return p;
}

static void spec_of(struct strata_model_spec *s, const char *text)
{
	struct strata_error err = { 0 };
	if (strata_model_spec_parse(text, s, &err))
		fail_msg("%s", err.msg);
}

static void test_split_counts(void **state)
{
	static const struct {
		uint32_t n;
		double h, w, c;
		uint32_t want[3];
	} cases[] = {
		{ 8, 15, 30, 55, { 1, 3, 4 } },     /* round(1.2)=1, round(3.6)=4 */
		{ 100, 15, 30, 55, { 15, 30, 55 } },
		{ 256, 15, 30, 55, { 38, 77, 141 } }, /* round(38.4), round(115.2) */
		{ 896, 15, 30, 55, { 134, 269, 493 } },
		{ 128, 15, 30, 55, { 19, 39, 70 } },  /* round(19.2), round(57.6) */
		{ 8, 0, 0, 100, { 0, 0, 8 } },
		{ 8, 100, 0, 0, { 8, 0, 0 } },
		{ 2, 25, 25, 50, { 1, 0, 1 } },      /* halves round up: round(0.5)=1, round(1.0)=1 */
		{ 1, 15, 30, 55, { 0, 1, 0 } },      /* round(0.15)=0, round(0.45)=0 -> cold? see below */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct strata_tier_split sp = { { cases[i].h, cases[i].w, cases[i].c } };
		uint32_t got[3];
		strata_tier_split_counts(cases[i].n, &sp, got);
		if (i == 8) {
			/* n=1: 0.15 and 0.45 both round to 0: the lone expert is cold */
			assert_int_equal(got[0], 0);
			assert_int_equal(got[1], 0);
			assert_int_equal(got[2], 1);
			continue;
		}
		if (got[0] != cases[i].want[0] || got[1] != cases[i].want[1] || got[2] != cases[i].want[2])
			fail_msg("case %zu: n=%u got %u/%u/%u", i, cases[i].n, got[0], got[1], got[2]);
		assert_int_equal(got[0] + got[1] + got[2], cases[i].n);
	}
}

static void test_split_parse(void **state)
{
	struct strata_tier_split sp;
	struct strata_error err = { 0 };
	assert_int_equal(strata_tier_split_parse("15,30,55", &sp, &err), 0);
	assert_true(sp.pct[0] == 15 && sp.pct[1] == 30 && sp.pct[2] == 55);
	assert_int_equal(strata_tier_split_parse("12.5,37.5,50", &sp, &err), 0);
	/* fractions: the same split, told apart by the sum */
	assert_int_equal(strata_tier_split_parse("0.15,0.30,0.55", &sp, &err), 0);
	assert_true(fabs(sp.pct[0] - 15) < 1e-9 && fabs(sp.pct[1] - 30) < 1e-9 && fabs(sp.pct[2] - 55) < 1e-9);
	assert_int_equal(strata_tier_split_parse("1,0,0", &sp, &err), 0);
	assert_true(sp.pct[0] == 100 && sp.pct[2] == 0);
	static const char *bad[] = { "15,30", "10,10,10", "-5,50,55", "a,b,c", "15,30,55,0", "15;30;55", "",
				     "0.5,0.25,0.5", "50,30,30" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (strata_tier_split_parse(bad[i], &sp, &err) != STRATA_EINVAL)
			fail_msg("split '%s' accepted", bad[i]);
		assert_non_null(strstr(err.msg, "bad split"));
	}
}

static void test_rank_ties(void **state)
{
	struct strata_popularity p;
	struct strata_error err = { 0 };
	assert_int_equal(strata_popularity_init(&p, 1, 8, &err), 0);
	double c[8] = { 5, 5, 5, 5, 9, 1, 1, 1 };
	memcpy(p.count, c, sizeof(c));
	uint32_t order[8];
	strata_tier_rank(&p, 0, 8, order);
	static const uint32_t want[8] = { 4, 0, 1, 2, 3, 5, 6, 7 };
	assert_memory_equal(order, want, sizeof(want));
	/* no counts: id order */
	strata_tier_rank(NULL, 0, 8, order);
	for (uint32_t e = 0; e < 8; e++)
		assert_int_equal(order[e], e);
	strata_popularity_free(&p);
}

static void test_counts_json(void **state)
{
	struct strata_popularity p;
	struct strata_error err = { 0 };
	const char *path = test_data_path("mixtral-expert-counts-tiny.json");
	if (strata_popularity_load(path, &p, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(p.n_layers, 4);
	assert_int_equal(p.n_experts, 8);
	assert_true(p.count[5] == 20);
	assert_true(p.count[3 * 8 + 7] == 26);

	struct strata_model_spec s;
	spec_of(&s, "mixtral-8x7b:layers=4");
	uint8_t tiers[32];
	struct strata_tier_split sp = STRATA_TIER_SPLIT_DEFAULT;
	assert_int_equal(strata_tier_assign_split(&s, &p, &sp, tiers, &err), 0);
	/* per layer: 1 hot, 3 warm, 4 cold, by count, ties by id */
	static const uint8_t want[32] = {
		1, 2, 1, 2, 1, 0, 2, 2, /* 5 hot; 0,4 (tie at 12, id order), 2 warm */
		1, 1, 1, 2, 2, 2, 2, 0, /* 7 hot; seven-way tie: 0,1,2 warm */
		2, 2, 2, 2, 1, 1, 1, 0, /* ascending counts */
		0, 1, 1, 2, 2, 2, 2, 1, /* 0 hot, 7 warm, ties 1,2 warm */
	};
	assert_memory_equal(tiers, want, sizeof(want));

	/* a model of another shape: clear error naming the file and both shapes */
	spec_of(&s, "custom:layers=4,experts=16,top_k=2,hidden=512,inter=256");
	uint8_t t2[64];
	assert_int_equal(strata_tier_assign_split(&s, &p, &sp, t2, &err), STRATA_ESHAPE);
	assert_non_null(strstr(err.msg, "mixtral-expert-counts-tiny.json: counts for 4 MoE layers x 8 experts, "
					"but the model has 4 MoE layers x 16 experts"));
	strata_popularity_free(&p);

	/* the real shared Fiddler files parse, when this checkout has them */
	const char *shared = "/work/shared/traces/mixtral-expert-counts/mixtral_8x7b_instruct/"
			     "expert_popularity_machine_learning.json";
	if (!access(shared, R_OK)) {
		assert_int_equal(strata_popularity_load(shared, &p, &err), 0);
		assert_int_equal(p.n_layers, 32);
		assert_int_equal(p.n_experts, 8);
		double sum = 0;
		for (uint32_t i = 0; i < 256; i++)
			sum += p.count[i];
		assert_true(sum == 302912.0);
		strata_popularity_free(&p);
	} else {
		printf("note: %s not here; shared counts file not checked\n", shared);
	}

	/* malformed files */
	static const struct {
		const char *text, *needle;
	} bad[] = {
		{ "{\"expert_popularity\": [[1,2],[3]]}", "expert_popularity[1] has 1 entries, layer 0 has 2" },
		{ "{\"expert_popularity\": [[1,-2]]}", "expert_popularity[0][1] at byte 26 is not a non-negative number" },
		{ "{\"total_input_tokens\": 3}", "no \"expert_popularity\"" },
		{ "{\"expert_popularity\": [[1,2]", "bad JSON at byte 22: unterminated array" },
		{ "{\"expert_popularity\": [[]]}", "is not a non-empty array" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *f = write_file("bad.json", bad[i].text);
		int rc = strata_popularity_load(f, &p, &err);
		if (rc != STRATA_ECORRUPT || !strstr(err.msg, bad[i].needle) || !strstr(err.msg, "bad.json"))
			fail_msg("case %zu: rc %d msg '%s'", i, rc, err.msg);
	}
	assert_int_equal(strata_popularity_load("/nonexistent/c.json", &p, &err), STRATA_ENOTFOUND);
}

static void test_counts_csv(void **state)
{
	struct strata_popularity p;
	struct strata_error err = { 0 };
	const char *f = write_file("c.csv", "# from a trace\nlayer,expert,count\n0,0,5\n0,3,7\n1,1,2.5\n\n1,1,0.5\n");
	assert_int_equal(strata_popularity_load(f, &p, &err), 0);
	assert_int_equal(p.n_layers, 2);
	assert_int_equal(p.n_experts, 4);
	assert_true(p.count[3] == 7);
	assert_true(p.count[4 + 1] == 3.0); /* repeated pairs add up */
	assert_true(p.count[4 + 2] == 0);
	strata_popularity_free(&p);
	static const struct {
		const char *text, *needle;
	} bad[] = {
		{ "0,0,5\n0,x,1\n", "c.csv:2: expected" },
		{ "0,0,-1\n", "c.csv:1: expected" },
		{ "0,0,1,9\n", "c.csv:1: expected" },
		{ "0,0,1\nlayer,expert,count\n", "c.csv:2: expected" },
		{ "# nothing\n", "no counts" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		f = write_file("c.csv", bad[i].text);
		int rc = strata_popularity_load(f, &p, &err);
		if (rc != STRATA_ECORRUPT || !strstr(err.msg, bad[i].needle))
			fail_msg("case %zu: rc %d msg '%s'", i, rc, err.msg);
	}
}

static void test_budget(void **state)
{
	struct strata_model_spec s;
	spec_of(&s, "custom:layers=4,experts=8,top_k=2,hidden=1024,inter=1024");
	struct strata_error err = { 0 };
	uint64_t b[3];
	assert_int_equal(strata_tier_expert_bytes(&s, b, &err), 0);
	assert_true(b[0] > b[1] && b[1] > b[2]);
	uint64_t up_w = b[1] - b[2], up_h = b[0] - b[1];
	assert_true(up_h < up_w); /* else the cases below change */
	struct strata_popularity p;
	assert_int_equal(strata_popularity_load(test_data_path("mixtral-expert-counts-tiny.json"), &p, &err), 0);
	uint8_t tiers[32];

	/* too small even all cold */
	assert_int_equal(strata_tier_assign_budget(&s, &p, 32 * b[2] - 1, STRATA_BUDGET_LAYER, tiers, &err),
			 STRATA_EBUDGET);
	assert_non_null(strstr(err.msg, "too small"));
	/* exactly all cold */
	assert_int_equal(strata_tier_assign_budget(&s, &p, 32 * b[2], STRATA_BUDGET_LAYER, tiers, &err), 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(tiers[i], 2);
	/* per layer: 4 cold->warm upgrades, then 1 warm->hot: the default split (1 hot, 3 warm) */
	uint64_t per = 8 * b[2] + 4 * up_w + up_h;
	assert_int_equal(strata_tier_assign_budget(&s, &p, 4 * per, STRATA_BUDGET_LAYER, tiers, &err), 0);
	uint8_t want[32];
	struct strata_tier_split sp = STRATA_TIER_SPLIT_DEFAULT;
	assert_int_equal(strata_tier_assign_split(&s, &p, &sp, want, &err), 0);
	assert_memory_equal(tiers, want, 32);
	/* one byte less: the hot upgrade no longer fits in any layer */
	assert_int_equal(strata_tier_assign_budget(&s, &p, 4 * per - 4, STRATA_BUDGET_LAYER, tiers, &err), 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(tiers[i], want[i] == 0 ? 1 : want[i]);
	/* plenty: all hot */
	assert_int_equal(strata_tier_assign_budget(&s, &p, 32 * b[0], STRATA_BUDGET_GLOBAL, tiers, &err), 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(tiers[i], 0);
	/* global: one warm upgrade goes to the expert with the largest share of
	 * its layer: layer 3 expert 0 (40 of 72) */
	assert_int_equal(strata_tier_assign_budget(&s, &p, 32 * b[2] + up_w, STRATA_BUDGET_GLOBAL, tiers, &err), 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(tiers[i], i == 24 ? 1 : 2);
	/* ... and two warm + one hot: layer 3 expert 0 hot, next share (layer 1 expert 7: 30/72) warm */
	assert_int_equal(strata_tier_assign_budget(&s, &p, 32 * b[2] + 2 * up_w + up_h, STRATA_BUDGET_GLOBAL,
						   tiers, &err), 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(tiers[i], i == 24 ? 0 : i == 15 ? 1 : 2);
	/* monotone: in every layer no expert beats a more popular one */
	assert_int_equal(strata_tier_assign_budget(&s, &p, 32 * b[2] + 11 * up_w + 5 * up_h, STRATA_BUDGET_GLOBAL,
						   tiers, &err), 0);
	for (uint32_t l = 0; l < 4; l++) {
		uint32_t order[8];
		strata_tier_rank(&p, l, 8, order);
		for (int r = 1; r < 8; r++)
			assert_true(tiers[l * 8 + order[r]] >= tiers[l * 8 + order[r - 1]]);
	}
	/* shape check applies to budgets too */
	spec_of(&s, "custom:layers=5,experts=8,top_k=2,hidden=1024,inter=1024");
	uint8_t t5[40];
	assert_int_equal(strata_tier_assign_budget(&s, &p, 1ull << 40, STRATA_BUDGET_LAYER, t5, &err), STRATA_ESHAPE);
	strata_popularity_free(&p);
}

static void test_counts_trace(void **state)
{
	/* a Strata trace in its JSONL form: 2 layers x 4 experts, top-2 */
	const char *f = write_file("t.jsonl",
				   "{\"strata_trace\":1,\"layers\":2,\"experts\":4,\"top_k\":2}\n"
				   "{\"req\":0,\"phase\":\"prefill\",\"pos\":0,\"layers\":[[3,1],[0,2]]}\n"
				   "{\"req\":0,\"phase\":\"decode\",\"pos\":1,\"layers\":[[3,0],[2,1]]}\n"
				   "{\"req\":1,\"phase\":\"decode\",\"pos\":0,\"layers\":[[3,1],[2,0]]}\n");
	struct strata_popularity p;
	struct strata_error err = { 0 };
	if (strata_popularity_from_trace(f, &p, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(p.n_layers, 2);
	assert_int_equal(p.n_experts, 4);
	static const double want[8] = { 1, 2, 0, 3, 2, 1, 3, 0 };
	for (int i = 0; i < 8; i++)
		assert_true(p.count[i] == want[i]);
	struct strata_model_spec s;
	spec_of(&s, "custom:layers=2,experts=4,top_k=2,hidden=256,inter=256");
	uint8_t tiers[8];
	struct strata_tier_split sp = { { 25, 25, 50 } };
	assert_int_equal(strata_tier_assign_split(&s, &p, &sp, tiers, &err), 0);
	static const uint8_t wt[8] = { 2, 1, 2, 0, 1, 2, 0, 2 };
	assert_memory_equal(tiers, wt, 8);
	strata_popularity_free(&p);
	f = write_file("t.jsonl", "{\"req\":0,\"layers\":[[9,9]]}\n");
	assert_int_not_equal(strata_popularity_from_trace(f, &p, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_counts),
		cmocka_unit_test(test_split_parse),
		cmocka_unit_test(test_rank_ties),
		cmocka_unit_test(test_counts_json),
		cmocka_unit_test(test_counts_csv),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_counts_trace),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
