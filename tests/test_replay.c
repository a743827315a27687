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

static int setup(void **state)
{
	if (test_tmpdir_setup(state))
		return -1;
	char out[4096];
	/* a tiny tiered model and a trace of its shape */
	if (test_run(out, sizeof(out), "%s synth --preset tiny --out %s/model --format tiered --codes random --seed 3", test_bin("strata"),
		     test_tmpdir)) {
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
	if (strata_trace_gen(&g, test_path("tiny.strace"), STRATA_TRACE_FMT_AUTO, &err))
		return -1;
	g.n_moe_layers = 3;
	if (strata_trace_gen(&g, test_path("wrong.strace"), STRATA_TRACE_FMT_AUTO, &err))
		return -1;
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
	assert_int_equal(strata_cost_file_save(test_path("c.json"), &a, &err), STRATA_OK);
	assert_int_equal(strata_cost_file_load(test_path("c.json"), &b, &err), STRATA_OK);
	assert_true(b.cost.nvme_gbps == 3.25);
	assert_int_equal(b.cost.nvme_queue_depth, 64);
	assert_true(b.kernel_us_per_mb_token == 0.125);
	assert_string_equal(b.machine, "box \"7\"");
	FILE *f = fopen(test_path("bad.json"), "w");
	fputs("{\"nvme_gbps\": 2, \"pcie_gbs\": 3}", f);
	fclose(f);
	assert_int_equal(strata_cost_file_load(test_path("bad.json"), &b, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "pcie_gbs"));
	f = fopen(test_path("bad.json"), "w");
	fputs("{\"nvme_gbps\": -2}", f);
	fclose(f);
	assert_int_equal(strata_cost_file_load(test_path("bad.json"), &b, &err), STRATA_EINVAL);
	f = fopen(test_path("bad.json"), "w");
	fputs("{\"nvme_gbps\": 2", f);
	fclose(f);
	assert_int_not_equal(strata_cost_file_load(test_path("bad.json"), &b, &err), STRATA_OK);
	assert_non_null(strstr(err.msg, "bad.json"));
	assert_int_not_equal(strata_cost_file_load(test_path("none.json"), &b, &err), STRATA_OK);
}

/* A run without a cost file gets one cost model whichever way it starts:
 * `strata sim` and the study sweeps take the cost file's defaults, a replay,
 * the API and the Python runner the engine's, and the policies weigh moves
 * against it (lookahead's break-even, expertflow's horizon: a layer's compute
 * is kernel_fixed_us + kernel_us_per_mb x top_k x MB), so a sim and a replay
 * of the same run decide alike only if the two agree field by field. */
static void test_cost_defaults_one_model(void **state)
{
	struct strata_cost_file f;
	struct strata_engine_config e;
	strata_cost_file_defaults(&f);
	strata_engine_config_defaults(&e);
	assert_true(f.cost.nvme_gbps == e.cost.nvme_gbps && f.cost.nvme_lat_us == e.cost.nvme_lat_us);
	assert_true(f.cost.pcie_gbps == e.cost.pcie_gbps && f.cost.pcie_lat_us == e.cost.pcie_lat_us);
	assert_true(f.cost.hbm_gbps == e.cost.hbm_gbps && f.cost.host_gbps == e.cost.host_gbps);
	assert_true(f.cost.kernel_us_per_mb == e.cost.kernel_us_per_mb);
	print_message("kernel_fixed_us: cost file %g, engine %g\n", f.cost.kernel_fixed_us, e.cost.kernel_fixed_us);
	assert_true(f.cost.kernel_fixed_us == e.cost.kernel_fixed_us);
	assert_int_equal(f.cost.nvme_queue_depth, e.cost.nvme_queue_depth);
}

static void test_calibrate(void **state)
{
	struct strata_error err = { 0 };
	struct strata_calibrate_config c;
	strata_calibrate_config_defaults(&c);
	c.model_dir = test_path("model");
	c.read_bytes = 8u << 20;
	c.queue_depth = 8;
	c.compute = STRATA_COMPUTE_REF;
	c.use_gpu = 0;
	struct strata_cost_file cf;
	char *logbuf = NULL;
	size_t loglen = 0;
	FILE *log = open_memstream(&logbuf, &loglen);
	assert_non_null(log);
	assert_int_equal(strata_calibrate(&c, &cf, log, &err), STRATA_OK);
	fclose(log);
	/* the q4 / q3 kernels timed in the same call, their speed relative to the model's */
	assert_non_null(strstr(logbuf, "kernels q4 (cpu reference)"));
	assert_non_null(strstr(logbuf, "kernels q3 (cpu reference)"));
	assert_true(cf.kernel_speed_q4 > 0.05 && cf.kernel_speed_q4 < 20);
	assert_true(cf.kernel_speed_q3 > 0.05 && cf.kernel_speed_q3 < 20);
	free(logbuf);
	assert_string_equal(cf.source, "measured");
	assert_true(cf.cost.nvme_gbps > 0.01 && cf.cost.nvme_gbps < 1000);
	assert_true(cf.cost.nvme_lat_us > 0 && cf.cost.nvme_lat_us < 1e6);
	assert_true(cf.cost.kernel_us_per_mb > 0);
	assert_int_equal(cf.cost.nvme_queue_depth, 8);
	/* CLI round trip */
	char out[4096];
	assert_int_equal(test_run(out, sizeof(out), "%s calibrate --model %s --bytes 4M --compute none --gpu 0 -o %s",
				  test_bin("strata"), test_path("model"), test_path("cost.json")), 0);
	assert_int_equal(strata_cost_file_load(test_path("cost.json"), &cf, &err), STRATA_OK);
	assert_int_equal(test_run(out, sizeof(out), "%s calibrate --model %s/nothing", test_bin("strata"), test_tmpdir), 1);
	assert_non_null(strstr(out, "nothing"));
	assert_int_equal(test_run(out, sizeof(out), "%s calibrate --help", test_bin("strata")), 0);
}


static void replay_cfg(struct strata_replay_config *c, int virt)
{
	strata_replay_config_defaults(c);
	c->model_dir = test_path("model");
	c->trace_path = test_path("tiny.strace");
	c->engine.mode = virt ? STRATA_ENGINE_VIRTUAL : STRATA_ENGINE_REAL;
	c->engine.use_gpu = 0;
	c->engine.budget[0] = 600 << 10;
	c->engine.budget[1] = 1 << 20;
	c->engine.prefetch = "lookahead:adaptive=0";
	c->engine.seed = 5;
	c->compute = virt ? STRATA_COMPUTE_NONE : STRATA_COMPUTE_REF;
}

static void assert_same_counters(const struct strata_replay_result *a, const struct strata_replay_result *b)
{
	const struct strata_engine_stats *x = &a->stats, *y = &b->stats;
	assert_int_equal(x->accesses, y->accesses);
	for (int i = 0; i < 3; i++)
		assert_int_equal(x->hits[i], y->hits[i]);
	assert_int_equal(x->bytes_nvme_ram, y->bytes_nvme_ram);
	assert_int_equal(x->bytes_ram_vram, y->bytes_ram_vram);
	assert_int_equal(x->bytes_nvme_vram, y->bytes_nvme_vram);
	assert_int_equal(x->evictions[0], y->evictions[0]);
	assert_int_equal(x->evictions[1], y->evictions[1]);
	assert_int_equal(x->compactions[0], y->compactions[0]);
	assert_int_equal(x->compactions[1], y->compactions[1]);
	assert_int_equal(x->compact_bytes[0], y->compact_bytes[0]);
	assert_int_equal(x->compact_bytes[1], y->compact_bytes[1]);
	assert_int_equal(x->prefetch_issued, y->prefetch_issued);
	assert_int_equal(x->prefetch_used, y->prefetch_used);
	assert_int_equal(x->prefetch_wasted, y->prefetch_wasted);
	assert_int_equal(x->prefetch_redundant, y->prefetch_redundant);
	assert_int_equal(a->tokens, b->tokens);
	assert_int_equal(a->steps, b->steps);
	assert_string_equal(a->name, b->name);
}

static void test_replay_deterministic(void **state)
{
	struct strata_error err = { 0 };
	struct strata_replay_config c;
	struct strata_replay_result a, b, v;
	replay_cfg(&c, 0);
	assert_int_equal(strata_replay_run(&c, &a, &err), STRATA_OK);
	assert_int_equal(strata_replay_run(&c, &b, &err), STRATA_OK);
	assert_same_counters(&a, &b);
	/* the trace: 3 requests x (8 prefill + 40 decode), prefill in one step per request */
	assert_int_equal(a.tokens, 144);
	assert_int_equal(a.prefill_tokens, 24);
	assert_int_equal(a.decode_tokens, 120);
	assert_int_equal(a.steps, 120 + 3);
	assert_int_equal(a.requests, 3);
	assert_true(a.stats.accesses >= 120 * 2 * 2);
	assert_int_equal(a.stats.hits[0] + a.stats.hits[1] + a.stats.hits[2], a.stats.accesses);
	assert_true(a.stats.prefetch_issued > 0);
	assert_true(a.decode_tok_s > 0 && a.prefill_tok_s > 0 && a.ttft_ms > 0);
	assert_true(a.lat_p99_ms >= a.lat_p50_ms && a.lat_p50_ms > 0);
	assert_true(a.stats.compute_ns > 0);
	assert_true(fabs(a.hit_rate[0] + a.hit_rate[1] + a.hit_rate[2] - 1.0) < 1e-9);
	/* link use over decode: a disk busy some of the time (never longer than decode took), every
	 * NVMe read of a decode step counted once, in 4 KiB multiples, at a queue depth >= 1 */
	assert_true(a.dec_link_util[STRATA_LINK_NVME] > 0 && a.dec_link_util[STRATA_LINK_NVME] <= 1.0001);
	assert_true(a.dec_link_util[STRATA_LINK_PCIE] > 0 && a.dec_link_util[STRATA_LINK_PCIE] <= 1.0001);
	assert_true(a.dec_nvme_reads > 0 && a.dec_nvme_read_kib >= 4 && a.dec_nvme_qd >= 1);
	assert_true(a.stats.nvme_reads >= a.dec_nvme_reads + a.stats.preloaded[0] + a.stats.preloaded[1]);
	/* the NVMe mover changes timing, never decisions */
	for (int m = STRATA_NVME_MMAP; m <= STRATA_NVME_PREAD; m++) {
		replay_cfg(&c, 0);
		c.engine.nvme_mover = m;
		assert_int_equal(strata_replay_run(&c, &b, &err), STRATA_OK);
		assert_same_counters(&a, &b);
	}
	/* prefill in chunks of 3: more steps, same tokens */
	replay_cfg(&c, 0);
	c.prefill_chunk = 3;
	c.compute = STRATA_COMPUTE_NONE;
	assert_int_equal(strata_replay_run(&c, &b, &err), STRATA_OK);
	assert_int_equal(b.steps, 120 + 3 * 3);
	assert_int_equal(b.tokens, 144);
	/* the simulator makes the same decisions */
	replay_cfg(&c, 1);
	assert_int_equal(strata_replay_run(&c, &v, &err), STRATA_OK);
	assert_same_counters(&a, &v);
	assert_true(v.stats.clock_ns > 0);
	/* and so does the adaptive lookahead, whose NVMe reads weigh the cost model
	 * and residency counts (nvme_cost), never a clock */
	replay_cfg(&c, 0);
	c.engine.prefetch = "lookahead:warmup=8";
	assert_int_equal(strata_replay_run(&c, &b, &err), STRATA_OK);
	assert_true(b.stats.prefetch_issued > 0);
	replay_cfg(&c, 1);
	c.engine.prefetch = "lookahead:warmup=8";
	assert_int_equal(strata_replay_run(&c, &v, &err), STRATA_OK);
	assert_same_counters(&b, &v);
	/* mixed extent sizes (a tiered model): both make room by moving the
	 * same extents, the replay moving real bytes that its computation
	 * then reads */
	struct strata_replay_result mr, mv;
	for (int virt = 0; virt < 2; virt++) {
		replay_cfg(&c, virt);
		c.engine.place = "cache";
		c.engine.evict = "lru";
		c.engine.prefetch = "oracle:depth=1:stage=4";
		c.engine.budget[0] = 400 << 10;
		c.engine.budget[1] = 500 << 10;
		assert_int_equal(strata_replay_run(&c, virt ? &mv : &mr, &err), STRATA_OK);
	}
	assert_same_counters(&mr, &mv);
	print_message("room by moving extents: vram %llu (%llu bytes), ram %llu (%llu bytes)\n",
		      (unsigned long long)mr.stats.compactions[0], (unsigned long long)mr.stats.compact_bytes[0],
		      (unsigned long long)mr.stats.compactions[1], (unsigned long long)mr.stats.compact_bytes[1]);
	assert_true(mr.stats.compactions[0] + mr.stats.compactions[1] > 0);
	/* another seed or policy is another run (the name says so) */
	replay_cfg(&c, 1);
	c.engine.evict = "farthest";
	assert_int_equal(strata_replay_run(&c, &b, &err), STRATA_OK);
	assert_non_null(strstr(b.name, "farthest"));
	/* Belady never misses more than LRU on the same trace and budgets */
	assert_true(b.stats.hits[0] >= v.stats.hits[0]);
	c.engine.prefetch = "oracle";
	assert_int_equal(strata_replay_run(&c, &b, &err), STRATA_OK);
	assert_true(b.prefetch_accuracy > 0.5);
	/* without the future, Belady refuses */
	c.future = false;
	assert_int_not_equal(strata_replay_run(&c, &b, &err), STRATA_OK);
	assert_non_null(strstr(err.msg, "farthest"));
}

static void test_replay_errors(void **state)
{
	struct strata_error err = { 0 };
	struct strata_replay_config c;
	struct strata_replay_result r;
	replay_cfg(&c, 0);
	c.trace_path = test_path("wrong.strace");
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_ESHAPE);
	assert_non_null(strstr(err.msg, "wrong.strace"));
	assert_non_null(strstr(err.msg, "does not match"));
	replay_cfg(&c, 0);
	c.trace_path = test_path("missing.strace");
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_ENOTFOUND);
	replay_cfg(&c, 0);
	c.engine.evict = "nosuchpolicy";
	assert_int_not_equal(strata_replay_run(&c, &r, &err), STRATA_OK);
	assert_non_null(strstr(err.msg, "nosuchpolicy"));
	replay_cfg(&c, 0);
	c.compute = STRATA_COMPUTE_GPU; /* the engine runs on the host stand-in here */
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_EUNSUPPORTED);
	/* sim of a model given by its spec only */
	replay_cfg(&c, 1);
	c.model_dir = "tiny";
	assert_int_equal(strata_replay_run(&c, &r, &err), STRATA_OK);
	assert_true(r.stats.accesses > 0);
	c.model_dir = "no-such-preset";
	assert_int_not_equal(strata_replay_run(&c, &r, &err), STRATA_OK);
	assert_non_null(strstr(err.msg, "no-such-preset"));
}

static void test_replay_cli(void **state)
{
	char out[8192];
	const char *s = test_bin("strata");
	assert_int_equal(test_run(out, sizeof(out), "%s replay --help", s), 0);
	assert_int_equal(test_run(out, sizeof(out), "%s sim --help", s), 0);
	assert_int_equal(test_run(out, sizeof(out), "%s replay --model %s", s, test_path("model")), 2);
	assert_int_equal(test_run(out, sizeof(out), "%s replay --model %s --trace %s --vram 12Q", s, test_path("model"),
				  test_path("tiny.strace")), 2);
	assert_int_equal(test_run(out, sizeof(out), "%s replay --model %s --trace %s --compute fast", s,
				  test_path("model"), test_path("tiny.strace")), 2);
	assert_int_equal(test_run(out, sizeof(out),
				  "%s replay -q --gpu 0 --model %s --trace %s --vram 600K --ram 1M --max-tokens 30 "
				  "--prefill-chunk 4 --json %s --csv %s", s, test_path("model"), test_path("tiny.strace"),
				  test_path("r.json"), test_path("r.csv")), 0);
	FILE *f = fopen(test_path("r.csv"), "r");
	assert_non_null(f);
	char hdr[4096], row[4096];
	assert_non_null(fgets(hdr, sizeof(hdr), f));
	assert_non_null(fgets(row, sizeof(row), f));
	fclose(f);
	assert_non_null(strstr(hdr, "config,mode,compute,trace,model,seed"));
	assert_non_null(strstr(hdr, "prefetch_coverage"));
	assert_non_null(strstr(row, "\"place=static,evict=lru,prefetch=none\",real,ref,"));
	assert_int_equal(test_run(out, sizeof(out), "cat %s", test_path("r.json")), 0);
	assert_non_null(strstr(out, "\"tokens\": 30"));
	assert_non_null(strstr(out, "\"decode_tok_s\""));
	/* sim with a cost file, appending a row */
	assert_int_equal(test_run(out, sizeof(out), "%s sim -q --model %s --trace %s --vram 600K --ram 1M "
				  "--evict farthest --cost %s --csv %s --append", s, test_path("model"), test_path("tiny.strace"),
				  test_path("c.json"), test_path("r.csv")), 0);
	assert_int_equal(test_run(out, sizeof(out), "wc -l < %s", test_path("r.csv")), 0);
	assert_int_equal(atoi(out), 3);
	assert_int_equal(test_run(out, sizeof(out), "%s sim --model %s --trace %s --cost %s", s, test_path("model"),
				  test_path("tiny.strace"), test_path("bad.json")), 1);
	assert_non_null(strstr(out, "bad.json"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cost_file),
		cmocka_unit_test(test_cost_defaults_one_model),
		cmocka_unit_test(test_calibrate),
		cmocka_unit_test(test_replay_deterministic),
		cmocka_unit_test(test_replay_errors),
		cmocka_unit_test(test_replay_cli),
	};
	return cmocka_run_group_tests(tests, setup, test_tmpdir_teardown);
}
