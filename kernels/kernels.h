/*
 * GPU kernels beyond the MoE-layer contract of moe.h: the pieces the tests,
 * the benchmark and the engine call one at a time.  Plain C; implemented in
 * the kernels/ .cu files when the build has CUDA and by kernels/gpu_none.c otherwise
 * (every function then fails with STRATA_EUNSUPPORTED).
 *
 * Pointers named d_* are device pointers; everything else is host memory.
 * `stream` is a strata_gpu_stream* (NULL = the legacy default stream).
 *
 * Threading: the GPU layer keeps one context per process (scratch buffers,
 * cuBLAS handle).  Calls may come from any thread but are serialised by a
 * mutex; kernels enqueued on different streams share the MoE scratch, so the
 * MoE entry points must be driven from one stream at a time.
 *
 * How strata_moe_layer_gpu (moe.h) runs: x, y and every extents[e] are device
 * pointers (extents 16-byte aligned; cudaMalloc'd buffers are); the call
 * struct itself, fmts[] and assign_*[] are host arrays, copied into the
 * launch parameters, so no host/device synchronisation happens.  The
 * (expert, token) pairs are cut into launches of at most STRATA_MOE_MAX_SLOTS
 * expert slots and STRATA_MOE_MAX_ASSIGN assignments, the slots in format
 * order (warps that fetch tasks together run one decoder; 1.1 - 1.5x on mixed
 * tier layers); each launch is one
 * persistent kernel (one CTA per SM: 16 warps for token tiles of 8, 8 warps
 * otherwise) that walks every active expert's gate|up rows, then its down
 * rows, in tasks of 64 rows x one token tile, and multiplies on tensor cores
 * (mma.sync m16n8k16, f32 accumulation).  Tier-format rows go through a
 * 3-stage shared-memory pipeline (3 x 60 KB) fed by the bulk copy engine
 * (cp.async.bulk, one mbarrier per stage) and are decoded in registers: the computed codebook of
 * FORMATS.md (IMAD, IDP4A, PRMT, three HFMA2 per weight pair, no table) gives
 * exact fp16 weights for fp16 MMAs, the block scale is applied to each
 * 32-weight partial sum.  bf16 rows skip shared memory: every lane loads its
 * A fragments with 16-byte loads straight into registers (compute_direct).
 * Token tiles are 8, 16 or 32 wide, chosen from the largest token count of
 * the experts it runs (decode, 1..16 tokens; 32 for f32 experts or with the
 * prefill path off).  Experts with >= 17 tokens in bf16 or a tier format take
 * the tiled prefill path instead (kernels/moe_prefill.cuh; from 17 it beats
 * the 32-token tiles of this kernel by 1.3 - 7x on the H200, see
 * experiments/kernels/README.md): activations gathered into 16-bit rows, then a
 * grouped gate|up GEMM (SwiGLU in the epilogue, h stored 16-bit) and a grouped
 * down GEMM (router weights, atomics into y), CTA tiles of 64 rows x 64 tokens
 * (4 warps, two CTAs per SM) up to 64 tokens, 128 rows x 128 tokens (16 warps
 * for tier experts, 8 for bf16) up to 191, 64 x 256 from 192 tokens; cp.async
 * ring, tier blocks decoded once
 * per CTA into fp16 shared-memory tiles, ldmatrix + mma.sync.  On an sm_90a
 * build and GPU, bf16 experts with >= 192 tokens (the `prefill` key) take the
 * warpgroup-MMA kernel instead (kernels/moe_prefill_sm90.cuh: the same
 * gather and epilogues, 128 rows x 256 tokens for bf16, 128 x 128 for tier
 * formats, wgmma.mma_async on swizzled shared-memory tiles).  A down task
 * of the persistent kernel waits (spin on a per-expert
 * counter) for that expert's gate|up tasks.  Launches whose experts all have
 * <= 8 tokens, all in tier formats, with at least two tasks per warp (e.g. the
 * Kimi shape at batch 1) take the warp-streaming decode kernel instead
 * (kernels/moe_decode.cuh: one warp per task of 32 rows, its own cp.async
 * ring, tasks from a global counter, the block scale once per 256 weights;
 * launches of 2 - 4 tasks per warp and <= 4 tokens per expert cut each row
 * into 3 split-K parts, so the gate|up tasks end evenly);
 * large launches whose experts all have <= 8 tokens and are all bf16 take the bf16
 * decode kernel (kernels/moe_dec_bf16.cuh: per-warp register rings of 16-byte
 * loads, tasks of 32 rows x a K chunk, split-K sums of gate|up through a
 * scratch; the configuration's bf16dec=off sends them to the persistent kernel).
 * The scalar formats q4 and q3 (kfmt_scalar.cuh) have a decoder in the
 * warp-streaming decode kernel only: their experts with <= 16 tokens take it
 * in a launch of their own (always, whatever the task count; split-K parts
 * until every warp has two tasks), those with more tokens, and all of them
 * with dec=off, run as BF16 copies made in a 1 GiB scratch a few experts at a
 * time (the BF16 paths above; hidden and inter multiples of 32).
 * Launches of one token per expert in one tier format (hot, warm, cold; with
 * the configuration's small key also q4, q3) whose weights fit in the GPU's
 * shared memory (e.g. a Qwen3-30B-A3B layer: ~110 KB of hot per SM) take the
 * one-launch kernel instead (kernels/moe_dec_small.cuh: each CTA bulk-copies
 * its share of gate|up and down rows into shared memory at its start, before
 * the programmatic-dependent-launch wait, then gate|up, h, a per-expert
 * counter and down in the same launch, on the row-streaming kernels' dot code).
 * Decode speed of the tier formats is bound by instruction issue (8.8
 * instructions per weight in the decode kernel, ~6 of them the decode itself;
 * ncu), see experiments/kernels/README.md.
 *
 * Accuracy: bf16/f32 experts enter the tensor cores as bf16 (relative error
 * ~3e-3 against the CPU reference); tier experts as exact fp16 weights times
 * fp16 activations (~4e-4); tests/test_kernels.c states the bound per format.
 * fp16 range of tier experts: on the prefill path an activation row whose
 * max |x| reaches 2^15 is stored times 2^-e (smallest such power of two; e = 0,
 * unchanged, for ordinary rows) and gate, up are multiplied back by 2^e
 * before SiLU; h = silu(gate) * up gets a power of two of its own per token
 * and 32-column segment (stored times 2^-e, folded back into the down
 * GEMM's f32 sums), so activations up to the f32 range stay finite and exact
 * to fp16 rounding.  On the decode paths (x and h are f32 there, converted to
 * fp16 per 32-weight unit): the persistent kernel tests each unit's
 * activations and packs a unit with |x| > 65504 with each token scaled by 2^-e
 * (its sums scaled back); the warp-streaming kernel tests each 256-weight
 * block's sums and recomputes a block that is not finite the same way.
 *
 * Hangs: every wait of a kernel for other CTAs (a per-expert counter, a
 * stack kernel's grid barrier or its copies) gives up after 20 s without
 * progress: it prints the CTA, the thread and what it waited for, and traps.
 * The launch then fails (STRATA_EGPU from the call or the next
 * synchronisation) instead of hanging the process; as with any device-side
 * fault, the process's CUDA context is unusable after it.
 */
#ifndef STRATA_KERNELS_H
#define STRATA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "strata/error.h"
#include "strata/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_MOE_MAX_SLOTS 256u
#define STRATA_MOE_MAX_ASSIGN 1024u

/*
 * Dequantize a packed matrix (quant.h layout, format fmt, rows x cols) on the
 * GPU into d_out (rows x cols floats, padding dropped) with the same decoders
 * the fused kernels use.  Bit-exact against strata_dequantize_matrix().
 */
int strata_gpu_dequantize(int fmt, const void *d_packed, uint32_t rows, uint32_t cols,
			  float *d_out, strata_gpu_stream *stream, struct strata_error *err);

/* Whether the fused kernels handle fmt at this shape (0), or why not (<0, err set):
 * passthrough formats (f32, bf16) need cols multiples of 32. */
int strata_gpu_moe_check(int fmt, uint32_t hidden, uint32_t inter, struct strata_error *err);

/*
 * The kernel configuration: which kernel a launch takes.  The defaults are
 * the measured best (experiments/kernels/README.md); the "auto" values let
 * the dispatch choose per launch by the rules below.  The one way to change
 * it is strata_gpu_moe_configure (tests; `bench_kernels --kernel
 * KEY=VALUE,...` through strata_gpu_moe_config_parse); no kernel setting is
 * read from the environment.  The only environment variable of the GPU layer
 * is STRATA_NO_GPU: when set (any value), strata_gpu_count() reports no GPU,
 * so everything runs on the host stand-ins as on a machine without one.
 *
 *   key          field                  default  values
 *   prefill_min  prefill_min            17       experts with >= n tokens (bf16 or a tier
 *                                                format) take the tiled prefill path; "off"
 *                                                (UINT32_MAX): every expert the persistent kernel
 *   dec          dec_warps, dec_stages  auto     launches whose experts all have <= 16 tokens and
 *                                                are all in tier formats take the warp-streaming
 *                                                decode kernel (kernels/moe_decode.cuh): auto
 *                                                (-1): 12 x 4 when the launch has at least two
 *                                                tasks per warp (9 - 16 tokens: two 8-token tiles
 *                                                per task); off (0): the persistent kernel; a
 *                                                variant (8x4, 8x5, 12x3, 12x4, 12x4u = 12 x -4
 *                                                with a stage's 8 units unrolled, 16x3; 8x2t,
 *                                                12x2t, 7x3t = W x (STRATA_MOE_DEC_TAB + N):
 *                                                the tier codebook through a shared-memory table
 *                                                of f(byte sum) instead of HFMA2s, 128 KB of the
 *                                                CTA's shared memory, block scales read from
 *                                                global memory; one 8-token tile, tier experts
 *                                                only, else 12x4): always it
 *   split        split                  auto     split-K parts per gate|up and down row of that
 *                                                kernel (whole 256-weight blocks; 1: none): auto
 *                                                (0): 3 for launches of one 8-token tile, at most 4
 *                                                tokens per expert and two to four unsplit tasks per
 *                                                warp (e.g. Kimi at batch 1), none otherwise (more
 *                                                tokens pay more partial-sum atomics; on the
 *                                                Qwen3-30B-A3B shape it measured slower); with a
 *                                                forced dec variant, auto means none
 *   bf16dec      bf16_warps, bf16_depth auto     launches whose experts all have <= 8 tokens and
 *                                                are all bf16 take the bf16 decode kernel
 *                                                (kernels/moe_dec_bf16.cuh): auto (-1): 16 x 4 for
 *                                                launches of at least 4 tasks per warp (Kimi, not
 *                                                Qwen3-30B-A3B); off (0); 16x4, 12x6, 8x8: always
 *   bf16_kc      bf16_kc                512      its K chunk, about this many weights (>= 32)
 *   poison       poison                 0        tests: fill the h scratch with NaN before every
 *                                                call, so a tile read before it is written shows
 *   sqdec        sq_dec                 auto     launches whose experts all have <= 8 tokens and
 *                                                are all in one scalar format (q4 or q3) take the
 *                                                scalar decode kernel (kernels/moe_dec_sq.cuh):
 *                                                auto (-1): unless dec or split is forced; off (0):
 *                                                the warp-streaming decode kernel (compute_sq)
 *   sq_pf        sq_pf                  0        1: that kernel pulls each next task's code bytes
 *                                                into L2 ahead of its register ring (measured
 *                                                slower on the H200: 0.223 vs 0.251 of read, Kimi)
 *   sq_xs        sq_xs                  1        that kernel stages the launch's x rows in shared
 *                                                memory as fp16 at its start when they fit (48 KB;
 *                                                x 16-byte aligned, hidden % 8 == 0; not with
 *                                                sq_pf=1): 0.366 vs 0.336 of read, Kimi q4 T=1;
 *                                                0: x through L1
 *   sq_gv        sq_gv                  1        launches whose experts all have <= 4 tokens and
 *                                                are all in one scalar format take the row-
 *                                                streaming kernel (kernels/moe_dec_gv.cuh: two
 *                                                launches, gate|up then down, whole rows per
 *                                                task, dp2a for q4) when sqdec is auto and the
 *                                                staged activations fit (q4 launches of 3 - 4
 *                                                tokens over more than 128 Mi weights keep the
 *                                                kernel above: faster there); 0: the kernel
 *                                                above; 2: the row-streaming kernel's earlier inner
 *                                                loop (lanes per row at run time, dp4a on byte
 *                                                planes for q4), for comparison
 *   sq_l2pf      sq_l2pf                0        1 or 2: that kernel's warps prefetch the rows
 *                                                of their (task, matrix) step this many steps
 *                                                ahead into L2 (cp.async.bulk.prefetch, one per
 *                                                row); measured slower on the H200 (Kimi q4 T=1
 *                                                0.565 vs 0.768 of read), kept for comparison
 *   sq_pdl       sq_pdl                 1        that kernel's down launch is a programmatic
 *                                                dependent launch (starts loading weights while
 *                                                the gate|up launch ends); 0: a plain launch
 *   sq_q3i       sq_q3i                 1        that kernel's q3 loop: 1: at 1 - 2 tokens per
 *                                                expert codes taken as bytes (masks and
 *                                                shifts) and dp2a on 16-bit fixed-point
 *                                                activations, as q4's (Kimi q3 T=1 0.595 vs
 *                                                0.486 of read), at 3 - 4 tokens kfmt_scalar's
 *                                                exact fp16 codes and HFMA2 (faster there);
 *                                                0: fp16 always; 2: dp2a always
 *   sq_gvw       sq_gvw                 16       that kernel's warps per CTA at one token per
 *                                                expert, with its register buffers of batches:
 *                                                16 (3 buffers), 12 (4), 8 (6; both measured
 *                                                slower: Kimi q4 T=1 0.712 / 0.613 vs 0.760 of
 *                                                read); launches whose lanes per row are chosen
 *                                                at run time keep 16
 *   sq_gvl       sq_gvl                 0        that kernel's lanes per row, two digits (gate|up,
 *                                                down): 2^digit lanes, digit 0 its own choice
 *                                                (e.g. 41: 16 lanes per gate|up row); measured
 *                                                slower at Kimi q4 T=1 (21 / 41 / 51: 0.689 /
 *                                                0.663 / 0.653 vs 0.773 of read); 0: its choice;
 *                                                under sq_gvx, the lanes per row set where
 *                                                that geometry fits (else a row per lane)
 *   sq_gvs       sq_gvs                 2        that kernel's activation staging (q4, q3): 1:
 *                                                rows of up to two 8-column slices per thread
 *                                                (e.g. the Kimi-K2 x row) read once into
 *                                                registers for their largest magnitudes and
 *                                                their values (one round trip to L2 while the
 *                                                first weights stream); 2: the same, and a
 *                                                gate|up launch that is not chained loads its
 *                                                x slices before its first weights; 0: one
 *                                                slice per thread, else a pass for the
 *                                                magnitudes and one for the values (the same
 *                                                staged values in every case)
 *   sq_gvx       sq_gvx                 1        that kernel at 1 - 2 tokens per expert (q4, q3's
 *                                                integer loop, 16 warps): 1: a lane takes the
 *                                                same chunk of several rows (q4 4, q3 2;
 *                                                STRATA_GPU_LAUNCH_SCALAR_GEMV_XR), one set of
 *                                                shared-memory loads of x for all of them, where
 *                                                the launch's rows and chunks divide evenly
 *                                                (Kimi T=1 q4 80.7 vs 82.1 us, q3 75.9 vs 82.1;
 *                                                Qwen q4 13.7 vs 16.2, q3 15.8 vs 16.9; Kimi
 *                                                T=2 q4 96.7 vs 125.3, q3 107.1 vs 133.1); 0:
 *                                                a row per lane
 *   prefill      pf_path                auto     the tiled prefill path's kernel for bf16 and tier
 *                                                experts: sm90 (1): the warpgroup-MMA kernel
 *                                                (kernels/moe_prefill_sm90.cuh) for every such
 *                                                expert; sm90ws (3): the same with tier experts on
 *                                                its warp-specialized tile; sm90p (4) / sm90p1 (5) /
 *                                                sm90p3 (6): the same with tier experts as BF16
 *                                                tiles of 256 tokens decoded by two / one / three
 *                                                producer warpgroups (bf16(scale * f), bf16
 *                                                activations); sm90pc (7): as sm90p with the
 *                                                activations staged by the MMA warpgroups;
 *                                                sm90ph (8): sm90pc's tile as fp16 tiles
 *                                                (fp16(scale * f * 2^E), E per weight row, fp16
 *                                                activations with the range guard, fp16 MMAs);
 *                                                sm90pp (9): sm90pc persistent (a CTA per SM
 *                                                running every gridDim.x-th tile, the next
 *                                                tile's first steps decoded during the
 *                                                epilogue); sm90pp2 (10): the same with
 *                                                two steps per producer hand-over (one
 *                                                proxy fence per two steps);
 *                                                mma (2): the mma.sync kernel
 *                                                (kernels/moe_prefill.cuh); auto (0): sm90 for
 *                                                bf16 experts with >= 192 tokens, sm90pp2 for
 *                                                tier experts with >= prefill_tiles tokens, mma
 *                                                for the others (measured fastest so).  Every
 *                                                value but mma falls back to mma where the GPU
 *                                                or the build is not sm_90a
 *   prefill_tiles pf_tiles_min          32       that token count ("off": UINT32_MAX, tier
 *                                                experts stay on mma under auto); auto takes
 *                                                sm90pp2 for them (faster than mma and sm90pc
 *                                                at 32 - 256 tokens per expert at the Kimi
 *                                                shape)
 *   dec_tr       dec_tr                 auto     1, 2 or 3: launches whose experts all have one
 *                                                token and are all in one tier format take the
 *                                                row-streaming kernel (kernels/moe_dec_tr.cuh:
 *                                                sq_gv's kernel with code words straight into
 *                                                registers and one lane's 256-weight block per
 *                                                pair of MMA columns) when the staged activations
 *                                                fit; 1: the FMA decoder, 2: the codebook table,
 *                                                3: half of each group's weight pairs through
 *                                                the table; 0: the kernels above; auto (-1):
 *                                                hot 1, warm and cold 2 for launches of at
 *                                                least STRATA_MOE_TR_AUTO_WEIGHTS weights (each
 *                                                the fastest against the ring kernel, Kimi T=1:
 *                                                hot 230 / 230 vs 237 / 237 us, warm 214 / 217
 *                                                vs 232 / 233 on merged main; cold 214 / 214 vs
 *                                                228 / 228 on the H200 of 2026-12-06, 1.8% faster
 *                                                on the H100 of 2026-12-05; Qwen3-30B-A3B-sized
 *                                                launches slower), 0 otherwise; a cold stack
 *                                                under pstack through the table (see pstack)
 *   small        small                  auto     launches whose experts all have one token and
 *                                                are all in one of q4, q3, hot, warm, cold take
 *                                                the one-launch kernel (kernels/moe_dec_small.cuh:
 *                                                each CTA's share of the layer's weights bulk-
 *                                                copied into shared memory at its start, gate|up,
 *                                                h, per-expert counters, down in one launch) when
 *                                                that share fits (e.g. the Qwen3-30B-A3B layer);
 *                                                1: always then; auto (-1): for the formats of
 *                                                STRATA_MOE_SMALL_AUTO_FMTS (hot, warm, cold:
 *                                                Qwen3-30B-A3B T=1 hot 22.4 vs 33.2 us, a 16-layer
 *                                                stack 21.1 vs 29.2 us per layer; q4 and q3
 *                                                measured slower) in launches of at most
 *                                                STRATA_MOE_SMALL_AUTO_WEIGHTS weights with
 *                                                dec_tr, sq_gv, sqdec and sq_q3i at their
 *                                                defaults; 0: the kernels above; 3: as 1 with
 *                                                thread 0 issuing the copies one (task, matrix)
 *                                                after another and every thread fencing h (the
 *                                                first version; 1 and auto: warp 0's lanes issue
 *                                                them at once, one fence: 16-layer stacks hot /
 *                                                warm / cold 21.5 / 21.2 / 20.2 vs 21.8 / 21.5 /
 *                                                20.9 us per layer in one run); 2: as 1, each code row
 *                                                its own bulk copy into shared memory at a pitch
 *                                                skewed so a warp's rows fall on different banks
 *                                                (1: the task's rows rowc bytes apart, a multiple
 *                                                of 128 at Qwen3-30B-A3B: n-way bank conflicts);
 *                                                measured slower (Qwen hot 28.6 vs 23.0 us: the
 *                                                copies of one CTA, 264 instead of 16, take 9.6
 *                                                instead of 2.9 us to issue); with small 1, 2 or 3,
 *                                                sq_gvl forces its lanes per row as for the
 *                                                row-streaming kernel
 *   small_ts     small_ts               0        1: the small-layer kernel records per-CTA phase
 *                                                timestamps (strata_gpu_small_phases); 0: none
 *   pstack       pstack                 4        1 - 8: strata_gpu_moe_stack calls whose layers
 *                                                all have one token, the same shape, at most 16
 *                                                experts, all q4 or all q3, run on the persistent stack
 *                                                kernel (kernels/moe_dec_ps.cuh: one launch per
 *                                                16 layers, a producer warp per CTA streaming
 *                                                the next rows into shared memory, at most
 *                                                this many pieces in flight, two grid barriers
 *                                                a layer; STRATA_GPU_LAUNCH_PSTACK) where each
 *                                                CTA's share fits (e.g. the Qwen3-30B-A3B
 *                                                layer); hot, warm, cold stacks with as many
 *                                                experts in every layer on the small-layer
 *                                                kernel over the stack (moe_dec_small.cuh: one
 *                                                launch per 16 layers, a layer's down weights
 *                                                copied once its x is staged, the next layer's
 *                                                gate|up once its h is, a grid barrier a
 *                                                layer; the window does not apply; dec_tr=2 or 3,
 *                                                and auto on cold stacks: the codebook table
 *                                                decoder where the table fits beside the layer's
 *                                                share, filled once a launch)
 *                                                where its geometry fits and divides evenly; 0: the
 *                                                kernels above.  On by default since it measured
 *                                                faster for every format (H100, 16-layer
 *                                                Qwen3-30B-A3B stacks, same run: q4 11.3 us a
 *                                                layer at 4 pieces against 14.1 chained, q3
 *                                                11.2 (4-row q3 pieces; 15.2 with 2-row ones)
 *                                                against 16.7, hot / warm / cold 19.4 /
 *                                                19.1 / 18.9 against 22.3 / 22.1 / 20.2); on the
 *                                                H200 an earlier version was slower (q4 15.3
 *                                                against 13.9 us) and this one has not run
 *                                                there (experiments/kernels/README.md)
 *
 * Everything else the kernels do is fixed: 16-warp persistent CTAs for
 * 8-token tiles and 8 warps for 16-token ones, stage copies by the bulk copy
 * engine, bf16 weights straight into registers, the fp16 range guard, slots
 * grouped by format, and the prefill tile by token count (the experiments
 * that chose each are in experiments/kernels/README.md).
 */
struct strata_moe_config {
	uint32_t prefill_min;
	int dec_warps, dec_stages;
	uint32_t split;
	int bf16_warps, bf16_depth;
	uint32_t bf16_kc;
	int poison;
	int sq_dec, sq_pf, sq_xs;
	int pf_path;
	int sq_gv, sq_pdl;
	int sq_l2pf;
	uint32_t pf_tiles_min;
	int sq_q3i, sq_gvw, sq_gvl;
	int dec_tr;
	int small, small_ts;
	int sq_gvs;
	int sq_gvx;
	int pstack;
};
#define STRATA_MOE_CONFIG_DEFAULT { 17, -1, 0, 0, -1, 0, 512, 0, -1, 0, 1, 0, 1, 1, 0, 32, 1, 16, 0, -1, -1, 0, 2, 1, 4 }
/* small=auto: the formats (bit fmt: hot, warm, cold) and the largest launch
 * (weights) it takes: the measured Qwen3-30B-A3B layer is 37.7 Mi weights */
#define STRATA_MOE_SMALL_AUTO_FMTS ((1u << 2) | (1u << 3) | (1u << 4))
#define STRATA_MOE_SMALL_AUTO_WEIGHTS (48ull << 20)
#define STRATA_MOE_TR_AUTO_WEIGHTS (128ull << 20) /* dec_tr=auto: the smallest launch (weights) it takes */
#define STRATA_MOE_SPLIT_MAX 64u
#define STRATA_MOE_DEC_TAB 100 /* dec_stages of the table variants: 100 + stages */
void strata_gpu_moe_config_defaults(struct strata_moe_config *c);
/* STRATA_EINVAL naming the field and the allowed values. */
int strata_gpu_moe_config_validate(const struct strata_moe_config *c, struct strata_error *err);
/* Apply "key=value[,key=value...]" (keys above) on top of *c, then validate. */
int strata_gpu_moe_config_parse(const char *text, struct strata_moe_config *c, struct strata_error *err);
/* Validate and make c the configuration of every later call (tests set one
 * and put the defaults back the same way). */
int strata_gpu_moe_configure(const struct strata_moe_config *c, struct strata_error *err);
void strata_gpu_moe_config_get(struct strata_moe_config *c);

/* Launches of each kernel so far in this process (for tests, which assert
 * which kernel a configuration ran). */
enum strata_gpu_launch {
	STRATA_GPU_LAUNCH_DECODE_SPLIT,   /* warp-streaming decode kernel with split-K parts */
	STRATA_GPU_LAUNCH_BF16_DECODE,    /* bf16 decode kernel */
	STRATA_GPU_LAUNCH_PREFILL_SM90,   /* sm_90a (warpgroup-MMA) prefill kernel */
	STRATA_GPU_LAUNCH_PREFILL_SM90P,  /* those with tier experts as BF16 tiles (prefill=sm90p, sm90p1, sm90p3) */
	STRATA_GPU_LAUNCH_SCALAR_DECODE,  /* scalar-format (q4, q3) decode kernel */
	STRATA_GPU_LAUNCH_SCALAR_STAGED,  /* those with x staged in shared memory (sq_xs) */
	STRATA_GPU_LAUNCH_SCALAR_GEMV,    /* layer launches (gate|up + down) of the row-streaming kernel (sq_gv) */
	STRATA_GPU_LAUNCH_CHAINED,        /* kernels launched chained in a stack (strata_gpu_moe_stack) */
	STRATA_GPU_LAUNCH_TIER_GEMV,      /* layer launches (gate|up + down) of the tier row-streaming kernel (dec_tr) */
	STRATA_GPU_LAUNCH_SMALL,          /* launches of the one-launch small-layer kernel (small) */
	STRATA_GPU_LAUNCH_SCALAR_GEMV_XR, /* those of SCALAR_GEMV with several rows per lane (sq_gvx) */
	STRATA_GPU_LAUNCH_PSTACK,         /* pstack launches: the persistent stack kernel, the small-layer kernel over a stack */
	STRATA_GPU_LAUNCH_PSTACK_TAB,     /* those of PSTACK decoding tier formats through the codebook table (dec_tr=2, 3) */
	STRATA_GPU_LAUNCH_KINDS
};
uint64_t strata_gpu_moe_launches(enum strata_gpu_launch kind);
/*
 * Phase timestamps of the one-launch small-layer kernel (kernel configuration
 * small_ts=1, for finding where its time goes): per launch, per CTA,
 * STRATA_SMALL_TS_WORDS words: [0] the global timer (ns) at the CTA's start,
 * [1] at its end, [2 + phase] the SM's clock64 when thread 0 passed the phase
 * (0: the CTA has no such phase, e.g. no gate|up task).  The small-layer
 * kernel over a stack (pstack on tier stacks) records each layer as a
 * launch of its own: [0] at the layer's start, END and [1] after the grid
 * barrier that ends it; ISSUED and PDL in the first layer only.  So does the
 * persistent stack kernel (pstack on q4 / q3 stacks): ISSUED when its
 * producer has issued the layer's gate|up pieces (mostly before the layer's
 * start: a negative time), CNT_PUB its h counters added to, CNT_WAIT the
 * counters of its down experts complete, no PDL or Y.  The phases, in order:
 */
enum strata_small_ts {
	STRATA_SMALL_TS_START,      /* kernel start */
	STRATA_SMALL_TS_ISSUED,     /* the CTA's bulk copies issued */
	STRATA_SMALL_TS_PDL,        /* chained: the earlier launches done (griddepcontrol.wait) */
	STRATA_SMALL_TS_XSTAGED,    /* x staged in shared memory */
	STRATA_SMALL_TS_MBAR0,      /* warp 0's first gate|up weights arrived */
	STRATA_SMALL_TS_GU_W0,      /* warp 0's gate|up items done */
	STRATA_SMALL_TS_GU,         /* every warp's gate|up items done (CTA barrier) */
	STRATA_SMALL_TS_CNT_PUB,    /* h written, the experts' counters raised */
	STRATA_SMALL_TS_CNT_WAIT,   /* the counters of the CTA's down experts complete */
	STRATA_SMALL_TS_DN_STAGED,  /* h staged */
	STRATA_SMALL_TS_DN_W0,      /* warp 0's down items done */
	STRATA_SMALL_TS_DN,         /* every warp's down items done */
	STRATA_SMALL_TS_Y,          /* y added */
	STRATA_SMALL_TS_END,        /* the counters' reset done: exit */
	STRATA_SMALL_TS_N
};
#define STRATA_SMALL_TS_WORDS 16u
#define STRATA_SMALL_TS_CTAS 256u    /* CTAs per launch recorded (more: none) */
#define STRATA_SMALL_TS_LAUNCHES 64u /* launches kept (the latest) */
/* Waits for the device, then copies the timestamps of the small-layer
 * launches since the previous call (at most STRATA_SMALL_TS_LAUNCHES, the
 * latest, in launch order) into ts (cap launches x STRATA_SMALL_TS_CTAS x
 * STRATA_SMALL_TS_WORDS words) and their grid sizes into grid (cap); *n the
 * launches copied.  STRATA_EUNSUPPORTED without a GPU. */
int strata_gpu_small_phases(uint64_t *ts, uint32_t *grid, uint32_t cap, uint32_t *n, struct strata_error *err);
/*
 * Decode of a stack of MoE layers, the way a model runs them: calls[0 ..
 * n_layers) are the layers' calls in order (moe.h's strata_moe_call, each
 * with its own experts, routing, x and y, all on one stream; layer l's x is
 * typically layer l-1's y), enqueued back to back with no host/device
 * synchronisation.  The result is that of strata_moe_layer_gpu on each call
 * in order (y += the layer's output; y must not alias x), only faster: the
 * kernels that run batch-1 decode (the persistent kernel, the warp-streaming
 * decode kernel, the tier row-streaming and the small-layer kernels) are
 * launched as programmatic dependent launches, so a launch's CTAs start where
 * the previous launch's CTAs have ended and issue their first weight loads
 * while it finishes, and wait for the earlier launches (griddepcontrol.wait)
 * before they read activations or touch the h scratch, y or the sync
 * counters.  Kernels of other paths (prefill, bf16 and the register-ring
 * scalar decode, the row-streaming q4/q3 kernel, which was faster plain, the
 * BF16 copies of q4/q3 experts and every launch on them) run as plain
 * launches in between.  flags: STRATA_MOE_STACK_PLAIN:
 * plain launches (as strata_moe_layer_gpu on each call, for comparisons);
 * STRATA_MOE_STACK_L2PF: each chained launch also prefetches the weights of
 * the launch after it into L2 (bulk prefetch; the row-streaming kernel's
 * gate|up launch its layer's down matrices, its down launch the next layer's
 * gate|up matrices, the other kernels the next layer's expert extents; none
 * beyond 24 MB or 64 experts): measured slower on the H200
 * (experiments/kernels/README.md, "Decode of a stack of layers").  With the
 * configuration's poison the h scratch is filled with NaN before the stack's
 * first launch only.  An error names the layer; the layers before it are
 * enqueued.  Under the kernel configuration pstack=1 - 8 a stack whose layers
 * all have one token, the same shape and at most 16 experts, all in one
 * format, runs as one launch per 16 layers instead, whatever the flags: q4
 * or q3 on the persistent stack kernel (kernels/moe_dec_ps.cuh), hot, warm
 * or cold (as many experts in every layer) on the small-layer kernel over
 * the stack (kernels/moe_dec_small.cuh), each where its share of a layer
 * fits in shared memory.
 */
struct strata_moe_call;
#define STRATA_MOE_STACK_PLAIN 1u
#define STRATA_MOE_STACK_L2PF 2u
int strata_gpu_moe_stack(const struct strata_moe_call *calls, uint32_t n_layers, unsigned flags,
			 struct strata_error *err);

/* Whether this GPU and build can run the sm_90a prefill kernel (1) or not (0). */
int strata_gpu_moe_prefill_sm90_usable(void);

/*
 * BF16 paths through cuBLAS (cublasGemmEx, f32 accumulation), for shared
 * experts and non-routed layers whose weights stay BF16.
 *   strata_gpu_linear_bf16:  d_y[n x rows] = alpha * d_x[n x cols] W^T + beta * d_y
 *     W: rows x cols row-major bf16 (STRATA_FMT_BF16 codes region); d_x f32
 *     (converted to bf16 in a scratch buffer).
 *   strata_gpu_expert_bf16:  d_y[n x hidden] += weight * down(silu(gate x) * up x)
 *     for an STRATA_FMT_BF16 expert extent (quant.h layout).
 * strata_gpu_gemm_bf16 is the raw product on bf16 operands already on the
 * device (d_c[n x rows] f32 = d_b[n x cols] d_a^T), used as the benchmark's
 * cuBLAS baseline.
 */
int strata_gpu_linear_bf16(const uint16_t *d_w, uint32_t rows, uint32_t cols, const float *d_x,
			   uint32_t n, float *d_y, float alpha, float beta, strata_gpu_stream *stream,
			   struct strata_error *err);
int strata_gpu_expert_bf16(const void *d_extent, uint32_t hidden, uint32_t inter, const float *d_x,
			   uint32_t n, float weight, float *d_y, strata_gpu_stream *stream,
			   struct strata_error *err);
int strata_gpu_gemm_bf16(const uint16_t *d_a, uint32_t rows, uint32_t cols, const uint16_t *d_b,
			 uint32_t n, float *d_c, strata_gpu_stream *stream, struct strata_error *err);

/* Benchmark helpers. */
/* Read every byte of d_buf once (16-byte loads, one CTA per SM x 4, result
 * folded into *d_sink): the streaming-read ceiling. */
int strata_gpu_read_bytes(const void *d_buf, size_t bytes, uint32_t *d_sink, strata_gpu_stream *stream,
			  struct strata_error *err);
/* Fill d_buf with n pseudo-random floats in [-scale, scale) (seeded), or f32
 * NaN when scale is NAN; n bf16 values the same way. */
int strata_gpu_fill_f32(float *d_buf, size_t n, uint64_t seed, float scale, strata_gpu_stream *stream,
			struct strata_error *err);
int strata_gpu_fill_bf16(uint16_t *d_buf, size_t n, uint64_t seed, float scale, strata_gpu_stream *stream,
			 struct strata_error *err);
/* Fill bytes (a multiple of 4) with uniformly random bits (tier code streams). */
int strata_gpu_fill_random(void *d_buf, size_t bytes, uint64_t seed, strata_gpu_stream *stream,
			   struct strata_error *err);
/*
 * Decode ceiling of a tier format (hot, warm, cold; kernels/gpu_ceiling.cu):
 * weights per second the device decodes with the fused kernels' decoder
 * (FmtTier<FMT>::decode8x) into fp16 mma.sync m16n8k16 (f32 accumulation,
 * four MMAs per lane and 32 decoded weights, as the warp-streaming decode
 * kernel) when memory costs nothing: code words in registers, one funnel
 * shift per 8 weights for the window.  Best of 8, 16, 32 and 48 warps per SM
 * (*warps_per_sm, may be NULL), median of 7 timed launches after 2 warm-up
 * launches on the legacy default stream (synchronises the device).
 * dec: the codebook step, two exact decoders of the same fp16 values:
 * STRATA_CEIL_FMA (decode8x: PRMT + 3 HFMA2 per pair) or STRATA_CEIL_TABLE
 * (decode8xt: IDP4A to the address of f(byte sum) in a per-bank shared
 * table, 2 LDS + 1 IMAD per pair; one CTA of 8, 16, 24 or 32 warps per SM).
 * The format's decode ceiling is the faster of the two.
 */
#define STRATA_CEIL_FMA 0
#define STRATA_CEIL_TABLE 1
int strata_gpu_decode_ceiling(int fmt, int dec, double *weights_per_s, uint32_t *warps_per_sm,
			      struct strata_error *err);
/* Test hook of the same kernel (decoder dec): one warp, `iters` iterations (1..1024) on the
 * host array in[32 * STRATA_CEIL_LANE_WORDS]: lane l's words
 * in[l * STRATA_CEIL_LANE_WORDS + 2r], [.. + 2r + 1] are the code words of its
 * row r (0..3; row g + 8 * (r & 1) of 16-row tile r >> 1), [.. + 8 .. + 11] its
 * B fragment (fp16 pairs, fixed).  At iteration it, row r decodes the 8
 * weights of the 32-bit window at bit (l + 11 * it) % 32 of the 64-bit value
 * words[2r] | words[2r + 1] << 32 (weight i at bit bitpos(fmt, i) - bitpos(fmt, 0)
 * of the window, as in a block); every decoded fp16 pair (weights 2i, 2i + 1)
 * goes to pairs[((it * 4 + r) * 4 + i) * 32 + l] and then into the MMAs
 * (tile m: A registers rows 2m, 2m + 1 pairs 0, 1 with B words 0, 1, then
 * pairs 2, 3 with B words 2, 3), and sink[l] is the sum of lane l's eight f32
 * accumulators at the end.  Host arrays: pairs holds iters * 512 words. */
#define STRATA_CEIL_LANE_WORDS 12
int strata_gpu_decode_ceiling_trace(int fmt, int dec, uint32_t iters, const uint32_t *in, uint32_t *pairs,
				    float *sink, struct strata_error *err);

#ifdef __cplusplus
}
#endif
#endif
