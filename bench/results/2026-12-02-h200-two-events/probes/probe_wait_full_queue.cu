// R3: a cudaStreamWaitEvent(S, E, 0) blocked for > 20 ms on a full queue beside a captured record of
// E and the capture's end. Uses a real (empty) kernel, so build with nvcc:
//   nvcc -O2 -o probe_wait_full_queue probe_wait_full_queue.cu -lpthread
// Each round: a host function holds S (spins on a flag; gives up after 1 s and counts that);
// thread F launches up to K empty kernels on S behind it, until a launch blocks (the queue is full:
// a launch in flight for more than 5 ms); thread W then calls cudaStreamWaitEvent(S, E, 0), timed;
// once W has been inside for hold_ms (default 25), main begins a capture on C, records E into it, then:
//   a: releases the hold while the capture is open, waits for W to return, then ends the capture
//   e: releases the hold and ends the capture at once (W's wait may complete during the end)
//   b: ends the capture while W is still blocked, then releases the hold
// argv[1]: g(lobal) or l(ocal); argv[2]: rounds; argv[3]: a|e|b; argv[4]: K (default 4000); argv[5]: hold_ms
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
__global__ void nop(void) {}
static const char *names[] = {"before begin", "in begin", "in captured record", "capture open", "in end capture", "ended", "released"};
static int phase = -1, round_, stop, release_, hold_timeouts, fgo, fdone, f_in_launch, wgo, win, wdone, K = 4000; static char variant, modec;
static long f_launched, f_launch_us;
static cudaEvent_t E; static cudaStream_t S, C, T;
static long w_codes[1024], f_codes[1024], begin_codes[1024], cap_codes[1024], end_codes[1024];
static double w_ms_min = 1e9, w_ms_max, w_ms_sum, begin_record_ms_max;
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
static void relaxed(void) { enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; cudaThreadExchangeStreamCaptureMode(&m); }
static void *filler(void *a) {
  (void)a; who = "filler"; relaxed(); int seen = 0;
  while (!LD(stop)) {
    int g = LD(fgo); if (g == seen) continue; seen = g;
    ST(f_launched, 0L);
    for (int i = 0; i < K; i++) {
      ST(f_launch_us, (long)(now_ms() * 1000)); ST(f_in_launch, 1);
      count(f_codes, cudaLaunchKernel((const void *)nop, dim3(1), dim3(1), (void **)0, 0, S));
      ST(f_in_launch, 0); ST(f_launched, f_launched + 1);
    }
    ST(fdone, g);
  }
  return 0;
}
static void *waiter(void *a) {
  (void)a; who = "waiter"; relaxed(); int seen = 0;
  while (!LD(stop)) {
    int g = LD(wgo); if (g == seen) continue; seen = g;
    ST(win, g); double t0 = now_ms(); int c = cudaStreamWaitEvent(S, E, 0); double d = now_ms() - t0;
    count(w_codes, c); if (d < w_ms_min) w_ms_min = d; if (d > w_ms_max) w_ms_max = d; w_ms_sum += d;
    ST(wdone, g);
  }
  return 0;
}
static int wait_for(int *x, int v, double ms) { double t0 = now_ms(); while (LD(*x) != v) if (now_ms() - t0 > ms) return 0; return 1; }
int main(int argc, char **argv) {
  who = "main";
  if (argc < 4) { fprintf(stderr, "usage: %s g|l rounds a|e|b [K] [hold_ms]\n", argv[0]); return 2; }
  modec = argv[1][0]; int local = modec == 'l'; int rounds = atoi(argv[2]); variant = argv[3][0];
  if (argc > 4) { K = atoi(argv[4]); }
  int hold_ms = argc > 5 ? atoi(argv[5]) : 25;
  signal(SIGSEGV, on_sig); signal(SIGBUS, on_sig); signal(SIGABRT, on_sig); signal(SIGALRM, on_sig); alarm(25);
  cudaFree(0);
  cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&C, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&T, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&E, cudaEventDisableTiming);
  pthread_t tf, tw; pthread_create(&tf, 0, filler, 0); pthread_create(&tw, 0, waiter, 0);
  long queue_full = 0, launched_at_full = 0, w_blocked = 0, w_returned_before_end = 0, stuck = 0; int r;
  for (r = 0; r < rounds; r++) {
    round_ = r; ST(phase, 0);
    cudaEventRecord(E, T); cudaStreamSynchronize(T); // E: a plain, complete record
    ST(release_, 0);
    cudaLaunchHostFunc(S, hold, 0);
    ST(fgo, r + 1);
    double t0 = now_ms(); int full = 0;
    while (LD(fdone) != r + 1) {
      if (LD(f_in_launch) && now_ms() * 1000 - LD(f_launch_us) > 5000) { full = 1; break; }
      if (now_ms() - t0 > 3000) break;
    }
    if (full) { queue_full++; launched_at_full += LD(f_launched); }
    ST(wgo, r + 1);
    if (!wait_for(&win, r + 1, 2000)) { stuck++; break; }
    usleep(hold_ms * 1000);
    if (LD(wdone) != r + 1) w_blocked++;
    double tb = now_ms();
    ST(phase, 1); count(begin_codes, cudaStreamBeginCapture(C, local ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal));
    ST(phase, 2); count(cap_codes, cudaEventRecord(E, C));
    tb = now_ms() - tb; if (tb > begin_record_ms_max) begin_record_ms_max = tb;
    ST(phase, 3); cudaGraph_t g = 0; int ec;
    if (variant == 'a') {
      ST(release_, 1); if (!wait_for(&wdone, r + 1, 2000)) stuck++;
      ST(phase, 4); ec = cudaStreamEndCapture(C, &g);
    } else if (variant == 'e') {
      ST(release_, 1);
      ST(phase, 4); ec = cudaStreamEndCapture(C, &g);
    } else {
      ST(phase, 4); ec = cudaStreamEndCapture(C, &g);
      if (LD(wdone) == r + 1) w_returned_before_end++;
      ST(phase, 6); ST(release_, 1);
    }
    if (variant != 'b' && LD(wdone) == r + 1) w_returned_before_end++;
    count(end_codes, ec);
    ST(phase, 5);
    if (!wait_for(&wdone, r + 1, 4000) || !wait_for(&fdone, r + 1, 4000)) { stuck++; break; }
    cudaStreamSynchronize(S);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    enum cudaStreamCaptureStatus st; cudaStreamIsCapturing(C, &st); if (st != cudaStreamCaptureStatusNone) { cudaGraph_t g2 = 0; cudaStreamEndCapture(C, &g2); if (g2) cudaGraphDestroy(g2); cudaGetLastError(); }
  }
  ST(release_, 1); ST(stop, 1); if (!stuck) { pthread_join(tf, 0); pthread_join(tw, 0); }
  printf("wait_full_queue (kernels) variant %c %s K %d hold_ms %d: %d rounds, %ld invalidated;", variant, local ? "local" : "global", K, hold_ms, r, r - end_codes[0]);
  pcodes("begin", begin_codes); pcodes("captured record", cap_codes); pcodes("end", end_codes); pcodes("launches", f_codes);
  pcodes("wait", w_codes);
  printf(" queue full in %ld rounds (mean %.0f launches queued when full); wait still blocked after hold_ms in %ld rounds; wait ms min %.1f mean %.1f max %.1f; wait returned before end returned %ld; stuck %ld; hold timeouts %d; begin+captured record ms max %.3f\n",
    queue_full, queue_full ? (double)launched_at_full / queue_full : 0.0, w_blocked, w_ms_min, r ? w_ms_sum / r : 0, w_ms_max, w_returned_before_end, stuck, hold_timeouts, begin_record_ms_max);
  fflush(stdout); if (stuck) _exit(3);
  return 0;
}
