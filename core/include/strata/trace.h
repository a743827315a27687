/*
 * Routing traces: which experts the router picked, token by token.
 *
 * Binary form (".strace"): a 256-byte little-endian header followed by
 * fixed-size records, one per token, read through mmap.
 *
 *   header   magic "STRATATR", version, header size, model shape
 *            (n_moe_layers, n_experts, top_k), flags, lookahead shape
 *            (pred_depth, pred_topn), record size, statistics (tokens,
 *            requests, prefill/decode tokens, max position, distinct experts
 *            used), the model name, an xxh64 of all records, reserved bytes
 *            (zero).
 *   record   u32 request, u32 position, u8 phase, u8 0, u16 0,
 *            u16 experts[n_moe_layers][top_k]            (descending weight)
 *            gate weights [n_moe_layers][top_k]          (if HAS_WEIGHTS;
 *                                                         f16, or f32 with WEIGHTS_F32)
 *            u16 pred ids [n_moe_layers][depth][topn]    (if HAS_PRED)
 *            f16 pred scores [n_moe_layers][depth][topn] (if HAS_PRED)
 *            each section starts 4-byte aligned; the record is padded to 4.
 *
 * pred ids at [l][d-1][j] are the experts a predictor, run at layer l,
 * expected for layer l+d (d = 1..depth); STRATA_TRACE_NO_EXPERT pads slots
 * past the last layer or beyond what the predictor gave.
 *
 * Text twin (".jsonl"): an optional header line
 *   {"strata_trace":1,"layers":L,"experts":E,"top_k":K,"model":"...",
 *    "weights":"f16"|"f32","pred_depth":D,"pred_topn":N}
 * then one JSON object per token:
 *   {"req":0,"phase":"decode","pos":12,"layers":[[3,1],[0,7],...],
 *    "weights":[[0.6,0.4],...],"pred":[[[e,..],..],..],"pred_w":[[[w,..],..],..]}
 * "weights", "pred" and "pred_w" are optional; pred[l][d-1] lists the experts
 * predicted at layer l for layer l+d.  Without a header line the shape comes
 * from the first record and the largest expert id.
 *
 * Readers validate everything once at open (magic, version, sizes, checksum,
 * expert ids, duplicate experts within a (token, layer)) so the accessors below
 * need no checks; errors name the file, the record and the layer.  Writers
 * write "<path>.tmp" and rename on finish: a failed write leaves nothing that
 * looks valid.
 */
#ifndef STRATA_TRACE_H
#define STRATA_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/error.h"
#include "strata/model.h"
#include "strata/policy.h"

#define STRATA_TRACE_MAGIC "STRATATR"
#define STRATA_TRACE_VERSION 1
#define STRATA_TRACE_HEADER_BYTES 256
#define STRATA_TRACE_NO_EXPERT 0xFFFFu
#define STRATA_TRACE_MAX_TOPK 64
#define STRATA_TRACE_MAX_DEPTH 8
#define STRATA_TRACE_MAX_TOPN 64
#define STRATA_TRACE_IMPORT_MAX_LAYERS 1024

enum strata_trace_phase {
	STRATA_PHASE_PREFILL = 0,
	STRATA_PHASE_DECODE = 1,
};
const char *strata_trace_phase_name(int phase); /* "prefill", "decode" */

enum {
	STRATA_TRACE_F_WEIGHTS = 1u << 0,     /* gate weights present */
	STRATA_TRACE_F_WEIGHTS_F32 = 1u << 1, /* ... stored as f32 (else f16) */
	STRATA_TRACE_F_PRED = 1u << 2,        /* lookahead predictions present */
};

/* Shape and statistics of a trace (the header, decoded). */
struct strata_trace_info {
	uint32_t n_moe_layers, n_experts, top_k;
	uint32_t flags;                  /* STRATA_TRACE_F_* */
	uint32_t pred_depth, pred_topn;  /* 0 without predictions */
	uint32_t record_bytes;
	uint32_t n_requests;             /* distinct request ids */
	uint64_t n_tokens;
	uint64_t n_prefill, n_decode;    /* tokens by phase */
	uint32_t max_pos;                /* largest position */
	uint32_t n_used;                 /* distinct (layer, expert) routed at least once */
	uint64_t xxh64;                  /* of the record bytes */
	char model[STRATA_NAME_MAX];     /* model name as recorded, may be "" */
};

/* One token as the writer takes it.  Arrays are flat, layer-major. */
struct strata_trace_token {
	uint32_t req, pos;
	int phase;                        /* enum strata_trace_phase */
	const uint16_t *experts;          /* [n_moe_layers * top_k] */
	const float *weights;             /* [n_moe_layers * top_k], or NULL (written as 0) */
	const uint16_t *pred;             /* [n_moe_layers * depth * topn], or NULL (NO_EXPERT) */
	const float *pred_w;              /* same shape, or NULL (0) */
};

/* ---- reading ---------------------------------------------------------- */

struct strata_trace;

/* Open a binary trace (mmap) or a JSONL twin (parsed into memory); the kind is
 * told by the magic, not the name.  Validates everything (see above). */
int strata_trace_open(const char *path, struct strata_trace **out, struct strata_error *err);
void strata_trace_close(struct strata_trace *t);

const struct strata_trace_info *strata_trace_info(const struct strata_trace *t);
const char *strata_trace_path(const struct strata_trace *t);

/* Per-token accessors; i < n_tokens, layer < n_moe_layers (not checked). */
uint32_t strata_trace_req(const struct strata_trace *t, uint64_t i);
uint32_t strata_trace_pos(const struct strata_trace *t, uint64_t i);
int strata_trace_phase(const struct strata_trace *t, uint64_t i);
/* top_k expert ids, pointing into the mapping (valid until close). */
const uint16_t *strata_trace_experts(const struct strata_trace *t, uint64_t i, uint32_t layer);
/* Gate weights of (i, layer) into out[top_k]; zeros without weights. */
void strata_trace_weights(const struct strata_trace *t, uint64_t i, uint32_t layer, float *out);
/* Recorded lookahead predictions made at (i, layer), as hints for layers
 * layer+1 .. layer+depth; returns the count (<= max). */
uint32_t strata_trace_hints(const struct strata_trace *t, uint64_t i, uint32_t layer,
			    struct strata_hint *out, uint32_t max);
/* Fill a writer token from record i (pointers into scratch, which must hold
 * strata_trace_scratch_floats(t) floats; valid until the next call). */
void strata_trace_read_one(const struct strata_trace *t, uint64_t i, struct strata_trace_token *tok,
			   float *scratch);
size_t strata_trace_scratch_floats(const struct strata_trace *t);

/* STRATA_ESHAPE naming both shapes if the trace does not fit the model
 * (layers or experts differ, or top_k larger than the model's). */
int strata_trace_check_model(const struct strata_trace *t, const struct strata_model_spec *spec,
			     struct strata_error *err);

/* ---- writing ---------------------------------------------------------- */

enum strata_trace_format {
	STRATA_TRACE_FMT_AUTO = 0,   /* by name: ".jsonl"/".json" -> JSONL, else binary */
	STRATA_TRACE_FMT_BINARY = 1,
	STRATA_TRACE_FMT_JSONL = 2,
};

struct strata_trace_writer_config {
	const char *path;
	int format;                   /* enum strata_trace_format */
	uint32_t n_moe_layers, n_experts, top_k;
	uint32_t flags;               /* STRATA_TRACE_F_* */
	uint32_t pred_depth, pred_topn;
	const char *model;            /* may be NULL */
};

struct strata_trace_writer;

int strata_trace_writer_open(const struct strata_trace_writer_config *cfg,
			     struct strata_trace_writer **out, struct strata_error *err);
/* Validates ids (range, duplicates) and fails naming the token and layer. */
int strata_trace_writer_add(struct strata_trace_writer *w, const struct strata_trace_token *tok,
			    struct strata_error *err);
uint64_t strata_trace_writer_count(const struct strata_trace_writer *w);
/* Before writing n_tokens records: refuse (STRATA_ENOSPC, with the sizes)
 * when the output's filesystem has less room than they need (JSONL counted
 * at about 4 bytes of text per binary byte), instead of filling the disk. */
/* A 64-bit key of a trace file's content, cheap to take: a binary trace's
 * header hash (the header holds the records' checksum and counts), else the
 * hash of the whole file (JSONL).  Sweeps key their rows on it. */
int strata_trace_content_key(const char *path, uint64_t *key, struct strata_error *err);
int strata_trace_writer_reserve(struct strata_trace_writer *w, uint64_t n_tokens, struct strata_error *err);
/* Finish the header (statistics, checksum), fsync, rename into place; the
 * writer is freed whatever happens. */
int strata_trace_writer_finish(struct strata_trace_writer *w, struct strata_error *err);
/* Remove the .tmp file and free. */
void strata_trace_writer_abort(struct strata_trace_writer *w);

/* Copy a whole trace into a new file (convert binary <-> JSONL). */
int strata_trace_convert(const struct strata_trace *t, const char *path, int format, bool progress,
			 struct strata_error *err);
/* The same, with lookahead predictions drawn from each token's own routing
 * in place of the trace's (for logs that record none): per layer l and
 * distance d = 1..depth, top_k slots, slot j the j-th expert routed at
 * layer l+d with probability accuracy, else a wrong expert of that layer
 * (uniform), scored as strata trace gen scores them.  Seeded. */
struct strata_trace_pred_config {
	uint32_t depth;
	double accuracy;
	uint64_t seed;
};
int strata_trace_convert_pred(const struct strata_trace *t, const char *path, int format,
			      const struct strata_trace_pred_config *pc, bool progress, struct strata_error *err);

/* libCacheSim's trace formats (strata trace export). */
enum strata_trace_export_format {
	STRATA_EXPORT_ORACLE_GENERAL = 1, /* binary, 24-byte records with the next access */
	STRATA_EXPORT_CSV = 2,            /* "time,obj_id,obj_size" */
};
/* Write t as one request per (token, layer, routed expert), object id
 * layer * n_experts + expert, time the token index, every object obj_size
 * bytes (see core/traces/trace_export.c for the record layouts); PATH.tmp then
 * rename. */
int strata_trace_export(const struct strata_trace *t, const char *path, int format, uint32_t obj_size,
			bool progress, struct strata_error *err);

/* ---- the future of a replay ------------------------------------------- */

/*
 * A replay runs in steps: one decode token, or a chunk of up to
 * prefill_chunk consecutive prefill tokens of one request (one forward pass).
 * Per step and layer it acquires the distinct experts routed to the step's
 * tokens: a decode token's in record order, a prefill chunk's in order of
 * first appearance.  The engine's clock (policy.h) counts these expert
 * accesses; the plan lists them, and the future answers from it.
 */
struct strata_trace_plan {
	uint64_t n_steps;
	uint32_t n_layers;
	uint64_t *step_first;     /* [n_steps + 1]: first token of each step */
	uint64_t *off;            /* [n_steps * n_layers + 1]: into ids */
	uint16_t *ids;            /* layer-local expert ids, access order */
	uint64_t n_accesses;
	uint64_t n_prefill_steps;
};

/* prefill_chunk 0: a whole prefill run of one request is one step. */
int strata_trace_plan_build(const struct strata_trace *t, uint32_t prefill_chunk,
			    uint64_t max_tokens, struct strata_trace_plan *plan, struct strata_error *err);
void strata_trace_plan_free(struct strata_trace_plan *plan);

/*
 * struct strata_future over a plan: `token` is the step index, `now` the
 * access clock.  next_use is amortised O(1) for a clock that moves forward
 * (per-expert occurrence lists with a cursor), O(log n) otherwise.  The plan
 * must outlive the future.  Not thread-safe (cursors).
 */
int strata_trace_future_init(struct strata_future *f, const struct strata_trace_plan *plan,
			     uint32_t n_experts, struct strata_error *err);
void strata_trace_future_free(struct strata_future *f);

/* ---- generator -------------------------------------------------------- */

struct strata_trace_gen_config {
	uint32_t n_moe_layers, n_experts, top_k;
	uint64_t seed;
	uint32_t requests;             /* streams */
	uint32_t prompt_len, gen_len;  /* per request: prefill and decode tokens */
	double len_jitter;             /* 0..1: lengths vary uniformly by +-jitter */
	double zipf_alpha;             /* per-layer popularity skew (0: uniform) */
	double reuse_prob;             /* chance an expert repeats from the recent window */
	uint32_t reuse_window;         /* tokens of the same request looked back */
	double layer_corr;             /* 0..1: chance an expert follows its predecessor layer's map */
	bool weights;                  /* write gate weights */
	uint32_t pred_depth, pred_topn;/* synthetic lookahead predictions (0: none) */
	double pred_accuracy;          /* chance a predicted slot is a truly routed expert */
	bool interleave;               /* round-robin decode tokens across requests */
	const char *model;
	bool progress;                 /* a progress line on stderr (strata/util.h) */
};
void strata_trace_gen_defaults(struct strata_trace_gen_config *c);
int strata_trace_gen(const struct strata_trace_gen_config *c, const char *path, int format,
		     struct strata_error *err);

/* ---- statistics ------------------------------------------------------- */

struct strata_trace_layer_stats {
	double top10_share;  /* share of accesses going to the 10% most used experts */
	double entropy;      /* bits; log2(n_experts) is uniform */
	double gini;
	uint32_t used;       /* experts used at least once */
	double corr_next_top1; /* P(next layer's top-1 == most frequent follower of this top-1) */
	double mi_next;      /* mutual information (bits) of top-1 with next layer's top-1 */
};

struct strata_trace_stats {
	uint32_t n_layers;
	struct strata_trace_layer_stats *layer; /* [n_layers] */
	/* Reuse distance of (layer, expert) per request, in tokens since its last
	 * use in the same layer: histogram buckets 1,2,3-4,5-8,...,>=2^14 and
	 * percentiles; first uses are counted apart. */
	uint64_t reuse_hist[16];
	uint64_t first_uses, reuses;
	double reuse_p50, reuse_p90, reuse_p99;
	double mean_top10_share, mean_entropy, mean_gini, mean_corr_next_top1, mean_mi_next;
	double pred_precision;  /* recorded predictions: share of predicted slots later routed; -1 none */
};
int strata_trace_stats_compute(const struct strata_trace *t, struct strata_trace_stats *s,
			       struct strata_error *err);
void strata_trace_stats_free(struct strata_trace_stats *s);

/* ---- import ----------------------------------------------------------- */

enum strata_trace_gaps {
	STRATA_GAPS_DROP = 0, /* cut a request to the tokens present in every layer */
	STRATA_GAPS_FILL = 1, /* fill a missing (token, layer) with the previous token's routing */
	STRATA_GAPS_ERROR = 2,
};

struct strata_trace_import_config {
	const char *const *inputs;     /* files (.jsonl/.json/.csv/.tsv; "-" = stdin as JSONL) */
	uint32_t n_inputs;
	const char *output;
	int format;                    /* output: enum strata_trace_format */
	const char *map;               /* "token=token_idx,layer=layer,experts=experts,..." or NULL */
	uint32_t n_experts;            /* 0: from the data (max id + 1) or the model */
	const struct strata_model_spec *model; /* optional: check shape against it */
	int default_phase;             /* when no phase column: decode (default) */
	int gaps;                      /* enum strata_trace_gaps */
	bool weights_f32;
	uint32_t layer_base;           /* subtract from layer numbers (e.g. first MoE layer) */
	bool order_input;              /* tokens in order of first appearance in the input (a server's
					* interleaving), not request by request */
	FILE *warn;                    /* warnings (gaps), NULL: stderr */
	uint64_t max_warnings;         /* gap warnings printed (defaults: 20; 0: none, the
					* result still counts the gaps) */
	bool progress;                 /* a progress line on stderr over the input bytes */
};
struct strata_trace_import_result {
	uint64_t rows, tokens, requests;
	uint64_t gap_cells;            /* (token, layer) cells missing in the input */
	uint64_t dropped_tokens, filled_cells;
	/* Sparse MoE layer ids (e.g. only odd layers: dense layers between) are
	 * stored as layers 0..n-1 in id order: trace layer i is input layer
	 * layer_ids[i].  0 when the ids were contiguous (then --layer-base). */
	uint32_t n_layer_ids;
	uint16_t layer_ids[STRATA_TRACE_IMPORT_MAX_LAYERS];
};
void strata_trace_import_defaults(struct strata_trace_import_config *c);
int strata_trace_import(const struct strata_trace_import_config *c, struct strata_trace_import_result *res,
			struct strata_error *err);


#endif
