/*
 * strata calibrate: measure what `strata sim` needs on the machine at hand,
 * and the cost-model file it writes (strata_cost_file_*).
 *   NVMe -> RAM   latency: median of QD1 4 KiB O_DIRECT reads at expert
 *                 offsets; bandwidth: whole-extent O_DIRECT reads through
 *                 io_uring at the chosen queue depth (falls back to buffered
 *                 reads with the pages dropped where O_DIRECT is refused);
 *   RAM -> VRAM   pinned host -> device copies: 4 KiB latency, 64 MiB
 *                 bandwidth (GPU builds with a device only);
 *   HBM           device -> device copy bandwidth (read + write bytes);
 *   kernels       the expert computation on real extents of the model, one
 *                 token on 1 and on k experts (slope: time per packed MB,
 *                 intercept: fixed per-layer cost), then T tokens per expert
 *                 (extra time per MB per additional token): the GPU kernels
 *                 on a GPU, else the CPU reference; then the same 1 / k
 *                 expert slope on q4 and q3 experts of the model's shape
 *                 (random codes and scales), whose ratio to the model's
 *                 slope is kernel_speed_q4 / kernel_speed_q3 (the model's
 *                 own format, if scalar, gets 1; the other scalar one keeps 1).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stddef.h>

#include "moe.h"
#include "quant.h"
#include "quant_scalar.h"
#include "strata/json.h"
#include "strata/gpu.h"
#include "strata/replay.h"
#include "strata/store.h"
#include "strata/util.h"

/* ---- cost file -------------------------------------------------------- */

void strata_cost_file_defaults(struct strata_cost_file *c)
{
	memset(c, 0, sizeof(*c));
	/* the engine's cost model (calibrate overwrites what it measures) */
	strata_cost_model_defaults(&c->cost);
	c->kernel_us_per_mb_token = 0.02;
	c->kernel_speed_q4 = c->kernel_speed_q3 = 1.0;
	snprintf(c->source, sizeof(c->source), "defaults");
}

static const struct {
	const char *key;
	size_t off;
} cost_keys[] = {
	{ "nvme_gbps", offsetof(struct strata_cost_file, cost.nvme_gbps) },
	{ "nvme_lat_us", offsetof(struct strata_cost_file, cost.nvme_lat_us) },
	{ "pcie_gbps", offsetof(struct strata_cost_file, cost.pcie_gbps) },
	{ "pcie_lat_us", offsetof(struct strata_cost_file, cost.pcie_lat_us) },
	{ "hbm_gbps", offsetof(struct strata_cost_file, cost.hbm_gbps) },
	{ "host_gbps", offsetof(struct strata_cost_file, cost.host_gbps) },
	{ "kernel_us_per_mb", offsetof(struct strata_cost_file, cost.kernel_us_per_mb) },
	{ "kernel_fixed_us", offsetof(struct strata_cost_file, cost.kernel_fixed_us) },
	{ "kernel_us_per_mb_token", offsetof(struct strata_cost_file, kernel_us_per_mb_token) },
	{ "kernel_speed_q4", offsetof(struct strata_cost_file, kernel_speed_q4) },
	{ "kernel_speed_q3", offsetof(struct strata_cost_file, kernel_speed_q3) },
};

int strata_cost_file_load(const char *path, struct strata_cost_file *c, struct strata_error *err)
{
	strata_cost_file_defaults(c);
	struct strata_json_doc *doc;
	int rc = strata_json_parse_file(path, 1 << 20, &doc, err);
	if (rc)
		return rc;
	const struct strata_json *root = strata_json_root(doc);
	if (root->type != STRATA_JSON_OBJECT) {
		strata_json_free(doc);
		return STRATA_ERR(err, STRATA_ECORRUPT, "%s: a cost model is a JSON object", path);
	}
	for (uint32_t i = 0; i < root->len; i++) {
		const struct strata_json *m = &root->items[i];
		int known = 0;
		for (size_t k = 0; k < sizeof(cost_keys) / sizeof(cost_keys[0]); k++)
			if (!strcmp(m->key, cost_keys[k].key)) {
				known = 1;
				if (m->type != STRATA_JSON_NUMBER || m->num < 0 || !isfinite(m->num)) {
					rc = STRATA_ERR(err, STRATA_EINVAL, "%s: \"%s\" must be a non-negative number",
							path, m->key);
					strata_json_free(doc);
					return rc;
				}
				*(double *)((char *)c + cost_keys[k].off) = m->num;
			}
		if (!strcmp(m->key, "nvme_queue_depth")) {
			known = 1;
			if (m->type != STRATA_JSON_NUMBER || !m->is_uint || m->u < 1 || m->u > 4096) {
				strata_json_free(doc);
				return STRATA_ERR(err, STRATA_EINVAL, "%s: \"nvme_queue_depth\" must be 1..4096", path);
			}
			c->cost.nvme_queue_depth = (uint32_t)m->u;
		} else if (!strcmp(m->key, "machine") && m->type == STRATA_JSON_STRING) {
			known = 1;
			snprintf(c->machine, sizeof(c->machine), "%s", m->str);
		} else if (!strcmp(m->key, "source") && m->type == STRATA_JSON_STRING) {
			known = 1;
			snprintf(c->source, sizeof(c->source), "%s", m->str);
		}
		if (!known && strcmp(m->key, "strata_cost") && strcmp(m->key, "notes") && strcmp(m->key, "measured")) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "%s: unknown key \"%s\"", path, m->key);
			strata_json_free(doc); /* after the message: m->key lives in doc */
			return rc;
		}
	}
	strata_json_free(doc);
	if (c->cost.nvme_gbps <= 0 || c->cost.pcie_gbps <= 0 || c->cost.hbm_gbps <= 0 || c->cost.host_gbps <= 0)
		return STRATA_ERR(err, STRATA_EINVAL, "%s: bandwidths must be > 0", path);
	return STRATA_OK;
}

void strata_cost_file_print(const struct strata_cost_file *c, FILE *f)
{
	fprintf(f, "{\n  \"strata_cost\": 1,\n  \"source\": ");
	strata_json_write_str(f, c->source);
	fprintf(f, ",\n  \"machine\": ");
	strata_json_write_str(f, c->machine);
	fprintf(f, ",\n");
	for (size_t k = 0; k < sizeof(cost_keys) / sizeof(cost_keys[0]); k++)
		fprintf(f, "  \"%s\": %.6g,\n", cost_keys[k].key, *(const double *)((const char *)c + cost_keys[k].off));
	fprintf(f, "  \"nvme_queue_depth\": %u\n}\n", c->cost.nvme_queue_depth);
}

int strata_cost_file_save(const char *path, const struct strata_cost_file *c, struct strata_error *err)
{
	struct strata_outfile o;
	int rc = strata_outfile_open(&o, path, 0, err);
	if (rc)
		return rc;
	strata_cost_file_print(c, o.f);
	return strata_outfile_commit(&o, err);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

void strata_calibrate_config_defaults(struct strata_calibrate_config *c)
{
	memset(c, 0, sizeof(*c));
	c->read_bytes = 1ull << 30;
	c->queue_depth = 32;
	c->compute = STRATA_COMPUTE_AUTO;
	c->use_gpu = -1;
}

static int measure_nvme(struct strata_store *s, const struct strata_calibrate_config *c, struct strata_cost_file *out,
			FILE *log, struct strata_error *err)
{
	const struct strata_model_spec *spec = strata_store_spec(s);
	uint32_t n = strata_model_total_experts(spec);
	const struct strata_extent **ext = malloc(n * sizeof(*ext));
	if (!ext)
		return STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
	uint64_t maxb = 0;
	for (uint32_t l = 0, i = 0; l < spec->n_moe_layers; l++)
		for (uint32_t e = 0; e < spec->n_experts; e++, i++) {
			ext[i] = strata_store_expert(s, l, e);
			if (ext[i]->bytes > maxb)
				maxb = ext[i]->bytes;
		}
	uint64_t seed = 42;
	for (uint32_t i = n - 1; i > 0; i--) { /* shuffle: no sequential readahead help */
		uint32_t j = (uint32_t)(strata_splitmix64(&seed) % (i + 1));
		const struct strata_extent *t = ext[i];
		ext[i] = ext[j];
		ext[j] = t;
	}
	int direct = 1, rc = STRATA_OK;
	int fd0 = strata_store_shard_fd(s, ext[0]->shard, true, err);
	if (fd0 == STRATA_EUNSUPPORTED) {
		direct = 0;
		strata_error_clear(err);
		if (log)
			fprintf(log, "calibrate: O_DIRECT refused by the filesystem: buffered reads, pages dropped\n");
	} else if (fd0 < 0) {
		free(ext);
		return fd0;
	}
	uint32_t qd = c->queue_depth ? c->queue_depth : 32;
	uint8_t **buf = calloc(qd, sizeof(*buf));
	if (!buf) {
		free(ext);
		return STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
	}
	for (uint32_t i = 0; i < qd; i++)
		if (!(buf[i] = strata_aligned_alloc(4096, maxb))) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory (%u buffers of %" PRIu64 " bytes)",
					qd, maxb);
			goto out;
		}
	/* latency: QD1 4 KiB reads */
	uint32_t nl = n < 200 ? n : 200;
	double *lat = malloc(nl * sizeof(double));
	if (!lat) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < nl; i++) {
		int fd = strata_store_shard_fd(s, ext[i]->shard, direct, err);
		if (fd < 0) {
			free(lat);
			rc = fd;
			goto out;
		}
		if (!direct)
			posix_fadvise(fd, (off_t)ext[i]->offset, 4096, POSIX_FADV_DONTNEED);
		uint64_t t0 = strata_now_ns();
		ssize_t got = pread(fd, buf[0], 4096, (off_t)ext[i]->offset);
		lat[i] = (double)(strata_now_ns() - t0) / 1e3;
		if (got < 0) {
			free(lat);
			rc = STRATA_ERRNO(err, STRATA_EIO, "%s: read", strata_store_shard_path(s, ext[i]->shard));
			goto out;
		}
	}
	qsort(lat, nl, sizeof(double), cmp_d);
	out->cost.nvme_lat_us = lat[nl / 2];
	free(lat);
	/* bandwidth: io_uring, whole extents, qd in flight */
	struct io_uring ring;
	int r = io_uring_queue_init(qd, &ring, 0);
	if (r < 0) {
		rc = strata_error_set(err, STRATA_EIO, -r, __FILE__, __LINE__, "io_uring_queue_init(%u)", qd);
		goto out;
	}
	uint64_t want = c->read_bytes ? c->read_bytes : (1ull << 30), done = 0, issued = 0;
	uint32_t next = 0, inflight = 0;
	uint32_t *free_slots = malloc(qd * sizeof(uint32_t)), nfree = qd;
	for (uint32_t i = 0; i < qd; i++)
		free_slots[i] = i;
	struct strata_progress pg;
	strata_progress_start(&pg, "calibrate: NVMe bandwidth", want, "B");
	uint64_t t0 = strata_now_ns();
	while (done < want) {
		while (nfree && issued < want) {
			const struct strata_extent *x = ext[next++ % n];
			int fd = strata_store_shard_fd(s, x->shard, direct, err);
			if (fd < 0) {
				rc = fd;
				break;
			}
			if (!direct)
				posix_fadvise(fd, (off_t)x->offset, (off_t)x->bytes, POSIX_FADV_DONTNEED);
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			uint32_t slot = free_slots[--nfree];
			io_uring_prep_read(sqe, fd, buf[slot], (unsigned)x->bytes, x->offset);
			io_uring_sqe_set_data64(sqe, ((uint64_t)slot << 40) | x->bytes);
			issued += x->bytes;
			inflight++;
		}
		if (rc)
			break;
		io_uring_submit(&ring);
		struct io_uring_cqe *cqe;
		r = io_uring_wait_cqe(&ring, &cqe);
		if (r == -EINTR)
			continue;
		if (r < 0) {
			rc = strata_error_set(err, STRATA_EIO, -r, __FILE__, __LINE__, "io_uring_wait_cqe");
			break;
		}
		uint64_t d = io_uring_cqe_get_data64(cqe);
		if (cqe->res < 0) {
			rc = strata_error_set(err, STRATA_EIO, -cqe->res, __FILE__, __LINE__, "%s: io_uring read",
					      strata_store_dir(s));
			io_uring_cqe_seen(&ring, cqe);
			break;
		}
		done += (uint64_t)cqe->res;
		(void)(d & ((1ull << 40) - 1));
		free_slots[nfree++] = (uint32_t)(d >> 40);
		inflight--;
		io_uring_cqe_seen(&ring, cqe);
		strata_progress_update(&pg, done);
		if (strata_interrupted) {
			rc = STRATA_ERR(err, STRATA_EINTR, "calibrate: interrupted");
			break;
		}
	}
	strata_progress_finish(&pg);
	while (inflight) { /* drain */
		struct io_uring_cqe *cqe;
		if (io_uring_wait_cqe(&ring, &cqe) < 0)
			break;
		io_uring_cqe_seen(&ring, cqe);
		inflight--;
	}
	double secs = (double)(strata_now_ns() - t0) / 1e9;
	io_uring_queue_exit(&ring);
	free(free_slots);
	if (!rc) {
		out->cost.nvme_gbps = secs > 0 ? (double)done / secs / 1e9 : 0;
		out->cost.nvme_queue_depth = qd;
		if (log)
			fprintf(log, "nvme: %.2f GB/s at QD%u (%" PRIu64 " MB%s), 4 KiB QD1 latency %.1f us\n",
				out->cost.nvme_gbps, qd, done >> 20, direct ? ", O_DIRECT" : ", buffered",
				out->cost.nvme_lat_us);
	}
out:
	for (uint32_t i = 0; i < qd; i++)
		free(buf[i]);
	free(buf);
	free(ext);
	return rc;
}

/* RAM -> RAM copies (the RAM tier's compaction, strata/arena.h): memmove of
 * 64 MiB by 16 MiB within one buffer, as a compaction slides extents. */
static int measure_host(struct strata_cost_file *out, FILE *log, struct strata_error *err)
{
	const size_t big = 64u << 20, step = 16u << 20;
	uint8_t *h = strata_aligned_alloc(4096, big + step);
	if (!h)
		return STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
	memset(h, 1, big + step);
	double best = 0;
	for (int r = 0; r < 4; r++) {
		uint64_t t0 = strata_now_ns();
		memmove(h + (r & 1 ? step : 0), h + (r & 1 ? 0 : step), big);
		double gbps = 2.0 * (double)big / (double)(strata_now_ns() - t0 + 1);
		best = gbps > best ? gbps : best;
	}
	free(h);
	out->cost.host_gbps = best;
	if (log)
		fprintf(log, "host: %.1f GB/s (64 MiB memmove, read+write)\n", best);
	return STRATA_OK;
}

static int measure_gpu_links(struct strata_cost_file *out, FILE *log, struct strata_error *err)
{
	size_t big = 64u << 20;
	void *h = strata_aligned_alloc(4096, big), *d = NULL, *d2 = NULL;
	int rc;
	if (!h)
		return STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
	if ((rc = strata_gpu_host_register(h, big, err)) || (rc = strata_gpu_malloc(&d, big, err)) ||
	    (rc = strata_gpu_malloc(&d2, big, err)))
		goto out;
	/* latency: 4 KiB copies */
	double lat[64];
	for (int i = 0; i < 64; i++) {
		uint64_t t0 = strata_now_ns();
		if ((rc = strata_gpu_memcpy_h2d_async(d, h, 4096, NULL, err)) || (rc = strata_gpu_sync(err)))
			goto out;
		lat[i] = (double)(strata_now_ns() - t0) / 1e3;
	}
	qsort(lat, 64, sizeof(double), cmp_d);
	out->cost.pcie_lat_us = lat[32];
	/* bandwidth */
	if ((rc = strata_gpu_memcpy_h2d_async(d, h, big, NULL, err)) || (rc = strata_gpu_sync(err)))
		goto out;
	uint64_t t0 = strata_now_ns();
	for (int i = 0; i < 16; i++)
		if ((rc = strata_gpu_memcpy_h2d_async(d, h, big, NULL, err)))
			goto out;
	if ((rc = strata_gpu_sync(err)))
		goto out;
	out->cost.pcie_gbps = 16.0 * (double)big / ((double)(strata_now_ns() - t0));
	t0 = strata_now_ns();
	for (int i = 0; i < 32; i++)
		if ((rc = strata_gpu_memcpy_d2d_async(d2, d, big, NULL, err)))
			goto out;
	if ((rc = strata_gpu_sync(err)))
		goto out;
	out->cost.hbm_gbps = 2.0 * 32.0 * (double)big / ((double)(strata_now_ns() - t0));
	if (log)
		fprintf(log, "pcie: %.2f GB/s (64 MiB pinned), 4 KiB latency %.1f us; hbm: %.0f GB/s (copy, read+write)\n",
			out->cost.pcie_gbps, out->cost.pcie_lat_us, out->cost.hbm_gbps);
out:
	if (d)
		strata_gpu_free(d);
	if (d2)
		strata_gpu_free(d2);
	strata_gpu_host_unregister(h);
	free(h);
	return rc;
}

/* Time one layer call with n experts and t tokens on each. */
static int time_layer(int gpu, uint32_t hidden, uint32_t inter, uint32_t n, uint32_t t, const void *const *extents,
		      const uint8_t *fmts, const float *x, float *y, void *dx, void *dy, int reps, double *us,
		      struct strata_error *err)
{
	uint32_t na = n * t;
	uint32_t *ae = malloc(na * sizeof(uint32_t)), *at = malloc(na * sizeof(uint32_t));
	float *aw = malloc(na * sizeof(float));
	if (!ae || !at || !aw) {
		free(ae);
		free(at);
		free(aw);
		return STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
	}
	for (uint32_t e = 0, a = 0; e < n; e++)
		for (uint32_t j = 0; j < t; j++, a++) {
			ae[a] = e;
			at[a] = j;
			aw[a] = 1.0f / (float)n;
		}
	struct strata_moe_call c = {
		.hidden = hidden, .inter = inter, .n_tokens = t, .x = gpu ? dx : x, .y = gpu ? dy : y, .n_experts = n,
		.extents = extents, .fmts = fmts, .n_assign = na, .assign_expert = ae, .assign_token = at,
		.assign_weight = aw,
	};
	int rc = STRATA_OK;
	double best = 1e300;
	for (int r = 0; r < reps + 1 && !rc; r++) {
		uint64_t t0 = strata_now_ns();
		rc = gpu ? strata_moe_layer_gpu(&c, err) : strata_moe_layer_ref(&c, err);
		if (!rc && gpu)
			rc = strata_gpu_sync(err);
		double dt = (double)(strata_now_ns() - t0) / 1e3;
		if (r && dt < best) /* first call warms up */
			best = dt;
	}
	*us = best;
	free(ae);
	free(at);
	free(aw);
	return rc;
}

/* Kernel speed per packed byte of the scalar format fmt (q4, q3) relative to
 * `slope` (us per MB of the model's own format): k experts of fmt at the
 * model's shape (random codes, fp16 group scales of a weight RMS of about
 * 1/sqrt(cols)) timed as measure_kernels times the model's, 1 and k experts of
 * one token; the slopes' ratio.  *speed stays as it is when the slope cannot
 * be measured. */
static int measure_scalar(int fmt, const struct strata_model_spec *spec, int gpu, uint32_t k, double slope,
			  const float *x, float *y, void *dx, void *dy, int reps, double *speed, FILE *log,
			  struct strata_error *err)
{
	struct strata_expert_layout E;
	if (strata_expert_layout(fmt, spec->hidden, spec->inter, &E))
		return STRATA_ERR(err, STRATA_EINVAL, "calibrate: bad shape %u x %u", spec->hidden, spec->inter);
	const void **ext = calloc(k, sizeof(void *));
	uint8_t **host = calloc(k, sizeof(uint8_t *)), *fmts = malloc(k);
	int rc = STRATA_OK;
	if (!ext || !host || !fmts) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
		goto out;
	}
	uint64_t seed = 0x51ca1a7ull + (uint64_t)fmt;
	const struct strata_matrix_layout *m[3] = { &E.gate, &E.up, &E.down };
	const uint64_t off[3] = { E.gate_off, E.up_off, E.down_off };
	for (uint32_t e = 0; e < k; e++) {
		fmts[e] = (uint8_t)fmt;
		if (!(host[e] = strata_aligned_alloc(4096, E.bytes))) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
			goto out;
		}
		for (uint64_t i = 0; i + 8 <= E.bytes; i += 8) {
			uint64_t v = strata_splitmix64(&seed);
			memcpy(host[e] + i, &v, 8);
		}
		for (int i = 0; i < 3; i++) {
			float sc = 1.0f / sqrtf((float)m[i]->cols) / (fmt == STRATA_FMT_Q4 ? 4.6f : 2.3f);
			uint8_t *sp = host[e] + off[i] + m[i]->scales_off;
			for (uint64_t j = 0; j + 2 <= m[i]->scales_bytes; j += 2) {
				uint16_t h = strata_f32_to_f16(sc * (0.75f + 0.5f * (float)(strata_splitmix64(&seed) & 1023) / 1024.0f));
				memcpy(sp + j, &h, 2);
			}
		}
		ext[e] = host[e];
		if (gpu) {
			void *d;
			if ((rc = strata_gpu_malloc(&d, E.bytes, err)))
				goto out;
			ext[e] = d;
			if ((rc = strata_gpu_memcpy_h2d_async(d, host[e], E.bytes, NULL, err)) || (rc = strata_gpu_sync(err)))
				goto out;
		}
	}
	double t1, tk;
	if ((rc = time_layer(gpu, spec->hidden, spec->inter, 1, 1, ext, fmts, x, y, dx, dy, reps, &t1, err)) ||
	    (rc = time_layer(gpu, spec->hidden, spec->inter, k, 1, ext, fmts, x, y, dx, dy, reps, &tk, err)))
		goto out;
	const double mb = (double)E.payload / 1e6;
	double sq = (tk - t1) / (mb * (k - 1));
	if (!(sq > 0) || !isfinite(sq))
		sq = tk / (mb * k);
	if (sq > 0 && isfinite(sq) && slope > 0)
		*speed = slope / sq;
	if (log)
		fprintf(log, "kernels %s (%s): 1 expert %.1f us, %u experts %.1f us (%.2f MB) -> %.3f us/MB, "
			"kernel_speed_%s %.3f\n", strata_fmt_traits(fmt)->name, gpu ? "gpu" : "cpu reference", t1, k, tk,
			mb * k, sq, strata_fmt_traits(fmt)->name, *speed);
out:
	for (uint32_t e = 0; host && e < k; e++) {
		if (gpu && ext && ext[e] && ext[e] != host[e])
			strata_gpu_free((void *)ext[e]);
		free(host[e]);
	}
	free(ext);
	free(host);
	free(fmts);
	return rc;
}

static int measure_kernels(struct strata_store *s, int gpu, struct strata_cost_file *out, FILE *log,
			   struct strata_error *err)
{
	const struct strata_model_spec *spec = strata_store_spec(s);
	const uint8_t *fmt = strata_store_fmt_table(s);
	uint32_t k = spec->top_k < spec->n_experts ? spec->top_k : spec->n_experts;
	if (k < 2)
		k = spec->n_experts < 2 ? spec->n_experts : 2;
	if (k > 8)
		k = 8;
	uint32_t T = 16;
	const void **ext = calloc(k, sizeof(void *));
	void **host = calloc(k, sizeof(void *));
	uint8_t *fmts = calloc(k, 1);
	float *x = malloc((size_t)T * spec->hidden * sizeof(float)), *y = calloc((size_t)T * spec->hidden, sizeof(float));
	void *dx = NULL, *dy = NULL;
	double mb1 = 0, mbk = 0;
	uint32_t *pick = NULL;
	int rc = STRATA_OK;
	if (!ext || !host || !fmts || !x || !y) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
		goto out;
	}
	for (size_t i = 0; i < (size_t)T * spec->hidden; i++)
		x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
	/* experts of one format (the layer's most common), so the slope is per MB of one format */
	uint32_t count[256] = { 0 }, best = 0;
	for (uint32_t e = 0; e < spec->n_experts; e++)
		count[fmt[strata_eid(spec, 0, e)]]++;
	for (uint32_t f = 1; f < 256; f++)
		if (count[f] > count[best])
			best = f;
	if (count[best] < k)
		k = count[best] >= 2 ? count[best] : k;
	pick = calloc(k, sizeof(uint32_t));
	if (!pick) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
		goto out;
	}
	for (uint32_t e = 0, j = 0; e < spec->n_experts && j < k; e++)
		if (fmt[strata_eid(spec, 0, e)] == best || count[best] < 2)
			pick[j++] = e;
	for (uint32_t e = 0; e < k; e++) {
		const struct strata_extent *xe = strata_store_expert(s, 0, pick[e]);
		host[e] = strata_aligned_alloc(4096, xe->bytes);
		if (!host[e]) {
			rc = STRATA_ERR(err, STRATA_ENOMEM, "calibrate: out of memory");
			goto out;
		}
		if ((rc = strata_store_read_extent(s, xe, host[e], false, true, err)))
			goto out;
		fmts[e] = fmt[strata_eid(spec, 0, pick[e])];
		mbk += (double)xe->payload / 1e6;
		if (!e)
			mb1 = mbk;
		ext[e] = host[e];
		if (gpu) {
			void *d;
			if ((rc = strata_gpu_malloc(&d, xe->bytes, err)) ||
			    (rc = strata_gpu_memcpy_h2d_async(d, host[e], xe->bytes, NULL, err)))
				goto out;
			ext[e] = d;
		}
	}
	if (gpu) {
		size_t nb = (size_t)T * spec->hidden * sizeof(float);
		if ((rc = strata_gpu_malloc(&dx, nb, err)) || (rc = strata_gpu_malloc(&dy, nb, err)) ||
		    (rc = strata_gpu_memcpy_h2d_async(dx, x, nb, NULL, err)) || (rc = strata_gpu_sync(err)))
			goto out;
	}
	int reps = gpu ? 20 : 4;
	double t1, tk, tT;
	if ((rc = time_layer(gpu, spec->hidden, spec->inter, 1, 1, ext, fmts, x, y, dx, dy, reps, &t1, err)) ||
	    (rc = time_layer(gpu, spec->hidden, spec->inter, k, 1, ext, fmts, x, y, dx, dy, reps, &tk, err)) ||
	    (rc = time_layer(gpu, spec->hidden, spec->inter, k, T, ext, fmts, x, y, dx, dy, reps, &tT, err)))
		goto out;
	double slope = (tk - t1) / (mbk - mb1);
	if (!(slope > 0) || !isfinite(slope))
		slope = tk / mbk;
	double fixed = tk - slope * mbk;
	if (fixed < 0)
		fixed = 0;
	out->cost.kernel_us_per_mb = slope;
	out->cost.kernel_fixed_us = fixed;
	double extra = (tT - tk) / (mbk * (T - 1));
	out->kernel_us_per_mb_token = extra > 0 ? extra : 0;
	if (log)
		fprintf(log, "kernels (%s): 1 expert %.1f us, %u experts %.1f us (%.2f MB), %u tokens each %.1f us -> "
			"%.3f us/MB + %.1f us fixed, +%.4f us/MB per extra token\n", gpu ? "gpu" : "cpu reference",
			t1, k, tk, mbk, T, tT, slope, fixed, out->kernel_us_per_mb_token);
	/* the scalar formats' speed per byte against the model's (trellis) format,
	 * measured the same way in this call (the model's own format when it is one) */
	if (k >= 2)
		for (int sf = STRATA_FMT_Q4; sf <= STRATA_FMT_Q3; sf++) {
			double *sp = sf == STRATA_FMT_Q4 ? &out->kernel_speed_q4 : &out->kernel_speed_q3;
			if (strata_fmt_is_scalar((int)best))
				*sp = (int)best == sf ? 1.0 : *sp;
			else if ((rc = measure_scalar(sf, spec, gpu, k, slope, x, y, dx, dy, reps, sp, log, err)))
				goto out;
		}
out:
	for (uint32_t e = 0; host && e < k; e++) {
		if (gpu && ext && ext[e] && ext[e] != host[e])
			strata_gpu_free((void *)ext[e]);
		free(host[e]);
	}
	if (dx)
		strata_gpu_free(dx);
	if (dy)
		strata_gpu_free(dy);
	free(ext);
	free(host);
	free(fmts);
	free(x);
	free(y);
	free(pick);
	return rc;
}

int strata_calibrate(const struct strata_calibrate_config *c, struct strata_cost_file *out, FILE *log,
		     struct strata_error *err)
{
	strata_cost_file_defaults(out);
	struct strata_store *s;
	int rc = strata_store_open(c->model_dir, &s, err);
	if (rc)
		return rc;
	int gpu = 0;
	if (c->use_gpu != 0 && strata_gpu_count() > 0) {
		if ((rc = strata_gpu_init(0, err)))
			goto out;
		gpu = 1;
	} else if (c->use_gpu == 1) {
		rc = STRATA_ERR(err, STRATA_EUNSUPPORTED, "calibrate: --gpu 1 but no usable GPU");
		goto out;
	}
	char host[64] = "";
	gethostname(host, sizeof(host) - 1);
	snprintf(out->machine, sizeof(out->machine), "%s, %s", host, gpu ? strata_gpu_name() : "no GPU");
	snprintf(out->source, sizeof(out->source), "measured");
	if ((rc = measure_nvme(s, c, out, log, err)) || (rc = measure_host(out, log, err)))
		goto out;
	if (gpu && (rc = measure_gpu_links(out, log, err)))
		goto out;
	int kgpu = c->compute == STRATA_COMPUTE_GPU || (c->compute == STRATA_COMPUTE_AUTO && gpu);
	if (kgpu && !gpu) {
		rc = STRATA_ERR(err, STRATA_EUNSUPPORTED, "calibrate: --compute gpu needs a GPU");
		goto out;
	}
	if (c->compute != STRATA_COMPUTE_NONE && (rc = measure_kernels(s, kgpu, out, log, err)))
		goto out;
	if (!gpu && log)
		fprintf(log, "no GPU: pcie/hbm keep their defaults (%.0f GB/s, %.0f GB/s)\n", out->cost.pcie_gbps,
			out->cost.hbm_gbps);
out:
	strata_store_close(s);
	return rc;
}
