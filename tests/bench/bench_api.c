/*
 * One MoE layer call through the C ABI (strata_api_moe_forward), back to back: the C side of
 * the Python-path overhead figure (experiments/python/bench.py makes the same calls through the
 * Python package and divides).  Every expert resident in VRAM (place=static:promote=all, a budget
 * that holds the store, and the warm-up calls use every expert), x
 * and y on the device, the ids of call i, token t, slot j are (i * 3k + t * k + j) mod E with
 * weights 1/k (bench.py uses the same), `iters` calls after `warmup`, one device sync at the
 * end.  Prints one JSON line: {"shards", "tokens", "iters", "us_per_call", "host_us_per_call",
 * "on_gpu"}: host_us_per_call is what the first min(ITERS, 64) timed calls took to return, the
 * host's own cost per call while the device works behind it (64 calls stay far from filling the
 * device's launch queue, which would make the host wait).
 *
 *   bench_api SHARD_DIR TOKENS [ITERS=300] [WARMUP=30] [VRAM_BYTES=8G]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "libstrata.h"
#include "strata/gpu.h"
#include "strata/util.h"

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: bench_api SHARD_DIR TOKENS [ITERS] [WARMUP] [VRAM_BYTES]\n");
		return 2;
	}
	uint32_t T = (uint32_t)atoi(argv[2]);
	int iters = argc > 3 ? atoi(argv[3]) : 300, warm = argc > 4 ? atoi(argv[4]) : 30;
	uint64_t vram = argc > 5 ? strtoull(argv[5], NULL, 10) : 8ull << 30;
	strata_api_store *s;
	strata_api_engine *e;
	if (strata_api_store_open(argv[1], &s) ||
	    strata_api_engine_open(s, vram, 1ull << 30, "static:promote=all", "lru", "none", "max_tokens=64", &e)) {
		fprintf(stderr, "bench_api: %s\n", strata_api_last_error());
		return 1;
	}
	uint32_t H = (uint32_t)strata_api_store_shape(s, STRATA_API_HIDDEN);
	uint32_t E = (uint32_t)strata_api_store_shape(s, STRATA_API_N_EXPERTS);
	uint32_t k = (uint32_t)strata_api_store_shape(s, STRATA_API_TOP_K);
	int gpu = strata_api_engine_on_gpu(e);
	size_t nx = (size_t)T * H;
	float *x = malloc(nx * sizeof(float)), *y = calloc(nx, sizeof(float));
	int32_t *ids = malloc((size_t)(iters + warm) * T * k * sizeof(int32_t));
	float *w = malloc((size_t)T * k * sizeof(float));
	for (size_t i = 0; i < nx; i++)
		x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
	for (int i = 0; i < iters + warm; i++)
		for (uint32_t t = 0; t < T; t++)
			for (uint32_t j = 0; j < k; j++)
				ids[((size_t)i * T + t) * k + j] = (int32_t)(((uint32_t)i * 3 * k + t * k + j) % E);
	for (uint32_t i = 0; i < T * k; i++)
		w[i] = 1.0f / (float)k;
	void *dx = x, *dy = y;
	struct strata_error err = { 0 };
	if (gpu && (strata_gpu_malloc(&dx, nx * sizeof(float), &err) || strata_gpu_malloc(&dy, nx * sizeof(float), &err) ||
		    strata_gpu_memcpy_h2d_async(dx, x, nx * sizeof(float), NULL, &err) ||
		    strata_gpu_memset(dy, 0, nx * sizeof(float), &err) || strata_gpu_sync(&err))) {
		fprintf(stderr, "bench_api: %s\n", err.msg);
		return 1;
	}
	uint64_t t0 = 0, t_host = 0;
	int n_host = iters < 64 ? iters : 64;
	for (int i = 0; i < iters + warm; i++) {
		if (i == warm + n_host)
			t_host = strata_now_ns();
		if (i == warm) {
			if (gpu && strata_gpu_sync(&err))
				return 1;
			t0 = strata_now_ns();
		}
		if (strata_api_moe_forward(e, (uint64_t)i, 0, T, k, ids + (size_t)i * T * k, w, dx, dy, 0, NULL, NULL, NULL,
					   0)) {
			fprintf(stderr, "bench_api: %s\n", strata_api_last_error());
			return 1;
		}
	}
	if (!t_host)
		t_host = strata_now_ns();
	double host_us = (double)(t_host - t0) / 1e3 / n_host;
	if (gpu && strata_gpu_sync(&err))
		return 1;
	double us = (double)(strata_now_ns() - t0) / 1e3 / iters;
	printf("{\"shards\": \"%s\", \"tokens\": %u, \"iters\": %d, \"us_per_call\": %.3f, \"host_us_per_call\": %.3f, "
	       "\"on_gpu\": %d}\n",
	       argv[1], T, iters, us, host_us, gpu);
	if (gpu) {
		strata_gpu_free(dx);
		strata_gpu_free(dy);
	}
	strata_api_engine_close(e);
	strata_api_store_close(s);
	free(x);
	free(y);
	free(ids);
	free(w);
	return 0;
}
