// An event recorded (not external) into a capture: which later use of it crashes, by how the
// capture ended? argv[1]: setup (ok, inv, unjoined, sync, querier); argv[2]: what follows (a..f).
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static cudaStream_t S, T, U; static long counts[8][1024];
#include <signal.h>
static volatile int stop; static cudaEvent_t QE; static int busy; static volatile int step, round_; static pthread_t qt;
static void on_segv(int sig) { (void)sig; char b[128]; int n = snprintf(b, sizeof b, "SIGSEGV in %s thread, main at step %d round %d\n",
  pthread_equal(pthread_self(), qt) ? "querier" : "main", step, round_); write(2, b, n); _exit(139); }
static void note(int s, int c) { step = s + 1; if (c >= 0 && c < 1024) counts[s][c]++; }
static int qmode; static cudaStream_t W;
static void CUDART_CB hold(void *p) { usleep(*(int *)p); }
static int once; static cudaEvent_t GO; static int DONE; static long hand_codes[1024];
static void *handoff(void *arg) {
  int n = *(int *)arg; enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; cudaThreadExchangeStreamCaptureMode(&m);
  while (!stop) { cudaEvent_t e = __atomic_load_n(&GO, __ATOMIC_ACQUIRE); if (!e) continue;
    for (int i = 0; i < n; i++) { int c = cudaEventQuery(e); if (c < 1024) hand_codes[c]++; }
    __atomic_store_n(&GO, (cudaEvent_t)0, __ATOMIC_RELAXED); __atomic_store_n(&DONE, 1, __ATOMIC_RELEASE); }
  return 0;
}
static void *querier(void *arg) {
  cudaEvent_t last_bad = 0;
  (void)arg; enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; cudaThreadExchangeStreamCaptureMode(&m);
  while (!stop) { __atomic_store_n(&busy, 1, __ATOMIC_SEQ_CST); cudaEvent_t e = __atomic_load_n(&QE, __ATOMIC_SEQ_CST);
    if (e && !(once && e == last_bad)) { int c = qmode == 1 ? cudaEventSynchronize(e) : qmode == 2 ? cudaStreamWaitEvent(W, e, 0) : cudaEventQuery(e);
      if (c == 907) last_bad = e; }
    __atomic_store_n(&busy, 0, __ATOMIC_SEQ_CST); }
  return 0;
}
int main(int argc, char **argv) {
  const char *setup = argv[1]; char after = argv[2][0]; int rounds = argc > 3 ? atoi(argv[3]) : 200;
  cudaFree(0);
  cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&T, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&U, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&W, cudaStreamNonBlocking);
  qmode = !strcmp(setup, "syncer") || !strcmp(setup, "pendsync") ? 1 : !strcmp(setup, "waiter") ? 2 : 0;
  int pending = !strcmp(setup, "pendsync"), hold_us = 300;
  pthread_t q; int with_querier = !strncmp(setup, "querier", 7) || qmode; once = !strcmp(setup, "querier1");
  signal(SIGSEGV, on_segv);
  if (with_querier) { pthread_create(&q, 0, querier, 0); qt = q; }
  int hand_n = !strcmp(setup, "handoff") ? 1 : !strcmp(setup, "handoff5") ? 5 : 0;
  if (hand_n) { pthread_create(&q, 0, handoff, &hand_n); qt = q; }
  for (int r = 0; r < rounds; r++) {
    cudaEvent_t E, E2; cudaEventCreateWithFlags(&E, cudaEventDisableTiming); cudaEventCreateWithFlags(&E2, cudaEventDisableTiming);
    cudaEventRecord(E, S); cudaStreamSynchronize(S);
    if (pending) { cudaLaunchHostFunc(S, hold, &hold_us); cudaEventRecord(E, S); }
    round_ = r; step = 0;
    if (with_querier) __atomic_store_n(&QE, E, __ATOMIC_SEQ_CST);
    if (pending) usleep(50);
    note(0, cudaStreamBeginCapture(T, cudaStreamCaptureModeGlobal));
    step = 101; int rc_ = cudaEventRecord(E, T); step = 102; note(0, rc_); step = 102;
    if (!strcmp(setup, "inv")) note(1, cudaEventQuery(E));
    if (!strcmp(setup, "inv2")) for (int i = 0; i < 50; i++) { step = 110 + (i > 0); note(1, cudaEventQuery(E)); }
    if (!strcmp(setup, "inv3")) { note(1, cudaEventQuery(E)); step = 120; note(1, cudaEventSynchronize(E)); step = 121; note(1, cudaStreamWaitEvent(S, E, 0)); }
    if (!strcmp(setup, "sync")) note(1, cudaStreamSynchronize(T));
    if (!strcmp(setup, "unjoined")) { note(1, cudaStreamWaitEvent(U, E, 0)); note(1, cudaEventRecord(E2, U)); }
    if (with_querier) usleep(argc > 4 ? atoi(argv[4]) : 20);
    if (hand_n) { DONE = 0; __atomic_store_n(&GO, E, __ATOMIC_RELEASE); while (!__atomic_load_n(&DONE, __ATOMIC_ACQUIRE)) ; step = 105; }
    cudaGraph_t g = 0; step = 103; rc_ = cudaStreamEndCapture(T, &g); step = 104; note(2, rc_);
    if (with_querier) { __atomic_store_n(&QE, (cudaEvent_t)0, __ATOMIC_SEQ_CST); while (__atomic_load_n(&busy, __ATOMIC_SEQ_CST)) ; }
    step = 20;
    if (!g) cudaGetLastError();
    if (pending) cudaStreamSynchronize(S);
    if (qmode == 2) cudaStreamSynchronize(W);
    switch (after) {
      case 'a': if (g) cudaGraphDestroy(g); note(3, cudaEventDestroy(E)); break;
      case 'b': note(3, cudaEventDestroy(E)); if (g) cudaGraphDestroy(g); break;
      case 'c': if (g) cudaGraphDestroy(g); note(3, cudaEventRecord(E, S)); note(4, cudaStreamSynchronize(S));
                note(5, cudaEventQuery(E)); note(6, cudaEventDestroy(E)); break;
      case 'd': note(3, cudaEventRecord(E, S)); note(4, cudaStreamSynchronize(S)); if (g) cudaGraphDestroy(g);
                note(5, cudaEventQuery(E)); note(6, cudaEventDestroy(E)); break;
      case 'e': if (g) cudaGraphDestroy(g); note(3, cudaEventQuery(E)); note(4, cudaEventSynchronize(E)); note(6, cudaEventDestroy(E)); break;
      case 'f': if (g) { cudaGraphExec_t x; note(3, cudaGraphInstantiate(&x, g, 0)); note(3, cudaGraphLaunch(x, S));
                  cudaStreamSynchronize(S); cudaGraphExecDestroy(x); cudaGraphDestroy(g); }
                note(4, cudaEventRecord(E, S)); note(5, cudaEventQuery(E)); note(6, cudaEventDestroy(E)); break;
      case 'h': break;
      case 'g': if (g) cudaGraphDestroy(g); note(3, cudaStreamWaitEvent(S, E, 0)); note(4, cudaStreamSynchronize(S));
                note(6, cudaEventDestroy(E)); break;
    }
    cudaEventDestroy(E2); cudaGetLastError();
    enum cudaStreamCaptureStatus st; cudaStreamIsCapturing(U, &st); if (st) { cudaGraph_t g2 = 0; cudaStreamEndCapture(U, &g2); }
  }
  stop = 1; if (with_querier || hand_n) pthread_join(q, 0);
  if (hand_n) { printf("handoff queries:"); for (int c = 0; c < 1024; c++) if (hand_codes[c]) printf(" %d:%ld", c, hand_codes[c]); printf("\n"); }
  printf("%-8s %c:", setup, after);
  for (int s = 0; s < 7; s++) { int any = 0; for (int c = 0; c < 1024; c++) if (counts[s][c]) { if (!any) printf(" [%d]", s); any = 1; printf(" %d:%ld", c, counts[s][c]); } }
  printf("\n"); return 0;
}
