/*
 * Routing traces: the binary format (mmap reader, streaming writer), its
 * JSONL twin, replay plans and struct strata_future over them.  Layout in
 * strata/trace.h.  A JSONL trace is parsed into an in-memory copy of the
 * binary record layout so every accessor serves both.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include "quant.h"
#include "strata/trace.h"
#include "strata/json.h"
#include "strata/util.h"
#include "trace_int.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "strata traces are little-endian; this build assumes a little-endian host"
#endif

const char *strata_trace_phase_name(int phase)
{
	return phase == STRATA_PHASE_PREFILL ? "prefill" : phase == STRATA_PHASE_DECODE ? "decode" : "?";
}

/* ---- layout ---------------------------------------------------------- */

struct layout {
	uint32_t exp_off, w_off, p_off, ps_off, bytes;
	uint32_t w_size; /* 2 or 4, 0 without weights */
	uint32_t lk, ldn;
};

#define ALIGN4(x) (((x) + 3u) & ~3u)
#define HEAD_BYTES 12u

static void layout_of(uint32_t L, uint32_t k, uint32_t flags, uint32_t D, uint32_t N, struct layout *o)
{
	memset(o, 0, sizeof(*o));
	o->lk = L * k;
	o->ldn = (flags & STRATA_TRACE_F_PRED) ? L * D * N : 0;
	o->exp_off = HEAD_BYTES;
	uint32_t end = o->exp_off + o->lk * 2;
	if (flags & STRATA_TRACE_F_WEIGHTS) {
		o->w_size = (flags & STRATA_TRACE_F_WEIGHTS_F32) ? 4 : 2;
		o->w_off = ALIGN4(end);
		end = o->w_off + o->lk * o->w_size;
	}
	if (flags & STRATA_TRACE_F_PRED) {
		o->p_off = ALIGN4(end);
		end = o->p_off + o->ldn * 2;
		o->ps_off = ALIGN4(end);
		end = o->ps_off + o->ldn * 2;
	}
	o->bytes = ALIGN4(end);
}

/* On-disk header offsets. */
enum {
	H_MAGIC = 0, H_VERSION = 8, H_HBYTES = 12, H_LAYERS = 16, H_EXPERTS = 20, H_TOPK = 24,
	H_FLAGS = 28, H_DEPTH = 32, H_TOPN = 36, H_RECBYTES = 40, H_NREQ = 44, H_NTOK = 48,
	H_NPRE = 56, H_NDEC = 64, H_MAXPOS = 72, H_NUSED = 76, H_XXH = 80, H_MODEL = 88,
	H_CHECK = 248,
};

static void header_encode(const struct strata_trace_info *in, uint8_t *h)
{
	memset(h, 0, STRATA_TRACE_HEADER_BYTES);
	memcpy(h + H_MAGIC, STRATA_TRACE_MAGIC, 8);
	strata_le_put32(h + H_VERSION, STRATA_TRACE_VERSION);
	strata_le_put32(h + H_HBYTES, STRATA_TRACE_HEADER_BYTES);
	strata_le_put32(h + H_LAYERS, in->n_moe_layers);
	strata_le_put32(h + H_EXPERTS, in->n_experts);
	strata_le_put32(h + H_TOPK, in->top_k);
	strata_le_put32(h + H_FLAGS, in->flags);
	strata_le_put32(h + H_DEPTH, in->pred_depth);
	strata_le_put32(h + H_TOPN, in->pred_topn);
	strata_le_put32(h + H_RECBYTES, in->record_bytes);
	strata_le_put32(h + H_NREQ, in->n_requests);
	strata_le_put64(h + H_NTOK, in->n_tokens);
	strata_le_put64(h + H_NPRE, in->n_prefill);
	strata_le_put64(h + H_NDEC, in->n_decode);
	strata_le_put32(h + H_MAXPOS, in->max_pos);
	strata_le_put32(h + H_NUSED, in->n_used);
	strata_le_put64(h + H_XXH, in->xxh64);
	memcpy(h + H_MODEL, in->model, STRATA_NAME_MAX);
	h[H_MODEL + STRATA_NAME_MAX - 1] = 0;
	strata_le_put64(h + H_CHECK, XXH64(h, H_CHECK, 0));
}

/* ---- reader ---------------------------------------------------------- */

struct strata_trace {
	char *path;
	struct strata_trace_info info;
	struct layout lay;
	const uint8_t *rec;  /* first record */
	void *map;
	size_t map_len;
	uint8_t *owned;      /* JSONL: records in memory */
	int input_slot;      /* strata_input_note */
};

static inline const uint8_t *rec_at(const struct strata_trace *t, uint64_t i)
{
	return t->rec + i * t->lay.bytes;
}

const struct strata_trace_info *strata_trace_info(const struct strata_trace *t) { return &t->info; }
const char *strata_trace_path(const struct strata_trace *t) { return t->path; }
uint32_t strata_trace_req(const struct strata_trace *t, uint64_t i) { return strata_le_get32(rec_at(t, i)); }
uint32_t strata_trace_pos(const struct strata_trace *t, uint64_t i) { return strata_le_get32(rec_at(t, i) + 4); }
int strata_trace_phase(const struct strata_trace *t, uint64_t i) { return rec_at(t, i)[8]; }

const uint16_t *strata_trace_experts(const struct strata_trace *t, uint64_t i, uint32_t layer)
{
	return (const uint16_t *)(const void *)(rec_at(t, i) + t->lay.exp_off) + (size_t)layer * t->info.top_k;
}

void strata_trace_weights(const struct strata_trace *t, uint64_t i, uint32_t layer, float *out)
{
	uint32_t k = t->info.top_k;
	if (!t->lay.w_size) {
		for (uint32_t j = 0; j < k; j++)
			out[j] = 0;
		return;
	}
	const uint8_t *p = rec_at(t, i) + t->lay.w_off + (size_t)layer * k * t->lay.w_size;
	if (t->lay.w_size == 4) {
		memcpy(out, p, k * 4);
	} else {
		const uint16_t *h = (const uint16_t *)(const void *)p;
		for (uint32_t j = 0; j < k; j++)
			out[j] = strata_f16_to_f32(h[j]);
	}
}

uint32_t strata_trace_hints(const struct strata_trace *t, uint64_t i, uint32_t layer,
			    struct strata_hint *out, uint32_t max)
{
	if (!t->lay.ldn)
		return 0;
	uint32_t D = t->info.pred_depth, N = t->info.pred_topn, n = 0;
	const uint8_t *r = rec_at(t, i);
	const uint16_t *ids = (const uint16_t *)(const void *)(r + t->lay.p_off) + (size_t)layer * D * N;
	const uint16_t *sc = (const uint16_t *)(const void *)(r + t->lay.ps_off) + (size_t)layer * D * N;
	for (uint32_t d = 0; d < D; d++)
		for (uint32_t j = 0; j < N; j++) {
			uint16_t e = ids[d * N + j];
			if (e == STRATA_TRACE_NO_EXPERT || layer + d + 1 >= t->info.n_moe_layers)
				continue;
			if (n == max)
				return n;
			out[n].layer = layer + d + 1;
			out[n].expert = e;
			out[n].score = strata_f16_to_f32(sc[d * N + j]);
			n++;
		}
	return n;
}

size_t strata_trace_scratch_floats(const struct strata_trace *t)
{
	return (size_t)t->lay.lk + t->lay.ldn;
}

void strata_trace_read_one(const struct strata_trace *t, uint64_t i, struct strata_trace_token *tok,
			   float *scratch)
{
	const uint8_t *r = rec_at(t, i);
	tok->req = strata_le_get32(r);
	tok->pos = strata_le_get32(r + 4);
	tok->phase = r[8];
	tok->experts = (const uint16_t *)(const void *)(r + t->lay.exp_off);
	tok->weights = NULL;
	tok->pred = NULL;
	tok->pred_w = NULL;
	if (t->lay.w_size) {
		for (uint32_t l = 0; l < t->info.n_moe_layers; l++)
			strata_trace_weights(t, i, l, scratch + (size_t)l * t->info.top_k);
		tok->weights = scratch;
	}
	if (t->lay.ldn) {
		float *pw = scratch + t->lay.lk;
		const uint16_t *sc = (const uint16_t *)(const void *)(r + t->lay.ps_off);
		for (uint32_t j = 0; j < t->lay.ldn; j++)
			pw[j] = strata_f16_to_f32(sc[j]);
		tok->pred = (const uint16_t *)(const void *)(r + t->lay.p_off);
		tok->pred_w = pw;
	}
}

int strata_trace_check_model(const struct strata_trace *t, const struct strata_model_spec *spec,
			     struct strata_error *err)
{
	const struct strata_trace_info *in = &t->info;
	if (in->n_moe_layers != spec->n_moe_layers || in->n_experts != spec->n_experts ||
	    in->top_k > spec->top_k)
		return STRATA_ERR(err, STRATA_ESHAPE,
				  "%s: trace shape (%u MoE layers, %u experts, top-%u) does not match model %s "
				  "(%u MoE layers, %u experts, top-%u)",
				  t->path, in->n_moe_layers, in->n_experts, in->top_k, spec->name,
				  spec->n_moe_layers, spec->n_experts, spec->top_k);
	return STRATA_OK;
}

static int shape_check(const char *path, const struct strata_trace_info *in, struct strata_error *err)
{
	if (!in->n_moe_layers || !in->n_experts || !in->top_k)
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: empty model shape (layers %u, experts %u, top_k %u)",
				  path, in->n_moe_layers, in->n_experts, in->top_k);
	if (in->n_moe_layers > 65535 || in->n_experts >= STRATA_TRACE_NO_EXPERT || in->top_k > in->n_experts ||
	    in->top_k > STRATA_TRACE_MAX_TOPK)
		return STRATA_ERR(err, STRATA_ECORRUPT,
				  "%s: bad model shape (layers %u, experts %u, top_k %u; top_k <= experts, <= %d)",
				  path, in->n_moe_layers, in->n_experts, in->top_k, STRATA_TRACE_MAX_TOPK);
	if (in->flags & ~(uint32_t)(STRATA_TRACE_F_WEIGHTS | STRATA_TRACE_F_WEIGHTS_F32 | STRATA_TRACE_F_PRED))
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: unknown flags 0x%x", path, in->flags);
	if (in->flags & STRATA_TRACE_F_PRED) {
		if (!in->pred_depth || in->pred_depth > STRATA_TRACE_MAX_DEPTH || !in->pred_topn ||
		    in->pred_topn > STRATA_TRACE_MAX_TOPN)
			return STRATA_ERR(err, STRATA_ECORRUPT, "%s: bad prediction shape (depth %u, topn %u)",
					  path, in->pred_depth, in->pred_topn);
	} else if (in->pred_depth || in->pred_topn) {
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: prediction shape without predictions", path);
	}
	return STRATA_OK;
}

/* Every record: phase, expert ids in range and distinct, prediction ids in range. */
/* Why a router (gate) weight cannot be stored, or NULL: weights are finite,
 * non-negative and, stored as f16, at most 65504 (a larger one would become
 * inf); stored values are never clamped or zeroed. */
#define TRACE_WEIGHT_RANGE "0..65504"
static const char *weight_bad(float v)
{
	if (isnan(v))
		return "not a number";
	if (isinf(v))
		return "infinite";
	if (v < 0 || signbit(v))
		return "negative";
	if (v > 65504.0f)
		return "too large for f16";
	return NULL;
}

static int validate_records(const struct strata_trace *t, struct strata_error *err)
{
	const struct strata_trace_info *in = &t->info;
	uint32_t L = in->n_moe_layers, k = in->top_k, E = in->n_experts;
	/* seen[e] == stamp: e already listed in this (record, layer); a stamp per
	 * list instead of comparing each id with the ones before it */
	uint32_t *seen = calloc(E ? E : 1, sizeof(*seen)), stamp = 0;
	int rc = STRATA_OK;
	if (!seen)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", t->path);
	for (uint64_t i = 0; i < in->n_tokens && !rc; i++) {
		const uint8_t *r = rec_at(t, i);
		if (r[8] > STRATA_PHASE_DECODE) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: record %" PRIu64 ": bad phase %u", t->path, i, r[8]);
			break;
		}
		for (uint32_t l = 0; l < L && !rc; l++) {
			const uint16_t *e = strata_trace_experts(t, i, l);
			if (++stamp == 0) {
				memset(seen, 0, sizeof(*seen) * E);
				stamp = 1;
			}
			for (uint32_t j = 0; j < k; j++) {
				if (e[j] >= E) {
					rc = STRATA_ERR(err, STRATA_ECORRUPT,
							"%s: record %" PRIu64 " (request %u, position %u) layer %u: "
							"expert id %u out of range (model has %u experts)",
							t->path, i, strata_le_get32(r), strata_le_get32(r + 4), l, e[j], E);
					break;
				}
				if (seen[e[j]] == stamp) {
					rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: record %" PRIu64 " layer %u: expert %u listed twice",
							t->path, i, l, e[j]);
					break;
				}
				seen[e[j]] = stamp;
			}
		}
		for (uint32_t l = 0; l < L && !rc && t->lay.w_size; l++) {
			float wv[STRATA_TRACE_MAX_TOPK];
			strata_trace_weights(t, i, l, wv);
			for (uint32_t j = 0; j < k; j++) {
				const char *why = weight_bad(wv[j]);
				if (why) {
					rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: record %" PRIu64 " layer %u: weight %g is %s "
							"(router weights lie in " TRACE_WEIGHT_RANGE ")", t->path, i, l,
							(double)wv[j], why);
					break;
				}
			}
		}
		if (!rc && t->lay.ldn) {
			const uint16_t *p = (const uint16_t *)(const void *)(r + t->lay.p_off);
			for (uint32_t j = 0; j < t->lay.ldn; j++)
				if (p[j] != STRATA_TRACE_NO_EXPERT && p[j] >= E) {
					rc = STRATA_ERR(err, STRATA_ECORRUPT,
							"%s: record %" PRIu64 " layer %u: predicted expert id %u out "
							"of range (model has %u experts)",
							t->path, i, j / (in->pred_depth * in->pred_topn), p[j], E);
					break;
				}
		}
	}
	free(seen);
	return rc;
}

/* Recount statistics from the records (JSONL reader; the writer does the same incrementally). */
struct stats_acc {
	uint32_t *reqs;
	uint32_t n_reqs, cap_reqs; /* open-addressing set, key+1 */
	uint8_t *used;
	uint32_t n_used;
	uint64_t n_pre, n_dec;
	uint32_t max_pos;
	uint32_t E, L;
};

static int acc_init(struct stats_acc *a, uint32_t L, uint32_t E)
{
	memset(a, 0, sizeof(*a));
	a->L = L;
	a->E = E;
	a->cap_reqs = 1024;
	a->reqs = calloc(a->cap_reqs, 4);
	a->used = calloc((size_t)L * E, 1);
	return a->reqs && a->used ? 0 : -1;
}

static void acc_free(struct stats_acc *a)
{
	free(a->reqs);
	free(a->used);
}

static int acc_req(struct stats_acc *a, uint32_t req)
{
	if (a->n_reqs * 2 >= a->cap_reqs) {
		uint32_t cap = a->cap_reqs * 2;
		uint32_t *n = calloc(cap, 4);
		if (!n)
			return -1;
		for (uint32_t i = 0; i < a->cap_reqs; i++)
			if (a->reqs[i]) {
				uint32_t h = (a->reqs[i] * 2654435761u) & (cap - 1);
				while (n[h])
					h = (h + 1) & (cap - 1);
				n[h] = a->reqs[i];
			}
		free(a->reqs);
		a->reqs = n;
		a->cap_reqs = cap;
	}
	uint32_t key = req + 1, h = (key * 2654435761u) & (a->cap_reqs - 1);
	while (a->reqs[h]) {
		if (a->reqs[h] == key)
			return 0;
		h = (h + 1) & (a->cap_reqs - 1);
	}
	a->reqs[h] = key;
	a->n_reqs++;
	return 0;
}

static int acc_token(struct stats_acc *a, uint32_t req, uint32_t pos, int phase, const uint16_t *experts,
		     uint32_t k)
{
	if (acc_req(a, req))
		return -1;
	if (phase == STRATA_PHASE_PREFILL)
		a->n_pre++;
	else
		a->n_dec++;
	if (pos > a->max_pos)
		a->max_pos = pos;
	for (uint32_t l = 0; l < a->L; l++)
		for (uint32_t j = 0; j < k; j++) {
			uint16_t e = experts[l * k + j];
			if (e < a->E && !a->used[(size_t)l * a->E + e]) {
				a->used[(size_t)l * a->E + e] = 1;
				a->n_used++;
			}
		}
	return 0;
}

static int open_jsonl(struct strata_trace *t, FILE *f, struct strata_error *err);

int strata_trace_open(const char *path, struct strata_trace **out, struct strata_error *err)
{
	*out = NULL;
	struct strata_trace *t = calloc(1, sizeof(*t));
	if (!t || !(t->path = strdup(path))) {
		free(t);
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
	}
	t->input_slot = -1;
	int rc = STRATA_OK;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		rc = strata_error_set(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, errno, __FILE__,
				      __LINE__, "%s: cannot open trace", path);
		goto fail;
	}
	struct stat st;
	if (fstat(fd, &st)) {
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: stat", path);
		close(fd);
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = STRATA_ERR(err, STRATA_EINVAL, "%s: not a regular file (a %s): a trace must be a file", path,
				S_ISDIR(st.st_mode) ? "directory" : S_ISFIFO(st.st_mode) ? "FIFO" : "device or socket");
		close(fd);
		goto fail;
	}
	fcntl(fd, F_SETFL, 0); /* O_NONBLOCK only kept open() off a FIFO */
	t->input_slot = strata_input_note(path);
	char magic[8] = { 0 };
	ssize_t got = pread(fd, magic, 8, 0);
	if (got == 8 && !memcmp(magic, STRATA_TRACE_MAGIC, 8)) {
		size_t len = (size_t)st.st_size;
		if (len < STRATA_TRACE_HEADER_BYTES) {
			close(fd);
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: truncated header (%zu of %d bytes)", path, len,
					STRATA_TRACE_HEADER_BYTES);
			goto fail;
		}
		/* Read into private memory, not mmap: what was validated is what
		 * the run uses, even if the file is replaced, rewritten or cut
		 * short meanwhile (a shared mapping would change under the run
		 * or fault with SIGBUS). */
		t->map = malloc(len);
		if (!t->map) {
			close(fd);
			rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: no memory to hold the trace (%zu bytes)", path, len);
			goto fail;
		}
		size_t done = 0;
		while (done < len) {
			ssize_t n = pread(fd, (uint8_t *)t->map + done, len - done, (off_t)done);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			done += (size_t)n;
		}
		int e = errno;
		close(fd);
		if (done < len) {
			errno = e;
			rc = done == 0 && e ? STRATA_ERRNO(err, STRATA_EIO, "%s: read", path)
				: STRATA_ERR(err, STRATA_ECORRUPT, "%s: the file shrank while being read (%zu of %zu "
					     "bytes): was it being rewritten?", path, done, len);
			goto fail;
		}
		t->map_len = len;
		const uint8_t *h = t->map;
		uint32_t ver = strata_le_get32(h + H_VERSION);
		if (ver != STRATA_TRACE_VERSION) {
			rc = STRATA_ERR(err, STRATA_EVERSION, "%s: trace format version %u (this build reads %d)",
					path, ver, STRATA_TRACE_VERSION);
			goto fail;
		}
		if (strata_le_get64(h + H_CHECK) != XXH64(h, H_CHECK, 0)) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: header checksum mismatch (corrupt header)", path);
			goto fail;
		}
		if (strata_le_get32(h + H_HBYTES) != STRATA_TRACE_HEADER_BYTES) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: header size %u (expected %d)", path,
					strata_le_get32(h + H_HBYTES), STRATA_TRACE_HEADER_BYTES);
			goto fail;
		}
		struct strata_trace_info *in = &t->info;
		in->n_moe_layers = strata_le_get32(h + H_LAYERS);
		in->n_experts = strata_le_get32(h + H_EXPERTS);
		in->top_k = strata_le_get32(h + H_TOPK);
		in->flags = strata_le_get32(h + H_FLAGS);
		in->pred_depth = strata_le_get32(h + H_DEPTH);
		in->pred_topn = strata_le_get32(h + H_TOPN);
		in->record_bytes = strata_le_get32(h + H_RECBYTES);
		in->n_requests = strata_le_get32(h + H_NREQ);
		in->n_tokens = strata_le_get64(h + H_NTOK);
		in->n_prefill = strata_le_get64(h + H_NPRE);
		in->n_decode = strata_le_get64(h + H_NDEC);
		in->max_pos = strata_le_get32(h + H_MAXPOS);
		in->n_used = strata_le_get32(h + H_NUSED);
		in->xxh64 = strata_le_get64(h + H_XXH);
		memcpy(in->model, h + H_MODEL, STRATA_NAME_MAX);
		in->model[STRATA_NAME_MAX - 1] = 0;
		if ((rc = shape_check(path, in, err)))
			goto fail;
		layout_of(in->n_moe_layers, in->top_k, in->flags, in->pred_depth, in->pred_topn, &t->lay);
		if (in->record_bytes != t->lay.bytes) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: record size %u does not match the shape (%u)",
					path, in->record_bytes, t->lay.bytes);
			goto fail;
		}
		uint64_t want = STRATA_TRACE_HEADER_BYTES + in->n_tokens * (uint64_t)in->record_bytes;
		if (in->n_tokens > (UINT64_MAX - STRATA_TRACE_HEADER_BYTES) / in->record_bytes || len < want) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT,
					"%s: truncated: %zu bytes, header promises %" PRIu64 " records of %u bytes "
					"(%" PRIu64 " bytes; %" PRIu64 " whole records present)",
					path, len, in->n_tokens, in->record_bytes, want,
					(uint64_t)(len - STRATA_TRACE_HEADER_BYTES) / in->record_bytes);
			goto fail;
		}
		if (len > want) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: %zu trailing bytes after %" PRIu64 " records", path,
					len - (size_t)want, in->n_tokens);
			goto fail;
		}
		if (in->n_prefill + in->n_decode != in->n_tokens) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: header statistics disagree (prefill %" PRIu64
					" + decode %" PRIu64 " != tokens %" PRIu64 ")", path, in->n_prefill,
					in->n_decode, in->n_tokens);
			goto fail;
		}
		t->rec = h + STRATA_TRACE_HEADER_BYTES;
		if ((rc = validate_records(t, err)))
			goto fail;
		if (XXH64(t->rec, in->n_tokens * in->record_bytes, 0) != in->xxh64) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: record checksum mismatch (corrupt records)", path);
			goto fail;
		}
	} else {
		/* not the magic: JSONL unless it looks binary */
		unsigned char probe[256];
		ssize_t pn = pread(fd, probe, sizeof(probe), 0);
		int binary = pn >= 6 && !memcmp(probe, "STRATA", 6);
		for (ssize_t i = 0; i < pn && !binary; i++)
			binary = probe[i] == 0;
		if (binary || pn < 0) {
			close(fd);
			rc = pn < 0 ? STRATA_ERRNO(err, STRATA_EIO, "%s: read", path)
				    : STRATA_ERR(err, STRATA_ECORRUPT, "%s: not a strata trace (bad magic; expected \"%s\" "
						 "or JSONL text)", path, STRATA_TRACE_MAGIC);
			goto fail;
		}
		FILE *f = fdopen(fd, "r");
		if (!f) {
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: fdopen", path);
			close(fd);
			goto fail;
		}
		rc = open_jsonl(t, f, err);
		fclose(f);
		if (rc)
			goto fail;
		if ((rc = validate_records(t, err)))
			goto fail;
	}
	*out = t;
	return STRATA_OK;
fail:
	strata_trace_close(t);
	return rc;
}

void strata_trace_close(struct strata_trace *t)
{
	if (!t)
		return;
	if (t->map)
		free(t->map);
	free(t->owned);
	free(t->path);
	strata_input_forget(t->input_slot);
	free(t);
}

/* ---- JSONL reader ---------------------------------------------------- */

static int json_phase(const struct strata_json *n, int *out)
{
	if (!n) {
		*out = STRATA_PHASE_DECODE;
		return 0;
	}
	if (n->type == STRATA_JSON_STRING) {
		if (!strcmp(n->str, "prefill") || !strcmp(n->str, "p"))
			*out = STRATA_PHASE_PREFILL;
		else if (!strcmp(n->str, "decode") || !strcmp(n->str, "d"))
			*out = STRATA_PHASE_DECODE;
		else
			return -1;
		return 0;
	}
	if (n->type == STRATA_JSON_NUMBER && (n->num == 0 || n->num == 1)) {
		*out = (int)n->num;
		return 0;
	}
	return -1;
}

/* Read a line of any length into *buf; returns length or -1 at EOF. */
static ssize_t read_line(FILE *f, char **buf, size_t *cap)
{
	ssize_t n = getline(buf, cap, f);
	if (n < 0)
		return -1;
	while (n > 0 && ((*buf)[n - 1] == '\n' || (*buf)[n - 1] == '\r'))
		n--;
	return n;
}

#define JERR(...) do { rc = STRATA_ERR(err, STRATA_ECORRUPT, __VA_ARGS__); goto out; } while (0)

static int open_jsonl(struct strata_trace *t, FILE *f, struct strata_error *err)
{
	struct strata_json_doc *doc = NULL;
	char what[PATH_MAX + 32];
	char *line = NULL;
	size_t cap = 0, rcap = 0, nrec = 0;
	uint64_t lineno = 0;
	int rc = STRATA_OK, have_shape = 0, max_id = -1;
	struct strata_trace_info *in = &t->info;
	uint16_t *ids = NULL, *pids = NULL;
	float *w = NULL, *pw = NULL;
	struct stats_acc acc = { 0 };
	XXH64_state_t *xs = NULL;
	ssize_t len;
	while ((len = read_line(f, &line, &cap)) >= 0) {
		lineno++;
		char *s = line;
		while (len && (*s == ' ' || *s == '\t')) {
			s++;
			len--;
		}
		if (!len)
			continue;
		strata_json_free(doc);
		doc = NULL;
		snprintf(what, sizeof(what), "%s:%" PRIu64, t->path, lineno);
		if (strata_json_parse(s, (size_t)len, what, &doc, err)) {
			rc = err->code = STRATA_ECORRUPT;
			goto out;
		}
		const struct strata_json *root = strata_json_root(doc);
		if (root->type != STRATA_JSON_OBJECT)
			JERR("%s:%" PRIu64 ": expected a JSON object", t->path, lineno);
		const struct strata_json *hv = strata_json_get(root, "strata_trace");
		if (hv) {
			if (have_shape || nrec)
				JERR("%s:%" PRIu64 ": header line must come first", t->path, lineno);
			if (hv->type != STRATA_JSON_NUMBER || hv->num != STRATA_TRACE_VERSION) {
				rc = STRATA_ERR(err, STRATA_EVERSION, "%s:%" PRIu64 ": trace format version %g (this build reads %d)",
						t->path, lineno, hv->type == STRATA_JSON_NUMBER ? hv->num : -1.0, STRATA_TRACE_VERSION);
				goto out;
			}
			static const char *keys[] = { "layers", "experts", "top_k", "pred_depth", "pred_topn" };
			uint32_t *dst[] = { &in->n_moe_layers, &in->n_experts, &in->top_k, &in->pred_depth, &in->pred_topn };
			for (int i = 0; i < 5; i++) {
				const struct strata_json *v = strata_json_get(root, keys[i]);
				if (!v && i < 3)
					JERR("%s:%" PRIu64 ": header lacks \"%s\"", t->path, lineno, keys[i]);
				if (v && (v->type != STRATA_JSON_NUMBER || !v->is_int || v->num < 0 || v->num > 1e9))
					JERR("%s:%" PRIu64 ": header \"%s\" must be a non-negative integer", t->path, lineno, keys[i]);
				*dst[i] = v ? (uint32_t)v->num : 0;
			}
			const struct strata_json *m = strata_json_get(root, "model");
			if (m && m->type == STRATA_JSON_STRING)
				snprintf(in->model, sizeof(in->model), "%s", m->str);
			const struct strata_json *wv = strata_json_get(root, "weights");
			if (wv && wv->type == STRATA_JSON_STRING) {
				in->flags |= STRATA_TRACE_F_WEIGHTS;
				if (!strcmp(wv->str, "f32"))
					in->flags |= STRATA_TRACE_F_WEIGHTS_F32;
				else if (strcmp(wv->str, "f16"))
					JERR("%s:%" PRIu64 ": header \"weights\" must be \"f16\" or \"f32\"", t->path, lineno);
			}
			if (in->pred_depth)
				in->flags |= STRATA_TRACE_F_PRED;
			if ((rc = shape_check(t->path, in, err)))
				goto out;
			have_shape = 2; /* experts known */
			continue;
		}
		const struct strata_json *lay = strata_json_get(root, "layers");
		if (!lay || lay->type != STRATA_JSON_ARRAY || !lay->len)
			JERR("%s:%" PRIu64 ": record lacks \"layers\" (a list of expert lists)", t->path, lineno);
		const struct strata_json *wl = strata_json_get(root, "weights");
		const struct strata_json *pl = strata_json_get(root, "pred");
		const struct strata_json *pwl = strata_json_get(root, "pred_w");
		if (!have_shape) {
			/* no header: shape from the first record */
			const struct strata_json *l0 = jchild(lay);
			if (l0->type != STRATA_JSON_ARRAY || !l0->len)
				JERR("%s:%" PRIu64 ": \"layers\" must hold lists of expert ids", t->path, lineno);
			in->n_moe_layers = lay->len;
			in->top_k = l0->len;
			in->n_experts = 65534; /* provisional: fixed at the end */
			if (wl)
				in->flags |= STRATA_TRACE_F_WEIGHTS;
			if (pl && pl->type == STRATA_JSON_ARRAY && pl->len) {
				const struct strata_json *p0 = jchild(pl);
				const struct strata_json *p00 = p0 && p0->type == STRATA_JSON_ARRAY ? jchild(p0) : NULL;
				if (!p00 || p00->type != STRATA_JSON_ARRAY)
					JERR("%s:%" PRIu64 ": \"pred\" must be [layer][depth][n] expert ids", t->path, lineno);
				in->pred_depth = p0->len;
				in->pred_topn = p00->len;
				in->flags |= STRATA_TRACE_F_PRED;
			}
			if ((rc = shape_check(t->path, in, err)))
				goto out;
			have_shape = 1;
		}
		if (!ids) {
			layout_of(in->n_moe_layers, in->top_k, in->flags, in->pred_depth, in->pred_topn, &t->lay);
			in->record_bytes = t->lay.bytes;
			ids = calloc(t->lay.lk, 2);
			w = calloc(t->lay.lk, 4);
			pids = calloc(t->lay.ldn + 1, 2);
			pw = calloc(t->lay.ldn + 1, 4);
			if (!ids || !w || !pids || !pw)
				JERR("%s: out of memory", t->path);
		}
		uint32_t L = in->n_moe_layers, k = in->top_k, D = in->pred_depth, N = in->pred_topn;
		if (lay->len != L)
			JERR("%s:%" PRIu64 ": %u layers, expected %u", t->path, lineno, lay->len, L);
		uint32_t l = 0;
		for (const struct strata_json *c = jchild(lay); c; c = jnext(lay, c), l++) {
			if (c->type != STRATA_JSON_ARRAY || c->len != k)
				JERR("%s:%" PRIu64 ": layer %u: expected a list of %u expert ids", t->path, lineno, l, k);
			uint32_t j = 0;
			for (const struct strata_json *e = jchild(c); e; e = jnext(c, e), j++) {
				if (e->type != STRATA_JSON_NUMBER || !e->is_int || e->num < 0 || e->num >= STRATA_TRACE_NO_EXPERT)
					JERR("%s:%" PRIu64 ": layer %u: bad expert id", t->path, lineno, l);
				if (have_shape == 2 && e->num >= in->n_experts)
					JERR("%s:%" PRIu64 ": layer %u: expert id %.0f out of range (model has %u experts)",
					     t->path, lineno, l, e->num, in->n_experts);
				ids[l * k + j] = (uint16_t)e->num;
				if ((int)e->num > max_id)
					max_id = (int)e->num;
			}
		}
		memset(w, 0, t->lay.lk * 4);
		if (t->lay.w_size) {
			if (!wl || wl->type != STRATA_JSON_ARRAY || wl->len != L)
				JERR("%s:%" PRIu64 ": \"weights\" must be %u lists of %u numbers", t->path, lineno, L, k);
			l = 0;
			for (const struct strata_json *c = jchild(wl); c; c = jnext(wl, c), l++) {
				if (c->type != STRATA_JSON_ARRAY || c->len != k)
					JERR("%s:%" PRIu64 ": weights of layer %u: expected %u numbers", t->path, lineno, l, k);
				uint32_t j = 0;
				for (const struct strata_json *e = jchild(c); e; e = jnext(c, e), j++) {
					if (e->type != STRATA_JSON_NUMBER)
						JERR("%s:%" PRIu64 ": weights of layer %u: not a number", t->path, lineno, l);
					const char *why = weight_bad((float)e->num);
					if (why || (e->num > 0 && (float)e->num == 0))
						JERR("%s:%" PRIu64 ": weights of layer %u: %g is %s (router weights lie in "
						     TRACE_WEIGHT_RANGE ")", t->path, lineno, l, e->num, why ? why : "too small for f32");
					w[l * k + j] = (float)e->num;
				}
			}
		}
		if (t->lay.ldn) {
			for (uint32_t j = 0; j < t->lay.ldn; j++) {
				pids[j] = STRATA_TRACE_NO_EXPERT;
				pw[j] = 0;
			}
			if (pl) {
				if (pl->type != STRATA_JSON_ARRAY || pl->len != L)
					JERR("%s:%" PRIu64 ": \"pred\" must have one entry per layer (%u)", t->path, lineno, L);
				l = 0;
				const struct strata_json *wc = pwl && pwl->type == STRATA_JSON_ARRAY ? jchild(pwl) : NULL;
				for (const struct strata_json *c = jchild(pl); c; c = jnext(pl, c), l++) {
					if (c->type != STRATA_JSON_ARRAY || c->len > D)
						JERR("%s:%" PRIu64 ": pred of layer %u: at most %u depths", t->path, lineno, l, D);
					const struct strata_json *wd = wc && wc->type == STRATA_JSON_ARRAY ? jchild(wc) : NULL;
					uint32_t d = 0;
					for (const struct strata_json *dn = jchild(c); dn; dn = jnext(c, dn), d++) {
						if (dn->type != STRATA_JSON_ARRAY || dn->len > N)
							JERR("%s:%" PRIu64 ": pred of layer %u depth %u: at most %u ids", t->path,
							     lineno, l, d + 1, N);
						const struct strata_json *we = wd && wd->type == STRATA_JSON_ARRAY ? jchild(wd) : NULL;
						uint32_t j = 0;
						for (const struct strata_json *e = jchild(dn); e; e = jnext(dn, e), j++) {
							if (e->type != STRATA_JSON_NUMBER || !e->is_int || e->num < 0 ||
							    e->num >= STRATA_TRACE_NO_EXPERT)
								JERR("%s:%" PRIu64 ": pred of layer %u: bad expert id", t->path,
								     lineno, l);
							size_t at = ((size_t)l * D + d) * N + j;
							pids[at] = (uint16_t)e->num;
							if ((int)e->num > max_id)
								max_id = (int)e->num;
							if (we) {
								pw[at] = we->type == STRATA_JSON_NUMBER ? (float)we->num : 0;
								we = jnext(wd, we);
							}
						}
						if (wd)
							wd = jnext(wc, wd);
					}
					if (wc)
						wc = jnext(pwl, wc);
				}
			}
		}
		const struct strata_json *rq = strata_json_get(root, "req"), *ps = strata_json_get(root, "pos");
		int phase;
		if (json_phase(strata_json_get(root, "phase"), &phase))
			JERR("%s:%" PRIu64 ": \"phase\" must be \"prefill\" or \"decode\"", t->path, lineno);
		if ((rq && (rq->type != STRATA_JSON_NUMBER || !rq->is_int || rq->num < 0 || rq->num > UINT32_MAX)) ||
		    (ps && (ps->type != STRATA_JSON_NUMBER || !ps->is_int || ps->num < 0 || ps->num > UINT32_MAX)))
			JERR("%s:%" PRIu64 ": \"req\" and \"pos\" must be non-negative integers", t->path, lineno);
		if ((nrec + 1) * t->lay.bytes > rcap) {
			size_t ncap = rcap ? rcap * 2 : (size_t)t->lay.bytes * 1024;
			uint8_t *nb = realloc(t->owned, ncap);
			if (!nb)
				JERR("%s: out of memory", t->path);
			t->owned = nb;
			rcap = ncap;
		}
		uint8_t *r = t->owned + nrec * t->lay.bytes;
		memset(r, 0, t->lay.bytes);
		strata_le_put32(r, rq ? (uint32_t)rq->num : 0);
		strata_le_put32(r + 4, ps ? (uint32_t)ps->num : (uint32_t)nrec);
		r[8] = (uint8_t)phase;
		memcpy(r + t->lay.exp_off, ids, t->lay.lk * 2);
		for (uint32_t j = 0; j < t->lay.lk && t->lay.w_size; j++) {
			if (t->lay.w_size == 4)
				memcpy(r + t->lay.w_off + j * 4, &w[j], 4);
			else {
				uint16_t h = strata_f32_to_f16(w[j]);
				memcpy(r + t->lay.w_off + j * 2, &h, 2);
			}
		}
		for (uint32_t j = 0; j < t->lay.ldn; j++) {
			uint16_t h = strata_f32_to_f16(pw[j]);
			memcpy(r + t->lay.p_off + j * 2, &pids[j], 2);
			memcpy(r + t->lay.ps_off + j * 2, &h, 2);
		}
		nrec++;
	}
	if (ferror(f))
		JERR("%s: read error", t->path);
	if (!have_shape)
		JERR("%s: no trace records (an empty file, or not a trace)", t->path);
	if (have_shape == 1) {
		in->n_experts = (uint32_t)max_id + 1;
		if (in->top_k > in->n_experts)
			in->n_experts = in->top_k;
	}
	if (!ids) {
		layout_of(in->n_moe_layers, in->top_k, in->flags, in->pred_depth, in->pred_topn, &t->lay);
		in->record_bytes = t->lay.bytes;
	}
	t->rec = t->owned;
	in->n_tokens = nrec;
	if (acc_init(&acc, in->n_moe_layers, in->n_experts))
		JERR("%s: out of memory", t->path);
	for (uint64_t i = 0; i < nrec; i++) {
		const uint8_t *r = rec_at(t, i);
		if (acc_token(&acc, strata_le_get32(r), strata_le_get32(r + 4), r[8], (const uint16_t *)(const void *)(r + t->lay.exp_off),
			      in->top_k))
			JERR("%s: out of memory", t->path);
	}
	in->n_requests = acc.n_reqs;
	in->n_prefill = acc.n_pre;
	in->n_decode = acc.n_dec;
	in->max_pos = acc.max_pos;
	in->n_used = acc.n_used;
	in->xxh64 = nrec ? XXH64(t->rec, nrec * t->lay.bytes, 0) : XXH64("", 0, 0);
out:
	(void)xs;
	acc_free(&acc);
	free(ids);
	free(w);
	free(pids);
	free(pw);
	free(line);
	strata_json_free(doc);
	return rc;
}

/* ---- writer ---------------------------------------------------------- */

struct strata_trace_writer {
	char *path, *tmp;
	int format;
	FILE *f;
	struct strata_trace_info info;
	struct layout lay;
	uint8_t *rec;
	XXH64_state_t *xs;
	struct stats_acc acc;
	char *line;
	size_t line_cap;
	struct strata_outlock lock;
	int tmp_slot;                 /* strata_tmp_register of tmp */
};

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

static int wfail_io(struct strata_trace_writer *w, struct strata_error *err, const char *what)
{
	return strata_error_set(err, errno == ENOSPC ? STRATA_ENOSPC : STRATA_EIO, errno, __FILE__, __LINE__,
				"%s: %s", w->tmp, what);
}

static void writer_free(struct strata_trace_writer *w)
{
	if (!w)
		return;
	if (w->f)
		fclose(w->f);
	if (w->xs)
		XXH64_freeState(w->xs);
	acc_free(&w->acc);
	strata_tmp_unregister(w->tmp_slot);
	strata_outlock_release(&w->lock);
	free(w->rec);
	free(w->line);
	free(w->path);
	free(w->tmp);
	free(w);
}

void strata_trace_writer_abort(struct strata_trace_writer *w)
{
	if (!w)
		return;
	if (w->f) {
		fclose(w->f);
		w->f = NULL;
	}
	if (w->tmp)
		unlink(w->tmp);
	writer_free(w);
}

static void jsonl_header(struct strata_trace_writer *w)
{
	const struct strata_trace_info *in = &w->info;
	fprintf(w->f, "{\"strata_trace\":%d,\"layers\":%u,\"experts\":%u,\"top_k\":%u", STRATA_TRACE_VERSION,
		in->n_moe_layers, in->n_experts, in->top_k);
	if (in->model[0]) {
		fputs(",\"model\":", w->f);
		strata_json_write_str(w->f, in->model);
	}
	if (in->flags & STRATA_TRACE_F_WEIGHTS)
		fprintf(w->f, ",\"weights\":\"%s\"", (in->flags & STRATA_TRACE_F_WEIGHTS_F32) ? "f32" : "f16");
	if (in->flags & STRATA_TRACE_F_PRED)
		fprintf(w->f, ",\"pred_depth\":%u,\"pred_topn\":%u", in->pred_depth, in->pred_topn);
	fputs("}\n", w->f);
}

int strata_trace_writer_open(const struct strata_trace_writer_config *cfg,
			     struct strata_trace_writer **out, struct strata_error *err)
{
	*out = NULL;
	struct strata_trace_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", cfg->path);
	w->lock.fd = -1;
	w->tmp_slot = -1;
	int rc;
	struct strata_trace_info *in = &w->info;
	in->n_moe_layers = cfg->n_moe_layers;
	in->n_experts = cfg->n_experts;
	in->top_k = cfg->top_k;
	in->flags = cfg->flags;
	if (in->flags & STRATA_TRACE_F_WEIGHTS_F32)
		in->flags |= STRATA_TRACE_F_WEIGHTS;
	in->pred_depth = (cfg->flags & STRATA_TRACE_F_PRED) ? cfg->pred_depth : 0;
	in->pred_topn = (cfg->flags & STRATA_TRACE_F_PRED) ? cfg->pred_topn : 0;
	if (cfg->model)
		snprintf(in->model, sizeof(in->model), "%s", cfg->model);
	if ((rc = shape_check(cfg->path, in, err))) {
		err->code = rc = STRATA_EINVAL;
		goto fail;
	}
	layout_of(in->n_moe_layers, in->top_k, in->flags, in->pred_depth, in->pred_topn, &w->lay);
	in->record_bytes = w->lay.bytes;
	w->format = cfg->format;
	if (w->format == STRATA_TRACE_FMT_AUTO)
		w->format = ends_with(cfg->path, ".jsonl") || ends_with(cfg->path, ".json") ? STRATA_TRACE_FMT_JSONL
											    : STRATA_TRACE_FMT_BINARY;
	w->path = strdup(cfg->path);
	w->tmp = malloc(strlen(cfg->path) + 5);
	w->rec = calloc(1, w->lay.bytes);
	w->xs = XXH64_createState();
	if (!w->path || !w->tmp || !w->rec || !w->xs || acc_init(&w->acc, in->n_moe_layers, in->n_experts)) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", cfg->path);
		goto fail;
	}
	sprintf(w->tmp, "%s.tmp", cfg->path);
	if ((rc = strata_outlock_take(&w->lock, cfg->path, err))) {
		free(w->tmp);
		w->tmp = NULL; /* another writer's: not ours to remove */
		goto fail;
	}
	XXH64_reset(w->xs, 0);
	w->tmp_slot = strata_tmp_register(w->tmp);
	w->f = fopen(w->tmp, "wb");
	if (!w->f) {
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot create", w->tmp);
		goto fail;
	}
	setvbuf(w->f, NULL, _IOFBF, 1 << 20);
	if (w->format == STRATA_TRACE_FMT_BINARY) {
		uint8_t h[STRATA_TRACE_HEADER_BYTES] = { 0 };
		if (fwrite(h, 1, sizeof(h), w->f) != sizeof(h)) {
			rc = wfail_io(w, err, "write");
			goto fail;
		}
	} else {
		jsonl_header(w);
	}
	*out = w;
	return STRATA_OK;
fail:
	strata_trace_writer_abort(w);
	return rc;
}

uint64_t strata_trace_writer_count(const struct strata_trace_writer *w) { return w->info.n_tokens; }

int strata_trace_content_key(const char *path, uint64_t *key, struct strata_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return STRATA_ERRNO(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, "%s: cannot open trace", path);
	uint8_t h[STRATA_TRACE_HEADER_BYTES];
	ssize_t n = pread(fd, h, sizeof(h), 0);
	if (n == (ssize_t)sizeof(h) && !memcmp(h, STRATA_TRACE_MAGIC, 8)) {
		*key = XXH64(h, sizeof(h), 0);
		close(fd);
		return STRATA_OK;
	}
	XXH64_state_t *xs = XXH64_createState();
	static __thread uint8_t buf[1 << 16];
	int rc = xs ? STRATA_OK : STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	if (xs)
		XXH64_reset(xs, 0);
	for (off_t off = 0; !rc;) {
		ssize_t r = pread(fd, buf, sizeof(buf), off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: read", path);
		if (r <= 0)
			break;
		XXH64_update(xs, buf, (size_t)r);
		off += r;
	}
	if (!rc)
		*key = XXH64_digest(xs);
	XXH64_freeState(xs);
	close(fd);
	return rc;
}

int strata_trace_writer_reserve(struct strata_trace_writer *w, uint64_t n_tokens, struct strata_error *err)
{
	uint64_t per = (uint64_t)w->lay.bytes * (w->format == STRATA_TRACE_FMT_JSONL ? 4 : 1);
	if (n_tokens > (UINT64_MAX - STRATA_TRACE_HEADER_BYTES) / (per ? per : 1))
		return STRATA_ERR(err, STRATA_ENOSPC, "%s: %" PRIu64 " tokens is more than any disk holds", w->path,
				  n_tokens);
	uint64_t need = STRATA_TRACE_HEADER_BYTES + n_tokens * per;
	struct statvfs vfs;
	if (fstatvfs(fileno(w->f), &vfs))
		return STRATA_OK; /* cannot tell: the writes will say */
	uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (avail >= need)
		return STRATA_OK;
	char a[32], b[32];
	return STRATA_ERR(err, STRATA_ENOSPC, "%s: not enough space: %" PRIu64 " tokens need about %s, %s free",
			  w->path, n_tokens, strata_fmt_bytes(need, a, sizeof(a)), strata_fmt_bytes(avail, b, sizeof(b)));
}

/* %.9g: every float reads back as itself (binary -> JSONL -> binary is the
 * identity); the writer has refused non-finite values before. */
static void put_float(FILE *f, float v)
{
	fprintf(f, "%.9g", (double)v);
}

int strata_trace_writer_add(struct strata_trace_writer *w, const struct strata_trace_token *tok,
			    struct strata_error *err)
{
	const struct strata_trace_info *in = &w->info;
	uint32_t L = in->n_moe_layers, k = in->top_k, E = in->n_experts;
	uint64_t i = in->n_tokens;
	if (strata_interrupted)
		return STRATA_ERR(err, STRATA_EINTR, "%s: interrupted after %" PRIu64 " tokens (nothing written)",
				  w->path, i);
	if (tok->phase != STRATA_PHASE_PREFILL && tok->phase != STRATA_PHASE_DECODE)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: token %" PRIu64 ": bad phase %d", w->path, i, tok->phase);
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t j = 0; j < k; j++) {
			uint16_t e = tok->experts[l * k + j];
			if (e >= E)
				return STRATA_ERR(err, STRATA_EINVAL,
						  "%s: token %" PRIu64 " (request %u, position %u) layer %u: expert id %u "
						  "out of range (%u experts)", w->path, i, tok->req, tok->pos, l, e, E);
			for (uint32_t m = 0; m < j; m++)
				if (tok->experts[l * k + m] == e)
					return STRATA_ERR(err, STRATA_EINVAL,
							  "%s: token %" PRIu64 " layer %u: expert %u listed twice",
							  w->path, i, l, e);
		}
	for (uint32_t j = 0; tok->weights && w->lay.w_size && j < L * k; j++) {
		const char *why = weight_bad(tok->weights[j]);
		if (why)
			return STRATA_ERR(err, STRATA_EINVAL, "%s: token %" PRIu64 " (request %u, position %u) layer %u: "
					  "weight %g is %s (router weights lie in " TRACE_WEIGHT_RANGE ")", w->path, i,
					  tok->req, tok->pos, j / k, (double)tok->weights[j], why);
	}
	for (uint32_t j = 0; tok->pred && tok->pred_w && j < w->lay.ldn; j++)
		if (tok->pred[j] != STRATA_TRACE_NO_EXPERT &&
		    (!isfinite(tok->pred_w[j]) || fabsf(tok->pred_w[j]) > 65504.0f))
			return STRATA_ERR(err, STRATA_EINVAL, "%s: token %" PRIu64 ": prediction score %g is not a finite "
					  "f16 value (-65504..65504)", w->path, i, (double)tok->pred_w[j]);
	if (tok->pred)
		for (uint32_t j = 0; j < w->lay.ldn; j++)
			if (tok->pred[j] != STRATA_TRACE_NO_EXPERT && tok->pred[j] >= E)
				return STRATA_ERR(err, STRATA_EINVAL, "%s: token %" PRIu64 ": predicted expert %u out of "
						  "range (%u experts)", w->path, i, tok->pred[j], E);
	if (acc_token(&w->acc, tok->req, tok->pos, tok->phase, tok->experts, k))
		return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", w->path);
	w->info.n_tokens++;
	if (w->format == STRATA_TRACE_FMT_BINARY) {
		uint8_t *r = w->rec;
		memset(r, 0, w->lay.bytes);
		strata_le_put32(r, tok->req);
		strata_le_put32(r + 4, tok->pos);
		r[8] = (uint8_t)tok->phase;
		memcpy(r + w->lay.exp_off, tok->experts, w->lay.lk * 2);
		for (uint32_t j = 0; j < w->lay.lk && w->lay.w_size; j++) {
			float v = tok->weights ? tok->weights[j] : 0;
			if (w->lay.w_size == 4) {
				memcpy(r + w->lay.w_off + j * 4, &v, 4);
			} else {
				uint16_t h = strata_f32_to_f16(v);
				memcpy(r + w->lay.w_off + j * 2, &h, 2);
			}
		}
		for (uint32_t j = 0; j < w->lay.ldn; j++) {
			uint16_t id = tok->pred ? tok->pred[j] : STRATA_TRACE_NO_EXPERT;
			uint16_t h = strata_f32_to_f16(tok->pred && tok->pred_w ? tok->pred_w[j] : 0);
			memcpy(r + w->lay.p_off + j * 2, &id, 2);
			memcpy(r + w->lay.ps_off + j * 2, &h, 2);
		}
		XXH64_update(w->xs, r, w->lay.bytes);
		if (fwrite(r, 1, w->lay.bytes, w->f) != w->lay.bytes)
			return wfail_io(w, err, "write");
		return STRATA_OK;
	}
	FILE *f = w->f;
	fprintf(f, "{\"req\":%u,\"phase\":\"%s\",\"pos\":%u,\"layers\":[", tok->req,
		strata_trace_phase_name(tok->phase), tok->pos);
	for (uint32_t l = 0; l < L; l++) {
		fputs(l ? ",[" : "[", f);
		for (uint32_t j = 0; j < k; j++)
			fprintf(f, j ? ",%u" : "%u", tok->experts[l * k + j]);
		fputc(']', f);
	}
	fputc(']', f);
	if (w->lay.w_size) {
		fputs(",\"weights\":[", f);
		for (uint32_t l = 0; l < L; l++) {
			fputs(l ? ",[" : "[", f);
			for (uint32_t j = 0; j < k; j++) {
				if (j)
					fputc(',', f);
				float v = tok->weights ? tok->weights[l * k + j] : 0;
				if (w->lay.w_size == 2)
					v = strata_f16_to_f32(strata_f32_to_f16(v)); /* what the binary keeps */
				put_float(f, v);
			}
			fputc(']', f);
		}
		fputc(']', f);
	}
	if (w->lay.ldn) {
		uint32_t D = in->pred_depth, N = in->pred_topn;
		for (int pass = 0; pass < 2; pass++) {
			fputs(pass ? ",\"pred_w\":[" : ",\"pred\":[", f);
			for (uint32_t l = 0; l < L; l++) {
				fputs(l ? ",[" : "[", f);
				for (uint32_t d = 0; d < D; d++) {
					fputs(d ? ",[" : "[", f);
					int first = 1;
					for (uint32_t j = 0; j < N; j++) {
						size_t at = ((size_t)l * D + d) * N + j;
						uint16_t id = tok->pred ? tok->pred[at] : STRATA_TRACE_NO_EXPERT;
						if (id == STRATA_TRACE_NO_EXPERT)
							continue;
						if (!first)
							fputc(',', f);
						first = 0;
						if (pass)
							put_float(f, strata_f16_to_f32(strata_f32_to_f16(
									     tok->pred_w ? tok->pred_w[at] : 0)));
						else
							fprintf(f, "%u", id);
					}
					fputc(']', f);
				}
				fputc(']', f);
			}
			fputc(']', f);
		}
	}
	if (fputs("}\n", f) == EOF)
		return wfail_io(w, err, "write");
	return STRATA_OK;
}

int strata_trace_writer_finish(struct strata_trace_writer *w, struct strata_error *err)
{
	int rc = STRATA_OK;
	struct strata_trace_info *in = &w->info;
	in->n_requests = w->acc.n_reqs;
	in->n_prefill = w->acc.n_pre;
	in->n_decode = w->acc.n_dec;
	in->max_pos = w->acc.max_pos;
	in->n_used = w->acc.n_used;
	in->xxh64 = XXH64_digest(w->xs);
	if (w->format == STRATA_TRACE_FMT_BINARY) {
		uint8_t h[STRATA_TRACE_HEADER_BYTES];
		header_encode(in, h);
		if (fflush(w->f) || fseek(w->f, 0, SEEK_SET) || fwrite(h, 1, sizeof(h), w->f) != sizeof(h)) {
			rc = wfail_io(w, err, "write header");
			goto fail;
		}
	}
	if (fflush(w->f) || fsync(fileno(w->f))) {
		rc = wfail_io(w, err, "flush");
		goto fail;
	}
	if (fclose(w->f)) {
		w->f = NULL;
		rc = wfail_io(w, err, "close");
		goto fail;
	}
	w->f = NULL;
	if (rename(w->tmp, w->path)) {
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: rename to %s", w->tmp, w->path);
		goto fail;
	}
	writer_free(w);
	return STRATA_OK;
fail:
	strata_trace_writer_abort(w);
	return rc;
}

/* Predictions drawn from a token's own routing (strata_trace_convert_pred):
 * for layer l and distance d, slot j is layer l+d's j-th routed expert with
 * probability accuracy, else a wrong expert of that layer, uniform; scores
 * as strata trace gen gives them, 1 / (1 + j) x 0.8^(d - 1). */
static void draw_pred(const struct strata_trace_info *in, const struct strata_trace_pred_config *pc,
		      const uint16_t *ids, uint64_t *rng, uint16_t *pred, float *pw)
{
	uint32_t L = in->n_moe_layers, k = in->top_k, E = in->n_experts, D = pc->depth;
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t d = 1; d <= D; d++) {
			float *w;
			uint16_t *p = pred_slots(pred, pw, L, D, k, l, d, &w);
			if (!p)
				continue;
			const uint16_t *truth = ids + (size_t)(l + d) * k;
			for (uint32_t j = 0; j < k; j++) {
				uint32_t e = truth[j];
				bool right = (double)(strata_splitmix64(rng) >> 11) * 0x1p-53 < pc->accuracy;
				bool ok = right && e < E;
				for (uint32_t i = 0; ok && i < j; i++)
					ok = p[i] != e;
				/* a wrong one: a random start, then the first expert of the
				 * layer neither routed nor predicted yet */
				uint32_t e0 = (uint32_t)(strata_splitmix64(rng) % E);
				for (uint32_t r = 0; !ok && r < E; r++) {
					e = (e0 + r) % E;
					ok = true;
					for (uint32_t i = 0; ok && i < k; i++)
						ok = truth[i] != e;
					for (uint32_t i = 0; ok && i < j; i++)
						ok = p[i] != e;
				}
				if (ok) {
					p[j] = (uint16_t)e;
					w[j] = (float)(1.0 / (1.0 + j) * pow(0.8, d - 1));
				}
			}
		}
}

int strata_trace_convert_pred(const struct strata_trace *t, const char *path, int format,
			      const struct strata_trace_pred_config *pc, bool progress, struct strata_error *err)
{
	const struct strata_trace_info *in = &t->info;
	if (pc && (!pc->depth || pc->depth > STRATA_TRACE_MAX_DEPTH || !(pc->accuracy >= 0 && pc->accuracy <= 1)))
		return STRATA_ERR(err, STRATA_EINVAL, "%s: predictions: depth %u (1..%d) and accuracy %g (0..1)", path,
				  pc->depth, STRATA_TRACE_MAX_DEPTH, pc->accuracy);
	struct strata_trace_writer_config c = {
		.path = path, .format = format, .n_moe_layers = in->n_moe_layers, .n_experts = in->n_experts,
		.top_k = in->top_k, .flags = pc ? in->flags | STRATA_TRACE_F_PRED : in->flags,
		.pred_depth = pc ? pc->depth : in->pred_depth, .pred_topn = pc ? in->top_k : in->pred_topn,
		.model = in->model,
	};
	struct strata_trace_writer *w;
	int rc = strata_trace_writer_open(&c, &w, err);
	if (!rc && (rc = strata_trace_writer_reserve(w, in->n_tokens, err)))
		strata_trace_writer_abort(w);
	if (rc)
		return rc;
	size_t np = pc ? (size_t)in->n_moe_layers * pc->depth * in->top_k : 0;
	float *scratch = malloc((strata_trace_scratch_floats(t) + 1) * sizeof(float));
	uint16_t *pred = np ? malloc(np * sizeof(uint16_t)) : NULL;
	float *pw = np ? malloc(np * sizeof(float)) : NULL;
	if (!scratch || (np && (!pred || !pw))) {
		free(scratch), free(pred), free(pw);
		strata_trace_writer_abort(w);
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	}
	uint64_t rng = pc ? pc->seed : 0;
	struct strata_progress pg;
	if (progress)
		strata_progress_start(&pg, "trace convert", in->n_tokens, "tokens");
	for (uint64_t i = 0; i < in->n_tokens && !rc; i++) {
		struct strata_trace_token tok;
		strata_trace_read_one(t, i, &tok, scratch);
		if (pc) {
			draw_pred(in, pc, tok.experts, &rng, pred, pw);
			tok.pred = pred;
			tok.pred_w = pw;
		}
		if ((rc = strata_trace_writer_add(w, &tok, err)))
			strata_trace_writer_abort(w);
		else if (progress)
			strata_progress_update(&pg, i + 1);
	}
	free(scratch), free(pred), free(pw);
	if (!rc)
		rc = strata_trace_writer_finish(w, err);
	if (progress)
		strata_progress_finish(&pg);
	return rc;
}

int strata_trace_convert(const struct strata_trace *t, const char *path, int format, bool progress,
			 struct strata_error *err)
{
	return strata_trace_convert_pred(t, path, format, NULL, progress, err);
}

/* ---- plans and the future -------------------------------------------- */

void strata_trace_plan_free(struct strata_trace_plan *p)
{
	free(p->step_first);
	free(p->off);
	free(p->ids);
	memset(p, 0, sizeof(*p));
}

int strata_trace_plan_build(const struct strata_trace *t, uint32_t prefill_chunk, uint64_t max_tokens,
			    struct strata_trace_plan *p, struct strata_error *err)
{
	memset(p, 0, sizeof(*p));
	const struct strata_trace_info *in = &t->info;
	uint64_t n = in->n_tokens;
	if (max_tokens && max_tokens < n)
		n = max_tokens;
	uint32_t L = in->n_moe_layers, k = in->top_k, E = in->n_experts;
	p->n_layers = L;
	/* steps */
	p->step_first = malloc((n + 1) * sizeof(uint64_t));
	if (!p->step_first)
		goto oom;
	uint64_t s = 0;
	for (uint64_t i = 0; i < n;) {
		p->step_first[s++] = i;
		uint64_t j = i + 1;
		if (strata_trace_phase(t, i) == STRATA_PHASE_PREFILL) {
			p->n_prefill_steps++;
			uint32_t req = strata_trace_req(t, i);
			while (j < n && strata_trace_phase(t, j) == STRATA_PHASE_PREFILL && strata_trace_req(t, j) == req &&
			       (!prefill_chunk || j - i < prefill_chunk))
				j++;
		}
		i = j;
	}
	p->step_first[s] = n;
	p->n_steps = s;
	p->off = strata_big_alloc((s * L + 1) * sizeof(uint64_t));
	size_t cap = n * (size_t)L * k + 1;
	p->ids = strata_big_alloc(cap * sizeof(uint16_t));
	uint32_t *stamp = calloc(E, sizeof(uint32_t));
	if (!p->off || !p->ids || !stamp) {
		free(stamp);
		goto oom;
	}
	uint64_t a = 0;
	uint32_t cur = 0;
	for (uint64_t st = 0; st < s; st++)
		for (uint32_t l = 0; l < L; l++) {
			p->off[st * L + l] = a;
			if (++cur == 0) { /* stamp wrapped: reset */
				memset(stamp, 0, E * sizeof(uint32_t));
				cur = 1;
			}
			for (uint64_t i = p->step_first[st]; i < p->step_first[st + 1]; i++) {
				const uint16_t *e = strata_trace_experts(t, i, l);
				for (uint32_t j = 0; j < k; j++)
					if (stamp[e[j]] != cur) {
						stamp[e[j]] = cur;
						p->ids[a++] = e[j];
					}
			}
		}
	p->off[s * L] = a;
	p->n_accesses = a;
	free(stamp);
	return STRATA_OK;
oom:
	strata_trace_plan_free(p);
	return STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory building the replay plan", t->path);
}

struct fcur {
	uint32_t cur, end; /* [cur, end) of this eid's positions not yet passed */
	uint32_t first;    /* start[eid], here so that a lookup reads one line */
};

/* Per access, in clock order: its expert and the clock of that expert's next
 * access (UINT32_MAX: none).  The common question, "eid was just accessed at
 * now: when next?", reads one entry of an array walked in order instead of
 * the eid's own position list (a cache miss per access on large traces). */
struct fnext {
	uint32_t eid, next;
};

struct future_priv {
	const struct strata_trace_plan *plan;
	uint32_t n_experts, n_ids;
	uint64_t *start;   /* [n_ids + 1] into pos */
	uint32_t *pos;     /* access clock values per eid, ascending */
	struct fcur *c;    /* [n_ids]; one cache line for the common forward case */
	struct fnext *at;  /* [n_accesses] */
	uint64_t n_at;
};

static uint64_t future_next_use(const struct strata_future *f, uint32_t eid, uint64_t now)
{
	struct future_priv *fp = f->priv;
	if (now < fp->n_at && fp->at[now].eid == eid) /* eid's access at now */
		return fp->at[now].next == UINT32_MAX ? STRATA_NEVER : fp->at[now].next;
	if (now + 1 < fp->n_at && fp->at[now + 1].eid == eid) /* an insert asking from now - 1 */
		return now + 1;
	if (eid >= fp->n_ids)
		return STRATA_NEVER;
	struct fcur *c = &fp->c[eid];
	uint32_t i = c->cur;
	if (i > c->first && fp->pos[i - 1] > now) {
		if (i - 1 == c->first || fp->pos[i - 2] <= now) {
			i--; /* back by one use: the engine asks for now - 1 after now (an insert) */
		} else {
			/* clock went back: binary search for the first pos > now */
			uint32_t a = c->first, b = c->end;
			while (a < b) {
				uint32_t m = a + (b - a) / 2;
				if (fp->pos[m] <= now)
					a = m + 1;
				else
					b = m;
			}
			i = a;
		}
	} else {
		while (i < c->end && fp->pos[i] <= now)
			i++;
	}
	c->cur = i;
	return i < c->end ? fp->pos[i] : STRATA_NEVER;
}

static uint32_t future_routed(const struct strata_future *f, uint64_t token, uint32_t layer, uint32_t *out,
			      uint32_t max)
{
	struct future_priv *fp = f->priv;
	const struct strata_trace_plan *p = fp->plan;
	if (token >= p->n_steps || layer >= p->n_layers)
		return 0;
	uint64_t a = p->off[token * p->n_layers + layer], b = p->off[token * p->n_layers + layer + 1];
	uint32_t n = 0;
	for (uint64_t i = a; i < b && n < max; i++)
		out[n++] = p->ids[i];
	return n;
}

int strata_trace_future_init(struct strata_future *f, const struct strata_trace_plan *p, uint32_t n_experts,
			     struct strata_error *err)
{
	memset(f, 0, sizeof(*f));
	if (p->n_accesses >= UINT32_MAX)
		return STRATA_ERR(err, STRATA_EINVAL, "future: %" PRIu64 " expert accesses, at most %u supported",
				  p->n_accesses, UINT32_MAX - 1);
	struct future_priv *fp = calloc(1, sizeof(*fp));
	if (!fp)
		return STRATA_ERR(err, STRATA_ENOMEM, "future: out of memory");
	fp->plan = p;
	fp->n_experts = n_experts;
	fp->n_ids = p->n_layers * n_experts;
	fp->start = calloc(fp->n_ids + 1, sizeof(uint64_t));
	fp->c = calloc(fp->n_ids, sizeof(struct fcur));
	fp->pos = strata_big_alloc((p->n_accesses + 1) * sizeof(uint32_t));
	fp->at = strata_big_alloc((p->n_accesses + 1) * sizeof(struct fnext));
	fp->n_at = p->n_accesses;
	if (!fp->start || !fp->c || !fp->pos || !fp->at) {
		free(fp->start);
		free(fp->c);
		free(fp->pos);
		free(fp->at);
		free(fp);
		return STRATA_ERR(err, STRATA_ENOMEM, "future: out of memory");
	}
	uint32_t L = p->n_layers;
	for (uint64_t st = 0; st < p->n_steps; st++)
		for (uint32_t l = 0; l < L; l++)
			for (uint64_t a = p->off[st * L + l]; a < p->off[st * L + l + 1]; a++)
				fp->start[l * n_experts + p->ids[a] + 1]++;
	for (uint32_t i = 0; i < fp->n_ids; i++)
		fp->start[i + 1] += fp->start[i];
	for (uint32_t i = 0; i < fp->n_ids; i++)
		fp->c[i].cur = (uint32_t)fp->start[i];
	for (uint64_t st = 0; st < p->n_steps; st++)
		for (uint32_t l = 0; l < L; l++)
			for (uint64_t a = p->off[st * L + l]; a < p->off[st * L + l + 1]; a++) {
				uint32_t eid = l * n_experts + p->ids[a];
				fp->pos[fp->c[eid].cur++] = (uint32_t)a;
			}
	for (uint32_t i = 0; i < fp->n_ids; i++) {
		fp->c[i].cur = fp->c[i].first = (uint32_t)fp->start[i];
		fp->c[i].end = (uint32_t)fp->start[i + 1];
	}
	for (uint64_t st = 0; st < p->n_steps; st++)
		for (uint32_t l = 0; l < L; l++)
			for (uint64_t a = p->off[st * L + l]; a < p->off[st * L + l + 1]; a++)
				fp->at[a].eid = l * n_experts + p->ids[a];
	for (uint32_t i = 0; i < fp->n_ids; i++)
		fp->c[i].cur = UINT32_MAX; /* borrowed: the next access seen walking back */
	for (uint64_t a = p->n_accesses; a-- > 0;) {
		struct fcur *c = &fp->c[fp->at[a].eid];
		fp->at[a].next = c->cur;
		c->cur = (uint32_t)a;
	}
	for (uint32_t i = 0; i < fp->n_ids; i++)
		fp->c[i].cur = fp->c[i].first;
	f->next_use = future_next_use;
	f->routed = future_routed;
	f->n_tokens = p->n_steps;
	f->priv = fp;
	return STRATA_OK;
}

void strata_trace_future_free(struct strata_future *f)
{
	struct future_priv *fp = f->priv;
	if (fp) {
		free(fp->start);
		free(fp->pos);
		free(fp->c);
		free(fp->at);
		free(fp);
	}
	memset(f, 0, sizeof(*f));
}
