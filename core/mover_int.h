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
	if (q->tail)
		q->tail->next = mv;
	else
		q->head = mv;
	q->tail = mv;
	q->n++;
}

static inline struct strata_move *strata_moveq_pop(struct strata_moveq *q)
{
	struct strata_move *mv = q->head;
	if (mv) {
		q->head = mv->next;
		if (!q->head)
			q->tail = NULL;
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

#endif
