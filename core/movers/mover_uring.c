/* uring: NVMe -> RAM with io_uring.  The caller hands O_DIRECT fds (the
 * store's) and 4 KiB-aligned buffers, offsets and lengths; one SQE reads one
 * extent.  Moves in flight never exceed queue_depth, so the completion ring
 * (twice the SQ) cannot overflow.  A short read resumes from where it stopped;
 * a read that returns 0 before the end is a truncated file (ENODATA); a
 * per-I/O -EAGAIN/-EINTR completion is simply resubmitted. */
#include <errno.h>
#include <liburing.h>
#include <string.h>

#include "strata/mover.h"
#include "strata/tier_mem.h"
#include "strata/util.h"

struct uring_priv {
	struct io_uring ring;
	uint32_t inflight;  /* SQEs prepared and not yet completed */
	uint32_t unsubmitted;
	int ready;
};

static int uring_init(struct strata_mover *m, struct strata_error *err)
{
	struct uring_priv *p = m->priv;
	int r = io_uring_queue_init(m->cfg.queue_depth, &p->ring, 0);
	if (r < 0)
		return strata_error_set(err, STRATA_EUNSUPPORTED, -r, __FILE__, __LINE__,
					"io_uring_queue_init(%u)", m->cfg.queue_depth);
	p->ready = 1;
	return STRATA_OK;
}

static void uring_free(struct strata_mover *m)
{
	struct uring_priv *p = m->priv;
	if (p->ready)
		io_uring_queue_exit(&p->ring);
}

static int prep(struct uring_priv *p, struct strata_move *mv)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&p->ring);
	if (!sqe)
		return -EBUSY;
	uint64_t left = mv->bytes - mv->done_bytes;
	/* one SQE reads at most 2 GiB - 4 KiB, the kernel's per-call cap */
	unsigned len = left > 0x7ffff000u ? 0x7ffff000u : (unsigned)left;
	io_uring_prep_read(sqe, mv->fd, (char *)mv->dst + mv->done_bytes, len, mv->offset + mv->done_bytes);
	io_uring_sqe_set_data(sqe, mv);
	p->inflight++;
	p->unsubmitted++;
	return 0;
}

static int uring_queue(struct strata_mover *m, struct strata_move *mv)
{
	struct uring_priv *p = m->priv;
	if (mv->fd < 0 || !mv->dst || ((uintptr_t)mv->dst | mv->offset | mv->bytes) % STRATA_TIER_ALIGN)
		return -EINVAL;
	if (p->inflight >= m->cfg.queue_depth)
		return -EBUSY;
	mv->submit_ns = strata_now_ns();
	mv->status = STRATA_MOVE_INFLIGHT;
	return prep(p, mv);
}

static int uring_submit(struct strata_mover *m)
{
	struct uring_priv *p = m->priv;
	if (!p->unsubmitted)
		return 0;
	int r = io_uring_submit(&p->ring);
	if (r < 0)
		return r;
	p->unsubmitted = 0;
	return r;
}

static int uring_reap(struct strata_mover *m, uint32_t min, struct strata_move **out, uint32_t max)
{
	struct uring_priv *p = m->priv;
	uint32_t n = 0;
	while (n < max) {
		struct io_uring_cqe *cqe;
		int r = io_uring_peek_cqe(&p->ring, &cqe);
		if (r == -EAGAIN) {
			if (n >= min || !p->inflight)
				break;
			if (p->unsubmitted && (r = io_uring_submit(&p->ring)) < 0)
				return n ? (int)n : r;
			if (r > 0)
				p->unsubmitted = 0;
			r = io_uring_wait_cqe(&p->ring, &cqe);
		}
		if (r < 0)
			return n ? (int)n : r;
		struct strata_move *mv = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&p->ring, cqe);
		p->inflight--;
		if (res == -EAGAIN || res == -EINTR || (res > 0 && mv->done_bytes + (uint64_t)res < mv->bytes)) {
			if (res > 0)
				mv->done_bytes += (uint64_t)res;
			if (prep(p, mv) == 0)
				continue;
			res = -EBUSY; /* cannot happen: a CQE was just freed */
		} else if (res > 0) {
			mv->done_bytes += (uint64_t)res;
			res = 0;
		} else if (res == 0) {
			res = -ENODATA; /* EOF before the end of the extent */
		}
		mv->res = res;
		mv->status = res ? STRATA_MOVE_FAILED : STRATA_MOVE_DONE;
		mv->done_ns = strata_now_ns();
		out[n++] = mv;
	}
	if (p->unsubmitted && io_uring_submit(&p->ring) > 0)
		p->unsubmitted = 0; /* resumed short reads */
	return (int)n;
}

const struct strata_mover_ops strata_mover_uring = {
	.name = "uring", .version = STRATA_MOVER_ABI,
	.caps = STRATA_MOVER_C_FILE_SRC | STRATA_MOVER_C_DIRECT | STRATA_MOVER_C_ASYNC,
	.help = "NVMe -> RAM with io_uring and O_DIRECT into aligned buffers",
	.priv_size = sizeof(struct uring_priv),
	.init = uring_init, .free = uring_free, .queue = uring_queue, .submit = uring_submit, .reap = uring_reap,
};
