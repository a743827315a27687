/*
 * Experiment scripts (see include/strata/experiment.h): the engine as a Lua
 * library (strata.run, strata.sweep, strata.read_csv, strata.trace_gen).
 * Configurations and run ids are in core/experiment/config.c, the results
 * CSV in csv.c, the fork pool in pool.c, job export and merging in jobs.c.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "../experiment/exp_int.h"
#include "strata/experiment.h"
#include "strata/lua.h"
#include "strata/trace.h"
#include "strata/util.h"

/* Push a row table for outcome o of config c. */
static void push_row(lua_State *L, const struct strata_experiment_config *c, const struct strata_exp_outcome *o)
{
	lua_createtable(L, 0, 56);
	lua_pushstring(L, c->run_id);
	lua_setfield(L, -2, "run_id");
	lua_pushstring(L, o->rc ? "error" : "ok");
	lua_setfield(L, -2, "status");
	if (o->rc) {
		lua_pushstring(L, o->err.msg[0] ? o->err.msg : strata_status_name(o->rc));
		lua_setfield(L, -2, "error");
	}
	for (uint32_t i = 0; i < c->n_tags; i++) {
		const char *v = c->tag_value[i];
		if (!lua_stringtonumber(L, v))
			lua_pushstring(L, v);
		lua_setfield(L, -2, c->tag_name[i]);
	}
	lua_pushstring(L, c->virt ? "sim" : "replay");
	lua_setfield(L, -2, "mode");
	lua_pushstring(L, o->rc ? c->compute : strata_compute_name(o->res.compute));
	lua_setfield(L, -2, "compute");
	lua_pushstring(L, c->trace);
	lua_setfield(L, -2, "trace");
	if (o->rc) {
		char name[1200];
		strata_exp_csv_given_name(c, name, sizeof(name));
		lua_pushstring(L, name);
		lua_setfield(L, -2, "config");
		lua_pushstring(L, c->model);
		lua_setfield(L, -2, "model");
		lua_pushinteger(L, (lua_Integer)c->seed);
		lua_setfield(L, -2, "seed");
		lua_pushinteger(L, (lua_Integer)c->vram);
		lua_setfield(L, -2, "vram_bytes");
		lua_pushinteger(L, (lua_Integer)c->ram);
		lua_setfield(L, -2, "ram_bytes");
		return;
	}
	const struct strata_replay_result *r = &o->res;
	const struct strata_engine_stats *s = &r->stats;
	lua_pushstring(L, r->name);
	lua_setfield(L, -2, "config");
	lua_pushstring(L, r->model);
	lua_setfield(L, -2, "model");
	lua_pushinteger(L, (lua_Integer)r->seed);
	lua_setfield(L, -2, "seed");
	lua_pushinteger(L, (lua_Integer)r->budget[0]);
	lua_setfield(L, -2, "vram_bytes");
	lua_pushinteger(L, (lua_Integer)r->budget[1]);
	lua_setfield(L, -2, "ram_bytes");
#define U_PUSH(v) lua_pushinteger(L, (lua_Integer)(v))
#define D_PUSH(v) lua_pushnumber(L, (double)(v))
#define LX(k, t, fmt, v) t##_PUSH(v), lua_setfield(L, -2, k);
	RESULT_COLS(LX)
#undef LX
#undef U_PUSH
#undef D_PUSH
}

/* Set the fields of one CSV row on the table at the top of the stack: each
 * non-empty value under its header name, a number where it reads as one. */
static void set_csv_fields(lua_State *L, char *const *names, int nn, char *const *vals, int nv)
{
	for (int i = 0; i < nn && i < nv; i++) {
		if (!vals[i][0])
			continue;
		if (!lua_stringtonumber(L, vals[i]))
			lua_pushstring(L, vals[i]);
		lua_setfield(L, -2, names[i]);
	}
}

/* strata.read_csv(path) -> list of row tables (numbers where a field reads as one) */
static int l_read_csv(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	FILE *f = fopen(path, "r");
	if (!f)
		return luaL_error(L, "%s: cannot open: %s", path, strerror(errno));
	char *head = strata_exp_csv_read_line(f);
	if (!head) {
		fclose(f);
		lua_newtable(L);
		return 1;
	}
	char *names[512], *vals[512];
	int nn = strata_exp_csv_split(head, names, 512);
	lua_newtable(L);
	lua_Integer row = 0;
	char *line;
	while ((line = strata_exp_csv_read_line(f))) {
		int nv = strata_exp_csv_split(line, vals, 512);
		if (nv == 1 && !vals[0][0]) {
			free(line);
			continue;
		}
		lua_createtable(L, 0, nn);
		set_csv_fields(L, names, nn, vals, nv);
		lua_rawseti(L, -2, ++row);
		free(line);
	}
	free(head);
	fclose(f);
	return 1;
}

/* ---- reading a configuration table ---- */

static void copy_str(lua_State *L, int idx, const char *key, char *dst, size_t len)
{
	size_t n;
	const char *s = lua_tolstring(L, idx, &n);
	if (!s)
		luaL_error(L, "config key '%s': a string expected, got %s", key, luaL_typename(L, idx));
	if (n >= len)
		luaL_error(L, "config key '%s': longer than %d bytes", key, (int)len - 1);
	memcpy(dst, s, n + 1);
}

static uint64_t get_size(lua_State *L, int idx, const char *key)
{
	if (lua_isinteger(L, idx)) {
		lua_Integer v = lua_tointeger(L, idx);
		if (v < 0)
			luaL_error(L, "config key '%s': negative", key);
		return (uint64_t)v;
	}
	if (lua_type(L, idx) == LUA_TNUMBER) {
		double d = lua_tonumber(L, idx);
		if (d < 0 || d > 1.8e19)
			luaL_error(L, "config key '%s': out of range", key);
		return (uint64_t)d;
	}
	struct strata_error err = { 0 };
	uint64_t v;
	if (lua_type(L, idx) != LUA_TSTRING || strata_parse_size(lua_tostring(L, idx), &v, &err))
		luaL_error(L, "config key '%s': a size expected (bytes or \"8G\")%s%s", key, err.msg[0] ? ": " : "",
			   err.msg);
	return v;
}

static uint64_t get_uint(lua_State *L, int idx, const char *key)
{
	int ok;
	lua_Integer v = lua_tointegerx(L, idx, &ok);
	if (!ok || v < 0)
		luaL_error(L, "config key '%s': a non-negative integer expected", key);
	return (uint64_t)v;
}

/* The configuration keys that are plain strings, copied as they are. */
#define STRING_KEY(name) { #name, offsetof(struct strata_experiment_config, name), \
			   sizeof(((struct strata_experiment_config *)0)->name) }
static const struct string_key {
	const char *name;
	size_t offset, size;
} string_keys[] = {
	STRING_KEY(model), STRING_KEY(trace), STRING_KEY(cost), STRING_KEY(tiers), STRING_KEY(tier_trace),
	STRING_KEY(formats),
	STRING_KEY(place), STRING_KEY(evict), STRING_KEY(prefetch), STRING_KEY(compute), STRING_KEY(mover),
	STRING_KEY(copy), STRING_KEY(on_miss),
};

static const struct string_key *string_field(const char *k)
{
	for (size_t i = 0; i < sizeof(string_keys) / sizeof(string_keys[0]); i++)
		if (!strcmp(k, string_keys[i].name))
			return &string_keys[i];
	return NULL;
}

/* Read the configuration table at idx into c (raises on a bad one). */
static void read_config(lua_State *L, int idx, struct strata_experiment_config *c)
{
	idx = lua_absindex(L, idx);
	luaL_checktype(L, idx, LUA_TTABLE);
	strata_experiment_config_defaults(c);
	int have_model = 0, have_trace = 0;
	const struct string_key *sf;
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		if (lua_type(L, -2) != LUA_TSTRING)
			luaL_error(L, "config: keys must be names");
		const char *k = lua_tostring(L, -2);
		if (!strcmp(k, "mode")) {
			const char *m = lua_tostring(L, -1);
			if (!m || (strcmp(m, "sim") && strcmp(m, "replay")))
				luaL_error(L, "config key 'mode': \"sim\" or \"replay\"");
			c->virt = !strcmp(m, "sim");
		} else if ((sf = string_field(k))) {
			copy_str(L, -1, k, (char *)c + sf->offset, sf->size);
			have_model |= !strcmp(k, "model");
			have_trace |= !strcmp(k, "trace");
		} else if (!strcmp(k, "vram")) {
			c->vram = get_size(L, -1, k);
		} else if (!strcmp(k, "ram")) {
			c->ram = get_size(L, -1, k);
		} else if (!strcmp(k, "seed")) {
			c->seed = get_uint(L, -1, k);
		} else if (!strcmp(k, "max_tokens")) {
			c->max_tokens = get_uint(L, -1, k);
		} else if (!strcmp(k, "prefill_chunk")) {
			c->prefill_chunk = (uint32_t)get_uint(L, -1, k);
		} else if (!strcmp(k, "hints")) {
			c->hints = lua_toboolean(L, -1);
		} else if (!strcmp(k, "future")) {
			c->future = lua_toboolean(L, -1);
		} else if (!strcmp(k, "gpu")) {
			if (lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "auto"))
				c->gpu = -1;
			else
				c->gpu = lua_toboolean(L, -1) && !(lua_isinteger(L, -1) && !lua_tointeger(L, -1));
		} else if (!strcmp(k, "tags")) {
			luaL_checktype(L, -1, LUA_TTABLE);
			lua_pushnil(L);
			while (lua_next(L, -2)) {
				if (lua_type(L, -2) != LUA_TSTRING)
					luaL_error(L, "config tags: keys must be names");
				if (c->n_tags == STRATA_EXP_TAGS)
					luaL_error(L, "config tags: at most %d", STRATA_EXP_TAGS);
				const char *tn = lua_tostring(L, -2);
				if (strlen(tn) >= sizeof(c->tag_name[0]) || !*tn)
					luaL_error(L, "config tags: bad name '%s'", tn);
				if (strata_exp_csv_reserved(tn))
					luaL_error(L, "config tags: '%s' is a reserved column", tn);
				snprintf(c->tag_name[c->n_tags], sizeof(c->tag_name[0]), "%s", tn);
				const char *tv = luaL_tolstring(L, -1, NULL);
				snprintf(c->tag_value[c->n_tags], sizeof(c->tag_value[0]), "%s", tv);
				lua_pop(L, 2);
				c->n_tags++;
			}
		} else {
			luaL_error(L, "config: unknown key '%s' (mode, model, trace, vram, ram, place, evict, prefetch, "
				      "on_miss, seed, max_tokens, prefill_chunk, hints, future, compute, cost, tiers, tier_trace, formats, mover, copy, "
				      "gpu, "
				      "tags)",
				   k);
		}
		lua_pop(L, 1);
	}
	if (!have_model || !have_trace)
		luaL_error(L, "config: needs model and trace");
	/* Tags in name order: the run_id must not depend on table iteration. */
	for (uint32_t i = 1; i < c->n_tags; i++)
		for (uint32_t j = i; j > 0 && strcmp(c->tag_name[j - 1], c->tag_name[j]) > 0; j--) {
			char tn[48], tv[160];
			memcpy(tn, c->tag_name[j], sizeof(tn));
			memcpy(tv, c->tag_value[j], sizeof(tv));
			memcpy(c->tag_name[j], c->tag_name[j - 1], sizeof(tn));
			memcpy(c->tag_value[j], c->tag_value[j - 1], sizeof(tv));
			memcpy(c->tag_name[j - 1], tn, sizeof(tn));
			memcpy(c->tag_value[j - 1], tv, sizeof(tv));
		}
	strata_experiment_config_id(c);
}

struct exp_global {
	uint32_t jobs;
	int fresh;
	const char *export_jobs; /* write job lines instead of running */
	size_t exported;
	/* the script stopped on its arguments: help printed (done), or a usage
	 * error reported as one line, without the Lua traceback */
	int done;
	char usage[640];
};

static struct exp_global *global_of(lua_State *L)
{
	return lua_touserdata(L, lua_upvalueindex(1));
}

/* strata._usage([message]): stop the script on its arguments.  With a
 * message, `strata run` fails with that one line (no traceback: the script
 * is not at fault, the command line is); without, the script's help was
 * printed and the run ends with success. */
static int l_usage(lua_State *L)
{
	struct exp_global *g = global_of(L);
	if (lua_isnoneornil(L, 1))
		g->done = 1;
	else
		snprintf(g->usage, sizeof(g->usage), "%s", luaL_checkstring(L, 1));
	return luaL_error(L, "%s", g->done ? "help printed" : g->usage);
}

/* ---- strata.run ---- */

/* key=value arguments given to a script that never declared its arguments
 * (strata.arguments{...}) stop it before it runs anything: a typo such as
 * polices=lru must not silently run the default sweep. */
static void check_args_declared(lua_State *L)
{
	lua_getglobal(L, "strata");
	lua_getfield(L, -1, "_declared");
	int declared = !lua_isnil(L, -1);
	lua_pop(L, 1);
	lua_getfield(L, -1, "args");
	const char *given = NULL;
	lua_pushnil(L);
	while (!declared && !given && lua_next(L, -2)) {
		if (lua_type(L, -2) == LUA_TSTRING)
			given = lua_tostring(L, -2);
		lua_pop(L, 1);
	}
	if (given) {
		struct exp_global *g = global_of(L);
		snprintf(g->usage, sizeof(g->usage), "argument '%s=' given, but this script does not declare its "
			 "arguments: it must call strata.arguments{ name = \"help\", ... } first", given);
		luaL_error(L, "%s", g->usage);
	}
	lua_pop(L, given ? 3 : 2);
}

/* strata._closest(word, {names}) -> the likely intended name or nil */
static int l_closest(lua_State *L)
{
	size_t len;
	const char *w = luaL_checklstring(L, 1, &len);
	luaL_checktype(L, 2, LUA_TTABLE);
	const char *names[256];
	size_t n = 0;
	for (lua_Integer i = 1; n < 256; i++, n++) {
		lua_rawgeti(L, 2, i);
		if (lua_type(L, -1) != LUA_TSTRING) {
			lua_pop(L, 1);
			break;
		}
		names[n] = lua_tostring(L, -1); /* kept alive by the table */
		lua_pop(L, 1);
	}
	const char *best = strata_closest_name(w, len, names, n);
	if (best)
		lua_pushstring(L, best);
	else
		lua_pushnil(L);
	return 1;
}

static int l_run(lua_State *L)
{
	check_args_declared(L);
	struct strata_experiment_config *c = lua_newuserdatauv(L, sizeof(*c), 0);
	read_config(L, 1, c);
	struct strata_exp_outcome *o = lua_newuserdatauv(L, sizeof(*o), 0);
	memset(o, 0, sizeof(*o));
	o->rc = strata_experiment_run_one(c, &o->res, &o->err);
	o->done = 1;
	push_row(L, c, o);
	return 1;
}

/* ---- strata.sweep ---- */

/* Parse one CSV line (a kept row) into a Lua table with the header's names. */
static void push_kept_row(lua_State *L, const char *header, const char *line)
{
	char *h = strdup(header), *l = strdup(line);
	char *names[512], *vals[512];
	lua_newtable(L);
	if (!h || !l) {
		free(h);
		free(l);
		return;
	}
	int nn = strata_exp_csv_split(h, names, 512), nv = strata_exp_csv_split(l, vals, 512);
	set_csv_fields(L, names, nn, vals, nv);
	free(h);
	free(l);
}

/* Rows in configuration order: the kept ones as read, the others from
 * their outcome (or "pending" for exported jobs). */
static void push_rows(lua_State *L, const struct strata_experiment_config *cfg, const struct strata_exp_outcome *oc,
		      size_t n, const char *header, const struct strata_exp_kept *kept, int exported)
{
	lua_createtable(L, (int)n, 0);
	for (size_t i = 0; i < n; i++) {
		if (oc[i].resumed) {
			push_kept_row(L, header, strata_exp_csv_kept_find(kept, cfg[i].run_id));
		} else if (!exported) {
			push_row(L, &cfg[i], &oc[i]);
		} else {
			lua_createtable(L, 0, 4);
			lua_pushstring(L, cfg[i].run_id);
			lua_setfield(L, -2, "run_id");
			lua_pushstring(L, "pending");
			lua_setfield(L, -2, "status");
			for (uint32_t t = 0; t < cfg[i].n_tags; t++) {
				if (!lua_stringtonumber(L, cfg[i].tag_value[t]))
					lua_pushstring(L, cfg[i].tag_value[t]);
				lua_setfield(L, -2, cfg[i].tag_name[t]);
			}
			char name[1200];
			strata_exp_csv_given_name(&cfg[i], name, sizeof(name));
			lua_pushstring(L, name);
			lua_setfield(L, -2, "config");
		}
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
}

/* Keep only rows of this sweep's configurations: rows of configurations a
 * script no longer runs would mislead a reader.  They are moved to
 * OUT.dropped.csv, not lost.  Then rewrite out with the kept rows. */
static int prune_kept(const char *out, const char *header, const struct strata_experiment_config *cfg, size_t n,
		      struct strata_exp_kept *kept, struct strata_error *err)
{
	int rc = STRATA_OK;
	size_t w = 0, n_dropped = 0;
	struct strata_outfile dr = { .fd = -1 };
	char drop_path[4200];
	strata_exp_csv_side_file(out, ".dropped.csv", header, drop_path, sizeof(drop_path));
	for (size_t i = 0; i < kept->n; i++) {
		int mine = 0;
		for (size_t j = 0; j < n && !mine; j++)
			mine = !strcmp(kept->ids[i], cfg[j].run_id);
		if (mine) {
			kept->ids[w] = kept->ids[i];
			kept->lines[w++] = kept->lines[i];
			continue;
		}
		if (!rc && !n_dropped++ && !(rc = strata_outfile_open(&dr, drop_path, 1, err)) && !dr.existing)
			fputs(header, dr.f);
		if (!rc)
			fputs(kept->lines[i], dr.f);
		free(kept->ids[i]);
		free(kept->lines[i]);
	}
	kept->n = w;
	if (!rc && n_dropped) {
		rc = strata_outfile_commit(&dr, err);
		if (!rc)
			fprintf(stderr, "strata run: %zu row%s of configurations this sweep no longer runs moved to %s\n",
				n_dropped, n_dropped == 1 ? "" : "s", drop_path);
	} else if (dr.f) {
		strata_outfile_abort(&dr);
	}
	if (!rc)
		rc = strata_exp_csv_rewrite(out, header, kept, err);
	return rc;
}

static int l_sweep(lua_State *L)
{
	check_args_declared(L);
	struct exp_global *g = global_of(L);
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_getfield(L, 1, "configs");
	luaL_checktype(L, -1, LUA_TTABLE);
	int cfgs = lua_gettop(L);
	size_t n = (size_t)luaL_len(L, cfgs);
	lua_getfield(L, 1, "out");
	const char *out = lua_tostring(L, -1);
	lua_getfield(L, 1, "jobs");
	lua_Integer jv = lua_isnil(L, -1) ? (lua_Integer)g->jobs : luaL_checkinteger(L, -1);
	if (jv < 0 || jv > 1024)
		return luaL_error(L, "sweep: jobs must be 1..1024");
	uint32_t jobs = (uint32_t)jv;
	lua_getfield(L, 1, "resume");
	int resume = lua_isnil(L, -1) ? !g->fresh : lua_toboolean(L, -1) && !g->fresh;
	lua_getfield(L, 1, "name");
	const char *what = lua_isnil(L, -1) ? "sweep" : luaL_checkstring(L, -1);
	if (!jobs) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		jobs = c > 0 ? (uint32_t)c : 1;
	}
	if (jobs > 1024)
		return luaL_error(L, "sweep: jobs must be 1..1024");

	/* Configurations and outcomes live in userdata: a Lua error frees them. */
	struct strata_experiment_config *cfg = lua_newuserdatauv(L, (n ? n : 1) * sizeof(*cfg), 0);
	struct strata_exp_outcome *oc = lua_newuserdatauv(L, (n ? n : 1) * sizeof(*oc), 0);
	memset(oc, 0, (n ? n : 1) * sizeof(*oc));
	for (size_t i = 0; i < n; i++) {
		lua_geti(L, cfgs, (lua_Integer)i + 1);
		if (!lua_istable(L, -1))
			return luaL_error(L, "sweep: configs[%d] is not a table", (int)i + 1);
		read_config(L, -1, &cfg[i]);
		lua_pop(L, 1);
	}
	/* Tag columns: the union of every config's tags, sorted. */
	char (*tagcols)[48] = lua_newuserdatauv(L, (size_t)STRATA_EXP_TAGS * (n ? n : 1) * 48, 0);
	uint32_t n_tagcols = 0;
	for (size_t i = 0; i < n; i++)
		for (uint32_t t = 0; t < cfg[i].n_tags; t++) {
			uint32_t j = 0;
			while (j < n_tagcols && strcmp(tagcols[j], cfg[i].tag_name[t]))
				j++;
			if (j == n_tagcols)
				memcpy(tagcols[n_tagcols++], cfg[i].tag_name[t], 48);
		}
	qsort(tagcols, n_tagcols, 48, strata_exp_csv_tag_cmp);
	char *header = NULL;
	size_t hlen = 0;
	FILE *hf = open_memstream(&header, &hlen);
	if (!hf)
		return luaL_error(L, "sweep: out of memory");
	strata_exp_csv_header(hf, NULL, tagcols, n_tagcols);
	fclose(hf);

	/* From here every exit goes through `done`, which frees what is held
	 * and raises the message in msg, if any. */
	struct strata_exp_kept kept = { 0 };
	struct strata_error err = { 0 };
	struct strata_exp_pool_stats ps = { 0 };
	char msg[sizeof(err.msg) + 64] = "";
	FILE *csv = NULL;
	int rc = STRATA_OK, exported = 0;
	if (out) {
		strata_exp_csv_make_parents(out);
		if (resume)
			rc = strata_exp_csv_load(out, header, &kept, &err);
		if (!rc)
			rc = prune_kept(out, header, cfg, n, &kept, &err);
		if (!rc && !(csv = fopen(out, "a")))
			rc = STRATA_ERRNO(&err, STRATA_EIO, "%s: cannot append", out);
	}
	if (rc) {
		snprintf(msg, sizeof(msg), "%s", err.msg);
		goto done;
	}
	size_t pending = 0;
	for (size_t i = 0; i < n; i++) {
		if (strata_exp_csv_kept_find(&kept, cfg[i].run_id))
			oc[i].done = oc[i].resumed = 1;
		else
			pending++;
	}
	if (n - pending)
		fprintf(stderr, "strata run: %s: %zu of %zu rows already in %s, %zu to run\n", what, n - pending, n,
			out, pending);

	if (g->export_jobs) {
		if (csv)
			fclose(csv);
		csv = NULL;
		if ((rc = strata_exp_jobs_export(g->export_jobs, cfg, oc, n, out, &g->exported, &err)))
			snprintf(msg, sizeof(msg), "%s", err.msg);
		exported = 1;
		goto done;
	}
	strata_exp_pool_run(cfg, oc, n, jobs, csv, tagcols, n_tagcols, what, pending, &ps);
	int close_errno = ps.write_errno;
	if (csv) {
		errno = 0;
		int bad = ferror(csv) | fclose(csv);
		if (bad && !close_errno)
			close_errno = errno ? errno : EIO;
	}
	csv = NULL;
	if (strata_interrupted)
		snprintf(msg, sizeof(msg), "%s: interrupted after %zu of %zu runs (run again to resume)", what,
			 ps.finished, pending);
	else if (ps.spawn_errno)
		snprintf(msg, sizeof(msg), "%s: cannot start a worker: %s", what, strerror(ps.spawn_errno));
	else if (close_errno)
		snprintf(msg, sizeof(msg), "%s: write failed: %s", out, strerror(close_errno));
done:
	if (csv)
		fclose(csv);
	if (!msg[0])
		push_rows(L, cfg, oc, n, header, &kept, exported);
	strata_exp_csv_kept_free(&kept);
	free(header);
	if (msg[0])
		return luaL_error(L, "%s", msg);
	if (ps.failed)
		fprintf(stderr, "strata run: %s: %zu of %zu runs failed (see their rows)\n", what, ps.failed,
			ps.finished);
	return 1;
}

/* ---- strata.trace_gen ---- */

static int l_trace_gen(lua_State *L)
{
	check_args_declared(L);
	luaL_checktype(L, 1, LUA_TTABLE);
	struct strata_trace_gen_config c;
	strata_trace_gen_defaults(&c);
	struct strata_model_spec spec;
	char model_name[STRATA_NAME_MAX + 8];
	const char *path = NULL;
	int reuse = 0;
	lua_pushnil(L);
	while (lua_next(L, 1)) {
		const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
		if (!strcmp(k, "path")) {
			path = luaL_checkstring(L, -1);
		} else if (!strcmp(k, "model")) {
			struct strata_error err = { 0 };
			if (strata_model_spec_parse(luaL_checkstring(L, -1), &spec, &err))
				return luaL_error(L, "trace_gen: %s", err.msg);
			c.n_moe_layers = spec.n_moe_layers;
			c.n_experts = spec.n_experts;
			c.top_k = spec.top_k;
			snprintf(model_name, sizeof(model_name), "%s", spec.name);
			c.model = model_name;
		}
#define UINT_KEY(name, field)                                                         \
	else if (!strcmp(k, name)) c.field = (__typeof__(c.field))get_uint(L, -1, name);
#define NUM_KEY(name, field) else if (!strcmp(k, name)) c.field = luaL_checknumber(L, -1);
#define BOOL_KEY(name, field) else if (!strcmp(k, name)) c.field = lua_toboolean(L, -1);
		UINT_KEY("layers", n_moe_layers)
		UINT_KEY("experts", n_experts)
		UINT_KEY("top_k", top_k)
		UINT_KEY("seed", seed)
		UINT_KEY("requests", requests)
		UINT_KEY("prompt", prompt_len)
		UINT_KEY("gen", gen_len)
		UINT_KEY("window", reuse_window)
		UINT_KEY("pred_depth", pred_depth)
		UINT_KEY("pred_topn", pred_topn)
		NUM_KEY("jitter", len_jitter)
		NUM_KEY("alpha", zipf_alpha)
		NUM_KEY("reuse", reuse_prob)
		NUM_KEY("corr", layer_corr)
		NUM_KEY("pred_accuracy", pred_accuracy)
		BOOL_KEY("interleave", interleave)
		BOOL_KEY("weights", weights)
		else if (!strcmp(k, "reuse_file")) reuse = lua_toboolean(L, -1);
		else return luaL_error(L, "trace_gen: unknown key '%s' (path, model, layers, experts, top_k, seed, "
					  "requests, prompt, gen, jitter, alpha, reuse, window, corr, pred_depth, "
					  "pred_topn, pred_accuracy, interleave, weights, reuse_file)", k);
#undef UINT_KEY
#undef NUM_KEY
#undef BOOL_KEY
		lua_pop(L, 1);
	}
	if (!path)
		return luaL_error(L, "trace_gen: needs path");
	if (c.pred_depth && !c.pred_topn)
		c.pred_topn = c.top_k; /* as `strata trace gen` */
	if (reuse && access(path, R_OK) == 0) {
		lua_pushstring(L, path);
		return 1;
	}
	strata_exp_csv_make_parents(path);
	struct strata_error err = { 0 };
	if (strata_trace_gen(&c, path, STRATA_TRACE_FMT_AUTO, &err))
		return luaL_error(L, "trace_gen: %s", err.msg);
	lua_pushstring(L, path);
	return 1;
}

static int l_cpus(lua_State *L)
{
	long c = sysconf(_SC_NPROCESSORS_ONLN);
	lua_pushinteger(L, c > 0 ? c : 1);
	return 1;
}

/* Helpers written in Lua: tables and config products. */
static const char exp_prelude_lua[] =
	"local strata = strata\n"
	"-- strata.product{ a = {1, 2}, b = {'x', 'y'} } -> every combination, as\n"
	"-- tables { a = 1, b = 'x' }, ...; keys in name order, the last varying fastest.\n"
	"-- A `base` table, if given as the second argument, is copied into each.\n"
	"function strata.product(axes, base)\n"
	"  local keys = {}\n"
	"  for k in pairs(axes) do keys[#keys + 1] = k end\n"
	"  table.sort(keys)\n"
	"  local out = {}\n"
	"  local function rec(i, cur)\n"
	"    if i > #keys then\n"
	"      local t = {}\n"
	"      for k, v in pairs(base or {}) do t[k] = v end\n"
	"      for k, v in pairs(cur) do t[k] = v end\n"
	"      out[#out + 1] = t\n"
	"      return\n"
	"    end\n"
	"    for _, v in ipairs(axes[keys[i]]) do cur[keys[i]] = v; rec(i + 1, cur) end\n"
	"    cur[keys[i]] = nil\n"
	"  end\n"
	"  rec(1, {})\n"
	"  return out\n"
	"end\n"
	"local function cell(v, fmt)\n"
	"  if v == nil then return '' end\n"
	"  if math.type(v) == 'float' then return string.format(fmt or '%.4g', v) end\n"
	"  return tostring(v)\n"
	"end\n"
	"-- strata.markdown(rows, columns[, formats]) -> a markdown table; columns is a\n"
	"-- list of names, formats maps a name to a string.format pattern.\n"
	"function strata.markdown(rows, cols, fmts)\n"
	"  fmts = fmts or {}\n"
	"  local lines = { '| ' .. table.concat(cols, ' | ') .. ' |' }\n"
	"  local sep = {}\n"
	"  for i, c in ipairs(cols) do sep[i] = '---' end\n"
	"  lines[2] = '|' .. table.concat(sep, '|') .. '|'\n"
	"  for _, r in ipairs(rows) do\n"
	"    local t = {}\n"
	"    for i, c in ipairs(cols) do t[i] = (cell(r[c], fmts[c]):gsub('|', '\\\\|')) end\n"
	"    lines[#lines + 1] = '| ' .. table.concat(t, ' | ') .. ' |'\n"
	"  end\n"
	"  return table.concat(lines, '\\n') .. '\\n'\n"
	"end\n"
	"local function csv_cell(v)\n"
	"  local s = cell(v, '%.9g')\n"
	"  if s:find('[,\"\\n]') then s = '\"' .. s:gsub('\"', '\"\"') .. '\"' end\n"
	"  return s\n"
	"end\n"
	"-- strata.write_csv(path, rows, columns): a derived table (atomic write).\n"
	"function strata.write_csv(path, rows, cols)\n"
	"  local f = assert(io.open(path .. '.tmp', 'w'))\n"
	"  f:write(table.concat(cols, ','), '\\n')\n"
	"  for _, r in ipairs(rows) do\n"
	"    local t = {}\n"
	"    for i, c in ipairs(cols) do t[i] = csv_cell(r[c]) end\n"
	"    f:write(table.concat(t, ','), '\\n')\n"
	"  end\n"
	"  assert(f:close())\n"
	"  assert(os.rename(path .. '.tmp', path))\n"
	"end\n"
	"-- strata.arguments{ name = 'help', ... }: declare the script's key=value\n"
	"-- arguments and return strata.args; a given argument that is not declared,\n"
	"-- or not key=value, stops the script with a one-line error naming it and\n"
	"-- the declared ones (a typo must not run the default sweep).  `help=1`\n"
	"-- lists them on stdout and ends the run.\n"
	"function strata.arguments(spec)\n"
	"  local names = {}\n"
	"  for k in pairs(spec) do names[#names + 1] = k end\n"
	"  table.sort(names)\n"
	"  if strata.args.help and not spec.help then\n"
	"    local t, w = {}, 14\n"
	"    for _, k in ipairs(names) do w = math.max(w, #k + 1) end\n"
	"    for _, k in ipairs(names) do t[#t + 1] = string.format('  %-' .. w .. 's %s', k .. '=', spec[k]) end\n"
	"    io.stdout:write('arguments of this script (key=value):\\n', table.concat(t, '\\n'), '\\n')\n"
	"    strata._usage()\n"
	"  end\n"
	"  local function unknown(what, k, tail)\n"
	"    strata._usage(string.format(\"%s '%s' (this script takes: %s)%s\", what, k,\n"
	"      table.concat(names, ', '), tail or ''))\n"
	"  end\n"
	"  for _, v in ipairs(strata.args) do\n"
	"    if not v:find('^[^=]+=') then\n"
	"      unknown('argument not of the form key=value:', v,\n"
	"        v:find('^%-') and '; options of strata run go before the script' or nil)\n"
	"    end\n"
	"  end\n"
	"  local given = {}\n"
	"  for k in pairs(strata.args) do\n"
	"    if type(k) == 'string' then given[#given + 1] = k end\n"
	"  end\n"
	"  table.sort(given)\n"
	"  for _, k in ipairs(given) do\n"
	"    if spec[k] == nil then\n"
	"      local hint = strata._closest(k, names)\n"
	"      unknown('unknown argument', k, hint and string.format(\"; did you mean '%s'?\", hint))\n"
	"    end\n"
	"  end\n"
	"  strata._declared = spec\n"
	"  return strata.args\n"
	"end\n"
	"-- strata.spread(values[, fmt]) -> mean, min, max, text: text is the mean\n"
	"-- in fmt (default '%.4g'), then ' (min-max)' when there are several values\n"
	"-- (the spread over seeds in a study's table).\n"
	"function strata.spread(vals, fmt)\n"
	"  fmt = fmt or '%.4g'\n"
	"  if #vals == 0 then return nil, nil, nil, '' end\n"
	"  local sum, lo, hi = 0, math.huge, -math.huge\n"
	"  for _, v in ipairs(vals) do sum = sum + v; lo = math.min(lo, v); hi = math.max(hi, v) end\n"
	"  local m = sum / #vals\n"
	"  local text = string.format(fmt, m)\n"
	"  if #vals > 1 then\n"
	"    text = string.format('%s (%s%s%s)', text, string.format(fmt, lo), lo < 0 and ' to ' or '-', string.format(fmt, hi))\n"
	"  end\n"
	"  return m, lo, hi, text\n"
	"end\n"
	"-- strata.items(text[, sep]) -> the items of a sep-separated argument (sep\n"
	"-- default ','), empty items skipped: a study's list arguments (seeds=7,8,9).\n"
	"function strata.items(text, sep)\n"
	"  local t = {}\n"
	"  for v in string.gmatch(text, '[^' .. (sep or ',') .. ']+') do t[#t + 1] = v end\n"
	"  return t\n"
	"end\n"
	"-- strata.write_file(path, text)\n"
	"function strata.write_file(path, text)\n"
	"  local f = assert(io.open(path, 'w'))\n"
	"  f:write(text)\n"
	"  assert(f:close())\n"
	"end\n";

int strata_experiment_main(const struct strata_experiment_opts *o, struct strata_error *err)
{
	struct strata_lua_config lc;
	strata_lua_config_defaults(&lc);
	const char *b = strrchr(o->script, '/');
	lc.name = b ? b + 1 : o->script;
	lc.profile = STRATA_LUA_EXPERIMENT;
	/* generous: the heavy work is in C, but a runaway script still ends */
	lc.max_instructions = o->max_instructions == UINT64_MAX ? 0
			    : o->max_instructions ? o->max_instructions : STRATA_LUA_EXPERIMENT_INSTRUCTIONS;
	lc.max_memory = o->max_memory == UINT64_MAX ? 0
		      : o->max_memory ? (size_t)o->max_memory : (size_t)STRATA_LUA_EXPERIMENT_MEMORY;
	if (o->export_jobs) { /* a fresh job list per export */
		FILE *jf = fopen(o->export_jobs, "w");
		if (!jf || fclose(jf))
			return STRATA_ERRNO(err, STRATA_EIO, "%s: cannot create", o->export_jobs);
	}
	struct strata_lua *s;
	int rc = strata_lua_open(&lc, &s, err);
	if (rc)
		return rc;
	lua_State *L = strata_lua_state(s);
	struct exp_global *g = lua_newuserdatauv(L, sizeof(*g), 0);
	g->jobs = o->jobs;
	g->fresh = o->fresh;
	g->export_jobs = o->export_jobs;
	g->exported = 0;
	g->done = 0;
	g->usage[0] = '\0';
	int gidx = lua_gettop(L);
	lua_getglobal(L, "strata");
	static const luaL_Reg fns[] = {
		{ "run", l_run }, { "sweep", l_sweep }, { "trace_gen", l_trace_gen },
		{ "read_csv", l_read_csv }, { "cpus", l_cpus }, { "_closest", l_closest },
		{ "_usage", l_usage }, { NULL, NULL },
	};
	lua_pushvalue(L, gidx);
	luaL_setfuncs(L, fns, 1);
	/* strata.args: positional and k=v */
	lua_createtable(L, o->argc, 0);
	for (int i = 0; i < o->argc; i++) {
		lua_pushstring(L, o->argv[i]);
		lua_rawseti(L, -2, i + 1);
		const char *eq = strchr(o->argv[i], '=');
		if (eq && eq != o->argv[i]) {
			lua_pushlstring(L, o->argv[i], (size_t)(eq - o->argv[i]));
			lua_pushstring(L, eq + 1);
			lua_settable(L, -3);
		}
	}
	lua_setfield(L, -2, "args");
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", o->script);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(dir, sizeof(dir), ".");
	lua_pushstring(L, dir);
	lua_setfield(L, -2, "script_dir");
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	lua_pushinteger(L, o->jobs ? o->jobs : (ncpu > 0 ? ncpu : 1));
	lua_setfield(L, -2, "jobs");
	lua_pop(L, 1);
	/* g stays referenced from the closures' upvalues */
	lua_settop(L, 0);

	rc = strata_lua_load_string(s, exp_prelude_lua, "experiment prelude", err);
	if (!rc)
		rc = strata_lua_call(s, 0, 0, "experiment prelude", err);
	if (!rc)
		rc = strata_lua_load_file(s, o->script, err);
	if (!rc)
		rc = strata_lua_call(s, 0, 0, "main chunk", err);
	if (rc && strata_interrupted)
		rc = STRATA_ERR(err, STRATA_EINTR, "%s: interrupted; run again to resume", o->script);
	else if (rc && g->done)
		rc = 0;
	else if (rc && g->usage[0])
		rc = STRATA_ERR(err, STRATA_EINVAL, "%s: %s", o->script, g->usage);
	if (!rc && o->export_jobs)
		fprintf(stderr, "strata run: wrote %zu job lines to %s\n", g->exported, o->export_jobs);
	strata_lua_close(s);
	return rc;
}

