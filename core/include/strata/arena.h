/*
 * The extent arena: a best-fit allocator of 4 KiB-aligned offsets inside
 * [0, size), the allocator of every memory tier (strata/tier_mem.h).
 *
 * The allocator is best fit with coalescing: the smallest hole that holds the
 * request, the lowest-addressed one among holes of that size.  Experts come in
 * a handful of extent sizes (one per format), so best fit reuses a hole of the
 * size just freed and keeps fragmentation low (tests/test_tier.c measures it).
 * When a request does not fit although enough bytes are free, the caller (the
 * engine) moves a few extents out of the way (strata_arena_plan_room: the
 * cheapest window of adjacent extents and holes that holds the request,
 * its extents moved into holes elsewhere) instead of evicting more.
 *
 * The arena is a doubly linked list of blocks in address order, each a hole
 * or a reserved extent.  A release finds its block through a hash map of
 * reserved offsets and its neighbours through the list (coalescing is O(1)).
 * Holes sit in size classes (one per distinct hole length, found by a table
 * of short lengths or a hash map, ordered by length in a side array with a
 * bitmap of the non-empty ones; each holds its holes unordered, with each
 * hole's position kept in its block), so the best fit is the lowest-addressed
 * hole of the first non-empty class long enough.
 * Experts come in a few sizes, so classes are few and each holds few holes;
 * a failing reserve (the engine retries after each eviction) is one
 * comparison with the longest hole.
 */
#ifndef STRATA_ARENA_H
#define STRATA_ARENA_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/error.h"

#define STRATA_TIER_ALIGN 4096u /* every extent and offset is a multiple */

struct strata_span {
	uint64_t off, len;
};

/* Open-addressing hash map (internal to the arena). */
struct strata_arena_kv {
	uint64_t key, val; /* key UINT64_MAX: empty */
};

struct strata_arena_map {
	struct strata_arena_kv *slot;
	uint32_t cap, n; /* cap a power of two */
};

/* A hole in its class: offset and block id. */
struct strata_arena_hole {
	uint64_t off;
	uint32_t blk;
};

/* The holes of one length, in no order (a reserve scans for the lowest
 * offset).  A class stays (empty) when its last hole goes, until a
 * compaction. */
struct strata_arena_class {
	uint64_t len;
	struct strata_arena_hole *h;
	uint32_t n, cap;
	uint32_t pos; /* index in order[] */
};

/* A block of the arena: a hole (cls: its class id, pos: its index there) or
 * reserved (cls: UINT32_MAX); prev/next in address order (UINT32_MAX: none). */
struct strata_arena_blk {
	uint64_t off, len;
	uint32_t prev, next;
	uint32_t cls, pos;
	uint32_t tag;     /* reserved: the caller's id (strata_arena_set_tag) */
};

/* Best-fit allocator over [0, size). */
struct strata_arena {
	uint64_t size;    /* bytes managed */
	uint64_t total;   /* bytes the blocks cover (size plus spans lost to ENOMEM) */
	uint64_t used;    /* bytes handed out */
	uint64_t largest; /* longest hole (0: none) */
	uint32_t n_free;  /* holes */
	struct strata_arena_blk *blk;     /* block pool */
	uint64_t *is_hole;                /* bit per block id: a hole (a release reads its neighbours' here) */
	uint32_t n_blk, cap_blk, free_blk, head; /* head: the block at offset 0 */
	struct strata_arena_map by_used;  /* reserved offset -> block id */
	struct strata_arena_map by_len;   /* length -> class id */
	uint32_t *small, n_small;         /* length / STRATA_TIER_ALIGN -> class id + 1, short lengths */
	struct strata_arena_class *cls;   /* by id */
	uint32_t *order;                  /* class ids by ascending length */
	uint64_t *order_len;              /* their lengths */
	uint64_t *nonempty;               /* bit p: class order[p] has holes */
	uint32_t n_cls, cap_cls, n_empty;
};

int strata_arena_init(struct strata_arena *a, uint64_t size, struct strata_error *err);
void strata_arena_free(struct strata_arena *a);
/* Reserve bytes (rounded up to STRATA_TIER_ALIGN).  Returns STRATA_OK and the
 * offset, or STRATA_EBUDGET without touching err when no hole is large enough
 * (the hot path: the engine evicts and retries; O(1)), or STRATA_ENOMEM (err
 * untouched too) when the hole index cannot grow. */
int strata_arena_reserve(struct strata_arena *a, uint64_t bytes, uint64_t *off);
/* Give back a span from strata_arena_reserve (same bytes).  Cannot fail: if
 * the hole index cannot grow, the span is dropped from the arena (size
 * shrinks by it), which costs capacity but never breaks the budget. */
void strata_arena_release(struct strata_arena *a, uint64_t off, uint64_t bytes);
/* The same with a handle instead of an index entry: *h names the span for
 * strata_arena_release_h, which gives it back without looking up its offset
 * (a caller that keeps per-extent state anyway, like the engine, saves a
 * hash map of every reserved span).  A span reserved with a handle must be
 * released with it, and the handle is dead afterwards. */
int strata_arena_reserve_h(struct strata_arena *a, uint64_t bytes, uint64_t *off, uint32_t *h);
void strata_arena_release_h(struct strata_arena *a, uint32_t h);
/* Tag a span reserved with a handle (the caller's id for it, handed to a
 * plan's fixed(); 0 until set). */
void strata_arena_set_tag(struct strata_arena *a, uint32_t h, uint32_t tag);
/* Room by moving extents.  A window is a run of adjacent extents with the
 * holes between and beside them; moving its extents into holes elsewhere
 * leaves one hole of the window's length.  The plan is the window that
 * holds `bytes` (rounded up) whose extents (at most STRATA_ARENA_MOVES, none
 * that fixed(ctx, tag) declares immovable) fit into other holes, one each
 * (largest first, best fit), and add up to the fewest bytes (the
 * lowest-addressed among equals).  STRATA_OK with the plan, STRATA_EBUDGET
 * when there is none, STRATA_ENOMEM. */
#define STRATA_ARENA_MOVES 4
struct strata_arena_plan {
	uint32_t n;                        /* extents to move */
	uint32_t h[STRATA_ARENA_MOVES];    /* their handles */
	uint32_t to[STRATA_ARENA_MOVES];   /* the hole (a block handle) each goes to */
	uint64_t moved;                    /* their bytes */
};
int strata_arena_plan_room(const struct strata_arena *a, uint64_t bytes, bool (*fixed)(void *ctx, uint32_t tag),
			   void *ctx, struct strata_arena_plan *p);
/* Reserve bytes at the start of the hole with handle `hole` (a plan's
 * to[i]): the new span's handle and offset.  Carrying out a plan: for each
 * extent, reserve its bytes in its hole, copy, release the old span. */
int strata_arena_reserve_in(struct strata_arena *a, uint32_t hole, uint64_t bytes, uint64_t *off, uint32_t *h);
/* Room by sliding: a window from a hole to a hole; sliding its extents
 * down against each other (address order kept) leaves one hole of its hole
 * bytes at its end, which frees the slivers no extent fits.  The plan is the
 * window whose holes hold `bytes` with the fewest extent bytes to move (the
 * lowest-addressed among equals); a fixed extent ends a window.  STRATA_OK
 * with *first / *last (hole handles) and *moved, or STRATA_EBUDGET. */
int strata_arena_slide_plan(const struct strata_arena *a, uint64_t bytes, bool (*fixed)(void *ctx, uint32_t tag),
			    void *ctx, uint32_t *first, uint32_t *last, uint64_t *moved);
/* Carry out a slide plan: move(ctx, tag, from, to, len) for each extent
 * that moves, lowest address first (to < from; the spans may overlap), then
 * the blocks follow.  Handles stay valid.  STRATA_ENOMEM (nothing changed)
 * when the hole index cannot grow. */
int strata_arena_slide(struct strata_arena *a, uint32_t first, uint32_t last,
		       void (*move)(void *ctx, uint32_t tag, uint64_t from, uint64_t to, uint64_t len), void *ctx);
/* The copies that move len bytes down from `from` to `to` (to < from; the
 * spans may overlap) when one copy must not overlap itself: issued in order,
 * piece by piece, each piece straight to its place where the shift is at
 * least the piece, else through a bounce buffer of `cap` bytes (two copies:
 * in, out).  copy(ctx, dst, src, n) with dst / src an offset, or
 * STRATA_ARENA_BOUNCE for the bounce buffer.  A slide of an extent is then
 * at most 2 * ceil(len / cap) copies, whatever its shift.  *traffic (may be
 * NULL) gets the bytes the copies carry; returns copy's first error. */
#define STRATA_ARENA_BOUNCE UINT64_MAX
int strata_arena_copy_down(uint64_t from, uint64_t to, uint64_t len, uint64_t cap,
			   int (*copy)(void *ctx, uint64_t dst, uint64_t src, uint64_t n), void *ctx,
			   uint64_t *traffic);
/* Largest hole, for error messages and fragmentation checks. */
uint64_t strata_arena_largest_free(const struct strata_arena *a);
/* Holes in offset order, at most n; returns how many were written. */
uint32_t strata_arena_holes(const struct strata_arena *a, struct strata_span *out, uint32_t n);
/* Internal consistency (blocks back to back in address order, holes
 * coalesced and in their classes, summing to size - used, largest right):
 * 0 if fine. */
int strata_arena_check(const struct strata_arena *a);

#endif
