/*
 * Experiment configurations and their run ids (see strata/experiment.h): a
 * run id names every setting that changes a result, so a sweep resumes by
 * run id and `strata run --one RUN_ID` repeats one run anywhere.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "strata/experiment.h"
#include "strata/store.h"
#include "strata/mover.h"
#include "strata/trace.h"
#include "strata/util.h"

void strata_experiment_config_defaults(struct strata_experiment_config *c)
{
	memset(c, 0, sizeof(*c));
	c->virt = 1;
	c->seed = 1;
	c->hints = 1;
	c->future = 1;
	c->gpu = -1;
	snprintf(c->compute, sizeof(c->compute), "auto");
	snprintf(c->mover, sizeof(c->mover), "uring");
}

/* Content key of a trace (is_model 0) or model directory (1) as 16 hex
 * digits: "" for a model that is not a directory, "missing" for a file that
 * cannot be read.  A few entries cached by (device, inode, size, mtime): a
 * sweep keys thousands of configurations on a handful of files. */
static void content_key(const char *path, int is_model, char out[24])
{
	static struct { dev_t dev; ino_t ino; off_t size; struct timespec mt; char key[24]; int used; } cache[16];
	static unsigned next;
	struct stat st;
	char p[1100];
	snprintf(p, sizeof(p), is_model ? "%s/shard-00000.strata" : "%s", path);
	if (is_model && (stat(path, &st) || !S_ISDIR(st.st_mode))) {
		out[0] = 0;
		return;
	}
	if (stat(p, &st)) {
		snprintf(out, 24, "missing");
		return;
	}
	for (unsigned i = 0; i < 16; i++)
		if (cache[i].used && cache[i].dev == st.st_dev && cache[i].ino == st.st_ino &&
		    cache[i].size == st.st_size && cache[i].mt.tv_sec == st.st_mtim.tv_sec &&
		    cache[i].mt.tv_nsec == st.st_mtim.tv_nsec) {
			snprintf(out, 24, "%s", cache[i].key);
			return;
		}
	uint64_t k = 0;
	struct strata_error err;
	if (is_model ? strata_store_content_key(path, &k, &err) : strata_trace_content_key(path, &k, &err)) {
		snprintf(out, 24, "missing");
		return;
	}
	snprintf(out, 24, "%016" PRIx64, k);
	unsigned i = next++ % 16;
	cache[i].dev = st.st_dev;
	cache[i].ino = st.st_ino;
	cache[i].size = st.st_size;
	cache[i].mt = st.st_mtim;
	snprintf(cache[i].key, sizeof(cache[i].key), "%s", out);
	cache[i].used = 1;
}

void strata_experiment_config_id(struct strata_experiment_config *c)
{
	if (!c->trace_sum[0])
		content_key(c->trace, 0, c->trace_sum);
	if (!c->model_sum[0])
		content_key(c->model, 1, c->model_sum);
	size_t n = 0, cap = sizeof(c->run_id);
#define ADD(...) (n += (size_t)snprintf(c->run_id + n, n < cap ? cap - n : 0, __VA_ARGS__))
	ADD("mode=%s;model=%s;trace=%s;vram=%" PRIu64 ";ram=%" PRIu64 ";place=%s;evict=%s;prefetch=%s;seed=%" PRIu64,
	    c->virt ? "sim" : "replay", c->model, c->trace, c->vram, c->ram, c->place, c->evict, c->prefetch,
	    c->seed);
	ADD(";trace_sum=%s", c->trace_sum);
	if (c->model_sum[0])
		ADD(";model_sum=%s", c->model_sum);
	if (c->max_tokens)
		ADD(";max_tokens=%" PRIu64, c->max_tokens);
	if (c->prefill_chunk)
		ADD(";prefill_chunk=%u", c->prefill_chunk);
	if (!c->hints)
		ADD(";hints=0");
	if (!c->future)
		ADD(";future=0");
	if (c->cost[0])
		ADD(";cost=%s", c->cost);
	if (c->tiers[0])
		ADD(";tiers=%s", c->tiers);
	if (c->tier_trace[0])
		ADD(";tier_trace=%s", c->tier_trace);
	if (c->formats[0])
		ADD(";formats=%s", c->formats);
	if (c->on_miss[0])
		ADD(";on_miss=%s", c->on_miss);
	if (!c->virt)
		ADD(";compute=%s;mover=%s;gpu=%d", c->compute, c->mover, c->gpu);
	if (!c->virt && c->copy[0]) /* only when set: older run ids stay valid */
		ADD(";copy=%s", c->copy);
	for (uint32_t i = 0; i < c->n_tags; i++)
		ADD(";%s=%s", c->tag_name[i], c->tag_value[i]);
#undef ADD
	if (n >= cap)
		c->run_id[cap - 1] = '\0';
}

_Static_assert(STRATA_COMPUTE_NONE == 0 && STRATA_COMPUTE_REF == 1 && STRATA_COMPUTE_GPU == 2 &&
		       STRATA_COMPUTE_AUTO == 3 && STRATA_NVME_URING == 0 && STRATA_NVME_MMAP == 1 && STRATA_NVME_PREAD == 2,
	       "run_one's compute and mover names are indexed by these values");

/* Index of v in the NULL-terminated names, -1 if absent. */
static int name_index(const char *const *names, const char *v)
{
	for (int i = 0; names[i]; i++)
		if (!strcmp(v, names[i]))
			return i;
	return -1;
}

int strata_experiment_run_one(const struct strata_experiment_config *x, struct strata_replay_result *res,
			      struct strata_error *err)
{
	/* the files must still hold what the run was keyed on */
	char now[24];
	content_key(x->trace, 0, now);
	if (x->trace_sum[0] && strcmp(now, x->trace_sum))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: the trace changed since this run was configured (content "
				  "key %s, now %s): run the sweep again", x->trace, x->trace_sum, now);
	content_key(x->model, 1, now);
	if (strcmp(now, x->model_sum))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: the model changed since this run was configured (content "
				  "key %s, now %s): run the sweep again", x->model, x->model_sum[0] ? x->model_sum : "none",
				  now[0] ? now : "none");
	struct strata_replay_config c;
	strata_replay_config_defaults(&c);
	c.model_dir = x->model;
	c.trace_path = x->trace;
	c.engine.mode = x->virt ? STRATA_ENGINE_VIRTUAL : STRATA_ENGINE_REAL;
	if (x->vram)
		c.engine.budget[0] = x->vram;
	if (x->ram)
		c.engine.budget[1] = x->ram;
	if (x->place[0])
		c.engine.place = x->place;
	if (x->evict[0])
		c.engine.evict = x->evict;
	if (x->prefetch[0])
		c.engine.prefetch = x->prefetch;
	if (x->on_miss[0])
		c.engine.on_miss = x->on_miss;
	c.engine.seed = x->seed;
	c.max_tokens = x->max_tokens;
	c.prefill_chunk = x->prefill_chunk;
	c.hints = x->hints;
	c.future = x->future;
	c.progress = false;
	c.tiers = x->tiers[0] ? x->tiers : NULL;
	c.tier_trace = x->tier_trace[0] ? x->tier_trace : NULL;
	c.formats = x->formats[0] ? x->formats : NULL;
	if (x->virt) {
		struct strata_cost_file cf;
		if (x->cost[0]) {
			int rc = strata_cost_file_load(x->cost, &cf, err);
			if (rc)
				return rc;
		} else {
			strata_cost_file_defaults(&cf);
		}
		c.engine.cost = cf.cost;
		c.kernel_us_per_mb_token = cf.kernel_us_per_mb_token;
		c.kernel_speed_q4 = cf.kernel_speed_q4, c.kernel_speed_q3 = cf.kernel_speed_q3;
		c.compute = STRATA_COMPUTE_NONE;
	} else {
		static const char *const cn[] = { "none", "ref", "gpu", "auto", NULL };
		static const char *const mn[] = { "uring", "mmap", "pread", NULL };
		int ci = name_index(cn, x->compute), mi = name_index(mn, x->mover);
		int cm = x->copy[0] ? name_index(strata_copy_names, x->copy) : STRATA_COPY_AUTO;
		if (ci < 0)
			return STRATA_ERR(err, STRATA_EINVAL, "compute '%s' (none, ref, gpu, auto)", x->compute);
		if (mi < 0)
			return STRATA_ERR(err, STRATA_EINVAL, "mover '%s' (uring, mmap, pread)", x->mover);
		if (cm < 0)
			return STRATA_ERR(err, STRATA_EINVAL, "copy '%s' (auto, each, batch, sm)", x->copy);
		c.compute = ci;
		c.engine.nvme_mover = mi;
		c.engine.copy = (uint32_t)cm;
		c.engine.use_gpu = x->gpu;
	}
	memset(res, 0, sizeof(*res));
	return strata_replay_run(&c, res, err);
}

int strata_experiment_config_parse_id(const char *id, struct strata_experiment_config *c,
				      struct strata_error *err)
{
	strata_experiment_config_defaults(c);
	char *buf = strdup(id);
	if (!buf)
		return STRATA_ERR(err, STRATA_ENOMEM, "run_id: out of memory");
	int rc = STRATA_OK;
	for (char *save = NULL, *seg = strtok_r(buf, ";", &save); seg && !rc; seg = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(seg, '=');
		if (!eq) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "run_id: '%s' is not key=value", seg);
			break;
		}
		*eq = '\0';
		const char *k = seg, *v = eq + 1;
		char *end = NULL;
#define STR(name, field)                                                   \
	else if (!strcmp(k, name)) {                                       \
		if (strlen(v) >= sizeof(c->field))                         \
			rc = STRATA_ERR(err, STRATA_EINVAL, "run_id: %s too long", name); \
		else                                                       \
			snprintf(c->field, sizeof(c->field), "%s", v);      \
	}
#define NUM(name, field)                                                   \
	else if (!strcmp(k, name)) {                                       \
		c->field = (__typeof__(c->field))strtoull(v, &end, 10);    \
		if (!*v || *end)                                           \
			rc = STRATA_ERR(err, STRATA_EINVAL, "run_id: %s=%s", name, v); \
	}
		if (!strcmp(k, "mode"))
			c->virt = !strcmp(v, "sim");
		STR("model", model)
		STR("trace", trace)
		STR("cost", cost)
		STR("tiers", tiers)
		STR("tier_trace", tier_trace)
		STR("formats", formats)
		STR("trace_sum", trace_sum)
		STR("model_sum", model_sum)
		STR("place", place)
		STR("evict", evict)
		STR("prefetch", prefetch)
		STR("on_miss", on_miss)
		STR("compute", compute)
		STR("mover", mover)
		STR("copy", copy)
		NUM("vram", vram)
		NUM("ram", ram)
		NUM("seed", seed)
		NUM("max_tokens", max_tokens)
		NUM("prefill_chunk", prefill_chunk)
		else if (!strcmp(k, "hints")) c->hints = atoi(v) != 0;
		else if (!strcmp(k, "future")) c->future = atoi(v) != 0;
		else if (!strcmp(k, "gpu")) c->gpu = atoi(v);
		else {
			if (c->n_tags == STRATA_EXP_TAGS || strlen(k) >= sizeof(c->tag_name[0]) ||
			    strlen(v) >= sizeof(c->tag_value[0]))
				rc = STRATA_ERR(err, STRATA_EINVAL, "run_id: tag '%s' too long or too many tags", k);
			else {
				snprintf(c->tag_name[c->n_tags], sizeof(c->tag_name[0]), "%s", k);
				snprintf(c->tag_value[c->n_tags], sizeof(c->tag_value[0]), "%s", v);
				c->n_tags++;
			}
		}
#undef STR
#undef NUM
	}
	free(buf);
	if (rc)
		return rc;
	strata_experiment_config_id(c);
	if (strcmp(c->run_id, id))
		return STRATA_ERR(err, STRATA_EINVAL, "run_id is not canonical (written by another version?): %s", id);
	return STRATA_OK;
}
