// Driver API: what a capture check costs beside a record (ns per call, median of interleaved rounds).
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
int main(void) {
  CUdevice dev; CUcontext ctx; CUstream s; CUevent e, done;
  cuInit(0); cuDeviceGet(&dev, 0); cuDevicePrimaryCtxRetain(&ctx, dev); cuCtxSetCurrent(ctx);
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  cuEventCreate(&e, CU_EVENT_DISABLE_TIMING); cuEventCreate(&done, CU_EVENT_DISABLE_TIMING);
  cuEventRecord(done, s); cuStreamSynchronize(s);
  enum { R = 21, N = 200000 }; double rec[R], cap[R], both[R], qry[R], info[R];
  for (int r = 0; r < R; r++) {
    CUstreamCaptureStatus st; double t;
    t = now(); for (int i = 0; i < N; i++) cuEventRecord(e, s); rec[r] = (now() - t) / N; cuStreamSynchronize(s);
    t = now(); for (int i = 0; i < N; i++) cuStreamIsCapturing(s, &st); cap[r] = (now() - t) / N;
    t = now(); for (int i = 0; i < N; i++) { cuStreamIsCapturing(s, &st); cuEventRecord(e, s); } both[r] = (now() - t) / N; cuStreamSynchronize(s);
    t = now(); for (int i = 0; i < N; i++) cuStreamGetCaptureInfo(s, &st, 0, 0, 0, 0, 0); info[r] = (now() - t) / N;
    t = now(); for (int i = 0; i < N; i++) cuEventQuery(done); qry[r] = (now() - t) / N;
  }
  double *all[] = {rec, cap, both, info, qry}; for (int k = 0; k < 5; k++) qsort(all[k], R, sizeof(double), cmp);
  printf("driver ns/call, median of %d rounds of %d: record %.1f, cuStreamIsCapturing %.1f, both %.1f, cuStreamGetCaptureInfo %.1f, query %.1f\n",
         R, N, rec[R/2], cap[R/2], both[R/2], info[R/2], qry[R/2]);
  return 0;
}
