/*
 * Fuzz target: the routing-log importer (strata_trace_import): JSONL rows
 * (Mixtral-style per-(token, layer) logs, per-token rows), CSV/TSV with
 * quoted lists, column maps, gaps.  The input is one file (a memfd); the
 * output goes to a scratch file, which is then opened as a trace and read
 * whole, so what the importer writes must also pass the reader.  Run with
 * scripts/fuzz.sh import [SECONDS].
 *
 * fuzz-sources: tests/fuzz/trace_common.c core/traces/trace_import.c core/traces/trace.c core/traces/trace_stats.c core/json.c core/csv.c core/error.c core/util.c core/model.c kernels/quant_core.c
 * fuzz-plain-sources: kernels/quant_tiers.c kernels/quant_scalar.c
 * fuzz-libs: -lxxhash -lm -lpthread
 */
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "strata/trace.h"
#include "trace_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char out[256];
	static FILE *sink;
	if (!out[0]) {
		snprintf(out, sizeof(out), "%s/fuzz-import-%ld.strace", access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm",
			 (long)getpid());
		sink = fopen("/dev/null", "w");
	}
	char in[64];
	int fd = fuzz_memfd(data, size, in, sizeof(in));
	if (fd < 0)
		return 0;
	const char *inputs[1] = { in };
	struct strata_trace_import_config c;
	strata_trace_import_defaults(&c);
	c.inputs = inputs;
	c.n_inputs = 1;
	c.output = out;
	c.warn = sink;
	c.gaps = (int)(size % 3); /* drop, fill, error: every gap policy */
	struct strata_error err = { 0 };
	if (!strata_trace_import(&c, NULL, &err))
		fuzz_trace_read_path(out);
	unlink(out);
	close(fd);
	return 0;
}
