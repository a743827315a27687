/*
 * strata policies: list the built-in placement, eviction and prefetch
 * policies with their help lines and option tables, as text or JSON.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "strata/engine.h"
#include "strata/json.h"
#include "strata/policy.h"
#include "strata/util.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: strata policies [--role place|evict|prefetch] [--json]\n"
		"\n"
		"List the built-in policies of each role (the first is the default) with\n"
		"their options.  Policies are chosen as place=SPEC, evict=SPEC, prefetch=SPEC\n"
		"where SPEC is NAME[:key=value[:key=value...]], e.g. lookahead:depth=2:topn=4.\n"
		"NAME may also be a plugin (NAME.so in $STRATA_PLUGIN_PATH, or a path to a\n"
		".so) or a Lua script (a path ending in .lua).  Results name each instance\n"
		"canonically: the name plus -key=value for every non-default option.\n"
		"\n"
		"  --role R   only role R\n"
		"  --json     one JSON object {role: [policy...]} on stdout\n"
		"  --help     this text\n");
}

static void print_json(FILE *out, int only)
{
	fprintf(out, "{");
	int first_role = 1;
	for (int r = 0; r < STRATA_ROLE_COUNT; r++) {
		if (only >= 0 && r != only)
			continue;
		fprintf(out, "%s\n  \"%s\": [", first_role ? "" : ",", strata_role_name(r));
		first_role = 0;
		for (unsigned i = 0;; i++) {
			const struct strata_evict_ops *h = strata_policy_builtin_at(r, i);
			if (!h)
				break;
			fprintf(out, "%s\n    {\"name\": ", i ? "," : "");
			strata_json_write_str(out, h->name);
			fprintf(out, ", \"default\": %s, \"needs_future\": %s, \"help\": ",
				i == 0 ? "true" : "false",
				h->flags & STRATA_POLICY_F_NEEDS_FUTURE ? "true" : "false");
			strata_json_write_str(out, h->help);
			fprintf(out, ", \"options\": [");
			int k = 0;
			for (const struct strata_option *o = h->options; o && o->name; o++, k++) {
				fprintf(out, "%s\n      {\"name\": ", k ? "," : "");
				strata_json_write_str(out, o->name);
				fprintf(out, ", \"type\": \"%s\", \"default\": ", strata_option_type_name(o->type));
				strata_json_write_str(out, o->def);
				if (!(o->min == 0 && o->max == 0))
					fprintf(out, ", \"min\": %.17g, \"max\": %.17g", o->min, o->max);
				if (o->choices) {
					fprintf(out, ", \"choices\": ");
					strata_json_write_str(out, o->choices);
				}
				fprintf(out, ", \"help\": ");
				strata_json_write_str(out, o->help);
				fprintf(out, "}");
			}
			fprintf(out, "%s]}", k ? "\n    " : "");
		}
		fprintf(out, "\n  ]");
	}
	fprintf(out, "\n}\n");
}

static void print_options(FILE *out, const struct strata_option *opts)
{
	for (const struct strata_option *o = opts; o && o->name; o++) {
		char range[96] = "";
		if (o->choices)
			snprintf(range, sizeof(range), "%s", o->choices);
		else if (!(o->min == 0 && o->max == 0))
			snprintf(range, sizeof(range), "[%g, %g]", o->min, o->max);
		fprintf(out, "      %-10s %-6s %-6s %-18s %s\n", o->name, strata_option_type_name(o->type), o->def, range,
			o->help ? o->help : "");
	}
}

static void print_text(FILE *out, int only)
{
	for (int r = 0; r < STRATA_ROLE_COUNT; r++) {
		if (only >= 0 && r != only)
			continue;
		fprintf(out, "%s policies:\n", strata_role_name(r));
		for (unsigned i = 0;; i++) {
			const struct strata_evict_ops *h = strata_policy_builtin_at(r, i);
			if (!h)
				break;
			fprintf(out, "  %-10s %s%s%s\n", h->name, h->help ? h->help : "",
				i == 0 ? " [default]" : "",
				h->flags & STRATA_POLICY_F_NEEDS_FUTURE ? " [needs the future: replay/sim]" : "");
			print_options(out, h->options);
		}
		fprintf(out, "\n");
	}
	if (only >= 0)
		return;
	/* not a role: an engine option beside them (--on-miss) */
	fprintf(out, "precision on miss (--on-miss, engine option on_miss):\n"
		     "  full       every miss moves the whole expert [default]\n"
		     "  lowbit     a miss that would stall, on an expert with a low gate weight, reads its low-bit copy\n"
		     "             (strata synth|quantize --lowbit-copies) and computes from it\n");
	print_options(out, strata_engine_on_miss_options());
	fprintf(out, "\n");
}

int strata_cmd_policies(int argc, char **argv)
{
	int json = 0, role = -1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (!strcmp(argv[i], "--role") || !strncmp(argv[i], "--role=", 7)) {
			const char *v = argv[i][6] == '=' ? argv[i] + 7 : (i + 1 < argc ? argv[++i] : NULL);
			role = -1;
			for (int r = 0; v && r < STRATA_ROLE_COUNT; r++)
				if (!strcmp(v, strata_role_name(r)))
					role = r;
			if (role < 0) {
				fprintf(stderr, "strata policies: --role needs place, evict or prefetch%s%s\n",
					v ? ", not " : "", v ? v : "");
				return 2;
			}
		} else {
			static const char *const names[] = { "help", "json", "role" };
			const char *a = argv[i] + strspn(argv[i], "-");
			const char *hint = strata_closest_name(a, strcspn(a, "="), names, 3);
			fprintf(stderr, "strata policies: unknown argument '%s'", argv[i]);
			if (hint)
				fprintf(stderr, "; did you mean --%s?", hint);
			fprintf(stderr, "\nstrata policies --help lists every option\n");
			return 2;
		}
	}
	if (json)
		print_json(stdout, role);
	else
		print_text(stdout, role);
	return 0;
}
