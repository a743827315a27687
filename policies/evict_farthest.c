/*
 * Farthest next use ("farthest"; called "belady" before issue 16): the victim
 * is the resident, unpinned expert whose next use in the whole run lies
 * farthest ahead, read from env->future (trace replay and simulation know it;
 * live runs do not, so the loader refuses it there).
 *
 * This is Belady's rule applied per tier inside the engine, and it is NOT the
 * offline optimum there, for three reasons (strata/bound.h gives the bounds
 * that are):
 *   - a layer's experts are pinned while it is fetched, so the rule cannot
 *     evict an expert of the running layer even when that is what MIN would
 *     do (one layer, 4 experts, top-2, 2 slots, trace [[3,2]],[[0,1]],[[1,2]]:
 *     1 hit, MIN gets 2, tests/test_conformance.c);
 *   - it cannot choose to stream an expert instead of keeping it (placement
 *     decides that), which MIN with a bypass slot can;
 *   - on the RAM tier it ranks by the next use in the whole trace, not by the
 *     next access that will reach RAM (most are VRAM hits), so it keeps
 *     experts RAM will never serve (0 RAM hits where LRU gets 108).
 * With one expert per layer-step and demand fetching into one tier it is MIN
 * (checked against a brute force in the conformance suite).  Use it as a
 * strong heuristic that knows the future; compare every policy with the
 * bound_* columns instead.
 *
 * Each resident expert's key is its next use, recomputed on every access.
 * Keys are clock values (access positions), so they are indexed by position:
 * a bitmap of occupied positions with two summary levels above it (a bit per
 * word below), and the expert(s) at each position (experts of one position
 * chain; a trace gives each position one expert, so chains are one long).
 * Experts never used again sit in a bitmap over eids.  The victim is the
 * smallest unpinned eid never used again, else the expert at the highest
 * occupied position (ties, which a trace never makes, to the smaller eid),
 * unpinned: a find-last-set over the levels.  An update is two bit flips.
 * The order is exactly (next use descending, eid ascending), the order a
 * heap on those keys gives.
 *
 * If a driver fails to report an access (the engine's RAM tier does not hear
 * of VRAM hits), a key falls into the past and would keep that expert
 * forever.  Keys are never set below the clock, so every occupied position
 * below `now` is such a stale key: victim() scans the positions the clock
 * passed since its last call and refreshes them first.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "strata/policy.h"
#include "strata/types.h"

#define NO_EID UINT32_MAX
#define MAX_POS (1ull << 32) /* positions indexed; a larger clock is an error */

struct bnode {
	uint64_t key;        /* next use, valid while in */
	uint32_t chain;      /* next eid at the same position */
	uint32_t in;         /* resident (tracked) */
};

struct farthest {
	const struct strata_future *f;
	uint32_t n_ids;
	struct bnode *node;  /* per eid */
	uint64_t *never;     /* bit per eid: resident, never used again */
	uint64_t *never_sum; /* bit per non-zero word of never */
	/* by position */
	uint64_t cap;        /* positions covered, a multiple of 64^3 */
	uint64_t *l0, *l1, *l2; /* occupied positions; a bit per non-zero word below */
	uint32_t *at;        /* per position: first eid there */
	uint64_t scan;       /* no key lies below this position */
	bool failed;
	int64_t backed;      /* option: prefer victims with a copy in RAM */
	const uint8_t *below; /* VRAM instance with backed: RAM's residency flags */
};

static const struct strata_option farthest_options[] = {
	{ .name = "backed", .type = STRATA_OPT_BOOL, .offset = offsetof(struct farthest, backed), .def = "0",
	  .help = "VRAM: evict experts with a copy in RAM (a copy brings them back, not a disk read) before the "
		  "others, each group farthest first" },
	{ .name = NULL },
};

static int farthest_init(struct strata_policy *p, struct strata_error *err)
{
	struct farthest *b = p->priv;
	uint32_t n = p->env->n_ids ? p->env->n_ids : 1;
	b->f = p->env->future;
	b->n_ids = p->env->n_ids;
	b->below = b->backed && p->tier == STRATA_TIER_VRAM && p->env->sched ? p->env->sched->resident[STRATA_TIER_RAM]
									      : NULL;
	b->node = calloc(n, sizeof(*b->node));
	b->never = calloc((n + 63) / 64, sizeof(*b->never));
	b->never_sum = calloc((n + 4095) / 4096, sizeof(*b->never_sum));
	if (!b->node || !b->never || !b->never_sum)
		return STRATA_ERR(err, STRATA_ENOMEM, "evict farthest: out of memory");
	return STRATA_OK;
}

static void farthest_free(struct strata_policy *p)
{
	struct farthest *b = p->priv;
	free(b->node);
	free(b->never);
	free(b->never_sum);
	free(b->l0);
	free(b->l1);
	free(b->l2);
	free(b->at);
}

/* Room for position t; false (and the instance's error set) if there is none. */
static bool cover(struct strata_policy *p, uint64_t t)
{
	struct farthest *b = p->priv;
	if (t < b->cap)
		return true;
	if (b->failed)
		return false;
	uint64_t cap = b->cap ? b->cap : 1ull << 18;
	while (cap <= t && cap < MAX_POS)
		cap *= 2;
	if (t >= cap) {
		b->failed = true;
		STRATA_ERR(&p->error, STRATA_EINVAL, "evict farthest: clock value %llu beyond the %llu positions indexed",
			   (unsigned long long)t, (unsigned long long)MAX_POS);
		return false;
	}
	uint64_t *l0 = realloc(b->l0, cap / 8), *l1 = l0 ? realloc(b->l1, cap / 512) : NULL;
	if (l0)
		b->l0 = l0;
	if (l1)
		b->l1 = l1;
	uint64_t *l2 = l1 ? realloc(b->l2, cap / 32768) : NULL;
	if (l2)
		b->l2 = l2;
	uint32_t *at = l2 ? realloc(b->at, sizeof(*at) * cap) : NULL;
	if (!at) {
		b->failed = true;
		STRATA_ERR(&p->error, STRATA_ENOMEM, "evict farthest: out of memory (%llu positions)",
			   (unsigned long long)cap);
		return false;
	}
	b->at = at;
	memset(b->l0 + b->cap / 64, 0, (cap - b->cap) / 8);
	memset(b->l1 + b->cap / 4096, 0, (cap - b->cap) / 512);
	memset(b->l2 + b->cap / 262144, 0, (cap - b->cap) / 32768);
	b->cap = cap;
	return true;
}

static inline void bit_set(struct farthest *b, uint64_t t)
{
	b->l0[t / 64] |= 1ull << (t % 64);
	b->l1[t / 4096] |= 1ull << (t / 64 % 64);
	b->l2[t / 262144] |= 1ull << (t / 4096 % 64);
}

static inline void bit_clear(struct farthest *b, uint64_t t)
{
	if ((b->l0[t / 64] &= ~(1ull << (t % 64))))
		return;
	if ((b->l1[t / 4096] &= ~(1ull << (t / 64 % 64))))
		return;
	b->l2[t / 262144] &= ~(1ull << (t / 4096 % 64));
}

static inline uint32_t msb(uint64_t x) { return 63 - (uint32_t)__builtin_clzll(x); }

/* Highest occupied position below `below`, or UINT64_MAX. */
static uint64_t last_below(const struct farthest *b, uint64_t below)
{
	if (!below)
		return UINT64_MAX;
	uint64_t t = below - 1, w0 = t / 64, w1 = w0 / 64, w2 = w1 / 64;
	uint64_t x = b->l0[w0] & (~0ull >> (63 - t % 64));
	if (x)
		return w0 * 64 + msb(x);
	x = b->l1[w1] & ((1ull << (w0 % 64)) - 1);
	if (!x) {
		x = b->l2[w2] & ((1ull << (w1 % 64)) - 1);
		while (!x) {
			if (!w2--)
				return UINT64_MAX;
			x = b->l2[w2];
		}
		w1 = w2 * 64 + msb(x);
		x = b->l1[w1];
	}
	w0 = w1 * 64 + msb(x);
	return w0 * 64 + msb(b->l0[w0]);
}

static void drop_key(struct farthest *b, uint32_t e)
{
	uint64_t k = b->node[e].key;
	if (k == STRATA_NEVER) {
		if (!(b->never[e / 64] &= ~(1ull << (e % 64))))
			b->never_sum[e / 4096] &= ~(1ull << (e / 64 % 64));
		return;
	}
	uint32_t *pp = &b->at[k];
	while (*pp != e)
		pp = &b->node[*pp].chain;
	*pp = b->node[e].chain;
	if (b->at[k] == NO_EID)
		bit_clear(b, k);
}

static void set_next(struct strata_policy *p, uint32_t e, uint64_t next)
{
	struct farthest *b = p->priv;
	if (b->node[e].in)
		drop_key(b, e);
	if (next != STRATA_NEVER && !cover(p, next)) {
		b->node[e].in = 0; /* failed: the run stops at the engine's next check */
		return;
	}
	b->node[e].in = 1;
	b->node[e].key = next;
	if (next < b->scan)
		b->scan = next; /* set in the past (a driver's order): the next victim looks here too */
	if (next == STRATA_NEVER) {
		b->never[e / 64] |= 1ull << (e % 64);
		b->never_sum[e / 4096] |= 1ull << (e / 64 % 64);
	} else if (!(b->l0[next / 64] >> (next % 64) & 1)) {
		b->at[next] = e;
		b->node[e].chain = NO_EID;
		bit_set(b, next);
	} else {
		b->node[e].chain = b->at[next];
		b->at[next] = e;
	}
}

/* First use at or after now. */
static uint64_t next_from(const struct farthest *b, uint32_t eid, uint64_t now)
{
	/* next_use is strictly after its argument.  At now == 0 that misses an
	 * access at 0 itself; only a preload or prefetch inserts then, and the
	 * access at 0 (on_access) sets the right key before any victim choice. */
	if (now == 0)
		return b->f->next_use(b->f, eid, 0);
	return b->f->next_use(b->f, eid, now - 1);
}

static void farthest_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct farthest *b = p->priv;
	if (eid < b->n_ids)
		set_next(p, eid, next_from(b, eid, now));
}

static void farthest_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct farthest *b = p->priv;
	if (eid < b->n_ids && b->node[eid].in)
		set_next(p, eid, b->f->next_use(b->f, eid, now));
}

static void farthest_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct farthest *b = p->priv;
	if (eid < b->n_ids && b->node[eid].in) {
		drop_key(b, eid);
		b->node[eid].in = 0;
	}
}

static inline bool pinned(const struct strata_residency *r, uint32_t e)
{
	return r && r->pinned && r->pinned[e];
}

static int64_t farthest_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct farthest *b = p->priv;
	/* refresh keys whose use has passed unseen: every occupied position in
	 * [scan, now), lowest first (the order does not matter: each refresh
	 * depends on its expert alone, and the victim on the keys alone) */
	uint64_t end = now < b->cap ? now : b->cap;
	for (uint64_t w = b->scan / 64; b->scan < end && w <= (end - 1) / 64; w++) {
		uint64_t x = b->l0[w];
		if (w == b->scan / 64)
			x &= ~0ull << (b->scan % 64);
		if ((w + 1) * 64 > end)
			x &= ~0ull >> (63 - (end - 1) % 64);
		while (x) {
			uint64_t t = w * 64 + (uint64_t)__builtin_ctzll(x);
			x &= x - 1;
			while (b->l0[t / 64] >> (t % 64) & 1) {
				uint32_t e = b->at[t];
				set_next(p, e, next_from(b, e, now)); /* moves it to >= now */
			}
		}
	}
	if (now > b->scan)
		b->scan = now;
	/* never used again: the smallest unpinned eid */
	for (uint32_t s = 0; s < (b->n_ids + 4095) / 4096; s++)
		for (uint64_t y = b->never_sum[s]; y; y &= y - 1) {
			uint32_t w = s * 64 + (uint32_t)__builtin_ctzll(y);
			for (uint64_t x = b->never[w]; x; x &= x - 1) {
				uint32_t e = w * 64 + (uint32_t)__builtin_ctzll(x);
				if (!pinned(r, e))
					return e;
			}
		}
	/* the farthest next use, unpinned; at one position the smallest eid
	 * (backed: the first such with a copy in RAM, else the first) */
	uint32_t first = NO_EID;
	for (uint64_t t = last_below(b, b->cap); t != UINT64_MAX; t = last_below(b, t)) {
		uint32_t best = NO_EID, best_b = NO_EID;
		for (uint32_t e = b->at[t]; e != NO_EID; e = b->node[e].chain)
			if (!pinned(r, e)) {
				best = e < best ? e : best;
				if (b->below && b->below[e] && e < best_b)
					best_b = e;
			}
		if (!b->below && best != NO_EID)
			return best;
		if (best_b != NO_EID)
			return best_b;
		if (first == NO_EID)
			first = best;
	}
	return first == NO_EID ? STRATA_NO_EXPERT : (int64_t)first;
}

const struct strata_evict_ops strata_evict_farthest = {
	.name = "farthest", .version = STRATA_POLICY_ABI, .flags = STRATA_POLICY_F_NEEDS_FUTURE,
	.help = "evict the expert used farthest in the future (needs the trace's future; a heuristic, not a bound)",
	.priv_size = sizeof(struct farthest), .options = farthest_options,
	.init = farthest_init, .free = farthest_free, .on_insert = farthest_on_insert,
	.on_access = farthest_on_access, .on_remove = farthest_on_remove, .victim = farthest_victim,
};
