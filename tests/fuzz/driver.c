/*
 * A small mutation driver for the fuzz targets, for machines without
 * libFuzzer (gcc + ASan/UBSan; what the test suite runs in CI).  It links
 * with a target's LLVMFuzzerTestOneInput, runs every seed, then mutates seeds
 * (bit flips, interesting bytes and integers, block deletes, inserts and
 * copies, splices of two seeds) until the time is up.  An input that makes
 * the target crash (ASan report, signal) or run longer than the per-input
 * limit is saved as OUT/crash-TARGET-<n> before the process dies, so it can
 * be replayed: `fuzz_TARGET-driver FILE` runs the given files only.
 *
 *   fuzz_TARGET-driver -t SECONDS [-o OUTDIR] [-s SEED] CORPUS_DIR...   (fuzz)
 *   fuzz_TARGET-driver FILE...                                          (replay)
 *
 * The last line says what was done: "fuzz: N inputs (S seeds), 0 crashes".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "strata/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_INPUT (1u << 20)
#define PER_INPUT_S 10

struct seed {
	uint8_t *d;
	size_t n;
};

static struct seed *seeds;
static size_t n_seeds;
static const uint8_t *cur;
static size_t cur_n;
static char save_path[4096];

/* Save the input being run (async-signal-safe: open/write/close). */
static void save_current(void)
{
	if (!cur || !save_path[0])
		return;
	int fd = open(save_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return;
	size_t off = 0;
	while (off < cur_n) {
		ssize_t w = write(fd, cur + off, cur_n - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	close(fd);
	static const char msg[] = "fuzz: the failing input is saved in ";
	if (write(2, msg, sizeof(msg) - 1) < 0 || write(2, save_path, strlen(save_path)) < 0 ||
	    write(2, "\n", 1) < 0) {
		/* dying anyway */
	}
}

void __asan_on_error(void);
void __asan_on_error(void)
{
	save_current();
}

static void on_fatal(int sig)
{
	if (sig == SIGALRM) {
		static const char msg[] = "fuzz: an input ran longer than the per-input limit (a hang)\n";
		if (write(2, msg, sizeof(msg) - 1) < 0) {
			/* dying anyway */
		}
	}
	save_current();
	signal(sig == SIGALRM ? SIGABRT : sig, SIG_DFL);
	raise(sig == SIGALRM ? SIGABRT : sig);
}

static void add_seed(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return;
	uint8_t *d = malloc(FUZZ_MAX_INPUT);
	size_t n = d ? fread(d, 1, FUZZ_MAX_INPUT, f) : 0;
	fclose(f);
	if (!d)
		return;
	struct seed *ns = realloc(seeds, (n_seeds + 1) * sizeof(*ns));
	if (!ns) {
		free(d);
		return;
	}
	seeds = ns;
	seeds[n_seeds].d = d;
	seeds[n_seeds].n = n;
	n_seeds++;
}

static void add_dir(const char *dir)
{
	struct stat st;
	if (stat(dir, &st))
		return;
	if (!S_ISDIR(st.st_mode)) {
		add_seed(dir);
		return;
	}
	DIR *d = opendir(dir);
	if (!d)
		return;
	for (struct dirent *de; (de = readdir(d));) {
		if (de->d_name[0] == '.')
			continue;
		char p[4096];
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		add_seed(p);
	}
	closedir(d);
}

/* the mutations' choices: the project's seeded generator, from -s SEED */
static uint64_t rng;
static uint64_t rnd(void)
{
	return strata_splitmix64(&rng);
}

static size_t mutate(uint8_t *b, size_t n, size_t cap)
{
	static const int64_t interesting[] = { 0, 1, -1, 2, 16, 32, 64, 100, 127, 128, 255, 256, 1024, 4096, 65535,
					       65536, 0x7fffffff, -0x80000000ll, 0xffffffffll, INT64_MAX, INT64_MIN };
	int rounds = 1 + (int)(rnd() % 4);
	for (int r = 0; r < rounds; r++) {
		switch (rnd() % 8) {
		case 0: /* bit flip */
			if (n)
				b[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
			break;
		case 1: /* random byte */
			if (n)
				b[rnd() % n] = (uint8_t)rnd();
			break;
		case 2: { /* interesting integer, 1/2/4/8 bytes little-endian */
			size_t w = (size_t)1 << (rnd() % 4);
			if (n >= w) {
				int64_t v = interesting[rnd() % (sizeof(interesting) / sizeof(interesting[0]))];
				memcpy(b + rnd() % (n - w + 1), &v, w);
			}
			break;
		}
		case 3: { /* delete a block */
			if (n > 1) {
				size_t a = rnd() % n, len = 1 + rnd() % (n - a < 64 ? n - a : 64);
				memmove(b + a, b + a + len, n - a - len);
				n -= len;
			}
			break;
		}
		case 4: { /* insert random bytes */
			size_t len = 1 + rnd() % 16;
			if (n + len <= cap) {
				size_t a = n ? rnd() % (n + 1) : 0;
				memmove(b + a + len, b + a, n - a);
				for (size_t i = 0; i < len; i++)
					b[a + i] = (uint8_t)rnd();
				n += len;
			}
			break;
		}
		case 5: { /* copy a block inside the input */
			if (n > 2) {
				size_t len = 1 + rnd() % (n / 2), a = rnd() % (n - len + 1), c = rnd() % (n - len + 1);
				memmove(b + c, b + a, len);
			}
			break;
		}
		case 6: { /* splice: the tail of another seed */
			const struct seed *o = &seeds[rnd() % n_seeds];
			if (o->n) {
				size_t at = n ? rnd() % n : 0, from = rnd() % o->n, len = o->n - from;
				if (at + len > cap)
					len = cap - at;
				memcpy(b + at, o->d + from, len);
				n = at + len;
			}
			break;
		}
		default: /* ASCII digits and JSON/CSV punctuation: text formats */
			if (n) {
				static const char t[] = "0123456789-.eE,:[]{}\"\n ";
				b[rnd() % n] = (uint8_t)t[rnd() % (sizeof(t) - 1)];
			}
			break;
		}
	}
	return n;
}

static void run_one(const uint8_t *d, size_t n)
{
	cur = d;
	cur_n = n;
	alarm(PER_INPUT_S);
	LLVMFuzzerTestOneInput(d, n);
	alarm(0);
	cur = NULL;
}

int main(int argc, char **argv)
{
	double secs = -1;
	const char *outdir = "build/fuzz";
	uint64_t seed = (uint64_t)time(NULL);
	int opt;
	while ((opt = getopt(argc, argv, "t:o:s:")) != -1) {
		switch (opt) {
		case 't': secs = atof(optarg); break;
		case 'o': outdir = optarg; break;
		case 's': seed = strtoull(optarg, NULL, 10); break;
		default:
			fprintf(stderr, "usage: %s -t SECONDS [-o OUTDIR] [-s SEED] CORPUS... | %s FILE...\n", argv[0],
				argv[0]);
			return 2;
		}
	}
	const char *name = strrchr(argv[0], '/');
	name = name ? name + 1 : argv[0];
	mkdir(outdir, 0755);
	snprintf(save_path, sizeof(save_path), "%s/crash-%s-%ld", outdir, name, (long)getpid());
	/* SIGSEGV stays with ASan (its report, then __asan_on_error saves) */
	signal(SIGALRM, on_fatal);
	signal(SIGFPE, on_fatal);
	signal(SIGABRT, on_fatal);
	for (int i = optind; i < argc; i++)
		add_dir(argv[i]);
	if (!n_seeds) {
		fprintf(stderr, "fuzz: no inputs in the corpus given\n");
		return 2;
	}
	uint64_t execs = 0;
	for (size_t i = 0; i < n_seeds; i++, execs++)
		run_one(seeds[i].d, seeds[i].n);
	if (secs > 0) {
		rng = seed;
		uint8_t *b = malloc(FUZZ_MAX_INPUT);
		struct timespec t0, t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (;;) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 >= secs)
				break;
			const struct seed *s = &seeds[rnd() % n_seeds];
			size_t n = s->n < FUZZ_MAX_INPUT ? s->n : FUZZ_MAX_INPUT;
			memcpy(b, s->d, n);
			n = mutate(b, n, FUZZ_MAX_INPUT);
			run_one(b, n);
			execs++;
		}
		free(b);
	}
	printf("fuzz: %s: %llu inputs (%zu seeds, random seed %llu), 0 crashes\n", name, (unsigned long long)execs,
	       n_seeds, (unsigned long long)seed);
	return 0;
}
