/*
 * Simulation speed: expert accesses per second of `strata sim` (the engine in
 * virtual mode, C policies, cost model defaults) on a synthetic trace of a
 * real model shape, given by its spec only (no shard files).
 *
 * The ceiling, measured in the same run: a bare loop over the same access
 * sequence doing the least any cache simulator must do per access (read the
 * expert id, test and update one resident flag and one recency stamp, count
 * a hit or a miss).  Each row prints accesses/s of the whole `strata sim` call
 * (trace open, plan, future, engine open, replay loop) and its ratio to that
 * ceiling.  The figure: >= 5 million accesses/s with C policies.
 *
 *   build/release/bench/bench_sim [--part sim|peer] [--cachesim PATH] [--peer-accesses N] [--reps N]
 *                                 [model-spec] [tokens-per-request] [only]
 *   --part sim (default): the speed table; --part peer: the table against libCacheSim
 *   default: qwen3-30b-a3b (48 MoE layers x 128 experts, top-8), 8 requests x (64 + 512)
 *   only: run just the configs whose "evict/prefetch" contains it (e.g. "lru/none")
 *
 * Each part is its own table (different columns): one run prints one part's
 * CSV on stdout, so the output is one table pandas reads; what the run was
 * (model, stream, the peer's path) goes to stderr.
 *
 * The machine this runs on is shared: besides wall-clock rates, each row
 * gives accesses per second of thread CPU time (cpu_accesses_per_s: the
 * whole call, best of two), which other people's load disturbs much less.
 *
 * The peer (--part peer): libCacheSim's `cachesim` (--cachesim PATH or
 * $STRATA_CACHESIM; without it the run fails, saying so).  The same object
 * stream in both: a decode-only trace of the DeepSeek-V2-Lite shape (26 MoE
 * layers x 64 experts, top-6; --peer-accesses, default 30 M), one request per
 * (token, layer, expert), exported with `strata trace export --format
 * oracleGeneral`; one tier holding a quarter of the experts (416 of 1664),
 * every expert one size (`strata sim --tiers 0,0,100 --ram 0 --place cache`;
 * cachesim --ignore-obj-size 1).  For lru, lfu, fifo and farthest (cachesim: belady) each tool
 * runs as its own process, alternating (the order flips every repetition),
 * strata's farthest (next use) against cachesim's Belady,
 * --reps times (default 3); the figure is whole-process CPU time (user +
 * system, from wait4), best of the repetitions, and the ratio is cachesim's
 * over strata's (> 1: strata is faster).  Both miss ratios are printed.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "quant.h"

#include "strata/replay.h"
#include "strata/trace.h"
#include "strata/util.h"
#include "bench_common.h"

static double ceiling(const struct strata_trace_plan *p, uint32_t n_ids, uint32_t E, uint32_t cap, uint64_t *hits)
{
	uint8_t *res = calloc(n_ids, 1);
	uint64_t *stamp = calloc(n_ids, sizeof(uint64_t));
	uint32_t resident = 0;
	uint64_t h = 0, t0 = strata_now_ns();
	for (uint64_t s = 0; s < p->n_steps; s++)
		for (uint32_t l = 0; l < p->n_layers; l++)
			for (uint64_t a = p->off[s * p->n_layers + l]; a < p->off[s * p->n_layers + l + 1]; a++) {
				uint32_t eid = l * E + p->ids[a];
				if (res[eid]) {
					h++;
				} else if (resident < cap) {
					res[eid] = 1;
					resident++;
				}
				stamp[eid] = a;
			}
	double secs = (double)(strata_now_ns() - t0) / 1e9;
	*hits = h + stamp[0] * 0; /* keep the stores */
	free(res);
	free(stamp);
	return (double)p->n_accesses / secs;
}

static double thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the peer: libCacheSim's cachesim on the same object stream ---- */

/* Run argv as its own process, stdout to out_path; its CPU time (user +
 * system) in *cpu_s.  -1 when it could not run or did not exit 0. */
static int run_cpu(char *const argv[], const char *out_path, double *cpu_s)
{
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int null = open("/dev/null", O_WRONLY);
		if (fd < 0 || null < 0)
			_exit(127);
		dup2(fd, 1);
		dup2(null, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	int st;
	struct rusage ru;
	if (wait4(pid, &st, 0, &ru) != pid)
		return -1;
	*cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
		 ru.ru_stime.tv_usec / 1e6;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The last number after `key` in a file, or -1. */
static double last_number_after(const char *path, const char *key)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[4096];
	double v = -1;
	while (fgets(line, sizeof(line), f)) {
		char *at = strstr(line, key);
		if (at)
			v = strtod(at + strlen(key), NULL);
	}
	fclose(f);
	return v;
}

static int peer_section(const char *cachesim, uint64_t want_accesses, int reps, const char *dir)
{
	if (!cachesim || !*cachesim) {
		fprintf(stderr, "bench_sim: --part peer needs libCacheSim's cachesim (--cachesim PATH or "
				"$STRATA_CACHESIM): experiments/sim/README.md says how to build it\n");
		return 2;
	}
	if (access(cachesim, X_OK)) {
		fprintf(stderr, "bench_sim: cachesim %s: not an executable file\n", cachesim);
		return 1;
	}
	char self[PATH_MAX], strata[PATH_MAX + 16];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = 0;
	*strrchr(self, '/') = 0;
	snprintf(strata, sizeof(strata), "%s/../bin/strata", self);
	if (access(strata, X_OK)) {
		fprintf(stderr, "bench_sim: %s: build the strata binary first\n", strata);
		return 1;
	}
	struct strata_error err = { 0 };
	struct strata_model_spec spec;
	if (strata_model_spec_parse("deepseek-v2-lite", &spec, &err))
		return 1;
	const uint32_t per_token = spec.n_moe_layers * spec.top_k, requests = 8;
	char trace[PATH_MAX], og[PATH_MAX], out[PATH_MAX], json[PATH_MAX];
	snprintf(trace, sizeof(trace), "%s/peer.strace", dir);
	snprintf(og, sizeof(og), "%s/peer.oracleGeneral.bin", dir);
	snprintf(out, sizeof(out), "%s/peer.out", dir);
	snprintf(json, sizeof(json), "%s/peer.json", dir);
	struct strata_trace_gen_config g;
	strata_trace_gen_defaults(&g);
	g.n_moe_layers = spec.n_moe_layers;
	g.n_experts = spec.n_experts;
	g.top_k = spec.top_k;
	g.requests = requests;
	g.prompt_len = 0;
	g.gen_len = (uint32_t)((want_accesses + (uint64_t)per_token * requests - 1) / ((uint64_t)per_token * requests));
	g.weights = false;
	int rc = 1;
	struct strata_trace *t = NULL;
	if (strata_trace_gen(&g, trace, STRATA_TRACE_FMT_BINARY, &err) || strata_trace_open(trace, &t, &err) ||
	    strata_trace_export(t, og, STRATA_EXPORT_ORACLE_GENERAL, 1, false, &err)) {
		fprintf(stderr, "bench_sim: peer stream: %s\n", err.msg);
		goto out;
	}
	uint64_t accesses = strata_trace_info(t)->n_tokens * per_token;
	struct strata_expert_layout lay;
	if (strata_expert_layout(STRATA_FMT_COLD, spec.hidden, spec.inter, &lay)) {
		fprintf(stderr, "bench_sim: no layout for the cold format\n");
		goto out;
	}
	const uint32_t slots = spec.n_moe_layers * spec.n_experts / 4;
	char vram[32], slots_s[16];
	snprintf(vram, sizeof(vram), "%" PRIu64, lay.bytes * slots + lay.bytes / 2);
	snprintf(slots_s, sizeof(slots_s), "%u", slots);
	fprintf(stderr, "bench_sim: peer: libCacheSim cachesim %s; stream: %" PRIu64 " accesses (deepseek-v2-lite: %u MoE layers x %u "
	       "experts, top-%u, decode only), one tier of %u of %u experts, equal sizes; whole-process CPU s, best of %d, "
	       "alternating\n", cachesim, accesses, spec.n_moe_layers, spec.n_experts, spec.top_k, slots,
	       spec.n_moe_layers * spec.n_experts, reps);
	printf("policy,accesses,strata_cpu_s,cachesim_cpu_s,ratio_cachesim_over_strata,strata_miss_ratio,"
	       "cachesim_miss_ratio\n");
	/* strata's name, cachesim's name: farthest next use is cachesim's Belady */
	static const char *const algos[][2] = { { "lru", "lru" }, { "lfu", "lfu" }, { "fifo", "fifo" },
						{ "farthest", "belady" } };
	for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
		char evict[32], peer[32];
		snprintf(evict, sizeof(evict), "%s", algos[a][0]);
		snprintf(peer, sizeof(peer), "%s", algos[a][1]);
		char *sargv[] = { strata, "sim", "-q", "--model", "deepseek-v2-lite", "--tiers", "0,0,100", "--trace",
				  trace, "--vram", vram, "--ram", "0", "--place", "cache", "--evict", evict, "--json",
				  json, NULL };
		char *cargv[] = { (char *)cachesim, og, "oracleGeneral", peer, slots_s, "--ignore-obj-size", "1",
				  "--num-thread", "1", NULL };
		double best_s = 0, best_c = 0, miss_s = -1, miss_c = -1;
		for (int r = 0; r < reps; r++) {
			for (int k = 0; k < 2; k++) {
				int strata_turn = (k == 0) == (r % 2 == 0);
				double cpu;
				if (run_cpu(strata_turn ? sargv : cargv, out, &cpu)) {
					fprintf(stderr, "bench_sim: %s %s failed (output in %s)\n",
						strata_turn ? "strata sim" : "cachesim", evict, out);
					goto out;
				}
				if (strata_turn) {
					best_s = !best_s || cpu < best_s ? cpu : best_s;
					miss_s = last_number_after(json, "\"hit_rate_nvme\":");
				} else {
					best_c = !best_c || cpu < best_c ? cpu : best_c;
					miss_c = last_number_after(out, "miss ratio ");
				}
			}
		}
		printf("%s,%" PRIu64 ",%.3f,%.3f,%.3f,%.6f,%.6f\n", evict, accesses, best_s, best_c, best_c / best_s,
		       miss_s, miss_c);
		fflush(stdout);
	}
	rc = 0;
out:
	if (t)
		strata_trace_close(t);
	unlink(trace);
	unlink(og);
	unlink(out);
	unlink(json);
	return rc;
}

static int usage(FILE *f, int rc)
{
	fprintf(f, "usage: bench_sim [--part sim|peer] [--cachesim PATH] [--peer-accesses N] [--reps N] "
		   "[model-spec=qwen3-30b-a3b] [tokens-per-request=512] [only]\n"
		   "  --part sim   strata sim's accesses/s against a bare loop's (default)\n"
		   "  --part peer  strata sim's CPU time against libCacheSim's cachesim on one object stream\n"
		   "               (--cachesim PATH or $STRATA_CACHESIM; --peer-accesses, default 30000000;\n"
		   "               --reps, default 3)\n"
		   "One CSV table on stdout per run; what was run goes to stderr.\n");
	return rc;
}

int main(int argc, char **argv)
{
	const char *cachesim = getenv("STRATA_CACHESIM");
	uint64_t peer_accesses = 30000000;
	int reps = 3, peer = 0;
	while (argc > 1 && !strncmp(argv[1], "--", 2)) {
		if (!strcmp(argv[1], "--help"))
			return usage(stdout, 0);
		if (argc < 3) {
			fprintf(stderr, "bench_sim: %s: needs a value\n", argv[1]);
			return usage(stderr, 2);
		}
		if (!strcmp(argv[1], "--part") && (!strcmp(argv[2], "sim") || !strcmp(argv[2], "peer"))) {
			peer = !strcmp(argv[2], "peer");
		} else if (!strcmp(argv[1], "--cachesim")) {
			cachesim = argv[2];
		} else if (!strcmp(argv[1], "--peer-accesses")) {
			peer_accesses = strtoull(argv[2], NULL, 10);
		} else if (!strcmp(argv[1], "--reps")) {
			reps = atoi(argv[2]);
		} else {
			fprintf(stderr, "bench_sim: unknown option or part: %s %s\n", argv[1], argv[2]);
			return usage(stderr, 2);
		}
		argc -= 2;
		argv += 2;
	}
	if (reps < 1 || !peer_accesses) {
		fprintf(stderr, "bench_sim: --reps and --peer-accesses must be positive\n");
		return 2;
	}
	const char *model = argc > 1 ? argv[1] : "qwen3-30b-a3b";
	uint32_t gen = argc > 2 ? (uint32_t)atoi(argv[2]) : 512;
	const char *only = argc > 3 ? argv[3] : NULL;
	struct strata_error err = { 0 };
	struct strata_model_spec spec;
	if (strata_model_spec_parse(model, &spec, &err)) {
		fprintf(stderr, "bench_sim: %s\n", err.msg);
		return 1;
	}
	char dir[PATH_MAX];
	if (bench_tmp_path(dir, sizeof(dir), "bench-sim", 1))
		return 1;
	if (peer) {
		int prc = peer_section(cachesim, peer_accesses, reps, dir);
		rmdir(dir);
		return prc;
	}
	char trace[PATH_MAX + 16];
	snprintf(trace, sizeof(trace), "%s/t.strace", dir);
	struct strata_trace_gen_config g;
	strata_trace_gen_defaults(&g);
	g.n_moe_layers = spec.n_moe_layers;
	g.n_experts = spec.n_experts;
	g.top_k = spec.top_k;
	g.requests = 8;
	g.prompt_len = 64;
	g.gen_len = gen;
	g.interleave = true;
	g.pred_depth = 1;
	g.pred_topn = spec.top_k;
	g.zipf_alpha = 0.8;
	int rc = 1;
	if (strata_trace_gen(&g, trace, STRATA_TRACE_FMT_BINARY, &err)) {
		fprintf(stderr, "bench_sim: %s\n", err.msg);
		goto out;
	}
	/* ceiling over the same plan the driver builds */
	struct strata_trace *t;
	struct strata_trace_plan plan;
	if (strata_trace_open(trace, &t, &err) || strata_trace_plan_build(t, 0, 0, &plan, &err)) {
		fprintf(stderr, "bench_sim: %s\n", err.msg);
		goto out;
	}
	uint32_t n_ids = spec.n_moe_layers * spec.n_experts;
	uint64_t ch = 0;
	double ceil_rate = 0;
	for (int r = 0; r < 3; r++) {
		double x = ceiling(&plan, n_ids, spec.n_experts, n_ids / 4, &ch);
		if (x > ceil_rate)
			ceil_rate = x;
	}
	uint64_t accesses = plan.n_accesses;
	strata_trace_plan_free(&plan);
	strata_trace_close(t);
	/* budgets: a fifth of the experts in VRAM, two fifths in RAM (cold-format sizes) */
	uint64_t per_expert = (uint64_t)spec.hidden * spec.inter * 3 * 2 / 8; /* ~2 bpw */
	uint64_t vram = per_expert * n_ids / 5, ram = per_expert * n_ids * 2 / 5;
	static const struct {
		const char *evict, *prefetch;
	} runs[] = {
		{ "lru", "none" },   { "lfu", "none" },       { "farthest", "none" },
		{ "lru", "lookahead" }, { "lfu-decay", "history" }, { "farthest", "oracle" },
	};
	fprintf(stderr, "bench_sim: model %s, %" PRIu64 " expert accesses, ceiling (bare loop) %.1f M accesses/s\n",
		model, accesses, ceil_rate / 1e6);
	printf("config,accesses,hit_rate_vram,wall_s,accesses_per_s,loop_accesses_per_s,ceiling_accesses_per_s,"
	       "ratio_to_ceiling,cpu_s,cpu_accesses_per_s\n");
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		char which[64];
		snprintf(which, sizeof(which), "%s/%s", runs[i].evict, runs[i].prefetch);
		if (only && !strstr(which, only))
			continue;
		struct strata_replay_config c;
		strata_replay_config_defaults(&c);
		c.model_dir = model;
		c.trace_path = trace;
		c.engine.mode = STRATA_ENGINE_VIRTUAL;
		c.engine.budget[0] = vram;
		c.engine.budget[1] = ram;
		c.engine.place = "cache";
		c.engine.evict = runs[i].evict;
		c.engine.prefetch = runs[i].prefetch;
		struct strata_cost_file cf;
		strata_cost_file_defaults(&cf);
		c.engine.cost = cf.cost;
		c.compute = STRATA_COMPUTE_NONE;
		struct strata_replay_result r;
		double best = 0, best_loop = 0, best_cpu = 0;
		for (int rep = 0; rep < 2; rep++) {
			double cpu0 = thread_cpu_s();
			int rrc = strata_replay_run(&c, &r, &err);
			double cpu = thread_cpu_s() - cpu0;
			if (rrc) {
				fprintf(stderr, "bench_sim: %s: %s\n", runs[i].evict, err.msg);
				goto out;
			}
			if (r.accesses_per_s > best)
				best = r.accesses_per_s;
			if (r.loop_accesses_per_s > best_loop)
				best_loop = r.loop_accesses_per_s;
			if (!best_cpu || cpu < best_cpu)
				best_cpu = cpu;
		}
		printf("\"%s\",%" PRIu64 ",%.4f,%.3f,%.0f,%.0f,%.0f,%.4f,%.3f,%.0f\n", r.name, r.stats.accesses,
		       r.hit_rate[0], r.wall_s, best, best_loop, ceil_rate, best_loop / ceil_rate, best_cpu,
		       (double)r.stats.accesses / best_cpu);
		fflush(stdout);
	}
	rc = 0;
out:
	unlink(trace);
	rmdir(dir);
	return rc;
}
