/* staged: NVMe -> VRAM through pinned bounce buffers.  Composes two movers
 * given in the config: a file mover (uring, pread, mmap) reads a chunk of the
 * extent into a free bounce buffer; when that read completes, a copy mover
 * (cuda, or host without a GPU) copies the chunk to its place in the
 * destination; the buffer is free again once the copy completes.  With n
 * buffers, reads of later chunks overlap copies of earlier ones.
 *
 * A parent move keeps its progress in priv[]: priv[0] = bytes issued to
 * reads, priv[1] = bytes finished (copied, or given up after a failure).  It
 * completes when every issued chunk has finished, so the caller may reuse its
 * destination the moment it is reaped, even after a failure.
 *
 * A move with a check (mv->check_bytes) is hashed here, chunk by chunk in the
 * bounce buffers, so a read into device memory is checked without a copy
 * back.  XXH3 is a stream, so chunks are hashed in file order: a chunk whose
 * copy finished before an earlier chunk's read keeps its buffer until it has
 * been hashed.  At most n + 1 moves are being hashed at once (every one but
 * the one partly issued holds a buffer).
 *
 * Demand before prefetch: a parent marked mv->low waits while a demand
 * parent has chunks to issue (once started, a parent is finished first). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "mover_int.h"
#include "strata/gpu.h"
#include "strata/tier_mem.h"
#include "strata/util.h"

struct bounce {
	struct strata_mover *m;
	uint8_t *buf;
	struct strata_move *parent;
	uint64_t off, len;       /* chunk within the parent */
	struct strata_move rd, cp;
	int busy;
	int read_ok, copied, hashed; /* checked moves: the chunk's progress */
};

struct hstate {
	struct strata_move *par; /* NULL: free */
	XXH3_state_t *st;
	uint64_t hashed;          /* bytes of par hashed, in order */
};

struct staged_priv {
	struct bounce *b;
	uint32_t nb;
	uint64_t bsz;
	struct strata_moveq pending; /* parents with chunks left to issue */
	struct strata_moveq done;
	int registered;
	struct hstate *hs;        /* nb + 1 */
};

static void staged_free(struct strata_mover *m)
{
	struct staged_priv *p = m->priv;
	for (uint32_t i = 0; p->b && i < p->nb; i++) {
		if (p->registered)
			strata_gpu_host_unregister(p->b[i].buf);
		free(p->b[i].buf);
	}
	free(p->b);
	for (uint32_t i = 0; p->hs && i <= p->nb; i++)
		XXH3_freeState(p->hs[i].st);
	free(p->hs);
}

static int staged_init(struct strata_mover *m, struct strata_error *err)
{
	struct staged_priv *p = m->priv;
	const struct strata_mover_config *c = &m->cfg;
	if (!c->stage_read || !c->stage_copy || !(c->stage_read->ops->caps & STRATA_MOVER_C_FILE_SRC) ||
	    (c->stage_copy->ops->caps & STRATA_MOVER_C_FILE_SRC))
		return STRATA_ERR(err, STRATA_EINVAL, "needs a file mover and a copy mover as its stages");
	p->nb = c->n_bounce ? c->n_bounce : 4;
	p->bsz = c->bounce_bytes ? c->bounce_bytes : 4u << 20;
	p->bsz = (p->bsz + STRATA_TIER_ALIGN - 1) / STRATA_TIER_ALIGN * STRATA_TIER_ALIGN;
	p->b = calloc(p->nb, sizeof(*p->b));
	p->hs = calloc(p->nb + 1, sizeof(*p->hs));
	for (uint32_t i = 0; p->hs && i <= p->nb; i++)
		if (!(p->hs[i].st = XXH3_createState())) {
			staged_free(m);
			return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		}
	if (!p->b || !p->hs) {
		staged_free(m);
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < p->nb; i++) {
		p->b[i].m = m;
		if (!(p->b[i].buf = strata_aligned_alloc(STRATA_TIER_ALIGN, p->bsz))) {
			staged_free(m);
			return STRATA_ERR(err, STRATA_ENOMEM, "bounce buffers: out of memory");
		}
	}
	if (c->bounce_register) {
		int rc = STRATA_OK;
		uint32_t i;
		for (i = 0; !rc && i < p->nb; i++)
			rc = strata_gpu_host_register(p->b[i].buf, p->bsz, err);
		if (rc) {
			for (uint32_t j = 0; j + 1 < i; j++)
				strata_gpu_host_unregister(p->b[j].buf);
			staged_free(m);
			return rc;
		}
		p->registered = 1;
	}
	return STRATA_OK;
}

static struct hstate *hs_of(struct staged_priv *p, const struct strata_move *par)
{
	for (uint32_t i = 0; i <= p->nb; i++)
		if (p->hs[i].par == par)
			return &p->hs[i];
	return NULL;
}

/* Take mv off the pending queue if it is there (it leaves once fully issued,
 * before it can complete and join the done queue through the same link). */
static void pending_remove(struct staged_priv *p, struct strata_move *mv)
{
	struct strata_move *prev = NULL;
	for (struct strata_move *q = p->pending.head; q; prev = q, q = q->next)
		if (q == mv) {
			strata_moveq_unlink(&p->pending, prev, q);
			return;
		}
}

static void chunk_finished(struct bounce *b, int res);

/* A checked move failed: stop hashing it and let go of the chunks that were
 * only waiting to be hashed. */
static void hs_drop(struct staged_priv *p, struct strata_move *par)
{
	struct hstate *h = hs_of(p, par);
	if (!h)
		return;
	h->par = NULL;
	for (uint32_t i = 0; i < p->nb; i++)
		if (p->b[i].busy && p->b[i].parent == par && p->b[i].copied)
			chunk_finished(&p->b[i], 0);
}

/* Hash par's chunks that have arrived, in file order; finish those whose copy
 * is done; compare once the whole move is hashed. */
static void hs_advance(struct staged_priv *p, struct strata_move *par)
{
	struct hstate *h;
	while ((h = hs_of(p, par))) {
		struct bounce *b = NULL;
		for (uint32_t i = 0; i < p->nb && !b; i++)
			if (p->b[i].busy && p->b[i].parent == par && p->b[i].read_ok && !p->b[i].hashed &&
			    p->b[i].off == h->hashed)
				b = &p->b[i];
		if (!b)
			return;
		if (b->off < par->check_bytes)
			XXH3_64bits_update(h->st, b->buf,
					   b->len < par->check_bytes - b->off ? b->len : par->check_bytes - b->off);
		b->hashed = 1;
		h->hashed += b->len;
		if (h->hashed == par->bytes) {
			h->par = NULL;
			par->check_got = XXH3_64bits_digest(h->st);
			if (par->check_got != par->check_xxh3 && !par->res)
				par->res = -EBADMSG;
		}
		if (b->copied)
			chunk_finished(b, 0);
	}
}

static void chunk_finished(struct bounce *b, int res)
{
	struct staged_priv *p = b->m->priv;
	struct strata_move *par = b->parent;
	b->busy = 0;
	b->parent = NULL;
	b->read_ok = b->copied = b->hashed = 0;
	if (res && par->check_bytes)
		hs_drop(p, par);
	if (res && !par->res) {
		par->res = res;
		/* stop issuing: what was never read counts as finished */
		uint64_t unissued = par->bytes - par->priv[0];
		if (unissued)
			pending_remove(p, par);
		par->priv[0] = par->bytes;
		par->priv[1] += unissued;
	} else if (!res) {
		par->done_bytes += b->len;
	}
	par->priv[1] += b->len;
	if (par->priv[1] == par->bytes) {
		strata_move_finish(par, par->res, strata_now_ns());
		strata_moveq_push(&p->done, par);
	}
}

static void copy_done(struct strata_move *cp)
{
	struct bounce *b = cp->user;
	struct staged_priv *p = b->m->priv;
	if (cp->status == STRATA_MOVE_DONE && !b->hashed && hs_of(p, b->parent)) {
		b->copied = 1; /* the buffer waits for its turn to be hashed */
		return;
	}
	chunk_finished(b, cp->status == STRATA_MOVE_DONE ? 0 : (cp->res ? cp->res : -EIO));
}

static void read_done(struct strata_move *rd)
{
	struct bounce *b = rd->user;
	struct strata_mover *m = b->m;
	if (rd->status != STRATA_MOVE_DONE || b->parent->res) {
		chunk_finished(b, rd->status == STRATA_MOVE_DONE ? 0 : (rd->res ? rd->res : -EIO));
		return;
	}
	memset(&b->cp, 0, sizeof(b->cp));
	b->cp.fd = -1;
	b->cp.src = b->buf;
	b->cp.dst = (uint8_t *)b->parent->dst + b->off;
	b->cp.bytes = b->len;
	b->cp.on_done = copy_done;
	b->cp.user = b;
	b->cp.low = b->parent->low;
	b->read_ok = 1;
	struct strata_move *par = b->parent;
	if (strata_mover_queue(m->cfg.stage_copy, &b->cp, NULL)) {
		chunk_finished(b, -EIO);
		return;
	}
	if (par->check_bytes)
		hs_advance(m->priv, par);
}

/* The parent whose chunk goes next: the one partly issued (at most one is,
 * so at most one parent without a buffer is being hashed), else the first
 * demand move (not mv->low), else the oldest prefetch; NULL when none. */
static struct strata_move *next_parent(struct staged_priv *p)
{
	struct strata_move *first_hi = NULL;
	for (struct strata_move *mv = p->pending.head; mv; mv = mv->next) {
		if (mv->priv[0])
			return mv;
		if (!first_hi && !mv->low)
			first_hi = mv;
	}
	return first_hi ? first_hi : p->pending.head;
}

/* Hand free bounce buffers to the next chunks, then submit both stages. */
static int pump(struct strata_mover *m)
{
	struct staged_priv *p = m->priv;
	for (uint32_t i = 0; i < p->nb && p->pending.head; i++) {
		struct bounce *b = &p->b[i];
		if (b->busy)
			continue;
		struct strata_move *par = next_parent(p);
		if (!par)
			break;
		uint64_t left = par->bytes - par->priv[0];
		b->busy = 1;
		b->parent = par;
		b->off = par->priv[0];
		b->len = left < p->bsz ? left : p->bsz;
		b->read_ok = b->copied = b->hashed = 0;
		if (par->check_bytes && b->off == 0) {
			struct hstate *h = hs_of(p, NULL); /* there is one (see the file head) */
			h->par = par;
			h->hashed = 0;
			XXH3_64bits_reset(h->st);
		}
		par->priv[0] += b->len;
		if (par->priv[0] == par->bytes)
			pending_remove(p, par);
		memset(&b->rd, 0, sizeof(b->rd));
		b->rd.fd = par->fd;
		b->rd.path = par->path;
		b->rd.offset = par->offset + b->off;
		b->rd.dst = b->buf;
		b->rd.bytes = b->len;
		b->rd.on_done = read_done;
		b->rd.user = b;
		if (strata_mover_queue(m->cfg.stage_read, &b->rd, NULL))
			chunk_finished(b, b->rd.res ? b->rd.res : -EIO);
	}
	struct strata_error e;
	if (strata_mover_submit(m->cfg.stage_read, &e) || strata_mover_submit(m->cfg.stage_copy, &e))
		return e.sys_errno ? -e.sys_errno : -EIO;
	return 0;
}

static int staged_queue(struct strata_mover *m, struct strata_move *mv)
{
	struct staged_priv *p = m->priv;
	if (mv->fd < 0 || !mv->dst || mv->bytes % STRATA_TIER_ALIGN || mv->offset % STRATA_TIER_ALIGN)
		return -EINVAL;
	mv->priv[0] = mv->priv[1] = 0;
	mv->submit_ns = strata_now_ns();
	mv->status = STRATA_MOVE_INFLIGHT;
	if (!mv->bytes) {
		strata_move_finish(mv, 0, mv->submit_ns);
		strata_moveq_push(&p->done, mv);
		return 0;
	}
	strata_moveq_push(&p->pending, mv);
	return 0;
}

static int staged_submit(struct strata_mover *m)
{
	return pump(m);
}

static int staged_reap(struct strata_mover *m, uint32_t min, struct strata_move **out, uint32_t max)
{
	struct staged_priv *p = m->priv;
	struct strata_mover *rd = m->cfg.stage_read, *cp = m->cfg.stage_copy;
	struct strata_error e;
	uint32_t n = 0;
	for (;;) {
		while (n < max && p->done.head)
			out[n++] = strata_moveq_pop(&p->done);
		if (n >= min || n >= max)
			return (int)n;
		/* Errors of single chunks arrive through the callbacks; only a
		 * failure of the stage itself matters here. */
		int r = 0;
		if (cp->outstanding)
			r = strata_mover_reap(cp, 1, &e);
		else if (rd->outstanding)
			r = strata_mover_reap(rd, 1, &e);
		else if (!p->pending.head)
			return (int)n; /* nothing left anywhere */
		(void)r;
		int pr = pump(m);
		if (pr < 0)
			return n ? (int)n : pr;
		/* opportunistically collect reads that finished meanwhile */
		if (rd->outstanding)
			strata_mover_reap(rd, 0, &e);
	}
}

const struct strata_mover_ops strata_mover_staged = {
	.name = "staged", .version = STRATA_MOVER_ABI,
	.caps = STRATA_MOVER_C_FILE_SRC | STRATA_MOVER_C_DEVICE_DST | STRATA_MOVER_C_DIRECT | STRATA_MOVER_C_ASYNC,
	.help = "NVMe -> VRAM: a file mover into pinned bounce buffers, then a copy mover",
	.priv_size = sizeof(struct staged_priv),
	.init = staged_init, .free = staged_free, .queue = staged_queue, .submit = staged_submit, .reap = staged_reap,
};
