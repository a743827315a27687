/* The C ABI of libstrata.so (core/include/libstrata.h): store, engine, the fused MoE layer
 * against a float reference over the dequantized experts, step-by-step acquire/release, bad
 * input (corrupt shard, budget too small, bad options, shapes), stats, the trace recorder,
 * CPU vs GPU, the exported symbols, and a C program outside the tree built against the
 * header and the .so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libstrata.h"
#include "strata/store.h"
#include "strata/trace.h"
#include "testutil.h"

#define L 2
#define E 8
#define K 2
#define HID 256
#define INT 512

static int setup(void **state)
{
	if (test_tmpdir_setup(state))
		return -1;
	char out[4096];
	if (test_run(out, sizeof(out), "%s synth --preset tiny --out %s/tiered --format tiered --seed 3 && "
				       "%s synth --preset tiny --out %s/bf16 --format bf16 --seed 4",
		     test_bin("strata"), test_tmpdir, test_bin("strata"), test_tmpdir)) {
		fprintf(stderr, "synth failed: %s\n", out);
		return -1;
	}
	return 0;
}

static float frand(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((double)(*s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static void test_version(void **state)
{
	assert_int_equal(strata_api_version() / 10000, STRATA_API_VERSION / 10000);
	assert_string_equal(strata_api_status_name(STRATA_API_EBUDGET), "EBUDGET");
	assert_true(strata_api_gpu_count() >= 0);
}

static void test_store(void **state)
{
	strata_api_store *s = NULL;
	assert_int_equal(strata_api_store_open(test_path("tiered"), &s), 0);
	assert_int_equal(strata_api_store_shape(s, STRATA_API_N_MOE_LAYERS), L);
	assert_int_equal(strata_api_store_shape(s, STRATA_API_N_EXPERTS), E);
	assert_int_equal(strata_api_store_shape(s, STRATA_API_TOP_K), K);
	assert_int_equal(strata_api_store_shape(s, STRATA_API_HIDDEN), HID);
	assert_int_equal(strata_api_store_shape(s, STRATA_API_INTER), INT);
	assert_int_equal(strata_api_store_shape(s, 99), -1);
	int seen[5] = { 0 };
	for (uint32_t e = 0; e < E; e++) {
		int f = strata_api_store_expert_fmt(s, 0, e);
		assert_true(f >= STRATA_API_FMT_HOT && f <= STRATA_API_FMT_COLD);
		seen[f]++;
	}
	assert_true(seen[STRATA_API_FMT_HOT] && seen[STRATA_API_FMT_COLD]);
	assert_int_equal(strata_api_store_expert_fmt(s, 0, E), STRATA_API_EINVAL);
	assert_non_null(strstr(strata_api_last_error(), "out of range"));
	strata_api_store_close(s);
	/* missing directory: names it */
	assert_true(strata_api_store_open(test_path("nothing"), &s) < 0);
	assert_null(s);
	assert_non_null(strstr(strata_api_last_error(), "nothing"));
}

static void test_corrupt(void **state)
{
	char out[4096];
	assert_int_equal(test_run(out, sizeof(out), "cp -r %s/tiered %s/bad && printf 'X' | dd of=%s/bad/shard-00000.strata "
						   "bs=1 seek=300 conv=notrunc 2>/dev/null",
				  test_tmpdir, test_tmpdir, test_tmpdir), 0);
	strata_api_store *s = NULL;
	assert_int_equal(strata_api_store_open(test_path("bad"), &s), STRATA_API_ECORRUPT);
	assert_non_null(strstr(strata_api_last_error(), "shard-00000.strata"));
}

/* A corrupt expert payload (the headers intact): verify=1 names the shard when it is read. */
static void test_corrupt_extent(void **state)
{
	char out[4096];
	struct strata_store *st;
	struct strata_error err = { 0 };
	assert_int_equal(test_run(out, sizeof(out), "cp -r %s/tiered %s/badx", test_tmpdir, test_tmpdir), 0);
	assert_int_equal(strata_store_open(test_path("badx"), &st, &err), 0);
	uint64_t off = strata_store_expert(st, 1, 7)->offset + 100;
	strata_store_close(st);
	assert_int_equal(test_run(out, sizeof(out), "printf 'XYZ' | dd of=%s/badx/shard-00000.strata bs=1 seek=%llu "
						   "conv=notrunc 2>/dev/null", test_tmpdir, (unsigned long long)off), 0);
	strata_api_store *s = NULL;
	strata_api_engine *e = NULL;
	assert_int_equal(strata_api_store_open(test_path("badx"), &s), 0);
	int32_t rc = strata_api_engine_open(s, 2 << 20, 2 << 20, NULL, NULL, NULL, "gpu=0 verify=1", &e);
	if (rc == 0) {
		float x[HID] = { 0 }, y[HID] = { 0 }, w[K] = { 1, 0 };
		int32_t ids[K] = { 7, 6 };
		rc = strata_api_moe_forward(e, 0, 1, 1, K, ids, w, x, y, 0, NULL, NULL, NULL, 0);
		strata_api_engine_close(e);
	}
	assert_int_equal(rc, STRATA_API_ECORRUPT);
	assert_non_null(strstr(strata_api_last_error(), "shard-00000.strata"));
	strata_api_store_close(s);
}

/* y += sum_j w_j expert_j(x) in double over the dequantized weights */
static void reference(strata_api_store *s, uint32_t layer, uint32_t T, const int32_t *ids, const float *w,
		      const float *x, double *y)
{
	float *g = malloc(sizeof(float) * INT * HID), *u = malloc(sizeof(float) * INT * HID),
	      *d = malloc(sizeof(float) * INT * HID);
	double *h = malloc(sizeof(double) * INT);
	for (uint32_t t = 0; t < T; t++)
		for (uint32_t j = 0; j < K; j++) {
			if (ids[t * K + j] < 0)
				continue;
			assert_int_equal(strata_api_store_dequantize(s, layer, (uint32_t)ids[t * K + j], g, u, d), 0);
			for (uint32_t i = 0; i < INT; i++) {
				double a = 0, b = 0;
				for (uint32_t c = 0; c < HID; c++) {
					a += (double)g[i * HID + c] * x[t * HID + c];
					b += (double)u[i * HID + c] * x[t * HID + c];
				}
				h[i] = a / (1 + exp(-a)) * b;
			}
			for (uint32_t o = 0; o < HID; o++) {
				double acc = 0;
				for (uint32_t i = 0; i < INT; i++)
					acc += (double)d[o * INT + i] * h[i];
				y[t * HID + o] += w[t * K + j] * acc;
			}
		}
	free(g);
	free(u);
	free(d);
	free(h);
}

static double rel_err(const float *y, const double *ref, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num += (y[i] - ref[i]) * (y[i] - ref[i]);
		den += ref[i] * ref[i];
	}
	return sqrt(num / (den > 0 ? den : 1));
}

static void run_forward(const char *model, const char *opts, double bound)
{
	strata_api_store *s = NULL;
	strata_api_engine *e = NULL;
	assert_int_equal(strata_api_store_open(test_path(model), &s), 0);
	/* budgets that force all three tiers: one expert of VRAM, a few of RAM */
	assert_int_equal(strata_api_engine_open(s, 2 << 20, 3 << 20, "static", "lru", "lookahead:depth=1", opts, &e), 0);
	assert_int_equal(strata_api_engine_on_gpu(e), 0);
	enum { T = 5 };
	uint64_t seed = 11;
	float x[T * HID], y[T * HID], w[T * K];
	int32_t ids[T * K];
	double ref[T * HID];
	for (int step = 0; step < 6; step++)
		for (uint32_t l = 0; l < L; l++) {
			for (int i = 0; i < T * HID; i++)
				x[i] = frand(&seed);
			for (int t = 0; t < T; t++) {
				ids[t * K] = (int32_t)((t + step * 3 + l) % E);
				ids[t * K + 1] = t == 2 ? -1 : (int32_t)((t * 5 + step + 1 + l) % E);
				if (ids[t * K + 1] == ids[t * K])
					ids[t * K + 1] = (ids[t * K] + 1) % E;
				w[t * K] = 0.7f;
				w[t * K + 1] = 0.3f;
			}
			memset(y, 0, sizeof(y));
			memset(ref, 0, sizeof(ref));
			uint32_t hl[2] = { l + 1, l + 1 }, he[2] = { 3, 4 };
			float hs[2] = { 0.9f, 0.5f };
			assert_int_equal(strata_api_moe_forward(e, (uint64_t)step, l, T, K, ids, w, x, y, 0, hl, he, hs, 2), 0);
			reference(s, l, T, ids, w, x, ref);
			double r = rel_err(y, ref, T * HID);
			assert_true(r < bound);
		}
	char buf[2048];
	int n = strata_api_engine_stats(e, buf, sizeof(buf));
	assert_true(n > 0 && (size_t)n < sizeof(buf));
	assert_non_null(strstr(buf, "\"accesses\": "));
	assert_null(strstr(buf, "\"hits_nvme\": 0,")); /* the budgets forced NVMe reads */
	assert_int_equal(strata_api_engine_stats(e, NULL, 0), n);
	strata_api_engine_close(e);
	strata_api_store_close(s);
}

/* the CPU reference computes in float over the same dequantized weights: float rounding only */
static void test_forward_tiered(void **state) { run_forward("tiered", "gpu=0", 1e-5); }
static void test_forward_bf16(void **state) { run_forward("bf16", "gpu=0 mover=pread", 1e-5); }

static void test_acquire_release(void **state)
{
	strata_api_store *s = NULL;
	strata_api_engine *e = NULL;
	assert_int_equal(strata_api_store_open(test_path("tiered"), &s), 0);
	assert_int_equal(strata_api_engine_open(s, 64 << 20, 64 << 20, NULL, NULL, NULL, "gpu=0", &e), 0);
	uint32_t ex[3] = { 1, 5, 7 };
	const void *ptrs[3] = { 0 };
	uint8_t fmts[3] = { 9, 9, 9 };
	assert_int_equal(strata_api_engine_acquire(e, 0, 1, ex, 3, NULL, NULL, NULL, 0, ptrs, fmts), 0);
	for (int i = 0; i < 3; i++) {
		assert_non_null(ptrs[i]);
		assert_int_equal(fmts[i], strata_api_store_expert_fmt(s, 1, ex[i]));
	}
	assert_int_equal(strata_api_engine_acquire(e, 0, 0, ex, 3, NULL, NULL, NULL, 0, NULL, NULL), STRATA_API_EINVAL);
	assert_non_null(strstr(strata_api_last_error(), "still held"));
	assert_int_equal(strata_api_engine_release(e, 0, 0), STRATA_API_EINVAL);
	assert_int_equal(strata_api_engine_release(e, 0, 1), 0);
	uint32_t bad[1] = { E };
	assert_int_equal(strata_api_engine_acquire(e, 1, 0, bad, 1, NULL, NULL, NULL, 0, NULL, NULL), STRATA_API_EINVAL);
	/* moe_forward: an id out of range, too many tokens */
	float x[HID] = { 0 }, y[HID] = { 0 }, w[K] = { 1, 0 };
	int32_t ids[K] = { 0, E };
	assert_int_equal(strata_api_moe_forward(e, 2, 0, 1, K, ids, w, x, y, 0, NULL, NULL, NULL, 0), STRATA_API_EINVAL);
	assert_non_null(strstr(strata_api_last_error(), "expert 8 of 8"));
	assert_int_equal(strata_api_moe_forward(e, 2, 0, 100000, K, ids, w, x, y, 0, NULL, NULL, NULL, 0),
			 STRATA_API_ESHAPE);
	assert_int_equal(strata_api_moe_forward(e, 2, L, 1, K, ids, w, x, y, 0, NULL, NULL, NULL, 0), STRATA_API_EINVAL);
	strata_api_engine_close(e);
	strata_api_store_close(s);
}

static void test_engine_errors(void **state)
{
	strata_api_store *s = NULL;
	strata_api_engine *e = NULL;
	assert_int_equal(strata_api_store_open(test_path("tiered"), &s), 0);
	assert_int_equal(strata_api_engine_open(s, 4096, 64 << 20, NULL, NULL, NULL, "gpu=0", &e), STRATA_API_EBUDGET);
	assert_null(e);
	assert_non_null(strstr(strata_api_last_error(), "budget"));
	assert_int_equal(strata_api_engine_open(s, 64 << 20, 64 << 20, NULL, NULL, NULL, "gpu=0 colour=red", &e),
			 STRATA_API_EINVAL);
	assert_non_null(strstr(strata_api_last_error(), "colour"));
	assert_int_equal(strata_api_engine_open(s, 64 << 20, 64 << 20, NULL, NULL, NULL, "gpu=maybe", &e),
			 STRATA_API_EINVAL);
	assert_int_equal(strata_api_engine_open(s, 64 << 20, 64 << 20, "nosuchpolicy", NULL, NULL, "gpu=0", &e) < 0, 1);
	assert_non_null(strstr(strata_api_last_error(), "nosuchpolicy"));
	strata_api_store_close(s);
}

static void test_recorder(void **state)
{
	strata_api_recorder *r = NULL;
	const char *path = test_path("rec.strace");
	assert_int_equal(strata_api_recorder_open(path, L, E, K, 1, 2, "tiny", &r), 0);
	int32_t ids[3 * K] = { 0, 1, 2, 3, 4, 5 }, pred[3 * 2] = { 6, 7, 1, -1, 2, 3 };
	float w[3 * K] = { .6f, .4f, .5f, .5f, .9f, .1f }, ps[3 * 2] = { .5f, .4f, .3f, 0, .2f, .1f };
	assert_int_equal(strata_api_recorder_layer(r, 0, 3, ids, w, pred, ps), 0);
	assert_int_equal(strata_api_recorder_step(r, 0, 0, 0), STRATA_API_EINVAL); /* layer 1 missing */
	assert_int_equal(strata_api_recorder_layer(r, 1, 2, ids, w, NULL, NULL), STRATA_API_ESHAPE);
	assert_int_equal(strata_api_recorder_layer(r, 1, 3, ids, w, NULL, NULL), 0);
	assert_int_equal(strata_api_recorder_step(r, 0, 0, 0), 0);
	for (int i = 0; i < L; i++)
		assert_int_equal(strata_api_recorder_layer(r, (uint32_t)i, 1, ids + 2, w, pred, ps), 0);
	assert_int_equal(strata_api_recorder_step(r, 0, 3, 1), 0);
	assert_int_equal(strata_api_recorder_count(r), 4);
	assert_int_equal(strata_api_recorder_finish(r, 1), 0);
	struct strata_trace *t;
	struct strata_error err = { 0 };
	assert_int_equal(strata_trace_open(path, &t, &err), 0);
	const struct strata_trace_info *ti = strata_trace_info(t);
	assert_int_equal(ti->n_tokens, 4);
	assert_int_equal(ti->n_prefill, 3);
	assert_int_equal(ti->pred_depth, 1);
	assert_int_equal(strata_trace_experts(t, 1, 0)[0], 2);
	assert_int_equal(strata_trace_experts(t, 3, 1)[1], 3);
	assert_int_equal(strata_trace_pos(t, 3), 3);
	assert_int_equal(strata_trace_phase(t, 3), STRATA_PHASE_DECODE);
	struct strata_hint h[4];
	assert_int_equal(strata_trace_hints(t, 1, 0, h, 4), 1); /* -1 padding is no hint */
	assert_int_equal(h[0].expert, 1);
	strata_trace_close(t);
	/* abort leaves nothing */
	assert_int_equal(strata_api_recorder_open(test_path("gone.strace"), L, E, K, 0, 0, NULL, &r), 0);
	assert_int_equal(strata_api_recorder_finish(r, 0), 0);
	assert_int_equal(access(test_path("gone.strace"), F_OK), -1);
	assert_int_equal(access(test_path("gone.strace.tmp"), F_OK), -1);
	assert_int_equal(strata_api_recorder_open(test_path("x.strace"), L, E, K, 1, 0, NULL, &r), STRATA_API_EINVAL);
}

static void test_gpu_agrees(void **state)
{
	if (!test_have_gpu("test_gpu_agrees"))
		return;
	/* the GPU path takes device pointers; this C test has no CUDA runtime of its own, so
	 * the Python suite (tests/python/test_strata.py) checks CPU vs GPU on CUDA tensors */
	strata_api_store *s = NULL;
	strata_api_engine *e = NULL;
	assert_int_equal(strata_api_store_open(test_path("tiered"), &s), 0);
	assert_int_equal(strata_api_engine_open(s, 64 << 20, 64 << 20, NULL, NULL, NULL, "gpu=1", &e), 0);
	assert_int_equal(strata_api_engine_on_gpu(e), 1);
	strata_api_engine_close(e);
	strata_api_store_close(s);
}

/* Only strata_api_* leave libstrata.so, and a C program outside the tree builds against the
 * header and the .so and runs (under the sanitizers when the library has them). */
static void test_outside_program(void **state)
{
	char out[8192], lib[4096];
	snprintf(lib, sizeof(lib), "%s", test_bin("strata"));
	char *slash = strrchr(lib, '/');
	assert_non_null(slash);
	strcpy(slash, "/../lib");
	int rc = test_run(out, sizeof(out), "nm -D --defined-only %s/libstrata.so | awk '$2 ~ /[TDBR]/ {print $3}' | "
					    "grep -v '^strata_api_' | grep -v '^_' | head -5", lib);
	assert_int_equal(rc, 0);
	if (out[0])
		fprintf(stderr, "exported beyond the ABI: %s\n", out);
	assert_string_equal(out, "");
	rc = test_run(out, sizeof(out),
		      "set -e; d=%s/client; mkdir -p $d; src=%s; inc=$(dirname $src)/../core/include; "
		      "san=''; nm -D %s/libstrata.so | grep -q __asan_init && san='-fsanitize=address,undefined'; "
		      "gcc -std=c99 -Wall -Werror $san -I$inc $src/client.c -o $d/client -L%s -lstrata -Wl,-rpath,%s; "
		      "$d/client %s/tiered %s/client/out.strace",
		      test_tmpdir, test_data_path("../abi_client"), lib, lib, lib, test_tmpdir, test_tmpdir);
	if (rc)
		fprintf(stderr, "%s\n", out);
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "client: ok"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version),        cmocka_unit_test(test_store),
		cmocka_unit_test(test_corrupt),        cmocka_unit_test(test_corrupt_extent),
		cmocka_unit_test(test_forward_tiered),
		cmocka_unit_test(test_forward_bf16),   cmocka_unit_test(test_acquire_release),
		cmocka_unit_test(test_engine_errors),  cmocka_unit_test(test_recorder),
		cmocka_unit_test(test_gpu_agrees),     cmocka_unit_test(test_outside_program),
	};
	return cmocka_run_group_tests(tests, setup, test_tmpdir_teardown);
}
