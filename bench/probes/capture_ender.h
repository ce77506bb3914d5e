/* The thread that ends a capture when asked, for the probes of calls beside a capture's end
 * (capture_end_signals.c, calls_beside_capture_end.c): once the main thread has set `phase` to 1
 * (the capture of `ended_stream` is ready to end), it sets 2, ends the capture in relaxed mode
 * (a failed end counts in `end_failed`), destroys the graph and sets 3; `stop` ends it. */
#include <cuda_runtime.h>
#define LD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)

static int phase, stop, end_failed; /* phase: 0 idle, 1 end asked, 2 in end, 3 ended */
static cudaStream_t ended_stream;

/* The calling thread in relaxed capture mode (no capture's rules refuse its calls), with the
 * device's context made. */
static void relaxed_with_context(void) {
  enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&m);
  cudaFree(0);
}

static void *ender(void *unused) {
  (void)unused;
  relaxed_with_context();
  while (!LD(stop)) {
    if (LD(phase) != 1) continue;
    ST(phase, 2);
    cudaGraph_t g = 0;
    if (cudaStreamEndCapture(ended_stream, &g) != cudaSuccess) end_failed++;
    if (g) cudaGraphDestroy(g);
    ST(phase, 3);
  }
  return 0;
}
