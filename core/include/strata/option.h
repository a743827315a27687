/*
 * Declarative option tables.  A policy (or mover) lists its options once:
 * name, type, offset into its private struct, default, range and help.  The
 * core alone parses "key=value" lists, rejects unknown keys and out-of-range
 * values, prints help, and builds a canonical instance name from the options
 * that differ from their defaults, so a result row says exactly what ran:
 *   "lru", "lookahead-depth=2", "lfu-decay-half_life=5000".
 */
#ifndef STRATA_OPTION_H
#define STRATA_OPTION_H

#include <stddef.h>
#include <stdio.h>

#include "strata/error.h"

enum strata_opt_type {
	STRATA_OPT_INT = 1,    /* int64_t */
	STRATA_OPT_DOUBLE = 2, /* double */
	STRATA_OPT_BOOL = 3,   /* int: 0/1, accepts 0/1/true/false/yes/no */
	STRATA_OPT_STR = 4,    /* char[STRATA_OPT_STR_MAX] */
};
#define STRATA_OPT_STR_MAX 256

struct strata_option {
	const char *name;     /* NULL terminates a table */
	int type;             /* enum strata_opt_type */
	size_t offset;        /* into the object being configured */
	const char *def;      /* default, as text */
	double min, max;      /* range for INT/DOUBLE; min == max == 0: unbounded */
	const char *help;
};

/* Apply every default, then parse "k=v:k=v" (':' or ',' separated; NULL or ""
 * for none).  owner names the policy in errors: "prefetch lookahead: unknown
 * option 'dpth' (options: depth, ...)". */
int strata_options_apply(const struct strata_option *opts, void *obj, const char *kv,
			 const char *owner, struct strata_error *err);
/* "base" plus "-key=value" for every option whose value differs from its
 * default, in table order. */
void strata_options_canonical(const struct strata_option *opts, const void *obj, const char *base,
			      char *buf, size_t len);
void strata_options_help(const struct strata_option *opts, FILE *out);

#endif
