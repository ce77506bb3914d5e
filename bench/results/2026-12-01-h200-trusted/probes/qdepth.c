// How many event records can be queued behind a held stream before the enqueue blocks, for
// default and blocking-sync events, on one stream and spread over streams?
#include <cuda_runtime.h>
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
typedef CUresult (*wait_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
#define CK(x) do { cudaError_t ck_ = (x); if (ck_) { printf("%s -> %d at %d\n", #x, ck_, __LINE__); exit(1);} } while (0)
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static volatile unsigned *flag;
static void *release(void *a) { (void)a; usleep(3000000); *flag = 1; return 0; }
int main(int argc, char **argv) {
  int blocking = atoi(argv[1]), streams = atoi(argv[2]), per = atoi(argv[3]);
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  wait_fn wv = (wait_fn)dlsym(lib, "cuStreamWaitValue32_v2");
  CK(cudaFree(0));
  void *dflag;
  CK(cudaHostAlloc((void**)&flag, 4, cudaHostAllocMapped)); *flag = 0;
  CK(cudaHostGetDevicePointer(&dflag, (void*)flag, 0));
  cudaStream_t *s = malloc(sizeof(*s) * streams);
  cudaEvent_t *e = malloc(sizeof(*e) * streams * per);
  for (int i = 0; i < streams * per; i++) CK(cudaEventCreateWithFlags(&e[i], cudaEventDisableTiming | (blocking ? cudaEventBlockingSync : 0)));
  for (int i = 0; i < streams; i++) { CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking)); if (wv((CUstream)s[i], (CUdeviceptr)dflag, 1, CU_STREAM_WAIT_VALUE_GEQ)) { printf("wait failed\n"); return 1; } }
  pthread_t t; pthread_create(&t, 0, release, 0);
  double t0 = now(), first_slow = -1; int at = -1;
  for (int k = 0; k < per; k++) for (int i = 0; i < streams; i++) {
    double a = now(); CK(cudaEventRecord(e[i * per + k], s[i]));
    if (at < 0 && now() - a > 0.1) { at = k * streams + i; first_slow = now() - t0; }
  }
  double took = now() - t0;
  printf("blocking=%d streams=%d per_stream=%d conns=%s: enqueue %.1f ms; first record that blocked >100 ms: %d (at %.1f ms)\n",
         blocking, streams, per, getenv("CUDA_DEVICE_MAX_CONNECTIONS") ? getenv("CUDA_DEVICE_MAX_CONNECTIONS") : "8", took * 1e3, at, first_slow * 1e3);
  pthread_join(t, 0); CK(cudaDeviceSynchronize());
  return 0;
}
