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
	const char *choices;  /* STR only: "a|b|c" lists the accepted values; NULL: any */
};

/* Apply every default, then parse "k=v:k=v" (':' or ',' separated; NULL or ""
 * for none).  owner names the policy in errors: "prefetch lookahead: unknown
 * option 'dpth' (options: depth, ...)".  A bare "k" sets a BOOL option to 1.
 * INT takes decimal or 0x hex, DOUBLE anything strtod reads (finite), BOOL
 * 0/1/true/false/yes/no/on/off, STR up to STRATA_OPT_STR_MAX-1 bytes and, when
 * `choices` is set, one of them.  A repeated key: the last one wins.  On error
 * obj holds the defaults plus whatever parsed before the bad key.  opts may be
 * NULL (no options: any key is unknown). */
int strata_options_apply(const struct strata_option *opts, void *obj, const char *kv,
			 const char *owner, struct strata_error *err);
/* "base" plus "-key=value" for every option whose value differs from its
 * default, in table order. */
void strata_options_canonical(const struct strata_option *opts, const void *obj, const char *base,
			      char *buf, size_t len);
/* One line per option: "  name  type  default  [range|choices]  help". */
void strata_options_help(const struct strata_option *opts, FILE *out);
/* Current value of one option in obj as text (what canonical names print). */
void strata_option_format(const struct strata_option *o, const void *obj, char *buf, size_t len);
/* "int", "double", "bool", "string". */
const char *strata_option_type_name(int type);
/* Check a table itself (names unique and [a-z0-9_]+, known types, defaults
 * parse and lie in range); the policy loader runs it on every ops table. */
int strata_options_check(const struct strata_option *opts, const char *owner, struct strata_error *err);

#endif
