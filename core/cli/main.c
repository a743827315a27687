/* `strata`: dispatch to a subcommand. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "strata/util.h"

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *help;
} commands[] = {
	{ "synth", strata_cmd_synth, "write a synthetic model (shards) from a preset shape" },
	{ "inspect", strata_cmd_inspect, "print a model's tier table and sizes like a model card" },
	{ "quantize", strata_cmd_quantize, "quantize safetensors weights into tiered Strata shards" },
	{ "dequantize", strata_cmd_dequantize, "write shards' experts back as BF16 safetensors (quality studies)" },
	{ "trace", strata_cmd_trace, "routing traces: import, gen, stats, convert" },
	{ "replay", strata_cmd_replay, "replay a routing trace on the real engine" },
	{ "sim", strata_cmd_sim, "replay a trace on a virtual clock (calibrated cost model)" },
	{ "calibrate", strata_cmd_calibrate, "measure link and kernel costs for `strata sim`" },
	{ "run", strata_cmd_run, "run a Lua experiment script (sweeps, tables, plots)" },
	{ "policies", strata_cmd_policies, "list built-in policies and their options" },
};

#ifndef STRATA_GIT
#define STRATA_GIT "unknown"
#endif
#define STRATA_VERSION "0.1"

static void usage(FILE *out)
{
	fprintf(out, "usage: strata <command> [options]   (strata <command> --help; strata --version)\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
}

const char *strata_cli_optname(const struct option *opts, int li, int c)
{
	static char buf[80];
	if (li >= 0)
		snprintf(buf, sizeof(buf), "--%s", opts[li].name);
	else
		snprintf(buf, sizeof(buf), "-%c", c);
	return buf;
}

int strata_cli_u64(const char *cmd, const char *opt, const char *text, uint64_t min, uint64_t max, int base0,
		   uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(text, &end, base0 ? 0 : 10);
	const char *why = NULL;
	if (!*text || *end || text[0] == '-' || isspace((unsigned char)text[0]))
		why = "not a non-negative whole number";
	else if (errno == ERANGE)
		why = "too large (more than 64 bits)";
	else if (v < min || v > max)
		why = "out of range";
	if (!why) {
		*out = v;
		return 0;
	}
	if (max == UINT64_MAX)
		fprintf(stderr, "strata %s: %s: '%s': %s (at least %" PRIu64 ")\n", cmd, opt, text, why, min);
	else
		fprintf(stderr, "strata %s: %s: '%s': %s (%" PRIu64 "..%" PRIu64 ")\n", cmd, opt, text, why, min, max);
	return -1;
}

const char *const strata_cli_compute_names[] = { "none", "ref", "gpu", "auto", NULL };
const char *const strata_cli_mover_names[] = { "uring", "mmap", "pread", NULL };
const char *const strata_cli_gpu_names[] = { "0", "1", "auto", NULL };

int strata_cli_choice(const char *cmd, const char *opt, const char *v, const char *const *names)
{
	for (int i = 0; names[i]; i++)
		if (!strcmp(v, names[i]))
			return i;
	fprintf(stderr, "strata %s: %s: '%s' (", cmd, opt, v);
	for (int i = 0; names[i]; i++)
		fprintf(stderr, "%s%s", i ? ", " : "", names[i]);
	fprintf(stderr, ")\n");
	return -1;
}

int strata_cli_bad_option(const char *cmd, const struct option *opts, int argc, char **argv)
{
	const char *arg = optind >= 1 && optind <= argc ? argv[optind - 1] : NULL;
	if (!opterr) /* the command silenced getopt's own message */
		fprintf(stderr, "strata %s: unknown or incomplete option '%s'\n", cmd, arg ? arg : "?");
	if (arg && arg[0] == '-' && arg[1] == '-' && arg[2]) {
		const char *name = arg + 2;
		size_t len = strcspn(name, "=");
		const char *names[128];
		size_t n = 0, known = 0;
		for (; opts[n].name && n < 128; n++) {
			names[n] = opts[n].name;
			known |= strlen(names[n]) == len && !strncmp(names[n], name, len);
		}
		const char *hint = known ? NULL : strata_closest_name(name, len, names, n);
		if (hint)
			fprintf(stderr, "strata %s: did you mean --%s?\n", cmd, hint);
	}
	fprintf(stderr, "strata %s --help lists every option\n", cmd);
	return 2;
}

void strata_cli_no_progress(void)
{
	setenv("STRATA_PROGRESS", "0", 1);
}

int strata_cli_fail(const char *cmd, const struct strata_error *err)
{
	fprintf(stderr, "strata %s: %s\n", cmd, err && err->msg[0] ? err->msg : "failed");
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
		printf("strata %s (%s)\n", STRATA_VERSION, STRATA_GIT);
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name)) {
			/* getopt's own messages ("option requires an argument")
			 * start with argv[0]: make it "strata <command>". */
			char name[64];
			snprintf(name, sizeof(name), "strata %s", commands[i].name);
			argv[1] = name;
			return commands[i].fn(argc - 1, argv + 1);
		}
	const char *names[sizeof(commands) / sizeof(commands[0])];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		names[i] = commands[i].name;
	const char *hint = strata_closest_name(argv[1], strlen(argv[1]), names, sizeof(names) / sizeof(names[0]));
	fprintf(stderr, "strata: unknown command '%s'", argv[1]);
	if (hint)
		fprintf(stderr, "; did you mean '%s'?", hint);
	fprintf(stderr, "\n(strata --help lists the commands)\n");
	return 2;
}
