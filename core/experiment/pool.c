/*
 * The fork pool of a sweep (see exp_int.h).  Why fork per configuration: a
 * run owns a whole engine (tiers, movers, policy states, possibly a GPU
 * context); a process keeps runs from sharing anything, lets a crashing
 * configuration fail its own row only, and needs no thread safety from any
 * module.  The result travels back as the plain struct through a pipe (same
 * binary on both ends).  Rows are appended as they finish, so an interrupted
 * sweep keeps every finished row.
 *
 * Workers never outlive the sweep: each dies with its parent (PR_SET_PDEATHSIG,
 * so a SIGKILLed parent leaves no orphan), and when the parent is interrupted
 * (SIGINT/SIGTERM/SIGHUP, sent to it alone or to the whole process group) it
 * passes the signal on to its workers, then SIGKILLs any still running
 * STRATA_EXP_STOP_GRACE_S seconds later.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exp_int.h"
#include "strata/util.h"

/* Message a worker sends back. */
struct worker_msg {
	int rc;
	struct strata_error err;
	struct strata_replay_result res;
};

struct worker {
	pid_t pid;
	int fd;
	size_t idx;      /* config index */
	size_t got;
	struct worker_msg msg;
};

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int start_worker(struct worker *w, const struct strata_experiment_config *c, size_t idx)
{
	int fds[2];
	if (pipe(fds))
		return -1;
	fflush(stdout);
	fflush(stderr);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		close(fds[0]);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
			_exit(5); /* the parent is already gone */
		struct worker_msg *m = calloc(1, sizeof(*m));
		if (!m)
			_exit(3);
		m->rc = strata_experiment_run_one(c, &m->res, &m->err);
		int bad = write_all(fds[1], m, sizeof(*m));
		_exit(bad ? 4 : 0);
	}
	close(fds[1]);
	memset(w, 0, sizeof(*w));
	w->pid = pid;
	w->fd = fds[0];
	w->idx = idx;
	return 0;
}

/* The worker's pipe is readable: read; on EOF reap it and fill o. */
static int pump_worker(struct worker *w, struct strata_exp_outcome *o)
{
	char *buf = (char *)&w->msg;
	ssize_t r = read(w->fd, buf + w->got, sizeof(w->msg) - w->got);
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (r > 0) {
		w->got += (size_t)r;
		if (w->got < sizeof(w->msg))
			return 0;
	}
	/* complete message or EOF/error: reap */
	close(w->fd);
	int st = 0;
	while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR)
		;
	memset(o, 0, sizeof(*o));
	o->done = 1;
	if (w->got == sizeof(w->msg)) {
		o->rc = w->msg.rc;
		o->err = w->msg.err;
		o->res = w->msg.res;
	} else if (strata_interrupted) { /* stopped by the sweep's interrupt: not a result */
		o->rc = STRATA_ERR(&o->err, STRATA_EINTR, "worker stopped by the interrupt");
	} else if (WIFSIGNALED(st)) {
		o->rc = STRATA_ERR(&o->err, STRATA_EIO, "worker crashed: %s", strsignal(WTERMSIG(st)));
	} else {
		o->rc = STRATA_ERR(&o->err, STRATA_EIO, "worker exited with status %d and no result",
				   WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	return 1;
}

void strata_exp_pool_run(const struct strata_experiment_config *cfg, struct strata_exp_outcome *oc, size_t n,
			 uint32_t jobs, FILE *csv, char tagcols[][48], uint32_t n_tagcols, const char *what,
			 size_t pending, struct strata_exp_pool_stats *st)
{
	memset(st, 0, sizeof(*st));
	struct worker *ws = calloc(jobs, sizeof(*ws));
	struct pollfd *pf = calloc(jobs, sizeof(*pf));
	if (!ws || !pf) {
		free(ws);
		free(pf);
		st->spawn_errno = ENOMEM;
		return;
	}
	struct strata_progress pg;
	strata_progress_start(&pg, what, pending, NULL);
	size_t next = 0;
	uint32_t running = 0;
	uint64_t stop_ns = 0; /* when the interrupt was passed on to the workers */
	for (;;) {
		if (strata_interrupted && running) {
			uint64_t now = strata_now_ns();
			if (!stop_ns) {
				stop_ns = now;
				for (uint32_t s = 0; s < jobs; s++)
					if (ws[s].pid)
						kill(ws[s].pid, strata_interrupted);
			} else if (now - stop_ns > STRATA_EXP_STOP_GRACE_S * 1000000000ull) {
				for (uint32_t s = 0; s < jobs; s++)
					if (ws[s].pid)
						kill(ws[s].pid, SIGKILL);
			}
		}
		while (!strata_interrupted && !st->spawn_errno && running < jobs) {
			while (next < n && oc[next].done)
				next++;
			if (next >= n)
				break;
			uint32_t slot = 0;
			while (ws[slot].pid)
				slot++;
			if (start_worker(&ws[slot], &cfg[next], next)) {
				st->spawn_errno = errno ? errno : EAGAIN;
				break;
			}
			next++;
			running++;
		}
		if (!running)
			break;
		nfds_t np = 0;
		uint32_t map[1024];
		for (uint32_t s = 0; s < jobs && np < 1024; s++)
			if (ws[s].pid) {
				pf[np].fd = ws[s].fd;
				pf[np].events = POLLIN;
				pf[np].revents = 0;
				map[np++] = s;
			}
		int pr = poll(pf, np, strata_interrupted ? 200 : 1000);
		if (pr < 0 && errno != EINTR)
			break;
		for (nfds_t i = 0; pr > 0 && i < np; i++) {
			if (!pf[i].revents)
				continue;
			struct worker *w = &ws[map[i]];
			struct strata_exp_outcome o;
			if (!pump_worker(w, &o))
				continue;
			size_t idx = w->idx;
			w->pid = 0;
			running--;
			if (o.rc == STRATA_EINTR) /* not finished: a resume redoes it */
				continue;
			oc[idx] = o;
			st->finished++;
			st->failed += o.rc != 0;
			if (!o.rc && o.res.warning[0] && !st->warned++)
				snprintf(st->warning, sizeof(st->warning), "%s", o.res.warning);
			if (csv) {
				strata_exp_csv_row(csv, &cfg[idx], &oc[idx], tagcols, n_tagcols);
				errno = 0;
				if ((fflush(csv) || ferror(csv)) && !st->write_errno)
					st->write_errno = errno ? errno : EIO;
			}
			if (o.rc)
				fprintf(stderr, "strata run: %s: row %zu failed: %s\n", what, idx + 1, o.err.msg);
			strata_progress_update(&pg, st->finished);
		}
	}
	strata_progress_finish(&pg);
	/* once per sweep, not once per row: the first warning and how many had one */
	for (const char *w = st->warning; st->warned && *w;) {
		const char *nl = strchr(w, '\n');
		int l = nl ? (int)(nl - w) : (int)strlen(w);
		fprintf(stderr, "strata run: %s: warning in %zu of %zu runs, e.g.: %.*s\n", what, st->warned,
			st->finished, l, w);
		w += l + (nl != NULL);
	}
	free(ws);
	free(pf);
}
