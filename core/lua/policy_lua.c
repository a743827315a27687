/*
 * The Lua policy adapter: a script that `return`s a table of hooks becomes
 * one more implementation of the C ops (struct strata_{evict,place,prefetch}
 * _ops).  Each instance owns its ops struct, filled only with the hooks the
 * script defines, so C never enters Lua for an absent hook; a missing
 * required hook is an error naming the script.
 *
 * Hot-path hooks get integers.  C objects reach Lua as reusable typed
 * userdata (one named metatable per type, luaL_checkudata): the residency
 * view for victim, the hints and the request sink for on_layer, the routed
 * experts for on_route.  Each is created once per instance and only points at
 * the C data for the duration of its hook call; used outside, it raises.
 *
 * Ops that cannot return a status record the first script error on
 * p->error (see strata_policy_error) and return a harmless value; the
 * instance then stops entering Lua.
 *
 * Script shape:
 *   return {
 *     options = { depth = { default = 2, min = 0, max = 8, help = "..." } },
 *     init = function(env, opts) ... end,          -- optional
 *     on_insert = function(eid, now) end, ...      -- the role's hooks
 *   }
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "strata/lua.h"
#include "strata/option.h"
#include "strata/policy.h"
#include "strata/types.h"

#define MT_RESIDENCY "strata.residency"
#define MT_HINTS "strata.hints"
#define MT_REQUESTS "strata.requests"
#define MT_EXPERTS "strata.experts"
#define OPT_SLOT STRATA_OPT_STR_MAX
#define OPT_SLOTS 5 /* value, name, default text, help, choices */

enum hook {
	H_INIT,
	H_ON_INSERT,
	H_ON_ACCESS,
	H_ON_REMOVE,
	H_VICTIM,
	H_INITIAL_TIER,
	H_ADMIT,
	H_ON_LAYER,
	H_ON_ROUTE,
	H_COUNT,
};
static const char *const hook_names[H_COUNT] = {
	"init", "on_insert", "on_access", "on_remove", "victim",
	"initial_tier", "admit", "on_layer", "on_route",
};

struct lua_policy {
	union {
		struct strata_evict_ops evict;
		struct strata_place_ops place;
		struct strata_prefetch_ops prefetch;
	} ops;
	struct strata_policy *p;
	struct strata_lua *lua;
	lua_State *L;
	int ref[H_COUNT];        /* registry refs of hook functions, LUA_NOREF if absent */
	int ref_res, ref_hints, ref_req, ref_exp; /* the reusable userdata */
	/* What the userdata show during their hook; NULL outside. */
	const struct strata_residency *res;
	const struct strata_layer_ctx *ctx;
	struct strata_prefetch_req *req;
	uint32_t req_max, req_n;
	const uint32_t *experts;
	uint32_t n_experts;
	int exp_valid;              /* the experts userdata may be read */
	struct strata_option *opts; /* the script's declared options */
	char *optbuf;
	unsigned n_opts;
	char base[96];              /* "lru.lua" */
	char owner[128];            /* "evict lru.lua" for messages */
};

/* Each typed userdata is a pointer to its adapter. */
static struct lua_policy *check_ud(lua_State *L, int i, const char *mt)
{
	return *(struct lua_policy **)luaL_checkudata(L, i, mt);
}

static struct lua_policy *policy_up(lua_State *L)
{
	return lua_touserdata(L, lua_upvalueindex(1));
}

static uint32_t check_eid(lua_State *L, int i, const struct lua_policy *lp)
{
	lua_Integer e = luaL_checkinteger(L, i);
	if (e < 0 || (uint64_t)e >= lp->p->env->n_ids)
		luaL_error(L, "expert id %I out of range (0..%d)", e, (int)lp->p->env->n_ids - 1);
	return (uint32_t)e;
}

/* ---- strata.residency: victim's view of the tier ---- */
static const struct strata_residency *cur_res(lua_State *L, struct lua_policy *lp)
{
	if (!lp->res)
		luaL_error(L, "residency view used outside the victim hook");
	return lp->res;
}

static int res_pinned(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_RESIDENCY);
	const struct strata_residency *r = cur_res(L, lp);
	lua_pushboolean(L, r->pinned && r->pinned[check_eid(L, 2, lp)]);
	return 1;
}

static int res_resident(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_RESIDENCY);
	const struct strata_residency *r = cur_res(L, lp);
	lua_pushboolean(L, r->resident && r->resident[check_eid(L, 2, lp)]);
	return 1;
}

static int res_len(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_RESIDENCY);
	lua_pushinteger(L, cur_res(L, lp)->n_resident);
	return 1;
}

/* strata.is_pinned(eid) / strata.is_resident(eid): the same, as plain
 * functions (no method lookup on the hot path). */
static int l_is_pinned(lua_State *L)
{
	struct lua_policy *lp = policy_up(L);
	const struct strata_residency *r = cur_res(L, lp);
	lua_pushboolean(L, r->pinned && r->pinned[check_eid(L, 1, lp)]);
	return 1;
}

static int l_is_resident(lua_State *L)
{
	struct lua_policy *lp = policy_up(L);
	const struct strata_residency *r = cur_res(L, lp);
	lua_pushboolean(L, r->resident && r->resident[check_eid(L, 1, lp)]);
	return 1;
}

/* ---- strata.hints: lookahead hints of on_layer, 1-based ---- */
static const struct strata_hint *hint_at(lua_State *L, struct lua_policy *lp, int i)
{
	if (!lp->ctx)
		luaL_error(L, "hints used outside the on_layer hook");
	lua_Integer k = luaL_checkinteger(L, i);
	if (k < 1 || k > lp->ctx->n_hints)
		luaL_error(L, "hint %I out of range (1..%d)", k, (int)lp->ctx->n_hints);
	return &lp->ctx->hints[k - 1];
}

static int hints_get(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_HINTS);
	const struct strata_hint *h = hint_at(L, lp, 2);
	lua_pushinteger(L, h->layer);
	lua_pushinteger(L, h->expert);
	lua_pushnumber(L, h->score);
	return 3;
}

static int hints_eid(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_HINTS);
	const struct strata_hint *h = hint_at(L, lp, 2);
	lua_pushinteger(L, (lua_Integer)h->layer * lp->p->env->spec->n_experts + h->expert);
	return 1;
}

static int hints_len(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_HINTS);
	if (!lp->ctx)
		return luaL_error(L, "hints used outside the on_layer hook");
	lua_pushinteger(L, lp->ctx->n_hints);
	return 1;
}

/* ---- strata.requests: on_layer's sink, out:push(eid[, tier]) ---- */
static int tier_arg(lua_State *L, int i, int def)
{
	if (lua_isnoneornil(L, i))
		return def;
	if (lua_type(L, i) == LUA_TSTRING) {
		const char *s = lua_tostring(L, i);
		if (!strcmp(s, "vram"))
			return STRATA_TIER_VRAM;
		if (!strcmp(s, "ram"))
			return STRATA_TIER_RAM;
		if (!strcmp(s, "nvme"))
			return STRATA_TIER_NVME;
		return luaL_error(L, "unknown tier '%s' (vram, ram, nvme)", s);
	}
	lua_Integer t = luaL_checkinteger(L, i);
	if (t < 0 || t >= STRATA_TIER_COUNT)
		return luaL_error(L, "tier %I out of range (0..2)", t);
	return (int)t;
}

static int push_request(lua_State *L, struct lua_policy *lp, int ieid, int itier)
{
	if (!lp->req)
		return luaL_error(L, "request sink used outside the on_layer hook");
	uint32_t eid = check_eid(L, ieid, lp);
	int tier = tier_arg(L, itier, STRATA_TIER_VRAM);
	if (tier == STRATA_TIER_NVME)
		return luaL_error(L, "prefetch destination must be vram or ram");
	if (lp->req_n >= lp->req_max)
		return 0; /* full: extra requests are dropped */
	lp->req[lp->req_n].eid = eid;
	lp->req[lp->req_n].tier = (uint32_t)tier;
	lp->req_n++;
	return 1;
}

static int req_push(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_REQUESTS);
	lua_pushboolean(L, push_request(L, lp, 2, 3));
	return 1;
}

static int req_len(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_REQUESTS);
	lua_pushinteger(L, lp->req_n);
	return 1;
}

static int req_room(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_REQUESTS);
	lua_pushinteger(L, lp->req ? lp->req_max - lp->req_n : 0);
	return 1;
}

/* ---- strata.experts: on_route's routed experts, 1-based, ipairs works ---- */
static int exp_index(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_EXPERTS);
	if (!lp->exp_valid)
		return luaL_error(L, "routed experts used outside on_layer/on_route");
	if (!lua_isinteger(L, 2)) {
		lua_pushnil(L);
		return 1;
	}
	lua_Integer k = lua_tointeger(L, 2);
	if (k < 1 || k > lp->n_experts)
		lua_pushnil(L);
	else
		lua_pushinteger(L, lp->experts[k - 1]);
	return 1;
}

static int exp_len(lua_State *L)
{
	struct lua_policy *lp = check_ud(L, 1, MT_EXPERTS);
	if (!lp->exp_valid)
		return luaL_error(L, "routed experts used outside on_layer/on_route");
	lua_pushinteger(L, lp->n_experts);
	return 1;
}

static int ud_tostring(lua_State *L)
{
	lua_pushfstring(L, "%s: %p", luaL_typename(L, 1), lua_topointer(L, 1));
	if (lua_getmetatable(L, 1) && lua_getfield(L, -1, "__name") == LUA_TSTRING)
		lua_pushfstring(L, "%s: %p", lua_tostring(L, -1), lua_topointer(L, 1));
	return 1;
}

/* Create the userdata of type mt for lp with methods, keep a registry ref. */
static int make_ud(lua_State *L, struct lua_policy *lp, const char *mt, const luaL_Reg *methods,
		   const luaL_Reg *meta)
{
	*(struct lua_policy **)lua_newuserdatauv(L, sizeof(lp), 0) = lp;
	if (luaL_newmetatable(L, mt)) {
		luaL_setfuncs(L, meta, 0);
		if (methods) {
			lua_newtable(L);
			luaL_setfuncs(L, methods, 0);
			lua_setfield(L, -2, "__index");
		}
		lua_pushcfunction(L, ud_tostring);
		lua_setfield(L, -2, "__tostring");
	}
	lua_setmetatable(L, -2);
	return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* ---- strata.* functions of a policy state ---- */
static int l_tier_of(lua_State *L)
{
	struct lua_policy *lp = policy_up(L);
	uint32_t eid = check_eid(L, 1, lp);
	const uint8_t *t = lp->p->env->tier_table;
	lua_pushinteger(L, t ? t[eid] : STRATA_TIER_NVME);
	return 1;
}

static int l_expert_bytes(lua_State *L)
{
	struct lua_policy *lp = policy_up(L);
	uint32_t eid = check_eid(L, 1, lp);
	const uint64_t *b = lp->p->env->expert_bytes;
	lua_pushinteger(L, b ? (lua_Integer)b[eid] : 0);
	return 1;
}

static const struct strata_future *need_future(lua_State *L, struct lua_policy *lp)
{
	if (!lp->p->env->future)
		luaL_error(L, "the future of this run is unknown (only replay and sim provide it)");
	return lp->p->env->future;
}

/* strata.next_use(eid, now) -> clock of the next use after now, or nil */
static int l_next_use(lua_State *L)
{
	struct lua_policy *lp = policy_up(L);
	const struct strata_future *f = need_future(L, lp);
	uint32_t eid = check_eid(L, 1, lp);
	uint64_t now = (uint64_t)luaL_checkinteger(L, 2);
	uint64_t n = f->next_use(f, eid, now);
	if (n == STRATA_NEVER)
		lua_pushnil(L);
	else
		lua_pushinteger(L, (lua_Integer)n);
	return 1;
}

/* strata.routed(token, layer) -> the layer-local experts routed there, as
 * multiple results (none past the end of the run) */
static int l_routed(lua_State *L)
{
	struct lua_policy *lp = policy_up(L);
	const struct strata_future *f = need_future(L, lp);
	lua_Integer tok = luaL_checkinteger(L, 1), layer = luaL_checkinteger(L, 2);
	uint32_t buf[256];
	if (tok < 0 || layer < 0 || layer >= lp->p->env->spec->n_moe_layers)
		return 0;
	uint32_t n = f->routed(f, (uint64_t)tok, (uint32_t)layer, buf, 256);
	luaL_checkstack(L, (int)n, "routed experts");
	for (uint32_t i = 0; i < n; i++)
		lua_pushinteger(L, buf[i]);
	return (int)n;
}

/* ---- calling hooks ---- */
static int failed(const struct strata_policy *p)
{
	return p->error.code != STRATA_OK;
}

/* Push hook h's function; the caller pushes arguments and calls run(). */
static lua_State *begin(struct lua_policy *lp, enum hook h)
{
	lua_rawgeti(lp->L, LUA_REGISTRYINDEX, lp->ref[h]);
	return lp->L;
}

static int run(struct lua_policy *lp, enum hook h, int nargs, int nres)
{
	return strata_lua_call(lp->lua, nargs, nres, hook_names[h], &lp->p->error);
}

static void bad_result(struct lua_policy *lp, enum hook h, const char *want)
{
	STRATA_ERR(&lp->p->error, STRATA_EPOLICY, "%s: hook '%s' returned %s (%s expected)", lp->base,
		   hook_names[h], luaL_typename(lp->L, -1), want);
}

static void lua_evict_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lua_policy *lp = p->priv;
	if (failed(p))
		return;
	lua_State *L = begin(lp, H_ON_INSERT);
	lua_pushinteger(L, eid);
	lua_pushinteger(L, (lua_Integer)now);
	run(lp, H_ON_INSERT, 2, 0);
}

static void lua_evict_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct lua_policy *lp = p->priv;
	if (failed(p))
		return;
	lua_State *L = begin(lp, H_ON_ACCESS);
	lua_pushinteger(L, eid);
	lua_pushinteger(L, (lua_Integer)now);
	run(lp, H_ON_ACCESS, 2, 0);
}

static void lua_evict_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct lua_policy *lp = p->priv;
	if (failed(p))
		return;
	lua_State *L = begin(lp, H_ON_REMOVE);
	lua_pushinteger(L, eid);
	run(lp, H_ON_REMOVE, 1, 0);
}

static int64_t lua_evict_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct lua_policy *lp = p->priv;
	if (failed(p))
		return STRATA_NO_EXPERT;
	lua_State *L = begin(lp, H_VICTIM);
	lua_pushinteger(L, (lua_Integer)now);
	lua_rawgeti(L, LUA_REGISTRYINDEX, lp->ref_res);
	lp->res = r;
	int rc = run(lp, H_VICTIM, 2, 1);
	lp->res = NULL;
	if (rc)
		return STRATA_NO_EXPERT;
	int64_t v = STRATA_NO_EXPERT;
	int isint;
	lua_Integer e = lua_tointegerx(L, -1, &isint);
	if (lua_isnil(L, -1) || (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)))
		v = STRATA_NO_EXPERT;
	else if (!isint)
		bad_result(lp, H_VICTIM, "an expert id or nil");
	else if (e < 0 || (uint64_t)e >= p->env->n_ids)
		STRATA_ERR(&p->error, STRATA_EPOLICY, "%s: hook 'victim' returned expert %lld, out of range (0..%u)",
			   lp->base, (long long)e, p->env->n_ids - 1);
	else
		v = e;
	lua_pop(L, 1);
	return v;
}

/* A tier value: integer, name, or (admit) a list of those -> mask. */
static int to_tier(lua_State *L, int i, int *out)
{
	int isint;
	lua_Integer t = lua_tointegerx(L, i, &isint);
	if (isint && t >= 0 && t < STRATA_TIER_COUNT) {
		*out = (int)t;
		return 1;
	}
	if (lua_type(L, i) == LUA_TSTRING) {
		const char *s = lua_tostring(L, i);
		for (int k = 0; k < STRATA_TIER_COUNT; k++) {
			static const char *const names[] = { "vram", "ram", "nvme" };
			if (!strcmp(s, names[k])) {
				*out = k;
				return 1;
			}
		}
	}
	return 0;
}

static int lua_place_initial_tier(struct strata_policy *p, uint32_t eid)
{
	struct lua_policy *lp = p->priv;
	const uint8_t *tt = p->env->tier_table;
	int def = tt ? tt[eid] : STRATA_TIER_NVME;
	if (failed(p))
		return def;
	lua_State *L = begin(lp, H_INITIAL_TIER);
	lua_pushinteger(L, eid);
	if (run(lp, H_INITIAL_TIER, 1, 1))
		return def;
	int t = def;
	if (!lua_isnil(L, -1) && !to_tier(L, -1, &t))
		bad_result(lp, H_INITIAL_TIER, "a tier (0..2 or 'vram', 'ram', 'nvme') or nil");
	lua_pop(L, 1);
	return t;
}

static uint32_t lua_place_admit(struct strata_policy *p, uint32_t eid, int from_tier, uint64_t now)
{
	struct lua_policy *lp = p->priv;
	if (failed(p))
		return 0;
	lua_State *L = begin(lp, H_ADMIT);
	lua_pushinteger(L, eid);
	lua_pushinteger(L, from_tier);
	lua_pushinteger(L, (lua_Integer)now);
	if (run(lp, H_ADMIT, 3, 1))
		return 0;
	const uint32_t allowed = (1u << STRATA_TIER_VRAM) | (1u << STRATA_TIER_RAM);
	uint32_t mask = 0;
	int t, isint, ok = 1;
	lua_Integer m = lua_tointegerx(L, -1, &isint);
	if (lua_isnil(L, -1) || (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
		mask = 0;
	} else if (isint) {
		ok = m >= 0 && ((uint64_t)m & ~(uint64_t)allowed) == 0;
		mask = (uint32_t)m;
	} else if (lua_type(L, -1) == LUA_TSTRING) {
		ok = to_tier(L, -1, &t) && t != STRATA_TIER_NVME;
		mask = ok ? 1u << t : 0;
	} else if (lua_istable(L, -1)) {
		lua_Integer n = luaL_len(L, -1);
		for (lua_Integer k = 1; k <= n && ok; k++) {
			lua_geti(L, -1, k);
			ok = to_tier(L, -1, &t) && t != STRATA_TIER_NVME;
			if (ok)
				mask |= 1u << t;
			lua_pop(L, 1);
		}
	} else {
		ok = 0;
	}
	if (!ok) {
		bad_result(lp, H_ADMIT, "a mask of (1<<TIER_VRAM)|(1<<TIER_RAM), a tier name, a list of them, or nil");
		mask = 0;
	}
	lua_pop(L, 1);
	return mask;
}

static void lua_place_on_access(struct strata_policy *p, uint32_t eid, int served_tier, uint64_t now)
{
	struct lua_policy *lp = p->priv;
	if (failed(p))
		return;
	lua_State *L = begin(lp, H_ON_ACCESS);
	lua_pushinteger(L, eid);
	lua_pushinteger(L, served_tier);
	lua_pushinteger(L, (lua_Integer)now);
	run(lp, H_ON_ACCESS, 3, 0);
}

/* Requests returned as a table: {eid, ...} or {{eid, tier}, ...}. */
static void take_returned_requests(struct lua_policy *lp)
{
	lua_State *L = lp->L;
	lua_Integer n = luaL_len(L, -1);
	for (lua_Integer k = 1; k <= n; k++) {
		lua_geti(L, -1, k);
		int isint, tier = STRATA_TIER_VRAM, ok;
		lua_Integer e;
		if (lua_istable(L, -1)) {
			lua_geti(L, -1, 1);
			e = lua_tointegerx(L, -1, &isint);
			lua_geti(L, -2, 2);
			ok = isint && (lua_isnil(L, -1) || to_tier(L, -1, &tier));
			lua_pop(L, 2);
		} else {
			e = lua_tointegerx(L, -1, &isint);
			ok = isint;
		}
		lua_pop(L, 1);
		if (!ok || e < 0 || (uint64_t)e >= lp->p->env->n_ids || tier == STRATA_TIER_NVME) {
			STRATA_ERR(&lp->p->error, STRATA_EPOLICY,
				   "%s: hook 'on_layer' returned a bad request #%lld (an expert id or {eid, 'vram'|'ram'} expected)",
				   lp->base, (long long)k);
			return;
		}
		if (lp->req_n < lp->req_max) {
			lp->req[lp->req_n].eid = (uint32_t)e;
			lp->req[lp->req_n].tier = (uint32_t)tier;
			lp->req_n++;
		}
	}
}

static uint32_t lua_prefetch_on_layer(struct strata_policy *p, const struct strata_layer_ctx *ctx,
				      struct strata_prefetch_req *out, uint32_t max)
{
	struct lua_policy *lp = p->priv;
	if (failed(p))
		return 0;
	lua_State *L = begin(lp, H_ON_LAYER);
	lua_pushinteger(L, (lua_Integer)ctx->token);
	lua_pushinteger(L, ctx->layer);
	lua_pushinteger(L, (lua_Integer)ctx->now);
	lua_rawgeti(L, LUA_REGISTRYINDEX, lp->ref_hints);
	lua_rawgeti(L, LUA_REGISTRYINDEX, lp->ref_req);
	lua_rawgeti(L, LUA_REGISTRYINDEX, lp->ref_exp);
	lp->ctx = ctx;
	lp->req = out;
	lp->req_max = max;
	lp->req_n = 0;
	lp->experts = ctx->experts;
	lp->n_experts = ctx->experts ? ctx->n_experts : 0;
	lp->exp_valid = 1;
	int rc = run(lp, H_ON_LAYER, 6, 1);
	lp->ctx = NULL;
	lp->exp_valid = 0;
	lp->experts = NULL;
	if (!rc) {
		if (lua_istable(L, -1))
			take_returned_requests(lp);
		else if (!lua_isnil(L, -1))
			bad_result(lp, H_ON_LAYER, "nothing, or a list of requests");
		lua_pop(L, 1);
	}
	lp->req = NULL;
	return failed(p) ? 0 : lp->req_n;
}

static void lua_prefetch_on_route(struct strata_policy *p, uint64_t token, uint32_t layer,
				  const uint32_t *experts, uint32_t n)
{
	struct lua_policy *lp = p->priv;
	if (failed(p))
		return;
	lua_State *L = begin(lp, H_ON_ROUTE);
	lua_pushinteger(L, (lua_Integer)token);
	lua_pushinteger(L, layer);
	lua_rawgeti(L, LUA_REGISTRYINDEX, lp->ref_exp);
	lp->experts = experts;
	lp->n_experts = n;
	lp->exp_valid = 1;
	run(lp, H_ON_ROUTE, 3, 0);
	lp->exp_valid = 0;
	lp->experts = NULL;
}

static void lua_policy_free(struct strata_policy *p)
{
	struct lua_policy *lp = p->priv;
	if (!lp)
		return;
	strata_lua_close(lp->lua);
	free(lp->opts);
	free(lp->optbuf);
	free(lp);
	p->priv = NULL;
	p->loader = NULL;
	p->ops = NULL;
}

/* ---- setup ---- */
static void push_env(lua_State *L, const struct lua_policy *lp)
{
	const struct strata_policy_env *env = lp->p->env;
	const struct strata_model_spec *s = env->spec;
	lua_newtable(L);
	lua_pushstring(L, s->name);
	lua_setfield(L, -2, "model");
#define SETI(k, v) (lua_pushinteger(L, (lua_Integer)(v)), lua_setfield(L, -2, k))
	SETI("n_layers", s->n_layers);
	SETI("first_moe_layer", s->first_moe_layer);
	SETI("n_moe_layers", s->n_moe_layers);
	SETI("n_experts", s->n_experts);
	SETI("top_k", s->top_k);
	SETI("hidden", s->hidden);
	SETI("inter", s->inter);
	SETI("n_ids", env->n_ids);
	SETI("seed", env->seed);
#undef SETI
	lua_createtable(L, 0, 3);
	static const char *const tn[] = { "vram", "ram", "nvme" };
	for (int t = 0; t < 3; t++) {
		if (env->budget[t] == UINT64_MAX)
			lua_pushnumber(L, HUGE_VAL);
		else
			lua_pushinteger(L, (lua_Integer)env->budget[t]);
		lua_setfield(L, -2, tn[t]);
	}
	lua_setfield(L, -2, "budget");
	lua_pushstring(L, strata_role_name(lp->p->role));
	lua_setfield(L, -2, "role");
	if (lp->p->tier >= 0 && lp->p->tier < 3)
		lua_pushstring(L, tn[lp->p->tier]);
	else
		lua_pushnil(L);
	lua_setfield(L, -2, "tier");
	lua_pushboolean(L, env->future != NULL);
	lua_setfield(L, -2, "has_future");
}

static void add_strata_functions(lua_State *L, struct lua_policy *lp)
{
	static const luaL_Reg fns[] = {
		{ "is_pinned", l_is_pinned },       { "is_resident", l_is_resident },
		{ "tier_of", l_tier_of },           { "expert_bytes", l_expert_bytes },
		{ "next_use", l_next_use },         { "routed", l_routed },
		{ NULL, NULL },
	};
	lua_getglobal(L, "strata");
	lua_pushlightuserdata(L, lp);
	luaL_setfuncs(L, fns, 1);
	lua_pushinteger(L, lp->p->env->spec->n_experts);
	lua_setfield(L, -2, "n_experts");
	lua_pushinteger(L, lp->p->env->n_ids);
	lua_setfield(L, -2, "n_ids");
	lua_pushstring(L, strata_role_name(lp->p->role));
	lua_setfield(L, -2, "role");
	lua_pop(L, 1);

	static const luaL_Reg res_m[] = { { "pinned", res_pinned }, { "resident", res_resident }, { NULL, NULL } };
	static const luaL_Reg res_mt[] = { { "__len", res_len }, { NULL, NULL } };
	static const luaL_Reg hint_m[] = { { "get", hints_get }, { "eid", hints_eid }, { NULL, NULL } };
	static const luaL_Reg hint_mt[] = { { "__len", hints_len }, { NULL, NULL } };
	static const luaL_Reg req_m[] = { { "push", req_push }, { "room", req_room }, { NULL, NULL } };
	static const luaL_Reg req_mt[] = { { "__len", req_len }, { NULL, NULL } };
	static const luaL_Reg exp_mt[] = { { "__index", exp_index }, { "__len", exp_len }, { NULL, NULL } };
	lp->ref_res = make_ud(L, lp, MT_RESIDENCY, res_m, res_mt);
	lp->ref_hints = make_ud(L, lp, MT_HINTS, hint_m, hint_mt);
	lp->ref_req = make_ud(L, lp, MT_REQUESTS, req_m, req_mt);
	lp->ref_exp = make_ud(L, lp, MT_EXPERTS, NULL, exp_mt);
}

static int cmp_opt(const void *a, const void *b)
{
	return strcmp(((const struct strata_option *)a)->name, ((const struct strata_option *)b)->name);
}

/* The hooks table is at the top of the stack.  Read its `options` field:
 * either a map name -> spec or a list of specs with `name` (kept in order);
 * spec = { default = v, min = x, max = y, help = "...", type = "int"|"double"|"bool"|"string" }.
 * A script may instead set a global `options = {...}` (the README's snippet
 * reads either way): it is taken when the returned table has none, and a
 * script that declares both is refused rather than one being ignored. */
static int read_options(struct lua_policy *lp, struct strata_error *err)
{
	lua_State *L = lp->L;
	int top = lua_gettop(L);
	lua_getfield(L, -1, "options");
	lua_getglobal(L, "options");
	if (!lua_isnil(L, -1) && !lua_isnil(L, -2) && !lua_rawequal(L, -1, -2)) {
		lua_settop(L, top);
		return STRATA_ERR(err, STRATA_EINVAL,
				  "%s: options declared twice, as a global and in the returned table: keep one", lp->base);
	}
	if (lua_isnil(L, -2))
		lua_replace(L, -2); /* the global (or nil) */
	else
		lua_pop(L, 1);
	if (lua_isnil(L, -1)) {
		lua_settop(L, top);
		return STRATA_OK;
	}
	if (!lua_istable(L, -1)) {
		lua_settop(L, top);
		return STRATA_ERR(err, STRATA_EINVAL, "%s: 'options' must be a table", lp->base);
	}
	int tab = lua_gettop(L);
	unsigned n = 0;
	lua_pushnil(L);
	while (lua_next(L, tab)) {
		n++;
		lua_pop(L, 1);
	}
	lp->opts = calloc(n + 1, sizeof(*lp->opts));
	lp->optbuf = calloc(n ? n : 1, OPT_SLOTS * OPT_SLOT);
	if (!lp->opts || !lp->optbuf) {
		lua_settop(L, top);
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", lp->base);
	}
	int is_list = luaL_len(L, tab) == (lua_Integer)n && n > 0;
	unsigned i = 0;
	int rc = STRATA_OK;
	lua_pushnil(L);
	while (!rc && lua_next(L, tab)) {
		/* key at -2, spec at -1 */
		unsigned at = is_list ? (unsigned)lua_tointeger(L, -2) - 1 : i;
		if (at >= n) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "%s: 'options' mixes a list and names", lp->base);
			break;
		}
		char *slot = lp->optbuf + (size_t)at * OPT_SLOTS * OPT_SLOT;
		char *name = slot + OPT_SLOT, *def = slot + 2 * OPT_SLOT;
		char *help = slot + 3 * OPT_SLOT, *choices = slot + 4 * OPT_SLOT;
		const char *nm = NULL;
		if (!lua_istable(L, -1)) {
			const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "x";
			rc = STRATA_ERR(err, STRATA_EINVAL,
					"%s: option '%s': its spec must be a table, e.g. options = { %s = { default = %s, "
					"help = \"...\" } } (policies/lua/README.md, \"Options\")",
					lp->base, key, key, lua_isnumber(L, -1) ? lua_tostring(L, -1) : "1");
			break;
		}
		if (is_list) {
			lua_getfield(L, -1, "name");
			nm = lua_tostring(L, -1);
			lua_pop(L, 1);
		} else if (lua_type(L, -2) == LUA_TSTRING) {
			nm = lua_tostring(L, -2);
		}
		if (!nm || !*nm || strlen(nm) >= OPT_SLOT) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "%s: every option needs a name", lp->base);
			break;
		}
		snprintf(name, OPT_SLOT, "%s", nm);
		struct strata_option *o = &lp->opts[at];
		o->name = name;
		o->offset = (size_t)at * OPT_SLOTS * OPT_SLOT;
		lua_getfield(L, -1, "type");
		const char *ty = lua_tostring(L, -1);
		lua_getfield(L, -2, "default");
		int dt = lua_type(L, -1);
		if (ty ? !strcmp(ty, "int") : (dt == LUA_TNUMBER && lua_isinteger(L, -1)))
			o->type = STRATA_OPT_INT;
		else if (ty ? !strcmp(ty, "double") : dt == LUA_TNUMBER)
			o->type = STRATA_OPT_DOUBLE;
		else if (ty ? !strcmp(ty, "bool") : dt == LUA_TBOOLEAN)
			o->type = STRATA_OPT_BOOL;
		else if (ty ? !strcmp(ty, "string") : dt == LUA_TSTRING)
			o->type = STRATA_OPT_STR;
		else {
			rc = STRATA_ERR(err, STRATA_EINVAL, "%s: option '%s': give a default (or type = int|double|bool|string)",
					lp->base, nm);
			lua_pop(L, 2);
			break;
		}
		if (dt == LUA_TBOOLEAN)
			snprintf(def, OPT_SLOT, "%d", lua_toboolean(L, -1));
		else if (dt == LUA_TNUMBER && o->type == STRATA_OPT_INT)
			snprintf(def, OPT_SLOT, "%lld", (long long)lua_tointeger(L, -1));
		else if (dt == LUA_TNUMBER)
			snprintf(def, OPT_SLOT, "%.17g", lua_tonumber(L, -1));
		else if (dt == LUA_TSTRING)
			snprintf(def, OPT_SLOT, "%s", lua_tostring(L, -1));
		else
			snprintf(def, OPT_SLOT, "%s", o->type == STRATA_OPT_STR ? "" : "0");
		o->def = def;
		lua_pop(L, 2);
		lua_getfield(L, -1, "min");
		o->min = lua_tonumber(L, -1);
		lua_getfield(L, -2, "max");
		o->max = lua_tonumber(L, -1);
		lua_getfield(L, -3, "help");
		snprintf(help, OPT_SLOT, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
		o->help = help;
		lua_getfield(L, -4, "choices");
		if (lua_isstring(L, -1)) {
			snprintf(choices, OPT_SLOT, "%s", lua_tostring(L, -1));
			o->choices = choices;
		}
		lua_pop(L, 4);
		lua_pop(L, 1);
		i++;
	}
	lp->n_opts = n;
	lua_settop(L, top);
	if (rc)
		return rc;
	if (!is_list)
		qsort(lp->opts, n, sizeof(*lp->opts), cmp_opt);
	return strata_options_check(lp->opts, lp->owner, err);
}

/* Push the parsed option values as a table name -> value. */
static void push_opts(struct lua_policy *lp)
{
	lua_State *L = lp->L;
	lua_createtable(L, 0, (int)lp->n_opts);
	for (unsigned i = 0; i < lp->n_opts; i++) {
		const struct strata_option *o = &lp->opts[i];
		const char *v = lp->optbuf + o->offset;
		switch (o->type) {
		case STRATA_OPT_INT: lua_pushinteger(L, *(const int64_t *)v); break;
		case STRATA_OPT_DOUBLE: lua_pushnumber(L, *(const double *)v); break;
		case STRATA_OPT_BOOL: lua_pushboolean(L, *(const int *)v); break;
		default: lua_pushstring(L, v); break;
		}
		lua_setfield(L, -2, o->name);
	}
}

static const enum hook required_hooks[STRATA_ROLE_COUNT][4] = {
	[STRATA_ROLE_PLACE] = { H_ADMIT, H_COUNT },
	[STRATA_ROLE_EVICT] = { H_ON_INSERT, H_ON_ACCESS, H_ON_REMOVE, H_VICTIM },
	[STRATA_ROLE_PREFETCH] = { H_ON_LAYER, H_COUNT },
};
static const enum hook optional_hooks[STRATA_ROLE_COUNT][3] = {
	[STRATA_ROLE_PLACE] = { H_INIT, H_INITIAL_TIER, H_ON_ACCESS },
	[STRATA_ROLE_EVICT] = { H_INIT, H_COUNT, H_COUNT },
	[STRATA_ROLE_PREFETCH] = { H_INIT, H_ON_ROUTE, H_COUNT },
};

static int take_hooks(struct lua_policy *lp, struct strata_error *err)
{
	lua_State *L = lp->L;
	int role = lp->p->role;
	for (int h = 0; h < H_COUNT; h++)
		lp->ref[h] = LUA_NOREF;
	for (int k = 0; k < 4; k++) {
		enum hook h = required_hooks[role][k];
		if (h == H_COUNT)
			break;
		if (lua_getfield(L, -1, hook_names[h]) != LUA_TFUNCTION) {
			int t = lua_type(L, -1);
			lua_pop(L, 1);
			return STRATA_ERR(err, STRATA_EINVAL, "%s: %s policy needs hook '%s' (a function%s%s)", lp->base,
					  strata_role_name(role), hook_names[h], t == LUA_TNIL ? "" : ", got a ",
					  t == LUA_TNIL ? "" : lua_typename(L, t));
		}
		lp->ref[h] = luaL_ref(L, LUA_REGISTRYINDEX);
	}
	for (int k = 0; k < 3; k++) {
		enum hook h = optional_hooks[role][k];
		if (h == H_COUNT)
			continue;
		int t = lua_getfield(L, -1, hook_names[h]);
		if (t == LUA_TFUNCTION) {
			lp->ref[h] = luaL_ref(L, LUA_REGISTRYINDEX);
		} else {
			lua_pop(L, 1);
			if (t != LUA_TNIL)
				return STRATA_ERR(err, STRATA_EINVAL, "%s: hook '%s' must be a function, got a %s",
						  lp->base, hook_names[h], lua_typename(L, t));
		}
	}
	/* A hook of another role is most likely a script loaded for the wrong
	 * role: say so instead of silently ignoring it. */
	static const char *const known[] = { "options", "name", "help", NULL };
	lua_pushnil(L);
	while (lua_next(L, -2)) {
		lua_pop(L, 1);
		if (lua_type(L, -1) != LUA_TSTRING)
			continue;
		const char *k = lua_tostring(L, -1);
		int ok = 0;
		for (int i = 0; known[i] && !ok; i++)
			ok = !strcmp(k, known[i]);
		for (int h = 0; h < H_COUNT && !ok; h++)
			ok = lp->ref[h] != LUA_NOREF && !strcmp(k, hook_names[h]);
		if (!ok && k[0] != '_') {
			char key[64], hooks[160];
			size_t at = 0;
			hooks[0] = 0;
			for (int j = 0; j < 4 && required_hooks[role][j] != H_COUNT; j++)
				at += (size_t)snprintf(hooks + at, sizeof(hooks) - at, "%s, ",
						       hook_names[required_hooks[role][j]]);
			for (int j = 0; j < 3; j++)
				if (optional_hooks[role][j] != H_COUNT)
					at += (size_t)snprintf(hooks + at, sizeof(hooks) - at, "%s, ",
							       hook_names[optional_hooks[role][j]]);
			snprintf(key, sizeof(key), "%s", k);
			lua_pop(L, 1);
			return STRATA_ERR(err, STRATA_EINVAL,
					  "%s: unknown field '%s' for a %s policy (hooks: %soptions; private fields start with '_')",
					  lp->base, key, strata_role_name(role), hooks);
		}
	}
	return STRATA_OK;
}

static void fill_ops(struct lua_policy *lp)
{
	const char *name = lp->base;
	switch (lp->p->role) {
	case STRATA_ROLE_EVICT:
		lp->ops.evict = (struct strata_evict_ops){
			.name = name, .version = STRATA_POLICY_ABI, .help = "Lua script",
			.free = lua_policy_free, .on_insert = lua_evict_on_insert,
			.on_access = lua_evict_on_access, .on_remove = lua_evict_on_remove,
			.victim = lua_evict_victim,
		};
		break;
	case STRATA_ROLE_PLACE:
		lp->ops.place = (struct strata_place_ops){
			.name = name, .version = STRATA_POLICY_ABI, .help = "Lua script",
			.free = lua_policy_free, .admit = lua_place_admit,
			.initial_tier = lp->ref[H_INITIAL_TIER] != LUA_NOREF ? lua_place_initial_tier : NULL,
			.on_access = lp->ref[H_ON_ACCESS] != LUA_NOREF ? lua_place_on_access : NULL,
		};
		break;
	default:
		lp->ops.prefetch = (struct strata_prefetch_ops){
			.name = name, .version = STRATA_POLICY_ABI, .help = "Lua script",
			.free = lua_policy_free, .on_layer = lua_prefetch_on_layer,
			.on_route = lp->ref[H_ON_ROUTE] != LUA_NOREF ? lua_prefetch_on_route : NULL,
		};
		break;
	}
}

/* Per-state limits come from the environment so a sweep can tighten them:
 * STRATA_LUA_INSTRUCTIONS (per hook call, 0 = unlimited), STRATA_LUA_MEMORY. */
static void limits_from_env(struct strata_lua_config *c)
{
	const char *v = getenv("STRATA_LUA_INSTRUCTIONS");
	if (v && *v)
		c->max_instructions = strtoull(v, NULL, 10);
	v = getenv("STRATA_LUA_MEMORY");
	if (v && *v)
		c->max_memory = strtoull(v, NULL, 10);
}

int strata_lua_policy_create(int role, const char *path, const char *kv,
			     const struct strata_policy_env *env, struct strata_policy *p,
			     struct strata_error *err)
{
	if (role < 0 || role >= STRATA_ROLE_COUNT)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: bad policy role %d", path, role);
	struct lua_policy *lp = calloc(1, sizeof(*lp));
	if (!lp)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	p->role = role;
	p->env = env;
	lp->p = p;
	const char *b = strrchr(path, '/');
	snprintf(lp->base, sizeof(lp->base), "%s", b ? b + 1 : path);
	snprintf(lp->owner, sizeof(lp->owner), "%s %s", strata_role_name(role), lp->base);

	struct strata_lua_config cfg;
	strata_lua_config_defaults(&cfg);
	cfg.name = lp->base;
	cfg.seed = env->seed;
	limits_from_env(&cfg);
	int rc = strata_lua_open(&cfg, &lp->lua, err);
	if (rc) {
		free(lp);
		return rc;
	}
	lp->L = strata_lua_state(lp->lua);
	lua_State *L = lp->L;
	for (int h = 0; h < H_COUNT; h++)
		lp->ref[h] = LUA_NOREF;
	add_strata_functions(L, lp);

	rc = strata_lua_load_file(lp->lua, path, err);
	if (!rc)
		rc = strata_lua_call(lp->lua, 0, 1, "main chunk", err);
	if (!rc && !lua_istable(L, -1)) {
		rc = STRATA_ERR(err, STRATA_EINVAL, "%s: the script must return a table of hooks, not %s", lp->base,
				luaL_typename(L, -1));
	}
	if (!rc)
		rc = take_hooks(lp, err);
	if (!rc)
		rc = read_options(lp, err);
	if (!rc)
		rc = strata_options_apply(lp->n_opts ? lp->opts : NULL, lp->optbuf, kv, lp->owner, err);
	if (!rc) {
		if (lp->n_opts)
			strata_options_canonical(lp->opts, lp->optbuf, lp->base, p->name, sizeof(p->name));
		else
			snprintf(p->name, sizeof(p->name), "%s", lp->base);
	}
	if (!rc && lp->ref[H_INIT] != LUA_NOREF) {
		lua_rawgeti(L, LUA_REGISTRYINDEX, lp->ref[H_INIT]);
		push_env(L, lp);
		push_opts(lp);
		rc = strata_lua_call(lp->lua, 2, 0, "init", err);
	}
	if (rc) {
		strata_lua_close(lp->lua);
		free(lp->opts);
		free(lp->optbuf);
		free(lp);
		p->ops = NULL;
		p->priv = NULL;
		p->loader = NULL;
		p->name[0] = 0;
		return rc;
	}
	lua_settop(L, 0);
	fill_ops(lp);
	p->ops = &lp->ops;
	p->priv = lp;
	p->loader = L;
	strata_error_clear(&p->error);
	return STRATA_OK;
}
