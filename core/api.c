/*
 * The C ABI of libstrata.so (core/include/libstrata.h): opaque handles over the store, the
 * engine, the MoE layer kernels and the trace writer, for callers outside Strata.  Errors go
 * to a thread-local struct strata_error that strata_api_last_error() reads.
 *
 * GPU ordering: strata_api_moe_forward enqueues the kernels on the caller's stream and
 * returns.  When every expert is resident in VRAM (nothing ever moves) it returns at once;
 * otherwise the engine may overwrite an extent the kernels are reading (an eviction, a
 * prefetch, a reused scratch slot) from the release on, when the prefetches it lets go
 * start, so before the release the host waits for an event recorded after those kernels.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libstrata.h"
#include "moe.h"
#include "quant.h"
#include "strata/engine.h"
#include "strata/gpu.h"
#include "strata/store.h"
#include "strata/trace.h"
#include "strata/util.h"

#define API __attribute__((visibility("default")))

_Static_assert((int)STRATA_API_ESHAPE == (int)STRATA_ESHAPE && (int)STRATA_API_EINTR == (int)STRATA_EINTR, "status codes");
_Static_assert((int)STRATA_API_FMT_COLD == (int)STRATA_FMT_COLD, "format codes");

static __thread struct strata_error tl_err;

struct strata_api_store {
	struct strata_store *s;
};

struct strata_api_engine {
	struct strata_api_store *store;
	struct strata_engine *eng;
	struct strata_model_spec spec;
	const uint8_t *fmt_table;
	int on_gpu;
	uint64_t all_bytes;           /* extent bytes of every expert: resident in VRAM = nothing moves */
	uint32_t max_tokens, slots;
	/* the acquired set (between acquire and release) */
	int held;
	uint64_t held_token;
	uint32_t held_layer, n_held;
	uint32_t *held_ids;
	/* moe_forward scratch */
	uint32_t *idx_of, *stamp, stamp_cur;
	uint32_t *experts, *a_exp, *a_tok;
	float *a_w;
	const void **ptrs;
	uint8_t *fmts;
	float *gates;  /* per expert of a group: its largest gate weight (precision on miss) */
	struct strata_hint *hints;
	uint32_t max_hints;
	strata_gpu_event *done;       /* after the last layer's kernels */
	int pending;
};

struct strata_api_recorder {
	struct strata_trace_writer *w;
	uint32_t L, E, k, depth, topn, n_max;
	uint8_t *have;                /* per layer: given this step */
	uint32_t n_tok;               /* tokens of this step (set by the first layer) */
	uint16_t *ids, *pred;         /* [n_max][L][k], [n_max][L][depth][topn] */
	float *w_, *pred_w;
	uint64_t count;
};

API uint32_t strata_api_version(void) { return STRATA_API_VERSION; }
API const char *strata_api_last_error(void) { return tl_err.msg; }
API const char *strata_api_status_name(int32_t status)
{
	static const char *const names[] = { "OK", "EINVAL", "EIO", "ENOMEM", "ECORRUPT", "EVERSION", "ENOSPC", "EBUDGET",
					     "EPOLICY", "ESCRIPT", "ENOTFOUND", "EUNSUPPORTED", "EGPU", "ESHAPE", "EINTR" };
	return status <= 0 && -status < (int32_t)(sizeof(names) / sizeof(names[0])) ? names[-status] : "?";
}
API int32_t strata_api_gpu_count(void) { return strata_gpu_count(); }

/* ---- store ------------------------------------------------------------------------------ */

API int32_t strata_api_store_open(const char *dir, strata_api_store **out)
{
	*out = NULL;
	if (!dir)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "store_open: no directory");
	struct strata_api_store *s = calloc(1, sizeof(*s));
	if (!s)
		return STRATA_ERR(&tl_err, STRATA_ENOMEM, "store_open: out of memory");
	int rc = strata_store_open(dir, &s->s, &tl_err);
	if (rc) {
		free(s);
		return rc;
	}
	*out = s;
	return STRATA_OK;
}

API void strata_api_store_close(strata_api_store *s)
{
	if (!s)
		return;
	strata_store_close(s->s);
	free(s);
}

API int64_t strata_api_store_shape(const strata_api_store *s, int32_t key)
{
	const struct strata_model_spec *p = strata_store_spec(s->s);
	switch (key) {
	case STRATA_API_N_LAYERS: return p->n_layers;
	case STRATA_API_FIRST_MOE_LAYER: return p->first_moe_layer;
	case STRATA_API_N_MOE_LAYERS: return p->n_moe_layers;
	case STRATA_API_N_EXPERTS: return p->n_experts;
	case STRATA_API_TOP_K: return p->top_k;
	case STRATA_API_HIDDEN: return p->hidden;
	case STRATA_API_INTER: return p->inter;
	case STRATA_API_N_SHARED: return p->n_shared;
	case STRATA_API_SHARED_INTER: return p->shared_inter;
	default: return -1;
	}
}

static int check_expert(const struct strata_model_spec *p, uint32_t layer, uint32_t expert)
{
	if (layer >= p->n_moe_layers || expert >= p->n_experts)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "expert %u/%u out of range (%u MoE layers x %u experts)",
				  layer, expert, p->n_moe_layers, p->n_experts);
	return STRATA_OK;
}

API int32_t strata_api_store_expert_fmt(const strata_api_store *s, uint32_t moe_layer, uint32_t expert)
{
	int rc = check_expert(strata_store_spec(s->s), moe_layer, expert);
	return rc ? rc : (int32_t)strata_store_expert(s->s, moe_layer, expert)->fmt;
}

API int32_t strata_api_store_dequantize(strata_api_store *s, uint32_t moe_layer, uint32_t expert, float *gate,
					float *up, float *down)
{
	const struct strata_model_spec *p = strata_store_spec(s->s);
	int rc = check_expert(p, moe_layer, expert);
	if (rc)
		return rc;
	const struct strata_extent *ext = strata_store_expert(s->s, moe_layer, expert);
	struct strata_expert_layout lay;
	if (strata_expert_layout((int)ext->fmt, p->hidden, p->inter, &lay))
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "expert %u/%u: no layout for format %u", moe_layer, expert,
				  ext->fmt);
	uint8_t *buf = aligned_alloc(STRATA_EXTENT_ALIGN, ext->bytes);
	if (!buf)
		return STRATA_ERR(&tl_err, STRATA_ENOMEM, "store_dequantize: out of memory");
	rc = strata_store_read_extent(s->s, ext, buf, false, true, &tl_err);
	if (!rc && (strata_dequantize_matrix((int)ext->fmt, buf + lay.gate_off, p->inter, p->hidden, gate) ||
		    strata_dequantize_matrix((int)ext->fmt, buf + lay.up_off, p->inter, p->hidden, up) ||
		    strata_dequantize_matrix((int)ext->fmt, buf + lay.down_off, p->hidden, p->inter, down)))
		rc = STRATA_ERR(&tl_err, STRATA_ECORRUPT, "expert %u/%u: cannot dequantize", moe_layer, expert);
	free(buf);
	return rc;
}

/* ---- engine ----------------------------------------------------------------------------- */

/* "key=value key=value": the engine options of libstrata.h. */
static int parse_options(const char *opts, struct strata_engine_config *c, uint32_t *max_tokens,
			 char on_miss[STRATA_OPT_STR_MAX])
{
	char buf[1024];
	if (!opts || !*opts)
		return STRATA_OK;
	if (strlen(opts) >= sizeof(buf))
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "engine options: longer than %zu bytes", sizeof(buf) - 1);
	strcpy(buf, opts);
	char *save = NULL;
	for (char *kv = strtok_r(buf, " \t\n", &save); kv; kv = strtok_r(NULL, " \t\n", &save)) {
		char *v = strchr(kv, '=');
		if (!v)
			return STRATA_ERR(&tl_err, STRATA_EINVAL, "engine option '%s': expected key=value", kv);
		*v++ = 0;
		char *end;
		unsigned long long n = strtoull(v, &end, 10);
		int num = *v && !*end;
		if (!strcmp(kv, "gpu")) {
			if (!strcmp(v, "auto"))
				c->use_gpu = -1;
			else if (num && n <= 1)
				c->use_gpu = (int)n;
			else
				return STRATA_ERR(&tl_err, STRATA_EINVAL, "engine option gpu=%s: auto, 0 or 1", v);
		} else if (!strcmp(kv, "mover")) {
			if (!strcmp(v, "uring"))
				c->nvme_mover = STRATA_NVME_URING;
			else if (!strcmp(v, "pread"))
				c->nvme_mover = STRATA_NVME_PREAD;
			else if (!strcmp(v, "mmap"))
				c->nvme_mover = STRATA_NVME_MMAP;
			else
				return STRATA_ERR(&tl_err, STRATA_EINVAL, "engine option mover=%s: uring, pread or mmap", v);
		} else if (!strcmp(kv, "on_miss")) {
			if (strlen(v) >= STRATA_OPT_STR_MAX)
				return STRATA_ERR(&tl_err, STRATA_EINVAL, "engine option on_miss: too long");
			strcpy(on_miss, v); /* checked by the engine at open */
			c->on_miss = on_miss;
		} else if (!num) {
			return STRATA_ERR(&tl_err, STRATA_EINVAL, "engine option %s=%s: %s", kv, v,
					  strcmp(kv, "seed") && strcmp(kv, "verify") && strcmp(kv, "queue_depth") &&
							  strcmp(kv, "copy_streams") && strcmp(kv, "scratch_slots") &&
							  strcmp(kv, "max_tokens")
						  ? "unknown option (gpu, seed, verify, mover, on_miss, queue_depth, "
						    "copy_streams, scratch_slots, max_tokens)"
						  : "not a number");
		} else if (!strcmp(kv, "seed")) {
			c->seed = n;
		} else if (!strcmp(kv, "verify") && n <= 1) {
			c->verify = n;
		} else if (!strcmp(kv, "queue_depth") && n >= 1 && n <= 4096) {
			c->queue_depth = (uint32_t)n;
		} else if (!strcmp(kv, "copy_streams") && n <= 64) {
			c->copy_streams = (uint32_t)n;
		} else if (!strcmp(kv, "scratch_slots") && n <= 65536) {
			c->scratch_slots = (uint32_t)n;
		} else if (!strcmp(kv, "max_tokens") && n >= 1 && n <= 1u << 20) {
			*max_tokens = (uint32_t)n;
		} else {
			return STRATA_ERR(&tl_err, STRATA_EINVAL, "engine option %s=%s: unknown or out of range", kv, v);
		}
	}
	return STRATA_OK;
}

API void strata_api_engine_close(strata_api_engine *e)
{
	if (!e)
		return;
	if (e->done) {
		if (e->pending)
			strata_gpu_event_sync(e->done, NULL);
		strata_gpu_event_destroy(e->done);
	}
	if (e->eng)
		strata_engine_close(e->eng);
	free(e->held_ids);
	free(e->idx_of);
	free(e->stamp);
	free(e->experts);
	free(e->a_exp);
	free(e->a_tok);
	free(e->a_w);
	free(e->ptrs);
	free(e->fmts);
	free(e->gates);
	free(e->hints);
	free(e);
}

API int32_t strata_api_engine_open(strata_api_store *s, uint64_t vram_bytes, uint64_t ram_bytes, const char *place,
				   const char *evict, const char *prefetch, const char *options,
				   strata_api_engine **out)
{
	*out = NULL;
	if (!s)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "engine_open: no store");
	struct strata_engine_config c;
	strata_engine_config_defaults(&c);
	c.budget[0] = vram_bytes;
	c.budget[1] = ram_bytes;
	if (place)
		c.place = place;
	if (evict)
		c.evict = evict;
	if (prefetch)
		c.prefetch = prefetch;
	uint32_t max_tokens = 256;
	char on_miss[STRATA_OPT_STR_MAX];
	int rc = parse_options(options, &c, &max_tokens, on_miss);
	if (rc)
		return rc;
	struct strata_api_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return STRATA_ERR(&tl_err, STRATA_ENOMEM, "engine_open: out of memory");
	e->store = s;
	e->spec = *strata_store_spec(s->s);
	e->fmt_table = strata_store_fmt_table(s->s);
	e->max_tokens = max_tokens;
	uint32_t E = e->spec.n_experts, k = e->spec.top_k;
	/* streamed experts take a scratch slot each: by default room for four decode steps'
	 * worth; a larger step is computed in groups of that many experts */
	if (!c.scratch_slots)
		c.scratch_slots = 4 * k < E ? 4 * k : E;
	e->slots = c.scratch_slots;
	size_t na = (size_t)max_tokens * E; /* top_k of a call may exceed the model's: bounded by E */
	e->max_hints = 4096;
	e->held_ids = malloc(E * sizeof(uint32_t));
	e->idx_of = calloc(E, sizeof(uint32_t));
	e->stamp = calloc(E, sizeof(uint32_t));
	e->experts = malloc(E * sizeof(uint32_t));
	e->a_exp = malloc(na * sizeof(uint32_t));
	e->a_tok = malloc(na * sizeof(uint32_t));
	e->a_w = malloc(na * sizeof(float));
	e->ptrs = calloc(E, sizeof(void *));
	e->fmts = calloc(E, 1);
	e->gates = calloc(E, sizeof(float));
	e->hints = malloc(e->max_hints * sizeof(struct strata_hint));
	if (!e->held_ids || !e->idx_of || !e->stamp || !e->experts || !e->a_exp || !e->a_tok || !e->a_w || !e->ptrs ||
	    !e->fmts || !e->gates || !e->hints) {
		strata_api_engine_close(e);
		return STRATA_ERR(&tl_err, STRATA_ENOMEM, "engine_open: out of memory");
	}
	if ((rc = strata_engine_open(s->s, &c, &e->eng, &tl_err))) {
		strata_api_engine_close(e);
		return rc;
	}
	e->on_gpu = strata_engine_on_gpu(e->eng);
	for (uint32_t l = 0; l < e->spec.n_moe_layers; l++)
		for (uint32_t x = 0; x < E; x++)
			e->all_bytes += strata_store_expert(s->s, l, x)->bytes;
	if (e->on_gpu && (rc = strata_gpu_event_create(&e->done, &tl_err))) {
		strata_api_engine_close(e);
		return rc;
	}
	*out = e;
	return STRATA_OK;
}

API int32_t strata_api_engine_on_gpu(const strata_api_engine *e) { return e->on_gpu; }
API const char *strata_api_engine_name(const strata_api_engine *e) { return strata_engine_name(e->eng); }

static int make_hints(strata_api_engine *e, uint32_t layer, const uint32_t *hl, const uint32_t *he,
		      const float *hs, uint32_t n, uint32_t *out_n)
{
	*out_n = 0;
	if (!n)
		return STRATA_OK;
	if (!hl || !he)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "layer %u: %u hints without their arrays", layer, n);
	uint32_t m = 0;
	for (uint32_t i = 0; i < n && m < e->max_hints; i++) {
		if (hl[i] <= layer || hl[i] >= e->spec.n_moe_layers || he[i] >= e->spec.n_experts)
			continue; /* a prediction past the last layer, or for this one: nothing to fetch */
		e->hints[m++] = (struct strata_hint){ .layer = hl[i], .expert = he[i], .score = hs ? hs[i] : 1.0f };
	}
	*out_n = m;
	return STRATA_OK;
}

/* Whether every expert is resident in VRAM (preloaded, or promoted there by the policy): then
 * no acquire moves bytes, evicts or streams, and kernels of earlier layers need no waiting. */
static int all_vram(const strata_api_engine *e)
{
	return strata_engine_stats(e->eng)->used[0] >= e->all_bytes;
}

/* Wait for the kernels of the previous layer before the engine may move bytes over them. */
static int wait_previous(strata_api_engine *e)
{
	if (!e->pending || all_vram(e))
		return STRATA_OK;
	e->pending = 0;
	return strata_gpu_event_sync(e->done, &tl_err);
}

static int acquire(strata_api_engine *e, uint64_t token, uint32_t layer, uint32_t n_tokens, const uint32_t *experts,
		   uint32_t n, uint32_t nh, const void **ptrs)
{
	int rc;
	if (e->held)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "acquire of layer %u while layer %u is still held (release it)",
				  layer, e->held_layer);
	if ((rc = wait_previous(e)) || (rc = strata_engine_begin_step(e->eng, token, layer, n_tokens, experts, n, e->hints, nh,
								    &tl_err)) ||
	    (rc = strata_engine_acquire(e->eng, layer, experts, n, ptrs, &tl_err)))
		return rc;
	e->held = 1;
	e->held_token = token;
	e->held_layer = layer;
	e->n_held = n;
	memcpy(e->held_ids, experts, n * sizeof(uint32_t));
	return STRATA_OK;
}

API int32_t strata_api_engine_acquire(strata_api_engine *e, uint64_t token, uint32_t moe_layer,
				      const uint32_t *experts, uint32_t n, const uint32_t *hint_layer,
				      const uint32_t *hint_expert, const float *hint_score, uint32_t n_hints,
				      const void **ptrs, uint8_t *fmts)
{
	int rc;
	uint32_t nh;
	if (moe_layer >= e->spec.n_moe_layers || n > e->spec.n_experts)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "acquire: layer %u of %u, %u experts of %u", moe_layer,
				  e->spec.n_moe_layers, n, e->spec.n_experts);
	for (uint32_t i = 0; i < n; i++)
		if ((rc = check_expert(&e->spec, moe_layer, experts[i])))
			return rc;
	if ((rc = make_hints(e, moe_layer, hint_layer, hint_expert, hint_score, n_hints, &nh)))
		return rc;
	const void **p = ptrs ? ptrs : e->ptrs;
	if ((rc = acquire(e, token, moe_layer, 0, experts, n, nh, p))) /* the batch is the caller's: 0, unknown */
		return rc;
	if (fmts)
		for (uint32_t i = 0; i < n; i++)
			fmts[i] = (uint8_t)strata_engine_served_fmt(e->eng, moe_layer, experts[i]);
	return STRATA_OK;
}

API int32_t strata_api_engine_release(strata_api_engine *e, uint64_t token, uint32_t moe_layer)
{
	if (!e->held || e->held_layer != moe_layer)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "release of layer %u, which is not held", moe_layer);
	e->held = 0;
	return strata_engine_release(e->eng, token, moe_layer, e->held_ids, e->n_held, &tl_err);
}

/* Acquire experts [g0, g1) of the call's distinct list, compute their assignments, release. */
static int forward_group(strata_api_engine *e, uint64_t token, uint32_t layer, uint32_t g0, uint32_t g1,
			 uint32_t n_tokens, uint32_t na, const float *x, float *y, uint64_t stream, uint32_t nh)
{
	int rc;
	if (strata_engine_reads_gates(e->eng)) {
		/* precision on miss: each expert's largest gate weight over the call's tokens */
		float *g = e->gates;
		for (uint32_t j = g0; j < g1; j++)
			g[j - g0] = 0;
		for (uint32_t i = 0; i < na; i++) {
			uint32_t j = e->a_exp[i];
			if (j >= g0 && j < g1 && e->a_w[i] > g[j - g0])
				g[j - g0] = e->a_w[i];
		}
		if ((rc = strata_engine_set_gates(e->eng, g, g1 - g0, &tl_err)))
			return rc;
	}
	rc = acquire(e, token, layer, n_tokens, e->experts + g0, g1 - g0, nh, e->ptrs);
	if (rc)
		return rc;
	uint32_t *ae = e->a_exp + na, *at = e->a_tok + na;
	float *aw = e->a_w + na;
	uint32_t m = 0;
	for (uint32_t i = 0; i < na; i++) { /* this group's assignments, expert index relative to g0 */
		uint32_t j = e->a_exp[i];
		if (j >= g0 && j < g1) {
			ae[m] = j - g0;
			at[m] = e->a_tok[i];
			aw[m] = e->a_w[i];
			m++;
		}
	}
	for (uint32_t j = g0; j < g1; j++) /* a copy's format where precision on miss read one */
		e->fmts[j - g0] = (uint8_t)strata_engine_served_fmt(e->eng, layer, e->experts[j]);
	struct strata_moe_call c = {
		.hidden = e->spec.hidden, .inter = e->spec.inter, .n_tokens = n_tokens, .x = x, .y = y,
		.n_experts = g1 - g0, .extents = e->ptrs, .fmts = e->fmts, .n_assign = m,
		.assign_expert = ae, .assign_token = at, .assign_weight = aw, .stream = (void *)(uintptr_t)stream,
	};
	uint64_t t0 = strata_now_ns();
	rc = e->on_gpu ? strata_moe_layer_gpu(&c, &tl_err) : strata_moe_layer_ref(&c, &tl_err);
	if (!rc && e->on_gpu) {
		rc = strata_gpu_event_record(e->done, (strata_gpu_stream *)(uintptr_t)stream, &tl_err);
		e->pending = !rc;
	}
	/* release starts the prefetches it lets go (they read the disk while the caller's next
	 * layer computes), and some write VRAM these kernels may still read: unless nothing
	 * can move, wait for the kernels first */
	if (!rc)
		rc = wait_previous(e);
	strata_engine_add_compute(e->eng, (double)(strata_now_ns() - t0));
	e->held = 0;
	int rc2 = strata_engine_release(e->eng, token, layer, e->experts + g0, g1 - g0, rc ? NULL : &tl_err);
	return rc ? rc : rc2;
}

API int32_t strata_api_moe_forward(strata_api_engine *e, uint64_t token, uint32_t moe_layer, uint32_t n_tokens,
				   uint32_t top_k, const int32_t *ids, const float *weights, const float *x, float *y,
				   uint64_t stream, const uint32_t *hint_layer, const uint32_t *hint_expert,
				   const float *hint_score, uint32_t n_hints)
{
	const struct strata_model_spec *p = &e->spec;
	int rc;
	if (moe_layer >= p->n_moe_layers)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "moe_forward: MoE layer %u of %u", moe_layer, p->n_moe_layers);
	if (n_tokens > e->max_tokens || top_k > p->n_experts || !top_k)
		return STRATA_ERR(&tl_err, STRATA_ESHAPE,
				  "moe_forward layer %u: %u tokens x top_k %u (this engine takes at most %u tokens, "
				  "top_k 1..%u; max_tokens is an engine option)",
				  moe_layer, n_tokens, top_k, e->max_tokens, p->n_experts);
	if (!n_tokens)
		return STRATA_OK;
	if (!ids || !weights || !x || !y)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "moe_forward layer %u: NULL ids, weights, x or y", moe_layer);
	if (e->held)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "moe_forward of layer %u while layer %u is still held",
				  moe_layer, e->held_layer);
	uint32_t nh;
	if ((rc = make_hints(e, moe_layer, hint_layer, hint_expert, hint_score, n_hints, &nh)))
		return rc;
	/* distinct experts in order of first appearance, and the assignments */
	if (++e->stamp_cur == 0) {
		memset(e->stamp, 0, p->n_experts * sizeof(uint32_t));
		e->stamp_cur = 1;
	}
	uint32_t n = 0, na = 0;
	for (uint32_t t = 0; t < n_tokens; t++)
		for (uint32_t j = 0; j < top_k; j++) {
			int32_t id = ids[(size_t)t * top_k + j];
			if (id < 0)
				continue;
			if ((uint32_t)id >= p->n_experts)
				return STRATA_ERR(&tl_err, STRATA_EINVAL,
						  "moe_forward layer %u: token %u slot %u routes to expert %d of %u", moe_layer,
						  t, j, id, p->n_experts);
			if (e->stamp[id] != e->stamp_cur) {
				e->stamp[id] = e->stamp_cur;
				e->idx_of[id] = n;
				e->experts[n++] = (uint32_t)id;
			}
			e->a_exp[na] = e->idx_of[id];
			e->a_tok[na] = t;
			e->a_w[na] = weights[(size_t)t * top_k + j];
			na++;
		}
	if (!n)
		return STRATA_OK;
	/* groups of at most `slots` experts: streamed experts each need a scratch slot; the
	 * assignment arrays hold the group's copy after the call's (na <= max_tokens x top_k,
	 * and the arrays hold max_tokens x n_experts) */
	if (na * 2 > (size_t)e->max_tokens * p->n_experts)
		return STRATA_ERR(&tl_err, STRATA_ESHAPE, "moe_forward layer %u: %u assignments exceed the scratch",
				  moe_layer, na);
	uint32_t g = all_vram(e) ? n : e->slots;
	for (uint32_t g0 = 0; g0 < n; g0 += g) {
		uint32_t g1 = g0 + g < n ? g0 + g : n;
		if ((rc = forward_group(e, token, moe_layer, g0, g1, n_tokens, na, x, y, stream, g0 ? 0 : nh))) {
			strata_error_prefix(&tl_err, "moe_forward layer %u", moe_layer);
			return rc;
		}
	}
	return STRATA_OK;
}

#define API_STATS(X) \
	X("accesses", "%" PRIu64, s->accesses) X("hits_vram", "%" PRIu64, s->hits[0]) \
	X("hits_ram", "%" PRIu64, s->hits[1]) X("hits_nvme", "%" PRIu64, s->hits[2]) \
	X("bytes_nvme_ram", "%" PRIu64, s->bytes_nvme_ram) X("bytes_ram_vram", "%" PRIu64, s->bytes_ram_vram) \
	X("bytes_nvme_vram", "%" PRIu64, s->bytes_nvme_vram) X("evictions_vram", "%" PRIu64, s->evictions[0]) \
	X("evictions_ram", "%" PRIu64, s->evictions[1]) X("prefetch_issued", "%" PRIu64, s->prefetch_issued) \
	X("prefetch_used", "%" PRIu64, s->prefetch_used) X("prefetch_wasted", "%" PRIu64, s->prefetch_wasted) \
	X("prefetch_redundant", "%" PRIu64, s->prefetch_redundant) X("prefetch_late", "%" PRIu64, s->prefetch_late) \
	X("prefetch_dropped", "%" PRIu64, s->prefetch_dropped) X("streamed", "%" PRIu64, s->streamed) \
	X("preloaded_vram", "%" PRIu64, s->preloaded[0]) X("preloaded_ram", "%" PRIu64, s->preloaded[1]) \
	X("used_vram", "%" PRIu64, s->used[0]) X("used_ram", "%" PRIu64, s->used[1]) \
	X("stall_ms", "%.4f", s->stall_ns / 1e6) X("io_ms", "%.4f", s->io_ns / 1e6) \
	X("compute_ms", "%.4f", s->compute_ns / 1e6) X("bookkeeping_ms", "%.4f", (double)s->bookkeeping_ns / 1e6) \
	X("nvme_busy_ms", "%.4f", s->link_busy_ns[STRATA_LINK_NVME] / 1e6) \
	X("pcie_busy_ms", "%.4f", s->link_busy_ns[STRATA_LINK_PCIE] / 1e6) X("nvme_reads", "%" PRIu64, s->nvme_reads) \
	X("nvme_read_bytes", "%" PRIu64, s->nvme_read_bytes) X("nvme_qd_ms", "%.4f", s->nvme_qd_ns / 1e6) \
	X("waits", "%" PRIu64, s->waits) \
	X("substituted", "%" PRIu64, s->substituted) X("substitute_bytes", "%" PRIu64, s->substitute_bytes) \
	X("substitute_bytes_saved", "%" PRIu64, s->substitute_bytes_saved) \
	X("compactions_vram", "%" PRIu64, s->compactions[0]) X("compactions_ram", "%" PRIu64, s->compactions[1]) \
	X("compact_bytes_vram", "%" PRIu64, s->compact_bytes[0]) \
	X("compact_bytes_ram", "%" PRIu64, s->compact_bytes[1]) X("compact_ms", "%.4f", s->compact_ns / 1e6)

API int32_t strata_api_engine_stats(const strata_api_engine *e, char *buf, uint32_t len)
{
	const struct strata_engine_stats *s = strata_engine_stats(e->eng);
	char tmp[4096];
	int n = snprintf(tmp, sizeof(tmp), "{\"config\": \"%s\", \"on_gpu\": %d", strata_engine_name(e->eng), e->on_gpu);
#define JX(k, f, v) n += snprintf(tmp + n, sizeof(tmp) - (size_t)n, ", \"" k "\": " f, v);
	API_STATS(JX)
#undef JX
	n += snprintf(tmp + n, sizeof(tmp) - (size_t)n, "}");
	if (buf && len)
		snprintf(buf, len, "%s", tmp);
	return n;
}

/* ---- recorder --------------------------------------------------------------------------- */

static void recorder_free(struct strata_api_recorder *r)
{
	free(r->have);
	free(r->ids);
	free(r->pred);
	free(r->w_);
	free(r->pred_w);
	free(r);
}

API int32_t strata_api_recorder_open(const char *path, uint32_t n_moe_layers, uint32_t n_experts, uint32_t top_k,
				     uint32_t pred_depth, uint32_t pred_topn, const char *model,
				     strata_api_recorder **out)
{
	*out = NULL;
	if (!path || !n_moe_layers || !n_experts || !top_k || top_k > STRATA_TRACE_MAX_TOPK ||
	    pred_depth > STRATA_TRACE_MAX_DEPTH || pred_topn > STRATA_TRACE_MAX_TOPN || !pred_depth != !pred_topn ||
	    n_experts >= STRATA_TRACE_NO_EXPERT)
		return STRATA_ERR(&tl_err, STRATA_EINVAL,
				  "%s: bad trace shape: %u layers, %u experts, top_k %u, predictions %u x %u",
				  path ? path : "(null)", n_moe_layers, n_experts, top_k, pred_depth, pred_topn);
	struct strata_api_recorder *r = calloc(1, sizeof(*r));
	if (!r)
		return STRATA_ERR(&tl_err, STRATA_ENOMEM, "recorder: out of memory");
	r->L = n_moe_layers;
	r->E = n_experts;
	r->k = top_k;
	r->depth = pred_depth;
	r->topn = pred_topn;
	r->n_max = 1;
	r->have = calloc(n_moe_layers, 1);
	struct strata_trace_writer_config c = {
		.path = path, .format = STRATA_TRACE_FMT_AUTO, .n_moe_layers = n_moe_layers, .n_experts = n_experts,
		.top_k = top_k, .flags = STRATA_TRACE_F_WEIGHTS | STRATA_TRACE_F_WEIGHTS_F32 |
					 (pred_depth ? STRATA_TRACE_F_PRED : 0),
		.pred_depth = pred_depth, .pred_topn = pred_topn, .model = model,
	};
	int rc = r->have ? strata_trace_writer_open(&c, &r->w, &tl_err)
			 : STRATA_ERR(&tl_err, STRATA_ENOMEM, "recorder: out of memory");
	if (rc) {
		recorder_free(r);
		return rc;
	}
	*out = r;
	return STRATA_OK;
}

static int recorder_grow(struct strata_api_recorder *r, uint32_t n)
{
	if (n <= r->n_max && r->ids)
		return STRATA_OK;
	uint32_t m = n > r->n_max ? n : r->n_max;
	size_t lk = (size_t)r->L * r->k, lp = (size_t)r->L * r->depth * r->topn;
	uint16_t *ids = realloc(r->ids, m * lk * sizeof(uint16_t));
	if (ids)
		r->ids = ids;
	float *w = ids ? realloc(r->w_, m * lk * sizeof(float)) : NULL;
	if (w)
		r->w_ = w;
	uint16_t *pred = w ? realloc(r->pred, (m * lp + 1) * sizeof(uint16_t)) : NULL;
	if (pred)
		r->pred = pred;
	float *pw = pred ? realloc(r->pred_w, (m * lp + 1) * sizeof(float)) : NULL;
	if (!pw)
		return STRATA_ERR(&tl_err, STRATA_ENOMEM, "recorder: out of memory");
	r->pred_w = pw;
	r->n_max = m;
	return STRATA_OK;
}

API int32_t strata_api_recorder_layer(strata_api_recorder *r, uint32_t moe_layer, uint32_t n_tokens,
				      const int32_t *ids, const float *weights, const int32_t *pred_ids,
				      const float *pred_scores)
{
	if (moe_layer >= r->L || !ids || !n_tokens)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "recorder: layer %u of %u, %u tokens", moe_layer, r->L, n_tokens);
	int started = 0;
	for (uint32_t l = 0; l < r->L; l++)
		started |= r->have[l];
	if (!started)
		r->n_tok = n_tokens;
	else if (n_tokens != r->n_tok)
		return STRATA_ERR(&tl_err, STRATA_ESHAPE, "recorder: layer %u has %u tokens, this step %u", moe_layer,
				  n_tokens, r->n_tok);
	int rc = recorder_grow(r, n_tokens);
	if (rc)
		return rc;
	size_t lk = (size_t)r->L * r->k, dn = (size_t)r->depth * r->topn, lp = r->L * dn;
	for (uint32_t t = 0; t < n_tokens; t++) {
		for (uint32_t j = 0; j < r->k; j++) {
			int32_t id = ids[(size_t)t * r->k + j];
			if (id < 0 || (uint32_t)id >= r->E)
				return STRATA_ERR(&tl_err, STRATA_EINVAL, "recorder: layer %u token %u: expert %d of %u",
						  moe_layer, t, id, r->E);
			r->ids[t * lk + (size_t)moe_layer * r->k + j] = (uint16_t)id;
			r->w_[t * lk + (size_t)moe_layer * r->k + j] = weights ? weights[(size_t)t * r->k + j] : 0.0f;
		}
		for (size_t j = 0; j < dn; j++) {
			int32_t pid = pred_ids ? pred_ids[t * dn + j] : -1;
			if (pid >= (int32_t)r->E)
				return STRATA_ERR(&tl_err, STRATA_EINVAL, "recorder: layer %u token %u: predicted expert %d of %u",
						  moe_layer, t, pid, r->E);
			r->pred[t * lp + moe_layer * dn + j] = pid < 0 ? STRATA_TRACE_NO_EXPERT : (uint16_t)pid;
			r->pred_w[t * lp + moe_layer * dn + j] = pid >= 0 && pred_scores ? pred_scores[t * dn + j] : 0.0f;
		}
	}
	r->have[moe_layer] = 1;
	return STRATA_OK;
}

API int32_t strata_api_recorder_step(strata_api_recorder *r, uint32_t req, uint32_t pos0, int32_t phase)
{
	for (uint32_t l = 0; l < r->L; l++)
		if (!r->have[l])
			return STRATA_ERR(&tl_err, STRATA_EINVAL, "recorder: step ended without MoE layer %u", l);
	if (phase != STRATA_PHASE_PREFILL && phase != STRATA_PHASE_DECODE)
		return STRATA_ERR(&tl_err, STRATA_EINVAL, "recorder: phase %d (0 prefill, 1 decode)", phase);
	size_t lk = (size_t)r->L * r->k, lp = (size_t)r->L * r->depth * r->topn;
	for (uint32_t t = 0; t < r->n_tok; t++) {
		struct strata_trace_token tok = {
			.req = req, .pos = pos0 + t, .phase = phase, .experts = r->ids + t * lk, .weights = r->w_ + t * lk,
			.pred = r->depth ? r->pred + t * lp : NULL, .pred_w = r->depth ? r->pred_w + t * lp : NULL,
		};
		int rc = strata_trace_writer_add(r->w, &tok, &tl_err);
		if (rc)
			return rc;
		r->count++;
	}
	memset(r->have, 0, r->L);
	return STRATA_OK;
}

API uint64_t strata_api_recorder_count(const strata_api_recorder *r) { return r->count; }

API int32_t strata_api_recorder_finish(strata_api_recorder *r, int32_t commit)
{
	if (!r)
		return STRATA_OK;
	int rc = STRATA_OK;
	if (commit)
		rc = strata_trace_writer_finish(r->w, &tl_err);
	else
		strata_trace_writer_abort(r->w);
	recorder_free(r);
	return rc;
}
