/*
 * strata quantize pipeline against its ceiling: the bare encoder.
 *
 *   bench_quantize_pipeline [LAYERS=2] [EXPERTS=4] [HIDDEN=1024] [INTER=256] [THREADS=1,2]
 *
 * Writes a BF16 Mixtral-named test model in $TMPDIR, then
 *   ceiling:  strata_quantize_matrix over every routed matrix, already in
 *             memory as float, one thread (the encoder alone);
 *   pipeline: strata_quantize_run (pread + widen, quantize, shard writes,
 *             non-routed tensors, fsync) with N threads,
 * and prints parameters/s of each and pipeline / (N x ceiling): how much of
 * the encoder's rate the whole pipeline keeps, per thread.  On a shared
 * machine the wall-clock ratio falls when other load takes the cores, so
 * parameters per CPU-second of the pipeline (all its threads, getrusage) are
 * printed too: against the encoder's own CPU time per parameter
 * (CLOCK_THREAD_CPUTIME_ID), that ratio is the pipeline's overhead whatever
 * the load.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"
#include "strata/quantize.h"
#include "strata/test_model.h"
#include "strata/tier_assign.h"
#include "strata/util.h"

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       (double)ru.ru_stime.tv_usec / 1e6;
}

static void die(const struct strata_error *e)
{
	fprintf(stderr, "bench_quantize_pipeline: %s\n", e->msg);
	exit(1);
}

int main(int argc, char **argv)
{
	unsigned layers = argc > 1 ? (unsigned)atoi(argv[1]) : 2, experts = argc > 2 ? (unsigned)atoi(argv[2]) : 4;
	unsigned hidden = argc > 3 ? (unsigned)atoi(argv[3]) : 1024, inter = argc > 4 ? (unsigned)atoi(argv[4]) : 256;
	const char *threads_list = argc > 5 ? argv[5] : "1,2";
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char dir[512], in[600], out[600], spec_text[256];
	snprintf(dir, sizeof(dir), "%s/bench_qp_%d", tmp, (int)getpid());
	snprintf(in, sizeof(in), "%s/in", dir);
	snprintf(out, sizeof(out), "%s/out", dir);
	struct strata_error err = { 0 };
	snprintf(spec_text, sizeof(spec_text), "custom:layers=%u,experts=%u,top_k=2,hidden=%u,inter=%u", layers, experts,
		 hidden, inter);
	struct strata_model_spec spec;
	if (strata_model_spec_parse(spec_text, &spec, &err))
		die(&err);
	if (mkdir(dir, 0755) || strata_test_model_write(in, "mixtral", &spec, STRATA_SAFETENSORS_BF16, 1, 1, &err))
		die(&err);
	struct strata_quantize_model *m;
	if (strata_quantize_model_open(in, NULL, &m, &err))
		die(&err);
	uint64_t total = strata_model_total_experts(&m->spec);
	uint8_t *tiers = malloc(total);
	struct strata_tier_split split = STRATA_TIER_SPLIT_DEFAULT;
	if (strata_tier_assign_split(&m->spec, NULL, &split, tiers, &err))
		die(&err);
	uint64_t params = total * strata_model_expert_params(&m->spec);

	/* ceiling: the encoder alone, inputs in memory */
	size_t mat = (size_t)hidden * inter;
	float *w = malloc(mat * sizeof(float));
	struct strata_expert_layout lay;
	strata_expert_layout(STRATA_FMT_HOT, hidden, inter, &lay);
	void *dst = malloc(lay.bytes);
	double enc_s = 0, enc_cpu = 0;
	for (uint64_t eid = 0; eid < total; eid++)
		for (int k = 0; k < STRATA_MAT_COUNT; k++) {
			const struct strata_safetensors_tensor *t = m->experts[eid * STRATA_MAT_COUNT + k];
			uint32_t rows = (uint32_t)t->shape[0], cols = (uint32_t)t->shape[1];
			if (strata_quantize_read_rows(m, t, 0, rows, w, &err))
				die(&err);
			struct strata_quant_stats qs;
			uint64_t t0 = strata_now_ns();
			struct timespec c0, c1;
			clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
			if (strata_quantize_matrix(STRATA_FMT_HOT + tiers[eid], w, rows, cols, NULL, dst, lay.bytes, &qs)) {
				fprintf(stderr, "quantize failed\n");
				return 1;
			}
			enc_s += (double)(strata_now_ns() - t0) / 1e9;
			clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
			enc_cpu += (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
		}
	double enc_rate = (double)params / enc_s, enc_cpu_rate = (double)params / enc_cpu;
	printf("model %s: %llu experts, %.1fM routed params\n", spec_text, (unsigned long long)total, (double)params / 1e6);
	printf("encoder alone: %.3f Mparam/s wall, %.3f Mparam per CPU-second\n", enc_rate / 1e6, enc_cpu_rate / 1e6);
	printf("threads  encoder_Mparam/s(1 thread)  pipeline_Mparam/s  pipeline/(threads x encoder)"
	       "  pipeline_Mparam/cpu_s  per-cpu ratio\n");
	char list[64];
	snprintf(list, sizeof(list), "%s", threads_list);
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		unsigned n = (unsigned)atoi(tok);
		struct strata_quantize_config qc = { .out = out, .tiers = tiers, .threads = n };
		struct strata_quantize_report rep;
		char cmd[700];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", out);
		if (system(cmd)) {
		}
		uint64_t t0 = strata_now_ns();
		double c0 = cpu_s();
		if (strata_quantize_run(m, &qc, &rep, &err))
			die(&err);
		double s = (double)(strata_now_ns() - t0) / 1e9, c = cpu_s() - c0;
		printf("%7u  %27.3f  %17.3f  %28.3f  %21.3f  %13.3f\n", n, enc_rate / 1e6, (double)params / s / 1e6,
		       (double)params / s / (n * enc_rate), (double)params / c / 1e6, (double)params / c / enc_cpu_rate);
	}
	strata_quantize_model_close(m);
	free(tiers);
	free(w);
	free(dst);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) ? 1 : 0;
}
