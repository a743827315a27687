/* Tiers: the extent allocator (budgets, coalescing, fragmentation under a
 * mixed-size cache workload) and the tier backings. */
#include <numa.h>
#include <stdlib.h>
#include <string.h>

#include "strata/tier_mem.h"
#include "strata/store.h"
#include "testutil.h"

#define K4 4096ull

static void test_arena_basic(void **state)
{
	struct strata_arena a;
	uint64_t o[8];
	assert_int_equal(strata_arena_init(&a, 10 * K4 + 100, NULL), 0);
	assert_true(a.size == 10 * K4); /* rounded down: never past the budget */
	assert_int_equal(strata_arena_reserve(&a, 3 * K4, &o[0]), 0);
	assert_int_equal(strata_arena_reserve(&a, 1, &o[1]), 0); /* rounds to 4 KiB */
	assert_int_equal(strata_arena_reserve(&a, 6 * K4, &o[2]), 0);
	assert_true(a.used == 10 * K4);
	assert_int_equal(strata_arena_reserve(&a, 1, &o[3]), STRATA_EBUDGET);
	assert_int_equal(strata_arena_check(&a), 0);
	strata_arena_release(&a, o[1], 1);
	assert_int_equal(strata_arena_check(&a), 0);
	assert_int_equal(strata_arena_reserve(&a, 2 * K4, &o[3]), STRATA_EBUDGET); /* 1 page free */
	strata_arena_release(&a, o[0], 3 * K4);  /* coalesces with the freed page */
	assert_int_equal(a.n_free, 1);
	assert_true(strata_arena_largest_free(&a) == 4 * K4);
	strata_arena_release(&a, o[2], 6 * K4);
	assert_int_equal(a.n_free, 1);
	struct strata_span h[2];
	assert_int_equal(strata_arena_holes(&a, h, 2), 1);
	assert_true(a.used == 0 && h[0].off == 0 && h[0].len == 10 * K4);
	assert_true(strata_arena_largest_free(&a) == 10 * K4);
	assert_int_equal(strata_arena_check(&a), 0);
	strata_arena_free(&a);

	/* budget 0: nothing fits, nothing breaks */
	assert_int_equal(strata_arena_init(&a, 0, NULL), 0);
	assert_int_equal(strata_arena_reserve(&a, K4, &o[0]), STRATA_EBUDGET);
	strata_arena_free(&a);
}

static void test_arena_best_fit(void **state)
{
	struct strata_arena a;
	uint64_t o[6], x;
	strata_arena_init(&a, 20 * K4, NULL);
	for (int i = 0; i < 5; i++)
		strata_arena_reserve(&a, 4 * K4, &o[i]);
	strata_arena_release(&a, o[1], 4 * K4); /* hole of 4 */
	strata_arena_release(&a, o[3], 4 * K4); /* hole of 4 */
	strata_arena_release(&a, o[4], 4 * K4); /* coalesced with hole 3: 8 */
	assert_int_equal(strata_arena_reserve(&a, 4 * K4, &x), 0);
	assert_true(x == o[1]); /* exact fit preferred over the larger hole */
	assert_int_equal(strata_arena_reserve(&a, 8 * K4, &x), 0);
	assert_true(x == o[3]);
	assert_int_equal(strata_arena_check(&a), 0);
	strata_arena_free(&a);
}

/* A cache of experts of three extent sizes (the Kimi-shaped hot/warm/cold
 * ratio 90:82:46) under random accesses, evicting random residents until a
 * miss fits.  Fragmentation shows as bytes free but unusable when a request
 * fails, and as more than one eviction per miss; best fit must keep both
 * small, and the budget is never exceeded. */
static void test_arena_fragmentation(void **state)
{
	enum { N = 600 };
	uint64_t size[N], off[N];
	uint8_t in[N] = { 0 };
	uint32_t res[N], n_res = 0;
	const uint64_t sz[3] = { 90 * 8 * K4, 82 * 8 * K4, 46 * 8 * K4 };
	for (int i = 0; i < N; i++)
		size[i] = sz[i % 3];
	struct strata_arena a;
	uint64_t budget = 150 * sz[1];
	strata_arena_init(&a, budget, NULL);
	uint64_t seed = 42, fails = 0, misses = 0, frag_sum = 0, frag_n = 0;
	for (int step = 0; step < 20000; step++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t e = (uint32_t)((seed >> 33) % N);
		if (in[e])
			continue;
		int first = 1;
		misses++;
		while (strata_arena_reserve(&a, size[e], &off[e]) != STRATA_OK) {
			uint64_t free_b = a.size - a.used;
			if (first && misses > 1000) { /* steady state */
				frag_sum += free_b * 1000 / a.size;
				frag_n++;
			}
			first = 0;
			fails++;
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			uint32_t k = (uint32_t)((seed >> 33) % n_res), v = res[k];
			res[k] = res[--n_res];
			in[v] = 0;
			strata_arena_release(&a, off[v], size[v]);
		}
		in[e] = 1;
		res[n_res++] = e;
		assert_true(a.used <= budget);
	}
	assert_int_equal(strata_arena_check(&a), 0);
	double per_miss = (double)fails / (double)misses;
	double mean_free = frag_n ? (double)frag_sum / frag_n / 10.0 : 0;
	print_message("fragmentation: %.2f evictions per miss; free but unusable when a fit failed: "
		      "%.1f%% of the tier\n", per_miss, mean_free);
	assert_true(per_miss < 1.6);
	assert_true(mean_free < 12.0);
	strata_arena_free(&a);
}

/* The allocator against a reference: a linear best-fit scan over a sorted
 * array of holes (the allocator's first form, whose decisions the engine's
 * golden counters were recorded with).  Same offsets for every request,
 * same holes after every step, under random sizes and random releases. */
struct ref_arena {
	struct strata_span s[4096];
	uint32_t n;
	uint64_t used, size;
};

static int ref_reserve(struct ref_arena *r, uint64_t bytes, uint64_t *off)
{
	bytes = (bytes + K4 - 1) / K4 * K4;
	uint32_t best = UINT32_MAX;
	uint64_t best_len = UINT64_MAX;
	for (uint32_t i = 0; i < r->n; i++)
		if (r->s[i].len >= bytes && r->s[i].len < best_len) {
			best = i;
			best_len = r->s[i].len;
		}
	if (best == UINT32_MAX)
		return STRATA_EBUDGET;
	*off = r->s[best].off;
	r->s[best].off += bytes;
	r->s[best].len -= bytes;
	if (!r->s[best].len) {
		memmove(&r->s[best], &r->s[best + 1], sizeof(r->s[0]) * (r->n - best - 1));
		r->n--;
	}
	r->used += bytes;
	return STRATA_OK;
}

static void ref_release(struct ref_arena *r, uint64_t off, uint64_t bytes)
{
	bytes = (bytes + K4 - 1) / K4 * K4;
	uint32_t i = 0;
	while (i < r->n && r->s[i].off < off)
		i++;
	bool mp = i > 0 && r->s[i - 1].off + r->s[i - 1].len == off;
	bool mn = i < r->n && off + bytes == r->s[i].off;
	r->used -= bytes;
	if (mp && mn) {
		r->s[i - 1].len += bytes + r->s[i].len;
		memmove(&r->s[i], &r->s[i + 1], sizeof(r->s[0]) * (r->n - i - 1));
		r->n--;
	} else if (mp) {
		r->s[i - 1].len += bytes;
	} else if (mn) {
		r->s[i].off = off;
		r->s[i].len += bytes;
	} else {
		memmove(&r->s[i + 1], &r->s[i], sizeof(r->s[0]) * (r->n - i));
		r->s[i] = (struct strata_span){ off, bytes };
		r->n++;
	}
}

static void arena_give_back(struct strata_arena *a, uint32_t e, const uint64_t *off, const uint64_t *size,
			    const uint32_t *hnd)
{
	if (e % 2)
		strata_arena_release_h(a, hnd[e]);
	else
		strata_arena_release(a, off[e], size[e]);
}

static void test_arena_matches_linear_best_fit(void **state)
{
	enum { N = 3000 };
	static struct ref_arena ref;
	static struct strata_span holes[4096];
	static uint64_t size[N], off[N], roff[N];
	static uint32_t hnd[N];
	static uint8_t in[N];
	static uint32_t res[N];
	const uint64_t sz[4] = { 90 * 2 * K4, 82 * 2 * K4, 46 * 2 * K4, K4 };
	for (int round = 0; round < 2; round++) {
		uint64_t seed = 7 + (uint64_t)round;
		for (int i = 0; i < N; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			/* round 0: the engine's case, a few sizes; round 1: any size */
			size[i] = round == 0 ? sz[i % 4] : 1 + (seed >> 33) % (200 * K4);
		}
		memset(in, 0, sizeof(in));
		uint32_t n_res = 0;
		struct strata_arena a;
		uint64_t budget = 700 * 82 * 2 * K4 + 3 * K4;
		assert_int_equal(strata_arena_init(&a, budget, NULL), 0);
		memset(&ref, 0, sizeof(ref));
		ref.size = a.size;
		ref.s[0] = (struct strata_span){ 0, a.size };
		ref.n = 1;
		uint64_t evictions = 0;
		for (int step = 0; step < 60000; step++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			uint32_t e = (uint32_t)((seed >> 33) % N);
			if (in[e]) {
				if (seed & 1) /* sometimes free one outright */
					continue;
				for (uint32_t k = 0; k < n_res; k++)
					if (res[k] == e) {
						res[k] = res[--n_res];
						break;
					}
				in[e] = 0;
				arena_give_back(&a, e, off, size, hnd);
				ref_release(&ref, roff[e], size[e]);
				continue;
			}
			for (;;) {
				/* odd experts by handle (as the engine does), even ones by offset */
				int rc = e % 2 ? strata_arena_reserve_h(&a, size[e], &off[e], &hnd[e])
					       : strata_arena_reserve(&a, size[e], &off[e]);
				int rr = ref_reserve(&ref, size[e], &roff[e]);
				assert_int_equal(rc, rr);
				if (rc == STRATA_OK) {
					assert_true(off[e] == roff[e]);
					break;
				}
				assert_true(strata_arena_largest_free(&a) < (size[e] + K4 - 1) / K4 * K4);
				seed = seed * 6364136223846793005ull + 1442695040888963407ull;
				uint32_t k = (uint32_t)((seed >> 33) % n_res), v = res[k];
				res[k] = res[--n_res];
				in[v] = 0;
				arena_give_back(&a, v, off, size, hnd);
				ref_release(&ref, roff[v], size[v]);
				evictions++;
			}
			in[e] = 1;
			res[n_res++] = e;
			if (step % 997 == 0) {
				assert_int_equal(strata_arena_check(&a), 0);
				assert_int_equal(a.n_free, ref.n);
				assert_int_equal(strata_arena_holes(&a, holes, 4096), ref.n);
				for (uint32_t i = 0; i < ref.n; i++)
					assert_true(holes[i].off == ref.s[i].off && holes[i].len == ref.s[i].len);
			}
		}
		assert_true(a.used == ref.used);
		assert_int_equal(strata_arena_check(&a), 0);
		assert_true(evictions > 1000);
		strata_arena_free(&a);
	}
}

/* Room by moving extents (strata_arena_plan_room / reserve_in, and
 * strata_arena_slide_plan / slide): a mixed-size workload where a request
 * that the free bytes hold but no hole does is served by a plan; the arena
 * stays consistent, each extent's bytes follow it (a shadow buffer), fixed
 * extents never move, and the plan's room really holds the request. */
struct room_rec {
	uint64_t off, len;
	uint32_t h;
	bool live;
};
static struct room_rec room_recs[256];
static uint8_t *room_buf;

static bool room_fixed(void *ctx, uint32_t tag)
{
	(void)ctx;
	return tag % 7 == 0;
}

static void room_move(void *ctx, uint32_t tag, uint64_t from, uint64_t to, uint64_t len)
{
	(void)ctx;
	assert_true(tag < 256 && room_recs[tag].live && room_recs[tag].off == from && !room_fixed(NULL, tag));
	assert_true(to < from && len == room_recs[tag].len);
	memmove(room_buf + to, room_buf + from, len);
	room_recs[tag].off = to;
}

static void test_arena_room(void **state)
{
	const uint64_t pages = 200, sizes[3] = { 3 * K4, 5 * K4, 7 * K4 };
	struct strata_arena a;
	assert_int_equal(strata_arena_init(&a, pages * K4, NULL), 0);
	room_buf = calloc(pages, K4);
	memset(room_recs, 0, sizeof(room_recs));
	uint64_t x = 12345, planned = 0, slid = 0;
	for (int it = 0; it < 4000; it++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t tag = (uint32_t)(x >> 33) % 255 + 1;
		struct room_rec *r = &room_recs[tag];
		if (r->live) { /* give it back */
			for (uint64_t i = 0; i < r->len; i++)
				assert_int_equal(room_buf[r->off + i], (uint8_t)tag);
			strata_arena_release_h(&a, r->h);
			r->live = false;
		} else {
			uint64_t len = sizes[(x >> 20) % 3], off;
			uint32_t h;
			int rc = strata_arena_reserve_h(&a, len, &off, &h);
			if (rc == STRATA_EBUDGET) {
				struct strata_arena_plan p;
				uint32_t first, last;
				uint64_t moved;
				if (!strata_arena_plan_room(&a, len, room_fixed, NULL, &p)) {
					assert_true(p.n >= 1 && p.n <= STRATA_ARENA_MOVES);
					uint64_t sum = 0;
					for (uint32_t i = 0; i < p.n; i++) {
						uint32_t t = a.blk[p.h[i]].tag;
						struct room_rec *q = &room_recs[t];
						assert_true(q->live && q->h == p.h[i] && !room_fixed(NULL, t));
						uint64_t no;
						uint32_t nh;
						assert_int_equal(strata_arena_reserve_in(&a, p.to[i], q->len, &no, &nh), 0);
						memcpy(room_buf + no, room_buf + q->off, q->len);
						strata_arena_release_h(&a, q->h);
						strata_arena_set_tag(&a, nh, t);
						q->h = nh;
						q->off = no;
						sum += q->len;
					}
					assert_true(sum == p.moved);
					planned++;
				} else if (!strata_arena_slide_plan(&a, len, room_fixed, NULL, &first, &last, &moved)) {
					assert_int_equal(strata_arena_slide(&a, first, last, room_move, NULL), 0);
					slid++;
				} else {
					assert_int_equal(strata_arena_check(&a), 0);
					continue;
				}
				assert_int_equal(strata_arena_check(&a), 0);
				rc = strata_arena_reserve_h(&a, len, &off, &h);
				assert_int_equal(rc, 0); /* the room holds it */
			}
			assert_int_equal(rc, 0);
			strata_arena_set_tag(&a, h, tag);
			*r = (struct room_rec){ .off = off, .len = len, .h = h, .live = true };
			memset(room_buf + off, (int)tag, len);
		}
		assert_int_equal(strata_arena_check(&a), 0);
	}
	for (uint32_t t = 1; t < 256; t++)
		if (room_recs[t].live)
			for (uint64_t i = 0; i < room_recs[t].len; i++)
				assert_int_equal(room_buf[room_recs[t].off + i], (uint8_t)t);
	print_message("room: %llu plans moving extents elsewhere, %llu slides\n", (unsigned long long)planned,
		      (unsigned long long)slid);
	assert_true(planned > 0 && slid > 0);
	free(room_buf);
	strata_arena_free(&a);
}

/* strata_arena_copy_down's copies on a host buffer: none overlaps itself,
 * a piece goes through the bounce buffer before its place is written. */
static uint8_t *cd_buf, cd_bounce[64 * K4];
static uint64_t cd_copies, cd_cap;
static int cd_copy(void *ctx, uint64_t dst, uint64_t src, uint64_t n)
{
	(void)ctx;
	assert_true(n > 0 && n <= (dst == STRATA_ARENA_BOUNCE || src == STRATA_ARENA_BOUNCE ? cd_cap : UINT64_MAX));
	uint8_t *d = dst == STRATA_ARENA_BOUNCE ? cd_bounce : cd_buf + dst;
	const uint8_t *s = src == STRATA_ARENA_BOUNCE ? cd_bounce : cd_buf + src;
	assert_true(d + n <= s || s + n <= d); /* one copy never overlaps itself */
	memcpy(d, s, n);
	cd_copies++;
	return 0;
}

static void cd_slide_move(void *ctx, uint32_t tag, uint64_t from, uint64_t to, uint64_t len)
{
	uint64_t *traffic = ctx, t;
	(void)tag;
	assert_int_equal(strata_arena_copy_down(from, to, len, cd_cap, cd_copy, NULL, &t), 0);
	*traffic += t;
}

static bool cd_fixed(void *ctx, uint32_t tag)
{
	(void)ctx, (void)tag;
	return false;
}

static void test_arena_copy_down(void **state)
{
	const uint64_t size = 256 * K4;
	cd_buf = malloc(size);
	uint8_t *want = malloc(size);
	/* every shift against pieces of the bounce size and larger */
	const uint64_t lens[] = { 1, K4, 7 * K4 + 5, 40 * K4 }, shifts[] = { 1, 100, K4, 7 * K4 + 5, 41 * K4 },
		       caps[] = { 3 * K4, 8 * K4, 64 * K4 };
	for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
		for (size_t si = 0; si < sizeof(shifts) / sizeof(shifts[0]); si++)
			for (size_t ci = 0; ci < sizeof(caps) / sizeof(caps[0]); ci++) {
				uint64_t len = lens[li], sh = shifts[si], from = 3 * K4 + sh, to = 3 * K4, tr = 0;
				for (uint64_t k = 0; k < size; k++)
					cd_buf[k] = (uint8_t)(k * 131 + k / 251);
				memcpy(want, cd_buf, size);
				memmove(want + to, want + from, len);
				cd_copies = 0;
				cd_cap = caps[ci];
				assert_int_equal(strata_arena_copy_down(from, to, len, cd_cap, cd_copy, NULL, &tr), 0);
				assert_memory_equal(cd_buf + to, want + to, len);
				uint64_t pieces = (len + cd_cap - 1) / cd_cap;
				assert_true(cd_copies <= 2 * pieces);
				assert_true(sh >= len ? cd_copies == 1 && tr == len : tr >= len && tr <= 2 * len);
			}

	/* a slide of seven extents of 7 pages across one-page gaps: at most two
	 * copies per extent with a bounce buffer of an extent, where pieces no
	 * longer than the shift took seven each */
	struct strata_arena a;
	assert_int_equal(strata_arena_init(&a, 64 * K4, NULL), 0); /* no hole at the end */
	uint64_t off[8], gap[8], tag[8], traffic = 0;
	for (int i = 0; i < 8; i++) {
		assert_int_equal(strata_arena_reserve(&a, K4, &gap[i]), 0);
		assert_int_equal(strata_arena_reserve(&a, 7 * K4, &off[i]), 0);
	}
	for (uint64_t k = 0; k < size; k++)
		cd_buf[k] = (uint8_t)(k * 7 + k / 4093);
	for (int i = 0; i < 8; i++) {
		strata_arena_release(&a, gap[i], K4);
		tag[i] = off[i];
	}
	uint32_t first, last;
	uint64_t moved;
	assert_int_equal(strata_arena_slide_plan(&a, 8 * K4, cd_fixed, NULL, &first, &last, &moved), 0);
	assert_true(moved == 49 * K4); /* extents 0-6 move down, the hole ends before 7 */
	cd_copies = 0;
	cd_cap = 7 * K4;
	assert_int_equal(strata_arena_slide(&a, first, last, cd_slide_move, &traffic), 0);
	assert_int_equal(strata_arena_check(&a), 0);
	assert_true(cd_copies <= 2 * 7 && traffic <= 2 * moved);
	for (int i = 0; i < 8; i++) /* extent i slid down by i + 1 pages, 7 stays */
		for (uint64_t k = 0; k < 7 * K4; k++)
			assert_int_equal(cd_buf[tag[i] - (uint64_t)(i < 7 ? i + 1 : 0) * K4 + k],
					 (uint8_t)((tag[i] + k) * 7 + (tag[i] + k) / 4093));
	strata_arena_free(&a);
	free(want);
	free(cd_buf);
	(void)state;
}

static void test_tier_backings(void **state)
{
	struct strata_tier_mem t;
	struct strata_error err = { 0 };
	struct strata_tier_config c = { .kind = STRATA_TIER_VRAM, .backing = STRATA_BACK_HOST,
					.budget = 1 << 20, .numa_node = -1, .gpu_device = -1 };
	assert_int_equal(strata_tier_init(&t, &c, &err), 0);
	assert_non_null(t.base);
	assert_true(((uintptr_t)t.base % STRATA_TIER_ALIGN) == 0);
	uint64_t off;
	assert_int_equal(strata_tier_reserve(&t, 256 << 10, &off), 0);
	memset(strata_tier_ptr(&t, off), 0xab, 256 << 10);
	assert_true(strata_tier_used(&t) == 256 << 10);
	strata_tier_free(&t);

	c.kind = STRATA_TIER_RAM;
	c.backing = STRATA_BACK_PINNED;
	c.lock = true;
	assert_int_equal(strata_tier_init(&t, &c, &err), 0);
	assert_non_null(t.base);
	assert_non_null(strstr(t.desc, "pinned"));
	print_message("%s\n", t.desc);
	memset(t.base, 1, 1 << 20);
	strata_tier_free(&t);

	c.numa_node = 0; /* forced: node 0 always exists */
	c.lock = false;
	assert_int_equal(strata_tier_init(&t, &c, &err), 0);
	print_message("%s\n", t.desc);
	assert_int_equal(t.numa_node, 0);
	assert_non_null(strstr(t.desc, "NUMA node 0 (forced)"));
	assert_non_null(strstr(t.desc, "not locked"));
	strata_tier_free(&t);

	c.numa_node = 999;
	assert_int_equal(strata_tier_init(&t, &c, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "NUMA node 999"));

	c.backing = STRATA_BACK_VIRTUAL;
	c.budget = 1ull << 50; /* a petabyte costs nothing virtually */
	assert_int_equal(strata_tier_init(&t, &c, &err), 0);
	assert_null(t.base);
	assert_int_equal(strata_tier_reserve(&t, 1ull << 40, &off), 0);
	assert_null(strata_tier_ptr(&t, off));
	strata_tier_free(&t);

	c.backing = STRATA_BACK_HOST;
	c.kind = STRATA_TIER_VRAM;
	c.budget = 1ull << 60;
	assert_int_equal(strata_tier_init(&t, &c, &err), STRATA_ENOMEM);
	assert_non_null(strstr(err.msg, "vram tier"));
}

/* The NUMA node of GPU 0: -1 ("none") without a GPU; with one, either a
 * node this host has (libnuma's view), found by hwloc or sysfs, or -1 with
 * "none" (a single-node host, or a platform that does not say).  A device
 * that does not exist has no node. */
static void test_numa_of_gpu(void **state)
{
	const char *how = NULL;
	int node = strata_numa_node_of_gpu(0, &how);
	print_message("GPU 0 NUMA node: %d (%s)\n", node, how);
	assert_non_null(how);
	if (node < 0) {
		assert_int_equal(node, -1);
		assert_string_equal(how, "none");
	} else {
		assert_true(!strcmp(how, "hwloc") || !strcmp(how, "sysfs"));
		assert_true(numa_available() >= 0);
		assert_true(node <= numa_max_node());
		assert_true(numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)node));
	}
	if (!test_have_gpu("numa_of_gpu"))
		assert_int_equal(node, -1);
	assert_int_equal(strata_numa_node_of_gpu(4096, &how), -1);
	assert_string_equal(how, "none");
	assert_int_equal(strata_numa_node_of_gpu(-1, &how), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_arena_basic),
		cmocka_unit_test(test_arena_best_fit),
		cmocka_unit_test(test_arena_fragmentation),
		cmocka_unit_test(test_arena_matches_linear_best_fit),
		cmocka_unit_test(test_arena_room),
		cmocka_unit_test(test_arena_copy_down),
		cmocka_unit_test(test_tier_backings),
		cmocka_unit_test(test_numa_of_gpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
