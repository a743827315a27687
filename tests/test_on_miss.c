/* Precision on miss (engine option on_miss=lowbit, HOBBIT-style): the low-bit
 * copies in the shard store (written, listed, verified, refused when corrupt),
 * the engine's decision on hand-made steps (a copy exactly when a miss that
 * would stall meets a low gate weight), sim and replay agreeing on a hand-made
 * trace with golden counters, and bad input. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant.h"
#include "strata/engine.h"
#include "strata/replay.h"
#include "strata/store.h"
#include "strata/synth.h"
#include "strata/util.h"
#include "testutil.h"

#define GOLDEN_SUBSTITUTED 3 /* recorded: test_replay_golden prints them (mixed sizes: 7, 14, 82 before
				 * the engine made room by moving extents instead of evicting) */
#define GOLDEN_HITS_VRAM 20
#define GOLDEN_MOVES_VRAM 76
#define SPEC "custom:layers=2,experts=8,top_k=2,hidden=256,inter=128"

static struct strata_store *st; /* the model with copies */

static int write_model(const char *dir, bool copies)
{
	struct strata_error err = { 0 };
	struct strata_synth_config c = { .seed = 7, .format = STRATA_SYNTH_TIERED, .codes = STRATA_SYNTH_CODES_RANDOM,
					 .lowbit_copies = copies };
	if (strata_model_spec_parse(SPEC, &c.spec, &err) || strata_synth_write(&c, dir, NULL, NULL, &err)) {
		fprintf(stderr, "setup: %s\n", err.msg);
		return -1;
	}
	return 0;
}

/* A decode trace of the model's shape (2 layers, top-2) with gate weights:
 * token t routes layer l to experts (t + l) % 8 and (t + 3 * l + 5) % 8 with
 * weights 0.8 / 0.2 on even tokens and 0.55 / 0.45 on odd ones. */
static int write_trace(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "{\"strata_trace\":1,\"layers\":2,\"experts\":8,\"top_k\":2,\"model\":\"t\",\"weights\":\"f32\"}\n");
	for (int t = 0; t < 24; t++) {
		const char *w = t % 2 ? "0.55,0.45" : "0.8,0.2";
		fprintf(f, "{\"req\":0,\"phase\":\"decode\",\"pos\":%d,\"layers\":[[%d,%d],[%d,%d]],"
			"\"weights\":[[%s],[%s]]}\n", t, t % 8, (t + 5) % 8, (t + 1) % 8, (t + 8) % 8, w, w);
	}
	return fclose(f);
}

static int setup(void **state)
{
	setenv("STRATA_PROGRESS", "0", 1);
	if (test_tmpdir_setup(state) || write_model(test_path("m"), true) || write_model(test_path("plain"), false) ||
	    write_trace(test_path("t.jsonl")))
		return -1;
	struct strata_error err = { 0 };
	if (strata_store_open(test_path("m"), &st, &err)) {
		fprintf(stderr, "setup: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	strata_store_close(st);
	return test_tmpdir_teardown(state);
}

/* The first expert of layer 0 in tier t. */
static uint32_t expert_in(int t)
{
	const uint8_t *tiers = strata_store_tier_table(st);
	for (uint32_t e = 0; e < 8; e++)
		if (tiers[e] == t)
			return e;
	fail_msg("no expert of tier %d in layer 0", t);
	return 0;
}

static void test_store_copies(void **state)
{
	const uint8_t *tiers = strata_store_tier_table(st);
	struct strata_expert_layout cold;
	assert_int_equal(strata_expert_layout(STRATA_FMT_COLD, 256, 128, &cold), 0);
	uint32_t n = 0;
	for (uint32_t eid = 0; eid < 16; eid++) {
		const struct strata_extent *x = strata_store_expert(st, eid / 8, eid % 8);
		const struct strata_extent *c = strata_store_copy(st, eid / 8, eid % 8);
		/* a copy beside every hot/warm expert, none beside a cold one */
		assert_int_equal(c != NULL, tiers[eid] != STRATA_TIER_NVME);
		if (!c)
			continue;
		n++;
		assert_int_equal(c->fmt, STRATA_FMT_COLD);
		assert_int_equal(c->payload, cold.payload);
		assert_int_equal(c->shard, x->shard);
		assert_true(c->payload < x->payload);
	}
	assert_true(n > 0 && n < 16);
	assert_null(strata_store_copy(st, 2, 0));
	struct strata_store_tier_summary s;
	strata_store_summary(st, &s);
	assert_int_equal(s.copies, n);
	assert_int_equal(s.copy_bytes, n * cold.bytes);
	/* inspect lists and verifies them; a store without copies has none */
	char out[8192];
	assert_int_equal(test_run(out, sizeof(out), "%s inspect %s --verify", test_bin("strata"), test_path("m")), 0);
	assert_non_null(strstr(out, "low-bit (cold) copies"));
	assert_int_equal(test_run(out, sizeof(out), "%s inspect %s --json", test_bin("strata"), test_path("plain")), 0);
	assert_non_null(strstr(out, "\"lowbit_copies\":0"));
}

static void test_store_bad_copies(void **state)
{
	struct strata_error err = { 0 };
	char out[8192];
	assert_int_equal(test_run(out, sizeof(out), "cp -r %s %s", test_path("m"), test_path("bad")), 0);
	/* a flipped byte in a copy's payload: verify names the copy */
	uint32_t h = expert_in(STRATA_TIER_VRAM);
	const struct strata_extent *c = strata_store_copy(st, 0, h);
	char shard[4096];
	snprintf(shard, sizeof(shard), "%s/shard-00000.strata", test_path("bad"));
	int fd = open(shard, O_RDWR);
	assert_true(fd >= 0);
	uint8_t b;
	assert_int_equal(pread(fd, &b, 1, (off_t)c->offset + 100), 1);
	b ^= 0x5a;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)c->offset + 100), 1);
	assert_int_equal(test_run(out, sizeof(out), "%s inspect %s --verify", test_bin("strata"), test_path("bad")), 1);
	assert_non_null(strstr(out, "low-bit copy of expert (layer 0"));
	/* the engine refuses it on read (every read checked) */
	struct strata_store *s;
	assert_int_equal(strata_store_open(test_path("bad"), &s, &err), 0);
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	ec.use_gpu = 0;
	ec.budget[0] = 0;
	ec.budget[1] = 0;
	ec.place = "cache";
	ec.verify = STRATA_VERIFY_EVERY;
	ec.on_miss = "lowbit:gate=0.5";
	struct strata_engine *e;
	assert_int_equal(strata_engine_open(s, &ec, &e, &err), 0);
	float g = 0.1f;
	const void *p;
	assert_int_equal(strata_engine_set_gates(e, &g, 1, &err), 0);
	assert_int_equal(strata_engine_acquire(e, 0, &h, 1, &p, &err), STRATA_ECORRUPT);
	assert_non_null(strstr(err.msg, "shard-00000.strata"));
	strata_engine_close(e);
	strata_store_close(s);
	/* truncated inside the last extent */
	assert_int_equal(ftruncate(fd, lseek(fd, 0, SEEK_END) - 4096), 0);
	close(fd);
	assert_int_equal(strata_store_open(test_path("bad"), &s, &err), STRATA_ECORRUPT);
	assert_non_null(strstr(err.msg, "truncated"));
	/* header fields: parse a copy of shard 0's header, changed, without its checksum */
	snprintf(shard, sizeof(shard), "%s/shard-00000.strata", test_path("m"));
	FILE *f = fopen(shard, "rb");
	assert_non_null(f);
	uint8_t fixed[STRATA_SHARD_FIXED_BYTES];
	assert_int_equal(fread(fixed, 1, sizeof(fixed), f), sizeof(fixed));
	uint64_t hsize = strata_le_get64(fixed + 16);
	uint8_t *hdr = malloc(hsize), *m = malloc(hsize);
	assert_int_equal(fseek(f, 0, SEEK_SET), 0);
	assert_int_equal(fread(hdr, 1, hsize, f), hsize);
	fclose(f);
	struct strata_shard_header *sh;
	assert_int_equal(strata_store_parse_header(hdr, hsize, 0, "x", 0, &sh, &err), 0);
	uint32_t nexp = sh->n_experts, ncopy = sh->n_copies;
	assert_int_equal(sh->flags, STRATA_SHARD_F_COPIES);
	struct strata_store_tier_summary sum;
	strata_store_summary(st, &sum);
	assert_int_equal(ncopy, sum.copies); /* one shard */
	assert_true(ncopy >= 2);
	strata_store_header_free(sh);
	uint64_t exp_off = strata_le_get64(hdr + 96);
	uint8_t *rec = m + exp_off + (uint64_t)nexp * STRATA_SHARD_EXPERT_REC; /* the first copy */
	struct {
		const char *what, *msg;
		int code;
	} cases[] = {
		{ "unknown flag", "unknown feature flags", STRATA_EVERSION },
		{ "no flag", "without the copies flag", STRATA_ECORRUPT },
		{ "bad format", "not a packed format smaller", STRATA_ECORRUPT },
		{ "copy of a missing expert", "outside the model", STRATA_ECORRUPT },
		{ "copy twice", "listed twice", STRATA_ECORRUPT },
		{ "misaligned", "misaligned", STRATA_ECORRUPT },
	};
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(m, hdr, hsize);
		switch (i) {
		case 0: strata_le_put32(m + 60, STRATA_SHARD_F_COPIES | 4); break;
		case 1: strata_le_put32(m + 60, 0); break;
		case 2: strata_le_put32(rec + 8, STRATA_FMT_BF16); break;
		case 3: strata_le_put32(rec, 9); break;
		case 4: memcpy(rec + STRATA_SHARD_EXPERT_REC, rec, 8); break;
		case 5: strata_le_put64(rec + 16, strata_le_get64(rec + 16) + 8); break;
		}
		int rc = strata_store_parse_header(m, hsize, 0, "x", STRATA_PARSE_NO_CHECKSUM, &sh, &err);
		print_message("%s: %s\n", cases[i].what, err.msg);
		assert_int_equal(rc, cases[i].code);
		assert_non_null(strstr(err.msg, cases[i].msg));
	}
	free(hdr);
	free(m);
}

/* One acquire of a single expert with gate weight g (NAN: no gates given). */
static int step1(struct strata_engine *e, uint32_t x, float g, const void **p, struct strata_error *err)
{
	if (!isnan(g) && strata_engine_set_gates(e, &g, 1, err))
		return -1;
	return strata_engine_acquire(e, 0, &x, 1, p, err);
}

static void test_engine_decisions(void **state)
{
	struct strata_error err = { 0 };
	uint32_t hot = expert_in(STRATA_TIER_VRAM), warm = expert_in(STRATA_TIER_RAM), cold = expert_in(STRATA_TIER_NVME);
	const struct strata_extent *cx = strata_store_copy(st, 0, warm);
	uint64_t eb = strata_store_expert(st, 0, warm)->bytes;
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	ec.use_gpu = 0;
	ec.place = "cache";
	ec.budget[0] = 4 * strata_store_expert(st, 0, hot)->bytes;
	ec.budget[1] = 0;
	ec.on_miss = "lowbit:gate=0.3";
	ec.verify = STRATA_VERIFY_EVERY;
	struct strata_engine *e;
	assert_int_equal(strata_engine_open(st, &ec, &e, &err), 0);
	assert_non_null(strstr(strata_engine_name(e), "on_miss=lowbit-gate=0.3"));
	const struct strata_engine_stats *s = strata_engine_stats(e);
	const void *p;
	/* a miss from NVMe with a low gate weight: the copy, read from its extent */
	assert_int_equal(step1(e, warm, 0.1f, &p, &err), 0);
	assert_int_equal(s->substituted, 1);
	assert_int_equal(s->hits[STRATA_TIER_NVME], 1);
	assert_int_equal(strata_engine_served_fmt(e, 0, warm), STRATA_FMT_COLD);
	assert_int_equal(s->bytes_nvme_vram, cx->bytes);
	assert_int_equal(s->substitute_bytes, cx->bytes);
	assert_int_equal(s->substitute_bytes_saved, eb - cx->bytes);
	void *buf = strata_aligned_alloc(STRATA_EXTENT_ALIGN, cx->bytes);
	assert_int_equal(strata_store_read_extent(st, cx, buf, false, true, &err), 0);
	assert_memory_equal(p, buf, cx->payload);
	free(buf);
	assert_int_equal(strata_engine_release(e, 0, 0, &warm, 1, &err), 0);
	/* nothing was admitted: the next access misses again; a high gate weight fetches it whole */
	assert_int_equal(step1(e, warm, 0.5f, &p, &err), 0);
	assert_int_equal(s->substituted, 1);
	assert_int_equal(s->hits[STRATA_TIER_NVME], 2);
	assert_int_equal(strata_engine_served_fmt(e, 0, warm), STRATA_FMT_WARM);
	assert_int_equal(strata_engine_release(e, 1, 0, &warm, 1, &err), 0);
	/* resident now: a low gate weight changes nothing */
	assert_int_equal(step1(e, warm, 0.1f, &p, &err), 0);
	assert_int_equal(s->substituted, 1);
	assert_int_equal(s->hits[STRATA_TIER_VRAM], 1);
	assert_int_equal(strata_engine_served_fmt(e, 0, warm), STRATA_FMT_WARM);
	assert_int_equal(strata_engine_release(e, 2, 0, &warm, 1, &err), 0);
	/* a cold expert has no copy; without gate weights nothing substitutes; a gate weight at
	 * the threshold is not below it */
	assert_int_equal(step1(e, cold, 0.1f, &p, &err), 0);
	assert_int_equal(strata_engine_release(e, 3, 0, &cold, 1, &err), 0);
	assert_int_equal(step1(e, hot, NAN, &p, &err), 0);
	assert_int_equal(strata_engine_release(e, 4, 0, &hot, 1, &err), 0);
	uint32_t hot2 = strata_store_copy(st, 1, hot) ? hot + 8 : 0; /* layer 1, another expert with a copy */
	for (uint32_t x = 8; x < 16 && !hot2; x++)
		if (strata_store_copy(st, 1, x - 8))
			hot2 = x;
	float g = 0.3f;
	uint32_t x1 = hot2 - 8;
	assert_int_equal(strata_engine_set_gates(e, &g, 1, &err), 0);
	assert_int_equal(strata_engine_acquire(e, 1, &x1, 1, &p, &err), 0);
	assert_int_equal(strata_engine_release(e, 5, 1, &x1, 1, &err), 0);
	assert_int_equal(s->substituted, 1);
	/* gate weights are for one acquire: the next one without them fetches whole */
	assert_int_equal(strata_engine_set_gates(e, &(float){ 0.01f }, 1, &err), 0);
	assert_int_equal(strata_engine_acquire(e, 1, &x1, 1, &p, &err), 0); /* resident: a hit */
	assert_int_equal(strata_engine_release(e, 6, 1, &x1, 1, &err), 0);
	assert_int_equal(s->hits[STRATA_TIER_VRAM], 2);
	assert_int_equal(s->substituted, 1);
	/* a step of two: only the low-gate miss with a copy substitutes, in its slot */
	uint32_t two[2] = { hot, cold };
	float g2[2] = { 0.05f, 0.05f };
	strata_engine_close(e);
	assert_int_equal(strata_engine_open(st, &ec, &e, &err), 0);
	s = strata_engine_stats(e);
	const void *pp[2];
	assert_int_equal(strata_engine_set_gates(e, g2, 2, &err), 0);
	assert_int_equal(strata_engine_acquire(e, 0, two, 2, pp, &err), 0);
	assert_int_equal(s->substituted, 1);
	assert_int_equal(strata_engine_served_fmt(e, 0, hot), STRATA_FMT_COLD);
	assert_int_equal(strata_engine_served_fmt(e, 0, cold), STRATA_FMT_COLD); /* its own format */
	assert_int_equal(strata_engine_release(e, 0, 0, two, 2, &err), 0);
	assert_int_equal(strata_engine_served_fmt(e, 0, hot), STRATA_FMT_HOT);
	strata_engine_close(e);
}

/* from=nvme: a RAM-tier hit is not a stall; from=ram: it is. */
static void test_engine_from(void **state)
{
	struct strata_error err = { 0 };
	uint32_t hot = expert_in(STRATA_TIER_VRAM), warm = expert_in(STRATA_TIER_RAM);
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	ec.mode = STRATA_ENGINE_VIRTUAL;
	ec.place = "static"; /* hot experts preloaded in VRAM, warm ones in RAM */
	ec.budget[0] = 64u << 20;
	ec.budget[1] = 64u << 20;
	const char *specs[2] = { "lowbit", "lowbit:from=ram" };
	for (int i = 0; i < 2; i++) {
		ec.on_miss = specs[i];
		struct strata_engine *e;
		assert_int_equal(strata_engine_open(st, &ec, &e, &err), 0);
		const struct strata_engine_stats *s = strata_engine_stats(e);
		assert_int_equal(step1(e, warm, 0.01f, NULL, &err), 0);
		assert_int_equal(s->hits[STRATA_TIER_RAM], 1);
		assert_int_equal(s->substituted, (uint64_t)i);
		assert_int_equal(strata_engine_release(e, 0, 0, &warm, 1, &err), 0);
		assert_int_equal(step1(e, hot, 0.01f, NULL, &err), 0); /* in VRAM: never */
		assert_int_equal(s->hits[STRATA_TIER_VRAM], 1);
		assert_int_equal(s->substituted, (uint64_t)i);
		assert_int_equal(strata_engine_release(e, 1, 0, &hot, 1, &err), 0);
		strata_engine_close(e);
	}
}

static void test_engine_bad_spec(void **state)
{
	struct strata_error err = { 0 };
	struct strata_engine_config ec;
	strata_engine_config_defaults(&ec);
	ec.mode = STRATA_ENGINE_VIRTUAL;
	ec.budget[0] = 8u << 20;
	ec.budget[1] = 8u << 20;
	struct {
		const char *spec, *msg;
	} bad[] = {
		{ "lowbit:gat=0.1", "gat" }, { "halfbit", "unknown" }, { "lowbit:gate=2", "gate" },
		{ "lowbit:from=disk", "disk" }, { "full:gate=0.1", "gate" },
	};
	struct strata_engine *e;
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ec.on_miss = bad[i].spec;
		assert_int_equal(strata_engine_open(st, &ec, &e, &err), STRATA_EINVAL);
		print_message("%s: %s\n", bad[i].spec, err.msg);
		assert_non_null(strstr(err.msg, bad[i].msg));
	}
	ec.on_miss = "full";
	assert_int_equal(strata_engine_open(st, &ec, &e, &err), 0);
	assert_false(strata_engine_reads_gates(e));
	strata_engine_close(e);
	/* a store without copies */
	struct strata_store *plain;
	assert_int_equal(strata_store_open(test_path("plain"), &plain, &err), 0);
	ec.on_miss = "lowbit";
	assert_int_equal(strata_engine_open(plain, &ec, &e, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "--lowbit-copies"));
	assert_non_null(strstr(err.msg, test_path("plain")));
	strata_store_close(plain);
	/* the CLI says the same */
	char out[4096];
	assert_int_equal(test_run(out, sizeof(out), "%s sim --model %s --trace %s --on-miss lowbit:gate=x",
				  test_bin("strata"), test_path("m"), test_path("t.jsonl")), 1);
	assert_non_null(strstr(out, "gate"));
}

static void replay_cfg(struct strata_replay_config *c, int virt, const char *on_miss)
{
	strata_replay_config_defaults(c);
	c->model_dir = test_path("m");
	c->trace_path = test_path("t.jsonl");
	c->engine.mode = virt ? STRATA_ENGINE_VIRTUAL : STRATA_ENGINE_REAL;
	c->engine.use_gpu = 0;
	c->engine.place = "cache";
	c->engine.evict = "lru";
	c->engine.budget[0] = 3 * strata_store_expert(st, 0, expert_in(STRATA_TIER_VRAM))->bytes;
	c->engine.budget[1] = 0;
	c->engine.on_miss = on_miss;
	c->compute = virt ? STRATA_COMPUTE_NONE : STRATA_COMPUTE_REF;
}

/* sim and replay substitute the same accesses; golden counters; bounds hold. */
static void test_replay_golden(void **state)
{
	struct strata_error err = { 0 };
	struct strata_replay_config c;
	struct strata_replay_result full, sim, real, all;
	replay_cfg(&c, 1, NULL);
	assert_int_equal(strata_replay_run(&c, &full, &err), 0);
	replay_cfg(&c, 1, "lowbit:gate=0.3");
	assert_int_equal(strata_replay_run(&c, &sim, &err), 0);
	replay_cfg(&c, 0, "lowbit:gate=0.3");
	assert_int_equal(strata_replay_run(&c, &real, &err), 0);
	const struct strata_engine_stats *a = &sim.stats, *b = &real.stats;
	assert_int_equal(a->accesses, b->accesses);
	for (int i = 0; i < 3; i++)
		assert_int_equal(a->hits[i], b->hits[i]);
	assert_int_equal(a->bytes_nvme_vram, b->bytes_nvme_vram);
	assert_int_equal(a->substituted, b->substituted);
	assert_int_equal(a->substitute_bytes, b->substitute_bytes);
	assert_int_equal(a->substitute_bytes_saved, b->substitute_bytes_saved);
	assert_int_equal(a->moves_vram, b->moves_vram);
	assert_int_equal(a->evictions[0], b->evictions[0]);
	assert_int_equal(full.stats.substituted, 0);
	assert_int_equal(sim.bound_violations, 0);
	assert_int_equal(real.bound_violations, 0);
	assert_int_equal(full.bound_violations, 0);
	/* only gate 0.2 (even tokens' second slot) is below 0.3: at most one per (token, layer), and
	 * only on experts with a copy; the bytes moved shrink by what the copies saved */
	assert_true(a->substituted > 0 && a->substituted <= 24 * 2);
	assert_true(a->bytes_nvme_vram < full.stats.bytes_nvme_vram);
	print_message("golden: accesses %llu, hits %llu/%llu/%llu, substituted %llu, copy bytes %llu, saved %llu, "
		      "moves_vram %llu\n", (unsigned long long)a->accesses, (unsigned long long)a->hits[0],
		      (unsigned long long)a->hits[1], (unsigned long long)a->hits[2], (unsigned long long)a->substituted,
		      (unsigned long long)a->substitute_bytes, (unsigned long long)a->substitute_bytes_saved,
		      (unsigned long long)a->moves_vram);
	assert_int_equal(a->accesses, 96);
	assert_int_equal(a->substituted, GOLDEN_SUBSTITUTED);
	assert_int_equal(a->hits[0], GOLDEN_HITS_VRAM);
	assert_int_equal(a->moves_vram, GOLDEN_MOVES_VRAM);
	/* VRAM budget 0 streams everything from NVMe: every low-gate access with a copy substitutes */
	replay_cfg(&c, 1, "lowbit:gate=0.3");
	c.engine.budget[0] = 0;
	assert_int_equal(strata_replay_run(&c, &all, &err), 0);
	uint64_t want = 0;
	for (int t = 0; t < 24; t += 2) /* even tokens: slot 1 has weight 0.2 */
		want += (strata_store_copy(st, 0, (t + 5) % 8) != NULL) + (strata_store_copy(st, 1, (t + 8) % 8) != NULL);
	assert_int_equal(all.stats.substituted, want);
	assert_int_equal(all.bound_violations, 0);
	/* gate weights of 1: every NVMe miss of an expert with a copy; 0: none */
	replay_cfg(&c, 1, "lowbit:gate=0");
	assert_int_equal(strata_replay_run(&c, &all, &err), 0);
	assert_int_equal(all.stats.substituted, 0);
	assert_int_equal(all.stats.hits[0], full.stats.hits[0]);
	/* the CSV and JSON carry the counters */
	char out[8192];
	assert_int_equal(test_run(out, sizeof(out), "%s sim -q --model %s --trace %s --vram 0 --place cache "
				  "--on-miss lowbit:gate=0.3 --csv -", test_bin("strata"), test_path("m"),
				  test_path("t.jsonl")), 0);
	assert_non_null(strstr(out, "substituted,substitute_bytes,substitute_bytes_saved"));
	assert_non_null(strstr(out, "on_miss=lowbit-gate=0.3"));
	/* a study sweeps it as a configuration key */
	FILE *f = fopen(test_path("s.lua"), "w");
	assert_non_null(f);
	fprintf(f, "local rows = strata.sweep{ configs = strata.product{ mode = {\"sim\"}, model = {\"%s\"}, "
		"trace = {\"%s\"}, vram = {\"200K\"}, place = {\"cache\"}, on_miss = {\"full\", \"lowbit:gate=0.3\"} }, "
		"out = \"%s\" }\nfor _, r in ipairs(rows) do print(r.config, r.substituted) end\n",
		test_path("m"), test_path("t.jsonl"), test_path("s.csv"));
	fclose(f);
	assert_int_equal(test_run(out, sizeof(out), "%s run %s", test_bin("strata"), test_path("s.lua")), 0);
	assert_non_null(strstr(out, "on_miss=lowbit-gate=0.3"));
}

static void test_quantize_copies(void **state)
{
	char out[16384];
	assert_int_equal(test_run(out, sizeof(out), "%s quantize --make-test-model %s --spec tiny", test_bin("strata"),
				  test_path("hf")), 0);
	assert_int_equal(test_run(out, sizeof(out), "%s quantize --in %s --out %s --lowbit-copies --no-progress --json",
				  test_bin("strata"), test_path("hf"), test_path("q")), 0);
	assert_int_equal(test_run(out, sizeof(out), "%s inspect %s --json --verify", test_bin("strata"), test_path("q")),
			 0);
	const char *p = strstr(out, "\"lowbit_copies\":");
	assert_non_null(p);
	assert_true(atoi(p + strlen("\"lowbit_copies\":")) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_copies),     cmocka_unit_test(test_store_bad_copies),
		cmocka_unit_test(test_engine_decisions), cmocka_unit_test(test_engine_from),
		cmocka_unit_test(test_engine_bad_spec),  cmocka_unit_test(test_replay_golden),
		cmocka_unit_test(test_quantize_copies),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
