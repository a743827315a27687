/*
 * The policy loader (see include/strata/policy.h): resolves a spec
 * "NAME[:k=v...]" to a built-in, a plugin .so or a Lua script, checks the ops
 * it finds (ABI version, required ops, option table) and builds an instance
 * whose ops copy has every optional op filled in, so that the engine never
 * tests for NULL.
 */
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "strata/policy.h"
#include "strata/types.h"

enum loader_kind { LOADER_BUILTIN = 0, LOADER_PLUGIN = 1, LOADER_LUA = 2 };

/* The public instance plus what only the loader sees. */
struct policy_impl {
	struct strata_policy pub;
	union {
		struct strata_evict_ops evict;
		struct strata_place_ops place;
		struct strata_prefetch_ops prefetch;
	} ops;
	int kind;        /* enum loader_kind */
	int priv_owned;  /* priv was allocated here (not by the Lua adapter) */
	int inited;      /* init succeeded: free must run */
};

const char *strata_role_name(int role)
{
	switch (role) {
	case STRATA_ROLE_PLACE: return "place";
	case STRATA_ROLE_EVICT: return "evict";
	case STRATA_ROLE_PREFETCH: return "prefetch";
	default: return "unknown-role";
	}
}

/* ---- default implementations of optional ops ---- */

static int def_init(struct strata_policy *p, struct strata_error *err)
{
	(void)p;
	(void)err;
	return STRATA_OK;
}

static void def_free(struct strata_policy *p)
{
	(void)p;
}

static int def_initial_tier(struct strata_policy *p, uint32_t eid)
{
	const struct strata_policy_env *env = p->env;
	if (env && env->tier_table && eid < env->n_ids)
		return env->tier_table[eid];
	return STRATA_TIER_NVME;
}

static void def_place_access(struct strata_policy *p, uint32_t eid, int served_tier, uint64_t now)
{
	(void)p;
	(void)eid;
	(void)served_tier;
	(void)now;
}

static void def_on_route(struct strata_policy *p, uint64_t token, uint32_t layer,
			 const uint32_t *experts, uint32_t n)
{
	(void)p;
	(void)token;
	(void)layer;
	(void)experts;
	(void)n;
}

static void def_on_step(struct strata_policy *p, const struct strata_step *s)
{
	(void)p;
	(void)s;
}

/* ---- checks ---- */

static int name_ok(const char *n)
{
	if (!n || !*n)
		return 0;
	for (; *n; n++) {
		char c = *n;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || c == '.' || c == '+'))
			return 0;
	}
	return 1;
}

#define NEED(op)                                                                                 \
	do {                                                                                     \
		if (!(op))                                                                       \
			return STRATA_ERR(err, STRATA_EINVAL, "%s %s: missing required op %s",  \
					  who, h->name, #op + 3);                               \
	} while (0)

int strata_policy_check_ops(int role, const void *ops, const char *who, struct strata_error *err)
{
	if (!who)
		who = strata_role_name(role);
	if (!ops)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: no ops", who);
	/* Every ops struct starts with the same head. */
	const struct strata_evict_ops *h = ops;
	if (h->version != STRATA_POLICY_ABI)
		return STRATA_ERR(err, STRATA_EVERSION,
				  "%s %s: policy ABI version %u, this Strata supports %u", who,
				  h->name ? h->name : "(unnamed)", h->version, STRATA_POLICY_ABI);
	if (!name_ok(h->name))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: policy name '%s' must be [a-z0-9_-]+", who,
				  h->name ? h->name : "(null)");
	switch (role) {
	case STRATA_ROLE_EVICT: {
		const struct strata_evict_ops *o = ops;
		NEED(o->on_insert);
		NEED(o->on_access);
		NEED(o->on_remove);
		NEED(o->victim);
		break;
	}
	case STRATA_ROLE_PLACE: {
		const struct strata_place_ops *o = ops;
		NEED(o->admit);
		break;
	}
	case STRATA_ROLE_PREFETCH: {
		const struct strata_prefetch_ops *o = ops;
		NEED(o->on_layer);
		break;
	}
	default:
		return STRATA_ERR(err, STRATA_EINVAL, "%s %s: unknown role %d", who, h->name, role);
	}
	char owner[STRATA_POLICY_NAME_MAX + 64];
	snprintf(owner, sizeof(owner), "%s %s", who, h->name);
	return strata_options_check(h->options, owner, err);
}

/* Copy ops for role into the instance and fill in optional ops. */
static void install_ops(struct policy_impl *pi, int role, const void *ops)
{
	switch (role) {
	case STRATA_ROLE_EVICT:
		pi->ops.evict = *(const struct strata_evict_ops *)ops;
		if (!pi->ops.evict.on_step)
			pi->ops.evict.on_step = def_on_step;
		break;
	case STRATA_ROLE_PLACE:
		pi->ops.place = *(const struct strata_place_ops *)ops;
		if (!pi->ops.place.initial_tier)
			pi->ops.place.initial_tier = def_initial_tier;
		if (!pi->ops.place.on_access)
			pi->ops.place.on_access = def_place_access;
		if (!pi->ops.place.on_step)
			pi->ops.place.on_step = def_on_step;
		break;
	case STRATA_ROLE_PREFETCH:
		pi->ops.prefetch = *(const struct strata_prefetch_ops *)ops;
		if (!pi->ops.prefetch.on_route)
			pi->ops.prefetch.on_route = def_on_route;
		break;
	}
	/* init and free sit at the same place in every ops head. */
	if (!pi->ops.evict.init)
		pi->ops.evict.init = def_init;
	if (!pi->ops.evict.free)
		pi->ops.evict.free = def_free;
	pi->pub.ops = &pi->ops;
}

/* ---- lookup ---- */

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcmp(s + n - m, suffix);
}

static void list_builtins(int role, char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = '\0';
	for (unsigned i = 0;; i++) {
		const struct strata_evict_ops *h = strata_policy_builtin_at(role, i);
		if (!h)
			break;
		int n = snprintf(buf + at, len - at, "%s%s", i ? ", " : "", h->name);
		if (n < 0 || (size_t)n >= len - at)
			break;
		at += (size_t)n;
	}
}

/* ---- plugin guard ---------------------------------------------------------
 *
 * A plugin runs inside the process: a NULL dereference, an abort() or an
 * exit() in it would end the run with no word about whose code it was.  The
 * guard remembers every loaded plugin (its load address and its hooks) and,
 * on a fatal signal or an exit() whose stack passes through a plugin, names
 * the plugin and the hook before the process ends: the signal is re-raised
 * (same exit status), an exit() from a plugin becomes status 70, never 0.
 * The hook is the one whose entry is the nearest below the outermost
 * plugin frame (the frame the core called).  Fixed slots: the handler
 * allocates nothing. */
#define GUARD_SLOTS 32
#define GUARD_HOOKS 8
struct guard {
	const void *base; /* dli_fbase of the plugin, NULL: free slot */
	char path[256];
	const char *role;
	struct { const char *name; const void *fn; } hook[GUARD_HOOKS];
};
static struct guard guards[GUARD_SLOTS];
static char guard_loading[256]; /* a plugin being dlopen()ed (its constructors run) */
static int guard_installed;

static const struct guard *guard_find(const void *pc, const char **hook)
{
	Dl_info di;
	if (!dladdr(pc, &di))
		return NULL;
	for (int i = 0; i < GUARD_SLOTS; i++) {
		const struct guard *g = &guards[i];
		if (!g->base || g->base != di.dli_fbase)
			continue;
		const void *best = NULL;
		*hook = "a helper outside its hooks";
		for (int h = 0; h < GUARD_HOOKS && g->hook[h].name; h++)
			if (g->hook[h].fn && (const char *)g->hook[h].fn <= (const char *)pc &&
			    (!best || (const char *)g->hook[h].fn > (const char *)best)) {
				best = g->hook[h].fn;
				*hook = g->hook[h].name;
			}
		return g;
	}
	return NULL;
}

/* "plugin P (evict) crashed with SIGSEGV in its hook 'victim'" for the
 * outermost plugin frame on the stack; 0 when no plugin is on it. */
static int guard_explain(const char *what, const void *fault_pc, char *buf, size_t len)
{
	void *pcs[64];
	int n = backtrace(pcs, 64);
	const struct guard *hit = NULL;
	const char *hook = NULL;
	for (int i = 0; i < n; i++) {
		const char *h;
		/* a return address may be the first byte after a call to a
		 * noreturn function (abort): look one byte back, except at the
		 * faulting instruction itself */
		const char *pc = pcs[i] == fault_pc ? (const char *)pcs[i] : (const char *)pcs[i] - 1;
		const struct guard *g = guard_find(pc, &h);
		if (g) {
			hit = g;
			hook = h;
		} else if (hit) {
			break; /* back in the core: the last plugin frame was the hook */
		}
	}
	if (hit) {
		snprintf(buf, len, "strata: %s plugin %s %s in its hook '%s'\n", hit->role, hit->path, what, hook);
		return 1;
	}
	if (guard_loading[0]) {
		snprintf(buf, len, "strata: plugin %s %s while being loaded (in a constructor)\n", guard_loading,
			 what);
		return 1;
	}
	return 0;
}

static void guard_on_signal(int sig, siginfo_t *si, void *ctx)
{
	static char buf[768];
	const void *fault_pc = NULL;
#if defined(__x86_64__) && defined(REG_RIP)
	fault_pc = (const void *)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
	fault_pc = (const void *)((ucontext_t *)ctx)->uc_mcontext.pc;
#endif
	char what[64];
	snprintf(what, sizeof(what), "crashed with %s", sig == SIGSEGV ? "SIGSEGV (bad memory access)"
		 : sig == SIGBUS ? "SIGBUS" : sig == SIGABRT ? "SIGABRT (abort)" : sig == SIGFPE ? "SIGFPE"
		 : "SIGILL");
	if (guard_explain(what, fault_pc, buf, sizeof(buf)) && write(2, buf, strlen(buf)) < 0) {
		/* nothing more to do on the way down */
	}
	raise(sig); /* SA_RESETHAND: the default action, the usual exit status */
}

static void guard_on_exit(void)
{
	static char buf[768];
	if (guard_explain("called exit()", NULL, buf, sizeof(buf) - 96)) {
		buf[strlen(buf) - 1] = 0;
		strcat(buf, ": a plugin must return an error instead; the results are incomplete\n");
		if (write(2, buf, strlen(buf)) < 0) {
			/* exiting anyway */
		}
		_exit(70);
	}
}

/* Before each plugin load: the handlers (where no one else has installed
 * one: ASan's stays), once the unwinder, the alternate stack and atexit. */
static void guard_install(void)
{
	if (!guard_installed) {
		guard_installed = 1;
		void *prime[2];
		backtrace(prime, 2); /* loads the unwinder now, not inside a handler */
		static char alt[64 * 1024]; /* a plugin's stack overflow still gets its report */
		stack_t ss = { .ss_sp = alt, .ss_size = sizeof(alt) };
		sigaltstack(&ss, NULL);
		atexit(guard_on_exit);
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = guard_on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK | SA_NODEFER;
	const int sigs[] = { SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL };
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old;
		/* leave a handler someone else installed (ASan's) alone */
		if (!sigaction(sigs[i], NULL, &old) && old.sa_handler == SIG_DFL)
			sigaction(sigs[i], &sa, NULL);
	}
}

static void guard_add(const void *entry, const char *path, int role, const void *ops)
{
	Dl_info di;
	if (!dladdr(entry, &di))
		return;
	for (int i = 0; i < GUARD_SLOTS; i++) {
		struct guard *g = &guards[i];
		if (g->base)
			continue;
		memset(g, 0, sizeof(*g));
		snprintf(g->path, sizeof(g->path), "%s", path);
		g->role = strata_role_name(role);
		const struct strata_evict_ops *h = ops;
		int k = 0;
#define HOOK(n, f) (g->hook[k].name = (n), memcpy(&g->hook[k].fn, &(f), sizeof(void *)), k++)
		HOOK("init", h->init);
		HOOK("free", h->free);
		if (role == STRATA_ROLE_EVICT) {
			HOOK("on_insert", h->on_insert);
			HOOK("on_access", h->on_access);
			HOOK("on_remove", h->on_remove);
			HOOK("victim", h->victim);
		} else if (role == STRATA_ROLE_PLACE) {
			const struct strata_place_ops *o = ops;
			HOOK("initial_tier", o->initial_tier);
			HOOK("admit", o->admit);
			HOOK("on_access", o->on_access);
		} else {
			const struct strata_prefetch_ops *o = ops;
			HOOK("on_layer", o->on_layer);
			HOOK("on_route", o->on_route);
		}
#undef HOOK
		g->base = di.dli_fbase;
		return;
	}
}

static void guard_remove(void *handle)
{
	for (int i = 0; i < GUARD_SLOTS; i++) {
		Dl_info di;
		void *sym = dlsym(handle, STRATA_PLUGIN_ENTRY);
		if (guards[i].base && sym && dladdr(sym, &di) && di.dli_fbase == guards[i].base) {
			guards[i].base = NULL;
			return;
		}
	}
}

/* Find NAME (or NAME.so) in $STRATA_PLUGIN_PATH; path gets the hit. */
static int search_plugin_path(const char *name, char *path, size_t len)
{
	const char *env = getenv("STRATA_PLUGIN_PATH");
	if (!env || !*env || strchr(name, '/'))
		return 0;
	int has_ext = ends_with(name, ".so") || ends_with(name, ".lua");
	char *dirs = strdup(env), *save = NULL;
	if (!dirs)
		return 0;
	int found = 0;
	for (char *d = strtok_r(dirs, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		snprintf(path, len, "%s/%s%s", d, name, has_ext ? "" : ".so");
		found = access(path, R_OK) == 0;
	}
	free(dirs);
	return found;
}

static int load_plugin(struct policy_impl *pi, int role, const char *path, const void **ops,
		       struct strata_error *err)
{
	const char *rn = strata_role_name(role);
	dlerror();
	guard_install();
	snprintf(guard_loading, sizeof(guard_loading), "%s", path);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	guard_loading[0] = 0;
	if (!h)
		return STRATA_ERR(err, STRATA_EINVAL, "%s plugin %s: cannot load: %s", rn, path,
				  dlerror());
	pi->pub.loader = h;
	pi->kind = LOADER_PLUGIN;
	strata_plugin_entry_fn entry;
	void *sym = dlsym(h, STRATA_PLUGIN_ENTRY);
	memcpy(&entry, &sym, sizeof(entry));
	if (!entry)
		return STRATA_ERR(err, STRATA_EINVAL, "%s plugin %s: no symbol %s", rn, path,
				  STRATA_PLUGIN_ENTRY);
	snprintf(guard_loading, sizeof(guard_loading), "%s", path);
	const struct strata_plugin_info *info = entry();
	guard_loading[0] = 0;
	if (!info)
		return STRATA_ERR(err, STRATA_EINVAL, "%s plugin %s: %s returned NULL", rn, path,
				  STRATA_PLUGIN_ENTRY);
	if (info->abi != STRATA_POLICY_ABI)
		return STRATA_ERR(err, STRATA_EVERSION,
				  "%s plugin %s: built for policy ABI %u, this Strata supports %u", rn,
				  path, info->abi, STRATA_POLICY_ABI);
	if (info->role != role)
		return STRATA_ERR(err, STRATA_EINVAL, "%s plugin %s: is a %s policy, not %s", rn, path,
				  strata_role_name(info->role), rn);
	*ops = info->ops;
	if (info->ops)
		guard_add(sym, path, role, info->ops);
	return STRATA_OK;
}

/* Check ops, install them with defaults, allocate priv, apply options, name
 * the instance, run init.  On error the caller destroys pi. */
static int instantiate(struct policy_impl *pi, int role, const void *ops, const char *who,
		       const char *kv, struct strata_error *err)
{
	struct strata_policy *p = &pi->pub;
	const struct strata_policy_env *env = p->env;
	const char *rn = strata_role_name(role);
	int rc;
	rc = strata_policy_check_ops(role, ops, who, err);
	if (rc)
		return rc;
	const struct strata_evict_ops *h = ops;
	if ((h->flags & STRATA_POLICY_F_NEEDS_FUTURE) && !env->future) {
		return STRATA_ERR(err, STRATA_EINVAL,
				  "%s %s: needs the future of the run (trace replay or simulation provide it;"
				  " live runs do not)", rn, h->name);
	}
	install_ops(pi, role, ops);
	if (h->priv_size) {
		p->priv = calloc(1, h->priv_size);
		if (!p->priv)
			return STRATA_ERR(err, STRATA_ENOMEM, "%s %s: out of memory", rn, h->name);
		pi->priv_owned = 1;
	}
	char owner[STRATA_POLICY_NAME_MAX + 16];
	snprintf(owner, sizeof(owner), "%s %s", rn, h->name);
	if (h->options && h->options->name && !p->priv)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: has options but priv_size 0", owner);
	rc = strata_options_apply(h->options, p->priv, kv, owner, err);
	if (rc)
		return rc;
	strata_options_canonical(h->options, p->priv, h->name, p->name, sizeof(p->name));
	pi->inited = 1; /* free runs even when init fails (priv starts zeroed) */
	if (err)
		strata_error_clear(err);
	rc = pi->ops.evict.init(p, err);
	if (rc) {
		if (err && !err->msg[0])
			return STRATA_ERR(err, rc < 0 && rc >= STRATA_EEXIST ? rc : STRATA_EINVAL,
					  "%s %s: init failed (returned %d) and gave no message", who, h->name, rc);
		if (err && !strstr(err->msg, h->name))
			strata_error_prefix(err, "%s", owner);
		return rc;
	}
	return STRATA_OK;
}

/* Length of an option key ([a-z0-9_]+) followed by '=' at s, else 0. */
static size_t key_eq(const char *s)
{
	size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_");
	return n && s[n] == '=' ? n : 0;
}

/* The canonical instance name a run reports (`lookahead-depth=2-topn=3`,
 * strata_options_canonical) is also a spec: rewrite it to the colon form
 * (`lookahead:depth=2:topn=3`) so a name copied from a results row runs the
 * same policy.  The name ends at the first '-' followed by `key=` (names such
 * as lfu-decay keep their hyphen: `decay-halflife=` is not a key).  Returns 1
 * when buf holds the rewritten spec. */
static int spec_from_instance_name(const char *spec, char *buf, size_t len)
{
	if (strchr(spec, ':') || !strchr(spec, '=') || strlen(spec) >= len)
		return 0;
	const char *p = spec;
	while ((p = strchr(p, '-')) && !key_eq(p + 1))
		p++;
	if (!p || p == spec)
		return 0;
	size_t o = 0;
	for (const char *s = spec; *s; s++)
		buf[o++] = (*s == '-' && s >= p && key_eq(s + 1)) ? ':' : *s;
	buf[o] = '\0';
	return 1;
}

int strata_policy_create(int role, const char *spec, const struct strata_policy_env *env, int tier,
			 struct strata_policy **out, struct strata_error *err)
{
	*out = NULL;
	if (role < 0 || role >= STRATA_ROLE_COUNT)
		return STRATA_ERR(err, STRATA_EINVAL, "policy: unknown role %d", role);
	const char *rn = strata_role_name(role);
	if (!spec || !*spec)
		return STRATA_ERR(err, STRATA_EINVAL, "%s policy: empty spec", rn);
	if (!env)
		return STRATA_ERR(err, STRATA_EINVAL, "%s %s: no policy environment", rn, spec);

	char name[PATH_MAX], colon_spec[PATH_MAX];
	if (spec_from_instance_name(spec, colon_spec, sizeof(colon_spec)))
		spec = colon_spec;
	const char *colon = strchr(spec, ':');
	size_t nlen = colon ? (size_t)(colon - spec) : strlen(spec);
	if (nlen == 0 || nlen >= sizeof(name))
		return STRATA_ERR(err, STRATA_EINVAL, "%s policy '%s': bad name", rn, spec);
	memcpy(name, spec, nlen);
	name[nlen] = '\0';
	const char *kv = colon ? colon + 1 : NULL;

	struct policy_impl *pi = calloc(1, sizeof(*pi));
	if (!pi)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s %s: out of memory", rn, name);
	struct strata_policy *p = &pi->pub;
	p->role = role;
	p->env = env;
	p->tier = role == STRATA_ROLE_EVICT ? tier : -1;

	int rc;
	const void *ops = strata_policy_builtin(role, name);
	char path[PATH_MAX];
	const char *who = rn;
	char whobuf[PATH_MAX + 32];
	if (!ops) {
		int found = search_plugin_path(name, path, sizeof(path));
		if (!found) {
			snprintf(path, sizeof(path), "%s", name);
			found = strchr(name, '/') || ends_with(name, ".so") || ends_with(name, ".lua");
			if (found && access(path, R_OK) != 0) {
				rc = STRATA_ERRNO(err, STRATA_ENOTFOUND, "%s policy %s", rn, path);
				goto fail;
			}
		}
		if (!found) {
			char names[512];
			const char *pp = getenv("STRATA_PLUGIN_PATH");
			list_builtins(role, names, sizeof(names));
			rc = STRATA_ERR(err, STRATA_ENOTFOUND,
					"%s policy '%s': no such built-in (%s), no %s.so in $STRATA_PLUGIN_PATH (%s)"
					", and not a path to a .so or .lua file",
					rn, name, names, name, pp && *pp ? pp : "unset");
			goto fail;
		}
		if (ends_with(path, ".lua")) {
			pi->kind = LOADER_LUA;
			rc = strata_lua_policy_create(role, path, kv, env, p, err);
			if (rc) {
				/* the adapter released what it made */
				p->loader = NULL;
				p->priv = NULL;
				goto fail;
			}
			pi->inited = 1;
			snprintf(whobuf, sizeof(whobuf), "%s script %s:", rn, path);
			rc = strata_policy_check_ops(role, p->ops, whobuf, err);
			if (rc)
				goto fail;
			install_ops(pi, role, p->ops);
			if ((((const struct strata_evict_ops *)p->ops)->flags & STRATA_POLICY_F_NEEDS_FUTURE) &&
			    !env->future) {
				rc = STRATA_ERR(err, STRATA_EINVAL,
						"%s %s: needs the future of the run (trace replay or simulation)",
						rn, p->name);
				goto fail;
			}
			if (!p->name[0])
				snprintf(p->name, sizeof(p->name), "%s", name);
			*out = p;
			return STRATA_OK;
		}
		rc = load_plugin(pi, role, path, &ops, err);
		if (rc)
			goto fail;
		snprintf(whobuf, sizeof(whobuf), "%s plugin %s:", rn, path);
		who = whobuf;
	}

	rc = instantiate(pi, role, ops, who, kv, err);
	if (rc)
		goto fail;
	*out = p;
	return STRATA_OK;
fail:
	strata_policy_destroy(p);
	return rc;
}

int strata_policy_create_ops(int role, const void *ops, const char *kv,
			     const struct strata_policy_env *env, int tier, struct strata_policy **out,
			     struct strata_error *err)
{
	*out = NULL;
	if (role < 0 || role >= STRATA_ROLE_COUNT)
		return STRATA_ERR(err, STRATA_EINVAL, "policy: unknown role %d", role);
	if (!env)
		return STRATA_ERR(err, STRATA_EINVAL, "%s policy: no policy environment",
				  strata_role_name(role));
	struct policy_impl *pi = calloc(1, sizeof(*pi));
	if (!pi)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s policy: out of memory", strata_role_name(role));
	pi->pub.role = role;
	pi->pub.env = env;
	pi->pub.tier = role == STRATA_ROLE_EVICT ? tier : -1;
	int rc = instantiate(pi, role, ops, strata_role_name(role), kv, err);
	if (rc) {
		strata_policy_destroy(&pi->pub);
		return rc;
	}
	*out = &pi->pub;
	return STRATA_OK;
}

void strata_policy_destroy(struct strata_policy *p)
{
	if (!p)
		return;
	struct policy_impl *pi = (struct policy_impl *)p;
	const struct strata_evict_ops *h = p->ops;
	if (pi->inited && h && h->free)
		h->free(p);
	if (pi->priv_owned)
		free(p->priv);
	if (pi->kind == LOADER_PLUGIN && p->loader) {
		guard_remove(p->loader);
		dlclose(p->loader);
	}
	free(pi);
}
