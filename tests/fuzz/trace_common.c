/* What the trace fuzz targets share: inputs as files, and reading a trace
 * that opened all the way through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "strata/trace.h"
#include "trace_common.h"

int fuzz_memfd(const uint8_t *data, size_t size, char *path, size_t len)
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t off = 0;
	while (off < size) {
		ssize_t w = write(fd, data + off, size - off);
		if (w <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)w;
	}
	snprintf(path, len, "/proc/self/fd/%d", fd);
	return fd;
}

void fuzz_trace_read_path(const char *path)
{
	struct strata_trace *t;
	struct strata_error err = { 0 };
	if (strata_trace_open(path, &t, &err))
		return;
	const struct strata_trace_info *in = strata_trace_info(t);
	float *scratch = malloc((strata_trace_scratch_floats(t) + 1) * sizeof(float));
	float w[STRATA_TRACE_MAX_TOPK];
	struct strata_hint hints[64];
	volatile uint64_t sink = 0;
	for (uint64_t i = 0; scratch && i < in->n_tokens; i++) {
		struct strata_trace_token tok;
		strata_trace_read_one(t, i, &tok, scratch);
		for (uint32_t l = 0; l < in->n_moe_layers; l++) {
			const uint16_t *e = strata_trace_experts(t, i, l);
			strata_trace_weights(t, i, l, w);
			for (uint32_t j = 0; j < in->top_k; j++)
				sink += e[j] + (uint64_t)(w[j] >= 0);
			sink += strata_trace_hints(t, i, l, hints, 64);
		}
	}
	free(scratch);
	struct strata_trace_stats s;
	if (!strata_trace_stats_compute(t, &s, &err))
		strata_trace_stats_free(&s);
	strata_trace_close(t);
}

void fuzz_trace_bytes(const uint8_t *data, size_t size, int fix_header)
{
	char path[64];
	int fd = fuzz_memfd(data, size, path, sizeof(path));
	if (fd < 0)
		return;
	fuzz_trace_read_path(path);
	close(fd);
	/* the same bytes with a valid header checksum: past it to the fields */
	if (fix_header && size >= STRATA_TRACE_HEADER_BYTES && !memcmp(data, STRATA_TRACE_MAGIC, 8)) {
		uint8_t *b = malloc(size);
		if (!b)
			return;
		memcpy(b, data, size);
		uint64_t h = XXH64(b, 248, 0);
		memcpy(b + 248, &h, 8); /* little-endian hosts */
		if ((fd = fuzz_memfd(b, size, path, sizeof(path))) >= 0) {
			fuzz_trace_read_path(path);
			close(fd);
		}
		free(b);
	}
}
