/* A program outside Strata's tree using libstrata.so through its one public header, as any
 * C or C++ project would:
 *   cc -I<strata>/core/include client.c -L<strata>/build/release/lib -lstrata
 *   ./a.out SHARD_DIR OUT.strace
 * Opens the store and an engine on the host path, runs every MoE layer of a few decode steps
 * with the model's top_k experts, records the routing as a trace, prints the stats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libstrata.h"

#define CHECK(call)                                                                        \
	do {                                                                               \
		int32_t rc_ = (call);                                                      \
		if (rc_) {                                                                 \
			fprintf(stderr, "client: %s: %s (%s)\n", #call, strata_api_last_error(), \
				strata_api_status_name(rc_));                              \
			return 1;                                                          \
		}                                                                          \
	} while (0)

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: client SHARD_DIR OUT.strace\n");
		return 2;
	}
	if (strata_api_version() / 10000 != STRATA_API_VERSION / 10000) {
		fprintf(stderr, "client: libstrata ABI %u, built for %d\n", strata_api_version(), STRATA_API_VERSION);
		return 1;
	}
	strata_api_store *store;
	strata_api_engine *eng;
	strata_api_recorder *rec;
	CHECK(strata_api_store_open(argv[1], &store));
	uint32_t layers = (uint32_t)strata_api_store_shape(store, STRATA_API_N_MOE_LAYERS);
	uint32_t experts = (uint32_t)strata_api_store_shape(store, STRATA_API_N_EXPERTS);
	uint32_t k = (uint32_t)strata_api_store_shape(store, STRATA_API_TOP_K);
	uint32_t hidden = (uint32_t)strata_api_store_shape(store, STRATA_API_HIDDEN);
	CHECK(strata_api_engine_open(store, 8u << 20, 16u << 20, "static", "lru", "none", "gpu=0", &eng));
	CHECK(strata_api_recorder_open(argv[2], layers, experts, k, 0, 0, "client", &rec));
	float *x = calloc(hidden, sizeof(float)), *y = calloc(hidden, sizeof(float));
	int32_t *ids = calloc(k, sizeof(int32_t));
	float *w = calloc(k, sizeof(float));
	for (uint32_t i = 0; i < hidden; i++)
		x[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
	for (uint32_t step = 0; step < 4; step++) {
		for (uint32_t l = 0; l < layers; l++) {
			for (uint32_t j = 0; j < k; j++) {
				ids[j] = (int32_t)((step * 3 + l + j * 5) % experts);
				w[j] = 1.0f / (float)k;
			}
			memset(y, 0, hidden * sizeof(float));
			CHECK(strata_api_moe_forward(eng, step, l, 1, k, ids, w, x, y, 0, NULL, NULL, NULL, 0));
			CHECK(strata_api_recorder_layer(rec, l, 1, ids, w, NULL, NULL));
		}
		CHECK(strata_api_recorder_step(rec, 0, step, step ? 1 : 0));
	}
	double norm = 0;
	for (uint32_t i = 0; i < hidden; i++)
		norm += (double)y[i] * y[i];
	char stats[4096];
	if (strata_api_engine_stats(eng, stats, sizeof(stats)) < 0)
		return 1;
	printf("client: %s\nclient: |y|^2 %.4g, %llu tokens recorded\n", stats, norm,
	       (unsigned long long)strata_api_recorder_count(rec));
	CHECK(strata_api_recorder_finish(rec, 1));
	strata_api_engine_close(eng);
	strata_api_store_close(store);
	free(x);
	free(y);
	free(ids);
	free(w);
	if (!(norm > 0)) {
		fprintf(stderr, "client: the layer computed nothing\n");
		return 1;
	}
	printf("client: ok\n");
	return 0;
}
