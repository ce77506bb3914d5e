// Which phase of a captured record does another thread's query of the event crash in?
// argv[1]: the phase queries are allowed in (0..7, see names); argv[2]: rounds; argv[3]: g(lobal) or l(ocal).
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static const char *names[] = {"before begin", "in begin", "in record", "capture open", "in end", "ended", "in graph destroy", "graph destroyed"};
static int phase = -1, allowed, busy, stop, round_;
static cudaEvent_t E; static long codes[1024], queries;
static void on_segv(int s) { (void)s; char b[160]; int n = snprintf(b, sizeof b, "SIGSEGV: allowed phase %d (%s), main in phase %d, round %d\n", allowed, names[allowed], phase, round_); if (write(2, b, n)) {} _exit(139); }
static void *querier(void *a) {
  (void)a; enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed; cudaThreadExchangeStreamCaptureMode(&m);
  while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
    __atomic_store_n(&busy, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&phase, __ATOMIC_SEQ_CST) == allowed) { int c = cudaEventQuery(E); if (c < 1024) codes[c]++; queries++; }
    __atomic_store_n(&busy, 0, __ATOMIC_SEQ_CST);
  }
  return 0;
}
static void enter(int p) { // leaving the previous phase: no query of it may still run
  __atomic_store_n(&phase, p, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&busy, __ATOMIC_SEQ_CST)) ;
}
int main(int argc, char **argv) {
  allowed = atoi(argv[1]); int rounds = atoi(argv[2]); int local = argc > 3 && argv[3][0] == 'l';
  int rerecord = argc > 4 && argv[4][0] == 'r'; // a plain record on S after the captured one, before the end
  signal(SIGSEGV, on_segv);
  cudaStream_t S, T; cudaFree(0);
  cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&T, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&E, cudaEventDisableTiming);
  pthread_t q; pthread_create(&q, 0, querier, 0);
  long ended_ok = 0, graphs = 0;
  for (int r = 0; r < rounds; r++) {
    round_ = r;
    enter(-1); cudaEventRecord(E, S); cudaStreamSynchronize(S);
    enter(0); usleep(20);
    enter(1); cudaStreamBeginCapture(T, local ? cudaStreamCaptureModeThreadLocal : cudaStreamCaptureModeGlobal);
    enter(2); cudaEventRecord(E, T);
    enter(3); usleep(20);
    if (rerecord) { enter(-1); cudaEventRecord(E, S); enter(3); usleep(20); }
    enter(4); cudaGraph_t g = 0; int c = cudaStreamEndCapture(T, &g);
    enter(5); usleep(20); if (!c) ended_ok++;
    enter(6); if (g) { cudaGraphDestroy(g); graphs++; }
    enter(7); usleep(20);
    cudaGetLastError();
  }
  enter(-1); __atomic_store_n(&stop, 1, __ATOMIC_RELAXED); pthread_join(q, 0);
  printf("%sphase %d (%s) %s: %d rounds, %ld captures ended ok, %ld queries:", rerecord ? "re-recorded on a stream before the end, " : "", allowed, names[allowed], local ? "local" : "global", rounds, ended_ok, queries);
  for (int i = 0; i < 1024; i++) if (codes[i]) printf(" %d:%ld", i, codes[i]);
  printf("\n"); return 0;
}
