/* Small shared helpers: clocks, sizes, aligned buffers, progress lines. */
#ifndef STRATA_UTIL_H
#define STRATA_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "strata/error.h"

uint64_t strata_now_ns(void); /* CLOCK_MONOTONIC */
uint64_t strata_thread_cpu_ns(void); /* CLOCK_THREAD_CPUTIME_ID: CPU time of the calling thread */

/* "4096", "64K", "1.5G", "2GiB", "300MB" -> bytes (K/M/G/T are powers of 1024;
 * "kB/MB/GB" are powers of 1000). */
int strata_parse_size(const char *s, uint64_t *out, struct strata_error *err);
/* "1.23 GiB" into buf. */
const char *strata_fmt_bytes(uint64_t bytes, char *buf, size_t len);

/*
 * The random number generators, one family.  Every sequence is part of a
 * golden result (synthetic weights, generated traces, policy choices), so
 * none of these may change.
 *
 * SplitMix64 (Steele, Lea, Flood 2014): advance *state, return the next value.
 * The small seeded generator of policies, the harness, replay's activations
 * and test models. */
static inline uint64_t strata_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* SplitMix64's output function as a hash of x (the value splitmix64 returns
 * from state x): derives independent seeds from a seed and stream keys. */
static inline uint64_t strata_mix64(uint64_t x)
{
	return strata_splitmix64(&x);
}

/* xoshiro256 (Blackman & Vigna 2018): 256 bits of state, two scramblers.
 * strata_xoshiro_seed fills the state with four SplitMix64 outputs. */
struct strata_xoshiro {
	uint64_t s[4];
};

static inline uint64_t strata_rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline void strata_xoshiro_seed(struct strata_xoshiro *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = strata_splitmix64(&seed);
}

/* Independent streams of one seed, keyed by a stream kind and up to three
 * integers (layer, expert, matrix, ...): synthetic weights and tier tables
 * draw from these, so a stream never depends on another's use. */
enum strata_stream {
	STRATA_STREAM_EXPERT = 1,
	STRATA_STREAM_OUTLIER = 2,
	STRATA_STREAM_TIER = 3,
	STRATA_STREAM_TENSOR = 4,
	STRATA_STREAM_POOL = 5,
};
static inline void strata_xoshiro_seed_stream(struct strata_xoshiro *r, uint64_t seed, uint64_t kind, uint64_t a,
					      uint64_t b, uint64_t c)
{
	uint64_t k = strata_mix64(seed ^ strata_mix64(kind));
	k = strata_mix64(strata_mix64(strata_mix64(k ^ a) ^ b) ^ c);
	for (int i = 0; i < 4; i++)
		r->s[i] = k = strata_mix64(k);
}

static inline void strata_xoshiro_step(uint64_t *s)
{
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = strata_rotl64(s[3], 45);
}

/* xoshiro256++: every output bit is good (synthetic weights take four 16-bit
 * table indices from one output). */
static inline uint64_t strata_xoshiro256pp(struct strata_xoshiro *r)
{
	uint64_t res = strata_rotl64(r->s[0] + r->s[3], 23) + r->s[0];
	strata_xoshiro_step(r->s);
	return res;
}

/* xoshiro256**: the generator of strata trace gen. */
static inline uint64_t strata_xoshiro256ss(struct strata_xoshiro *r)
{
	uint64_t res = strata_rotl64(r->s[1] * 5, 7) * 9;
	strata_xoshiro_step(r->s);
	return res;
}

/* A 64-bit output as a double in [0, 1) (its top 53 bits). */
static inline double strata_unit53(uint64_t x)
{
	return (double)(x >> 11) * 0x1.0p-53;
}

/* Little-endian fields of the on-disk formats (shard headers, traces,
 * safetensors' length prefix), byte by byte: right on any host, one move on
 * a little-endian one. */
static inline void strata_le_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void strata_le_put32(uint8_t *p, uint32_t v)
{
	strata_le_put16(p, (uint16_t)v);
	strata_le_put16(p + 2, (uint16_t)(v >> 16));
}
static inline void strata_le_put64(uint8_t *p, uint64_t v)
{
	strata_le_put32(p, (uint32_t)v);
	strata_le_put32(p + 4, (uint32_t)(v >> 32));
}
static inline uint32_t strata_le_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t strata_le_get64(const uint8_t *p)
{
	return (uint64_t)strata_le_get32(p) | (uint64_t)strata_le_get32(p + 4) << 32;
}

/* "Did you mean": the name in names[0..n) closest to word[0..len) when it is
 * a likely typo (at most 2 edits, under half the letters), else NULL. */
const char *strata_closest_name(const char *word, size_t len, const char *const *names, size_t n);

/* 4 KiB-aligned, zeroed allocation (for O_DIRECT); free with free(). */
void *strata_aligned_alloc(size_t align, size_t bytes);
/* An array of bytes the caller fills at once and walks (a replay plan, a
 * trace's future): from 4 MiB on, 2 MiB-aligned and backed by transparent
 * huge pages where the kernel offers them (one page fault per 2 MiB instead
 * of 512); not zeroed; free with free(). */
void *strata_big_alloc(size_t bytes);

/* The one progress helper (every long job: synth, quantize, dequantize,
 * inspect --verify, preload, replay, sim, calibrate, sweeps, trace gen, import
 * and export): "what:  42.0% done / total  rate  12s elapsed, ETA 17s" on
 * stderr.  On a terminal the line is redrawn in place at most 10 times a
 * second; otherwise (a log, a pipe, CI) a full line is printed every
 * STRATA_PROGRESS_LOG_NS (STRATA_PROGRESS_SECS=S: every S seconds), so jobs
 * shorter than that print nothing.  STRATA_PROGRESS=0 turns it off (the
 * commands' --no-progress sets it, so forked sweep workers inherit it). */
#define STRATA_PROGRESS_LOG_NS 5000000000ull
struct strata_progress {
	const char *what;
	uint64_t total, done;
	uint64_t start_ns, last_ns, log_ns;
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

/* Set (to the signal number) by the SIGINT/SIGTERM/SIGHUP handler that
 * strata_install_sigint() installs; long loops check it and stop cleanly
 * with STRATA_EINTR, and their abort paths remove what they wrote.  A second
 * signal ends the process at once, after removing the temp files registered
 * with strata_tmp_register (a slot number, or -1 when all 32 are taken). */
extern volatile int strata_interrupted;
void strata_install_sigint(void);
int strata_tmp_register(const char *path);
void strata_tmp_unregister(int slot);

/* Inputs and outputs.  Readers note each file or directory they hold open
 * (strata_input_note returns a slot, -1 if none; strata_input_forget(slot)
 * when closed); strata_output_check refuses, naming it, an output that is one
 * of them (same device and inode: `trace import -o g.csv g.csv`).
 *
 * strata_outlock_take claims an output (a model directory or a file) for the
 * length of a write: an exclusive flock(2) on ".NAME.lock" beside it, which
 * holds the writer's pid and command name, so a second writer fails at once
 * with STRATA_EBUSY saying who holds it.  It also does strata_output_check.
 * strata_outlock_release removes the lock file.  A device or pipe is not
 * locked. */
int strata_input_note(const char *path);
void strata_input_forget(int slot);
int strata_output_check(const char *path, struct strata_error *err);
struct strata_outlock {
	int fd;
	char *path;
};
int strata_outlock_take(struct strata_outlock *l, const char *path, struct strata_error *err);
/* "dir/.name.TAG" beside "dir/name" (malloc'd): lock files, staging directories. */
char *strata_sibling_path(const char *path, const char *tag);
void strata_outlock_release(struct strata_outlock *l);

#endif
