/* host: memcpy from RAM into the host stand-in for VRAM (CI, no GPU).
 * Synchronous: the copy happens in submit. */
#include <errno.h>
#include <string.h>

#include "mover_int.h"
#include "strata/util.h"

static int host_init(struct strata_mover *m, struct strata_error *err) { return STRATA_OK; }

static int host_queue(struct strata_mover *m, struct strata_move *mv)
{
	if (!mv->src || !mv->dst)
		return -EINVAL;
	strata_moveq_push(&((struct strata_syncq *)m->priv)->queued, mv);
	return 0;
}

static int host_submit(struct strata_mover *m)
{
	struct strata_syncq *q = m->priv;
	struct strata_move *mv;
	int n = 0;
	while ((mv = strata_moveq_pop(&q->queued))) {
		mv->submit_ns = strata_now_ns();
		memcpy(mv->dst, mv->src, mv->bytes);
		mv->done_bytes = mv->bytes;
		strata_move_finish(mv, 0, strata_now_ns());
		strata_moveq_push(&q->done, mv);
		n++;
	}
	return n;
}

static int host_reap(struct strata_mover *m, uint32_t min, struct strata_move **out, uint32_t max)
{
	return strata_syncq_reap(m->priv, out, max);
}

const struct strata_mover_ops strata_mover_host = {
	.name = "host", .version = STRATA_MOVER_ABI, .caps = 0,
	.help = "RAM -> host stand-in for VRAM with memcpy (no GPU)",
	.priv_size = sizeof(struct strata_syncq),
	.init = host_init, .queue = host_queue, .submit = host_submit, .reap = host_reap,
};
