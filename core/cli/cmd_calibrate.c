/* strata calibrate: measure link and kernel costs into a cost model for strata sim. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "strata/replay.h"
#include "strata/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: strata calibrate --model DIR [-o cost.json] [options]\n\n"
		"Measure, on this machine and the model's shard files: NVMe read latency (QD1, 4 KiB, O_DIRECT)\n"
		"and bandwidth (io_uring, whole extents), RAM->VRAM and HBM bandwidth when a GPU is usable, and\n"
		"the expert computation's time per packed MB (GPU kernels, else the CPU reference), and the\n"
		"fast-decode q4/q3 kernels' speed per packed byte relative to it on experts of the model's shape\n"
		"(kernel_speed_q4, kernel_speed_q3).  Writes the cost model `strata sim --cost` reads.\n\n"
		"  --model DIR        shard directory (its files are read: put it on the NVMe to measure)\n"
		"  -o, --output FILE  cost model JSON (default: stdout)\n"
		"  --bytes SIZE       NVMe bytes read for bandwidth (default 1G)\n"
		"  --queue-depth N    io_uring depth (default 32)\n"
		"  --compute C        auto (default) | gpu | ref | none (skip kernels)\n"
		"  --gpu G            auto (default) | 0 | 1\n"
		STRATA_CLI_NO_PROGRESS_HELP("      "));
}

int strata_cmd_calibrate(int argc, char **argv)
{
	enum { O_MODEL = 256, O_BYTES, O_QD, O_COMPUTE, O_GPU };
	static const struct option opts[] = {
		{ "model", required_argument, 0, O_MODEL }, { "output", required_argument, 0, 'o' },
		{ "bytes", required_argument, 0, O_BYTES }, { "queue-depth", required_argument, 0, O_QD },
		{ "compute", required_argument, 0, O_COMPUTE }, { "gpu", required_argument, 0, O_GPU },
		{ "no-progress", no_argument, 0, 'P' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	struct strata_calibrate_config c;
	strata_calibrate_config_defaults(&c);
	struct strata_error err = { 0 };
	const char *out = NULL;
	int ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		char *end;
		switch (ch) {
		case O_MODEL: c.model_dir = optarg; break;
		case 'o': out = optarg; break;
		case O_BYTES:
			if (strata_parse_size(optarg, &c.read_bytes, &err) || !c.read_bytes) {
				fprintf(stderr, "strata calibrate: --bytes: %s\n", err.msg[0] ? err.msg : "must be > 0");
				return 2;
			}
			break;
		case O_QD:
			c.queue_depth = (uint32_t)strtoul(optarg, &end, 10);
			if (*end || !c.queue_depth || c.queue_depth > 4096) {
				fprintf(stderr, "strata calibrate: --queue-depth must be 1..4096\n");
				return 2;
			}
			break;
		case O_COMPUTE:
			if ((c.compute = strata_cli_choice("calibrate", "--compute", optarg, strata_cli_compute_names)) < 0)
				return 2;
			break;
		case O_GPU:
			if ((c.use_gpu = strata_cli_choice("calibrate", "--gpu", optarg, strata_cli_gpu_names)) < 0)
				return 2;
			if (c.use_gpu == 2)
				c.use_gpu = -1;
			break;
		case 'P': strata_cli_no_progress(); break;
		case 'h': usage(stdout); return 0;
		default: return strata_cli_bad_option("calibrate", opts, argc, argv);
		}
	}
	if (!c.model_dir || optind < argc) {
		fprintf(stderr, "strata calibrate: need --model DIR%s\n", optind < argc ? " (and no positional arguments)" : "");
		usage(stderr);
		return 2;
	}
	strata_install_sigint();
	struct strata_cost_file cf;
	if (strata_calibrate(&c, &cf, stderr, &err))
		return strata_cli_fail("calibrate", &err);
	if (!out) {
		strata_cost_file_print(&cf, stdout);
		return 0;
	}
	if (strata_cost_file_save(out, &cf, &err))
		return strata_cli_fail("calibrate", &err);
	fprintf(stderr, "calibrate: wrote %s\n", out);
	return 0;
}
