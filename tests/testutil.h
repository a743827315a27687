/* Helpers shared by the cmocka suites: temp dirs, GPU skip. */
#ifndef STRATA_TESTUTIL_H
#define STRATA_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

/* mkdtemp under $TMPDIR (or /tmp); removed recursively by test_rmdir. */
char *test_mkdtemp(void);
void test_rmdir(const char *dir);
/* 1 if a GPU is usable; otherwise prints why the test skips and returns 0. */
int test_have_gpu(const char *test);
/* A per-suite temp dir: cmocka group setup/teardown that create test_tmpdir
 * and remove it with everything in it. */
extern char *test_tmpdir;
int test_tmpdir_setup(void **state);
int test_tmpdir_teardown(void **state);
/* "<test_tmpdir>/<name>"; 16 rotating buffers, so a few may be live at once. */
const char *test_path(const char *name);
/* tests/data/<name>: an absolute path from the checkout the test binary was
 * built in (build/<mode>/tests/..), else relative to the current directory. */
const char *test_data_path(const char *name);
/* The repository's root (absolute), whatever the build directory. */
const char *test_src_root(void);
/* Path of a program built next to the tests ("strata" -> build/<mode>/bin/strata). */
const char *test_bin(const char *name);
/* Cosine similarity of a and b (n floats), in double. */
double test_cosine(const float *a, const float *b, size_t n);
/* Run a shell command, capture up to len bytes of stdout+stderr; returns exit status. */
int test_run(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
