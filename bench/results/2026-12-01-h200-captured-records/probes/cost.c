// What a capture check costs beside a record and a query: ns per call, medians of interleaved rounds.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
int main(void) {
  cudaStream_t s; cudaEvent_t e, done; cudaFree(0);
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming); cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  cudaEventRecord(done, s); cudaStreamSynchronize(s);
  enum { R = 15, N = 200000 }; double rec[R], cap[R], qry[R], both[R];
  for (int r = 0; r < R; r++) {
    double t = now(); for (int i = 0; i < N; i++) cudaEventRecord(e, s); rec[r] = (now() - t) / N;
    cudaStreamSynchronize(s);
    enum cudaStreamCaptureStatus st;
    t = now(); for (int i = 0; i < N; i++) cudaStreamIsCapturing(s, &st); cap[r] = (now() - t) / N;
    t = now(); for (int i = 0; i < N; i++) { cudaStreamIsCapturing(s, &st); cudaEventRecord(e, s); } both[r] = (now() - t) / N;
    cudaStreamSynchronize(s);
    t = now(); for (int i = 0; i < N; i++) cudaEventQuery(done); qry[r] = (now() - t) / N;
  }
  qsort(rec, R, sizeof(double), cmp); qsort(cap, R, sizeof(double), cmp); qsort(qry, R, sizeof(double), cmp); qsort(both, R, sizeof(double), cmp);
  printf("ns/call, median of %d rounds of %d: record %.1f, is-capturing %.1f, is-capturing + record %.1f, query %.1f\n", R, N, rec[R/2], cap[R/2], both[R/2], qry[R/2]);
  return 0;
}
