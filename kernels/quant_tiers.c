/* Tier formats: placeholder until the quantization issue lands (no row
 * functions, so quantizing to a tier format fails cleanly). */
#include "quant_tiers.h"

const struct strata_fmt_traits strata_fmt_hot = {
	.name = "hot", .block = STRATA_QK, .code_bytes = 88, .scale_bytes = 2, .bpw = 2.8125,
};
const struct strata_fmt_traits strata_fmt_warm = {
	.name = "warm", .block = STRATA_QK, .code_bytes = 80, .scale_bytes = 2, .bpw = 2.5625,
};
const struct strata_fmt_traits strata_fmt_cold = {
	.name = "cold", .block = STRATA_QK, .code_bytes = 44, .scale_bytes = 2, .bpw = 1.4375,
};
