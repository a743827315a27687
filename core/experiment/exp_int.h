/*
 * Inside the experiment runner (core/experiment/, core/lua/experiment.c):
 * the results CSV (csv.c), the fork pool (pool.c) and job export (jobs.c).
 * Not a contract: the public API is strata/experiment.h.
 */
#ifndef STRATA_EXP_INT_H
#define STRATA_EXP_INT_H

#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/experiment.h"
#include "strata/replay.h"

/* The result columns: `strata replay --csv`'s (strata/replay.h). */
#define RESULT_COLS(X) STRATA_REPLAY_COLUMNS(X)
/* Seconds an interrupted sweep gives its workers to stop before SIGKILL. */
#define STRATA_EXP_STOP_GRACE_S 5

/* A finished run: the result, or the error. */
struct strata_exp_outcome {
	int done;                 /* 1 once finished (ok or error) */
	int resumed;              /* taken from an existing CSV */
	int rc;
	struct strata_error err;
	struct strata_replay_result res;
};

/* ---- the results CSV (csv.c) ---- */

/* Fields are written with strata_csv_write_field (strata/csv.h).  Split a
 * results line in place: at most max fields; a torn line has none. */
int strata_exp_csv_split(char *line, char **fields, int max);
/* One line with its newline (getline), NULL at EOF; free() it. */
char *strata_exp_csv_read_line(FILE *f);
/* The header: run_id,status,error, the tag columns, the result columns. */
void strata_exp_csv_header(FILE *f, const struct strata_experiment_config *tags_of, char tagcols[][48],
			   uint32_t n_tagcols);
/* One row for outcome o of configuration c. */
void strata_exp_csv_row(FILE *f, const struct strata_experiment_config *c, const struct strata_exp_outcome *o,
			char tagcols[][48], uint32_t n_tagcols);
/* The policies as given, for the config column of a failed run. */
void strata_exp_csv_given_name(const struct strata_experiment_config *c, char *buf, size_t len);
/* 1 if name is a column every row has (not a tag). */
int strata_exp_csv_known_col(const char *name);
/* 1 if name is run_id, status or error (no tag may take it). */
int strata_exp_csv_reserved(const char *name);
/* qsort comparator of 48-byte tag names. */
int strata_exp_csv_tag_cmp(const void *a, const void *b);

/* Existing results: header must match; keep "ok" lines (raw) by run_id. */
struct strata_exp_kept {
	char **ids, **lines;
	size_t n, cap;
};
void strata_exp_csv_kept_free(struct strata_exp_kept *k);
const char *strata_exp_csv_kept_find(const struct strata_exp_kept *k, const char *id);
/* The ok rows of an existing results file whose header is header; a torn
 * last line is dropped.  A results file of other columns moves whole to
 * PATH.old-columns.csv, and its rows that have every column of header come
 * back (reordered), the others run again; a file that is not a results file
 * is an error naming it. */
int strata_exp_csv_load(const char *path, const char *header, struct strata_exp_kept *k, struct strata_error *err);
/* A file beside path for rows of this header: PATH+SUFFIX (".dropped.csv"),
 * else "-2", "-3", ... before ".csv" when it holds rows of other columns. */
void strata_exp_csv_side_file(const char *path, const char *suffix, const char *header, char *buf, size_t len);
/* Rewrite path as header + kept lines (whole or not at all). */
int strata_exp_csv_rewrite(const char *path, const char *header, const struct strata_exp_kept *k,
			   struct strata_error *err);
/* Make the folders above path. */
void strata_exp_csv_make_parents(const char *path);

/* ---- the fork pool (pool.c) ---- */

/* What a pool run did. */
struct strata_exp_pool_stats {
	size_t finished, failed;
	size_t warned;           /* ok runs with a warning (strata_replay_result.warning) */
	char warning[640];       /* the first such warning */
	int spawn_errno; /* a worker could not be started: errno */
	int write_errno; /* the first failed write of a row to the CSV: errno */
};
/*
 * Run every configuration not yet done (oc[i].done == 0) in up to jobs
 * forked workers; each finished run (ok or failed, not interrupted) lands in
 * oc[i] and, when csv is not NULL, as a row appended there at once.  Stops
 * starting runs on strata_interrupted or when a fork fails.  pending: runs to
 * do (for the progress line named what).
 */
void strata_exp_pool_run(const struct strata_experiment_config *cfg, struct strata_exp_outcome *oc, size_t n,
			 uint32_t jobs, FILE *csv, char tagcols[][48], uint32_t n_tagcols, const char *what,
			 size_t pending, struct strata_exp_pool_stats *st);

/* ---- job export (jobs.c) ---- */

/* Append to jobs_path one line per pending configuration: a self-contained
 * `strata run --one RUN_ID --out OUT.parts/HASH.csv`; *exported counts them. */
int strata_exp_jobs_export(const char *jobs_path, const struct strata_experiment_config *cfg,
			   const struct strata_exp_outcome *oc, size_t n, const char *out, size_t *exported,
			   struct strata_error *err);

#endif
