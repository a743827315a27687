/*
 * Policies: placement, eviction and prefetch are three separate roles that the
 * engine composes ("place=static,evict=lru,prefetch=lookahead:depth=2"), so an
 * ablation changes one axis at a time.
 *
 * Each built-in is a `static const` ops struct with a name, ABI version and
 * an option table; an instance (struct strata_policy) holds a pointer to its
 * ops plus a zeroed private block of ops->priv_size bytes, into which the
 * option table's offsets point.  The loader (strata_policy_create) rejects a
 * wrong ABI version or a missing required op, so call sites never test for
 * NULL: optional ops get the core's default installed on the instance.
 *
 * Lookup order for a spec "NAME[:k=v:...]": a built-in NAME, then
 * NAME.so in each folder of $STRATA_PLUGIN_PATH, then NAME as a path (.so for
 * a plugin, .lua for a script).  A plugin exports one symbol,
 * strata_policy_plugin_entry, returning a struct strata_plugin_info.
 *
 * Time: `now` is the engine's logical clock, the index of the current expert
 * access in the run (0, 1, 2, ...).  Belady and oracles compare it with
 * strata_future answers.
 */
#ifndef STRATA_POLICY_H
#define STRATA_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/error.h"
#include "strata/model.h"
#include "strata/option.h"

#define STRATA_POLICY_ABI 2

struct strata_cost_model; /* strata/engine.h */
#define STRATA_POLICY_NAME_MAX 160
#define STRATA_NO_EXPERT (-1)
#define STRATA_NEVER UINT64_MAX

enum strata_policy_role {
	STRATA_ROLE_PLACE = 0,
	STRATA_ROLE_EVICT = 1,
	STRATA_ROLE_PREFETCH = 2,
	STRATA_ROLE_COUNT = 3,
};
const char *strata_role_name(int role); /* "place", "evict", "prefetch" */

/*
 * The future of the run being replayed, when the driver knows it (trace
 * replay and simulation do; live serving does not: future == NULL).
 * The offline references read it: the future placement, the farthest
 * eviction and the oracle prefetcher; nothing else should.
 */
struct strata_future {
	/* Clock value of the next access to eid strictly after `now`, or
	 * STRATA_NEVER. */
	uint64_t (*next_use)(const struct strata_future *f, uint32_t eid, uint64_t now);
	/* Experts routed at (token, moe layer): writes up to max ids (layer-local
	 * expert numbers), returns the count; 0 past the end. */
	uint32_t (*routed)(const struct strata_future *f, uint64_t token, uint32_t layer,
			   uint32_t *out, uint32_t max);
	uint64_t n_tokens;
	void *priv;
};

/*
 * How the engine schedules a prefetch policy's requests (the engine and the
 * policy harness run the same logic, core/sched.c).  A request (struct
 * strata_prefetch_req) is for the next run of its expert's layer: that
 * layer-step is its target.
 *   1. on_layer's requests join a FIFO of pending requests (one per expert;
 *      requests for experts resident at or above the tier, or pending, are
 *      redundant).
 *   2. A pending request starts (room is made in its tier, or with
 *      ram_holes_only one into RAM takes a free hole or is dropped; it is
 *      counted prefetch_issued and its move queued) when its source tier is allowed
 *      (from[tier]) and every link it crosses has room in its budget: the
 *      bytes of started prefetches whose target has not run yet.  Links: PCIe
 *      (into VRAM: RAM -> VRAM copies, staged NVMe -> VRAM) and NVMe (every
 *      NVMe read).  Pending requests are tried in order at begin_step and
 *      after each release (budget freed); one that does not fit waits, later
 *      ones on other links may pass it.
 *   3. When the target layer runs: a pending request for an expert it routes
 *      is promoted, the demand fetch takes its place (prefetch_promoted; never
 *      moved twice); any other pending request for it is cancelled
 *      (prefetch_cancelled).  A started one that was not used is wasted
 *      (prefetch_wasted) and, unless keep_unused, leaves the tier at release
 *      as if it had not come (the room is free again; a move not yet begun is
 *      not made).
 *   4. On the links, a started prefetch's move waits behind every demand move
 *      (NVMe reads, RAM -> VRAM copies, staged reads): it is handed to the
 *      mover only while no demand move is outstanding on its links (the
 *      virtual link: when the link is idle), and a demand for it promotes it
 *      in place.  This is timing; 1-3 and 5 are decisions, the same in sim
 *      and replay (they depend on the access clock only).
 *   5. Early preemption (preempt = true; ProMoE): a newer prediction beats
 *      an older one.  When a layer-step's requests arrive, a pending request
 *      for a target layer they also name, asked for at an earlier layer-step
 *      (a farther, older prediction) and absent from the new requests, is
 *      withdrawn (prefetch_preempted); and pending requests start nearest
 *      target layer first (the layer after the running one first, the
 *      running layer's next run last), first come first within a target,
 *      instead of in arrival order.  A demand always goes first on the links
 *      (4) and takes over a pending request for it (3).
 * A prefetch policy may set these fields in init and change them in on_layer
 * or on_route (the engine reads them at every dispatch).  Defaults
 * (strata_prefetch_sched_defaults): no budget, every source, keep_unused,
 * no preemption, a prefetch into RAM evicts as a demand would.
 */
enum { STRATA_LINK_PCIE = 0, STRATA_LINK_NVME = 1, STRATA_LINK_COUNT = 2 };
struct strata_prefetch_sched {
	uint64_t budget[STRATA_LINK_COUNT]; /* bytes of started prefetches in flight per link;
					     * UINT64_MAX: no limit, 0: none over that link */
	uint32_t from[2];      /* per destination tier (VRAM, RAM): mask of source tiers a
				* prefetch may read, 1 << STRATA_TIER_RAM | 1 << STRATA_TIER_NVME */
	bool keep_unused;      /* a started prefetch unused by its target layer stays cached */
	bool preempt;          /* early preemption (5 above) */
	bool ram_holes_only;   /* a prefetch into RAM takes a free hole of the tier or is
				* dropped (prefetch_dropped): it never evicts a RAM resident */
	/* set by the engine, read-only: per tier (VRAM, RAM) the residency flags
	 * per eid, so a policy can tell a RAM copy from an NVMe read; an entry
	 * may be NULL (the harness has no RAM tier) */
	const uint8_t *resident[2];
	/* set by the engine before each on_layer, read-only: the longest free
	 * hole of the RAM tier in bytes (a multiple of STRATA_TIER_ALIGN; 0 where
	 * there is none or no RAM tier), what a ram_holes_only request can take */
	uint64_t ram_hole;
};
void strata_prefetch_sched_defaults(struct strata_prefetch_sched *s);

/* What every policy instance may read; owned by the engine, lives as long as
 * the policy. */
struct strata_policy_env {
	const struct strata_model_spec *spec;
	uint32_t n_ids;               /* spec->n_moe_layers * spec->n_experts */
	const uint8_t *tier_table;    /* per eid: enum strata_tier (shard header) */
	const uint64_t *expert_bytes; /* per eid: extent bytes */
	uint64_t budget[3];           /* tier budgets in bytes (nvme: UINT64_MAX) */
	uint64_t seed;                /* the run's seed: use it for any randomness */
	const struct strata_future *future; /* NULL when unknown */
	/* The prefetch scheduling knobs (above): a prefetch policy may write them;
	 * other roles read them at most.  Never NULL under the engine or harness. */
	struct strata_prefetch_sched *sched;
	/* The run's link and compute costs (strata/engine.h: the calibrated or
	 * default cost model the engine times with); NULL where the driver has
	 * none (the policy harness).  A prefetcher may size its horizon by it. */
	const struct strata_cost_model *cost;
};

/* One step: a MoE layer about to run for a batch of tokens, its router
 * already run.  Handed to the optional on_step ops of eviction and placement
 * after the step's experts are pinned and before anything of the step is
 * prefetched or accessed (engine begin_step, harness step 1). */
struct strata_step {
	uint64_t token;          /* token (the engine: step) index */
	uint32_t layer;          /* moe layer */
	uint32_t n_tokens;       /* tokens in the batch; 0 when the driver does not know */
	const uint32_t *experts; /* the distinct layer-local experts it routes */
	uint32_t n_experts;
	uint64_t now;            /* clock before the step's first access */
};

/* Residency view handed to victim(): which experts are pinned by a running
 * computation and so must not be chosen. */
struct strata_residency {
	const uint8_t *pinned;        /* per eid, nonzero = pinned */
	const uint8_t *resident;      /* per eid, nonzero = resident in this tier */
	uint32_t n_resident;
};

struct strata_policy {
	int role;
	const void *ops;             /* struct strata_{place,evict,prefetch}_ops */
	void *priv;                  /* ops->priv_size bytes, options live here */
	const struct strata_policy_env *env;
	int tier;                    /* evict: the tier this instance manages; else -1 */
	char name[STRATA_POLICY_NAME_MAX]; /* canonical: "lookahead-depth=2" */
	void *loader;                /* dlopen handle or Lua state; core-owned */
	/* First failure inside an op that cannot return a status (a Lua hook
	 * raised an error or ran out of instructions/memory): error.code stays
	 * STRATA_OK while none.  Such an op returns a harmless value
	 * (STRATA_NO_EXPERT, 0, no requests) and later calls of the instance do
	 * not enter the script again; the engine or harness checks
	 * strata_policy_error(p) after calling into a policy and fails the run
	 * with that message. */
	struct strata_error error;
};

/* NULL while the instance is healthy, else its first recorded failure. */
static inline const struct strata_error *strata_policy_error(const struct strata_policy *p)
{ return p->error.code != 0 ? &p->error : (const struct strata_error *)0; }

/* Common head of every ops struct. */
#define STRATA_POLICY_OPS_HEAD                                                            \
	const char *name;       /* built-in name, [a-z0-9_-]+ */                           \
	uint32_t version;       /* STRATA_POLICY_ABI */                                    \
	uint32_t flags;         /* STRATA_POLICY_F_* */                                    \
	const char *help;       /* one line */                                             \
	size_t priv_size;       /* zeroed private block, options point into it */          \
	const struct strata_option *options; /* NULL or NULL-terminated table */          \
	/* optional: after options are applied; may allocate into priv */                 \
	int (*init)(struct strata_policy *p, struct strata_error *err);                    \
	/* optional: release what init allocated (not priv itself); called once    */     \
	/* after init, even when init failed, so it must cope with a zeroed priv   */     \
	void (*free)(struct strata_policy *p)

enum {
	STRATA_POLICY_F_NEEDS_FUTURE = 1u << 0, /* refuses to run without env->future */
	/* prefetch: on_layer never reads ctx->hints, so a driver may pass none
	 * (the replay then skips decoding a trace's predictions) */
	STRATA_POLICY_F_NO_HINTS = 1u << 1,
};

/*
 * Eviction: one instance per cached tier (VRAM, RAM), tracking that tier's
 * resident set through the on_* calls.  All four ops are required.
 *
 * Call order the drivers (engine, policy harness) keep, so that policies
 * count the same way everywhere:
 *   - demand fetch (a miss admitted into the tier): on_insert(eid, now) then
 *     on_access(eid, now), same now;
 *   - prefetch completing, preload at start: on_insert(eid, now) only;
 *   - hit: on_access(eid, now);
 *   - eviction: victim(now, r) then on_remove(victim); a drop (e.g. the
 *     engine shrinking a tier) is on_remove alone.
 * `now` never decreases.  victim() may be called repeatedly at the same now
 * until enough bytes are free; the residency view r is the tier's own.
 */
struct strata_evict_ops {
	STRATA_POLICY_OPS_HEAD;
	/* eid entered the tier (after a fetch or prefetch completed, or preload). */
	void (*on_insert)(struct strata_policy *p, uint32_t eid, uint64_t now);
	/* eid, resident in the tier, was used by a computation. */
	void (*on_access)(struct strata_policy *p, uint32_t eid, uint64_t now);
	/* eid left the tier (evicted or dropped). */
	void (*on_remove)(struct strata_policy *p, uint32_t eid);
	/* Choose a resident, unpinned expert to evict; STRATA_NO_EXPERT if none.
	 * The engine calls on_remove for it afterwards.  Choosing a pinned or
	 * non-resident expert is an error naming the policy. */
	int64_t (*victim)(struct strata_policy *p, uint64_t now, const struct strata_residency *r);
	/* optional: a step begins (see struct strata_step); default: nothing.
	 * Lets a policy keep per-step rules (llama.cpp's per-layer slots). */
	void (*on_step)(struct strata_policy *p, const struct strata_step *s);
};

/*
 * Placement: where experts live at start and which tiers keep an expert that
 * had to be fetched.
 */
struct strata_place_ops {
	STRATA_POLICY_OPS_HEAD;
	/* optional: tier eid is preloaded into at start (default: env->tier_table;
	 * the engine preloads while budgets allow, hottest first). */
	int (*initial_tier)(struct strata_policy *p, uint32_t eid);
	/* required: eid was needed and found only in from_tier (RAM or NVMe).
	 * Return a bitmask of (1 << STRATA_TIER_VRAM) | (1 << STRATA_TIER_RAM):
	 * the tiers that should keep a copy after this use.  0 = stream it
	 * through a scratch slot and keep nothing.  Also asked when a prefetch
	 * from from_tier starts: without the prefetch's tier in the answer, the
	 * prefetched copy leaves once its layer has run. */
	uint32_t (*admit)(struct strata_policy *p, uint32_t eid, int from_tier, uint64_t now);
	/* optional: every access, with the tier it was served from. */
	void (*on_access)(struct strata_policy *p, uint32_t eid, int served_tier, uint64_t now);
	/* optional: a step begins (struct strata_step), before its admits;
	 * default: nothing.  Lets admission count per step (an insert cap). */
	void (*on_step)(struct strata_policy *p, const struct strata_step *s);
};

/* A lookahead hint: an expert predicted for a later layer of the same token
 * (recorded predictions in the trace, or an online predictor's). */
struct strata_hint {
	uint32_t layer;    /* moe layer the prediction is for */
	uint32_t expert;   /* layer-local expert */
	float score;       /* gate weight or confidence, 0..1 */
};

struct strata_layer_ctx {
	uint64_t token;    /* token index in the run */
	uint32_t layer;    /* moe layer about to run */
	uint64_t now;      /* clock */
	const struct strata_hint *hints; /* for layers > layer; may be empty */
	uint32_t n_hints;
	/* The layer-local experts `layer` is about to use (its router already
	 * ran: the request being served), or NULL/0 where the driver does not know
	 * them yet.  Online predictors (history) key their cross-layer table on
	 * them; the engine and the harness pass them. */
	const uint32_t *experts;
	uint32_t n_experts;
};

struct strata_prefetch_req {
	uint32_t eid;      /* expert to move */
	uint32_t tier;     /* destination: STRATA_TIER_VRAM or STRATA_TIER_RAM */
};

struct strata_prefetch_ops {
	STRATA_POLICY_OPS_HEAD;
	/* required: before `layer` runs.  Write up to max requests, return count.
	 * Requests for experts already resident at (or above) the tier are
	 * counted as redundant and dropped by the engine. */
	uint32_t (*on_layer)(struct strata_policy *p, const struct strata_layer_ctx *ctx,
			     struct strata_prefetch_req *out, uint32_t max);
	/* optional: the router's actual choice for (token, layer), after it ran. */
	void (*on_route)(struct strata_policy *p, uint64_t token, uint32_t layer,
			 const uint32_t *experts, uint32_t n);
};

/* What a plugin's strata_policy_plugin_entry returns. */
struct strata_plugin_info {
	uint32_t abi;      /* STRATA_POLICY_ABI */
	int role;          /* enum strata_policy_role */
	const void *ops;   /* struct strata_*_ops for role */
};
#define STRATA_PLUGIN_ENTRY "strata_policy_plugin_entry"
typedef const struct strata_plugin_info *(*strata_plugin_entry_fn)(void);

/* Built-ins, from policies/registry.c: NULL if unknown. */
const void *strata_policy_builtin(int role, const char *name);
/* Iterate built-ins of a role: i = 0, 1, ... until NULL. */
const void *strata_policy_builtin_at(int role, unsigned i);
/* The role's default policy: the name of its first built-in ("static",
 * "lru", "none"), used wherever a spec is left out. */
const char *strata_policy_default(int role);

/*
 * Create an instance from a spec "NAME[:k=v[:k=v]]" for role, in tier (evict
 * only; else -1).  Validates ABI version and required ops, applies options,
 * installs defaults for optional ops, calls init.  Errors name the policy.
 * env must be non-NULL and outlive the instance; a policy flagged
 * STRATA_POLICY_F_NEEDS_FUTURE is refused (STRATA_EINVAL) when env->future is
 * NULL.  An unknown NAME is STRATA_ENOTFOUND listing the built-ins; a plugin
 * with the wrong ABI is STRATA_EVERSION; a .lua spec in a build without the
 * Lua adapter is STRATA_EUNSUPPORTED.
 *
 * The instance's p->ops points to a per-instance copy of the ops with every
 * optional op filled in (defaults: init/free/on_access/on_route do nothing,
 * initial_tier returns env->tier_table[eid], or NVMe without a table; on_step
 * does nothing), so call
 * sites call ops without NULL tests.  destroy calls ops->free, releases priv
 * and closes a plugin's dlopen handle; NULL is a no-op.
 */
int strata_policy_create(int role, const char *spec, const struct strata_policy_env *env, int tier,
			 struct strata_policy **out, struct strata_error *err);
/* The same from an ops struct the caller holds (an application's own policy,
 * a test's deliberately broken one): checks, options kv (may be NULL), init.
 * ops must outlive the instance. */
int strata_policy_create_ops(int role, const void *ops, const char *kv,
			     const struct strata_policy_env *env, int tier, struct strata_policy **out,
			     struct strata_error *err);
void strata_policy_destroy(struct strata_policy *p);

/*
 * Check an ops struct for role before it is used: ABI version, a name of
 * [A-Za-z0-9_.+-]+, every required op present, a sane option table (see
 * strata_options_check).  `who` prefixes errors ("plugin ./x.so").  The loader
 * runs it on built-ins, plugins and Lua adapters alike.
 */
int strata_policy_check_ops(int role, const void *ops, const char *who, struct strata_error *err);

/*
 * Lua adapter (core/lua/policy_lua.c): implements the same ops for a script.
 * Called by strata_policy_create for a spec whose NAME ends in ".lua" (path
 * as given, or found in $STRATA_PLUGIN_PATH), with kv the text after the first
 * ':' (NULL if none).  p is zeroed by the caller except role, env and tier.
 * On success it fills p->ops (a per-instance ops struct owned by the adapter:
 * only hooks the script defines are set, plus free; options == NULL, init ==
 * NULL, priv_size == 0), p->priv (the adapter), p->loader (the lua_State) and
 * p->name (canonical: "lru.lua", "lookahead.lua-depth=3").  The script's own
 * declared options were parsed from kv and its init hook already ran, so the
 * loader does not apply options or call init again.  The loader then checks
 * the ops (strata_policy_check_ops), copies them into the instance with
 * defaults for absent optional ops (p->ops then points to that copy) and
 * returns.  ops->free(p) releases the state, priv and the adapter's ops
 * struct: strata_policy_destroy calls it last and does not read the
 * adapter's ops afterwards.  On failure p is left with ops == NULL and
 * nothing to free; err names the script ("lru.lua:12: ...", "x.lua: missing
 * required hook 'victim'").
 * A build without the adapter links the weak default in
 * policies/lua_missing.c, which returns STRATA_EUNSUPPORTED.
 */
int strata_lua_policy_create(int role, const char *path, const char *kv,
			     const struct strata_policy_env *env, struct strata_policy *p,
			     struct strata_error *err);

/* Typed accessors for call sites. */
static inline const struct strata_evict_ops *strata_evict_ops_of(const struct strata_policy *p)
{ return (const struct strata_evict_ops *)p->ops; }
static inline const struct strata_place_ops *strata_place_ops_of(const struct strata_policy *p)
{ return (const struct strata_place_ops *)p->ops; }
static inline const struct strata_prefetch_ops *strata_prefetch_ops_of(const struct strata_policy *p)
{ return (const struct strata_prefetch_ops *)p->ops; }

#endif
