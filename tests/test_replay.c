/* strata calibrate and the cost-model file; strata replay and strata sim on a
 * synthetic tiny model (determinism, counters, shape mismatch, sim vs replay). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/replay.h"
#include "strata/trace.h"
#include "testutil.h"

static char dir[PATH_MAX];

static const char *tpath(const char *name)
{
	static char buf[16][PATH_MAX];
	static int slot;
	char *b = buf[slot++ & 15];
	snprintf(b, PATH_MAX, "%s/%s", dir, name);
	return b;
}

static int setup(void **state)
{
	char *d = test_mkdtemp();
	if (!d)
		return -1;
	snprintf(dir, sizeof(dir), "%s", d);
	free(d);
	char out[4096];
	/* a tiny tiered model and a trace of its shape */
	if (test_run(out, sizeof(out), "%s synth --preset tiny --out %s/model --format tiered --codes random --seed 3", test_bin("strata"),
		     dir)) {
		fprintf(stderr, "synth failed: %s\n", out);
		return -1;
	}
	struct strata_trace_gen_config g;
	strata_trace_gen_defaults(&g);
	g.n_moe_layers = 2;
	g.n_experts = 8;
	g.top_k = 2;
	g.requests = 3;
	g.prompt_len = 8;
	g.gen_len = 40;
	g.pred_depth = 1;
	g.pred_topn = 2;
	g.interleave = true;
	struct strata_error err = { 0 };
	if (strata_trace_gen(&g, tpath("tiny.strace"), STRATA_TRACE_FMT_AUTO, &err))
		return -1;
	g.n_moe_layers = 3;
	if (strata_trace_gen(&g, tpath("wrong.strace"), STRATA_TRACE_FMT_AUTO, &err))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	test_rmdir(dir);
	return 0;
}

static void test_cost_file(void **state)
{
	struct strata_error err = { 0 };
	struct strata_cost_file a, b;
	strata_cost_file_defaults(&a);
	a.cost.nvme_gbps = 3.25;
	a.cost.nvme_queue_depth = 64;
	a.kernel_us_per_mb_token = 0.125;
	snprintf(a.machine, sizeof(a.machine), "box \"7\"");
	assert_int_equal(strata_cost_file_save(tpath("c.json"), &a, &err), STRATA_OK);
	assert_int_equal(strata_cost_file_load(tpath("c.json"), &b, &err), STRATA_OK);
	assert_true(b.cost.nvme_gbps == 3.25);
	assert_int_equal(b.cost.nvme_queue_depth, 64);
	assert_true(b.kernel_us_per_mb_token == 0.125);
	assert_string_equal(b.machine, "box \"7\"");
	FILE *f = fopen(tpath("bad.json"), "w");
	fputs("{\"nvme_gbps\": 2, \"pcie_gbs\": 3}", f);
	fclose(f);
	assert_int_equal(strata_cost_file_load(tpath("bad.json"), &b, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "pcie_gbs"));
	f = fopen(tpath("bad.json"), "w");
	fputs("{\"nvme_gbps\": -2}", f);
	fclose(f);
	assert_int_equal(strata_cost_file_load(tpath("bad.json"), &b, &err), STRATA_EINVAL);
	f = fopen(tpath("bad.json"), "w");
	fputs("{\"nvme_gbps\": 2", f);
	fclose(f);
	assert_int_not_equal(strata_cost_file_load(tpath("bad.json"), &b, &err), STRATA_OK);
	assert_non_null(strstr(err.msg, "bad.json"));
	assert_int_not_equal(strata_cost_file_load(tpath("none.json"), &b, &err), STRATA_OK);
}

static void test_calibrate(void **state)
{
	struct strata_error err = { 0 };
	struct strata_calibrate_config c;
	strata_calibrate_config_defaults(&c);
	c.model_dir = tpath("model");
	c.read_bytes = 8u << 20;
	c.queue_depth = 8;
	c.compute = STRATA_COMPUTE_REF;
	c.use_gpu = 0;
	struct strata_cost_file cf;
	assert_int_equal(strata_calibrate(&c, &cf, NULL, &err), STRATA_OK);
	assert_string_equal(cf.source, "measured");
	assert_true(cf.cost.nvme_gbps > 0.01 && cf.cost.nvme_gbps < 1000);
	assert_true(cf.cost.nvme_lat_us > 0 && cf.cost.nvme_lat_us < 1e6);
	assert_true(cf.cost.kernel_us_per_mb > 0);
	assert_int_equal(cf.cost.nvme_queue_depth, 8);
	/* CLI round trip */
	char out[4096];
	assert_int_equal(test_run(out, sizeof(out), "%s calibrate --model %s --bytes 4M --compute none --gpu 0 -o %s",
				  test_bin("strata"), tpath("model"), tpath("cost.json")), 0);
	assert_int_equal(strata_cost_file_load(tpath("cost.json"), &cf, &err), STRATA_OK);
	assert_int_equal(test_run(out, sizeof(out), "%s calibrate --model %s/nothing", test_bin("strata"), dir), 1);
	assert_non_null(strstr(out, "nothing"));
	assert_int_equal(test_run(out, sizeof(out), "%s calibrate --help", test_bin("strata")), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cost_file),
		cmocka_unit_test(test_calibrate),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
