/*
 * The packed shard store: the on-disk form of a model.
 *
 * A model directory holds numbered shard files "shard-00000.strata", ... Each
 * shard starts with a versioned header:
 *   magic "STRATASH", format version, header size, shard index and count,
 *   the model spec, the tier table (one byte per routed expert of the whole
 *   model: 0 hot, 1 warm, 2 cold; it is also each expert's default storage
 *   tier), the per-expert format table, and this shard's directory: one entry
 *   per routed expert (layer, expert, format, offset, bytes, xxh64) and per
 *   non-routed tensor (name, dtype, shape, offset, bytes, xxh64), then an xxh64
 *   of the header itself.  Every routed expert is one contiguous extent
 *   aligned to 4 KiB (see kernels/quant.h for the layout inside it), so one
 *   O_DIRECT read or one PCIe copy moves one expert.
 *
 * Writers create "shard-N.strata.tmp", fsync and rename on success; a failed
 * or interrupted write leaves no file that looks like a valid shard.
 * Readers verify magic, version, header checksum, and that every extent lies
 * inside the file; extent checksums are verified on read (optionally).
 */
#ifndef STRATA_STORE_H
#define STRATA_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/error.h"
#include "strata/model.h"
#include "strata/types.h"

/* 2: tier-format codebook computed (kernels/FORMATS.md, format version 2);
 * shards of version 1 decode to different weights and are refused.
 * 3: q3 codes as whole 3-bit fields (kernels/quant_scalar.h); a version 2
 * shard is read when no expert of its model is q3, else refused. */
#define STRATA_STORE_VERSION 3
#define STRATA_STORE_VERSION_MIN 2
#define STRATA_TENSOR_NAME_MAX 96

/* Where one routed expert or tensor lives. */
struct strata_extent {
	uint32_t shard;     /* shard index */
	uint32_t fmt;       /* enum strata_fmt */
	uint64_t offset;    /* byte offset in the shard, 4 KiB aligned for experts */
	uint64_t bytes;     /* extent length (experts: padded to 4 KiB) */
	uint64_t payload;   /* meaningful bytes (<= bytes) */
	uint64_t xxh64;     /* checksum of the payload */
};

struct strata_tensor_info {
	char name[STRATA_TENSOR_NAME_MAX];
	uint32_t fmt;       /* STRATA_FMT_F32 or STRATA_FMT_BF16 */
	uint32_t ndim;
	uint64_t shape[4];
	struct strata_extent ext;
};

/* ---- reading ---------------------------------------------------------- */

struct strata_store;

/* Open every shard in dir, validate headers, build the expert and tensor
 * index.  Errors name the shard file and the cause (bad magic, version,
 * checksum, truncated file, missing shard, shards of different models). */
int strata_store_open(const char *dir, struct strata_store **out, struct strata_error *err);
void strata_store_close(struct strata_store *s);

const struct strata_model_spec *strata_store_spec(const struct strata_store *s);
const char *strata_store_dir(const struct strata_store *s);
uint32_t strata_store_shard_count(const struct strata_store *s);
const char *strata_store_shard_path(const struct strata_store *s, uint32_t shard);
/* The tier table, one byte per expert id (strata_eid). */
const uint8_t *strata_store_tier_table(const struct strata_store *s);
/* Expert format (enum strata_fmt) per expert id. */
const uint8_t *strata_store_fmt_table(const struct strata_store *s);

/* Where expert (layer, e) lives.  The pointer stays valid until close. */
const struct strata_extent *strata_store_expert(const struct strata_store *s, uint32_t layer, uint32_t e);
/* Its low-bit copy (a smaller format, STRATA_FMT_COLD as written by
 * `strata synth|quantize --lowbit-copies`), stored beside it in the same
 * shard; NULL when the store holds none for it.  ext->fmt is the copy's
 * format.  The engine reads it instead of the expert when its precision-on-
 * miss option says so (strata/engine.h, on_miss). */
const struct strata_extent *strata_store_copy(const struct strata_store *s, uint32_t layer, uint32_t e);
uint32_t strata_store_tensor_count(const struct strata_store *s);
const struct strata_tensor_info *strata_store_tensor(const struct strata_store *s, uint32_t i);
const struct strata_tensor_info *strata_store_find_tensor(const struct strata_store *s, const char *name);

/* A read-only fd for a shard: O_DIRECT when direct, else buffered.  Owned by
 * the store (do not close); opened lazily and cached. */
int strata_store_shard_fd(struct strata_store *s, uint32_t shard, bool direct, struct strata_error *err);

/* Synchronous read of one extent into buf (4 KiB aligned, ext->bytes long),
 * through O_DIRECT when direct; verifies the xxh64 when verify. */
int strata_store_read_extent(struct strata_store *s, const struct strata_extent *ext, void *buf,
			     bool direct, bool verify, struct strata_error *err);
/* Check a payload already in memory against its extent's checksum. */
int strata_store_verify_extent(const struct strata_store *s, const struct strata_extent *ext,
			       const void *buf, struct strata_error *err);

/* How reads of expert extents from shard files are checked against their
 * checksums (XXH3 runs at many GB/s, far above any disk, so checking is the
 * default): FIRST checks the first read of each expert through this store
 * handle (a later read of the same bytes, after an eviction, is not checked
 * again), EVERY checks every read (`--verify`), OFF none (`--no-verify`;
 * results say so).  A failed check fails the move: STRATA_ECORRUPT naming the
 * shard and offset. */
enum strata_verify {
	STRATA_VERIFY_FIRST = 0,
	STRATA_VERIFY_EVERY = 1,
	STRATA_VERIFY_OFF = 2,
};
const char *strata_verify_name(int mode); /* "first", "every", "off" */

struct strata_move;
/* Arm mv's check (strata/mover.h) for a read of expert extent ext under mode;
 * returns whether it did (FIRST marks the expert as checked). */
bool strata_store_arm_check(struct strata_store *s, const struct strata_extent *ext, int mode,
			    struct strata_move *mv);

/* A 64-bit key of a model directory's content: the hash of shard 0's fixed
 * header, which holds the store id (random per write) and the sizes.  Sweeps
 * key their rows on it. */
int strata_store_content_key(const char *dir, uint64_t *key, struct strata_error *err);

/* Per-tier totals, for `strata inspect` and the engine's budget checks. */
struct strata_store_tier_summary {
	uint64_t experts[STRATA_TIER_COUNT];
	uint64_t bytes[STRATA_TIER_COUNT];     /* extent bytes (4 KiB padded) */
	uint64_t payload[STRATA_TIER_COUNT];   /* packed bytes */
	uint64_t params[STRATA_TIER_COUNT];
	uint64_t tensor_bytes;                 /* non-routed tensors stored */
	uint64_t copies, copy_bytes;           /* low-bit copies (strata_store_copy) and their extent bytes */
};
void strata_store_summary(const struct strata_store *s, struct strata_store_tier_summary *out);

/* ---- writing ---------------------------------------------------------- */

struct strata_store_writer;

struct strata_store_writer_config {
	const char *dir;            /* created if missing */
	struct strata_model_spec spec;
	const uint8_t *tier_table;  /* per expert id, enum strata_tier; NULL: all cold */
	const uint8_t *fmt_table;   /* per expert id, enum strata_fmt; NULL: fmt of tier (hot/warm/cold) */
	uint64_t shard_bytes;       /* target shard size; 0: 4 GiB */
	uint32_t n_tensors;         /* non-routed tensors that will be added */
	const struct strata_tensor_info *tensors; /* their names/fmt/shape (ext ignored) */
	bool force;                 /* replace a model already in dir (else STRATA_EEXIST) */
	/* Store beside every expert whose extent is larger than the cold format's
	 * a cold-format copy of it (strata_store_copy), placed right after the
	 * expert in the same shard; each must be added with add_copy. */
	bool lowbit_copies;
};

/* Plans every shard's layout up front (sizes are known from the spec and the
 * format table), so experts and tensors may be added in any order.  Locks dir
 * (strata_outlock_take: a second writer gets STRATA_EBUSY naming the holder's
 * pid) until free/abort.  A model already in dir is refused without
 * cfg->force; with it, the new model is built beside the old one and finish
 * swaps them in one step, so an interrupted or killed write leaves the old
 * model usable. */
int strata_store_writer_open(const struct strata_store_writer_config *cfg,
			     struct strata_store_writer **out, struct strata_error *err);
/* data: the packed expert payload, exactly strata_expert_layout().payload bytes. */
int strata_store_writer_add_expert(struct strata_store_writer *w, uint32_t layer, uint32_t e,
				   const void *data, size_t bytes, struct strata_error *err);
/* Same, from a buffer the writer may write whole: data 4 KiB aligned and
 * buf_bytes >= the padded extent (strata_expert_layout().bytes); the writer
 * zeroes the padding after the payload and writes the extent with O_DIRECT
 * (no page-cache copy) where the filesystem allows, else like add_expert. */
int strata_store_writer_add_expert_aligned(struct strata_store_writer *w, uint32_t layer, uint32_t e,
					   void *data, size_t buf_bytes, struct strata_error *err);
/* Whether the plan holds a low-bit copy of (layer, e) (cfg->lowbit_copies),
 * and add it: data is its payload in STRATA_FMT_COLD. */
bool strata_store_writer_has_copy(const struct strata_store_writer *w, uint32_t layer, uint32_t e);
int strata_store_writer_add_copy(struct strata_store_writer *w, uint32_t layer, uint32_t e,
				 const void *data, size_t bytes, struct strata_error *err);
int strata_store_writer_add_tensor(struct strata_store_writer *w, const char *name,
				   const void *data, size_t bytes, struct strata_error *err);
/* Write headers, fsync, rename .tmp files into place.  Fails if anything
 * planned was never added.  add_expert/add_tensor may be called from several
 * threads at once for different experts/tensors (each does its own pwrite at
 * a planned offset); finish and abort must not race with them.  finish does
 * not free the writer: end with strata_store_writer_free (or _abort). */
int strata_store_writer_finish(struct strata_store_writer *w, struct strata_error *err);
/* Abandon: remove every .tmp file.  Safe after a failed finish. */
void strata_store_writer_abort(struct strata_store_writer *w);
/* Shards the plan has (known from open on). */
uint32_t strata_store_writer_shard_count(const struct strata_store_writer *w);
/* Free a writer; same as abort (removes .tmp files unless finish succeeded). */
void strata_store_writer_free(struct strata_store_writer *w);

/* ---- low level: one shard header -------------------------------------- */

/*
 * On-disk header of one shard (all integers little-endian, fixed-size
 * records, reserved bytes written as zero and ignored on read):
 *
 *   fixed part   STRATA_SHARD_FIXED_BYTES: magic, version, sizes, shard
 *                index/count, store id, checksum algorithm, counts and the
 *                offsets of the sections below
 *   spec         STRATA_SHARD_SPEC_BYTES: the model spec
 *   tier table   one byte per routed expert of the whole model, padded to 8
 *   fmt table    one byte per routed expert, padded to 8
 *   experts      STRATA_SHARD_EXPERT_REC bytes per expert stored in this shard,
 *                then the same record per low-bit copy stored here (n_copies
 *                of them, only with STRATA_SHARD_F_COPIES: layer, expert,
 *                the copy's format and extent; a copy lies in its expert's
 *                shard, in a smaller format than the expert's own)
 *   tensors      STRATA_SHARD_TENSOR_REC bytes per tensor stored in this shard
 *   checksum     XXH3_64bits of every header byte before it
 *
 * Data starts at the next 4 KiB boundary; every extent (expert or tensor)
 * starts on a 4 KiB boundary and its length is padded to 4 KiB, so the file
 * size is a multiple of 4 KiB.  The store id is random per write: shards of
 * two different writes never open together.  Extent checksums are
 * XXH3_64bits of the payload (the "xxh64" fields hold that 64-bit hash).
 */
#define STRATA_SHARD_MAGIC "STRATASH"
#define STRATA_SHARD_FIXED_BYTES 256u
#define STRATA_SHARD_SPEC_BYTES 128u
#define STRATA_SHARD_EXPERT_REC 48u
#define STRATA_SHARD_TENSOR_REC 176u
#define STRATA_SHARD_CSUM_XXH3 1u
/* Feature flags of the fixed part (any other bit set: a newer writer, refused). */
#define STRATA_SHARD_F_COPIES 1u   /* the expert section ends with n_copies low-bit copies */

struct strata_shard_expert {
	uint32_t layer, expert;
	struct strata_extent ext; /* ext.shard is the header's shard index */
};

struct strata_shard_header {
	uint32_t version;
	uint64_t header_size;     /* bytes including the trailing checksum */
	uint64_t data_off;        /* first extent byte, 4 KiB aligned */
	uint64_t file_size;       /* the shard file's exact size */
	uint32_t shard_index, shard_count;
	uint64_t store_id;
	uint64_t created_unix;
	uint32_t n_tensors_total; /* tensors in the whole store */
	struct strata_model_spec spec;
	uint32_t n_total_experts; /* strata_model_total_experts(&spec) */
	uint8_t *tier_table;      /* n_total_experts bytes */
	uint8_t *fmt_table;       /* n_total_experts bytes */
	uint32_t n_experts;       /* entries in this shard */
	struct strata_shard_expert *experts;
	uint32_t flags;           /* STRATA_SHARD_F_* */
	uint32_t n_copies;        /* low-bit copies in this shard */
	struct strata_shard_expert *copies;
	uint32_t n_tensors;
	struct strata_tensor_info *tensors;
};

enum {
	/* Skip the header checksum (fuzzing reaches the field checks this way;
	 * never use it to open real files). */
	STRATA_PARSE_NO_CHECKSUM = 1u << 0,
};

/*
 * Parse and validate one shard header held in buf[0, len).  file_size is the
 * shard's real size (extents must lie inside it and it must equal the size the
 * header records; 0 skips those two checks).  name is used in error messages.
 * Every field is checked (magic, version, sizes and offsets inside the header,
 * spec, tables, expert ids, formats and sizes against the spec, extents
 * 4 KiB aligned, inside the data area and not overlapping, tensor names and
 * shapes); a bad header gives STRATA_ECORRUPT or STRATA_EVERSION.  If len is
 * shorter than the header says, STRATA_ECORRUPT says how many bytes it needs.
 * On success *out is allocated; free it with strata_store_header_free.
 */
int strata_store_parse_header(const void *buf, size_t len, uint64_t file_size, const char *name,
			      unsigned flags, struct strata_shard_header **out, struct strata_error *err);
void strata_store_header_free(struct strata_shard_header *h);
/* Header size a shard with these counts needs (tests, tools); a shard with
 * low-bit copies counts them in n_experts. */
uint64_t strata_store_header_bytes(uint32_t n_total_experts, uint32_t n_experts, uint32_t n_tensors);

/*
 * Test hook: when > 0, the writer's data writes fail with ENOSPC once this
 * many bytes have been written (simulates a full disk without root).
 */
extern uint64_t strata_store_fail_after_bytes;
/* Test hook: when > 0, the writer raises SIGKILL before its rename number N + 1
 * (shard renames, then the swap of a replaced model): a write killed between
 * its renames, without root or strace. */
extern int strata_store_kill_after_renames;

#endif
