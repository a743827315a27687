/* strata trace: import, gen, stats, convert, export, head. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "strata/trace.h"
#include "strata/util.h"
#include "strata/json.h"

static void usage_main(FILE *f)
{
	fprintf(f,
		"usage: strata trace <subcommand> [options]   (strata trace <subcommand> --help)\n\n"
		"  import   routing logs (JSONL/CSV) -> trace (.strace binary, or .jsonl twin)\n"
		"  gen      seeded synthetic trace (Zipf popularity, locality, cross-layer correlation)\n"
		"  stats    popularity skew, reuse distance, cross-layer correlation (table or --json)\n"
		"  convert  binary <-> JSONL\n"
		"  export   libCacheSim's formats (oracleGeneral, csv): the same object stream in both simulators\n"
		"  head     print the header and the first records\n");
}

static int parse_u64(const char *cmd, const char *opt, const char *v, uint64_t *out)
{
	char c[32], o[64];
	snprintf(c, sizeof(c), "trace %s", cmd);
	snprintf(o, sizeof(o), "--%s", opt);
	return strata_cli_u64(c, o, v, 0, UINT64_MAX, 0, out);
}

/* The same, for a 32-bit field: a larger value is refused, not cut to 32 bits. */
static int parse_u32(const char *cmd, const char *opt, const char *v, uint32_t *out)
{
	char c[32], o[64];
	uint64_t x;
	snprintf(c, sizeof(c), "trace %s", cmd);
	snprintf(o, sizeof(o), "--%s", opt);
	if (strata_cli_u64(c, o, v, 0, UINT32_MAX, 0, &x))
		return -1;
	*out = (uint32_t)x;
	return 0;
}

static int parse_dbl(const char *cmd, const char *opt, const char *v, double *out)
{
	char *end;
	double x = strtod(v, &end);
	if (!*v || *end || !isfinite(x)) {
		fprintf(stderr, "strata trace %s: --%s: '%s' is not a number\n", cmd, opt, v);
		return -1;
	}
	*out = x;
	return 0;
}

static int parse_format(const char *cmd, const char *v, int *out)
{
	if (!strcmp(v, "auto"))
		*out = STRATA_TRACE_FMT_AUTO;
	else if (!strcmp(v, "binary") || !strcmp(v, "strace"))
		*out = STRATA_TRACE_FMT_BINARY;
	else if (!strcmp(v, "jsonl"))
		*out = STRATA_TRACE_FMT_JSONL;
	else {
		fprintf(stderr, "strata trace %s: --format: '%s' (auto, binary, jsonl)\n", cmd, v);
		return -1;
	}
	return 0;
}

/* ---- import ---------------------------------------------------------- */

static void usage_import(FILE *f)
{
	fprintf(f,
		"usage: strata trace import [options] -o OUT INPUT...\n\n"
		"Read routing logs and write a trace.  INPUT: .jsonl (one object per row), one JSON document (a list\n"
		"of rows, or of steps mapping a layer id to null or to per-token expert lists), or .csv/.tsv with a\n"
		"header row ('-' reads stdin).  A row is one (token, layer) with a flat expert list, or one token\n"
		"with one expert list per layer.  Columns are found by well-known names or --map.  Sparse MoE\n"
		"layer ids are stored as 0..n-1 and the map printed.  A CSV without a header whose rows are\n"
		"integers is llama-moe-trace's pos,layer,id0,id1,... (negative pos: the prompt).  SGLang's\n"
		"expert-distribution dumps (.pt): convert with python3 -m strata.sglang_dump first.  Errors name\n"
		"file:line:column.\n\n"
		"  -o, --output FILE     trace to write (.jsonl: the text twin, else binary)\n"
		"      --format F        auto | binary | jsonl\n"
		"      --map LIST        role=column,...  roles: request token layer experts weights phase pos pred\n"
		"                        pred_w; role=- ignores a role, COLUMN=- a column; 'expert_*' gathers\n"
		"                        numbered columns; names match ignoring case, spaces and punctuation;\n"
		"                        e.g. token=token_idx,layer=layer,experts=experts,weights=gating_probs,\n"
		"                        request=problem_id\n"
		"      --experts N       experts per layer (default: model's, else largest id + 1)\n"
		"      --model SPEC      check the shape against a model (preset[:k=v,...])\n"
		"      --phase P         phase when no phase column: decode (default) | prefill\n"
		"      --gaps MODE       missing (token, layer) rows: drop (default: tokens lacking a layer are\n"
		"                        dropped), fill (repeat the previous token's routing), error\n"
		"      --layer-base N    subtract from layer numbers (default: the smallest seen)\n"
		"      --order O         request (default: request by request) | input (tokens in order of\n"
		"                        first appearance: keeps a server log's interleaving)\n"
		"      --weights-f32     keep gate weights as f32 (default f16)\n"
		"      --max-warnings N  gap warnings printed (default 20; 0: none, the summary still counts them)\n"
		"  -q, --quiet           no warnings, progress or summary line (errors only)\n"
		STRATA_CLI_NO_PROGRESS_HELP("         "));
}

static int cmd_import(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "output", required_argument, 0, 'o' }, { "format", required_argument, 0, 'f' },
		{ "map", required_argument, 0, 'm' },    { "experts", required_argument, 0, 'e' },
		{ "model", required_argument, 0, 'M' },  { "phase", required_argument, 0, 'p' },
		{ "gaps", required_argument, 0, 'g' },   { "layer-base", required_argument, 0, 'b' },
		{ "weights-f32", no_argument, 0, 'F' },  { "max-warnings", required_argument, 0, 'w' },
		{ "quiet", no_argument, 0, 'q' },        { "help", no_argument, 0, 'h' },
		{ "order", required_argument, 0, 'O' },  { "no-progress", no_argument, 0, 'P' },
		{ 0, 0, 0, 0 },
	};
	struct strata_trace_import_config c;
	strata_trace_import_defaults(&c);
	struct strata_model_spec spec;
	struct strata_error err = { 0 };
	int quiet = 0, ch;
	uint64_t v;
	while ((ch = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
		switch (ch) {
		case 'o': c.output = optarg; break;
		case 'f': if (parse_format("import", optarg, &c.format)) return 2; break;
		case 'm': c.map = optarg; break;
		case 'e':
			if (parse_u64("import", "experts", optarg, &v) || !v || v >= STRATA_TRACE_NO_EXPERT) {
				fprintf(stderr, "strata trace import: --experts must be 1..65534\n");
				return 2;
			}
			c.n_experts = (uint32_t)v;
			break;
		case 'M':
			if (strata_model_spec_parse(optarg, &spec, &err))
				return strata_cli_fail("trace import", &err);
			c.model = &spec;
			break;
		case 'p':
			if (!strcmp(optarg, "decode"))
				c.default_phase = STRATA_PHASE_DECODE;
			else if (!strcmp(optarg, "prefill"))
				c.default_phase = STRATA_PHASE_PREFILL;
			else {
				fprintf(stderr, "strata trace import: --phase: '%s' (decode, prefill)\n", optarg);
				return 2;
			}
			break;
		case 'g':
			if (!strcmp(optarg, "drop"))
				c.gaps = STRATA_GAPS_DROP;
			else if (!strcmp(optarg, "fill"))
				c.gaps = STRATA_GAPS_FILL;
			else if (!strcmp(optarg, "error"))
				c.gaps = STRATA_GAPS_ERROR;
			else {
				fprintf(stderr, "strata trace import: --gaps: '%s' (drop, fill, error)\n", optarg);
				return 2;
			}
			break;
		case 'b':
			if (parse_u64("import", "layer-base", optarg, &v))
				return 2;
			if (v > 65535) {
				fprintf(stderr, "strata trace import: --layer-base: '%s': out of range (0..65535)\n", optarg);
				return 2;
			}
			c.layer_base = (uint32_t)v;
			break;
		case 'F': c.weights_f32 = true; break;
		case 'O':
			if (!strcmp(optarg, "request") || !strcmp(optarg, "input")) {
				c.order_input = !strcmp(optarg, "input");
			} else {
				fprintf(stderr, "strata trace import: --order: '%s' (request, input)\n", optarg);
				return 2;
			}
			break;
		case 'w': if (parse_u64("import", "max-warnings", optarg, &c.max_warnings)) return 2; break;
		case 'q': quiet = 1; break;
		case 'P': strata_cli_no_progress(); break;
		case 'h': usage_import(stdout); return 0;
		default: return strata_cli_bad_option("trace import", opts, argc, argv);
		}
	}
	if (!c.output || optind >= argc) {
		fprintf(stderr, "strata trace import: need -o OUT and at least one input\n");
		usage_import(stderr);
		return 2;
	}
	if (quiet)
		c.max_warnings = 0;
	c.progress = !quiet;
	c.inputs = (const char *const *)argv + optind;
	c.n_inputs = (uint32_t)(argc - optind);
	struct strata_trace_import_result r;
	if (strata_trace_import(&c, &r, &err))
		return strata_cli_fail("trace import", &err);
	if (!quiet)
		printf("%s: %" PRIu64 " rows -> %" PRIu64 " tokens in %" PRIu64 " requests; %" PRIu64
		       " missing (token, layer) rows: %" PRIu64 " tokens dropped, %" PRIu64 " cells filled\n",
		       c.output, r.rows, r.tokens, r.requests, r.gap_cells, r.dropped_tokens, r.filled_cells);
	if (r.n_layer_ids) { /* always: the map is how the trace's layers read */
		printf("%s: sparse MoE layer ids stored as layers 0..%u; layer map (trace layer -> input layer):",
		       c.output, r.n_layer_ids - 1);
		for (uint32_t i = 0; i < r.n_layer_ids; i++)
			printf(" %u:%u", i, r.layer_ids[i]);
		printf("\n");
	}
	return 0;
}

/* ---- gen ------------------------------------------------------------- */

static void usage_gen(FILE *f)
{
	fprintf(f,
		"usage: strata trace gen [options] -o OUT\n\n"
		"Write a seeded synthetic trace.\n"
		"  -o, --output FILE      .jsonl: text twin, else binary\n"
		"      --model SPEC       shape from a preset (e.g. kimi-k3.1:layers=8), or:\n"
		"      --layers N --experts N --top-k N   (default 8 x 64, top-4)\n"
		"      --seed N           (default 1)\n"
		"      --requests N       streams (default 4)\n"
		"      --prompt N         prefill tokens per request (default 64; 0: decode only)\n"
		"      --gen N            decode tokens per request (default 256)\n"
		"      --jitter X         lengths vary by +-X (0..1, default 0)\n"
		"      --alpha X          Zipf skew of per-layer popularity (default 1.0; 0 uniform)\n"
		"      --reuse P          chance an expert repeats from the recent window (default 0.3)\n"
		"      --window N         tokens of the same request looked back (default 8)\n"
		"      --corr P           cross-layer correlation strength (default 0.5)\n"
		"      --interleave       decode tokens of requests round-robin (server batching)\n"
		"      --no-weights       omit gate weights\n"
		"      --pred-depth N     synthetic lookahead predictions for the next N layers (default 0)\n"
		"      --pred-topn N      experts predicted per later layer (default top_k)\n"
		"      --pred-accuracy P  chance a predicted slot is right (default 0.8)\n"
		"      --format F         auto | binary | jsonl\n"
		STRATA_CLI_NO_PROGRESS_HELP("          "));
}

static int cmd_gen(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "output", required_argument, 0, 'o' }, { "model", required_argument, 0, 'M' },
		{ "layers", required_argument, 0, 'L' }, { "experts", required_argument, 0, 'E' },
		{ "top-k", required_argument, 0, 'K' },  { "seed", required_argument, 0, 's' },
		{ "requests", required_argument, 0, 'r' }, { "prompt", required_argument, 0, 'P' },
		{ "gen", required_argument, 0, 'G' },    { "jitter", required_argument, 0, 'j' },
		{ "alpha", required_argument, 0, 'a' },  { "reuse", required_argument, 0, 'u' },
		{ "window", required_argument, 0, 'W' }, { "corr", required_argument, 0, 'c' },
		{ "interleave", no_argument, 0, 'I' },   { "no-weights", no_argument, 0, 'N' },
		{ "pred-depth", required_argument, 0, 'd' }, { "pred-topn", required_argument, 0, 'n' },
		{ "pred-accuracy", required_argument, 0, 'A' }, { "format", required_argument, 0, 'f' },
		{ "help", no_argument, 0, 'h' },         { "no-progress", no_argument, 0, 'Q' },
		{ 0, 0, 0, 0 },
	};
	struct strata_trace_gen_config c;
	strata_trace_gen_defaults(&c);
	c.progress = true;
	struct strata_model_spec spec;
	struct strata_error err = { 0 };
	const char *out = NULL;
	int fmt = STRATA_TRACE_FMT_AUTO, ch, topn_set = 0;
	char model_name[256] = "";
	while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		int bad = 0;
		switch (ch) {
		case 'o': out = optarg; break;
		case 'M':
			if (strata_model_spec_parse(optarg, &spec, &err))
				return strata_cli_fail("trace gen", &err);
			c.n_moe_layers = spec.n_moe_layers;
			c.n_experts = spec.n_experts;
			c.top_k = spec.top_k;
			snprintf(model_name, sizeof(model_name), "%s", spec.name);
			c.model = model_name;
			break;
		case 'L': bad = parse_u32("gen", "layers", optarg, &c.n_moe_layers); break;
		case 'E': bad = parse_u32("gen", "experts", optarg, &c.n_experts); break;
		case 'K': bad = parse_u32("gen", "top-k", optarg, &c.top_k); break;
		case 's': bad = parse_u64("gen", "seed", optarg, &c.seed); break;
		case 'r': bad = parse_u32("gen", "requests", optarg, &c.requests); break;
		case 'P': bad = parse_u32("gen", "prompt", optarg, &c.prompt_len); break;
		case 'G': bad = parse_u32("gen", "gen", optarg, &c.gen_len); break;
		case 'j': bad = parse_dbl("gen", "jitter", optarg, &c.len_jitter); break;
		case 'a': bad = parse_dbl("gen", "alpha", optarg, &c.zipf_alpha); break;
		case 'u': bad = parse_dbl("gen", "reuse", optarg, &c.reuse_prob); break;
		case 'W': bad = parse_u32("gen", "window", optarg, &c.reuse_window); break;
		case 'c': bad = parse_dbl("gen", "corr", optarg, &c.layer_corr); break;
		case 'I': c.interleave = true; break;
		case 'N': c.weights = false; break;
		case 'd': bad = parse_u32("gen", "pred-depth", optarg, &c.pred_depth); break;
		case 'n': bad = parse_u32("gen", "pred-topn", optarg, &c.pred_topn); topn_set = 1; break;
		case 'A': bad = parse_dbl("gen", "pred-accuracy", optarg, &c.pred_accuracy); break;
		case 'f': bad = parse_format("gen", optarg, &fmt); break;
		case 'Q': strata_cli_no_progress(); break;
		case 'h': usage_gen(stdout); return 0;
		default: return strata_cli_bad_option("trace gen", opts, argc, argv);
		}
		if (bad)
			return 2;
	}
	if (!out || optind < argc) {
		fprintf(stderr, "strata trace gen: need -o OUT (and no positional arguments)\n");
		usage_gen(stderr);
		return 2;
	}
	if (c.pred_depth && !topn_set)
		c.pred_topn = c.top_k;
	if (strata_trace_gen(&c, out, fmt, &err))
		return strata_cli_fail("trace gen", &err);
	return 0;
}

/* ---- stats ----------------------------------------------------------- */

static void usage_stats(FILE *f)
{
	fprintf(f,
		"usage: strata trace stats [--json FILE|-] TRACE\n\n"
		"Per-layer popularity skew (top-10%% share, entropy, Gini), reuse distance (tokens since the same\n"
		"expert of the same layer was last used), cross-layer correlation of the top-1 expert (mutual\n"
		"information, most-frequent-follower accuracy) and recorded prediction precision.\n"
		"  --json FILE   write JSON (FILE '-' = stdout instead of the table)\n");
}

static void write_stats_json(FILE *f, const struct strata_trace *t, const struct strata_trace_stats *s)
{
	const struct strata_trace_info *in = strata_trace_info(t);
	fprintf(f, "{\n  \"trace\": ");
	strata_json_write_str(f, strata_trace_path(t));
	fprintf(f, ",\n  \"layers\": %u, \"experts\": %u, \"top_k\": %u,\n", in->n_moe_layers, in->n_experts, in->top_k);
	fprintf(f, "  \"tokens\": %" PRIu64 ", \"requests\": %u, \"prefill\": %" PRIu64 ", \"decode\": %" PRIu64
		   ", \"experts_used\": %u,\n", in->n_tokens, in->n_requests, in->n_prefill, in->n_decode, in->n_used);
	fprintf(f, "  \"mean_top10_share\": %.6f, \"mean_entropy_bits\": %.6f, \"mean_gini\": %.6f,\n",
		s->mean_top10_share, s->mean_entropy, s->mean_gini);
	fprintf(f, "  \"mean_next_top1_predictability\": %.6f, \"mean_next_mi_bits\": %.6f,\n", s->mean_corr_next_top1,
		s->mean_mi_next);
	fprintf(f, "  \"reuse\": {\"first_uses\": %" PRIu64 ", \"reuses\": %" PRIu64
		   ", \"p50\": %.0f, \"p90\": %.0f, \"p99\": %.0f, \"hist_le_pow2\": [", s->first_uses, s->reuses,
		s->reuse_p50, s->reuse_p90, s->reuse_p99);
	for (int b = 0; b < 16; b++)
		fprintf(f, "%s%" PRIu64, b ? ", " : "", s->reuse_hist[b]);
	fprintf(f, "]},\n");
	if (s->pred_precision >= 0)
		fprintf(f, "  \"pred_precision\": %.6f,\n", s->pred_precision);
	else
		fprintf(f, "  \"pred_precision\": null,\n");
	fprintf(f, "  \"per_layer\": [\n");
	for (uint32_t l = 0; l < s->n_layers; l++) {
		const struct strata_trace_layer_stats *ls = &s->layer[l];
		fprintf(f, "    {\"layer\": %u, \"used\": %u, \"top10_share\": %.6f, \"entropy_bits\": %.6f, "
			   "\"gini\": %.6f, \"next_top1_predictability\": %.6f, \"next_mi_bits\": %.6f}%s\n",
			l, ls->used, ls->top10_share, ls->entropy, ls->gini, ls->corr_next_top1, ls->mi_next,
			l + 1 < s->n_layers ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
}

static int cmd_stats(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", required_argument, 0, 'j' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	const char *json = NULL;
	int ch;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'j': json = optarg; break;
		case 'h': usage_stats(stdout); return 0;
		default: return strata_cli_bad_option("trace stats", opts, argc, argv);
		}
	}
	if (optind + 1 != argc) {
		usage_stats(stderr);
		return 2;
	}
	struct strata_error err = { 0 };
	struct strata_trace *t;
	if (strata_trace_open(argv[optind], &t, &err))
		return strata_cli_fail("trace stats", &err);
	struct strata_trace_stats s;
	if (strata_trace_stats_compute(t, &s, &err)) {
		strata_trace_close(t);
		return strata_cli_fail("trace stats", &err);
	}
	int rc = 0;
	if (json) {
		struct strata_outfile o;
		if (!(rc = strata_outfile_open(&o, json, 0, &err))) {
			write_stats_json(o.f, t, &s);
			rc = strata_outfile_commit(&o, &err);
		}
		if (rc)
			rc = strata_cli_fail("trace stats", &err);
	}
	if (!json || strcmp(json, "-")) {
		const struct strata_trace_info *in = strata_trace_info(t);
		double Hmax = in->n_experts > 1 ? log2((double)in->n_experts) : 0;
		printf("%s: %" PRIu64 " tokens (%" PRIu64 " prefill, %" PRIu64 " decode), %u requests, %u MoE layers x %u "
		       "experts, top-%u, %u/%u experts used\n", argv[optind], in->n_tokens, in->n_prefill, in->n_decode,
		       in->n_requests, in->n_moe_layers, in->n_experts, in->top_k, in->n_used,
		       in->n_moe_layers * in->n_experts);
		printf("%5s %6s %9s %8s %6s %10s %8s\n", "layer", "used", "top10%", "entropy", "gini", "next-top1", "MI");
		for (uint32_t l = 0; l < s.n_layers; l++) {
			const struct strata_trace_layer_stats *ls = &s.layer[l];
			printf("%5u %6u %8.1f%% %8.3f %6.3f", l, ls->used, 100 * ls->top10_share, ls->entropy, ls->gini);
			if (ls->corr_next_top1 >= 0)
				printf(" %9.1f%% %8.3f\n", 100 * ls->corr_next_top1, ls->mi_next);
			else
				printf(" %10s %8s\n", "-", "-");
		}
		printf("%5s %6s %8.1f%% %8.3f %6.3f", "mean", "", 100 * s.mean_top10_share, s.mean_entropy, s.mean_gini);
		if (s.mean_corr_next_top1 >= 0)
			printf(" %9.1f%% %8.3f\n", 100 * s.mean_corr_next_top1, s.mean_mi_next);
		else
			printf("\n");
		printf("entropy of a uniform layer: %.3f bits\n", Hmax);
		printf("reuse distance (tokens since the same layer's expert was used): p50 %.0f, p90 %.0f, p99 %.0f; "
		       "%" PRIu64 " reuses, %" PRIu64 " first uses\n", s.reuse_p50, s.reuse_p90, s.reuse_p99, s.reuses,
		       s.first_uses);
		printf("  <=1 %" PRIu64 "  2 %" PRIu64 "  3-4 %" PRIu64 "  5-8 %" PRIu64 "  9-16 %" PRIu64 "  17-32 %" PRIu64
		       "  33-64 %" PRIu64 "  65-128 %" PRIu64 "  >128 %" PRIu64 "\n", s.reuse_hist[0], s.reuse_hist[1],
		       s.reuse_hist[2], s.reuse_hist[3], s.reuse_hist[4], s.reuse_hist[5], s.reuse_hist[6], s.reuse_hist[7],
		       s.reuse_hist[8] + s.reuse_hist[9] + s.reuse_hist[10] + s.reuse_hist[11] + s.reuse_hist[12] +
			       s.reuse_hist[13] + s.reuse_hist[14] + s.reuse_hist[15]);
		if (s.pred_precision >= 0)
			printf("recorded predictions: %.1f%% of predicted slots were routed\n", 100 * s.pred_precision);
	}
	strata_trace_stats_free(&s);
	strata_trace_close(t);
	return rc;
}

/* ---- convert / head -------------------------------------------------- */

static int cmd_convert(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "format", required_argument, 0, 'f' }, { "pred-depth", required_argument, 0, 'd' },
		{ "pred-accuracy", required_argument, 0, 'a' }, { "pred-seed", required_argument, 0, 's' },
		{ "help", no_argument, 0, 'h' }, { "no-progress", no_argument, 0, 'P' }, { 0, 0, 0, 0 },
	};
	int fmt = STRATA_TRACE_FMT_AUTO, ch;
	struct strata_trace_pred_config pc = { .depth = 0, .accuracy = 0.8, .seed = 1 };
	char *end;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'f': if (parse_format("convert", optarg, &fmt)) return 2; break;
		case 'd':
			pc.depth = (uint32_t)strtoul(optarg, &end, 10);
			if (*end || !pc.depth || pc.depth > STRATA_TRACE_MAX_DEPTH) {
				fprintf(stderr, "strata trace convert: --pred-depth %s: 1..%d\n", optarg,
					STRATA_TRACE_MAX_DEPTH);
				return 2;
			}
			break;
		case 'a':
			pc.accuracy = strtod(optarg, &end);
			if (*end || !(pc.accuracy >= 0 && pc.accuracy <= 1)) {
				fprintf(stderr, "strata trace convert: --pred-accuracy %s: a probability, 0..1\n", optarg);
				return 2;
			}
			break;
		case 's':
			pc.seed = strtoull(optarg, &end, 10);
			if (*end) {
				fprintf(stderr, "strata trace convert: --pred-seed %s: an integer\n", optarg);
				return 2;
			}
			break;
		case 'P': strata_cli_no_progress(); break;
		case 'h':
			printf("usage: strata trace convert [--format auto|binary|jsonl] [--pred-depth N [--pred-accuracy P]\n"
			       "                            [--pred-seed S]] [--no-progress] IN OUT\n"
			       "Copy a trace between the binary form and the JSONL twin (by OUT's name: .jsonl -> text).\n"
			       "  --pred-depth N      replace the lookahead predictions with ones drawn from the trace's own\n"
			       "                      routing, N layers ahead (for logs that record none)\n"
			       "  --pred-accuracy P   each predicted expert is the routed one with probability P, else a\n"
			       "                      wrong expert of that layer (default 0.8)\n"
			       "  --pred-seed S       seed of those draws (default 1)\n"
			       STRATA_CLI_NO_PROGRESS_HELP(""));
			return 0;
		default: return strata_cli_bad_option("trace convert", opts, argc, argv);
		}
	}
	if (optind + 2 != argc) {
		fprintf(stderr, "usage: strata trace convert [--format F] [--pred-depth N ...] IN OUT\n");
		return 2;
	}
	struct strata_error err = { 0 };
	struct strata_trace *t;
	if (strata_trace_open(argv[optind], &t, &err))
		return strata_cli_fail("trace convert", &err);
	int rc = strata_trace_convert_pred(t, argv[optind + 1], fmt, pc.depth ? &pc : NULL, true, &err);
	strata_trace_close(t);
	return rc ? strata_cli_fail("trace convert", &err) : 0;
}

static void usage_export(FILE *f)
{
	fprintf(f,
		"usage: strata trace export --format oracleGeneral|csv [--obj-size N] TRACE OUT\n\n"
		"Write the trace as libCacheSim reads it: one request per (token, layer, routed expert), object id\n"
		"layer * n_experts + expert, time = token index, every object N bytes (default 1).\n"
		"  oracleGeneral  binary 24-byte records with each request's next access (Belady reads it):\n"
		"                 cachesim OUT oracleGeneral lru 96 --ignore-obj-size 1   (OUT must contain \"oracleGeneral\")\n"
		"  csv            time,obj_id,obj_size with a header line:\n"
		"                 cachesim OUT csv lru 96 -t \"time-col=1,obj-id-col=2,obj-size-col=3,has-header=true,obj-id-is-num=true\"\n"
		STRATA_CLI_NO_PROGRESS_HELP("  "));
}

static int cmd_export(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "format", required_argument, 0, 'f' }, { "obj-size", required_argument, 0, 's' },
		{ "help", no_argument, 0, 'h' }, { "no-progress", no_argument, 0, 'P' }, { 0, 0, 0, 0 },
	};
	int fmt = 0, ch;
	uint64_t size = 1;
	while ((ch = getopt_long(argc, argv, "f:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			if (!strcmp(optarg, "oracleGeneral") || !strcmp(optarg, "oraclegeneral"))
				fmt = STRATA_EXPORT_ORACLE_GENERAL;
			else if (!strcmp(optarg, "csv"))
				fmt = STRATA_EXPORT_CSV;
			else {
				fprintf(stderr, "strata trace export: --format: '%s' (oracleGeneral, csv)\n", optarg);
				return 2;
			}
			break;
		case 's':
			if (parse_u64("export", "obj-size", optarg, &size))
				return 2;
			if (!size || size > UINT32_MAX) {
				fprintf(stderr, "strata trace export: --obj-size: %s is not in 1..%u\n", optarg, UINT32_MAX);
				return 2;
			}
			break;
		case 'P': strata_cli_no_progress(); break;
		case 'h': usage_export(stdout); return 0;
		default: return strata_cli_bad_option("trace export", opts, argc, argv);
		}
	}
	if (!fmt || optind + 2 != argc) {
		fprintf(stderr, "strata trace export: %s\n", !fmt ? "--format is required" : "need TRACE and OUT");
		usage_export(stderr);
		return 2;
	}
	struct strata_error err = { 0 };
	struct strata_trace *t;
	if (strata_trace_open(argv[optind], &t, &err))
		return strata_cli_fail("trace export", &err);
	int rc = strata_trace_export(t, argv[optind + 1], fmt, (uint32_t)size, true, &err);
	strata_trace_close(t);
	return rc ? strata_cli_fail("trace export", &err) : 0;
}

static int cmd_head(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "n", required_argument, 0, 'n' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	uint64_t n = 5;
	int ch;
	while ((ch = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'n': if (parse_u64("head", "n", optarg, &n)) return 2; break;
		case 'h':
			printf("usage: strata trace head [-n N] TRACE\nPrint the header and the first N records (default 5).\n");
			return 0;
		default: return strata_cli_bad_option("trace head", opts, argc, argv);
		}
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "usage: strata trace head [-n N] TRACE\n");
		return 2;
	}
	struct strata_error err = { 0 };
	struct strata_trace *t;
	if (strata_trace_open(argv[optind], &t, &err))
		return strata_cli_fail("trace head", &err);
	const struct strata_trace_info *in = strata_trace_info(t);
	printf("trace %s\n  model \"%s\": %u MoE layers, %u experts, top-%u\n  tokens %" PRIu64 " (prefill %" PRIu64
	       ", decode %" PRIu64 "), requests %u, max position %u, experts used %u\n  weights %s, predictions %s"
	       " (depth %u, topn %u), record %u bytes, xxh64 %016" PRIx64 "\n",
	       argv[optind], in->model, in->n_moe_layers, in->n_experts, in->top_k, in->n_tokens, in->n_prefill,
	       in->n_decode, in->n_requests, in->max_pos, in->n_used,
	       !(in->flags & STRATA_TRACE_F_WEIGHTS) ? "no" : (in->flags & STRATA_TRACE_F_WEIGHTS_F32) ? "f32" : "f16",
	       (in->flags & STRATA_TRACE_F_PRED) ? "yes" : "no", in->pred_depth, in->pred_topn, in->record_bytes,
	       in->xxh64);
	float w[STRATA_TRACE_MAX_TOPK];
	for (uint64_t i = 0; i < n && i < in->n_tokens; i++) {
		printf("  [%" PRIu64 "] req %u %s pos %u:", i, strata_trace_req(t, i),
		       strata_trace_phase_name(strata_trace_phase(t, i)), strata_trace_pos(t, i));
		for (uint32_t l = 0; l < in->n_moe_layers && l < 8; l++) {
			const uint16_t *e = strata_trace_experts(t, i, l);
			strata_trace_weights(t, i, l, w);
			printf(" L%u[", l);
			for (uint32_t j = 0; j < in->top_k && j < 8; j++) {
				if (in->flags & STRATA_TRACE_F_WEIGHTS)
					printf(j ? " %u:%.2f" : "%u:%.2f", e[j], (double)w[j]);
				else
					printf(j ? " %u" : "%u", e[j]);
			}
			printf("%s]", in->top_k > 8 ? " ..." : "");
		}
		printf("%s\n", in->n_moe_layers > 8 ? " ..." : "");
	}
	strata_trace_close(t);
	return 0;
}

int strata_cmd_trace(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage_main(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	const char *sub = argv[1];
	strata_install_sigint(); /* writers stop on SIGINT/SIGTERM/SIGHUP and remove their temp files */
	char name[64]; /* "strata trace import" in getopt's messages */
	snprintf(name, sizeof(name), "strata trace %s", sub);
	argv[1] = name;
	optind = 1;
	if (!strcmp(sub, "import"))
		return cmd_import(argc - 1, argv + 1);
	if (!strcmp(sub, "gen"))
		return cmd_gen(argc - 1, argv + 1);
	if (!strcmp(sub, "stats"))
		return cmd_stats(argc - 1, argv + 1);
	if (!strcmp(sub, "convert"))
		return cmd_convert(argc - 1, argv + 1);
	if (!strcmp(sub, "head"))
		return cmd_head(argc - 1, argv + 1);
	if (!strcmp(sub, "export"))
		return cmd_export(argc - 1, argv + 1);
	static const char *const subs[] = { "import", "gen", "stats", "convert", "head", "export" };
	const char *hint = strata_closest_name(sub, strlen(sub), subs, sizeof(subs) / sizeof(subs[0]));
	fprintf(stderr, "strata trace: unknown subcommand '%s'", sub);
	if (hint)
		fprintf(stderr, "; did you mean '%s'?", hint);
	fprintf(stderr, "\n(strata trace --help lists the subcommands)\n");
	return 2;
}
