/* Traits of the three tier formats, defined in quant_tiers.c. */
#ifndef STRATA_QUANT_TIERS_H
#define STRATA_QUANT_TIERS_H
#include "quant.h"
#ifdef __cplusplus
extern "C" {
#endif
extern const struct strata_fmt_traits strata_fmt_hot;
extern const struct strata_fmt_traits strata_fmt_warm;
extern const struct strata_fmt_traits strata_fmt_cold;
#ifdef __cplusplus
}
#endif
#endif
