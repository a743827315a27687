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
 * the load.  `busy` is the run's own account (strata_quantize_report.time):
 * worker CPU time / (N x wall), and `tail` the share of N x wall the threads
 * sat idle at the end.
 *
 * A second table separates the machine from the pipeline: N threads each
 * encode the same in-memory matrices (the first two experts) at once;
 * N x work / wall against N x the one-thread rate is how well the CPU itself
 * scales (shared caches, memory, clocks), and the pipeline's rate against
 * that N-thread encoder is the pipeline's own share.
 */

#include <pthread.h>
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

/* the N-thread encoder: every thread quantizes the same matrices */
struct enc_job {
	float **w;          /* [n] matrices in memory */
	uint32_t n, *rows, *cols;
	int *fmt;
	size_t dst_bytes;
	int failed;
};

static void *enc_thread(void *arg)
{
	struct enc_job *j = arg;
	void *dst = malloc(j->dst_bytes);
	for (uint32_t i = 0; dst && i < j->n; i++)
		if (strata_quantize_matrix(j->fmt[i], j->w[i], j->rows[i], j->cols[i], NULL, dst, j->dst_bytes, NULL))
			j->failed = 1;
	if (!dst)
		j->failed = 1;
	free(dst);
	return NULL;
}

/* seconds for n threads to each encode the job's matrices */
static double enc_threads(struct enc_job *j, unsigned n)
{
	pthread_t *th = calloc(n, sizeof(*th));
	uint64_t t0 = strata_now_ns();
	unsigned started = 0;
	for (; th && started < n; started++)
		if (pthread_create(&th[started], NULL, enc_thread, j))
			break;
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	double s = (double)(strata_now_ns() - t0) / 1e9;
	free(th);
	if (started < n || j->failed) {
		fprintf(stderr, "bench_quantize_pipeline: the %u-thread encoder failed\n", n);
		exit(1);
	}
	return s;
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
	/* the same matrices for every thread of the N-thread encoder: the first
	 * expert of each tier, in its tier's format */
	struct enc_job ej = { .dst_bytes = lay.bytes };
	uint64_t pick[STRATA_TIER_COUNT];
	uint32_t np = 0;
	for (int t = 0; t < STRATA_TIER_COUNT; t++)
		for (uint64_t e = 0; e < total; e++)
			if (tiers[e] == t) {
				pick[np++] = e;
				break;
			}
	uint32_t nm = np * STRATA_MAT_COUNT;
	ej.w = calloc(nm, sizeof(*ej.w));
	ej.rows = calloc(nm, sizeof(*ej.rows));
	ej.cols = calloc(nm, sizeof(*ej.cols));
	ej.fmt = calloc(nm, sizeof(*ej.fmt));
	uint64_t ej_params = 0;
	for (uint32_t i = 0; ej.w && ej.rows && ej.cols && ej.fmt && i < nm; i++, ej.n++) {
		uint64_t e = pick[i / STRATA_MAT_COUNT];
		const struct strata_safetensors_tensor *t = m->experts[e * STRATA_MAT_COUNT + i % STRATA_MAT_COUNT];
		ej.rows[i] = (uint32_t)t->shape[0];
		ej.cols[i] = (uint32_t)t->shape[1];
		ej.fmt[i] = STRATA_FMT_HOT + tiers[e];
		if (!(ej.w[i] = malloc(t->numel * sizeof(float))) || strata_quantize_read_rows(m, t, 0, ej.rows[i], ej.w[i], &err))
			die(&err);
		ej_params += t->numel;
	}
	printf("threads  encoder_Mparam/s(1 thread)  pipeline_Mparam/s  pipeline/(threads x encoder)"
	       "  pipeline_Mparam/cpu_s  per-cpu ratio   busy   tail\n");
	char list[64];
	snprintf(list, sizeof(list), "%s", threads_list);
	double pipe_rate[64];
	unsigned nr = 0;
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
		printf("%7u  %27.3f  %17.3f  %28.3f  %21.3f  %13.3f  %5.3f  %5.3f\n", n, enc_rate / 1e6,
		       (double)params / s / 1e6, (double)params / s / (n * enc_rate), (double)params / c / 1e6,
		       (double)params / c / enc_cpu_rate, rep.time.busy_share,
		       rep.seconds > 0 ? rep.time.tail / (n * rep.seconds) : 0.0);
		pipe_rate[nr++ % 64] = (double)params / s;
	}
	printf("\nthe encoder on N threads at once, each the same %u matrices in memory (one expert per tier, %.2fM params):\n", ej.n,
	       (double)ej_params / 1e6);
	printf("threads  encoder_Mparam/s  of_N_x_1_thread  pipeline/N-thread_encoder\n");
	double one = 0;
	snprintf(list, sizeof(list), "%s", threads_list);
	nr = 0;
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		unsigned n = (unsigned)atoi(tok);
		if (!one)
			one = (double)ej_params / enc_threads(&ej, 1);
		double r = n == 1 ? one : (double)n * ej_params / enc_threads(&ej, n);
		printf("%7u  %16.3f  %15.3f  %25.3f\n", n, r / 1e6, r / (n * one), pipe_rate[nr++ % 64] / r);
	}
	for (uint32_t i = 0; i < ej.n; i++)
		free(ej.w[i]);
	free(ej.w);
	free(ej.rows);
	free(ej.cols);
	free(ej.fmt);
	strata_quantize_model_close(m);
	free(tiers);
	free(w);
	free(dst);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) ? 1 : 0;
}
