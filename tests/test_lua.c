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
#include "strata/store.h"
#include "testutil.h"

/* ---- helpers ---- */

static char *tmpdir;

static int setup(void **state)
{
	tmpdir = test_mkdtemp();
	setenv("STRATA_LUA_INSTRUCTIONS", "2000000", 1);
	return tmpdir ? 0 : -1;
}

static int teardown(void **state)
{
	test_rmdir(tmpdir);
	free(tmpdir);
	unsetenv("STRATA_LUA_INSTRUCTIONS");
	unsetenv("STRATA_LUA_MEMORY");
	return 0;
}

static const char *write_script(const char *name, const char *src)
{
	static char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
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
		"  on_layer = function(token, layer, now, hints, out)\n"
		"    saved = hints\n"
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
	uint32_t ex[] = { 4, 2 };
	ops->on_route(&p, 9, 0, ex, 2);
	assert_null(strata_policy_error(&p));
	destroy(&p);
}

/* ---- C LRU vs Lua LRU on a trace ---- */

/* A reference LRU (array, O(n)): what the built-in C lru must do. */
struct ref_lru {
	uint64_t stamp[64];
	uint8_t in[64];
};

struct counters {
	uint64_t hits, misses, evictions, victim_hash;
};

/* Drive one eviction instance over a synthetic skewed trace with capacity
 * cap, pinning the experts of the current layer while they are acquired. */
static void drive(struct fixture *f, struct strata_policy *p, struct ref_lru *ref, uint32_t cap,
		  uint64_t seed, struct counters *c)
{
	const struct strata_evict_ops *ops = p ? strata_evict_ops_of(p) : NULL;
	uint8_t pinned[64] = { 0 }, resident[64] = { 0 };
	uint32_t n_res = 0, n = f->env.n_ids;
	uint64_t x = seed, now = 0;
	memset(c, 0, sizeof(*c));
	for (uint32_t tok = 0; tok < 400; tok++) {
		for (uint32_t layer = 0; layer < f->spec.n_moe_layers; layer++) {
			uint32_t chosen[2];
			for (int k = 0; k < 2; k++) {
				x = x * 6364136223846793005ull + 1442695040888963407ull;
				uint32_t r = (uint32_t)(x >> 33) % 100;
				uint32_t e = r < 60 ? r % 3 : r % f->spec.n_experts; /* skewed */
				if (k == 1 && e == chosen[0])
					e = (e + 1) % f->spec.n_experts;
				chosen[k] = strata_eid(&f->spec, layer, e);
			}
			for (int k = 0; k < 2; k++) {
				uint32_t eid = chosen[k];
				if (resident[eid]) {
					c->hits++;
					if (ops)
						ops->on_access(p, eid, now);
					else
						ref->stamp[eid] = now;
				} else {
					c->misses++;
					if (n_res == cap) {
						int64_t v = -1;
						if (ops) {
							struct strata_residency r = { pinned, resident, n_res };
							v = ops->victim(p, now, &r);
						} else {
							for (uint32_t i = 0; i < n; i++)
								if (ref->in[i] && !pinned[i] &&
								    (v < 0 || ref->stamp[i] < ref->stamp[v]))
									v = i;
						}
						assert_true(v >= 0);
						assert_true(resident[v] && !pinned[v]);
						resident[v] = 0;
						n_res--;
						c->evictions++;
						c->victim_hash = c->victim_hash * 31 + (uint64_t)v + 1;
						if (ops)
							ops->on_remove(p, (uint32_t)v);
						else
							ref->in[v] = 0;
					}
					resident[eid] = 1;
					n_res++;
					if (ops)
						ops->on_insert(p, eid, now);
					else {
						ref->in[eid] = 1;
						ref->stamp[eid] = now;
					}
				}
				pinned[eid] = 1;
				now++;
			}
			pinned[chosen[0]] = pinned[chosen[1]] = 0;
		}
	}
	if (p)
		assert_null(strata_policy_error(p));
}

static void test_lua_lru_matches_reference(void **state)
{
	struct fixture f;
	struct strata_policy p;
	struct strata_error err = { 0 };
	struct ref_lru ref;
	struct counters want, got;
	fixture_init(&f, 2, 8);
	for (uint32_t cap = 2; cap <= 10; cap += 4) {
		memset(&ref, 0, sizeof(ref));
		drive(&f, NULL, &ref, cap, 11, &want);
		assert_int_equal(create(&f, STRATA_ROLE_EVICT, repo_file("policies/lua/lru.lua"), NULL, &p, &err),
				 STRATA_OK);
		assert_string_equal(p.name, "lru.lua");
		drive(&f, &p, NULL, cap, 11, &got);
		destroy(&p);
		assert_true(want.evictions > 10);
		assert_int_equal(got.hits, want.hits);
		assert_int_equal(got.misses, want.misses);
		assert_int_equal(got.evictions, want.evictions);
		assert_int_equal(got.victim_hash, want.victim_hash);
	}
	/* lfu.lua runs the same trace without errors and never picks a pinned one */
	assert_int_equal(create(&f, STRATA_ROLE_EVICT, repo_file("policies/lua/lfu.lua"), NULL, &p, &err), STRATA_OK);
	drive(&f, &p, NULL, 4, 11, &got);
	destroy(&p);
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
		cmocka_unit_test(test_lua_lru_matches_reference),
	};
	return cmocka_run_group_tests_name("lua", tests, setup, teardown);
}
