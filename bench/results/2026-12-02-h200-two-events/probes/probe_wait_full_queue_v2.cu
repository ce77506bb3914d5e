// NOT RUN YET. Second version of probe_wait_full_queue.cu, written after its run: there, every run's
// main thread was still inside cudaStreamBeginCapture(C) (another stream) when the 25 s watchdog
// fired, in round 24 of 40, so the captured record never met the blocked wait.
// Here the capture on C begins BEFORE S is held and filled; a releaser thread lifts the hold rel_us
// after main announces its captured record, so a record (or end) that blocks behind the full queue
// cannot deadlock the round; the watchdog prints the counts so far. Build:
//   nvcc -O2 -arch=sm_90 -o probe_wait_full_queue_v2 probe_wait_full_queue_v2.cu -lpthread
// Each round: E recorded plain on T and complete; begin capture on C; hold S (host function spinning
// on a flag, gives up after 1 s); thread F launches up to K empty kernels on S until one blocks > 5 ms;
// thread W calls cudaStreamWaitEvent(S, E, 0), timed; after W has been inside hold_ms, main arms the
// releaser and records E into C (timed), then
//   a: waits for W to return, then ends the capture
//   e: ends the capture at once
// argv[1]: g|l; argv[2]: rounds; argv[3]: a|e|c (c: control, no captured record: only times the
// begin of a second capture on C2 while S is full); argv[4]: K (8000); argv[5]: hold_ms (25); argv[6]: rel_us (0)
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
static const char *names[] = {"before begin", "in begin", "filling", "in captured record", "capture open", "in end capture", "ended"};
static int phase = -1, round_, stop, release_, hold_timeouts, fgo, fdone, f_in_launch, wgo, win, wdone, rgo, K = 8000, rel_us; static char variant, modec;
static long f_launched, f_launch_us, queue_full, launched_at_full, w_blocked, stuck;
static cudaEvent_t E; static cudaStream_t S, C, C2, T;
static long w_codes[1024], f_codes[1024], begin_codes[1024], cap_codes[1024], end_codes[1024];
static double w_ms_max, rec_ms_max, end_ms_max, begin2_ms_max;
static __thread const char *who = "a CUDA-internal (not a probe)";
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static void count(long *a, int c) { a[c >= 0 && c < 1024 ? c : 1023]++; }
static void pcodes(const char *l, long *a) { printf(" %s", l); for (int i = 0; i < 1024; i++) if (a[i]) printf(" %d:%ld", i, a[i]); printf(";"); }
static void summary(int r) {
  printf("wait_full_queue_v2 variant %c %s K %d rel_us %d: %d rounds, %ld invalidated;", variant, modec == 'l' ? "local" : "global", K, rel_us, r, r - end_codes[0]);
  pcodes("begin", begin_codes); pcodes("captured record", cap_codes); pcodes("end", end_codes); pcodes("launches", f_codes); pcodes("wait", w_codes);
  printf(" queue full in %ld rounds (mean %.0f launches queued); wait blocked >= hold_ms in %ld; wait ms max %.1f; captured record ms max %.1f; end ms max %.1f; control begin ms max %.1f; hold timeouts %d; stuck %ld\n",
    queue_full, queue_full ? (double)launched_at_full / queue_full : 0.0, w_blocked, w_ms_max, rec_ms_max, end_ms_max, begin2_ms_max, hold_timeouts, stuck);
  fflush(stdout);
}
static void on_sig(int s) {
  char b[240]; int n = snprintf(b, sizeof b, "%s (signal %d) in %s thread: variant %c mode %c, main in phase %d (%s), round %d\n",
    s == SIGSEGV ? "SIGSEGV" : s == SIGALRM ? "HANG (watchdog)" : "SIGNAL", s, who, variant, modec, phase, phase >= 0 ? names[phase] : "-", round_);
  if (write(2, b, n)) {}
  if (s == SIGALRM) summary(round_); // not async-signal-safe; the process exits right after
  _exit(s == SIGALRM ? 142 : 128 + s);
}
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
    count(w_codes, c); if (d > w_ms_max) w_ms_max = d;
    ST(wdone, g);
  }
  return 0;
}
static void *releaser(void *a) {
  (void)a; who = "releaser"; int seen = 0;
  while (!LD(stop)) { int g = LD(rgo); if (g == seen) continue; seen = g; if (rel_us) usleep(rel_us); ST(release_, 1); }
  return 0;
}
static int wait_for(int *x, int v, double ms) { double t0 = now_ms(); while (LD(*x) != v) if (now_ms() - t0 > ms) return 0; return 1; }
int main(int argc, char **argv) {
  who = "main";
  if (argc < 4) { fprintf(stderr, "usage: %s g|l rounds a|e|c [K] [hold_ms] [rel_us]\n", argv[0]); return 2; }
  modec = argv[1][0]; int local = modec == 'l'; int rounds = atoi(argv[2]); variant = argv[3][0];
  if (argc > 4) { K = atoi(argv[4]); }
  int hold_ms = argc > 5 ? atoi(argv[5]) : 25; rel_us = argc > 6 ? atoi(argv[6]) : 0;
  enum cudaStreamCaptureMode mode = local ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal;
  signal(SIGSEGV, on_sig); signal(SIGBUS, on_sig); signal(SIGABRT, on_sig); signal(SIGALRM, on_sig); alarm(25);
  cudaFree(0);
  cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&C, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&C2, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&T, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&E, cudaEventDisableTiming);
  pthread_t tf, tw, tr; pthread_create(&tf, 0, filler, 0); pthread_create(&tw, 0, waiter, 0); pthread_create(&tr, 0, releaser, 0);
  int r;
  for (r = 0; r < rounds; r++) {
    round_ = r; ST(phase, 0);
    cudaEventRecord(E, T); cudaStreamSynchronize(T);
    ST(phase, 1); if (variant != 'c') count(begin_codes, cudaStreamBeginCapture(C, mode));
    ST(phase, 2); ST(release_, 0); cudaLaunchHostFunc(S, hold, 0);
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
    cudaGraph_t g = 0; double t;
    ST(rgo, r + 1); // the hold is lifted rel_us from now, whatever main is blocked in
    if (variant == 'c') {
      t = now_ms(); count(begin_codes, cudaStreamBeginCapture(C2, mode)); t = now_ms() - t; if (t > begin2_ms_max) begin2_ms_max = t;
      ST(phase, 5); cudaGraph_t g2 = 0; count(end_codes, cudaStreamEndCapture(C2, &g2)); if (g2) cudaGraphDestroy(g2);
    } else {
      ST(phase, 3); t = now_ms(); count(cap_codes, cudaEventRecord(E, C)); t = now_ms() - t; if (t > rec_ms_max) rec_ms_max = t;
      ST(phase, 4); if (variant == 'a' && !wait_for(&wdone, r + 1, 2000)) stuck++;
      ST(phase, 5); t = now_ms(); count(end_codes, cudaStreamEndCapture(C, &g)); t = now_ms() - t; if (t > end_ms_max) end_ms_max = t;
    }
    ST(phase, 6);
    if (!wait_for(&wdone, r + 1, 4000) || !wait_for(&fdone, r + 1, 4000)) { stuck++; break; }
    cudaStreamSynchronize(S);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    enum cudaStreamCaptureStatus st; cudaStreamIsCapturing(C, &st); if (st != cudaStreamCaptureStatusNone) { cudaGraph_t g2 = 0; cudaStreamEndCapture(C, &g2); if (g2) cudaGraphDestroy(g2); cudaGetLastError(); }
  }
  ST(release_, 1); ST(stop, 1); if (!stuck) { pthread_join(tf, 0); pthread_join(tw, 0); pthread_join(tr, 0); }
  summary(r);
  if (stuck) _exit(3);
  return 0;
}
