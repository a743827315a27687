/*
 * Sandboxed Lua states: safe libraries only, a seeded math.random, an
 * instruction budget per call (count hook), a memory limit (custom
 * allocator), calls under lua_pcall with a traceback handler, and errors as
 * "script.lua:LINE: message" in struct strata_error.  The prelude (Lua source
 * compiled in as a string) builds the global `strata` table.
 *
 * Why a count hook that keeps raising: once a call has spent its budget,
 * every later hook tick raises again, so a script that wraps its loop in
 * pcall cannot swallow the limit; the flag also lets us report the limit
 * whatever error object finally reaches the top.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "strata/lua.h"

#define HOOK_STEP 1000u

struct strata_lua {
	lua_State *L;
	char name[128];
	uint64_t budget, used;
	unsigned step;
	const char *what;
	int limit_hit, mem_hit;
	size_t mem, max_memory;
	int profile;
};

static const char sandbox_lua[] =
	"local cg, ld, rs = collectgarbage, load, math.randomseed\n"
	"local allowed = { collect = true, count = true, step = true, isrunning = true }\n"
	"collectgarbage = function(opt, ...)\n"
	"  opt = opt or 'collect'\n"
	"  if not allowed[opt] then error(\"collectgarbage('\" .. tostring(opt) .. \"') is not allowed here\", 2) end\n"
	"  return cg(opt, ...)\n"
	"end\n"
	"load = function(chunk, name, mode, ...)\n"
	"  if mode ~= nil and mode ~= 't' then error('load: only text chunks are allowed', 2) end\n"
	"  if select('#', ...) > 0 then return ld(chunk, name, 't', ...) end\n"
	"  return ld(chunk, name, 't')\n"
	"end\n"
	"math.randomseed = function(...)\n"
	"  if select('#', ...) == 0 then\n"
	"    error('math.randomseed needs an explicit seed (the run seed is strata.seed)', 2)\n"
	"  end\n"
	"  return rs(...)\n"
	"end\n"
	"string.dump = nil\n"
	"dofile, loadfile = nil, nil\n"
	/* Pattern matching runs in C, where the count hook cannot stop it, and
	 * backtracks: a pattern with q repetition items may take about
	 * (n + 1)^(q + 1) steps on an n-byte subject (("a*"):rep(30) .. "b" ran for
	 * minutes).  Refuse a call whose bound exceeds the state's limit (the
	 * argument of this chunk); plain searches are bounded by n * m. */
	"local STEPS = ...\n"
	"local sfind, smatch, sgmatch, sgsub = string.find, string.match, string.gmatch, string.gsub\n"
	"local function bound(name, s, p, plain)\n"
	"  if (type(s) ~= 'string' and type(s) ~= 'number') or (type(p) ~= 'string' and type(p) ~= 'number') then\n"
	"    return -- the real function raises its own error\n"
	"  end\n"
	"  s, p = tostring(s), tostring(p)\n"
	"  local n = #s + 1\n"
	"  if plain or not sfind(p, '[%^%$%*%+%?%.%(%)%[%]%%%-]') then\n"
	"    if n * (#p + 1) > STEPS then\n"
	"      error(string.format('%s: searching %d bytes for a %d-byte string exceeds the limit of %d steps', name, #s, #p, STEPS), 3)\n"
	"    end\n"
	"    return\n"
	"  end\n"
	"  local q = 0\n"
	"  for _ in sgmatch(p, '[%*%+%-%?]') do q = q + 1 end\n"
	"  for _ in sgmatch(p, '%%[bf]') do q = q + 1 end\n"
	"  local est = 1\n"
	"  for _ = 1, q + 1 do\n"
	"    est = est * n\n"
	"    if est > STEPS then\n"
	"      error(string.format('%s: a pattern with %d repetition items on a %d-byte string may take more than %d '\n"
	"        .. 'steps inside one C call, which the instruction limit cannot interrupt: use a simpler pattern or a '\n"
	"        .. 'shorter string', name, q, #s, STEPS), 3)\n"
	"    end\n"
	"  end\n"
	"end\n"
	"string.find = function(s, p, init, plain) bound('string.find', s, p, plain); return sfind(s, p, init, plain) end\n"
	"string.match = function(s, p, init) bound('string.match', s, p); return smatch(s, p, init) end\n"
	"string.gmatch = function(s, p, init) bound('string.gmatch', s, p); return sgmatch(s, p, init) end\n"
	"string.gsub = function(s, p, r, n) bound('string.gsub', s, p); return sgsub(s, p, r, n) end\n";

/* The prelude: everything a script sees of Strata lives in `strata`. */
static const char prelude_lua[] =
	"local strata = strata\n"
	"strata.TIER_VRAM, strata.TIER_RAM, strata.TIER_NVME = 0, 1, 2\n"
	"strata.NO_EXPERT = -1\n"
	"strata.tier_names = { [0] = 'vram', [1] = 'ram', [2] = 'nvme' }\n"
	"local tier_ids = { vram = 0, ram = 1, nvme = 2 }\n"
	"-- 'vram' | 'ram' | 'nvme' | 0..2 -> 0..2; error otherwise\n"
	"function strata.tier(t)\n"
	"  local v = tier_ids[t] or (math.type(t) == 'integer' and t >= 0 and t <= 2 and t) or nil\n"
	"  if v == nil then error('unknown tier ' .. tostring(t) .. \" (vram, ram, nvme)\", 2) end\n"
	"  return v\n"
	"end\n"
	"-- flat expert id <-> (moe layer, expert); n_experts is set by the policy adapter\n"
	"function strata.eid(layer, expert) return layer * strata.n_experts + expert end\n"
	"function strata.split(eid) return eid // strata.n_experts, eid % strata.n_experts end\n"
	"\n"
	"-- strata.list(): an ordered set of keys (integers usually), most recent at\n"
	"-- the front.  O(1) push/move/remove.  The methods are closures over the\n"
	"-- list's state (no self lookups: this is the hot path of LRU-like\n"
	"-- policies); call them as l:push_front(k).\n"
	"function strata.list()\n"
	"  local nx, pv, head, tail, n = {}, {}, nil, nil, 0\n"
	"  local l = {}\n"
	"  local function remove(_, k)\n"
	"    local x, p = nx[k], pv[k]\n"
	"    if x == nil then return false end\n"
	"    if p then nx[p] = x else head = x or nil end\n"
	"    if x then pv[x] = p else tail = p or nil end\n"
	"    nx[k], pv[k] = nil, nil\n"
	"    n = n - 1\n"
	"    return true\n"
	"  end\n"
	"  l.remove = remove\n"
	"  -- insert k at the front, or move it there\n"
	"  function l.push_front(_, k)\n"
	"    if nx[k] ~= nil then\n"
	"      if head == k then return end\n"
	"      remove(nil, k)\n"
	"    end\n"
	"    local h = head\n"
	"    nx[k], pv[k] = h or false, false\n"
	"    if h then pv[h] = k else tail = k end\n"
	"    head = k\n"
	"    n = n + 1\n"
	"  end\n"
	"  -- insert k at the back, or move it there\n"
	"  function l.push_back(_, k)\n"
	"    if nx[k] ~= nil then\n"
	"      if tail == k then return end\n"
	"      remove(nil, k)\n"
	"    end\n"
	"    local t = tail\n"
	"    pv[k], nx[k] = t or false, false\n"
	"    if t then nx[t] = k else head = k end\n"
	"    tail = k\n"
	"    n = n + 1\n"
	"  end\n"
	"  function l.contains(_, k) return nx[k] ~= nil end\n"
	"  function l.front() return head end\n"
	"  function l.back() return tail end\n"
	"  function l.older(_, k) return nx[k] or nil end\n"
	"  function l.newer(_, k) return pv[k] or nil end\n"
	"  function l.len() return n end\n"
	"  -- iterate oldest to newest / newest to oldest\n"
	"  function l.from_back()\n"
	"    local k, started = nil, false\n"
	"    return function()\n"
	"      if not started then started = true; k = tail else k = pv[k] or nil end\n"
	"      return k\n"
	"    end\n"
	"  end\n"
	"  function l.from_front()\n"
	"    local k, started = nil, false\n"
	"    return function()\n"
	"      if not started then started = true; k = head else k = nx[k] or nil end\n"
	"      return k\n"
	"    end\n"
	"  end\n"
	"  return setmetatable(l, { __len = l.len })\n"
	"end\n"
	"\n"
	"-- strata.log(...): one line on stderr, tagged with the script name\n"
	"function strata.log(...)\n"
	"  local t = table.pack(...)\n"
	"  for i = 1, t.n do t[i] = tostring(t[i]) end\n"
	"  strata._write(table.concat(t, ' ', 1, t.n))\n"
	"end\n";

struct strata_lua *strata_lua_of(lua_State *L)
{
	return *(struct strata_lua **)lua_getextraspace(L);
}

lua_State *strata_lua_state(struct strata_lua *s)
{
	return s->L;
}

const char *strata_lua_name(const struct strata_lua *s)
{
	return s->name;
}

size_t strata_lua_memory(const struct strata_lua *s)
{
	return s->mem;
}

void strata_lua_config_defaults(struct strata_lua_config *c)
{
	memset(c, 0, sizeof(*c));
	c->name = "script.lua";
	c->max_instructions = STRATA_LUA_DEFAULT_INSTRUCTIONS;
	c->max_memory = STRATA_LUA_DEFAULT_MEMORY;
	c->profile = STRATA_LUA_POLICY;
}

static void *l_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct strata_lua *s = ud;
	size_t old = ptr ? osize : 0;

	if (nsize == 0) {
		free(ptr);
		s->mem -= old;
		return NULL;
	}
	if (s->max_memory && nsize > old && s->mem + (nsize - old) > s->max_memory) {
		s->mem_hit = 1;
		return NULL;
	}
	void *np = realloc(ptr, nsize);
	if (!np)
		return NULL;
	s->mem = s->mem - old + nsize;
	return np;
}

static void count_hook(lua_State *L, lua_Debug *ar)
{
	struct strata_lua *s = strata_lua_of(L);

	s->used += s->step;
	if (!s->budget || s->used < s->budget)
		return;
	if (!s->limit_hit) {
		/* From now on raise at every instruction: a script's own pcall
		 * around the runaway loop cannot outlast us. */
		s->limit_hit = 1;
		lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
	}
	int line = -1;
	if (lua_getinfo(L, "l", ar))
		line = ar->currentline;
	lua_pushfstring(L, "%s: instruction limit exceeded in hook '%s' (%I instructions, at line %d)",
			s->name, s->what ? s->what : "?", (lua_Integer)s->budget, line);
	lua_error(L);
}

void strata_lua_set_budget(struct strata_lua *s, uint64_t max_instructions)
{
	s->budget = max_instructions;
	if (!max_instructions) {
		lua_sethook(s->L, NULL, 0, 0);
		return;
	}
	s->step = max_instructions < HOOK_STEP ? (unsigned)max_instructions : HOOK_STEP;
	lua_sethook(s->L, count_hook, LUA_MASKCOUNT, (int)s->step);
}

/* print -> stderr, tagged: never mixes with CSV on stdout. */
static int l_print(lua_State *L)
{
	struct strata_lua *s = strata_lua_of(L);
	int n = lua_gettop(L);
	luaL_Buffer b;

	luaL_buffinit(L, &b);
	for (int i = 1; i <= n; i++) {
		if (i > 1)
			luaL_addchar(&b, '\t');
		luaL_tolstring(L, i, NULL);
		luaL_addvalue(&b);
	}
	luaL_pushresult(&b);
	fprintf(stderr, "[%s] %s\n", s->name, lua_tostring(L, -1));
	return 0;
}

static int l_write(lua_State *L)
{
	struct strata_lua *s = strata_lua_of(L);
	const char *msg = luaL_checkstring(L, 1);
	fprintf(stderr, "[%s] %s\n", s->name, msg);
	return 0;
}

/* Message handler: add a traceback to string messages. */
static int l_msgh(lua_State *L)
{
	const char *msg = lua_tostring(L, 1);
	if (!msg) {
		if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
			return 1;
		msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
	}
	luaL_traceback(L, L, msg, 1);
	return 1;
}

/* Turn the Lua error on top of the stack into err, pop it. */
static int fail_from_stack(struct strata_lua *s, int rc, struct strata_error *err)
{
	const char *what = s->what ? s->what : "?";
	const char *raw = lua_tostring(s->L, -1);
	char body[700];

	if (s->limit_hit) {
		/* The hook's message may have been replaced by a script's pcall
		 * handler: rebuild it. */
		if (raw && strstr(raw, "instruction limit exceeded"))
			snprintf(body, sizeof(body), "%s", raw);
		else
			snprintf(body, sizeof(body), "%s: instruction limit exceeded in hook '%s' (%llu instructions)",
				 s->name, what, (unsigned long long)s->budget);
		/* Keep the message plus traceback as the handler built it. */
		lua_pop(s->L, 1);
		return STRATA_ERR(err, STRATA_ESCRIPT, "%s", body);
	}
	if (rc == LUA_ERRMEM) {
		lua_pop(s->L, 1);
		if (s->mem_hit)
			return STRATA_ERR(err, STRATA_ESCRIPT, "%s: memory limit exceeded (%zu bytes) in hook '%s'",
					  s->name, s->max_memory, what);
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory in hook '%s'", s->name, what);
	}
	if (!raw)
		raw = "(no message)";
	/* Split "msg\nstack traceback:..." so the hook name follows the message. */
	const char *tb = strstr(raw, "\nstack traceback:");
	int mlen = tb ? (int)(tb - raw) : (int)strlen(raw);
	size_t nl = strlen(s->name);
	int named = !strncmp(raw, s->name, nl) && (raw[nl] == ':');
	snprintf(body, sizeof(body), "%s%s%.*s (in hook '%s')%s", named ? "" : s->name, named ? "" : ": ",
		 mlen, raw, what, tb ? tb : "");
	lua_pop(s->L, 1);
	return STRATA_ERR(err, STRATA_ESCRIPT, "%s", body);
}

int strata_lua_call(struct strata_lua *s, int nargs, int nresults, const char *what,
		    struct strata_error *err)
{
	lua_State *L = s->L;
	int base = lua_gettop(L) - nargs;

	lua_pushcfunction(L, l_msgh);
	lua_insert(L, base);
	s->what = what;
	s->used = 0;
	if (s->limit_hit)
		strata_lua_set_budget(s, s->budget); /* back to the normal step */
	s->limit_hit = 0;
	s->mem_hit = 0;
	int rc = lua_pcall(L, nargs, nresults, base);
	if (rc != LUA_OK) {
		lua_remove(L, base);
		return fail_from_stack(s, rc, err);
	}
	lua_remove(L, base);
	return STRATA_OK;
}

static const char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');
	return b ? b + 1 : path;
}

static int load_buffer(struct strata_lua *s, const char *buf, size_t n, const char *name,
		       struct strata_error *err)
{
	char chunk[160];
	snprintf(chunk, sizeof(chunk), "@%s", name);
	int rc = luaL_loadbufferx(s->L, buf, n, chunk, "t");
	if (rc == LUA_OK)
		return STRATA_OK;
	const char *msg = lua_tostring(s->L, -1);
	size_t nl = strlen(name);
	int named = msg && !strncmp(msg, name, nl) && msg[nl] == ':';
	if (rc == LUA_ERRMEM)
		STRATA_ERR(err, STRATA_ESCRIPT, "%s: memory limit exceeded while compiling", name);
	else
		STRATA_ERR(err, STRATA_ESCRIPT, "%s%s%s", named ? "" : name, named ? "" : ": ",
			   msg ? msg : "cannot compile");
	lua_pop(s->L, 1);
	return STRATA_ESCRIPT;
}

int strata_lua_load_string(struct strata_lua *s, const char *src, const char *name,
			   struct strata_error *err)
{
	return load_buffer(s, src, strlen(src), name, err);
}

int strata_lua_load_file(struct strata_lua *s, const char *path, struct strata_error *err)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return STRATA_ERRNO(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO,
				    "%s: cannot open script", path);
	size_t cap = 1 << 14, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (!buf) {
			fclose(f);
			return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory reading script", path);
		}
		n += fread(buf + n, 1, cap - n, f);
		if (n < cap)
			break;
		cap *= 2;
		char *nb = realloc(buf, cap);
		if (!nb)
			free(buf);
		buf = nb;
	}
	int ioerr = ferror(f);
	fclose(f);
	if (ioerr) {
		free(buf);
		return STRATA_ERR(err, STRATA_EIO, "%s: read error", path);
	}
	if (n && buf[0] == 0x1b) {
		free(buf);
		return STRATA_ERR(err, STRATA_ESCRIPT, "%s: binary chunks are not allowed", path);
	}
	/* A "#!" first line is skipped like lua(1) does; keep its newline so
	 * line numbers stay right. */
	size_t off = 0;
	if (n && buf[0] == '#')
		while (off < n && buf[off] != '\n')
			off++;
	const char *name = base_name(path);
	if (!strcmp(s->name, "script.lua") || !s->name[0])
		snprintf(s->name, sizeof(s->name), "%s", name);
	int rc = load_buffer(s, buf + off, n - off, name, err);
	free(buf);
	return rc;
}

static void open_libs(lua_State *L, int profile)
{
	static const luaL_Reg libs[] = {
		{ LUA_GNAME, luaopen_base },       { LUA_STRLIBNAME, luaopen_string },
		{ LUA_TABLIBNAME, luaopen_table }, { LUA_MATHLIBNAME, luaopen_math },
		{ LUA_UTF8LIBNAME, luaopen_utf8 }, { NULL, NULL },
	};
	for (const luaL_Reg *l = libs; l->func; l++) {
		luaL_requiref(L, l->name, l->func, 1);
		lua_pop(L, 1);
	}
	/* os: clock only for policies; experiments also get time/date/getenv
	 * and the io library (they write result files). */
	luaL_requiref(L, "os", luaopen_os, 0);
	lua_newtable(L);
	const char *keep_policy[] = { "clock", NULL };
	const char *keep_exp[] = { "clock", "time", "date", "getenv", "difftime", "rename", "remove", NULL };
	for (const char **k = profile == STRATA_LUA_EXPERIMENT ? keep_exp : keep_policy; *k; k++) {
		lua_getfield(L, -2, *k);
		lua_setfield(L, -2, *k);
	}
	lua_setglobal(L, "os");
	lua_pop(L, 1);
	if (profile == STRATA_LUA_EXPERIMENT) {
		luaL_requiref(L, LUA_IOLIBNAME, luaopen_io, 1);
		lua_pushnil(L);
		lua_setfield(L, -2, "popen");
		lua_pop(L, 1);
	}
	lua_pushcfunction(L, l_print);
	lua_setglobal(L, "print");
}

int strata_lua_open(const struct strata_lua_config *c, struct strata_lua **out,
		    struct strata_error *err)
{
	struct strata_lua_config def;
	if (!c) {
		strata_lua_config_defaults(&def);
		c = &def;
	}
	*out = NULL;
	struct strata_lua *s = calloc(1, sizeof(*s));
	if (!s)
		return STRATA_ERR(err, STRATA_ENOMEM, "lua: out of memory");
	snprintf(s->name, sizeof(s->name), "%s", c->name ? c->name : "script.lua");
	s->max_memory = c->max_memory;
	s->profile = c->profile;
	s->L = lua_newstate(l_alloc, s);
	if (!s->L) {
		free(s);
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: cannot create a Lua state", c->name);
	}
	*(struct strata_lua **)lua_getextraspace(s->L) = s;
	lua_State *L = s->L;
	open_libs(L, c->profile);

	/* math.random from the run's seed. */
	lua_getglobal(L, "math");
	lua_getfield(L, -1, "randomseed");
	lua_pushinteger(L, (lua_Integer)c->seed);
	lua_call(L, 1, 0);
	lua_pop(L, 1);

	lua_newtable(L);
	lua_pushinteger(L, (lua_Integer)c->seed);
	lua_setfield(L, -2, "seed");
	lua_pushcfunction(L, l_write);
	lua_setfield(L, -2, "_write");
	lua_setglobal(L, "strata");

	strata_lua_set_budget(s, c->max_instructions);
	int rc = strata_lua_load_string(s, sandbox_lua, "sandbox", err);
	if (!rc) {
		lua_pushinteger(L, c->profile == STRATA_LUA_POLICY ? STRATA_LUA_POLICY_PATTERN_STEPS
								    : STRATA_LUA_EXPERIMENT_PATTERN_STEPS);
		rc = strata_lua_call(s, 1, 0, "sandbox", err);
	}
	if (!rc)
		rc = strata_lua_load_string(s, prelude_lua, "prelude", err);
	if (!rc)
		rc = strata_lua_call(s, 0, 0, "prelude", err);
	if (rc) {
		strata_lua_close(s);
		return rc;
	}
	*out = s;
	return STRATA_OK;
}

void strata_lua_close(struct strata_lua *s)
{
	if (!s)
		return;
	if (s->L)
		lua_close(s->L);
	free(s);
}
