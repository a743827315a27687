/* Synthetic models: reproducibility, distributions, outlier columns, tier
 * table, the threaded writer end to end, and the synth/inspect commands. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "quant.h"
#include "strata/store.h"
#include "strata/synth.h"
#include "strata/tier_assign.h"
#include "strata/util.h"
#include "testutil.h"

static struct strata_synth *make(const char *spec, uint64_t seed, int dist, double ofrac)
{
	struct strata_synth_config c = { .seed = seed, .dist = dist, .outlier_frac = ofrac };
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse(spec, &c.spec, &err), 0);
	struct strata_synth *g;
	if (strata_synth_init(&c, &g, &err))
		fail_msg("%s", err.msg);
	return g;
}

#define SPEC "custom:layers=2,experts=4,top_k=2,hidden=1024,inter=512"

static void test_reproducible(void **state)
{
	struct strata_synth *a = make(SPEC, 42, STRATA_SYNTH_GAUSSIAN, 0);
	struct strata_synth *b = make(SPEC, 42, STRATA_SYNTH_GAUSSIAN, 0);
	struct strata_synth *c = make(SPEC, 43, STRATA_SYNTH_GAUSSIAN, 0);
	size_t n = 1024 * 512;
	float *x = malloc(n * 4), *y = malloc(n * 4), *z = malloc(n * 4), *w = malloc(n * 4);
	assert_int_equal(strata_synth_matrix(a, 1, 2, STRATA_SYNTH_UP, x), 0);
	assert_int_equal(strata_synth_matrix(b, 1, 2, STRATA_SYNTH_UP, y), 0);
	assert_int_equal(strata_synth_matrix(c, 1, 2, STRATA_SYNTH_UP, z), 0);
	assert_int_equal(strata_synth_matrix(a, 1, 3, STRATA_SYNTH_UP, w), 0);
	assert_memory_equal(x, y, n * 4);
	assert_memory_not_equal(x, z, n * 4);
	assert_memory_not_equal(x, w, n * 4); /* every expert its own stream */
	assert_int_equal(strata_synth_matrix(a, 1, 2, STRATA_SYNTH_GATE, w), 0);
	assert_memory_not_equal(x, w, n * 4);
	assert_int_equal(strata_synth_matrix(a, 2, 0, STRATA_SYNTH_UP, w), STRATA_EINVAL);

	/* the BF16 expert is exactly the BF16 rounding of the float matrices */
	struct strata_expert_layout L;
	assert_int_equal(strata_expert_layout(STRATA_FMT_BF16, 1024, 512, &L), 0);
	uint8_t *e = malloc(L.payload);
	struct strata_error err = { 0 };
	assert_int_equal(strata_synth_expert(a, 1, 2, STRATA_FMT_BF16, e, L.payload, NULL, &err), 0);
	const uint16_t *up = (const uint16_t *)(e + L.up_off);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(up[i], strata_f32_to_bf16(x[i]));
	assert_int_equal(strata_synth_expert(a, 1, 2, STRATA_FMT_BF16, e, L.payload - 1, NULL, &err), STRATA_EINVAL);
	/* the same with outlier columns and heavy tails, every matrix (BF16 fast path = float path) */
	struct strata_synth *o = make(SPEC, 11, STRATA_SYNTH_STUDENT_T, 0.02);
	assert_int_equal(strata_synth_expert(o, 0, 1, STRATA_FMT_BF16, e, L.payload, NULL, &err), 0);
	const uint64_t offs[3] = { L.gate_off, L.up_off, L.down_off };
	for (int m = 0; m < 3; m++) {
		assert_int_equal(strata_synth_matrix(o, 0, 1, m, x), 0);
		const uint16_t *p = (const uint16_t *)(e + offs[m]);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(p[i], strata_f32_to_bf16(x[i]));
	}
	/* non-routed tensors: the BF16 fast path equals the float path too */
	struct strata_tensor_info tl[16];
	struct strata_model_spec spec = strata_synth_config(o)->spec;
	uint32_t nt = strata_synth_tensors(&spec, tl, 16);
	assert_true(nt >= 5);
	for (uint32_t k = 0; k < nt; k++) {
		if (tl[k].fmt != STRATA_FMT_BF16)
			continue;
		struct strata_tensor_info t32 = tl[k];
		t32.fmt = STRATA_FMT_F32;
		uint64_t cnt = tl[k].shape[0] * tl[k].shape[1];
		uint16_t *tb = malloc(cnt * 2);
		float *tf = malloc(cnt * 4);
		assert_int_equal(strata_synth_tensor(o, &tl[k], tb, cnt * 2, &err), 0);
		assert_int_equal(strata_synth_tensor(o, &t32, tf, cnt * 4, &err), 0);
		for (uint64_t i = 0; i < cnt; i++)
			assert_int_equal(tb[i], strata_f32_to_bf16(tf[i]));
		free(tb);
		free(tf);
	}
	strata_synth_free(o);
	free(e);
	free(x);
	free(y);
	free(z);
	free(w);
	strata_synth_free(a);
	strata_synth_free(b);
	strata_synth_free(c);
}

struct moments {
	double mean, var, kurt, maxabs;
};

static struct moments moments_of(const float *x, size_t n)
{
	double s = 0, s2 = 0, s4 = 0, m = 0;
	for (size_t i = 0; i < n; i++)
		s += x[i];
	double mean = s / n;
	for (size_t i = 0; i < n; i++) {
		double d = x[i] - mean;
		s2 += d * d;
		s4 += d * d * d * d;
		if (fabs(x[i]) > m)
			m = fabs(x[i]);
	}
	double var = s2 / n;
	return (struct moments){ mean, var, s4 / n / (var * var), m };
}

static void test_distributions(void **state)
{
	size_t n = 1024 * 512;
	float *x = malloc(n * 4 * 4);
	/* four matrices' worth of samples, gate of layer 0 (cols = hidden = 1024) */
	struct strata_synth *g = make(SPEC, 5, STRATA_SYNTH_GAUSSIAN, 0);
	for (int e = 0; e < 4; e++)
		assert_int_equal(strata_synth_matrix(g, 0, (uint32_t)e, STRATA_SYNTH_GATE, x + e * n), 0);
	struct moments m = moments_of(x, 4 * n);
	double sd = 1.0 / sqrt(1024.0);
	printf("gaussian: mean %.3g var*cols %.4f kurtosis %.3f max %.2f sd\n", m.mean, m.var / (sd * sd), m.kurt,
	       m.maxabs / sd);
	assert_true(fabs(m.mean) < 0.005 * sd);
	assert_true(fabs(m.var / (sd * sd) - 1) < 0.01);
	assert_true(fabs(m.kurt - 3) < 0.05);
	assert_true(m.maxabs > 4.5 * sd); /* the tail bins are sampled, not clipped */
	strata_synth_free(g);

	g = make(SPEC, 5, STRATA_SYNTH_STUDENT_T, 0); /* dof 5: kurtosis 9 */
	for (int e = 0; e < 4; e++)
		assert_int_equal(strata_synth_matrix(g, 0, (uint32_t)e, STRATA_SYNTH_GATE, x + e * n), 0);
	m = moments_of(x, 4 * n);
	printf("student-t(5): mean %.3g var*cols %.4f kurtosis %.3f max %.2f sd\n", m.mean, m.var / (sd * sd),
	       m.kurt, m.maxabs / sd);
	assert_true(fabs(m.mean) < 0.01 * sd);
	assert_true(fabs(m.var / (sd * sd) - 1) < 0.05);
	assert_true(m.kurt > 5.5);
	assert_true(m.maxabs > 10 * sd);
	strata_synth_free(g);
	free(x);
}

static void test_outlier_columns(void **state)
{
	uint32_t rows = 512, cols = 1024;
	float *x = malloc((size_t)rows * cols * 4);
	double *cv = malloc(cols * sizeof(double));
	int first[16], nfirst = 0;
	for (int e = 0; e < 3; e++) {
		struct strata_synth *g = make(SPEC, 9, STRATA_SYNTH_GAUSSIAN, 0.01);
		assert_int_equal(strata_synth_matrix(g, e == 2 ? 1 : 0, (uint32_t)e, STRATA_SYNTH_GATE, x), 0);
		strata_synth_free(g);
		for (uint32_t c = 0; c < cols; c++) {
			double s2 = 0;
			for (uint32_t r = 0; r < rows; r++)
				s2 += (double)x[(size_t)r * cols + c] * x[(size_t)r * cols + c];
			cv[c] = s2 / rows;
		}
		int n = 0, same = 0;
		for (uint32_t c = 0; c < cols; c++)
			if (cv[c] > 20.0 / cols) { /* base variance 1/cols, outliers 100/cols */
				if (e == 0 && nfirst < 16)
					first[nfirst++] = (int)c;
				for (int k = 0; k < nfirst; k++)
					same += first[k] == (int)c;
				n++;
			}
		assert_int_equal(n, 10); /* round(0.01 * 1024) */
		if (e == 1)
			assert_int_equal(same, 10); /* same layer: same columns */
		if (e == 2)
			assert_true(same < 10); /* other layer: its own set */
	}
	free(x);
	free(cv);
}

static void test_tier_table(void **state)
{
	uint32_t cnt[3];
	strata_tier_frac_counts(896, NULL, cnt);
	assert_int_equal(cnt[0], 134);
	assert_int_equal(cnt[1], 269);
	assert_int_equal(cnt[2], 493);
	strata_tier_frac_counts(10, NULL, cnt);
	assert_int_equal(cnt[0], 2); /* 1.5 rounds up */
	assert_int_equal(cnt[1], 3);
	assert_int_equal(cnt[2], 5);
	double f[3];
	struct strata_error err = { 0 };
	assert_int_equal(strata_tier_frac_parse("0.5,0.25,0.25", f, &err), 0);
	strata_tier_frac_counts(8, f, cnt);
	assert_true(cnt[0] == 4 && cnt[1] == 2 && cnt[2] == 2);
	assert_int_equal(strata_tier_frac_parse("0.5,0.25", f, &err), STRATA_EINVAL);
	assert_int_equal(strata_tier_frac_parse("0.5,0.25,0.5", f, &err), STRATA_EINVAL);
	assert_int_equal(strata_tier_frac_parse("a,b,c", f, &err), STRATA_EINVAL);
	/* percentages, as every --tiers takes them */
	assert_int_equal(strata_tier_frac_parse("50,25,25", f, &err), 0);
	assert_true(f[0] == 0.5 && f[1] == 0.25 && f[2] == 0.25);

	struct strata_model_spec s;
	assert_int_equal(strata_model_spec_parse("olmoe:layers=3", &s, &err), 0);
	uint32_t n = strata_model_total_experts(&s);
	uint8_t *t1 = malloc(n), *t2 = malloc(n);
	double *pop = malloc(n * sizeof(double));
	strata_tier_assign_seeded(&s, NULL, 7, t1, pop);
	strata_tier_assign_seeded(&s, NULL, 7, t2, NULL);
	assert_memory_equal(t1, t2, n);
	strata_tier_frac_counts(s.n_experts, NULL, cnt);
	for (uint32_t l = 0; l < s.n_moe_layers; l++) {
		uint32_t c[3] = { 0 };
		double ps = 0, hot_min = 1, cold_max = 0;
		for (uint32_t e = 0; e < s.n_experts; e++) {
			uint32_t id = strata_eid(&s, l, e);
			c[t1[id]]++;
			ps += pop[id];
			if (t1[id] == 0 && pop[id] < hot_min)
				hot_min = pop[id];
			if (t1[id] == 2 && pop[id] > cold_max)
				cold_max = pop[id];
		}
		assert_memory_equal(c, cnt, sizeof(c));
		assert_true(fabs(ps - 1) < 1e-9);
		assert_true(hot_min > cold_max); /* hot experts are the popular ones */
	}
	strata_tier_assign_seeded(&s, NULL, 8, t2, NULL);
	assert_memory_not_equal(t1, t2, n);
	free(t1);
	free(t2);
	free(pop);
}

static void test_write_and_read_back(void **state)
{
	char *dir = test_mkdtemp(), *dir1 = test_mkdtemp();
	struct strata_synth_config c = { .seed = 3, .dist = STRATA_SYNTH_STUDENT_T, .outlier_frac = 0.01,
					 .shard_bytes = 2 << 20 };
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("deepseek-v2-lite:layers=2,experts=6,hidden=256,inter=320,"
						 "shared_inter=128", &c.spec, &err), 0);
	struct strata_synth_result res;
	if (strata_synth_write(&c, dir, NULL, &res, &err))
		fail_msg("%s", err.msg);
	assert_true(res.shards > 1);
	c.threads = 1;
	assert_int_equal(strata_synth_write(&c, dir1, NULL, NULL, &err), 0);
	struct strata_store *st, *st1;
	assert_int_equal(strata_store_open(dir, &st, &err), 0);
	assert_int_equal(strata_store_open(dir1, &st1, &err), 0);
	assert_int_equal(strata_store_shard_count(st), res.shards);
	assert_int_equal(strata_store_tensor_count(st), strata_synth_tensors(&c.spec, NULL, 0));
	assert_non_null(strata_store_find_tensor(st, "blk.2.ffn_down_shexp.weight")); /* first MoE layer is 1 */
	assert_non_null(strata_store_find_tensor(st, "blk.1.ffn_gate_inp.weight"));
	assert_non_null(strata_store_find_tensor(st, "token_embd.weight"));
	struct strata_synth *g;
	assert_int_equal(strata_synth_init(&c, &g, &err), 0);
	struct strata_expert_layout L;
	assert_int_equal(strata_expert_layout(STRATA_FMT_BF16, 256, 320, &L), 0);
	uint8_t *want = malloc(L.payload), *got = strata_aligned_alloc(4096, L.bytes);
	for (uint32_t l = 0; l < 2; l++)
		for (uint32_t e = 0; e < 6; e++) {
			const struct strata_extent *x = strata_store_expert(st, l, e);
			assert_int_equal(x->fmt, STRATA_FMT_BF16);
			assert_int_equal(strata_store_read_extent(st, x, got, true, true, &err), 0);
			assert_int_equal(strata_synth_expert(g, l, e, STRATA_FMT_BF16, want, L.payload, NULL, &err), 0);
			assert_memory_equal(got, want, L.payload);
			/* one thread or two: the same bytes */
			assert_true(x->xxh64 == strata_store_expert(st1, l, e)->xxh64);
		}
	for (uint32_t i = 0; i < strata_store_tensor_count(st); i++) {
		const struct strata_tensor_info *t = strata_store_tensor(st, i);
		uint8_t *tb = strata_aligned_alloc(4096, t->ext.bytes);
		assert_int_equal(strata_store_read_extent(st, &t->ext, tb, true, true, &err), 0);
		free(tb);
	}
	free(want);
	free(got);
	strata_synth_free(g);
	strata_store_close(st);
	strata_store_close(st1);
	test_rmdir(dir);
	test_rmdir(dir1);
	free(dir);
	free(dir1);
}

static int count_files(const char *dir)
{
	char out[256];
	test_run(out, sizeof(out), "ls -A '%s' | wc -l", dir);
	return atoi(out);
}

static void test_tiered(void **state)
{
	char *dir = test_mkdtemp();
	/* small: the reference trellis quantizer is slow in debug/asan builds */
	struct strata_synth_config c = { .seed = 3, .format = STRATA_SYNTH_TIERED,
					 .tier_frac = { 0.34, 0.33, 0.33 } };
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("custom:layers=1,experts=3,top_k=1,hidden=256,inter=64", &c.spec,
						 &err), 0);
	int have = strata_fmt_traits(STRATA_FMT_HOT)->quantize_rows && strata_fmt_traits(STRATA_FMT_WARM)->quantize_rows &&
		   strata_fmt_traits(STRATA_FMT_COLD)->quantize_rows;
	int rc = strata_synth_write(&c, dir, NULL, NULL, &err);
	if (!have) {
		fprintf(stderr, "SKIP tiered: the tier formats have no quantizer in this build\n");
		assert_int_equal(rc, STRATA_EUNSUPPORTED);
		assert_non_null(strstr(err.msg, "--format=bf16"));
		assert_int_equal(count_files(dir), 0);
		test_rmdir(dir);
		free(dir);
		return;
	}
	if (rc)
		fail_msg("%s", err.msg);
	struct strata_store *st;
	assert_int_equal(strata_store_open(dir, &st, &err), 0);
	const uint8_t *tiers = strata_store_tier_table(st), *fmts = strata_store_fmt_table(st);
	struct strata_synth *g;
	assert_int_equal(strata_synth_init(&c, &g, &err), 0);
	size_t n = (size_t)c.spec.hidden * c.spec.inter;
	float *w = malloc(n * 4), *dq = malloc(n * 4);
	uint8_t *buf = strata_aligned_alloc(4096, 1 << 20);
	uint32_t per_tier[3] = { 0 };
	for (uint32_t id = 0; id < strata_model_total_experts(&c.spec); id++)
		per_tier[tiers[id]]++;
	assert_true(per_tier[0] == 1 && per_tier[1] == 1 && per_tier[2] == 1);
	for (uint32_t id = 0; id < strata_model_total_experts(&c.spec); id++) {
		assert_int_equal(fmts[id], STRATA_FMT_HOT + tiers[id]);
		uint32_t l = id / c.spec.n_experts, e = id % c.spec.n_experts;
		const struct strata_extent *x = strata_store_expert(st, l, e);
		assert_int_equal(strata_store_read_extent(st, x, buf, true, true, &err), 0);
		/* the codes are the quantized synthetic weights: close to them */
		struct strata_expert_layout L;
		strata_expert_layout(fmts[id], c.spec.hidden, c.spec.inter, &L);
		assert_int_equal(strata_synth_matrix(g, l, e, STRATA_SYNTH_GATE, w), 0);
		assert_int_equal(strata_dequantize_matrix(fmts[id], buf + L.gate_off, c.spec.inter, c.spec.hidden, dq), 0);
		double dot = 0, a = 0, b = 0;
		for (size_t i = 0; i < n; i++) {
			dot += (double)w[i] * dq[i];
			a += (double)w[i] * w[i];
			b += (double)dq[i] * dq[i];
		}
		assert_true(dot / sqrt(a * b) > 0.8);
	}
	strata_store_close(st);
	/* codes=random: valid blocks, same layout, throughput only */
	c.codes = STRATA_SYNTH_CODES_RANDOM;
	c.force = true; /* replaces the model written above */
	assert_int_equal(strata_synth_write(&c, dir, NULL, NULL, &err), 0);
	assert_int_equal(strata_store_open(dir, &st, &err), 0);
	fmts = strata_store_fmt_table(st);
	for (uint32_t id = 0; id < strata_model_total_experts(&c.spec); id++) {
		const struct strata_extent *x = strata_store_expert(st, id / c.spec.n_experts, id % c.spec.n_experts);
		assert_int_equal(strata_store_read_extent(st, x, buf, true, true, &err), 0);
		assert_int_equal(strata_dequantize_matrix(fmts[id], buf, c.spec.inter, c.spec.hidden, dq), 0);
		for (size_t i = 0; i < n; i++)
			assert_true(isfinite(dq[i]));
	}
	strata_store_close(st);
	strata_synth_free(g);
	free(w);
	free(dq);
	free(buf);
	test_rmdir(dir);
	free(dir);
}

static void test_interrupt_and_bad_config(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_synth_config c = { .seed = 1 };
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("tiny", &c.spec, &err), 0);
	strata_interrupted = 1;
	int rc = strata_synth_write(&c, dir, NULL, NULL, &err);
	strata_interrupted = 0;
	assert_int_equal(rc, STRATA_EINTR);
	assert_int_equal(count_files(dir), 0);
	struct strata_synth *g;
	c.dist = STRATA_SYNTH_STUDENT_T;
	c.dof = 2;
	assert_int_equal(strata_synth_init(&c, &g, &err), STRATA_EINVAL);
	c.dof = 0;
	c.outlier_frac = 0.9;
	assert_int_equal(strata_synth_init(&c, &g, &err), STRATA_EINVAL);
	c.outlier_frac = 0;
	c.tier_frac[0] = 0.9;
	assert_int_equal(strata_synth_init(&c, &g, &err), STRATA_EINVAL);
	test_rmdir(dir);
	free(dir);
}

static void test_cli(void **state)
{
	char *dir = test_mkdtemp(), out[8192];
	const char *bin = test_bin("strata");
	assert_int_equal(test_run(out, sizeof(out), "%s synth --help", bin), 0);
	assert_non_null(strstr(out, "--preset"));
	assert_int_equal(test_run(out, sizeof(out), "%s synth --list-presets --json", bin), 0);
	assert_non_null(strstr(out, "\"kimi-k3.1\""));
	assert_int_equal(test_run(out, sizeof(out), "%s synth --preset tiny --out %s/m --seed 4 --json", bin, dir), 0);
	assert_non_null(strstr(out, "\"experts\":16"));
	/* an existing model is not replaced without --force */
	assert_int_equal(test_run(out, sizeof(out), "%s synth --preset tiny --out %s/m", bin, dir), 1);
	assert_non_null(strstr(out, "--force"));
	assert_int_equal(test_run(out, sizeof(out), "%s synth --preset tiny --out %s/m --force --dist outliers "
				  "--tiers 0.25,0.25,0.5", bin, dir), 0);
	assert_int_equal(test_run(out, sizeof(out), "%s inspect %s/m --verify --json", bin, dir), 0);
	assert_non_null(strstr(out, "\"experts\":4,\"format\":\"bf16\"")); /* 0.25 of 8, two layers */
	assert_int_equal(test_run(out, sizeof(out), "%s inspect %s/m", bin, dir), 0);
	assert_non_null(strstr(out, "non-routed"));
	/* usage errors */
	assert_int_equal(test_run(out, sizeof(out), "%s synth --preset tiny", bin), 2);
	assert_int_equal(test_run(out, sizeof(out), "%s synth --preset tiny --out %s/x --bogus", bin, dir), 2);
	assert_int_equal(test_run(out, sizeof(out), "%s synth --preset tiny --out %s/x --dist cauchy", bin, dir), 2);
	assert_int_equal(test_run(out, sizeof(out), "%s synth --preset gpt9 --out %s/x", bin, dir), 1);
	assert_non_null(strstr(out, "gpt9"));
	assert_int_equal(test_run(out, sizeof(out), "%s inspect %s/nothing", bin, dir), 1);
	assert_non_null(strstr(out, "nothing"));
	/* the Kimi card from its spec alone: ~674 GB at the three tier rates */
	assert_int_equal(test_run(out, sizeof(out), "%s inspect --preset kimi-k3.1 --json", bin), 0);
	const char *t = strstr(out, "\"total\":");
	assert_non_null(t);
	const char *gb = strstr(t, "\"gb\":");
	assert_non_null(gb);
	double v = atof(gb + 5);
	assert_true(v > 660 && v < 680);
	assert_non_null(strstr(out, "\"experts\":82432"));
	/* a tiered store's card equals the card computed from its spec alone */
	char card[8192];
	assert_int_equal(test_run(out, sizeof(out), "%s synth --preset tiny --out %s/t --format tiered --codes random "
				  "--tiers 0.25,0.25,0.5 --json", bin, dir), 0);
	assert_int_equal(test_run(out, sizeof(out), "%s inspect %s/t --json", bin, dir), 0);
	assert_int_equal(test_run(card, sizeof(card), "%s inspect --preset tiny --tiers 0.25,0.25,0.5 --json", bin), 0);
	const char *a = strstr(out, "\"tiers\":"), *b = strstr(card, "\"tiers\":");
	assert_non_null(a);
	assert_non_null(b);
	const char *ae = strstr(a, ",\"nonrouted_params\""), *be = strstr(b, ",\"nonrouted_params\"");
	assert_non_null(ae);
	assert_non_null(be);
	assert_int_equal(ae - a, be - b);
	assert_memory_equal(a, b, (size_t)(ae - a));
	test_rmdir(dir);
	free(dir);
}

/* Ctrl-C during a write: exit 1, a clear message, no shard and no .tmp left. */
static void test_cli_sigint(void **state)
{
	char *dir = test_mkdtemp(), out[4096];
	int rc = test_run(out, sizeof(out),
			  "( %s synth --preset qwen3-30b-a3b:layers=1,experts=64 --out %s/m --threads 1 & pid=$!; "
			  "for i in $(seq 500); do ls %s/m/*.tmp >/dev/null 2>&1 && break; sleep 0.01; done; "
			  "kill -INT $pid; wait $pid; echo rc=$?; ls -A %s/m | wc -l )", test_bin("strata"), dir, dir, dir);
	assert_int_equal(rc, 0);
	if (!strstr(out, "rc=1"))
		fail_msg("%s", out);
	assert_non_null(strstr(out, "interrupted"));
	const char *last = strrchr(out, '\n');
	while (last > out && last[-1] != '\n' && last[-1])
		last--;
	assert_int_equal(atoi(last), 0); /* the directory is empty */
	test_rmdir(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reproducible),
		cmocka_unit_test(test_distributions),
		cmocka_unit_test(test_outlier_columns),
		cmocka_unit_test(test_tier_table),
		cmocka_unit_test(test_write_and_read_back),
		cmocka_unit_test(test_tiered),
		cmocka_unit_test(test_interrupt_and_bad_config),
		cmocka_unit_test(test_cli),
		cmocka_unit_test(test_cli_sigint),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
