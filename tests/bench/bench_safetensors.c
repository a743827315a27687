/*
 * Safetensors read throughput: strata_safetensors_read_f32 (pread + BF16/F16 -> float
 * in place) against the ceiling of plain pread of the same bytes into the
 * same buffer, in the same run, over a file it writes first.
 *
 *   bench_safetensors [MB=256] [DIR=$TMPDIR or /tmp] [CHUNK_MB=8]
 *
 * Both passes read a file the page cache already holds (it was just
 * written, then read once to warm), so the ratio is the cost of conversion
 * and bookkeeping over a memory copy, the worst case for the reader; from
 * NVMe the disk is the ceiling and conversion hides behind it.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/safetensors.h"
#include "strata/util.h"

static double pass_raw(const char *path, uint64_t off, uint64_t bytes, void *buf, size_t chunk)
{
	int fd = open(path, O_RDONLY);
	uint64_t t0 = strata_now_ns();
	for (uint64_t done = 0; done < bytes;) {
		size_t n = bytes - done < chunk ? (size_t)(bytes - done) : chunk;
		if (pread(fd, buf, n, (off_t)(off + done)) != (ssize_t)n) {
			perror("pread");
			exit(1);
		}
		done += n;
	}
	double s = (double)(strata_now_ns() - t0) / 1e9;
	close(fd);
	return s;
}

static double pass_st(struct strata_safetensors *st, const struct strata_safetensors_tensor *t, float *buf, size_t chunk_elems)
{
	struct strata_error err = { 0 };
	uint64_t t0 = strata_now_ns();
	for (uint64_t done = 0; done < t->numel;) {
		uint64_t n = t->numel - done < chunk_elems ? t->numel - done : chunk_elems;
		if (strata_safetensors_read_f32(st, t, done, n, buf, &err)) {
			fprintf(stderr, "%s\n", err.msg);
			exit(1);
		}
		done += n;
	}
	return (double)(strata_now_ns() - t0) / 1e9;
}

int main(int argc, char **argv)
{
	uint64_t mb = argc > 1 ? strtoull(argv[1], NULL, 10) : 256;
	const char *dir = argc > 2 ? argv[2] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	size_t chunk_mb = argc > 3 ? strtoul(argv[3], NULL, 10) : 8;
	char path[1024];
	snprintf(path, sizeof(path), "%s/bench_safetensors_%d.safetensors", dir, (int)getpid());
	struct strata_error err = { 0 };
	printf("dtype  MB    raw_pread_GB/s  st_read_f32_GB/s(of input)  ratio\n");
	static const int dts[] = { STRATA_SAFETENSORS_BF16, STRATA_SAFETENSORS_F16, STRATA_SAFETENSORS_F32 };
	for (int k = 0; k < 3; k++) {
		int dt = dts[k];
		uint32_t es = strata_safetensors_dtype_size(dt);
		uint64_t elems = mb * 1000000 / es;
		uint64_t cols = 4096, rows = elems / cols;
		struct strata_safetensors_writer *w;
		uint64_t shape[2] = { rows, cols };
		if (strata_safetensors_writer_open(path, &w, &err) || strata_safetensors_writer_declare(w, "w", dt, 2, shape, &err)) {
			fprintf(stderr, "%s\n", err.msg);
			return 1;
		}
		float *row = malloc(cols * sizeof(float));
		for (uint64_t c = 0; c < cols; c++)
			row[c] = (float)((int)(c % 201) - 100) / 64.0f;
		for (uint64_t r = 0; r < rows; r++)
			if (strata_safetensors_writer_write_f32(w, row, cols, &err)) {
				fprintf(stderr, "%s\n", err.msg);
				return 1;
			}
		free(row);
		if (strata_safetensors_writer_finish(w, &err)) {
			fprintf(stderr, "%s\n", err.msg);
			return 1;
		}
		struct strata_safetensors *st;
		if (strata_safetensors_open(path, &st, &err)) {
			fprintf(stderr, "%s\n", err.msg);
			return 1;
		}
		const struct strata_safetensors_tensor *t = strata_safetensors_find(st, "w");
		size_t chunk_elems = chunk_mb * 1000000 / es;
		float *buf = malloc(chunk_elems * sizeof(float));
		pass_raw(path, t->offset, t->bytes, buf, chunk_elems * es); /* warm the cache */
		double best_raw = 1e9, best_st = 1e9;
		for (int rep = 0; rep < 3; rep++) {
			double a = pass_raw(path, t->offset, t->bytes, buf, chunk_elems * es);
			double b = pass_st(st, t, buf, chunk_elems);
			best_raw = a < best_raw ? a : best_raw;
			best_st = b < best_st ? b : best_st;
		}
		printf("%-5s %4llu  %14.2f  %26.2f  %5.2f\n", strata_safetensors_dtype_name(dt), (unsigned long long)mb,
		       (double)t->bytes / best_raw / 1e9, (double)t->bytes / best_st / 1e9, best_raw / best_st);
		free(buf);
		strata_safetensors_close(st);
		unlink(path);
	}
	return 0;
}
