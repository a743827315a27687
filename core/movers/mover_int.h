/* Shared by the synchronous movers (mmap, pread, host): a queued list that
 * submit works through and a done list that reap hands back. */
#ifndef STRATA_MOVER_INT_H
#define STRATA_MOVER_INT_H

#include "strata/mover.h"

struct strata_moveq {
	struct strata_move *head, *tail;
	uint32_t n;
};

static inline void strata_moveq_push(struct strata_moveq *q, struct strata_move *mv)
{
	mv->next = NULL;
	/* the link to write chosen without a branch: a virtual mover's queues
	 * empty and fill in no pattern a predictor learns */
	struct strata_move **link = q->tail ? &q->tail->next : &q->head;
	*link = mv;
	q->tail = mv;
	q->n++;
}

/* Remove mv, which follows prev (NULL: mv is the head). */
static inline void strata_moveq_unlink(struct strata_moveq *q, struct strata_move *prev, struct strata_move *mv)
{
	if (prev)
		prev->next = mv->next;
	else
		q->head = mv->next;
	if (q->tail == mv)
		q->tail = prev;
	mv->next = NULL;
	q->n--;
}

static inline struct strata_move *strata_moveq_pop(struct strata_moveq *q)
{
	struct strata_move *mv = q->head;
	if (mv) {
		q->head = mv->next;
		q->tail = q->head ? q->tail : NULL;
		q->n--;
		mv->next = NULL;
	}
	return mv;
}

struct strata_syncq {
	struct strata_moveq queued, done;
};

/* Reap for synchronous movers: everything finished inside submit. */
static inline int strata_syncq_reap(struct strata_syncq *q, struct strata_move **out, uint32_t max)
{
	uint32_t n = 0;
	while (n < max && q->done.head)
		out[n++] = strata_moveq_pop(&q->done);
	return (int)n;
}

static inline void strata_move_finish(struct strata_move *mv, int res, uint64_t now)
{
	mv->res = res;
	mv->status = res ? STRATA_MOVE_FAILED : STRATA_MOVE_DONE;
	mv->done_ns = now;
}

/* The virtual mover's state (mover_virtual.c).  Moves in flight complete in
 * the order they were submitted (see there), so they wait in a FIFO. */
struct virt_priv {
	struct strata_moveq queued;
	struct strata_moveq inflight; /* by (done_ns, submit order) = submit order */
};

/* For the engine's virtual mode, which calls submit and reap(0) far more
 * often than they have work: whether a virtual mover has moves queued (submit
 * would schedule them), and whether one in flight is due at the clock (a
 * non-blocking reap would hand it back).  When both are false, submit and a
 * reap with min 0 do nothing, so a caller may skip them. */
/* uint64_t -> double through int64_t: one instruction (the unsigned
 * conversion is several), the same value for anything below 2^63 (virtual
 * times in ns, byte counts). */
static inline double strata_u2d(uint64_t x)
{
	return (double)(int64_t)x;
}

static inline bool strata_mover_virtual_queued(const struct strata_mover *m)
{
	return ((const struct virt_priv *)m->priv)->queued.head != NULL;
}

/* strata_mover_queue() for a virtual mover, inlined: the same fields set, the
 * same queue, the same count (a virtual mover never answers -EBUSY). */
static inline void strata_mover_virtual_queue(struct strata_mover *m, struct strata_move *mv)
{
	mv->status = STRATA_MOVE_QUEUED;
	mv->reaped = false;
	mv->res = 0;
	mv->done_bytes = 0;
	strata_moveq_push(&((struct virt_priv *)m->priv)->queued, mv);
	m->outstanding++;
}

/* strata_mover_reap(m, min) and strata_mover_submit(m) for a virtual mover
 * (mover_virtual.c). */
int strata_mover_virtual_reap(struct strata_mover *m, uint32_t min);
void strata_mover_virtual_submit(struct strata_mover *m);
/* A low-priority move (the engine's waiting prefetches): start mv where the
 * backlog of every link of m is shorter than mv's own time on them, from
 * mv->not_before_ns on, if that is before the clock (the link would have
 * taken it then), and return true; else leave it and return false. */
bool strata_mover_virtual_start_idle(struct strata_mover *m, struct strata_move *mv);

static inline bool strata_mover_virtual_due(const struct strata_mover *m)
{
	const struct virt_priv *p = m->priv;
	return p->inflight.head && strata_u2d(p->inflight.head->done_ns) <= *m->cfg.clock_ns;
}

#endif
