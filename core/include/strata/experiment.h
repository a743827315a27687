/*
 * Experiment scripts: `strata run experiments/<study>/run.lua [k=v ...]`.
 *
 * The script runs in a Lua state of the experiment profile (strata/lua.h:
 * the policy sandbox plus io and a few os functions, no instruction limit)
 * whose `strata` table holds the engine as a library:
 *
 *   strata.trace_gen{ path = ..., model = "qwen3-30b-a3b:layers=8", ... } -> path
 *   strata.run(cfg)                 -> row          (one run, in this process)
 *   strata.sweep{ configs = {...}, out = "results/x.csv", jobs = N } -> rows
 *   strata.product{ evict = {"lru", "lfu"}, vram = {"1G", "2G"} } -> configs
 *   strata.markdown(rows, columns)  -> text table
 *   strata.read_csv(path) / strata.write_csv(path, rows, columns)
 *   strata.args (k=v arguments), strata.script_dir, strata.cpus(), strata.jobs
 *
 * A configuration is a table: mode ("sim" | "replay"), model (shard
 * directory, or a model spec for sim), trace, vram, ram (bytes or "8G"),
 * place, evict, prefetch (policy specs), on_miss (precision on miss: "lowbit:gate=0.2";
 * strata/engine.h), seed, max_tokens, prefill_chunk,
 * hints, future, compute, cost (cost model JSON), mover, gpu, and tags
 * (a table of extra columns: { depth = 2 }).  Unknown keys are errors.
 *
 * A row has one column per counter of struct strata_replay_result plus
 * run_id (the configuration, canonical), status ("ok" | "error"), error (the
 * message of a failing run) and the tags.  A failing configuration gives an
 * error row and the sweep goes on.
 *
 * Sweeps run each configuration in a forked worker process (at most `jobs`
 * at once; a crash fails that row only), append each finished row to the
 * CSV at once, and on a second run skip every configuration whose run_id
 * already has an "ok" row (failed rows are retried): an interrupted sweep
 * resumes without redoing finished rows.
 */
#ifndef STRATA_EXPERIMENT_H
#define STRATA_EXPERIMENT_H

#include <stdint.h>

#include "strata/error.h"
#include "strata/replay.h"

#define STRATA_EXP_TAGS 16

/* One configuration, self-contained (plain arrays: it crosses fork()). */
struct strata_experiment_config {
	int virt;                    /* 1: sim (virtual clock), 0: replay (real engine) */
	char model[1024], trace[1024], cost[1024];
	char tiers[32], tier_trace[1024]; /* spec-only sim: split and ranking trace (strata/replay.h) */
	char formats[64];                 /* spec-only sim: each tier's format (strata/replay.h) */
	char place[256], evict[256], prefetch[512];
	char on_miss[256];           /* precision on miss (strata/engine.h), "" = full */
	char compute[16], mover[16], copy[16]; /* copy: RAM -> VRAM mode, "" = default */
	uint64_t vram, ram;          /* 0: the engine's default */
	uint64_t seed, max_tokens;
	uint32_t prefill_chunk;
	int hints, future, gpu;      /* gpu: -1 auto, 0, 1 */
	uint32_t n_tags;
	char tag_name[STRATA_EXP_TAGS][48], tag_value[STRATA_EXP_TAGS][160];
	/* content keys of the trace and of a model directory (16 hex digits, ""
	 * for a model given as a spec): rows are keyed on what the files hold,
	 * not on their paths, and a run checks them before it starts */
	char trace_sum[24], model_sum[24];
	char run_id[4096];           /* canonical text of everything above */
};
void strata_experiment_config_defaults(struct strata_experiment_config *c);
/* Fill c->run_id from the other fields. */
void strata_experiment_config_id(struct strata_experiment_config *c);

/* Run one configuration in this process. */
int strata_experiment_run_one(const struct strata_experiment_config *c, struct strata_replay_result *res,
			      struct strata_error *err);

/* Sweeps beyond one machine.  `strata run --export-jobs FILE run.lua`
 * makes every sweep append one shell line per configuration not yet in its
 * CSV instead of running it (the sweep returns rows with status "pending"):
 *   /path/to/strata run --one 'RUN_ID' --out 'OUT.parts/HASH.csv'
 * GNU parallel (`parallel < FILE`) or a Slurm array (line $SLURM_ARRAY_TASK_ID)
 * runs them anywhere the paths resolve; `strata run --merge OUT.csv
 * OUT.parts/HASH.csv ...` merges the rows, and running the script again resumes
 * from the merged CSV (builds its tables, runs what is still missing). */
/* Parse a run_id back into a configuration (it must be canonical). */
int strata_experiment_config_parse_id(const char *id, struct strata_experiment_config *c,
				      struct strata_error *err);
/* Run the configuration of run_id, write a one-row CSV (a failed run is an
 * error row, and still STRATA_OK). */
int strata_experiment_run_csv(const char *run_id, const char *out, struct strata_error *err);
/* Merge row CSVs (and out itself, if it exists) into out. */
int strata_experiment_merge(const char *out, char *const *parts, int n_parts, struct strata_error *err);

struct strata_experiment_opts {
	const char *script;
	int argc;          /* script arguments: "k=v" -> strata.args.k; all -> strata.args[i] */
	char **argv;
	uint32_t jobs;     /* worker processes per sweep; 0: the machine's cores */
	int fresh;         /* 1: ignore existing results (no resume) */
	const char *export_jobs; /* write job lines to this file instead of running */
	/* the script's Lua limits: 0 the defaults (STRATA_LUA_EXPERIMENT_*),
	 * UINT64_MAX none */
	uint64_t max_instructions, max_memory;
};

/* Run an experiment script.  STRATA_ESCRIPT for a script error (message
 * "run.lua:LINE: ..."), STRATA_EINTR when interrupted. */
int strata_experiment_main(const struct strata_experiment_opts *o, struct strata_error *err);

#endif
