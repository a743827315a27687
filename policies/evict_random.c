/*
 * Random eviction: a uniformly random resident, unpinned expert leaves.  The
 * generator (splitmix64) is seeded from the run's seed, the tier and option
 * `seed`, so runs repeat exactly.  A dense array of residents with an index
 * per eid makes insert, remove and pick O(1).
 */
#include <stdlib.h>

#include "strata/policy.h"
#include "strata/util.h"

struct rnd {
	int64_t seed;       /* option */
	uint32_t *set;      /* residents, dense */
	int32_t *pos;       /* per eid: index in set, -1 */
	uint32_t n, n_ids;
	uint64_t state;
};

static const struct strata_option random_options[] = {
	{ .name = "seed", .type = STRATA_OPT_INT, .offset = offsetof(struct rnd, seed), .def = "0",
	  .help = "mixed with the run's seed (vary it to sample other random runs)" },
	{ .name = NULL },
};

static int random_init(struct strata_policy *p, struct strata_error *err)
{
	struct rnd *r = p->priv;
	r->n_ids = p->env->n_ids;
	r->set = malloc(sizeof(uint32_t) * (r->n_ids ? r->n_ids : 1));
	r->pos = malloc(sizeof(int32_t) * (r->n_ids ? r->n_ids : 1));
	if (!r->set || !r->pos)
		return STRATA_ERR(err, STRATA_ENOMEM, "evict random: out of memory");
	for (uint32_t i = 0; i < r->n_ids; i++)
		r->pos[i] = -1;
	r->state = p->env->seed ^ ((uint64_t)r->seed * 0x2545f4914f6cdd1dull) ^
		   ((uint64_t)(p->tier + 1) << 56);
	return STRATA_OK;
}

static void random_free(struct strata_policy *p)
{
	struct rnd *r = p->priv;
	free(r->set);
	free(r->pos);
}

static void random_on_insert(struct strata_policy *p, uint32_t eid, uint64_t now)
{
	struct rnd *r = p->priv;
	if (eid >= r->n_ids || r->pos[eid] >= 0)
		return;
	r->pos[eid] = (int32_t)r->n;
	r->set[r->n++] = eid;
}

static void random_on_access(struct strata_policy *p, uint32_t eid, uint64_t now)
{
}

static void random_on_remove(struct strata_policy *p, uint32_t eid)
{
	struct rnd *r = p->priv;
	if (eid >= r->n_ids || r->pos[eid] < 0)
		return;
	uint32_t i = (uint32_t)r->pos[eid], last = r->set[--r->n];
	r->set[i] = last;
	r->pos[last] = (int32_t)i;
	r->pos[eid] = -1;
}

static int64_t random_victim(struct strata_policy *p, uint64_t now, const struct strata_residency *res)
{
	struct rnd *r = p->priv;
	if (!r->n)
		return STRATA_NO_EXPERT;
	uint32_t start = (uint32_t)(strata_splitmix64(&r->state) % r->n);
	/* pins are few: walk from the random start to the first unpinned one */
	for (uint32_t k = 0; k < r->n; k++) {
		uint32_t e = r->set[(start + k) % r->n];
		if (!(res && res->pinned && res->pinned[e]))
			return e;
	}
	return STRATA_NO_EXPERT;
}

const struct strata_evict_ops strata_evict_random = {
	.name = "random", .version = STRATA_POLICY_ABI,
	.help = "a random resident expert leaves (seeded): the no-information baseline",
	.priv_size = sizeof(struct rnd), .options = random_options,
	.init = random_init, .free = random_free, .on_insert = random_on_insert,
	.on_access = random_on_access, .on_remove = random_on_remove, .victim = random_victim,
};
