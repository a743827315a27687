/*
 * Benchmark of the fused dequant MoE kernels on one GPU, every figure as a
 * ratio to a ceiling measured in the same run:
 *   ceiling   streaming read (read-only kernel, 16-byte loads) and a
 *             device-to-device copy, over buffers >> L2; per tier format the
 *             decode ceiling (strata_gpu_decode_ceiling: the faster of the format's
 *             two exact decoders, HFMA2s or the shared f(byte sum) table, into the
 *             tensor cores with memory out of the way), as weights/s
 *             and as GB/s of packed bytes (bpw / 8 bytes per weight)
 *   decode    one MoE layer's active experts (Kimi-shaped 16 x 7168x1536,
 *             Qwen3-30B-A3B-shaped 8 x 2048x768) at 1, 4, 8, 16 tokens routed to
 *             all of them, per format: GB/s of packed expert bytes / read
 *             ceiling ("of read"), and for the tier formats also / min(read
 *             ceiling, the format's decode ceiling) ("of bound")
 *   prefill   256 (and 64) tokens per expert: the tiled prefill path (forced,
 *             whatever the threshold; its kernel as the configuration's prefill key
 *             chooses, and then also the mma.sync kernel where the sm_90a one may be
 *             chosen) and the persistent kernel, TFLOP/s vs cuBLAS BF16 (3 GEMMs per
 *             expert on BF16 weights) on the same shapes
 *   stack     (--layers N) N such layers decoded back to back at 1 token, each
 *             its own weights, layer l reading layer l-1's output
 *             (strata_gpu_moe_stack): time per layer and the same ratios, on
 *             the kernel configuration (kind stack: under its default pstack
 *             the stack in one launch per 16 layers where the persistent or
 *             the small-layer stack kernel takes it) and, with pstack=0, the
 *             layers as chained launches (stack_chain), chained with the L2
 *             prefetch of the next launch's weights (stack_l2pf), as plain
 *             launches (stack_plain) and chained on the other choice of the
 *             small key (stack_small when it does not take the format,
 *             stack_nosmall when it does)
 *   layer     a full MoE layer with random top-k routing over all the model's
 *             experts (15/30/55 hot/warm/cold tiering): layer-tokens per second
 * Layers are rotated so every timed call streams its weights from HBM; calls
 * are captured into a CUDA graph and replayed, timed with events after a
 * warm-up, median of the repetitions.
 * q4 and q3 decode rows come twice: on the default kernel (row-streaming,
 * kind decode) and at 1 - 4 tokens on the register-ring kernel (sq_gv=0,
 * kind decode_ring), unless --kernel sq_gv=0.  Tier decode rows at 1 token
 * come on the default kernel (kind decode; dec_tr=auto unless --kernel says
 * otherwise) and on every other dec_tr value (0: the ring kernel,
 * decode_ring; 1 / 2 / 3: the row-streaming tier kernel with the FMA decoder /
 * the codebook table / half of each, decode_tr1 / decode_tr2 / decode_tr3).
 * q4, q3 and tier decode rows at 1 token also come on the other choice of the
 * small key (the one-launch small-layer kernel; decode_small when the
 * configuration does not send the format there, decode_nosmall when it does:
 * small=1, or auto for the tier formats).
 * CSV columns: kind,shape,fmt,tokens,us,ratio,gbs,tflops,tok_s,bound (us: the
 * median time in microseconds); the
 * decode-ceiling rows are ceiling,decode_FMT,FMT with ratio = of read, gbs =
 * packed GB/s, tflops = the MMA rate (16 flop per weight: 8 tokens); bound =
 * the decode rows' ratio to min(read, decode ceiling).
 *
 *   bench_kernels [--reps N] [--csv FILE] [--quick] [--decode] [--no-decode] [--no-layer] [--layers N]
 *                 [--pf-tokens T1,T2,...] [--tokens T1,...] [--shape kimi|qwen] [--profile [FMT]] [--kernel K=V,...]
 *                 [--formats LIST] [--tier-formats H,W,C] [--kernel2 K=V,...] [--phases]
 *
 * --layers N: the stack rows (N = 2..64 layers per stack; 16 makes a
 * Qwen3-30B-A3B-shaped q4 stack 340 MB) after the decode table, for the
 * formats of --formats and the shapes of --shape.
 * --decode: ceilings and the decode table (and the stack rows) only; --no-decode / --no-layer:
 * without the decode / full-layer table; --pf-tokens: the prefill table at
 * these tokens per expert, hot and bf16 or the --formats given (instead of 256
 * for every format and 64 for hot and bf16); --tokens: the decode table (and
 * the register-ring rows) at these tokens per expert only (1..16); --shape: the decode, prefill and layer tables of
 * that shape alone; --profile [FMT]: a few decode layers (Kimi, or --shape's)
 * of format FMT (default hot) at T=1 and 16, then FMT's decode ceiling kernel
 * (tier formats), for a profiler.
 * --formats: the formats of the decode and prefill tables (default hot, warm,
 * cold, bf16, q4, q3; q4 and q3 decode rows also say whether they reach
 * issue 21's goal of 0.85 of read); --tier-formats: the hot, warm and cold
 * tiers' formats of the full-layer table (default hot,warm,cold; e.g.
 * q4,warm,cold).
 * --kernel2 K=V,...: another kernel configuration (on top of the defaults;
 * up to 4 of them) for A/B rows in the same run: the 1-token decode rows
 * (kind decode_k2 .. decode_k5) and the stack rows (stack_k2 .. stack_k5)
 * on each too.
 * --phases: where the one-launch small-layer kernel's time goes (kernel
 * configuration small_ts=1, on --kernel's configuration, and on --kernel2's
 * when given; small=1 where neither takes the format): for each format of
 * --formats it takes at 1 token, one layer and one stack of --layers layers
 * (16 if not given), per launch the phases of kernels.h's strata_small_ts as
 * microseconds after the launch's first CTA started, median and slowest CTA
 * (under pstack the stack's layers on the persistent stack kernel or the
 * small-layer kernel over the stack, a layer a row).
 * --kernel: the kernel configuration for every table (kernels.h: e.g.
 * dec=off|12x4|8x4..., split=auto|N, bf16dec=off|16x4|12x6|8x8, bf16_kc=N,
 * sqdec=auto|off, sq_pf=0|1, sq_xs=0|1, sq_gv=0|1|2, sq_l2pf=0|1|2, prefill_min=N|off,
 * prefill=auto|sm90|sm90ws|sm90p|sm90p1|sm90p3|sm90pc|sm90ph|sm90pp|sm90pp2|mma, prefill_tiles=N|off); the
 * prefill table sets prefill_min itself.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "moe.h"
#include "quant.h"
#include "strata/gpu.h"

static int g_reps = 15;
static FILE *g_csv;
static strata_gpu_stream *g_st;
static struct strata_error g_err;

#define CHECK(call)                                                                          \
	do {                                                                                 \
		if ((call) != STRATA_OK) {                                                   \
			fprintf(stderr, "bench_kernels: %s: %s\n", #call, g_err.msg);        \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint64_t rnd(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return g_rng;
}

static int cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

/* Median ms of one replay of `graph`, divided by `per` (calls in the graph). */
static double time_graph(strata_gpu_graph *graph, int per)
{
	strata_gpu_event *a, *b;
	float ms[64];
	int reps = g_reps < 64 ? g_reps : 64;
	CHECK(strata_gpu_event_create(&a, &g_err));
	CHECK(strata_gpu_event_create(&b, &g_err));
	for (int i = 0; i < 2; i++)
		CHECK(strata_gpu_graph_launch(graph, g_st, &g_err));
	for (int r = 0; r < reps; r++) {
		CHECK(strata_gpu_event_record(a, g_st, &g_err));
		CHECK(strata_gpu_graph_launch(graph, g_st, &g_err));
		CHECK(strata_gpu_event_record(b, g_st, &g_err));
		CHECK(strata_gpu_event_sync(b, &g_err));
		CHECK(strata_gpu_event_elapsed_ms(a, b, &ms[r], &g_err));
	}
	qsort(ms, reps, sizeof(float), cmp_f);
	strata_gpu_event_destroy(a);
	strata_gpu_event_destroy(b);
	return ms[reps / 2] / per;
}

/* ---- ceilings ---- */

static double g_read_gbs, g_copy_gbs, g_blas_tflops;
static double g_dec_gbs[STRATA_FMT_COUNT]; /* decode ceiling, packed GB/s (0: not measured) */

/* Packed GB/s a decode row is bound by: min(read, decode ceiling of fmt); 0 if none. */
static double bound_gbs(int fmt)
{
	double d = fmt >= 0 && fmt < STRATA_FMT_COUNT ? g_dec_gbs[fmt] : 0;
	return d > 0 ? (d < g_read_gbs ? d : g_read_gbs) : 0;
}

static void measure_ceilings(void)
{
	size_t bytes = (size_t)2 << 30;
	void *buf, *dst;
	uint32_t *sink;
	CHECK(strata_gpu_malloc(&buf, bytes, &g_err));
	CHECK(strata_gpu_malloc(&dst, bytes, &g_err));
	CHECK(strata_gpu_malloc((void **)&sink, 64, &g_err));
	CHECK(strata_gpu_fill_bf16(buf, bytes / 2, 1, 1.0f, g_st, &g_err));
	/* warm-up outside the capture (the GPU layer's first call sets itself up) */
	CHECK(strata_gpu_read_bytes(buf, bytes, sink, g_st, &g_err));
	CHECK(strata_gpu_stream_sync(g_st, &g_err));
	strata_gpu_graph *g;
	CHECK(strata_gpu_graph_begin(g_st, &g_err));
	for (int i = 0; i < 4; i++)
		CHECK(strata_gpu_read_bytes(buf, bytes, sink, g_st, &g_err));
	CHECK(strata_gpu_graph_end(g_st, &g, &g_err));
	double ms = time_graph(g, 4);
	strata_gpu_graph_free(g);
	g_read_gbs = bytes / ms / 1e6;
	CHECK(strata_gpu_graph_begin(g_st, &g_err));
	for (int i = 0; i < 4; i++)
		CHECK(strata_gpu_memcpy_d2d_async(dst, buf, bytes, g_st, &g_err));
	CHECK(strata_gpu_graph_end(g_st, &g, &g_err));
	ms = time_graph(g, 4);
	strata_gpu_graph_free(g);
	g_copy_gbs = 2.0 * bytes / ms / 1e6;
	strata_gpu_free(buf);
	strata_gpu_free(dst);
	strata_gpu_free(sink);

	/* bf16 matrix ceiling: one large cuBLAS GEMM on random data */
	uint32_t n = 8192;
	uint16_t *A, *B;
	float *C;
	CHECK(strata_gpu_malloc((void **)&A, (size_t)n * n * 2, &g_err));
	CHECK(strata_gpu_malloc((void **)&B, (size_t)n * n * 2, &g_err));
	CHECK(strata_gpu_malloc((void **)&C, (size_t)n * n * 4, &g_err));
	CHECK(strata_gpu_fill_bf16(A, (size_t)n * n, 2, 1.0f, g_st, &g_err));
	CHECK(strata_gpu_fill_bf16(B, (size_t)n * n, 3, 1.0f, g_st, &g_err));
	CHECK(strata_gpu_gemm_bf16(A, n, n, B, n, C, g_st, &g_err)); /* handle + workspace before capture */
	CHECK(strata_gpu_graph_begin(g_st, &g_err));
	CHECK(strata_gpu_gemm_bf16(A, n, n, B, n, C, g_st, &g_err));
	CHECK(strata_gpu_graph_end(g_st, &g, &g_err));
	ms = time_graph(g, 1);
	strata_gpu_graph_free(g);
	g_blas_tflops = 2.0 * n * n * (double)n / ms / 1e9;
	strata_gpu_free(A);
	strata_gpu_free(B);
	strata_gpu_free(C);
	printf("ceiling: read %.0f GB/s, d2d copy %.0f GB/s (read+write), cuBLAS bf16 8192^3 %.0f TFLOP/s\n",
	       g_read_gbs, g_copy_gbs, g_blas_tflops);
	if (g_csv)
		fprintf(g_csv, "ceiling,read,,,,,%.1f,,,\nceiling,copy,,,,,%.1f,,,\nceiling,cublas_bf16,,,,,,%.1f,,\n",
			g_read_gbs, g_copy_gbs, g_blas_tflops);

	/* decode ceilings of the tier formats: the faster of the two exact
	 * decoders (rows decode_FMT_fma, decode_FMT_table, then decode_FMT) */
	for (int fmt = STRATA_FMT_HOT; fmt <= STRATA_FMT_COLD; fmt++) {
		const struct strata_fmt_traits *tr = strata_fmt_traits(fmt);
		double best = 0;
		for (int dec = STRATA_CEIL_FMA; dec <= STRATA_CEIL_TABLE; dec++) {
			static const char *const dn[] = { "fma", "table" };
			double wps;
			uint32_t wpsm;
			CHECK(strata_gpu_decode_ceiling(fmt, dec, &wps, &wpsm, &g_err));
			double gbs = wps * tr->bpw / 8 / 1e9;
			printf("ceiling: decode %-4s %-5s %.2f Tweights/s = %.0f GB/s packed (%.3f of read), %u warps/SM\n",
			       tr->name, dn[dec], wps / 1e12, gbs, gbs / g_read_gbs, wpsm);
			if (g_csv)
				fprintf(g_csv, "ceiling,decode_%s_%s,%s,,,%.4f,%.1f,%.2f,,\n", tr->name, dn[dec], tr->name,
					gbs / g_read_gbs, gbs, 16 * wps / 1e12);
			if (wps > best)
				best = wps;
		}
		g_dec_gbs[fmt] = best * tr->bpw / 8 / 1e9;
		printf("ceiling: decode %-4s %.2f Tweights/s = %.0f GB/s packed (%.3f of read)\n", tr->name, best / 1e12,
		       g_dec_gbs[fmt], g_dec_gbs[fmt] / g_read_gbs);
		if (g_csv)
			fprintf(g_csv, "ceiling,decode_%s,%s,,,%.4f,%.1f,%.2f,,\n", tr->name, tr->name,
				g_dec_gbs[fmt] / g_read_gbs, g_dec_gbs[fmt], 16 * best / 1e12);
	}
}

/* ---- expert weights on the device ---- */

struct shape {
	const char *name;
	uint32_t hidden, inter, active, total, top_k;
};

/* Fill n experts of fmt at base (stride E.bytes) with random valid data. */
static void fill_experts(int fmt, const struct strata_expert_layout *E, uint8_t *base, uint32_t n, uint64_t seed)
{
	/* bf16: random values; tiers: uniformly random code streams (what a trellis
	 * encoder's output looks like to the decoder) and random bf16 block scales */
	if (fmt < STRATA_FMT_HOT) {
		CHECK(strata_gpu_fill_bf16((uint16_t *)base, (size_t)n * E->bytes / 2, seed, 0.05f, g_st, &g_err));
		return;
	}
	CHECK(strata_gpu_fill_random(base, (size_t)n * E->bytes, seed, g_st, &g_err));
	const struct strata_matrix_layout *m[3] = { &E->gate, &E->up, &E->down };
	const uint64_t off[3] = { E->gate_off, E->up_off, E->down_off };
	if (fmt == STRATA_FMT_Q4 || fmt == STRATA_FMT_Q3) {
		/* random codes, fp16 group scales of a weight RMS of about 1/sqrt(cols) */
		for (int i = 0; i < 3; i++) {
			size_t ns = m[i]->scales_bytes / 2;
			uint16_t *h = malloc(ns * 2);
			float s = 1.0f / sqrtf((float)m[i]->cols) / (fmt == STRATA_FMT_Q4 ? 4.6f : 2.3f);
			for (size_t j = 0; j < ns; j++)
				h[j] = strata_f32_to_f16(s * (0.75f + 0.5f * (float)(rnd() & 1023) / 1024.0f));
			for (uint32_t e = 0; e < n; e++)
				CHECK(strata_gpu_memcpy_h2d_async(base + (uint64_t)e * E->bytes + off[i] + m[i]->scales_off, h,
								  ns * 2, g_st, &g_err));
			CHECK(strata_gpu_stream_sync(g_st, &g_err));
			free(h);
		}
		return;
	}
	for (uint32_t e = 0; e < n; e++)
		for (int i = 0; i < 3; i++) {
			float s = 1.0f / sqrtf((float)m[i]->cols);
			CHECK(strata_gpu_fill_bf16((uint16_t *)(base + (uint64_t)e * E->bytes + off[i] + m[i]->scales_off),
						   m[i]->scales_bytes / 2, seed + 7 * e + i, s, g_st, &g_err));
		}
}

static uint64_t packed_bytes(const struct strata_expert_layout *E)
{
	return E->gate.bytes + E->up.bytes + E->down.bytes;
}

/* ---- decode: T tokens all routed to the same active experts ---- */

/* One decode row: layer time ms of sh's active experts of fmt (layout E) at
 * T tokens, as GB/s of packed bytes and ratios to the ceilings; note: text
 * after the row. */
static void decode_row(const char *kind, const struct shape *sh, int fmt, const struct strata_expert_layout *E,
		       uint32_t T, double ms, const char *note)
{
	double bytes = (double)sh->active * packed_bytes(E);
	double gbs = bytes / ms / 1e6;
	double tflops = 2.0 * 3 * sh->hidden * (double)sh->inter * sh->active * T / ms / 1e9;
	double bnd = bound_gbs(fmt);
	char of_bound[32] = "", bound_csv[16] = "";
	if (bnd > 0) {
		snprintf(of_bound, sizeof(of_bound), "  %5.3f of bound", gbs / bnd);
		snprintf(bound_csv, sizeof(bound_csv), "%.4f", gbs / bnd);
	}
	if (fmt == STRATA_FMT_Q4 || fmt == STRATA_FMT_Q3)
		/* issue 21's goal for the fast-decode formats: >= 0.85 of HBM read */
		snprintf(of_bound, sizeof(of_bound), "  %.3f of read: %s", gbs / g_read_gbs,
			 gbs / g_read_gbs >= 0.85 ? "goal met" : "below 0.85");
	printf("%-7s %-5s %-5s T=%-3u %8.1f us  %7.0f GB/s  %5.1f%% of read  %6.1f TFLOP/s  %9.0f layer-tok/s%s%s\n",
	       kind, sh->name, strata_fmt_traits(fmt)->name, T, ms * 1e3, gbs, 100 * gbs / g_read_gbs, tflops,
	       T / ms * 1e3, of_bound, note);
	if (g_csv)
		fprintf(g_csv, "%s,%s,%s,%u,%.3f,%.4f,%.1f,%.2f,%.0f,%s\n", kind, sh->name, strata_fmt_traits(fmt)->name,
			T, ms * 1e3, gbs / g_read_gbs, gbs, tflops, T / ms * 1e3, bound_csv);
}

/* The decode rows' kind column: "decode", or "decode_ring" for the q4/q3
 * rows of the register-ring kernel (sq_gv=0) beside the default's. */
static const char *g_dec_kind = "decode";

static void bench_decode(const struct shape *sh, int fmt, const uint32_t *tokens, int ntok)
{
	struct strata_expert_layout E;
	strata_expert_layout(fmt, sh->hidden, sh->inter, &E);
	uint64_t layer = (uint64_t)sh->active * E.bytes;
	uint32_t nl = (uint32_t)((1536ull << 20) / layer + 1);
	if (nl < 2)
		nl = 2;
	uint8_t *w;
	CHECK(strata_gpu_malloc((void **)&w, nl * layer, &g_err));
	fill_experts(fmt, &E, w, nl * sh->active, 11 + fmt);
	uint32_t maxT = 16;
	float *x, *y;
	CHECK(strata_gpu_malloc((void **)&x, (size_t)maxT * sh->hidden * 4, &g_err));
	CHECK(strata_gpu_malloc((void **)&y, (size_t)maxT * sh->hidden * 4, &g_err));
	CHECK(strata_gpu_fill_f32(x, (size_t)maxT * sh->hidden, 5, 1.0f, g_st, &g_err));
	CHECK(strata_gpu_fill_f32(y, (size_t)maxT * sh->hidden, 6, 1.0f, g_st, &g_err));
	const void **ext = malloc(sh->active * sizeof(void *));
	uint8_t *fmts = malloc(sh->active);
	uint32_t *ae = malloc(maxT * sh->active * 4), *at = malloc(maxT * sh->active * 4);
	float *aw = malloc(maxT * sh->active * 4);
	for (int ti = 0; ti < ntok; ti++) {
		uint32_t T = tokens[ti];
		uint32_t na = 0;
		for (uint32_t t = 0; t < T; t++)
			for (uint32_t e = 0; e < sh->active; e++)
				ae[na] = e, at[na] = t, aw[na++] = 1.0f / sh->active;
		for (uint32_t e = 0; e < sh->active; e++)
			fmts[e] = (uint8_t)fmt;
		struct strata_moe_call c = { .hidden = sh->hidden, .inter = sh->inter, .n_tokens = T, .x = x, .y = y,
					     .n_experts = sh->active, .extents = (const void *const *)ext,
					     .fmts = fmts, .n_assign = na, .assign_expert = ae, .assign_token = at,
					     .assign_weight = aw, .stream = g_st };
		/* warm-up outside the capture (scratch allocation, attributes) */
		for (uint32_t e = 0; e < sh->active; e++)
			ext[e] = w + (uint64_t)e * E.bytes;
		CHECK(strata_moe_layer_gpu(&c, &g_err));
		CHECK(strata_gpu_stream_sync(g_st, &g_err));
		strata_gpu_graph *g;
		CHECK(strata_gpu_graph_begin(g_st, &g_err));
		for (uint32_t l = 0; l < nl; l++) {
			for (uint32_t e = 0; e < sh->active; e++)
				ext[e] = w + (uint64_t)(l * sh->active + e) * E.bytes;
			CHECK(strata_moe_layer_gpu(&c, &g_err));
		}
		CHECK(strata_gpu_graph_end(g_st, &g, &g_err));
		double ms = time_graph(g, nl);
		strata_gpu_graph_free(g);
		decode_row(g_dec_kind, sh, fmt, &E, T, ms, "");
	}
	free(ext), free(fmts), free(ae), free(at), free(aw);
	strata_gpu_free(w);
	strata_gpu_free(x);
	strata_gpu_free(y);
}

/* Whether configuration c sends one-token layers of fmt and shape sh to the
 * one-launch small-layer kernel (small=1, or auto for the formats and launch
 * sizes it takes there). */
static int small_takes(const struct strata_moe_config *c, const struct shape *sh, int fmt)
{
	return c->small > 0 || (c->small < 0 && (STRATA_MOE_SMALL_AUTO_FMTS >> fmt & 1) &&
				(uint64_t)sh->active * 3 * sh->hidden * sh->inter <= STRATA_MOE_SMALL_AUTO_WEIGHTS);
}

/* ---- stack: layers decoded back to back, each reading the previous one's y ---- */

static uint32_t g_layers; /* --layers N (0: no stack rows) */
static int g_k2;                           /* --kernel2 given: how many times (at most 4) */
static struct strata_moe_config g_kc2[4];  /* their configurations */
static const char *const g_k2_kind[2][4] = { { "decode_k2", "decode_k3", "decode_k4", "decode_k5" },
					     { "stack_k2", "stack_k3", "stack_k4", "stack_k5" } };

/* N = g_layers layers of sh's active experts of fmt at T tokens (all routed
 * to every active expert), each layer its own weights and its own y, layer l
 * reading layer l-1's y (layer 0 a fixed x): one strata_gpu_moe_stack call
 * per stack, stacks rotated until a replay streams >= 256 MB (never served
 * from L2 by reuse).  Every replay first copies the y's starting values
 * (random, a residual stream) into place (one device copy per stack, in the
 * timed graph).  Rows per layer: the configuration's stack (kind stack) and,
 * one layer a launch, chained launches (stack_chain), chained with the L2
 * prefetch (stack_l2pf), plain launches with the same dependencies
 * (stack_plain), chained on the other small key (stack_small,
 * stack_nosmall). */
static void bench_stack(const struct shape *sh, int fmt, uint32_t T)
{
	struct strata_expert_layout E;
	strata_expert_layout(fmt, sh->hidden, sh->inter, &E);
	const uint32_t N = g_layers, na = T * sh->active;
	const uint64_t layer = (uint64_t)sh->active * E.bytes;
	const uint32_t ns = (uint32_t)((256ull << 20) / (N * layer) + 1);
	const size_t ny = (size_t)N * T * sh->hidden;
	uint8_t *w;
	float *x, *y, *y0;
	CHECK(strata_gpu_malloc((void **)&w, (uint64_t)ns * N * layer, &g_err));
	fill_experts(fmt, &E, w, ns * N * sh->active, 31 + fmt);
	CHECK(strata_gpu_malloc((void **)&x, (size_t)T * sh->hidden * 4, &g_err));
	CHECK(strata_gpu_malloc((void **)&y, ny * 4, &g_err));
	CHECK(strata_gpu_malloc((void **)&y0, ny * 4, &g_err));
	CHECK(strata_gpu_fill_f32(x, (size_t)T * sh->hidden, 5, 1.0f, g_st, &g_err));
	CHECK(strata_gpu_fill_f32(y0, ny, 6, 0.5f, g_st, &g_err));
	const void **ext = malloc((size_t)ns * N * sh->active * sizeof(void *));
	uint8_t *fmts = malloc(sh->active);
	uint32_t *ae = malloc(na * 4), *at = malloc(na * 4);
	float *aw = malloc(na * 4);
	struct strata_moe_call *calls = malloc((size_t)ns * N * sizeof(*calls));
	for (uint32_t e = 0; e < sh->active; e++)
		fmts[e] = (uint8_t)fmt;
	for (uint32_t t = 0, a = 0; t < T; t++)
		for (uint32_t e = 0; e < sh->active; e++, a++)
			ae[a] = e, at[a] = t, aw[a] = 1.0f / sh->active;
	for (uint32_t i = 0; i < ns * N; i++) {
		const uint32_t l = i % N;
		for (uint32_t e = 0; e < sh->active; e++)
			ext[(size_t)i * sh->active + e] = w + ((uint64_t)i * sh->active + e) * E.bytes;
		calls[i] = (struct strata_moe_call){ .hidden = sh->hidden, .inter = sh->inter, .n_tokens = T,
						     .x = l ? y + (size_t)(l - 1) * T * sh->hidden : x,
						     .y = y + (size_t)l * T * sh->hidden, .n_experts = sh->active,
						     .extents = (const void *const *)(ext + (size_t)i * sh->active),
						     .fmts = fmts, .n_assign = na, .assign_expert = ae, .assign_token = at,
						     .assign_weight = aw, .stream = g_st };
	}
	/* the first on the configuration, the others one layer a launch
	 * (pstack=0): chained, with the L2 prefetch, plain, and chained on the
	 * other choice of the small key (kind stack_small when the configuration
	 * does not take fmt there, stack_nosmall when it does) */
	enum { NK = 5 };
	static const unsigned flags[NK + 4] = { 0, 0, STRATA_MOE_STACK_L2PF, STRATA_MOE_STACK_PLAIN };
	struct strata_moe_config kc0, kc_ls, kc1;
	strata_gpu_moe_config_get(&kc0);
	kc_ls = kc0;
	kc_ls.pstack = 0;
	kc1 = kc_ls;
	kc1.small = small_takes(&kc0, sh, fmt) ? 0 : 1;
	const char *const kinds[NK] = { "stack", "stack_chain", "stack_l2pf", "stack_plain",
					kc1.small ? "stack_small" : "stack_nosmall" };
	for (int f = 0; f < NK + g_k2; f++) {
		CHECK(strata_gpu_moe_configure(f >= NK ? &g_kc2[f - NK] : f == NK - 1 ? &kc1 : f ? &kc_ls : &kc0, &g_err));
		/* warm-up outside the capture (scratch allocation, attributes) */
		CHECK(strata_gpu_moe_stack(calls, N, flags[f], &g_err));
		CHECK(strata_gpu_stream_sync(g_st, &g_err));
		strata_gpu_graph *g;
		CHECK(strata_gpu_graph_begin(g_st, &g_err));
		for (uint32_t k = 0; k < ns; k++) {
			CHECK(strata_gpu_memcpy_d2d_async(y, y0, ny * 4, g_st, &g_err));
			CHECK(strata_gpu_moe_stack(calls + (size_t)k * N, N, flags[f], &g_err));
		}
		CHECK(strata_gpu_graph_end(g_st, &g, &g_err));
		double ms = time_graph(g, (int)(ns * N));
		strata_gpu_graph_free(g);
		char note[48];
		snprintf(note, sizeof(note), "  (per layer of %u x %u)", ns, N);
		decode_row(f >= NK ? g_k2_kind[1][f - NK] : kinds[f], sh, fmt, &E, T, ms, note);
	}
	CHECK(strata_gpu_moe_configure(&kc0, &g_err));
	free(ext), free(fmts), free(ae), free(at), free(aw), free(calls);
	strata_gpu_free(w), strata_gpu_free(x), strata_gpu_free(y), strata_gpu_free(y0);
}

/* ---- phases: where the small-layer kernel's and the persistent stack kernel's time goes (--phases) ---- */

/* The phases of the n small-layer launches in ts (strata_gpu_small_phases):
 * per launch and phase, microseconds after the launch's first CTA started
 * (global timer at the CTA's start plus its clock64 since then, at the
 * clock rate the CTAs' own start/end pairs give), median and slowest CTA;
 * and the gap from the previous launch's last CTA end to this launch's first
 * CTA start. */
static void print_phases(const char *what, const uint64_t *ts, const uint32_t *grid, uint32_t n)
{
	static const char *const names[STRATA_SMALL_TS_N] = { "start",   "issued", "pdl",      "x_staged", "mbar0",
							       "gu_w0",   "gu",     "cnt_pub",  "cnt_wait", "h_staged",
							       "dn_w0",   "dn",     "y",        "end" };
	const size_t per = (size_t)STRATA_SMALL_TS_CTAS * STRATA_SMALL_TS_WORDS;
	double ghz_c = 0, ghz_t = 0;
	for (uint32_t l = 0; l < n; l++)
		for (uint32_t b = 0; b < grid[l]; b++) {
			const uint64_t *w = ts + l * per + (size_t)b * STRATA_SMALL_TS_WORDS;
			ghz_c += (double)(w[2 + STRATA_SMALL_TS_END] - w[2 + STRATA_SMALL_TS_START]);
			ghz_t += (double)(w[1] - w[0]);
		}
	const double ghz = ghz_t > 0 ? ghz_c / ghz_t : 1.0;
	printf("phases %s: %u launches, %.3f GHz (clock64 per global-timer ns); per phase: median / slowest CTA, us after the launch's first CTA start\n",
	       what, n, ghz);
	printf("phases %-3s %-4s %7s", "L", "ctas", "gap");
	for (int ph = 0; ph < STRATA_SMALL_TS_N; ph++)
		printf(" %13s", names[ph]);
	printf("\n");
	double prev_end = 0;
	double *v = malloc(STRATA_SMALL_TS_CTAS * sizeof(double));
	for (uint32_t l = 0; l < n; l++) {
		const uint64_t *L = ts + l * per;
		uint64_t t0 = UINT64_MAX, t1 = 0;
		for (uint32_t b = 0; b < grid[l]; b++) {
			t0 = L[b * STRATA_SMALL_TS_WORDS] < t0 ? L[b * STRATA_SMALL_TS_WORDS] : t0;
			t1 = L[b * STRATA_SMALL_TS_WORDS + 1] > t1 ? L[b * STRATA_SMALL_TS_WORDS + 1] : t1;
		}
		char gap[16] = "-";
		if (l)
			snprintf(gap, sizeof(gap), "%.2f", ((double)t0 - prev_end) / 1e3);
		printf("phases %-3u %-4u %7s", l, grid[l], gap);
		for (int ph = 0; ph < STRATA_SMALL_TS_N; ph++) {
			uint32_t m = 0;
			for (uint32_t b = 0; b < grid[l]; b++) {
				const uint64_t *w = L + (size_t)b * STRATA_SMALL_TS_WORDS;
				if (w[2 + ph])
					v[m++] = ((double)(w[0] - t0) + ((double)w[2 + ph] - (double)w[2]) / ghz) / 1e3;
			}
			if (!m) {
				printf(" %13s", "-");
				continue;
			}
			double mx = v[0];
			for (uint32_t i = 1; i < m; i++) /* insertion sort: m <= 256 */
				for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
					const double t = v[j];
					v[j] = v[j - 1], v[j - 1] = t;
				}
			mx = v[m - 1];
			printf(" %6.2f/%6.2f", v[m / 2], mx);
		}
		printf("\n");
		prev_end = (double)t1;
	}
	free(v);
}

/* --phases: one layer (three calls, the last recorded) and one stack of
 * layers of fmt at 1 token on configuration kc with small_ts=1 (small=1 if
 * kc does not take fmt there). */
static void bench_phases(const struct shape *sh, int fmt, const struct strata_moe_config *kc0, const char *cname)
{
	struct strata_moe_config kc = *kc0, was;
	strata_gpu_moe_config_get(&was);
	kc.small_ts = 1;
	if (!small_takes(&kc, sh, fmt))
		kc.small = 1;
	CHECK(strata_gpu_moe_configure(&kc, &g_err));
	struct strata_expert_layout E;
	strata_expert_layout(fmt, sh->hidden, sh->inter, &E);
	const uint32_t N = g_layers ? g_layers : 16, na = sh->active;
	const size_t nx = sh->hidden;
	uint8_t *w;
	float *x, *y;
	CHECK(strata_gpu_malloc((void **)&w, (uint64_t)N * sh->active * E.bytes, &g_err));
	fill_experts(fmt, &E, w, N * sh->active, 41 + fmt);
	CHECK(strata_gpu_malloc((void **)&x, nx * 4, &g_err));
	CHECK(strata_gpu_malloc((void **)&y, (size_t)N * nx * 4, &g_err));
	CHECK(strata_gpu_fill_f32(x, nx, 5, 1.0f, g_st, &g_err));
	CHECK(strata_gpu_fill_f32(y, (size_t)N * nx, 6, 0.5f, g_st, &g_err));
	const void **ext = malloc((size_t)N * sh->active * sizeof(void *));
	uint8_t *fmts = malloc(sh->active);
	uint32_t *ae = malloc(na * 4), *at = malloc(na * 4);
	float *aw = malloc(na * 4);
	struct strata_moe_call *calls = malloc((size_t)N * sizeof(*calls));
	for (uint32_t e = 0; e < sh->active; e++)
		fmts[e] = (uint8_t)fmt, ae[e] = e, at[e] = 0, aw[e] = 1.0f / sh->active;
	for (uint32_t l = 0; l < N; l++) {
		for (uint32_t e = 0; e < sh->active; e++)
			ext[(size_t)l * sh->active + e] = w + ((uint64_t)l * sh->active + e) * E.bytes;
		calls[l] = (struct strata_moe_call){ .hidden = sh->hidden, .inter = sh->inter, .n_tokens = 1,
						     .x = l ? y + (size_t)(l - 1) * nx : x, .y = y + (size_t)l * nx,
						     .n_experts = sh->active,
						     .extents = (const void *const *)(ext + (size_t)l * sh->active),
						     .fmts = fmts, .n_assign = na, .assign_expert = ae, .assign_token = at,
						     .assign_weight = aw, .stream = g_st };
	}
	const size_t per = (size_t)STRATA_SMALL_TS_CTAS * STRATA_SMALL_TS_WORDS;
	uint64_t *ts = malloc(STRATA_SMALL_TS_LAUNCHES * per * sizeof(uint64_t));
	uint32_t grid[STRATA_SMALL_TS_LAUNCHES], n;
	char what[96];
	for (int i = 0; i < 3; i++)
		CHECK(strata_moe_layer_gpu(&calls[0], &g_err));
	CHECK(strata_gpu_small_phases(ts, grid, STRATA_SMALL_TS_LAUNCHES, &n, &g_err));
	snprintf(what, sizeof(what), "%s %s one layer [%s]", sh->name, strata_fmt_traits(fmt)->name, cname);
	if (n)
		print_phases(what, ts + (size_t)(n - 1) * per, grid + n - 1, 1);
	for (int i = 0; i < 2; i++)
		CHECK(strata_gpu_moe_stack(calls, N, 0, &g_err));
	CHECK(strata_gpu_small_phases(ts, grid, STRATA_SMALL_TS_LAUNCHES, &n, &g_err));
	snprintf(what, sizeof(what), "%s %s stack of %u [%s]", sh->name, strata_fmt_traits(fmt)->name, N, cname);
	if (n >= N)
		print_phases(what, ts + (size_t)(n - N) * per, grid + n - N, N);
	free(ts), free(ext), free(fmts), free(ae), free(at), free(aw), free(calls);
	strata_gpu_free(w), strata_gpu_free(x), strata_gpu_free(y);
	CHECK(strata_gpu_moe_configure(&was, &g_err));
}

/* ---- prefill: T tokens per expert, fused kernel vs cuBLAS BF16 ---- */

/* Milliseconds of one call c under kernel configuration kc (a warm-up call,
 * then the call captured in a graph and timed). */
static double time_layer(struct strata_moe_call *c, const struct strata_moe_config *kc)
{
	CHECK(strata_gpu_moe_configure(kc, &g_err));
	CHECK(strata_moe_layer_gpu(c, &g_err));
	CHECK(strata_gpu_stream_sync(g_st, &g_err));
	strata_gpu_graph *gr;
	CHECK(strata_gpu_graph_begin(g_st, &g_err));
	CHECK(strata_moe_layer_gpu(c, &g_err));
	CHECK(strata_gpu_graph_end(g_st, &gr, &g_err));
	double ms = time_graph(gr, 1);
	strata_gpu_graph_free(gr);
	return ms;
}

static void bench_prefill(const struct shape *sh, int fmt, uint32_t T)
{
	struct strata_expert_layout E, B;
	strata_expert_layout(fmt, sh->hidden, sh->inter, &E);
	strata_expert_layout(STRATA_FMT_BF16, sh->hidden, sh->inter, &B);
	uint32_t ne = sh->active;
	uint8_t *w, *wb;
	CHECK(strata_gpu_malloc((void **)&w, ne * E.bytes, &g_err));
	CHECK(strata_gpu_malloc((void **)&wb, ne * B.bytes, &g_err));
	fill_experts(fmt, &E, w, ne, 21);
	fill_experts(STRATA_FMT_BF16, &B, wb, ne, 22);
	float *x, *y, *g, *u, *d;
	uint16_t *xb, *hb;
	CHECK(strata_gpu_malloc((void **)&x, (size_t)T * sh->hidden * 4, &g_err));
	CHECK(strata_gpu_malloc((void **)&y, (size_t)T * sh->hidden * 4, &g_err));
	CHECK(strata_gpu_malloc((void **)&xb, (size_t)T * sh->hidden * 2, &g_err));
	CHECK(strata_gpu_malloc((void **)&hb, (size_t)T * sh->inter * 2, &g_err));
	CHECK(strata_gpu_malloc((void **)&g, (size_t)T * sh->inter * 4, &g_err));
	CHECK(strata_gpu_malloc((void **)&u, (size_t)T * sh->inter * 4, &g_err));
	CHECK(strata_gpu_malloc((void **)&d, (size_t)T * sh->hidden * 4, &g_err));
	CHECK(strata_gpu_fill_f32(x, (size_t)T * sh->hidden, 5, 1.0f, g_st, &g_err));
	CHECK(strata_gpu_fill_f32(y, (size_t)T * sh->hidden, 6, 1.0f, g_st, &g_err));
	CHECK(strata_gpu_fill_bf16(xb, (size_t)T * sh->hidden, 7, 1.0f, g_st, &g_err));
	CHECK(strata_gpu_fill_bf16(hb, (size_t)T * sh->inter, 8, 1.0f, g_st, &g_err));
	const void **ext = malloc(ne * sizeof(void *));
	uint8_t *fmts = malloc(ne);
	uint32_t na = T * ne, *ae = malloc(na * 4), *at = malloc(na * 4);
	float *aw = malloc(na * 4);
	for (uint32_t e = 0; e < ne; e++) {
		ext[e] = w + (uint64_t)e * E.bytes, fmts[e] = (uint8_t)fmt;
		for (uint32_t t = 0; t < T; t++)
			ae[e * T + t] = e, at[e * T + t] = t, aw[e * T + t] = 1.0f / ne;
	}
	struct strata_moe_call c = { .hidden = sh->hidden, .inter = sh->inter, .n_tokens = T, .x = x, .y = y,
				     .n_experts = ne, .extents = (const void *const *)ext, .fmts = fmts,
				     .n_assign = na, .assign_expert = ae, .assign_token = at, .assign_weight = aw,
				     .stream = g_st };
	struct strata_moe_config kc0, kc;
	strata_gpu_moe_config_get(&kc0);
	kc = kc0;
	kc.prefill_min = 1; /* the tiled prefill path, whatever the threshold */
	double ms_f = time_layer(&c, &kc);
	/* the tiled path on the mma.sync kernel (prefill=mma), when the configuration's
	 * choice may be the sm_90a kernel, for the same-run comparison */
	double ms_m = 0;
	if (kc.pf_path != 2 && strata_gpu_moe_prefill_sm90_usable()) {
		kc.pf_path = 2;
		ms_m = time_layer(&c, &kc);
		kc.pf_path = kc0.pf_path;
	}
	/* the same call through the persistent (decode) kernel only */
	kc.prefill_min = UINT32_MAX;
	double ms_o = time_layer(&c, &kc);
	CHECK(strata_gpu_moe_configure(&kc0, &g_err));
	strata_gpu_graph *gr;
	/* cuBLAS: gate, up, down GEMMs of every expert on bf16 operands (the SwiGLU and the
	 * activation casts are left out: this is the matrix work alone) */
	CHECK(strata_gpu_gemm_bf16((const uint16_t *)wb, sh->inter, sh->hidden, xb, T, g, g_st, &g_err));
	CHECK(strata_gpu_graph_begin(g_st, &g_err));
	for (uint32_t e = 0; e < ne; e++) {
		const uint8_t *eb = wb + (uint64_t)e * B.bytes;
		CHECK(strata_gpu_gemm_bf16((const uint16_t *)(eb + B.gate_off), sh->inter, sh->hidden, xb, T, g, g_st,
					   &g_err));
		CHECK(strata_gpu_gemm_bf16((const uint16_t *)(eb + B.up_off), sh->inter, sh->hidden, xb, T, u, g_st,
					   &g_err));
		CHECK(strata_gpu_gemm_bf16((const uint16_t *)(eb + B.down_off), sh->hidden, sh->inter, hb, T, d, g_st,
					   &g_err));
	}
	CHECK(strata_gpu_graph_end(g_st, &gr, &g_err));
	double ms_b = time_graph(gr, 1);
	strata_gpu_graph_free(gr);
	double flop = 2.0 * 3 * sh->hidden * (double)sh->inter * ne * T;
	printf("prefill %-5s %-5s T=%-3u fused %8.1f us %6.1f TFLOP/s | persistent kernel %8.1f us %6.1f TFLOP/s | "
	       "cuBLAS bf16 %8.1f us %6.1f TFLOP/s | fused/cuBLAS speed %.3f (persistent %.3f) | fused/persistent %.3f\n",
	       sh->name, strata_fmt_traits(fmt)->name, T, ms_f * 1e3, flop / ms_f / 1e9, ms_o * 1e3, flop / ms_o / 1e9,
	       ms_b * 1e3, flop / ms_b / 1e9, ms_b / ms_f, ms_b / ms_o, ms_o / ms_f);
	if (ms_m > 0)
		printf("prefill %-5s %-5s T=%-3u mma.sync kernel %8.1f us %6.1f TFLOP/s | mma/cuBLAS speed %.3f | "
		       "fused/mma %.3f\n",
		       sh->name, strata_fmt_traits(fmt)->name, T, ms_m * 1e3, flop / ms_m / 1e9, ms_b / ms_m, ms_m / ms_f);
	if (g_csv && ms_m > 0)
		fprintf(g_csv, "prefill_mma,%s,%s,%u,%.3f,%.4f,,%.2f,%.2f,\n", sh->name, strata_fmt_traits(fmt)->name, T,
			ms_m * 1e3, ms_b / ms_m, flop / ms_m / 1e9, flop / ms_b / 1e9);
	if (g_csv) {
		fprintf(g_csv, "prefill,%s,%s,%u,%.3f,%.4f,,%.2f,%.2f,\n", sh->name, strata_fmt_traits(fmt)->name, T,
			ms_f * 1e3, ms_b / ms_f, flop / ms_f / 1e9, flop / ms_b / 1e9);
		fprintf(g_csv, "prefill_persistent,%s,%s,%u,%.3f,%.4f,,%.2f,%.2f,\n", sh->name,
			strata_fmt_traits(fmt)->name, T, ms_o * 1e3, ms_b / ms_o, flop / ms_o / 1e9, flop / ms_b / 1e9);
	}
	free(ext), free(fmts), free(ae), free(at), free(aw);
	strata_gpu_free(w), strata_gpu_free(wb), strata_gpu_free(x), strata_gpu_free(y), strata_gpu_free(xb);
	strata_gpu_free(hb), strata_gpu_free(g), strata_gpu_free(u), strata_gpu_free(d);
}

/* ---- full layer: random top-k routing over all experts, 15/30/55 tiering ---- */

static int g_tier_fmt[3] = { STRATA_FMT_HOT, STRATA_FMT_WARM, STRATA_FMT_COLD };
static void bench_layer(const struct shape *sh, const uint32_t *tokens, int ntok)
{
	uint32_t n = sh->total;
	struct strata_expert_layout L[3];
	uint64_t *off = malloc(n * 8), tot = 0;
	uint8_t *fmts = malloc(n), *tier = malloc(n);
	for (int f = 0; f < 3; f++)
		strata_expert_layout(g_tier_fmt[f], sh->hidden, sh->inter, &L[f]);
	for (uint32_t e = 0; e < n; e++) {
		tier[e] = (uint8_t)(e < n * 15 / 100 ? 0 : e < n * 45 / 100 ? 1 : 2);
		fmts[e] = (uint8_t)g_tier_fmt[tier[e]];
		off[e] = tot;
		tot += L[tier[e]].bytes;
	}
	uint8_t *w;
	CHECK(strata_gpu_malloc((void **)&w, tot, &g_err));
	for (uint32_t e = 0; e < n; e++)
		fill_experts(fmts[e], &L[tier[e]], w + off[e], 1, 100 + e);
	uint32_t maxT = 0;
	for (int i = 0; i < ntok; i++)
		maxT = tokens[i] > maxT ? tokens[i] : maxT;
	float *x, *y;
	CHECK(strata_gpu_malloc((void **)&x, (size_t)maxT * sh->hidden * 4, &g_err));
	CHECK(strata_gpu_malloc((void **)&y, (size_t)maxT * sh->hidden * 4, &g_err));
	CHECK(strata_gpu_fill_f32(x, (size_t)maxT * sh->hidden, 5, 1.0f, g_st, &g_err));
	CHECK(strata_gpu_fill_f32(y, (size_t)maxT * sh->hidden, 6, 1.0f, g_st, &g_err));
	const void **ext = malloc(n * sizeof(void *));
	uint8_t *afmt = malloc(n);
	uint32_t *slot = malloc(n * 4), *ae = malloc((size_t)maxT * sh->top_k * 4),
		 *at = malloc((size_t)maxT * sh->top_k * 4);
	float *aw = malloc((size_t)maxT * sh->top_k * 4);
	for (int ti = 0; ti < ntok; ti++) {
		uint32_t T = tokens[ti];
		/* 8 different routings, captured back to back */
		const int NR = 8;
		struct strata_moe_call c[8];
		uint32_t *bufs[8][3];
		float *wb[8];
		double bytes = 0;
		for (int r = 0; r < NR; r++) {
			uint32_t na = 0, ne = 0;
			for (uint32_t e = 0; e < n; e++)
				slot[e] = UINT32_MAX;
			bufs[r][0] = malloc((size_t)T * sh->top_k * 4);
			bufs[r][1] = malloc((size_t)T * sh->top_k * 4);
			wb[r] = malloc((size_t)T * sh->top_k * 4);
			const void **ex = malloc(n * sizeof(void *));
			uint8_t *fm = malloc(n);
			for (uint32_t t = 0; t < T; t++)
				for (uint32_t k = 0; k < sh->top_k; k++) {
					uint32_t e;
					int dup;
					do {
						e = (uint32_t)(rnd() % n);
						dup = 0;
						for (uint32_t q = 0; q < k; q++)
							dup |= ae[t * sh->top_k + q] == e;
					} while (dup);
					ae[t * sh->top_k + k] = e;
					if (slot[e] == UINT32_MAX) {
						slot[e] = ne;
						ex[ne] = w + off[e];
						fm[ne] = fmts[e];
						bytes += packed_bytes(&L[tier[e]]) / (double)NR;
						ne++;
					}
				}
			for (uint32_t a = 0; a < T * sh->top_k; a++) {
				bufs[r][0][a] = slot[ae[a]];
				bufs[r][1][a] = a / sh->top_k;
				wb[r][a] = 1.0f / sh->top_k;
				na++;
			}
			c[r] = (struct strata_moe_call){ .hidden = sh->hidden, .inter = sh->inter, .n_tokens = T,
							 .x = x, .y = y, .n_experts = ne,
							 .extents = (const void *const *)ex, .fmts = fm, .n_assign = na,
							 .assign_expert = bufs[r][0], .assign_token = bufs[r][1],
							 .assign_weight = wb[r], .stream = g_st };
			CHECK(strata_moe_layer_gpu(&c[r], &g_err));
		}
		CHECK(strata_gpu_stream_sync(g_st, &g_err));
		strata_gpu_graph *g;
		CHECK(strata_gpu_graph_begin(g_st, &g_err));
		for (int r = 0; r < NR; r++)
			CHECK(strata_moe_layer_gpu(&c[r], &g_err));
		CHECK(strata_gpu_graph_end(g_st, &g, &g_err));
		double ms = time_graph(g, NR);
		strata_gpu_graph_free(g);
		double gbs = bytes / ms / 1e6;
		char tf[64];
		snprintf(tf, sizeof(tf), "%s/%s/%s", strata_fmt_traits(g_tier_fmt[0])->name,
			 strata_fmt_traits(g_tier_fmt[1])->name, strata_fmt_traits(g_tier_fmt[2])->name);
		printf("layer   %-5s %s T=%-4u %8.1f us  %9.0f layer-tok/s  %7.0f GB/s of packed experts  %5.1f%% of read\n",
		       sh->name, tf, T, ms * 1e3, T / ms * 1e3, gbs, 100 * gbs / g_read_gbs);
		if (g_csv)
			fprintf(g_csv, "layer,%s,15/30/55 %s,%u,%.3f,%.4f,%.1f,,%.0f,\n", sh->name, tf, T, ms * 1e3,
				gbs / g_read_gbs, gbs, T / ms * 1e3);
		for (int r = 0; r < NR; r++) {
			free(bufs[r][0]), free(bufs[r][1]), free(wb[r]);
			free((void *)c[r].extents), free((void *)c[r].fmts);
		}
	}
	free(off), free(fmts), free(tier), free(ext), free(afmt), free(slot), free(ae), free(at), free(aw);
	strata_gpu_free(w), strata_gpu_free(x), strata_gpu_free(y);
}

int main(int argc, char **argv)
{
	int quick = 0, decode_only = 0, no_decode = 0, no_layer = 0, phases = 0, prof_fmt = STRATA_FMT_HOT, s0 = 0, s1 = 2;
	int fmt_list[8] = { STRATA_FMT_HOT, STRATA_FMT_WARM, STRATA_FMT_COLD, STRATA_FMT_BF16, STRATA_FMT_Q4, STRATA_FMT_Q3 };
	int n_fmt = 6, fmt_given = 0;
	uint32_t pf_tokens[32], dt_list[8];
	int n_pf = 0, n_dt = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			g_reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
			g_csv = fopen(argv[++i], "w");
			if (!g_csv) {
				perror(argv[i]);
				return 1;
			}
		} else if (!strcmp(argv[i], "--layers") && i + 1 < argc) {
			char *end;
			unsigned long v = strtoul(argv[++i], &end, 10);
			if (*end || v < 2 || v > 64) {
				fprintf(stderr, "bench_kernels: --layers: want a count of 2..64, not %s\n", argv[i]);
				return 2;
			}
			g_layers = (uint32_t)v;
		} else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else if (!strcmp(argv[i], "--decode"))
			decode_only = 1;
		else if (!strcmp(argv[i], "--no-decode"))
			no_decode = 1;
		else if (!strcmp(argv[i], "--no-layer"))
			no_layer = 1;
		else if (!strcmp(argv[i], "--pf-tokens") && i + 1 < argc) {
			char *p = argv[++i], *end;
			for (n_pf = 0; *p && n_pf < 32; p = *end ? end + 1 : end) {
				unsigned long v = strtoul(p, &end, 10);
				if (end == p || v == 0 || v > 4096 || (*end && *end != ',')) {
					fprintf(stderr, "bench_kernels: --pf-tokens: want a list like 16,32,64 (1..4096)\n");
					return 2;
				}
				pf_tokens[n_pf++] = (uint32_t)v;
			}
		} else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
			char *p = argv[++i], *end;
			for (n_dt = 0; *p && n_dt < 8; p = *end ? end + 1 : end) {
				unsigned long v = strtoul(p, &end, 10);
				if (end == p || v == 0 || v > 16 || (*end && *end != ',')) {
					fprintf(stderr, "bench_kernels: --tokens: want a list like 1,4 (1..16)\n");
					return 2;
				}
				dt_list[n_dt++] = (uint32_t)v;
			}
		} else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
			i++;
			if (strcmp(argv[i], "kimi") && strcmp(argv[i], "qwen")) {
				fprintf(stderr, "bench_kernels: --shape: want kimi or qwen, not %s\n", argv[i]);
				return 2;
			}
			s0 = !strcmp(argv[i], "qwen"), s1 = s0 + 1;
		} else if (!strcmp(argv[i], "--formats") && i + 1 < argc) {
			char buf[128], *save = NULL;
			snprintf(buf, sizeof(buf), "%s", argv[++i]);
			n_fmt = 0, fmt_given = 1;
			for (char *tok = strtok_r(buf, ",", &save); tok && n_fmt < 8; tok = strtok_r(NULL, ",", &save)) {
				int f = strata_fmt_from_name(tok);
				if (f < STRATA_FMT_BF16) {
					fprintf(stderr, "bench_kernels: --formats: unknown format %s (bf16 hot warm cold q4 q3)\n",
						tok);
					return 2;
				}
				fmt_list[n_fmt++] = f;
			}
		} else if (!strcmp(argv[i], "--tier-formats") && i + 1 < argc) {
			char buf[128], *save = NULL;
			snprintf(buf, sizeof(buf), "%s", argv[++i]);
			int k = 0;
			for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), k++) {
				int f = strata_fmt_from_name(tok);
				if (k >= 3 || f < STRATA_FMT_HOT) {
					fprintf(stderr, "bench_kernels: --tier-formats: want three quantized formats, hot first\n");
					return 2;
				}
				g_tier_fmt[k] = f;
			}
			if (k != 3) {
				fprintf(stderr, "bench_kernels: --tier-formats: want three quantized formats, hot first\n");
				return 2;
			}
		} else if (!strcmp(argv[i], "--kernel") && i + 1 < argc) {
			struct strata_moe_config kc;
			strata_gpu_moe_config_defaults(&kc);
			if (strata_gpu_moe_config_parse(argv[++i], &kc, &g_err) ||
			    strata_gpu_moe_configure(&kc, &g_err)) {
				fprintf(stderr, "bench_kernels: --kernel: %s\n", g_err.msg);
				return 2;
			}
		} else if (!strcmp(argv[i], "--kernel2") && i + 1 < argc && g_k2 < 4) {
			strata_gpu_moe_config_defaults(&g_kc2[g_k2]);
			if (strata_gpu_moe_config_parse(argv[++i], &g_kc2[g_k2], &g_err)) {
				fprintf(stderr, "bench_kernels: --kernel2: %s\n", g_err.msg);
				return 2;
			}
			printf("%s: %s\n", g_k2_kind[0][g_k2], argv[i]);
			g_k2++;
		} else if (!strcmp(argv[i], "--phases"))
			phases = 1;
		else if (!strcmp(argv[i], "--profile")) {
			quick = 2;
			if (i + 1 < argc && argv[i + 1][0] != '-') {
				prof_fmt = strata_fmt_from_name(argv[++i]);
				if (prof_fmt < 0) {
					fprintf(stderr, "bench_kernels: --profile: unknown format %s\n", argv[i]);
					return 2;
				}
			}
		} else {
			printf("usage: bench_kernels [--reps N] [--csv FILE] [--quick] [--decode] [--no-decode] [--no-layer] [--layers N]\n"
			       "                     [--pf-tokens T1,T2,...] [--tokens T1,...] [--shape kimi|qwen] [--profile [FMT]]\n"
			       "                     [--formats hot,warm,cold,bf16,q4,q3] [--tier-formats H,W,C]\n"
			       "                     [--kernel2 KEY=VALUE,...] [--phases]\n"
			       "                     [--kernel KEY=VALUE,...]  (dec, split, bf16dec, bf16_kc, sqdec, sq_pf, sq_xs, sq_gv, sq_l2pf, sq_pdl, sq_q3i, sq_gvw, sq_gvl, sq_gvs, sq_gvx, dec_tr, small, small_ts, pstack, prefill_min, prefill, prefill_tiles; kernels.h)\n"
			       "Fused dequant MoE kernels vs streaming-read and cuBLAS ceilings (needs a GPU).\n");
			return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? 2 : 0;
		}
	}
	if (g_reps < 3)
		g_reps = 3;
	if (strata_gpu_count() <= 0) {
		printf("bench_kernels: no GPU, nothing to measure\n");
		return 0;
	}
	CHECK(strata_gpu_init(0, &g_err));
	CHECK(strata_gpu_stream_create(&g_st, &g_err));
	printf("bench_kernels on %s, %d SMs\n", strata_gpu_name(), strata_gpu_sm_count());
	if (g_csv)
		fprintf(g_csv, "kind,shape,fmt,tokens,us,ratio,gbs,tflops,tok_s,bound\n");
	const struct shape shapes[] = {
		{ "kimi", 7168, 1536, 16, 896, 16 },
		{ "qwen", 2048, 768, 8, 128, 8 },
	};
	if (quick == 2) {
		/* for a profiler: a few decode layers (kimi unless --shape), T=1 and T=16 */
		const uint32_t t1[] = { 1, 16 };
		g_read_gbs = 1;
		g_reps = 3;
		bench_decode(&shapes[s0], prof_fmt, t1, 2);
		if (prof_fmt >= STRATA_FMT_HOT && prof_fmt <= STRATA_FMT_COLD) {
			double wps;
			CHECK(strata_gpu_decode_ceiling(prof_fmt, STRATA_CEIL_FMA, &wps, NULL, &g_err));
			CHECK(strata_gpu_decode_ceiling(prof_fmt, STRATA_CEIL_TABLE, &wps, NULL, &g_err));
		}
		return 0;
	}
	measure_ceilings();
	const int *fmts = fmt_list;
	const uint32_t dec_tokens[] = { 1, 4, 8, 16 };
	/* q4 / q3: 2 and 3 tokens too (the row-streaming kernel's templates for 2
	 * and for 3 - 4 tokens) */
	const uint32_t sq_tokens[] = { 1, 2, 3, 4, 8, 16 };
	for (int s = s0; s < s1 && !no_decode; s++)
		for (int f = 0; f < (quick ? 1 : n_fmt); f++)
			if (n_dt)
				bench_decode(&shapes[s], fmts[f], dt_list, n_dt);
			else if ((fmts[f] == STRATA_FMT_Q4 || fmts[f] == STRATA_FMT_Q3) && !quick)
				bench_decode(&shapes[s], fmts[f], sq_tokens, 6);
			else
				bench_decode(&shapes[s], fmts[f], dec_tokens, 4);
	/* q4 / q3 at 1 - 4 tokens on the register-ring kernel too (sq_gv=0), when
	 * the row-streaming kernel took the rows above: both in one run */
	struct strata_moe_config kc0;
	strata_gpu_moe_config_get(&kc0);
	for (int s = s0; s < s1 && !no_decode && !quick && kc0.sq_gv; s++)
		for (int f = 0; f < n_fmt; f++)
			if (fmts[f] == STRATA_FMT_Q4 || fmts[f] == STRATA_FMT_Q3) {
				struct strata_moe_config kc = kc0;
				kc.sq_gv = 0;
				CHECK(strata_gpu_moe_configure(&kc, &g_err));
				g_dec_kind = "decode_ring";
				bench_decode(&shapes[s], fmts[f], n_dt ? dt_list : sq_tokens, n_dt ? n_dt : 4);
				g_dec_kind = "decode";
				CHECK(strata_gpu_moe_configure(&kc0, &g_err));
			}
	/* tier formats at 1 token on the other decode kernels too (dec_tr=1: the
	 * row-streaming kernel with the FMA decoder, kind decode_tr1; 2: with the
	 * codebook table, decode_tr2; 3: half of each, decode_tr3; 0: the ring
	 * kernel, decode_ring), beside the default's rows: all in one run */
	static const uint32_t one_token[] = { 1 };
	static const char *const tr_kind[] = { "decode_ring", "decode_tr1", "decode_tr2", "decode_tr3" };
	for (int s = s0; s < s1 && !no_decode && !quick; s++)
		for (int f = 0; f < n_fmt; f++)
			for (int v = 0; v < 4 && fmts[f] >= STRATA_FMT_HOT && fmts[f] <= STRATA_FMT_COLD; v++) {
				if (v == kc0.dec_tr)
					continue;
				struct strata_moe_config kc = kc0;
				kc.dec_tr = v;
				CHECK(strata_gpu_moe_configure(&kc, &g_err));
				g_dec_kind = tr_kind[v];
				bench_decode(&shapes[s], fmts[f], one_token, 1);
				g_dec_kind = "decode";
				CHECK(strata_gpu_moe_configure(&kc0, &g_err));
			}
	/* formats the one-launch small-layer kernel takes, at 1 token, on the
	 * other choice of the small key too (kind decode_small when the
	 * configuration does not take the format there, decode_nosmall when it
	 * does): both in one run */
	for (int s = s0; s < s1 && !no_decode && !quick; s++)
		for (int f = 0; f < n_fmt; f++)
			if (fmts[f] == STRATA_FMT_Q4 || fmts[f] == STRATA_FMT_Q3 ||
			    (fmts[f] >= STRATA_FMT_HOT && fmts[f] <= STRATA_FMT_COLD)) {
				struct strata_moe_config kc = kc0;
				kc.small = small_takes(&kc0, &shapes[s], fmts[f]) ? 0 : 1;
				CHECK(strata_gpu_moe_configure(&kc, &g_err));
				g_dec_kind = kc.small ? "decode_small" : "decode_nosmall";
				bench_decode(&shapes[s], fmts[f], one_token, 1);
				g_dec_kind = "decode";
				CHECK(strata_gpu_moe_configure(&kc0, &g_err));
			}
	for (int s = s0; s < s1 && !no_decode && !quick; s++)
		for (int f = 0; f < n_fmt; f++)
			for (int k = 0; k < g_k2; k++) {
				CHECK(strata_gpu_moe_configure(&g_kc2[k], &g_err));
				g_dec_kind = g_k2_kind[0][k];
				bench_decode(&shapes[s], fmts[f], one_token, 1);
				g_dec_kind = "decode";
				CHECK(strata_gpu_moe_configure(&kc0, &g_err));
			}
	for (int s = s0; s < s1 && phases; s++)
		for (int f = 0; f < n_fmt; f++)
			if (fmts[f] == STRATA_FMT_Q4 || fmts[f] == STRATA_FMT_Q3 ||
			    (fmts[f] >= STRATA_FMT_HOT && fmts[f] <= STRATA_FMT_COLD)) {
				bench_phases(&shapes[s], fmts[f], &kc0, "kernel");
				for (int k = 0; k < g_k2; k++)
					bench_phases(&shapes[s], fmts[f], &g_kc2[k], g_k2_kind[0][k]);
			}
	for (int s = s0; s < s1 && g_layers; s++)
		for (int f = 0; f < n_fmt; f++)
			bench_stack(&shapes[s], fmts[f], 1);
	if (decode_only) {
		if (g_csv)
			fclose(g_csv);
		strata_gpu_stream_destroy(g_st);
		return 0;
	}
	for (int s = s0; s < s1 && n_pf; s++)
		for (int f = 0; f < (fmt_given ? n_fmt : 2); f++)
			for (int i = 0; i < n_pf; i++)
				bench_prefill(&shapes[s], fmt_given ? fmts[f] : f ? STRATA_FMT_BF16 : STRATA_FMT_HOT,
					      pf_tokens[i]);
	for (int s = s0; s < s1 && !n_pf; s++) {
		for (int f = 0; f < (quick ? 1 : n_fmt); f++)
			bench_prefill(&shapes[s], fmts[f], 256);
		if (!quick) {
			bench_prefill(&shapes[s], STRATA_FMT_HOT, 64);
			bench_prefill(&shapes[s], STRATA_FMT_BF16, 64);
		}
	}
	const uint32_t layer_tokens[] = { 1, 16, 64, 256 };
	for (int s = s0; s < s1 && !no_layer; s++)
		bench_layer(&shapes[s], layer_tokens, quick ? 2 : 4);
	if (g_csv)
		fclose(g_csv);
	strata_gpu_stream_destroy(g_st);
	return 0;
}
