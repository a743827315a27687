/*
 * Sweeps beyond one machine (see strata/experiment.h): export one job line
 * per pending run, run one by run id into a one-row CSV, merge the parts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exp_int.h"
#include "strata/csv.h"
#include "strata/util.h"

/* Shell-quote s into f ('...' with ' as '\''). */
static void shell_quote(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputs("'\\''", f);
		else
			fputc(*s, f);
	}
	fputc('\'', f);
}

/* One line per pending configuration: a self-contained `strata run --one`
 * writing a one-row CSV under OUT.parts/, to merge with `strata run --merge`. */
int strata_exp_jobs_export(const char *jobs_path, const struct strata_experiment_config *cfg,
			   const struct strata_exp_outcome *oc, size_t n, const char *out, size_t *exported,
			   struct strata_error *err)
{
	/* The strata binary the job lines call: this one, unless $STRATA_EXE
	 * names another (a cluster's install path; the test suite). */
	char self[4096];
	const char *exe = getenv("STRATA_EXE");
	ssize_t sl = exe && *exe ? -1 : readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (exe && *exe)
		snprintf(self, sizeof(self), "%s", exe);
	else if (sl <= 0)
		snprintf(self, sizeof(self), "strata");
	else
		self[sl] = '\0';
	FILE *f = fopen(jobs_path, "a");
	if (!f)
		return STRATA_ERRNO(err, STRATA_EIO, "%s: cannot append", jobs_path);
	for (size_t i = 0; i < n; i++) {
		if (oc[i].done)
			continue;
		/* FNV-1a of the run_id names the part file: stable across exports. */
		uint64_t h = 1469598103934665603ull;
		for (const char *p = cfg[i].run_id; *p; p++)
			h = (h ^ (uint8_t)*p) * 1099511628211ull;
		char part[4200];
		snprintf(part, sizeof(part), "%s.parts/%016llx.csv", out ? out : "results.csv", (unsigned long long)h);
		shell_quote(f, self);
		fputs(" run --one ", f);
		shell_quote(f, cfg[i].run_id);
		fputs(" --out ", f);
		shell_quote(f, part);
		fputc('\n', f);
		(*exported)++;
	}
	int bad = ferror(f);
	if (fclose(f) || bad)
		return STRATA_ERRNO(err, STRATA_EIO, "%s: write failed", jobs_path);
	return STRATA_OK;
}

int strata_experiment_run_csv(const char *run_id, const char *out, struct strata_error *err)
{
	struct strata_experiment_config *c = malloc(sizeof(*c));
	struct strata_exp_outcome *o = calloc(1, sizeof(*o));
	int rc = c && o ? STRATA_OK : STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	if (!rc)
		rc = strata_experiment_config_parse_id(run_id, c, err);
	if (!rc) {
		o->rc = strata_experiment_run_one(c, &o->res, &o->err);
		if (o->rc == STRATA_EINTR)
			rc = STRATA_ERR(err, STRATA_EINTR, "interrupted");
	}
	if (!rc) {
		strata_exp_csv_make_parents(out);
		struct strata_outfile of;
		if (!(rc = strata_outfile_open(&of, out, 0, err))) {
			strata_exp_csv_header(of.f, c, c->tag_name, c->n_tags);
			strata_exp_csv_row(of.f, c, o, c->tag_name, c->n_tags);
			rc = strata_outfile_commit(&of, err);
		}
		if (!rc && o->rc)
			fprintf(stderr, "strata run: the run failed (its row says why): %s\n", o->err.msg);
	}
	free(c);
	free(o);
	return rc;
}

/* Merge CSVs of rows (parts, and out itself if it exists) into out: the
 * union of their tag columns, one row per run_id (an ok row wins over an
 * error row). */
int strata_experiment_merge(const char *out, char *const *parts, int n_parts, struct strata_error *err)
{
	enum { MAXC = 512 };
	int n_files = n_parts + 1, rc = STRATA_OK;
	const char **files = calloc((size_t)n_files, sizeof(*files));
	char(*tags)[48] = calloc(MAXC, 48);
	if (!files || !tags) {
		free(files);
		free(tags);
		return STRATA_ERR(err, STRATA_ENOMEM, "merge: out of memory");
	}
	int nf = 0;
	if (access(out, R_OK) == 0)
		files[nf++] = out;
	for (int i = 0; i < n_parts; i++)
		files[nf++] = parts[i];
	/* pass 1: tag columns */
	uint32_t n_tags = 0;
	for (int i = 0; i < nf && !rc; i++) {
		FILE *f = fopen(files[i], "r");
		if (!f) {
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot open", files[i]);
			break;
		}
		char *head = strata_exp_csv_read_line(f), *names[MAXC];
		fclose(f);
		int nn = head ? strata_exp_csv_split(head, names, MAXC) : 0;
		if (nn < 3 || strcmp(names[0], "run_id") || strcmp(names[1], "status"))
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: not a results CSV of strata run", files[i]);
		for (int k = 0; k < nn && !rc; k++) {
			if (strata_exp_csv_known_col(names[k]))
				continue;
			uint32_t j = 0;
			while (j < n_tags && strcmp(tags[j], names[k]))
				j++;
			if (j == n_tags && n_tags < MAXC)
				snprintf(tags[n_tags++], 48, "%s", names[k]);
		}
		free(head);
	}
	qsort(tags, n_tags, 48, strata_exp_csv_tag_cmp);
	char *header = NULL, *body = NULL;
	size_t hlen = 0, blen = 0;
	FILE *hf = open_memstream(&header, &hlen);
	if (hf) {
		strata_exp_csv_header(hf, NULL, tags, n_tags);
		fclose(hf);
	}
	/* output column names */
	char *hcopy = header ? strdup(header) : NULL, *outcols[MAXC];
	int n_out = hcopy ? strata_exp_csv_split(hcopy, outcols, MAXC) : 0;
	/* pass 2: rows, keyed by run_id */
	struct strata_exp_kept rows = { 0 };
	char **status = NULL;
	for (int i = 0; i < nf && !rc && hcopy; i++) {
		FILE *f = fopen(files[i], "r");
		if (!f) {
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot open", files[i]);
			break;
		}
		char *head = strata_exp_csv_read_line(f), *names[MAXC], *line;
		int nn = strata_exp_csv_split(head, names, MAXC);
		while ((line = strata_exp_csv_read_line(f))) {
			char *vals[MAXC];
			int nv = strata_exp_csv_split(line, vals, MAXC);
			if (nv < 2 || !vals[0][0]) {
				free(line);
				continue;
			}
			FILE *bf = open_memstream(&body, &blen);
			for (int c = 0; c < n_out && bf; c++) {
				const char *v = "";
				for (int k = 0; k < nn && k < nv; k++)
					if (!strcmp(names[k], outcols[c]))
						v = vals[k];
				if (c)
					fputc(',', bf);
				if (*v)
					strata_csv_write_field(bf, v);
			}
			if (bf) {
				fputc('\n', bf);
				fclose(bf);
			}
			int ok = !strcmp(vals[1], "ok");
			size_t at = rows.n;
			for (size_t r = 0; r < rows.n; r++)
				if (!strcmp(rows.ids[r], vals[0]))
					at = r;
			if (at < rows.n) {
				if (ok || strcmp(status[at], "ok")) { /* ok wins; else the later */
					free(rows.lines[at]);
					rows.lines[at] = body;
					free(status[at]);
					status[at] = strdup(vals[1]);
					body = NULL;
				}
			} else {
				if (rows.n == rows.cap) {
					rows.cap = rows.cap ? 2 * rows.cap : 64;
					rows.ids = realloc(rows.ids, rows.cap * sizeof(char *));
					rows.lines = realloc(rows.lines, rows.cap * sizeof(char *));
					status = realloc(status, rows.cap * sizeof(char *));
					if (!rows.ids || !rows.lines || !status) {
						free(line);
						fclose(f);
						free(head);
						free(header);
						free(hcopy);
						free(files);
						free(tags);
						return STRATA_ERR(err, STRATA_ENOMEM, "merge: out of memory");
					}
				}
				rows.ids[rows.n] = strdup(vals[0]);
				rows.lines[rows.n] = body;
				status[rows.n] = strdup(vals[1]);
				rows.n++;
				body = NULL;
			}
			free(body);
			body = NULL;
			free(line);
		}
		free(head);
		fclose(f);
	}
	if (!rc && header) {
		strata_exp_csv_make_parents(out);
		rc = strata_exp_csv_rewrite(out, header, &rows, err);
	}
	if (!rc)
		fprintf(stderr, "strata run: merged %zu rows from %d files into %s\n", rows.n, nf, out);
	for (size_t r = 0; r < rows.n; r++)
		free(status[r]);
	free(status);
	strata_exp_csv_kept_free(&rows);
	free(header);
	free(hcopy);
	free(files);
	free(tags);
	return rc;
}
