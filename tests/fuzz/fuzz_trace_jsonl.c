/*
 * Fuzz target: the trace reader, JSONL text form (strata_trace_open on a
 * text file: the header line, records, weights, predictions, the shape and
 * statistics it derives).  Shares the harness of fuzz_trace.c; its own
 * corpus of text traces.  Run with scripts/fuzz.sh trace_jsonl [SECONDS].
 *
 * fuzz-sources: tests/fuzz/trace_common.c core/traces/trace.c core/traces/trace_stats.c core/json.c core/error.c core/util.c core/model.c kernels/quant_core.c
 * fuzz-plain-sources: kernels/quant_tiers.c kernels/quant_scalar.c
 * fuzz-libs: -lxxhash -lm -lpthread
 */
#include <stddef.h>
#include <stdint.h>

#include "trace_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_trace_bytes(data, size, 0);
	return 0;
}
