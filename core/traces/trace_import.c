/*
 * `strata trace import`: routing logs as people record them -> a trace.
 *
 * Inputs are JSONL (one object per row) or CSV/TSV with a header row.  A row
 * is either one (token, layer) with a flat expert list, or one token with a
 * list of expert lists (one per layer).  Columns are found by a mapping
 * ("token=token_idx,layer=layer,experts=experts,weights=gating_probs,
 * request=problem_id") or by well-known names.  CSV rows are turned into a
 * JSON object (list cells "[1,2]", "1 2", "1;2", "1|2") so one code path
 * reads both.
 *
 * Rows are gathered as cells (request, token, layer), sorted, and written
 * request by request, token by token.  A (token, layer) with no row is a gap:
 * GAPS_DROP removes every token that lacks a row in some layer (for logs whose
 * token index restarts contiguously after a lost row, as in the Mixtral
 * vLLM logs, this cuts each request to the rows every layer has), GAPS_FILL
 * repeats the same layer's routing of the previous token, GAPS_ERROR fails.
 * Each (request, layer) with gaps gets one warning naming how many rows are
 * missing.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "strata/csv.h"
#include "strata/trace.h"
#include "strata/json.h"
#include "strata/util.h"
#include "trace_int.h"

enum { R_REQ, R_TOK, R_LAYER, R_EXPERTS, R_WEIGHTS, R_PHASE, R_POS, R_PRED, R_PRED_W, R_COUNT };

static const char *const role_names[R_COUNT] = {
	"request", "token", "layer", "experts", "weights", "phase", "pos", "pred", "pred_w",
};

static const char *const candidates[R_COUNT][16] = {
	[R_REQ] = { "req", "request", "request_id", "req_id", "rid", "problem_id", "prompt_id", "sample_id", "seq_id",
		    "sequence_id", "conversation_id", "task_id", "example_id", "doc_id", NULL },
	[R_TOK] = { "token_idx", "token_index", "token", "tok", "step", "decode_step", "token_pos", "t", NULL },
	[R_LAYER] = { "layer", "layer_idx", "layer_id", "moe_layer", "layer_index", NULL },
	[R_EXPERTS] = { "experts", "expert_ids", "selected_experts", "topk_ids", "topk_idx", "topk_indices",
			"expert_indices", "expert_idx", "routed_experts", "activated_expert_ids", "activated_experts",
			"layers", "ids", NULL },
	[R_WEIGHTS] = { "weights", "gating_probs", "gate_probs", "topk_weights", "routing_weights",
			"gate_weights", "probs", "scores", "expert_weights", NULL },
	[R_PHASE] = { "phase", "stage", "is_prefill", NULL },
	[R_POS] = { "pos", "position", "position_id", "abs_pos", NULL },
	[R_PRED] = { "pred", "predictions", "lookahead", NULL },
	[R_PRED_W] = { "pred_w", "pred_weights", "pred_scores", NULL },
};

struct cell {
	uint32_t req, tok, layer, pos;
	uint8_t phase, has_pos;
	uint64_t line;
	uint64_t data; /* index of this cell's k ids / weights */
	uint64_t pdata; /* index of D*N pred ids, UINT64_MAX if none */
};

struct request {
	char *name;
	uint32_t file;
	uint32_t next_tok;      /* per-token rows without a token column */
	uint32_t *layer_next;   /* per-layer rows without a token column */
	uint32_t n_layer_next;
};

struct imp {
	const struct strata_trace_import_config *c;
	struct strata_trace_import_result *res;
	struct strata_error *err;
	struct strata_progress *pg; /* over the bytes read, or NULL */
	uint64_t bytes_read;
	const char *file;       /* current input */
	uint32_t file_idx;
	char col[R_COUNT][96];  /* resolved column per role; "" none */
	int disabled[R_COUNT];
	char map_col[R_COUNT][96];
	int resolved;
	int per_token;          /* rows carry all layers */
	uint32_t k, D, N;       /* top_k, pred depth/topn (0 until known) */
	int have_w, have_pred;
	uint32_t min_layer, max_layer;
	int max_id;
	struct cell *cells;
	size_t n_cells, cap_cells;
	uint16_t *ids;
	float *w;
	size_t n_data, cap_data;
	uint16_t *pids;
	float *pw;
	size_t n_pdata, cap_pdata;
	struct request *reqs;
	uint32_t n_reqs, cap_reqs;
	uint32_t *rhash;        /* open addressing: req index + 1 */
	uint32_t rhash_cap;
	uint64_t warnings;
	int hdr_experts;        /* experts from a strata_trace header line */
	size_t w_cap;
	int any_resolved;
	/* experts/weights spread over numbered columns (expert_0, expert_1, ...) */
	char gather[R_COUNT][96];     /* printf pattern with one %u, "" if none */
	uint32_t gather_first[R_COUNT];
	struct strata_json gather_items[2][STRATA_TRACE_MAX_TOPK];
	struct strata_json gather_node[2];
	/* where the row being read came from, for errors naming file:line:column */
	struct {
		int kind;              /* TEXT_LINE (JSONL), TEXT_CSV, TEXT_DOC (one JSON document) */
		const char *text;      /* what the parser read */
		uint64_t line;         /* input line of text[0] */
		size_t col0;           /* input column of text[0], 0-based */
		size_t n_fields;       /* CSV: per field, where its value starts in text, */
		size_t *json_at;       /* its 0-based column in the line, and its header */
		size_t *csv_col;
		char **names;
		char buf[PATH_MAX + 256];
	} src;
	char **ignore;          /* --map COLUMN=-: columns read as absent */
	size_t n_ignore;
	int moe_trace;          /* a headerless llama-moe-trace CSV (see is_moe_trace) */
};

enum { TEXT_LINE = 0, TEXT_CSV = 1, TEXT_DOC = 2 };

#define IERR(code, ...) STRATA_ERR(im->err, code, __VA_ARGS__)

/* "file:line:column" of node n of the row being read ("file:line" without a
 * node); a CSV field also gets its header's name.  Valid until the next call. */
static const char *at(struct imp *im, const struct strata_json *n)
{
	char *b = im->src.buf;
	size_t len = sizeof(im->src.buf);
	if (!n || !im->src.text) {
		snprintf(b, len, "%s:%" PRIu64, im->file, im->src.line);
		return b;
	}
	uint64_t line = im->src.line;
	size_t col = im->src.col0 + n->pos;
	if (im->src.kind == TEXT_DOC) {
		size_t start = 0;
		for (size_t i = 0; i < n->pos; i++)
			if (im->src.text[i] == '\n') {
				line++;
				start = i + 1;
			}
		col = n->pos - start;
	} else if (im->src.kind == TEXT_CSV) {
		size_t f = 0;
		while (f + 1 < im->src.n_fields && im->src.json_at[f + 1] <= n->pos)
			f++;
		if (f < im->src.n_fields) {
			snprintf(b, len, "%s:%" PRIu64 ":%zu (column '%s')", im->file, line, im->src.csv_col[f] + 1,
				 im->src.names[f]);
			return b;
		}
	}
	snprintf(b, len, "%s:%" PRIu64 ":%zu", im->file, line, col + 1);
	return b;
}

static void warnf(struct imp *im, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warnf(struct imp *im, const char *fmt, ...)
{
	uint64_t max = im->c->max_warnings;
	im->warnings++;
	FILE *f = im->c->warn ? im->c->warn : stderr;
	if (im->warnings > max) {
		if (max && im->warnings == max + 1)
			fprintf(f, "warning: more gaps; further warnings suppressed (see the summary)\n");
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	fputs("warning: ", f);
	vfprintf(f, fmt, ap);
	fputc('\n', f);
	va_end(ap);
}

static int parse_map(struct imp *im, const char *map)
{
	if (!map || !*map)
		return 0;
	char *dup = strdup(map), *save = NULL;
	if (!dup)
		return IERR(STRATA_ENOMEM, "out of memory");
	for (char *kv = strtok_r(dup, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq) {
			int rc = IERR(STRATA_EINVAL, "--map: '%s' is not role=column (roles: request, token, layer, "
				      "experts, weights, phase, pos, pred, pred_w)", kv);
			free(dup);
			return rc;
		}
		*eq = 0;
		int r = -1;
		for (int i = 0; i < R_COUNT; i++)
			if (!strcmp(kv, role_names[i]) || (i == R_REQ && !strcmp(kv, "req")) ||
			    (i == R_TOK && !strcmp(kv, "tok")))
				r = i;
		int off = !strcmp(eq + 1, "-") || !strcmp(eq + 1, "none");
		if (off) { /* COLUMN=-: that column is read as absent (a role's name also disables it) */
			char **ig = realloc(im->ignore, (im->n_ignore + 1) * sizeof(char *));
			if (!ig || !(ig[im->n_ignore] = strdup(kv))) {
				if (ig)
					im->ignore = ig;
				free(dup);
				return IERR(STRATA_ENOMEM, "out of memory");
			}
			im->ignore = ig;
			im->n_ignore++;
		}
		if (r < 0 && !off) {
			int rc = IERR(STRATA_EINVAL, "--map: unknown role '%s' (roles: request, token, layer, experts, "
				      "weights, phase, pos, pred, pred_w; COLUMN=- ignores a column)", kv);
			free(dup);
			return rc;
		}
		if (r < 0)
			continue;
		if (off)
			im->disabled[r] = 1;
		else
			snprintf(im->map_col[r], sizeof(im->map_col[r]), "%s", eq + 1);
	}
	free(dup);
	return 0;
}

/* A column name for matching: lowercase, every run of other characters one
 * '_', none at the ends ("Layer ID" -> "layer_id"). */
static void norm_key(const char *in, char *out, size_t len)
{
	size_t o = 0;
	int gap = 0;
	for (; *in && o + 2 < len; in++) {
		unsigned char ch = (unsigned char)*in;
		if (isalnum(ch)) {
			if (gap && o)
				out[o++] = '_';
			out[o++] = (char)tolower(ch);
			gap = 0;
		} else {
			gap = 1;
		}
	}
	out[o] = 0;
}

static int ignored(const struct imp *im, const char *key)
{
	for (size_t i = 0; i < im->n_ignore; i++)
		if (!strcmp(im->ignore[i], key))
			return 1;
	return 0;
}

/* The member of root named `name`, exactly or after norm_key on both sides;
 * columns ignored with --map COLUMN=- are never found. */
static const struct strata_json *find_key(const struct imp *im, const struct strata_json *root, const char *name)
{
	const struct strata_json *n = strata_json_get(root, name);
	if (n && !ignored(im, name))
		return n;
	char want[128], have[128];
	norm_key(name, want, sizeof(want));
	if (!want[0])
		return NULL;
	for (const struct strata_json *c = jchild(root); c; c = jnext(root, c)) {
		if (!c->key || ignored(im, c->key))
			continue;
		norm_key(c->key, have, sizeof(have));
		if (!strcmp(have, want))
			return c;
	}
	return NULL;
}

static const char *const gather_prefixes[R_COUNT][10] = {
	[R_EXPERTS] = { "expert", "experts", "expert_id", "expert_idx", "topk_id", "topk_ids", "topk_idx", "e", NULL },
	[R_WEIGHTS] = { "weight", "weights", "gate_weight", "topk_weight", "topk_weights", "prob", "score", "w", NULL },
};

/* Find numbered columns prefix[_]N (N from 0 or 1) in root; sets im->gather[r]. */
static int find_gather(struct imp *im, const struct strata_json *root, int r, const char *prefix)
{
	static const char *const seps[] = { "_", "", "-", "." };
	for (size_t si = 0; si < sizeof(seps) / sizeof(seps[0]); si++)
		for (uint32_t first = 0; first < 2; first++) {
			char pat[96], name[128];
			snprintf(pat, sizeof(pat), "%s%s%%u", prefix, seps[si]);
			snprintf(name, sizeof(name), pat, first);
			if (strata_json_get(root, name)) {
				memcpy(im->gather[r], pat, sizeof(pat));
				im->gather_first[r] = first;
				return 1;
			}
		}
	return 0;
}

/* The numbered columns of role r in this row as one array node (NULL if none). */
static const struct strata_json *gathered(struct imp *im, const struct strata_json *root, int r)
{
	int slot = r == R_EXPERTS ? 0 : 1;
	struct strata_json *items = im->gather_items[slot];
	uint32_t n = 0;
	for (; n < STRATA_TRACE_MAX_TOPK; n++) {
		char name[128];
		snprintf(name, sizeof(name), im->gather[r], im->gather_first[r] + n);
		const struct strata_json *v = strata_json_get(root, name);
		if (!v || v->type == STRATA_JSON_NULL)
			break;
		items[n] = *v;
	}
	if (!n)
		return NULL;
	struct strata_json *node = &im->gather_node[slot];
	memset(node, 0, sizeof(*node));
	node->type = STRATA_JSON_ARRAY;
	node->len = n;
	node->items = items;
	return node;
}

/* First row of a file: resolve each role to a column. */
static int resolve(struct imp *im, const struct strata_json *root, uint64_t line)
{
	for (int r = 0; r < R_COUNT; r++) {
		im->col[r][0] = 0;
		if (im->disabled[r])
			continue;
		im->gather[r][0] = 0;
		size_t ml = strlen(im->map_col[r]);
		if (ml > 1 && im->map_col[r][ml - 1] == '*' && (r == R_EXPERTS || r == R_WEIGHTS)) {
			char prefix[96];
			memcpy(prefix, im->map_col[r], ml - 1);
			prefix[ml - 1] = 0;
			size_t pl = strlen(prefix);
			/* "expert_*": the separator is part of the prefix */
			if (find_gather(im, root, r, prefix) || (pl && strchr("_-.", prefix[pl - 1]) &&
								 (prefix[pl - 1] = 0, find_gather(im, root, r, prefix))))
				continue;
			return IERR(STRATA_EINVAL, "%s: no numbered columns '%s' (mapped to %s)", at(im, NULL),
				    im->map_col[r], role_names[r]);
		}
		if (im->map_col[r][0]) {
			const struct strata_json *n = find_key(im, root, im->map_col[r]);
			if (!n)
				return IERR(STRATA_EINVAL, "%s: no column '%s' (mapped to %s)", at(im, NULL),
					    im->map_col[r], role_names[r]);
			snprintf(im->col[r], sizeof(im->col[r]), "%s", n->key);
			continue;
		}
		for (int i = 0; candidates[r][i]; i++) {
			const struct strata_json *n = find_key(im, root, candidates[r][i]);
			if (!n)
				continue;
			/* "layers" is the expert column only when it holds lists */
			if (r == R_EXPERTS && !strcmp(candidates[r][i], "layers") && n->type != STRATA_JSON_ARRAY)
				continue;
			if (r == R_LAYER && n->type == STRATA_JSON_ARRAY)
				continue;
			snprintf(im->col[r], sizeof(im->col[r]), "%s", n->key);
			break;
		}
	}
	for (int r = R_EXPERTS; r <= R_WEIGHTS; r++)
		if (!im->col[r][0] && !im->gather[r][0] && !im->disabled[r] && !im->map_col[r][0])
			for (int i = 0; gather_prefixes[r][i] && !find_gather(im, root, r, gather_prefixes[r][i]); i++)
				;
	if (!im->col[R_EXPERTS][0] && im->gather[R_EXPERTS][0]) {
		if (!im->any_resolved)
			im->per_token = 0;
		else if (im->per_token)
			return IERR(STRATA_EINVAL, "%s: rows are per (token, layer) here but per token in "
				    "earlier inputs", at(im, NULL));
		im->any_resolved = 1;
		if (!im->col[R_LAYER][0])
			return IERR(STRATA_EINVAL, "%s: numbered expert columns but no layer column; name it "
				    "with --map layer=COLUMN", at(im, NULL));
		im->resolved = 1;
		return 0;
	}
	if (!im->col[R_EXPERTS][0]) {
		char keys[512] = "";
		for (const struct strata_json *c = jchild(root); c; c = jnext(root, c))
			snprintf(keys + strlen(keys), sizeof(keys) - strlen(keys), "%s%s", keys[0] ? ", " : "", c->key);
		return IERR(STRATA_EINVAL, "%s: no expert column found among [%s]; name it with "
			    "--map experts=COLUMN", at(im, NULL), keys);
	}
	const struct strata_json *e = strata_json_get(root, im->col[R_EXPERTS]);
	const struct strata_json *e0 = e && e->type == STRATA_JSON_ARRAY ? jchild(e) : NULL;
	const struct strata_json *e00 = e0 && e0->type == STRATA_JSON_ARRAY ? jchild(e0) : NULL;
	/* 0: a (token, layer) row; 1: a token, lists per layer; 2: a request,
	 * [token][layer][k] (vLLM's and SGLang's returned routed experts) */
	int nested = !e0 || e0->type != STRATA_JSON_ARRAY ? 0 : e00 && e00->type == STRATA_JSON_ARRAY ? 2 : 1;
	static const char *const row_kind[] = { "(token, layer)", "token", "request ([token][layer][k])" };
	if (im->any_resolved && nested != im->per_token)
		return IERR(STRATA_EINVAL, "%s: rows are per %s here but per %s in earlier inputs",
			    at(im, NULL), row_kind[nested], row_kind[im->per_token]);
	im->per_token = nested;
	im->any_resolved = 1;
	if (!nested && !im->col[R_LAYER][0])
		return IERR(STRATA_EINVAL, "%s: rows hold one expert list but no layer column was found; "
			    "name it with --map layer=COLUMN (or give one list per layer)", at(im, NULL));
	im->resolved = 1;
	return 0;
}

static int get_uint(struct imp *im, const struct strata_json *n, uint64_t line, const char *what, uint64_t max,
		    uint64_t *out)
{
	double v;
	if (n->type == STRATA_JSON_NUMBER && n->num == floor(n->num)) {
		v = n->num;
	} else if (n->type == STRATA_JSON_STRING) {
		char *end;
		errno = 0;
		v = strtod(n->str, &end);
		if (end == n->str || *end || v != floor(v))
			return IERR(STRATA_EINVAL, "%s: %s '%s' is not an integer", at(im, n), what, n->str);
	} else {
		return IERR(STRATA_EINVAL, "%s: %s is not an integer", at(im, n), what);
	}
	if (v < 0 || v > (double)max)
		return IERR(STRATA_EINVAL, "%s: %s %.0f out of range (0..%" PRIu64 ")", at(im, n),
			    what, v, max);
	*out = (uint64_t)v;
	return 0;
}

static uint32_t intern_req(struct imp *im, const char *key)
{
	if (im->n_reqs * 2 >= im->rhash_cap) {
		uint32_t cap = im->rhash_cap ? im->rhash_cap * 2 : 256;
		uint32_t *h = calloc(cap, 4);
		if (!h)
			return UINT32_MAX;
		for (uint32_t i = 0; i < im->n_reqs; i++) {
			uint32_t at = (uint32_t)XXH64(im->reqs[i].name, strlen(im->reqs[i].name), im->reqs[i].file) & (cap - 1);
			while (h[at])
				at = (at + 1) & (cap - 1);
			h[at] = i + 1;
		}
		free(im->rhash);
		im->rhash = h;
		im->rhash_cap = cap;
	}
	uint32_t at = (uint32_t)XXH64(key, strlen(key), im->file_idx) & (im->rhash_cap - 1);
	while (im->rhash[at]) {
		struct request *r = &im->reqs[im->rhash[at] - 1];
		if (r->file == im->file_idx && !strcmp(r->name, key))
			return im->rhash[at] - 1;
		at = (at + 1) & (im->rhash_cap - 1);
	}
	if (im->n_reqs == im->cap_reqs) {
		uint32_t cap = im->cap_reqs ? im->cap_reqs * 2 : 64;
		struct request *n = realloc(im->reqs, cap * sizeof(*n));
		if (!n)
			return UINT32_MAX;
		im->reqs = n;
		im->cap_reqs = cap;
	}
	struct request *r = &im->reqs[im->n_reqs];
	memset(r, 0, sizeof(*r));
	r->name = strdup(key);
	r->file = im->file_idx;
	if (!r->name)
		return UINT32_MAX;
	im->rhash[at] = im->n_reqs + 1;
	return im->n_reqs++;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 1024;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * elem);
	if (!q)
		return -1;
	*p = q;
	*cap = n;
	return 0;
}

/* Expert ids of one (token, layer) list -> im->ids at data. */
static int take_list(struct imp *im, const struct strata_json *lst, uint64_t line,
		     uint32_t layer_shown, uint64_t data)
{
	if (lst->type != STRATA_JSON_ARRAY)
		return IERR(STRATA_EINVAL, "%s: layer %u: experts are not a list", at(im, lst), layer_shown);
	if (!im->k) {
		if (!lst->len || lst->len > STRATA_TRACE_MAX_TOPK)
			return IERR(STRATA_EINVAL, "%s: %u experts per layer (1..%d supported)", at(im, lst),
				    lst->len, STRATA_TRACE_MAX_TOPK);
		im->k = lst->len;
	}
	if (lst->len != im->k)
		return IERR(STRATA_EINVAL, "%s: layer %u: %u experts, earlier rows had %u", at(im, lst),
			    layer_shown, lst->len, im->k);
	uint32_t j = 0;
	for (const struct strata_json *e = jchild(lst); e; e = jnext(lst, e), j++) {
		if (e->type != STRATA_JSON_NUMBER || e->num != floor(e->num) || e->num < 0 || e->num >= STRATA_TRACE_NO_EXPERT)
			return IERR(STRATA_EINVAL, "%s: layer %u: bad expert id (not an integer in 0..65534)",
				    at(im, e), layer_shown);
		uint16_t v = (uint16_t)e->num;
		for (uint32_t m = 0; m < j; m++)
			if (im->ids[data + m] == v)
				return IERR(STRATA_EINVAL, "%s: layer %u: expert %u listed twice", at(im, e),
					    layer_shown, v);
		if (im->c->n_experts && v >= im->c->n_experts)
			return IERR(STRATA_EINVAL, "%s: layer %u: expert id %u out of range (%u experts)",
				    at(im, e), layer_shown, v, im->c->n_experts);
		if ((int)v > im->max_id)
			im->max_id = v;
		im->ids[data + j] = v;
	}
	return 0;
}

static int take_weights(struct imp *im, const struct strata_json *lst, uint64_t line,
			uint32_t layer_shown, uint64_t data)
{
	if (lst->type != STRATA_JSON_ARRAY || lst->len != im->k)
		return IERR(STRATA_EINVAL, "%s: layer %u: weights must be a list of %u numbers", at(im, lst),
			    layer_shown, im->k);
	uint32_t j = 0;
	for (const struct strata_json *e = jchild(lst); e; e = jnext(lst, e), j++) {
		if (e->type != STRATA_JSON_NUMBER)
			return IERR(STRATA_EINVAL, "%s: layer %u: weight is not a number", at(im, e),
				    layer_shown);
		im->w[data + j] = (float)e->num;
	}
	return 0;
}

/* pred of one layer: [depth][n] ids (+ scores) -> pids at pd */
static int take_pred(struct imp *im, const struct strata_json *p, const struct strata_json *pw,
		     uint64_t line, uint32_t layer_shown, uint64_t pd)
{
	if (p->type != STRATA_JSON_ARRAY)
		return IERR(STRATA_EINVAL, "%s: layer %u: pred is not a list of lists", at(im, p),
			    layer_shown);
	if (!im->D) {
		const struct strata_json *p0 = jchild(p);
		if (!p->len || !p0 || p0->type != STRATA_JSON_ARRAY || !p0->len || p->len > STRATA_TRACE_MAX_DEPTH ||
		    p0->len > STRATA_TRACE_MAX_TOPN)
			return IERR(STRATA_EINVAL, "%s: layer %u: pred must be [depth][n] expert ids "
				    "(depth <= %d, n <= %d)", at(im, p), layer_shown, STRATA_TRACE_MAX_DEPTH,
				    STRATA_TRACE_MAX_TOPN);
		im->D = p->len;
		im->N = p0->len;
	}
	for (size_t j = 0; j < (size_t)im->D * im->N; j++) {
		im->pids[pd + j] = STRATA_TRACE_NO_EXPERT;
		im->pw[pd + j] = 0;
	}
	if (p->len > im->D)
		return IERR(STRATA_EINVAL, "%s: layer %u: pred depth %u > %u", at(im, p), layer_shown,
			    p->len, im->D);
	const struct strata_json *wd = pw && pw->type == STRATA_JSON_ARRAY ? jchild(pw) : NULL;
	uint32_t di = 0;
	for (const struct strata_json *dn = jchild(p); dn; dn = jnext(p, dn), di++) {
		if (dn->type != STRATA_JSON_ARRAY || dn->len > im->N)
			return IERR(STRATA_EINVAL, "%s: layer %u: pred depth %u: at most %u ids", at(im, dn),
				    layer_shown, di + 1, im->N);
		const struct strata_json *we = wd && wd->type == STRATA_JSON_ARRAY ? jchild(wd) : NULL;
		uint32_t j = 0;
		for (const struct strata_json *e = jchild(dn); e; e = jnext(dn, e), j++) {
			if (e->type != STRATA_JSON_NUMBER || e->num != floor(e->num) || e->num < 0 || e->num >= STRATA_TRACE_NO_EXPERT)
				return IERR(STRATA_EINVAL, "%s: layer %u: bad predicted expert id", at(im, e),
					    layer_shown);
			im->pids[pd + (size_t)di * im->N + j] = (uint16_t)e->num;
			if ((int)e->num > im->max_id)
				im->max_id = (int)e->num;
			if (we) {
				im->pw[pd + (size_t)di * im->N + j] = we->type == STRATA_JSON_NUMBER ? (float)we->num : 0;
				we = jnext(wd, we);
			}
		}
		if (wd)
			wd = jnext(pw, wd);
	}
	return 0;
}

static int add_cell(struct imp *im, uint32_t req, uint32_t tok, uint32_t layer, const struct strata_json *pos,
		    int phase, uint64_t line, struct cell **out)
{
	if (grow((void **)&im->cells, &im->cap_cells, im->n_cells + 1, sizeof(struct cell)))
		return IERR(STRATA_ENOMEM, "out of memory");
	size_t kk = im->k ? im->k : STRATA_TRACE_MAX_TOPK;
	if (grow((void **)&im->ids, &im->cap_data, im->n_data + kk, 2))
		return IERR(STRATA_ENOMEM, "out of memory");
	if (im->w_cap != im->cap_data) { /* weights follow ids' capacity */
		float *nw = realloc(im->w, im->cap_data * sizeof(float));
		if (!nw)
			return IERR(STRATA_ENOMEM, "out of memory");
		im->w = nw;
		im->w_cap = im->cap_data;
	}
	struct cell *c = &im->cells[im->n_cells++];
	memset(c, 0, sizeof(*c));
	c->req = req;
	c->tok = tok;
	c->layer = layer;
	c->phase = (uint8_t)phase;
	c->line = line;
	c->data = im->n_data;
	c->pdata = UINT64_MAX;
	if (pos) {
		uint64_t v;
		int rc = get_uint(im, pos, line, "position", UINT32_MAX, &v);
		if (rc)
			return rc;
		c->pos = (uint32_t)v;
		c->has_pos = 1;
	}
	if (layer < im->min_layer)
		im->min_layer = layer;
	if (layer > im->max_layer)
		im->max_layer = layer;
	*out = c;
	return 0;
}

static int reserve_pred(struct imp *im, struct cell *c)
{
	size_t dn = (size_t)STRATA_TRACE_MAX_DEPTH * STRATA_TRACE_MAX_TOPN;
	if (im->D)
		dn = (size_t)im->D * im->N;
	size_t cap = im->cap_pdata;
	if (grow((void **)&im->pids, &im->cap_pdata, im->n_pdata + dn, 2))
		return IERR(STRATA_ENOMEM, "out of memory");
	if (im->cap_pdata != cap) {
		float *n = realloc(im->pw, im->cap_pdata * sizeof(float));
		if (!n)
			return IERR(STRATA_ENOMEM, "out of memory");
		im->pw = n;
	}
	c->pdata = im->n_pdata;
	return 0;
}

static int phase_of(struct imp *im, const struct strata_json *n, uint64_t line, int *out)
{
	*out = im->c->default_phase;
	if (!n || n->type == STRATA_JSON_NULL)
		return 0;
	if (n->type == STRATA_JSON_BOOL) {
		*out = n->boolean ? STRATA_PHASE_PREFILL : STRATA_PHASE_DECODE; /* is_prefill */
		return 0;
	}
	if (n->type == STRATA_JSON_STRING) {
		if (!strcasecmp(n->str, "prefill") || !strcasecmp(n->str, "p") || !strcasecmp(n->str, "prompt") ||
		    !strcasecmp(n->str, "true"))
			*out = STRATA_PHASE_PREFILL;
		else if (!strcasecmp(n->str, "decode") || !strcasecmp(n->str, "d") || !strcasecmp(n->str, "gen") ||
			 !strcasecmp(n->str, "generate") || !strcasecmp(n->str, "false"))
			*out = STRATA_PHASE_DECODE;
		else
			return IERR(STRATA_EINVAL, "%s: phase '%s' (expected prefill or decode)", at(im, n),
				    n->str);
		return 0;
	}
	if (n->type == STRATA_JSON_NUMBER && (n->num == 0 || n->num == 1)) {
		/* is_prefill-style 0/1 when the column is named so; else 0 = prefill */
		int is_flag = !strcmp(im->col[R_PHASE], "is_prefill");
		*out = is_flag ? (n->num == 1 ? STRATA_PHASE_PREFILL : STRATA_PHASE_DECODE) : (int)n->num;
		return 0;
	}
	return IERR(STRATA_EINVAL, "%s: bad phase value", at(im, n));
}

static const char *const prompt_len_names[] = { "num_prompt_tokens", "prompt_len", "prompt_length",
						 "n_prompt_tokens", "prompt_tokens", "prompt_token_ids", NULL };

/* A request's routed experts as vLLM (RequestOutput routed_experts) and
 * SGLang (return_routed_experts) give them: [token][layer][k] over the prompt
 * and the generated tokens.  The first prompt-length tokens (a field named
 * in prompt_len_names: a count or the prompt's token ids) are prefill.  A
 * layer whose ids are all zero for every token is a dense layer's
 * placeholder and is left out (the MoE layers are then compacted). */
static int import_request_row(struct imp *im, const struct strata_json *root, const struct strata_json *toks,
			      struct request *rq, uint32_t req, int phase, uint64_t line)
{
	uint64_t prompt = 0;
	for (int i = 0; prompt_len_names[i]; i++) {
		const struct strata_json *pl = find_key(im, root, prompt_len_names[i]);
		if (pl && pl->type == STRATA_JSON_ARRAY) {
			prompt = pl->len;
			break;
		}
		if (pl) {
			int rc = get_uint(im, pl, line, "prompt length", UINT32_MAX, &prompt);
			if (rc)
				return rc;
			break;
		}
	}
	const struct strata_json *t0 = jchild(toks);
	uint32_t L = t0->len;
	uint8_t *moe = calloc(L ? L : 1, 1);
	if (!moe)
		return IERR(STRATA_ENOMEM, "out of memory");
	int rc = 0;
	for (const struct strata_json *t = t0; t && !rc; t = jnext(toks, t)) {
		if (t->type != STRATA_JSON_ARRAY || t->len != L) {
			rc = IERR(STRATA_EINVAL, "%s: a token must list %u layers of expert ids", at(im, t), L);
			break;
		}
		uint32_t l = 0;
		for (const struct strata_json *x = jchild(t); x; x = jnext(t, x), l++)
			for (const struct strata_json *e = x->type == STRATA_JSON_ARRAY ? jchild(x) : NULL; e; e = jnext(x, e))
				if (e->type != STRATA_JSON_NUMBER || e->num != 0)
					moe[l] = 1;
	}
	uint32_t ti = 0;
	for (const struct strata_json *t = t0; t && !rc; t = jnext(toks, t), ti++) {
		uint32_t l = 0;
		int ph = ti < prompt ? STRATA_PHASE_PREFILL : phase;
		for (const struct strata_json *x = jchild(t); x && !rc; x = jnext(t, x), l++) {
			if (!moe[l])
				continue;
			struct cell *c;
			if ((rc = add_cell(im, req, rq->next_tok + ti, l, NULL, ph, line, &c)) ||
			    (rc = take_list(im, x, line, l, c->data)))
				break;
			memset(im->w + c->data, 0, im->k * sizeof(float));
			im->n_data += im->k;
		}
	}
	rq->next_tok += ti;
	free(moe);
	return rc;
}

static int import_row(struct imp *im, const struct strata_json *root, uint64_t line)
{
	if (root->type != STRATA_JSON_OBJECT)
		return IERR(STRATA_EINVAL, "%s: expected a JSON object", at(im, root));
	const struct strata_json *hv = strata_json_get(root, "strata_trace");
	if (hv) { /* a twin's header line: take the expert count */
		const struct strata_json *e = strata_json_get(root, "experts");
		if (e && e->type == STRATA_JSON_NUMBER && e->num > im->hdr_experts)
			im->hdr_experts = (int)e->num;
		return 0;
	}
	const struct strata_json *n[R_COUNT];
	for (int r = 0; r < R_COUNT; r++)
		n[r] = im->col[r][0] ? strata_json_get(root, im->col[r]) : im->gather[r][0] ? gathered(im, root, r) : NULL;
	if (!n[R_EXPERTS])
		return IERR(STRATA_EINVAL, "%s: no '%s' column in this row", at(im, NULL),
			    im->col[R_EXPERTS][0] ? im->col[R_EXPERTS] : im->gather[R_EXPERTS]);
	/* request key as text */
	char key[64] = "0";
	if (n[R_REQ]) {
		if (n[R_REQ]->type == STRATA_JSON_STRING)
			snprintf(key, sizeof(key), "%s", n[R_REQ]->str);
		else if (n[R_REQ]->type == STRATA_JSON_NUMBER)
			snprintf(key, sizeof(key), "%.17g", n[R_REQ]->num);
		else
			return IERR(STRATA_EINVAL, "%s: request id must be a number or a string", at(im, n[R_REQ]));
	}
	uint32_t req = intern_req(im, key);
	if (req == UINT32_MAX)
		return IERR(STRATA_ENOMEM, "out of memory");
	struct request *rq = &im->reqs[req];
	int phase;
	int rc = phase_of(im, n[R_PHASE], line, &phase);
	if (rc)
		return rc;
	if (n[R_WEIGHTS] && n[R_WEIGHTS]->type != STRATA_JSON_NULL)
		im->have_w = 1;
	const struct strata_json *pred = n[R_PRED] && n[R_PRED]->type == STRATA_JSON_ARRAY ? n[R_PRED] : NULL;
	if (pred)
		im->have_pred = 1;
	if (!im->per_token) {
		uint64_t layer, tok;
		if (!n[R_LAYER])
			return IERR(STRATA_EINVAL, "%s: no '%s' (layer) in this row", at(im, NULL), im->col[R_LAYER]);
		if ((rc = get_uint(im, n[R_LAYER], line, "layer", 65535, &layer)))
			return rc;
		if (n[R_TOK]) {
			if ((rc = get_uint(im, n[R_TOK], line, "token index", UINT32_MAX - 1, &tok)))
				return rc;
		} else {
			if (layer >= rq->n_layer_next) {
				uint32_t nl = (uint32_t)layer + 1;
				uint32_t *p = realloc(rq->layer_next, nl * sizeof(uint32_t));
				if (!p)
					return IERR(STRATA_ENOMEM, "out of memory");
				memset(p + rq->n_layer_next, 0, (nl - rq->n_layer_next) * sizeof(uint32_t));
				rq->layer_next = p;
				rq->n_layer_next = nl;
			}
			tok = rq->layer_next[layer]++;
		}
		struct cell *c;
		if ((rc = add_cell(im, req, (uint32_t)tok, (uint32_t)layer, n[R_POS], phase, line, &c)))
			return rc;
		if ((rc = take_list(im, n[R_EXPERTS], line, (uint32_t)layer, c->data)))
			return rc;
		memset(im->w + c->data, 0, im->k * sizeof(float));
		if (n[R_WEIGHTS] && n[R_WEIGHTS]->type != STRATA_JSON_NULL &&
		    (rc = take_weights(im, n[R_WEIGHTS], line, (uint32_t)layer, c->data)))
			return rc;
		im->n_data += im->k;
		if (pred) {
			if ((rc = reserve_pred(im, c)) || (rc = take_pred(im, pred, n[R_PRED_W], line, (uint32_t)layer, c->pdata)))
				return rc;
			im->n_pdata += (size_t)im->D * im->N;
		}
		return 0;
	}
	if (im->per_token == 2)
		return import_request_row(im, root, n[R_EXPERTS], rq, req, phase, line);
	/* one row per token: lists per layer */
	uint64_t tok;
	if (n[R_TOK]) {
		if ((rc = get_uint(im, n[R_TOK], line, "token index", UINT32_MAX - 1, &tok)))
			return rc;
	} else {
		tok = rq->next_tok++;
	}
	const struct strata_json *lists = n[R_EXPERTS];
	if (lists->type != STRATA_JSON_ARRAY)
		return IERR(STRATA_EINVAL, "%s: experts are not a list of lists", at(im, lists));
	const struct strata_json *wl = n[R_WEIGHTS] && n[R_WEIGHTS]->type == STRATA_JSON_ARRAY ? jchild(n[R_WEIGHTS]) : NULL;
	const struct strata_json *pl = pred ? jchild(pred) : NULL;
	const struct strata_json *pwl = n[R_PRED_W] && n[R_PRED_W]->type == STRATA_JSON_ARRAY ? jchild(n[R_PRED_W]) : NULL;
	if (n[R_WEIGHTS] && n[R_WEIGHTS]->type == STRATA_JSON_ARRAY && n[R_WEIGHTS]->len != lists->len)
		return IERR(STRATA_EINVAL, "%s: %u weight lists for %u layers", at(im, n[R_WEIGHTS]),
			    n[R_WEIGHTS]->len, lists->len);
	if (pred && pred->len != lists->len)
		return IERR(STRATA_EINVAL, "%s: %u pred lists for %u layers", at(im, pred), pred->len, lists->len);
	uint32_t layer = 0;
	for (const struct strata_json *l = jchild(lists); l; l = jnext(lists, l), layer++) {
		struct cell *c;
		if ((rc = add_cell(im, req, (uint32_t)tok, layer, n[R_POS], phase, line, &c)))
			return rc;
		if ((rc = take_list(im, l, line, layer, c->data)))
			return rc;
		memset(im->w + c->data, 0, im->k * sizeof(float));
		if (wl) {
			if ((rc = take_weights(im, wl, line, layer, c->data)))
				return rc;
			wl = jnext(n[R_WEIGHTS], wl);
		}
		im->n_data += im->k;
		if (pl) {
			if ((rc = reserve_pred(im, c)) || (rc = take_pred(im, pl, pwl, line, layer, c->pdata)))
				return rc;
			im->n_pdata += (size_t)im->D * im->N;
			pl = jnext(pred, pl);
			if (pwl)
				pwl = jnext(n[R_PRED_W], pwl);
		}
	}
	return 0;
}

/* ---- CSV -> JSON object text ------------------------------------------ */

struct sbuf {
	char *p;
	size_t used, cap;
};

static int sb_put(struct sbuf *b, const char *s, size_t n)
{
	if (b->used + n + 2 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1024;
		while (cap < b->used + n + 2)
			cap *= 2;
		char *q = realloc(b->p, cap);
		if (!q)
			return -1;
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->used, s, n);
	b->used += n;
	b->p[b->used] = 0;
	return 0;
}

/* Split one CSV record into fields (in place, quotes removed). */
/* strata_csv_split into a growing array: 0, -1 out of memory, -2 an
 * unterminated quote (*nf then counts up to that field). */
static int csv_split(char *line, char sep, char ***fields, size_t *nf, size_t *cap)
{
	size_t need = 1;
	for (const char *p = line; *p; p++)
		need += *p == sep;
	if (need > *cap) {
		char **f = realloc(*fields, need * sizeof(char *));
		if (!f)
			return -1;
		*fields = f;
		*cap = need;
	}
	char *bad = NULL;
	int n = strata_csv_split(line, sep, *fields, *cap, &bad);
	if (n < 0) {
		size_t i = 0;
		while (i < *cap && (*fields)[i] != bad)
			i++;
		*nf = i + 1;
		return -2;
	}
	*nf = (size_t)n;
	return 0;
}

/* A JSON number exactly (RFC 8259 grammar): "1.", "NaN", "+1", ".5" are not. */
static int is_json_number(const char *s, size_t n)
{
	size_t i = 0;
	if (i < n && s[i] == '-')
		i++;
	if (i < n && s[i] == '0')
		i++;
	else if (i < n && s[i] >= '1' && s[i] <= '9')
		while (i < n && isdigit((unsigned char)s[i]))
			i++;
	else
		return 0;
	if (i < n && s[i] == '.') {
		size_t d = ++i;
		while (i < n && isdigit((unsigned char)s[i]))
			i++;
		if (i == d)
			return 0;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		size_t d = i;
		while (i < n && isdigit((unsigned char)s[i]))
			i++;
		if (i == d)
			return 0;
	}
	return i == n;
}

static int json_escape(struct sbuf *b, const char *s)
{
	if (sb_put(b, "\"", 1))
		return -1;
	for (; *s; s++) {
		char tmp[8];
		if (*s == '"' || *s == '\\') {
			tmp[0] = '\\';
			tmp[1] = *s;
			if (sb_put(b, tmp, 2))
				return -1;
		} else if ((unsigned char)*s < 0x20) {
			snprintf(tmp, sizeof(tmp), "\\u%04x", (unsigned char)*s);
			if (sb_put(b, tmp, 6))
				return -1;
		} else if (sb_put(b, s, 1)) {
			return -1;
		}
	}
	return sb_put(b, "\"", 1);
}

/* A cell as a JSON value: a JSON number, a valid JSON list or object, "1 2 3"
 * / "1;2" / "1|2" lists of JSON numbers, true/false, empty as null; anything
 * else (free text, "{", "[1,", "1.", "NaN") is a string, so a column no role
 * reads never fails a row. */
static int csv_value(struct sbuf *b, const char *v, struct strata_error *scratch)
{
	while (*v == ' ')
		v++;
	size_t n = strlen(v);
	while (n && v[n - 1] == ' ')
		n--;
	if (!n)
		return sb_put(b, "null", 4);
	if (is_json_number(v, n))
		return sb_put(b, v, n);
	if (*v == '[' || *v == '{') {
		struct strata_json_doc *d = NULL;
		int ok = !strata_json_parse(v, n, "cell", &d, scratch);
		strata_json_free(d);
		if (ok)
			return sb_put(b, v, n);
	}
	/* list of numbers separated by space ; | */
	int list = 1, seen = 0;
	for (size_t i = 0; i < n && list; i++) {
		if (v[i] == ' ' || v[i] == ';' || v[i] == '|') {
			seen = 1;
			continue;
		}
		size_t j = i;
		while (j < n && v[j] != ' ' && v[j] != ';' && v[j] != '|')
			j++;
		list = is_json_number(v + i, j - i);
		i = j - 1;
	}
	if (list && seen) {
		if (sb_put(b, "[", 1))
			return -1;
		int first = 1;
		for (size_t i = 0; i < n;) {
			while (i < n && (v[i] == ' ' || v[i] == ';' || v[i] == '|'))
				i++;
			if (i == n)
				break;
			size_t j = i;
			while (j < n && v[j] != ' ' && v[j] != ';' && v[j] != '|')
				j++;
			if ((!first && sb_put(b, ",", 1)) || sb_put(b, v + i, j - i))
				return -1;
			first = 0;
			i = j;
		}
		return sb_put(b, "]", 1);
	}
	if (n == 4 && !strncasecmp(v, "true", 4))
		return sb_put(b, "true", 4);
	if (n == 5 && !strncasecmp(v, "false", 5))
		return sb_put(b, "false", 5);
	char *t = strndup(v, n);
	if (!t)
		return -1;
	int rc = json_escape(b, t);
	free(t);
	return rc;
}

static int ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcasecmp(s + a - b, suf);
}

/* The parser's "WHAT: bad JSON at byte N: why" for text read from the input
 * at im->src: rewritten as "file:line:column: bad JSON: why". */
static int json_failed(struct imp *im, const char *text)
{
	const char *b = strstr(im->err->msg, "bad JSON at byte ");
	size_t byte;
	if (b && sscanf(b, "bad JSON at byte %zu", &byte) == 1) {
		const char *why = strstr(b, ": ");
		char msg[sizeof(im->err->msg)];
		struct strata_json n = { .pos = byte };
		const char *src = im->src.text;
		im->src.text = text;
		snprintf(msg, sizeof(msg), "%s: bad JSON: %s", at(im, &n), why ? why + 2 : b);
		im->src.text = src;
		snprintf(im->err->msg, sizeof(im->err->msg), "%s", msg);
	}
	im->err->code = STRATA_EINVAL;
	return STRATA_EINVAL;
}

/* One parsed row: a twin's header line, or routing (resolving the columns on
 * a file's first row). */
static int take_row(struct imp *im, const struct strata_json *root, uint64_t lineno)
{
	int rc;
	if (root->type == STRATA_JSON_OBJECT && strata_json_get(root, "strata_trace"))
		return import_row(im, root, lineno);
	if (!im->resolved && (rc = resolve(im, root, lineno)))
		return rc;
	if ((rc = import_row(im, root, lineno)))
		return rc;
	im->res->rows++;
	return 0;
}

/* CSV header: fields trimmed of spaces (names are matched after norm_key). */
static void trim_fields(char **f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *h = f[i];
		while (*h == ' ')
			h++;
		size_t l = strlen(h);
		while (l && h[l - 1] == ' ')
			h[--l] = 0;
		f[i] = h;
	}
}

/* llama-moe-trace (tools/moe-trace/moe-trace.cpp in llama.cpp forks such as
 * thecodacus/llama.cpp; not in ggml-org/llama.cpp): a CSV without a header,
 * one row per (position, layer) in the order the layers ran,
 * "pos,layer,id0,id1,...", prompt rows with negative positions, the
 * layer the model's block index (dense blocks have no rows).  Recognised by
 * a first line of at least three integer fields; read as the columns
 * pos,layer,expert_0.. with the phase from pos's sign and tokens in order
 * per layer (a prompt batch lists a layer's tokens together). */
static int is_moe_trace(const char *s, char sep)
{
	size_t fields = 1;
	for (const char *p = s; *p; p++) {
		if (*p == sep) {
			fields++;
			continue;
		}
		if (*p == '-' && (p == s || p[-1] == sep) && isdigit((unsigned char)p[1]))
			continue;
		if (!isdigit((unsigned char)*p) && *p != ' ')
			return 0;
	}
	return fields >= 3;
}

/* The header it is read with: pos, layer, expert_0 .. expert_{n-3}. */
static char *moe_trace_header(const char *s, char sep)
{
	size_t n = 1;
	for (const char *p = s; *p; p++)
		n += *p == sep;
	char *h = malloc(16 + n * 24);
	if (!h)
		return NULL;
	int o = sprintf(h, "pos%clayer", sep);
	for (size_t i = 0; i + 2 < n; i++)
		o += sprintf(h + o, "%cexpert_%zu", sep, i);
	return h;
}

/* A CSV record as a JSON object in sb, remembering where each field went
 * (im->src) so an error names the column.  Ignored columns are left out.  A
 * llama-moe-trace row's pos becomes its phase. */
static int csv_to_json(struct imp *im, struct sbuf *sb, char **hdr, char **fields, size_t nf, const char *line)
{
	if (nf > im->src.n_fields || !im->src.json_at) {
		size_t *ja = realloc(im->src.json_at, (nf + 1) * sizeof(size_t));
		if (ja)
			im->src.json_at = ja;
		size_t *cc = ja ? realloc(im->src.csv_col, (nf + 1) * sizeof(size_t)) : NULL;
		if (!cc)
			return IERR(STRATA_ENOMEM, "out of memory");
		im->src.csv_col = cc;
	}
	im->src.names = hdr;
	im->src.n_fields = nf;
	struct strata_error scratch = { 0 };
	sb->used = 0;
	int bad = sb_put(sb, "{", 1), any = 0;
	for (size_t i = 0; i < nf && !bad; i++) {
		im->src.csv_col[i] = (size_t)(fields[i] - line);
		if (ignored(im, hdr[i])) {
			im->src.json_at[i] = sb->used;
			continue;
		}
		if (im->moe_trace && i == 0) {
			const char *v = fields[0];
			while (*v == ' ')
				v++;
			bad = (any && sb_put(sb, ",", 1)) || sb_put(sb, "\"phase\":", 8);
			im->src.json_at[i] = sb->used;
			bad = bad || (*v == '-' ? sb_put(sb, "\"prefill\"", 9) : sb_put(sb, "\"decode\"", 8));
			any = 1;
			continue;
		}
		bad = (any && sb_put(sb, ",", 1)) || json_escape(sb, hdr[i]) || sb_put(sb, ":", 1);
		im->src.json_at[i] = sb->used;
		bad = bad || csv_value(sb, fields[i], &scratch);
		any = 1;
	}
	if (bad || sb_put(sb, "}", 1))
		return IERR(STRATA_ENOMEM, "out of memory");
	return 0;
}

/* A single JSON document: a list of rows (objects as in JSONL), or of steps,
 * each an object mapping a layer id ("0", "1", ...) to null (a dense layer)
 * or to a list over the step's tokens of expert-id lists.  A step's tokens
 * follow the previous step's (one request); a step of several tokens is
 * prefill, of one the default phase. */
static int import_document(struct imp *im, const char *text, size_t len)
{
	struct strata_json_doc *doc = NULL;
	im->src.kind = TEXT_DOC;
	im->src.line = 1;
	im->src.col0 = 0;
	if (strata_json_parse(text, len, im->file, &doc, im->err))
		return json_failed(im, text);
	im->src.text = text;
	int rc = 0;
	const struct strata_json *root = strata_json_root(doc);
	if (root->type != STRATA_JSON_ARRAY) {
		rc = IERR(STRATA_EINVAL, "%s: a JSON document must be a list of steps or rows", at(im, root));
		goto out;
	}
	uint64_t tok0 = 0, line = 1;
	size_t counted = 0;
	uint32_t req = intern_req(im, "0");
	if (req == UINT32_MAX) {
		rc = IERR(STRATA_ENOMEM, "out of memory");
		goto out;
	}
	for (const struct strata_json *st = jchild(root); st && !rc; st = jnext(root, st)) {
		for (; counted < st->pos; counted++) /* the step's input line, for ordering and messages */
			line += text[counted] == '\n';
		if (st->type != STRATA_JSON_OBJECT) {
			rc = IERR(STRATA_EINVAL, "%s: a step must be an object", at(im, st));
			break;
		}
		int layer_map = st->len > 0;
		for (const struct strata_json *c = jchild(st); c && layer_map; c = jnext(st, c)) {
			char *end;
			strtoul(c->key, &end, 10);
			layer_map = *c->key && !*end && (c->type == STRATA_JSON_NULL || c->type == STRATA_JSON_ARRAY);
		}
		if (!layer_map) {
			rc = take_row(im, st, line);
			continue;
		}
		uint32_t ntok = UINT32_MAX;
		for (const struct strata_json *c = jchild(st); c && !rc; c = jnext(st, c)) {
			if (c->type == STRATA_JSON_NULL)
				continue; /* a dense layer: nothing routed */
			if (ntok != UINT32_MAX && c->len != ntok)
				rc = IERR(STRATA_EINVAL, "%s: layer %s lists %u tokens, the step's other layers %u",
					  at(im, c), c->key, c->len, ntok);
			ntok = c->len;
		}
		if (rc || ntok == UINT32_MAX)
			continue; /* an all-dense step routes nothing */
		int phase = ntok > 1 ? STRATA_PHASE_PREFILL : im->c->default_phase;
		for (const struct strata_json *c = jchild(st); c && !rc; c = jnext(st, c)) {
			if (c->type == STRATA_JSON_NULL)
				continue;
			unsigned long layer = strtoul(c->key, NULL, 10);
			if (layer > 65535) {
				rc = IERR(STRATA_EINVAL, "%s: layer id %s out of range (0..65535)", at(im, c), c->key);
				break;
			}
			uint32_t t = 0;
			for (const struct strata_json *lst = jchild(c); lst && !rc; lst = jnext(c, lst), t++) {
				struct cell *cl;
				if ((rc = add_cell(im, req, (uint32_t)(tok0 + t), (uint32_t)layer, NULL, phase, line, &cl)))
					break;
				if ((rc = take_list(im, lst, line, (uint32_t)layer, cl->data)))
					break;
				memset(im->w + cl->data, 0, im->k * sizeof(float));
				im->n_data += im->k;
			}
		}
		tok0 += ntok;
		im->res->rows++;
	}
out:
	strata_json_free(doc);
	return rc;
}

static int import_file(struct imp *im, const char *path)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	if (!f)
		return strata_error_set(im->err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, errno, __FILE__,
					__LINE__, "%s: cannot open", path);
	im->file = path;
	im->resolved = 0;
	memset(&im->src.kind, 0, sizeof(im->src.kind));
	im->moe_trace = 0;
	im->src.text = NULL;
	im->src.line = 0;
	int csv = -1; /* decided on the first non-empty line */
	char sep = ',';
	char *line = NULL, **hdr = NULL, **fields = NULL, *hdr_line = NULL, *whole = NULL;
	size_t cap = 0, nh = 0, hcap = 0, nf = 0, fcap = 0, wcap = 0, wlen = 0;
	struct sbuf sb = { 0 };
	struct strata_json_doc *doc = NULL;
	char what[PATH_MAX + 32];
	uint64_t lineno = 0;
	ssize_t len;
	int rc = 0, document = 0;
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if (im->pg)
			strata_progress_update(im->pg, im->bytes_read += (uint64_t)len);
		if (document) { /* the rest of a single JSON document */
			if (grow((void **)&whole, &wcap, wlen + (size_t)len + 1, 1)) {
				rc = IERR(STRATA_ENOMEM, "out of memory");
				break;
			}
			memcpy(whole + wlen, line, (size_t)len + 1);
			wlen += (size_t)len;
			continue;
		}
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		char *text = line;
		if (lineno == 1 && !strncmp(text, "\xef\xbb\xbf", 3))
			text += 3; /* a UTF-8 byte order mark */
		char *s = text;
		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s || (*s == '#' && csv < 0))
			continue;
		if (csv < 0 && *s == '[') { /* one JSON document, not one object per line */
			document = 1;
			wlen = strlen(text);
			if (grow((void **)&whole, &wcap, wlen + 2, 1)) {
				rc = IERR(STRATA_ENOMEM, "out of memory");
				break;
			}
			memcpy(whole, text, wlen);
			whole[wlen++] = '\n';
			whole[wlen] = 0;
			continue;
		}
		if (csv < 0) {
			csv = *s != '{';
			if (csv) {
				sep = (ends_with(path, ".tsv") || strchr(s, '\t')) ? '\t' : ',';
				im->moe_trace = is_moe_trace(s, sep);
				hdr_line = im->moe_trace ? moe_trace_header(s, sep) : strdup(s);
				if (!hdr_line) {
					rc = IERR(STRATA_ENOMEM, "out of memory");
					break;
				}
				if (csv_split(hdr_line, sep, &hdr, &nh, &hcap)) {
					rc = IERR(STRATA_EINVAL, "%s:%" PRIu64 ":1: bad CSV header (an unterminated quote)",
						  path, lineno);
					break;
				}
				trim_fields(hdr, nh);
				if (!im->moe_trace)
					continue; /* else the line is a record */
			}
		}
		im->src.line = lineno;
		im->src.text = NULL;
		size_t tlen;
		if (csv) {
			if (*s == '#')
				continue;
			int r = csv_split(text, sep, &fields, &nf, &fcap);
			if (r == -1) {
				rc = IERR(STRATA_ENOMEM, "out of memory");
				break;
			}
			if (r == -2) {
				rc = IERR(STRATA_EINVAL, "%s:%" PRIu64 ":%zu: unterminated quote", path, lineno,
					  (size_t)(fields[nf ? nf - 1 : 0] - line) + 1);
				break;
			}
			if (nf != nh) {
				rc = im->moe_trace
				   ? IERR(STRATA_EINVAL, "%s:%" PRIu64 ":%zu: %zu fields, the first line has %zu"
					  " (llama-moe-trace rows are pos,layer and %zu expert ids)", path, lineno,
					  nf > nh ? (size_t)(fields[nh] - line) + 1 : (size_t)len + 1, nf, nh, nh - 2)
				   : IERR(STRATA_EINVAL, "%s:%" PRIu64 ":%zu: %zu fields, the header has %zu", path, lineno,
					  nf > nh ? (size_t)(fields[nh] - line) + 1 : (size_t)len + 1, nf, nh);
				break;
			}
			if ((rc = csv_to_json(im, &sb, hdr, fields, nf, line)))
				break;
			im->src.kind = TEXT_CSV;
			text = sb.p;
			tlen = sb.used;
		} else {
			im->src.kind = TEXT_LINE;
			im->src.col0 = (size_t)(text - line);
			tlen = strlen(text);
		}
		strata_json_free(doc);
		doc = NULL;
		snprintf(what, sizeof(what), "%s:%" PRIu64, path, lineno);
		if (strata_json_parse(text, tlen, what, &doc, im->err)) {
			rc = json_failed(im, text);
			break;
		}
		im->src.text = text;
		if ((rc = take_row(im, strata_json_root(doc), lineno)))
			break;
	}
	if (!rc && ferror(f))
		rc = STRATA_ERRNO(im->err, STRATA_EIO, "%s: read error", path);
	if (!rc && document)
		rc = import_document(im, whole, wlen);
	if (f != stdin)
		fclose(f);
	im->src.text = NULL;
	free(line);
	free(hdr);
	free(hdr_line);
	free(fields);
	free(whole);
	free(sb.p);
	strata_json_free(doc);
	return rc;
}

/* ---- assemble and write ----------------------------------------------- */

static int cmp_cell(const void *a, const void *b)
{
	const struct cell *x = a, *y = b;
	if (x->req != y->req)
		return x->req < y->req ? -1 : 1;
	if (x->tok != y->tok)
		return x->tok < y->tok ? -1 : 1;
	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	return x->line < y->line ? -1 : x->line > y->line;
}

struct otoken {
	uint32_t req, pos, file;
	int phase;
	uint64_t line;  /* first input line of the token (any layer) */
	size_t seq;     /* index into ocells, and the request order */
};

/* --order input: by the file and line the token first appears on */
static int cmp_otok(const void *a, const void *b)
{
	const struct otoken *x = a, *y = b;
	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static const char *req_name(struct imp *im, uint32_t r, char *buf, size_t len)
{
	if (im->c->n_inputs > 1) {
		const char *f = im->c->inputs[im->reqs[r].file], *slash = strrchr(f, '/');
		snprintf(buf, len, "%s:%s", slash ? slash + 1 : f, im->reqs[r].name);
	} else
		snprintf(buf, len, "%s", im->reqs[r].name);
	return buf;
}

/* Sparse MoE layer ids (only odd layers, dense layers between): number the
 * layers present 0..n-1 in id order and keep the map in the result.  Returns
 * 1 when it compacted, 0 when the ids were contiguous, or an error. */
static int compact_layers(struct imp *im)
{
	uint8_t *seen = calloc((size_t)im->max_layer + 1, 1);
	if (!seen)
		return IERR(STRATA_ENOMEM, "out of memory");
	for (size_t i = 0; i < im->n_cells; i++)
		seen[im->cells[i].layer] = 1;
	uint32_t n = 0;
	for (uint32_t l = im->min_layer; l <= im->max_layer; l++)
		n += seen[l];
	int rc = 0;
	if (n != im->max_layer - im->min_layer + 1) {
		if (n > STRATA_TRACE_IMPORT_MAX_LAYERS) {
			free(seen);
			return IERR(STRATA_EINVAL, "%u distinct MoE layer ids (at most %d)", n,
				     STRATA_TRACE_IMPORT_MAX_LAYERS);
		}
		uint32_t *to = malloc(((size_t)im->max_layer + 1) * sizeof(uint32_t)), j = 0;
		if (!to) {
			free(seen);
			return IERR(STRATA_ENOMEM, "out of memory");
		}
		for (uint32_t l = im->min_layer; l <= im->max_layer; l++)
			if (seen[l]) {
				im->res->layer_ids[j] = (uint16_t)l;
				to[l] = j++;
			}
		im->res->n_layer_ids = n;
		for (size_t i = 0; i < im->n_cells; i++)
			im->cells[i].layer = to[im->cells[i].layer];
		im->min_layer = 0;
		im->max_layer = n - 1;
		free(to);
		rc = 1;
	}
	free(seen);
	return rc;
}

/* The input's id of trace layer l. */
static uint32_t input_layer(const struct imp *im, uint32_t l, uint32_t base)
{
	return im->res->n_layer_ids ? im->res->layer_ids[l] : l + base;
}

static int assemble(struct imp *im)
{
	const struct strata_trace_import_config *c = im->c;
	if (!im->n_cells)
		return IERR(STRATA_EINVAL, "%s: no routing rows found", c->n_inputs ? c->inputs[0] : "input");
	int compacted = compact_layers(im);
	if (compacted < 0)
		return compacted;
	uint32_t base = compacted ? 0 : c->layer_base == UINT32_MAX ? im->min_layer : c->layer_base;
	if (im->min_layer < base)
		return IERR(STRATA_EINVAL, "layer %u below the layer base %u", im->min_layer, base);
	uint32_t L = im->max_layer - base + 1, k = im->k;
	uint32_t E = c->n_experts ? c->n_experts : (uint32_t)im->max_id + 1;
	if (!c->n_experts && im->hdr_experts > (int)E)
		E = (uint32_t)im->hdr_experts;
	if (c->model && !c->n_experts)
		E = c->model->n_experts;
	if (E < k)
		E = k;
	if (c->model) {
		if (L != c->model->n_moe_layers || (uint32_t)im->max_id >= c->model->n_experts || k > c->model->top_k)
			return IERR(STRATA_ESHAPE, "input shape (%u MoE layers, expert ids up to %d, top-%u) does not fit "
				    "model %s (%u MoE layers, %u experts, top-%u)", L, im->max_id, k, c->model->name,
				    c->model->n_moe_layers, c->model->n_experts, c->model->top_k);
	}
	if ((uint32_t)im->max_id >= E)
		return IERR(STRATA_EINVAL, "expert id %d out of range (--experts %u)", im->max_id, E);
	if (base)
		warnf(im, "layers are numbered from %u: stored as 0..%u (--layer-base)", base, L - 1);
	/* sort unless already in order */
	int sorted = 1;
	for (size_t i = 1; i < im->n_cells && sorted; i++)
		if (cmp_cell(&im->cells[i - 1], &im->cells[i]) > 0)
			sorted = 0;
	if (!sorted)
		qsort(im->cells, im->n_cells, sizeof(struct cell), cmp_cell);
	/* which layers appear at all */
	uint8_t *seen = calloc(L, 1);
	if (!seen)
		return IERR(STRATA_ENOMEM, "out of memory");
	for (size_t i = 0; i < im->n_cells; i++)
		seen[im->cells[i].layer - base] = 1;
	for (uint32_t l = 0; l < L; l++)
		if (!seen[l]) {
			free(seen);
			return IERR(STRATA_EINVAL, "no rows at all for layer %u (layers seen: %u..%u)", l + base, base,
				    im->max_layer);
		}
	free(seen);

	uint32_t flags = 0;
	if (im->have_w)
		flags |= STRATA_TRACE_F_WEIGHTS | (c->weights_f32 ? STRATA_TRACE_F_WEIGHTS_F32 : 0);
	if (im->have_pred)
		flags |= STRATA_TRACE_F_PRED;
	struct strata_trace_writer_config wc = {
		.path = c->output, .format = c->format, .n_moe_layers = L, .n_experts = E, .top_k = k, .flags = flags,
		.pred_depth = im->D, .pred_topn = im->N, .model = c->model ? c->model->name : NULL,
	};
	struct strata_trace_writer *w = NULL;
	int rc = strata_trace_writer_open(&wc, &w, im->err);
	if (rc)
		return rc;
	size_t DN = (size_t)im->D * im->N;
	uint16_t *tids = malloc((size_t)L * k * 2), *tp = malloc((DN * L + 1) * 2);
	float *tw = malloc((size_t)L * k * 4), *tpw = malloc((DN * L + 1) * 4);
	size_t *grid = NULL;
	size_t grid_cap = 0;
	struct otoken *otok = NULL;
	size_t *ocells = NULL, otok_cap = 0, ocells_cap = 0, n_otok = 0;
	if (!tids || !tp || !tw || !tpw) {
		rc = IERR(STRATA_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t a = 0; a < im->n_cells;) {
		uint32_t r = im->cells[a].req;
		size_t b = a;
		uint32_t ntok = 0;
		while (b < im->n_cells && im->cells[b].req == r) {
			if (im->cells[b].tok + 1 > ntok)
				ntok = im->cells[b].tok + 1;
			b++;
		}
		im->res->requests++;
		/* grid[tok][layer] = cell index + 1, 0 missing */
		size_t need = (size_t)ntok * L;
		if (need > grid_cap) {
			free(grid);
			grid = malloc(need * sizeof(size_t));
			grid_cap = need;
			if (!grid) {
				grid_cap = 0;
				rc = IERR(STRATA_ENOMEM, "out of memory");
				goto out;
			}
		}
		memset(grid, 0, need * sizeof(size_t));
		char nb[256];
		for (size_t i = a; i < b; i++) {
			struct cell *cl = &im->cells[i];
			size_t at = (size_t)cl->tok * L + (cl->layer - base);
			if (grid[at]) {
				struct cell *o = &im->cells[grid[at] - 1];
				rc = IERR(STRATA_EINVAL, "%s:%" PRIu64 ": request %s token %u layer %u appears twice (also line "
					  "%" PRIu64 ")", c->inputs[im->reqs[r].file], cl->line, req_name(im, r, nb, sizeof(nb)),
					  cl->tok, cl->layer, o->line);
				goto out;
			}
			grid[at] = i + 1;
		}
		/* gaps per layer */
		uint32_t complete = 0;
		for (uint32_t t = 0; t < ntok; t++) {
			uint32_t l = 0;
			while (l < L && grid[(size_t)t * L + l])
				l++;
			complete += l == L;
		}
		for (uint32_t l = 0; l < L; l++) {
			uint32_t miss = 0, first = UINT32_MAX;
			for (uint32_t t = 0; t < ntok; t++)
				if (!grid[(size_t)t * L + l]) {
					miss++;
					if (first == UINT32_MAX)
						first = t;
				}
			if (!miss)
				continue;
			if (miss == ntok && c->gaps == STRATA_GAPS_FILL) {
				/* nothing to fill from: the cell would index before the first */
				rc = IERR(STRATA_EINVAL, "%s: request %s layer %u: no row in any of its %u tokens, so "
					  "--gaps fill has nothing to copy; use --gaps drop or check --layer-base",
					  c->inputs[im->reqs[r].file], req_name(im, r, nb, sizeof(nb)), l + base, ntok);
				goto out;
			}
			im->res->gap_cells += miss;
			if (c->gaps == STRATA_GAPS_ERROR) {
				rc = IERR(STRATA_EINVAL, "%s: request %s layer %u: %u of %u rows missing (first missing token "
					  "%u); use --gaps drop or --gaps fill", c->inputs[im->reqs[r].file],
					  req_name(im, r, nb, sizeof(nb)), input_layer(im, l, base), miss, ntok, first);
				goto out;
			}
			warnf(im, "%s: request %s layer %u: %u of %u rows missing (first missing token %u): %s",
			      c->inputs[im->reqs[r].file], req_name(im, r, nb, sizeof(nb)), input_layer(im, l, base), miss,
			      ntok, first,
			      c->gaps == STRATA_GAPS_DROP ? "tokens without every layer are dropped"
							  : "filled with the previous token's routing");
		}
		/* collect the request's output tokens (cells chosen, gaps resolved) */
		uint32_t out_tok = 0;
		for (uint32_t t = 0; t < ntok; t++) {
			size_t *row = grid + (size_t)t * L;
			int full = 1;
			for (uint32_t l = 0; l < L; l++)
				full &= row[l] != 0;
			if (!full && c->gaps == STRATA_GAPS_DROP) {
				im->res->dropped_tokens++;
				continue;
			}
			struct cell *first = NULL;
			uint64_t min_line = UINT64_MAX;
			for (uint32_t l = 0; l < L; l++)
				if (row[l]) {
					struct cell *cl = &im->cells[row[l] - 1];
					if (!first)
						first = cl;
					if (cl->line < min_line)
						min_line = cl->line;
				}
			if (!first) { /* no layer at all for this token index */
				im->res->dropped_tokens++;
				continue;
			}
			if (grow((void **)&otok, &otok_cap, n_otok + 1, sizeof(*otok)) ||
			    grow((void **)&ocells, &ocells_cap, (n_otok + 1) * L, sizeof(size_t))) {
				rc = IERR(STRATA_ENOMEM, "out of memory");
				goto out;
			}
			for (uint32_t l = 0; l < L; l++) {
				size_t ci = row[l];
				if (!ci) {
					/* fill: nearest earlier token with this layer, else the next one */
					for (uint32_t u = t; u-- > 0 && !ci;)
						ci = grid[(size_t)u * L + l];
					for (uint32_t u = t + 1; u < ntok && !ci; u++)
						ci = grid[(size_t)u * L + l];
					im->res->filled_cells++;
				}
				ocells[n_otok * L + l] = ci - 1;
			}
			struct otoken *o = &otok[n_otok];
			o->req = (uint32_t)(im->res->requests - 1);
			o->pos = first->has_pos ? first->pos : out_tok;
			o->phase = first->phase;
			o->file = im->reqs[r].file;
			o->line = min_line;
			o->seq = n_otok;
			n_otok++;
			out_tok++;
		}
		a = b;
	}
	if (c->order_input && n_otok > 1)
		qsort(otok, n_otok, sizeof(*otok), cmp_otok);
	for (size_t i = 0; i < n_otok; i++) {
		const struct otoken *o = &otok[i];
		for (uint32_t l = 0; l < L; l++) {
			struct cell *cl = &im->cells[ocells[o->seq * L + l]];
			memcpy(tids + (size_t)l * k, im->ids + cl->data, k * 2);
			memcpy(tw + (size_t)l * k, im->w + cl->data, k * 4);
			for (size_t j = 0; j < DN; j++) {
				tp[l * DN + j] = cl->pdata == UINT64_MAX ? STRATA_TRACE_NO_EXPERT : im->pids[cl->pdata + j];
				tpw[l * DN + j] = cl->pdata == UINT64_MAX ? 0 : im->pw[cl->pdata + j];
			}
		}
		struct strata_trace_token tk = {
			.req = o->req, .pos = o->pos, .phase = o->phase, .experts = tids,
			.weights = im->have_w ? tw : NULL, .pred = im->have_pred ? tp : NULL,
			.pred_w = im->have_pred ? tpw : NULL,
		};
		if ((rc = strata_trace_writer_add(w, &tk, im->err))) {
			strata_error_prefix(im->err, "%s:%" PRIu64 ": ", c->inputs[o->file], o->line);
			goto out;
		}
		im->res->tokens++;
	}
	if (!im->res->tokens) {
		rc = IERR(STRATA_EINVAL, "no complete tokens to write (every token lacks some layer; try --gaps fill)");
		goto out;
	}
	rc = strata_trace_writer_finish(w, im->err);
	w = NULL;
out:
	if (w)
		strata_trace_writer_abort(w);
	free(otok);
	free(ocells);
	free(grid);
	free(tids);
	free(tp);
	free(tw);
	free(tpw);
	return rc;
}

void strata_trace_import_defaults(struct strata_trace_import_config *c)
{
	memset(c, 0, sizeof(*c));
	c->default_phase = STRATA_PHASE_DECODE;
	c->gaps = STRATA_GAPS_DROP;
	c->layer_base = UINT32_MAX; /* auto: the smallest layer number seen */
	c->max_warnings = 20;
}

int strata_trace_import(const struct strata_trace_import_config *c, struct strata_trace_import_result *res,
			struct strata_error *err)
{
	struct strata_trace_import_result dummy;
	if (!res)
		res = &dummy;
	memset(res, 0, sizeof(*res));
	if (!c->n_inputs || !c->output)
		return STRATA_ERR(err, STRATA_EINVAL, "import: need inputs and an output");
	int rc = STRATA_OK;
	for (uint32_t i = 0; i < c->n_inputs && !rc; i++) { /* before reading: `-o g.csv g.csv` */
		int slot = strata_input_note(c->inputs[i]);
		rc = strata_output_check(c->output, err);
		strata_input_forget(slot);
	}
	if (rc)
		return rc;
	struct imp im = { .c = c, .res = res, .err = err, .min_layer = UINT32_MAX, .max_id = -1 };
	struct strata_progress pg;
	if (c->progress) { /* the inputs' bytes (stdin: unknown, no ETA) */
		uint64_t total = 0;
		struct stat st;
		for (uint32_t i = 0; i < c->n_inputs && total != UINT64_MAX; i++)
			total = strcmp(c->inputs[i], "-") && !stat(c->inputs[i], &st) && S_ISREG(st.st_mode)
					? total + (uint64_t)st.st_size : UINT64_MAX;
		if (total == UINT64_MAX)
			total = 0;
		strata_progress_start(&pg, "trace import", total, "B");
		im.pg = &pg;
	}
	rc = parse_map(&im, c->map);
	for (uint32_t i = 0; !rc && i < c->n_inputs; i++) {
		im.file_idx = i;
		rc = import_file(&im, c->inputs[i]);
	}
	if (!rc)
		rc = assemble(&im);
	if (im.pg) /* the line ends before an error or the summary is printed */
		strata_progress_finish(im.pg);
	for (uint32_t i = 0; i < im.n_reqs; i++) {
		free(im.reqs[i].name);
		free(im.reqs[i].layer_next);
	}
	free(im.reqs);
	free(im.rhash);
	for (size_t i = 0; i < im.n_ignore; i++)
		free(im.ignore[i]);
	free(im.ignore);
	free(im.src.json_at);
	free(im.src.csv_col);
	free(im.cells);
	free(im.ids);
	free(im.w);
	free(im.pids);
	free(im.pw);
	return rc;
}
