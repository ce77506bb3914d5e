/* Probe for issue 43's low-latency lane: how soon does a host thread see that the GPU got past a
 * point in a stream, for each way of looking? The stream waits on a word of pinned host memory
 * (cuStreamWaitValue32) that the host sets at t0; behind the wait the stream has:
 *   flag     cuStreamWriteValue32 into another pinned word; the host spins on a volatile load
 *   query    a timing-disabled event; the host spins on cuEventQuery
 *   sync     a blocking-sync event; the host sleeps in cuEventSynchronize
 *   flag+ev  both the write and the event (what a lane adds to a record); the host spins on the flag
 * t1 is when the host sees it. Reported: p50, p99 and max of t1 - t0 over TRIALS, and the floor:
 * t1 - t0 with the host setting and reading its own word (no GPU). Each trial waits for the stream
 * to be idle first; methods are interleaved trial by trial.
 *   gcc -O2 flag_wake.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -o flag_wake && ./flag_wake */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { printf("%s: %d\n", #x, (int)r_); exit(1); } } while (0)
#define TRIALS 3000
#define METHODS 5

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }

static const char *names[METHODS] = {"flag (spin on a pinned word)", "query (spin on cuEventQuery)", "sync (blocking-sync event)", "flag+event (spin on the word)", "floor (host word, no GPU)"};

int main(void) {
  CUdevice dev; CUcontext ctx; CUstream s; CUevent plain, blocking;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  char name[256]; int driver; CK(cuDeviceGetName(name, sizeof name, dev)); CK(cuDriverGetVersion(&driver));
  int wait_ok = 0;
  cuDeviceGetAttribute(&wait_ok, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);
  printf("%s, driver API %d, stream memory ops (wait NOR attr) %d; %d trials a method\n", name, driver, wait_ok, TRIALS);
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&blocking, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
  volatile uint32_t *words; CUdeviceptr dwords;
  CK(cuMemHostAlloc((void **)&words, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CK(cuMemHostGetDevicePointer(&dwords, (void *)words, 0));
  CUdeviceptr go = dwords, flag = dwords + 32;
  volatile uint32_t *hgo = words, *hflag = words + 8;
  static double lat[METHODS][TRIALS];
  for (int i = 0; i < TRIALS + 50; i++)
    for (int k = 0; k < METHODS; k++) {
      int m = (k + i) % METHODS;
      uint32_t v = (uint32_t)(i * METHODS + k + 1);
      double t0, t1;
      if (m == 4) {
        t0 = now_us(); *hflag = v; while (*hflag != v) {} t1 = now_us();
      } else {
        CK(cuStreamWaitValue32(s, go, v, CU_STREAM_WAIT_VALUE_EQ));
        if (m == 0 || m == 3) CK(cuStreamWriteValue32(s, flag, v, CU_STREAM_WRITE_VALUE_DEFAULT));
        if (m == 1 || m == 3) CK(cuEventRecord(plain, s));
        if (m == 2) CK(cuEventRecord(blocking, s));
        /* let the launch reach the GPU, so that t0 starts the wait, not the submission */
        struct timespec d = {0, 200000}; nanosleep(&d, NULL);
        t0 = now_us(); *hgo = v;
        if (m == 0 || m == 3) { while (*hflag != v) {} }
        else if (m == 1) { CUresult r; while ((r = cuEventQuery(plain)) == CUDA_ERROR_NOT_READY) {} CK(r); }
        else CK(cuEventSynchronize(blocking));
        t1 = now_us();
        CK(cuStreamSynchronize(s));
      }
      if (i >= 50) lat[m][i - 50] = t1 - t0;
    }
  printf("%-32s %9s %9s %9s\n", "method", "p50 us", "p99 us", "max us");
  for (int m = 0; m < METHODS; m++) {
    qsort(lat[m], TRIALS, sizeof(double), cmp);
    printf("%-32s %9.2f %9.2f %9.2f\n", names[m], lat[m][TRIALS / 2], lat[m][TRIALS * 99 / 100], lat[m][TRIALS - 1]);
  }
  return 0;
}
