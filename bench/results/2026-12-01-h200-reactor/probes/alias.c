// Does a GPU-side wait on one stream hold back other streams that share its hardware queue?
#include <cuda_runtime.h>
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
typedef CUresult (*wait_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
#define CK(x) do { cudaError_t ck_ = (x); if (ck_) { printf("%s -> %d at %d\n", #x, ck_, __LINE__); exit(1);} } while (0)
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char **argv) {
  int waiters = atoi(argv[1]);
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  wait_fn wv = (wait_fn)dlsym(lib, "cuStreamWaitValue32_v2");
  CK(cudaFree(0));
  volatile unsigned *flag; void *dflag;
  CK(cudaHostAlloc((void**)&flag, 4, cudaHostAllocMapped)); *flag = 0;
  CK(cudaHostGetDevicePointer(&dflag, (void*)flag, 0));
  cudaStream_t h; CK(cudaStreamCreateWithFlags(&h, cudaStreamNonBlocking));
  if (wv((CUstream)h, (CUdeviceptr)dflag, 1, CU_STREAM_WAIT_VALUE_GEQ)) { printf("wait value failed\n"); return 1; }
  cudaEvent_t e; CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); CK(cudaEventRecord(e, h));
  cudaStream_t w[256];
  for (int i = 0; i < waiters; i++) { CK(cudaStreamCreateWithFlags(&w[i], cudaStreamNonBlocking)); CK(cudaStreamWaitEvent(w[i], e, 0)); }
  enum { Q = 32 };
  cudaStream_t q[Q]; cudaEvent_t qe[Q];
  for (int i = 0; i < Q; i++) { CK(cudaStreamCreateWithFlags(&q[i], cudaStreamNonBlocking)); CK(cudaEventCreateWithFlags(&qe[i], cudaEventDisableTiming)); CK(cudaEventRecord(qe[i], q[i])); }
  usleep(200000);
  int done = 0;
  for (int i = 0; i < Q; i++) done += cudaEventQuery(qe[i]) == cudaSuccess;
  const char *c = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  printf("connections=%s waiter_streams=%d: %d of %d unrelated streams' records completed while the gate was closed\n", c ? c : "default", waiters, done, Q);
  *flag = 1; double t = now(); CK(cudaDeviceSynchronize());
  printf("  drained %.1f ms after the gate opened\n", (now() - t) * 1e3);
  return 0;
}
