/* strata synth: write a synthetic model (shards) from a preset shape. */
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "quant.h"
#include "strata/synth.h"
#include "strata/tier_assign.h"
#include "strata/util.h"
#include "strata/json.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: strata synth --preset NAME[:key=value,...] --out DIR [options]\n"
		"\n"
		"Write a model with synthetic weights at the preset's real shapes, seeded and\n"
		"reproducible, as packed shards (see `strata inspect`).\n"
		"\n"
		"  --preset SPEC        model shape: a preset name (--list-presets) with optional\n"
		"                       scaling, e.g. qwen3-30b-a3b:layers=2,experts=16, or\n"
		"                       custom:layers=2,experts=8,top_k=2,hidden=1024,inter=512\n"
		"  --out DIR            output directory (created)\n"
		"  --seed N             random seed (default 1)\n"
		"  --dist NAME          gaussian | student-t | outliers (gaussian plus outlier input\n"
		"                       columns); default gaussian\n"
		"  --dof X              Student-t degrees of freedom, > 2 (default 5)\n"
		"  --outlier-frac F     fraction of input columns that are outliers (default 0.005\n"
		"                       with --dist outliers, else 0); any distribution\n"
		"  --outlier-scale S    scale multiplier of outlier columns (default 10)\n"
		"  --format F           bf16 (default) | tiered (each expert in its tier's format)\n"
		"  --formats H,W,C      the hot, warm, cold tiers' formats with --format=tiered:\n"
		"                       trellis hot, warm, cold (default) or the fast-decode q4, q3\n"
		"                       (e.g. q4,warm,cold; kernels/FORMATS.md)\n"
		"  --codes C            quantize (default; run the reference quantizer) | random\n"
		"                       (tiered only: random valid blocks, a throughput-only model\n"
		"                       whose experts compute nothing meaningful)\n"
		"  --tiers H,W,C        hot/warm/cold share of each layer's experts, percent (15,30,55,\n"
		"                       the default) or fractions (0.15,0.30,0.55), assigned by a\n"
		"                       seeded Zipf-like popularity\n"
		"  --popularity FILE    rank experts by a routing trace (.strace/.jsonl) or a\n"
		"                       counts file (JSON/CSV) instead, with the --tiers split\n"
		"  --shard-size SIZE    target shard size (default 4G)\n"
		"  --threads N          generator/writer threads (default 2)\n"
		"  --lowbit-copies      beside each expert larger than the cold format, a cold-format\n"
		"                       copy of the same weights (what `replay|sim --on-miss lowbit`\n"
		"                       reads on a miss; `strata inspect` lists them)\n"
		"  --force              replace a model already in DIR\n"
		"  --list-presets       list the model presets and exit\n"
		"  --json               print the result as JSON\n"
		STRATA_CLI_NO_PROGRESS_HELP("        ")
		"  --help               this text\n");
}

static void list_presets(int json)
{
	if (json)
		printf("[");
	int first = 1;
	for (const struct strata_model_preset *p = strata_model_presets; p->name; p++) {
		const struct strata_model_spec *s = &p->spec;
		if (json) {
			printf("%s\n {\"name\":\"%s\",\"about\":\"%s\",\"layers\":%u,\"first_moe_layer\":%u,"
			       "\"moe_layers\":%u,\"experts\":%u,\"top_k\":%u,\"hidden\":%u,\"inter\":%u,\"shared\":%u,"
			       "\"shared_inter\":%u,\"nonrouted_params\":%" PRIu64 ",\"expert_params\":%" PRIu64 "}",
			       first ? "" : ",", p->name, p->about, s->n_layers, s->first_moe_layer, s->n_moe_layers,
			       s->n_experts, s->top_k, s->hidden, s->inter, s->n_shared, s->shared_inter,
			       s->nonrouted_params, strata_model_expert_params(s));
		} else {
			printf("%-18s %s\n", p->name, p->about);
		}
		first = 0;
	}
	if (json)
		printf("\n]\n");
	else
		printf("\nscale with NAME:layers=N,experts=N (also top_k, hidden, inter, shared, shared_inter,\n"
		       "nonrouted, first_moe); scaling keeps the expert size.\n");
}

/* 1 if dir holds shard files of a finished write. */
int strata_cmd_synth(int argc, char **argv)
{
	enum { O_SEED = 256, O_DIST, O_DOF, O_OFRAC, O_OSCALE, O_FORMAT, O_CODES, O_TIERS, O_SHARD, O_THREADS,
	       O_FORCE, O_LIST, O_JSON, O_PRESET, O_OUT, O_POP, O_NOPROG, O_FMTS, O_COPIES };
	static const struct option opts[] = {
		{ "preset", required_argument, 0, O_PRESET }, { "out", required_argument, 0, O_OUT },
		{ "seed", required_argument, 0, O_SEED }, { "dist", required_argument, 0, O_DIST },
		{ "dof", required_argument, 0, O_DOF }, { "outlier-frac", required_argument, 0, O_OFRAC },
		{ "outlier-scale", required_argument, 0, O_OSCALE }, { "format", required_argument, 0, O_FORMAT },
		{ "codes", required_argument, 0, O_CODES }, { "tiers", required_argument, 0, O_TIERS },
		{ "popularity", required_argument, 0, O_POP }, { "formats", required_argument, 0, O_FMTS },
		{ "shard-size", required_argument, 0, O_SHARD }, { "threads", required_argument, 0, O_THREADS },
		{ "force", no_argument, 0, O_FORCE }, { "list-presets", no_argument, 0, O_LIST },
		{ "lowbit-copies", no_argument, 0, O_COPIES },
		{ "json", no_argument, 0, O_JSON }, { "no-progress", no_argument, 0, O_NOPROG },
		{ "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	struct strata_synth_config cfg = { .seed = 1 };
	struct strata_error err = { 0 };
	const char *preset = NULL, *out = NULL;
	int force = 0, list = 0, json = 0, outliers = 0, ofrac_set = 0, fmts_set = 0;
	char *end;
	optind = 1;
	opterr = 0;
	int li = -1;
	for (int c; (c = getopt_long(argc, argv, "h", opts, &li)) != -1; li = -1) {
		switch (c) {
		case O_PRESET: preset = optarg; break;
		case O_OUT: out = optarg; break;
		case O_SEED:
			if (strata_cli_u64("synth", "--seed", optarg, 0, UINT64_MAX, 1, &cfg.seed))
				return 2;
			break;
		case O_DIST:
			if (!strcmp(optarg, "gaussian"))
				cfg.dist = STRATA_SYNTH_GAUSSIAN;
			else if (!strcmp(optarg, "student-t") || !strcmp(optarg, "t"))
				cfg.dist = STRATA_SYNTH_STUDENT_T;
			else if (!strcmp(optarg, "outliers"))
				cfg.dist = STRATA_SYNTH_GAUSSIAN, outliers = 1;
			else
				goto bad_value;
			break;
		case O_DOF:
			cfg.dof = strtod(optarg, &end);
			if (*end || !*optarg)
				goto bad_value;
			break;
		case O_OFRAC:
			cfg.outlier_frac = strtod(optarg, &end);
			ofrac_set = 1;
			if (*end || !*optarg)
				goto bad_value;
			break;
		case O_OSCALE:
			cfg.outlier_scale = strtod(optarg, &end);
			if (*end || !*optarg)
				goto bad_value;
			break;
		case O_FORMAT:
			if (!strcmp(optarg, "bf16"))
				cfg.format = STRATA_SYNTH_BF16;
			else if (!strcmp(optarg, "tiered"))
				cfg.format = STRATA_SYNTH_TIERED;
			else
				goto bad_value;
			break;
		case O_CODES:
			if (!strcmp(optarg, "quantize"))
				cfg.codes = STRATA_SYNTH_CODES_QUANTIZE;
			else if (!strcmp(optarg, "random"))
				cfg.codes = STRATA_SYNTH_CODES_RANDOM;
			else
				goto bad_value;
			break;
		case O_TIERS:
			if (strata_tier_frac_parse(optarg, cfg.tier_frac, &err)) {
				fprintf(stderr, "strata synth: %s\n", err.msg);
				return 2;
			}
			break;
		case O_POP: cfg.popularity = optarg; break;
		case O_FMTS:
			if (strata_tier_fmts_parse(optarg, cfg.tier_fmt, &err)) {
				fprintf(stderr, "strata synth: --formats: %s\n", err.msg);
				return 2;
			}
			fmts_set = 1;
			break;
		case O_SHARD:
			if (strata_parse_size(optarg, &cfg.shard_bytes, &err) || !cfg.shard_bytes) {
				fprintf(stderr, "strata synth: --shard-size: %s\n", err.msg[0] ? err.msg : "must be > 0");
				return 2;
			}
			break;
		case O_THREADS:
			cfg.threads = (int)strtol(optarg, &end, 10);
			if (*end || cfg.threads < 1 || cfg.threads > 64)
				goto bad_value;
			break;
		case O_FORCE: force = 1; break;
		case O_COPIES: cfg.lowbit_copies = true; break;
		case O_LIST: list = 1; break;
		case O_JSON: json = 1; break;
		case O_NOPROG: strata_cli_no_progress(); break;
		case 'h': usage(stdout); return 0;
		default: return strata_cli_bad_option("synth", opts, argc, argv);
		}
		continue;
bad_value:
		fprintf(stderr, "strata synth: bad value '%s' for %s\n", optarg, strata_cli_optname(opts, li, c));
		return 2;
	}
	if (list) {
		list_presets(json);
		return 0;
	}
	if (optind < argc) {
		fprintf(stderr, "strata synth: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!preset || !out) {
		fprintf(stderr, "strata synth: --preset and --out are required\n");
		usage(stderr);
		return 2;
	}
	if (strata_model_spec_parse(preset, &cfg.spec, &err))
		return strata_cli_fail("synth", &err);
	if (outliers && !ofrac_set)
		cfg.outlier_frac = 0.005;
	if (fmts_set && cfg.format != STRATA_SYNTH_TIERED) {
		fprintf(stderr, "strata synth: --formats only applies to --format=tiered\n");
		return 2;
	}
	if (cfg.codes == STRATA_SYNTH_CODES_RANDOM && cfg.format != STRATA_SYNTH_TIERED) {
		fprintf(stderr, "strata synth: --codes=random only applies to --format=tiered\n");
		return 2;
	}
	cfg.force = force;
	strata_install_sigint();
	struct strata_progress prog;
	struct strata_synth_result res;
	if (strata_synth_write(&cfg, out, &prog, &res, &err))
		return strata_cli_fail("synth", &err);
	char spec[256], b[32], fb[64], ft[80];
	strata_model_spec_format(&cfg.spec, spec, sizeof(spec));
	const char *fmt_name = cfg.format == STRATA_SYNTH_TIERED
				       ? strata_tier_fmts_name(strata_tier_fmts_or_default(cfg.tier_fmt), fb, sizeof(fb))
				       : "bf16";
	double mbps = res.seconds > 0 ? (double)res.bytes / res.seconds / 1e6 : 0;
	if (json) {
		printf("{\"dir\":");
		strata_json_write_str(stdout, out);
		printf(",\"model\":\"%s\",\"spec\":\"%s\",\"seed\":%" PRIu64 ",\"format\":\"%s\","
		       "\"formats\":\"%s\",\"experts\":%u,\"tensors\":%u,\"shards\":%u,\"bytes\":%" PRIu64 ",\"expert_bytes\":%" PRIu64
		       ",\"tensor_bytes\":%" PRIu64 ",\"seconds\":%.4f,\"mb_per_s\":%.1f}\n",
		       cfg.spec.name, spec, cfg.seed, cfg.format == STRATA_SYNTH_TIERED ? "tiered" : "bf16", fmt_name,
		       strata_model_total_experts(&cfg.spec), strata_synth_tensors(&cfg.spec, NULL, 0), res.shards,
		       res.bytes, res.expert_bytes, res.tensor_bytes, res.seconds, mbps);
	} else {
		printf("wrote %s: %s, %u experts (%s), %u tensors, %u shard%s, %s in %.2f s (%.0f MB/s)\n", out,
		       cfg.spec.name, strata_model_total_experts(&cfg.spec),
		       cfg.format == STRATA_SYNTH_TIERED ? (snprintf(ft, sizeof(ft), "tiered %s", fmt_name), ft) : "bf16",
		       strata_synth_tensors(&cfg.spec, NULL, 0),
		       res.shards, res.shards == 1 ? "" : "s", strata_fmt_bytes(res.bytes, b, sizeof(b)), res.seconds,
		       mbps);
	}
	return 0;
}
