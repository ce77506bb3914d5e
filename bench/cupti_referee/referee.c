/* A CUPTI injection library: the referee for the project's timing, inside the process it times.
 *
 * CUDA_INJECTION64_PATH=.../libcupti_referee.so CUPTI_REFEREE_OUT=cupti.csv ./any-cuda-binary
 *
 * The CUDA driver loads it at the process's first CUDA call and calls InitializeInjection. It
 * collects CUPTI's activity records of kernels, memsets and copies (concurrent-kernel mode, which
 * does not serialize kernels) and writes one CSV row per record:
 *   kernel,START,END,STREAM,CORRELATION,NAME   memset,START,END,STREAM,CORRELATION,BYTES
 *   memcpy,START,END,STREAM,CORRELATION,BYTES
 * START and END are CUPTI's timestamps (ns). To put them on the host's CLOCK_MONOTONIC (what Rust's
 * Instant reads on Linux), a thread writes a row every 100 ms, and one at start and at exit:
 *   clock,CUPTI_BEFORE,MONOTONIC,CUPTI_AFTER
 * bench/cupti_referee.py reads the rows and maps CUPTI's clock through the nearest tight pairs.
 * Built on the GPU machine by build.sh (it needs CUPTI's headers and library). */
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#ifndef KERNEL_RECORD
#error "build.sh defines KERNEL_RECORD, MEMSET_RECORD and MEMCPY_RECORD from CUPTI's header"
#endif

static FILE *out;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#define CHECK(call)                                                                                \
  do {                                                                                             \
    CUptiResult r_ = (call);                                                                       \
    if (r_ != CUPTI_SUCCESS) {                                                                     \
      const char *s_ = "?";                                                                        \
      cuptiGetResultString(r_, &s_);                                                               \
      fprintf(stderr, "cupti_referee: %s: %s\n", #call, s_);                                      \
    }                                                                                              \
  } while (0)

static void clock_row(void) {
  uint64_t before = 0, after = 0;
  struct timespec t;
  cuptiGetTimestamp(&before);
  clock_gettime(CLOCK_MONOTONIC, &t);
  cuptiGetTimestamp(&after);
  pthread_mutex_lock(&lock);
  fprintf(out, "clock,%llu,%llu,%llu\n", (unsigned long long)before,
          (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec,
          (unsigned long long)after);
  pthread_mutex_unlock(&lock);
}

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *size = 16u << 20;
  *buffer = aligned_alloc(8, *size);
  *max_records = 0;
}

static void CUPTIAPI completed(CUcontext context, uint32_t stream, uint8_t *buffer, size_t size,
                               size_t valid) {
  (void)context, (void)stream, (void)size;
  CUpti_Activity *record = NULL;
  pthread_mutex_lock(&lock);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      KERNEL_RECORD *k = (KERNEL_RECORD *)record;
      fprintf(out, "kernel,%llu,%llu,%u,%u,%s\n", (unsigned long long)k->start,
              (unsigned long long)k->end, k->streamId, k->correlationId, k->name ? k->name : "");
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      MEMSET_RECORD *m = (MEMSET_RECORD *)record;
      fprintf(out, "memset,%llu,%llu,%u,%u,%llu\n", (unsigned long long)m->start,
              (unsigned long long)m->end, m->streamId, m->correlationId,
              (unsigned long long)m->bytes);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      MEMCPY_RECORD *m = (MEMCPY_RECORD *)record;
      fprintf(out, "memcpy,%llu,%llu,%u,%u,%llu\n", (unsigned long long)m->start,
              (unsigned long long)m->end, m->streamId, m->correlationId,
              (unsigned long long)m->bytes);
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS && dropped)
    fprintf(out, "dropped,%zu\n", dropped);
  fflush(out);
  pthread_mutex_unlock(&lock);
  free(buffer);
}

static void *clock_rows(void *unused) {
  (void)unused;
  for (;;) {
    usleep(100000);
    clock_row();
  }
  return NULL;
}

static void finish(void) {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  clock_row();
  fflush(out);
}

int InitializeInjection(void) {
  const char *path = getenv("CUPTI_REFEREE_OUT");
  out = fopen(path ? path : "cupti.csv", "w");
  if (!out) return 0;
  CHECK(cuptiActivityRegisterCallbacks(requested, completed));
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
  CHECK(cuptiActivityFlushPeriod(500));
  clock_row();
  pthread_t thread;
  if (pthread_create(&thread, NULL, clock_rows, NULL) == 0) pthread_detach(thread);
  atexit(finish);
  return 1;
}
