/* The policy loader: built-ins, options and canonical names, plugins by path
 * and through $STRATA_PLUGIN_PATH, ABI and required-op checks, the future
 * requirement, defaults for optional ops. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/policy.h"
#include "strata/harness.h"
#include "strata/store.h"
#include "testutil.h"

struct fixture {
	struct strata_model_spec spec;
	struct strata_harness_trace *trace;
	struct strata_policy_env env;
	uint64_t bytes[64];
	uint8_t tiers[64];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct strata_error err = { 0 };
	if (strata_model_spec_parse("tiny:layers=4,experts=16,top_k=2", &f->spec, &err))
		return -1;
	if (strata_harness_trace_gen(&f->spec, 8, 3, &f->trace, &err))
		return -1;
	for (int i = 0; i < 64; i++) {
		f->bytes[i] = 4096;
		f->tiers[i] = (uint8_t)(i % 3);
	}
	f->env.spec = &f->spec;
	f->env.n_ids = 64;
	f->env.tier_table = f->tiers;
	f->env.expert_bytes = f->bytes;
	f->env.budget[0] = 16 * 4096;
	f->env.budget[1] = 32 * 4096;
	f->env.budget[2] = UINT64_MAX;
	f->env.seed = 7;
	f->env.future = strata_harness_trace_future(f->trace);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	strata_harness_trace_free(f->trace);
	free(f);
	return 0;
}

/* build/<mode>/plugins, next to build/<mode>/tests. */
static const char *plugin_dir(void)
{
	static char dir[PATH_MAX];
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(n > 0);
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(dir, sizeof(dir), "%s/../plugins", self);
	return dir;
}

static void test_roles_and_registry(void **state)
{
	assert_string_equal(strata_role_name(STRATA_ROLE_PLACE), "place");
	assert_string_equal(strata_role_name(STRATA_ROLE_EVICT), "evict");
	assert_string_equal(strata_role_name(STRATA_ROLE_PREFETCH), "prefetch");
	/* defaults come first */
	const char *first[] = { "static", "lru", "none" };
	for (int r = 0; r < STRATA_ROLE_COUNT; r++) {
		const struct strata_evict_ops *h = strata_policy_builtin_at(r, 0);
		assert_non_null(h);
		assert_string_equal(h->name, first[r]);
	}
	const char *all[][11] = {
		{ "static", "cache", "llama", "future", NULL },
		{ "lru", "lfu", "lfu-decay", "farthest", "fifo", "random", "llama", "lfru", "moe-infinity",
		  "least-stale", NULL },
		{ "none", "lookahead", "oracle", "history", "moe-infinity", "promoe", "expertflow", NULL },
	};
	for (int r = 0; r < STRATA_ROLE_COUNT; r++) {
		unsigned i = 0;
		for (; all[r][i]; i++) {
			const struct strata_evict_ops *h = strata_policy_builtin_at(r, i);
			assert_non_null(h);
			assert_string_equal(h->name, all[r][i]);
			assert_ptr_equal(strata_policy_builtin(r, all[r][i]), h);
			struct strata_error err = { 0 };
			assert_int_equal(strata_policy_check_ops(r, h, "built-in", &err), STRATA_OK);
			assert_non_null(h->help);
		}
		assert_null(strata_policy_builtin_at(r, i));
	}
	assert_null(strata_policy_builtin(STRATA_ROLE_EVICT, "static"));
	assert_null(strata_policy_builtin(STRATA_ROLE_EVICT, NULL));
}

static void test_create_every_builtin(void **state)
{
	struct fixture *f = *state;
	for (int r = 0; r < STRATA_ROLE_COUNT; r++) {
		for (unsigned i = 0;; i++) {
			const struct strata_evict_ops *h = strata_policy_builtin_at(r, i);
			if (!h)
				break;
			struct strata_policy *p = NULL;
			struct strata_error err = { 0 };
			int rc = strata_policy_create(r, h->name, &f->env, r == STRATA_ROLE_EVICT ? 0 : -1, &p, &err);
			if (rc)
				fprintf(stderr, "%s: %s\n", h->name, err.msg);
			assert_int_equal(rc, STRATA_OK);
			assert_string_equal(p->name, h->name);
			assert_int_equal(p->role, r);
			assert_int_equal(p->tier, r == STRATA_ROLE_EVICT ? 0 : -1);
			assert_ptr_equal(p->env, &f->env);
			/* every op is callable: optional ones have defaults */
			const struct strata_evict_ops *o = p->ops;
			assert_non_null(o->init);
			assert_non_null(o->free);
			if (r == STRATA_ROLE_PLACE) {
				const struct strata_place_ops *po = strata_place_ops_of(p);
				assert_non_null(po->initial_tier);
				assert_non_null(po->on_access);
				assert_non_null(po->admit);
				po->on_access(p, 3, STRATA_TIER_NVME, 0);
			} else if (r == STRATA_ROLE_PREFETCH) {
				const struct strata_prefetch_ops *fo = strata_prefetch_ops_of(p);
				assert_non_null(fo->on_route);
				uint32_t ex[2] = { 1, 2 };
				fo->on_route(p, 0, 0, ex, 2);
			}
			strata_policy_destroy(p);
		}
	}
	strata_policy_destroy(NULL);
}

static void test_defaults_of_optional_ops(void **state)
{
	struct fixture *f = *state;
	struct strata_error err = { 0 };
	struct strata_policy *p;
	/* static: the tier table */
	assert_int_equal(strata_policy_create(STRATA_ROLE_PLACE, "static", &f->env, -1, &p, &err), 0);
	for (uint32_t e = 0; e < 64; e++)
		assert_int_equal(strata_place_ops_of(p)->initial_tier(p, e), f->tiers[e]);
	assert_int_equal(strata_place_ops_of(p)->admit(p, 5, STRATA_TIER_NVME, 0), 0);
	strata_policy_destroy(p);
	assert_int_equal(strata_policy_create(STRATA_ROLE_PLACE, "static:promote=all", &f->env, -1, &p, &err), 0);
	assert_string_equal(p->name, "static-promote=all");
	assert_int_equal(strata_place_ops_of(p)->admit(p, 5, STRATA_TIER_NVME, 0), 3);
	strata_policy_destroy(p);
	assert_int_equal(strata_policy_create(STRATA_ROLE_PLACE, "static:promote=ram", &f->env, -1, &p, &err), 0);
	assert_int_equal(strata_place_ops_of(p)->admit(p, 5, STRATA_TIER_NVME, 0), 1u << STRATA_TIER_RAM);
	strata_policy_destroy(p);
	/* cache: empty start, keep all */
	assert_int_equal(strata_policy_create(STRATA_ROLE_PLACE, "cache", &f->env, -1, &p, &err), 0);
	assert_int_equal(strata_place_ops_of(p)->initial_tier(p, 0), STRATA_TIER_NVME);
	assert_int_equal(strata_place_ops_of(p)->admit(p, 5, STRATA_TIER_RAM, 0), 3);
	strata_policy_destroy(p);
}

static void test_spec_options_and_names(void **state)
{
	struct fixture *f = *state;
	static const struct {
		int role;
		const char *spec, *name;
	} ok[] = {
		{ STRATA_ROLE_PREFETCH, "lookahead:depth=1", "lookahead-depth=1" },
		{ STRATA_ROLE_PREFETCH, "lookahead:depth=2", "lookahead" },
		{ STRATA_ROLE_PREFETCH, "oracle:accuracy=0.9,depth=3", "oracle-depth=3-accuracy=0.9" },
		{ STRATA_ROLE_PREFETCH, "history:window=4:mix=0.25", "history-window=4-mix=0.25" },
		{ STRATA_ROLE_EVICT, "lfu-decay:half_life=5000", "lfu-decay-half_life=5000" },
		{ STRATA_ROLE_EVICT, "lfu:history", "lfu-history=1" },
		{ STRATA_ROLE_EVICT, "random:seed=3", "random-seed=3" },
		{ STRATA_ROLE_EVICT, "lru:", "lru" },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct strata_policy *p = NULL;
		struct strata_error err = { 0 };
		int rc = strata_policy_create(ok[i].role, ok[i].spec, &f->env, 0, &p, &err);
		if (rc)
			fprintf(stderr, "%s: %s\n", ok[i].spec, err.msg);
		assert_int_equal(rc, 0);
		assert_string_equal(p->name, ok[i].name);
		/* the instance name is a spec too: it round-trips */
		struct strata_policy *q = NULL;
		char name[sizeof(p->name)];
		snprintf(name, sizeof(name), "%s", p->name);
		if (strata_policy_create(ok[i].role, name, &f->env, 0, &q, &err))
			fail_msg("instance name '%s' as a spec: %s", name, err.msg);
		assert_string_equal(q->name, name);
		strata_policy_destroy(q);
		strata_policy_destroy(p);
	}
	static const struct {
		int role;
		const char *spec, *msg;
		int code;
	} bad[] = {
		{ STRATA_ROLE_PREFETCH, "lookahead:dpth=2",
		  "prefetch lookahead: unknown option 'dpth' (options: depth, topn, min_score, tier, from, stage, "
		  "budget_pcie, budget_nvme, via_ram, keep_unused, adaptive, min_accuracy, min_accuracy_nvme, nvme_cost, warmup, window); did you mean 'depth'?", STRATA_EINVAL },
		{ STRATA_ROLE_PREFETCH, "oracle:accuracy=2", "prefetch oracle: option accuracy=2: out of range", STRATA_EINVAL },
		{ STRATA_ROLE_EVICT, "lru:x=1", "evict lru: unknown option 'x' (options: none)", STRATA_EINVAL },
		{ STRATA_ROLE_EVICT, "lruu", "evict policy 'lruu': no such built-in (lru, lfu, lfu-decay, farthest, fifo, random, llama, lfru, moe-infinity, least-stale)",
		  STRATA_ENOTFOUND },
		{ STRATA_ROLE_EVICT, "static", "no such built-in", STRATA_ENOTFOUND },
		{ STRATA_ROLE_EVICT, "", "evict policy: empty spec", STRATA_EINVAL },
		{ STRATA_ROLE_EVICT, ":depth=1", "bad name", STRATA_EINVAL },
		{ STRATA_ROLE_EVICT, "./no/such/policy.so", "evict policy ./no/such/policy.so: No such file",
		  STRATA_ENOTFOUND },
		{ STRATA_ROLE_EVICT, "/nonexistent.lua", "/nonexistent.lua", STRATA_ENOTFOUND },
		{ 7, "lru", "unknown role 7", STRATA_EINVAL },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct strata_policy *p = (void *)1;
		struct strata_error err = { 0 };
		int rc = strata_policy_create(bad[i].role, bad[i].spec, &f->env, 0, &p, &err);
		if (rc != bad[i].code || !strstr(err.msg, bad[i].msg))
			fprintf(stderr, "%s: rc %d '%s', want %d '%s'\n", bad[i].spec, rc, err.msg,
				bad[i].code, bad[i].msg);
		assert_int_equal(rc, bad[i].code);
		assert_non_null(strstr(err.msg, bad[i].msg));
		assert_null(p);
	}
	struct strata_policy *p;
	struct strata_error err = { 0 };
	assert_int_equal(strata_policy_create(STRATA_ROLE_EVICT, "lru", NULL, 0, &p, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "no policy environment"));
}

static void test_needs_future(void **state)
{
	struct fixture *f = *state;
	struct strata_policy_env live = f->env;
	live.future = NULL;
	struct strata_policy *p;
	struct strata_error err = { 0 };
	assert_int_equal(strata_policy_create(STRATA_ROLE_EVICT, "farthest", &live, 0, &p, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "evict farthest: needs the future of the run"));
	assert_int_equal(strata_policy_create(STRATA_ROLE_PREFETCH, "oracle", &live, -1, &p, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "prefetch oracle: needs the future"));
	/* the others run live */
	assert_int_equal(strata_policy_create(STRATA_ROLE_PREFETCH, "history", &live, -1, &p, &err), 0);
	strata_policy_destroy(p);
	assert_int_equal(strata_policy_create(STRATA_ROLE_EVICT, "farthest", &f->env, 0, &p, &err), 0);
	strata_policy_destroy(p);
}

static void noop_insert(struct strata_policy *p, uint32_t e, uint64_t n) { }
static void noop_remove(struct strata_policy *p, uint32_t e) { }
static int64_t noop_victim(struct strata_policy *p, uint64_t n, const struct strata_residency *r)
{
	return STRATA_NO_EXPERT;
}
static uint32_t noop_admit(struct strata_policy *p, uint32_t e, int t, uint64_t n) { return 0; }

static void test_check_ops(void **state)
{
	struct strata_error err = { 0 };
	struct strata_evict_ops ev = {
		.name = "mine", .version = STRATA_POLICY_ABI, .on_insert = noop_insert,
		.on_access = noop_insert, .on_remove = noop_remove, .victim = noop_victim,
	};
	assert_int_equal(strata_policy_check_ops(STRATA_ROLE_EVICT, &ev, "plugin x.so", &err), STRATA_OK);
	struct strata_evict_ops bad = ev;
	bad.version = STRATA_POLICY_ABI + 1;
	assert_int_equal(strata_policy_check_ops(STRATA_ROLE_EVICT, &bad, "plugin x.so", &err), STRATA_EVERSION);
	assert_non_null(strstr(err.msg, "plugin x.so mine: policy ABI version 3, this Strata supports 2"));
	static const char *const missing[] = { "on_insert", "on_access", "on_remove", "victim" };
	for (int i = 0; i < 4; i++) {
		bad = ev;
		if (i == 0) bad.on_insert = NULL;
		if (i == 1) bad.on_access = NULL;
		if (i == 2) bad.on_remove = NULL;
		if (i == 3) bad.victim = NULL;
		assert_int_equal(strata_policy_check_ops(STRATA_ROLE_EVICT, &bad, "evict", &err), STRATA_EINVAL);
		char want[128];
		snprintf(want, sizeof(want), "evict mine: missing required op %s", missing[i]);
		assert_string_equal(err.msg, want);
	}
	bad = ev;
	bad.name = "has space";
	assert_int_equal(strata_policy_check_ops(STRATA_ROLE_EVICT, &bad, "evict", &err), STRATA_EINVAL);
	bad.name = NULL;
	assert_int_equal(strata_policy_check_ops(STRATA_ROLE_EVICT, &bad, "evict", &err), STRATA_EINVAL);
	struct strata_place_ops pl = { .name = "p", .version = STRATA_POLICY_ABI };
	assert_int_equal(strata_policy_check_ops(STRATA_ROLE_PLACE, &pl, "place", &err), STRATA_EINVAL);
	assert_string_equal(err.msg, "place p: missing required op admit");
	pl.admit = noop_admit;
	assert_int_equal(strata_policy_check_ops(STRATA_ROLE_PLACE, &pl, "place", &err), STRATA_OK);
	struct strata_prefetch_ops pf = { .name = "q", .version = STRATA_POLICY_ABI };
	assert_int_equal(strata_policy_check_ops(STRATA_ROLE_PREFETCH, &pf, "prefetch", &err), STRATA_EINVAL);
	assert_string_equal(err.msg, "prefetch q: missing required op on_layer");
	/* a broken option table is caught at load */
	static const struct strata_option opts[] = {
		{ .name = "d", .type = STRATA_OPT_INT, .offset = 0, .def = "x" },
		{ .name = NULL },
	};
	ev.options = opts;
	assert_int_equal(strata_policy_check_ops(STRATA_ROLE_EVICT, &ev, "evict", &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "bad default"));
	assert_int_equal(strata_policy_check_ops(STRATA_ROLE_EVICT, NULL, "evict", &err), STRATA_EINVAL);
}

static void test_plugin_by_path(void **state)
{
	struct fixture *f = *state;
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/skeleton.so", plugin_dir());
	if (access(path, R_OK)) {
		fprintf(stderr, "plugin %s not built\n", path);
		fail();
	}
	struct strata_policy *p;
	struct strata_error err = { 0 };
	char spec[PATH_MAX + 80];
	snprintf(spec, sizeof(spec), "%s:rounds=3", path);
	int rc = strata_policy_create(STRATA_ROLE_EVICT, spec, &f->env, 0, &p, &err);
	if (rc)
		fprintf(stderr, "%s\n", err.msg);
	assert_int_equal(rc, 0);
	assert_string_equal(p->name, "clock-rounds=3");
	assert_non_null(p->loader);
	/* CLOCK: referenced experts get a second chance */
	const struct strata_evict_ops *o = strata_evict_ops_of(p);
	uint8_t pinned[64] = { 0 }, res[64] = { 0 };
	struct strata_residency r = { .pinned = pinned, .resident = res };
	for (uint32_t e = 0; e < 4; e++) {
		o->on_insert(p, e, e);
		res[e] = 1;
	}
	o->on_access(p, 0, 5);
	assert_int_equal(o->victim(p, 6, &r), 1); /* 0 was referenced */
	pinned[1] = 1;
	assert_int_equal(o->victim(p, 6, &r), 2);
	strata_policy_destroy(p);
	/* the wrong role */
	rc = strata_policy_create(STRATA_ROLE_PLACE, path, &f->env, -1, &p, &err);
	assert_int_equal(rc, STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "is a evict policy, not place"));
	/* an option it does not have */
	snprintf(spec, sizeof(spec), "%s:depth=3", path);
	assert_int_equal(strata_policy_create(STRATA_ROLE_EVICT, spec, &f->env, 0, &p, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "evict clock: unknown option 'depth' (options: rounds)"));
	/* a file that is not a shared object */
	char *dir = test_mkdtemp();
	char junk[PATH_MAX + 16];
	snprintf(junk, sizeof(junk), "%s/junk.so", dir);
	FILE *j = fopen(junk, "w");
	fputs("not an ELF file\n", j);
	fclose(j);
	assert_int_equal(strata_policy_create(STRATA_ROLE_EVICT, junk, &f->env, 0, &p, &err), STRATA_EINVAL);
	assert_non_null(strstr(err.msg, "cannot load"));
	assert_non_null(strstr(err.msg, junk));
	test_rmdir(dir);
	free(dir);
}

/* Plugins built here from small sources: wrong ABI, NULL info, no entry
 * symbol, ops failing the checks.  Needs a C compiler (skips without). */
static void test_bad_plugins(void **state)
{
	struct fixture *f = *state;
	char out[4096];
	if (test_run(out, sizeof(out), "cc --version") != 0) {
		fprintf(stderr, "SKIP test_bad_plugins: no C compiler\n");
		return;
	}
	char inc[PATH_MAX + 64];
	snprintf(inc, sizeof(inc), "%s/core/include", test_src_root());
	char *dir = test_mkdtemp();
	static const struct {
		const char *name, *body, *msg;
		int code;
	} cases[] = {
		{ "abi", "static const struct strata_plugin_info i = { .abi = 99, .role = 1, .ops = 0 };\n"
			 "const struct strata_plugin_info *strata_policy_plugin_entry(void) { return &i; }\n",
		  "built for policy ABI 99, this Strata supports 2", STRATA_EVERSION },
		{ "null", "const struct strata_plugin_info *strata_policy_plugin_entry(void) { return 0; }\n",
		  "strata_policy_plugin_entry returned NULL", STRATA_EINVAL },
		{ "noentry", "int something_else(void) { return 1; }\n", "no symbol strata_policy_plugin_entry",
		  STRATA_EINVAL },
		{ "noops", "static const struct strata_evict_ops o = { .name = \"half\", .version = STRATA_POLICY_ABI };\n"
			   "static const struct strata_plugin_info i = { .abi = STRATA_POLICY_ABI, .role = 1, .ops = &o };\n"
			   "const struct strata_plugin_info *strata_policy_plugin_entry(void) { return &i; }\n",
		  "missing required op on_insert", STRATA_EINVAL },
		{ "opsabi", "static const struct strata_evict_ops o = { .name = \"old\", .version = 7 };\n"
			    "static const struct strata_plugin_info i = { .abi = STRATA_POLICY_ABI, .role = 1, .ops = &o };\n"
			    "const struct strata_plugin_info *strata_policy_plugin_entry(void) { return &i; }\n",
		  "old: policy ABI version 7", STRATA_EVERSION },
		{ "initfail", "#include <stdint.h>\n"
			      "static int in(struct strata_policy *p, struct strata_error *e) { return -1; }\n"
			      "static void a(struct strata_policy *p, uint32_t e, uint64_t n) {}\n"
			      "static void r(struct strata_policy *p, uint32_t e) {}\n"
			      "static int64_t v(struct strata_policy *p, uint64_t n, const struct strata_residency *x)"
			      " { return -1; }\n"
			      "static const struct strata_evict_ops o = { .name = \"tp\", .version = STRATA_POLICY_ABI, .init = in,"
			      " .on_insert = a, .on_access = a, .on_remove = r, .victim = v };\n"
			      "static const struct strata_plugin_info i = { .abi = STRATA_POLICY_ABI, .role = 1, .ops = &o };\n"
			      "const struct strata_plugin_info *strata_policy_plugin_entry(void) { return &i; }\n",
		  "tp: init failed (returned -1) and gave no message", STRATA_EINVAL },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char src[PATH_MAX + 32], so[PATH_MAX + 32];
		snprintf(src, sizeof(src), "%s/%s.c", dir, cases[i].name);
		snprintf(so, sizeof(so), "%s/%s.so", dir, cases[i].name);
		FILE *c = fopen(src, "w");
		assert_non_null(c);
		fprintf(c, "#include \"strata/policy.h\"\n%s", cases[i].body);
		fclose(c);
		int rc = test_run(out, sizeof(out), "cc -shared -fPIC -I'%s' -o '%s' '%s'", inc, so, src);
		if (rc) {
			fprintf(stderr, "compiling %s: %s\n", src, out);
			fail();
		}
		struct strata_policy *p = (void *)1;
		struct strata_error err = { 0 };
		rc = strata_policy_create(STRATA_ROLE_EVICT, so, &f->env, 0, &p, &err);
		if (rc != cases[i].code || !strstr(err.msg, cases[i].msg) || !strstr(err.msg, so))
			fprintf(stderr, "%s: rc %d '%s'\n", cases[i].name, rc, err.msg);
		assert_int_equal(rc, cases[i].code);
		assert_non_null(strstr(err.msg, cases[i].msg));
		assert_non_null(strstr(err.msg, so));
		assert_null(p);
	}
	test_rmdir(dir);
	free(dir);
}

/* Plugins that crash or exit: the process still ends (the same signal), but
 * first says which plugin and which hook; exit(0) in a plugin is status 70,
 * never success.  Each case runs in a child that loads the plugin and calls
 * its hooks as the engine does. */
static void test_crashing_plugins(void **state)
{
	struct fixture *f = *state;
	char out[4096];
	if (test_run(out, sizeof(out), "cc --version") != 0) {
		fprintf(stderr, "SKIP test_crashing_plugins: no C compiler\n");
		return;
	}
	char inc[PATH_MAX + 64];
	snprintf(inc, sizeof(inc), "%s/core/include", test_src_root());
	char *dir = test_mkdtemp();
	static const struct {
		const char *name, *ins, *vic, *extra, *msg;
		int sig, status;
	} cases[] = {
		{ "nullvictim", "", "volatile int *z = 0; *z = 1;", "", "crashed with SIGSEGV", SIGSEGV, 0 },
		{ "abortinsert", "abort();", "", "", "crashed with SIGABRT", SIGABRT, 0 },
		{ "ctor", "", "", "__attribute__((constructor)) static void c(void) { volatile int *z = 0; *z = 1; }\n",
		  "crashed with SIGSEGV (bad memory access) while being loaded (in a constructor)", SIGSEGV, 0 },
		{ "exitinsert", "exit(0);", "", "", "called exit()", 0, 70 },
	};
	static const char *hooks[] = { "'victim'", "'on_insert'", "", "'on_insert'" };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char src[PATH_MAX + 32], so[PATH_MAX + 32], log[PATH_MAX + 32];
		snprintf(src, sizeof(src), "%s/%s.c", dir, cases[i].name);
		snprintf(so, sizeof(so), "%s/%s.so", dir, cases[i].name);
		snprintf(log, sizeof(log), "%s/%s.log", dir, cases[i].name);
		FILE *c = fopen(src, "w");
		assert_non_null(c);
		fprintf(c, "#include <stdint.h>\n#include <stdlib.h>\n#include \"strata/policy.h\"\n"
			   "static void ins(struct strata_policy *p, uint32_t e, uint64_t n) { %s }\n"
			   "static void acc(struct strata_policy *p, uint32_t e, uint64_t n) {}\n"
			   "static void rem(struct strata_policy *p, uint32_t e) {}\n"
			   "static int64_t vic(struct strata_policy *p, uint64_t n, const struct strata_residency *r)"
			   " { %s return -1; }\n"
			   "static const struct strata_evict_ops o = { .name = \"crash\", .version = STRATA_POLICY_ABI,"
			   " .on_insert = ins, .on_access = acc, .on_remove = rem, .victim = vic };\n"
			   "static const struct strata_plugin_info i = { .abi = STRATA_POLICY_ABI, .role = 1, .ops = &o };\n"
			   "const struct strata_plugin_info *strata_policy_plugin_entry(void) { return &i; }\n%s",
			cases[i].ins, cases[i].vic, cases[i].extra);
		fclose(c);
		if (test_run(out, sizeof(out), "cc -shared -fPIC -I'%s' -o '%s' '%s'", inc, so, src)) {
			fprintf(stderr, "compiling %s: %s\n", src, out);
			fail();
		}
		fflush(NULL);
		pid_t pid = fork();
		if (!pid) {
			if (!freopen(log, "w", stderr))
				_exit(4);
			/* the suite's own handlers (cmocka's) would catch the crash first */
			const int sigs[] = { SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL };
			for (int s = 0; s < 5; s++)
				signal(sigs[s], SIG_DFL);
			struct strata_policy *p;
			struct strata_error err = { 0 };
			if (strata_policy_create(STRATA_ROLE_EVICT, so, &f->env, 0, &p, &err))
				_exit(3);
			const struct strata_evict_ops *o = strata_evict_ops_of(p);
			o->on_insert(p, 1, 1);
			o->on_access(p, 1, 1);
			uint8_t none[64] = { 0 };
			struct strata_residency r = { .pinned = none, .resident = none };
			o->victim(p, 2, &r);
			exit(0); /* the core's own exit: no report */
		}
		int st;
		assert_int_equal(waitpid(pid, &st, 0), pid);
		FILE *l = fopen(log, "r");
		size_t n = l ? fread(out, 1, sizeof(out) - 1, l) : 0;
		out[n] = 0;
		if (l)
			fclose(l);
		print_message("%s: %s", cases[i].name, out);
		if (cases[i].sig) {
			assert_true(WIFSIGNALED(st));
			assert_int_equal(WTERMSIG(st), cases[i].sig);
		} else {
			assert_true(WIFEXITED(st));
			assert_int_equal(WEXITSTATUS(st), cases[i].status);
		}
		assert_non_null(strstr(out, so));
		assert_non_null(strstr(out, cases[i].msg));
		assert_non_null(strstr(out, hooks[i]));
	}
	test_rmdir(dir);
	free(dir);
}

static void test_plugin_path_env(void **state)
{
	struct fixture *f = *state;
	char dirs[2 * PATH_MAX];
	snprintf(dirs, sizeof(dirs), "/nonexistent:%s", plugin_dir());
	setenv("STRATA_PLUGIN_PATH", dirs, 1);
	struct strata_policy *p;
	struct strata_error err = { 0 };
	int rc = strata_policy_create(STRATA_ROLE_EVICT, "skeleton", &f->env, 0, &p, &err);
	if (rc)
		fprintf(stderr, "%s\n", err.msg);
	assert_int_equal(rc, 0);
	assert_string_equal(p->name, "clock");
	strata_policy_destroy(p);
	assert_int_equal(strata_policy_create(STRATA_ROLE_EVICT, "skeleton.so:rounds=2", &f->env, 0, &p, &err), 0);
	strata_policy_destroy(p);
	/* a built-in name wins over a plugin of the same name */
	assert_int_equal(strata_policy_create(STRATA_ROLE_EVICT, "lru", &f->env, 0, &p, &err), 0);
	assert_null(p->loader);
	strata_policy_destroy(p);
	rc = strata_policy_create(STRATA_ROLE_EVICT, "nope", &f->env, 0, &p, &err);
	assert_int_equal(rc, STRATA_ENOTFOUND);
	assert_non_null(strstr(err.msg, "no nope.so in $STRATA_PLUGIN_PATH (/nonexistent:"));
	unsetenv("STRATA_PLUGIN_PATH");
	/* the plugin runs through the harness like any policy */
	char spec[PATH_MAX + 32];
	snprintf(spec, sizeof(spec), "%s/skeleton.so", plugin_dir());
	struct strata_harness_config c;
	strata_harness_config_defaults(&c);
	c.budget = 8 * c.expert_bytes;
	c.evict = spec;
	struct strata_harness_counters k;
	assert_int_equal(strata_harness_run(f->trace, &c, &k, &err), 0);
	assert_int_equal(k.accesses, f->trace->n_accesses);
	assert_int_equal(k.hits + k.misses, k.accesses);
}

static void test_lua_spec_without_adapter(void **state)
{
	struct fixture *f = *state;
	char *dir = test_mkdtemp();
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/p.lua", dir);
	FILE *j = fopen(path, "w");
	fputs("return {}\n", j);
	fclose(j);
	struct strata_policy *p = NULL;
	struct strata_error err = { 0 };
	int rc = strata_policy_create(STRATA_ROLE_EVICT, path, &f->env, 0, &p, &err);
	if (rc == STRATA_EUNSUPPORTED) {
		/* no Lua adapter linked in this build: a clear message */
		assert_non_null(strstr(err.msg, "Lua policies are not available"));
		assert_non_null(strstr(err.msg, path));
	} else {
		/* with the adapter, a script without hooks must fail and name itself */
		assert_int_not_equal(rc, STRATA_OK);
		assert_non_null(strstr(err.msg, "p.lua"));
	}
	assert_null(p);
	test_rmdir(dir);
	free(dir);
}

static void test_cli_lists_policies(void **state)
{
	static char out[65536];
	int rc = test_run(out, sizeof(out), "%s policies", test_bin("strata"));
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "evict policies:"));
	assert_non_null(strstr(out, "lru "));
	assert_non_null(strstr(out, "[default]"));
	assert_non_null(strstr(out, "half_life"));
	rc = test_run(out, sizeof(out), "%s policies --role prefetch --json", test_bin("strata"));
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "\"prefetch\": ["));
	assert_null(strstr(out, "\"evict\""));
	assert_non_null(strstr(out, "{\"name\": \"depth\", \"type\": \"int\", \"default\": \"1\", \"min\": 1, \"max\": 1024"));
	assert_non_null(strstr(out, "\"needs_future\": true"));
	/* well-formed JSON, when python3 is here to say so */
	if (test_run(NULL, 0, "python3 -c 1") == 0) {
		rc = test_run(out, sizeof(out), "%s policies --json | python3 -m json.tool >/dev/null",
			      test_bin("strata"));
		assert_int_equal(rc, 0);
	}
	rc = test_run(out, sizeof(out), "%s policies --role nope", test_bin("strata"));
	assert_int_equal(rc, 2);
	assert_non_null(strstr(out, "--role needs place, evict or prefetch, not nope"));
	rc = test_run(out, sizeof(out), "%s policies --bogus", test_bin("strata"));
	assert_int_equal(rc, 2);
	rc = test_run(out, sizeof(out), "%s policies --help", test_bin("strata"));
	assert_int_equal(rc, 0);
	assert_non_null(strstr(out, "usage: strata policies"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roles_and_registry),
		cmocka_unit_test_setup_teardown(test_create_every_builtin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_defaults_of_optional_ops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_spec_options_and_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_needs_future, setup, teardown),
		cmocka_unit_test(test_check_ops),
		cmocka_unit_test_setup_teardown(test_plugin_by_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_plugin_path_env, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_plugins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crashing_plugins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lua_spec_without_adapter, setup, teardown),
		cmocka_unit_test(test_cli_lists_policies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
