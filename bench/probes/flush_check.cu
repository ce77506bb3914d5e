// Probe for issue 35: can a timed read tell whether the L2 flush (a cuMemsetD32Async over twice the
// L2) evicted a buffer, with a kernel read and with a device-to-device copy? And does resetting
// persisting L2 lines wait for other streams' work? nvcc -O2 -o flush_check flush_check.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

__global__ void read_sum(const uint4 *p, size_t n, unsigned *out) {
  unsigned s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = p[i]; s += v.x ^ v.y ^ v.z ^ v.w;
  }
  if (s == 0x12345678) *out = s;
}
__global__ void spin(unsigned long long ns) {
  unsigned long long t0, t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main() {
  int l2 = 0, persist = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CK(cudaDeviceGetAttribute(&persist, cudaDevAttrMaxPersistingL2CacheSize, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  printf("l2 %d bytes, max persisting %d, sms %d\n", l2, persist, sms);
  size_t flush_bytes = 2 * (size_t)l2;
  void *flush, *a, *b, *dst; unsigned *out;
  CK(cudaMalloc(&flush, flush_bytes));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  CK(cudaMalloc(&out, 4));
  size_t sizes[] = {1 << 20, 4 << 20, (size_t)l2 / 4, (size_t)l2 / 2};
  for (size_t bytes : sizes) {
    CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&b, bytes)); CK(cudaMalloc(&dst, bytes));
    CK(cudaMemset(a, 1, bytes)); CK(cudaMemset(b, 2, bytes)); CK(cudaDeviceSynchronize());
    size_t n = bytes / 16;
    for (int how = 0; how < 2; how++) {  // 0: kernel read, 1: d2d copy
      auto read = [&](void *p) {
        if (how == 0) read_sum<<<sms * 4, 256, 0, s>>>((const uint4 *)p, n, out);
        else cudaMemcpyAsync(dst, p, bytes, cudaMemcpyDeviceToDevice, s);
      };
      auto timed = [&](void *p) { cudaEventRecord(e0, s); read(p); cudaEventRecord(e1, s); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); return ms * 1000; };
      auto do_flush = [&]() { cuMemsetD32Async((CUdeviceptr)flush, 0, flush_bytes / 4, s); };
      std::vector<float> warm, flushed, cold, noflush_other;
      for (int r = 0; r < 31; r++) {
        read(a); warm.push_back(timed(a));
        read(a); do_flush(); flushed.push_back(timed(a));
        do_flush(); cold.push_back(timed(b));
        read(a); noflush_other.push_back(timed(b));  // b not read lately, no flush
      }
      printf("%zu bytes %s: warm %.2f us, read-then-flushed %.2f us, never-read-flushed %.2f us, never-read-no-flush %.2f us; flushed/cold %.3f warm/cold %.3f\n",
             bytes, how ? "d2d copy" : "kernel read", median(warm), median(flushed), median(cold), median(noflush_other),
             median(flushed) / median(cold), median(warm) / median(cold));
    }
    cudaFree(a); cudaFree(b); cudaFree(dst);
  }
  // Does resetting persisting lines wait for another stream's work?
  cudaStream_t other; CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  spin<<<1, 1, 0, other>>>(300000000ull);
  CK(cudaGetLastError());
  auto t0 = std::chrono::steady_clock::now();
  CUresult r = cuCtxResetPersistingL2Cache();
  auto t1 = std::chrono::steady_clock::now();
  cudaError_t q = cudaStreamQuery(other);
  printf("cuCtxResetPersistingL2Cache beside a 300 ms kernel: %d, %.3f ms on the host; other stream then %s\n", (int)r,
         std::chrono::duration<double, std::milli>(t1 - t0).count(), q == cudaSuccess ? "done" : "still busy");
  CK(cudaDeviceSynchronize());
  t0 = std::chrono::steady_clock::now(); r = cuCtxResetPersistingL2Cache(); t1 = std::chrono::steady_clock::now();
  printf("cuCtxResetPersistingL2Cache idle: %d, %.3f ms\n", (int)r, std::chrono::duration<double, std::milli>(t1 - t0).count());
  // Is it ordered on streams? A persisting window set on s, then reset while s is held by a spin.
  spin<<<1, 1, 0, s>>>(300000000ull);
  t0 = std::chrono::steady_clock::now(); r = cuCtxResetPersistingL2Cache(); t1 = std::chrono::steady_clock::now();
  printf("cuCtxResetPersistingL2Cache beside a 300 ms kernel on the measured stream: %d, %.3f ms; stream then %s\n", (int)r,
         std::chrono::duration<double, std::milli>(t1 - t0).count(), cudaStreamQuery(s) == cudaSuccess ? "done" : "still busy");
  CK(cudaDeviceSynchronize());
  return 0;
}
