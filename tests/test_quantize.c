/* strata quantize end to end: naming schemes, spec inference, imatrix files,
 * a tiny Mixtral-named model quantized and reopened with strata_store_open,
 * and bad input (wrong shape / dtype, missing tensor, NaN/Inf weights, counts
 * of another shape) leaving no shard behind. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"
#include "strata/json.h"
#include "strata/quantize.h"
#include "strata/test_model.h"
#include "strata/safetensors.h"
#include "strata/store.h"
#include "strata/tier_assign.h"
#include "strata/util.h"
#include "testutil.h"

/* files in dir (0 if it does not exist) */
static int count_files(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static void test_naming(void **state)
{
	const struct strata_naming *mix = strata_naming_find("mixtral"), *ds = strata_naming_find("deepseek-v3"),
				   *qw = strata_naming_find("qwen3-moe");
	assert_non_null(mix);
	assert_non_null(ds);
	assert_non_null(qw);
	assert_null(strata_naming_find("llama"));
	uint32_t l, e;
	int m;
	assert_true(strata_naming_match(mix, "model.layers.31.block_sparse_moe.experts.7.w3.weight", &l, &e, &m));
	assert_int_equal(l, 31);
	assert_int_equal(e, 7);
	assert_int_equal(m, STRATA_MAT_UP);
	assert_true(strata_naming_match(mix, "model.layers.0.block_sparse_moe.experts.0.w2.weight", &l, &e, &m));
	assert_int_equal(m, STRATA_MAT_DOWN);
	assert_true(strata_naming_match(ds, "model.layers.60.mlp.experts.255.gate_proj.weight", &l, &e, &m));
	assert_int_equal(l, 60);
	assert_int_equal(e, 255);
	assert_int_equal(m, STRATA_MAT_GATE);
	assert_true(strata_naming_match(qw, "model.layers.3.mlp.experts.127.down_proj.weight", &l, &e, &m));
	static const char *no[] = {
		"model.layers.01.block_sparse_moe.experts.0.w1.weight", /* leading zero */
		"model.layers.0.block_sparse_moe.experts.0.w1.bias",
		"model.layers.0.block_sparse_moe.experts.0.w4.weight",
		"model.layers.0.block_sparse_moe.experts.x.w1.weight",
		"model.layers.0.block_sparse_moe.gate.weight",
		"model.layers.0.mlp.experts.0.gate_proj.weight",
		"layers.0.block_sparse_moe.experts.0.w1.weight",
		"model.layers.0.block_sparse_moe.experts.0.w1.weight.x",
	};
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (strata_naming_match(mix, no[i], &l, &e, &m))
			fail_msg("'%s' matched", no[i]);
	assert_false(strata_naming_match(ds, "model.layers.3.mlp.shared_experts.gate_proj.weight", &l, &e, &m));
	char buf[128];
	strata_naming_format(ds, 4, 9, STRATA_MAT_UP, buf, sizeof(buf));
	assert_string_equal(buf, "model.layers.4.mlp.experts.9.up_proj.weight");
}

static void spec_of(struct strata_model_spec *s, const char *text)
{
	struct strata_error err = { 0 };
	if (strata_model_spec_parse(text, s, &err))
		fail_msg("%s", err.msg);
}

static void test_spec_inference(void **state)
{
	static const struct {
		const char *naming, *spec;
		uint32_t files;
		int dtype;
	} cases[] = {
		{ "mixtral", "custom:layers=2,experts=4,top_k=2,hidden=256,inter=16", 1, STRATA_SAFETENSORS_BF16 },
		{ "deepseek-v3", "custom:layers=2,first_moe=1,experts=6,top_k=3,hidden=256,inter=32,shared=1,shared_inter=32", 3,
		  STRATA_SAFETENSORS_F16 },
		{ "qwen3-moe", "custom:layers=3,experts=5,top_k=4,hidden=256,inter=16", 2, STRATA_SAFETENSORS_F32 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct strata_model_spec s;
		spec_of(&s, cases[i].spec);
		s.n_layers = s.first_moe_layer + s.n_moe_layers;
		char dir[64];
		snprintf(dir, sizeof(dir), "spec%zu", i);
		const char *d = test_path(dir);
		struct strata_error err = { 0 };
		if (strata_test_model_write(d, cases[i].naming, &s, cases[i].dtype, cases[i].files, 7, &err))
			fail_msg("%s", err.msg);
		struct strata_quantize_model *m;
		struct strata_quantize_open_options oo = { .naming = "auto" };
		if (strata_quantize_model_open(d, &oo, &m, &err))
			fail_msg("%s: %s", cases[i].naming, err.msg);
		assert_string_equal(m->naming->name, cases[i].naming);
		assert_int_equal(m->spec.n_layers, s.n_layers);
		assert_int_equal(m->spec.first_moe_layer, s.first_moe_layer);
		assert_int_equal(m->spec.n_moe_layers, s.n_moe_layers);
		assert_int_equal(m->spec.n_experts, s.n_experts);
		assert_int_equal(m->spec.top_k, s.top_k); /* from config.json */
		assert_int_equal(m->spec.hidden, s.hidden);
		assert_int_equal(m->spec.inter, s.inter);
		assert_int_equal(m->spec.n_shared, s.n_shared);
		assert_int_equal(m->spec.shared_inter, s.n_shared ? s.shared_inter : 0);
		assert_string_equal(m->spec.name, dir);
		assert_int_equal(strata_safetensors_file_count(m->st), cases[i].files);
		/* every tensor is an expert matrix or non-routed; params add up */
		uint64_t routed = strata_model_total_experts(&s) * strata_model_expert_params(&s);
		assert_true(m->spec.nonrouted_params + routed == strata_safetensors_total_params(m->st));
		assert_int_equal(m->n_nonrouted + strata_model_total_experts(&s) * 3, strata_safetensors_tensor_count(m->st));
		strata_quantize_model_close(m);
		/* the wrong explicit naming finds nothing */
		oo.naming = !strcmp(cases[i].naming, "mixtral") ? "qwen3-moe" : "mixtral";
		assert_int_equal(strata_quantize_model_open(d, &oo, &m, &err), STRATA_ENOTFOUND);
		assert_non_null(strstr(err.msg, "no tensor matches"));
		/* --top-k overrides config.json */
		oo.naming = cases[i].naming;
		oo.top_k = 1;
		assert_int_equal(strata_quantize_model_open(d, &oo, &m, &err), 0);
		assert_int_equal(m->spec.top_k, 1);
		strata_quantize_model_close(m);
	}
	struct strata_quantize_model *m;
	struct strata_error err = { 0 };
	/* DeepSeek-V3 ships its multi-token-prediction module as one extra layer
	 * past num_hidden_layers: skipped and counted */
	char cfg[600];
	snprintf(cfg, sizeof(cfg), "%s/config.json", test_path("spec1"));
	FILE *f = fopen(cfg, "w");
	fputs("{\"num_hidden_layers\": 2, \"num_experts_per_tok\": 3, \"n_shared_experts\": 1}", f);
	fclose(f);
	assert_int_equal(strata_quantize_model_open(test_path("spec1"), NULL, &m, &err), 0);
	assert_int_equal(m->spec.n_layers, 2);
	assert_int_equal(m->spec.first_moe_layer, 1);
	assert_int_equal(m->spec.n_moe_layers, 1);
	assert_true(m->n_skipped > 6 * 3);
	strata_quantize_model_close(m);
	struct strata_quantize_open_options oo = { .naming = "nope" };
	assert_int_equal(strata_quantize_model_open(test_path("spec0"), &oo, &m, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "unknown naming 'nope'"));
}

/* A 1-layer, 4-expert Mixtral-named model (hidden 256, inter 16) written by
 * hand, with one defect. */
enum defect { D_NONE, D_SHAPE, D_DTYPE, D_MISSING, D_NAN, D_INF_NONROUTED, D_EXTRA };
#define H 256
#define I 16
#define NE 4

static void write_model(const char *dir, enum defect d)
{
	mkdir(dir, 0755);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	struct strata_safetensors_writer *w;
	struct strata_error err = { 0 };
	assert_int_equal(strata_safetensors_writer_open(path, &w, &err), 0);
	uint64_t emb[2] = { 32, H }, norm[1] = { H }, gate[2] = { NE, H };
	assert_int_equal(strata_safetensors_writer_declare(w, "model.embed_tokens.weight", STRATA_SAFETENSORS_BF16, 2, emb, &err), 0);
	assert_int_equal(strata_safetensors_writer_declare(w, "model.norm.weight", STRATA_SAFETENSORS_BF16, 1, norm, &err), 0);
	assert_int_equal(strata_safetensors_writer_declare(w, "model.layers.0.block_sparse_moe.gate.weight", STRATA_SAFETENSORS_BF16, 2,
						  gate, &err), 0);
	static const char *mats[3] = { "w1", "w3", "w2" };
	int n_decl = 3;
	for (int e = 0; e < NE; e++)
		for (int m = 0; m < 3; m++) {
			if (d == D_MISSING && e == 3 && m == 0)
				continue;
			char name[128];
			snprintf(name, sizeof(name), "model.layers.0.block_sparse_moe.experts.%d.%s.weight", e, mats[m]);
			uint64_t shape[2] = { m == 2 ? H : I, m == 2 ? I : H };
			if (d == D_SHAPE && e == 2 && m == 1)
				shape[1] = H + 1, shape[0] = I;
			int dt = d == D_DTYPE && e == 1 && m == 2 ? STRATA_SAFETENSORS_I16 : STRATA_SAFETENSORS_BF16;
			assert_int_equal(strata_safetensors_writer_declare(w, name, dt, 2, shape, &err), 0);
			n_decl++;
		}
	if (d == D_EXTRA) {
		uint64_t b[1] = { I };
		assert_int_equal(strata_safetensors_writer_declare(w, "model.layers.0.block_sparse_moe.experts.0.w1.bias",
							  STRATA_SAFETENSORS_BF16, 1, b, &err), 0);
	}
	/* data: write_f32 spans tensors; non-float ones take raw zeros */
	uint64_t seed = 12345;
	float row[H + 1];
	/* embed 32 rows, norm, router, experts */
	for (int r = 0; r < 32; r++) {
		for (int c = 0; c < H; c++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			row[c] = (float)((int)(seed >> 40) % 2001 - 1000) / 1000.0f;
		}
		if (d == D_INF_NONROUTED && r == 5)
			row[7] = INFINITY;
		assert_int_equal(strata_safetensors_writer_write_f32(w, row, H, &err), 0);
	}
	for (int c = 0; c < H; c++)
		row[c] = 1.0f;
	assert_int_equal(strata_safetensors_writer_write_f32(w, row, H, &err), 0);
	for (int r = 0; r < NE; r++)
		assert_int_equal(strata_safetensors_writer_write_f32(w, row, H, &err), 0);
	for (int e = 0; e < NE; e++)
		for (int m = 0; m < 3; m++) {
			if (d == D_MISSING && e == 3 && m == 0)
				continue;
			uint64_t rows = m == 2 ? H : I, cols = m == 2 ? I : H;
			if (d == D_SHAPE && e == 2 && m == 1)
				cols = H + 1;
			if (d == D_DTYPE && e == 1 && m == 2) {
				static const uint16_t z[H * I];
				assert_int_equal(strata_safetensors_writer_write_raw(w, z, sizeof(z), &err), 0);
				continue;
			}
			for (uint64_t r = 0; r < rows; r++) {
				for (uint64_t c = 0; c < cols; c++) {
					/* approximately Gaussian: sum of 4 uniforms */
					double x = 0;
					for (int k = 0; k < 4; k++) {
						seed = seed * 6364136223846793005ull + 1442695040888963407ull;
						x += (double)(seed >> 11) / 9007199254740992.0 - 0.5;
					}
					row[c] = (float)(x * 1.7);
				}
				if (d == D_NAN && e == 0 && m == 0 && r == 3)
					row[9] = NAN;
				assert_int_equal(strata_safetensors_writer_write_f32(w, row, cols, &err), 0);
			}
		}
	if (d == D_EXTRA) {
		for (int c = 0; c < I; c++)
			row[c] = 0;
		assert_int_equal(strata_safetensors_writer_write_f32(w, row, I, &err), 0);
	}
	if (strata_safetensors_writer_finish(w, &err))
		fail_msg("%s", err.msg);
	/* config.json: top-2 */
	snprintf(path, sizeof(path), "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	fputs("{\"num_experts_per_tok\": 2, \"num_local_experts\": 4}\n", f);
	fclose(f);
}

static void test_quantize_end_to_end(void **state)
{
	const char *in = test_path("e2e-in"), *out = test_path("e2e-out");
	write_model(in, D_NONE);
	/* counts: expert 2 hottest, then 0, then 3, 1 -> hot 2, warm 0, cold 3 and 1 */
	const char *counts = test_path("e2e-counts.csv");
	FILE *f = fopen(counts, "w");
	fputs("layer,expert,count\n0,0,50\n0,1,5\n0,2,90\n0,3,20\n", f);
	fclose(f);
	/* an importance matrix for layer 0's gate and down */
	const char *imx = test_path("e2e-imatrix.json");
	f = fopen(imx, "w");
	fputs("{\"layers\": {\"0\": {\"gate\": [", f);
	for (int c = 0; c < H; c++)
		fprintf(f, "%s%g", c ? "," : "", 1.0 + (c % 7));
	fputs("], \"down\": [", f);
	for (int c = 0; c < I; c++)
		fprintf(f, "%s%g", c ? "," : "", 0.5);
	fputs("]}}}\n", f);
	fclose(f);

	static char outbuf[16384];
	int rc = test_run(outbuf, sizeof(outbuf),
			  "%s quantize --in %s --out %s --counts %s --imatrix %s --threads 2 --json --no-progress",
			  test_bin("strata"), in, out, counts, imx);
	if (rc)
		fail_msg("exit %d: %s", rc, outbuf);
	struct strata_json_doc *doc;
	struct strata_error err = { 0 };
	if (strata_json_parse(outbuf, strlen(outbuf), "quantize --json", &doc, &err))
		fail_msg("%s\n%s", err.msg, outbuf);
	const struct strata_json *r = strata_json_root(doc);
	assert_string_equal(strata_json_get(r, "naming")->str, "mixtral");
	assert_int_equal(strata_json_get(r, "experts")->u, NE);
	assert_int_equal(strata_json_get(r, "imatrix_matrices")->u, 2 * NE); /* gate and down of every expert */
	const struct strata_json *tiers = strata_json_get(r, "tiers");
	assert_int_equal(tiers->len, 3);
	static const uint64_t want_n[3] = { 1, 1, 2 };
	double cos[3];
	for (uint32_t t = 0; t < 3; t++) {
		const struct strata_json *x = strata_json_at(tiers, t);
		assert_int_equal(strata_json_get(x, "experts")->u, want_n[t]);
		assert_int_equal(strata_json_get(x, "matrices")->u, 3 * want_n[t]);
		cos[t] = strata_json_get(x, "cosine_mean")->num;
		assert_true(strata_json_get(x, "cosine_min")->num <= cos[t]);
	}
	assert_string_equal(strata_json_get(strata_json_at(tiers, 0), "format")->str, "hot");
	assert_string_equal(strata_json_get(strata_json_at(tiers, 2), "format")->str, "cold");
	/* quality: small matrices, so looser than the 512x7168 targets */
	if (!(cos[0] > 0.93 && cos[1] > 0.93 && cos[2] > 0.85 && cos[0] > cos[2]))
		fail_msg("cosines %g %g %g", cos[0], cos[1], cos[2]);
	assert_int_equal(strata_json_get(strata_json_get(r, "nonrouted"), "tensors")->u, 3);
	assert_true(strata_json_get(strata_json_get(r, "total"), "reduction_vs_bf16")->num > 0);

	/* --plan predicts the same sizes without quantizing or writing */
	static char planbuf[16384];
	rc = test_run(planbuf, sizeof(planbuf), "%s quantize --in %s --plan --counts %s --json", test_bin("strata"), in,
		      counts);
	if (rc)
		fail_msg("exit %d: %s", rc, planbuf);
	struct strata_json_doc *pdoc;
	if (strata_json_parse(planbuf, strlen(planbuf), "quantize --plan --json", &pdoc, &err))
		fail_msg("%s\n%s", err.msg, planbuf);
	const struct strata_json *pr = strata_json_root(pdoc);
	for (uint32_t t = 0; t < 3; t++) {
		const struct strata_json *a = strata_json_at(tiers, t), *b = strata_json_at(strata_json_get(pr, "tiers"), t);
		assert_int_equal(strata_json_get(a, "extent_bytes")->u, strata_json_get(b, "extent_bytes")->u);
		assert_int_equal(strata_json_get(a, "experts")->u, strata_json_get(b, "experts")->u);
	}
	assert_int_equal(strata_json_get(strata_json_get(r, "total"), "bytes")->u,
			 strata_json_get(strata_json_get(pr, "total"), "bytes")->u);
	strata_json_free(pdoc);

	/* strata inspect of the written shards prints the same card: one bpw and
	 * one reduction definition (strata_card_bpw / strata_card_reduction) */
	static char insbuf[16384];
	rc = test_run(insbuf, sizeof(insbuf), "%s inspect %s --json", test_bin("strata"), out);
	if (rc)
		fail_msg("exit %d: %s", rc, insbuf);
	struct strata_json_doc *idoc;
	if (strata_json_parse(insbuf, strlen(insbuf), "inspect --json", &idoc, &err))
		fail_msg("%s\n%s", err.msg, insbuf);
	const struct strata_json *ir = strata_json_root(idoc);
	for (uint32_t t = 0; t < 3; t++) {
		const struct strata_json *a = strata_json_at(tiers, t), *b = strata_json_at(strata_json_get(ir, "tiers"), t);
		assert_true(fabs(strata_json_get(a, "bpw")->num - strata_json_get(b, "bpw")->num) < 1e-4);
		assert_int_equal(strata_json_get(a, "extent_bytes")->u, strata_json_get(b, "extent_bytes")->u);
	}
	assert_true(fabs(strata_json_get(strata_json_get(r, "routed"), "reduction_vs_bf16")->num -
			 strata_json_get(ir, "reduction_vs_bf16")->num) < 1e-4);
	/* rows shorter than a block are padded: never below the format's 2.8125 */
	assert_true(strata_json_get(strata_json_at(tiers, 0), "bpw")->num >= 2.8125 - 1e-4);
	strata_json_free(idoc);
	strata_json_free(doc);

	/* the shards open, with the counts' tiers and each tier's format */
	struct strata_store *st;
	if (strata_store_open(out, &st, &err))
		fail_msg("%s", err.msg);
	const struct strata_model_spec *s = strata_store_spec(st);
	assert_int_equal(s->n_moe_layers, 1);
	assert_int_equal(s->n_experts, NE);
	assert_int_equal(s->top_k, 2);
	assert_int_equal(s->hidden, H);
	assert_int_equal(s->inter, I);
	static const uint8_t want_tier[NE] = { 1, 2, 0, 2 };
	assert_memory_equal(strata_store_tier_table(st), want_tier, NE);
	for (int e = 0; e < NE; e++)
		assert_int_equal(strata_store_fmt_table(st)[e], STRATA_FMT_HOT + want_tier[e]);
	/* expert 2's extent dequantizes close to the source weights */
	struct strata_safetensors *src;
	assert_int_equal(strata_safetensors_open(in, &src, &err), 0);
	const struct strata_extent *x = strata_store_expert(st, 0, 2);
	void *buf = strata_aligned_alloc(4096, x->bytes);
	assert_int_equal(strata_store_read_extent(st, x, buf, false, true, &err), 0);
	struct strata_expert_layout lay;
	assert_int_equal(strata_expert_layout(STRATA_FMT_HOT, H, I, &lay), 0);
	float orig[H * I], deq[H * I];
	assert_int_equal(strata_safetensors_read_f32(src, strata_safetensors_find(src, "model.layers.0.block_sparse_moe.experts.2.w2.weight"),
					    0, H * I, orig, &err), 0);
	assert_int_equal(strata_dequantize_matrix(STRATA_FMT_HOT, (uint8_t *)buf + lay.down_off, H, I, deq), 0);
	double c = test_cosine(orig, deq, H * I);
	if (c < 0.9)
		fail_msg("expert 2 down: cosine %g", c);
	assert_int_equal(strata_safetensors_read_f32(src, strata_safetensors_find(src, "model.layers.0.block_sparse_moe.experts.2.w1.weight"),
					    0, H * I, orig, &err), 0);
	assert_int_equal(strata_dequantize_matrix(STRATA_FMT_HOT, (uint8_t *)buf + lay.gate_off, I, H, deq), 0);
	assert_true(test_cosine(orig, deq, H * I) > 0.9);
	free(buf);
	/* a BF16 tensor round-trips exactly; the 1-D norm is F32 */
	const struct strata_tensor_info *ti = strata_store_find_tensor(st, "model.embed_tokens.weight");
	assert_non_null(ti);
	assert_int_equal(ti->fmt, STRATA_FMT_BF16);
	assert_int_equal(ti->ndim, 2);
	assert_int_equal(ti->shape[0], 32);
	buf = strata_aligned_alloc(4096, ti->ext.bytes);
	assert_int_equal(strata_store_read_extent(st, &ti->ext, buf, false, true, &err), 0);
	float *emb = malloc(32 * H * sizeof(float));
	assert_int_equal(strata_safetensors_read_f32(src, strata_safetensors_find(src, "model.embed_tokens.weight"), 0, 32 * H, emb, &err), 0);
	for (int i = 0; i < 32 * H; i++)
		if (strata_bf16_to_f32(((uint16_t *)buf)[i]) != emb[i])
			fail_msg("embed[%d]", i);
	free(emb);
	free(buf);
	ti = strata_store_find_tensor(st, "model.norm.weight");
	assert_non_null(ti);
	assert_int_equal(ti->fmt, STRATA_FMT_F32);
	assert_non_null(strata_store_find_tensor(st, "model.layers.0.block_sparse_moe.gate.weight"));
	assert_int_equal(strata_store_tensor_count(st), 3);
	strata_safetensors_close(src);
	strata_store_close(st);

	/* the text card and --help */
	rc = test_run(outbuf, sizeof(outbuf), "%s quantize --in %s --out %s --split 0,50,50 --threads 2 --no-progress",
		      test_bin("strata"), in, test_path("e2e-out2"));
	if (rc || !strstr(outbuf, "cos mean") || !strstr(outbuf, "smaller"))
		fail_msg("exit %d: %s", rc, outbuf);
	assert_int_equal(test_run(outbuf, sizeof(outbuf), "%s quantize --help", test_bin("strata")), 0);
	assert_non_null(strstr(outbuf, "--budget-bytes"));
	assert_int_equal(test_run(outbuf, sizeof(outbuf), "%s quantize --in x --out y --bogus", test_bin("strata")), 2);
}

/* The work goes to the threads in row blocks of ~32K weights (here 5 blocks
 * per matrix, uneven, padded rows in gate/up) and expert buffers are reused
 * (6 experts, 3 threads: 5 buffers): 1 and 3 threads write the same extents
 * and low-bit copies, and report the same per-tier statistics and where the
 * time went. */
static void test_threads_row_blocks(void **state)
{
	const char *in = test_path("rb-in");
	struct strata_model_spec spec;
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("custom:layers=2,experts=3,top_k=2,hidden=640,inter=224", &spec, &err), 0);
	if (strata_test_model_write(in, "qwen3-moe", &spec, STRATA_SAFETENSORS_BF16, 1, 5, &err))
		fail_msg("%s", err.msg);
	struct strata_quantize_model *m;
	assert_int_equal(strata_quantize_model_open(in, NULL, &m, &err), 0);
	uint8_t tiers[6] = { 2, 0, 1, 1, 2, 2 };
	struct strata_quantize_report rep[2];
	struct strata_store *st[2];
	static const uint32_t threads[2] = { 1, 3 };
	for (int k = 0; k < 2; k++) {
		char out[600];
		snprintf(out, sizeof(out), "%s-out%d", in, k);
		struct strata_quantize_config qc = { .out = out, .tiers = tiers, .threads = threads[k], .lowbit_copies = true };
		if (strata_quantize_run(m, &qc, &rep[k], &err))
			fail_msg("%u threads: %s", threads[k], err.msg);
		assert_int_equal(rep[k].threads, threads[k]);
		const struct strata_quantize_times *q = &rep[k].time;
		assert_true(q->encode > 0 && q->read > 0 && q->cpu > 0 && q->tensors > 0);
		assert_true(q->busy_share > 0 && q->busy_share <= 1.05);
		assert_true(q->open + q->work + q->finish <= rep[k].seconds + 1e-3);
		assert_true(q->encode + q->read + q->write + q->tensors + q->wait + q->tail <=
			    threads[k] * q->work * 1.01 + 1e-3);
		if (strata_store_open(out, &st[k], &err))
			fail_msg("%s", err.msg);
	}
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		assert_int_equal(rep[0].tier[t].experts, rep[1].tier[t].experts);
		assert_int_equal(rep[0].tier[t].matrices, 3 * rep[0].tier[t].experts);
		assert_true(rep[0].tier[t].cos_min == rep[1].tier[t].cos_min); /* per matrix: summed block by block, in order */
		assert_true(fabs(rep[0].tier[t].cos_sum - rep[1].tier[t].cos_sum) < 1e-12);
		assert_true(rep[0].tier[t].cos_min > 0.8);
	}
	assert_int_equal(rep[0].in_bytes, rep[1].in_bytes);
	assert_int_equal(rep[0].tensors, rep[1].tensors);
	uint32_t copies = 0;
	for (uint32_t l = 0; l < 2; l++)
		for (uint32_t e = 0; e < 3; e++)
			for (int c = 0; c < 2; c++) {
				const struct strata_extent *a = c ? strata_store_copy(st[0], l, e) : strata_store_expert(st[0], l, e);
				const struct strata_extent *b = c ? strata_store_copy(st[1], l, e) : strata_store_expert(st[1], l, e);
				assert_true(!a == !b);
				if (!a)
					continue;
				copies += c;
				assert_int_equal(a->bytes, b->bytes);
				void *x = strata_aligned_alloc(4096, a->bytes), *y = strata_aligned_alloc(4096, b->bytes);
				assert_true(x && y);
				assert_int_equal(strata_store_read_extent(st[0], a, x, false, true, &err), 0);
				assert_int_equal(strata_store_read_extent(st[1], b, y, false, true, &err), 0);
				if (memcmp(x, y, a->bytes))
					fail_msg("layer %u expert %u%s differs between 1 and 3 threads", l, e, c ? " (copy)" : "");
				free(x);
				free(y);
			}
	assert_int_equal(copies, 3); /* the hot and warm experts */
	strata_store_close(st[0]);
	strata_store_close(st[1]);
	strata_quantize_model_close(m);
}

static void expect_open_fails(enum defect d, int code, const char *needle)
{
	char name[32];
	snprintf(name, sizeof(name), "bad%d", (int)d);
	const char *in = test_path(name);
	write_model(in, d);
	struct strata_quantize_model *m = NULL;
	struct strata_error err = { 0 };
	int rc = strata_quantize_model_open(in, NULL, &m, &err);
	if (rc != code || !strstr(err.msg, needle))
		fail_msg("defect %d: rc %d msg '%s' (want '%s')", (int)d, rc, err.msg, needle);
	assert_null(m);
	/* and the CLI exits 1 with the same message, writing nothing */
	char out[600], buf[4096];
	snprintf(out, sizeof(out), "%s-out", in);
	assert_int_equal(test_run(buf, sizeof(buf), "%s quantize --in %s --out %s --no-progress", test_bin("strata"), in,
				  out), 1);
	assert_non_null(strstr(buf, needle));
	assert_int_equal(count_files(out), 0);
}

static void test_quantize_bad_model(void **state)
{
	expect_open_fails(D_SHAPE, STRATA_ESHAPE,
			  "tensor 'model.layers.0.block_sparse_moe.experts.2.w3.weight' has shape [16, 257], expected [16, 256]");
	expect_open_fails(D_DTYPE, STRATA_EUNSUPPORTED,
			  "tensor 'model.layers.0.block_sparse_moe.experts.1.w2.weight' has dtype I16");
	expect_open_fails(D_MISSING, STRATA_ENOTFOUND, "missing tensor 'model.layers.0.block_sparse_moe.experts.3.w1.weight'");
	expect_open_fails(D_EXTRA, STRATA_ECORRUPT, "is under the mixtral experts but is not one of");
}

static void test_quantize_bad_weights(void **state)
{
	static const struct {
		enum defect d;
		const char *needle;
	} cases[] = {
		{ D_NAN, "tensor 'model.layers.0.block_sparse_moe.experts.0.w1.weight': NaN at [3, 9]: weights must be finite" },
		{ D_INF_NONROUTED, "tensor 'model.embed_tokens.weight': Inf at element 1287 (row 5)" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[32];
		snprintf(name, sizeof(name), "w%zu", i);
		const char *in = test_path(name);
		write_model(in, cases[i].d);
		struct strata_quantize_model *m;
		struct strata_error err = { 0 };
		assert_int_equal(strata_quantize_model_open(in, NULL, &m, &err), 0);
		uint8_t tiers[NE] = { 0, 1, 2, 2 };
		char out[600];
		snprintf(out, sizeof(out), "%s-out", in);
		struct strata_quantize_config qc = { .out = out, .tiers = tiers, .threads = 2 };
		struct strata_quantize_report rep;
		int rc = strata_quantize_run(m, &qc, &rep, &err);
		if (rc != STRATA_ECORRUPT || !strstr(err.msg, cases[i].needle))
			fail_msg("case %zu: rc %d msg '%s'", i, rc, err.msg);
		/* no shard, finished or temporary, is left */
		assert_int_equal(count_files(out), 0);
		strata_quantize_model_close(m);
	}
}

static void test_disk_full(void **state)
{
	const char *in = test_path("full-in"), *out = test_path("full-out");
	write_model(in, D_NONE);
	struct strata_quantize_model *m;
	struct strata_error err = { 0 };
	assert_int_equal(strata_quantize_model_open(in, NULL, &m, &err), 0);
	uint8_t tiers[NE] = { 0, 1, 2, 2 };
	struct strata_quantize_config qc = { .out = out, .tiers = tiers, .threads = 2 };
	struct strata_quantize_report rep;
	strata_store_fail_after_bytes = 6000; /* the store's ENOSPC hook */
	int rc = strata_quantize_run(m, &qc, &rep, &err);
	strata_store_fail_after_bytes = 0;
	if (rc != STRATA_ENOSPC)
		fail_msg("rc %d msg '%s'", rc, err.msg);
	assert_int_equal(count_files(out), 0);
	/* Ctrl-C (the flag the SIGINT handler sets) stops the run the same way */
	strata_interrupted = 1;
	rc = strata_quantize_run(m, &qc, &rep, &err);
	strata_interrupted = 0;
	assert_int_equal(rc, STRATA_EINTR);
	assert_int_equal(count_files(out), 0);
	strata_quantize_model_close(m);
}

/* A DeepSeek-V3-style FP8 checkpoint: F8_E4M3 weights with F32
 * "<name>_scale_inv" per 128 x 128 block; 1 MoE layer x 2 experts. */
enum fp8_defect { F8_OK, F8_NO_SCALE, F8_BAD_SCALE, F8_NO_GATE };

static uint8_t f8_code(uint64_t *seed)
{
	*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
	uint8_t b = (uint8_t)(*seed >> 56);
	return (b & 0x7f) == 0x7f ? 0x30 : b; /* no NaN codes */
}

static void write_fp8_model(const char *dir, enum fp8_defect d)
{
	mkdir(dir, 0755);
	char path[600];
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	struct strata_safetensors_writer *w;
	struct strata_error err = { 0 };
	assert_int_equal(strata_safetensors_writer_open(path, &w, &err), 0);
	static const char *mats[3] = { "gate_proj", "up_proj", "down_proj" };
	uint64_t qs[2] = { H, H }, qss[2] = { 2, 2 }, ns[1] = { H };
	assert_int_equal(strata_safetensors_writer_declare(w, "model.layers.0.self_attn.q_proj.weight", STRATA_SAFETENSORS_F8_E4M3, 2, qs,
						  &err), 0);
	assert_int_equal(strata_safetensors_writer_declare(w, "model.layers.0.self_attn.q_proj.weight_scale_inv", STRATA_SAFETENSORS_F32, 2,
						  qss, &err), 0);
	assert_int_equal(strata_safetensors_writer_declare(w, "model.norm.weight", STRATA_SAFETENSORS_BF16, 1, ns, &err), 0);
	uint64_t gs[2] = { 2, H };
	if (d != F8_NO_GATE)
		assert_int_equal(strata_safetensors_writer_declare(w, "model.layers.0.mlp.gate.weight",
								   STRATA_SAFETENSORS_BF16, 2, gs, &err), 0);
	for (int e = 0; e < 2; e++)
		for (int m = 0; m < 3; m++) {
			char name[128];
			snprintf(name, sizeof(name), "model.layers.0.mlp.experts.%d.%s.weight", e, mats[m]);
			uint64_t shape[2] = { m == 2 ? H : I, m == 2 ? I : H };
			assert_int_equal(strata_safetensors_writer_declare(w, name, STRATA_SAFETENSORS_F8_E4M3, 2, shape, &err), 0);
			if (d == F8_NO_SCALE && e == 1 && m == 1)
				continue;
			strcat(name, "_scale_inv");
			uint64_t sshape[2] = { (shape[0] + 127) / 128, (shape[1] + 127) / 128 };
			if (d == F8_BAD_SCALE && e == 0 && m == 2)
				sshape[1] = 2;
			assert_int_equal(strata_safetensors_writer_declare(w, name, STRATA_SAFETENSORS_F32, 2, sshape, &err), 0);
		}
	uint64_t seed = 99;
	static uint8_t b[H * H];
	for (int i = 0; i < H * H; i++)
		b[i] = f8_code(&seed);
	assert_int_equal(strata_safetensors_writer_write_raw(w, b, H * H, &err), 0);
	float sc[4] = { 0.01f, 0.02f, 0.03f, 0.04f };
	assert_int_equal(strata_safetensors_writer_write_f32(w, sc, 4, &err), 0);
	float ones[H];
	for (int i = 0; i < H; i++)
		ones[i] = 1.0f;
	assert_int_equal(strata_safetensors_writer_write_f32(w, ones, H, &err), 0);
	for (int r = 0; r < 2 && d != F8_NO_GATE; r++) /* router gate */
		assert_int_equal(strata_safetensors_writer_write_f32(w, ones, H, &err), 0);
	for (int e = 0; e < 2; e++)
		for (int m = 0; m < 3; m++) {
			for (int i = 0; i < H * I; i++)
				b[i] = f8_code(&seed);
			assert_int_equal(strata_safetensors_writer_write_raw(w, b, H * I, &err), 0);
			if (d == F8_NO_SCALE && e == 1 && m == 1)
				continue;
			/* gate/up [16, 256]: 1 x 2 blocks; down [256, 16]: 2 x 1 (bad: 2 x 2) */
			int n = d == F8_BAD_SCALE && e == 0 && m == 2 ? 4 : 2;
			float s2[4] = { 0.005f * (float)(e + 1), 0.007f, 0.011f, 0.013f };
			assert_int_equal(strata_safetensors_writer_write_f32(w, s2, (uint64_t)n, &err), 0);
		}
	if (strata_safetensors_writer_finish(w, &err))
		fail_msg("%s", err.msg);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	fputs("{\"num_experts_per_tok\": 1, \"quantization_config\": {\"quant_method\": \"fp8\", "
	      "\"weight_block_size\": [128, 128]}}\n", f);
	fclose(f);
}

static void test_fp8_checkpoint(void **state)
{
	const char *in = test_path("fp8-in"), *out = test_path("fp8-out");
	write_fp8_model(in, F8_OK);
	struct strata_quantize_model *m;
	struct strata_error err = { 0 };
	struct strata_quantize_open_options oo = { .naming = "deepseek-v3" };
	if (strata_quantize_model_open(in, &oo, &m, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(m->spec.n_experts, 2);
	assert_int_equal(m->spec.hidden, H);
	assert_int_equal(m->spec.inter, I);
	assert_int_equal(m->n_nonrouted, 3); /* q_proj, the norm, the router; scales are consumed */
	assert_true(m->spec.nonrouted_params == (uint64_t)H * H + H + 2 * H);
	/* dequantized rows: FP8 value x its block's scale */
	const struct strata_safetensors_tensor *t = strata_safetensors_find(m->st, "model.layers.0.mlp.experts.1.down_proj.weight");
	float v[H * I];
	assert_int_equal(strata_quantize_read_rows(m, t, 120, 20, v, &err), 0);
	uint8_t raw[20 * I];
	assert_int_equal(strata_safetensors_read_raw(m->st, t, 120 * I, 20 * I, raw, &err), 0);
	for (int r = 0; r < 20; r++)
		for (int c = 0; c < I; c++) {
			float scale = 120 + r < 128 ? 0.010f : 0.007f; /* rows 0..127: block 0, then block 1 */
			float want = strata_f8e4m3_to_f32(raw[r * I + c]) * scale;
			if (v[r * I + c] != want)
				fail_msg("row %d col %d: %g != %g", 120 + r, c, (double)v[r * I + c], (double)want);
		}
	/* quantized end to end; the FP8 q_proj is stored dequantized as BF16 */
	uint8_t tiers[2] = { 0, 2 };
	struct strata_quantize_config qc = { .out = out, .tiers = tiers, .threads = 2 };
	struct strata_quantize_report rep;
	if (strata_quantize_run(m, &qc, &rep, &err))
		fail_msg("%s", err.msg);
	assert_true(rep.tier[0].cos_sum / (double)rep.tier[0].matrices > 0.9);
	struct strata_store *st;
	assert_int_equal(strata_store_open(out, &st, &err), 0);
	const struct strata_tensor_info *ti = strata_store_find_tensor(st, "model.layers.0.self_attn.q_proj.weight");
	assert_non_null(ti);
	assert_int_equal(ti->fmt, STRATA_FMT_BF16);
	assert_null(strata_store_find_tensor(st, "model.layers.0.self_attn.q_proj.weight_scale_inv"));
	uint16_t *buf = strata_aligned_alloc(4096, ti->ext.bytes);
	assert_int_equal(strata_store_read_extent(st, &ti->ext, buf, false, true, &err), 0);
	float *q = malloc(H * H * sizeof(float));
	assert_int_equal(strata_quantize_read_rows(m, strata_safetensors_find(m->st, "model.layers.0.self_attn.q_proj.weight"), 0, H, q,
					     &err), 0);
	for (int i = 0; i < H * H; i++)
		if (strata_bf16_to_f32(buf[i]) != strata_bf16_to_f32(strata_f32_to_bf16(q[i])))
			fail_msg("q_proj[%d]", i);
	assert_true(q[200 * H + 200] != 0 || q[200 * H + 201] != 0);
	free(q);
	free(buf);
	strata_store_close(st);
	strata_quantize_model_close(m);

	write_fp8_model(test_path("fp8-noscale"), F8_NO_SCALE);
	assert_int_equal(strata_quantize_model_open(test_path("fp8-noscale"), &oo, &m, &err), STRATA_ENOTFOUND);
	assert_non_null(strstr(err.msg, "FP8 tensor 'model.layers.0.mlp.experts.1.up_proj.weight' has no"));
	write_fp8_model(test_path("fp8-badscale"), F8_BAD_SCALE);
	assert_int_equal(strata_quantize_model_open(test_path("fp8-badscale"), &oo, &m, &err), STRATA_ESHAPE);
	assert_non_null(strstr(err.msg, "experts.0.down_proj.weight_scale_inv' must be a float [2, 1]"));
	/* no router: refused, not quantized into a model nothing can route */
	write_fp8_model(test_path("fp8-nogate"), F8_NO_GATE);
	assert_int_equal(strata_quantize_model_open(test_path("fp8-nogate"), &oo, &m, &err), STRATA_ENOTFOUND);
	assert_non_null(strstr(err.msg, "no router gate tensor 'model.layers.0.mlp.gate.weight'"));
}

static void test_counts_other_shape(void **state)
{
	const char *in = test_path("cs-in"), *out = test_path("cs-out");
	write_model(in, D_NONE);
	char buf[4096];
	/* 4 layers x 8 experts against a 1 x 4 model */
	const char *counts = "tests/data/mixtral-expert-counts-tiny.json";
	if (access(counts, R_OK))
		counts = "../../../tests/data/mixtral-expert-counts-tiny.json";
	assert_int_equal(test_run(buf, sizeof(buf), "%s quantize --in %s --out %s --counts %s --no-progress",
				  test_bin("strata"), in, out, counts), 1);
	assert_non_null(strstr(buf, "counts for 4 MoE layers x 8 experts, but the model has 1 MoE layers x 4 experts"));
	assert_int_equal(count_files(out), 0);
	/* a budget through the CLI (plan only: nothing quantized): all cold plus
	 * room for exactly one cold -> warm upgrade goes to the most popular */
	uint64_t b[3];
	struct strata_model_spec s;
	struct strata_quantize_model *m;
	struct strata_error err = { 0 };
	assert_int_equal(strata_quantize_model_open(in, NULL, &m, &err), 0);
	s = m->spec;
	strata_quantize_model_close(m);
	assert_int_equal(strata_tier_expert_bytes(&s, b, &err), 0);
	const char *cf = test_path("cs-counts.csv");
	FILE *f = fopen(cf, "w");
	fputs("0,0,1\n0,1,9\n0,2,3\n0,3,2\n", f);
	fclose(f);
	assert_int_equal(test_run(buf, sizeof(buf), "%s quantize --in %s --plan --counts %s --budget-bytes %llu --json",
				  test_bin("strata"), in, cf, (unsigned long long)(4 * b[2] + (b[1] - b[2]))), 0);
	struct strata_json_doc *doc;
	if (strata_json_parse(buf, strlen(buf), "plan", &doc, &err))
		fail_msg("%s\n%s", err.msg, buf);
	const struct strata_json *tiers = strata_json_get(strata_json_root(doc), "tiers");
	assert_int_equal(strata_json_get(strata_json_at(tiers, 0), "experts")->u, 0);
	assert_int_equal(strata_json_get(strata_json_at(tiers, 1), "experts")->u, 1);
	assert_int_equal(strata_json_get(strata_json_at(tiers, 2), "experts")->u, 3);
	assert_non_null(strstr(strata_json_get(strata_json_root(doc), "tiering")->str, "budget"));
	strata_json_free(doc);
	/* a budget too small */
	assert_int_equal(test_run(buf, sizeof(buf), "%s quantize --in %s --out %s --budget-bytes 4K --no-progress",
				  test_bin("strata"), in, out), 1);
	assert_non_null(strstr(buf, "too small"));
	assert_int_equal(count_files(out), 0);
}

static void test_imatrix_files(void **state)
{
	struct strata_model_spec s;
	spec_of(&s, "custom:layers=2,first_moe=1,experts=4,top_k=2,hidden=256,inter=16");
	s.n_layers = 3;
	struct strata_error err = { 0 };
	/* safetensors: layer-level entries for MoE layer 1 (model layer 2) plus a per-expert override */
	const char *p = test_path("imx.safetensors");
	struct strata_safetensors_writer *w;
	assert_int_equal(strata_safetensors_writer_open(p, &w, &err), 0);
	uint64_t hs[1] = { H }, is[1] = { I };
	assert_int_equal(strata_safetensors_writer_declare(w, "layers.2.gate", STRATA_SAFETENSORS_F32, 1, hs, &err), 0);
	assert_int_equal(strata_safetensors_writer_declare(w, "layers.2.down", STRATA_SAFETENSORS_F32, 1, is, &err), 0);
	assert_int_equal(strata_safetensors_writer_declare(w, "layers.2.experts.3.gate", STRATA_SAFETENSORS_F32, 1, hs, &err), 0);
	float v[H];
	for (int i = 0; i < H; i++)
		v[i] = 2.0f;
	assert_int_equal(strata_safetensors_writer_write_f32(w, v, H, &err), 0);
	assert_int_equal(strata_safetensors_writer_write_f32(w, v, I, &err), 0);
	for (int i = 0; i < H; i++)
		v[i] = 5.0f;
	assert_int_equal(strata_safetensors_writer_write_f32(w, v, H, &err), 0);
	assert_int_equal(strata_safetensors_writer_finish(w, &err), 0);
	struct strata_imatrix *im;
	if (strata_imatrix_load(p, &s, &im, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(strata_imatrix_count(im), 3);
	bool found;
	float out[H];
	assert_int_equal(strata_imatrix_get(im, 1, 0, STRATA_MAT_GATE, out, &found, &err), 0);
	assert_true(found && out[0] == 2.0f);
	assert_int_equal(strata_imatrix_get(im, 1, 3, STRATA_MAT_GATE, out, &found, &err), 0);
	assert_true(found && out[100] == 5.0f);
	assert_int_equal(strata_imatrix_get(im, 1, 3, STRATA_MAT_UP, out, &found, &err), 0);
	assert_false(found);
	assert_int_equal(strata_imatrix_get(im, 0, 0, STRATA_MAT_GATE, out, &found, &err), 0);
	assert_false(found);
	strata_imatrix_free(im);

	/* bad files: each error names the file and the entry */
	static const struct {
		const char *json, *needle;
		int code;
	} bad[] = {
		{ "{\"layers\": {\"0\": {\"gate\": [1]}}}", "layer 0 is not a MoE layer", STRATA_ESHAPE },
		{ "{\"layers\": {\"1\": {\"gate\": [1, 2]}}}", "layers['1'].gate: want an array of 256 numbers", STRATA_ESHAPE },
		{ "{\"layers\": {\"1\": {\"ffn\": []}}}", "unknown matrix 'ffn'", STRATA_ECORRUPT },
		{ "{\"layers\": {\"x\": {}}}", "is not a layer number", STRATA_ECORRUPT },
		{ "{\"layers\": {}}", "holds no entries", STRATA_ECORRUPT },
		{ "{\"imatrix\": 1}", "no \"layers\" object", STRATA_ECORRUPT },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *jp = test_path("imx.json");
		FILE *f = fopen(jp, "w");
		fputs(bad[i].json, f);
		fclose(f);
		int rc = strata_imatrix_load(jp, &s, &im, &err);
		if (rc != bad[i].code || !strstr(err.msg, bad[i].needle) || !strstr(err.msg, "imx.json"))
			fail_msg("case %zu: rc %d msg '%s'", i, rc, err.msg);
	}
	/* a negative value in a JSON array */
	const char *jp = test_path("imx.json");
	FILE *f = fopen(jp, "w");
	fputs("{\"layers\": {\"1\": {\"down\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,-1]}}}", f);
	fclose(f);
	assert_int_equal(strata_imatrix_load(jp, &s, &im, &err), STRATA_ECORRUPT);
	assert_non_null(strstr(err.msg, "layers['1'].down[15] = -1: importance must be finite and >= 0"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_naming),
		cmocka_unit_test(test_spec_inference),
		cmocka_unit_test(test_imatrix_files),
		cmocka_unit_test(test_quantize_bad_model),
		cmocka_unit_test(test_quantize_bad_weights),
		cmocka_unit_test(test_counts_other_shape),
		cmocka_unit_test(test_disk_full),
		cmocka_unit_test(test_fp8_checkpoint),
		cmocka_unit_test(test_quantize_end_to_end),
		cmocka_unit_test(test_threads_row_blocks),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_setup, test_tmpdir_teardown);
}
