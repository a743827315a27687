/*
 * bench_vq_bound: the best cosine a vector codebook small enough for conflict-free
 * shared-memory lookups reaches on N(0,1) weights (issue 6, "Is 0.85 of read
 * reachable by any tier format?" in README.md).
 *
 * A lookup decoder reaches the read ceiling only if its shared-memory lookups
 * are free of bank conflicts.  With random codes that needs each lane (or each
 * lane of a wavefront) to read its own copy of the table from its own banks,
 * so a table of N entries costs 128 * N bytes of shared memory whatever the
 * entry size: N <= 227 KB / 128 B = 1816 on the H200.  This program trains
 * fixed-rate codebooks of N entries in d dimensions by Lloyd's algorithm
 * (k-means, random-sample start, several starts, best kept) on Gaussian
 * vectors and reports the cosine on a held-out set.  By default the scale is
 * the true sigma (free and exact), so a real format can only do worse;
 * --block B instead stores one bf16 scale per B weights, the best of a grid
 * around the block's RMS (what a format of issue 3 would store).
 *
 *   build/release/bench/bench_vq_bound [--train N] [--iters N] [--starts N] [--block B] d:N [d:N ...]
 * (experiments/kernels/vq-bound.csv: --iters 50 --starts 2, the d:N of its rows)
 * CSV on stdout: d,entries,code_bits_per_weight,bpw_with_scale,scale,cosine,rel_rmse
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static double strata_vq_uniform(void)
{
	g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
	return ((g_rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static void strata_vq_gauss(float *x, size_t n)
{
	for (size_t i = 0; i < n; i += 2) {
		double r = sqrt(-2 * log(strata_vq_uniform())), t = 2 * M_PI * strata_vq_uniform();
		x[i] = (float)(r * cos(t));
		if (i + 1 < n)
			x[i + 1] = (float)(r * sin(t));
	}
}

/* Index of the nearest codeword to v (d dims) in cb (n entries). */
static int strata_vq_nearest(const float *v, const float *cb, int n, int d, float *dist)
{
	int best = 0;
	float bd = INFINITY;
	for (int k = 0; k < n; k++) {
		const float *c = cb + (size_t)k * d;
		float s = 0;
		for (int j = 0; j < d; j++)
			s += (v[j] - c[j]) * (v[j] - c[j]);
		if (s < bd)
			bd = s, best = k;
	}
	*dist = bd;
	return best;
}

/* Lloyd iterations on the training set; returns the training distortion. */
static double strata_vq_lloyd(float *cb, int n, int d, const float *x, size_t m, int iters)
{
	double *sum = malloc(sizeof(double) * n * d);
	size_t *cnt = malloc(sizeof(size_t) * n);
	double dist = 0;
	for (int it = 0; it < iters; it++) {
		memset(sum, 0, sizeof(double) * n * d);
		memset(cnt, 0, sizeof(size_t) * n);
		dist = 0;
		for (size_t i = 0; i < m; i++) {
			float e;
			int k = strata_vq_nearest(x + i * d, cb, n, d, &e);
			dist += e, cnt[k]++;
			for (int j = 0; j < d; j++)
				sum[(size_t)k * d + j] += x[i * d + j];
		}
		for (int k = 0; k < n; k++) {
			if (!cnt[k]) { /* an empty cell restarts on a random training vector */
				memcpy(cb + (size_t)k * d, x + (size_t)(strata_vq_uniform() * m) * d, sizeof(float) * d);
				continue;
			}
			for (int j = 0; j < d; j++)
				cb[(size_t)k * d + j] = (float)(sum[(size_t)k * d + j] / cnt[k]);
		}
	}
	free(sum), free(cnt);
	return dist / ((double)m * d);
}

static float strata_vq_bf16(float v)
{
	union { float f; uint32_t u; } x = { v };
	x.u = (x.u + 0x7fffu + ((x.u >> 16) & 1)) & 0xffff0000u;
	return x.f;
}

/* Quantize the m vectors of xt (m * d = a multiple of blk weights) with one
 * bf16 scale per blk weights, the best of 25 candidates between 0.5 and 1.7
 * times the block's RMS; sums x.q, x.x, q.q and the squared error. */
static void strata_vq_blocks(const float *xt, size_t m, int d, const float *cb, int n, int blk, double *xq,
			     double *xx, double *qq, double *ee)
{
	float *v = malloc(sizeof(float) * d);
	for (size_t b0 = 0; b0 + blk <= m * d; b0 += blk) {
		double ms = 0;
		for (int j = 0; j < blk; j++)
			ms += (double)xt[b0 + j] * xt[b0 + j];
		float rms = (float)sqrt(ms / blk), best_s = 0;
		double best = INFINITY;
		for (int c = 0; c < 25; c++) {
			float sc = strata_vq_bf16(rms * (0.5f + 0.05f * c));
			double e = 0;
			for (int i = 0; i < blk; i += d) {
				float t;
				for (int j = 0; j < d; j++)
					v[j] = xt[b0 + i + j] / sc;
				const float *q = cb + (size_t)strata_vq_nearest(v, cb, n, d, &t) * d;
				for (int j = 0; j < d; j++)
					e += (xt[b0 + i + j] - sc * q[j]) * (xt[b0 + i + j] - sc * q[j]);
			}
			if (e < best)
				best = e, best_s = sc;
		}
		for (int i = 0; i < blk; i += d) {
			float t;
			for (int j = 0; j < d; j++)
				v[j] = xt[b0 + i + j] / best_s;
			const float *q = cb + (size_t)strata_vq_nearest(v, cb, n, d, &t) * d;
			for (int j = 0; j < d; j++) {
				double a = xt[b0 + i + j], r = best_s * q[j];
				*xq += a * r, *xx += a * a, *qq += r * r, *ee += (a - r) * (a - r);
			}
		}
	}
	free(v);
}

static void strata_vq_usage(FILE *f)
{
	fprintf(f, "usage: bench_vq_bound [--train N] [--iters N] [--starts N] [--block B] d:N [d:N ...]\n"
		   "Fixed-rate Gaussian codebooks of N entries in d dimensions (Lloyd); CSV of the cosine.\n");
}

int main(int argc, char **argv)
{
	size_t per = 160; /* training vectors per codeword */
	int iters = 40, starts = 2, blk = 0, first = 1;
	for (; first < argc && argv[first][0] == '-'; first += 2) {
		if (!strcmp(argv[first], "--help") || !strcmp(argv[first], "-h"))
			return strata_vq_usage(stdout), 0;
		if (first + 1 >= argc || atoi(argv[first + 1]) <= 0) {
			fprintf(stderr, "bench_vq_bound: %s wants a positive number\n", argv[first]);
			return 2;
		}
		if (!strcmp(argv[first], "--train"))
			per = (size_t)atoi(argv[first + 1]);
		else if (!strcmp(argv[first], "--iters"))
			iters = atoi(argv[first + 1]);
		else if (!strcmp(argv[first], "--starts"))
			starts = atoi(argv[first + 1]);
		else if (!strcmp(argv[first], "--block"))
			blk = atoi(argv[first + 1]);
		else {
			fprintf(stderr, "bench_vq_bound: unknown option %s\n", argv[first]);
			strata_vq_usage(stderr);
			return 2;
		}
	}
	if (first >= argc)
		return strata_vq_usage(stderr), 2;
	for (int a = first; a < argc; a++) { /* every argument checked before any output */
		int d, n;
		if (sscanf(argv[a], "%d:%d", &d, &n) != 2 || d < 1 || d > 64 || n < 2 || n > 1 << 16) {
			fprintf(stderr, "bench_vq_bound: %s: want d:N with 1 <= d <= 64, 2 <= N <= 65536\n", argv[a]);
			return 2;
		}
		if (blk && blk % d) {
			fprintf(stderr, "bench_vq_bound: %s: --block %d is not a multiple of %d\n", argv[a], blk, d);
			return 2;
		}
	}
	printf("d,entries,code_bits_per_weight,bpw_with_scale,scale,cosine,rel_rmse\n");
	for (int a = first; a < argc; a++) {
		int d, n;
		sscanf(argv[a], "%d:%d", &d, &n);
		size_t m = per * n, mt = blk ? (200000 / blk + 1) * blk / d : 200000 / d + 1;
		float *x = malloc(sizeof(float) * m * d), *xt = malloc(sizeof(float) * mt * d);
		float *cb = malloc(sizeof(float) * n * d), *best = malloc(sizeof(float) * n * d);
		if (!x || !xt || !cb || !best) {
			fprintf(stderr, "bench_vq_bound: out of memory for %s\n", argv[a]);
			return 1;
		}
		strata_vq_gauss(x, m * d);
		strata_vq_gauss(xt, mt * d);
		double bd = INFINITY;
		for (int s = 0; s < starts; s++) {
			for (int k = 0; k < n; k++)
				memcpy(cb + (size_t)k * d, x + (size_t)(strata_vq_uniform() * m) * d, sizeof(float) * d);
			double dist = strata_vq_lloyd(cb, n, d, x, m, iters);
			if (dist < bd)
				bd = dist, memcpy(best, cb, sizeof(float) * n * d);
		}
		/* held-out cosine and relative RMSE */
		double xq = 0, xx = 0, qq = 0, ee = 0;
		if (blk)
			strata_vq_blocks(xt, mt, d, best, n, blk, &xq, &xx, &qq, &ee);
		for (size_t i = 0; !blk && i < mt; i++) {
			float e;
			const float *c = best + (size_t)strata_vq_nearest(xt + i * d, best, n, d, &e) * d;
			for (int j = 0; j < d; j++)
				xq += xt[i * d + j] * c[j], xx += xt[i * d + j] * xt[i * d + j], qq += c[j] * c[j];
			ee += e;
		}
		double bits = log2(n) / d;
		if (blk)
			printf("%d,%d,%.4f,%.4f,bf16/%d,%.4f,%.4f\n", d, n, bits, bits + 16.0 / blk, blk, xq / sqrt(xx * qq),
			       sqrt(ee / xx));
		else
			printf("%d,%d,%.4f,%.4f,exact,%.4f,%.4f\n", d, n, bits, bits + 16.0 / 256, xq / sqrt(xx * qq),
			       sqrt(ee / xx));
		fflush(stdout);
		free(x), free(xt), free(cb), free(best);
	}
	return 0;
}
