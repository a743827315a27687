/* Pieces the benchmarks share: thread CPU time, the do-nothing eviction
 * policy that measures the harness floor, best-of-N harness replays, scratch
 * paths under $TMPDIR, and the engine benchmarks' synthetic router.  Header-only:
 * every bench_*.c is built as one program. */
#ifndef STRATA_BENCH_COMMON_H
#define STRATA_BENCH_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strata/engine.h"
#include "strata/model.h"
#include "strata/policy.h"
#include "strata/harness.h"

static void nop_insert(struct strata_policy *p, uint32_t e, uint64_t n) { }
static void nop_remove(struct strata_policy *p, uint32_t e) { }
static int64_t nop_victim(struct strata_policy *p, uint64_t n, const struct strata_residency *r)
{
	return STRATA_NO_EXPERT;
}
/* The floor: the harness with a policy that does nothing. */
static const struct strata_evict_ops nop_ops = {
	.name = "floor", .version = STRATA_POLICY_ABI, .on_insert = nop_insert,
	.on_access = nop_insert, .on_remove = nop_remove, .victim = nop_victim,
};

/* CPU time of this thread: the machine is shared, and a replay is one
 * thread of pure computation, so CPU time is its cost without the waits
 * other people's jobs add to wall time. */
static inline uint64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Best of reps harness replays: ns per access; counters of the last.  A
 * failure prints "<who>: message" and exits. */
static inline double measure_harness(const char *who, const struct strata_harness_trace *t,
				     struct strata_harness_config *c, int reps, struct strata_harness_counters *k)
{
	double best = 1e30;
	*k = (struct strata_harness_counters){ 0 };
	for (int r = 0; r < reps; r++) {
		struct strata_harness *h;
		struct strata_error err = { 0 };
		if (strata_harness_open(t, c, &h, &err)) {
			fprintf(stderr, "%s: %s\n", who, err.msg);
			exit(1);
		}
		uint64_t t0 = cpu_ns();
		if (strata_harness_replay(h, &err)) {
			fprintf(stderr, "%s: %s\n", who, err.msg);
			exit(1);
		}
		double ns = (double)(cpu_ns() - t0) / (double)t->n_accesses;
		*k = *strata_harness_counters(h);
		strata_harness_close(h);
		if (ns < best)
			best = ns;
	}
	return best;
}

/* The start both policy benchmarks share: model's synthetic trace of tokens
 * (*t: the caller frees it), a harness config of 1-byte experts under cache
 * placement (*c), and the floor measured on it (every expert fits, the
 * do-nothing policy; *k its counters).  c is left with room for a quarter of
 * the *n_ids experts and no eviction ops, for the policies to measure.
 * Returns the floor in ns per access; a failure prints "<who>: message" and
 * exits. */
static inline double bench_floor(const char *who, const char *model, uint64_t tokens, int reps,
				 struct strata_harness_trace **t, struct strata_harness_config *c,
				 struct strata_harness_counters *k, uint64_t *n_ids)
{
	struct strata_model_spec spec;
	struct strata_error err = { 0 };
	if (strata_model_spec_parse(model, &spec, &err) || strata_harness_trace_gen(&spec, tokens, 1, t, &err)) {
		fprintf(stderr, "%s: %s\n", who, err.msg);
		exit(1);
	}
	*n_ids = strata_model_total_experts(&spec);
	strata_harness_config_defaults(c);
	c->expert_bytes = 1;
	c->place = "cache";
	c->budget = *n_ids; /* everything fits: no victims */
	c->evict_ops = &nop_ops;
	double floor_ns = measure_harness(who, *t, c, reps, k);
	c->evict_ops = NULL;
	c->budget = *n_ids / 4;
	return floor_ns;
}

/* Scratch space of a benchmark run: path becomes
 * "$TMPDIR/strata-<what>-XXXXXX" (/tmp without TMPDIR), made unique by
 * mkdtemp (dir) or mkstemp (a file, created empty).  0, or -1 with a message
 * naming the path on stderr.  The caller removes it when done. */
static inline int bench_tmp_path(char *path, size_t len, const char *what, int dir)
{
	const char *base = getenv("TMPDIR");
	snprintf(path, len, "%s/strata-%s-XXXXXX", base && *base ? base : "/tmp", what);
	int fd = dir ? (mkdtemp(path) ? 0 : -1) : mkstemp(path);
	if (fd < 0) {
		fprintf(stderr, "%s: cannot create %s: %s\n", what, path, strerror(errno));
		return -1;
	}
	if (!dir)
		close(fd);
	return 0;
}

/* The engine benchmarks' router: top_k distinct experts per (token, layer),
 * uniform, or skewed towards low ids (skew != 0); a fixed LCG, so every run
 * routes the same. */
static uint64_t bench_rng = 99;
static inline uint32_t rnd(uint32_t n)
{
	bench_rng = bench_rng * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)((bench_rng >> 33) % n);
}

static inline void route(const struct strata_model_spec *s, int skew, uint32_t *ex)
{
	for (uint32_t j = 0; j < s->top_k; j++) {
		int dup;
		do {
			uint32_t e = rnd(s->n_experts);
			if (skew)
				e = (uint32_t)((uint64_t)e * e / s->n_experts * rnd(s->n_experts) / s->n_experts);
			ex[j] = e;
			dup = 0;
			for (uint32_t k = 0; k < j; k++)
				dup |= ex[k] == e;
		} while (dup);
	}
}

/* The engine benchmarks' driver: steps decode steps of one token, step i at
 * MoE layer i % n_moe_layers, routed by route(skew); with hints, the next
 * layer's routing as prefetch hints, three in four right.  0, or -1 with err
 * set. */
static inline int bench_drive(struct strata_engine *e, const struct strata_model_spec *s, uint32_t steps, int skew,
			      int hints, struct strata_error *err)
{
	uint32_t *ex = malloc(sizeof(uint32_t) * s->top_k), *nx = malloc(sizeof(uint32_t) * s->top_k);
	struct strata_hint *h = malloc(sizeof(*h) * s->top_k);
	const void **ptrs = malloc(sizeof(void *) * s->top_k);
	int rc = 0;
	route(s, skew, nx);
	for (uint32_t i = 0; i < steps && !rc; i++) {
		uint32_t L = i % s->n_moe_layers;
		memcpy(ex, nx, sizeof(uint32_t) * s->top_k);
		route(s, skew, nx); /* the next layer's routing, for hints */
		uint32_t nh = 0;
		for (uint32_t j = 0; hints && j < s->top_k; j++)
			h[nh++] = (struct strata_hint){ (L + 1) % s->n_moe_layers, rnd(4) ? nx[j] : rnd(s->n_experts), 1 };
		rc = strata_engine_begin_step(e, i, L, 1, ex, s->top_k, h, nh, err) ||
		     strata_engine_acquire(e, L, ex, s->top_k, ptrs, err) ||
		     strata_engine_release(e, i, L, ex, s->top_k, err);
	}
	free(ex);
	free(nx);
	free(h);
	free(ptrs);
	return rc ? -1 : 0;
}

#endif
