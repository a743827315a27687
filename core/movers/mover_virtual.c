/* virtual: moves no bytes.  A move is scheduled on submit across the links in
 * its config (one for NVMe -> RAM or RAM -> VRAM, two in a row for a staged
 * NVMe -> VRAM move) by the cost model of struct strata_vlink:
 *   - at most queue_depth moves are in flight on a link; a move waits for a
 *     slot (the earliest to free),
 *   - each pays the link latency (overlapped between moves in flight), then
 *     its transfer, bytes / bandwidth, serialized on the link,
 * and completes at a virtual time.  reap() hands back moves whose time has
 * come on the caller's clock, and when it must block, advances the clock to
 * the next completion: that is how waiting costs time in `strata sim`.
 * Everything is deterministic: the same moves in the same order give the same
 * times.
 *
 * Completion order.  A move's done time is the busy_until of the last link it
 * crosses, just after its transfer was added there, and a mover's last link
 * is always the same (its config).  busy_until never decreases, so a mover's
 * moves are done in submit order: done times non-decreasing, ties broken by
 * submit order.  The moves in flight are therefore a FIFO, already sorted the
 * way a heap on (done time, submit order) would hand them out. */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "mover_int.h"

static int virt_init(struct strata_mover *m, struct strata_error *err)
{
	if (!m->cfg.clock_ns || !m->cfg.links[0] || !m->cfg.links[0]->queue_depth ||
	    (m->cfg.links[1] && !m->cfg.links[1]->queue_depth))
		return STRATA_ERR(err, STRATA_EINVAL, "needs a clock and at least one link");
	return STRATA_OK;
}

static int virt_queue(struct strata_mover *m, struct strata_move *mv)
{
	strata_moveq_push(&((struct virt_priv *)m->priv)->queued, mv);
	return 0;
}

/* The slot a move takes is the one that frees first.  Every move leaves its
 * slot at the new busy_until, which never decreases (it is at least the old
 * busy_until plus a transfer time >= 0), so read cyclically from next_slot
 * the slots' free times are in ascending order (they start all zero): the
 * earliest is always next_slot, and taking slots round robin gives exactly
 * the times of a scan for the minimum, in O(1) per move. */
static double schedule(struct strata_vlink *l, double start, uint64_t bytes)
{
	uint32_t slot = l->next_slot, nx = slot + 1;
	l->next_slot = nx & -(uint32_t)(nx < l->queue_depth); /* slot + 1, or 0 past the end */
	if (l->slot_free[slot] > start)
		start = l->slot_free[slot];
	double xfer = start + l->lat_us * 1e3;
	if (l->busy_until > xfer)
		xfer = l->busy_until;
	double t = strata_u2d(bytes) / l->gbps;
	l->busy_until = xfer + t;
	l->busy_ns += t;
	l->slot_free[slot] = l->busy_until;
	return l->busy_until;
}

/* llround for t >= 0 (virtual times are), without the libm call: t - floor(t)
 * is exact, so this rounds half away from zero exactly as llround does.  The
 * conversion goes through int64_t (one instruction; to uint64_t it is a
 * branch and two): the same value below 2^63 ns, 292 years. */
static inline uint64_t round_ns(double t)
{
	double f = floor(t);
	return (uint64_t)(int64_t)f + (t - f >= 0.5);
}

static int virt_submit(struct strata_mover *m)
{
	struct virt_priv *p = m->priv;
	struct strata_move *mv;
	int n = 0;
	while ((mv = strata_moveq_pop(&p->queued))) {
		double t = *m->cfg.clock_ns;
		if (strata_u2d(mv->not_before_ns) > t)
			t = strata_u2d(mv->not_before_ns);
		mv->submit_ns = round_ns(t);
		for (int k = 0; k < 2 && m->cfg.links[k]; k++)
			t = schedule(m->cfg.links[k], t, mv->bytes);
		mv->done_ns = round_ns(t);
		mv->status = STRATA_MOVE_INFLIGHT;
		assert(!p->inflight.tail || p->inflight.tail->done_ns <= mv->done_ns); /* see the top */
		strata_moveq_push(&p->inflight, mv);
		n++;
	}
	return n;
}

/* inlined into both the ops entry and strata_mover_virtual_reap */
static inline __attribute__((always_inline)) int reap_batch(struct strata_mover *m, uint32_t min,
							     struct strata_move **out, uint32_t max)
{
	struct virt_priv *p = m->priv;
	uint32_t n = 0;
	struct strata_move *top;
	while (n < max && (top = p->inflight.head)) {
		if (strata_u2d(top->done_ns) > *m->cfg.clock_ns) {
			if (n >= min)
				break;
			*m->cfg.clock_ns = strata_u2d(top->done_ns); /* waiting costs time */
		}
		strata_moveq_pop(&p->inflight);
		top->done_bytes = top->bytes;
		top->res = 0;
		top->status = STRATA_MOVE_DONE;
		out[n++] = top;
	}
	return (int)n;
}

static int virt_reap(struct strata_mover *m, uint32_t min, struct strata_move **out, uint32_t max)
{
	return reap_batch(m, min, out, max);
}

/* strata_mover_reap() for a virtual mover, in one loop: the same moves in
 * the same order, the same counts, the same clock.  The generic layer reaps
 * in batches of at most 64 and stops after a batch once min moves are in;
 * that boundary is kept (a 64th move ends the call if min is reached).  Each
 * callback runs as its move is reaped instead of after its batch: a callback
 * (the engine's job_done) touches only other movers and the engine, never
 * this mover's counts or moves in flight, so the order between them does
 * not show.  A virtual move never fails: no error to report. */
int strata_mover_virtual_reap(struct strata_mover *m, uint32_t min)
{
	struct virt_priv *p = m->priv;
	struct strata_move *mv;
	uint32_t total = 0, batch = 0;
	if (min > m->outstanding)
		min = m->outstanding;
	while ((mv = p->inflight.head)) {
		if (batch == 64) {
			if (total >= min)
				break;
			batch = 0;
		}
		if (strata_u2d(mv->done_ns) > *m->cfg.clock_ns) {
			if (total >= min)
				break;
			*m->cfg.clock_ns = strata_u2d(mv->done_ns); /* waiting costs time */
		}
		strata_moveq_pop(&p->inflight);
		mv->done_bytes = mv->bytes;
		mv->res = 0;
		mv->status = STRATA_MOVE_DONE;
		mv->reaped = true;
		m->outstanding--;
		m->moves++;
		m->bytes += mv->bytes;
		if (mv->done_ns > mv->submit_ns)
			m->busy_ns += strata_u2d(mv->done_ns - mv->submit_ns);
		total++;
		batch++;
		if (mv->on_done)
			mv->on_done(mv);
	}
	return (int)total;
}

bool strata_mover_virtual_start_idle(struct strata_mover *m, struct strata_move *mv)
{
	struct virt_priv *p = m->priv;
	/* a device queue holding one move's worth of work: the links take it once
	 * their backlog is shorter than the move's own time on them (latencies
	 * and transfers), so it transfers right after what is under way, and a
	 * demand arriving later waits for that one move at most */
	double own = 0, t = strata_u2d(mv->not_before_ns);
	for (int k = 0; k < 2 && m->cfg.links[k]; k++)
		own += m->cfg.links[k]->lat_us * 1e3 + strata_u2d(mv->bytes) / m->cfg.links[k]->gbps;
	for (int k = 0; k < 2 && m->cfg.links[k]; k++)
		if (m->cfg.links[k]->busy_until - own > t)
			t = m->cfg.links[k]->busy_until - own;
	if (t >= *m->cfg.clock_ns || p->queued.head)
		return false;
	mv->status = STRATA_MOVE_QUEUED;
	mv->reaped = false;
	mv->res = 0;
	mv->done_bytes = 0;
	m->outstanding++;
	mv->submit_ns = round_ns(t);
	for (int k = 0; k < 2 && m->cfg.links[k]; k++)
		t = schedule(m->cfg.links[k], t, mv->bytes);
	mv->done_ns = round_ns(t);
	mv->status = STRATA_MOVE_INFLIGHT;
	assert(!p->inflight.tail || p->inflight.tail->done_ns <= mv->done_ns);
	strata_moveq_push(&p->inflight, mv);
	return true;
}

/* strata_mover_submit() for a virtual mover: its submit cannot fail. */
void strata_mover_virtual_submit(struct strata_mover *m)
{
	virt_submit(m);
}

const struct strata_mover_ops strata_mover_virtual = {
	.name = "virtual", .version = STRATA_MOVER_ABI, .caps = STRATA_MOVER_C_VIRTUAL | STRATA_MOVER_C_ASYNC,
	.help = "moves nothing; advances a virtual clock by latency + bytes / bandwidth per link",
	.priv_size = sizeof(struct virt_priv),
	.init = virt_init, .queue = virt_queue, .submit = virt_submit, .reap = virt_reap,
};
