/* Probe: which signal tells a thread that a capture holding its captured CUDA event has ENDED, so
 * that the event may go into another capture (or a plain stream, or be destroyed) with no crash?
 * Review 3's P1 (r) crashes: a CUDA event X recorded into capture C1, then recorded into capture C2
 * on another thread's behalf while a second thread runs C1's cudaStreamEndCapture. Each variant
 * runs in a child process of its own (alarm 8 s), ROUNDS rounds:
 *   r: control: X re-recorded into C2 all through C1's end (expected: SIGSEGV, as P1 r)
 *   s: X re-recorded into C2 only once cudaStreamGetCaptureInfo(C1) answers "not active" or an id
 *      other than C1's; the info is read all through the end (is that read safe beside the end?)
 *   u: a user object moved into C1's graph at the record (cudaGraphRetainUserObject on the graph
 *      cudaStreamGetCaptureInfo gives); X re-recorded into C2 only once its destructor has run;
 *      the ender destroys the graph as soon as its end returns
 *   v: as u, but C1 is invalidated before its end (a wait on a never-captured event, 905), so the
 *      end fails (901) and CUDA destroys the graph inside it
 *   d: as s, but the re-record is a cudaEventDestroy + cudaEventCreate of X (the crate's destroy)
 *   i: cudaStreamGetCaptureInfo(C1) read all through the end, X re-recorded into C2 only once the
 *      end has returned (is the read itself safe beside the end, which s cannot tell?)
 *   q: as i, with cudaStreamIsCapturing(C1) (the crate's capture check) as the read
 *   e: a fresh CUDA event Y recorded on C1 once while the end runs (a record racing the end of the
 *      capture of its stream), X re-recorded into C2 once the end has returned
 * One line per variant: OK with how often the signal came while the end was still running, or the
 * signal and round.
 * gcc -O2 capture_end_signals.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -lpthread
 *     -o capture_end_signals && ./capture_end_signals */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include "capture_ender.h"
#include "variants.h"
enum { ROUNDS = 3000 };
static int gone;
static int c2_bad, early, c2_records, e_done;
static cudaStream_t C1, C2, Q;
static cudaEvent_t X, never;

static cudaError_t capture_info(cudaStream_t s, enum cudaStreamCaptureStatus *st, unsigned long long *id,
                                cudaGraph_t *g) {
#if CUDART_VERSION >= 13000
  return cudaStreamGetCaptureInfo(s, st, id, g, NULL, NULL, NULL);
#else
  return cudaStreamGetCaptureInfo(s, st, id, g, NULL, NULL);
#endif
}

static void on_destroy(void *unused) {
  (void)unused;
  ST(gone, 1);
}

/* Whether C1's capture, of id `id`, has been seen to end by the variant's signal. */
static int ended(char v, unsigned long long id) {
  if (v == 'r') return 1;
  if (v == 'i' || v == 'q' || v == 'e') {
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    unsigned long long now = 0;
    int done = LD(phase) == 3;
    if (v == 'i') capture_info(C1, &st, &now, NULL);
    if (v == 'q') cudaStreamIsCapturing(C1, &st);
    if (v == 'e' && !LD(e_done)) {
      cudaEvent_t y;
      cudaEventCreateWithFlags(&y, cudaEventDisableTiming);
      cudaEventRecord(y, C1); /* never destroyed: a capture may hold it */
      ST(e_done, 1);
    }
    cudaGetLastError();
    return done;
  }
  if (v == 'u' || v == 'v') return LD(gone);
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  unsigned long long now = 0;
  if (capture_info(C1, &st, &now, NULL) != cudaSuccess) return 0;
  return st != cudaStreamCaptureStatusActive || now != id;
}

static void child(char v) {
  watch_child(8);
  relaxed_with_context();
  cudaStreamCreateWithFlags(&C1, cudaStreamNonBlocking);
  ended_stream = C1;
  cudaStreamCreateWithFlags(&C2, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&Q, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&X, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&never, cudaEventDisableTiming);
  cudaEventRecord(never, Q);
  pthread_t t;
  pthread_create(&t, 0, ender, 0);
  for (int r = 0; r < ROUNDS; r++) {
    round_no = r;
    ST(gone, 0);
    ST(e_done, 0);
    cudaStreamBeginCapture(C1, cudaStreamCaptureModeRelaxed);
    cudaEventRecord(X, C1); /* C1 holds X's record */
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    cudaGraph_t g1 = 0;
    capture_info(C1, &st, &id, &g1);
    if (v == 'u' || v == 'v') {
      cudaUserObject_t obj;
      cudaUserObjectCreate(&obj, 0, on_destroy, 1, cudaUserObjectNoDestructorSync);
      cudaGraphRetainUserObject(g1, obj, 1, cudaGraphUserObjectMove);
    }
    if (v == 'v') {
      cudaStreamWaitEvent(C1, never, 0); /* 905: C1 is invalidated */
      cudaGetLastError();
    }
    cudaStreamBeginCapture(C2, cudaStreamCaptureModeRelaxed);
    ST(phase, 1);
    while (LD(phase) < 2) {}
    int done = 0;
    while (!done) {
      int in_end = LD(phase) == 2;
      if (ended(v, id)) {
        if (in_end) early++;
        if (v == 'd') {
          cudaEventDestroy(X);
          cudaEventCreateWithFlags(&X, cudaEventDisableTiming);
        } else {
          cudaEventRecord(X, C2);
        }
        c2_records++;
        if (v != 'r') done = 1;
      }
      if (v == 'r' && !in_end) done = 1;
    }
    while (LD(phase) != 3) {}
    if (v == 'u' || v == 'v') while (!LD(gone)) {}
    cudaGraph_t g2 = 0;
    if (cudaStreamEndCapture(C2, &g2) != cudaSuccess) c2_bad++;
    if (g2) cudaGraphDestroy(g2);
    cudaGetLastError();
    ST(phase, 0);
  }
  ST(stop, 1);
  pthread_join(t, 0);
  char b[160];
  snprintf(b, sizeof b, "OK(C1 invalid %d, C2 invalid %d, signal seen during the end %d, calls %d)", end_failed,
                   c2_bad, early, c2_records);
  report(b);
  _exit(0);
}

int main(int argc, char **argv) {
  char title[120];
  snprintf(title, sizeof title, "capture end signals (%d rounds)", ROUNDS);
  return run_variants(title, argc > 1 ? argv[1] : "rsuvdiqe", child);
}
