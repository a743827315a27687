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

/* "Did you mean": the name in names[0..n) closest to word[0..len) when it is
 * a likely typo (at most 2 edits, under half the letters), else NULL. */
const char *strata_closest_name(const char *word, size_t len, const char *const *names, size_t n);

/* 4 KiB-aligned, zeroed allocation (for O_DIRECT); free with free(). */
void *strata_aligned_alloc(size_t align, size_t bytes);

/* The one progress helper (every long job: synth, quantize, inspect --verify,
 * preload, replay, sim, calibrate, sweeps): "what:  42.0% done / total  rate
 * 12s elapsed, ETA 17s" on stderr.  On a terminal the line is redrawn in place
 * at most 10 times a second; otherwise (a log, a pipe, CI) a full line is
 * printed every STRATA_PROGRESS_LOG_NS, so jobs shorter than that print
 * nothing.  STRATA_PROGRESS=0 turns it off (the commands' --no-progress sets
 * it, so forked sweep workers inherit it). */
#define STRATA_PROGRESS_LOG_NS 5000000000ull
struct strata_progress {
	const char *what;
	uint64_t total, done;
	uint64_t start_ns, last_ns;
	int enabled, tty, drawn;
	const char *unit;  /* "B" prints bytes and MB/s; else counts of unit per second */
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
