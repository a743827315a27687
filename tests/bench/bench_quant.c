/*
 * Tier-format quality and encoder speed.  For every format x distribution
 * (Gaussian, Student-t(5), Gaussian with 0.1% outliers at 20x) quantizes a
 * rows x cols matrix and prints cosine and relative RMSE against the original,
 * the Shannon-limit cosine of an i.i.d. Gaussian source at the format's rate
 * (the ceiling: sqrt(1 - 2^(-2 bpw))) and the ratio to it, encode CPU time
 * and input MB/s (f32), and the reference decoder's output MB/s (f32).
 *
 *   bench_quant [--rows N] [--cols N] [--fmt hot,warm,cold,q4,q3] [--dist gauss,t5,outlier]
 *               [--seed N] [--csv]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant.h"
#include "../testrand.h"

static double student_t5(void)
{
	double chi = 0;
	for (int i = 0; i < 5; i++) {
		double z = test_gauss();
		chi += z * z;
	}
	return test_gauss() / sqrt(chi / 5);
}

static const char *const dists[] = { "gauss", "t5", "outlier" };

static void fill(int dist, float *w, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		double v = dist == 1 ? student_t5() : test_gauss();
		if (dist == 2 && test_urand() < 0.001)
			v *= 20;
		w[i] = (float)v;
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_quant [--rows N] [--cols N] [--fmt LIST] [--dist LIST] [--seed N] [--csv]\n"
		   "  --rows N     matrix rows (default 512)\n"
		   "  --cols N     matrix columns (default 7168)\n"
		   "  --fmt LIST   formats, comma separated (default hot,warm,cold,q4,q3)\n"
		   "  --dist LIST  gauss,t5,outlier (default all)\n"
		   "  --seed N     generator seed (default 1)\n"
		   "  --csv        CSV instead of a table\n");
}

static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && !strncmp(p, name, n))
			return 1;
		p = e ? e + 1 : NULL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	uint32_t rows = 512, cols = 7168;
	const char *fmts = "hot,warm,cold,q4,q3", *dl = "gauss,t5,outlier";
	uint64_t seed = 1;
	int csv = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--csv")) {
			csv = 1;
		} else if (v && !strcmp(a, "--rows")) {
			rows = (uint32_t)strtoul(v, NULL, 10), i++;
		} else if (v && !strcmp(a, "--cols")) {
			cols = (uint32_t)strtoul(v, NULL, 10), i++;
		} else if (v && !strcmp(a, "--fmt")) {
			fmts = v, i++;
		} else if (v && !strcmp(a, "--dist")) {
			dl = v, i++;
		} else if (v && !strcmp(a, "--seed")) {
			seed = strtoull(v, NULL, 10), i++;
		} else {
			fprintf(stderr, "bench_quant: unknown or incomplete option '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (!rows || !cols) {
		fprintf(stderr, "bench_quant: --rows and --cols must be positive\n");
		return 2;
	}
	size_t n = (size_t)rows * cols;
	float *w = malloc(n * sizeof(float)), *dq = malloc(n * sizeof(float));
	if (!w || !dq) {
		fprintf(stderr, "bench_quant: out of memory\n");
		return 1;
	}
	memset(dq, 0, n * sizeof(float)); /* page faults out of the decode timing */
	if (csv)
		printf("fmt,bpw,dist,rows,cols,cosine,rel_rmse,shannon_cosine,ratio,encode_s,mb_per_s,decode_mb_per_s\n");
	else
		printf("%-5s %7s %-8s %9s %9s %9s %7s %9s %8s %9s\n", "fmt", "bpw", "dist", "cosine",
		       "rel_rmse", "shannon", "ratio", "encode_s", "MB/s", "dec_MB/s");
	int rc = 0;
	for (int f = STRATA_FMT_HOT; f < STRATA_FMT_COUNT; f++) {
		const struct strata_fmt_traits *t = strata_fmt_traits(f);
		if (!in_list(fmts, t->name))
			continue;
		struct strata_matrix_layout L;
		strata_matrix_layout(f, rows, cols, &L);
		void *dst = malloc(L.bytes);
		if (!dst) {
			rc = 1;
			break;
		}
		for (int d = 0; d < 3; d++) {
			if (!in_list(dl, dists[d]))
				continue;
			test_rng = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull + (uint64_t)d;
			fill(d, w, n);
			struct strata_quant_stats st;
			double t0 = now();
			int r = strata_quantize_matrix(f, w, rows, cols, NULL, dst, L.bytes, &st);
			double secs = now() - t0;
			if (r) {
				fprintf(stderr, "bench_quant: quantize %s failed (%d)\n", t->name, r);
				rc = 1;
				continue;
			}
			t0 = now();
			strata_dequantize_matrix(f, dst, rows, cols, dq);
			double dsecs = now() - t0, dmbs = n * 4.0 / 1e6 / dsecs;
			double sh = sqrt(1 - pow(2, -2 * t->bpw));
			double mbs = n * 4.0 / 1e6 / secs;
			if (csv)
				printf("%s,%.4f,%s,%u,%u,%.5f,%.5f,%.5f,%.4f,%.3f,%.2f,%.1f\n", t->name, t->bpw,
				       dists[d], rows, cols, st.cosine, st.rel_rmse, sh, st.cosine / sh, secs, mbs,
				       dmbs);
			else
				printf("%-5s %7.4f %-8s %9.5f %9.5f %9.5f %7.4f %9.3f %8.2f %9.1f\n", t->name,
				       t->bpw, dists[d], st.cosine, st.rel_rmse, sh, st.cosine / sh, secs, mbs, dmbs);
			fflush(stdout);
		}
		free(dst);
	}
	free(w);
	free(dq);
	return rc;
}
