/*
 * The generic mover layer (see include/strata/mover.h): the registry, the
 * loader's ops checks, and the one place where -EAGAIN/-EINTR are retried and
 * -errno results become errors that name the file.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "strata/gpu.h"
#include "strata/mover.h"
#include "strata/util.h"

static const struct strata_mover_ops *const registry[] = {
	&strata_mover_uring, &strata_mover_mmap, &strata_mover_pread, &strata_mover_cuda,
	&strata_mover_host,  &strata_mover_staged, &strata_mover_virtual, NULL,
};

const struct strata_mover_ops *strata_mover_find(const char *name)
{
	for (unsigned i = 0; registry[i]; i++)
		if (!strcmp(registry[i]->name, name))
			return registry[i];
	return NULL;
}

const struct strata_mover_ops *strata_mover_at(unsigned i)
{
	return i < sizeof(registry) / sizeof(registry[0]) ? registry[i] : NULL;
}

int strata_mover_open(const struct strata_mover_ops *ops, const struct strata_mover_config *cfg,
		      struct strata_mover **out, struct strata_error *err)
{
	*out = NULL;
	if (!ops)
		return STRATA_ERR(err, STRATA_ENOTFOUND, "mover: unknown mover");
	if (ops->version != STRATA_MOVER_ABI)
		return STRATA_ERR(err, STRATA_EVERSION, "mover %s: ABI version %u, expected %u", ops->name,
				  ops->version, STRATA_MOVER_ABI);
	if (!ops->init || !ops->queue || !ops->submit || !ops->reap)
		return STRATA_ERR(err, STRATA_EINVAL, "mover %s: missing a required op (init/queue/submit/reap)",
				  ops->name);
	if ((ops->caps & STRATA_MOVER_C_NEEDS_GPU) && strata_gpu_count() <= 0)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "mover %s: needs a GPU and none is usable", ops->name);
	struct strata_mover *m = calloc(1, sizeof(*m));
	if (!m)
		return STRATA_ERR(err, STRATA_ENOMEM, "mover %s: out of memory", ops->name);
	m->ops = ops;
	if (cfg)
		m->cfg = *cfg;
	if (!m->cfg.queue_depth)
		m->cfg.queue_depth = 32;
	if (ops->priv_size && !(m->priv = calloc(1, ops->priv_size))) {
		free(m);
		return STRATA_ERR(err, STRATA_ENOMEM, "mover %s: out of memory", ops->name);
	}
	int rc = ops->init(m, err);
	if (rc) {
		strata_error_prefix(err, "mover %s", ops->name);
		free(m->priv);
		free(m);
		return rc;
	}
	*out = m;
	return STRATA_OK;
}

/* ---- checks off the caller's thread ---------------------------------------- */

/* One thread hashes the reads that need a check, in the order they finished:
 * `in` waits for it, `out` holds the hashed (check_got set) for a reap. */
struct strata_checker {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t work, hashed;
	struct strata_move *in_head, *in_tail, *out;
	bool stop;
};

static void *checker_main(void *arg)
{
	struct strata_checker *c = arg;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->in_head && !c->stop)
			pthread_cond_wait(&c->work, &c->mu);
		struct strata_move *mv = c->in_head;
		if (!mv)
			break; /* stopped with nothing left */
		c->in_head = mv->next;
		if (!c->in_head)
			c->in_tail = NULL;
		pthread_mutex_unlock(&c->mu);
		uint64_t got = XXH3_64bits(mv->dst, mv->check_bytes);
		pthread_mutex_lock(&c->mu);
		mv->check_got = got;
		mv->next = c->out;
		c->out = mv;
		pthread_cond_signal(&c->hashed);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void checker_stop(struct strata_checker *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->work);
	pthread_cond_destroy(&c->hashed);
	free(c);
}

/* Hand mv to m's checker (made on first use); false if it cannot be made
 * (the caller hashes mv itself). */
static bool checker_push(struct strata_mover *m, struct strata_move *mv)
{
	struct strata_checker *c = m->chk;
	if (!c) {
		if (!(c = calloc(1, sizeof(*c))))
			return false;
		pthread_mutex_init(&c->mu, NULL);
		pthread_cond_init(&c->work, NULL);
		pthread_cond_init(&c->hashed, NULL);
		if (pthread_create(&c->thread, NULL, checker_main, c)) {
			pthread_mutex_destroy(&c->mu);
			pthread_cond_destroy(&c->work);
			pthread_cond_destroy(&c->hashed);
			free(c);
			return false;
		}
		m->chk = c;
	}
	pthread_mutex_lock(&c->mu);
	mv->next = NULL;
	if (c->in_tail)
		c->in_tail->next = mv;
	else
		c->in_head = mv;
	c->in_tail = mv;
	pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->mu);
	m->checking++;
	return true;
}

static void check_result(struct strata_move *mv)
{
	if (mv->check_got != mv->check_xxh3) {
		mv->status = STRATA_MOVE_FAILED;
		mv->res = -EBADMSG;
	}
}

/* Up to max hashed moves into out[], their results applied. */
static uint32_t checker_collect(struct strata_mover *m, struct strata_move **out, uint32_t max)
{
	struct strata_checker *c = m->chk;
	uint32_t n = 0;
	if (!m->checking)
		return 0;
	pthread_mutex_lock(&c->mu);
	while (n < max && c->out) {
		struct strata_move *mv = c->out;
		c->out = mv->next;
		mv->next = NULL;
		check_result(mv);
		out[n++] = mv;
	}
	pthread_mutex_unlock(&c->mu);
	m->checking -= n;
	return n;
}

/* Until the checker has hashed a move (some are being hashed). */
static void checker_wait(struct strata_mover *m)
{
	struct strata_checker *c = m->chk;
	pthread_mutex_lock(&c->mu);
	while (!c->out)
		pthread_cond_wait(&c->hashed, &c->mu);
	pthread_mutex_unlock(&c->mu);
}

void strata_mover_close(struct strata_mover *m)
{
	if (!m)
		return;
	struct strata_error err;
	strata_mover_drain(m, &err);
	checker_stop(m->chk);
	if (m->ops->free)
		m->ops->free(m);
	free(m->priv);
	free(m);
}

int strata_move_error(const struct strata_move *mv, struct strata_error *err)
{
	char a[32], b[32];
	int e = -mv->res;
	if (e == EBADMSG && mv->check_bytes)
		return STRATA_ERR(err, STRATA_ECORRUPT,
				  "%s: checksum mismatch in the extent at offset %llu (%llu bytes): stored %016llx, "
				  "read %016llx (corrupt shard; `strata inspect --verify` lists every bad extent)",
				  mv->path ? mv->path : "(memory)", (unsigned long long)mv->offset,
				  (unsigned long long)mv->check_bytes, (unsigned long long)mv->check_xxh3,
				  (unsigned long long)mv->check_got);
	if (mv->path && e == ENODATA)
		return STRATA_ERR(err, STRATA_EIO,
				  "%s: read at offset %llu (%llu bytes): short read, %llu of %llu bytes (truncated file?)",
				  mv->path, (unsigned long long)mv->offset, (unsigned long long)mv->bytes,
				  (unsigned long long)mv->done_bytes, (unsigned long long)mv->bytes);
	if (mv->path)
		return strata_error_set(err, STRATA_EIO, e, __FILE__, __LINE__, "%s: read at offset %llu (%s)",
					mv->path, (unsigned long long)mv->offset, strata_fmt_bytes(mv->bytes, a, sizeof(a)));
	return strata_error_set(err, e == EINVAL ? STRATA_EINVAL : STRATA_EGPU, e, __FILE__, __LINE__,
				"copy of %s to %p failed", strata_fmt_bytes(mv->bytes, b, sizeof(b)), mv->dst);
}

/* Before m->outstanding changes: account the time since the last change. */
static void track(struct strata_mover *m)
{
	uint64_t now = strata_now_ns();
	if (m->outstanding && now > m->t_last) {
		m->active_ns += (double)(now - m->t_last);
		m->qd_ns += (double)m->outstanding * (double)(now - m->t_last);
	}
	m->t_last = now;
}

static int submit_retry(struct strata_mover *m)
{
	int r;
	do
		r = m->ops->submit(m);
	while (r == -EAGAIN || r == -EINTR);
	return r;
}

int strata_mover_submit(struct strata_mover *m, struct strata_error *err)
{
	int r = submit_retry(m);
	if (r < 0)
		return strata_error_set(err, STRATA_EIO, -r, __FILE__, __LINE__, "mover %s: submit", m->ops->name);
	return STRATA_OK;
}

int strata_mover_reap(struct strata_mover *m, uint32_t min, struct strata_error *err)
{
	struct strata_move *done[64];
	int total = 0, rc = STRATA_OK;
	if (min > m->outstanding)
		min = m->outstanding;
	for (;;) {
		/* the moves the checker has hashed, then the mover's own; block on
		 * the mover only while nothing is being hashed, on the checker
		 * only when every move left is there */
		int r = (int)checker_collect(m, done, 64), q = 0;
		uint32_t left = (uint32_t)(total + r) >= min ? 0 : min - (uint32_t)(total + r);
		if (left && m->checking && m->outstanding == m->checking && !r) {
			checker_wait(m);
			continue;
		}
		if (r < 64) {
			q = m->ops->reap(m, m->checking ? 0 : left, done + r, 64 - (uint32_t)r);
			if (q == -EAGAIN || q == -EINTR)
				continue;
			if (q < 0)
				return strata_error_set(err, STRATA_EIO, -q, __FILE__, __LINE__, "mover %s: reap",
							m->ops->name);
			/* a device destination is checked by its mover (staged: in
			 * the bounce buffers); host memory by the checker */
			int k = r;
			for (int i = r; i < r + q; i++) {
				struct strata_move *mv = done[i];
				if (mv->check_bytes && mv->status == STRATA_MOVE_DONE &&
				    !(m->ops->caps & STRATA_MOVER_C_DEVICE_DST)) {
					if (checker_push(m, mv))
						continue; /* completes when hashed */
					mv->check_got = XXH3_64bits(mv->dst, mv->check_bytes);
					check_result(mv);
				}
				done[k++] = mv;
			}
			r = k;
		}
		for (int i = 0; i < r; i++) {
			struct strata_move *mv = done[i];
			mv->reaped = true;
			track(m);
			m->outstanding--;
			m->moves++;
			if (mv->status == STRATA_MOVE_FAILED) {
				m->failed++;
				if (rc == STRATA_OK)
					rc = strata_move_error(mv, err);
			} else {
				m->bytes += mv->bytes;
			}
			if (mv->done_ns > mv->submit_ns)
				m->busy_ns += (double)(mv->done_ns - mv->submit_ns);
		}
		/* Callbacks after the counts are settled: they may queue more. */
		for (int i = 0; i < r; i++)
			if (done[i]->on_done)
				done[i]->on_done(done[i]);
		total += r;
		if ((uint32_t)total >= min || (r == 0 && q == 0 && !m->checking))
			break;
	}
	return rc ? rc : total;
}

int strata_mover_queue(struct strata_mover *m, struct strata_move *mv, struct strata_error *err)
{
	mv->status = STRATA_MOVE_QUEUED;
	mv->reaped = false;
	mv->res = 0;
	mv->done_bytes = 0;
	for (;;) {
		int r = m->ops->queue(m, mv);
		if (r == 0) {
			track(m);
			if (++m->outstanding > m->max_outstanding)
				m->max_outstanding = m->outstanding;
			return STRATA_OK;
		}
		if (r != -EBUSY) {
			mv->status = STRATA_MOVE_FAILED;
			mv->res = r;
			return strata_error_set(err, r == -EINVAL ? STRATA_EINVAL : STRATA_EIO, -r, __FILE__, __LINE__,
						"mover %s: cannot queue a move of %llu bytes%s%s", m->ops->name,
						(unsigned long long)mv->bytes, mv->path ? " from " : "",
						mv->path ? mv->path : "");
		}
		int rc = strata_mover_submit(m, err);
		if (rc)
			return rc;
		rc = strata_mover_reap(m, 1, err);
		if (rc < 0)
			return rc;
	}
}

int strata_mover_wait(struct strata_mover *m, struct strata_move *mv, struct strata_error *err)
{
	int rc = strata_mover_submit(m, err);
	if (rc)
		return rc;
	int first = STRATA_OK;
	while (!mv->reaped) {
		if (!m->outstanding)
			return STRATA_ERR(err, STRATA_EINVAL, "mover %s: waiting for a move it does not hold",
					  m->ops->name);
		struct strata_error e2;
		/* a synchronous mover may have finished it inside submit */
		rc = strata_mover_reap(m, mv->status >= STRATA_MOVE_DONE ? 0 : 1, &e2);
		if (rc < 0 && first == STRATA_OK) {
			first = rc;
			if (err)
				*err = e2;
		}
	}
	if (mv->status == STRATA_MOVE_FAILED)
		return strata_move_error(mv, err);
	return first;
}

int strata_mover_drain(struct strata_mover *m, struct strata_error *err)
{
	int first = strata_mover_submit(m, err);
	while (m->outstanding) {
		int rc = strata_mover_reap(m, m->outstanding, err);
		if (rc < 0 && first == STRATA_OK)
			first = rc;
	}
	return first;
}

int strata_mover_run(struct strata_mover *m, struct strata_move *mv, struct strata_error *err)
{
	int rc = strata_mover_queue(m, mv, err);
	return rc ? rc : strata_mover_wait(m, mv, err);
}

void strata_vlink_init(struct strata_vlink *l, double gbps, double lat_us, uint32_t queue_depth)
{
	memset(l, 0, sizeof(*l));
	l->gbps = gbps > 0 ? gbps : 1;
	l->lat_us = lat_us > 0 ? lat_us : 0;
	l->queue_depth = queue_depth ? queue_depth : 1;
	l->slot_free = calloc(l->queue_depth, sizeof(double));
	if (!l->slot_free)
		l->queue_depth = 0;
}

void strata_vlink_free(struct strata_vlink *l)
{
	free(l->slot_free);
	l->slot_free = NULL;
}
