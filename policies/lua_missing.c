/*
 * The weak default of strata_lua_policy_create, for builds without the Lua
 * adapter (core/lua/policy_lua.c): a clear STRATA_EUNSUPPORTED.
 *
 * Why here and not in core/policy.c: libstrata is a static archive, and the
 * linker extracts an archive member only for a symbol still undefined.  A
 * weak definition inside policy.o would satisfy the reference itself, so the
 * adapter's strong definition would never be pulled in.  Alone in a member
 * that the archive lists after core/lua/ (objects go in as kernels, core,
 * core/lua, policies), this default is extracted only when no adapter is
 * present; keep nothing else in this file, or it could be pulled in first.
 */
#include "strata/policy.h"

__attribute__((weak)) int strata_lua_policy_create(int role, const char *path, const char *kv,
						   const struct strata_policy_env *env,
						   struct strata_policy *p, struct strata_error *err)
{
	return STRATA_ERR(err, STRATA_EUNSUPPORTED,
			  "%s %s: Lua policies are not available in this build (no Lua adapter linked)",
			  strata_role_name(role), path);
}
