// The two-handle design: reads and plain records use E1; captures record only E2 (same flags).
// Main loops {begin capture on C, cudaEventRecord(E2, C), [fork: cudaStreamWaitEvent(D, E2, 0),
// cudaEventRecord(J, D), cudaStreamWaitEvent(C, J, 0)], end capture, destroy graph}. Meanwhile, in
// every phase, free-running: thread Q cudaEventQuery(E1); thread Y cudaEventSynchronize(E1); thread W
// cudaStreamWaitEvent(S2, E1, 0) on another normal stream; and thread R plain-records E1 on S (a 4-byte
// cudaMemsetAsync on S before each record, so E1 is sometimes pending).
// argv[1]: g(lobal) or l(ocal); argv[2]: rounds; argv[3]: variant:
//   a: R records in every phase (free-running)
//   r: R records only while main is inside cudaEventRecord(E2, C) (handshake; R4 under this design)
//   e: R records only while main is inside cudaStreamEndCapture
// a trailing 'f' (af, rf, ef) adds the fork/join through side stream D; a trailing 'b' makes E1/E2
// cudaEventBlockingSync|cudaEventDisableTiming instead of cudaEventDisableTiming.
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define LD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)
static const char *names[] = {"before begin", "in begin", "in captured record of E2", "capture open (fork/join)", "in end capture", "ended", "in graph destroy", "graph destroyed"};
static int phase = -1, allowed = -9, busy, stop, round_; static char modec; static const char *variant;
static cudaEvent_t E1, E2, J; static cudaStream_t S, S2, C, D; static void *buf;
enum { TQ, TY, TW, TR, NT };
static long codes[NT][1024], ops[NT], begin_codes[1024], cap_codes[1024], fork_codes[1024], end_codes[1024];
static __thread const char *who = "a CUDA-internal (not a probe)";
static void on_sig(int s) {
  char b[240]; int n = snprintf(b, sizeof b, "%s (signal %d) in %s thread: variant %s mode %c, main in phase %d (%s), round %d\n",
    s == SIGSEGV ? "SIGSEGV" : s == SIGALRM ? "HANG (watchdog)" : "SIGNAL", s, who, variant, modec, phase, phase >= 0 ? names[phase] : "-", round_);
  if (write(2, b, n)) {} _exit(s == SIGALRM ? 142 : 128 + s);
}
static void count(long *a, int c) { a[c >= 0 && c < 1024 ? c : 1023]++; }
static void pcodes(const char *l, long *a) { printf(" %s", l); for (int i = 0; i < 1024; i++) if (a[i]) printf(" %d:%ld", i, a[i]); printf(";"); }
static void *worker(void *a) {
  int k = (int)(long)a; static const char *wn[] = {"Q (query E1)", "Y (synchronize E1)", "W (stream wait on E1)", "R (plain record E1)"};
  who = wn[k]; enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; cudaThreadExchangeStreamCaptureMode(&m);
  while (!LD(stop)) {
    int gated = k == TR && allowed >= 0;
    if (gated) { ST(busy, 1); if (LD(phase) != allowed) { ST(busy, 0); continue; } }
    int c;
    switch (k) {
      case TQ: c = cudaEventQuery(E1); break;
      case TY: c = cudaEventSynchronize(E1); break;
      case TW: c = cudaStreamWaitEvent(S2, E1, 0); if ((ops[k] & 255) == 255) cudaStreamSynchronize(S2); break;
      default: cudaMemsetAsync(buf, 0, 4, S); c = cudaEventRecord(E1, S); break;
    }
    count(codes[k], c); ops[k]++;
    if (gated) ST(busy, 0);
  }
  return 0;
}
static void enter(int p) { ST(phase, p); while (LD(busy)) ; }
int main(int argc, char **argv) {
  who = "main";
  if (argc < 4) { fprintf(stderr, "usage: %s g|l rounds a|r|e[f][b]\n", argv[0]); return 2; }
  modec = argv[1][0]; int local = modec == 'l'; int rounds = atoi(argv[2]); variant = argv[3];
  allowed = variant[0] == 'r' ? 2 : variant[0] == 'e' ? 4 : -9;
  int fork_ = strchr(variant, 'f') != 0; unsigned flags = strchr(variant, 'b') ? cudaEventBlockingSync | cudaEventDisableTiming : cudaEventDisableTiming;
  signal(SIGSEGV, on_sig); signal(SIGBUS, on_sig); signal(SIGABRT, on_sig); signal(SIGALRM, on_sig); alarm(25);
  cudaFree(0); cudaMalloc(&buf, 256);
  cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&S2, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&C, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&D, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&E1, flags); cudaEventCreateWithFlags(&E2, flags); cudaEventCreateWithFlags(&J, cudaEventDisableTiming);
  cudaEventRecord(E1, S); cudaStreamSynchronize(S);
  pthread_t t[NT]; for (long k = 0; k < NT; k++) pthread_create(&t[k], 0, worker, (void *)k);
  int r;
  for (r = 0; r < rounds; r++) {
    round_ = r;
    enter(0); usleep(20);
    enter(1); count(begin_codes, cudaStreamBeginCapture(C, local ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal));
    enter(2); count(cap_codes, cudaEventRecord(E2, C));
    enter(3);
    if (fork_) { count(fork_codes, cudaStreamWaitEvent(D, E2, 0)); count(fork_codes, cudaEventRecord(J, D)); count(fork_codes, cudaStreamWaitEvent(C, J, 0)); }
    usleep(20);
    enter(4); cudaGraph_t g = 0; count(end_codes, cudaStreamEndCapture(C, &g));
    enter(5); usleep(20);
    enter(6); if (g) cudaGraphDestroy(g);
    enter(7); usleep(20);
    enter(-1); cudaGetLastError();
    enum cudaStreamCaptureStatus st; cudaStreamIsCapturing(C, &st); if (st != cudaStreamCaptureStatusNone) { cudaGraph_t g2 = 0; cudaStreamEndCapture(C, &g2); if (g2) cudaGraphDestroy(g2); cudaGetLastError(); }
  }
  ST(stop, 1); for (int k = 0; k < NT; k++) pthread_join(t[k], 0);
  int sc = cudaDeviceSynchronize();
  printf("two_events variant %s (R: %s) %s: %d rounds, %ld invalidated;", variant, allowed >= 0 ? names[allowed] : "free-running", local ? "local" : "global", r, r - end_codes[0]);
  pcodes("begin", begin_codes); pcodes("record E2", cap_codes); if (fork_) pcodes("fork/join", fork_codes); pcodes("end", end_codes);
  const char *ln[] = {"Q query", "Y sync", "W wait", "R record"};
  for (int k = 0; k < NT; k++) { printf(" %s %ld:", ln[k], ops[k]); pcodes("", codes[k]); }
  printf(" final device sync %d\n", sc);
  return 0;
}
