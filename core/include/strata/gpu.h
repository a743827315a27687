/*
 * The GPU layer as the C core sees it.  Implemented by kernels/gpu_cuda.cu when
 * the build has CUDA, and by kernels/gpu_none.c otherwise; the core never
 * includes CUDA headers.  Every call returns STRATA_OK or a status with the
 * failing CUDA call named in err.  strata_gpu_count() is 0 on a build without
 * CUDA and on a machine without a usable GPU; then the engine uses host
 * stand-ins for the VRAM tier and the GPU tests skip.
 */
#ifndef STRATA_GPU_H
#define STRATA_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "strata/error.h"

typedef struct strata_gpu_stream strata_gpu_stream;
typedef struct strata_gpu_event strata_gpu_event;

int strata_gpu_count(void);                 /* usable devices, 0 if none (or STRATA_NO_GPU is set) */
int strata_gpu_init(int device, struct strata_error *err); /* select + create context */
const char *strata_gpu_name(void);          /* "NVIDIA H200" or "none" */
/* NUMA node closest to the device (hwloc/sysfs via its PCI bus id), -1 if unknown. */
int strata_gpu_numa_node(int device);
/* PCI bus id "0000:3b:00.0", "" if unknown. */
int strata_gpu_pci_bus_id(int device, char *buf, size_t len);

int strata_gpu_malloc(void **dptr, size_t bytes, struct strata_error *err);
void strata_gpu_free(void *dptr);
int strata_gpu_memset(void *dptr, int value, size_t bytes, struct strata_error *err);
/* Page-lock existing host memory (cudaHostRegister) or allocate pinned memory. */
int strata_gpu_host_register(void *p, size_t bytes, struct strata_error *err);
void strata_gpu_host_unregister(void *p);

int strata_gpu_stream_create(strata_gpu_stream **s, struct strata_error *err);
void strata_gpu_stream_destroy(strata_gpu_stream *s);
int strata_gpu_stream_sync(strata_gpu_stream *s, struct strata_error *err);
int strata_gpu_event_create(strata_gpu_event **e, struct strata_error *err);
void strata_gpu_event_destroy(strata_gpu_event *e);
int strata_gpu_event_record(strata_gpu_event *e, strata_gpu_stream *s, struct strata_error *err);
/* 1 if complete, 0 if pending, <0 error. */
int strata_gpu_event_query(strata_gpu_event *e, struct strata_error *err);
int strata_gpu_event_sync(strata_gpu_event *e, struct strata_error *err);
int strata_gpu_event_elapsed_ms(strata_gpu_event *start, strata_gpu_event *end, float *ms,
				struct strata_error *err);
/* Make stream s wait for event e (cross-stream dependency, no host block). */
int strata_gpu_stream_wait(strata_gpu_stream *s, strata_gpu_event *e, struct strata_error *err);

int strata_gpu_memcpy_h2d_async(void *dst, const void *src, size_t bytes, strata_gpu_stream *s,
				struct strata_error *err);
int strata_gpu_memcpy_d2h_async(void *dst, const void *src, size_t bytes, strata_gpu_stream *s,
				struct strata_error *err);
int strata_gpu_memcpy_d2d_async(void *dst, const void *src, size_t bytes, strata_gpu_stream *s,
				struct strata_error *err);
int strata_gpu_sync(struct strata_error *err); /* whole device */

/* Number of multiprocessors of the current device (0 without one). */
int strata_gpu_sm_count(void);
/* Capture everything enqueued on `stream` (not the default stream) between
 * begin and end into a CUDA graph, replay it, free it (kernel benchmarks time
 * graph replays so host-side launch cost does not hide short kernels). */
typedef struct strata_gpu_graph strata_gpu_graph;
int strata_gpu_graph_begin(strata_gpu_stream *stream, struct strata_error *err);
int strata_gpu_graph_end(strata_gpu_stream *stream, strata_gpu_graph **graph, struct strata_error *err);
int strata_gpu_graph_launch(strata_gpu_graph *graph, strata_gpu_stream *stream, struct strata_error *err);
void strata_gpu_graph_free(strata_gpu_graph *graph);

/* Many host -> device copies at once (kernels/gpu_copy.cu).  batch: one
 * cudaMemcpyBatchAsync, stream-ordered (a loop of cudaMemcpyAsync where the
 * driver has no batch API).  sm: one kernel that reads the registered host
 * extents over PCIe, at most STRATA_GPU_COPY_MAX per call and `blocks` thread
 * blocks in all (0: 64); only where strata_gpu_copy_sm_available() says the
 * device can use registered host pointers as they are. */
#define STRATA_GPU_COPY_MAX 64
int strata_gpu_memcpy_h2d_batch_async(void *const *dst, const void *const *src, const size_t *bytes, uint32_t n,
				      strata_gpu_stream *s, struct strata_error *err);
int strata_gpu_copy_sm_available(void);
int strata_gpu_copy_h2d_sm_async(void *const *dst, const void *const *src, const size_t *bytes, uint32_t n,
				 uint32_t blocks, strata_gpu_stream *s, struct strata_error *err);

#endif
