/* Probe for issue 43: in the events benchmark's thread scaling, raw driver records of cuda-event's
 * event on cuda-event's stream scale like cuda-event's records (about 0.6x of raw at 4 threads),
 * while cuda-event's records on a stream the runtime made scale like raw. stream_channels.c ruled
 * out the creation call and the stream's place among the streams made, each alone. This probe
 * makes the benchmark's objects the way each implementation makes them, per thread in the
 * benchmark's rotated order, and records with one call (cuEventRecord) on each event/stream pair:
 *   raw/raw        the runtime's event on the runtime's stream (the baseline)
 *   crate/crate    the crate's event on the crate's stream
 *   crate/raw      the crate's event on the runtime's stream
 *   raw/crate      the runtime's event on the crate's stream
 *   driver/driver  cuEventCreate's event on cuStreamCreate's stream (cudarc's way)
 *   crate/nopush   the crate's event on a stream made as the crate makes it, without the pushed context
 * The crate's way: primary context retained and pushed, cudaStreamCreateWithPriority(non-blocking,
 * 0), cuEventCreate(disable timing) twice, popped. Each row: T threads (fresh each round, each
 * with device 0 current), aggregate records/s, median over rounds of the ratio to raw/raw in the
 * same round (pairs interleaved, order rotated by round).
 *   gcc -O2 record_layouts.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -lcuda \
 *     -lpthread -o record_layouts && ./record_layouts */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { int r_ = (int)(x); if (r_) { printf("%s: %d\n", #x, r_); exit(1); } } while (0)
#define RECORDS 20000
#define ROUNDS 9
#define PAIRS 6
#define MAXT 8

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }

struct objects {
  cudaStream_t raw_stream, raw_other, crate_stream, driver_stream, nopush_stream;
  cudaEvent_t raw_event[6];
  CUevent crate_event[2], driver_event[2], nopush_event[2];
};

static CUcontext primary;

static void make_raw(struct objects *o) {
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&o->raw_stream, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&o->raw_other, cudaStreamNonBlocking));
  for (int i = 0; i < 6; i++) CK(cudaEventCreateWithFlags(&o->raw_event[i], i == 1 ? cudaEventDefault : cudaEventDisableTiming));
}

static void make_crate(struct objects *o) {
  CUcontext popped;
  CK(cuCtxPushCurrent(primary));
  CK(cudaStreamCreateWithPriority(&o->crate_stream, cudaStreamNonBlocking, 0));
  for (int i = 0; i < 2; i++) CK(cuEventCreate(&o->crate_event[i], CU_EVENT_DISABLE_TIMING));
  CK(cuCtxPopCurrent(&popped));
}

static void make_driver(struct objects *o) {
  CK(cuCtxSetCurrent(primary));
  CK(cuStreamCreate((CUstream *)&o->driver_stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 2; i++) CK(cuEventCreate(&o->driver_event[i], CU_EVENT_DISABLE_TIMING));
}

static void make_nopush(struct objects *o) {
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithPriority(&o->nopush_stream, cudaStreamNonBlocking, 0));
  for (int i = 0; i < 2; i++) CK(cuEventCreate(&o->nopush_event[i], CU_EVENT_DISABLE_TIMING));
}

static const char *names[PAIRS] = {"raw/raw", "crate/crate", "crate/raw", "raw/crate", "driver/driver", "crate/nopush"};

static void pair(struct objects *o, int p, CUevent *e, CUstream *s) {
  switch (p) {
    case 0: *e = (CUevent)o->raw_event[0]; *s = (CUstream)o->raw_stream; break;
    case 1: *e = o->crate_event[0]; *s = (CUstream)o->crate_stream; break;
    case 2: *e = o->crate_event[0]; *s = (CUstream)o->raw_stream; break;
    case 3: *e = (CUevent)o->raw_event[0]; *s = (CUstream)o->crate_stream; break;
    case 4: *e = o->driver_event[0]; *s = (CUstream)o->driver_stream; break;
    default: *e = o->nopush_event[0]; *s = (CUstream)o->nopush_stream; break;
  }
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

static double rate(struct objects *o, int T, int p) {
  pthread_t th[MAXT]; struct job jobs[MAXT]; pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, T);
  for (int t = 0; t < T; t++) {
    jobs[t] = (struct job){0, 0, &go, 0, 0};
    pair(&o[t], p, &jobs[t].event, &jobs[t].stream);
    pthread_create(&th[t], NULL, worker, &jobs[t]);
  }
  double s = 1e300, e = 0;
  for (int t = 0; t < T; t++) { pthread_join(th[t], NULL); if (jobs[t].start < s) s = jobs[t].start; if (jobs[t].end > e) e = jobs[t].end; }
  pthread_barrier_destroy(&go);
  for (int t = 0; t < T; t++) CK(cuStreamSynchronize(jobs[t].stream));
  return (double)T * RECORDS / (e - s);
}

int main(void) {
  CK(cuInit(0));
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  CK(cuDevicePrimaryCtxRetain(&primary, 0));
  char name[256]; int driver; CK(cudaDriverGetVersion(&driver));
  CK(cuDeviceGetName(name, sizeof name, 0));
  printf("%s, driver API %d; %d records a thread, %d rounds; median records/s and median ratio to raw/raw\n", name, driver, RECORDS, ROUNDS);
  printf("%-14s", "pair");
  for (int T = 1; T <= MAXT; T *= 2) printf("          T=%d       ", T);
  printf("\n");
  double cell[4][PAIRS][2];
  int col = 0;
  for (int T = 1; T <= MAXT; T *= 2, col++) {
    struct objects o[MAXT];
    /* The benchmark's order: thread t makes its sets in an order rotated by t. */
    for (int t = 0; t < T; t++)
      for (int k = 0; k < 4; k++) switch ((k + t) % 4) {
        case 0: make_crate(&o[t]); break;
        case 1: make_driver(&o[t]); break;
        case 2: make_raw(&o[t]); break;
        default: make_nopush(&o[t]); break;
      }
    CK(cudaSetDevice(0));
    for (int t = 0; t < T; t++) for (int p = 0; p < PAIRS; p++) {
      CUevent e; CUstream s; pair(&o[t], p, &e, &s);
      CK(cuEventRecord(e, s)); CK(cuStreamSynchronize(s));
    }
    double r[PAIRS][ROUNDS], ratio[PAIRS][ROUNDS];
    for (int k = -1; k < ROUNDS; k++) {
      double got[PAIRS];
      for (int i = 0; i < PAIRS; i++) { int p = (i + (k < 0 ? 0 : k)) % PAIRS; got[p] = rate(o, T, p); }
      if (k < 0) continue; /* warm-up */
      for (int p = 0; p < PAIRS; p++) { r[p][k] = got[p]; ratio[p][k] = got[p] / got[0]; }
    }
    for (int p = 0; p < PAIRS; p++) {
      qsort(r[p], ROUNDS, sizeof(double), cmp); qsort(ratio[p], ROUNDS, sizeof(double), cmp);
      cell[col][p][0] = r[p][ROUNDS / 2]; cell[col][p][1] = ratio[p][ROUNDS / 2];
    }
  }
  for (int p = 0; p < PAIRS; p++) {
    printf("%-14s", names[p]);
    for (int c = 0; c < col; c++) printf("   %6.2fM %5.2fx    ", cell[c][p][0] / 1e6, cell[c][p][1]);
    printf("\n");
  }
  return 0;
}
