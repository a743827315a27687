/* JSON reader; safetensors reader/writer: round trips, index files, corrupt input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"
#include "strata/json.h"
#include "strata/safetensors.h"
#include "testutil.h"

/* ---- JSON --------------------------------------------------------------- */

static void test_json_valid(void **state)
{
	const char *text = " {\"a\": [1, -2, 3.5e2, 18446744073709551615, -9223372036854775808],"
			   " \"s\": \"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\", \"t\": true, \"f\": false,"
			   " \"n\": null, \"o\": {}, \"e\": [], \"u\": \"\\u0000z\"} \n";
	struct strata_json_doc *d;
	struct strata_error err = { 0 };
	assert_int_equal(strata_json_parse(text, strlen(text), "t.json", &d, &err), 0);
	const struct strata_json *r = strata_json_root(d);
	assert_int_equal(r->type, STRATA_JSON_OBJECT);
	assert_int_equal(r->len, 8);
	const struct strata_json *a = strata_json_get(r, "a");
	assert_non_null(a);
	assert_int_equal(a->len, 5);
	assert_true(strata_json_at(a, 0)->is_uint);
	assert_int_equal(strata_json_at(a, 0)->u, 1);
	assert_false(strata_json_at(a, 1)->is_uint);
	assert_int_equal(strata_json_at(a, 1)->i, -2);
	assert_false(strata_json_at(a, 2)->is_int);
	assert_true(strata_json_at(a, 2)->num == 350.0);
	assert_true(strata_json_at(a, 3)->u == UINT64_MAX);
	assert_true(strata_json_at(a, 4)->i == INT64_MIN);
	assert_null(strata_json_at(a, 5));
	const struct strata_json *s = strata_json_get(r, "s");
	assert_string_equal(s->str, "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
	assert_true(strata_json_get(r, "t")->boolean);
	assert_false(strata_json_get(r, "f")->boolean);
	assert_int_equal(strata_json_get(r, "n")->type, STRATA_JSON_NULL);
	assert_int_equal(strata_json_get(r, "o")->len, 0);
	assert_int_equal(strata_json_get(r, "u")->len, 2); /* embedded NUL kept */
	assert_null(strata_json_get(r, "missing"));
	assert_null(strata_json_get(a, "x"));
	strata_json_free(d);
}

static void test_json_errors(void **state)
{
	static const struct {
		const char *text;
		size_t at;
		const char *why;
	} cases[] = {
		{ "", 0, "unexpected end" },
		{ "{\"a\":1,}", 7, "expected string key" },
		{ "[1 2]", 3, "expected ',' or ']'" },
		{ "{\"a\" 1}", 5, "expected ':'" },
		{ "\"abc", 0, "unterminated string" },
		{ "01", 0, "leading zero" },
		{ "[1,]", 3, "unexpected character" },
		{ "nan", 0, "unexpected character" },
		{ "{\"a\":1} x", 8, "trailing data" },
		{ "\"\\ud800\"", 1, "unpaired high surrogate" },
		{ "\"\\q\"", 1, "bad escape" },
		{ "\"a\x01\"", 2, "control character" },
		{ "\"\xff\"", 1, "invalid UTF-8" },
		{ "1.", 2, "digit expected" },
		{ "1e999", 0, "out of range" },
		{ "[1,2", 0, "unterminated array" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct strata_json_doc *d = NULL;
		struct strata_error err = { 0 };
		int rc = strata_json_parse(cases[i].text, strlen(cases[i].text), "bad.json", &d, &err);
		char want[64];
		snprintf(want, sizeof(want), "bad.json: bad JSON at byte %zu: ", cases[i].at);
		if (rc != STRATA_ECORRUPT || !strstr(err.msg, want) || !strstr(err.msg, cases[i].why))
			fail_msg("case %zu '%s': rc %d msg '%s'", i, cases[i].text, rc, err.msg);
		assert_null(d);
	}
	/* nesting limit */
	char deep[200];
	memset(deep, '[', sizeof(deep));
	struct strata_json_doc *d;
	struct strata_error err = { 0 };
	assert_int_equal(strata_json_parse(deep, sizeof(deep), "deep.json", &d, &err), STRATA_ECORRUPT);
	assert_non_null(strstr(err.msg, "nesting too deep"));
}

/* ---- safetensors -------------------------------------------------------- */

/* A file with an 8-byte length, header text, then data_bytes of zeros. */
static void write_raw(const char *path, const char *header, uint64_t claimed_len, size_t data_bytes)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	uint64_t n = claimed_len ? claimed_len : strlen(header);
	unsigned char le[8];
	for (int i = 0; i < 8; i++)
		le[i] = (unsigned char)(n >> (8 * i));
	fwrite(le, 1, 8, f);
	fwrite(header, 1, strlen(header), f);
	for (size_t i = 0; i < data_bytes; i++)
		fputc(0, f);
	fclose(f);
}

static void expect_open_error(const char *path, int code, const char *needle)
{
	struct strata_safetensors *st = NULL;
	struct strata_error err = { 0 };
	int rc = strata_safetensors_open(path, &st, &err);
	if (rc != code || !strstr(err.msg, needle) || !strstr(err.msg, path))
		fail_msg("%s: rc %d (want %d) msg '%s' (want '%s')", path, rc, code, err.msg, needle);
	assert_null(st);
}

static void write_model_file(const char *path, int dtype_a, uint64_t rows, uint64_t cols, float base)
{
	struct strata_safetensors_writer *w;
	struct strata_error err = { 0 };
	assert_int_equal(strata_safetensors_writer_open(path, &w, &err), 0);
	uint64_t shape[2] = { rows, cols }, one[1] = { cols };
	char name[64];
	snprintf(name, sizeof(name), "t%g.a", base);
	assert_int_equal(strata_safetensors_writer_declare(w, name, dtype_a, 2, shape, &err), 0);
	snprintf(name, sizeof(name), "t%g.norm", base);
	assert_int_equal(strata_safetensors_writer_declare(w, name, STRATA_SAFETENSORS_F32, 1, one, &err), 0);
	assert_int_equal(strata_safetensors_writer_metadata(w, "format", "pt", &err), 0);
	float *v = malloc(rows * cols * sizeof(float));
	for (uint64_t i = 0; i < rows * cols; i++)
		v[i] = base + 0.25f * (float)((int)(i % 37) - 18);
	/* written in two uneven pieces, spanning into the next tensor */
	assert_int_equal(strata_safetensors_writer_write_f32(w, v, 5, &err), 0);
	assert_int_equal(strata_safetensors_writer_write_f32(w, v + 5, rows * cols - 5, &err), 0);
	assert_int_equal(strata_safetensors_writer_write_f32(w, v, cols, &err), 0);
	assert_int_equal(strata_safetensors_writer_finish(w, &err), 0);
	free(v);
}

static void test_st_roundtrip(void **state)
{
	static const int dts[] = { STRATA_SAFETENSORS_BF16, STRATA_SAFETENSORS_F16, STRATA_SAFETENSORS_F32 };
	for (size_t k = 0; k < 3; k++) {
		const char *p = test_path("rt.safetensors");
		struct strata_error err = { 0 };
		struct strata_safetensors_writer *w;
		assert_int_equal(strata_safetensors_writer_open(p, &w, &err), 0);
		assert_int_equal(strata_safetensors_writer_metadata(w, "format", "pt", &err), 0);
		uint64_t shape[2] = { 6, 100 }, one[1] = { 7 };
		assert_int_equal(strata_safetensors_writer_declare(w, "w", dts[k], 2, shape, &err), 0);
		assert_int_equal(strata_safetensors_writer_declare(w, "n\"q", STRATA_SAFETENSORS_F32, 1, one, &err), 0);
		float v[600], nv[7];
		for (int i = 0; i < 600; i++)
			v[i] = 0.125f * (float)(i % 53 - 26);
		v[7] = 6.1035156e-05f * 0.5f; /* an F16 subnormal */
		for (int i = 0; i < 7; i++)
			nv[i] = 1.0f / (float)(i + 1);
		assert_int_equal(strata_safetensors_writer_write_f32(w, v, 600, &err), 0);
		assert_int_equal(strata_safetensors_writer_write_f32(w, nv, 7, &err), 0);
		assert_int_equal(strata_safetensors_writer_finish(w, &err), 0);

		struct strata_safetensors *st;
		assert_int_equal(strata_safetensors_open(p, &st, &err), 0);
		assert_int_equal(strata_safetensors_tensor_count(st), 2);
		assert_string_equal(strata_safetensors_metadata(st, "format"), "pt");
		const struct strata_safetensors_tensor *t = strata_safetensors_find(st, "w");
		assert_non_null(t);
		assert_int_equal(t->dtype, dts[k]);
		assert_int_equal(t->ndim, 2);
		assert_int_equal(t->shape[0], 6);
		assert_int_equal(t->shape[1], 100);
		assert_int_equal(t->numel, 600);
		float back[600];
		assert_int_equal(strata_safetensors_read_f32(st, t, 0, 600, back, &err), 0);
		for (int i = 0; i < 600; i++)
			if (back[i] != v[i])
				fail_msg("dtype %d: element %d: %g != %g", dts[k], i, back[i], v[i]);
		/* a partial range: row 3 */
		assert_int_equal(strata_safetensors_read_f32(st, t, 300, 100, back, &err), 0);
		assert_true(back[0] == v[300] && back[99] == v[399]);
		assert_int_equal(strata_safetensors_read_f32(st, t, 550, 51, back, &err), STRATA_EINVAL);
		const struct strata_safetensors_tensor *n = strata_safetensors_find(st, "n\"q");
		assert_non_null(n);
		assert_int_equal(strata_safetensors_read_f32(st, n, 0, 7, back, &err), 0);
		assert_true(back[2] == nv[2]);
		assert_int_equal(strata_safetensors_total_params(st), 607);
		strata_safetensors_close(st);
	}
	/* rounding: bf16 and f16 of non-representable values */
	assert_true(strata_f16_to_f32(strata_f32_to_f16(1.0f + 1.0f / 4096)) == 1.0f);
	assert_true(strata_f16_to_f32(strata_f32_to_f16(65504.0f)) == 65504.0f);
	assert_true(isinf(strata_f16_to_f32(strata_f32_to_f16(70000.0f))));
	assert_true(strata_f16_to_f32(strata_f32_to_f16(5.9604645e-08f)) == 5.9604645e-08f);
	assert_true(strata_f16_to_f32(0x3c00) == 1.0f);
	assert_true(strata_f16_to_f32(0xc000) == -2.0f);
}

static void test_st_fp8(void **state)
{
	/* every E4M3 ("fn") code against its definition; E5M2 spot checks */
	for (int b = 0; b < 256; b++) {
		int e = (b >> 3) & 15, m = b & 7;
		float v = strata_f8e4m3_to_f32((uint8_t)b);
		if (e == 15 && m == 7) {
			assert_true(isnan(v));
			continue;
		}
		double want = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
		if (b & 0x80)
			want = -want;
		if ((double)v != want)
			fail_msg("e4m3 0x%02x: %g != %g", b, (double)v, want);
	}
	assert_true(strata_f8e4m3_to_f32(0x38) == 1.0f);
	assert_true(strata_f8e4m3_to_f32(0x7e) == 448.0f);
	assert_true(strata_f8e5m2_to_f32(0x3c) == 1.0f);
	assert_true(isinf(strata_f8e5m2_to_f32(0x7c)));
	assert_true(strata_f8e5m2_to_f32(0xc0) == -2.0f);
	/* through the reader: block and tail paths */
	const char *p = test_path("f8.safetensors");
	struct strata_error err = { 0 };
	struct strata_safetensors_writer *w;
	assert_int_equal(strata_safetensors_writer_open(p, &w, &err), 0);
	uint64_t shape[2] = { 3, 13 };
	assert_int_equal(strata_safetensors_writer_declare(w, "a", STRATA_SAFETENSORS_F8_E4M3, 2, shape, &err), 0);
	assert_int_equal(strata_safetensors_writer_declare(w, "b", STRATA_SAFETENSORS_F8_E5M2, 2, shape, &err), 0);
	uint8_t raw[39];
	for (int i = 0; i < 39; i++)
		raw[i] = ((i * 7 + 3) & 0x7f) == 0x7f ? 0 : (uint8_t)(i * 7 + 3); /* no E4M3 NaN codes */
	assert_int_equal(strata_safetensors_writer_write_raw(w, raw, 39, &err), 0);
	assert_int_equal(strata_safetensors_writer_write_raw(w, raw, 39, &err), 0);
	assert_int_equal(strata_safetensors_writer_finish(w, &err), 0);
	struct strata_safetensors *st;
	assert_int_equal(strata_safetensors_open(p, &st, &err), 0);
	float v[39];
	assert_int_equal(strata_safetensors_read_f32(st, strata_safetensors_find(st, "a"), 0, 39, v, &err), 0);
	for (int i = 0; i < 39; i++)
		assert_true(v[i] == strata_f8e4m3_to_f32(raw[i]));
	assert_int_equal(strata_safetensors_read_f32(st, strata_safetensors_find(st, "b"), 5, 20, v, &err), 0);
	for (int i = 0; i < 20; i++)
		assert_true(v[i] == strata_f8e5m2_to_f32(raw[5 + i]) || (isnan(v[i]) && isnan(strata_f8e5m2_to_f32(raw[5 + i]))));
	strata_safetensors_close(st);
}

static void test_st_writer_abort(void **state)
{
	const char *p = test_path("ab.safetensors");
	struct strata_error err = { 0 };
	struct strata_safetensors_writer *w;
	assert_int_equal(strata_safetensors_writer_open(p, &w, &err), 0);
	uint64_t shape[1] = { 4 };
	assert_int_equal(strata_safetensors_writer_declare(w, "x", STRATA_SAFETENSORS_F32, 1, shape, &err), 0);
	float v[3] = { 1, 2, 3 };
	assert_int_equal(strata_safetensors_writer_write_f32(w, v, 3, &err), 0);
	/* finish with data missing fails and leaves nothing */
	assert_int_equal(strata_safetensors_writer_finish(w, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "not fully written"));
	struct stat sb;
	assert_int_not_equal(stat(p, &sb), 0);
	char tmp[600];
	snprintf(tmp, sizeof(tmp), "%s.tmp", p);
	assert_int_not_equal(stat(tmp, &sb), 0);
	/* too much data */
	assert_int_equal(strata_safetensors_writer_open(p, &w, &err), 0);
	assert_int_equal(strata_safetensors_writer_declare(w, "x", STRATA_SAFETENSORS_F32, 1, shape, &err), 0);
	float v5[5] = { 0 };
	assert_int_equal(strata_safetensors_writer_write_f32(w, v5, 5, &err), STRATA_EINVAL);
	strata_safetensors_writer_abort(w);
	assert_int_not_equal(stat(tmp, &sb), 0);
}

static void write_index(const char *path, const char *body)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(body, f);
	fclose(f);
}

static void test_st_index(void **state)
{
	struct strata_error err = { 0 };
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/idx", test_tmpdir);
	mkdir(dir, 0755);
	char p1[600], p2[600], ip[600];
	snprintf(p1, sizeof(p1), "%s/model-00001-of-00002.safetensors", dir);
	snprintf(p2, sizeof(p2), "%s/model-00002-of-00002.safetensors", dir);
	snprintf(ip, sizeof(ip), "%s/model.safetensors.index.json", dir);
	write_model_file(p1, STRATA_SAFETENSORS_BF16, 4, 64, 1);
	write_model_file(p2, STRATA_SAFETENSORS_F16, 3, 32, 2);
	write_index(ip, "{\"metadata\": {\"total_size\": 1234}, \"weight_map\": {"
			"\"t1.a\": \"model-00001-of-00002.safetensors\", \"t1.norm\": \"model-00001-of-00002.safetensors\","
			"\"t2.a\": \"model-00002-of-00002.safetensors\", \"t2.norm\": \"model-00002-of-00002.safetensors\"}}");
	struct strata_safetensors *st;
	assert_int_equal(strata_safetensors_open(dir, &st, &err), 0);
	assert_int_equal(strata_safetensors_file_count(st), 2);
	assert_int_equal(strata_safetensors_tensor_count(st), 4);
	const struct strata_safetensors_tensor *a = strata_safetensors_find(st, "t2.a");
	assert_non_null(a);
	assert_int_equal(a->dtype, STRATA_SAFETENSORS_F16);
	assert_string_equal(strata_safetensors_file_path(st, a->file), p2);
	float v[96];
	assert_int_equal(strata_safetensors_read_f32(st, a, 0, 96, v, &err), 0);
	assert_true(v[0] == 2.0f + 0.25f * -18);
	assert_string_equal(strata_safetensors_tensor_at(st, 0)->name, "t1.a");
	strata_safetensors_close(st);
	/* the index file itself also opens */
	assert_int_equal(strata_safetensors_open(ip, &st, &err), 0);
	strata_safetensors_close(st);

	/* tensor listed under the wrong file */
	write_index(ip, "{\"weight_map\": {\"t1.a\": \"model-00002-of-00002.safetensors\", "
			"\"t1.norm\": \"model-00001-of-00002.safetensors\","
			"\"t2.a\": \"model-00002-of-00002.safetensors\", \"t2.norm\": \"model-00002-of-00002.safetensors\"}}");
	expect_open_error(dir, STRATA_ECORRUPT, "the index lists it under");
	/* listed tensor that no file holds */
	write_index(ip, "{\"weight_map\": {\"t1.a\": \"model-00001-of-00002.safetensors\", "
			"\"t1.norm\": \"model-00001-of-00002.safetensors\", \"t9\": \"model-00001-of-00002.safetensors\","
			"\"t2.a\": \"model-00002-of-00002.safetensors\", \"t2.norm\": \"model-00002-of-00002.safetensors\"}}");
	expect_open_error(dir, STRATA_ECORRUPT, "'t9' is listed in weight_map but missing");
	/* missing file */
	write_index(ip, "{\"weight_map\": {\"t1.a\": \"model-00003-of-00002.safetensors\"}}");
	expect_open_error(dir, STRATA_ENOTFOUND, "lists a missing file");
	/* path escape */
	write_index(ip, "{\"weight_map\": {\"t1.a\": \"../x.safetensors\"}}");
	expect_open_error(dir, STRATA_ECORRUPT, "not a plain file name");
	/* bad JSON in the index */
	write_index(ip, "{\"weight_map\": {\"t1.a\" \"x\"}}");
	expect_open_error(dir, STRATA_ECORRUPT, "bad JSON at byte 23");
	/* no index: every *.safetensors in the directory, duplicates rejected */
	unlink(ip);
	assert_int_equal(strata_safetensors_open(dir, &st, &err), 0);
	assert_int_equal(strata_safetensors_tensor_count(st), 4);
	strata_safetensors_close(st);
	char p3[600];
	snprintf(p3, sizeof(p3), "%s/zz.safetensors", dir);
	write_model_file(p3, STRATA_SAFETENSORS_F32, 2, 8, 1);
	expect_open_error(dir, STRATA_ECORRUPT, "duplicate tensor 't1.a'");
}

static void test_st_corrupt(void **state)
{
	const char *p = test_path("bad.safetensors");
	const char *good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";

	write_raw(p, good, 0, 16);
	struct strata_safetensors *st;
	struct strata_error err = { 0 };
	assert_int_equal(strata_safetensors_open(p, &st, &err), 0);
	strata_safetensors_close(st);

	FILE *f = fopen(p, "wb");
	fwrite("abc", 1, 3, f);
	fclose(f);
	expect_open_error(p, STRATA_ECORRUPT, "too short for a safetensors header");
	write_raw(p, good, 1000, 16);
	expect_open_error(p, STRATA_ECORRUPT, "truncated: header claims 1000 bytes");
	write_raw(p, good, 1ull << 40, 16);
	expect_open_error(p, STRATA_ECORRUPT, "exceeds the");
	write_raw(p, good, 0, 15);
	expect_open_error(p, STRATA_ECORRUPT, "truncated: tensor 'a' data_offsets [0, 16) run past the data region (15 bytes)");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
		     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 0, 16);
	expect_open_error(p, STRATA_ECORRUPT, "overlap tensor");
	write_raw(p, "{\"a\":{\"dtype\":\"Q4\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 0, 16);
	expect_open_error(p, STRATA_ECORRUPT, "tensor 'a': bad dtype 'Q4'");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 0, 24);
	expect_open_error(p, STRATA_ECORRUPT, "hold 16 bytes, but F32 shape needs 24");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,0]}}", 0, 16);
	expect_open_error(p, STRATA_ECORRUPT, "run backwards");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}", 0, 16);
	expect_open_error(p, STRATA_ECORRUPT, "shape[1] is not a non-negative integer");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,16]}}", 0, 16);
	expect_open_error(p, STRATA_ECORRUPT, "overflows");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},}", 0, 16);
	expect_open_error(p, STRATA_ECORRUPT, "header: bad JSON at byte 57: expected string key");
	write_raw(p, "[1,2]", 0, 0);
	expect_open_error(p, STRATA_ECORRUPT, "not an object");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 0, 4);
	expect_open_error(p, STRATA_ECORRUPT, "unknown field 'x'");
	write_raw(p, "{\"__metadata__\":{\"k\":1}}", 0, 0);
	expect_open_error(p, STRATA_ECORRUPT, "is a number, not a string");
	write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, 8);
	expect_open_error(p, STRATA_ECORRUPT, "duplicate tensor 'a'");
	expect_open_error(test_path("nope.safetensors"), STRATA_ENOTFOUND, "cannot open");
	/* reading a non-float dtype as float */
	write_raw(p, "{\"a\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 0, 16);
	assert_int_equal(strata_safetensors_open(p, &st, &err), 0);
	float v[4];
	assert_int_equal(strata_safetensors_read_f32(st, strata_safetensors_find(st, "a"), 0, 4, v, &err), STRATA_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "dtype I32 is not a float type"));
	strata_safetensors_close(st);
	/* a file truncated after open: reads fail cleanly */
	write_raw(p, good, 0, 16);
	assert_int_equal(strata_safetensors_open(p, &st, &err), 0);
	assert_int_equal(truncate(p, 20), 0);
	assert_int_equal(strata_safetensors_read_f32(st, strata_safetensors_find(st, "a"), 0, 4, v, &err), STRATA_ECORRUPT);
	assert_non_null(strstr(err.msg, "truncated"));
	strata_safetensors_close(st);
}

static void test_st_image(void **state)
{
	/* the in-memory entry used by the fuzz target */
	const char *hdr = "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}";
	unsigned char img[256] = { 0 };
	size_t n = strlen(hdr);
	img[0] = (unsigned char)n;
	memcpy(img + 8, hdr, n);
	img[8 + n + 1] = 0x3f;
	img[8 + n + 0] = 0x80; /* bf16 1.0 = 0x3f80 */
	struct strata_safetensors *st;
	struct strata_error err = { 0 };
	assert_int_equal(strata_safetensors_open_image(img, 8 + n + 4, "img", &st, &err), 0);
	float v[2];
	assert_int_equal(strata_safetensors_read_f32(st, strata_safetensors_find(st, "a"), 0, 2, v, &err), 0);
	assert_true(v[0] == 1.0f);
	strata_safetensors_close(st);
	assert_int_equal(strata_safetensors_open_image(img, 8 + n + 3, "img", &st, &err), STRATA_ECORRUPT);
	/* regression (found by fuzz_safetensors): a header with no tensors */
	const unsigned char empty[10] = { 2, 0, 0, 0, 0, 0, 0, 0, '{', '}' };
	assert_int_equal(strata_safetensors_open_image(empty, sizeof(empty), "empty", &st, &err), 0);
	assert_int_equal(strata_safetensors_tensor_count(st), 0);
	assert_null(strata_safetensors_find(st, "a"));
	assert_null(strata_safetensors_tensor_at(st, 0));
	strata_safetensors_close(st);
	assert_int_equal(strata_safetensors_open_image(img, 5, "img", &st, &err), STRATA_ECORRUPT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_valid),
		cmocka_unit_test(test_json_errors),
		cmocka_unit_test(test_st_roundtrip),
		cmocka_unit_test(test_st_fp8),
		cmocka_unit_test(test_st_writer_abort),
		cmocka_unit_test(test_st_index),
		cmocka_unit_test(test_st_corrupt),
		cmocka_unit_test(test_st_image),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
