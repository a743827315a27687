/* mmap: NVMe -> RAM by mapping the whole shard and memcpy'ing the extent, the
 * page-cache baseline the io_uring mover is compared with.  Maps are made on
 * first use of an fd and kept until the mover is freed.  An extent past the
 * end of the mapped file fails with ENODATA (a truncated shard), never SIGBUS. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "mover_int.h"
#include "strata/util.h"

struct map {
	int fd;
	uint8_t *addr;
	uint64_t len;
};

struct mmap_priv {
	struct strata_syncq q;
	struct map *maps;
	uint32_t n, cap;
};

static int mmap_init(struct strata_mover *m, struct strata_error *err) { return STRATA_OK; }

static void mmap_free(struct strata_mover *m)
{
	struct mmap_priv *p = m->priv;
	for (uint32_t i = 0; i < p->n; i++)
		if (p->maps[i].addr)
			munmap(p->maps[i].addr, p->maps[i].len);
	free(p->maps);
}

static int map_of(struct mmap_priv *p, int fd, struct map **out)
{
	for (uint32_t i = 0; i < p->n; i++)
		if (p->maps[i].fd == fd) {
			*out = &p->maps[i];
			return 0;
		}
	struct stat st;
	if (fstat(fd, &st))
		return -errno;
	if (p->n == p->cap) {
		uint32_t cap = p->cap ? p->cap * 2 : 8;
		struct map *n = realloc(p->maps, sizeof(*n) * cap);
		if (!n)
			return -ENOMEM;
		p->maps = n;
		p->cap = cap;
	}
	struct map *mp = &p->maps[p->n];
	mp->fd = fd;
	mp->len = (uint64_t)st.st_size;
	mp->addr = NULL;
	if (mp->len) {
		void *a = mmap(NULL, mp->len, PROT_READ, MAP_SHARED, fd, 0);
		if (a == MAP_FAILED)
			return -errno;
		mp->addr = a;
	}
	p->n++;
	*out = mp;
	return 0;
}

static int mmap_queue(struct strata_mover *m, struct strata_move *mv)
{
	if (mv->fd < 0 || !mv->dst)
		return -EINVAL;
	strata_moveq_push(&((struct mmap_priv *)m->priv)->q.queued, mv);
	return 0;
}

static int mmap_submit(struct strata_mover *m)
{
	struct mmap_priv *p = m->priv;
	struct strata_move *mv;
	int n = 0;
	while ((mv = strata_moveq_pop(&p->q.queued))) {
		struct map *mp = NULL;
		mv->submit_ns = strata_now_ns();
		int res = map_of(p, mv->fd, &mp);
		if (!res) {
			uint64_t avail = mv->offset < mp->len ? mp->len - mv->offset : 0;
			uint64_t n_copy = avail < mv->bytes ? avail : mv->bytes;
			if (n_copy)
				memcpy(mv->dst, mp->addr + mv->offset, n_copy);
			mv->done_bytes = n_copy;
			res = n_copy < mv->bytes ? -ENODATA : 0;
		}
		strata_move_finish(mv, res, strata_now_ns());
		strata_moveq_push(&p->q.done, mv);
		n++;
	}
	return n;
}

static int mmap_reap(struct strata_mover *m, uint32_t min, struct strata_move **out, uint32_t max)
{
	return strata_syncq_reap(&((struct mmap_priv *)m->priv)->q, out, max);
}

const struct strata_mover_ops strata_mover_mmap = {
	.name = "mmap", .version = STRATA_MOVER_ABI, .caps = STRATA_MOVER_C_FILE_SRC,
	.help = "NVMe -> RAM with mmap + memcpy (page-cache baseline)",
	.priv_size = sizeof(struct mmap_priv),
	.init = mmap_init, .free = mmap_free, .queue = mmap_queue, .submit = mmap_submit, .reap = mmap_reap,
};
