// The GPU layer over the CUDA runtime (see core/include/strata/gpu.h).
// Every runtime call goes through CU_TRY, which names the call on failure.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "strata/gpu.h"
}

#include "cuda_check.cuh"

static char g_name[256] = "none";

extern "C" int strata_gpu_count(void)
{
	static int cached = -1;
	if (cached < 0) {
		int n = 0;
		if (getenv("STRATA_NO_GPU") || cudaGetDeviceCount(&n) != cudaSuccess)
			n = 0;
		cudaGetLastError();
		cached = n;
	}
	return cached;
}

extern "C" int strata_gpu_init(int device, struct strata_error *err)
{
	if (strata_gpu_count() <= device)
		return STRATA_ERR(err, STRATA_EUNSUPPORTED, "no CUDA device %d (found %d)", device,
				  strata_gpu_count());
	CU_TRY(err, cudaSetDevice(device));
	CU_TRY(err, cudaFree(0));
	cudaDeviceProp p;
	CU_TRY(err, cudaGetDeviceProperties(&p, device));
	snprintf(g_name, sizeof(g_name), "%s", p.name);
	return STRATA_OK;
}

extern "C" const char *strata_gpu_name(void) { return g_name; }

extern "C" int strata_gpu_pci_bus_id(int device, char *buf, size_t len)
{
	if (len)
		buf[0] = '\0';
	if (strata_gpu_count() <= device || cudaDeviceGetPCIBusId(buf, (int)len, device) != cudaSuccess)
		return STRATA_EUNSUPPORTED;
	for (char *c = buf; *c; c++)
		if (*c >= 'A' && *c <= 'F')
			*c = (char)(*c - 'A' + 'a');
	return STRATA_OK;
}

extern "C" int strata_gpu_numa_node(int device)
{
	char bus[64], path[160];
	if (strata_gpu_pci_bus_id(device, bus, sizeof(bus)))
		return -1;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
	FILE *f = fopen(path, "r");
	int node = -1;
	if (f) {
		if (fscanf(f, "%d", &node) != 1)
			node = -1;
		fclose(f);
	}
	return node;
}

extern "C" int strata_gpu_malloc(void **dptr, size_t bytes, struct strata_error *err)
{
	*dptr = NULL;
	CU_TRY(err, cudaMalloc(dptr, bytes));
	return STRATA_OK;
}
extern "C" void strata_gpu_free(void *dptr) { if (dptr) cudaFree(dptr); }
extern "C" int strata_gpu_memset(void *dptr, int value, size_t bytes, struct strata_error *err)
{
	CU_TRY(err, cudaMemset(dptr, value, bytes));
	return STRATA_OK;
}
extern "C" int strata_gpu_host_register(void *p, size_t bytes, struct strata_error *err)
{
	CU_TRY(err, cudaHostRegister(p, bytes, cudaHostRegisterDefault));
	return STRATA_OK;
}
extern "C" void strata_gpu_host_unregister(void *p) { if (p) cudaHostUnregister(p); }

extern "C" int strata_gpu_stream_create(strata_gpu_stream **s, struct strata_error *err)
{
	cudaStream_t st;
	*s = NULL;
	CU_TRY(err, cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	*s = (strata_gpu_stream *)st;
	return STRATA_OK;
}
extern "C" void strata_gpu_stream_destroy(strata_gpu_stream *s) { if (s) cudaStreamDestroy((cudaStream_t)s); }
extern "C" int strata_gpu_stream_sync(strata_gpu_stream *s, struct strata_error *err)
{
	CU_TRY(err, cudaStreamSynchronize((cudaStream_t)s));
	return STRATA_OK;
}
extern "C" int strata_gpu_event_create(strata_gpu_event **e, struct strata_error *err)
{
	cudaEvent_t ev;
	*e = NULL;
	CU_TRY(err, cudaEventCreate(&ev));
	*e = (strata_gpu_event *)ev;
	return STRATA_OK;
}
extern "C" void strata_gpu_event_destroy(strata_gpu_event *e) { if (e) cudaEventDestroy((cudaEvent_t)e); }
extern "C" int strata_gpu_event_record(strata_gpu_event *e, strata_gpu_stream *s, struct strata_error *err)
{
	CU_TRY(err, cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s));
	return STRATA_OK;
}
extern "C" int strata_gpu_event_query(strata_gpu_event *e, struct strata_error *err)
{
	cudaError_t r = cudaEventQuery((cudaEvent_t)e);
	if (r == cudaSuccess)
		return 1;
	if (r == cudaErrorNotReady)
		return 0;
	return STRATA_ERR(err, STRATA_EGPU, "cudaEventQuery: %s", cudaGetErrorString(r));
}
extern "C" int strata_gpu_event_sync(strata_gpu_event *e, struct strata_error *err)
{
	CU_TRY(err, cudaEventSynchronize((cudaEvent_t)e));
	return STRATA_OK;
}
extern "C" int strata_gpu_event_elapsed_ms(strata_gpu_event *a, strata_gpu_event *b, float *ms,
					   struct strata_error *err)
{
	CU_TRY(err, cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b));
	return STRATA_OK;
}
extern "C" int strata_gpu_stream_wait(strata_gpu_stream *s, strata_gpu_event *e, struct strata_error *err)
{
	CU_TRY(err, cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0));
	return STRATA_OK;
}
extern "C" int strata_gpu_memcpy_h2d_async(void *d, const void *src, size_t n, strata_gpu_stream *s,
					   struct strata_error *err)
{
	CU_TRY(err, cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, (cudaStream_t)s));
	return STRATA_OK;
}
extern "C" int strata_gpu_memcpy_d2h_async(void *d, const void *src, size_t n, strata_gpu_stream *s,
					   struct strata_error *err)
{
	CU_TRY(err, cudaMemcpyAsync(d, src, n, cudaMemcpyDeviceToHost, (cudaStream_t)s));
	return STRATA_OK;
}
extern "C" int strata_gpu_memcpy_d2d_async(void *d, const void *src, size_t n, strata_gpu_stream *s,
					   struct strata_error *err)
{
	CU_TRY(err, cudaMemcpyAsync(d, src, n, cudaMemcpyDeviceToDevice, (cudaStream_t)s));
	return STRATA_OK;
}
extern "C" int strata_gpu_sync(struct strata_error *err)
{
	CU_TRY(err, cudaDeviceSynchronize());
	return STRATA_OK;
}

// ---- SM count and CUDA graphs ------------------------------------------------

extern "C" int strata_gpu_sm_count(void)
{
	int dev, sms = 0;
	if (strata_gpu_count() <= 0 || cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
		return 0;
	return sms;
}

struct strata_gpu_graph {
	cudaGraph_t g;
	cudaGraphExec_t x;
};

extern "C" int strata_gpu_graph_begin(strata_gpu_stream *stream, struct strata_error *err)
{
	CU_TRY(err, cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal));
	return STRATA_OK;
}

extern "C" int strata_gpu_graph_end(strata_gpu_stream *stream, strata_gpu_graph **graph, struct strata_error *err)
{
	*graph = (strata_gpu_graph *)calloc(1, sizeof(**graph));
	if (!*graph)
		return STRATA_ERR(err, STRATA_ENOMEM, "strata_gpu_graph_end: out of memory");
	cudaError_t e = cudaStreamEndCapture((cudaStream_t)stream, &(*graph)->g);
	if (e == cudaSuccess)
		e = cudaGraphInstantiate(&(*graph)->x, (*graph)->g, 0);
	if (e != cudaSuccess) {
		strata_gpu_graph_free(*graph);
		*graph = NULL;
		return STRATA_ERR(err, STRATA_EGPU, "graph capture: %s", cudaGetErrorString(e));
	}
	return STRATA_OK;
}

extern "C" int strata_gpu_graph_launch(strata_gpu_graph *graph, strata_gpu_stream *stream, struct strata_error *err)
{
	CU_TRY(err, cudaGraphLaunch(graph->x, (cudaStream_t)stream));
	return STRATA_OK;
}

extern "C" void strata_gpu_graph_free(strata_gpu_graph *graph)
{
	if (!graph)
		return;
	if (graph->x)
		cudaGraphExecDestroy(graph->x);
	if (graph->g)
		cudaGraphDestroy(graph->g);
	free(graph);
}
