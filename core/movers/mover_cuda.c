/* cuda: RAM -> VRAM on a few copy streams, round robin.  A submit issues the
 * moves it holds as one batch (cfg.copy, STRATA_COPY_*):
 *   each:  one cudaMemcpyAsync and one event per move (finest completion);
 *   batch: one cudaMemcpyBatchAsync for all of them and one event after it
 *          (the copy engine's per-call setup is paid once per batch);
 *   sm:    one copy kernel reading the pinned extents over PCIe.
 * Every move of a batch shares the batch's event, so they complete together.
 * A move's done_ns is when the device finished it (its event's time after
 * a base event stamped at init), not when a reap first saw it: the engine
 * may poll late, and the move log and busy times must not count that.
 * Demand moves are issued before prefetches (mv->low) of the same submit and
 * never on the prefetches' stream (the last one, with two or more).
 * Sources should be pinned (the RAM tier's arena and the staged mover's
 * bounce buffers are), or the copy is synchronous and slow; copy=sm needs
 * them registered and falls back to batch where the device cannot read
 * registered host memory at its host address. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mover_int.h"
#include "strata/gpu.h"
#include "strata/util.h"

const char *const strata_copy_names[] = { "auto", "each", "batch", "sm", NULL };

struct cuda_priv {
	strata_gpu_stream **streams;
	uint32_t n_streams, next_stream, copy;
	strata_gpu_event **events;   /* queue_depth: at most one batch per move in flight */
	uint32_t *ev_refs;           /* moves waiting on events[i] */
	int8_t *ev_state;            /* per reap sweep: -1 unknown, else the query's answer */
	struct strata_move **slot;   /* queue_depth moves in flight, NULL if free */
	uint32_t *slot_ev;           /* the event slot[i] waits on */
	uint64_t *slot_seq;          /* batch number: the oldest is waited on first */
	uint64_t seq;
	uint32_t used;
	strata_gpu_event *base;      /* recorded and waited for at init, at host time base_ns */
	uint64_t base_ns;
	uint64_t *ev_done;           /* per reap sweep: events[i]'s time on the host clock */
	struct strata_moveq queued, failed;
	/* one batch being issued */
	void **dst;
	const void **src;
	size_t *bytes;
	struct strata_move **batch;
};

static void cuda_free(struct strata_mover *m)
{
	struct cuda_priv *p = m->priv;
	for (uint32_t i = 0; p->events && i < m->cfg.queue_depth; i++)
		strata_gpu_event_destroy(p->events[i]);
	for (uint32_t i = 0; p->streams && i < p->n_streams; i++)
		strata_gpu_stream_destroy(p->streams[i]);
	strata_gpu_event_destroy(p->base);
	free(p->ev_done);
	free(p->events);
	free(p->ev_refs);
	free(p->ev_state);
	free(p->streams);
	free(p->slot);
	free(p->slot_ev);
	free(p->slot_seq);
	free(p->dst);
	free(p->src);
	free(p->bytes);
	free(p->batch);
}

static int cuda_init(struct strata_mover *m, struct strata_error *err)
{
	struct cuda_priv *p = m->priv;
	uint32_t qd = m->cfg.queue_depth;
	if (m->cfg.copy > STRATA_COPY_SM)
		return STRATA_ERR(err, STRATA_EINVAL, "mover cuda: unknown copy mode %u", m->cfg.copy);
	p->copy = m->cfg.copy == STRATA_COPY_AUTO ? STRATA_COPY_BATCH : m->cfg.copy;
	if (p->copy == STRATA_COPY_SM && !strata_gpu_copy_sm_available())
		p->copy = STRATA_COPY_BATCH;
	p->n_streams = m->cfg.n_streams ? m->cfg.n_streams : 2;
	p->streams = calloc(p->n_streams, sizeof(*p->streams));
	p->events = calloc(qd, sizeof(*p->events));
	p->ev_refs = calloc(qd, sizeof(*p->ev_refs));
	p->ev_state = calloc(qd, sizeof(*p->ev_state));
	p->ev_done = calloc(qd, sizeof(*p->ev_done));
	p->slot = calloc(qd, sizeof(*p->slot));
	p->slot_ev = calloc(qd, sizeof(*p->slot_ev));
	p->slot_seq = calloc(qd, sizeof(*p->slot_seq));
	p->dst = calloc(qd, sizeof(*p->dst));
	p->src = calloc(qd, sizeof(*p->src));
	p->bytes = calloc(qd, sizeof(*p->bytes));
	p->batch = calloc(qd, sizeof(*p->batch));
	if (!p->streams || !p->events || !p->ev_refs || !p->ev_state || !p->slot || !p->slot_ev || !p->slot_seq ||
	    !p->ev_done || !p->dst || !p->src || !p->bytes || !p->batch) {
		cuda_free(m);
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	}
	int rc = STRATA_OK;
	for (uint32_t i = 0; !rc && i < p->n_streams; i++)
		rc = strata_gpu_stream_create(&p->streams[i], err);
	for (uint32_t i = 0; !rc && i < qd; i++)
		rc = strata_gpu_event_create(&p->events[i], err);
	if (!rc && !(rc = strata_gpu_event_create(&p->base, err)) &&
	    !(rc = strata_gpu_event_record(p->base, p->streams[0], err)) && !(rc = strata_gpu_event_sync(p->base, err)))
		p->base_ns = strata_now_ns();
	if (rc)
		cuda_free(m);
	return rc;
}

static int cuda_queue(struct strata_mover *m, struct strata_move *mv)
{
	struct cuda_priv *p = m->priv;
	if (!mv->src || !mv->dst)
		return -EINVAL;
	if (p->used + p->queued.n >= m->cfg.queue_depth)
		return -EBUSY;
	strata_moveq_push(&p->queued, mv);
	return 0;
}

/* Issue batch[0..n) on stream s, then record event ev after it. */
static int issue(struct cuda_priv *p, uint32_t n, strata_gpu_stream *s, uint32_t ev, uint32_t blocks)
{
	int rc = STRATA_OK;
	if (p->copy == STRATA_COPY_SM) {
		for (uint32_t i = 0; !rc && i < n; i += STRATA_GPU_COPY_MAX) {
			uint32_t k = n - i < STRATA_GPU_COPY_MAX ? n - i : STRATA_GPU_COPY_MAX;
			rc = strata_gpu_copy_h2d_sm_async(p->dst + i, p->src + i, p->bytes + i, k, blocks, s, NULL);
		}
	} else if (p->copy == STRATA_COPY_BATCH) {
		rc = strata_gpu_memcpy_h2d_batch_async(p->dst, p->src, p->bytes, n, s, NULL);
	} else {
		for (uint32_t i = 0; !rc && i < n; i++)
			rc = strata_gpu_memcpy_h2d_async(p->dst[i], p->src[i], p->bytes[i], s, NULL);
	}
	return rc ? rc : strata_gpu_event_record(p->events[ev], s, NULL);
}

/* The next queued move of the kind asked for (low or demand), unlinked. */
static struct strata_move *pop_kind(struct strata_moveq *q, bool low)
{
	struct strata_move *prev = NULL;
	for (struct strata_move *mv = q->head; mv; prev = mv, mv = mv->next)
		if (mv->low == low) {
			strata_moveq_unlink(q, prev, mv);
			return mv;
		}
	return NULL;
}

static int cuda_submit(struct strata_mover *m)
{
	struct cuda_priv *p = m->priv;
	uint32_t done = 0;
	while (p->queued.head) {
		/* demand moves first, in batches of their own: copy=each, a batch of
		 * one move; else every queued move of the kind */
		bool low = true;
		for (struct strata_move *q = p->queued.head; q && low; q = q->next)
			low = q->low;
		uint32_t n = 0, ev = 0, slot = 0;
		struct strata_move *mv;
		while ((n == 0 || p->copy != STRATA_COPY_EACH) && (mv = pop_kind(&p->queued, low))) {
			p->batch[n] = mv;
			p->dst[n] = mv->dst;
			p->src[n] = mv->src;
			p->bytes[n] = mv->bytes;
			n++;
		}
		/* a free event exists: each busy event holds >= 1 of the used moves,
		 * and queue() keeps used + queued <= queue_depth */
		while (p->ev_refs[ev])
			ev++;
		/* with two streams or more, prefetches keep to the last one, so a
		 * demand copy never queues behind them on its stream */
		uint32_t ns = p->n_streams;
		strata_gpu_stream *s = ns < 2 ? p->streams[0]
				       : low ? p->streams[ns - 1] : p->streams[p->next_stream++ % (ns - 1)];
		uint64_t now = strata_now_ns();
		for (uint32_t i = 0; i < n; i++)
			p->batch[i]->submit_ns = now;
		if (issue(p, n, s, ev, m->cfg.copy_blocks)) {
			for (uint32_t i = 0; i < n; i++) {
				strata_move_finish(p->batch[i], -EIO, strata_now_ns());
				strata_moveq_push(&p->failed, p->batch[i]);
			}
			continue;
		}
		p->seq++;
		for (uint32_t i = 0; i < n; i++) {
			while (p->slot[slot])
				slot++; /* used + n <= queue_depth */
			p->batch[i]->status = STRATA_MOVE_INFLIGHT;
			p->slot[slot] = p->batch[i];
			p->slot_ev[slot] = ev;
			p->slot_seq[slot] = p->seq;
		}
		p->ev_refs[ev] = n;
		p->used += n;
		done += n;
	}
	return (int)done;
}

static int cuda_reap(struct strata_mover *m, uint32_t min, struct strata_move **out, uint32_t max)
{
	struct cuda_priv *p = m->priv;
	uint32_t n = 0, qd = m->cfg.queue_depth;
	while (n < max && p->failed.head)
		out[n++] = strata_moveq_pop(&p->failed);
	for (;;) {
		uint32_t oldest = UINT32_MAX;
		memset(p->ev_state, -1, qd);
		for (uint32_t i = 0; i < qd && n < max; i++) {
			struct strata_move *mv = p->slot[i];
			if (!mv)
				continue;
			uint32_t ev = p->slot_ev[i];
			if (p->ev_state[ev] < 0) {
				p->ev_state[ev] = (int8_t)strata_gpu_event_query(p->events[ev], NULL);
				p->ev_done[ev] = strata_now_ns();
				float ms;
				if (p->ev_state[ev] == 1 &&
				    !strata_gpu_event_elapsed_ms(p->base, p->events[ev], &ms, NULL) && ms >= 0 &&
				    p->base_ns + (uint64_t)((double)ms * 1e6) < p->ev_done[ev])
					p->ev_done[ev] = p->base_ns + (uint64_t)((double)ms * 1e6);
			}
			int q = p->ev_state[ev];
			if (q == 0) {
				/* the oldest demand batch, else the oldest prefetch batch */
				if (oldest == UINT32_MAX || (!mv->low && p->slot[oldest]->low) ||
				    (mv->low == p->slot[oldest]->low && p->slot_seq[i] < p->slot_seq[oldest]))
					oldest = i;
				continue;
			}
			strata_move_finish(mv, q == 1 ? 0 : -EIO,
					   p->ev_done[ev] > mv->submit_ns ? p->ev_done[ev] : mv->submit_ns);
			if (q == 1)
				mv->done_bytes = mv->bytes;
			p->slot[i] = NULL;
			p->ev_refs[ev]--;
			p->used--;
			out[n++] = mv;
		}
		if (n >= min || oldest == UINT32_MAX || n >= max)
			return (int)n;
		/* block on that batch, then sweep again */
		strata_gpu_event_sync(p->events[p->slot_ev[oldest]], NULL);
	}
}

const struct strata_mover_ops strata_mover_cuda = {
	.name = "cuda", .version = STRATA_MOVER_ABI,
	.caps = STRATA_MOVER_C_DEVICE_DST | STRATA_MOVER_C_ASYNC | STRATA_MOVER_C_NEEDS_GPU,
	.help = "RAM -> VRAM on copy streams and events: cudaMemcpyBatchAsync per submit (copy=batch, the "
		"default), cudaMemcpyAsync per move (copy=each) or a copy kernel (copy=sm)",
	.priv_size = sizeof(struct cuda_priv),
	.init = cuda_init, .free = cuda_free, .queue = cuda_queue, .submit = cuda_submit, .reap = cuda_reap,
};
