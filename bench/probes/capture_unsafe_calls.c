/* Probe for the driver model's capture-mode rule: which calls does CUDA refuse, and so break the
 * capture, when one thread makes them while another thread holds a stream capture in global mode
 * (torch.cuda.graph's default)? Each call is made once per round by the main thread, in global,
 * thread-local and relaxed mode in turn, while a second thread's global-mode capture (one memset
 * node) is open; 3 rounds each. One line per call and mode: the call's results and what
 * cuStreamEndCapture answered (0: the capture ended valid; 901: invalidated).
 * The model refuses queries and synchronizes outside relaxed mode (CUDA's documentation); this
 * says which other calls measure, Trace and the pools make belong there too.
 * gcc -O2 capture_unsafe_calls.c -I/usr/local/cuda/include -lcuda -lpthread -o capture_unsafe_calls
 * timeout 120 ./capture_unsafe_calls (the last two rows may wait for the open capture: a hang there
 * is an answer too) */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { printf("%s: %d\n", #x, (int)r_); return 1; } } while (0)

static const char PTX[] =
    ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry empty() { ret; }\n";

static CUcontext ctx;
static CUstream captured, other;
static CUdeviceptr node_buffer, buffer, word_dev;
static CUevent e1, e2;
static CUmodule module;
static CUfunction empty;
static atomic_int step; /* 0 idle, 1 capture open, 2 call made, 3 capture ended */
static CUresult end_code;

static void *capturer(void *unused) {
  (void)unused;
  CUgraph graph = NULL;
  cuCtxSetCurrent(ctx);
  if (cuStreamBeginCapture(captured, CU_STREAM_CAPTURE_MODE_GLOBAL) ||
      cuMemsetD32Async(node_buffer, 0, 1024, captured)) {
    end_code = CUDA_ERROR_UNKNOWN;
  }
  atomic_store(&step, 1);
  while (atomic_load(&step) != 2) {
  }
  end_code = end_code ? end_code : cuStreamEndCapture(captured, &graph);
  if (graph) cuGraphDestroy(graph);
  atomic_store(&step, 3);
  return NULL;
}

/* The call under test; r2 gets a second call's result where the call has a pair (create and
 * destroy, alloc and free, load and unload). */
static CUresult call(int which, CUresult *r2) {
  CUevent e; CUstream s; CUdeviceptr p; void *host; CUmodule m; float ms; size_t limit;
  CUstreamCaptureStatus status;
  *r2 = CUDA_SUCCESS;
  switch (which) {
  case 0: return cuEventQuery(e1);
  case 1: return cuEventSynchronize(e1);
  case 2: return cuEventElapsedTime(&ms, e1, e2);
  case 3: return cuEventRecord(e1, other);
  case 4: { CUresult r = cuEventCreate(&e, CU_EVENT_DISABLE_TIMING); if (!r) *r2 = cuEventDestroy(e); return r; }
  case 5: { CUresult r = cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1); if (!r) *r2 = cuStreamDestroy(s); return r; }
  case 6: { CUresult r = cuMemAlloc(&p, 1 << 20); if (!r) *r2 = cuMemFree(p); return r; }
  case 7: { CUresult r = cuMemHostAlloc(&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE); if (!r) *r2 = cuMemFreeHost(host); return r; }
  case 8: { CUresult r = cuModuleLoadData(&m, PTX); if (!r) *r2 = cuModuleUnload(m); return r; }
  case 9: return cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, other, NULL, NULL);
  case 10: return cuMemsetD32Async(buffer, 0, 1024, other);
  case 11: return cuStreamSynchronize(other);
  case 12: return cuStreamQuery(other);
  case 13: return cuStreamWaitValue32(other, word_dev, 0, CU_STREAM_WAIT_VALUE_GEQ);
  case 14: return cuCtxResetPersistingL2Cache();
  case 15: return cuCtxGetLimit(&limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE);
  case 16: return cuStreamIsCapturing(other, &status);
  case 17: return cuStreamWaitEvent(other, e1, 0);
  /* Last: the two that might wait for the open capture (run the probe under `timeout`). */
  case 18: return cuMemsetD32Async(buffer, 0, 1024, CU_STREAM_LEGACY);
  case 19: return cuCtxSynchronize();
  }
  return CUDA_ERROR_INVALID_VALUE;
}

static const char *const NAMES[] = {
    "cuEventQuery", "cuEventSynchronize", "cuEventElapsedTime", "cuEventRecord (other stream)",
    "cuEventCreate + cuEventDestroy", "cuStreamCreateWithPriority + cuStreamDestroy",
    "cuMemAlloc + cuMemFree", "cuMemHostAlloc + cuMemFreeHost", "cuModuleLoadData + cuModuleUnload",
    "cuLaunchKernel (other stream)", "cuMemsetD32Async (other stream)", "cuStreamSynchronize (other)",
    "cuStreamQuery (other)", "cuStreamWaitValue32 (met, other stream)",
    "cuCtxResetPersistingL2Cache", "cuCtxGetLimit", "cuStreamIsCapturing (other)",
    "cuStreamWaitEvent (other stream)", "cuMemsetD32Async (legacy stream)", "cuCtxSynchronize"};

int main(void) {
  CUdevice dev; void *word_host;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  /* Blocking streams, as Stream::new makes them (the legacy stream's row depends on it). */
  CK(cuStreamCreate(&captured, CU_STREAM_DEFAULT)); CK(cuStreamCreate(&other, CU_STREAM_DEFAULT));
  CK(cuMemAlloc(&node_buffer, 4096)); CK(cuMemAlloc(&buffer, 4096));
  CK(cuMemHostAlloc(&word_host, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  memset(word_host, 0, 4096);
  CK(cuMemHostGetDevicePointer(&word_dev, word_host, 0));
  CK(cuModuleLoadData(&module, PTX)); CK(cuModuleGetFunction(&empty, module, "empty"));
  CK(cuEventCreate(&e1, CU_EVENT_DEFAULT)); CK(cuEventCreate(&e2, CU_EVENT_DEFAULT));
  CK(cuEventRecord(e1, other)); CK(cuEventRecord(e2, other)); CK(cuStreamSynchronize(other));
  const CUstreamCaptureMode modes[] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                       CU_STREAM_CAPTURE_MODE_RELAXED};
  const char *const mode_names[] = {"global", "thread-local", "relaxed"};
  printf("%-46s %-12s %s\n", "call", "mode", "rounds: call[,second call] -> cuStreamEndCapture");
  for (int which = 0; which < (int)(sizeof NAMES / sizeof *NAMES); which++) {
    for (int m = 0; m < 3; m++) {
      printf("%-46s %-12s", NAMES[which], mode_names[m]);
      for (int round = 0; round < 3; round++) {
        CUstreamCaptureMode mode = modes[m];
        CK(cuThreadExchangeStreamCaptureMode(&mode));
        atomic_store(&step, 0); end_code = CUDA_SUCCESS;
        pthread_t t; pthread_create(&t, NULL, capturer, NULL);
        while (atomic_load(&step) != 1) {
        }
        CUresult r2, r = call(which, &r2);
        atomic_store(&step, 2);
        while (atomic_load(&step) != 3) {
        }
        pthread_join(t, NULL);
        CK(cuThreadExchangeStreamCaptureMode(&mode));
        printf(" %d", (int)r);
        if (r2) printf(",%d", (int)r2);
        printf(" -> %d;", (int)end_code);
        /* Between rounds: what the call queued has run, and a refused call left nothing behind. */
        cuStreamSynchronize(other); cuCtxSynchronize();
      }
      printf("\n");
      fflush(stdout);
    }
  }
  printf("done\n");
  return 0;
}
