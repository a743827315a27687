/*
 * An example eviction plugin: CLOCK (second chance), built as
 * build/<mode>/plugins/skeleton.so.  Copy this file to start a plugin:
 *
 *   strata sim --model qwen3-30b-a3b:layers=8 --trace t.strace --place cache \
 *       --evict ./build/release/plugins/skeleton.so:rounds=4
 *   STRATA_PLUGIN_PATH=build/release/plugins strata sim ... --place cache --evict skeleton
 *   (in a study: a configuration's evict = "skeleton" or the .so path; strata run
 *    scripts take key=value arguments, not --evict)
 *
 * A plugin exports one symbol, strata_policy_plugin_entry, returning the ABI
 * it was built for, its role and its ops.  The loader checks the ABI and the
 * required ops before anything runs.  Keep a plugin self-contained: it is
 * loaded with RTLD_LOCAL and should not call into libstrata (errors are
 * written straight into struct strata_error).
 *
 * CLOCK keeps residents on a circular list with a "referenced" bit set by
 * each access.  The hand sweeps: a referenced expert loses its bit and gets
 * a second chance, an unreferenced one is the victim.  An LRU approximation
 * without list moves on hits.
 */
#include <stdio.h>
#include <stdlib.h>

#include "strata/policy.h"

struct clock {
	int64_t rounds;        /* option: sweeps before giving up */
	int32_t *prev, *next;  /* circular list over eids; -1 = absent */
	uint8_t *ref;
	int32_t hand;          /* -1 when empty */
	uint32_t n_ids, n;
};

static const struct strata_option clock_options[] = {
	{ .name = "rounds", .type = STRATA_OPT_INT, .offset = offsetof(struct clock, rounds),
	  .def = "2", .min = 1, .max = 64, .help = "full sweeps before reporting no victim" },
	{ .name = NULL },
};

static int clock_init(struct strata_policy *p, struct strata_error *err)
{
	struct clock *c = p->priv;
	c->n_ids = p->env->n_ids;
	size_t n = c->n_ids ? c->n_ids : 1;
	c->prev = malloc(n * sizeof(int32_t));
	c->next = malloc(n * sizeof(int32_t));
	c->ref = calloc(n, 1);
	if (!c->prev || !c->next || !c->ref) {
		if (err) {
			err->code = STRATA_ENOMEM;
			snprintf(err->msg, sizeof(err->msg), "evict clock: out of memory");
		}
		return STRATA_ENOMEM;
	}
	for (uint32_t i = 0; i < c->n_ids; i++)
		c->prev[i] = c->next[i] = -1;
	c->hand = -1;
	return STRATA_OK;
}

static void clock_free(struct strata_policy *p)
{
	struct clock *c = p->priv;
	free(c->prev);
	free(c->next);
	free(c->ref);
}

static void clock_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct clock *c = p->priv;
	if (eid >= c->n_ids || c->next[eid] >= 0)
		return;
	c->ref[eid] = 0;
	if (c->hand < 0) {
		c->prev[eid] = c->next[eid] = (int32_t)eid;
		c->hand = (int32_t)eid;
	} else { /* just behind the hand: the last the sweep reaches */
		int32_t h = c->hand, t = c->prev[h];
		c->next[t] = (int32_t)eid;
		c->prev[eid] = t;
		c->next[eid] = h;
		c->prev[h] = (int32_t)eid;
	}
	c->n++;
}

static void clock_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct clock *c = p->priv;
	if (eid < c->n_ids)
		c->ref[eid] = 1;
}

static void clock_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct clock *c = p->priv;
	if (eid >= c->n_ids || c->next[eid] < 0)
		return;
	if (--c->n == 0) {
		c->hand = -1;
	} else {
		int32_t pv = c->prev[eid], nx = c->next[eid];
		c->next[pv] = nx;
		c->prev[nx] = pv;
		if (c->hand == (int32_t)eid)
			c->hand = nx;
	}
	c->prev[eid] = c->next[eid] = -1;
}

static int64_t clock_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *r)
{
	struct clock *c = p->priv;
	for (uint64_t step = 0; c->hand >= 0 && step < (uint64_t)c->rounds * c->n + 1; step++) {
		int32_t e = c->hand;
		if (r && r->pinned && r->pinned[e]) {
			c->hand = c->next[e];
		} else if (c->ref[e]) {
			c->ref[e] = 0;
			c->hand = c->next[e];
		} else {
			return e;
		}
	}
	return STRATA_NO_EXPERT;
}

static const struct strata_evict_ops clock_ops = {
	.name = "clock", .version = STRATA_POLICY_ABI,
	.help = "CLOCK / second chance (example plugin)",
	.priv_size = sizeof(struct clock), .options = clock_options,
	.init = clock_init, .free = clock_free, .on_insert = clock_on_insert,
	.on_access = clock_on_access, .on_remove = clock_on_remove, .victim = clock_victim,
};

static const struct strata_plugin_info info = {
	.abi = STRATA_POLICY_ABI, .role = STRATA_ROLE_EVICT, .ops = &clock_ops,
};

const struct strata_plugin_info *strata_policy_plugin_entry(void);
const struct strata_plugin_info *strata_policy_plugin_entry(void)
{
	return &info;
}
