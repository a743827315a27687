/* strata synth --popularity: tiers follow a measured popularity (counts file
 * or trace), with the --tiers split; a file of another shape is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/store.h"
#include "strata/synth.h"
#include "testutil.h"

static void test_counts_rank_tiers(void **state)
{
	char *dir = test_mkdtemp();
	assert_non_null(dir);
	char counts[512], model[512], out[4096];
	snprintf(counts, sizeof(counts), "%s/counts.csv", dir);
	snprintf(model, sizeof(model), "%s/m", dir);
	/* layer 0: expert e has count e (hottest is 7); layer 1: count 8 - e (hottest is 0) */
	FILE *f = fopen(counts, "w");
	assert_non_null(f);
	fprintf(f, "layer,expert,count\n");
	for (int l = 0; l < 2; l++)
		for (int e = 0; e < 8; e++)
			fprintf(f, "%d,%d,%d\n", l, e, l ? 8 - e : e);
	fclose(f);
	int rc = test_run(out, sizeof(out), "%s synth --preset tiny --out %s --popularity %s --tiers 0.25,0.25,0.5",
			  test_bin("strata"), model, counts);
	assert_int_equal(rc, 0);
	struct strata_store *s = NULL;
	struct strata_error err = { 0 };
	assert_int_equal(strata_store_open(model, &s, &err), STRATA_OK);
	const uint8_t *t = strata_store_tier_table(s);
	static const uint8_t want0[8] = { 2, 2, 2, 2, 1, 1, 0, 0 };
	static const uint8_t want1[8] = { 0, 0, 1, 1, 2, 2, 2, 2 };
	assert_memory_equal(t, want0, 8);
	assert_memory_equal(t + 8, want1, 8);
	strata_store_close(s);

	/* a counts file of another shape is refused and nothing valid is left */
	char model2[512];
	snprintf(model2, sizeof(model2), "%s/m2", dir);
	rc = test_run(out, sizeof(out), "%s synth --preset tiny:layers=3 --out %s --popularity %s",
		      test_bin("strata"), model2, counts);
	assert_int_not_equal(rc, 0);
	assert_non_null(strstr(out, "counts.csv"));
	assert_non_null(strstr(out, "3 MoE layers"));
	assert_int_not_equal(strata_store_open(model2, &s, &err), STRATA_OK);
	test_rmdir(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts_rank_tiers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
