/* Probe: which calls on a stream, made by another thread while the stream's capture is being ended
 * (cudaStreamEndCapture under way), crash? The crate keeps its records on such a stream and its
 * records into the capture apart from the crate's own end (capture_end_signals e: a record there
 * crashes); its waits on the stream (cudaStreamWaitEvent), host functions, launches of graphs,
 * queries and synchronizes take no such care yet (review of 2026-12-08). Each variant runs in a
 * child process of its own (alarm 8 s), ROUNDS rounds; in each, thread E ends the capture of C
 * (begun by the main thread, relaxed mode, one record in it) while the main thread makes the
 * variant's call on C again and again until the end has returned:
 *   n: no call (control)
 *   e: cudaEventRecord of a fresh event on C (expected: SIGSEGV, as capture_end_signals e)
 *   w: cudaStreamWaitEvent(C, an event recorded on another stream and complete)
 *   h: cudaLaunchHostFunc(C, a function that does nothing)
 *   l: cudaGraphLaunch of an instantiated graph (one empty node) on C
 *   q: cudaStreamQuery(C)
 *   s: cudaStreamSynchronize(C)
 * One line per variant: OK with how many calls overlapped the end, or the signal and the round.
 * gcc -O2 calls_beside_capture_end.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart
 *     -lpthread -o calls_beside_capture_end && ./calls_beside_capture_end */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include "capture_ender.h"
#include "variants.h"
enum { ROUNDS = 3000 };
static int overlapped;
static cudaStream_t C, Q;
static cudaEvent_t done_on_q, in_capture;
static cudaGraphExec_t exec;

static void nothing(void *unused) { (void)unused; }

static void call(char v) {
  cudaEvent_t fresh;
  switch (v) {
  case 'e':
    cudaEventCreateWithFlags(&fresh, cudaEventDisableTiming);
    cudaEventRecord(fresh, C); /* never destroyed: a capture may hold it */
    break;
  case 'w': cudaStreamWaitEvent(C, done_on_q, 0); break;
  case 'h': cudaLaunchHostFunc(C, nothing, 0); break;
  case 'l': cudaGraphLaunch(exec, C); break;
  case 'q': cudaStreamQuery(C); break;
  case 's': cudaStreamSynchronize(C); break;
  default: break;
  }
  cudaGetLastError();
}

static void child(char v) {
  watch_child(8);
  relaxed_with_context();
  cudaStreamCreateWithFlags(&C, cudaStreamNonBlocking);
  ended_stream = C;
  cudaStreamCreateWithFlags(&Q, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&done_on_q, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&in_capture, cudaEventDisableTiming);
  cudaEventRecord(done_on_q, Q);
  cudaStreamSynchronize(Q);
  cudaGraph_t empty;
  cudaGraphNode_t node;
  cudaGraphCreate(&empty, 0);
  cudaGraphAddEmptyNode(&node, empty, NULL, 0);
  cudaGraphInstantiate(&exec, empty, 0);
  pthread_t t;
  pthread_create(&t, 0, ender, 0);
  for (int r = 0; r < ROUNDS; r++) {
    round_no = r;
    cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed);
    cudaEventRecord(in_capture, C);
    ST(phase, 1);
    while (LD(phase) < 2) {}
    while (LD(phase) == 2) {
      call(v);
      if (LD(phase) == 2) overlapped++;
    }
    cudaStreamSynchronize(C);
    cudaGetLastError();
    ST(phase, 0);
  }
  ST(stop, 1);
  pthread_join(t, 0);
  char b[160];
  snprintf(b, sizeof b, "OK(ends failed %d, calls that overlapped the end %d)", end_failed, overlapped);
  report(b);
  _exit(0);
}

int main(int argc, char **argv) {
  char title[120];
  snprintf(title, sizeof title, "calls beside a capture's end (%d rounds)", ROUNDS);
  return run_variants(title, argc > 1 ? argv[1] : "newhlqs", child);
}
