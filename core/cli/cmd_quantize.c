/*
 * strata quantize: a Hugging Face safetensors MoE model -> tiered Strata
 * shards, with a model-card summary (text or JSON).  Also writes small test
 * models (--make-test-model) for demos and tests.  The work is in
 * core/quantize.c, core/tier_assign.c and core/imatrix.c.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "quant.h"
#include "strata/quantize.h"
#include "strata/test_model.h"
#include "strata/tier_assign.h"
#include "strata/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: strata quantize --in PATH --out DIR [options]\n"
		"       strata quantize --make-test-model DIR --spec SPEC [--naming N] [--dtype D] [--files N] [--seed N]\n"
		"\n"
		"Quantize the routed experts of a safetensors MoE model into the hot / warm / cold\n"
		"tier formats and write Strata shards; every other tensor is stored BF16 (1-D: F32).\n"
		"Prints a model card: experts, format, bpw, GB/GiB and mean/min matrix cosine per\n"
		"tier, and the reduction against BF16.\n"
		"\n"
		"input\n"
		"  --in PATH           a .safetensors file, a *.index.json, or a directory holding\n"
		"                      model.safetensors.index.json / model.safetensors / *.safetensors\n"
		"  --naming N          auto (default), mixtral, deepseek-v3, qwen3-moe\n"
		"  --top-k N           experts per token (default: config.json num_experts_per_tok,\n"
		"                      else the scheme's default)\n"
		"  --name NAME         model name in the shards (default: the input's base name)\n"
		"tiering (per MoE layer: hottest experts hot, next warm, rest cold)\n"
		"  --counts FILE       expert popularity: Fiddler-style JSON {\"expert_popularity\":\n"
		"                      [[layer][expert]]} or CSV layer,expert,count (MoE-layer indexes)\n"
		"  --trace FILE        expert popularity counted from a Strata trace (.strace/.jsonl)\n"
		"                      (neither: every expert ties, so lower expert ids are hotter)\n"
		"  --tiers H,W,C       each layer's experts per tier, percent (default 15,30,55) or\n"
		"                      fractions (0.15,0.30,0.55); --split is the same option\n"
		"  --formats H,W,C     the hot, warm, cold tiers' formats: trellis hot, warm, cold\n"
		"                      (default) or the fast-decode q4, q3 (e.g. q4,warm,cold;\n"
		"                      kernels/FORMATS.md)\n"
		"  --budget-bytes SIZE instead of --tiers: fit routed-expert extents in SIZE (e.g. 40G);\n"
		"                      upgrade cold->warm, then warm->hot, most popular first\n"
		"  --budget-mode M     layer (default: SIZE / MoE layers each, same counts per layer)\n"
		"                      or global (one pool ranked by each expert's share of its layer)\n"
		"quantization\n"
		"  --imatrix FILE      importance (mean x^2 per input column): safetensors with\n"
		"                      layers.{L}.{gate,up,down} [and layers.{L}.experts.{E}.*], or JSON\n"
		"                      {\"layers\": {\"L\": {\"gate\": [...], \"up\": [...], \"down\": [...]}}}\n"
		"  --threads N         worker threads (default: online CPUs); each holds one matrix\n"
		"  --shard-bytes SIZE  target shard size (default 4 GiB)\n"
		"  --lowbit-copies     beside each hot/warm expert, a cold-format copy of the same\n"
		"                      weights (read instead on a miss under `--on-miss lowbit`)\n"
		"output\n"
		"  --force             replace a model already in --out (built beside it, swapped in\n"
		"                      whole at the end: the old one stays usable until then)\n"
		"  --out DIR           shard directory (created); on any error nothing valid-looking\n"
		"                      is left there\n"
		"  --json              print the card as JSON\n"
		"  --plan              print the card's sizes from the tiering alone: no quantization,\n"
		"                      nothing written (--out optional; cosines shown as -)\n"
		STRATA_CLI_NO_PROGRESS_HELP("       ")
		"test models\n"
		"  --make-test-model DIR  write a small random model in Hugging Face layout\n"
		"  --spec SPEC         its shape: a preset or custom:layers=..,experts=..,hidden=..,inter=..\n"
		"  --dtype D           bf16 (default), f16, f32\n"
		"  --files N           safetensors files (N > 1 adds model.safetensors.index.json)\n"
		"  --seed N            weights seed (default 1)\n");
}

/* s as a JSON string body (quotes, backslashes and control bytes escaped) */
static const char *jstr(const char *s, char *buf, size_t len)
{
	size_t o = 0;
	for (; *s && o + 7 < len; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			o += (size_t)snprintf(buf + o, len - o, "\\%c", c);
		else if (c < 0x20)
			o += (size_t)snprintf(buf + o, len - o, "\\u%04x", c);
		else
			buf[o++] = (char)c;
	}
	buf[o] = '\0';
	return buf;
}

static void print_card(const struct strata_quantize_report *r, const char *in, const char *out,
		       const char *tiering, int json)
{
	const struct strata_model_spec *s = &r->spec;
	uint64_t n_total = strata_model_total_experts(s), tb = 0, tp = 0, tpar = 0, tm = 0;
	double tcos = 0, trmse = 0, tmin = 2;
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		tb += r->tier[t].bytes;
		tp += r->tier[t].payload;
		tpar += r->tier[t].params;
		tm += r->tier[t].matrices;
		tcos += r->tier[t].cos_sum;
		trmse += r->tier[t].rmse_sum;
		if (r->tier[t].matrices && r->tier[t].cos_min < tmin)
			tmin = r->tier[t].cos_min;
	}
	double red_routed = strata_card_reduction(tpar, tb);
	double red_all = r->out_bytes ? (double)r->bf16_bytes / (double)r->out_bytes : 0;
	static const char *names[STRATA_TIER_COUNT] = { "hot", "warm", "cold" };
	if (json) {
		char spec[256], j1[128], j2[2048], j3[2048], j4[1024];
		strata_model_spec_format(s, spec, sizeof(spec));
		printf("{\"model\":\"%s\",\"in\":\"%s\",\"out\":\"%s\",\"naming\":\"%s\",\"tiering\":\"%s\",\"spec\":\"%s\","
		       "\"layers\":%u,\"first_moe_layer\":%u,\"moe_layers\":%u,\"experts_per_layer\":%u,\"top_k\":%u,"
		       "\"hidden\":%u,\"inter\":%u,\"shared\":%u,\"shared_inter\":%u,\"experts\":%" PRIu64 ",\"tiers\":[",
		       jstr(s->name, j1, sizeof(j1)), jstr(in, j2, sizeof(j2)), jstr(out, j3, sizeof(j3)), r->naming,
		       jstr(tiering, j4, sizeof(j4)), spec, s->n_layers, s->first_moe_layer, s->n_moe_layers,
		       s->n_experts, s->top_k, s->hidden, s->inter, s->n_shared, s->shared_inter, n_total);
		for (int t = 0; t < STRATA_TIER_COUNT; t++) {
			const struct strata_quantize_tier_stats *x = &r->tier[t];
			double m = x->matrices ? (double)x->matrices : 1;
			printf("%s{\"tier\":\"%s\",\"where\":\"%s\",\"experts\":%" PRIu64 ",\"format\":\"%s\",\"bpw\":%.4f,"
			       "\"params\":%" PRIu64 ",\"payload_bytes\":%" PRIu64 ",\"extent_bytes\":%" PRIu64
			       ",\"gb\":%.4f,\"gib\":%.4f,\"matrices\":%" PRIu64 ",\"cosine_mean\":%.6f,\"cosine_min\":%.6f,"
			       "\"rel_rmse_mean\":%.6f}",
			       t ? "," : "", names[t], strata_tier_name(t), x->experts, strata_fmt_traits(x->fmt)->name,
			       strata_card_bpw(x->payload, x->params), x->params, x->payload, x->bytes, (double)x->bytes / 1e9, (double)x->bytes / (1u << 30),
			       x->matrices, x->cos_sum / m, x->cos_min, x->rmse_sum / m);
		}
		printf("],\"routed\":{\"experts\":%" PRIu64 ",\"params\":%" PRIu64 ",\"payload_bytes\":%" PRIu64
		       ",\"extent_bytes\":%" PRIu64 ",\"gb\":%.4f,\"gib\":%.4f,\"bpw\":%.4f,\"cosine_mean\":%.6f,"
		       "\"cosine_min\":%.6f,\"rel_rmse_mean\":%.6f,\"bf16_bytes\":%" PRIu64 ",\"reduction_vs_bf16\":%.4f},",
		       n_total, tpar, tp, tb, (double)tb / 1e9, (double)tb / (1u << 30),
		       strata_card_bpw(tp, tpar), tm ? tcos / (double)tm : 0, tm ? tmin : 0,
		       tm ? trmse / (double)tm : 0, r->routed_bf16_bytes, red_routed);
		printf("\"nonrouted\":{\"tensors\":%" PRIu64 ",\"params\":%" PRIu64 ",\"bytes\":%" PRIu64 "},"
		       "\"total\":{\"bytes\":%" PRIu64 ",\"gb\":%.4f,\"gib\":%.4f,\"bf16_bytes\":%" PRIu64
		       ",\"reduction_vs_bf16\":%.4f},\"input_bytes\":%" PRIu64 ",\"imatrix_matrices\":%u,"
		       "\"skipped_tensors\":%u,\"buffer_bytes\":%" PRIu64 ",\"seconds\":%.3f,",
		       r->tensors, r->tensor_params, r->tensor_bytes, r->out_bytes, (double)r->out_bytes / 1e9,
		       (double)r->out_bytes / (1u << 30), r->bf16_bytes, red_all, r->in_bytes, r->imatrix_used, r->skipped,
		       r->buffer_bytes, r->seconds);
		const struct strata_quantize_times *q = &r->time;
		printf("\"input_mb_per_s\":%.2f,\"threads\":%u,\"busy_share\":%.4f,\"time\":{\"open\":%.4f,\"work\":%.4f,"
		       "\"finish\":%.4f,\"cpu\":%.4f,\"read\":%.4f,\"encode\":%.4f,\"write\":%.4f,\"tensors\":%.4f,"
		       "\"wait\":%.4f,\"tail\":%.4f}}\n",
		       r->seconds > 0 ? (double)r->in_bytes / r->seconds / 1e6 : 0.0, r->threads, q->busy_share, q->open,
		       q->work, q->finish, q->cpu, q->read, q->encode, q->write, q->tensors, q->wait, q->tail);
		return;
	}
	char a[32], b[32];
	printf("model    %s  (%s naming, from %s)\n", s->name, r->naming, in);
	printf("shape    %u layers (%u MoE from layer %u), %u routed experts/layer, top-%u, hidden %u, inter %u", s->n_layers,
	       s->n_moe_layers, s->first_moe_layer, s->n_experts, s->top_k, s->hidden, s->inter);
	if (s->n_shared)
		printf(", %u shared (inter %u)", s->n_shared, s->shared_inter);
	printf("\ntiering  %s\n\n", tiering);
	printf("%-5s %-5s %8s  %-6s %7s %10s %10s %9s %9s %9s\n", "tier", "where", "experts", "format", "bpw", "GB", "GiB",
	       "cos mean", "cos min", "rel RMSE");
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		const struct strata_quantize_tier_stats *x = &r->tier[t];
		double m = x->matrices ? (double)x->matrices : 1;
		if (x->matrices && x->experts)
			printf("%-5s %-5s %8" PRIu64 "  %-6s %7.4f %10.3f %10.3f %9.5f %9.5f %9.5f\n", names[t],
			       strata_tier_name(t), x->experts, strata_fmt_traits(x->fmt)->name,
			       strata_card_bpw(x->payload, x->params), (double)x->bytes / 1e9, (double)x->bytes / (1u << 30), x->cos_sum / m, x->cos_min,
			       x->rmse_sum / m);
		else
			printf("%-5s %-5s %8" PRIu64 "  %-6s %7.4f %10.3f %10.3f %9s %9s %9s\n", names[t], strata_tier_name(t),
			       x->experts, strata_fmt_traits(x->fmt)->name, strata_card_bpw(x->payload, x->params),
			       (double)x->bytes / 1e9,
			       (double)x->bytes / (1u << 30), "-", "-", "-");
	}
	if (tm)
		printf("%-5s %-5s %8" PRIu64 "  %-6s %7.4f %10.3f %10.3f %9.5f %9.5f %9.5f\n", "total", "", n_total, "",
		       strata_card_bpw(tp, tpar), (double)tb / 1e9, (double)tb / (1u << 30),
		       tcos / (double)tm, tmin, trmse / (double)tm);
	else
		printf("%-5s %-5s %8" PRIu64 "  %-6s %7.4f %10.3f %10.3f %9s %9s %9s\n", "total", "", n_total, "",
		       strata_card_bpw(tp, tpar), (double)tb / 1e9, (double)tb / (1u << 30), "-", "-", "-");
	printf("\nrouted experts: %.3f GB at BF16 -> %.3f GB, %.2fx smaller than BF16\n", (double)r->routed_bf16_bytes / 1e9,
	       (double)tb / 1e9, red_routed);
	printf("non-routed:     %" PRIu64 " tensors, %" PRIu64 " params, %s stored BF16 (1-D F32)\n", r->tensors,
	       r->tensor_params, strata_fmt_bytes(r->tensor_bytes, a, sizeof(a)));
	printf("whole model:    %.3f GB at BF16 -> %.3f GB, %.2fx smaller than BF16\n", (double)r->bf16_bytes / 1e9,
	       (double)r->out_bytes / 1e9, red_all);
	if (r->imatrix_used)
		printf("imatrix:        %u of %" PRIu64 " matrices weighted\n", r->imatrix_used, tm);
	if (r->skipped)
		printf("skipped:        %u tensors of layers past config.json num_hidden_layers (MTP)\n", r->skipped);
	if (r->seconds > 0)
		printf("time:           %.2f s, %.1f MB/s of input; working buffers %s\n", r->seconds,
	       r->seconds > 0 ? (double)r->in_bytes / r->seconds / 1e6 : 0.0,
	       strata_fmt_bytes(r->buffer_bytes, b, sizeof(b)));
	if (r->seconds > 0 && r->threads) {
		/* shares of threads x wall time */
		const struct strata_quantize_times *q = &r->time;
		double all = r->seconds * r->threads / 100;
		printf("threads:        %u, cores busy %.1f%% (worker CPU time / threads x time); of the threads' time: "
		       "encode %.1f%%, read %.1f%%, write %.1f%%, non-routed %.1f%%, waits %.1f%%, idle at the end %.1f%%; "
		       "set-up %.2f s, finish %.2f s\n",
		       r->threads, 100 * q->busy_share, q->encode / all, q->read / all, q->write / all, q->tensors / all,
		       q->wait / all, q->tail / all, q->open, q->finish);
	}
	printf("%s%s\n", r->seconds > 0 ? "shards in " : "", out);
}

static int make_test_model(const char *dir, const char *spec_text, const char *naming, const char *dtype_s,
			   unsigned files, uint64_t seed)
{
	struct strata_error err = { 0 };
	struct strata_model_spec s;
	if (!spec_text) {
		fprintf(stderr, "strata quantize: --make-test-model needs --spec\n");
		return 2;
	}
	if (strata_model_spec_parse(spec_text, &s, &err))
		return strata_cli_fail("quantize", &err);
	int dtype = !strcmp(dtype_s, "bf16") ? STRATA_SAFETENSORS_BF16 : !strcmp(dtype_s, "f16") ? STRATA_SAFETENSORS_F16 :
		    !strcmp(dtype_s, "f32") ? STRATA_SAFETENSORS_F32 : -1;
	if (dtype < 0) {
		fprintf(stderr, "strata quantize: --dtype must be bf16, f16 or f32\n");
		return 2;
	}
	if (strata_test_model_write(dir, naming && strcmp(naming, "auto") ? naming : "mixtral", &s, dtype, files, seed,
				      &err))
		return strata_cli_fail("quantize", &err);
	printf("wrote a %s-named test model (%s) to %s\n", naming && strcmp(naming, "auto") ? naming : "mixtral",
	       spec_text, dir);
	return 0;
}

int strata_cmd_quantize(int argc, char **argv)
{
	enum {
		O_IN = 256, O_OUT, O_NAMING, O_TOPK, O_NAME, O_COUNTS, O_TRACE, O_SPLIT, O_BUDGET, O_BMODE, O_IMATRIX,
		O_THREADS, O_SHARD, O_JSON, O_NOPROG, O_MAKE, O_SPEC, O_DTYPE, O_FILES, O_SEED, O_PLAN, O_FORCE, O_FMTS,
		O_COPIES,
	};
	static const struct option opts[] = {
		{ "in", required_argument, 0, O_IN },          { "out", required_argument, 0, O_OUT },
		{ "naming", required_argument, 0, O_NAMING },  { "top-k", required_argument, 0, O_TOPK },
		{ "name", required_argument, 0, O_NAME },      { "counts", required_argument, 0, O_COUNTS },
		{ "trace", required_argument, 0, O_TRACE },    { "split", required_argument, 0, O_SPLIT },
		{ "tiers", required_argument, 0, O_SPLIT },
		{ "budget-bytes", required_argument, 0, O_BUDGET }, { "budget-mode", required_argument, 0, O_BMODE },
		{ "imatrix", required_argument, 0, O_IMATRIX }, { "threads", required_argument, 0, O_THREADS },
		{ "shard-bytes", required_argument, 0, O_SHARD }, { "json", no_argument, 0, O_JSON },
		{ "no-progress", no_argument, 0, O_NOPROG },  { "make-test-model", required_argument, 0, O_MAKE },
		{ "spec", required_argument, 0, O_SPEC },      { "dtype", required_argument, 0, O_DTYPE },
		{ "files", required_argument, 0, O_FILES },    { "seed", required_argument, 0, O_SEED },
		{ "plan", no_argument, 0, O_PLAN },            { "help", no_argument, 0, 'h' },
		{ "force", no_argument, 0, O_FORCE },          { "formats", required_argument, 0, O_FMTS },
		{ "lowbit-copies", no_argument, 0, O_COPIES },
		{ 0, 0, 0, 0 },
	};
	const char *in = NULL, *out = NULL, *naming = "auto", *name = NULL, *counts = NULL, *trace = NULL;
	const char *split_s = NULL, *budget_s = NULL, *bmode = "layer", *imx_path = NULL, *make = NULL;
	const char *spec_text = NULL, *dtype_s = "bf16";
	unsigned top_k = 0, threads = 0, files = 1;
	uint64_t shard_bytes = 0, seed = 1, budget = 0;
	int json = 0, progress = 1, plan = 0, force = 0, copies = 0;
	uint8_t tier_fmt[STRATA_TIER_COUNT] = STRATA_TIER_FMTS_DEFAULT;
	const char *fmts_s = NULL;
	struct strata_error err = { 0 };
	int c;
	optind = 1;
	opterr = 0;
	int li = -1;
	for (; (c = getopt_long(argc, argv, "h", opts, &li)) != -1; li = -1) {
		char *end = NULL;
		uint64_t v = 0;
		const char *on = strata_cli_optname(opts, li, c);
		switch (c) {
		case 'h': usage(stdout); return 0;
		case O_IN: in = optarg; break;
		case O_OUT: out = optarg; break;
		case O_NAMING: naming = optarg; break;
		case O_TOPK:
			if (strata_cli_u64("quantize", on, optarg, 1, 65535, 0, &v))
				return 2;
			top_k = (unsigned)v;
			break;
		case O_NAME: name = optarg; break;
		case O_COUNTS: counts = optarg; break;
		case O_TRACE: trace = optarg; break;
		case O_SPLIT: split_s = optarg; break;
		case O_BUDGET: budget_s = optarg; break;
		case O_BMODE: bmode = optarg; break;
		case O_IMATRIX: imx_path = optarg; break;
		case O_THREADS:
			if (strata_cli_u64("quantize", on, optarg, 0, 1024, 0, &v))
				return 2;
			threads = (unsigned)v;
			break;
		case O_SHARD:
			if (strata_parse_size(optarg, &shard_bytes, &err)) {
				fprintf(stderr, "strata quantize: --shard-size: %s\n", err.msg);
				return 2;
			}
			break;
		case O_JSON: json = 1; break;
		case O_NOPROG: progress = 0; strata_cli_no_progress(); break;
		case O_PLAN: plan = 1; break;
		case O_MAKE: make = optarg; break;
		case O_SPEC: spec_text = optarg; break;
		case O_DTYPE: dtype_s = optarg; break;
		case O_FILES:
			if (strata_cli_u64("quantize", on, optarg, 1, 100000, 0, &v))
				return 2;
			files = (unsigned)v;
			break;
		case O_SEED:
			if (strata_cli_u64("quantize", on, optarg, 0, UINT64_MAX, 0, &seed))
				return 2;
			break;
		case O_FORCE: force = 1; break;
		case O_FMTS:
			if (strata_tier_fmts_parse(optarg, tier_fmt, &err)) {
				fprintf(stderr, "strata quantize: --formats: %s\n", err.msg);
				return 2;
			}
			fmts_s = optarg;
			break;
		case O_COPIES: copies = 1; break;
		default: return strata_cli_bad_option("quantize", opts, argc, argv);
		}
		if (end && (*end || end == optarg || optarg[0] == '-')) {
			fprintf(stderr, "strata quantize: bad number '%s' for %s\n", optarg, strata_cli_optname(opts, li, c));
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "strata quantize: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	if (make)
		return make_test_model(make, spec_text, naming, dtype_s, files, seed);
	if (spec_text || strcmp(dtype_s, "bf16") || files != 1) {
		fprintf(stderr, "strata quantize: --spec, --dtype and --files go with --make-test-model\n");
		return 2;
	}
	if (!in || (!out && !plan)) {
		fprintf(stderr, "strata quantize: --in and --out are required (see --help)\n");
		return 2;
	}
	if (counts && trace) {
		fprintf(stderr, "strata quantize: give --counts or --trace, not both\n");
		return 2;
	}
	if (split_s && budget_s) {
		fprintf(stderr, "strata quantize: give --tiers or --budget-bytes, not both\n");
		return 2;
	}
	if (fmts_s && budget_s) {
		fprintf(stderr, "strata quantize: --budget-bytes sizes the tiers by the trellis formats; "
				"not with --formats (use --tiers)\n");
		return 2;
	}
	int mode = !strcmp(bmode, "layer") ? STRATA_BUDGET_LAYER : !strcmp(bmode, "global") ? STRATA_BUDGET_GLOBAL : -1;
	if (mode < 0) {
		fprintf(stderr, "strata quantize: --budget-mode must be layer or global\n");
		return 2;
	}
	struct strata_tier_split split = STRATA_TIER_SPLIT_DEFAULT;
	if (split_s && strata_tier_split_parse(split_s, &split, &err))
		return strata_cli_fail("quantize", &err);
	if (budget_s && strata_parse_size(budget_s, &budget, &err))
		return strata_cli_fail("quantize", &err);
	if (!threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		threads = n > 0 ? (unsigned)n : 1;
	}

	struct strata_quantize_open_options oo = { .naming = naming, .top_k = top_k, .name = name };
	struct strata_quantize_model *m = NULL;
	struct strata_popularity pop = { 0 }, *popp = NULL;
	struct strata_imatrix *imx = NULL;
	uint8_t *tiers = NULL;
	int rc = strata_quantize_model_open(in, &oo, &m, &err);
	if (!rc && (counts || trace)) {
		rc = counts ? strata_popularity_load(counts, &pop, &err) : strata_popularity_from_trace(trace, &pop, &err);
		if (!rc)
			rc = strata_popularity_check(&pop, &m->spec, &err);
		popp = &pop;
	}
	char tiering[512];
	if (!rc) {
		tiers = malloc(strata_model_total_experts(&m->spec));
		if (!tiers)
			rc = STRATA_ERR(&err, STRATA_ENOMEM, "out of memory");
	}
	if (!rc) {
		const char *src = counts ? counts : trace ? trace : "no popularity given: expert id order";
		if (budget_s) {
			rc = strata_tier_assign_budget(&m->spec, popp, budget, mode, tiers, &err);
			snprintf(tiering, sizeof(tiering), "budget %s (%s), from %s", budget_s, bmode, src);
		} else {
			rc = strata_tier_assign_split(&m->spec, popp, &split, tiers, &err);
			snprintf(tiering, sizeof(tiering), "split %g/%g/%g per layer, from %s", split.pct[0], split.pct[1],
				 split.pct[2], src);
		}
	}
	if (!rc && imx_path)
		rc = strata_imatrix_load(imx_path, &m->spec, &imx, &err);
	struct strata_quantize_report rep;
	if (!rc && plan) {
		rc = strata_quantize_plan(m, tiers, tier_fmt, &rep, &err);
		if (!rc)
			print_card(&rep, in, out ? out : "(plan: nothing written)", tiering, json);
	} else if (!rc) {
		strata_install_sigint();
		struct strata_quantize_config qc = {
			.out = out, .tiers = tiers, .tier_fmt = { tier_fmt[0], tier_fmt[1], tier_fmt[2] }, .imatrix = imx,
			.threads = threads, .shard_bytes = shard_bytes, .progress = progress, .force = force,
			.lowbit_copies = copies,
		};
		rc = strata_quantize_run(m, &qc, &rep, &err);
		if (!rc)
			print_card(&rep, in, out, tiering, json);
	}
	free(tiers);
	strata_imatrix_free(imx);
	strata_popularity_free(&pop);
	strata_quantize_model_close(m);
	return rc ? strata_cli_fail("quantize", &err) : 0;
}
