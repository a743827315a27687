/* Studies (experiments/): the spec-only sim's tier split and ranking trace
 * (strata_replay_config.tiers / tier_trace, experiment keys tiers and
 * tier_trace), a CI-sized smoke run of a study script with its plots, and
 * the export/run/merge round trip of experiments/tier-budgets/cluster.sh. */
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strata/experiment.h"
#include "strata/replay.h"
#include "strata/trace.h"
#include "testutil.h"

static char dir[PATH_MAX], root[PATH_MAX], trace[PATH_MAX + 32];

static int setup(void **state)
{
	char *d = test_mkdtemp();
	if (!d)
		return -1;
	snprintf(dir, sizeof(dir), "%s", d);
	free(d);
	snprintf(root, sizeof(root), "%s", test_src_root());
	struct strata_trace_gen_config g;
	strata_trace_gen_defaults(&g);
	g.n_moe_layers = 2;
	g.n_experts = 8;
	g.top_k = 2;
	g.requests = 2;
	g.prompt_len = 4;
	g.gen_len = 60;
	g.zipf_alpha = 1.2;
	snprintf(trace, sizeof(trace), "%s/tiny.strace", dir);
	struct strata_error err = { 0 };
	return strata_trace_gen(&g, trace, STRATA_TRACE_FMT_AUTO, &err) ? -1 : 0;
}

static int teardown(void **state)
{
	test_rmdir(dir);
	return 0;
}

static void sim_cfg(struct strata_replay_config *c)
{
	strata_replay_config_defaults(c);
	c->model_dir = "tiny";
	c->trace_path = trace;
	c->engine.mode = STRATA_ENGINE_VIRTUAL;
	c->engine.budget[0] = 1ull << 30;
	c->engine.budget[1] = 1ull << 30;
	c->engine.place = "static";
	c->compute = STRATA_COMPUTE_NONE;
	c->progress = false;
}

static void test_spec_tiers(void **state)
{
	struct strata_error err = { 0 };
	struct strata_replay_config c;
	struct strata_replay_result r0, r;
	/* the default split, given or not, is synth's table */
	sim_cfg(&c);
	assert_int_equal(strata_replay_run(&c, &r0, &err), STRATA_OK);
	c.tiers = "15,30,55";
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_OK);
	assert_int_equal(r.stats.accesses, r0.stats.accesses);
	assert_true(r.hit_rate[0] == r0.hit_rate[0] && r.hit_rate[2] == r0.hit_rate[2]);
	/* all hot / all cold: static placement serves every access from VRAM / NVMe */
	c.tiers = "100,0,0";
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_OK);
	assert_true(r.hit_rate[0] == 1.0);
	c.tiers = "0,0,100";
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_OK);
	assert_true(r.hit_rate[2] == 1.0);
	/* ranked by the trace itself: the most used half of each layer serves at
	 * least half of the accesses, and more than synth's unrelated order */
	c.tiers = "50,0,50";
	assert_int_equal(strata_replay_run(&c, &r0, &err), STRATA_OK);
	c.tier_trace = trace;
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_OK);
	assert_true(r.hit_rate[0] >= 0.5);
	assert_true(r.hit_rate[0] > r0.hit_rate[0]);
	assert_true(r.hit_rate[1] == 0.0);
	/* errors: a bad split, a missing or mis-shaped ranking trace, shards */
	c.tiers = "50,50";
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "50,50"));
	c.tiers = NULL;
	c.tier_trace = "/nonexistent/t.strace";
	assert_int_not_equal(strata_replay_run(&c, &r, &err), STRATA_OK);
	assert_non_null(strstr(err.msg, "tier trace"));
	assert_non_null(strstr(err.msg, "/nonexistent/t.strace"));
	char other[PATH_MAX + 32];
	snprintf(other, sizeof(other), "%s/other.strace", dir);
	struct strata_trace_gen_config g;
	strata_trace_gen_defaults(&g);
	g.n_moe_layers = 2;
	g.n_experts = 16;
	g.top_k = 2;
	g.requests = 1;
	g.gen_len = 4;
	assert_int_equal(strata_trace_gen(&g, other, STRATA_TRACE_FMT_AUTO, &err), STRATA_OK);
	c.tier_trace = other;
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_ESHAPE);
	assert_non_null(strstr(err.msg, "tier trace"));
	char out[4096];
	assert_int_equal(test_run(out, sizeof(out), "%s synth --preset tiny --out %s/model --format tiered --codes random",
				  test_bin("strata"), dir), 0);
	char model[PATH_MAX + 16];
	snprintf(model, sizeof(model), "%s/model", dir);
	sim_cfg(&c);
	c.model_dir = model;
	c.tiers = "15,30,55";
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "model spec only"));
	/* the CLI */
	assert_int_equal(test_run(out, sizeof(out), "%s sim -q --model tiny --trace %s --tiers 100,0,0 --tier-trace %s "
				  "--vram 1G --ram 1G --json -", test_bin("strata"), trace, trace), 0);
	assert_non_null(strstr(out, "\"hit_rate_vram\": 1"));
	assert_int_equal(test_run(out, sizeof(out), "%s sim -q --model tiny --trace %s --tiers 1,2,3", test_bin("strata"),
				  trace), 1);
	assert_non_null(strstr(out, "1,2,3"));
}

/* The modelled kernel time (the decode bound is that alone when the links are
 * free) charges the fixed cost once per part of the GPU path's call: a
 * layer-step with q4 and trellis experts launches both kernels. */
static void test_spec_formats_parts(void **state)
{
	struct strata_error err = { 0 };
	struct strata_replay_config c;
	struct strata_replay_result one, q4, mix;
	sim_cfg(&c);
	c.engine.cost.kernel_fixed_us = 10;
	c.engine.cost.kernel_us_per_mb = 0;
	c.kernel_us_per_mb_token = 0;
	c.engine.cost.pcie_gbps = c.engine.cost.nvme_gbps = 1e9;
	c.tiers = "50,0,50";
	assert_int_equal(strata_replay_run(&c, &one, &err), STRATA_OK);
	c.tiers = "100,0,0";
	c.formats = "q4,warm,cold";
	assert_int_equal(strata_replay_run(&c, &q4, &err), STRATA_OK);
	c.tiers = "50,0,50";
	assert_int_equal(strata_replay_run(&c, &mix, &err), STRATA_OK);
	print_message("decode bound: trellis %.4f ms, q4 %.4f ms, q4 hot + cold trellis %.4f ms\n", one.bound_decode_ms,
		      q4.bound_decode_ms, mix.bound_decode_ms);
	assert_true(one.bound_decode_ms > 0 && fabs(q4.bound_decode_ms - one.bound_decode_ms) < 1e-9);
	assert_true(mix.bound_decode_ms > 1.05 * one.bound_decode_ms && mix.bound_decode_ms <= 2 * one.bound_decode_ms + 1e-9);
	assert_int_equal(mix.bound_violations, 0);
}

static void test_experiment_keys(void **state)
{
	/* tiers and tier_trace are part of the run_id and survive --one's parse */
	struct strata_experiment_config c, d;
	struct strata_error err = { 0 };
	strata_experiment_config_defaults(&c);
	snprintf(c.model, sizeof(c.model), "tiny");
	snprintf(c.trace, sizeof(c.trace), "%s", trace);
	snprintf(c.tiers, sizeof(c.tiers), "50,0,50");
	snprintf(c.tier_trace, sizeof(c.tier_trace), "%s", trace);
	strata_experiment_config_id(&c);
	assert_non_null(strstr(c.run_id, ";tiers=50,0,50;tier_trace="));
	assert_int_equal(strata_experiment_config_parse_id(c.run_id, &d, &err), STRATA_OK);
	assert_string_equal(d.tiers, "50,0,50");
	assert_string_equal(d.tier_trace, trace);
	struct strata_replay_result r;
	assert_int_equal(strata_experiment_run_one(&d, &r, &err), STRATA_OK);
	assert_true(r.hit_rate[1] == 0.0);
	/* a script: the keys reach the run; an unknown key still fails */
	char path[PATH_MAX + 32], out[8192];
	snprintf(path, sizeof(path), "%s/k.lua", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "local r = strata.run{ model = 'tiny', trace = '%s', tiers = '0,0,100', tier_trace = '%s',\n"
		   "  vram = '1G', ram = '1G' }\n"
		   "assert(r.status == 'ok' and r.hit_rate_nvme == 1, tostring(r.error))\n"
		   "strata.run{ model = 'tiny', trace = '%s', tier = '0,0,100' }\n", trace, trace, trace);
	fclose(f);
	assert_int_equal(test_run(out, sizeof(out), "%s run %s", test_bin("strata"), path), 1);
	assert_non_null(strstr(out, "k.lua:4"));
	assert_non_null(strstr(out, "unknown key 'tier'"));
}

static long file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) ? -1 : (long)st.st_size;
}

static void test_study_smoke(void **state)
{
	/* experiments/tier-budgets/make.sh, CI-sized: 3 policies (one unknown:
	 * its rows fail, the sweep goes on) x 2 VRAM x 1 RAM budgets x 2 seeds, outputs in
	 * a temp dir, the Mixtral part off; plots when matplotlib is there */
	static char out[1 << 16];
	char cmd[4 * PATH_MAX], res[PATH_MAX + 64];
	int plots = test_run(out, sizeof(out), "%s/scripts/plot.sh --check", root) == 0;
	if (!plots)
		printf("SKIP study plots: no Python with matplotlib (scripts/plot.sh --check)\n");
	snprintf(cmd, sizeof(cmd),
		 "cd %s && STRATA=%s STUDY_OUT=%s/tb STRATA_TRACES= NO_PLOTS=%d experiments/tier-budgets/make.sh "
		 "tokens=16 policies=lru,farthest,nosuch vram=64M,256M ram=256M seeds=7,8",
		 root, test_bin("strata"), dir, !plots);
	int rc = test_run(out, sizeof(out), "%s", cmd);
	if (rc) /* the unknown policy's rows fail; the sweep, tables and plots go on */
		fail_msg("make.sh: exit %d: %s", rc, out);
	assert_non_null(strstr(out, "VRAM hit rate and decode tok/s"));
	assert_non_null(strstr(out, "| farthest |"));
	assert_non_null(strstr(out, "4 configurations failed"));
	assert_non_null(strstr(out, "mean (min-max) over 2 seeds"));
	assert_non_null(strstr(out, "STRATA_TRACES is empty: skipping the Mixtral part"));
	assert_non_null(strstr(out, "The best policy against the time bound")); /* time_bound.lua, run.lua's traces */
	assert_non_null(strstr(out, "| 256M | farthest | oracle:depth=8 |"));
	snprintf(res, sizeof(res), "%s/tb/results/tier-budgets.csv", dir);
	assert_int_equal(test_run(out, sizeof(out), "grep -c '\",ok,' %s; grep -c '\",error,' %s", res, res), 0);
	assert_string_equal(out, "8\n4\n");
	if (plots) {
		char png[PATH_MAX + 32];
		snprintf(png, sizeof(png), "%s/tb/vram.png", dir);
		assert_true(file_size(png) > 10000 && file_size(png) < 400000);
		snprintf(png, sizeof(png), "%s/tb/ram.png", dir);
		assert_true(file_size(png) > 10000 && file_size(png) < 400000);
		snprintf(png, sizeof(png), "%s/tb/ram.pdf", dir); /* the vector twin for papers */
		assert_true(file_size(png) > 5000);
		/* the plotter's bad input: a missing column, nothing to plot, a missing file */
		rc = test_run(out, sizeof(out), "%s/scripts/plot.sh %s/tb/results/tier-budgets-plot.csv --x nosuch "
			      "--y decode_tok_s --out %s/x.png", root, dir, dir);
		assert_int_equal(rc, 1);
		assert_non_null(strstr(out, "no column 'nosuch'"));
		rc = test_run(out, sizeof(out), "%s/scripts/plot.sh %s/tb/results/tier-budgets-plot.csv --x vram_mib "
			      "--y decode_tok_s --filter policy=nosuch --out %s/x.png", root, dir, dir);
		assert_int_equal(rc, 1);
		assert_non_null(strstr(out, "no ok rows to plot"));
		rc = test_run(out, sizeof(out), "%s/scripts/plot.sh %s/none.csv --x a --y b --out %s/x.png", root, dir, dir);
		assert_int_equal(rc, 1);
		assert_non_null(strstr(out, "none.csv"));
		snprintf(png, sizeof(png), "%s/x.png", dir);
		assert_int_equal(file_size(png), -1);
	}
	/* again: resumes (the failed rows are retried, nothing else runs) */
	rc = test_run(out, sizeof(out), "%s", cmd);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "8 of 12 rows already in"));
	/* and with the known policies only, a clean run */
	snprintf(cmd, sizeof(cmd),
		 "cd %s && STRATA=%s STUDY_OUT=%s/tb2 STRATA_TRACES= NO_PLOTS=1 experiments/tier-budgets/make.sh "
		 "tokens=8 policies=lru vram=64M ram=256M", root, test_bin("strata"), dir);
	assert_int_equal(test_run(out, sizeof(out), "%s", cmd), 0);
}

/* experiments/leaderboard/run.lua on the tiny trace: every policy at three
 * budgets runs (17 x 3 rows, none failed), the table names the baselines,
 * and a second run resumes with nothing left to do. */
static void test_leaderboard_smoke(void **state)
{
	static char out[1 << 16];
	char cmd[4 * PATH_MAX], res[PATH_MAX + 64];
	snprintf(cmd, sizeof(cmd), "cd %s && %s run experiments/leaderboard/run.lua out=%s/lb ram=4M "
		 "'traces=tiny|tiny|%s|384K,768K,1536K'", root, test_bin("strata"), dir, trace);
	int rc = test_run(out, sizeof(out), "%s", cmd);
	if (rc)
		fail_msg("leaderboard: exit %d: %s", rc, out);
	for (const char *const *p = (const char *const[]){ "| llama.cpp |", "| lfru |", "| moe-infinity |",
							  "| least-stale |", "| lru+promoe |", "| lru+expertflow |",
							  "| farthest+oracle |", NULL }; *p; p++)
		assert_non_null(strstr(out, *p));
	assert_null(strstr(out, "failed"));
	snprintf(res, sizeof(res), "%s/lb/leaderboard.csv", dir);
	assert_int_equal(test_run(out, sizeof(out), "grep -c '^[^,]*,ok,' %s", res), 0);
	assert_string_equal(out, "51\n");
	assert_int_equal(test_run(out, sizeof(out), "%s", cmd), 0);
	assert_non_null(strstr(out, "51 of 51 rows already in"));
}

static void test_cluster_roundtrip(void **state)
{
	/* export -> the Slurm array template, one task at a time -> merge ->
	 * resume; merged rows equal a local run's in every counter */
	char out[16384];
	int rc = test_run(out, sizeof(out), "cd %s && STRATA=%s RUNNER=slurm experiments/tier-budgets/cluster.sh %s/cl",
			  root, test_bin("strata"), dir);
	if (rc)
		fail_msg("cluster.sh failed (%d): %s", rc, out);
	assert_non_null(strstr(out, "identical to the local run in every counter"));
	assert_non_null(strstr(out, "cluster round trip: ok"));
	/* the template refuses to run outside an array task, and a line past the end */
	rc = test_run(out, sizeof(out), "cd %s && env -u SLURM_ARRAY_TASK_ID scripts/slurm-array.sh %s/cl/jobs.txt", root,
		      dir);
	assert_int_equal(rc, 1);
	assert_non_null(strstr(out, "SLURM_ARRAY_TASK_ID"));
	rc = test_run(out, sizeof(out), "cd %s && SLURM_ARRAY_TASK_ID=999 scripts/slurm-array.sh %s/cl/jobs.txt", root,
		      dir);
	assert_int_equal(rc, 2);
	assert_non_null(strstr(out, "no line 999"));
}

/* Every study's arguments: an unknown one, or one not key=value, is a
 * one-line usage error (exit 2) that names it and lists the study's
 * arguments, with no Lua traceback and before anything runs; help=1 lists
 * them and succeeds. */
static void test_study_arguments(void **state)
{
	static char out[1 << 16];
	char pat[PATH_MAX + 32], res[PATH_MAX + 32];
	snprintf(pat, sizeof(pat), "%s/experiments/*/run.lua", root);
	glob_t g;
	assert_int_equal(glob(pat, 0, NULL, &g), 0);
	assert_true(g.gl_pathc >= 5);
	snprintf(res, sizeof(res), "%s/args-out", dir);
	for (size_t i = 0; i < g.gl_pathc; i++) {
		const char *study = g.gl_pathv[i];
		const char *bad[] = { "bogus=1", "bogus" };
		for (int b = 0; b < 2; b++) {
			int rc = test_run(out, sizeof(out), "%s run %s out=%s %s", test_bin("strata"), study, res,
					  bad[b]);
			if (rc != 2 || !strstr(out, "'bogus'") || !strstr(out, "(this script takes: ") ||
			    !strstr(out, " out, ") || strchr(out, '\n') != out + strlen(out) - 1 ||
			    strncmp(out, "strata run: ", 12) || strstr(out, "traceback"))
				fail_msg("%s %s: exit %d, want 2 and one line naming it: %s", study, bad[b], rc, out);
		}
		assert_int_equal(test_run(out, sizeof(out), "%s run %s help=1", test_bin("strata"), study), 0);
		if (!strstr(out, "arguments of this script") || !strstr(out, "\n  out= "))
			fail_msg("%s help=1: %s", study, out);
	}
	globfree(&g);
	assert_int_equal(file_size(res), -1); /* nothing ran */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec_tiers),
		cmocka_unit_test(test_spec_formats_parts),
		cmocka_unit_test(test_experiment_keys),
		cmocka_unit_test(test_study_smoke),
		cmocka_unit_test(test_leaderboard_smoke),
		cmocka_unit_test(test_cluster_roundtrip),
		cmocka_unit_test(test_study_arguments),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
