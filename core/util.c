/* Shared helpers: see include/strata/util.h. */
#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

void strata_progress_start(struct strata_progress *p, const char *what, uint64_t total, const char *unit)
{
	memset(p, 0, sizeof(*p));
	p->what = what;
	p->total = total;
	p->unit = unit;
	p->start_ns = strata_now_ns();
	const char *env = getenv("STRATA_PROGRESS");
	p->enabled = env ? atoi(env) != 0 : isatty(STDERR_FILENO);
}

static void progress_draw(struct strata_progress *p, uint64_t now, int final)
{
	double secs = (double)(now - p->start_ns) / 1e9;
	double frac = p->total ? (double)p->done / (double)p->total : 0;
	char a[32], b[32];
	if (p->unit && !strcmp(p->unit, "B"))
		fprintf(stderr, "\r%s: %5.1f%% %s / %s  %.1f MB/s%s", p->what, 100 * frac,
			strata_fmt_bytes(p->done, a, sizeof(a)), strata_fmt_bytes(p->total, b, sizeof(b)),
			secs > 0 ? (double)p->done / secs / 1e6 : 0.0, final ? "\n" : "   ");
	else
		fprintf(stderr, "\r%s: %5.1f%% %llu / %llu %s  %.1fs%s", p->what, 100 * frac,
			(unsigned long long)p->done, (unsigned long long)p->total, p->unit ? p->unit : "",
			secs, final ? "\n" : "   ");
	fflush(stderr);
}

void strata_progress_update(struct strata_progress *p, uint64_t done)
{
	p->done = done;
	if (!p->enabled)
		return;
	uint64_t now = strata_now_ns();
	if (now - p->last_ns < 100000000ull)
		return;
	p->last_ns = now;
	progress_draw(p, now, 0);
}

void strata_progress_finish(struct strata_progress *p)
{
	if (p->enabled)
		progress_draw(p, strata_now_ns(), 1);
}

static void on_sigint(int sig)
{
	(void)sig;
	if (strata_interrupted)
		_exit(130);
	strata_interrupted = 1;
}

void strata_install_sigint(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
}
