/*
 * Declarative option tables (see include/strata/option.h): the one place that
 * parses "k=v:k=v", checks types and ranges, prints help and builds the
 * canonical instance names that result rows carry.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "strata/option.h"
#include "strata/util.h"

const char *strata_option_type_name(int type)
{
	switch (type) {
	case STRATA_OPT_INT: return "int";
	case STRATA_OPT_DOUBLE: return "double";
	case STRATA_OPT_BOOL: return "bool";
	case STRATA_OPT_STR: return "string";
	default: return "?";
	}
}

static int ranged(const struct strata_option *o)
{
	return !(o->min == 0 && o->max == 0);
}

/* "a|b|c" contains v as a whole alternative. */
static int in_choices(const char *choices, const char *v)
{
	size_t n = strlen(v);
	for (const char *c = choices; c && *c;) {
		const char *bar = strchr(c, '|');
		size_t m = bar ? (size_t)(bar - c) : strlen(c);
		if (m == n && !strncmp(c, v, n))
			return 1;
		c = bar ? bar + 1 : c + m;
	}
	return 0;
}

static void list_names(const struct strata_option *opts, char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = '\0';
	for (const struct strata_option *o = opts; o && o->name; o++) {
		int n = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", o->name);
		if (n < 0 || (size_t)n >= len - at)
			break;
		at += (size_t)n;
	}
	if (!at)
		snprintf(buf, len, "none");
}

/* Parse v for o and store it into obj; owner/err for the message. */
static int set_one(const struct strata_option *o, void *obj, const char *v, const char *owner,
		   struct strata_error *err)
{
	char *dst = (char *)obj + o->offset;
	char *end;
	switch (o->type) {
	case STRATA_OPT_INT: {
		errno = 0;
		long long x = strtoll(v, &end, 0);
		if (errno || end == v || *end)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: option %s=%s: not an integer", owner,
					  o->name, v);
		if (ranged(o) && ((double)x < o->min || (double)x > o->max))
			return STRATA_ERR(err, STRATA_EINVAL, "%s: option %s=%s: out of range [%.17g, %.17g]",
					  owner, o->name, v, o->min, o->max);
		int64_t y = x;
		memcpy(dst, &y, sizeof(y));
		return STRATA_OK;
	}
	case STRATA_OPT_DOUBLE: {
		errno = 0;
		double x = strtod(v, &end);
		if (errno || end == v || *end || !isfinite(x))
			return STRATA_ERR(err, STRATA_EINVAL, "%s: option %s=%s: not a finite number", owner,
					  o->name, v);
		if (ranged(o) && (x < o->min || x > o->max))
			return STRATA_ERR(err, STRATA_EINVAL, "%s: option %s=%s: out of range [%g, %g]",
					  owner, o->name, v, o->min, o->max);
		memcpy(dst, &x, sizeof(x));
		return STRATA_OK;
	}
	case STRATA_OPT_BOOL: {
		int b;
		if (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
		    !strcasecmp(v, "on"))
			b = 1;
		else if (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") ||
			 !strcasecmp(v, "off"))
			b = 0;
		else
			return STRATA_ERR(err, STRATA_EINVAL, "%s: option %s=%s: not a boolean (0/1/true/false)",
					  owner, o->name, v);
		memcpy(dst, &b, sizeof(b));
		return STRATA_OK;
	}
	case STRATA_OPT_STR:
		if (strlen(v) >= STRATA_OPT_STR_MAX)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: option %s: value longer than %d bytes",
					  owner, o->name, STRATA_OPT_STR_MAX - 1);
		if (o->choices && !in_choices(o->choices, v))
			return STRATA_ERR(err, STRATA_EINVAL, "%s: option %s=%s: expected one of %s", owner,
					  o->name, v, o->choices);
		memcpy(dst, v, strlen(v) + 1);
		return STRATA_OK;
	default:
		return STRATA_ERR(err, STRATA_EINVAL, "%s: option %s: unknown type %d", owner, o->name,
				  o->type);
	}
}

int strata_options_apply(const struct strata_option *opts, void *obj, const char *kv,
			 const char *owner, struct strata_error *err)
{
	if (!owner)
		owner = "options";
	for (const struct strata_option *o = opts; o && o->name; o++) {
		int rc = set_one(o, obj, o->def ? o->def : "", owner, err);
		if (rc)
			return rc;
	}
	if (!kv || !*kv)
		return STRATA_OK;
	char *copy = strdup(kv);
	if (!copy)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory parsing options", owner);
	int rc = STRATA_OK;
	char *save = NULL;
	for (char *tok = strtok_r(copy, ":,", &save); tok; tok = strtok_r(NULL, ":,", &save)) {
		char *eq = strchr(tok, '=');
		if (eq)
			*eq = '\0';
		const struct strata_option *o = opts;
		while (o && o->name && strcmp(o->name, tok))
			o++;
		if (!o || !o->name) {
			char names[512];
			list_names(opts, names, sizeof(names));
			const char *cand[64];
			size_t n = 0;
			for (const struct strata_option *c = opts; c && c->name && n < 64; c++)
				cand[n++] = c->name;
			const char *hint = strata_closest_name(tok, strlen(tok), cand, n);
			rc = STRATA_ERR(err, STRATA_EINVAL, "%s: unknown option '%s' (options: %s)%s%s%s", owner, tok,
					names, hint ? "; did you mean '" : "", hint ? hint : "", hint ? "'?" : "");
			break;
		}
		if (!eq && o->type != STRATA_OPT_BOOL) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "%s: option '%s' needs a value (%s=...)", owner,
					tok, tok);
			break;
		}
		rc = set_one(o, obj, eq ? eq + 1 : "1", owner, err);
		if (rc)
			break;
	}
	free(copy);
	return rc;
}

void strata_option_format(const struct strata_option *o, const void *obj, char *buf, size_t len)
{
	const char *src = (const char *)obj + o->offset;
	switch (o->type) {
	case STRATA_OPT_INT: {
		int64_t x;
		memcpy(&x, src, sizeof(x));
		snprintf(buf, len, "%" PRId64, x);
		break;
	}
	case STRATA_OPT_DOUBLE: {
		double x;
		memcpy(&x, src, sizeof(x));
		/* the shortest text that reads back as x, so that distinct values
		 * never share a canonical name */
		for (int prec = 6; prec <= 17; prec++) {
			snprintf(buf, len, "%.*g", prec, x);
			if (strtod(buf, NULL) == x)
				break;
		}
		break;
	}
	case STRATA_OPT_BOOL: {
		int b;
		memcpy(&b, src, sizeof(b));
		snprintf(buf, len, "%d", b ? 1 : 0);
		break;
	}
	case STRATA_OPT_STR:
		snprintf(buf, len, "%s", src);
		break;
	default:
		snprintf(buf, len, "?");
	}
}

/* Largest offset + size any option writes, so defaults can be parsed into a
 * scratch block of the same layout. */
static size_t table_extent(const struct strata_option *opts)
{
	size_t n = 0;
	for (const struct strata_option *o = opts; o && o->name; o++) {
		size_t sz = o->type == STRATA_OPT_INT ? sizeof(int64_t)
			  : o->type == STRATA_OPT_DOUBLE ? sizeof(double)
			  : o->type == STRATA_OPT_BOOL ? sizeof(int) : STRATA_OPT_STR_MAX;
		if (o->offset + sz > n)
			n = o->offset + sz;
	}
	return n;
}

void strata_options_canonical(const struct strata_option *opts, const void *obj, const char *base,
			      char *buf, size_t len)
{
	if (!len)
		return;
	snprintf(buf, len, "%s", base ? base : "");
	size_t extent = table_extent(opts);
	if (!extent)
		return;
	void *defs = calloc(1, extent);
	if (!defs)
		return;
	for (const struct strata_option *o = opts; o && o->name; o++)
		set_one(o, defs, o->def ? o->def : "", "canonical", NULL);
	for (const struct strata_option *o = opts; o && o->name; o++) {
		char cur[STRATA_OPT_STR_MAX], def[STRATA_OPT_STR_MAX];
		strata_option_format(o, obj, cur, sizeof(cur));
		strata_option_format(o, defs, def, sizeof(def));
		if (!strcmp(cur, def))
			continue;
		size_t at = strlen(buf);
		snprintf(buf + at, len - at, "-%s=%s", o->name, cur);
	}
	free(defs);
}

void strata_options_help(const struct strata_option *opts, FILE *out)
{
	if (!opts || !opts->name) {
		fprintf(out, "  (no options)\n");
		return;
	}
	for (const struct strata_option *o = opts; o->name; o++) {
		char range[96] = "";
		if (o->type == STRATA_OPT_STR && o->choices)
			snprintf(range, sizeof(range), "%s", o->choices);
		else if (ranged(o))
			snprintf(range, sizeof(range), "[%g, %g]", o->min, o->max);
		fprintf(out, "  %-12s %-7s default %-8s %-14s %s\n", o->name,
			strata_option_type_name(o->type), o->def && *o->def ? o->def : "\"\"", range,
			o->help ? o->help : "");
	}
}

int strata_options_check(const struct strata_option *opts, const char *owner, struct strata_error *err)
{
	for (const struct strata_option *o = opts; o && o->name; o++) {
		if (!*o->name)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: option table has an empty name", owner);
		for (const char *c = o->name; *c; c++)
			if (!(islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '_'))
				return STRATA_ERR(err, STRATA_EINVAL,
						  "%s: option name '%s' must be [a-z0-9_]+", owner, o->name);
		for (const struct strata_option *q = opts; q != o; q++)
			if (!strcmp(q->name, o->name))
				return STRATA_ERR(err, STRATA_EINVAL, "%s: option '%s' listed twice", owner,
						  o->name);
		if (o->type < STRATA_OPT_INT || o->type > STRATA_OPT_STR)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: option '%s' has unknown type %d", owner,
					  o->name, o->type);
	}
	size_t extent = table_extent(opts);
	if (!extent)
		return STRATA_OK;
	void *scratch = calloc(1, extent);
	if (!scratch)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", owner);
	int rc = strata_options_apply(opts, scratch, NULL, owner, err);
	if (rc)
		strata_error_prefix(err, "bad default in option table");
	free(scratch);
	return rc;
}
