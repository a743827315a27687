/*
 * Experiment scripts (see include/strata/experiment.h): the engine as a Lua
 * library, sweeps over a pool of forked workers, results as a CSV that
 * pandas reads as is, resumable by run_id.
 *
 * Why fork per configuration: a run owns a whole engine (tiers, movers,
 * policy states, possibly a GPU context); a process keeps runs from sharing
 * anything, lets a crashing configuration fail its own row only, and needs
 * no thread safety from any module.  The result travels back as the plain
 * struct through a pipe (same binary on both ends).
 *
 * Why rows are appended as they finish: an interrupted sweep keeps every
 * finished row, and the next run skips their run_ids.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "strata/experiment.h"
#include "strata/mover.h"
#include "strata/lua.h"
#include "strata/trace.h"
#include "strata/util.h"

/* ---- configurations ---- */

void strata_experiment_config_defaults(struct strata_experiment_config *c)
{
	memset(c, 0, sizeof(*c));
	c->virt = 1;
	c->seed = 1;
	c->hints = 1;
	c->future = 1;
	c->gpu = -1;
	snprintf(c->compute, sizeof(c->compute), "auto");
	snprintf(c->mover, sizeof(c->mover), "uring");
}

void strata_experiment_config_id(struct strata_experiment_config *c)
{
	size_t n = 0, cap = sizeof(c->run_id);
#define ADD(...) (n += (size_t)snprintf(c->run_id + n, n < cap ? cap - n : 0, __VA_ARGS__))
	ADD("mode=%s;model=%s;trace=%s;vram=%" PRIu64 ";ram=%" PRIu64 ";place=%s;evict=%s;prefetch=%s;seed=%" PRIu64,
	    c->virt ? "sim" : "replay", c->model, c->trace, c->vram, c->ram, c->place, c->evict, c->prefetch,
	    c->seed);
	if (c->max_tokens)
		ADD(";max_tokens=%" PRIu64, c->max_tokens);
	if (c->prefill_chunk)
		ADD(";prefill_chunk=%u", c->prefill_chunk);
	if (!c->hints)
		ADD(";hints=0");
	if (!c->future)
		ADD(";future=0");
	if (c->cost[0])
		ADD(";cost=%s", c->cost);
	if (c->tiers[0])
		ADD(";tiers=%s", c->tiers);
	if (c->tier_trace[0])
		ADD(";tier_trace=%s", c->tier_trace);
	if (!c->virt)
		ADD(";compute=%s;mover=%s;gpu=%d", c->compute, c->mover, c->gpu);
	if (!c->virt && c->copy[0]) /* only when set: older run ids stay valid */
		ADD(";copy=%s", c->copy);
	for (uint32_t i = 0; i < c->n_tags; i++)
		ADD(";%s=%s", c->tag_name[i], c->tag_value[i]);
#undef ADD
	if (n >= cap)
		c->run_id[cap - 1] = '\0';
}

_Static_assert(STRATA_COMPUTE_NONE == 0 && STRATA_COMPUTE_REF == 1 && STRATA_COMPUTE_GPU == 2 &&
		       STRATA_COMPUTE_AUTO == 3 && STRATA_NVME_URING == 0 && STRATA_NVME_MMAP == 1 && STRATA_NVME_PREAD == 2,
	       "run_one's compute and mover names are indexed by these values");

/* Index of v in the NULL-terminated names, -1 if absent. */
static int name_index(const char *const *names, const char *v)
{
	for (int i = 0; names[i]; i++)
		if (!strcmp(v, names[i]))
			return i;
	return -1;
}

int strata_experiment_run_one(const struct strata_experiment_config *x, struct strata_replay_result *res,
			      struct strata_error *err)
{
	struct strata_replay_config c;
	strata_replay_config_defaults(&c);
	c.model_dir = x->model;
	c.trace_path = x->trace;
	c.engine.mode = x->virt ? STRATA_ENGINE_VIRTUAL : STRATA_ENGINE_REAL;
	if (x->vram)
		c.engine.budget[0] = x->vram;
	if (x->ram)
		c.engine.budget[1] = x->ram;
	if (x->place[0])
		c.engine.place = x->place;
	if (x->evict[0])
		c.engine.evict = x->evict;
	if (x->prefetch[0])
		c.engine.prefetch = x->prefetch;
	c.engine.seed = x->seed;
	c.max_tokens = x->max_tokens;
	c.prefill_chunk = x->prefill_chunk;
	c.hints = x->hints;
	c.future = x->future;
	c.progress = false;
	c.tiers = x->tiers[0] ? x->tiers : NULL;
	c.tier_trace = x->tier_trace[0] ? x->tier_trace : NULL;
	if (x->virt) {
		struct strata_cost_file cf;
		if (x->cost[0]) {
			int rc = strata_cost_file_load(x->cost, &cf, err);
			if (rc)
				return rc;
		} else {
			strata_cost_file_defaults(&cf);
		}
		c.engine.cost = cf.cost;
		c.kernel_us_per_mb_token = cf.kernel_us_per_mb_token;
		c.compute = STRATA_COMPUTE_NONE;
	} else {
		static const char *const cn[] = { "none", "ref", "gpu", "auto", NULL };
		static const char *const mn[] = { "uring", "mmap", "pread", NULL };
		int ci = name_index(cn, x->compute), mi = name_index(mn, x->mover);
		int cm = x->copy[0] ? name_index(strata_copy_names, x->copy) : STRATA_COPY_AUTO;
		if (ci < 0)
			return STRATA_ERR(err, STRATA_EINVAL, "compute '%s' (none, ref, gpu, auto)", x->compute);
		if (mi < 0)
			return STRATA_ERR(err, STRATA_EINVAL, "mover '%s' (uring, mmap, pread)", x->mover);
		if (cm < 0)
			return STRATA_ERR(err, STRATA_EINVAL, "copy '%s' (auto, each, batch, sm)", x->copy);
		c.compute = ci;
		c.engine.nvme_mover = mi;
		c.engine.copy = (uint32_t)cm;
		c.engine.use_gpu = x->gpu;
	}
	memset(res, 0, sizeof(*res));
	return strata_replay_run(&c, res, err);
}

/* ---- columns ---- */

/* The result columns: `strata replay --csv`'s (strata/replay.h). */
#define RESULT_COLS(X) STRATA_REPLAY_COLUMNS(X)

static const char *const fixed_cols[] = { "run_id", "status", "error" };
static const char *const head_cols[] = { "config", "mode", "compute", "trace", "model", "seed", "vram_bytes", "ram_bytes" };
#define NAME_OF(k, t, fmt, v) k,
static const char *const result_cols[] = { RESULT_COLS(NAME_OF) NULL };
#undef NAME_OF

/* 1 if name is one of the columns every row has (not a tag). */
static int is_known_col(const char *name)
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

/* A finished run: the result, or the error. */
struct outcome {
	int done;                 /* 1 once finished (ok or error) */
	int resumed;              /* taken from an existing CSV */
	int rc;
	struct strata_error err;
	struct strata_replay_result res;
};

static void csv_field(FILE *f, const char *s)
{
	int quote = strpbrk(s, ",\"\n\r") != NULL || !*s;
	if (!quote) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		if (*s == '\n' || *s == '\r')
			fputs(" | ", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void write_header(FILE *f, const struct strata_experiment_config *tags_of, char tagcols[][48],
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
static void given_name(const struct strata_experiment_config *c, char *buf, size_t len)
{
	snprintf(buf, len, "place=%s,evict=%s,prefetch=%s", c->place[0] ? c->place : "default",
		 c->evict[0] ? c->evict : "default", c->prefetch[0] ? c->prefetch : "default");
}

static void write_row(FILE *f, const struct strata_experiment_config *c, const struct outcome *o,
		      char tagcols[][48], uint32_t n_tagcols)
{
	csv_field(f, c->run_id);
	fputs(o->rc ? ",error," : ",ok,", f);
	if (o->rc)
		csv_field(f, o->err.msg[0] ? o->err.msg : strata_status_name(o->rc));
	for (uint32_t i = 0; i < n_tagcols; i++) {
		fputc(',', f);
		csv_field(f, tag_of(c, tagcols[i]));
	}
	const struct strata_replay_result *r = &o->res;
	const struct strata_engine_stats *s = &r->stats;
	char name[1200];
	if (o->rc)
		given_name(c, name, sizeof(name));
	fputc(',', f);
	csv_field(f, o->rc ? name : r->name);
	fprintf(f, ",%s,", c->virt ? "sim" : "replay");
	csv_field(f, o->rc ? (c->compute[0] ? c->compute : "") : strata_compute_name(r->compute));
	fputc(',', f);
	csv_field(f, c->trace);
	fputc(',', f);
	csv_field(f, o->rc ? c->model : r->model);
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

/* Push a row table for outcome o of config c. */
static void push_row(lua_State *L, const struct strata_experiment_config *c, const struct outcome *o)
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
		given_name(c, name, sizeof(name));
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

/* ---- reading a CSV (RFC 4180 subset: quoted fields, "" escapes, one line per record) ---- */

/* Split line into fields in place; returns the count (at most max). */
static int csv_split(char *line, char **fields, int max)
{
	int n = 0;
	char *p = line;
	size_t len = strlen(line);
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		line[--len] = '\0';
	for (;;) {
		if (n == max)
			return n;
		if (*p == '"') {
			char *w = ++p;
			fields[n++] = w;
			for (;;) {
				if (!*p)
					break;
				if (*p == '"' && p[1] == '"') {
					*w++ = '"';
					p += 2;
				} else if (*p == '"') {
					p++;
					break;
				} else {
					*w++ = *p++;
				}
			}
			*w = '\0';
			/* p is at ',' or end */
			if (*p == ',') {
				p++;
				continue;
			}
			return n;
		}
		fields[n++] = p;
		char *comma = strchr(p, ',');
		if (!comma)
			return n;
		*comma = '\0';
		p = comma + 1;
	}
}

static char *read_line(FILE *f)
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

/* strata.read_csv(path) -> list of row tables (numbers where a field reads as one) */
static int l_read_csv(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	FILE *f = fopen(path, "r");
	if (!f)
		return luaL_error(L, "%s: cannot open: %s", path, strerror(errno));
	char *head = read_line(f);
	if (!head) {
		fclose(f);
		lua_newtable(L);
		return 1;
	}
	char *names[512], *vals[512];
	int nn = csv_split(head, names, 512);
	lua_newtable(L);
	lua_Integer row = 0;
	char *line;
	while ((line = read_line(f))) {
		int nv = csv_split(line, vals, 512);
		if (nv == 1 && !vals[0][0]) {
			free(line);
			continue;
		}
		lua_createtable(L, 0, nn);
		for (int i = 0; i < nn && i < nv; i++) {
			if (!vals[i][0])
				continue;
			if (!lua_stringtonumber(L, vals[i]))
				lua_pushstring(L, vals[i]);
			lua_setfield(L, -2, names[i]);
		}
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

static int tag_cmp(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

/* The configuration keys that are plain strings, copied as they are. */
#define STRING_KEY(name) { #name, offsetof(struct strata_experiment_config, name), \
			   sizeof(((struct strata_experiment_config *)0)->name) }
static const struct string_key {
	const char *name;
	size_t offset, size;
} string_keys[] = {
	STRING_KEY(model), STRING_KEY(trace), STRING_KEY(cost), STRING_KEY(tiers), STRING_KEY(tier_trace),
	STRING_KEY(place), STRING_KEY(evict), STRING_KEY(prefetch), STRING_KEY(compute), STRING_KEY(mover),
	STRING_KEY(copy),
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
				for (size_t i = 0; i < 3; i++)
					if (!strcmp(tn, fixed_cols[i]))
						luaL_error(L, "config tags: '%s' is a reserved column", tn);
				snprintf(c->tag_name[c->n_tags], sizeof(c->tag_name[0]), "%s", tn);
				const char *tv = luaL_tolstring(L, -1, NULL);
				snprintf(c->tag_value[c->n_tags], sizeof(c->tag_value[0]), "%s", tv);
				lua_pop(L, 2);
				c->n_tags++;
			}
		} else {
			luaL_error(L, "config: unknown key '%s' (mode, model, trace, vram, ram, place, evict, prefetch, "
				      "seed, max_tokens, prefill_chunk, hints, future, compute, cost, tiers, tier_trace, mover, copy, gpu, "
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

/* ---- strata.run ---- */

static int l_run(lua_State *L)
{
	struct strata_experiment_config *c = lua_newuserdatauv(L, sizeof(*c), 0);
	read_config(L, 1, c);
	struct outcome *o = lua_newuserdatauv(L, sizeof(*o), 0);
	memset(o, 0, sizeof(*o));
	o->rc = strata_experiment_run_one(c, &o->res, &o->err);
	o->done = 1;
	push_row(L, c, o);
	return 1;
}

/* ---- strata.sweep ---- */

struct exp_global {
	uint32_t jobs;
	int fresh;
	const char *export_jobs; /* write job lines instead of running */
	size_t exported;
};

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
static int export_jobs(struct exp_global *g, const struct strata_experiment_config *cfg,
		       const struct outcome *oc, size_t n, const char *out, struct strata_error *err)
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
	FILE *f = fopen(g->export_jobs, "a");
	if (!f)
		return STRATA_ERRNO(err, STRATA_EIO, "%s: cannot append", g->export_jobs);
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
		g->exported++;
	}
	int bad = ferror(f);
	if (fclose(f) || bad)
		return STRATA_ERRNO(err, STRATA_EIO, "%s: write failed", g->export_jobs);
	return STRATA_OK;
}

static struct exp_global *global_of(lua_State *L)
{
	return lua_touserdata(L, lua_upvalueindex(1));
}

/* Message a worker sends back. */
struct worker_msg {
	int rc;
	struct strata_error err;
	struct strata_replay_result res;
};

struct worker {
	pid_t pid;
	int fd;
	size_t idx;      /* config index */
	size_t got;
	struct worker_msg msg;
};

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int start_worker(struct worker *w, const struct strata_experiment_config *c, size_t idx)
{
	int fds[2];
	if (pipe(fds))
		return -1;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		close(fds[0]);
		struct worker_msg *m = calloc(1, sizeof(*m));
		if (!m)
			_exit(3);
		m->rc = strata_experiment_run_one(c, &m->res, &m->err);
		int bad = write_all(fds[1], m, sizeof(*m));
		_exit(bad ? 4 : 0);
	}
	close(fds[1]);
	memset(w, 0, sizeof(*w));
	w->pid = pid;
	w->fd = fds[0];
	w->idx = idx;
	return 0;
}

/* The worker's pipe is readable: read; on EOF reap it and fill o. */
static int pump_worker(struct worker *w, struct outcome *o)
{
	char *buf = (char *)&w->msg;
	ssize_t r = read(w->fd, buf + w->got, sizeof(w->msg) - w->got);
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (r > 0) {
		w->got += (size_t)r;
		if (w->got < sizeof(w->msg))
			return 0;
	}
	/* complete message or EOF/error: reap */
	close(w->fd);
	int st = 0;
	while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR)
		;
	memset(o, 0, sizeof(*o));
	o->done = 1;
	if (w->got == sizeof(w->msg)) {
		o->rc = w->msg.rc;
		o->err = w->msg.err;
		o->res = w->msg.res;
	} else if (WIFSIGNALED(st)) {
		o->rc = STRATA_ERR(&o->err, STRATA_EIO, "worker crashed: %s", strsignal(WTERMSIG(st)));
	} else {
		o->rc = STRATA_ERR(&o->err, STRATA_EIO, "worker exited with status %d and no result",
				   WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	return 1;
}

/* Existing results: header must match; keep "ok" lines (raw) by run_id. */
struct kept {
	char **ids, **lines;
	size_t n, cap;
};

static void kept_free(struct kept *k)
{
	for (size_t i = 0; i < k->n; i++) {
		free(k->ids[i]);
		free(k->lines[i]);
	}
	free(k->ids);
	free(k->lines);
	memset(k, 0, sizeof(*k));
}

static const char *kept_find(const struct kept *k, const char *id)
{
	for (size_t i = 0; i < k->n; i++)
		if (!strcmp(k->ids[i], id))
			return k->lines[i];
	return NULL;
}

/* Returns 0, or a message in err (header mismatch, I/O). */
static int load_existing(const char *path, const char *header, struct kept *k, struct strata_error *err)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? STRATA_OK : STRATA_ERRNO(err, STRATA_EIO, "%s: cannot open", path);
	char *head = read_line(f);
	int rc = STRATA_OK;
	if (head && strcmp(head, header)) {
		rc = STRATA_ERR(err, STRATA_EINVAL,
				"%s: its columns differ from this sweep's (another sweep wrote it?): remove it, "
				"use another `out`, or run with --fresh",
				path);
	}
	char *line;
	while (!rc && head && (line = read_line(f))) {
		/* A last line without its newline is a row torn by a crash: its
		 * counters may be cut short, so run that configuration again. */
		size_t len = strlen(line);
		char *copy = len && line[len - 1] == '\n' ? strdup(line) : NULL, *fields[3];
		int n = copy ? csv_split(copy, fields, 3) : 0;
		if (n >= 2 && !strcmp(fields[1], "ok") && !kept_find(k, fields[0])) {
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
static int rewrite_results(const char *path, const char *header, const struct kept *k, struct strata_error *err)
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
static void make_parents(const char *path)
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
	int nn = csv_split(h, names, 512), nv = csv_split(l, vals, 512);
	for (int i = 0; i < nn && i < nv; i++) {
		if (!vals[i][0])
			continue;
		if (!lua_stringtonumber(L, vals[i]))
			lua_pushstring(L, vals[i]);
		lua_setfield(L, -2, names[i]);
	}
	free(h);
	free(l);
}

static int l_sweep(lua_State *L)
{
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
	struct outcome *oc = lua_newuserdatauv(L, (n ? n : 1) * sizeof(*oc), 0);
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
	qsort(tagcols, n_tagcols, 48, tag_cmp);
	char *header = NULL;
	size_t hlen = 0;
	FILE *hf = open_memstream(&header, &hlen);
	if (!hf)
		return luaL_error(L, "sweep: out of memory");
	write_header(hf, NULL, tagcols, n_tagcols);
	fclose(hf);

	struct kept kept = { 0 };
	struct strata_error err = { 0 };
	FILE *csv = NULL;
	int rc = STRATA_OK;
	if (out) {
		make_parents(out);
		if (resume)
			rc = load_existing(out, header, &kept, &err);
		/* Keep only rows of this sweep's configurations: rows of
		 * configurations a script no longer runs would mislead a reader.
		 * They are moved to OUT.dropped.csv, not lost. */
		size_t w = 0, n_dropped = 0;
		struct strata_outfile dr = { .fd = -1 };
		char drop_path[4200];
		snprintf(drop_path, sizeof(drop_path), "%s.dropped.csv", out);
		for (size_t i = 0; i < kept.n; i++) {
			int mine = 0;
			for (size_t j = 0; j < n && !mine; j++)
				mine = !strcmp(kept.ids[i], cfg[j].run_id);
			if (mine) {
				kept.ids[w] = kept.ids[i];
				kept.lines[w++] = kept.lines[i];
				continue;
			}
			if (!rc && !n_dropped++ && !(rc = strata_outfile_open(&dr, drop_path, 1, &err)) && !dr.existing)
				fputs(header, dr.f);
			if (!rc)
				fputs(kept.lines[i], dr.f);
			free(kept.ids[i]);
			free(kept.lines[i]);
		}
		kept.n = w;
		if (!rc && n_dropped) {
			rc = strata_outfile_commit(&dr, &err);
			if (!rc)
				fprintf(stderr, "strata run: %zu row%s of configurations this sweep no longer runs moved to %s\n",
					n_dropped, n_dropped == 1 ? "" : "s", drop_path);
		} else if (dr.f) {
			strata_outfile_abort(&dr);
		}
		if (!rc)
			rc = rewrite_results(out, header, &kept, &err);
		if (!rc && !(csv = fopen(out, "a")))
			rc = STRATA_ERRNO(&err, STRATA_EIO, "%s: cannot append", out);
	}
	if (rc) {
		kept_free(&kept);
		free(header);
		return luaL_error(L, "%s", err.msg);
	}
	size_t pending = 0;
	for (size_t i = 0; i < n; i++) {
		if (kept_find(&kept, cfg[i].run_id))
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
		rc = export_jobs(g, cfg, oc, n, out, &err);
		if (rc) {
			kept_free(&kept);
			free(header);
			return luaL_error(L, "%s", err.msg);
		}
		/* Rows: the finished ones, and "pending" for the exported. */
		lua_createtable(L, (int)n, 0);
		for (size_t i = 0; i < n; i++) {
			if (oc[i].resumed) {
				push_kept_row(L, header, kept_find(&kept, cfg[i].run_id));
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
				given_name(&cfg[i], name, sizeof(name));
				lua_pushstring(L, name);
				lua_setfield(L, -2, "config");
			}
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		kept_free(&kept);
		free(header);
		return 1;
	}
	/* The pool. */
	struct worker *ws = calloc(jobs, sizeof(*ws));
	struct pollfd *pf = calloc(jobs, sizeof(*pf));
	if (!ws || !pf) {
		free(ws);
		free(pf);
		if (csv)
			fclose(csv);
		kept_free(&kept);
		free(header);
		return luaL_error(L, "sweep: out of memory");
	}
	struct strata_progress pg;
	strata_progress_start(&pg, what, pending, NULL);
	size_t next = 0, finished = 0, failed = 0;
	uint32_t running = 0;
	int spawn_failed = 0;
	for (;;) {
		while (!strata_interrupted && !spawn_failed && running < jobs) {
			while (next < n && oc[next].done)
				next++;
			if (next >= n)
				break;
			uint32_t slot = 0;
			while (ws[slot].pid)
				slot++;
			if (start_worker(&ws[slot], &cfg[next], next)) {
				spawn_failed = errno ? errno : EAGAIN;
				break;
			}
			next++;
			running++;
		}
		if (!running)
			break;
		nfds_t np = 0;
		uint32_t map[1024];
		for (uint32_t s = 0; s < jobs && np < 1024; s++)
			if (ws[s].pid) {
				pf[np].fd = ws[s].fd;
				pf[np].events = POLLIN;
				pf[np].revents = 0;
				map[np++] = s;
			}
		int pr = poll(pf, np, 1000);
		if (pr < 0 && errno != EINTR)
			break;
		for (nfds_t i = 0; pr > 0 && i < np; i++) {
			if (!pf[i].revents)
				continue;
			struct worker *w = &ws[map[i]];
			struct outcome o;
			if (!pump_worker(w, &o))
				continue;
			size_t idx = w->idx;
			w->pid = 0;
			running--;
			if (o.rc == STRATA_EINTR) /* not finished: a resume redoes it */
				continue;
			oc[idx] = o;
			finished++;
			failed += o.rc != 0;
			if (csv) {
				write_row(csv, &cfg[idx], &oc[idx], tagcols, n_tagcols);
				fflush(csv);
			}
			if (o.rc)
				fprintf(stderr, "strata run: %s: row %zu failed: %s\n", what, idx + 1, o.err.msg);
			strata_progress_update(&pg, finished);
		}
	}
	strata_progress_finish(&pg);
	free(ws);
	free(pf);
	int close_bad = csv && (ferror(csv) | fclose(csv));
	if (strata_interrupted) {
		kept_free(&kept);
		free(header);
		return luaL_error(L, "%s: interrupted after %zu of %zu runs (run again to resume)", what, finished,
				  pending);
	}
	if (spawn_failed) {
		kept_free(&kept);
		free(header);
		return luaL_error(L, "%s: cannot start a worker: %s", what, strerror(spawn_failed));
	}
	if (close_bad) {
		kept_free(&kept);
		free(header);
		return luaL_error(L, "%s: write failed", out);
	}
	/* Rows in configuration order. */
	lua_createtable(L, (int)n, 0);
	for (size_t i = 0; i < n; i++) {
		if (oc[i].resumed)
			push_kept_row(L, header, kept_find(&kept, cfg[i].run_id));
		else
			push_row(L, &cfg[i], &oc[i]);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	kept_free(&kept);
	free(header);
	if (failed)
		fprintf(stderr, "strata run: %s: %zu of %zu runs failed (see their rows)\n", what, failed, finished);
	return 1;
}

/* ---- strata.trace_gen ---- */

static int l_trace_gen(lua_State *L)
{
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
	make_parents(path);
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
	lc.max_instructions = 0; /* the heavy work is in C; a script may loop long */
	lc.max_memory = 0;
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
	int gidx = lua_gettop(L);
	lua_getglobal(L, "strata");
	static const luaL_Reg fns[] = {
		{ "run", l_run }, { "sweep", l_sweep }, { "trace_gen", l_trace_gen },
		{ "read_csv", l_read_csv }, { "cpus", l_cpus }, { NULL, NULL },
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
	if (!rc && o->export_jobs)
		fprintf(stderr, "strata run: wrote %zu job lines to %s\n", g->exported, o->export_jobs);
	strata_lua_close(s);
	return rc;
}

/* ---- sweeps beyond one machine: one run by run_id, and merging parts ---- */

int strata_experiment_config_parse_id(const char *id, struct strata_experiment_config *c,
				      struct strata_error *err)
{
	strata_experiment_config_defaults(c);
	char *buf = strdup(id);
	if (!buf)
		return STRATA_ERR(err, STRATA_ENOMEM, "run_id: out of memory");
	int rc = STRATA_OK;
	for (char *save = NULL, *seg = strtok_r(buf, ";", &save); seg && !rc; seg = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(seg, '=');
		if (!eq) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "run_id: '%s' is not key=value", seg);
			break;
		}
		*eq = '\0';
		const char *k = seg, *v = eq + 1;
		char *end = NULL;
#define STR(name, field)                                                   \
	else if (!strcmp(k, name)) {                                       \
		if (strlen(v) >= sizeof(c->field))                         \
			rc = STRATA_ERR(err, STRATA_EINVAL, "run_id: %s too long", name); \
		else                                                       \
			snprintf(c->field, sizeof(c->field), "%s", v);      \
	}
#define NUM(name, field)                                                   \
	else if (!strcmp(k, name)) {                                       \
		c->field = (__typeof__(c->field))strtoull(v, &end, 10);    \
		if (!*v || *end)                                           \
			rc = STRATA_ERR(err, STRATA_EINVAL, "run_id: %s=%s", name, v); \
	}
		if (!strcmp(k, "mode"))
			c->virt = !strcmp(v, "sim");
		STR("model", model)
		STR("trace", trace)
		STR("cost", cost)
		STR("tiers", tiers)
		STR("tier_trace", tier_trace)
		STR("place", place)
		STR("evict", evict)
		STR("prefetch", prefetch)
		STR("compute", compute)
		STR("mover", mover)
		STR("copy", copy)
		NUM("vram", vram)
		NUM("ram", ram)
		NUM("seed", seed)
		NUM("max_tokens", max_tokens)
		NUM("prefill_chunk", prefill_chunk)
		else if (!strcmp(k, "hints")) c->hints = atoi(v) != 0;
		else if (!strcmp(k, "future")) c->future = atoi(v) != 0;
		else if (!strcmp(k, "gpu")) c->gpu = atoi(v);
		else {
			if (c->n_tags == STRATA_EXP_TAGS || strlen(k) >= sizeof(c->tag_name[0]) ||
			    strlen(v) >= sizeof(c->tag_value[0]))
				rc = STRATA_ERR(err, STRATA_EINVAL, "run_id: tag '%s' too long or too many tags", k);
			else {
				snprintf(c->tag_name[c->n_tags], sizeof(c->tag_name[0]), "%s", k);
				snprintf(c->tag_value[c->n_tags], sizeof(c->tag_value[0]), "%s", v);
				c->n_tags++;
			}
		}
#undef STR
#undef NUM
	}
	free(buf);
	if (rc)
		return rc;
	strata_experiment_config_id(c);
	if (strcmp(c->run_id, id))
		return STRATA_ERR(err, STRATA_EINVAL, "run_id is not canonical (written by another version?): %s", id);
	return STRATA_OK;
}

int strata_experiment_run_csv(const char *run_id, const char *out, struct strata_error *err)
{
	struct strata_experiment_config *c = malloc(sizeof(*c));
	struct outcome *o = calloc(1, sizeof(*o));
	int rc = c && o ? STRATA_OK : STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	if (!rc)
		rc = strata_experiment_config_parse_id(run_id, c, err);
	if (!rc) {
		o->rc = strata_experiment_run_one(c, &o->res, &o->err);
		if (o->rc == STRATA_EINTR)
			rc = STRATA_ERR(err, STRATA_EINTR, "interrupted");
	}
	if (!rc) {
		make_parents(out);
		struct strata_outfile of;
		if (!(rc = strata_outfile_open(&of, out, 0, err))) {
			write_header(of.f, c, c->tag_name, c->n_tags);
			write_row(of.f, c, o, c->tag_name, c->n_tags);
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
		char *head = read_line(f), *names[MAXC];
		fclose(f);
		int nn = head ? csv_split(head, names, MAXC) : 0;
		if (nn < 3 || strcmp(names[0], "run_id") || strcmp(names[1], "status"))
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: not a results CSV of strata run", files[i]);
		for (int k = 0; k < nn && !rc; k++) {
			if (is_known_col(names[k]))
				continue;
			uint32_t j = 0;
			while (j < n_tags && strcmp(tags[j], names[k]))
				j++;
			if (j == n_tags && n_tags < MAXC)
				snprintf(tags[n_tags++], 48, "%s", names[k]);
		}
		free(head);
	}
	qsort(tags, n_tags, 48, tag_cmp);
	char *header = NULL, *body = NULL;
	size_t hlen = 0, blen = 0;
	FILE *hf = open_memstream(&header, &hlen);
	if (hf) {
		write_header(hf, NULL, tags, n_tags);
		fclose(hf);
	}
	/* output column names */
	char *hcopy = header ? strdup(header) : NULL, *outcols[MAXC];
	int n_out = hcopy ? csv_split(hcopy, outcols, MAXC) : 0;
	/* pass 2: rows, keyed by run_id */
	struct kept rows = { 0 };
	char **status = NULL;
	for (int i = 0; i < nf && !rc && hcopy; i++) {
		FILE *f = fopen(files[i], "r");
		if (!f) {
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot open", files[i]);
			break;
		}
		char *head = read_line(f), *names[MAXC], *line;
		int nn = csv_split(head, names, MAXC);
		while ((line = read_line(f))) {
			char *vals[MAXC];
			int nv = csv_split(line, vals, MAXC);
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
					csv_field(bf, v);
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
		make_parents(out);
		rc = rewrite_results(out, header, &rows, err);
	}
	if (!rc)
		fprintf(stderr, "strata run: merged %zu rows from %d files into %s\n", rows.n, nf, out);
	for (size_t r = 0; r < rows.n; r++)
		free(status[r]);
	free(status);
	kept_free(&rows);
	free(header);
	free(hcopy);
	free(files);
	free(tags);
	return rc;
}
