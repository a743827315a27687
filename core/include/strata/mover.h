/*
 * Movers: asynchronous byte movers between tiers, in the shape of fio's
 * ioengines.  Each mover is a `static const struct strata_mover_ops` with a
 * name, ABI version and capability flags; an instance (struct strata_mover)
 * holds a pointer to its ops plus a zeroed private block.
 *
 *   name     link            how
 *   uring    NVMe -> RAM     io_uring, O_DIRECT reads into aligned (pinned) buffers
 *   mmap     NVMe -> RAM     mmap of the shard + memcpy (baseline)
 *   pread    NVMe -> RAM     pread, synchronous fallback
 *   cuda     RAM -> VRAM     cudaMemcpyAsync on copy streams, one event per move
 *   host     RAM -> "VRAM"   memcpy into the host stand-in (CI)
 *   staged   NVMe -> VRAM    a file mover into pinned bounce buffers, then a copy
 *                            mover into the destination, pipelined per chunk
 *   virtual  any             moves nothing; advances a virtual clock by a cost
 *                            model (latency + bytes / bandwidth, queue-depth
 *                            concurrency) for `strata sim`
 *
 * Life of a move (struct strata_move, owned by the caller, must stay put until
 * it completes): fill the source/destination fields, strata_mover_queue() it,
 * strata_mover_submit() the batch, then strata_mover_reap() completions (or
 * strata_mover_wait() for one).  On completion status is DONE or FAILED and,
 * if set, on_done(mv) runs inside the reap call (it may queue new moves on any
 * mover).  Failures carry -errno in res; the generic layer turns them into a
 * struct strata_error naming the file, offset and cause (a short read at EOF
 * is reported as a truncated shard).
 *
 * Ops return -errno (liburing style).  -EAGAIN and -EINTR from submit/reap are
 * retried in one place, the generic layer (mover.c); ops never loop on them.
 */
#ifndef STRATA_MOVER_H
#define STRATA_MOVER_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/error.h"

#define STRATA_MOVER_ABI 1

enum strata_mover_caps {
	STRATA_MOVER_C_FILE_SRC = 1u << 0,   /* reads from (fd, offset); else from host src */
	STRATA_MOVER_C_DEVICE_DST = 1u << 1, /* writes device memory */
	STRATA_MOVER_C_DIRECT = 1u << 2,     /* O_DIRECT: buffers, offsets, lengths 4 KiB aligned */
	STRATA_MOVER_C_ASYNC = 1u << 3,      /* completes in the background (else inside submit) */
	STRATA_MOVER_C_VIRTUAL = 1u << 4,    /* moves no bytes; completion by virtual clock */
	STRATA_MOVER_C_NEEDS_GPU = 1u << 5,  /* init fails without a GPU */
};

enum strata_move_status {
	STRATA_MOVE_IDLE = 0,
	STRATA_MOVE_QUEUED = 1,
	STRATA_MOVE_INFLIGHT = 2,
	STRATA_MOVE_DONE = 3,
	STRATA_MOVE_FAILED = 4,
};

struct strata_move;
typedef void (*strata_move_done_fn)(struct strata_move *mv);

struct strata_move {
	/* in: set by the caller */
	int fd;                  /* file source (C_FILE_SRC movers) */
	const char *path;        /* its name, for errors */
	uint64_t offset;         /* file offset */
	const void *src;         /* host source (copy movers) */
	void *dst;               /* destination (NULL allowed for virtual movers) */
	uint64_t bytes;
	uint64_t not_before_ns;  /* virtual: the move cannot start earlier (a dependency) */
	strata_move_done_fn on_done; /* optional completion callback */
	void *user;              /* caller's cookie */
	/* Optional check of a file read (C_FILE_SRC movers): when check_bytes > 0,
	 * the first check_bytes of what landed in dst must hash (XXH3_64bits) to
	 * check_xxh3, else the move FAILS with -EBADMSG and check_got holds the
	 * hash computed.  Done where every mover's completions pass: the generic
	 * reap for moves into host memory, the staged mover on its bounce buffers
	 * for moves into device memory (no read-back). */
	uint64_t check_bytes, check_xxh3;
	/* A prefetch: movers that queue (staged, cuda) issue demand moves (low
	 * false) first and keep low ones off the demand moves' copy streams.
	 * The caller may clear it while the move waits (it became demand). */
	bool low;
	/* out: set by the mover */
	int status;              /* enum strata_move_status */
	int res;                 /* 0, or -errno on failure */
	uint64_t done_bytes;     /* progress (short reads resume from here) */
	uint64_t submit_ns, done_ns; /* wall clock, or virtual clock for virtual movers */
	bool reaped;             /* the generic layer has reaped it (callback ran) */
	uint64_t check_got;      /* the hash computed, when a check failed */
	/* private to the mover that holds it */
	struct strata_move *next;
	uint64_t priv[2];
};

struct strata_mover;

/* Virtual link: the cost model of one link, shared by every virtual mover
 * that crosses it (a staged NVMe -> VRAM move occupies both links). */
struct strata_vlink {
	double gbps;             /* bytes per ns = gbps (GB/s == bytes/ns) */
	double lat_us;           /* per move, overlapped up to queue_depth */
	uint32_t queue_depth;    /* moves in flight at once */
	double busy_until;       /* transfer serialization (virtual ns) */
	double *slot_free;       /* queue_depth entries: when each slot frees */
	double busy_ns;          /* total transfer time charged */
	uint32_t next_slot;      /* the slot that frees first (see mover_virtual.c) */
};

struct strata_mover_config {
	uint32_t queue_depth;    /* moves in flight (io_uring SQ size, copy events); 0: 32 */
	uint32_t n_streams;      /* cuda: copy streams; 0: 2 */
	uint32_t copy;           /* cuda: STRATA_COPY_* (how a submit's moves reach the GPU) */
	uint32_t copy_blocks;    /* cuda, copy=sm: thread blocks per launch; 0: 64 */
	/* staged: the two stages and the bounce buffers between them */
	struct strata_mover *stage_read, *stage_copy;
	uint64_t bounce_bytes;   /* per bounce buffer; 0: 4 MiB */
	uint32_t n_bounce;       /* 0: 4 */
	bool bounce_register;    /* cudaHostRegister the bounce buffers */
	/* virtual: the clock (virtual ns, owned by the caller) and up to two links */
	double *clock_ns;
	struct strata_vlink *links[2];
};

/* The cuda mover's ways to issue the moves one submit holds (mover_cuda.c). */
enum {
	STRATA_COPY_AUTO = 0, /* batch */
	STRATA_COPY_EACH,     /* one cudaMemcpyAsync and one event per move */
	STRATA_COPY_BATCH,    /* one cudaMemcpyBatchAsync and one event per submit */
	STRATA_COPY_SM,       /* one copy kernel per submit (SMs read pinned RAM over PCIe) */
};
extern const char *const strata_copy_names[]; /* "auto" "each" "batch" "sm", NULL */

struct strata_mover_ops {
	const char *name;
	uint32_t version;        /* STRATA_MOVER_ABI */
	uint32_t caps;           /* STRATA_MOVER_C_* */
	const char *help;
	size_t priv_size;
	/* required: set up priv from m->cfg */
	int (*init)(struct strata_mover *m, struct strata_error *err);
	/* optional: release what init allocated; moves in flight have been reaped */
	void (*free)(struct strata_mover *m);
	/* required: accept a move (status QUEUED); -EBUSY when the queue is full
	 * (the caller reaps and retries); -EINVAL for a move it cannot do */
	int (*queue)(struct strata_mover *m, struct strata_move *mv);
	/* required: start queued moves; synchronous movers do the work here.
	 * Returns >= 0 or -errno (-EAGAIN/-EINTR: call again). */
	int (*submit)(struct strata_mover *m);
	/* required: collect up to max finished moves into out, blocking until at
	 * least min have finished (min <= moves outstanding).  Returns the count
	 * or -errno (-EAGAIN/-EINTR: call again). */
	int (*reap)(struct strata_mover *m, uint32_t min, struct strata_move **out, uint32_t max);
};

struct strata_mover {
	const struct strata_mover_ops *ops;
	void *priv;
	struct strata_mover_config cfg;
	uint32_t outstanding;    /* queued or in flight */
	uint64_t moves, bytes, failed; /* completed totals */
	double busy_ns;          /* sum of move durations (submit -> done) */
	/* Link use (real movers, wall clock; kept by the generic layer): time
	 * with at least one move outstanding, the integral of the moves
	 * outstanding over time (mean queue depth = qd_ns / active_ns), the most
	 * outstanding at once.  A move counts until it is reaped. */
	double active_ns, qd_ns;
	uint64_t t_last;
	uint32_t max_outstanding;
	/* The generic layer's checks of reads into host memory (check_bytes)
	 * run on a thread of its own, so the caller's thread (the engine's:
	 * it feeds the links and launches the kernels) never hashes: a checked
	 * move completes, in a later reap, once hashed.  Made on the first
	 * check; moves being hashed still count as outstanding. */
	struct strata_checker *chk;
	uint32_t checking;       /* moves handed to it and not yet completed */
};

/* Built-in movers by name ("uring", "mmap", "pread", "cuda", "host",
 * "staged", "virtual"); NULL if unknown. */
const struct strata_mover_ops *strata_mover_find(const char *name);
const struct strata_mover_ops *strata_mover_at(unsigned i); /* iterate; NULL ends */

/* Create an instance; checks the ABI version and required ops (so call sites
 * never test for NULL) and the GPU requirement. */
int strata_mover_open(const struct strata_mover_ops *ops, const struct strata_mover_config *cfg,
		      struct strata_mover **out, struct strata_error *err);
/* Waits for every outstanding move, then frees. */
void strata_mover_close(struct strata_mover *m);

/* Queue one move; when the mover is full, submits and reaps (running
 * callbacks) until it accepts. */
int strata_mover_queue(struct strata_mover *m, struct strata_move *mv, struct strata_error *err);
int strata_mover_submit(struct strata_mover *m, struct strata_error *err);
/* Reap finished moves (at least min, blocking), run their callbacks.  Returns
 * the count, or the first failure as an error naming the file. */
int strata_mover_reap(struct strata_mover *m, uint32_t min, struct strata_error *err);
/* Until mv is DONE or FAILED (submits first).  A failed move's error. */
int strata_mover_wait(struct strata_mover *m, struct strata_move *mv, struct strata_error *err);
/* Until nothing is outstanding. */
int strata_mover_drain(struct strata_mover *m, struct strata_error *err);
/* The error for a FAILED move: "shard-00000.strata: read at offset 8192 (4096
 * bytes): short read, 0 of 4096 bytes (truncated file?)"; a failed check is
 * STRATA_ECORRUPT: "...: checksum mismatch in the extent at offset 8192". */
int strata_move_error(const struct strata_move *mv, struct strata_error *err);

/* Synchronous convenience: one move, start to finish. */
int strata_mover_run(struct strata_mover *m, struct strata_move *mv, struct strata_error *err);

void strata_vlink_init(struct strata_vlink *l, double gbps, double lat_us, uint32_t queue_depth);
void strata_vlink_free(struct strata_vlink *l);

/* For movers' implementations. */
extern const struct strata_mover_ops strata_mover_uring, strata_mover_mmap, strata_mover_pread,
	strata_mover_cuda, strata_mover_host, strata_mover_staged, strata_mover_virtual;

#endif
