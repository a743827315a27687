/* Helpers shared by the cmocka suites. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "strata/gpu.h"
#include "testutil.h"

char *test_mkdtemp(void)
{
	const char *base = getenv("TMPDIR");
	char *tmpl = malloc(PATH_MAX);
	snprintf(tmpl, PATH_MAX, "%s/strata-test-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmpl)) {
		free(tmpl);
		return NULL;
	}
	return tmpl;
}

void test_rmdir(const char *dir)
{
	char cmd[PATH_MAX + 16];
	if (!dir || strncmp(dir, "/", 1))
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", dir);
}

char *test_tmpdir;

int test_tmpdir_setup(void **state)
{
	test_tmpdir = test_mkdtemp();
	return test_tmpdir ? 0 : -1;
}

int test_tmpdir_teardown(void **state)
{
	test_rmdir(test_tmpdir);
	free(test_tmpdir);
	test_tmpdir = NULL;
	return 0;
}

const char *test_path(const char *name)
{
	static char buf[16][PATH_MAX];
	static unsigned slot;
	char *b = buf[slot++ & 15];
	snprintf(b, PATH_MAX, "%s/%s", test_tmpdir, name);
	return b;
}

#ifndef STRATA_SRC_ROOT
#define STRATA_SRC_ROOT "."
#endif

/* Suites use paths relative to the repository (tests/data/..., policies/lua/...):
 * start every suite there, whatever the build directory or the caller's cwd. */
__attribute__((constructor)) static void to_src_root(void)
{
	if (chdir(STRATA_SRC_ROOT))
		fprintf(stderr, "testutil: cannot enter the source tree %s\n", STRATA_SRC_ROOT);
}

const char *test_src_root(void)
{
	return STRATA_SRC_ROOT;
}

const char *test_data_path(const char *name)
{
	static char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/tests/data/%s", STRATA_SRC_ROOT, name);
	return path;
}

int test_have_gpu(const char *test)
{
	if (strata_gpu_count() > 0)
		return 1;
	fprintf(stderr, "SKIP %s: no GPU on this machine (GPU tests run on the device machine)\n", test);
	return 0;
}

const char *test_bin(const char *name)
{
	static char path[PATH_MAX];
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0)
		return name;
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0'; /* build/<mode>/tests */
	snprintf(path, sizeof(path), "%s/../bin/%s", self, name);
	return path;
}

int test_run(char *out, size_t len, const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd) - 8, fmt, ap);
	va_end(ap);
	strcat(cmd, " 2>&1");
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	size_t got = 0;
	if (out && len) {
		got = fread(out, 1, len - 1, p);
		out[got] = '\0';
	}
	char sink[4096];
	while (fread(sink, 1, sizeof(sink), p) > 0)
		;
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

double test_cosine(const float *a, const float *b, size_t n)
{
	double ab = 0, aa = 0, bb = 0;
	for (size_t i = 0; i < n; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return ab / sqrt(aa * bb);
}
