// What a cuEventQuery costs, on pending and completed events over 64 streams, by connections.
#include <cuda_runtime.h>
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef CUresult (*wait_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
typedef CUresult (*query_fn)(CUevent);
#define CK(x) do { cudaError_t ck_ = (x); if (ck_) { printf("%s -> %d at %d\n", #x, ck_, __LINE__); exit(1);} } while (0)
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
enum { S = 64, N = 200000 };
int main(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  wait_fn wv = (wait_fn)dlsym(lib, "cuStreamWaitValue32_v2");
  query_fn q = (query_fn)dlsym(lib, "cuEventQuery");
  CK(cudaFree(0));
  volatile unsigned *flag; void *dflag;
  CK(cudaHostAlloc((void**)&flag, 4, cudaHostAllocMapped)); *flag = 0;
  CK(cudaHostGetDevicePointer(&dflag, (void*)flag, 0));
  cudaStream_t s[S]; cudaEvent_t pend[S], done[S];
  for (int i = 0; i < S; i++) {
    CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming)); CK(cudaEventRecord(done[i], s[i]));
    CK(cudaEventCreateWithFlags(&pend[i], cudaEventDisableTiming));
  }
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < S; i++) { wv((CUstream)s[i], (CUdeviceptr)dflag, 1, CU_STREAM_WAIT_VALUE_GEQ); CK(cudaEventRecord(pend[i], s[i])); }
  for (int round = 0; round < 3; round++) {
    double t0 = now(); for (int k = 0; k < N; k++) q((CUevent)pend[k % S]); double tp = now() - t0;
    t0 = now(); for (int k = 0; k < N; k++) q((CUevent)done[k % S]); double td = now() - t0;
    t0 = now(); for (int k = 0; k < N; k++) q((CUevent)pend[0]); double t1 = now() - t0;
    printf("conns=%s round %d: cuEventQuery over 64 streams: pending %.0f ns, complete %.0f ns; one pending event %.0f ns\n",
      getenv("CUDA_DEVICE_MAX_CONNECTIONS") ? getenv("CUDA_DEVICE_MAX_CONNECTIONS") : "8", round, tp / N * 1e9, td / N * 1e9, t1 / N * 1e9);
  }
  *flag = 1; CK(cudaDeviceSynchronize());
  return 0;
}
