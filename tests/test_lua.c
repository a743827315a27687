/* Lua embedding: sandbox, seeded randomness, limits, error positions, the
 * policy adapter's hooks, and C-vs-Lua agreement on a trace. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "strata/lua.h"
#include "strata/policy.h"
#include "strata/harness.h"
#include "strata/store.h"
#include "strata/util.h"
#include "testutil.h"

/* ---- helpers ---- */

static int setup(void **state)
{
	setenv("STRATA_LUA_INSTRUCTIONS", "2000000", 1);
	return test_tmpdir_setup(state);
}

static int teardown(void **state)
{
	test_tmpdir_teardown(state);
	unsetenv("STRATA_LUA_INSTRUCTIONS");
	unsetenv("STRATA_LUA_MEMORY");
	return 0;
}

static const char *write_script(const char *name, const char *src)
{
	static char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", test_tmpdir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(src, f);
	fclose(f);
	return path;
}

/* Repository file (tests run from the repo root; fall back to the binary's
 * build/<mode>/tests/../../..). */
static const char *repo_file(const char *rel)
{
	static char path[PATH_MAX];
	if (access(rel, R_OK) == 0)
		return rel;
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(n > 0);
	self[n] = 0;
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = 0; /* build/<mode>/tests */
	snprintf(path, sizeof(path), "%s/../../../%s", self, rel);
	return path;
}

/* A small model: 2 moe layers x 8 experts. */
struct fixture {
	struct strata_model_spec spec;
	uint8_t tiers[64];
	uint64_t bytes[64];
	struct strata_policy_env env;
};

static void fixture_init(struct fixture *f, uint32_t layers, uint32_t experts)
{
	memset(f, 0, sizeof(*f));
	snprintf(f->spec.name, sizeof(f->spec.name), "custom");
	f->spec.n_layers = layers;
	f->spec.n_moe_layers = layers;
	f->spec.n_experts = experts;
	f->spec.top_k = 2;
	f->spec.hidden = 64;
	f->spec.inter = 32;
	f->env.spec = &f->spec;
	f->env.n_ids = layers * experts;
	assert_true(f->env.n_ids <= 64);
	for (uint32_t i = 0; i < f->env.n_ids; i++) {
		f->tiers[i] = (uint8_t)(i % 3);
		f->bytes[i] = 4096 * (i + 1);
	}
	f->env.tier_table = f->tiers;
	f->env.expert_bytes = f->bytes;
	f->env.budget[0] = 1 << 20;
	f->env.budget[1] = 4 << 20;
	f->env.budget[2] = UINT64_MAX;
	f->env.seed = 7;
}

static int create(struct fixture *f, int role, const char *path, const char *kv,
		  struct strata_policy *p, struct strata_error *err)
{
	memset(p, 0, sizeof(*p));
	p->tier = role == STRATA_ROLE_EVICT ? STRATA_TIER_VRAM : -1;
	return strata_lua_policy_create(role, path, kv, &f->env, p, err);
}

static void destroy(struct strata_policy *p)
{
	const struct strata_evict_ops *ops = p->ops; /* free is in the common head */
	if (ops && ops->free)
		ops->free(p);
}

/* Run a chunk in a fresh policy-profile state; returns its string result. */
static int run_chunk(const char *src, uint64_t seed, char *out, size_t len, struct strata_error *err)
{
	struct strata_lua_config c;
	struct strata_lua *s;
	strata_lua_config_defaults(&c);
	c.name = "chunk.lua";
	c.seed = seed;
	int rc = strata_lua_open(&c, &s, err);
	if (rc)
		return rc;
	rc = strata_lua_load_string(s, src, "chunk.lua", err);
	if (!rc)
		rc = strata_lua_call(s, 0, 1, "main chunk", err);
	if (!rc) {
		snprintf(out, len, "%s", lua_tostring(strata_lua_state(s), -1) ? lua_tostring(strata_lua_state(s), -1) : "(nil)");
		lua_pop(strata_lua_state(s), 1);
	}
	strata_lua_close(s);
	return rc;
}

/* ---- sandbox and state ---- */

static void test_sandbox(void **state)
{
	char out[256];
	struct strata_error err = { 0 };
	const char *src =
		"local absent = { 'io', 'package', 'require', 'dofile', 'loadfile', 'debug', 'module' }\n"
		"for _, k in ipairs(absent) do if _G[k] ~= nil then return 'present: ' .. k end end\n"
		"if os.execute or os.exit or os.getenv or os.remove or io then return 'os leaks' end\n"
		"if type(os.clock) ~= 'function' then return 'no os.clock' end\n"
		"if string.dump then return 'string.dump' end\n"
		"local ok = pcall(math.randomseed)\n"
		"if ok then return 'unseeded randomseed allowed' end\n"
		"if pcall(collectgarbage, 'stop') then return 'collectgarbage stop allowed' end\n"
		"local f, e = load('\\27Lua binary')\n"
		"if f or not e:find('binary') then return 'binary load: ' .. tostring(e) end\n"
		"local g = load('return 1 + 1')\n"
		"if g() ~= 2 then return 'text load broken' end\n"
		"if strata.TIER_VRAM ~= 0 or strata.TIER_RAM ~= 1 or strata.TIER_NVME ~= 2 then return 'consts' end\n"
		"return 'ok'\n";
	assert_int_equal(run_chunk(src, 1, out, sizeof(out), &err), STRATA_OK);
	assert_string_equal(out, "ok");
}

static void test_prelude_list(void **state)
{
	char out[256];
	struct strata_error err = { 0 };
	const char *src =
		"local l = strata.list()\n"
		"for i = 1, 5 do l:push_front(i) end\n"     /* 5 4 3 2 1 */
		"l:push_front(2)\n"                          /* 2 5 4 3 1 */
		"l:remove(4)\n"                              /* 2 5 3 1 */
		"l:push_back(5)\n"                           /* 2 3 1 5 */
		"local t = {}\n"
		"for k in l:from_back() do t[#t + 1] = k end\n"
		"local u = {}\n"
		"for k in l:from_front() do u[#u + 1] = k end\n"
		"return table.concat(t, ',') .. '|' .. table.concat(u, ',') .. '|' .. #l .. '|' ..\n"
		"  tostring(l:contains(4)) .. tostring(l:contains(3)) .. '|' .. strata.tier('ram')\n";
	assert_int_equal(run_chunk(src, 1, out, sizeof(out), &err), STRATA_OK);
	assert_string_equal(out, "5,1,3,2|2,3,1,5|4|falsetrue|1");
}

static void test_seeded_random(void **state)
{
	char a[512], b[512], c[512];
	struct strata_error err = { 0 };
	const char *src =
		"local t = {} for i = 1, 16 do t[i] = math.random(1, 1000000) end return table.concat(t, ',')";
	assert_int_equal(run_chunk(src, 42, a, sizeof(a), &err), 0);
	assert_int_equal(run_chunk(src, 42, b, sizeof(b), &err), 0);
	assert_int_equal(run_chunk(src, 43, c, sizeof(c), &err), 0);
	assert_string_equal(a, b);
	assert_string_not_equal(a, c);
}

static void test_syntax_error_line(void **state)
{
	struct fixture f;
	struct strata_policy p;
	struct strata_error err = { 0 };
	fixture_init(&f, 2, 8);
	const char *path = write_script("bad.lua", "return {\n  on_insert = function(e) end,\n  victim = function( end\n}\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_ESCRIPT);
	assert_non_null(strstr(err.msg, "bad.lua:3:"));
	assert_ptr_equal(p.ops, NULL);
	/* a missing file names the path */
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, "/nonexistent/x.lua", NULL, &p, &err), STRATA_ENOTFOUND);
	assert_non_null(strstr(err.msg, "/nonexistent/x.lua"));
	/* an error in the main chunk names its line too */
	path = write_script("top.lua", "local x = 1\nerror('top level failure')\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_ESCRIPT);
	assert_non_null(strstr(err.msg, "top.lua:2: top level failure"));
}

static void test_missing_hook_and_bad_shape(void **state)
{
	struct fixture f;
	struct strata_policy p;
	struct strata_error err = { 0 };
	fixture_init(&f, 2, 8);
	const char *path = write_script("half.lua",
		"return { on_insert = function() end, on_access = function() end, on_remove = function() end }\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "half.lua"));
	assert_non_null(strstr(err.msg, "'victim'"));
	path = write_script("num.lua", "return 42\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "num.lua: the script must return a table"));
	/* an eviction script loaded as prefetch: on_layer missing */
	assert_int_equal(create(&f, STRATA_ROLE_PREFETCH, repo_file("policies/lua/lru.lua"), NULL, &p, &err),
			 STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "lru.lua"));
	assert_non_null(strstr(err.msg, "'on_layer'"));
	/* a typo in a hook name is an error, not a silently ignored field */
	path = write_script("typo.lua",
		"return { on_insert = function() end, on_access = function() end, on_remove = function() end,\n"
		"  victim = function() end, on_acess = function() end }\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "typo.lua: unknown field 'on_acess'"));
	/* options: the script declares none */
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, repo_file("policies/lua/lru.lua"), "depth=2", &p, &err),
			 STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "depth"));
}

static void test_instruction_limit(void **state)
{
	struct fixture f;
	struct strata_policy p;
	struct strata_error err = { 0 };
	fixture_init(&f, 2, 8);
	const char *path = write_script("spin.lua",
		"return {\n"
		"  on_insert = function() end, on_access = function() end, on_remove = function() end,\n"
		"  victim = function(now)\n"
		"    while true do pcall(function() while true do end end) end\n"
		"  end,\n"
		"}\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_OK);
	const struct strata_evict_ops *ops = strata_evict_ops_of(&p);
	uint8_t pinned[16] = { 0 }, resident[16] = { 1 };
	struct strata_residency r = { pinned, resident, 1 };
	ops->on_insert(&p, 0, 0);
	assert_null(strata_policy_error(&p));
	assert_int_equal(ops->victim(&p, 1, &r), STRATA_NO_EXPERT);
	const struct strata_error *e = strata_policy_error(&p);
	assert_non_null(e);
	assert_int_equal(e->code, STRATA_ESCRIPT);
	assert_non_null(strstr(e->msg, "spin.lua:"));
	assert_non_null(strstr(e->msg, "instruction limit exceeded in hook 'victim'"));
	/* the instance stays failed and does not enter Lua again */
	assert_int_equal(ops->victim(&p, 2, &r), STRATA_NO_EXPERT);
	destroy(&p);

	/* a runaway main chunk is stopped too */
	path = write_script("spintop.lua", "while true do end\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_ESCRIPT);
	assert_non_null(strstr(err.msg, "spintop.lua: instruction limit exceeded in hook 'main chunk'"));

	/* pattern matching runs in C, out of the count hook's reach: a costly
	 * pattern is refused at once (it ran for minutes), a cheap one works,
	 * and the method form (s:find) is bounded the same way */
	path = write_script("pattern.lua",
		"local ok = ('key=42'):match('^(%w+)=(%d+)$') == 'key'\n"
		"assert(ok and select('#', ('a,b,c'):gsub(',', ';')) == 2)\n"
		"return {\n"
		"  on_insert = function() end, on_access = function() end, on_remove = function() end,\n"
		"  victim = function(now)\n"
		"    local s = ('a'):rep(40)\n"
		"    return s:find(('a*'):rep(30) .. 'b') or -1\n"
		"  end,\n"
		"}\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_OK);
	ops = strata_evict_ops_of(&p);
	uint64_t t0 = strata_now_ns();
	assert_int_equal(ops->victim(&p, 1, &r), STRATA_NO_EXPERT);
	assert_true(strata_now_ns() - t0 < 2000000000ull);
	e = strata_policy_error(&p);
	assert_non_null(e);
	assert_non_null(strstr(e->msg, "pattern.lua:7"));
	assert_non_null(strstr(e->msg, "string.find: a pattern with 30 repetition items on a 40-byte string"));
	destroy(&p);
}

static void test_memory_limit(void **state)
{
	struct fixture f;
	struct strata_policy p;
	struct strata_error err = { 0 };
	fixture_init(&f, 2, 8);
	setenv("STRATA_LUA_MEMORY", "4000000", 1);
	setenv("STRATA_LUA_INSTRUCTIONS", "0", 1);
	const char *path = write_script("hog.lua",
		"local keep = {}\n"
		"return {\n"
		"  on_insert = function() for i = 1, 1e9 do keep[i] = {i} end end,\n"
		"  on_access = function() end, on_remove = function() end, victim = function() end,\n"
		"}\n");
	int rc = create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err);
	setenv("STRATA_LUA_INSTRUCTIONS", "2000000", 1);
	unsetenv("STRATA_LUA_MEMORY");
	assert_int_equal(rc, STRATA_OK);
	strata_evict_ops_of(&p)->on_insert(&p, 1, 0);
	const struct strata_error *e = strata_policy_error(&p);
	assert_non_null(e);
	assert_non_null(strstr(e->msg, "hog.lua: memory limit exceeded"));
	assert_non_null(strstr(e->msg, "'on_insert'"));
	destroy(&p);
}

static void test_runtime_error_in_hook(void **state)
{
	struct fixture f;
	struct strata_policy p;
	struct strata_error err = { 0 };
	fixture_init(&f, 2, 8);
	const char *path = write_script("boom.lua",
		"local n = 0\n"
		"return {\n"
		"  on_insert = function() end, on_remove = function() end, victim = function() end,\n"
		"  on_access = function(eid, now)\n"
		"    n = n + 1\n"
		"    if n == 3 then error('boom at ' .. eid) end\n"
		"  end,\n"
		"}\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_OK);
	const struct strata_evict_ops *ops = strata_evict_ops_of(&p);
	ops->on_access(&p, 4, 0);
	ops->on_access(&p, 5, 1);
	assert_null(strata_policy_error(&p));
	ops->on_access(&p, 6, 2);
	const struct strata_error *e = strata_policy_error(&p);
	assert_non_null(e);
	assert_int_equal(e->code, STRATA_ESCRIPT);
	assert_true(!strncmp(e->msg, "boom.lua:6: boom at 6 (in hook 'on_access')", 43));
	assert_non_null(strstr(e->msg, "stack traceback"));
	destroy(&p);

	/* the residency userdata: methods, length, typed checks */
	path = write_script("res.lua",
		"return { on_insert = function() end, on_access = function() end, on_remove = function() end,\n"
		"  victim = function(now, res)\n"
		"    assert(#res == 2 and res:resident(3) and not res:resident(4) and res:pinned(3))\n"
		"    assert(not pcall(res.pinned, {}, 3))            -- not a residency userdata\n"
		"    assert(not pcall(res.pinned, res, 999))         -- out of range\n"
		"    if res:pinned(3) and not strata.is_pinned(5) then return 5 end\n"
		"  end }\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_OK);
	{
		uint8_t pin[16] = { 0 }, in[16] = { 0 };
		pin[3] = 1;
		in[3] = in[5] = 1;
		struct strata_residency rr = { pin, in, 2 };
		assert_int_equal(strata_evict_ops_of(&p)->victim(&p, 0, &rr), 5);
		assert_null(strata_policy_error(&p));
	}
	destroy(&p);

	/* a bad return value is an error naming the hook */
	path = write_script("badret.lua",
		"return { on_insert = function() end, on_access = function() end, on_remove = function() end,\n"
		"  victim = function() return 'nope' end }\n");
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, path, NULL, &p, &err), STRATA_OK);
	uint8_t pinned[16] = { 0 }, resident[16] = { 0 };
	struct strata_residency r = { pinned, resident, 0 };
	assert_int_equal(strata_evict_ops_of(&p)->victim(&p, 0, &r), STRATA_NO_EXPERT);
	assert_non_null(strata_policy_error(&p));
	assert_non_null(strstr(strata_policy_error(&p)->msg, "badret.lua: hook 'victim' returned string"));
	destroy(&p);
}

/* ---- the policy adapter's roles ---- */

static void test_init_env_and_options(void **state)
{
	struct fixture f;
	struct strata_policy p;
	struct strata_error err = { 0 };
	fixture_init(&f, 2, 8);
	const char *path = write_script("opts.lua",
		"local seen\n"
		"return {\n"
		"  options = { alpha = { default = 0.5, min = 0, max = 1 }, k = { default = 3 },\n"
		"              tag = { default = 'x' }, on = { default = false } },\n"
		"  init = function(env, o)\n"
		"    assert(env.n_moe_layers == 2 and env.n_experts == 8 and env.n_ids == 16 and env.top_k == 2)\n"
		"    assert(env.budget.vram == 1048576 and env.budget.nvme == math.huge and env.seed == 7)\n"
		"    assert(env.role == 'place' and env.tier == nil and env.has_future == false)\n"
		"    assert(strata.tier_of(4) == 1 and strata.expert_bytes(0) == 4096 and strata.eid(1, 2) == 10)\n"
		"    seen = string.format('%g/%d/%s/%s', o.alpha, o.k, o.tag, tostring(o.on))\n"
		"  end,\n"
		"  admit = function(eid, from, now)\n"
		"    if eid == 0 then return { 'vram', 'ram' } elseif eid == 1 then return 'ram'\n"
		"    elseif eid == 2 then return nil elseif eid == 3 then return 1 << strata.TIER_VRAM end\n"
		"    assert(seen == '0.25/5/x/true', seen) return 0\n"
		"  end,\n"
		"  initial_tier = function(eid) if eid == 0 then return 'nvme' end end,\n"
		"}\n");
	assert_int_equal(create(&f, STRATA_ROLE_PLACE, path, "k=5:alpha=0.25:on=1", &p, &err), STRATA_OK);
	const struct strata_place_ops *ops = strata_place_ops_of(&p);
	assert_true(!strncmp(p.name, "opts.lua", 8));
	assert_non_null(strstr(p.name, "k=5"));
	assert_int_equal(ops->admit(&p, 0, STRATA_TIER_NVME, 0), 3);
	assert_int_equal(ops->admit(&p, 1, STRATA_TIER_NVME, 0), 2);
	assert_int_equal(ops->admit(&p, 2, STRATA_TIER_NVME, 0), 0);
	assert_int_equal(ops->admit(&p, 3, STRATA_TIER_NVME, 0), 1);
	assert_int_equal(ops->admit(&p, 4, STRATA_TIER_NVME, 0), 0);
	assert_null(strata_policy_error(&p));
	/* initial_tier present, on_access absent: C never calls into Lua for it */
	assert_non_null(ops->initial_tier);
	assert_null(ops->on_access);
	assert_int_equal(ops->initial_tier(&p, 0), STRATA_TIER_NVME);
	assert_int_equal(ops->initial_tier(&p, 4), f.tiers[4]); /* nil: the shard header's tier */
	destroy(&p);

	assert_int_equal(create(&f, STRATA_ROLE_PLACE, path, "kk=1", &p, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "opts.lua"));
	assert_non_null(strstr(err.msg, "kk"));

	/* options as a global (the README's snippet read as a statement): taken */
	path = write_script("gopts.lua", "options = { span = { default = 2, min = 1, max = 8 } }\n"
					 "return { admit = function(eid, from, now) return 0 end }\n");
	assert_int_equal(create(&f, STRATA_ROLE_PLACE, path, "span=4", &p, &err), STRATA_OK);
	assert_string_equal(p.name, "gopts.lua-span=4");
	destroy(&p);
	/* both a global and a field: refused, not one silently ignored */
	path = write_script("gopts2.lua", "options = { span = { default = 2 } }\n"
					  "return { options = { depth = { default = 1 } },\n"
					  "         admit = function(eid, from, now) return 0 end }\n");
	assert_int_equal(create(&f, STRATA_ROLE_PLACE, path, NULL, &p, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "declared twice"));
}

static void test_lookahead_script(void **state)
{
	struct fixture f;
	struct strata_policy p;
	struct strata_error err = { 0 };
	fixture_init(&f, 4, 8);
	assert_int_equal(create(&f, STRATA_ROLE_PREFETCH, repo_file("policies/lua/lookahead.lua"), "depth=2", &p, &err),
			 STRATA_OK);
	assert_string_equal(p.name, "lookahead.lua-depth=2");
	const struct strata_prefetch_ops *ops = strata_prefetch_ops_of(&p);
	assert_null(ops->on_route);
	struct strata_hint hints[] = {
		{ 1, 3, 0.9f }, { 2, 5, 0.8f }, { 3, 7, 0.7f }, { 0, 1, 0.5f }, { 2, 6, 0.4f },
	};
	struct strata_layer_ctx ctx = { .token = 9, .layer = 0, .now = 100, .hints = hints, .n_hints = 5 };
	struct strata_prefetch_req out[8];
	uint32_t n = ops->on_layer(&p, &ctx, out, 8);
	assert_null(strata_policy_error(&p));
	assert_int_equal(n, 3); /* layers 1 and 2 only */
	assert_int_equal(out[0].eid, 1 * 8 + 3);
	assert_int_equal(out[1].eid, 2 * 8 + 5);
	assert_int_equal(out[2].eid, 2 * 8 + 6);
	assert_int_equal(out[0].tier, STRATA_TIER_VRAM);
	/* the sink stops at max */
	assert_int_equal(ops->on_layer(&p, &ctx, out, 2), 2);
	ctx.n_hints = 0;
	assert_int_equal(ops->on_layer(&p, &ctx, out, 8), 0);
	destroy(&p);

	/* returned tables, on_route with the routed experts, userdata kept out of
	 * other hooks */
	const char *path = write_script("ret.lua",
		"local saved, routed = nil, ''\n"
		"return {\n"
		"  on_layer = function(token, layer, now, hints, out, experts)\n"
		"    saved = hints\n"
		"    assert(#experts == (layer == 1 and 2 or 0), #experts)\n"
		"    if layer == 1 then assert(experts[1] == 6 and experts[2] == 7 and experts[3] == nil) end\n"
		"    assert(tostring(out):find('strata.requests'))\n"
		"    return { 1, { 2, 'ram' }, { 3, strata.TIER_VRAM } }\n"
		"  end,\n"
		"  on_route = function(token, layer, experts)\n"
		"    local t = {} for i, e in ipairs(experts) do t[i] = e end\n"
		"    routed = table.concat(t, ',')\n"
		"    assert(routed == '4,2', routed)\n"
		"    local ok, e = pcall(function() return #saved end)\n"
		"    assert(not ok and e:find('outside'), e)\n"
		"  end,\n"
		"}\n");
	assert_int_equal(create(&f, STRATA_ROLE_PREFETCH, path, NULL, &p, &err), STRATA_OK);
	ops = strata_prefetch_ops_of(&p);
	ctx.n_hints = 5;
	assert_int_equal(ops->on_layer(&p, &ctx, out, 8), 3);
	assert_int_equal(out[1].eid, 2);
	assert_int_equal(out[1].tier, STRATA_TIER_RAM);
	uint32_t ex[] = { 4, 2 }, cur[] = { 6, 7 };
	ops->on_route(&p, 9, 0, ex, 2);
	ctx.layer = 1;
	ctx.experts = cur;
	ctx.n_experts = 2;
	assert_int_equal(ops->on_layer(&p, &ctx, out, 8), 3);
	assert_null(strata_policy_error(&p));
	assert_null(strata_policy_error(&p));
	destroy(&p);
}

/* ---- C vs Lua on the policy harness ---- */

static void run_harness(const struct strata_harness_trace *t, const char *evict, const char *prefetch,
			uint64_t budget_experts, struct strata_harness_counters *k)
{
	struct strata_harness_config c;
	struct strata_error err = { 0 };
	strata_harness_config_defaults(&c);
	c.budget = budget_experts * c.expert_bytes;
	c.evict = evict;
	c.prefetch = prefetch;
	c.seed = 5;
	int rc = strata_harness_run(t, &c, k, &err);
	if (rc)
		fail_msg("%s + %s: %s", evict, prefetch ? prefetch : "none", err.msg);
}

static void assert_same_counters(const struct strata_harness_counters *a, const struct strata_harness_counters *b,
				 const char *what)
{
	if (memcmp(a, b, sizeof(*a))) {
		fail_msg("%s: C and Lua disagree: hits %llu/%llu misses %llu/%llu evictions %llu/%llu "
			 "prefetch issued %llu/%llu used %llu/%llu wasted %llu/%llu redundant %llu/%llu dropped %llu/%llu",
			 what, (unsigned long long)a->hits, (unsigned long long)b->hits,
			 (unsigned long long)a->misses, (unsigned long long)b->misses,
			 (unsigned long long)a->evictions, (unsigned long long)b->evictions,
			 (unsigned long long)a->prefetch_issued, (unsigned long long)b->prefetch_issued,
			 (unsigned long long)a->prefetch_used, (unsigned long long)b->prefetch_used,
			 (unsigned long long)a->prefetch_wasted, (unsigned long long)b->prefetch_wasted,
			 (unsigned long long)a->prefetch_redundant, (unsigned long long)b->prefetch_redundant,
			 (unsigned long long)a->prefetch_dropped, (unsigned long long)b->prefetch_dropped);
	}
}

static void gen_trace(struct strata_harness_trace **t, uint64_t seed)
{
	struct strata_model_spec spec;
	struct strata_error err = { 0 };
	assert_int_equal(strata_model_spec_parse("custom:layers=4,experts=16,top_k=2,hidden=64,inter=32", &spec, &err), 0);
	assert_int_equal(strata_harness_trace_gen(&spec, 96, seed, t, &err), 0);
}

static void test_lua_lru_matches_c(void **state)
{
	char lua_lru[PATH_MAX];
	snprintf(lua_lru, sizeof(lua_lru), "%s", repo_file("policies/lua/lru.lua"));
	for (uint64_t seed = 1; seed <= 3; seed++) {
		struct strata_harness_trace *t;
		gen_trace(&t, seed);
		for (uint64_t budget = 3; budget <= 40; budget += 9) {
			struct strata_harness_counters c_k, lua_k;
			run_harness(t, "lru", NULL, budget, &c_k);
			run_harness(t, lua_lru, NULL, budget, &lua_k);
			assert_true(c_k.evictions > 0);
			assert_same_counters(&c_k, &lua_k, "lru");
			/* with prefetch inserts (and their evictions) in the mix */
			run_harness(t, "lru", "lookahead:adaptive=0:depth=2", budget, &c_k);
			run_harness(t, lua_lru, "lookahead:adaptive=0:depth=2", budget, &lua_k);
			assert_true(c_k.prefetch_issued > 0);
			assert_same_counters(&c_k, &lua_k, "lru + lookahead");
		}
		strata_harness_trace_free(t);
	}
}

static void test_lua_lookahead_and_lfu_match_c(void **state)
{
	static const char *const opts[] = { "", "depth=2", "depth=3:topn=1", "depth=2:min_score=0.5",
					    "depth=2:tier=ram" };
	char path[PATH_MAX], c_spec[PATH_MAX + 64], lua_spec[PATH_MAX + 64];
	struct strata_harness_trace *t;
	struct strata_harness_counters c_k, lua_k;
	gen_trace(&t, 9);
	snprintf(path, sizeof(path), "%s", repo_file("policies/lua/lookahead.lua"));
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		/* the script is the built-in without its scheduling options and adaptation */
		snprintf(c_spec, sizeof(c_spec), "lookahead:adaptive=0:keep_unused=1:%s", *opts[i] ? opts[i] : "depth=1");
		snprintf(lua_spec, sizeof(lua_spec), "%s%s%s", path, *opts[i] ? ":" : "", opts[i]);
		for (uint64_t budget = 6; budget <= 30; budget += 12) {
			run_harness(t, "lru", c_spec, budget, &c_k);
			run_harness(t, "lru", lua_spec, budget, &lua_k);
			assert_true(c_k.prefetch_issued > 0);
			assert_same_counters(&c_k, &lua_k, c_spec);
		}
	}
	snprintf(path, sizeof(path), "%s", repo_file("policies/lua/lfu.lua"));
	for (int hist = 0; hist <= 1; hist++) {
		snprintf(lua_spec, sizeof(lua_spec), "%s%s", path, hist ? ":history=1" : "");
		for (uint64_t budget = 5; budget <= 30; budget += 12) {
			run_harness(t, hist ? "lfu:history=1" : "lfu", "lookahead", budget, &c_k);
			run_harness(t, lua_spec, "lookahead", budget, &lua_k);
			assert_same_counters(&c_k, &lua_k, hist ? "lfu:history=1" : "lfu");
		}
	}
	strata_harness_trace_free(t);
}

/* Through the loader: canonical names, and a failing hook fails the
 * harness run with the script's message. */
static void test_loader_and_harness_errors(void **state)
{
	struct strata_harness_trace *t;
	struct strata_harness_config c;
	struct strata_harness_counters k;
	struct strata_error err = { 0 };
	char spec[PATH_MAX + 32];
	gen_trace(&t, 2);
	strata_harness_config_defaults(&c);
	c.budget = 8 * c.expert_bytes;
	snprintf(spec, sizeof(spec), "%s:depth=3", repo_file("policies/lua/lookahead.lua"));
	c.prefetch = spec;
	c.evict = repo_file("policies/lua/lru.lua");
	struct strata_harness *h;
	assert_int_equal(strata_harness_open(t, &c, &h, &err), 0);
	assert_string_equal(strata_harness_policy(h, STRATA_ROLE_PREFETCH)->name, "lookahead.lua-depth=3");
	assert_string_equal(strata_harness_policy(h, STRATA_ROLE_EVICT)->name, "lru.lua");
	assert_int_equal(strata_harness_replay(h, &err), 0);
	strata_harness_close(h);

	const char *path = write_script("late.lua",
		"local lru = strata.list()\n"
		"return {\n"
		"  on_insert = function(e) lru:push_front(e) end,\n"
		"  on_access = function(e) lru:push_front(e) end,\n"
		"  on_remove = function(e) lru:remove(e) end,\n"
		"  victim = function(now)\n"
		"    if now > 50 then local t = nil; return t.x end\n"
		"    for e in lru:from_back() do if not strata.is_pinned(e) then return e end end\n"
		"  end,\n"
		"}\n");
	c.evict = path;
	c.prefetch = NULL;
	assert_int_not_equal(strata_harness_run(t, &c, &k, &err), 0);
	assert_non_null(strstr(err.msg, "late.lua:7: attempt to index a nil value"));
	assert_non_null(strstr(err.msg, "'victim'"));
	strata_harness_trace_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sandbox),
		cmocka_unit_test(test_prelude_list),
		cmocka_unit_test(test_seeded_random),
		cmocka_unit_test(test_syntax_error_line),
		cmocka_unit_test(test_missing_hook_and_bad_shape),
		cmocka_unit_test(test_instruction_limit),
		cmocka_unit_test(test_memory_limit),
		cmocka_unit_test(test_runtime_error_in_hook),
		cmocka_unit_test(test_init_env_and_options),
		cmocka_unit_test(test_lookahead_script),
		cmocka_unit_test(test_lua_lru_matches_c),
		cmocka_unit_test(test_lua_lookahead_and_lfu_match_c),
		cmocka_unit_test(test_loader_and_harness_errors),
	};
	return cmocka_run_group_tests_name("lua", tests, setup, teardown);
}
