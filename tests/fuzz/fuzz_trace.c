/*
 * Fuzz target: the trace reader, binary form (strata_trace_open).  The
 * input is handed over as a file (a memfd), as a run would open it: raw, and
 * with its header checksum recomputed so mutations reach the field and
 * record checks behind it.  A trace that opens is read whole (every token,
 * weights, hints) and its statistics computed, so whatever the reader
 * accepted is exercised.  The JSONL form is the same target over another
 * corpus (fuzz_trace_jsonl.c).  Run with scripts/fuzz.sh trace [SECONDS].
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
	fuzz_trace_bytes(data, size, 1);
	return 0;
}
