/*
 * libFuzzer target: the shard header parser (strata_store_parse_header).
 * Each input is parsed as a whole header three ways: with the checksum (as
 * strata_store_open does), without it so mutations reach the field checks,
 * and against a file size taken from the input length.  Build and run with
 * scripts/fuzz.sh store_header [SECONDS].
 *
 * fuzz-sources: core/store.c core/error.c core/model.c core/util.c kernels/quant_core.c
 * fuzz-plain-sources: kernels/quant_tiers.c kernels/quant_scalar.c
 * fuzz-libs: -lxxhash -lm -lpthread
 */
#include <stddef.h>
#include <stdint.h>

#include "strata/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct strata_shard_header *h = NULL;
	struct strata_error err = { 0 };
	if (!strata_store_parse_header(data, size, 0, "fuzz", 0, &h, &err))
		strata_store_header_free(h);
	if (!strata_store_parse_header(data, size, 0, "fuzz", STRATA_PARSE_NO_CHECKSUM, &h, &err))
		strata_store_header_free(h);
	uint64_t fsize = ((uint64_t)size + 4095) / 4096 * 4096 * 64;
	if (!strata_store_parse_header(data, size, fsize, "fuzz", STRATA_PARSE_NO_CHECKSUM, &h, &err))
		strata_store_header_free(h);
	return 0;
}
