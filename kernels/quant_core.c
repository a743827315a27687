/*
 * Format-independent half of quant.h: the traits table, matrix and expert
 * layouts, whole-matrix quantize/dequantize over the per-row reference
 * functions, f32/bf16 passthrough, and the CPU reference SwiGLU expert.
 * The tier formats' row functions live in quant_tiers.c, the scalar ones' in
 * quant_scalar.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "quant_scalar.h"
#include "quant_tiers.h"

static int f32_quantize_rows(const float *w, uint32_t rows, uint32_t cols, const float *imatrix, void *codes,
			     void *scales)
{
	size_t n = (size_t)rows * cols;
	for (size_t i = 0; i < n; i++)
		if (!isfinite(w[i]))
			return -1;
	memcpy(codes, w, n * sizeof(float));
	return 0;
}

static void f32_dequantize_row(const void *codes, const void *scales, uint32_t cols, float *out)
{
	memcpy(out, codes, cols * sizeof(float));
}

static int bf16_quantize_rows(const float *w, uint32_t rows, uint32_t cols, const float *imatrix, void *codes,
			      void *scales)
{
	uint16_t *o = codes;
	size_t n = (size_t)rows * cols;
	for (size_t i = 0; i < n; i++) {
		if (!isfinite(w[i]))
			return -1;
		o[i] = strata_f32_to_bf16(w[i]);
	}
	return 0;
}

static void bf16_dequantize_row(const void *codes, const void *scales, uint32_t cols, float *out)
{
	const uint16_t *c = codes;
	for (uint32_t i = 0; i < cols; i++)
		out[i] = strata_bf16_to_f32(c[i]);
}

static const struct strata_fmt_traits fmt_f32 = {
	.name = "f32", .block = 1, .code_bytes = 4, .scale_bytes = 0, .bpw = 32.0,
	.quantize_rows = f32_quantize_rows, .dequantize_row = f32_dequantize_row,
};
static const struct strata_fmt_traits fmt_bf16 = {
	.name = "bf16", .block = 1, .code_bytes = 2, .scale_bytes = 0, .bpw = 16.0,
	.quantize_rows = bf16_quantize_rows, .dequantize_row = bf16_dequantize_row,
};

static const struct strata_fmt_traits *const fmt_table[STRATA_FMT_COUNT] = {
	[STRATA_FMT_F32] = &fmt_f32,
	[STRATA_FMT_BF16] = &fmt_bf16,
	[STRATA_FMT_HOT] = &strata_fmt_hot,
	[STRATA_FMT_WARM] = &strata_fmt_warm,
	[STRATA_FMT_COLD] = &strata_fmt_cold,
	[STRATA_FMT_Q4] = &strata_fmt_q4,
	[STRATA_FMT_Q3] = &strata_fmt_q3,
};

const struct strata_fmt_traits *strata_fmt_traits(int fmt)
{
	return fmt >= 0 && fmt < STRATA_FMT_COUNT ? fmt_table[fmt] : NULL;
}

int strata_fmt_from_name(const char *name)
{
	for (int f = 0; f < STRATA_FMT_COUNT; f++)
		if (!strcmp(fmt_table[f]->name, name))
			return f;
	return -1;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

int strata_matrix_layout(int fmt, uint32_t rows, uint32_t cols, struct strata_matrix_layout *out)
{
	const struct strata_fmt_traits *t = strata_fmt_traits(fmt);
	if (!t || !rows || !cols)
		return -2;
	uint32_t pc = strata_fmt_padded_cols(fmt, cols);
	uint64_t blocks = (uint64_t)rows * (pc / t->block);
	memset(out, 0, sizeof(*out));
	out->rows = rows;
	out->cols = cols;
	out->padded_cols = pc;
	out->codes_off = 0;
	out->codes_bytes = blocks * t->code_bytes;
	out->scales_off = align_up(out->codes_bytes, 16);
	out->scales_bytes = blocks * t->scale_bytes;
	out->bytes = align_up(out->scales_off + out->scales_bytes, 16);
	return 0;
}

int strata_expert_layout(int fmt, uint32_t hidden, uint32_t inter, struct strata_expert_layout *out)
{
	memset(out, 0, sizeof(*out));
	out->fmt = fmt;
	if (strata_matrix_layout(fmt, inter, hidden, &out->gate) ||
	    strata_matrix_layout(fmt, inter, hidden, &out->up) ||
	    strata_matrix_layout(fmt, hidden, inter, &out->down))
		return -2;
	out->gate_off = 0;
	out->up_off = align_up(out->gate.bytes, STRATA_MATRIX_ALIGN);
	out->down_off = align_up(out->up_off + out->up.bytes, STRATA_MATRIX_ALIGN);
	out->payload = out->down_off + out->down.bytes;
	out->bytes = align_up(out->payload, STRATA_EXTENT_ALIGN);
	return 0;
}

int strata_quantize_matrix_rows(int fmt, const float *w, uint32_t row0, uint32_t nrows, uint32_t rows, uint32_t cols,
				const float *imatrix, void *dst, size_t dst_bytes, struct strata_quant_acc *acc)
{
	const struct strata_fmt_traits *t = strata_fmt_traits(fmt);
	struct strata_matrix_layout L;
	if (!t || !t->quantize_rows || strata_matrix_layout(fmt, rows, cols, &L) || dst_bytes < L.bytes ||
	    row0 > rows || nrows > rows - row0)
		return -2;
	if (!nrows)
		return 0;
	uint32_t pc = L.padded_cols, nb = pc / t->block;
	/* Rows go to the format in batches (one encoder setup per batch): all of
	 * them straight from w when no padding is needed, else QROWS at a time
	 * through a padded copy. */
	enum { QROWS = 32 };
	uint32_t batch = pc == cols ? nrows : (nrows < QROWS ? nrows : QROWS);
	float *row = NULL, *imx = NULL, *dq = NULL;
	if (pc != cols)
		row = calloc((size_t)batch * pc, sizeof(float));
	if (acc)
		dq = malloc(pc * sizeof(float));
	if ((pc != cols && !row) || (acc && !dq)) {
		free(row);
		free(dq);
		return -2;
	}
	if (imatrix && pc != cols) {
		imx = calloc(pc, sizeof(float));
		if (!imx) {
			free(row);
			free(dq);
			return -2;
		}
		memcpy(imx, imatrix, cols * sizeof(float));
	}
	uint8_t *codes = (uint8_t *)dst + L.codes_off, *scales = (uint8_t *)dst + L.scales_off;
	struct strata_quant_acc a = acc ? *acc : (struct strata_quant_acc){ 0 };
	int rc = 0;
	for (uint32_t r0 = 0; r0 < nrows && !rc; r0 += batch) {
		uint32_t nr = nrows - r0 < batch ? nrows - r0 : batch;
		const float *src = w + (uint64_t)r0 * cols;
		if (row) {
			for (uint32_t r = 0; r < nr; r++)
				memcpy(row + (size_t)r * pc, src + (size_t)r * cols, cols * sizeof(float));
			src = row;
		}
		uint8_t *c = codes + (uint64_t)(row0 + r0) * nb * t->code_bytes;
		uint8_t *s = scales + (uint64_t)(row0 + r0) * nb * t->scale_bytes;
		int qr = t->quantize_rows(src, nr, pc, imx ? imx : imatrix, c, s);
		if (qr) {
			rc = qr == -2 ? -2 : -1; /* -1 NaN/Inf input, -2 no memory */
			break;
		}
		for (uint32_t r = 0; acc && r < nr; r++) {
			const float *x = src + (size_t)r * pc;
			t->dequantize_row(c + (size_t)r * nb * t->code_bytes, s + (size_t)r * nb * t->scale_bytes, pc, dq);
			for (uint32_t i = 0; i < cols; i++) {
				a.dot += (double)x[i] * dq[i];
				a.nw += (double)x[i] * x[i];
				a.nq += (double)dq[i] * dq[i];
				a.nd += ((double)x[i] - dq[i]) * ((double)x[i] - dq[i]);
			}
		}
	}
	if (acc && !rc)
		*acc = a;
	free(row);
	free(imx);
	free(dq);
	return rc;
}

void strata_quant_acc_stats(const struct strata_quant_acc *a, struct strata_quant_stats *out)
{
	out->cosine = a->nw > 0 && a->nq > 0 ? a->dot / sqrt(a->nw * a->nq) : (a->nw == 0 && a->nq == 0 ? 1.0 : 0.0);
	out->rel_rmse = a->nw > 0 ? sqrt(a->nd / a->nw) : 0.0;
}

int strata_quantize_matrix(int fmt, const float *w, uint32_t rows, uint32_t cols,
			   const float *imatrix, void *dst, size_t dst_bytes,
			   struct strata_quant_stats *stats)
{
	struct strata_matrix_layout L;
	if (!strata_fmt_traits(fmt) || strata_matrix_layout(fmt, rows, cols, &L) || dst_bytes < L.bytes)
		return -2;
	memset(dst, 0, L.bytes);
	struct strata_quant_acc acc = { 0 };
	int rc = strata_quantize_matrix_rows(fmt, w, 0, rows, rows, cols, imatrix, dst, dst_bytes, stats ? &acc : NULL);
	if (rc)
		memset(dst, 0, L.bytes);
	else if (stats)
		strata_quant_acc_stats(&acc, stats);
	return rc;
}

int strata_dequantize_matrix(int fmt, const void *src, uint32_t rows, uint32_t cols, float *out)
{
	const struct strata_fmt_traits *t = strata_fmt_traits(fmt);
	struct strata_matrix_layout L;
	if (!t || !t->dequantize_row || strata_matrix_layout(fmt, rows, cols, &L))
		return -2;
	uint32_t pc = L.padded_cols, nb = pc / t->block;
	float *row = pc != cols ? malloc(pc * sizeof(float)) : NULL;
	if (pc != cols && !row)
		return -2;
	const uint8_t *codes = (const uint8_t *)src + L.codes_off;
	const uint8_t *scales = (const uint8_t *)src + L.scales_off;
	for (uint32_t r = 0; r < rows; r++) {
		float *o = row ? row : out + (uint64_t)r * cols;
		t->dequantize_row(codes + (uint64_t)r * nb * t->code_bytes,
				  scales + (uint64_t)r * nb * t->scale_bytes, pc, o);
		if (row)
			memcpy(out + (uint64_t)r * cols, row, cols * sizeof(float));
	}
	free(row);
	return 0;
}

/* y[n x rows] = x[n x cols] * W^T, W packed; rows dequantized one at a time. */
static int matmul_ref(int fmt, const void *packed, uint32_t rows, uint32_t cols,
		      const float *x, uint32_t n, float *y)
{
	const struct strata_fmt_traits *t = strata_fmt_traits(fmt);
	struct strata_matrix_layout L;
	if (!t || !t->dequantize_row || strata_matrix_layout(fmt, rows, cols, &L))
		return -2;
	uint32_t pc = L.padded_cols, nb = pc / t->block;
	float *row = malloc(pc * sizeof(float));
	if (!row)
		return -2;
	const uint8_t *codes = (const uint8_t *)packed + L.codes_off;
	const uint8_t *scales = (const uint8_t *)packed + L.scales_off;
	for (uint32_t r = 0; r < rows; r++) {
		t->dequantize_row(codes + (uint64_t)r * nb * t->code_bytes,
				  scales + (uint64_t)r * nb * t->scale_bytes, pc, row);
		for (uint32_t j = 0; j < n; j++) {
			const float *xj = x + (uint64_t)j * cols;
			double acc = 0;
			for (uint32_t i = 0; i < cols; i++)
				acc += (double)row[i] * xj[i];
			y[(uint64_t)j * rows + r] = (float)acc;
		}
	}
	free(row);
	return 0;
}

int strata_expert_forward_ref(int fmt, const void *extent, uint32_t hidden, uint32_t inter,
			      const float *x, uint32_t n, const float *weights, float *y)
{
	struct strata_expert_layout E;
	if (strata_expert_layout(fmt, hidden, inter, &E))
		return -2;
	float *g = malloc((size_t)n * inter * sizeof(float));
	float *u = malloc((size_t)n * inter * sizeof(float));
	float *d = malloc((size_t)n * hidden * sizeof(float));
	int rc = -2;
	if (!g || !u || !d)
		goto out;
	const uint8_t *base = extent;
	if (matmul_ref(fmt, base + E.gate_off, inter, hidden, x, n, g) ||
	    matmul_ref(fmt, base + E.up_off, inter, hidden, x, n, u))
		goto out;
	for (uint64_t i = 0; i < (uint64_t)n * inter; i++) {
		float a = g[i];
		g[i] = a / (1.0f + expf(-a)) * u[i];
	}
	if (matmul_ref(fmt, base + E.down_off, hidden, inter, g, n, d))
		goto out;
	for (uint32_t j = 0; j < n; j++) {
		float wj = weights ? weights[j] : 1.0f;
		for (uint32_t i = 0; i < hidden; i++)
			y[(uint64_t)j * hidden + i] += wj * d[(uint64_t)j * hidden + i];
	}
	rc = 0;
out:
	free(g);
	free(u);
	free(d);
	return rc;
}

/* ---- IEEE half <-> float ------------------------------------------------ */

float strata_f16_to_f32(uint16_t h)
{
	/* exponent rebias with the denormal case done by one float subtraction
	 * (F. Giesen's half_to_float_fast): branches only on Inf/NaN and zero/denormal */
	union { uint32_t u; float f; } o, magic = { .u = 113u << 23 };
	const uint32_t shifted_exp = 0x7c00u << 13;
	o.u = (uint32_t)(h & 0x7fff) << 13;
	uint32_t exp = shifted_exp & o.u;
	o.u += (127u - 15u) << 23;
	if (exp == shifted_exp) {
		o.u += (128u - 16u) << 23;
	} else if (exp == 0) {
		o.u += 1u << 23;
		o.f -= magic.f;
	}
	o.u |= (uint32_t)(h & 0x8000) << 16;
	return o.f;
}

uint16_t strata_f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return sign | 0x7e00; /* NaN */
	if (a >= 0x477ff000u)
		return sign | 0x7c00; /* overflow to inf (includes inf) */
	if (a < 0x38800000u) {
		/* subnormal or zero: round a / 2^-24 to nearest even */
		if (a < 0x33000000u)
			return sign;
		uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
		uint32_t shift = 126 - e; /* 14..24 */
		uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return sign | (uint16_t)r;
	}
	uint32_t r = ((a >> 13) - (112u << 10));
	uint32_t rem = a & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
		r++;
	return sign | (uint16_t)r;
}
