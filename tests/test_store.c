/* The packed shard store: round trip, layout, O_DIRECT, and every bad-input
 * path (corrupt header, corrupt extent, truncation, wrong version, missing
 * and foreign shards, aborted and failed writes, full disk). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "quant.h"
#include "strata/store.h"
#include "strata/util.h"
#include "testutil.h"

#define NT 2

static struct strata_model_spec small_spec(void)
{
	struct strata_model_spec s;
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("custom:layers=3,experts=5,top_k=2,hidden=256,inter=384,"
						 "nonrouted=12345", &s, &err), 0);
	return s;
}

static uint8_t pattern(uint32_t id, uint64_t i, uint32_t salt)
{
	uint64_t x = (id + 1) * 0x9e3779b97f4a7c15ull ^ (i * 0xbf58476d1ce4e5b9ull) ^ salt;
	return (uint8_t)(x >> 29 ^ x >> 7);
}

static void fill(uint8_t *buf, uint64_t n, uint32_t id, uint32_t salt)
{
	for (uint64_t i = 0; i < n; i++)
		buf[i] = pattern(id, i, salt);
}

/* Formats by expert id: a mix of all five, tiers cycling. */
static bool ws_no_q3; /* tables(): q4 in place of q3 */
static void tables(const struct strata_model_spec *s, uint8_t *tiers, uint8_t *fmts)
{
	for (uint32_t i = 0; i < strata_model_total_experts(s); i++) {
		tiers[i] = (uint8_t)(i % 3);
		fmts[i] = (uint8_t)(i % STRATA_FMT_COUNT);
		if (ws_no_q3 && fmts[i] == STRATA_FMT_Q3)
			fmts[i] = STRATA_FMT_Q4;
	}
}

static struct strata_tensor_info tinfo[NT] = {
	{ .name = "token_embd.weight", .fmt = STRATA_FMT_BF16, .ndim = 2, .shape = { 100, 256 } },
	{ .name = "output_norm.weight", .fmt = STRATA_FMT_F32, .ndim = 1, .shape = { 256 } },
};

static bool ws_force = true; /* write_store replaces a model already there */

/* Write a store of the small spec to dir; experts added in reverse order. */
static int write_store(const char *dir, uint64_t shard_bytes, uint32_t salt, struct strata_error *err)
{
	struct strata_model_spec s = small_spec();
	uint32_t n = strata_model_total_experts(&s);
	uint8_t tiers[64], fmts[64];
	tables(&s, tiers, fmts);
	struct strata_store_writer_config cfg = {
		.dir = dir, .spec = s, .tier_table = tiers, .fmt_table = fmts, .shard_bytes = shard_bytes,
		.n_tensors = NT, .tensors = tinfo, .force = ws_force,
	};
	struct strata_store_writer *w;
	int rc = strata_store_writer_open(&cfg, &w, err);
	if (rc)
		return rc;
	uint8_t *buf = strata_aligned_alloc(4096, 1 << 21);
	for (uint32_t k = 0; k < n && !rc; k++) {
		uint32_t eid = n - 1 - k;
		struct strata_expert_layout L;
		assert_int_equal(strata_expert_layout(fmts[eid], s.hidden, s.inter, &L), 0);
		fill(buf, L.payload, eid, salt);
		memset(buf + L.payload, 0xab, 4096); /* the aligned path must zero the padding itself */
		if (eid % 2) /* O_DIRECT path from an aligned, padded buffer */
			rc = strata_store_writer_add_expert_aligned(w, eid / s.n_experts, eid % s.n_experts, buf,
								    1 << 21, err);
		else
			rc = strata_store_writer_add_expert(w, eid / s.n_experts, eid % s.n_experts, buf, L.payload,
							    err);
	}
	fill(buf, 100 * 256 * 2, 1000, salt);
	if (!rc)
		rc = strata_store_writer_add_tensor(w, "token_embd.weight", buf, 100 * 256 * 2, err);
	fill(buf, 256 * 4, 1001, salt);
	if (!rc)
		rc = strata_store_writer_add_tensor(w, "output_norm.weight", buf, 256 * 4, err);
	if (!rc)
		rc = strata_store_writer_finish(w, err);
	strata_store_writer_free(w);
	free(buf);
	return rc;
}

static char *path_in(const char *dir, const char *name)
{
	static char p[4096];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return p;
}

static int count_files(const char *dir)
{
	char out[256];
	test_run(out, sizeof(out), "ls -A '%s' | wc -l", dir);
	return atoi(out);
}

static void patch(const char *path, long off, const void *bytes, size_t n)
{
	int fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
	close(fd);
}

static void test_roundtrip(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_error err = { 0 };
	/* a small target size forces several shards */
	assert_int_equal(write_store(dir, 1 << 20, 7, &err), 0);
	struct strata_store *st;
	assert_int_equal(strata_store_open(dir, &st, &err), 0);
	const struct strata_model_spec *s = strata_store_spec(st);
	struct strata_model_spec want = small_spec();
	assert_int_equal(s->hidden, 256);
	assert_int_equal(s->inter, 384);
	assert_true(s->nonrouted_params == 12345);
	assert_string_equal(s->name, want.name);
	uint32_t ns = strata_store_shard_count(st);
	assert_true(ns > 2);
	uint8_t tiers[64], fmts[64];
	tables(s, tiers, fmts);
	assert_memory_equal(strata_store_tier_table(st), tiers, strata_model_total_experts(s));
	assert_memory_equal(strata_store_fmt_table(st), fmts, strata_model_total_experts(s));
	uint8_t *buf = strata_aligned_alloc(4096, 1 << 21), *ref = malloc(1 << 21);
	for (uint32_t l = 0; l < s->n_moe_layers; l++)
		for (uint32_t e = 0; e < s->n_experts; e++) {
			uint32_t eid = strata_eid(s, l, e);
			const struct strata_extent *x = strata_store_expert(st, l, e);
			struct strata_expert_layout L;
			assert_int_equal(strata_expert_layout(fmts[eid], s->hidden, s->inter, &L), 0);
			assert_true(x->shard < ns);
			assert_int_equal(x->fmt, fmts[eid]);
			assert_int_equal(x->offset % 4096, 0);
			assert_int_equal(x->bytes % 4096, 0);
			assert_true(x->bytes == L.bytes);
			assert_true(x->payload == L.payload);
			fill(ref, x->payload, eid, 7);
			memset(buf, 0xee, x->bytes);
			assert_int_equal(strata_store_read_extent(st, x, buf, false, true, &err), 0);
			assert_memory_equal(buf, ref, x->payload);
			for (uint64_t i = x->payload; i < x->bytes; i++) /* padding reads as zero */
				assert_int_equal(buf[i], 0);
			memset(buf, 0xee, x->bytes);
			assert_int_equal(strata_store_read_extent(st, x, buf, true, true, &err), 0);
			assert_memory_equal(buf, ref, x->payload);
			assert_int_equal(strata_store_verify_extent(st, x, ref, &err), 0);
		}
	assert_null(strata_store_expert(st, 3, 0));
	assert_null(strata_store_expert(st, 0, 5));
	assert_int_equal(strata_store_tensor_count(st), NT);
	const struct strata_tensor_info *t = strata_store_find_tensor(st, "token_embd.weight");
	assert_non_null(t);
	assert_int_equal(t->fmt, STRATA_FMT_BF16);
	assert_int_equal(t->ndim, 2);
	assert_true(t->shape[0] == 100 && t->shape[1] == 256);
	assert_true(t->ext.payload == 100 * 256 * 2);
	assert_int_equal(t->ext.offset % 4096, 0);
	assert_int_equal(strata_store_read_extent(st, &t->ext, buf, true, true, &err), 0);
	fill(ref, t->ext.payload, 1000, 7);
	assert_memory_equal(buf, ref, t->ext.payload);
	assert_null(strata_store_find_tensor(st, "nope"));
	/* direct reads need an aligned buffer */
	assert_int_equal(strata_store_read_extent(st, &t->ext, buf + 8, true, false, &err), STRATA_EINVAL);
	struct strata_store_tier_summary sum;
	strata_store_summary(st, &sum);
	assert_true(sum.experts[0] + sum.experts[1] + sum.experts[2] == 15);
	assert_true(sum.experts[0] == 5 && sum.experts[1] == 5);
	assert_true(sum.params[2] == 5 * strata_model_expert_params(s));
	assert_true(sum.tensor_bytes == 100 * 256 * 2 + 256 * 4);
	/* every shard's size is a multiple of 4 KiB */
	for (uint32_t i = 0; i < ns; i++) {
		struct stat sb;
		assert_int_equal(stat(strata_store_shard_path(st, i), &sb), 0);
		assert_int_equal(sb.st_size % 4096, 0);
		assert_true(strata_store_shard_fd(st, i, false, &err) >= 0);
	}
	assert_string_equal(strata_tier_name(0), "vram");
	assert_string_equal(strata_tier_name(2), "nvme");
	strata_store_close(st);
	free(buf);
	free(ref);
	test_rmdir(dir);
	free(dir);
}

/* Open must fail with code and a message naming file and cause. */
static void expect_open_error(const char *dir, int code, const char *file, const char *cause)
{
	struct strata_store *st = NULL;
	struct strata_error err = { 0 };
	int rc = strata_store_open(dir, &st, &err);
	if (rc != code || !strstr(err.msg, file) || !strstr(err.msg, cause))
		fail_msg("want %s/'%s'/'%s', got %d: %s", strata_status_name(code), file, cause, rc, err.msg);
	assert_null(st);
}

static void test_corrupt_header(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_error err = { 0 };
	assert_int_equal(write_store(dir, 1 << 20, 1, &err), 0);
	char *p = path_in(dir, "shard-00001.strata");
	uint8_t b;
	int fd = open(p, O_RDWR);
	assert_int_equal(pread(fd, &b, 1, 300), 1);
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, 300), 1);
	expect_open_error(dir, STRATA_ECORRUPT, "shard-00001.strata", "checksum");
	b ^= 0x10;
	assert_int_equal(pwrite(fd, &b, 1, 300), 1);
	close(fd);
	struct strata_store *st;
	assert_int_equal(strata_store_open(dir, &st, &err), 0);
	strata_store_close(st);
	patch(p, 0, "NOTASHRD", 8);
	expect_open_error(dir, STRATA_ECORRUPT, "shard-00001.strata", "bad magic");
	test_rmdir(dir);
	free(dir);
}

static void test_wrong_version(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_error err = { 0 };
	assert_int_equal(write_store(dir, 0, 1, &err), 0);
	uint8_t v[4] = { 9, 0, 0, 0 };
	patch(path_in(dir, "shard-00000.strata"), 8, v, 4);
	expect_open_error(dir, STRATA_EVERSION, "shard-00000.strata", "version 9");
	/* version 1: tier codes of the old table codebook (kernels/FORMATS.md) */
	v[0] = 1;
	patch(path_in(dir, "shard-00000.strata"), 8, v, 4);
	expect_open_error(dir, STRATA_EVERSION, "shard-00000.strata", "re-quantize");
	test_rmdir(dir);
	free(dir);
}

/* A shard's whole header (malloc'd), its size in *hsize. */
static uint8_t *read_header(const char *path, uint64_t *hsize)
{
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	uint8_t fixed[STRATA_SHARD_FIXED_BYTES];
	assert_int_equal(pread(fd, fixed, sizeof(fixed), 0), (ssize_t)sizeof(fixed));
	memcpy(hsize, fixed + 16, 8);
	uint8_t *h = malloc(*hsize);
	assert_non_null(h);
	assert_int_equal(pread(fd, h, *hsize, 0), (ssize_t)*hsize);
	close(fd);
	return h;
}

/* Version 2 (q3's old bit layout, kernels/quant_scalar.h): read when no
 * expert of the model is q3, refused with the expert named when one is. */
static void test_version2(void **state)
{
	for (int no_q3 = 0; no_q3 < 2; no_q3++) {
		char *dir = test_mkdtemp();
		struct strata_error err = { 0 };
		ws_no_q3 = no_q3;
		assert_int_equal(write_store(dir, 0, 1, &err), 0);
		ws_no_q3 = false;
		uint64_t hsize;
		uint8_t *h = read_header(path_in(dir, "shard-00000.strata"), &hsize);
		assert_int_equal(h[8], STRATA_STORE_VERSION);
		h[8] = 2;
		struct strata_shard_header *sh = NULL;
		int rc = strata_store_parse_header(h, hsize, 0, "v2", STRATA_PARSE_NO_CHECKSUM, &sh, &err);
		if (no_q3) {
			assert_int_equal(rc, 0);
			assert_int_equal(sh->version, 2);
			strata_store_header_free(sh);
		} else {
			assert_int_equal(rc, STRATA_EVERSION);
			assert_non_null(strstr(err.msg, "v2: shard format version 2 stores q3 codes"));
			assert_non_null(strstr(err.msg, "re-quantize"));
			/* the first q3 expert of tables(): id STRATA_FMT_Q3 */
			struct strata_model_spec sp = small_spec();
			char where[64];
			snprintf(where, sizeof(where), "(layer %u, expert %u;", STRATA_FMT_Q3 / sp.n_experts,
				 STRATA_FMT_Q3 % sp.n_experts);
			assert_non_null(strstr(err.msg, where));
		}
		free(h);
		test_rmdir(dir);
		free(dir);
	}
}

static void test_truncated(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_error err = { 0 };
	assert_int_equal(write_store(dir, 1 << 20, 1, &err), 0);
	char *p = path_in(dir, "shard-00002.strata");
	struct stat sb;
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(truncate(p, sb.st_size - 4096), 0);
	expect_open_error(dir, STRATA_ECORRUPT, "shard-00002.strata", "truncated");
	assert_int_equal(truncate(p, 100), 0);
	expect_open_error(dir, STRATA_ECORRUPT, "shard-00002.strata", "truncated");
	assert_int_equal(truncate(p, 0), 0);
	expect_open_error(dir, STRATA_ECORRUPT, "shard-00002.strata", "truncated");
	/* a longer file than the header says is refused too */
	assert_int_equal(write_store(dir, 1 << 20, 1, &err), 0);
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(truncate(p, sb.st_size + 4096), 0);
	expect_open_error(dir, STRATA_ECORRUPT, "shard-00002.strata", "trailing");
	test_rmdir(dir);
	free(dir);
}

static void test_missing_and_foreign(void **state)
{
	char *a = test_mkdtemp(), *b = test_mkdtemp();
	struct strata_error err = { 0 };
	assert_int_equal(write_store(a, 1 << 20, 1, &err), 0);
	assert_int_equal(write_store(b, 1 << 20, 1, &err), 0);
	char pa[4096], pb[4096];
	snprintf(pa, sizeof(pa), "%s/shard-00001.strata", a);
	snprintf(pb, sizeof(pb), "%s/shard-00001.strata", b);
	/* same model, other write: refused */
	assert_int_equal(rename(pb, pa), 0);
	expect_open_error(a, STRATA_ECORRUPT, "shard-00001.strata", "different model or write");
	/* missing shard */
	assert_int_equal(unlink(pa), 0);
	expect_open_error(a, STRATA_ENOTFOUND, "shard-00001.strata", "missing shard 1 of");
	snprintf(pa, sizeof(pa), "%s/shard-00000.strata", a);
	assert_int_equal(unlink(pa), 0);
	expect_open_error(a, STRATA_ENOTFOUND, a, "missing shard 0");
	/* empty directory, missing directory */
	test_rmdir(b);
	expect_open_error(b, STRATA_ENOTFOUND, b, "No such file");
	assert_int_equal(mkdir(b, 0755), 0);
	expect_open_error(b, STRATA_ENOTFOUND, b, "no shard files");
	test_rmdir(b);
	/* a stale higher-numbered shard from an older, larger store */
	char cmd0[8300];
	snprintf(cmd0, sizeof(cmd0), "touch '%s/shard-00009.strata.tmp'", a);
	assert_int_equal(system(cmd0), 0);
	assert_int_equal(write_store(a, 0, 1, &err), 0); /* one shard; finish removes stale ones */
	assert_int_equal(count_files(a), 1);
	struct strata_store *st;
	assert_int_equal(strata_store_open(a, &st, &err), 0);
	assert_int_equal(strata_store_shard_count(st), 1);
	strata_store_close(st);
	char cmd[8300];
	snprintf(cmd, sizeof(cmd), "cp '%s/shard-00000.strata' '%s/shard-00007.strata'", a, a);
	assert_int_equal(system(cmd), 0);
	expect_open_error(a, STRATA_ECORRUPT, "shard-00007.strata", "stale");
	test_rmdir(a);
	free(a);
	free(b);
}

static void test_corrupt_extent(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_error err = { 0 };
	assert_int_equal(write_store(dir, 0, 3, &err), 0);
	struct strata_store *st;
	assert_int_equal(strata_store_open(dir, &st, &err), 0);
	const struct strata_extent *x = strata_store_expert(st, 2, 3);
	uint8_t b = 0x5a;
	patch(strata_store_shard_path(st, x->shard), (long)(x->offset + x->payload / 2), &b, 1);
	uint8_t *buf = strata_aligned_alloc(4096, 1 << 21);
	/* without verify the read succeeds; with it, a clear checksum error */
	assert_int_equal(strata_store_read_extent(st, x, buf, false, false, &err), 0);
	assert_int_equal(strata_store_read_extent(st, x, buf, false, true, &err), STRATA_ECORRUPT);
	assert_non_null(strstr(err.msg, "checksum mismatch"));
	assert_non_null(strstr(err.msg, "expert (layer 2, expert 3)"));
	assert_non_null(strstr(err.msg, "shard-00000.strata"));
	/* other experts still verify */
	const struct strata_extent *y = strata_store_expert(st, 0, 0);
	assert_int_equal(strata_store_read_extent(st, y, buf, true, true, &err), 0);
	free(buf);
	strata_store_close(st);
	/* inspect --verify reports it and fails */
	char out[4096];
	assert_int_equal(test_run(out, sizeof(out), "%s inspect --verify '%s'", test_bin("strata"), dir), 1);
	assert_non_null(strstr(out, "checksum mismatch"));
	test_rmdir(dir);
	free(dir);
}

static void test_abort_and_incomplete(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_error err = { 0 };
	struct strata_model_spec s = small_spec();
	struct strata_store_writer_config cfg = { .dir = dir, .spec = s, .shard_bytes = 1 << 20 };
	struct strata_store_writer *w;
	assert_int_equal(strata_store_writer_open(&cfg, &w, &err), 0);
	assert_true(strata_store_writer_shard_count(w) >= 1);
	assert_true(count_files(dir) >= 1); /* .tmp files exist while writing */
	struct strata_expert_layout L;
	assert_int_equal(strata_expert_layout(STRATA_FMT_COLD, s.hidden, s.inter, &L), 0);
	uint8_t *buf = calloc(1, L.payload);
	assert_int_equal(strata_store_writer_add_expert(w, 0, 0, buf, L.payload, &err), 0);
	/* wrong size, twice, out of range */
	assert_int_equal(strata_store_writer_add_expert(w, 0, 1, buf, L.payload - 1, &err), STRATA_EINVAL);
	assert_int_equal(strata_store_writer_add_expert(w, 0, 0, buf, L.payload, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "twice"));
	assert_int_equal(strata_store_writer_add_expert(w, 9, 0, buf, L.payload, &err), STRATA_EINVAL);
	assert_int_equal(strata_store_writer_add_tensor(w, "x", buf, 4, &err), STRATA_ENOTFOUND);
	/* finishing with experts missing fails, abort leaves nothing */
	assert_int_equal(strata_store_writer_finish(w, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "never written"));
	strata_store_writer_abort(w);
	assert_int_equal(count_files(dir), 0);
	free(buf);
	test_rmdir(dir);
	free(dir);
}

static void test_enospc_hook(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_error err = { 0 };
	/* a finished store already there must survive the failed rewrite */
	assert_int_equal(write_store(dir, 1 << 20, 1, &err), 0);
	int before = count_files(dir);
	strata_store_fail_after_bytes = 300000;
	int rc = write_store(dir, 1 << 20, 2, &err);
	strata_store_fail_after_bytes = 0;
	assert_int_equal(rc, STRATA_ENOSPC);
	assert_non_null(strstr(err.msg, ".strata.tmp"));
	assert_non_null(strstr(err.msg, "disk full"));
	assert_int_equal(count_files(dir), before); /* no .tmp left, old shards intact */
	struct strata_store *st;
	assert_int_equal(strata_store_open(dir, &st, &err), 0);
	strata_store_close(st);
	test_rmdir(dir);
	free(dir);
}

/* A real full filesystem: a 1 MiB tmpfs (needs root; skipped otherwise). */
static void test_enospc_tmpfs(void **state)
{
	char *dir = test_mkdtemp();
	if (geteuid() != 0 || mount("tmpfs", dir, "tmpfs", 0, "size=1m")) {
		fprintf(stderr, "SKIP enospc_tmpfs: cannot mount a small tmpfs here (%s)\n",
			geteuid() ? "not root" : strerror(errno));
		test_rmdir(dir);
		free(dir);
		return;
	}
	struct strata_error err = { 0 };
	char sub[4200];
	snprintf(sub, sizeof(sub), "%s/model", dir);
	int rc = write_store(sub, 512 << 10, 1, &err);
	assert_int_equal(rc, STRATA_ENOSPC); /* refused up front: needs ~3 MiB */
	assert_non_null(strstr(err.msg, sub));
	assert_non_null(strstr(err.msg, "free"));
	assert_int_equal(count_files(sub), 0);
	umount(dir);
	test_rmdir(dir);
	free(dir);
}

/* The header parser on its own: good header, short buffers, bad fields. */
static void test_parse_header(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_error err = { 0 };
	assert_int_equal(write_store(dir, 0, 1, &err), 0);
	uint64_t hsize = 0;
	uint8_t *h = read_header(path_in(dir, "shard-00000.strata"), &hsize);
	struct strata_model_spec s = small_spec();
	assert_true(hsize == strata_store_header_bytes(15, 15, NT));
	struct strata_shard_header *sh;
	assert_int_equal(strata_store_parse_header(h, hsize, 0, "x", 0, &sh, &err), 0);
	assert_int_equal(sh->n_experts, 15);
	assert_int_equal(sh->n_tensors, NT);
	assert_int_equal(sh->shard_count, 1);
	assert_int_equal(sh->data_off % 4096, 0);
	strata_store_header_free(sh);
	for (size_t len = 0; len < hsize; len += 97)
		assert_int_equal(strata_store_parse_header(h, len, 0, "x", 0, &sh, &err), STRATA_ECORRUPT);
	/* without the checksum, field checks still catch nonsense */
	uint8_t *c = malloc(hsize);
	static const size_t offs[] = { 40, 44, 64, 68, 72, 80, 88, 96, 104, 256 + 56, 256 + 60 };
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		memcpy(c, h, hsize);
		c[offs[i] + 3] ^= 0x7f;
		assert_int_not_equal(strata_store_parse_header(c, hsize, 0, "x", STRATA_PARSE_NO_CHECKSUM, &sh, &err),
				     0);
	}
	/* the format table: an unknown format, and a q4 expert (tables(): id 5)
	 * relabelled hot in the table and its record, whose size then disagrees */
	{
		uint64_t tab_off;
		memcpy(c, h, hsize);
		memcpy(&tab_off, c + 88, 8);
		uint64_t fmt_at = tab_off + (15 + 7) / 8 * 8;
		assert_int_equal(c[fmt_at + 5], STRATA_FMT_Q4);
		c[fmt_at + 5] = STRATA_FMT_COUNT;
		assert_int_equal(strata_store_parse_header(c, hsize, 0, "x", STRATA_PARSE_NO_CHECKSUM, &sh, &err),
				 STRATA_ECORRUPT);
		assert_non_null(strstr(err.msg, "format"));
		memcpy(c, h, hsize);
		c[fmt_at + 5] = STRATA_FMT_HOT;
		uint64_t eo;
		memcpy(&eo, c + 96, 8);
		for (uint32_t k = 0; k < 15; k++) { /* the record of expert id 5 */
			uint8_t *r = c + eo + (uint64_t)k * STRATA_SHARD_EXPERT_REC;
			uint32_t layer, ex;
			memcpy(&layer, r, 4), memcpy(&ex, r + 4, 4);
			if (layer * s.n_experts + ex == 5) {
				uint32_t f = STRATA_FMT_HOT;
				memcpy(r + 8, &f, 4);
			}
		}
		assert_int_equal(strata_store_parse_header(c, hsize, 0, "x", STRATA_PARSE_NO_CHECKSUM, &sh, &err),
				 STRATA_ECORRUPT);
	}
	/* an expert extent pointing into the header */
	memcpy(c, h, hsize);
	uint64_t exp_off;
	memcpy(&exp_off, c + 96, 8);
	memset(c + exp_off + 16, 0, 8);
	assert_int_equal(strata_store_parse_header(c, hsize, 0, "x", STRATA_PARSE_NO_CHECKSUM, &sh, &err),
			 STRATA_ECORRUPT);
	assert_non_null(strstr(err.msg, "outside the data area"));
	free(c);
	free(h);
	test_rmdir(dir);
	free(dir);
}

static void test_writer_rejects(void **state)
{
	struct strata_error err = { 0 };
	struct strata_store_writer *w;
	struct strata_model_spec s = small_spec();
	uint8_t tiers[15] = { 0 };
	tiers[3] = 7;
	struct strata_store_writer_config cfg = { .dir = "/tmp", .spec = s, .tier_table = tiers };
	assert_int_equal(strata_store_writer_open(&cfg, &w, &err), STRATA_EINVAL);
	struct strata_tensor_info bad = { .name = "t", .fmt = STRATA_FMT_HOT, .ndim = 1, .shape = { 4 } };
	struct strata_store_writer_config cfg2 = { .dir = "/tmp", .spec = s, .n_tensors = 1, .tensors = &bad };
	assert_int_equal(strata_store_writer_open(&cfg2, &w, &err), STRATA_EINVAL);
	struct strata_store_writer_config cfg3 = { .dir = "/proc/strata-no/such", .spec = s };
	assert_int_not_equal(strata_store_writer_open(&cfg3, &w, &err), 0);
	assert_non_null(strstr(err.msg, "/proc/strata-no"));
}

/* The fuzzer's seed corpus: real headers that must keep parsing (a format
 * change that breaks them means regenerating the corpus, see scripts/fuzz.sh). */
static void test_fuzz_seed_corpus(void **state)
{
	const char *dir = "tests/fuzz/corpus/store_header";
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "SKIP fuzz_seed_corpus: %s not found (run from the repository root)\n", dir);
		return;
	}
	int n = 0;
	for (struct dirent *de; (de = readdir(d));) {
		if (de->d_name[0] == '.')
			continue;
		char p[4096];
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		FILE *f = fopen(p, "rb");
		assert_non_null(f);
		static uint8_t buf[1 << 16];
		size_t len = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		struct strata_shard_header *h;
		struct strata_error err = { 0 };
		if (strata_store_parse_header(buf, len, 0, p, 0, &h, &err))
			fail_msg("%s", err.msg);
		strata_store_header_free(h);
		n++;
	}
	closedir(d);
	assert_true(n >= 3);
}

/* Whether dir opens as a store, and its shard count. */
static int store_opens(const char *dir, uint32_t *n_shards)
{
	struct strata_error err = { 0 };
	struct strata_store *st;
	if (strata_store_open(dir, &st, &err)) {
		print_message("open %s: %s\n", dir, err.msg);
		return 0;
	}
	*n_shards = strata_store_shard_count(st);
	strata_store_close(st);
	return 1;
}

/* A model in the directory is replaced only with force; the output is
 * locked while written (the loser is told the holder's pid); an output that
 * is an input of the process is refused. */
static void test_writer_force_lock(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_error err = { 0 };
	assert_int_equal(write_store(dir, 1 << 20, 1, &err), 0);
	ws_force = false;
	assert_int_equal(write_store(dir, 0, 2, &err), STRATA_EEXIST);
	ws_force = true;
	assert_non_null(strstr(err.msg, "already holds a model"));
	assert_non_null(strstr(err.msg, "--force"));
	uint32_t n = 0;
	assert_true(store_opens(dir, &n));
	assert_true(n > 1);
	/* a second writer while the first holds the directory */
	struct strata_model_spec s = small_spec();
	struct strata_store_writer_config cfg = { .dir = dir, .spec = s, .n_tensors = 0, .force = true };
	struct strata_store_writer *w1, *w2;
	assert_int_equal(strata_store_writer_open(&cfg, &w1, &err), 0);
	assert_int_equal(strata_store_writer_open(&cfg, &w2, &err), STRATA_EBUSY);
	char pid[32];
	snprintf(pid, sizeof(pid), "pid %ld", (long)getpid());
	assert_non_null(strstr(err.msg, pid));
	print_message("%s\n", err.msg);
	strata_store_writer_abort(w1);
	assert_int_equal(strata_store_writer_open(&cfg, &w2, &err), 0); /* free again */
	strata_store_writer_abort(w2);
	assert_true(store_opens(dir, &n)); /* aborted writes left the model alone */
	/* output == input */
	struct strata_store *st;
	assert_int_equal(strata_store_open(dir, &st, &err), 0);
	assert_int_equal(write_store(dir, 0, 3, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "input"));
	strata_store_close(st);
	assert_int_equal(write_store(dir, 0, 3, &err), 0); /* closed: no longer an input */
	test_rmdir(dir);
	free(dir);
}

/* --force killed between its renames (after k of them, for every k): the
 * directory always opens, as the old model or the new one, and a file of the
 * user's in it survives. */
static void test_replace_killed(void **state)
{
	char *dir = test_mkdtemp();
	struct strata_error err = { 0 };
	assert_int_equal(write_store(dir, 1 << 20, 1, &err), 0);
	uint32_t n_old = 0, n_new = 0, n;
	assert_true(store_opens(dir, &n_old));
	FILE *f = fopen(path_in(dir, "notes.txt"), "w");
	fputs("mine\n", f);
	fclose(f);
	int saw_old = 0, saw_new = 0;
	for (int k = 1; k < 12; k++) {
		fflush(NULL);
		pid_t pid = fork();
		if (!pid) {
			strata_store_kill_after_renames = k;
			_exit(write_store(dir, 2 << 20, 2 + (uint32_t)k, &err) ? 1 : 0);
		}
		int st;
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true((WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) || (WIFEXITED(st) && !WEXITSTATUS(st)));
		assert_true(store_opens(dir, &n));
		assert_true(n >= 1);
		if (n == n_old) {
			saw_old++;
		} else {
			saw_new++;
			n_new = n;
		}
		assert_non_null(fopen(path_in(dir, "notes.txt"), "r"));
		if (n != n_old) { /* put the old model back for the next k */
			assert_int_equal(write_store(dir, 1 << 20, 1, &err), 0);
			assert_true(store_opens(dir, &n));
			assert_int_equal(n, n_old);
		}
	}
	print_message("killed %d times with the old model left whole, %d runs completed (%u shards -> %u)\n",
		      saw_old, saw_new, n_old, n_new);
	assert_true(saw_old > 1 && saw_new > 0 && n_new > 1 && n_new != n_old);
	test_rmdir(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_corrupt_header),
		cmocka_unit_test(test_wrong_version),
		cmocka_unit_test(test_version2),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_missing_and_foreign),
		cmocka_unit_test(test_corrupt_extent),
		cmocka_unit_test(test_abort_and_incomplete),
		cmocka_unit_test(test_enospc_hook),
		cmocka_unit_test(test_enospc_tmpfs),
		cmocka_unit_test(test_parse_header),
		cmocka_unit_test(test_writer_rejects),
		cmocka_unit_test(test_fuzz_seed_corpus),
		cmocka_unit_test(test_writer_force_lock),
		cmocka_unit_test(test_replace_killed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
