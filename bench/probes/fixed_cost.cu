// Probe for issue 42: where does a timed launch's fixed cost come from, and why is the empty
// kernel's event interval bimodal on some cards? Each repetition is [event A][spin x us][event B]
// with x rotating over 0, 1, 2, 5, 10, 20 us, queued behind a gate (a kernel spinning on a mapped
// host flag, opened once the batch is queued), as the crate's gated mode does. The spin kernel (one
// thread) stores its SM, its first and last %globaltimer. Per length: the event interval, the
// kernel's own span, and their difference (the fixed cost), by batch, by SM and by the slot's
// parity, to tell whether a second mode follows the batch, the SM or the position; every ten
// batches the timing events or the stream are made anew, to tell whether it follows them.
//   nvcc -O2 -o fixed_cost fixed_cost.cu && ./fixed_cost [batches] [reps per batch]
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

struct Stamp { unsigned long long t0, t1; unsigned sm, pad; };

__global__ void spin(unsigned long long ns, Stamp *out) {
  unsigned long long t0, t; unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  t = t0;
  while (t - t0 < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  out->t0 = t0; out->t1 = t; out->sm = sm;
}
__global__ void gate(volatile int *flag) { while (*flag == 0) {} }

static double med(std::vector<double> v) {
  if (v.empty()) return 0; std::sort(v.begin(), v.end()); return v[v.size() / 2];
}
static double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0; std::sort(v.begin(), v.end()); return v[(size_t)(p / 100 * (v.size() - 1))];
}

int main(int argc, char **argv) {
  int batches = argc > 1 ? atoi(argv[1]) : 60, reps = argc > 2 ? atoi(argv[2]) : 120;
  const unsigned long long lengths[] = {0, 1000, 2000, 5000, 10000, 20000};
  const int L = 6;
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs; %d batches of %d repetitions\n", prop.name, prop.multiProcessorCount, batches, reps);
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *flag; CK(cudaHostAlloc(&flag, 4, cudaHostAllocMapped));
  int *dflag; CK(cudaHostGetDevicePointer((void **)&dflag, flag, 0));
  Stamp *stamps; CK(cudaMalloc(&stamps, sizeof(Stamp) * reps));
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto &e : ev) CK(cudaEventCreate(&e));
  std::vector<Stamp> host(reps);
  // samples[length] -> (interval, span, batch, sm, slot)
  struct S { double interval, span; int batch; unsigned sm; int slot; };
  std::map<int, std::vector<S>> all;
  for (int b = -2; b < batches; b++) {  // two warm-up batches
    // Every ten batches, new timing events (rounds 2, 3, 5) or a new stream (rounds 4, 5): does a
    // mode follow the events or the stream?
    int round = b / 10;
    if (b > 0 && b % 10 == 0) {
      if (round == 2 || round == 3 || round == 5) {
        for (auto &e : ev) { CK(cudaEventDestroy(e)); CK(cudaEventCreate(&e)); }
        printf("batch %d: new events\n", b);
      }
      if (round == 4 || round == 5) {
        cudaStream_t old = s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaStreamDestroy(old));
        printf("batch %d: new stream\n", b);
      }
    }
    *(volatile int *)flag = 0;
    gate<<<1, 1, 0, s>>>(dflag);
    int shift = (b < 0 ? 0 : b) % L;  // the rotation's phase changes per batch
    for (int i = 0; i < reps; i++) {
      CK(cudaEventRecord(ev[2 * i], s));
      spin<<<1, 1, 0, s>>>(lengths[(i + shift) % L], stamps + i);
      CK(cudaEventRecord(ev[2 * i + 1], s));
    }
    __sync_synchronize();
    *(volatile int *)flag = 1;
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(host.data(), stamps, sizeof(Stamp) * reps, cudaMemcpyDeviceToHost));
    if (b < 0) continue;
    for (int i = 0; i < reps; i++) {
      float ms; CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
      int li = (i + shift) % L;
      all[li].push_back({ms * 1000.0, (host[i].t1 - host[i].t0) / 1000.0, b, host[i].sm, i});
    }
  }
  printf("\nper length (us): interval median p10 p90 | span median | fixed = interval - span: median p10 p90\n");
  for (int li = 0; li < L; li++) {
    std::vector<double> in, sp, fx;
    for (auto &x : all[li]) { in.push_back(x.interval); sp.push_back(x.span); fx.push_back(x.interval - x.span); }
    printf("%5.0f us: %7.3f %7.3f %7.3f | %7.3f | %6.3f %6.3f %6.3f\n", lengths[li] / 1e3, med(in), pct(in, 10), pct(in, 90),
           med(sp), med(fx), pct(fx, 10), pct(fx, 90));
  }
  printf("\nfixed cost's histogram per length (0.128 us bins, share of samples, bins over 2%%)\n");
  for (int li = 0; li < L; li++) {
    std::map<int, int> h; for (auto &x : all[li]) h[(int)((x.interval - x.span) / 0.128)]++;
    printf("%5.0f us:", lengths[li] / 1e3);
    for (auto &kv : h) if (kv.second * 50 > (int)all[li].size()) printf("  %.3f:%.0f%%", kv.first * 0.128, 100.0 * kv.second / all[li].size());
    printf("\n");
  }
  printf("\nper batch: median fixed cost of each length (us)\n");
  for (int b = 0; b < batches; b++) {
    printf("batch %2d:", b);
    for (int li = 0; li < L; li++) { std::vector<double> fx; for (auto &x : all[li]) if (x.batch == b) fx.push_back(x.interval - x.span); printf(" %6.3f", med(fx)); }
    printf("\n");
  }
  printf("\nby slot in the batch: median fixed cost of each length, even slots | odd slots | first 6 slots\n");
  for (int li = 0; li < L; li++) {
    std::vector<double> even, odd, first;
    for (auto &x : all[li]) {
      double f = x.interval - x.span;
      (x.slot % 2 ? odd : even).push_back(f);
      if (x.slot < 6) first.push_back(f);
    }
    printf("%5.0f us: %6.3f | %6.3f | %6.3f\n", lengths[li] / 1e3, med(even), med(odd), med(first));
  }
  printf("\nper SM (SMs with >= 20 samples of the 1..20 us lengths): median fixed cost; spread of SM medians\n");
  std::map<unsigned, std::vector<double>> bysm;
  for (int li = 1; li < L; li++) for (auto &x : all[li]) bysm[x.sm].push_back(x.interval - x.span);
  std::vector<double> smmeds; int shown = 0;
  for (auto &kv : bysm) if (kv.second.size() >= 20) { double m = med(kv.second); smmeds.push_back(m); if (shown++ < 40) printf(" sm%u:%.3f(n%zu)", kv.first, m, kv.second.size()); }
  printf("\nSMs %zu, SM medians: min %.3f median %.3f max %.3f\n", smmeds.size(), pct(smmeds, 0), med(smmeds), pct(smmeds, 100));
  printf("\nline fit of interval on programmed length, 1..20 us, and on span, 0..20 us:\n");
  for (int on_span = 0; on_span < 2; on_span++) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0; int n = 0;
    for (int li = on_span ? 0 : 1; li < L; li++) for (auto &x : all[li]) {
      double X = on_span ? x.span : lengths[li] / 1e3; sx += X; sy += x.interval; sxx += X * X; sxy += X * x.interval; n++;
    }
    double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx), icpt = (sy - slope * sx) / n;
    printf("  on %s: intercept %.3f us, slope %.4f (n %d)\n", on_span ? "span" : "length", icpt, slope, n);
  }
  return 0;
}
