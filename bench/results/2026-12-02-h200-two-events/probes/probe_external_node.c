// R6: another thread reads E while the main thread records E into a capture as an external node
// (cudaEventRecordWithFlags(E, C, cudaEventRecordExternal)) and ends the capture.
// argv[1]: g(lobal) or l(ocal); argv[2]: rounds; argv[3]: the read: q (cudaEventQuery),
// s (cudaEventSynchronize), w (cudaStreamWaitEvent(S2, E, 0) on another normal stream);
// argv[4]: the only phase the reader acts in: 2 (inside the external record), 3 (capture open,
// after it), 4 (inside cudaStreamEndCapture). Handshake as capphase.c: no read spills into the next phase.
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define LD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)
static const char *names[] = {"before begin", "in begin", "in external record", "capture open", "in end capture", "ended", "in graph destroy", "graph destroyed"};
static int phase = -1, allowed, busy, stop, round_; static char op, modec;
static cudaEvent_t E; static cudaStream_t S, S2, C;
static long read_codes[1024], reads, begin_codes[1024], cap_codes[1024], end_codes[1024];
static __thread const char *who = "a CUDA-internal (not a probe)";
static void on_sig(int s) {
  char b[240]; int n = snprintf(b, sizeof b, "%s (signal %d) in %s thread: read %c in phase %d (%s) mode %c, main in phase %d (%s), round %d\n",
    s == SIGSEGV ? "SIGSEGV" : s == SIGALRM ? "HANG (watchdog)" : "SIGNAL", s, who, op, allowed, names[allowed], modec, phase, phase >= 0 ? names[phase] : "-", round_);
  if (write(2, b, n)) {} _exit(s == SIGALRM ? 142 : 128 + s);
}
static void count(long *a, int c) { a[c >= 0 && c < 1024 ? c : 1023]++; }
static void pcodes(const char *l, long *a) { printf(" %s", l); for (int i = 0; i < 1024; i++) if (a[i]) printf(" %d:%ld", i, a[i]); printf(";"); }
static void *reader(void *a) {
  (void)a; who = "reader"; enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; cudaThreadExchangeStreamCaptureMode(&m);
  while (!LD(stop)) {
    ST(busy, 1);
    if (LD(phase) == allowed) {
      int c = op == 's' ? cudaEventSynchronize(E) : op == 'w' ? cudaStreamWaitEvent(S2, E, 0) : cudaEventQuery(E);
      count(read_codes, c); reads++;
    }
    ST(busy, 0);
  }
  return 0;
}
static void enter(int p) { ST(phase, p); while (LD(busy)) ; }
int main(int argc, char **argv) {
  who = "main";
  if (argc < 5) { fprintf(stderr, "usage: %s g|l rounds q|s|w 2|3|4\n", argv[0]); return 2; }
  modec = argv[1][0]; int local = modec == 'l'; int rounds = atoi(argv[2]); op = argv[3][0]; allowed = atoi(argv[4]);
  if (allowed < 0 || allowed > 7) return 2;
  signal(SIGSEGV, on_sig); signal(SIGBUS, on_sig); signal(SIGABRT, on_sig); signal(SIGALRM, on_sig); alarm(25);
  cudaFree(0);
  cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&S2, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&C, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&E, cudaEventDisableTiming);
  pthread_t t; pthread_create(&t, 0, reader, 0);
  int r;
  for (r = 0; r < rounds; r++) {
    round_ = r;
    enter(-1); cudaEventRecord(E, S); cudaStreamSynchronize(S);
    enter(0); usleep(20);
    enter(1); count(begin_codes, cudaStreamBeginCapture(C, local ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal));
    enter(2); count(cap_codes, cudaEventRecordWithFlags(E, C, cudaEventRecordExternal));
    enter(3); usleep(20);
    enter(4); cudaGraph_t g = 0; count(end_codes, cudaStreamEndCapture(C, &g));
    enter(5); usleep(20);
    enter(6); if (g) cudaGraphDestroy(g);
    enter(7); usleep(20);
    enter(-1); cudaGetLastError();
    enum cudaStreamCaptureStatus st; cudaStreamIsCapturing(C, &st); if (st != cudaStreamCaptureStatusNone) { cudaGraph_t g2 = 0; cudaStreamEndCapture(C, &g2); if (g2) cudaGraphDestroy(g2); cudaGetLastError(); }
    if (op == 'w' && (r & 63) == 63) cudaStreamSynchronize(S2);
  }
  ST(stop, 1); pthread_join(t, 0);
  int sc = cudaStreamSynchronize(S2);
  printf("external_node read %c in phase %d (%s) %s: %d rounds, %ld invalidated;", op, allowed, names[allowed], local ? "local" : "global", r, r - end_codes[0]);
  pcodes("begin", begin_codes); pcodes("external record", cap_codes); pcodes("end", end_codes);
  printf(" %ld reads:", reads); pcodes("", read_codes); printf(" final sync of S2 %d\n", sc);
  return 0;
}
