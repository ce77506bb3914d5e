/* Probe for issue 43: why do 8 threads record at half of raw speed on the crate's streams? The
 * hypothesis: not the creation call but the stream's place among the streams made. CUDA maps
 * streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues in creation order, and host threads
 * that submit to one queue contend for it. Each row: T threads, each recording its own
 * timing-disabled event on its own stream, aggregate records/s (median of 5 rounds of 20,000
 * records a thread), for streams chosen among 64 made in a row:
 *   consecutive   streams 0..T-1 (every thread its own queue while T <= connections)
 *   stride-8      streams 0, 8, 16, ... (one queue for all, with 8 connections)
 *   stride-4      streams 0, 4, 8, ...
 *   stride-9      streams 0, 9, 18, ...
 * then streams made by each path in a row, T of them: runtime WithFlags(non-blocking),
 * WithPriority(non-blocking, 0), WithPriority(greatest), driver cuStreamCreate in the pushed
 * primary context; and the crate's pattern from the events bench: per thread, the streams of
 * `per_thread` implementations made in turn, the thread using the k-th (stride = per_thread).
 * Run it twice: with CUDA_DEVICE_MAX_CONNECTIONS unset (8) and =32.
 *   gcc -O2 stream_channels.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -lcuda \
 *     -lpthread -o stream_channels && ./stream_channels */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x) do { int r_ = (int)(x); if (r_) { printf("%s: %d\n", #x, r_); exit(1); } } while (0)
#define MADE 64
#define RECORDS 20000
#define ROUNDS 5

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

struct job { cudaStream_t stream; cudaEvent_t event; pthread_barrier_t *go; double start, end; };

static void *worker(void *p) {
  struct job *j = p;
  CK(cudaSetDevice(0));
  pthread_barrier_wait(j->go);
  j->start = now();
  for (int i = 0; i < RECORDS; i++) CK(cudaEventRecord(j->event, j->stream));
  j->end = now();
  return NULL;
}

static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }

/* Aggregate records/s of T threads on streams[0..T), median of ROUNDS. */
static double rate(cudaStream_t *streams, int T) {
  double r[ROUNDS];
  cudaEvent_t ev[64];
  for (int t = 0; t < T; t++) CK(cudaEventCreateWithFlags(&ev[t], cudaEventDisableTiming));
  for (int k = 0; k < ROUNDS; k++) {
    pthread_t th[64]; struct job jobs[64]; pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, T);
    for (int t = 0; t < T; t++) { jobs[t] = (struct job){streams[t], ev[t], &go, 0, 0}; pthread_create(&th[t], NULL, worker, &jobs[t]); }
    double s = 1e300, e = 0;
    for (int t = 0; t < T; t++) { pthread_join(th[t], NULL); if (jobs[t].start < s) s = jobs[t].start; if (jobs[t].end > e) e = jobs[t].end; }
    pthread_barrier_destroy(&go);
    for (int t = 0; t < T; t++) CK(cudaStreamSynchronize(streams[t]));
    r[k] = (double)T * RECORDS / (e - s);
  }
  for (int t = 0; t < T; t++) CK(cudaEventDestroy(ev[t]));
  qsort(r, ROUNDS, sizeof r[0], cmp);
  return r[ROUNDS / 2];
}

int main(void) {
  const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  printf("CUDA_DEVICE_MAX_CONNECTIONS=%s\n", conn ? conn : "(unset: 8)");
  CK(cudaSetDevice(0)); CK(cudaFree(0));
  int threads[] = {1, 2, 4, 8};
  cudaStream_t made[MADE], pick[64];
  for (int i = 0; i < MADE; i++) CK(cudaStreamCreateWithFlags(&made[i], cudaStreamNonBlocking));
  int strides[] = {1, 8, 4, 9, 2, 10};
  printf("%-52s %12s %12s %12s %12s\n", "streams (64 made in a row, WithFlags)", "T=1", "T=2", "T=4", "T=8");
  double base[4];
  for (int s = 0; s < 6; s++) {
    char name[64]; snprintf(name, sizeof name, "stride %d (streams 0, %d, ...)", strides[s], strides[s]);
    printf("%-52s", name);
    for (int k = 0; k < 4; k++) {
      for (int t = 0; t < threads[k]; t++) pick[t] = made[(t * strides[s]) % MADE];
      double r = rate(pick, threads[k]);
      if (s == 0) base[k] = r;
      printf(" %7.2fM %4.2fx", r / 1e6, r / base[k]);
    }
    printf("\n");
  }
  /* Each creation path, its T streams made in a row (fresh each time). */
  int lo, hi; CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  const char *paths[] = {"runtime WithFlags(non-blocking)", "runtime WithPriority(non-blocking, 0)",
                         "runtime WithPriority(non-blocking, greatest)", "driver cuStreamCreate, pushed primary ctx"};
  for (int p = 0; p < 4; p++) {
    printf("%-52s", paths[p]);
    for (int k = 0; k < 4; k++) {
      int T = threads[k];
      for (int t = 0; t < T; t++) {
        switch (p) {
        case 0: CK(cudaStreamCreateWithFlags(&pick[t], cudaStreamNonBlocking)); break;
        case 1: CK(cudaStreamCreateWithPriority(&pick[t], cudaStreamNonBlocking, 0)); break;
        case 2: CK(cudaStreamCreateWithPriority(&pick[t], cudaStreamNonBlocking, hi)); break;
        case 3: {
          CUdevice dev; CUcontext ctx, popped; CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev));
          CK(cuCtxPushCurrent(ctx)); CK(cuStreamCreate((CUstream *)&pick[t], CU_STREAM_NON_BLOCKING));
          CK(cuCtxPopCurrent(&popped)); CK(cuDevicePrimaryCtxRelease(dev)); break;
        }
        }
      }
      double r = rate(pick, T);
      printf(" %7.2fM %4.2fx", r / 1e6, r / base[k]);
      for (int t = 0; t < T; t++) CK(cudaStreamDestroy(pick[t]));
    }
    printf("\n");
  }
  /* The events bench's layout: each thread makes one stream per implementation in turn; the
   * thread's stream of implementation j is the (per_thread * t + j)-th made. */
  int layouts[] = {2, 3, 4, 8};
  for (int l = 0; l < 4; l++) {
    int per = layouts[l];
    for (int j = 0; j < per && j < 2; j++) {
      char name[64]; snprintf(name, sizeof name, "%d made a thread, the thread uses its #%d", per, j);
      printf("%-52s", name);
      for (int k = 0; k < 4; k++) {
        int T = threads[k]; cudaStream_t all[64];
        for (int i = 0; i < T * per; i++) CK(cudaStreamCreateWithFlags(&all[i], cudaStreamNonBlocking));
        for (int t = 0; t < T; t++) pick[t] = all[t * per + j];
        double r = rate(pick, T);
        printf(" %7.2fM %4.2fx", r / 1e6, r / base[k]);
        for (int i = 0; i < T * per; i++) CK(cudaStreamDestroy(all[i]));
      }
      printf("\n");
    }
  }
  return 0;
}
