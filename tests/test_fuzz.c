/* Every fuzz target (tests/fuzz/fuzz_*.c) built with gcc and ASan+UBSan
 * against the mutation driver and run for a bounded time over its committed
 * seed corpus (scripts/fuzz.sh --driver): a crash, a sanitizer report or a
 * hang fails the suite and leaves the input in build/fuzz/.  Seconds per
 * target: $STRATA_FUZZ_SECONDS (default 3; longer by hand).  Needs gcc with
 * libasan (skips without). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static void test_fuzz_targets(void **state)
{
	static char out[1 << 16];
	if (test_run(out, sizeof(out), "echo 'int main(void){return 0;}' | gcc -fsanitize=address,undefined -x c - "
			    "-o /dev/null")) {
		fprintf(stderr, "SKIP test_fuzz_targets: gcc cannot build with ASan here: %s\n", out);
		return;
	}
	const char *secs = getenv("STRATA_FUZZ_SECONDS");
	DIR *d = opendir("tests/fuzz");
	assert_non_null(d);
	int n = 0;
	for (struct dirent *de; (de = readdir(d));) {
		size_t l = strlen(de->d_name);
		if (strncmp(de->d_name, "fuzz_", 5) || l < 8 || strcmp(de->d_name + l - 2, ".c"))
			continue;
		char target[256];
		snprintf(target, sizeof(target), "%.*s", (int)(l - 7), de->d_name + 5);
		int rc = test_run(out, sizeof(out), "bash scripts/fuzz.sh --driver %s %s", target, secs ? secs : "3");
		const char *last = strstr(out, "fuzz: fuzz_");
		print_message("%s: %s", target, last ? last : out);
		if (rc || !last || !strstr(last, ", 0 crashes"))
			fail_msg("fuzz target %s failed (exit %d):\n%s", target, rc, out);
		n++;
	}
	closedir(d);
	assert_true(n >= 5); /* store_header, safetensors, trace, trace_jsonl, import */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fuzz_targets),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
