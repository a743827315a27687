/*
 * C reference of the fast-decode scalar formats q4 and q3 (quant_scalar.h,
 * kernels/FORMATS.md): quantize and dequantize one row.  The quantizer picks
 * each 32-weight group's scale by a small search over the code range and a
 * least-squares refit (as ggml's make_qx_quants), weighting the error by the
 * importance matrix when there is one, then codes every weight with the scale
 * as rounded to fp16, so dequantize reproduces exactly what was searched.
 */
#include <math.h>
#include <string.h>

#include "quant_scalar.h"

#define QK STRATA_QK
#define GS STRATA_SQ_GROUP

/* Best fp16 scale of one group for codes in [-nmax, nmax - 1]; writes the codes
 * (offset by nmax) to q. */
static uint16_t group_quantize(const float *x, const float *imp, int nmax, uint8_t *q)
{
	float amax = 0, vmax = 0;
	for (int i = 0; i < GS; i++)
		if (fabsf(x[i]) > amax)
			amax = fabsf(x[i]), vmax = x[i];
	if (amax == 0) {
		memset(q, nmax, GS);
		return 0;
	}
	double best_err = INFINITY;
	float best_d = 0;
	for (int is = -9; is <= 9; is++) {
		float iscale = -(nmax + 0.1f * is) / vmax;
		double sumlx = 0, suml2 = 0;
		for (int i = 0; i < GS; i++) {
			int l = (int)lrintf(iscale * x[i]);
			l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
			sumlx += (double)imp[i] * x[i] * l;
			suml2 += (double)imp[i] * l * l;
		}
		if (suml2 <= 0)
			continue;
		double err = -sumlx * sumlx / suml2; /* weighted error minus sum imp x^2 */
		if (err < best_err)
			best_err = err, best_d = (float)(sumlx / suml2);
	}
	if (fabsf(best_d) > 65504.0f)
		best_d = best_d < 0 ? -65504.0f : 65504.0f;
	uint16_t dh = strata_f32_to_f16(best_d);
	float d = strata_f16_to_f32(dh), id = d != 0 ? 1.0f / d : 0.0f;
	for (int i = 0; i < GS; i++) {
		int l = (int)lrintf(x[i] * id);
		l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
		q[i] = (uint8_t)(l + nmax);
	}
	return dh;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Place code c of weight i in a q4 / q3 block (quant_scalar.h). */
static void q4_put(uint8_t *qs, uint32_t i, uint32_t c)
{
	uint32_t g = i >> 5, t = (i >> 3) & 3, m = i & 7;
	uint8_t *w = qs + 64 * (g >> 2) + 16 * t + 4 * (g & 3);
	put32(w, get32(w) | c << (4 * (m >> 1) + 16 * (m & 1)));
}
static void q3_put(uint8_t *qs, uint32_t i, uint32_t c)
{
	uint32_t at[4];
	strata_q3_place(i, at);
	put32(qs + at[0], get32(qs + at[0]) | (c & 3u) << at[1]);
	put32(qs + at[2], get32(qs + at[2]) | (c >> 2) << at[3]);
}

static int sq_quantize_row(int fmt, const float *w, uint32_t cols, const float *imatrix, void *codes,
			   void *scales)
{
	const int nmax = fmt == STRATA_FMT_Q4 ? 8 : 4;
	const uint32_t cb = fmt == STRATA_FMT_Q4 ? STRATA_Q4_CODE_BYTES : STRATA_Q3_CODE_BYTES;
	for (uint32_t i = 0; i < cols; i++)
		if (!isfinite(w[i]) || (imatrix && (!isfinite(imatrix[i]) || imatrix[i] < 0)))
			return -1;
	for (uint32_t b = 0; b < cols / QK; b++) {
		uint8_t *qs = (uint8_t *)codes + (size_t)b * cb, q[GS];
		uint8_t *sc = (uint8_t *)scales + (size_t)b * STRATA_SQ_SCALE_BYTES;
		memset(qs, 0, cb);
		for (uint32_t g = 0; g < QK / GS; g++) {
			const float *x = w + (size_t)b * QK + g * GS;
			float imp[GS];
			double mean = 0;
			if (imatrix) {
				for (int i = 0; i < GS; i++)
					mean += imatrix[(size_t)b * QK + g * GS + i];
				mean /= GS;
			}
			for (int i = 0; i < GS; i++)
				imp[i] = imatrix && mean > 0 ? (float)((imatrix[(size_t)b * QK + g * GS + i] + 1e-3 * mean) / mean)
							     : 1.0f;
			uint16_t dh = group_quantize(x, imp, nmax, q);
			sc[2 * g] = (uint8_t)dh, sc[2 * g + 1] = (uint8_t)(dh >> 8);
			for (uint32_t i = 0; i < GS; i++) {
				if (fmt == STRATA_FMT_Q4)
					q4_put(qs, g * GS + i, q[i]);
				else
					q3_put(qs, g * GS + i, q[i]);
			}
		}
	}
	return 0;
}

static void sq_dequantize_row(int fmt, const void *codes, const void *scales, uint32_t cols, float *out)
{
	const int nmax = fmt == STRATA_FMT_Q4 ? 8 : 4;
	const uint32_t cb = fmt == STRATA_FMT_Q4 ? STRATA_Q4_CODE_BYTES : STRATA_Q3_CODE_BYTES;
	for (uint32_t b = 0; b < cols / QK; b++) {
		const uint8_t *qs = (const uint8_t *)codes + (size_t)b * cb;
		const uint8_t *sc = (const uint8_t *)scales + (size_t)b * STRATA_SQ_SCALE_BYTES;
		for (uint32_t i = 0; i < QK; i++) {
			uint32_t g = i / GS;
			float d = strata_f16_to_f32((uint16_t)(sc[2 * g] | sc[2 * g + 1] << 8));
			int c = (int)(fmt == STRATA_FMT_Q4 ? strata_q4_code(qs, i) : strata_q3_code(qs, i));
			out[(size_t)b * QK + i] = d * (float)(c - nmax);
		}
	}
}

/* rows of cols weights, one after another (the rows interface of quant.h) */
static int sq_quantize_rows(int fmt, const float *w, uint32_t rows, uint32_t cols, const float *imatrix,
			    void *codes, void *scales)
{
	const uint32_t cb = fmt == STRATA_FMT_Q4 ? STRATA_Q4_CODE_BYTES : STRATA_Q3_CODE_BYTES, nb = cols / QK;
	for (uint32_t r = 0; r < rows; r++) {
		int rc = sq_quantize_row(fmt, w + (size_t)r * cols, cols, imatrix, (uint8_t *)codes + (size_t)r * nb * cb,
					 (uint8_t *)scales + (size_t)r * nb * STRATA_SQ_SCALE_BYTES);
		if (rc)
			return rc;
	}
	return 0;
}

static int q4_quantize_rows(const float *w, uint32_t rows, uint32_t cols, const float *imatrix, void *codes,
			    void *scales)
{
	return sq_quantize_rows(STRATA_FMT_Q4, w, rows, cols, imatrix, codes, scales);
}
static void q4_dequantize_row(const void *codes, const void *scales, uint32_t cols, float *out)
{
	sq_dequantize_row(STRATA_FMT_Q4, codes, scales, cols, out);
}
static int q3_quantize_rows(const float *w, uint32_t rows, uint32_t cols, const float *imatrix, void *codes,
			    void *scales)
{
	return sq_quantize_rows(STRATA_FMT_Q3, w, rows, cols, imatrix, codes, scales);
}
static void q3_dequantize_row(const void *codes, const void *scales, uint32_t cols, float *out)
{
	sq_dequantize_row(STRATA_FMT_Q3, codes, scales, cols, out);
}

const struct strata_fmt_traits strata_fmt_q4 = {
	.name = "q4", .block = QK, .code_bytes = STRATA_Q4_CODE_BYTES,
	.scale_bytes = STRATA_SQ_SCALE_BYTES, .bpw = 4.5,
	.quantize_rows = q4_quantize_rows, .dequantize_row = q4_dequantize_row,
};
const struct strata_fmt_traits strata_fmt_q3 = {
	.name = "q3", .block = QK, .code_bytes = STRATA_Q3_CODE_BYTES,
	.scale_bytes = STRATA_SQ_SCALE_BYTES, .bpw = 3.5,
	.quantize_rows = q3_quantize_rows, .dequantize_row = q3_dequantize_row,
};
