/* Small shared helpers: clocks, sizes, aligned buffers, progress lines. */
#ifndef STRATA_UTIL_H
#define STRATA_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "strata/error.h"

uint64_t strata_now_ns(void); /* CLOCK_MONOTONIC */

/* "4096", "64K", "1.5G", "2GiB", "300MB" -> bytes (K/M/G/T are powers of 1024;
 * "kB/MB/GB" are powers of 1000). */
int strata_parse_size(const char *s, uint64_t *out, struct strata_error *err);
/* "1.23 GiB" into buf. */
const char *strata_fmt_bytes(uint64_t bytes, char *buf, size_t len);

/* SplitMix64 (Steele, Lea, Flood 2014): advance *state, return the next value.
 * The small seeded generator of policies, the harness and test models. */
static inline uint64_t strata_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* 4 KiB-aligned, zeroed allocation (for O_DIRECT); free with free(). */
void *strata_aligned_alloc(size_t align, size_t bytes);
/* An array of bytes the caller fills at once and walks (a replay plan, a
 * trace's future): from 4 MiB on, 2 MiB-aligned and backed by transparent
 * huge pages where the kernel offers them (one page fault per 2 MiB instead
 * of 512); not zeroed; free with free(). */
void *strata_big_alloc(size_t bytes);

/* Progress on stderr: redrawn at most 10 times a second, only when stderr is
 * a terminal or STRATA_PROGRESS=1; silent when STRATA_PROGRESS=0. */
struct strata_progress {
	const char *what;
	uint64_t total, done;
	uint64_t start_ns, last_ns;
	int enabled;
	const char *unit;  /* "B" prints bytes and rate; else counts */
};
void strata_progress_start(struct strata_progress *p, const char *what, uint64_t total, const char *unit);
void strata_progress_update(struct strata_progress *p, uint64_t done);
void strata_progress_finish(struct strata_progress *p);

/* A results file written whole or not at all ("nothing already written is
 * lost").  strata_outfile_open gives a stream `f` that buffers in memory;
 * strata_outfile_commit writes it out:
 *   - path "-": to stdout;
 *   - append: to path itself (created if missing) in one write under an
 *     exclusive flock(2), taken at open so `existing` (the file's size then)
 *     tells the caller whether to write a header; a failed write is cut back
 *     off, so earlier rows stay intact and no half row remains;
 *   - else: to a temp file beside path, synced, then renamed over it; on any
 *     failure the temp file is removed and path is left as it was.
 * Either call releases everything; strata_outfile_abort drops the buffer
 * without writing.  Errors name path and the cause. */
struct strata_outfile {
	FILE *f;
	char *buf;
	size_t len;
	const char *path;
	int append, fd;
	uint64_t existing;
};
int strata_outfile_open(struct strata_outfile *o, const char *path, int append, struct strata_error *err);
int strata_outfile_commit(struct strata_outfile *o, struct strata_error *err);
void strata_outfile_abort(struct strata_outfile *o);

/* Set by SIGINT handlers installed with strata_install_sigint(); long loops
 * check it and stop cleanly with STRATA_EINTR. */
extern volatile int strata_interrupted;
void strata_install_sigint(void);

#endif
