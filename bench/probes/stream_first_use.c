/* Probe for issue 43: the events benchmark's raw baseline stream takes 8 threads' records at about
 * twice the rate of the crate's, cudarc's and record_layouts.c's streams (6.7M/s against 3.5-3.7M/s
 * on an H100), and a stream's creation call does not decide it (record_layouts.c). The baseline
 * stream is the only one that gets, before the benchmark, records of timing events and of an
 * interprocess event. This probe asks which first use, if any, makes a stream's later records scale.
 *
 * Per thread, one non-blocking stream per variant (made in an order rotated by thread, as the
 * benchmark makes its objects), given its first use and (but for the last) a synchronize:
 *   none       nothing
 *   plain      a record of a disable-timing event
 *   timing     a record of a timing event
 *   ipc        a record of an interprocess (disable-timing) event
 *   bench      what the benchmark's Raw::new does: plain, 3 timing, one more plain, ipc
 *   crate+ipc  made as the crate makes streams (primary context pushed, WithPriority 0), then ipc
 *   unwaited   a record of a timing event that is destroyed at once, with no synchronize (what the
 *              crate's Stream::new does since this probe)
 * Then T threads (fresh, device 0 current) each record their own disable-timing event (made by
 * cuEventCreate) on their own stream of one variant, RECORDS times; aggregate records/s, median
 * over rounds, and the median per-round ratio to "none"; variants interleaved, order rotated by round.
 *   gcc -O2 stream_first_use.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -lcuda \
 *     -lpthread -o stream_first_use && ./stream_first_use */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { int r_ = (int)(x); if (r_) { printf("%s: %d\n", #x, r_); exit(1); } } while (0)
#define RECORDS 20000
#define ROUNDS 9
#define VARIANTS 7
#define MAXT 8

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
static double median(double *v, int n) { qsort(v, n, sizeof *v, cmp); return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2; }

static const char *names[VARIANTS] = {"none", "plain", "timing", "ipc", "bench", "crate+ipc", "unwaited"};
static CUcontext primary;

static void record_once(cudaStream_t s, unsigned flags) {
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, flags));
  CK(cudaEventRecord(e, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaEventDestroy(e));
}

static cudaStream_t make(int variant) {
  cudaStream_t s;
  CK(cudaSetDevice(0));
  if (variant == 5) {
    CUcontext popped;
    CK(cuCtxPushCurrent(primary));
    CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, 0));
    CK(cuCtxPopCurrent(&popped));
  } else {
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  switch (variant) {
    case 1: record_once(s, cudaEventDisableTiming); break;
    case 2: record_once(s, cudaEventDefault); break;
    case 3: case 5: record_once(s, cudaEventInterprocess | cudaEventDisableTiming); break;
    case 4: {
      unsigned flags[6] = {cudaEventDisableTiming, cudaEventDefault, cudaEventDisableTiming, cudaEventDefault,
                           cudaEventDefault, cudaEventInterprocess | cudaEventDisableTiming};
      cudaEvent_t e[6];
      for (int i = 0; i < 6; i++) { CK(cudaEventCreateWithFlags(&e[i], flags[i])); CK(cudaEventRecord(e[i], s)); }
      CK(cudaStreamSynchronize(s));
      for (int i = 0; i < 6; i++) CK(cudaEventDestroy(e[i]));
      break;
    }
    case 6: {
      CUevent e;
      CK(cuEventCreate(&e, CU_EVENT_DEFAULT));
      CK(cuEventRecord(e, (CUstream)s));
      CK(cuEventDestroy(e));
      break;
    }
    default: break;
  }
  return s;
}

struct job { CUevent event; CUstream stream; pthread_barrier_t *go; double start, end; };

static void *worker(void *p) {
  struct job *j = p;
  CK(cudaSetDevice(0));
  pthread_barrier_wait(j->go);
  j->start = now();
  for (int i = 0; i < RECORDS; i++) CK(cuEventRecord(j->event, j->stream));
  j->end = now();
  return NULL;
}

static double rate(cudaStream_t s[MAXT][VARIANTS], CUevent ev[MAXT], int T, int v) {
  pthread_t th[MAXT]; struct job jobs[MAXT]; pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, T);
  for (int t = 0; t < T; t++) {
    jobs[t] = (struct job){ev[t], (CUstream)s[t][v], &go, 0, 0};
    pthread_create(&th[t], NULL, worker, &jobs[t]);
  }
  double a = 1e300, b = 0;
  for (int t = 0; t < T; t++) { pthread_join(th[t], NULL); if (jobs[t].start < a) a = jobs[t].start; if (jobs[t].end > b) b = jobs[t].end; }
  pthread_barrier_destroy(&go);
  for (int t = 0; t < T; t++) CK(cuStreamSynchronize(jobs[t].stream));
  return (double)T * RECORDS / (b - a);
}

int main(void) {
  CK(cuInit(0));
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  CK(cuDevicePrimaryCtxRetain(&primary, 0));
  char name[256]; int driver; CK(cudaDriverGetVersion(&driver));
  CK(cuDeviceGetName(name, sizeof name, 0));
  const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  printf("%s, driver API %d, CUDA_DEVICE_MAX_CONNECTIONS=%s; %d records a thread, %d rounds; median records/s and median ratio to 'none'\n",
         name, driver, conn ? conn : "unset", RECORDS, ROUNDS);
  printf("%-10s", "variant");
  for (int T = 1; T <= MAXT; T *= 2) printf("        T=%d        ", T);
  printf("\n");
  double cell[4][VARIANTS][2];
  int col = 0;
  for (int T = 1; T <= MAXT; T *= 2, col++) {
    cudaStream_t s[MAXT][VARIANTS];
    CUevent ev[MAXT];
    for (int t = 0; t < T; t++) {
      for (int k = 0; k < VARIANTS; k++) { int v = (k + t) % VARIANTS; s[t][v] = make(v); }
      CK(cuEventCreate(&ev[t], CU_EVENT_DISABLE_TIMING));
    }
    double r[VARIANTS][ROUNDS], ratio[VARIANTS][ROUNDS];
    for (int k = -1; k < ROUNDS; k++) {
      double got[VARIANTS];
      for (int i = 0; i < VARIANTS; i++) {
        int v = (i + (k < 0 ? 0 : k)) % VARIANTS;
        got[v] = rate(s, ev, T, v);
      }
      if (k < 0) continue; /* warm-up */
      for (int v = 0; v < VARIANTS; v++) { r[v][k] = got[v]; ratio[v][k] = got[v] / got[0]; }
    }
    for (int v = 0; v < VARIANTS; v++) { cell[col][v][0] = median(r[v], ROUNDS); cell[col][v][1] = median(ratio[v], ROUNDS); }
    for (int t = 0; t < T; t++) {
      for (int v = 0; v < VARIANTS; v++) CK(cudaStreamDestroy(s[t][v]));
      CK(cuEventDestroy(ev[t]));
    }
  }
  for (int v = 0; v < VARIANTS; v++) {
    printf("%-10s", names[v]);
    for (int c = 0; c < col; c++) printf("  %6.2fM %5.2fx    ", cell[c][v][0] / 1e6, cell[c][v][1]);
    printf("\n");
  }
  return 0;
}
