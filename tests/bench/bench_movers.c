/*
 * Mover throughput against ceilings measured in the same run.
 *
 *   NVMe -> RAM: the io_uring mover (O_DIRECT, queue depth q) reading random
 *   expert-sized extents of a test file, vs `fio --ioengine=io_uring
 *   --direct=1 --rw=randread --bs=<extent>` on the same file with the same
 *   depth; the mmap baseline (page cache dropped first when root) and pread.
 *
 *   RAM -> VRAM (GPU only): the cuda mover copying expert-sized extents from a
 *   pinned arena into a device arena, vs the pinned cudaMemcpy peak (one 256
 *   MiB copy, best of 5) measured first; and the staged NVMe -> VRAM mover vs
 *   the io_uring NVMe -> RAM figure.
 *
 * Extent sizes: hot/warm/cold experts of the kimi-k3.1 and qwen3-30b-a3b
 * presets (strata_expert_layout).  Output: one CSV row per measurement on
 * stdout, a summary on stderr.
 *
 *   bench_movers [--file PATH] [--size 4G] [--seconds 3] [--no-nvme] [--no-gpu] [--qd N] [--reps N] [--staged-only]
 * (--file: the test file, kept, and reused when already large enough; without
 * it a new file under $TMPDIR (or /tmp), removed at the end, also on Ctrl-C.
 * O_DIRECT needs a disk filesystem there, not tmpfs)
 * (--reps: fio and the io_uring mover alternate N times each; means are compared)
 * (--staged-only: on the GPU machine, which has no fio, skip the NVMe -> RAM table)
 *
 *   bench_movers --verify [--file PATH] [--size 1G] [--seconds 3] [--reps N]
 * The cost of checking every read against its XXH3 (what replay does on each
 * expert's first read by default): the io_uring mover with the check vs the
 * same mover without it, alternated --reps times; ratio = checked / unchecked.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "quant.h"
#include "strata/gpu.h"
#include "strata/model.h"
#include "strata/mover.h"
#include "strata/util.h"
#include "bench_common.h"

struct size_case {
	char name[48];
	uint64_t bytes;
};

static uint64_t rng = 12345;
static uint64_t next_rand(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return rng >> 17;
}

/* The test file when --file is not given: made by mkstemp, removed at exit
 * (atexit), and on a second Ctrl-C by the signal handler (strata_tmp_register). */
static char own_file[PATH_MAX];

static void remove_own_file(void)
{
	if (own_file[0])
		unlink(own_file);
}

static int make_own_file(void)
{
	if (bench_tmp_path(own_file, sizeof(own_file), "bench-movers", 0)) {
		own_file[0] = 0;
		return -1;
	}
	strata_tmp_register(own_file);
	atexit(remove_own_file);
	return 0;
}

static int make_file(const char *path, uint64_t size)
{
	struct stat st;
	if (!stat(path, &st) && (uint64_t)st.st_size >= size)
		return 0;
	fprintf(stderr, "writing %s (%.1f GiB)...\n", path, (double)size / (1 << 30));
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	size_t chunk = 8 << 20;
	uint8_t *buf = malloc(chunk);
	for (size_t i = 0; i < chunk; i++)
		buf[i] = (uint8_t)next_rand();
	for (uint64_t off = 0; off < size; off += chunk) {
		buf[0] = (uint8_t)off; /* not all chunks identical */
		if (strata_interrupted || write(fd, buf, chunk) != (ssize_t)chunk) {
			if (strata_interrupted)
				errno = EINTR;
			close(fd);
			free(buf);
			return -1;
		}
	}
	fsync(fd);
	close(fd);
	free(buf);
	return 0;
}

static void drop_caches(void)
{
	FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
	if (f) {
		sync();
		fputs("3\n", f);
		fclose(f);
	}
}

/* Random extent-aligned reads for `seconds`, qd in flight; GB/s. */
/* --verify: the XXH3 of every bs-sized slot of the file, so each read can be
 * checked as replay checks an extent; NULL: reads are not checked. */
static uint64_t *slot_sums;

static uint64_t *sum_slots(const char *path, uint64_t fsize, uint64_t bs)
{
	uint64_t n = fsize / bs;
	uint64_t *s = calloc(n ? n : 1, sizeof(*s));
	uint8_t *b = malloc(bs);
	int fd = open(path, O_RDONLY);
	for (uint64_t i = 0; s && b && fd >= 0 && i < n; i++)
		if (pread(fd, b, bs, (off_t)(i * bs)) == (ssize_t)bs)
			s[i] = XXH3_64bits(b, bs);
	if (fd >= 0)
		close(fd);
	free(b);
	return s;
}

static double run_file_mover(const struct strata_mover_ops *ops, const char *path, uint64_t fsize, uint64_t bs,
			     uint32_t qd, double seconds, struct strata_mover *stage_copy, void *dev_arena)
{
	struct strata_error err = { 0 };
	struct strata_mover *m = NULL, *st = NULL, *use;
	struct strata_mover_config mc = { .queue_depth = qd };
	if (strata_mover_open(ops == &strata_mover_staged ? &strata_mover_uring : ops, &mc, &m, &err)) {
		fprintf(stderr, "%s: %s\n", ops->name, err.msg);
		return -1;
	}
	use = m;
	if (ops == &strata_mover_staged) {
		struct strata_mover_config sc = { .queue_depth = qd, .stage_read = m, .stage_copy = stage_copy,
						  .bounce_bytes = 4 << 20, .bounce_register = true,
						  .n_bounce = (uint32_t)((qd * ((bs + (4 << 20) - 1) >> 22)) > 64 ? 64
								: qd * ((bs + (4 << 20) - 1) >> 22)) };
		if (strata_mover_open(&strata_mover_staged, &sc, &st, &err)) {
			fprintf(stderr, "staged: %s\n", err.msg);
			strata_mover_close(m);
			return -1;
		}
		use = st;
	}
	int fd = open(path, O_RDONLY | (ops == &strata_mover_mmap ? 0 : O_DIRECT));
	if (fd < 0) {
		fprintf(stderr, "%s: open %s: %s%s\n", ops->name, path, strerror(errno),
			errno == EINVAL ? " (O_DIRECT: put the file on a disk filesystem, not tmpfs)" : "");
		if (st)
			strata_mover_close(st);
		strata_mover_close(m);
		return -1;
	}
	uint64_t nslots = fsize / bs;
	struct strata_move *mv = calloc(qd, sizeof(*mv));
	uint8_t **buf = calloc(qd, sizeof(*buf));
	for (uint32_t i = 0; i < qd; i++)
		buf[i] = dev_arena ? (uint8_t *)dev_arena + (uint64_t)i * bs : strata_aligned_alloc(4096, bs);
	uint64_t t0 = strata_now_ns(), end = t0 + (uint64_t)(seconds * 1e9), bytes = 0;
	for (uint32_t i = 0; i < qd; i++) {
		uint64_t slot = next_rand() % nslots;
		mv[i] = (struct strata_move){ .fd = fd, .path = path, .offset = slot * bs, .dst = buf[i], .bytes = bs,
					      .check_bytes = slot_sums ? bs : 0,
					      .check_xxh3 = slot_sums ? slot_sums[slot] : 0 };
		strata_mover_queue(use, &mv[i], &err);
	}
	strata_mover_submit(use, &err);
	int failed = 0;
	while (!failed) {
		if (strata_mover_reap(use, 1, &err) < 0) {
			fprintf(stderr, "%s: %s\n", ops->name, err.msg);
			failed = 1;
			break;
		}
		uint64_t now = strata_now_ns();
		for (uint32_t i = 0; i < qd; i++) {
			if (!mv[i].reaped)
				continue;
			bytes += mv[i].done_bytes;
			if (now < end && !strata_interrupted) {
				uint64_t slot = next_rand() % nslots;
				mv[i] = (struct strata_move){ .fd = fd, .path = path, .offset = slot * bs,
							      .dst = buf[i], .bytes = bs,
							      .check_bytes = slot_sums ? bs : 0,
							      .check_xxh3 = slot_sums ? slot_sums[slot] : 0 };
				strata_mover_queue(use, &mv[i], &err);
			} else {
				mv[i].reaped = false; /* not again */
				mv[i].status = STRATA_MOVE_IDLE;
			}
		}
		strata_mover_submit(use, &err);
		if ((now >= end || strata_interrupted) && !use->outstanding)
			break;
	}
	double secs = (double)(strata_now_ns() - t0) / 1e9;
	if (st)
		strata_mover_close(st);
	strata_mover_close(m);
	for (uint32_t i = 0; i < qd && !dev_arena; i++)
		free(buf[i]);
	free(buf);
	free(mv);
	close(fd);
	return failed ? -1 : (double)bytes / secs / 1e9;
}

static double run_fio(const char *path, uint64_t fsize, uint64_t bs, uint32_t qd, double seconds)
{
	char cmd[1024], line[4096];
	snprintf(cmd, sizeof(cmd),
		 "fio --name=ceiling --filename=%s --ioengine=io_uring --direct=1 --rw=randread --bs=%llu "
		 "--blockalign=%llu --iodepth=%u --size=%llu --time_based --runtime=%.0f --output-format=json "
		 "2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"jobs\"][0][\"read\"][\"bw_bytes\"])' 2>/dev/null",
		 path, (unsigned long long)bs, (unsigned long long)bs, qd, (unsigned long long)fsize,
		 seconds < 1 ? 1 : seconds);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	double bw = -1;
	if (fgets(line, sizeof(line), p))
		bw = atof(line) / 1e9;
	pclose(p);
	return bw > 0 ? bw : -1;
}

static int cases(struct size_case *out)
{
	const char *presets[] = { "kimi-k3.1", "qwen3-30b-a3b" };
	const char *fmts[] = { "hot", "warm", "cold" };
	int n = 0;
	for (int p = 0; p < 2; p++) {
		struct strata_model_spec s;
		struct strata_error err;
		if (strata_model_spec_parse(presets[p], &s, &err))
			continue;
		for (int f = 0; f < 3; f++) {
			struct strata_expert_layout L;
			strata_expert_layout(STRATA_FMT_HOT + f, s.hidden, s.inter, &L);
			snprintf(out[n].name, sizeof(out[n].name), "%s/%s", presets[p], fmts[f]);
			out[n++].bytes = L.bytes;
		}
	}
	return n;
}

static uint32_t depth_for(uint64_t bs, uint32_t qd)
{
	if (qd)
		return qd;
	uint64_t d = (128ull << 20) / bs;
	return d < 4 ? 4 : d > 32 ? 32 : (uint32_t)d;
}

int main(int argc, char **argv)
{
	const char *file = NULL;
	uint64_t fsize = 4ull << 30;
	double seconds = 3;
	int nvme = 1, gpu = 1, nvme_ram = 1;
	uint32_t qd = 0;
	int reps = 1, verify = 0;
	for (int i = 1; i < argc; i++) {
		struct strata_error err;
		if (!strcmp(argv[i], "--file") && i + 1 < argc)
			file = argv[++i];
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			strata_parse_size(argv[++i], &fsize, &err);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]) > 0 ? atoi(argv[i]) : 1;
		else if (!strcmp(argv[i], "--qd") && i + 1 < argc)
			qd = (uint32_t)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--no-nvme"))
			nvme = 0;
		else if (!strcmp(argv[i], "--staged-only"))
			nvme_ram = 0;
		else if (!strcmp(argv[i], "--no-gpu"))
			gpu = 0;
		else if (!strcmp(argv[i], "--verify"))
			verify = 1;
		else {
			fprintf(stderr, "usage: %s [--file PATH] [--size 4G] [--seconds 3] [--qd N] [--reps N] [--no-nvme] [--no-gpu] [--staged-only]\n",
				argv[0]);
			return !strcmp(argv[i], "--help") ? 0 : 2;
		}
	}
	strata_install_sigint();
	if (!file && (nvme || verify)) {
		if (make_own_file())
			return 1;
		file = own_file;
	}
	struct size_case cs[8];
	int nc = cases(cs);
	printf("link,case,extent_bytes,qd,mover_gbps,ceiling,ceiling_gbps,ratio\n");
	if (verify) {
		if (make_file(file, fsize)) {
			fprintf(stderr, "cannot write %s: %s\n", file, strerror(errno));
			return 1;
		}
		for (int c = 0; c < nc && !strata_interrupted; c++) {
			uint32_t d = depth_for(cs[c].bytes, qd);
			uint64_t *sums = sum_slots(file, fsize, cs[c].bytes);
			double on = 0, off = 0;
			for (int r = 0; r < reps; r++) {
				slot_sums = NULL;
				off += run_file_mover(&strata_mover_uring, file, fsize, cs[c].bytes, d, seconds, NULL, NULL) / reps;
				slot_sums = sums;
				on += run_file_mover(&strata_mover_uring, file, fsize, cs[c].bytes, d, seconds, NULL, NULL) / reps;
			}
			slot_sums = NULL;
			free(sums);
			printf("nvme_ram_checked,%s,%llu,%u,%.3f,unchecked,%.3f,%.3f\n", cs[c].name,
			       (unsigned long long)cs[c].bytes, d, on, off, off > 0 ? on / off : 0);
			fprintf(stderr, "%-28s checked %.2f GB/s, unchecked %.2f GB/s: ratio %.3f\n", cs[c].name, on, off,
				off > 0 ? on / off : 0);
			fflush(stdout);
		}
		return strata_interrupted ? 128 + strata_interrupted : 0;
	}
	if (nvme) {
		if (make_file(file, fsize)) {
			fprintf(stderr, "cannot write %s: %s\n", file, strerror(errno));
			return 1;
		}
		for (int c = 0; c < nc && nvme_ram && !strata_interrupted; c++) {
			uint32_t d = depth_for(cs[c].bytes, qd);
			/* alternate fio and the mover, reps times each: a shared disk drifts */
			double fio = 0, ur = 0;
			for (int r = 0; r < reps; r++) {
				fio += run_fio(file, fsize, cs[c].bytes, d, seconds) / reps;
				ur += run_file_mover(&strata_mover_uring, file, fsize, cs[c].bytes, d, seconds, NULL, NULL) / reps;
			}
			double pr = run_file_mover(&strata_mover_pread, file, fsize, cs[c].bytes, 1, seconds, NULL, NULL);
			drop_caches();
			double mm = run_file_mover(&strata_mover_mmap, file, fsize, cs[c].bytes, 1, seconds, NULL, NULL);
			printf("nvme_ram,%s,%llu,%u,%.3f,fio_io_uring_direct,%.3f,%.3f\n", cs[c].name,
			       (unsigned long long)cs[c].bytes, d, ur, fio, fio > 0 ? ur / fio : 0);
			printf("nvme_ram_pread,%s,%llu,1,%.3f,fio_io_uring_direct,%.3f,%.3f\n", cs[c].name,
			       (unsigned long long)cs[c].bytes, pr, fio, fio > 0 ? pr / fio : 0);
			printf("nvme_ram_mmap,%s,%llu,1,%.3f,fio_io_uring_direct,%.3f,%.3f\n", cs[c].name,
			       (unsigned long long)cs[c].bytes, mm, fio, fio > 0 ? mm / fio : 0);
			fprintf(stderr, "%-22s %9llu B qd %2u  uring %.2f GB/s  fio %.2f  ratio %.2f  | pread %.2f  mmap %.2f\n",
				cs[c].name, (unsigned long long)cs[c].bytes, d, ur, fio, fio > 0 ? ur / fio : 0, pr, mm);
			fflush(stdout);
		}
	}
	if (gpu && strata_gpu_count() > 0) {
		struct strata_error err = { 0 };
		if (strata_gpu_init(0, &err)) {
			fprintf(stderr, "%s\n", err.msg);
			return 1;
		}
		/* arenas larger than L2, rotated */
		uint64_t arena = 2ull << 30;
		uint8_t *host = strata_aligned_alloc(4096, arena);
		void *dev;
		if (!host || strata_gpu_host_register(host, arena, &err) || strata_gpu_malloc(&dev, arena, &err)) {
			fprintf(stderr, "gpu setup: %s\n", err.msg);
			return 1;
		}
		for (uint64_t i = 0; i < arena; i += 4096)
			host[i] = (uint8_t)i;
		/* ceiling: pinned cudaMemcpy of 256 MiB, best of 5 */
		strata_gpu_stream *s;
		strata_gpu_event *a, *b;
		strata_gpu_stream_create(&s, &err);
		strata_gpu_event_create(&a, &err);
		strata_gpu_event_create(&b, &err);
		double peak = 0;
		for (int r = 0; r < 6; r++) {
			uint64_t n = 256ull << 20, off = (uint64_t)(r % 4) * n;
			strata_gpu_event_record(a, s, &err);
			strata_gpu_memcpy_h2d_async((uint8_t *)dev + off, host + off, n, s, &err);
			strata_gpu_event_record(b, s, &err);
			strata_gpu_event_sync(b, &err);
			float ms;
			strata_gpu_event_elapsed_ms(a, b, &ms, &err);
			double g = (double)n / (ms * 1e-3) / 1e9;
			if (r && g > peak)
				peak = g;
		}
		fprintf(stderr, "pinned cudaMemcpy peak (256 MiB): %.2f GB/s on %s\n", peak, strata_gpu_name());
		for (int c = 0; c < nc && !strata_interrupted; c++) {
			uint64_t bs = cs[c].bytes, nslots = arena / bs;
			/* ceiling at this size: back-to-back cudaMemcpyAsync, one stream, no mover */
			double same = 0;
			for (int r = 0; r < 3; r++) {
				uint32_t copies = (uint32_t)((512ull << 20) / bs) + 1;
				strata_gpu_event_record(a, s, &err);
				for (uint32_t i = 0; i < copies; i++) {
					uint64_t off = ((uint64_t)r * copies + i) % nslots * bs;
					strata_gpu_memcpy_h2d_async((uint8_t *)dev + off, host + off, bs, s, &err);
				}
				strata_gpu_event_record(b, s, &err);
				strata_gpu_event_sync(b, &err);
				float ms;
				strata_gpu_event_elapsed_ms(a, b, &ms, &err);
				double g = (double)bs * copies / (ms * 1e-3) / 1e9;
				if (g > same)
					same = g;
			}
			printf("ram_vram_raw,%s,%llu,1,%.3f,pinned_cudaMemcpy_256MiB,%.3f,%.3f\n", cs[c].name,
			       (unsigned long long)bs, same, peak, same / peak);
			fprintf(stderr, "%-22s %9llu B  raw cudaMemcpyAsync back-to-back %.2f GB/s (%.2f of peak)\n",
				cs[c].name, (unsigned long long)bs, same, same / peak);
			for (uint32_t v = 0; v < 6; v++) {
				/* copy modes x 1 or 2 streams; two batches of B moves in flight,
				 * each batch requeued (one submit) as it completes */
				enum { B = 8 };
				uint32_t copy = STRATA_COPY_EACH + v / 2, streams = 1 + v % 2;
				struct strata_mover *m;
				struct strata_mover_config mc = { .queue_depth = 2 * B, .n_streams = streams, .copy = copy };
				if (copy == STRATA_COPY_SM && !strata_gpu_copy_sm_available())
					continue;
				if (strata_mover_open(&strata_mover_cuda, &mc, &m, &err)) {
					fprintf(stderr, "cuda mover: %s\n", err.msg);
					return 1;
				}
				struct strata_move mv[2 * B];
				uint64_t k = 0, bytes = 0, t0 = strata_now_ns();
				uint64_t end = t0 + (uint64_t)(seconds * 1e9);
				for (int i = 0; i < 2 * B; i++, k++) {
					uint64_t off = (k % nslots) * bs;
					mv[i] = (struct strata_move){ .fd = -1, .src = host + off, .dst = (uint8_t *)dev + off,
								      .bytes = bs };
					strata_mover_queue(m, &mv[i], &err);
					if (i % B == B - 1)
						strata_mover_submit(m, &err);
				}
				while (m->outstanding) {
					if (strata_mover_reap(m, 1, &err) < 0) {
						fprintf(stderr, "cuda mover: %s\n", err.msg);
						return 1;
					}
					int more = strata_now_ns() < end && !strata_interrupted;
					for (int i = 0; i < 2 * B; i++) {
						if (!mv[i].reaped)
							continue;
						bytes += mv[i].done_bytes;
						mv[i].reaped = false;
						if (!more)
							continue;
						uint64_t off = (k++ % nslots) * bs;
						mv[i] = (struct strata_move){ .fd = -1, .src = host + off,
									      .dst = (uint8_t *)dev + off, .bytes = bs };
						strata_mover_queue(m, &mv[i], &err);
					}
					strata_mover_submit(m, &err);
				}
				double g = (double)bytes / ((double)(strata_now_ns() - t0) / 1e9) / 1e9;
				/* the data arrived: the last extent copied, read back */
				uint64_t off = ((k - 1) % nslots) * bs;
				uint8_t *chk = malloc(bs);
				int bad = !chk || strata_gpu_memcpy_d2h_async(chk, (uint8_t *)dev + off, bs, NULL, &err) ||
					  strata_gpu_sync(&err) || memcmp(chk, host + off, bs);
				free(chk);
				if (bad) {
					fprintf(stderr, "cuda mover copy=%s: data differs after the copy\n", strata_copy_names[copy]);
					return 1;
				}
				printf("ram_vram_%s_s%u,%s,%llu,%u,%.3f,pinned_cudaMemcpy_256MiB,%.3f,%.3f\n",
				       strata_copy_names[copy], streams, cs[c].name, (unsigned long long)bs, 2 * B, g, peak,
				       g / peak);
				printf("ram_vram_%s_s%u,%s,%llu,%u,%.3f,pinned_cudaMemcpy_same_size,%.3f,%.3f\n",
				       strata_copy_names[copy], streams, cs[c].name, (unsigned long long)bs, 2 * B, g, same,
				       g / same);
				fprintf(stderr, "%-22s %9llu B  cuda mover copy=%-5s %u stream%s %.2f GB/s  peak %.2f  ratio %.2f  (same-size ceiling %.2f: %.2f)\n",
					cs[c].name, (unsigned long long)bs, strata_copy_names[copy], streams,
					streams > 1 ? "s" : " ", g, peak, g / peak, same, g / same);
				strata_mover_close(m);
			}
		}
		if (nvme) {
			struct strata_mover *cp;
			struct strata_mover_config mc = { .queue_depth = 16 };
			strata_mover_open(&strata_mover_cuda, &mc, &cp, &err);
			for (int c = 0; c < nc && !strata_interrupted; c += 2) {
				uint32_t d = depth_for(cs[c].bytes, qd);
				if ((uint64_t)d * cs[c].bytes > arena)
					d = (uint32_t)(arena / cs[c].bytes);
				double ur = run_file_mover(&strata_mover_uring, file, fsize, cs[c].bytes, d, seconds, NULL, NULL);
				double sg = run_file_mover(&strata_mover_staged, file, fsize, cs[c].bytes, d, seconds, cp, dev);
				printf("nvme_vram_staged,%s,%llu,%u,%.3f,uring_nvme_ram,%.3f,%.3f\n", cs[c].name,
				       (unsigned long long)cs[c].bytes, d, sg, ur, ur > 0 ? sg / ur : 0);
				fprintf(stderr, "%-22s staged NVMe->VRAM %.2f GB/s vs uring NVMe->RAM %.2f  ratio %.2f\n",
					cs[c].name, sg, ur, ur > 0 ? sg / ur : 0);
			}
			strata_mover_close(cp);
		}
		strata_gpu_free(dev);
		strata_gpu_host_unregister(host);
		free(host);
	} else if (gpu) {
		fprintf(stderr, "no GPU: RAM -> VRAM figures skipped\n");
	}
	if (strata_interrupted)
		fprintf(stderr, "bench_movers: interrupted\n");
	return strata_interrupted ? 128 + strata_interrupted : 0;
}
