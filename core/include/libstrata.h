/*
 * libstrata.h: the C ABI of libstrata.so for callers outside Strata (the Python package,
 * a PyTorch runner, any C program).  It is the only header such a caller includes; nothing
 * here needs the other Strata headers.
 *
 * Rules of the ABI:
 *  - Handles are opaque (strata_api_store, strata_api_engine, strata_api_recorder); a caller
 *    never sees a struct layout.  Every integer is a sized type.
 *  - Every function that can fail returns an int32_t status: 0 (STRATA_API_OK) or a negative
 *    code (the values of enum strata_status in strata/error.h, listed below).  The message of
 *    the last failure on the calling thread ("path/to/shard-00000.strata: bad magic ...",
 *    naming the file and the cause) is strata_api_last_error(); it stays until the next
 *    failure on that thread.
 *  - Versioning: STRATA_API_VERSION is major * 10000 + minor.  A caller checks at run time
 *    that strata_api_version() / 10000 equals the major it was built for; minors only add
 *    functions and keys.  Options are key=value text, statistics are JSON text, and enum
 *    values are fixed for a major version: they replace structs a caller would mirror.
 *  - Threads: a store may be shared; an engine and a recorder are used by one thread at a
 *    time (the engine is single-threaded by design; its movers run underneath).
 *  - Only the strata_api_* symbols are exported by libstrata.so.
 */
#ifndef LIBSTRATA_H
#define LIBSTRATA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_API_VERSION 10000 /* 1.0 */

enum strata_api_status {
	STRATA_API_OK = 0,
	STRATA_API_EINVAL = -1,       /* bad argument or option */
	STRATA_API_EIO = -2,          /* a read or write failed */
	STRATA_API_ENOMEM = -3,
	STRATA_API_ECORRUPT = -4,     /* checksum, magic or sizes disagree */
	STRATA_API_EVERSION = -5,
	STRATA_API_ENOSPC = -6,
	STRATA_API_EBUDGET = -7,      /* a tier budget is too small */
	STRATA_API_EPOLICY = -8,
	STRATA_API_ESCRIPT = -9,
	STRATA_API_ENOTFOUND = -10,
	STRATA_API_EUNSUPPORTED = -11,
	STRATA_API_EGPU = -12,
	STRATA_API_ESHAPE = -13,      /* shapes disagree */
	STRATA_API_EINTR = -14,
};

/* Expert formats (strata_api_store_expert_fmt). */
enum strata_api_fmt {
	STRATA_API_FMT_F32 = 0, STRATA_API_FMT_BF16 = 1,
	STRATA_API_FMT_HOT = 2, STRATA_API_FMT_WARM = 3, STRATA_API_FMT_COLD = 4,
};

uint32_t strata_api_version(void);
/* The last failure's message on this thread ("" if none). */
const char *strata_api_last_error(void);
/* "EIO", "ECORRUPT", ... for a status. */
const char *strata_api_status_name(int32_t status);
/* Usable GPUs (0 on a build without CUDA or a machine without a GPU). */
int32_t strata_api_gpu_count(void);

/* ---- shard store -------------------------------------------------------------------- */

typedef struct strata_api_store strata_api_store;

/* Open a shard directory (strata synth / strata quantize output); validates every header. */
int32_t strata_api_store_open(const char *dir, strata_api_store **out);
void strata_api_store_close(strata_api_store *s);

enum strata_api_shape_key {
	STRATA_API_N_LAYERS = 0,        /* transformer layers */
	STRATA_API_FIRST_MOE_LAYER = 1,
	STRATA_API_N_MOE_LAYERS = 2,
	STRATA_API_N_EXPERTS = 3,       /* routed experts per MoE layer */
	STRATA_API_TOP_K = 4,
	STRATA_API_HIDDEN = 5,
	STRATA_API_INTER = 6,           /* routed expert intermediate size */
	STRATA_API_N_SHARED = 7,
	STRATA_API_SHARED_INTER = 8,
};
/* One number of the model shape; -1 for an unknown key. */
int64_t strata_api_store_shape(const strata_api_store *s, int32_t key);
/* Format of expert (moe_layer, expert): enum strata_api_fmt, or a negative status. */
int32_t strata_api_store_expert_fmt(const strata_api_store *s, uint32_t moe_layer, uint32_t expert);
/* Read expert (moe_layer, expert) from its shard (checksum verified) and dequantize it into
 * host float arrays: gate and up inter x hidden, down hidden x inter, row-major.  What the
 * fused kernels compute with, for references and tests. */
int32_t strata_api_store_dequantize(strata_api_store *s, uint32_t moe_layer, uint32_t expert, float *gate,
				    float *up, float *down);

/* ---- engine --------------------------------------------------------------------------- */

typedef struct strata_api_engine strata_api_engine;

/*
 * Open the expert cache engine over a store (which must outlive it).  vram_bytes and
 * ram_bytes are the tier budgets; place, evict, prefetch are policy specs as the CLI takes
 * them ("static", "lru", "lookahead:depth=2", a Lua script path, a plugin .so; NULL: the
 * defaults static, lru, none).  options: NULL or space-separated key=value:
 *   gpu=auto|0|1     engine and compute on the GPU (auto: when one is usable)
 *   seed=N           policy seed (1)
 *   verify=0|1       check extent checksums on every NVMe read (0, as `strata replay`: the
 *                    shard headers are always checked; reads that land in VRAM are copied
 *                    back to the host and hashed, a wait per expert)
 *   mover=uring|pread|mmap   NVMe reads (uring: io_uring + O_DIRECT)
 *   on_miss=SPEC     precision on miss (strata/engine.h): full (default) or
 *                    lowbit[:gate=G,from=nvme|ram]: a miss on an expert whose largest gate
 *                    weight in the call is below G computes from its low-bit copy (a store
 *                    written with --lowbit-copies); stats count "substituted"
 *   queue_depth=N, copy_streams=N, scratch_slots=N (0: the largest acquire seen fits)
 *   max_tokens=N     the most tokens one strata_api_moe_forward call takes (256)
 * Errors: EBUDGET with the numbers when a budget cannot hold top_k experts, EINVAL for a
 * bad option or policy (naming it).
 */
int32_t strata_api_engine_open(strata_api_store *s, uint64_t vram_bytes, uint64_t ram_bytes, const char *place,
			       const char *evict, const char *prefetch, const char *options,
			       strata_api_engine **out);
void strata_api_engine_close(strata_api_engine *e);
/* 1 when experts live in GPU memory and computation runs there (activations are then
 * device pointers), 0 on the host path. */
int32_t strata_api_engine_on_gpu(const strata_api_engine *e);
/* The canonical configuration name ("place=static,evict=lru,prefetch=lookahead-depth=2"). */
const char *strata_api_engine_name(const strata_api_engine *e);

/*
 * Step by step, for callers with kernels of their own.  acquire: before MoE layer
 * `moe_layer` of step `token` (a counter the caller advances per forward pass): hand the
 * prefetch policy the hints (n_hints triples: the MoE layer a prediction is for, > moe_layer,
 * the expert, a score 0..1; NULL when n_hints is 0), make the n distinct experts resident,
 * pin them, and write their extent pointers (device pointers on the GPU) to ptrs[n] and
 * formats to fmts[n] (either may be NULL).  Blocks until they are in place.  release: unpin
 * them after the computation (on the GPU: after the work that reads them has finished, e.g.
 * the stream synchronized: the prefetches release lets go start at once and may overwrite
 * them; strata_api_moe_forward does this).
 * A second acquire before release fails with EINVAL.
 */
int32_t strata_api_engine_acquire(strata_api_engine *e, uint64_t token, uint32_t moe_layer,
				  const uint32_t *experts, uint32_t n, const uint32_t *hint_layer,
				  const uint32_t *hint_expert, const float *hint_score, uint32_t n_hints,
				  const void **ptrs, uint8_t *fmts);
int32_t strata_api_engine_release(strata_api_engine *e, uint64_t token, uint32_t moe_layer);

/*
 * One MoE layer's routed experts, the whole step in one call: acquire the distinct experts
 * of ids, run the fused layer (GPU kernels when the engine is on the GPU, else the CPU
 * reference), release.  For t < n_tokens and j < top_k:
 *   y[t] += weights[t * top_k + j] * expert_{ids[t * top_k + j]}(x[t])
 * x and y: n_tokens x hidden float32, row-major, caller-owned: device pointers on the GPU
 * path, host pointers on the host path; y is accumulated into (zero it for a plain output).
 * ids (int32, -1 = no expert) and weights (float32): host arrays of n_tokens x top_k.
 * stream: the caller's cudaStream_t as an integer (0: the legacy default stream); the
 * kernels are enqueued on it; ignored on the host path.  While some expert is not resident
 * in VRAM, the call waits for these kernels before its release (the engine may then
 * overwrite memory they read, and starts the prefetch reads the release lets go, which run
 * while the caller computes the next layer); once every expert is resident (preloaded, or
 * promoted by the placement policy) the call returns without waiting for them.  hints as for acquire.  Errors name the layer (EINVAL for an id out of range,
 * ESHAPE for top_k larger than the model's or n_tokens over max_tokens).
 */
int32_t strata_api_moe_forward(strata_api_engine *e, uint64_t token, uint32_t moe_layer, uint32_t n_tokens,
			       uint32_t top_k, const int32_t *ids, const float *weights, const float *x, float *y,
			       uint64_t stream, const uint32_t *hint_layer, const uint32_t *hint_expert,
			       const float *hint_score, uint32_t n_hints);

/* The engine's counters as one JSON object (accesses, hits_vram, ..., the replay columns'
 * names) into buf; returns the length it needs (excluding the NUL), or a negative status.
 * buf may be NULL with len 0 to ask the length. */
int32_t strata_api_engine_stats(const strata_api_engine *e, char *buf, uint32_t len);

/* ---- routing traces from a running model -------------------------------------------- */

typedef struct strata_api_recorder strata_api_recorder;

/*
 * Start recording a routing trace to path (".strace" binary, ".jsonl" text twin), written
 * to path.tmp and renamed by strata_api_recorder_finish.  pred_depth / pred_topn: the
 * lookahead predictions the model supplies per layer (0, 0: none).  model may be NULL.
 */
int32_t strata_api_recorder_open(const char *path, uint32_t n_moe_layers, uint32_t n_experts, uint32_t top_k,
				 uint32_t pred_depth, uint32_t pred_topn, const char *model,
				 strata_api_recorder **out);
/*
 * One MoE layer of the current step: n_tokens x top_k ids (int32) and router weights
 * (float32, may be NULL), and when the recorder has predictions, pred_ids / pred_scores of
 * n_tokens x pred_depth x pred_topn: the experts predicted at this layer for layer + d
 * (d = 1..pred_depth; -1 pads; NULL: none).  Host arrays.
 */
int32_t strata_api_recorder_layer(strata_api_recorder *r, uint32_t moe_layer, uint32_t n_tokens,
				  const int32_t *ids, const float *weights, const int32_t *pred_ids,
				  const float *pred_scores);
/* End the step: every MoE layer must have been given; writes n_tokens records with request
 * req, positions pos0, pos0 + 1, ... and phase 0 (prefill) or 1 (decode). */
int32_t strata_api_recorder_step(strata_api_recorder *r, uint32_t req, uint32_t pos0, int32_t phase);
/* Tokens written so far. */
uint64_t strata_api_recorder_count(const strata_api_recorder *r);
/* Finish (header, checksum, fsync, rename) and free; commit 0 aborts (removes path.tmp). */
int32_t strata_api_recorder_finish(strata_api_recorder *r, int32_t commit);

#ifdef __cplusplus
}
#endif
#endif
