// R8: an event recorded (plain record, not external) into a capture on C; another thread, only in
// one phase of the round, calls
//   d: cudaEventDestroy(E) once (a fresh DisableTiming event each round; if the other thread missed
//      the phase, main destroys it after the round and counts that), or
//   i: cudaIpcGetEventHandle(E) in a loop (one event, cudaEventInterprocess|cudaEventDisableTiming).
// argv[1]: g(lobal) or l(ocal); argv[2]: rounds; argv[3]: d|i; argv[4]: phase 4 (inside
// cudaStreamEndCapture, default) or 3 (capture open, after the captured record).
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
static int phase = -1, allowed, busy, stop, round_; static char op, modec;
static cudaEvent_t E, target; static cudaStream_t S, C;
static long act_codes[1024], acts, begin_codes[1024], cap_codes[1024], end_codes[1024], main_destroy_codes[1024];
static __thread const char *who = "a CUDA-internal (not a probe)";
static void on_sig(int s) {
  char b[240]; int n = snprintf(b, sizeof b, "%s (signal %d) in %s thread: op %c in phase %d (%s) mode %c, main in phase %d (%s), round %d\n",
    s == SIGSEGV ? "SIGSEGV" : s == SIGALRM ? "HANG (watchdog)" : "SIGNAL", s, who, op, allowed, names[allowed], modec, phase, phase >= 0 ? names[phase] : "-", round_);
  if (write(2, b, n)) {} _exit(s == SIGALRM ? 142 : 128 + s);
}
static void count(long *a, int c) { a[c >= 0 && c < 1024 ? c : 1023]++; }
static void pcodes(const char *l, long *a) { printf(" %s", l); for (int i = 0; i < 1024; i++) if (a[i]) printf(" %d:%ld", i, a[i]); printf(";"); }
static void *other(void *a) {
  (void)a; who = op == 'd' ? "destroyer" : "ipc"; enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; cudaThreadExchangeStreamCaptureMode(&m);
  while (!LD(stop)) {
    ST(busy, 1);
    if (LD(phase) == allowed) {
      if (op == 'd') { cudaEvent_t e = LD(target); if (e) { count(act_codes, cudaEventDestroy(e)); acts++; ST(target, (cudaEvent_t)0); } }
      else { cudaIpcEventHandle_t h; count(act_codes, cudaIpcGetEventHandle(&h, E)); acts++; }
    }
    ST(busy, 0);
  }
  return 0;
}
static void enter(int p) { ST(phase, p); while (LD(busy)) ; }
int main(int argc, char **argv) {
  who = "main";
  if (argc < 4) { fprintf(stderr, "usage: %s g|l rounds d|i [3|4]\n", argv[0]); return 2; }
  modec = argv[1][0]; int local = modec == 'l'; int rounds = atoi(argv[2]); op = argv[3][0]; allowed = argc > 4 ? atoi(argv[4]) : 4;
  if (allowed < 0 || allowed > 7) return 2;
  signal(SIGSEGV, on_sig); signal(SIGBUS, on_sig); signal(SIGABRT, on_sig); signal(SIGALRM, on_sig); alarm(25);
  cudaFree(0);
  cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&C, cudaStreamNonBlocking);
  int create_code = 0;
  if (op == 'i') create_code = cudaEventCreateWithFlags(&E, cudaEventInterprocess | cudaEventDisableTiming);
  pthread_t t; pthread_create(&t, 0, other, 0);
  long main_destroyed = 0; int r;
  for (r = 0; r < rounds; r++) {
    round_ = r;
    enter(-1);
    if (op == 'd') { cudaEventCreateWithFlags(&E, cudaEventDisableTiming); }
    cudaEventRecord(E, S); cudaStreamSynchronize(S);
    if (op == 'd') ST(target, E);
    enter(0); usleep(20);
    enter(1); count(begin_codes, cudaStreamBeginCapture(C, local ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal));
    enter(2); count(cap_codes, cudaEventRecord(E, C));
    enter(3); usleep(20);
    enter(4); cudaGraph_t g = 0; count(end_codes, cudaStreamEndCapture(C, &g));
    enter(5); usleep(20);
    enter(6); if (g) cudaGraphDestroy(g);
    enter(7); usleep(20);
    enter(-1); cudaGetLastError();
    if (op == 'd') { cudaEvent_t e = LD(target); if (e) { count(main_destroy_codes, cudaEventDestroy(e)); main_destroyed++; ST(target, (cudaEvent_t)0); } }
    enum cudaStreamCaptureStatus st; cudaStreamIsCapturing(C, &st); if (st != cudaStreamCaptureStatusNone) { cudaGraph_t g2 = 0; cudaStreamEndCapture(C, &g2); if (g2) cudaGraphDestroy(g2); cudaGetLastError(); }
  }
  ST(stop, 1); pthread_join(t, 0);
  int sc = cudaStreamSynchronize(S);
  printf("destroy_ipc op %c in phase %d (%s) %s: %d rounds, %ld invalidated;", op, allowed, names[allowed], local ? "local" : "global", r, r - end_codes[0]);
  if (op == 'i') printf(" create %d;", create_code);
  pcodes("begin", begin_codes); pcodes("captured record", cap_codes); pcodes("end", end_codes);
  printf(" %ld %s by the other thread:", acts, op == 'd' ? "destroys" : "ipc handles"); pcodes("", act_codes);
  if (op == 'd') { printf(" %ld destroyed by main after the round (other thread missed the phase):", main_destroyed); pcodes("", main_destroy_codes); }
  printf(" final sync %d\n", sc);
  return 0;
}
