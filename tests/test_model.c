/* Model specs, presets, scaling; size parsing; error records. */
#include <errno.h>
#include <string.h>

#include "strata/model.h"
#include "strata/util.h"
#include "testutil.h"

static void test_presets_parse(void **state)
{
	struct strata_model_spec s;
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("kimi-k3.1", &s, &err), STRATA_OK);
	assert_int_equal(s.n_moe_layers, 92);
	assert_int_equal(s.n_experts, 896);
	assert_int_equal(s.top_k, 16);
	assert_int_equal(strata_model_total_experts(&s), 82432);
	/* ~33M parameters per routed expert */
	assert_true(strata_model_expert_params(&s) > 32000000ull);
	assert_true(strata_model_expert_params(&s) < 34000000ull);
	for (const struct strata_model_preset *p = strata_model_presets; p->name; p++) {
		assert_int_equal(strata_model_spec_parse(p->name, &s, &err), STRATA_OK);
		assert_int_equal(strata_model_spec_validate(&s, &err), STRATA_OK);
	}
}

static void test_scale_keeps_expert_size(void **state)
{
	struct strata_model_spec full, s;
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("deepseek-v3", &full, &err), 0);
	assert_int_equal(strata_model_spec_parse("deepseek-v3:layers=4,experts=32", &s, &err), 0);
	assert_int_equal(s.n_moe_layers, 4);
	assert_int_equal(s.n_experts, 32);
	assert_int_equal(s.first_moe_layer, 3);
	assert_int_equal(s.n_layers, 7);
	assert_int_equal(strata_model_expert_params(&s), strata_model_expert_params(&full));
	assert_string_equal(s.name, "deepseek-v3-scaled");
	/* top_k is clamped to the experts left */
	assert_int_equal(strata_model_spec_parse("kimi-k3.1:experts=8", &s, &err), 0);
	assert_int_equal(s.top_k, 8);
}

static void test_roundtrip_format(void **state)
{
	struct strata_model_spec a, b;
	char buf[256];
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("qwen3-30b-a3b:layers=3", &a, &err), 0);
	strata_model_spec_format(&a, buf, sizeof(buf));
	assert_int_equal(strata_model_spec_parse(buf, &b, &err), 0);
	assert_int_equal(a.n_moe_layers, b.n_moe_layers);
	assert_int_equal(a.n_layers, b.n_layers);
	assert_int_equal(a.hidden, b.hidden);
	assert_int_equal(a.inter, b.inter);
	assert_true(a.nonrouted_params == b.nonrouted_params);
}

static void test_bad_specs(void **state)
{
	struct strata_model_spec s;
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("gpt-9", &s, &err), STRATA_ENOTFOUND);
	assert_non_null(strstr(err.msg, "gpt-9"));
	assert_int_equal(strata_model_spec_parse("olmoe:layers=-1", &s, &err), STRATA_EINVAL);
	assert_int_equal(strata_model_spec_parse("olmoe:bogus=3", &s, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "bogus"));
	assert_int_equal(strata_model_spec_parse("olmoe:experts=0", &s, &err), STRATA_EINVAL);
	assert_int_equal(strata_model_spec_parse("custom:layers=2", &s, &err), STRATA_EINVAL);
}

static void test_parse_size(void **state)
{
	uint64_t v;
	struct strata_error err = { 0 };
	static const struct { const char *in; uint64_t out; } ok[] = {
		{ "4096", 4096 }, { "64K", 65536 }, { "2GiB", 2ull << 30 }, { "1.5G", 3ull << 29 },
		{ "300MB", 300000000ull }, { "1GB", 1000000000ull }, { "0", 0 },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(strata_parse_size(ok[i].in, &v, &err), 0);
		assert_true(v == ok[i].out);
	}
	assert_int_equal(strata_parse_size("12Q", &v, &err), STRATA_EINVAL);
	assert_int_equal(strata_parse_size("-3G", &v, &err), STRATA_EINVAL);
	assert_int_equal(strata_parse_size("", &v, &err), STRATA_EINVAL);
}

static void test_error_prefix(void **state)
{
	struct strata_error err = { 0 };
	errno = ENOENT;
	assert_int_equal(STRATA_ERRNO(&err, STRATA_EIO, "%s: open", "x.strata"), STRATA_EIO);
	strata_error_prefix(&err, "loading model");
	assert_string_equal(err.msg, "loading model: x.strata: open: No such file or directory");
	assert_int_equal(err.sys_errno, ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_presets_parse),
		cmocka_unit_test(test_scale_keeps_expert_size),
		cmocka_unit_test(test_roundtrip_format),
		cmocka_unit_test(test_bad_specs),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_error_prefix),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
