/*
 * Safetensors models, read and written in a streaming way.
 *
 * A .safetensors file is: an 8-byte little-endian header length N, N bytes of
 * JSON header (an object mapping tensor names to {"dtype", "shape",
 * "data_offsets": [begin, end]} plus an optional "__metadata__" object of
 * string values), then the data region; offsets are relative to the data
 * region.  A model shipped in several files comes with
 * "model.safetensors.index.json" ({"metadata": {...}, "weight_map": {tensor:
 * file}}).
 *
 * strata_safetensors_open() reads only the headers.  It checks everything a header
 * claims against the file: header length inside the file (and at most 100
 * MiB), strict JSON, known dtype, shape product times dtype size equal to
 * end - begin (no overflow), every extent inside the data region, no two
 * extents overlapping, no duplicate names, and for an index: every listed
 * file present and every tensor in the file it is listed under.  Errors name
 * the file and the cause ("x.safetensors: tensor 'a.weight': data_offsets
 * [0, 64) overlap tensor 'b.weight' [32, 96)").  Gaps between extents are
 * allowed (some writers align data).
 *
 * Tensor data is never mapped or loaded whole: strata_safetensors_read_f32() reads any
 * element range with pread and converts BF16/F16/F32/F64/FP8 to float in place
 * (no extra buffer), so a caller holds only what it asks for.  Reads on one
 * handle may run from several threads at once.
 */
#ifndef STRATA_SAFETENSORS_H
#define STRATA_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/error.h"

#define STRATA_SAFETENSORS_MAX_DIMS 8
#define STRATA_SAFETENSORS_MAX_HEADER (100u << 20)

enum strata_safetensors_dtype {
	STRATA_SAFETENSORS_BOOL = 0,
	STRATA_SAFETENSORS_U8,
	STRATA_SAFETENSORS_I8,
	STRATA_SAFETENSORS_F8_E4M3,
	STRATA_SAFETENSORS_F8_E5M2,
	STRATA_SAFETENSORS_I16,
	STRATA_SAFETENSORS_U16,
	STRATA_SAFETENSORS_F16,
	STRATA_SAFETENSORS_BF16,
	STRATA_SAFETENSORS_I32,
	STRATA_SAFETENSORS_U32,
	STRATA_SAFETENSORS_F32,
	STRATA_SAFETENSORS_F64,
	STRATA_SAFETENSORS_I64,
	STRATA_SAFETENSORS_U64,
	STRATA_SAFETENSORS_DTYPE_COUNT,
};

const char *strata_safetensors_dtype_name(int dtype);       /* "BF16", ... or "?" */
int strata_safetensors_dtype_from_name(const char *name);   /* -1 if unknown */
uint32_t strata_safetensors_dtype_size(int dtype);          /* bytes per element, 0 if unknown */
/* true for the dtypes strata_safetensors_read_f32 converts: F16, BF16, F32, F64 and the
 * FP8 kinds F8_E4M3 (OCP "fn": no infinities) and F8_E5M2.  FP8 values come out
 * unscaled: block scales (DeepSeek-V3's weight_scale_inv) are the caller's. */
bool strata_safetensors_dtype_is_float(int dtype);

struct strata_safetensors_tensor {
	const char *name;
	int dtype;                 /* enum strata_safetensors_dtype */
	uint32_t ndim;
	uint64_t shape[STRATA_SAFETENSORS_MAX_DIMS];
	uint64_t numel;
	uint32_t file;             /* index into the model's files */
	uint64_t offset;           /* absolute byte offset in that file */
	uint64_t bytes;
};

struct strata_safetensors;

/*
 * Open a model: a .safetensors file, a *.index.json file, or a directory
 * holding model.safetensors.index.json, else model.safetensors, else all of
 * its *.safetensors files (in name order).  Reads headers only.
 */
int strata_safetensors_open(const char *path, struct strata_safetensors **out, struct strata_error *err);
/* Parse a whole file image held in memory (header checks only; data reads
 * are refused).  `what` names it in errors.  The fuzz target's entry. */
int strata_safetensors_open_image(const void *data, size_t len, const char *what, struct strata_safetensors **out,
			 struct strata_error *err);
void strata_safetensors_close(struct strata_safetensors *st);

uint32_t strata_safetensors_file_count(const struct strata_safetensors *st);
const char *strata_safetensors_file_path(const struct strata_safetensors *st, uint32_t file);
/* Tensors in name order (strcmp). */
uint32_t strata_safetensors_tensor_count(const struct strata_safetensors *st);
const struct strata_safetensors_tensor *strata_safetensors_tensor_at(const struct strata_safetensors *st, uint32_t i);
const struct strata_safetensors_tensor *strata_safetensors_find(const struct strata_safetensors *st, const char *name);
/* A "__metadata__" value of the first file (or the index's "metadata"), or NULL. */
const char *strata_safetensors_metadata(const struct strata_safetensors *st, const char *key);
/* Sum of numel over all tensors. */
uint64_t strata_safetensors_total_params(const struct strata_safetensors *st);

/* Elements [first, first + count) of t (row-major), converted to float. */
int strata_safetensors_read_f32(struct strata_safetensors *st, const struct strata_safetensors_tensor *t, uint64_t first, uint64_t count,
		       float *out, struct strata_error *err);
/* Raw bytes [off, off + bytes) of t's data. */
int strata_safetensors_read_raw(struct strata_safetensors *st, const struct strata_safetensors_tensor *t, uint64_t off, uint64_t bytes,
		       void *buf, struct strata_error *err);

/*
 * Writer, for tests and `strata quantize --make-test-model`.  Declare every
 * tensor (with dtype and shape) and any metadata first, then write each
 * tensor's data in declaration order, in as many calls as wanted; finish
 * checks everything was written, fsyncs and renames "<path>.tmp" to path.
 * abort (or any failure) removes the .tmp file.
 */
struct strata_safetensors_writer;
int strata_safetensors_writer_open(const char *path, struct strata_safetensors_writer **out, struct strata_error *err);
int strata_safetensors_writer_metadata(struct strata_safetensors_writer *w, const char *key, const char *value,
			      struct strata_error *err);
int strata_safetensors_writer_declare(struct strata_safetensors_writer *w, const char *name, int dtype, uint32_t ndim,
			     const uint64_t *shape, struct strata_error *err);
/* Append count elements of the current tensor, converted from float to its dtype
 * (float dtypes only). */
int strata_safetensors_writer_write_f32(struct strata_safetensors_writer *w, const float *data, uint64_t count,
			       struct strata_error *err);
/* Append raw bytes of the current tensor (any dtype). */
int strata_safetensors_writer_write_raw(struct strata_safetensors_writer *w, const void *data, uint64_t bytes,
			       struct strata_error *err);
int strata_safetensors_writer_finish(struct strata_safetensors_writer *w, struct strata_error *err);
void strata_safetensors_writer_abort(struct strata_safetensors_writer *w);

float strata_f8e4m3_to_f32(uint8_t b);
float strata_f8e5m2_to_f32(uint8_t b);


#endif
