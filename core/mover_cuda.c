/* cuda: RAM -> VRAM with cudaMemcpyAsync (strata_gpu_memcpy_h2d_async) on a
 * few copy streams, round robin, one event per move from a pool of
 * queue_depth events.  Sources should be pinned (the RAM tier's arena and the
 * staged mover's bounce buffers are), or the copy is synchronous and slow. */
#include <errno.h>
#include <stdlib.h>

#include "mover_int.h"
#include "strata/gpu.h"
#include "strata/util.h"

struct cuda_priv {
	strata_gpu_stream **streams;
	uint32_t n_streams, next_stream;
	strata_gpu_event **events;   /* queue_depth */
	struct strata_move **slot;   /* move using events[i], NULL if free */
	uint32_t used;
	struct strata_moveq queued, failed;
};

static void cuda_free(struct strata_mover *m)
{
	struct cuda_priv *p = m->priv;
	for (uint32_t i = 0; p->events && i < m->cfg.queue_depth; i++)
		strata_gpu_event_destroy(p->events[i]);
	for (uint32_t i = 0; p->streams && i < p->n_streams; i++)
		strata_gpu_stream_destroy(p->streams[i]);
	free(p->events);
	free(p->streams);
	free(p->slot);
}

static int cuda_init(struct strata_mover *m, struct strata_error *err)
{
	struct cuda_priv *p = m->priv;
	uint32_t qd = m->cfg.queue_depth;
	p->n_streams = m->cfg.n_streams ? m->cfg.n_streams : 2;
	p->streams = calloc(p->n_streams, sizeof(*p->streams));
	p->events = calloc(qd, sizeof(*p->events));
	p->slot = calloc(qd, sizeof(*p->slot));
	if (!p->streams || !p->events || !p->slot) {
		cuda_free(m);
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	}
	int rc = STRATA_OK;
	for (uint32_t i = 0; !rc && i < p->n_streams; i++)
		rc = strata_gpu_stream_create(&p->streams[i], err);
	for (uint32_t i = 0; !rc && i < qd; i++)
		rc = strata_gpu_event_create(&p->events[i], err);
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

static int cuda_submit(struct strata_mover *m)
{
	struct cuda_priv *p = m->priv;
	struct strata_move *mv;
	int n = 0;
	while ((mv = strata_moveq_pop(&p->queued))) {
		uint32_t i = 0;
		while (p->slot[i])
			i++; /* a free slot exists: queue() bounds used + queued */
		strata_gpu_stream *s = p->streams[p->next_stream++ % p->n_streams];
		mv->submit_ns = strata_now_ns();
		if (strata_gpu_memcpy_h2d_async(mv->dst, mv->src, mv->bytes, s, NULL) ||
		    strata_gpu_event_record(p->events[i], s, NULL)) {
			strata_move_finish(mv, -EIO, strata_now_ns());
			strata_moveq_push(&p->failed, mv);
			continue;
		}
		mv->status = STRATA_MOVE_INFLIGHT;
		p->slot[i] = mv;
		p->used++;
		n++;
	}
	return n;
}

static int cuda_reap(struct strata_mover *m, uint32_t min, struct strata_move **out, uint32_t max)
{
	struct cuda_priv *p = m->priv;
	uint32_t n = 0, qd = m->cfg.queue_depth;
	while (n < max && p->failed.head)
		out[n++] = strata_moveq_pop(&p->failed);
	for (;;) {
		uint32_t oldest = UINT32_MAX;
		for (uint32_t i = 0; i < qd && n < max; i++) {
			struct strata_move *mv = p->slot[i];
			if (!mv)
				continue;
			int q = strata_gpu_event_query(p->events[i], NULL);
			if (q == 0) {
				if (oldest == UINT32_MAX || mv->submit_ns < p->slot[oldest]->submit_ns)
					oldest = i;
				continue;
			}
			strata_move_finish(mv, q == 1 ? 0 : -EIO, strata_now_ns());
			if (q == 1)
				mv->done_bytes = mv->bytes;
			p->slot[i] = NULL;
			p->used--;
			out[n++] = mv;
		}
		if (n >= min || oldest == UINT32_MAX || n >= max)
			return (int)n;
		/* block on the oldest copy, then sweep again */
		strata_gpu_event_sync(p->events[oldest], NULL);
	}
}

const struct strata_mover_ops strata_mover_cuda = {
	.name = "cuda", .version = STRATA_MOVER_ABI,
	.caps = STRATA_MOVER_C_DEVICE_DST | STRATA_MOVER_C_ASYNC | STRATA_MOVER_C_NEEDS_GPU,
	.help = "RAM -> VRAM with cudaMemcpyAsync on copy streams and events",
	.priv_size = sizeof(struct cuda_priv),
	.init = cuda_init, .free = cuda_free, .queue = cuda_queue, .submit = cuda_submit, .reap = cuda_reap,
};
