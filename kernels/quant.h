/*
 * Packed weight formats, shared by the C core, the CPU reference and the CUDA
 * kernels.  This header is plain C99/C++ (no CUDA headers): block structs are
 * declared once here, their sizes are checked with static asserts, and one
 * traits table describes every format.
 *
 * Routed-expert matrices are quantized in blocks of STRATA_QK = 256 weights
 * along a row (the input dimension, K).  Rows whose length is not a multiple
 * of 256 are padded with zero weights to the next block.  A packed matrix is
 *
 *     [ codes of every block, row-major, blocks of a row contiguous ]  16-byte aligned start
 *     [ scales/tables of every block, same order ]                    16-byte aligned start
 *
 * so a GPU warp streams codes and scales with 16-byte loads from two regions.
 * An expert extent is gate | up | down (each matrix 256-byte aligned inside the
 * extent), padded to STRATA_EXTENT_ALIGN (4 KiB) so one O_DIRECT read or one
 * PCIe copy moves one expert.
 *
 * Tier formats (bits per weight including all scales, exactly on budget):
 *   hot  <= 2.8125 bpw (90 B / 256)   warm <= 2.5625 bpw (82 B / 256)
 *   cold <= 1.4375 bpw (46 B / 256)   bf16 16 bpw passthrough, f32 32 bpw
 * Fast-decode scalar formats (any tier): q4 4.5 bpw (144 B / 256), q3 3.5 bpw
 * (112 B / 256), one fp16 scale per 32 weights (quant_scalar.h).
 */
#ifndef STRATA_QUANT_H
#define STRATA_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define STRATA_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define STRATA_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define STRATA_QK 256
#define STRATA_EXTENT_ALIGN 4096u
#define STRATA_MATRIX_ALIGN 256u

enum strata_fmt {
	STRATA_FMT_F32 = 0,
	STRATA_FMT_BF16 = 1,
	STRATA_FMT_HOT = 2,   /* tier 0 */
	STRATA_FMT_WARM = 3,  /* tier 1 */
	STRATA_FMT_COLD = 4,  /* tier 2 */
	/* Fast-decode scalar group formats (quant_scalar.h), selectable for any
	 * tier in place of the trellis ones (strata synth/quantize --formats). */
	STRATA_FMT_Q4 = 5,    /* 4.5 bpw */
	STRATA_FMT_Q3 = 6,    /* 3.5 bpw */
	STRATA_FMT_COUNT = 7,
};

struct strata_quant_stats {
	double cosine;   /* between the input and its dequantized copy */
	double rel_rmse; /* ||w - dq|| / ||w|| */
};

/*
 * Reference quantizer for `rows` consecutive rows of `cols` weights each (w
 * row-major; cols a multiple of STRATA_QK after padding; the caller pads).
 * `imatrix` (cols floats, mean x^2 per input column, the same for every row)
 * weights the error, or is NULL.  Writes rows * cols/256 blocks of codes to
 * `codes` and of scales to `scales`, row after row.  Returns 0, -1 on NaN/Inf,
 * -2 out of memory.  Each row's codes are those of a call with rows = 1 (the
 * encoder's setup is shared, not its results).
 */
typedef int (*strata_quantize_rows_fn)(const float *w, uint32_t rows, uint32_t cols, const float *imatrix,
				       void *codes, void *scales);
/* Reference dequantizer for one row: the inverse layout of the above. */
typedef void (*strata_dequantize_row_fn)(const void *codes, const void *scales, uint32_t cols,
					 float *out);

struct strata_fmt_traits {
	const char *name;      /* "f32", "bf16", "hot", "warm", "cold", "q4", "q3" */
	uint32_t block;        /* weights per block: 1 for f32/bf16, STRATA_QK otherwise */
	uint32_t code_bytes;   /* code bytes per block */
	uint32_t scale_bytes;  /* scale/table bytes per block (0 for f32/bf16) */
	double bpw;            /* (code_bytes + scale_bytes) * 8 / block */
	strata_quantize_rows_fn quantize_rows;
	strata_dequantize_row_fn dequantize_row;
};

const struct strata_fmt_traits *strata_fmt_traits(int fmt); /* NULL if out of range */
int strata_fmt_from_name(const char *name);                   /* -1 if unknown */

/* Row length after padding to a whole block. */
static inline uint32_t strata_fmt_padded_cols(int fmt, uint32_t cols)
{
	return fmt >= STRATA_FMT_HOT ? (cols + STRATA_QK - 1) / STRATA_QK * STRATA_QK : cols;
}

/* Byte offsets of the two regions of a packed matrix and its total size. */
struct strata_matrix_layout {
	uint64_t codes_off, codes_bytes;
	uint64_t scales_off, scales_bytes;
	uint64_t bytes;       /* total, a multiple of 16 */
	uint32_t rows, cols, padded_cols;
};
int strata_matrix_layout(int fmt, uint32_t rows, uint32_t cols, struct strata_matrix_layout *out);

/* Layout of one routed expert: gate [inter x hidden], up [inter x hidden],
 * down [hidden x inter], each STRATA_MATRIX_ALIGN-aligned, total padded to
 * STRATA_EXTENT_ALIGN. */
struct strata_expert_layout {
	int fmt;
	struct strata_matrix_layout gate, up, down;
	uint64_t gate_off, up_off, down_off;
	uint64_t bytes;       /* extent size, multiple of STRATA_EXTENT_ALIGN */
	uint64_t payload;     /* bytes before padding */
};
int strata_expert_layout(int fmt, uint32_t hidden, uint32_t inter, struct strata_expert_layout *out);

/* Quantize a rows x cols row-major float matrix into dst (layout.bytes long).
 * Returns 0, -1 for NaN/Inf input (nothing valid written), -2 for a bad size. */
int strata_quantize_matrix(int fmt, const float *w, uint32_t rows, uint32_t cols,
			   const float *imatrix, void *dst, size_t dst_bytes,
			   struct strata_quant_stats *stats);
/* Running sums behind strata_quant_stats, so rows quantized in separate
 * pieces (strata_quantize_matrix_rows) add up to the matrix's statistics. */
struct strata_quant_acc {
	double dot, nw, nq, nd; /* sum w*dq, w*w, dq*dq, (w-dq)^2 */
};
void strata_quant_acc_stats(const struct strata_quant_acc *acc, struct strata_quant_stats *out);
/* Rows [row0, row0 + nrows) of a rows x cols matrix: w holds just those rows
 * (nrows x cols), dst is the whole packed matrix (layout.bytes), of which only
 * these rows' codes and scales are written (zero it first: padding is left
 * alone, so disjoint row ranges may be written by several threads at once).
 * The codes are those strata_quantize_matrix writes for these rows; acc (or
 * NULL) gets the rows' sums added.  Returns as strata_quantize_matrix; on
 * failure the rows' bytes are undefined and acc is unchanged. */
int strata_quantize_matrix_rows(int fmt, const float *w, uint32_t row0, uint32_t nrows, uint32_t rows, uint32_t cols,
				const float *imatrix, void *dst, size_t dst_bytes, struct strata_quant_acc *acc);
/* Dequantize a packed matrix back to rows x cols floats (padding dropped). */
int strata_dequantize_matrix(int fmt, const void *src, uint32_t rows, uint32_t cols, float *out);

/* bf16 <-> f32, round to nearest even. */
static inline uint16_t strata_f32_to_bf16(float f)
{
	union { float f; uint32_t u; } v;
	v.f = f;
	if ((v.u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((v.u >> 16) | 0x40);
	return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float strata_bf16_to_f32(uint16_t h)
{
	union { float f; uint32_t u; } v;
	v.u = (uint32_t)h << 16;
	return v.f;
}
/* IEEE half <-> f32, round to nearest even (quant_core.c). */
float strata_f16_to_f32(uint16_t h);
uint16_t strata_f32_to_f16(float f);

/*
 * CPU reference of one routed expert (SwiGLU): for each of n tokens,
 *   y += weight * down( silu(gate x) * (up x) )
 * x: n x hidden, y: n x hidden (accumulated), extent in the given format.
 * scratch: at least 2 * inter * n floats + padded row buffer; NULL to allocate.
 */
int strata_expert_forward_ref(int fmt, const void *extent, uint32_t hidden, uint32_t inter,
			      const float *x, uint32_t n, const float *weights, float *y);

#ifdef __cplusplus
}
#endif
#endif
