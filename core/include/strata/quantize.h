/*
 * `strata quantize` as a library: map a Hugging Face safetensors MoE model
 * onto a Strata model spec, quantize every routed expert to its tier's format
 * and write Strata shards; everything else is stored BF16 (1-D tensors F32).
 *
 * Naming schemes (tensor name -> routed expert matrix):
 *   mixtral      model.layers.{L}.block_sparse_moe.experts.{E}.{w1,w3,w2}.weight
 *   deepseek-v3  model.layers.{L}.mlp.experts.{E}.{gate,up,down}_proj.weight
 *                (shared experts model.layers.{L}.mlp.shared_experts.* and the
 *                first_k_dense layers' model.layers.{L}.mlp.* are non-routed)
 *   qwen3-moe    model.layers.{L}.mlp.experts.{E}.{gate,up,down}_proj.weight
 * w1/gate_proj is the gate [inter x hidden], w3/up_proj the up [inter x
 * hidden], w2/down_proj the down [hidden x inter] matrix.  "auto" picks the
 * scheme whose expert pattern matches; deepseek-v3 when shared experts or
 * e_score_correction_bias tensors are present, else qwen3-moe.
 *
 * The spec is inferred from the tensors: MoE layers are the layers holding
 * experts (they must be contiguous), experts per layer and matrix sizes from
 * the shapes, every expert checked for all three matrices, shape and a float
 * dtype; top_k from config.json's num_experts_per_tok next to the model, else
 * --top-k, else the scheme's default (clamped to the experts found).  Layers
 * at or past config.json's num_hidden_layers (DeepSeek-V3's multi-token-
 * prediction layer) are skipped and counted.
 *
 * FP8 checkpoints (DeepSeek-V3 as shipped): a 2-D F8_E4M3 / F8_E5M2 weight X
 * is read as X * X_scale_inv, one float scale per block of config.json's
 * quantization_config.weight_block_size (default 128 x 128); the scale
 * tensors are consumed, not stored.  A missing or misshapen scale is an error.
 *
 * Work is spread over the threads in row blocks of about 32K weights of one
 * matrix (so a few large or unequal experts still keep every thread busy),
 * the non-routed tensors first; the output does not depend on the thread
 * count.  Memory is bounded: each worker thread holds one row block as float,
 * and threads + 2 packed-expert buffers are shared; non-routed tensors are
 * converted a chunk at a time (each one as BF16 is held whole, as
 * strata_store_writer_add_tensor takes it in one piece).
 */
#ifndef STRATA_QUANTIZE_H
#define STRATA_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "strata/error.h"
#include "strata/imatrix.h"
#include "strata/model.h"
#include "strata/safetensors.h"
#include "strata/store.h"
#include "strata/types.h"

struct strata_naming {
	const char *name;
	const char *about;
	const char *experts_infix;            /* after "model.layers.{L}." */
	const char *matrix[STRATA_MAT_COUNT]; /* gate, up, down names before ".weight" */
	const char *shared_infix;             /* shared experts, or NULL */
	uint32_t default_top_k;
};
/* NULL-terminated by name == NULL. */
extern const struct strata_naming strata_namings[];
const struct strata_naming *strata_naming_find(const char *name);
/* true if tensor is "model.layers.{L}.<infix>{E}.<matrix>.weight" of this scheme. */
bool strata_naming_match(const struct strata_naming *n, const char *tensor, uint32_t *layer, uint32_t *expert,
			 int *matrix);
/* Tensor name of (layer, expert, matrix) in this scheme. */
void strata_naming_format(const struct strata_naming *n, uint32_t layer, uint32_t expert, int matrix, char *buf,
			  size_t len);

/* A safetensors model mapped onto a spec. */
struct strata_quantize_model {
	struct strata_safetensors *st;
	const struct strata_naming *naming;
	struct strata_model_spec spec;
	const struct strata_safetensors_tensor **experts;   /* [eid * 3 + matrix] */
	const struct strata_safetensors_tensor **nonrouted; /* stored as-is (BF16/F32) */
	uint32_t n_nonrouted;
	uint32_t n_skipped;                        /* tensors of layers past num_hidden_layers */
	uint32_t fp8_block[2];                     /* FP8 scale blocks (rows, cols), default 128 x 128 */
	char path[1024];
};

struct strata_quantize_open_options {
	const char *naming; /* NULL or "auto" */
	uint32_t top_k;     /* 0: config.json, else the scheme's default */
	const char *name;   /* spec name; NULL: the input's base name */
};

int strata_quantize_model_open(const char *path, const struct strata_quantize_open_options *opt, struct strata_quantize_model **out,
			 struct strata_error *err);
void strata_quantize_model_close(struct strata_quantize_model *m);
/* Rows [row0, row0 + nrows) of a tensor of m (1-D: one row) as float; FP8
 * weights come out multiplied by their block scales.  Thread-safe. */
int strata_quantize_read_rows(struct strata_quantize_model *m, const struct strata_safetensors_tensor *t, uint64_t row0, uint64_t nrows,
			float *out, struct strata_error *err);

struct strata_quantize_config {
	const char *out;            /* output directory (shards) */
	const uint8_t *tiers;       /* per expert id, enum strata_tier (required) */
	uint8_t tier_fmt[STRATA_TIER_COUNT]; /* each tier's format (strata_tier_fmts_parse); all 0: hot, warm, cold */
	struct strata_imatrix *imatrix; /* or NULL */
	uint32_t threads;           /* 0: 1 */
	uint64_t shard_bytes;       /* 0: the store's default */
	bool progress;              /* progress bar on stderr */
	bool force;                 /* replace a model already in out */
	bool lowbit_copies;         /* beside each hot/warm expert a cold-format copy (strata_store_copy) */
};

struct strata_quantize_tier_stats {
	uint64_t experts;
	uint64_t matrices;
	double cos_sum, cos_min;    /* per-matrix cosine */
	double rmse_sum;            /* per-matrix relative RMSE */
	uint64_t params;
	uint64_t payload;           /* packed bytes */
	uint64_t bytes;             /* extent bytes (4 KiB padded) */
	int fmt;
	double bpw;                 /* format bits per weight */
};

struct strata_quantize_report {
	struct strata_model_spec spec;
	char naming[32];
	struct strata_quantize_tier_stats tier[STRATA_TIER_COUNT];
	uint64_t tensors, tensor_params, tensor_bytes; /* non-routed, as stored */
	uint64_t in_bytes;          /* input tensor bytes read */
	uint64_t bf16_bytes;        /* the whole model at BF16 (routed + non-routed) */
	uint64_t routed_bf16_bytes;
	uint64_t out_bytes;         /* expert extents + tensors */
	uint64_t buffer_bytes;      /* working buffers held (the memory bound) */
	uint32_t threads;           /* worker threads used */
	/* where the time went (strata_quantize_run): seconds; the per-thread
	 * ones are summed over the threads */
	struct strata_quantize_times {
		double open, work, finish; /* wall: shard files set up; the threads' work; headers + fsync */
		double cpu;                /* CPU time of the worker threads */
		double read, encode, write, tensors; /* in reading + converting, the encoder, shard writes, non-routed tensors */
		double wait;               /* waiting for an expert buffer to be free */
		double tail;               /* idle after its last task while others still worked */
		double busy_share;         /* cpu / (threads x seconds): how busy the cores were */
	} time;
	uint32_t imatrix_used;      /* matrices quantized with an importance matrix */
	uint32_t skipped;
	double seconds;
};

/* Quantize m into cfg->out.  On any failure every partial shard is removed
 * (strata_store_writer_abort) and the error names the tensor or file. */
int strata_quantize_run(struct strata_quantize_model *m, const struct strata_quantize_config *cfg,
			struct strata_quantize_report *rep, struct strata_error *err);

/* Fill rep as strata_quantize_run would, from the tier table and the
 * formats' layouts alone (no quantization, nothing written; cosines 0;
 * tier_fmt as in the config, NULL: hot, warm, cold):
 * the sizes of a run before spending hours on it. */
int strata_quantize_plan(struct strata_quantize_model *m, const uint8_t *tiers, const uint8_t *tier_fmt,
			 struct strata_quantize_report *rep,
			 struct strata_error *err);

/*
 * The inverse direction, for quality studies: write every routed expert of the
 * shards s dequantized (the CPU reference dequantizers) as BF16 under naming's
 * tensor names (mixtral, deepseek-v3, qwen3-moe; model layer = first_moe_layer
 * + MoE layer), and every non-routed tensor as stored, into one safetensors
 * file out (tmp + rename: nothing valid-looking is left on failure).  Its
 * __metadata__ holds "strata.spec" (the spec's canonical text) and
 * "strata.tiers" (one digit per expert id: 0 hot, 1 warm, 2 cold).  Extents
 * are checked against their checksums as they are read.
 */
int strata_dequantize_store(struct strata_store *s, const char *naming, const char *out, bool progress,
			    struct strata_error *err);

#endif
