/*
 * Sandboxed Lua 5.4 states for policies and experiment scripts.
 *
 * A state opens only the safe libraries: base (without dofile/loadfile; load
 * accepts text chunks only), string (without string.dump), table, math, utf8,
 * and a reduced os table (os.clock only).  There is no io, no package/require,
 * no os.execute/getenv/exit.  print writes to stderr, prefixed with the
 * script's name, so it never corrupts a results stream on stdout.
 *
 * Everything a script may reach of Strata is one global table, `strata`: a
 * small prelude compiled into the binary (constants such as strata.TIER_VRAM,
 * strata.log, strata.list (an ordered set, the building block of LRU-like
 * policies), strata.eid/strata.split) plus whatever the embedding adds (the
 * policy adapter adds is_pinned, tier_of, expert_bytes, next_use).
 *
 * Reproducible and bounded: math.random is seeded from the run's seed
 * (math.randomseed() without an argument is refused), every call runs under
 * lua_pcall with a traceback handler and an instruction budget enforced by a
 * count hook, and a custom allocator enforces a memory limit.  Errors land in
 * struct strata_error with code STRATA_ESCRIPT and the message
 * "script.lua:LINE: message" (plus " (in hook 'name')" and a traceback).
 */
#ifndef STRATA_LUA_H
#define STRATA_LUA_H

#include <stddef.h>
#include <stdint.h>

#include "strata/error.h"

struct lua_State;

#define STRATA_LUA_DEFAULT_INSTRUCTIONS 20000000ull /* per call */
#define STRATA_LUA_DEFAULT_MEMORY (256ull << 20)      /* bytes per state */
/* string.find/match/gmatch/gsub run in C, out of the instruction count's
 * reach: a call whose worst case ((n + 1)^(q + 1) steps for q repetition items
 * on n bytes; n * m for a plain search) exceeds this is refused. */
#define STRATA_LUA_POLICY_PATTERN_STEPS 10000000ll      /* about 10-50 ms */
#define STRATA_LUA_EXPERIMENT_PATTERN_STEPS 1000000000ll
/* Experiment scripts (strata run): generous, adjustable with --max-instructions
 * and --max-memory; the sweeps they start run in C and count for nothing. */
#define STRATA_LUA_EXPERIMENT_INSTRUCTIONS 10000000000ull /* the whole script: minutes of pure Lua */
#define STRATA_LUA_EXPERIMENT_MEMORY (2ull << 30)

enum strata_lua_profile {
	STRATA_LUA_POLICY = 0,     /* the sandbox above */
	STRATA_LUA_EXPERIMENT = 1, /* the sandbox plus what experiment scripts need (io, os.getenv) */
};

struct strata_lua_config {
	const char *name;          /* script name used in messages ("lru.lua"); copied */
	uint64_t seed;             /* seeds math.random */
	uint64_t max_instructions; /* budget per strata_lua_call; 0 = unlimited */
	size_t max_memory;         /* bytes the state may hold; 0 = unlimited */
	int profile;               /* enum strata_lua_profile */
};
void strata_lua_config_defaults(struct strata_lua_config *c);

struct strata_lua;

/* Create a state with the sandboxed libraries, the seeded math.random and the
 * prelude loaded into the global `strata`. */
int strata_lua_open(const struct strata_lua_config *c, struct strata_lua **out,
		    struct strata_error *err);
void strata_lua_close(struct strata_lua *s);

struct lua_State *strata_lua_state(struct strata_lua *s);
/* The struct strata_lua owning L (stored in L's extra space). */
struct strata_lua *strata_lua_of(struct lua_State *L);
const char *strata_lua_name(const struct strata_lua *s);

/* Compile a text file (binary chunks are refused) and push the function. */
int strata_lua_load_file(struct strata_lua *s, const char *path, struct strata_error *err);
/* Compile a text chunk named `name` and push the function. */
int strata_lua_load_string(struct strata_lua *s, const char *src, const char *name,
			   struct strata_error *err);

/*
 * Call the function below nargs arguments on the stack, like lua_pcall, with
 * the traceback handler and a fresh instruction budget.  `what` names the
 * hook in messages ("victim", "main chunk").  On error nothing is left on the
 * stack and err holds "script.lua:LINE: message (in hook 'what')" followed by
 * a traceback; STRATA_ESCRIPT is returned.
 */
int strata_lua_call(struct strata_lua *s, int nargs, int nresults, const char *what,
		    struct strata_error *err);

/* Change the per-call instruction budget (0 = unlimited). */
void strata_lua_set_budget(struct strata_lua *s, uint64_t max_instructions);
/* Bytes currently allocated by the state. */
size_t strata_lua_memory(const struct strata_lua *s);

#endif
