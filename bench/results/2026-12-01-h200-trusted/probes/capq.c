// An event re-recorded into a capture: which query, end or destroy crashes?
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#define CK(x) do { cudaError_t ck_ = (x); if (ck_) { printf("%s -> %d at %d\n", #x, ck_, __LINE__); fflush(stdout); } } while (0)
static cudaEvent_t E; static cudaStream_t S, T; static volatile int stop; static long queries, codes[1024];
static void *querier(void *arg) {
  (void)arg; enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; CK(cudaThreadExchangeStreamCaptureMode(&m));
  while (!stop) { int c = cudaEventQuery(E); queries++; if (c < 1024) codes[c]++; }
  return 0;
}
static cudaGraph_t capture_record(enum cudaStreamCaptureMode mode) {
  CK(cudaStreamBeginCapture(T, mode));
  CK(cudaEventRecord(E, T));
  usleep(20);
  cudaGraph_t g = 0; int c = cudaStreamEndCapture(T, &g);
  if (c) printf("end capture -> %d\n", c);
  return g;
}
int main(int argc, char **argv) {
  int v = atoi(argv[1]);
  CK(cudaFree(0));
  CK(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&T, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&E, cudaEventDisableTiming));
  CK(cudaEventRecord(E, S)); CK(cudaStreamSynchronize(S));
  printf("variant %d\n", v); fflush(stdout);
  if (v <= 4) {
    cudaGraph_t g = capture_record(cudaStreamCaptureModeGlobal);
    printf("graph %p\n", (void*)g); fflush(stdout);
    if (v == 1 || v == 4) { CK(cudaGraphDestroy(g)); printf("destroyed\n"); fflush(stdout); }
    if (v == 4) { CK(cudaEventRecord(E, S)); }
    if (v == 3) { cudaGraphExec_t x; CK(cudaGraphInstantiate(&x, g, 0)); CK(cudaGraphLaunch(x, S)); CK(cudaStreamSynchronize(S)); }
    printf("query after -> %d\n", cudaEventQuery(E)); fflush(stdout);
    printf("synchronize after -> %d\n", cudaEventSynchronize(E)); fflush(stdout);
    CK(cudaEventDestroy(E)); printf("event destroyed\n");
    return 0;
  }
  // 5: rounds with a querying thread and graph destroy; 6: keep graphs; 7: no querier; 8: querier, re-record on S before destroy
  pthread_t q; if (v != 7) pthread_create(&q, 0, querier, 0);
  for (int r = 0; r < 1000; r++) {
    CK(cudaEventRecord(E, S));
    cudaGraph_t g = capture_record(r % 2 ? cudaStreamCaptureModeGlobal : cudaStreamCaptureModeThreadLocal);
    if (v == 8) CK(cudaEventRecord(E, S));
    if (v != 6) CK(cudaGraphDestroy(g));
    if (r % 100 == 0) { printf("round %d\n", r); fflush(stdout); }
  }
  stop = 1; if (v != 7) pthread_join(q, 0);
  printf("done: %ld queries;", queries); for (int c = 0; c < 1024; c++) if (codes[c]) printf(" %d:%ld", c, codes[c]); printf("\n");
  return 0;
}
