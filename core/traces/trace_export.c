/*
 * `strata trace export`: a trace as libCacheSim's trace formats, so the same
 * object stream runs in both simulators.  One request per (token, layer,
 * routed expert), in trace order (token by token, layer by layer, the
 * router's order within a layer); the object id is the expert id
 * layer * n_experts + expert, the time the token index, every object
 * `obj_size` bytes.
 *
 * oracleGeneral (libCacheSim's binary oracle format, 24-byte packed records:
 * uint32 time, uint64 obj_id, uint32 obj_size, int64 next_access_vtime) carries
 * each request's next access to the same object as libCacheSim's traceConv
 * writes it, the 1-based index of that request, -1 for none, so Belady
 * reads the future from the file.  It is filled backwards (the next access
 * is known only from the end) into a file of known size, a chunk at a time.
 * csv: "time,obj_id,obj_size" with a header line.
 * Both are written to PATH.tmp and renamed into place.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/trace.h"
#include "strata/util.h"

#define OG_RECORD 24
#define OG_CHUNK (1u << 16) /* records per write */

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Requests in the stream (routed slots; padding is not routed). */
static uint64_t count_requests(const struct strata_trace *t)
{
	const struct strata_trace_info *in = strata_trace_info(t);
	uint64_t n = 0;
	for (uint64_t i = 0; i < in->n_tokens; i++)
		for (uint32_t l = 0; l < in->n_moe_layers; l++) {
			const uint16_t *e = strata_trace_experts(t, i, l);
			for (uint32_t j = 0; j < in->top_k; j++)
				n += e[j] != STRATA_TRACE_NO_EXPERT;
		}
	return n;
}

static int write_all(int fd, const uint8_t *buf, size_t n, off_t at, const char *tmp,
		     struct strata_error *err)
{
	while (n) {
		ssize_t w = pwrite(fd, buf, n, at);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return STRATA_ERRNO(err, STRATA_EIO, "%s: write", tmp);
		buf += w;
		n -= (size_t)w;
		at += w;
	}
	return STRATA_OK;
}

static int export_oracle(const struct strata_trace *t, int fd, const char *tmp, uint32_t obj_size,
			 struct strata_progress *pg, struct strata_error *err)
{
	const struct strata_trace_info *in = strata_trace_info(t);
	uint64_t n = count_requests(t), n_ids = (uint64_t)in->n_moe_layers * in->n_experts;
	int64_t *next = malloc(sizeof(int64_t) * (n_ids ? n_ids : 1));
	uint8_t *buf = malloc((size_t)OG_CHUNK * OG_RECORD);
	if (!next || !buf) {
		free(next);
		free(buf);
		return STRATA_ERR(err, STRATA_ENOMEM, "trace export: out of memory");
	}
	for (uint64_t e = 0; e < n_ids; e++)
		next[e] = -1;
	int rc = STRATA_OK;
	uint64_t idx = n;     /* index of the request being filled, counting down */
	uint32_t fill = 0;    /* records in buf, stored at its end */
	for (uint64_t i = in->n_tokens; i-- > 0 && !rc;) {
		if (pg)
			strata_progress_update(pg, in->n_tokens - i);
		for (uint32_t l = in->n_moe_layers; l-- > 0 && !rc;) {
			const uint16_t *e = strata_trace_experts(t, i, l);
			for (uint32_t j = in->top_k; j-- > 0;) {
				if (e[j] == STRATA_TRACE_NO_EXPERT)
					continue;
				uint64_t id = (uint64_t)l * in->n_experts + e[j];
				idx--;
				uint8_t *r = buf + (size_t)(OG_CHUNK - 1 - fill) * OG_RECORD;
				put_le(r, (uint32_t)i, 4);
				put_le(r + 4, id, 8);
				put_le(r + 12, obj_size, 4);
				put_le(r + 16, (uint64_t)next[id], 8);
				next[id] = (int64_t)idx + 1;
				if (++fill == OG_CHUNK) {
					rc = write_all(fd, buf, (size_t)fill * OG_RECORD, (off_t)(idx * OG_RECORD), tmp,
						       err);
					fill = 0;
					if (rc)
						break;
				}
			}
		}
	}
	if (!rc && fill)
		rc = write_all(fd, buf + (size_t)(OG_CHUNK - fill) * OG_RECORD, (size_t)fill * OG_RECORD,
			       (off_t)(idx * OG_RECORD), tmp, err);
	free(next);
	free(buf);
	return rc;
}

static int export_csv(const struct strata_trace *t, FILE *f, uint32_t obj_size, struct strata_progress *pg)
{
	const struct strata_trace_info *in = strata_trace_info(t);
	fprintf(f, "time,obj_id,obj_size\n");
	for (uint64_t i = 0; i < in->n_tokens; i++) {
		if (pg)
			strata_progress_update(pg, i + 1);
		for (uint32_t l = 0; l < in->n_moe_layers; l++) {
			const uint16_t *e = strata_trace_experts(t, i, l);
			for (uint32_t j = 0; j < in->top_k; j++)
				if (e[j] != STRATA_TRACE_NO_EXPERT)
					fprintf(f, "%" PRIu64 ",%" PRIu64 ",%u\n", i,
						(uint64_t)l * in->n_experts + e[j], obj_size);
		}
	}
	return ferror(f) ? -1 : 0;
}

int strata_trace_export(const struct strata_trace *t, const char *path, int format, uint32_t obj_size,
			bool progress, struct strata_error *err)
{
	size_t len = strlen(path) + 5;
	char *tmp = malloc(len);
	if (!tmp)
		return STRATA_ERR(err, STRATA_ENOMEM, "trace export: out of memory");
	snprintf(tmp, len, "%s.tmp", path);
	int rc = STRATA_OK;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: cannot create", tmp);
		free(tmp);
		return rc;
	}
	struct strata_progress pg;
	if (progress)
		strata_progress_start(&pg, "trace export", strata_trace_info(t)->n_tokens, "tokens");
	if (format == STRATA_EXPORT_ORACLE_GENERAL) {
		rc = export_oracle(t, fd, tmp, obj_size, progress ? &pg : NULL, err);
	} else if (format == STRATA_EXPORT_CSV) {
		FILE *f = fdopen(fd, "w");
		if (!f) {
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: fdopen", tmp);
		} else {
			fd = -1;
			if (export_csv(t, f, obj_size, progress ? &pg : NULL) || fflush(f) || fsync(fileno(f)))
				rc = STRATA_ERRNO(err, STRATA_EIO, "%s: write", tmp);
			if (fclose(f) && !rc)
				rc = STRATA_ERRNO(err, STRATA_EIO, "%s: close", tmp);
		}
	} else {
		rc = STRATA_ERR(err, STRATA_EINVAL, "trace export: unknown format %d", format);
	}
	if (fd >= 0) {
		if (!rc && fsync(fd))
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: fsync", tmp);
		if (close(fd) && !rc)
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: close", tmp);
	}
	if (!rc && rename(tmp, path))
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: rename to %s", tmp, path);
	if (progress)
		strata_progress_finish(&pg);
	if (rc)
		unlink(tmp);
	free(tmp);
	return rc;
}
