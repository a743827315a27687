/* Option tables: parsing, types, ranges, unknown keys, canonical names, help. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/option.h"
#include "testutil.h"

struct obj {
	int64_t depth;
	double rate;
	int flag;
	char tier[STRATA_OPT_STR_MAX];
	char label[STRATA_OPT_STR_MAX];
};

static const struct strata_option opts[] = {
	{ .name = "depth", .type = STRATA_OPT_INT, .offset = offsetof(struct obj, depth), .def = "1",
	  .min = 1, .max = 8, .help = "layers ahead" },
	{ .name = "rate", .type = STRATA_OPT_DOUBLE, .offset = offsetof(struct obj, rate), .def = "0.5",
	  .min = 0, .max = 1, .help = "a fraction" },
	{ .name = "flag", .type = STRATA_OPT_BOOL, .offset = offsetof(struct obj, flag), .def = "0",
	  .help = "a switch" },
	{ .name = "tier", .type = STRATA_OPT_STR, .offset = offsetof(struct obj, tier), .def = "vram",
	  .choices = "vram|ram", .help = "destination" },
	{ .name = "label", .type = STRATA_OPT_STR, .offset = offsetof(struct obj, label), .def = "",
	  .help = "free text" },
	{ .name = NULL },
};

static void test_defaults(void **state)
{
	struct obj o;
	memset(&o, 0xab, sizeof(o));
	struct strata_error err = { 0 };
	assert_int_equal(strata_options_apply(opts, &o, NULL, "evict x", &err), STRATA_OK);
	assert_int_equal(o.depth, 1);
	assert_true(o.rate == 0.5);
	assert_int_equal(o.flag, 0);
	assert_string_equal(o.tier, "vram");
	assert_string_equal(o.label, "");
	assert_int_equal(strata_options_apply(opts, &o, "", "evict x", &err), STRATA_OK);
	char name[160];
	strata_options_canonical(opts, &o, "x", name, sizeof(name));
	assert_string_equal(name, "x");
}

static void test_parse_values(void **state)
{
	static const struct {
		const char *kv;
		int64_t depth;
		double rate;
		int flag;
		const char *tier, *label, *canon;
	} cases[] = {
		{ "depth=2", 2, 0.5, 0, "vram", "", "p-depth=2" },
		{ "depth=0x3,rate=0.25", 3, 0.25, 0, "vram", "", "p-depth=3-rate=0.25" },
		{ "flag", 1, 0.5, 1, "vram", "", "p-flag=1" },
		{ "flag=yes:tier=ram", 1, 0.5, 1, "ram", "", "p-flag=1-tier=ram" },
		{ "flag=off", 1, 0.5, 0, "vram", "", "p" },
		{ "depth=1", 1, 0.5, 0, "vram", "", "p" },          /* = default: not in the name */
		{ "depth=4:depth=5", 5, 0.5, 0, "vram", "", "p-depth=5" }, /* last wins */
		{ "label=abc", 1, 0.5, 0, "vram", "abc", "p-label=abc" },
		{ "rate=1e-1", 1, 0.1, 0, "vram", "", "p-rate=0.1" },
		{ "tier=ram,depth=8", 8, 0.5, 0, "ram", "", "p-depth=8-tier=ram" }, /* table order */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct obj o;
		struct strata_error err = { 0 };
		assert_int_equal(strata_options_apply(opts, &o, cases[i].kv, "p", &err), STRATA_OK);
		assert_int_equal(o.depth, cases[i].depth);
		assert_true(o.rate == cases[i].rate);
		assert_int_equal(o.flag, cases[i].flag);
		assert_string_equal(o.tier, cases[i].tier);
		assert_string_equal(o.label, cases[i].label);
		char name[160];
		strata_options_canonical(opts, &o, "p", name, sizeof(name));
		assert_string_equal(name, cases[i].canon);
	}
}

static void test_errors(void **state)
{
	static const struct {
		const char *kv, *msg;
	} cases[] = {
		{ "dpth=2", "prefetch la: unknown option 'dpth' (options: depth, rate, flag, tier, label)" },
		{ "depth=9", "prefetch la: option depth=9: out of range [1, 8]" },
		{ "depth=0", "out of range" },
		{ "depth=2x", "prefetch la: option depth=2x: not an integer" },
		{ "depth=", "not an integer" },
		{ "depth", "prefetch la: option 'depth' needs a value (depth=...)" },
		{ "rate=nan", "not a finite number" },
		{ "rate=1.5", "prefetch la: option rate=1.5: out of range [0, 1]" },
		{ "flag=maybe", "not a boolean" },
		{ "tier=disk", "prefetch la: option tier=disk: expected one of vram|ram" },
		{ "depth=99999999999999999999999", "not an integer" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct obj o;
		struct strata_error err = { 0 };
		int rc = strata_options_apply(opts, &o, cases[i].kv, "prefetch la", &err);
		assert_int_equal(rc, STRATA_EINVAL);
		if (!strstr(err.msg, cases[i].msg)) {
			fprintf(stderr, "kv %s: got '%s', want '%s'\n", cases[i].kv, err.msg, cases[i].msg);
			fail();
		}
	}
	/* a string too long */
	char big[STRATA_OPT_STR_MAX + 16];
	memset(big, 'a', sizeof(big));
	memcpy(big, "label=", 6);
	big[sizeof(big) - 1] = '\0';
	struct obj o;
	struct strata_error err = { 0 };
	assert_int_equal(strata_options_apply(opts, &o, big, "p", &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "longer than"));
	/* no table: every key is unknown */
	assert_int_equal(strata_options_apply(NULL, &o, "x=1", "evict lru", &err), STRATA_EINVAL);
	assert_string_equal(err.msg, "evict lru: unknown option 'x' (options: none)");
	assert_int_equal(strata_options_apply(NULL, NULL, NULL, "evict lru", &err), STRATA_OK);
}

static void test_check_table(void **state)
{
	struct strata_error err = { 0 };
	assert_int_equal(strata_options_check(opts, "t", &err), STRATA_OK);
	assert_int_equal(strata_options_check(NULL, "t", &err), STRATA_OK);
	static const struct strata_option dup[] = {
		{ .name = "a", .type = STRATA_OPT_INT, .offset = 0, .def = "1" },
		{ .name = "a", .type = STRATA_OPT_INT, .offset = 8, .def = "1" },
		{ .name = NULL },
	};
	assert_int_equal(strata_options_check(dup, "t", &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "listed twice"));
	static const struct strata_option badname[] = {
		{ .name = "Depth", .type = STRATA_OPT_INT, .offset = 0, .def = "1" },
		{ .name = NULL },
	};
	assert_int_equal(strata_options_check(badname, "t", &err), STRATA_EINVAL);
	static const struct strata_option baddef[] = {
		{ .name = "d", .type = STRATA_OPT_INT, .offset = 0, .def = "0", .min = 1, .max = 2 },
		{ .name = NULL },
	};
	assert_int_equal(strata_options_check(baddef, "t", &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "bad default"));
	static const struct strata_option badtype[] = {
		{ .name = "d", .type = 9, .offset = 0, .def = "0" },
		{ .name = NULL },
	};
	assert_int_equal(strata_options_check(badtype, "t", &err), STRATA_EINVAL);
}

static void test_help_and_format(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	strata_options_help(opts, f);
	strata_options_help(NULL, f);
	fclose(f);
	assert_non_null(strstr(buf, "depth"));
	assert_non_null(strstr(buf, "[1, 8]"));
	assert_non_null(strstr(buf, "vram|ram"));
	assert_non_null(strstr(buf, "layers ahead"));
	assert_non_null(strstr(buf, "(no options)"));
	free(buf);
	struct obj o;
	assert_int_equal(strata_options_apply(opts, &o, "rate=0.125", "p", NULL), STRATA_OK);
	char v[64];
	strata_option_format(&opts[1], &o, v, sizeof(v));
	assert_string_equal(v, "0.125");
	assert_string_equal(strata_option_type_name(STRATA_OPT_BOOL), "bool");
	/* values %g would round are printed in full: names never collide */
	assert_int_equal(strata_options_apply(opts, &o, "rate=0.50000001", "p", NULL), STRATA_OK);
	char name[64];
	strata_options_canonical(opts, &o, "p", name, sizeof(name));
	assert_string_equal(name, "p-rate=0.50000001");
	/* canonical names truncate safely */
	char small[8];
	assert_int_equal(strata_options_apply(opts, &o, "depth=7:rate=0.75", "p", NULL), STRATA_OK);
	strata_options_canonical(opts, &o, "lookahead", small, sizeof(small));
	assert_string_equal(small, "lookahe");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_parse_values),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_check_table),
		cmocka_unit_test(test_help_and_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
