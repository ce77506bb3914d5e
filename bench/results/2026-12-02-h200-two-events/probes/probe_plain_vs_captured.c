// R4: thread 1 records E plainly on a normal stream S while the main thread records E into a
// capture on C and ends it. Does a plain record crash beside a captured record of the same event,
// or beside the end of the capture that holds it?
// argv[1]: g(lobal) or l(ocal) capture mode; argv[2]: rounds; argv[3]: variant:
//   r: thread 1 records only while main is inside the captured cudaEventRecord(E, C)
//   o: only while the capture is open, after the captured record
//   e: only while main is inside cudaStreamEndCapture
//   f: free-running, every phase, no handshake
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define LD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)
static const char *names[] = {"before begin", "in begin", "in captured record", "capture open", "in end capture", "ended", "in graph destroy", "graph destroyed"};
static int phase = -1, allowed = -9, busy, stop, round_; static char variant, modec;
static cudaEvent_t E; static cudaStream_t S, C;
static long rec_codes[1024], records, begin_codes[1024], cap_codes[1024], end_codes[1024];
static __thread const char *who = "a CUDA-internal (not a probe)";
static void on_sig(int s) {
  char b[240]; int n = snprintf(b, sizeof b, "%s (signal %d) in %s thread: variant %c mode %c, main in phase %d (%s), round %d\n",
    s == SIGSEGV ? "SIGSEGV" : s == SIGALRM ? "HANG (watchdog)" : "SIGNAL", s, who, variant, modec, phase, phase >= 0 ? names[phase] : "-", round_);
  if (write(2, b, n)) {} _exit(s == SIGALRM ? 142 : 128 + s);
}
static void count(long *a, int c) { a[c >= 0 && c < 1024 ? c : 1023]++; }
static void pcodes(const char *l, long *a) { printf(" %s", l); for (int i = 0; i < 1024; i++) if (a[i]) printf(" %d:%ld", i, a[i]); printf(";"); }
static void *recorder(void *a) {
  (void)a; who = "recorder"; enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; cudaThreadExchangeStreamCaptureMode(&m);
  while (!LD(stop)) {
    if (variant == 'f') { count(rec_codes, cudaEventRecord(E, S)); records++; continue; }
    ST(busy, 1);
    if (LD(phase) == allowed) { count(rec_codes, cudaEventRecord(E, S)); records++; }
    ST(busy, 0);
  }
  return 0;
}
static void enter(int p) { ST(phase, p); while (LD(busy)) ; }
int main(int argc, char **argv) {
  who = "main";
  if (argc < 4) { fprintf(stderr, "usage: %s g|l rounds r|o|e|f\n", argv[0]); return 2; }
  modec = argv[1][0]; int local = modec == 'l'; int rounds = atoi(argv[2]); variant = argv[3][0];
  allowed = variant == 'r' ? 2 : variant == 'o' ? 3 : variant == 'e' ? 4 : -9;
  signal(SIGSEGV, on_sig); signal(SIGBUS, on_sig); signal(SIGABRT, on_sig); signal(SIGALRM, on_sig); alarm(25);
  cudaFree(0);
  cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&C, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&E, cudaEventDisableTiming);
  cudaEventRecord(E, S); cudaStreamSynchronize(S);
  pthread_t t; pthread_create(&t, 0, recorder, 0);
  int r;
  for (r = 0; r < rounds; r++) {
    round_ = r;
    enter(0); usleep(20);
    enter(1); count(begin_codes, cudaStreamBeginCapture(C, local ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal));
    enter(2); count(cap_codes, cudaEventRecord(E, C));
    enter(3); usleep(20);
    enter(4); cudaGraph_t g = 0; count(end_codes, cudaStreamEndCapture(C, &g));
    enter(5); usleep(20);
    enter(6); if (g) cudaGraphDestroy(g);
    enter(7); usleep(20);
    enter(-1); cudaGetLastError();
    enum cudaStreamCaptureStatus st; cudaStreamIsCapturing(C, &st); if (st != cudaStreamCaptureStatusNone) { cudaGraph_t g2 = 0; cudaStreamEndCapture(C, &g2); if (g2) cudaGraphDestroy(g2); cudaGetLastError(); }
  }
  ST(stop, 1); pthread_join(t, 0);
  int sc = cudaStreamSynchronize(S);
  printf("plain_vs_captured variant %c (%s) %s: %d rounds, %ld invalidated;", variant, allowed >= 0 ? names[allowed] : "free-running", local ? "local" : "global", r, r - end_codes[0]);
  pcodes("begin", begin_codes); pcodes("captured record", cap_codes); pcodes("end", end_codes);
  printf(" %ld plain records:", records); pcodes("", rec_codes); printf(" final sync %d\n", sc);
  return 0;
}
