/* Random test data for the quantizer's tests and benchmark: xorshift64
 * (Marsaglia 2003) on one global state, uniform doubles in (0, 1), and
 * Box-Muller normals.  Seed by setting test_rng.  test_quant's thresholds and
 * bench_quant's recorded figures were made with these sequences: they may not
 * change.  Header-only: each program that includes it gets its own state. */
#ifndef STRATA_TESTRAND_H
#define STRATA_TESTRAND_H

#include <math.h>
#include <stdint.h>

static uint64_t test_rng;

static inline double test_urand(void)
{
	test_rng ^= test_rng << 13;
	test_rng ^= test_rng >> 7;
	test_rng ^= test_rng << 17;
	return ((test_rng >> 11) + 0.5) / 9007199254740992.0;
}

static inline double test_gauss(void)
{
	return sqrt(-2 * log(test_urand())) * cos(6.283185307179586 * test_urand());
}

#endif
