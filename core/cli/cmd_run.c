/* strata run: run a Lua experiment script (include/strata/experiment.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "strata/experiment.h"
#include "strata/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: strata run [options] SCRIPT.lua [key=value ...]\n"
		"       strata run --one RUN_ID --out ROW.csv\n"
		"       strata run --merge OUT.csv PART.csv ...\n\n"
		"Run an experiment script: Lua with the engine as a library (strata.run, strata.sweep,\n"
		"strata.trace_gen, strata.product, strata.markdown, strata.read_csv/write_csv).  Sweeps run\n"
		"each configuration in a worker process, append one CSV row per run (canonical config,\n"
		"seed, every counter; a failing configuration gets an error row), and resume: rows already\n"
		"in the CSV with status ok are not run again.  Arguments key=value reach the script as\n"
		"strata.args.key.  See experiments/README.md.\n\n"
		"  -j, --jobs N     worker processes per sweep (default: the machine's cores)\n"
		"      --fresh      ignore existing results (run every configuration again)\n"
		"      --export-jobs FILE\n"
		"                   sweeps append one shell line per configuration still to run to FILE\n"
		"                   instead of running it (GNU parallel, Slurm arrays); then --merge\n"
		"      --one RUN_ID run one configuration given by its run_id, write a one-row CSV (--out)\n"
		"      --merge OUT  merge row CSVs (the remaining arguments) into OUT, one row per run_id\n"
		"      --no-progress\n"
		"                   no progress lines on stderr (also STRATA_PROGRESS=0); by default a\n"
		"                   line redrawn on a terminal, else one line every 5 s with rate and ETA\n"
		"      --max-instructions N\n"
		"                   the script's Lua instruction budget (default 10000000000, minutes of\n"
		"                   pure Lua; sweeps run in C and do not count; 0: no limit)\n"
		"      --max-memory SIZE\n"
		"                   memory the script's Lua state may hold (default 2G; 0: no limit)\n"
		"  -h, --help       this text\n");
}

int strata_cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "jobs", required_argument, 0, 'j' }, { "fresh", no_argument, 0, 'F' },
		{ "export-jobs", required_argument, 0, 'E' }, { "one", required_argument, 0, 'O' },
		{ "out", required_argument, 0, 'o' }, { "merge", required_argument, 0, 'M' },
		{ "max-instructions", required_argument, 0, 'I' }, { "max-memory", required_argument, 0, 'm' },
		{ "no-progress", no_argument, 0, 'P' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	struct strata_experiment_opts o = { 0 };
	const char *one = NULL, *out = NULL, *merge = NULL;
	int ch;
	optind = 1;
	/* '+': stop at the script name; what follows belongs to the script. */
	while ((ch = getopt_long(argc, argv, "+j:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'j': {
			char *end = NULL;
			long v = strtol(optarg, &end, 10);
			if (!*optarg || *end || v < 1 || v > 1024) {
				fprintf(stderr, "strata run: --jobs: '%s' (1..1024)\n", optarg);
				return 2;
			}
			o.jobs = (uint32_t)v;
			break;
		}
		case 'F': o.fresh = 1; break;
		case 'E': o.export_jobs = optarg; break;
		case 'O': one = optarg; break;
		case 'o': out = optarg; break;
		case 'M': merge = optarg; break;
		case 'P': strata_cli_no_progress(); break;
		case 'I':
			if (strata_cli_u64("run", "--max-instructions", optarg, 0, UINT64_MAX - 1, 0, &o.max_instructions))
				return 2;
			if (!o.max_instructions)
				o.max_instructions = UINT64_MAX;
			break;
		case 'm': {
			struct strata_error e = { 0 };
			if (strcmp(optarg, "0") && strata_parse_size(optarg, &o.max_memory, &e)) {
				fprintf(stderr, "strata run: --max-memory: %s\n", e.msg);
				return 2;
			}
			if (!strcmp(optarg, "0"))
				o.max_memory = UINT64_MAX;
			break;
		}
		case 'h': usage(stdout); return 0;
		default: return strata_cli_bad_option("run", opts, argc, argv);
		}
	}
	struct strata_error err = { 0 };
	if (one) {
		if (!out || optind < argc) {
			fprintf(stderr, "strata run: --one needs --out ROW.csv and nothing else\n");
			return 2;
		}
		strata_install_sigint();
		if (strata_experiment_run_csv(one, out, &err))
			return strata_cli_fail("run", &err);
		return 0;
	}
	if (merge) {
		if (strata_experiment_merge(merge, argv + optind, argc - optind, &err))
			return strata_cli_fail("run", &err);
		return 0;
	}
	if (optind >= argc) {
		fprintf(stderr, "strata run: need a script\n");
		usage(stderr);
		return 2;
	}
	o.script = argv[optind];
	o.argc = argc - optind - 1;
	o.argv = argv + optind + 1;
	strata_install_sigint();
	int rc = strata_experiment_main(&o, &err);
	if (rc == STRATA_EINTR) {
		fprintf(stderr, "strata run: %s\n", err.msg);
		return 130;
	}
	if (rc == STRATA_EINVAL) { /* the script's arguments: a usage error */
		strata_cli_fail("run", &err);
		return 2;
	}
	if (rc)
		return strata_cli_fail("run", &err);
	return 0;
}
