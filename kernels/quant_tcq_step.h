/*
 * One Viterbi step of the tier encoders (kernels/quant_tiers.c), written once
 * for any vector width: quant_tiers.c includes this file once per width with
 *   TCQ_W       lanes (4, 8 or 16)
 *   TCQ_SFX     suffix of the functions defined here
 *   TCQ_TARGET  function attributes (a target ISA), possibly empty
 *   TCQ_VMIN(a, b)  lane-wise a < b ? a : b
 * Every width does the same IEEE operations per state in the same order
 * (x - sT, times h, squared, plus the predecessor minimum, minimum), so all
 * widths give bit-identical codes.
 */
#define TCQ_CAT_(a, b) a##b
#define TCQ_CAT(a, b) TCQ_CAT_(a, b)
#define TCQ_VF TCQ_CAT(tcq_vf, TCQ_SFX)
#define TCQ_VI TCQ_CAT(tcq_vi, TCQ_SFX)

typedef float TCQ_VF __attribute__((vector_size(TCQ_W * 4)));
typedef int32_t TCQ_VI __attribute__((vector_size(TCQ_W * 4)));

TCQ_TARGET TCQ_HOT static inline TCQ_VF TCQ_CAT(tcq_vld, TCQ_SFX)(const float *p)
{
	TCQ_VF v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* Lanes l of best[(s0 + l) >> k]: a broadcast for 2^k >= TCQ_W, else a
 * shuffle of one load (the save array is padded for the over-read). */
TCQ_TARGET TCQ_HOT static inline TCQ_VF TCQ_CAT(tcq_expand, TCQ_SFX)(const float *best, uint32_t s0, const int k)
{
	if ((1 << k) >= TCQ_W)
		return (TCQ_VF){ 0 } + best[s0 >> k];
	TCQ_VI sel;
	for (int l = 0; l < TCQ_W; l++)
		sel[l] = l >> k;
	return __builtin_shuffle(TCQ_CAT(tcq_vld, TCQ_SFX)(best + (s0 >> k)), sel);
}

/* best_next from best (step with kp bits, weight x/h) for a next step of kn
 * bits.  Two output vectors per iteration and the 2^kn predecessors
 * unrolled: the minima are exact, so their order does not matter. */
TCQ_TARGET TCQ_HOT static inline void TCQ_CAT(tcq_step, TCQ_SFX)(const int kp, const int kn, const int weighted,
								  const float *restrict best, float *restrict next,
								  const float *restrict sT, float x, float h)
{
	const uint32_t Kn = 1u << kn, Mn = NS >> kn;
	const TCQ_VF X = (TCQ_VF){ 0 } + x, H = (TCQ_VF){ 0 } + h;
	for (uint32_t m = 0; m < Mn; m += 2 * TCQ_W) {
		TCQ_VF acc0 = (TCQ_VF){ 0 } + FORBIDDEN, acc1 = acc0;
#pragma GCC unroll 8
		for (uint32_t t = 0; t < Kn; t++) {
			uint32_t s0 = t * Mn + m, s1 = s0 + TCQ_W;
			TCQ_VF e0 = X - TCQ_CAT(tcq_vld, TCQ_SFX)(sT + s0);
			TCQ_VF e1 = X - TCQ_CAT(tcq_vld, TCQ_SFX)(sT + s1);
			TCQ_VF d0 = weighted ? H * e0 * e0 : e0 * e0;
			TCQ_VF d1 = weighted ? H * e1 * e1 : e1 * e1;
			acc0 = TCQ_VMIN(TCQ_CAT(tcq_expand, TCQ_SFX)(best, s0, kp) + d0, acc0);
			acc1 = TCQ_VMIN(TCQ_CAT(tcq_expand, TCQ_SFX)(best, s1, kp) + d1, acc1);
		}
		memcpy(next + m, &acc0, sizeof(acc0));
		memcpy(next + m + TCQ_W, &acc1, sizeof(acc1));
	}
}

/* The state of least cost(t) = best[t >> k] + h (x - sT[t])^2 over all NS
 * states, the first one on ties (as a scalar scan finds it): the minimum
 * over vectors, then the first lane equal to it. */
TCQ_TARGET TCQ_HOT static uint32_t TCQ_CAT(tcq_argmin, TCQ_SFX)(int k, const float *best, const float *sT,
								  float x, float h)
{
	const TCQ_VF X = (TCQ_VF){ 0 } + x, H = (TCQ_VF){ 0 } + h;
	TCQ_VF acc = (TCQ_VF){ 0 } + INFINITY;
	for (uint32_t t = 0; t < NS; t += TCQ_W) {
		TCQ_VF e = X - TCQ_CAT(tcq_vld, TCQ_SFX)(sT + t);
		TCQ_VF b = (TCQ_VF){ 0 };
		for (int l = 0; l < TCQ_W; l++)
			b[l] = best[(t + l) >> k];
		acc = TCQ_VMIN(b + H * e * e, acc);
	}
	float mn = acc[0];
	for (int l = 1; l < TCQ_W; l++)
		mn = acc[l] < mn ? acc[l] : mn;
	for (uint32_t t = 0; t < NS; t++) {
		float e = x - sT[t], c = best[t >> k] + h * e * e;
		if (c == mn)
			return t;
	}
	return 0;
}

TCQ_TARGET TCQ_HOT static void TCQ_CAT(tcq_step_any, TCQ_SFX)(int kp, int kn, const float *best, float *next,
								 const float *sT, float x, const float *h)
{
	TCQ_DISPATCH(TCQ_CAT(tcq_step, TCQ_SFX), sT);
}

#undef TCQ_VF
#undef TCQ_VI
#undef TCQ_CAT
#undef TCQ_CAT_
