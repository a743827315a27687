/*
 * strata dequantize: Strata shards -> one safetensors file with every routed
 * expert dequantized to BF16 under Hugging Face names, so a PyTorch or
 * transformers model runs on exactly the weights the tier formats give
 * (python/strata/eval.py's quality table).  The work is in core/dequantize.c.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "strata/quantize.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: strata dequantize --model DIR --out FILE.safetensors [--naming N] [--no-progress]\n"
		"\n"
		"Write every routed expert of the shards in DIR dequantized from its tier format\n"
		"(hot / warm / cold, the CPU reference dequantizers) as BF16, and every other tensor\n"
		"as stored, into one safetensors file with Hugging Face tensor names. The file's\n"
		"__metadata__ holds strata.spec and strata.tiers (one digit per expert: 0 hot,\n"
		"1 warm, 2 cold). Extents are checked against their checksums.\n"
		"\n"
		"  --model DIR     Strata shards (strata quantize / strata synth output)\n"
		"  --out FILE      safetensors file to write (tmp + rename)\n"
		"  --naming N      expert tensor names: qwen3-moe (default), deepseek-v3, mixtral\n"
		STRATA_CLI_NO_PROGRESS_HELP("   "));
}

int strata_cmd_dequantize(int argc, char **argv)
{
	enum { O_MODEL = 256, O_OUT, O_NAMING, O_NOPROG };
	static const struct option opts[] = {
		{ "model", required_argument, 0, O_MODEL }, { "out", required_argument, 0, O_OUT },
		{ "naming", required_argument, 0, O_NAMING }, { "no-progress", no_argument, 0, O_NOPROG },
		{ "help", no_argument, 0, 'h' },            { 0, 0, 0, 0 },
	};
	static const char *const namings[] = { "qwen3-moe", "deepseek-v3", "mixtral", NULL };
	const char *model = NULL, *out = NULL, *naming = "qwen3-moe";
	int progress = 1, c, li = -1;
	optind = 1;
	opterr = 0;
	for (; (c = getopt_long(argc, argv, "h", opts, &li)) != -1; li = -1) {
		switch (c) {
		case 'h': usage(stdout); return 0;
		case O_MODEL: model = optarg; break;
		case O_OUT: out = optarg; break;
		case O_NAMING:
			if (strata_cli_choice("dequantize", "--naming", optarg, namings) < 0)
				return 2;
			naming = optarg;
			break;
		case O_NOPROG: progress = 0; strata_cli_no_progress(); break;
		default:
			fprintf(stderr, "strata dequantize: unknown or incomplete option '%s' (see --help)\n",
				argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "strata dequantize: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!model || !out) {
		fprintf(stderr, "strata dequantize: needs --model DIR and --out FILE (see --help)\n");
		return 2;
	}
	struct strata_error err = { 0 };
	struct strata_store *s = NULL;
	if (strata_store_open(model, &s, &err))
		return strata_cli_fail("dequantize", &err);
	int rc = strata_dequantize_store(s, naming, out, progress, &err);
	strata_store_close(s);
	if (rc)
		return strata_cli_fail("dequantize", &err);
	printf("%s: experts dequantized to BF16 from %s\n", out, model);
	return 0;
}
