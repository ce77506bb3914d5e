// While a host function blocks CUDA's host-function thread, do other threads' CUDA calls return?
#include <cuda_runtime.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void CUDART_CB blocker(void *arg) { (void)arg; usleep(3000000); }
int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  cudaStream_t a, b; cudaEvent_t e;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  cudaEventRecord(e, b); cudaStreamSynchronize(b);
  void *warm; cudaMalloc(&warm, 4096);
  double t0 = now();
  printf("launch host fn: %d\n", cudaLaunchHostFunc(a, blocker, NULL));
  usleep(100000);
  double t = now(); int q = cudaEventQuery(e); printf("event query %d after %.1f ms, returned in %.3f ms\n", q, (t - t0) * 1e3, (now() - t) * 1e3);
  t = now(); q = cudaEventRecord(e, b); printf("record %d returned in %.3f ms\n", q, (now() - t) * 1e3);
  t = now(); q = cudaStreamQuery(b); printf("stream query %d returned in %.3f ms\n", q, (now() - t) * 1e3);
  void *buf; cudaMalloc(&buf, 1 << 20);
  t = now(); q = cudaMemsetAsync(buf, 1, 1 << 20, b); printf("memset launch %d returned in %.3f ms\n", q, (now() - t) * 1e3);
  t = now(); q = cudaStreamSynchronize(b); printf("memset done %d in %.3f ms (at %.1f ms)\n", q, (now() - t) * 1e3, (now() - t0) * 1e3);
  t = now(); q = cudaStreamSynchronize(a); printf("host fn done %d at %.1f ms\n", q, (now() - t0) * 1e3);
  return 0;
}
