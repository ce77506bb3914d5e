// R3: a cudaEventSynchronize of a cudaEventBlockingSync event, blocked on pending work, beside a
// captured record of the same event and the capture's end.
// Each round: a host function holds S (spins on a flag, gives up after 1 s and counts that);
// E (BlockingSync|DisableTiming) is recorded on S behind it; thread Y calls cudaEventSynchronize(E);
// once Y has been inside for pre_us, main begins a capture on C and records E into it, then:
//   a: releases the hold while the capture is open, waits for Y to return, then ends the capture
//   e: releases the hold and ends the capture at once (Y's wake-up may overlap the end)
//   b: ends the capture while Y is still blocked, then releases the hold
// argv[1]: g(lobal) or l(ocal); argv[2]: rounds; argv[3]: a|e|b; argv[4]: pre_us (default 1000)
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define LD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)
static const char *names[] = {"before begin", "in begin", "in captured record", "capture open", "in end capture", "ended", "released"};
static int phase = -1, round_, stop, release_, hold_timeouts, ygo, yin, ydone; static char variant, modec;
static cudaEvent_t E; static cudaStream_t S, C;
static long y_codes[1024], begin_codes[1024], cap_codes[1024], end_codes[1024], rec_codes[1024];
static double y_ms_min = 1e9, y_ms_max, y_ms_sum;
static __thread const char *who = "a CUDA-internal (not a probe)";
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static void on_sig(int s) {
  char b[240]; int n = snprintf(b, sizeof b, "%s (signal %d) in %s thread: variant %c mode %c, main in phase %d (%s), round %d\n",
    s == SIGSEGV ? "SIGSEGV" : s == SIGALRM ? "HANG (watchdog)" : "SIGNAL", s, who, variant, modec, phase, phase >= 0 ? names[phase] : "-", round_);
  if (write(2, b, n)) {} _exit(s == SIGALRM ? 142 : 128 + s);
}
static void count(long *a, int c) { a[c >= 0 && c < 1024 ? c : 1023]++; }
static void pcodes(const char *l, long *a) { printf(" %s", l); for (int i = 0; i < 1024; i++) if (a[i]) printf(" %d:%ld", i, a[i]); printf(";"); }
static void CUDART_CB hold(void *p) { (void)p; double t0 = now_ms(); while (!LD(release_)) if (now_ms() - t0 > 1000) { ST(hold_timeouts, hold_timeouts + 1); break; } }
static void *syncer(void *a) {
  (void)a; who = "synchronizer"; enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; cudaThreadExchangeStreamCaptureMode(&m);
  int seen = 0;
  while (!LD(stop)) {
    int g = LD(ygo); if (g == seen) continue; seen = g;
    ST(yin, g); double t0 = now_ms(); int c = cudaEventSynchronize(E); double d = now_ms() - t0;
    count(y_codes, c); if (d < y_ms_min) y_ms_min = d; if (d > y_ms_max) y_ms_max = d; y_ms_sum += d;
    ST(ydone, g);
  }
  return 0;
}
static int wait_for(int *x, int v, double ms) { double t0 = now_ms(); while (LD(*x) != v) if (now_ms() - t0 > ms) return 0; return 1; }
int main(int argc, char **argv) {
  who = "main";
  if (argc < 4) { fprintf(stderr, "usage: %s g|l rounds a|e|b [pre_us]\n", argv[0]); return 2; }
  modec = argv[1][0]; int local = modec == 'l'; int rounds = atoi(argv[2]); variant = argv[3][0]; int pre_us = argc > 4 ? atoi(argv[4]) : 1000;
  signal(SIGSEGV, on_sig); signal(SIGBUS, on_sig); signal(SIGABRT, on_sig); signal(SIGALRM, on_sig); alarm(25);
  cudaFree(0);
  cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&C, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&E, cudaEventBlockingSync | cudaEventDisableTiming);
  pthread_t t; pthread_create(&t, 0, syncer, 0);
  long y_early = 0, y_returned_before_end = 0, y_stuck = 0; int r;
  for (r = 0; r < rounds; r++) {
    round_ = r; ST(phase, 0);
    ST(release_, 0);
    count(rec_codes, cudaLaunchHostFunc(S, hold, 0));
    count(rec_codes, cudaEventRecord(E, S));
    ST(ygo, r + 1);
    if (!wait_for(&yin, r + 1, 2000)) { y_stuck++; break; }
    usleep(pre_us);
    if (LD(ydone) == r + 1) y_early++;
    ST(phase, 1); count(begin_codes, cudaStreamBeginCapture(C, local ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal));
    ST(phase, 2); count(cap_codes, cudaEventRecord(E, C));
    ST(phase, 3); cudaGraph_t g = 0; int ec;
    if (variant == 'a') {
      ST(release_, 1); if (!wait_for(&ydone, r + 1, 2000)) y_stuck++;
      ST(phase, 4); ec = cudaStreamEndCapture(C, &g);
    } else if (variant == 'e') {
      ST(release_, 1);
      ST(phase, 4); ec = cudaStreamEndCapture(C, &g);
    } else {
      ST(phase, 4); ec = cudaStreamEndCapture(C, &g);
      if (LD(ydone) == r + 1) y_returned_before_end++;
      ST(phase, 6); ST(release_, 1);
    }
    if (variant != 'b' && LD(ydone) == r + 1) y_returned_before_end++;
    count(end_codes, ec);
    ST(phase, 5);
    if (!wait_for(&ydone, r + 1, 4000)) { y_stuck++; break; }
    cudaStreamSynchronize(S);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    enum cudaStreamCaptureStatus st; cudaStreamIsCapturing(C, &st); if (st != cudaStreamCaptureStatusNone) { cudaGraph_t g2 = 0; cudaStreamEndCapture(C, &g2); if (g2) cudaGraphDestroy(g2); cudaGetLastError(); }
  }
  ST(release_, 1); ST(stop, 1); if (!y_stuck) pthread_join(t, 0);
  printf("blocking_sync variant %c %s pre_us %d: %d rounds, %ld invalidated;", variant, local ? "local" : "global", pre_us, r, r - end_codes[0]);
  pcodes("begin", begin_codes); pcodes("captured record", cap_codes); pcodes("end", end_codes); pcodes("hostfunc+plain record", rec_codes);
  pcodes("sync", y_codes);
  printf(" sync ms min %.3f mean %.3f max %.3f; sync returned before the hold was released %ld, before end returned %ld, stuck %ld, hold timeouts %d\n",
    y_ms_min, r ? y_ms_sum / r : 0, y_ms_max, y_early, y_returned_before_end, y_stuck, hold_timeouts);
  fflush(stdout); if (y_stuck) _exit(3);
  return 0;
}
