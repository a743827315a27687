/* Shared helpers: see include/strata/util.h. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "strata/util.h"

volatile int strata_interrupted;

uint64_t strata_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t strata_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int strata_parse_size(const char *s, uint64_t *out, struct strata_error *err)
{
	char *end;
	if (!s || !*s)
		return STRATA_ERR(err, STRATA_EINVAL, "empty size");
	double v = strtod(s, &end);
	if (end == s || v < 0 || !isfinite(v))
		return STRATA_ERR(err, STRATA_EINVAL, "bad size '%s'", s);
	while (*end == ' ')
		end++;
	double mul = 1;
	char u = (char)toupper((unsigned char)*end);
	if (u) {
		const char *units = "KMGTP";
		const char *pos = strchr(units, u);
		if (!pos)
			return STRATA_ERR(err, STRATA_EINVAL, "bad size unit in '%s' (use K, M, G, T)", s);
		int power = (int)(pos - units) + 1;
		const char *rest = end + 1;
		int decimal;
		if (!*rest || !strcasecmp(rest, "iB") || !strcasecmp(rest, "i"))
			decimal = 0; /* 64K, 2GiB: powers of 1024 */
		else if (!strcmp(rest, "B") || !strcmp(rest, "b"))
			decimal = 1; /* 300MB, 1GB: powers of 1000 */
		else
			return STRATA_ERR(err, STRATA_EINVAL, "bad size unit in '%s'", s);
		mul = pow(decimal ? 1000.0 : 1024.0, power);
	}
	double bytes = v * mul;
	if (bytes > 1.8e19)
		return STRATA_ERR(err, STRATA_EINVAL, "size '%s' too large", s);
	*out = (uint64_t)llround(bytes);
	return STRATA_OK;
}

const char *strata_fmt_bytes(uint64_t bytes, char *buf, size_t len)
{
	const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int i = 0;
	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.2f %s" : "%.0f %s", v, u[i]);
	return buf;
}

void *strata_aligned_alloc(size_t align, size_t bytes)
{
	void *p = NULL;
	if (!bytes)
		bytes = align;
	if (posix_memalign(&p, align, (bytes + align - 1) / align * align))
		return NULL;
	memset(p, 0, bytes);
	return p;
}

void *strata_big_alloc(size_t bytes)
{
	const size_t huge = 2u << 20;
	if (bytes < 2 * huge)
		return malloc(bytes ? bytes : 1);
	void *p = NULL;
	if (posix_memalign(&p, huge, (bytes + huge - 1) / huge * huge))
		return NULL;
	madvise(p, (bytes + huge - 1) / huge * huge, MADV_HUGEPAGE); /* advice only */
	return p;
}

void strata_progress_start(struct strata_progress *p, const char *what, uint64_t total, const char *unit)
{
	memset(p, 0, sizeof(*p));
	p->what = what;
	p->total = total;
	p->unit = unit;
	p->start_ns = p->last_ns = strata_now_ns();
	const char *env = getenv("STRATA_PROGRESS");
	p->enabled = !env || !*env || atoi(env) != 0;
	p->tty = isatty(STDERR_FILENO);
	const char *secs = getenv("STRATA_PROGRESS_SECS");
	double s = secs && *secs ? strtod(secs, NULL) : -1;
	p->log_ns = s >= 0 && s < 1e6 ? (uint64_t)(s * 1e9) : STRATA_PROGRESS_LOG_NS;
}

/* "42s", "3m07s", "2h05m" */
static const char *fmt_secs(double s, char *buf, size_t len)
{
	if (!(s >= 0) || s > 1e8)
		snprintf(buf, len, "?");
	else if (s < 60)
		snprintf(buf, len, "%.0fs", s);
	else if (s < 3600)
		snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
	else
		snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
	return buf;
}

static void progress_draw(struct strata_progress *p, uint64_t now, int final)
{
	double secs = (double)(now - p->start_ns) / 1e9;
	double frac = p->total ? (double)p->done / (double)p->total : 0;
	double rate = secs > 0 ? (double)p->done / secs : 0;
	char a[32], b[32], t[32];
	const char *lead = p->tty ? "\r" : "", *tail = final || !p->tty ? "\n" : "   ";
	if (!p->total) { /* the size is not known (a pipe): what is done and its rate */
		fprintf(stderr, "%s%s: ", lead, p->what);
		if (p->unit && !strcmp(p->unit, "B"))
			fprintf(stderr, "%s  %.1f MB/s", strata_fmt_bytes(p->done, a, sizeof(a)), rate / 1e6);
		else
			fprintf(stderr, "%llu %s  %.1f/s", (unsigned long long)p->done, p->unit ? p->unit : "", rate);
		fprintf(stderr, final ? "  done in %s%s" : "  %s elapsed%s", fmt_secs(secs, t, sizeof(t)), tail);
		fflush(stderr);
		return;
	}
	fprintf(stderr, "%s%s: %5.1f%% ", lead, p->what, 100 * frac);
	if (p->unit && !strcmp(p->unit, "B"))
		fprintf(stderr, "%s / %s  %.1f MB/s", strata_fmt_bytes(p->done, a, sizeof(a)),
			strata_fmt_bytes(p->total, b, sizeof(b)), rate / 1e6);
	else
		fprintf(stderr, "%llu / %llu %s  %.1f/s", (unsigned long long)p->done, (unsigned long long)p->total,
			p->unit ? p->unit : "", rate);
	if (final)
		fprintf(stderr, "  %s%s", p->done < p->total ? "stopped after " : "done in ", fmt_secs(secs, t, sizeof(t)));
	else
		fprintf(stderr, "  %s elapsed, ETA %s", fmt_secs(secs, a, sizeof(a)),
			rate > 0 && p->total >= p->done ? fmt_secs((double)(p->total - p->done) / rate, t, sizeof(t)) : "?");
	fputs(tail, stderr);
	fflush(stderr);
}

void strata_progress_update(struct strata_progress *p, uint64_t done)
{
	p->done = done;
	if (!p->enabled)
		return;
	uint64_t now = strata_now_ns();
	/* A terminal line is redrawn in place; a log or a pipe gets a line every
	 * log_ns, the first after one interval (short jobs stay quiet). */
	if (now - p->last_ns < (p->tty ? 100000000ull : p->log_ns))
		return;
	p->last_ns = now;
	p->drawn = 1;
	progress_draw(p, now, 0);
}

void strata_progress_finish(struct strata_progress *p)
{
	/* Off a terminal, a job that never printed a line stays silent. */
	if (p->enabled && (p->tty || p->drawn))
		progress_draw(p, strata_now_ns(), 1);
}

/* Levenshtein distance, capped at 255 (names here are short). */
static unsigned edit_distance(const char *a, size_t la, const char *b)
{
	size_t lb = strlen(b);
	if (la > 64 || lb > 64)
		return 255;
	unsigned row[65];
	for (size_t j = 0; j <= lb; j++)
		row[j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		unsigned diag = row[0];
		row[0] = (unsigned)i;
		for (size_t j = 1; j <= lb; j++) {
			unsigned up = row[j];
			unsigned best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

const char *strata_closest_name(const char *word, size_t len, const char *const *names, size_t n)
{
	const char *best = NULL;
	unsigned bd = 255;
	for (size_t i = 0; i < n; i++) {
		unsigned d = edit_distance(word, len, names[i]);
		if (d < bd) {
			bd = d;
			best = names[i];
		}
	}
	/* a typo, not a different word: at most 2 edits, and fewer than half the letters */
	return best && bd <= 2 && bd * 2 < (unsigned)len ? best : NULL;
}

/* Temp files a second signal removes before the process ends (the first
 * one only sets strata_interrupted: loops stop and their abort paths clean
 * up).  Fixed slots, so the handler touches no allocator. */
#define TMP_SLOTS 32
static char tmp_paths[TMP_SLOTS][PATH_MAX];
static volatile sig_atomic_t tmp_used[TMP_SLOTS];

int strata_tmp_register(const char *path)
{
	for (int i = 0; i < TMP_SLOTS; i++)
		if (!tmp_used[i] && strlen(path) < PATH_MAX) {
			snprintf(tmp_paths[i], PATH_MAX, "%s", path);
			tmp_used[i] = 1;
			return i;
		}
	return -1;
}

void strata_tmp_unregister(int slot)
{
	if (slot >= 0 && slot < TMP_SLOTS)
		tmp_used[slot] = 0;
}

static void on_sigint(int sig)
{
	if (strata_interrupted) {
		for (int i = 0; i < TMP_SLOTS; i++)
			if (tmp_used[i])
				unlink(tmp_paths[i]);
		_exit(128 + sig);
	}
	strata_interrupted = sig;
}

void strata_install_sigint(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

/* ---- inputs and outputs ---- */

/* Files and directories this process has open for reading: a writer refuses
 * to replace one.  Slots, so a handle forgets exactly what it noted. */
#define INPUT_SLOTS 256
static struct { dev_t dev; ino_t ino; int used; } inputs[INPUT_SLOTS];
static pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER;

int strata_input_note(const char *path)
{
	struct stat st;
	if (!path || stat(path, &st))
		return -1;
	int slot = -1;
	pthread_mutex_lock(&io_lock);
	for (int i = 0; i < INPUT_SLOTS && slot < 0; i++)
		if (!inputs[i].used) {
			inputs[i].dev = st.st_dev;
			inputs[i].ino = st.st_ino;
			inputs[i].used = 1;
			slot = i;
		}
	pthread_mutex_unlock(&io_lock);
	return slot;
}

void strata_input_forget(int slot)
{
	if (slot < 0 || slot >= INPUT_SLOTS)
		return;
	pthread_mutex_lock(&io_lock);
	inputs[slot].used = 0;
	pthread_mutex_unlock(&io_lock);
}

int strata_output_check(const char *path, struct strata_error *err)
{
	struct stat st;
	if (!path || !strcmp(path, "-") || stat(path, &st) || S_ISCHR(st.st_mode))
		return STRATA_OK;
	int hit = 0;
	pthread_mutex_lock(&io_lock);
	for (int i = 0; i < INPUT_SLOTS; i++)
		hit |= inputs[i].used && inputs[i].dev == st.st_dev && inputs[i].ino == st.st_ino;
	pthread_mutex_unlock(&io_lock);
	if (hit)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: refusing to write over an input of this command "
				  "(the same file); name another output", path);
	return STRATA_OK;
}

char *strata_sibling_path(const char *path, const char *tag)
{
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		n--;
	const char *slash = memrchr(path, '/', n);
	size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
	char *p = malloc(n + strlen(tag) + 4);
	if (p)
		sprintf(p, "%.*s.%.*s.%s", (int)dl, path, (int)(n - dl), path + dl, tag);
	return p;
}

int strata_outlock_take(struct strata_outlock *l, const char *path, struct strata_error *err)
{
	l->fd = -1;
	l->path = NULL;
	if (!path || !strcmp(path, "-"))
		return STRATA_OK;
	struct stat st;
	if (!stat(path, &st) && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
		return STRATA_OK; /* a device or pipe: written in place, nothing to guard */
	int rc = strata_output_check(path, err);
	if (rc)
		return rc;
	char *lp = strata_sibling_path(path, "lock");
	if (!lp)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	for (int tries = 0; tries < 100; tries++) {
		int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0) {
			if (errno == ENOENT) /* the directory it goes in is missing: nothing to guard yet */
				break;
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot create the lock file %s", path, lp);
			free(lp);
			return rc;
		}
		if (flock(fd, LOCK_EX | LOCK_NB)) {
			char who[256] = "";
			ssize_t n = pread(fd, who, sizeof(who) - 1, 0);
			close(fd);
			who[n > 0 ? n : 0] = 0;
			who[strcspn(who, "\n")] = 0;
			rc = STRATA_ERR(err, STRATA_EBUSY, "%s: another writer holds it (%s; lock %s): wait for it "
					"to finish or name another output", path, who[0] ? who : "pid unknown", lp);
			free(lp);
			return rc;
		}
		/* the holder before us may have removed the file after we opened it */
		struct stat a, b;
		if (fstat(fd, &a) || stat(lp, &b) || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
			close(fd);
			continue;
		}
		char who[320], comm[64] = "";
		FILE *c = fopen("/proc/self/comm", "r");
		if (c) {
			if (fgets(comm, sizeof(comm), c))
				comm[strcspn(comm, "\n")] = 0;
			fclose(c);
		}
		int wn = snprintf(who, sizeof(who), "pid %ld%s%s\n", (long)getpid(), comm[0] ? ", " : "", comm);
		if (ftruncate(fd, 0) || pwrite(fd, who, (size_t)wn, 0) != wn) {
			/* the lock holds without the note */
		}
		l->fd = fd;
		l->path = lp;
		return STRATA_OK;
	}
	free(lp);
	return STRATA_OK;
}

void strata_outlock_release(struct strata_outlock *l)
{
	if (l->fd >= 0) {
		unlink(l->path); /* before the unlock: a waiter re-checks the inode */
		close(l->fd);
	}
	free(l->path);
	l->fd = -1;
	l->path = NULL;
}

/* ---- results files: whole or not at all ---- */

int strata_outfile_open(struct strata_outfile *o, const char *path, int append, struct strata_error *err)
{
	memset(o, 0, sizeof(*o));
	o->path = path;
	o->append = append && strcmp(path, "-");
	o->fd = -1;
	int orc = strata_output_check(path, err);
	if (orc)
		return orc;
	if (o->append) {
		/* Lock now: the caller decides on a header from `existing`. */
		o->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (o->fd < 0)
			return STRATA_ERRNO(err, STRATA_EIO, "%s: cannot create", path);
		struct stat st;
		if (flock(o->fd, LOCK_EX) || fstat(o->fd, &st)) {
			int rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot lock", path);
			close(o->fd);
			return rc;
		}
		o->existing = (uint64_t)st.st_size;
	}
	o->f = open_memstream(&o->buf, &o->len);
	if (!o->f) {
		if (o->fd >= 0)
			close(o->fd);
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	}
	return STRATA_OK;
}

void strata_outfile_abort(struct strata_outfile *o)
{
	if (o->f)
		fclose(o->f);
	if (o->fd >= 0)
		close(o->fd);
	free(o->buf);
	memset(o, 0, sizeof(*o));
	o->fd = -1;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = ENOSPC;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int strata_outfile_commit(struct strata_outfile *o, struct strata_error *err)
{
	const char *path = o->path;
	int rc = STRATA_OK;
	if (fclose(o->f)) {
		o->f = NULL;
		rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
		strata_outfile_abort(o);
		return rc;
	}
	o->f = NULL;
	if (!strcmp(path, "-")) {
		if (fwrite(o->buf, 1, o->len, stdout) != o->len || fflush(stdout))
			rc = STRATA_ERRNO(err, STRATA_EIO, "stdout: write failed");
	} else if (o->append) {
		if (write_all(o->fd, o->buf, o->len)) {
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: write failed", path);
			if (ftruncate(o->fd, (off_t)o->existing))
				rc = STRATA_ERRNO(err, STRATA_EIO, "%s: write failed, and cutting the half row off failed",
						  path);
		}
	} else {
		/* A device or pipe (/dev/stdout, a FIFO) is written in place; a
		 * symlink is followed, so the rename replaces its target. */
		struct stat st;
		char *real = NULL;
		if (!stat(path, &st) && !S_ISREG(st.st_mode)) {
			int fd = open(path, O_WRONLY | O_CLOEXEC);
			if (fd < 0 || write_all(fd, o->buf, o->len))
				rc = STRATA_ERRNO(err, STRATA_EIO, "%s: write failed", path);
			if (fd >= 0)
				close(fd);
			strata_outfile_abort(o);
			return rc;
		}
		if (!lstat(path, &st) && S_ISLNK(st.st_mode) && (real = realpath(path, NULL)))
			path = real;
		size_t n = strlen(path) + 32;
		char *tmp = malloc(n);
		if (!tmp) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
		} else {
			snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
			int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			if (fd < 0) {
				rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot create", path);
			} else {
				if (write_all(fd, o->buf, o->len) || fdatasync(fd))
					rc = STRATA_ERRNO(err, STRATA_EIO, "%s: write failed", path);
				if (close(fd) && !rc)
					rc = STRATA_ERRNO(err, STRATA_EIO, "%s: write failed", path);
				if (!rc && rename(tmp, path))
					rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot replace", path);
				if (rc)
					unlink(tmp);
			}
			free(tmp);
		}
		free(real);
	}
	strata_outfile_abort(o);
	return rc;
}
