/* Probe for issue 35: which of the flush check's calls waits for a stream held by a
 * cuStreamWaitValue32 on a mapped host word (as measure's test holds one)? Each call is timed on
 * the host, on another stream, while the held stream waits; a thread releases the hold after 2 s.
 * Both streams blocking (CU_STREAM_DEFAULT, as Stream::new makes them), then both non-blocking.
 * gcc -O2 held_stream_calls.c -I/usr/local/cuda/include -lcuda -lpthread -o held_stream_calls */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned *word;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void *release(void *p) { (void)p; sleep(2); *word = 1; return NULL; }
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("%s: %d\n", #x, r_); return 1; } } while (0)

int main(void) {
  CUdevice dev; CUcontext ctx; CUstream held, other; CUdeviceptr dword, a, b; void *host;
  size_t bytes = 15 << 20, limit = 0;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  for (int flags = 0; flags < 2; flags++) {
  unsigned f = flags ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT;
  printf("streams %s\n", flags ? "non-blocking" : "blocking");
  CK(cuStreamCreate(&held, f)); CK(cuStreamCreate(&other, f));
  CK(cuMemHostAlloc(&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CK(cuMemHostGetDevicePointer(&dword, host, 0));
  CK(cuMemAlloc(&a, bytes)); CK(cuMemAlloc(&b, bytes));
  CK(cuCtxGetLimit(&limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE));
  printf("persisting L2 limit %zu\n", limit);
  const char *names[] = {"memset+sync", "d2d copy+sync", "cuCtxResetPersistingL2Cache", "cuCtxGetLimit"};
  for (int which = 0; which < 4; which++) {
    word = (volatile unsigned *)host; *word = 0;
    CK(cuStreamWaitValue32(held, dword, 1, CU_STREAM_WAIT_VALUE_GEQ));
    pthread_t t; pthread_create(&t, NULL, release, NULL);
    usleep(100000);
    double t0 = now();
    CUresult r = 0;
    if (which == 0) { r = cuMemsetD32Async(a, 0, bytes / 4, other); if (!r) r = cuStreamSynchronize(other); }
    if (which == 1) { r = cuMemcpyDtoDAsync(b, a, bytes, other); if (!r) r = cuStreamSynchronize(other); }
    if (which == 2) r = cuCtxResetPersistingL2Cache();
    if (which == 3) r = cuCtxGetLimit(&limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE);
    double took = now() - t0;
    printf("%s beside a held stream: %d, %.3f s (%s)\n", names[which], r, took, took > 1.0 ? "WAITED for the hold" : "did not wait");
    pthread_join(t, NULL);
    CK(cuStreamSynchronize(held));
  }
  }
  return 0;
}
