/* The GPU layer of a build without CUDA: no devices; every call that would
 * need one fails with STRATA_EUNSUPPORTED. */
#include "strata/gpu.h"

#define NOGPU(err) STRATA_ERR(err, STRATA_EUNSUPPORTED, "this build of strata has no CUDA support")

int strata_gpu_count(void) { return 0; }
int strata_gpu_init(int device, struct strata_error *err) { return NOGPU(err); }
const char *strata_gpu_name(void) { return "none"; }
int strata_gpu_numa_node(int device) { return -1; }
int strata_gpu_pci_bus_id(int device, char *buf, size_t len) { if (len) buf[0] = '\0'; return STRATA_EUNSUPPORTED; }
int strata_gpu_malloc(void **dptr, size_t bytes, struct strata_error *err) { *dptr = NULL; return NOGPU(err); }
void strata_gpu_free(void *dptr) { (void)dptr; }
int strata_gpu_memset(void *dptr, int value, size_t bytes, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_host_register(void *p, size_t bytes, struct strata_error *err) { return NOGPU(err); }
void strata_gpu_host_unregister(void *p) { (void)p; }
int strata_gpu_stream_create(strata_gpu_stream **s, struct strata_error *err) { *s = NULL; return NOGPU(err); }
void strata_gpu_stream_destroy(strata_gpu_stream *s) { (void)s; }
int strata_gpu_stream_sync(strata_gpu_stream *s, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_event_create(strata_gpu_event **e, struct strata_error *err) { *e = NULL; return NOGPU(err); }
void strata_gpu_event_destroy(strata_gpu_event *e) { (void)e; }
int strata_gpu_event_record(strata_gpu_event *e, strata_gpu_stream *s, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_event_query(strata_gpu_event *e, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_event_sync(strata_gpu_event *e, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_event_elapsed_ms(strata_gpu_event *a, strata_gpu_event *b, float *ms, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_stream_wait(strata_gpu_stream *s, strata_gpu_event *e, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_memcpy_h2d_async(void *d, const void *s, size_t n, strata_gpu_stream *st, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_memcpy_d2h_async(void *d, const void *s, size_t n, strata_gpu_stream *st, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_memcpy_d2d_async(void *d, const void *s, size_t n, strata_gpu_stream *st, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_sync(struct strata_error *err) { return NOGPU(err); }
int strata_gpu_memcpy_h2d_batch_async(void *const *d, const void *const *s, const size_t *n, uint32_t k,
				      strata_gpu_stream *st, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_copy_sm_available(void) { return 0; }
int strata_gpu_copy_h2d_sm_async(void *const *d, const void *const *s, const size_t *n, uint32_t k, uint32_t blocks,
				 strata_gpu_stream *st, struct strata_error *err) { return NOGPU(err); }

#include "moe.h"
int strata_moe_layer_gpu(const struct strata_moe_call *c, struct strata_error *err) { return NOGPU(err); }

#include "kernels.h"
int strata_gpu_dequantize(int fmt, const void *d_packed, uint32_t rows, uint32_t cols, float *d_out,
			  strata_gpu_stream *stream, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_moe_check(int fmt, uint32_t hidden, uint32_t inter, struct strata_error *err) { return NOGPU(err); }
uint64_t strata_gpu_moe_launches(enum strata_gpu_launch kind) { return 0; }
int strata_gpu_small_phases(uint64_t *ts, uint32_t *grid, uint32_t cap, uint32_t *n, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_moe_stack(const struct strata_moe_call *calls, uint32_t n_layers, unsigned flags,
			 struct strata_error *err) { return NOGPU(err); }
int strata_gpu_moe_prefill_sm90_usable(void) { return 0; }
int strata_gpu_linear_bf16(const uint16_t *d_w, uint32_t rows, uint32_t cols, const float *d_x, uint32_t n,
			   float *d_y, float alpha, float beta, strata_gpu_stream *stream, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_expert_bf16(const void *d_extent, uint32_t hidden, uint32_t inter, const float *d_x, uint32_t n,
			   float weight, float *d_y, strata_gpu_stream *stream, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_gemm_bf16(const uint16_t *d_a, uint32_t rows, uint32_t cols, const uint16_t *d_b, uint32_t n,
			 float *d_c, strata_gpu_stream *stream, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_read_bytes(const void *d_buf, size_t bytes, uint32_t *d_sink, strata_gpu_stream *stream,
			  struct strata_error *err) { return NOGPU(err); }
int strata_gpu_fill_f32(float *d_buf, size_t n, uint64_t seed, float scale, strata_gpu_stream *stream,
			struct strata_error *err) { return NOGPU(err); }
int strata_gpu_fill_bf16(uint16_t *d_buf, size_t n, uint64_t seed, float scale, strata_gpu_stream *stream,
			 struct strata_error *err) { return NOGPU(err); }
int strata_gpu_sm_count(void) { return 0; }
int strata_gpu_graph_begin(strata_gpu_stream *stream, struct strata_error *err) { return NOGPU(err); }
int strata_gpu_graph_end(strata_gpu_stream *stream, strata_gpu_graph **graph, struct strata_error *err) { *graph = NULL; return NOGPU(err); }
int strata_gpu_graph_launch(strata_gpu_graph *graph, strata_gpu_stream *stream, struct strata_error *err) { return NOGPU(err); }
void strata_gpu_graph_free(strata_gpu_graph *graph) { (void)graph; }
int strata_gpu_fill_random(void *d_buf, size_t bytes, uint64_t seed, strata_gpu_stream *stream,
			   struct strata_error *err) { return NOGPU(err); }
int strata_gpu_decode_ceiling(int fmt, int dec, double *weights_per_s, uint32_t *warps_per_sm,
			      struct strata_error *err)
{
	*weights_per_s = 0;
	if (warps_per_sm)
		*warps_per_sm = 0;
	return NOGPU(err);
}
int strata_gpu_decode_ceiling_trace(int fmt, int dec, uint32_t iters, const uint32_t *in, uint32_t *pairs,
				    float *sink, struct strata_error *err) { return NOGPU(err); }
