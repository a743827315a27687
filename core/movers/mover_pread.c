/* pread: synchronous NVMe -> RAM reads (O_DIRECT when the fd is), the
 * fallback where io_uring is unavailable.  A partial read resumes from
 * done_bytes; EINTR/EAGAIN go back to the generic layer, which retries. */
#include <errno.h>
#include <unistd.h>

#include "mover_int.h"
#include "strata/util.h"

struct pread_priv {
	struct strata_syncq q;
	struct strata_move *cur; /* interrupted mid-move */
};

static int pread_init(struct strata_mover *m, struct strata_error *err) { return STRATA_OK; }

static int pread_queue(struct strata_mover *m, struct strata_move *mv)
{
	if (mv->fd < 0 || !mv->dst)
		return -EINVAL;
	strata_moveq_push(&((struct pread_priv *)m->priv)->q.queued, mv);
	return 0;
}

static int pread_submit(struct strata_mover *m)
{
	struct pread_priv *p = m->priv;
	int n = 0;
	for (;;) {
		struct strata_move *mv = p->cur ? p->cur : strata_moveq_pop(&p->q.queued);
		if (!mv)
			return n;
		if (!p->cur)
			mv->submit_ns = strata_now_ns();
		p->cur = mv;
		int res = 0;
		while (mv->done_bytes < mv->bytes) {
			ssize_t r = pread(mv->fd, (char *)mv->dst + mv->done_bytes, mv->bytes - mv->done_bytes,
					  (off_t)(mv->offset + mv->done_bytes));
			if (r < 0 && (errno == EINTR || errno == EAGAIN))
				return -errno;
			if (r <= 0) {
				res = r == 0 ? -ENODATA : -errno;
				break;
			}
			mv->done_bytes += (uint64_t)r;
		}
		p->cur = NULL;
		strata_move_finish(mv, res, strata_now_ns());
		strata_moveq_push(&p->q.done, mv);
		n++;
	}
}

static int pread_reap(struct strata_mover *m, uint32_t min, struct strata_move **out, uint32_t max)
{
	return strata_syncq_reap(&((struct pread_priv *)m->priv)->q, out, max);
}

const struct strata_mover_ops strata_mover_pread = {
	.name = "pread", .version = STRATA_MOVER_ABI, .caps = STRATA_MOVER_C_FILE_SRC,
	.help = "NVMe -> RAM with pread (synchronous fallback)",
	.priv_size = sizeof(struct pread_priv),
	.init = pread_init, .queue = pread_queue, .submit = pread_submit, .reap = pread_reap,
};
