/* What the trace fuzz targets share (trace_common.c). */
#ifndef STRATA_FUZZ_TRACE_COMMON_H
#define STRATA_FUZZ_TRACE_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* data as a file: a memfd, its path ("/proc/self/fd/N") in path; the fd or -1. */
int fuzz_memfd(const uint8_t *data, size_t size, char *path, size_t len);
/* Open the trace at path and, if it opens, read all of it. */
void fuzz_trace_read_path(const char *path);
/* data as a trace file; fix_header: also with the header checksum recomputed. */
void fuzz_trace_bytes(const uint8_t *data, size_t size, int fix_header);

#endif
