/*
 * The results CSV of strata run (see exp_int.h): columns, rows (fields
 * through strata/csv.h, RFC 4180, one line per record), and the rows an
 * interrupted sweep already wrote.  pandas reads the file as is.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "exp_int.h"
#include "strata/csv.h"
#include "strata/util.h"

static const char *const fixed_cols[] = { "run_id", "status", "error" };
static const char *const head_cols[] = { "config", "mode", "compute", "trace", "model", "seed", "vram_bytes", "ram_bytes" };
#define NAME_OF(k, t, fmt, v) k,
static const char *const result_cols[] = { RESULT_COLS(NAME_OF) NULL };
#undef NAME_OF

/* 1 if name is one of the columns every row has (not a tag). */
int strata_exp_csv_known_col(const char *name)
{
	for (size_t i = 0; i < 3; i++)
		if (!strcmp(name, fixed_cols[i]))
			return 1;
	for (size_t i = 0; i < sizeof(head_cols) / sizeof(head_cols[0]); i++)
		if (!strcmp(name, head_cols[i]))
			return 1;
	for (size_t i = 0; result_cols[i]; i++)
		if (!strcmp(name, result_cols[i]))
			return 1;
	return 0;
}


void strata_exp_csv_header(FILE *f, const struct strata_experiment_config *tags_of, char tagcols[][48],
			 uint32_t n_tagcols)
{
	for (size_t i = 0; i < 3; i++)
		fprintf(f, "%s%s", i ? "," : "", fixed_cols[i]);
	for (uint32_t i = 0; i < n_tagcols; i++)
		fprintf(f, ",%s", tagcols[i]);
	for (size_t i = 0; i < sizeof(head_cols) / sizeof(head_cols[0]); i++)
		fprintf(f, ",%s", head_cols[i]);
#define HX(k, t, fmt, v) fputs("," k, f);
	RESULT_COLS(HX)
#undef HX
	fputc('\n', f);
}

static const char *tag_of(const struct strata_experiment_config *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_tags; i++)
		if (!strcmp(c->tag_name[i], name))
			return c->tag_value[i];
	return "";
}

/* The policies as given, for the config column of a failed run. */
void strata_exp_csv_given_name(const struct strata_experiment_config *c, char *buf, size_t len)
{
	snprintf(buf, len, "place=%s,evict=%s,prefetch=%s%s%s", c->place[0] ? c->place : "default",
		 c->evict[0] ? c->evict : "default", c->prefetch[0] ? c->prefetch : "default",
		 c->on_miss[0] ? ",on_miss=" : "", c->on_miss);
}

void strata_exp_csv_row(FILE *f, const struct strata_experiment_config *c, const struct strata_exp_outcome *o,
		      char tagcols[][48], uint32_t n_tagcols)
{
	strata_csv_write_field(f, c->run_id);
	fputs(o->rc ? ",error," : ",ok,", f);
	if (o->rc)
		strata_csv_write_field(f, o->err.msg[0] ? o->err.msg : strata_status_name(o->rc));
	for (uint32_t i = 0; i < n_tagcols; i++) {
		fputc(',', f);
		strata_csv_write_field(f, tag_of(c, tagcols[i]));
	}
	const struct strata_replay_result *r = &o->res;
	const struct strata_engine_stats *s = &r->stats;
	char name[1200];
	if (o->rc)
		strata_exp_csv_given_name(c, name, sizeof(name));
	fputc(',', f);
	strata_csv_write_field(f, o->rc ? name : r->name);
	fprintf(f, ",%s,", c->virt ? "sim" : "replay");
	strata_csv_write_field(f, o->rc ? (c->compute[0] ? c->compute : "") : strata_compute_name(r->compute));
	fputc(',', f);
	strata_csv_write_field(f, c->trace);
	fputc(',', f);
	strata_csv_write_field(f, o->rc ? c->model : r->model);
	if (o->rc) {
		fprintf(f, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, c->seed, c->vram, c->ram);
#define EX(k, t, fmt, v) fputc(',', f);
		RESULT_COLS(EX)
#undef EX
	} else {
		fprintf(f, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, r->seed, r->budget[0], r->budget[1]);
#define U_FMT(v) fprintf(f, ",%" PRIu64, (uint64_t)(v))
#define D_FMT(v) fprintf(f, ",%.9g", (double)(v))
#define RX(k, t, fmt, v) t##_FMT(v);
		RESULT_COLS(RX)
#undef RX
#undef U_FMT
#undef D_FMT
	}
	fputc('\n', f);
}

int strata_exp_csv_tag_cmp(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

int strata_exp_csv_reserved(const char *name)
{
	for (size_t i = 0; i < 3; i++)
		if (!strcmp(name, fixed_cols[i]))
			return 1;
	return 0;
}

/* strata_csv_split for results rows: at most max fields, and a torn line (an
 * unterminated quote, as an interrupted write leaves) has none. */
int strata_exp_csv_split(char *line, char **fields, int max)
{
	int n = strata_csv_split(line, ',', fields, (size_t)max, NULL);
	return n < 0 ? 0 : n > max ? max : n;
}

char *strata_exp_csv_read_line(FILE *f)
{
	size_t cap = 0;
	char *line = NULL;
	ssize_t got = getline(&line, &cap, f);
	if (got < 0) {
		free(line);
		return NULL;
	}
	return line;
}

void strata_exp_csv_kept_free(struct strata_exp_kept *k)
{
	for (size_t i = 0; i < k->n; i++) {
		free(k->ids[i]);
		free(k->lines[i]);
	}
	free(k->ids);
	free(k->lines);
	memset(k, 0, sizeof(*k));
}

const char *strata_exp_csv_kept_find(const struct strata_exp_kept *k, const char *id)
{
	for (size_t i = 0; i < k->n; i++)
		if (!strcmp(k->ids[i], id))
			return k->lines[i];
	return NULL;
}

/* Returns 0, or a message in err (header mismatch, I/O). */
int strata_exp_csv_load(const char *path, const char *header, struct strata_exp_kept *k, struct strata_error *err)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? STRATA_OK : STRATA_ERRNO(err, STRATA_EIO, "%s: cannot open", path);
	char *head = strata_exp_csv_read_line(f);
	int rc = STRATA_OK;
	if (head && strcmp(head, header)) {
		rc = STRATA_ERR(err, STRATA_EINVAL,
				"%s: its columns differ from this sweep's (another sweep wrote it?): remove it, "
				"use another `out`, or run with --fresh",
				path);
	}
	char *line;
	while (!rc && head && (line = strata_exp_csv_read_line(f))) {
		/* A last line without its newline is a row torn by a crash: its
		 * counters may be cut short, so run that configuration again. */
		size_t len = strlen(line);
		char *copy = len && line[len - 1] == '\n' ? strdup(line) : NULL, *fields[3];
		int n = copy ? strata_exp_csv_split(copy, fields, 3) : 0;
		if (n >= 2 && !strcmp(fields[1], "ok") && !strata_exp_csv_kept_find(k, fields[0])) {
			if (k->n == k->cap) {
				k->cap = k->cap ? 2 * k->cap : 64;
				char **a = realloc(k->ids, k->cap * sizeof(char *));
				char **b = a ? realloc(k->lines, k->cap * sizeof(char *)) : NULL;
				if (a)
					k->ids = a;
				if (b)
					k->lines = b;
				if (!a || !b) {
					free(copy);
					free(line);
					rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
					break;
				}
			}
			k->ids[k->n] = strdup(fields[0]);
			k->lines[k->n] = line;
			k->n++;
			line = NULL;
		}
		free(copy);
		free(line);
	}
	free(head);
	fclose(f);
	return rc;
}

/* Rewrite path as header + kept lines (whole or not at all). */
int strata_exp_csv_rewrite(const char *path, const char *header, const struct strata_exp_kept *k, struct strata_error *err)
{
	struct strata_outfile o;
	int rc = strata_outfile_open(&o, path, 0, err);
	if (rc)
		return rc;
	fputs(header, o.f);
	for (size_t i = 0; i < k->n; i++)
		fputs(k->lines[i], o.f);
	return strata_outfile_commit(&o, err);
}

/* Make the folders above path. */
void strata_exp_csv_make_parents(const char *path)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(buf, 0777);
			*p = '/';
		}
}
