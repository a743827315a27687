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

#define MAX_COLS 512

/* Keep line (taken over) as the row of run id (copied); -1: out of memory. */
static int kept_push(struct strata_exp_kept *k, const char *id, char *line)
{
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 64;
		char **a = realloc(k->ids, cap * sizeof(char *));
		if (a)
			k->ids = a;
		char **b = a ? realloc(k->lines, cap * sizeof(char *)) : NULL;
		if (b)
			k->lines = b;
		if (!a || !b)
			return -1;
		k->cap = cap;
	}
	char *d = strdup(id);
	if (!d)
		return -1;
	k->ids[k->n] = d;
	k->lines[k->n++] = line;
	return 0;
}

/* The names of a header line (split in place, its newline cut). */
static int header_names(char *h, char **names)
{
	size_t len = strlen(h);
	while (len && (h[len - 1] == '\n' || h[len - 1] == '\r'))
		h[--len] = '\0';
	return strata_exp_csv_split(h, names, MAX_COLS);
}

static int find_name(char *const *names, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return i;
	return -1;
}

/* "a, b, c" (the first few) into buf. */
static void list_names(char *buf, size_t len, char *const *names, const int *pick, int n)
{
	size_t w = 0;
	int shown = 0;
	buf[0] = '\0';
	for (int i = 0; i < n && w < len; i++) {
		if (!pick[i])
			continue;
		if (shown == 4) {
			snprintf(buf + w, len - w, ", ...");
			return;
		}
		w += (size_t)snprintf(buf + w, len - w, "%s%s", shown++ ? ", " : "", names[i]);
	}
}

/* The results file at path was written under other columns (an older Strata
 * with fewer counters, a script whose tags changed).  Nothing is lost: the
 * file moves whole to PATH.old-columns[-N].csv, and its ok rows that have
 * every column of this sweep's header come back in that header's order
 * (their configurations are not run again); the others run again.  *to
 * gets the new name. */
static int migrate(const char *path, FILE *f, char *old_head, const char *header, struct strata_exp_kept *k,
		   char *to, size_t to_len, struct strata_error *err)
{
	char *oldn[MAX_COLS], *newn[MAX_COLS];
	char *nh = strdup(header);
	if (!nh)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	int no = header_names(old_head, oldn), nn = header_names(nh, newn);
	int map[MAX_COLS], gone[MAX_COLS], added[MAX_COLS], complete = 1;
	for (int i = 0; i < nn; i++) {
		map[i] = find_name(oldn, no, newn[i]);
		added[i] = map[i] < 0;
		complete &= !added[i];
	}
	for (int i = 0; i < no; i++)
		gone[i] = find_name(newn, nn, oldn[i]) < 0;
	int rc = STRATA_OK;
	for (int n = 1; n < 1000; n++) { /* a free name beside it */
		struct stat st;
		snprintf(to, to_len, n == 1 ? "%s.old-columns.csv" : "%s.old-columns-%d.csv", path, n);
		if (stat(to, &st) && errno == ENOENT)
			break;
	}
	size_t carried = 0, rows = 0;
	char *line;
	while (!rc && (line = strata_exp_csv_read_line(f))) {
		size_t len = strlen(line);
		char *fields[MAX_COLS];
		int n = len && line[len - 1] == '\n' ? strata_exp_csv_split(line, fields, MAX_COLS) : 0;
		rows += len > 0;
		if (complete && n == no && !strcmp(fields[1], "ok") && !strata_exp_csv_kept_find(k, fields[0])) {
			char *out = NULL;
			size_t olen = 0;
			FILE *m = open_memstream(&out, &olen);
			for (int i = 0; m && i < nn; i++) {
				if (i)
					fputc(',', m);
				if (fields[map[i]][0]) /* an empty field as the writer leaves it: nothing */
					strata_csv_write_field(m, fields[map[i]]);
			}
			int bad = !m || fputc('\n', m) == EOF;
			if (m && fclose(m))
				bad = 1;
			if (bad || !out || kept_push(k, fields[0], out)) {
				free(out);
				rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
			} else {
				carried++;
			}
		}
		free(line);
	}
	if (!rc && rename(path, to))
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot move it to %s", path, to);
	if (!rc) {
		char a[256], g[256];
		list_names(a, sizeof(a), newn, added, nn);
		list_names(g, sizeof(g), oldn, gone, no);
		fprintf(stderr,
			"strata run: %s was written with other columns (%s%s%s%s%s): its %zu row%s moved to %s; "
			"%zu carried over (ok rows that have every column of this sweep), the rest run again\n",
			path, a[0] ? "new: " : "", a, a[0] && g[0] ? "; " : "", g[0] ? "gone: " : "", g, rows,
			rows == 1 ? "" : "s", to, carried);
	}
	free(nh);
	return rc;
}

/* Returns 0, or a message in err (not a results file, I/O).  A results
 * file written under other columns is migrated (see migrate). */
int strata_exp_csv_load(const char *path, const char *header, struct strata_exp_kept *k, struct strata_error *err)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? STRATA_OK : STRATA_ERRNO(err, STRATA_EIO, "%s: cannot open", path);
	char *head = strata_exp_csv_read_line(f);
	int rc = STRATA_OK;
	if (head && strcmp(head, header)) {
		if (strncmp(head, "run_id,status,error,", 20)) {
			rc = STRATA_ERR(err, STRATA_EINVAL,
					"%s: not a results file of strata run (its header does not start with "
					"run_id,status,error): remove it or use another `out`",
					path);
		} else {
			char to[4200];
			rc = migrate(path, f, head, header, k, to, sizeof(to), err);
			free(head);
			fclose(f);
			return rc;
		}
	}
	char *line;
	while (!rc && head && (line = strata_exp_csv_read_line(f))) {
		/* A last line without its newline is a row torn by a crash: its
		 * counters may be cut short, so run that configuration again. */
		size_t len = strlen(line);
		char *copy = len && line[len - 1] == '\n' ? strdup(line) : NULL, *fields[3];
		int n = copy ? strata_exp_csv_split(copy, fields, 3) : 0;
		if (n >= 2 && !strcmp(fields[1], "ok") && !strata_exp_csv_kept_find(k, fields[0])) {
			if (kept_push(k, fields[0], line)) {
				free(copy);
				free(line);
				rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
				break;
			}
			line = NULL;
		}
		free(copy);
		free(line);
	}
	free(head);
	fclose(f);
	return rc;
}

/* Into buf: PATH then SUFFIX (".dropped.csv"), or "-2", "-3", ... before the
 * ".csv" when that file exists with another header: rows appended to a file
 * keep its columns. */
void strata_exp_csv_side_file(const char *path, const char *suffix, const char *header, char *buf, size_t len)
{
	size_t sl = strlen(suffix), stem = sl > 4 && !strcmp(suffix + sl - 4, ".csv") ? sl - 4 : sl;
	for (int n = 1; n < 1000; n++) {
		if (n == 1)
			snprintf(buf, len, "%s%s", path, suffix);
		else
			snprintf(buf, len, "%s%.*s-%d%s", path, (int)stem, suffix, n, suffix + stem);
		FILE *f = fopen(buf, "r");
		if (!f)
			return;
		char *head = strata_exp_csv_read_line(f);
		fclose(f);
		int same = !head || !strcmp(head, header);
		free(head);
		if (same)
			return;
	}
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
