/*
 * The one table of built-in policies.  Adding a policy is one file in
 * policies/ defining `const struct strata_<role>_ops strata_<role>_<id>` plus
 * one X(...) line below; the first entry of each role is its default.
 */
#include <string.h>

#include "strata/policy.h"

#define STRATA_BUILTINS(X)                                                       \
	X(place, static)   /* default: the shard header's tier table */         \
	X(place, cache)    /* empty start, keep everything fetched */            \
	X(place, llama)    /* llama.cpp expert cache admission */                \
	X(place, future)   /* offline: preload by first use, reads the future */ \
	X(evict, lru)      /* default */                                         \
	X(evict, lfu)                                                            \
	X(evict, lfu_decay)                                                      \
	X(evict, farthest)   /* farthest next use, reads the future */                       \
	X(evict, fifo)                                                           \
	X(evict, random)                                                         \
	X(evict, llama)    /* llama.cpp expert cache: per-layer LRU slots */     \
	X(evict, lfru)     /* vLLM: frequency-weighted LRU */                    \
	X(evict, moe_infinity)                                                   \
	X(evict, least_stale) /* SpecMD */                                       \
	X(prefetch, none)  /* default */                                         \
	X(prefetch, lookahead)                                                   \
	X(prefetch, oracle)                                                      \
	X(prefetch, history)                                                     \
	X(prefetch, moe_infinity)                                                \
	X(prefetch, promoe)      /* ProMoE stride prefetch, early preemption */  \
	X(prefetch, expertflow)  /* ExpertFlow adaptive horizon */

enum { ROLE_place = STRATA_ROLE_PLACE, ROLE_evict = STRATA_ROLE_EVICT,
       ROLE_prefetch = STRATA_ROLE_PREFETCH };

#define DECLARE(role, id) extern const struct strata_##role##_ops strata_##role##_##id;
STRATA_BUILTINS(DECLARE)

static const struct {
	int role;
	const void *ops;
} builtins[] = {
#define ENTRY(role, id) { ROLE_##role, &strata_##role##_##id },
	STRATA_BUILTINS(ENTRY)
};

const void *strata_policy_builtin_at(int role, unsigned i)
{
	for (size_t k = 0; k < sizeof(builtins) / sizeof(builtins[0]); k++)
		if (builtins[k].role == role && i-- == 0)
			return builtins[k].ops;
	return NULL;
}

const void *strata_policy_builtin(int role, const char *name)
{
	if (!name)
		return NULL;
	for (size_t k = 0; k < sizeof(builtins) / sizeof(builtins[0]); k++) {
		const struct strata_evict_ops *h = builtins[k].ops; /* common head */
		if (builtins[k].role == role && !strcmp(h->name, name))
			return builtins[k].ops;
	}
	return NULL;
}

const char *strata_policy_default(int role)
{
	const struct strata_evict_ops *h = strata_policy_builtin_at(role, 0); /* common head */
	return h ? h->name : NULL;
}
