/*
 * Policy cost: nanoseconds per expert access of each C eviction policy (and
 * of the prefetchers on top of LRU), replayed through the policy harness on
 * synthetic traces of real model shapes, with the cache at a quarter of the
 * experts so that most misses evict.
 *
 * The floor, measured in the same run: the harness itself with a policy that
 * does nothing (every expert fits, no victim is ever asked for).  Each row
 * prints ns/access and its ratio to that floor; the policy's own cost is
 * roughly ns - floor.  The engine's full bookkeeping is measured separately
 * (the engine's benchmark); the budget there is 1 us per access.
 *
 * Time is the thread's CPU time (best of reps), not wall time: the policy
 * cost is CPU work, and the build machine is shared, so wall time mostly
 * measures other people's jobs.
 *
 *   build/release/bench/bench_policies [tokens] [reps]     (CSV on stdout)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strata/policy.h"
#include "strata/harness.h"
#include "bench_common.h"




int main(int argc, char **argv)
{
	uint64_t tokens = argc > 1 ? strtoull(argv[1], NULL, 10) : 256;
	int reps = argc > 2 ? atoi(argv[2]) : 5;
	static const char *models[] = { "qwen3-30b-a3b", "deepseek-v3", "kimi-k3.1" };
	static const char *evicts[] = { "lru", "fifo", "lfu", "lfu-decay", "farthest", "random" };
	static const char *prefetches[] = { "lookahead:depth=2", "oracle:depth=2", "history:depth=2" };
	printf("model,policy,accesses,ns_per_access,ratio_to_floor,hit_rate\n");
	for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
		struct strata_harness_trace *t;
		struct strata_harness_config c;
		struct strata_harness_counters k;
		uint64_t n_ids;
		double floor_ns = bench_floor("bench_policies", models[m], tokens, reps, &t, &c, &k, &n_ids);
		printf("%s,floor,%llu,%.1f,1.00,%.4f\n", models[m], (unsigned long long)t->n_accesses,
		       floor_ns, (double)k.hits / (double)k.accesses);
		for (size_t e = 0; e < sizeof(evicts) / sizeof(evicts[0]); e++) {
			c.evict = evicts[e];
			c.prefetch = "none";
			double ns = measure_harness("bench_policies", t, &c, reps, &k);
			printf("%s,%s,%llu,%.1f,%.2f,%.4f\n", models[m], evicts[e],
			       (unsigned long long)t->n_accesses, ns, ns / floor_ns,
			       (double)k.hits / (double)k.accesses);
		}
		for (size_t p = 0; p < sizeof(prefetches) / sizeof(prefetches[0]); p++) {
			c.evict = "lru";
			c.prefetch = prefetches[p];
			double ns = measure_harness("bench_policies", t, &c, reps, &k);
			printf("%s,lru+%s,%llu,%.1f,%.2f,%.4f\n", models[m], prefetches[p],
			       (unsigned long long)t->n_accesses, ns, ns / floor_ns,
			       (double)k.hits / (double)k.accesses);
		}
		fflush(stdout);
		strata_harness_trace_free(t);
	}
	return 0;
}
