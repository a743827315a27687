/* Movers: every file mover reads the same bytes as a plain pread; O_DIRECT
 * alignment is enforced; a truncated file fails with an error naming it; the
 * staged mover pipelines through bounce buffers; the generic layer retries
 * EAGAIN/EINTR; the virtual mover's clock follows its cost model. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "strata/gpu.h"
#include "strata/mover.h"
#include "strata/store.h"
#include "strata/synth.h"
#include "strata/tier_mem.h"
#include "strata/util.h"
#include "testutil.h"

#define NEXT 24
static char *dir;
static char path[512];
static uint64_t ext_off[NEXT], ext_len[NEXT], file_len;
static uint8_t *ref; /* file contents */

static int setup(void **state)
{
	dir = test_mkdtemp();
	snprintf(path, sizeof(path), "%s/shard-00000.strata", dir);
	uint64_t off = 0;
	for (int i = 0; i < NEXT; i++) {
		ext_off[i] = off;
		ext_len[i] = (uint64_t)(1 + (i * 7) % 13) * 4096 * (i % 5 == 0 ? 16 : 1);
		off += ext_len[i];
	}
	file_len = off;
	ref = malloc(file_len);
	uint64_t s = 7;
	for (uint64_t i = 0; i < file_len; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		ref[i] = (uint8_t)(s >> 56);
	}
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(ref, 1, file_len, f) != file_len)
		return -1;
	fclose(f);
	return 0;
}

static int teardown(void **state)
{
	free(ref);
	test_rmdir(dir);
	free(dir);
	return 0;
}

static int open_fd(int direct)
{
	int fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
	if (fd < 0 && direct) /* tmpfs has no O_DIRECT: the aligned path still runs */
		fd = open(path, O_RDONLY);
	return fd;
}

static void read_all(const char *name, int direct, uint32_t qd)
{
	struct strata_error err = { 0 };
	struct strata_mover *m;
	struct strata_mover_config cfg = { .queue_depth = qd };
	assert_int_equal(strata_mover_open(strata_mover_find(name), &cfg, &m, &err), 0);
	int fd = open_fd(direct);
	assert_true(fd >= 0);
	struct strata_move mv[NEXT];
	uint8_t *buf[NEXT];
	for (int i = 0; i < NEXT; i++) {
		buf[i] = strata_aligned_alloc(4096, ext_len[i]);
		memset(&mv[i], 0, sizeof(mv[i]));
		mv[i] = (struct strata_move){ .fd = fd, .path = path, .offset = ext_off[i], .dst = buf[i],
					      .bytes = ext_len[i] };
		assert_int_equal(strata_mover_queue(m, &mv[i], &err), 0);
	}
	assert_int_equal(strata_mover_drain(m, &err), 0);
	for (int i = 0; i < NEXT; i++) {
		assert_int_equal(mv[i].status, STRATA_MOVE_DONE);
		assert_true(mv[i].done_bytes == ext_len[i]);
		assert_memory_equal(buf[i], ref + ext_off[i], ext_len[i]);
		free(buf[i]);
	}
	assert_true(m->moves == NEXT && m->failed == 0);
	strata_mover_close(m);
	close(fd);
}

static void test_file_movers_same_bytes(void **state)
{
	read_all("uring", 1, 4);  /* more moves than the queue: queue() reaps */
	read_all("uring", 1, 64);
	read_all("pread", 1, 8);
	read_all("pread", 0, 8);
	read_all("mmap", 0, 8);
}

/* On a real shard store: every file mover returns exactly what the store's
 * own reader returns for every expert extent. */
static void test_same_bytes_as_store(void **state)
{
	struct strata_error err = { 0 };
	char *d = test_mkdtemp();
	struct strata_synth_config c = { .seed = 2, .format = STRATA_SYNTH_TIERED, .codes = STRATA_SYNTH_CODES_RANDOM,
					 .shard_bytes = 1 << 20 };
	struct strata_store *s;
	assert_int_equal(strata_model_spec_parse("custom:layers=2,experts=8,top_k=2,hidden=512,inter=256", &c.spec,
						 &err), 0);
	assert_int_equal(strata_synth_write(&c, d, NULL, NULL, &err), 0);
	assert_int_equal(strata_store_open(d, &s, &err), 0);
	assert_true(strata_store_shard_count(s) > 1);
	const char *names[] = { "uring", "pread", "mmap" };
	for (int k = 0; k < 3; k++) {
		struct strata_mover *m;
		assert_int_equal(strata_mover_open(strata_mover_find(names[k]), NULL, &m, &err), 0);
		for (uint32_t l = 0; l < 2; l++)
			for (uint32_t e = 0; e < 8; e++) {
				const struct strata_extent *x = strata_store_expert(s, l, e);
				uint8_t *a = strata_aligned_alloc(4096, x->bytes), *b = strata_aligned_alloc(4096, x->bytes);
				int fd = strata_store_shard_fd(s, x->shard, k < 2, &err);
				assert_true(fd >= 0);
				struct strata_move mv = { .fd = fd, .path = strata_store_shard_path(s, x->shard),
							  .offset = x->offset, .dst = a, .bytes = x->bytes };
				assert_int_equal(strata_mover_run(m, &mv, &err), 0);
				assert_int_equal(strata_store_read_extent(s, x, b, false, true, &err), 0);
				assert_memory_equal(a, b, x->bytes);
				assert_int_equal(strata_store_verify_extent(s, x, a, &err), 0);
				free(a);
				free(b);
			}
		strata_mover_close(m);
	}
	strata_store_close(s);
	test_rmdir(d);
	free(d);
}

static void test_direct_alignment(void **state)
{
	struct strata_error err = { 0 };
	struct strata_mover *m;
	assert_int_equal(strata_mover_open(&strata_mover_uring, NULL, &m, &err), 0);
	int fd = open_fd(1);
	uint8_t *buf = strata_aligned_alloc(4096, 3 * 4096);
	struct strata_move mv = { .fd = fd, .path = path, .offset = 0, .dst = buf + 512, .bytes = 4096 };
	assert_int_equal(strata_mover_queue(m, &mv, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, path));
	mv = (struct strata_move){ .fd = fd, .path = path, .offset = 100, .dst = buf, .bytes = 4096 };
	assert_int_equal(strata_mover_queue(m, &mv, &err), STRATA_EINVAL);
	mv = (struct strata_move){ .fd = fd, .path = path, .offset = 4096, .dst = buf, .bytes = 4096 };
	assert_int_equal(strata_mover_run(m, &mv, &err), 0);
	assert_memory_equal(buf, ref + 4096, 4096);
	strata_mover_close(m);
	free(buf);
	close(fd);
}

/* A read past EOF (a truncated shard) fails with the file named, for every
 * file mover, and a short read at the end is reported as such. */
/* Checked reads into host memory are hashed on the generic layer's checker
 * thread, not in the caller's reap: every file mover completes the good ones
 * DONE and the one whose stored hash is wrong FAILED (-EBADMSG, the error
 * naming the file), each once, with the caller waiting in reap, in wait, or
 * polling with reap(0). */
static void test_checked_reads(void **state)
{
	const char *names[] = { "uring", "pread", "mmap" };
	for (int n = 0; n < 3; n++)
		for (int how = 0; how < 3; how++) {
			struct strata_error err = { 0 };
			struct strata_mover *m;
			struct strata_mover_config cfg = { .queue_depth = NEXT }; /* queue never reaps */
			assert_int_equal(strata_mover_open(strata_mover_find(names[n]), &cfg, &m, &err), 0);
			int fd = open_fd(n != 2);
			assert_true(fd >= 0);
			struct strata_move mv[NEXT];
			uint8_t *buf[NEXT];
			int bad = 5 + how;
			for (int i = 0; i < NEXT; i++) {
				buf[i] = strata_aligned_alloc(4096, ext_len[i]);
				mv[i] = (struct strata_move){ .fd = fd, .path = path, .offset = ext_off[i], .dst = buf[i],
							      .bytes = ext_len[i], .check_bytes = ext_len[i] - 100,
							      .check_xxh3 = XXH3_64bits(ref + ext_off[i], ext_len[i] - 100) ^
									    (i == bad) };
				assert_int_equal(strata_mover_queue(m, &mv[i], &err), 0);
				if (how == 1) {
					int rc = strata_mover_wait(m, &mv[i], &err);
					assert_int_equal(rc, i == bad ? STRATA_ECORRUPT : STRATA_OK);
				}
			}
			if (how == 0) {
				assert_int_equal(strata_mover_drain(m, &err), STRATA_ECORRUPT);
				assert_non_null(strstr(err.msg, "checksum mismatch"));
			} else if (how == 2) {
				assert_int_equal(strata_mover_submit(m, &err), 0);
				while (m->outstanding)
					strata_mover_reap(m, 0, &err);
			}
			assert_non_null(m->chk); /* hashed on the checker */
			assert_int_equal(m->checking, 0);
			assert_true(m->moves == NEXT && m->failed == 1);
			for (int i = 0; i < NEXT; i++) {
				assert_true(mv[i].reaped);
				assert_int_equal(mv[i].status, i == bad ? STRATA_MOVE_FAILED : STRATA_MOVE_DONE);
				assert_int_equal(mv[i].res, i == bad ? -EBADMSG : 0);
				free(buf[i]);
			}
			strata_mover_close(m);
			close(fd);
		}
}

static void test_truncated_file(void **state)
{
	const char *names[] = { "uring", "pread", "mmap" };
	for (int k = 0; k < 3; k++) {
		struct strata_error err = { 0 };
		struct strata_mover *m;
		assert_int_equal(strata_mover_open(strata_mover_find(names[k]), NULL, &m, &err), 0);
		int fd = open_fd(k < 2);
		uint8_t *buf = strata_aligned_alloc(4096, 8 * 4096);
		/* straddles EOF: 2 pages exist, 6 do not */
		struct strata_move mv = { .fd = fd, .path = path, .offset = file_len - 2 * 4096, .dst = buf,
					  .bytes = 8 * 4096 };
		assert_int_equal(strata_mover_run(m, &mv, &err), STRATA_EIO);
		assert_int_equal(mv.status, STRATA_MOVE_FAILED);
		assert_non_null(strstr(err.msg, path));
		assert_non_null(strstr(err.msg, "truncated"));
		assert_true(mv.done_bytes == 2 * 4096);
		print_message("%s: %s\n", names[k], err.msg);
		/* wholly past EOF */
		mv = (struct strata_move){ .fd = fd, .path = path, .offset = file_len + 4096 * 10, .dst = buf,
					   .bytes = 4096 };
		assert_int_equal(strata_mover_run(m, &mv, &err), STRATA_EIO);
		assert_non_null(strstr(err.msg, "short read, 0 of 4096"));
		/* a bad fd: EBADF, named */
		mv = (struct strata_move){ .fd = 9999, .path = path, .offset = 0, .dst = buf, .bytes = 4096 };
		assert_true(strata_mover_run(m, &mv, &err) < 0);
		assert_non_null(strstr(err.msg, path));
		free(buf);
		close(fd);
		strata_mover_close(m);
	}
}

static void test_staged_host(void **state)
{
	const char *readers[] = { "uring", "pread" };
	for (int k = 0; k < 2; k++) {
		struct strata_error err = { 0 };
		struct strata_mover *rd, *cp, *st;
		assert_int_equal(strata_mover_open(strata_mover_find(readers[k]), NULL, &rd, &err), 0);
		assert_int_equal(strata_mover_open(&strata_mover_host, NULL, &cp, &err), 0);
		struct strata_mover_config sc = { .stage_read = rd, .stage_copy = cp, .bounce_bytes = 3 * 4096,
						  .n_bounce = 3 };
		assert_int_equal(strata_mover_open(&strata_mover_staged, &sc, &st, &err), 0);
		int fd = open_fd(1);
		struct strata_move mv[NEXT];
		uint8_t *dst[NEXT];
		for (int i = 0; i < NEXT; i++) {
			dst[i] = malloc(ext_len[i]);
			mv[i] = (struct strata_move){ .fd = fd, .path = path, .offset = ext_off[i], .dst = dst[i],
						      .bytes = ext_len[i] };
			assert_int_equal(strata_mover_queue(st, &mv[i], &err), 0);
		}
		assert_int_equal(strata_mover_drain(st, &err), 0);
		for (int i = 0; i < NEXT; i++) {
			assert_int_equal(mv[i].status, STRATA_MOVE_DONE);
			assert_memory_equal(dst[i], ref + ext_off[i], ext_len[i]);
			free(dst[i]);
		}
		/* a failing chunk fails the parent, with the file named */
		uint8_t *d = malloc(16 * 4096);
		struct strata_move bad = { .fd = fd, .path = path, .offset = file_len - 4 * 4096, .dst = d,
					   .bytes = 16 * 4096 };
		assert_int_equal(strata_mover_run(st, &bad, &err), STRATA_EIO);
		assert_non_null(strstr(err.msg, path));
		free(d);
		strata_mover_close(st);
		strata_mover_close(rd);
		strata_mover_close(cp);
		close(fd);
	}
}

/* Demand before prefetch in the staged mover: with one bounce buffer, a
 * demand move queued after a prefetch (mv.low) is read first; a prefetch
 * already partly read is finished first; a prefetch promoted while it waits
 * (low cleared) goes ahead of a later one.  Bytes land right either way. */
static int done_order[8], n_done;
static void note_done(struct strata_move *mv) { done_order[n_done++] = (int)(intptr_t)mv->user; }

static void test_staged_priority(void **state)
{
	struct strata_error err = { 0 };
	struct strata_mover *rd, *cp, *st;
	assert_int_equal(strata_mover_open(strata_mover_find("pread"), NULL, &rd, &err), 0);
	assert_int_equal(strata_mover_open(&strata_mover_host, NULL, &cp, &err), 0);
	struct strata_mover_config sc = { .stage_read = rd, .stage_copy = cp, .bounce_bytes = 4096, .n_bounce = 1 };
	assert_int_equal(strata_mover_open(&strata_mover_staged, &sc, &st, &err), 0);
	int fd = open_fd(1);
	/* 0: prefetch, 1: demand, 2: prefetch, 3: prefetch promoted before the first submit */
	const bool low[4] = { true, false, true, true };
	const int ext[4] = { 0, 1, 2, 3 };
	struct strata_move mv[4];
	uint8_t *dst[4];
	n_done = 0;
	for (int i = 0; i < 4; i++) {
		dst[i] = malloc(ext_len[ext[i]]);
		mv[i] = (struct strata_move){ .fd = fd, .path = path, .offset = ext_off[ext[i]], .dst = dst[i],
					      .bytes = ext_len[ext[i]], .low = low[i], .on_done = note_done,
					      .user = (void *)(intptr_t)i };
		assert_int_equal(strata_mover_queue(st, &mv[i], &err), 0);
	}
	mv[3].low = false;
	assert_int_equal(strata_mover_drain(st, &err), 0);
	assert_int_equal(n_done, 4);
	const int want[4] = { 1, 3, 0, 2 };
	for (int i = 0; i < 4; i++) {
		assert_int_equal(done_order[i], want[i]);
		assert_int_equal(mv[i].status, STRATA_MOVE_DONE);
		assert_memory_equal(dst[i], ref + ext_off[ext[i]], ext_len[ext[i]]);
		free(dst[i]);
	}
	/* a demand arriving while a prefetch of several chunks is being read waits for
	 * that prefetch only: one submit reads the prefetch's first chunk, then
	 * the demand queued after it goes before the other prefetch */
	n_done = 0;
	const int ext2[3] = { 0, 5, 1 }; /* extent 0 and 5 have 16 chunks */
	const bool low2[3] = { true, true, false };
	for (int i = 0; i < 3; i++) {
		dst[i] = malloc(ext_len[ext2[i]]);
		mv[i] = (struct strata_move){ .fd = fd, .path = path, .offset = ext_off[ext2[i]], .dst = dst[i],
					      .bytes = ext_len[ext2[i]], .low = low2[i], .on_done = note_done,
					      .user = (void *)(intptr_t)i };
		if (i < 2)
			assert_int_equal(strata_mover_queue(st, &mv[i], &err), 0);
	}
	assert_int_equal(strata_mover_submit(st, &err), 0);
	assert_int_equal(strata_mover_queue(st, &mv[2], &err), 0);
	assert_int_equal(strata_mover_drain(st, &err), 0);
	const int want2[3] = { 0, 2, 1 };
	for (int i = 0; i < 3; i++) {
		assert_int_equal(done_order[i], want2[i]);
		assert_memory_equal(dst[i], ref + ext_off[ext2[i]], ext_len[ext2[i]]);
		free(dst[i]);
	}
	strata_mover_close(st);
	strata_mover_close(rd);
	strata_mover_close(cp);
	close(fd);
}

/* A mover whose submit and reap report EINTR/EAGAIN a few times before
 * working: the generic layer retries, the caller never sees them. */
static int flaky_left;
static struct strata_move *flaky_q;
static int fl_init(struct strata_mover *m, struct strata_error *e) { return 0; }
static int fl_queue(struct strata_mover *m, struct strata_move *mv) { flaky_q = mv; return 0; }
static int fl_submit(struct strata_mover *m)
{
	if (flaky_left-- > 0)
		return flaky_left % 2 ? -EINTR : -EAGAIN;
	return 1;
}
static int fl_reap(struct strata_mover *m, uint32_t min, struct strata_move **out, uint32_t max)
{
	if (flaky_left-- > 0)
		return -EINTR;
	if (!flaky_q)
		return 0;
	flaky_q->status = STRATA_MOVE_DONE;
	out[0] = flaky_q;
	flaky_q = NULL;
	return 1;
}
static const struct strata_mover_ops flaky = {
	.name = "flaky", .version = STRATA_MOVER_ABI, .init = fl_init, .queue = fl_queue,
	.submit = fl_submit, .reap = fl_reap,
};

static void test_retry_and_loader(void **state)
{
	struct strata_error err = { 0 };
	struct strata_mover *m;
	assert_int_equal(strata_mover_open(&flaky, NULL, &m, &err), 0);
	struct strata_move mv = { .fd = -1, .bytes = 1 };
	flaky_left = 5;
	assert_int_equal(strata_mover_run(m, &mv, &err), 0);
	assert_int_equal(mv.status, STRATA_MOVE_DONE);
	strata_mover_close(m);

	struct strata_mover_ops bad = flaky;
	bad.version = 99;
	assert_int_equal(strata_mover_open(&bad, NULL, &m, &err), STRATA_EVERSION);
	bad = flaky;
	bad.reap = NULL;
	assert_int_equal(strata_mover_open(&bad, NULL, &m, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "flaky"));
	assert_null(strata_mover_find("nope"));
	for (unsigned i = 0; strata_mover_at(i); i++)
		assert_ptr_equal(strata_mover_find(strata_mover_at(i)->name), strata_mover_at(i));
}

static void test_virtual_cost(void **state)
{
	double clock = 0;
	struct strata_vlink nvme, pcie;
	strata_vlink_init(&nvme, 2.0, 100, 4); /* 2 GB/s = 2 bytes/ns, 100 us */
	strata_vlink_init(&pcie, 50.0, 10, 2);
	struct strata_error err = { 0 };
	struct strata_mover *v, *st;
	struct strata_mover_config c = { .clock_ns = &clock, .links = { &nvme } };
	assert_int_equal(strata_mover_open(&strata_mover_virtual, &c, &v, &err), 0);
	/* one move: latency + bytes/bandwidth */
	struct strata_move a = { .fd = -1, .bytes = 2000000 };
	assert_int_equal(strata_mover_run(v, &a, &err), 0);
	assert_true(clock == 100000 + 1000000);
	/* four at once: latencies overlap, transfers serialize */
	struct strata_move b[4];
	for (int i = 0; i < 4; i++) {
		b[i] = (struct strata_move){ .fd = -1, .bytes = 2000000 };
		strata_mover_queue(v, &b[i], &err);
	}
	strata_mover_drain(v, &err);
	assert_true(clock == 1100000 + 100000 + 4 * 1000000.0);
	/* reap(0) never advances time; a move in the future stays in flight */
	struct strata_move c1 = { .fd = -1, .bytes = 2 };
	strata_mover_queue(v, &c1, &err);
	strata_mover_submit(v, &err);
	assert_int_equal(strata_mover_reap(v, 0, &err), 0);
	assert_int_equal(c1.status, STRATA_MOVE_INFLIGHT);
	clock += 1e9;
	assert_int_equal(strata_mover_reap(v, 0, &err), 1);
	/* a dependency: cannot start before not_before */
	struct strata_move d = { .fd = -1, .bytes = 0, .not_before_ns = (uint64_t)clock + 5000 };
	strata_mover_run(v, &d, &err);
	assert_true(d.done_ns == d.not_before_ns + 100000);
	/* two links in a row (staged): both costs */
	struct strata_mover_config c2 = { .clock_ns = &clock, .links = { &nvme, &pcie } };
	assert_int_equal(strata_mover_open(&strata_mover_virtual, &c2, &st, &err), 0);
	double t0 = clock;
	struct strata_move s = { .fd = -1, .bytes = 1000000 };
	strata_mover_run(st, &s, &err);
	assert_true(clock == t0 + 100000 + 500000 + 10000 + 20000);
	strata_mover_close(v);
	strata_mover_close(st);
	strata_vlink_free(&nvme);
	strata_vlink_free(&pcie);
}

static void test_cuda_roundtrip(void **state)
{
	if (!test_have_gpu("cuda_roundtrip"))
		return;
	struct strata_error err = { 0 };
	assert_int_equal(strata_gpu_init(0, &err), 0);
	struct strata_mover *m, *rd, *st;
	assert_int_equal(strata_mover_open(&strata_mover_cuda, NULL, &m, &err), 0);
	uint64_t n = ext_len[0] > ext_len[5] ? ext_len[0] : ext_len[5];
	uint8_t *host = strata_aligned_alloc(4096, n), *back = strata_aligned_alloc(4096, n);
	memcpy(host, ref, ext_len[0]);
	assert_int_equal(strata_gpu_host_register(host, n, &err), 0);
	void *dev;
	assert_int_equal(strata_gpu_malloc(&dev, n, &err), 0);
	struct strata_move mv = { .fd = -1, .src = host, .dst = dev, .bytes = ext_len[0] };
	assert_int_equal(strata_mover_run(m, &mv, &err), 0);
	strata_gpu_stream *s;
	strata_gpu_stream_create(&s, &err);
	strata_gpu_memcpy_d2h_async(back, dev, ext_len[0], s, &err);
	strata_gpu_stream_sync(s, &err);
	assert_memory_equal(back, ref, ext_len[0]);
	/* staged uring -> cuda */
	assert_int_equal(strata_mover_open(&strata_mover_uring, NULL, &rd, &err), 0);
	struct strata_mover_config sc = { .stage_read = rd, .stage_copy = m, .bounce_bytes = 8192,
					  .bounce_register = true };
	assert_int_equal(strata_mover_open(&strata_mover_staged, &sc, &st, &err), 0);
	int fd = open_fd(1);
	struct strata_move sm = { .fd = fd, .path = path, .offset = ext_off[5], .dst = dev, .bytes = ext_len[5] };
	assert_true(ext_len[5] <= n);
	assert_int_equal(strata_mover_run(st, &sm, &err), 0);
	strata_gpu_memcpy_d2h_async(back, dev, ext_len[5], s, &err);
	strata_gpu_stream_sync(s, &err);
	assert_memory_equal(back, ref + ext_off[5], ext_len[5]);
	strata_mover_close(st);
	strata_mover_close(rd);
	strata_mover_close(m);
	strata_gpu_stream_destroy(s);
	strata_gpu_free(dev);
	strata_gpu_host_unregister(host);
	free(host);
	free(back);
	close(fd);
}

/* Every RAM -> VRAM issue mode moves the same bytes: 80 moves in one submit
 * (more than one sm launch holds), odd lengths and offsets (the sm kernel's
 * byte head and tail), then a second round queued while nothing is in flight. */
static void test_cuda_copy_modes(void **state)
{
	if (!test_have_gpu("cuda_copy_modes"))
		return;
	enum { N = 80, STRIDE = 3 * 4096 };
	struct strata_error err = { 0 };
	assert_int_equal(strata_gpu_init(0, &err), 0);
	uint64_t n = (uint64_t)N * STRIDE;
	uint8_t *host = strata_aligned_alloc(4096, n), *back = malloc(n);
	for (uint64_t i = 0; i < n; i++)
		host[i] = (uint8_t)(strata_splitmix64(&(uint64_t){ i }) >> 7);
	assert_int_equal(strata_gpu_host_register(host, n, &err), 0);
	void *dev;
	assert_int_equal(strata_gpu_malloc(&dev, n, &err), 0);
	for (uint32_t copy = STRATA_COPY_AUTO; copy <= STRATA_COPY_SM; copy++) {
		struct strata_mover *m;
		struct strata_mover_config mc = { .queue_depth = N, .n_streams = 2, .copy = copy };
		assert_int_equal(strata_mover_open(&strata_mover_cuda, &mc, &m, &err), 0);
		assert_int_equal(strata_gpu_memset(dev, 0, n, &err), 0);
		struct strata_move mv[N];
		for (int round = 0; round < 2; round++) {
			for (uint32_t i = 0; i < N; i++) {
				/* round 0: aligned extents of 1..2 pages; round 1: odd lengths at
				 * odd offsets, the same misalignment on both sides */
				uint64_t off = (uint64_t)i * STRIDE + (round ? i % 16 : 0);
				uint64_t len = round ? 4096 + 17 * i + 1 : 4096 * (1 + i % 2);
				mv[i] = (struct strata_move){ .fd = -1, .src = host + off, .dst = (uint8_t *)dev + off,
							      .bytes = len };
				assert_int_equal(strata_mover_queue(m, &mv[i], &err), 0);
			}
			assert_int_equal(strata_mover_drain(m, &err), 0);
			assert_int_equal(strata_gpu_memcpy_d2h_async(back, dev, n, NULL, &err), 0);
			assert_int_equal(strata_gpu_sync(&err), 0);
			for (uint32_t i = 0; i < N; i++) {
				assert_true(mv[i].reaped && mv[i].status == STRATA_MOVE_DONE);
				assert_int_equal(mv[i].done_bytes, mv[i].bytes);
				uint64_t off = (uint64_t)((uint8_t *)mv[i].src - host);
				assert_memory_equal(back + off, host + off, mv[i].bytes);
			}
		}
		strata_mover_close(m);
	}
	strata_gpu_free(dev);
	strata_gpu_host_unregister(host);
	free(host);
	free(back);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_file_movers_same_bytes),
		cmocka_unit_test(test_same_bytes_as_store),
		cmocka_unit_test(test_direct_alignment),
		cmocka_unit_test(test_checked_reads), cmocka_unit_test(test_truncated_file),
		cmocka_unit_test(test_staged_host),
		cmocka_unit_test(test_staged_priority),
		cmocka_unit_test(test_retry_and_loader),
		cmocka_unit_test(test_virtual_cost),
		cmocka_unit_test(test_cuda_roundtrip),
		cmocka_unit_test(test_cuda_copy_modes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
