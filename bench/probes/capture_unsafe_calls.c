/* Probe for the driver model's capture-mode rule: which calls does CUDA refuse, and so break the
 * capture, when one thread makes them while another thread holds a stream capture in global mode
 * (torch.cuda.graph's default), per mode of the calling thread (global, thread-local, relaxed)?
 * The calls are those that measure, Trace, the event pools, host functions, interprocess events
 * and the flag lane make. Each (call, mode) runs in a child process of its own, 3 rounds: what a round's call needs
 * is made before the capture opens (a release row releases an object made then), the call is made
 * once while a second thread's global-mode capture (one memset node) is open, then the capture
 * ends. One line each: the call's result and what cuStreamEndCapture answered, per round
 * (0: the capture ended valid; 901: invalidated); "hang" where the child did not finish in 10 s.
 * The parent makes no CUDA call (a forked child could not use its CUDA state).
 * gcc -O2 capture_unsafe_calls.c -I/usr/local/cuda/include -lcuda -lpthread -o capture_unsafe_calls
 * ./capture_unsafe_calls */
#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { printf("setup: %s: %d\n", #x, (int)r_); fflush(stdout); _exit(1); } } while (0)

static const char PTX[] =
    ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry empty() { ret; }\n";

static const char *const NAMES[] = {
    "cuEventQuery", "cuEventSynchronize", "cuEventElapsedTime", "cuEventRecord (other stream)",
    "cuEventCreate", "cuEventDestroy", "cuStreamCreateWithPriority", "cuStreamDestroy",
    "new stream primed (timing cuEventCreate, cuEventRecord on it, cuEventDestroy)",
    "new blocking stream primed (as above, CU_STREAM_DEFAULT)",
    "cuMemAlloc", "cuMemFree", "cuMemHostAlloc (mapped)", "cuMemFreeHost", "cuModuleLoadData",
    "cuModuleGetFunction", "cuModuleUnload", "cuLaunchKernel (other stream)",
    "cuMemsetD32Async (other stream)", "cuMemcpyDtoDAsync (other stream)",
    "cuStreamWaitValue32 (met, other stream)", "cuStreamWriteValue64 (other stream)",
    "cuMemHostRegister (mapped)", "cuMemHostUnregister", "cuStreamWaitEvent (other stream)",
    "cuLaunchHostFunc (other stream)", "cuStreamQuery (other)", "cuStreamSynchronize (other)",
    "cuStreamIsCapturing (other)", "cuStreamGetPriority (other)", "cuCtxGetLimit",
    "cuCtxResetPersistingL2Cache", "cuCtxPushCurrent + cuCtxPopCurrent",
    "cuDevicePrimaryCtxGetState", "cuIpcGetEventHandle", "cuGraphInstantiateWithFlags",
    "cuGraphLaunch (other stream)", "cuGraphExecDestroy", "cuGraphDestroy",
    "cuStreamBeginCapture + EndCapture (other, relaxed)", "cuMemsetD32Async (legacy stream)",
    "cuCtxSynchronize"};
enum { CALLS = sizeof NAMES / sizeof *NAMES };

static CUdevice dev;
static CUcontext ctx;
static CUstream captured, other;
static CUdeviceptr node_buffer, buffer, buffer2, word_dev;
static CUevent e1, e2, ipc_event;
static CUmodule module;
static CUfunction empty;
static CUgraph graph;
static CUgraphExec exec;
/* What a release row releases, made before the capture opens. */
static CUevent made_event; static CUstream made_stream; static CUdeviceptr made_memory;
static void *made_host; static void *registered_page; static CUmodule made_module; static CUgraph made_graph; static CUgraphExec made_exec;
static atomic_int step; /* 0 idle, 1 capture open, 2 call made, 3 capture ended */
static CUresult begin_code, node_code, end_code;

static void nothing(void *unused) { (void)unused; }

static void *capturer(void *unused) {
  (void)unused;
  CUgraph g = NULL;
  cuCtxSetCurrent(ctx);
  begin_code = cuStreamBeginCapture(captured, CU_STREAM_CAPTURE_MODE_GLOBAL);
  node_code = begin_code ? CUDA_SUCCESS : cuMemsetD32Async(node_buffer, 0, 1024, captured);
  atomic_store(&step, 1);
  while (atomic_load(&step) != 2) {
  }
  end_code = begin_code ? begin_code : cuStreamEndCapture(captured, &g);
  if (g) cuGraphDestroy(g);
  atomic_store(&step, 3);
  return NULL;
}

static void prepare(int which) {
  const char *n = NAMES[which];
  if (!strcmp(n, "cuEventDestroy")) CK(cuEventCreate(&made_event, CU_EVENT_DISABLE_TIMING));
  if (!strcmp(n, "cuStreamDestroy")) CK(cuStreamCreate(&made_stream, CU_STREAM_NON_BLOCKING));
  if (!strcmp(n, "cuMemFree")) CK(cuMemAlloc(&made_memory, 1 << 20));
  if (!strcmp(n, "cuMemFreeHost")) CK(cuMemHostAlloc(&made_host, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  if (!strcmp(n, "cuMemHostUnregister")) CK(cuMemHostRegister(registered_page, 4096, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
  if (!strcmp(n, "cuModuleUnload")) CK(cuModuleLoadData(&made_module, PTX));
  if (!strcmp(n, "cuGraphExecDestroy")) CK(cuGraphInstantiateWithFlags(&made_exec, graph, 0));
  if (!strcmp(n, "cuGraphDestroy")) CK(cuGraphClone(&made_graph, graph));
}

/* The call under test, made while the other thread's capture is open. */
static CUresult call(int which) {
  CUevent e; CUstream s; CUdeviceptr p; void *host; CUmodule m; CUfunction f; CUgraph g;
  CUgraphExec x; CUipcEventHandle handle; CUstreamCaptureStatus status; CUcontext popped;
  float ms; size_t limit; int priority, active; unsigned flags; CUresult r;
  const char *n = NAMES[which];
  if (!strcmp(n, "cuEventQuery")) return cuEventQuery(e1);
  if (!strcmp(n, "cuEventSynchronize")) return cuEventSynchronize(e1);
  if (!strcmp(n, "cuEventElapsedTime")) return cuEventElapsedTime(&ms, e1, e2);
  if (!strcmp(n, "cuEventRecord (other stream)")) return cuEventRecord(e2, other);
  if (!strcmp(n, "cuEventCreate")) return cuEventCreate(&e, CU_EVENT_DISABLE_TIMING); /* kept */
  if (!strcmp(n, "cuEventDestroy")) return cuEventDestroy(made_event);
  if (!strcmp(n, "cuStreamCreateWithPriority")) return cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1);
  if (!strcmp(n, "cuStreamDestroy")) return cuStreamDestroy(made_stream);
  if (!strncmp(n, "new stream primed", 17) || !strncmp(n, "new blocking stream primed", 26)) {
    /* what the crate's Stream::with_options (non-blocking) and Stream::new (blocking) do; the stream is kept */
    CUevent timing;
    unsigned flags = n[4] == 'b' ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING;
    if ((r = cuStreamCreateWithPriority(&s, flags, 0))) return r;
    if ((r = cuEventCreate(&timing, CU_EVENT_DEFAULT))) return r;
    if ((r = cuEventRecord(timing, s))) return r;
    return cuEventDestroy(timing);
  }
  if (!strcmp(n, "cuMemAlloc")) return cuMemAlloc(&p, 1 << 20);
  if (!strcmp(n, "cuMemFree")) return cuMemFree(made_memory);
  if (!strcmp(n, "cuMemHostAlloc (mapped)")) return cuMemHostAlloc(&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  if (!strcmp(n, "cuMemFreeHost")) return cuMemFreeHost(made_host);
  if (!strcmp(n, "cuModuleLoadData")) return cuModuleLoadData(&m, PTX);
  if (!strcmp(n, "cuModuleGetFunction")) return cuModuleGetFunction(&f, module, "empty");
  if (!strcmp(n, "cuModuleUnload")) return cuModuleUnload(made_module);
  if (!strcmp(n, "cuLaunchKernel (other stream)")) return cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, other, NULL, NULL);
  if (!strcmp(n, "cuMemsetD32Async (other stream)")) return cuMemsetD32Async(buffer, 0, 1024, other);
  if (!strcmp(n, "cuMemcpyDtoDAsync (other stream)")) return cuMemcpyDtoDAsync(buffer2, buffer, 4096, other);
  if (!strcmp(n, "cuStreamWaitValue32 (met, other stream)")) return cuStreamWaitValue32(other, word_dev, 0, CU_STREAM_WAIT_VALUE_GEQ);
  if (!strcmp(n, "cuStreamWriteValue64 (other stream)")) return cuStreamWriteValue64(other, word_dev + 8, 1, CU_STREAM_WRITE_VALUE_DEFAULT);
  /* what the lane's flag slots are: the crate's own page, registered (each round registers it
   * again, so unregister first) */
  if (!strcmp(n, "cuMemHostRegister (mapped)")) {
    cuMemHostUnregister(registered_page);
    return cuMemHostRegister(registered_page, 4096, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
  }
  if (!strcmp(n, "cuMemHostUnregister")) return cuMemHostUnregister(registered_page);
  if (!strcmp(n, "cuStreamWaitEvent (other stream)")) return cuStreamWaitEvent(other, e1, 0);
  if (!strcmp(n, "cuLaunchHostFunc (other stream)")) return cuLaunchHostFunc(other, nothing, NULL);
  if (!strcmp(n, "cuStreamQuery (other)")) return cuStreamQuery(other);
  if (!strcmp(n, "cuStreamSynchronize (other)")) return cuStreamSynchronize(other);
  if (!strcmp(n, "cuStreamIsCapturing (other)")) return cuStreamIsCapturing(other, &status);
  if (!strcmp(n, "cuStreamGetPriority (other)")) return cuStreamGetPriority(other, &priority);
  if (!strcmp(n, "cuCtxGetLimit")) return cuCtxGetLimit(&limit, CU_LIMIT_PERSISTING_L2_CACHE_SIZE);
  if (!strcmp(n, "cuCtxResetPersistingL2Cache")) return cuCtxResetPersistingL2Cache();
  if (!strcmp(n, "cuCtxPushCurrent + cuCtxPopCurrent")) {
    r = cuCtxPushCurrent(ctx);
    return r ? r : cuCtxPopCurrent(&popped);
  }
  if (!strcmp(n, "cuDevicePrimaryCtxGetState")) return cuDevicePrimaryCtxGetState(dev, &flags, &active);
  if (!strcmp(n, "cuIpcGetEventHandle")) return cuIpcGetEventHandle(&handle, ipc_event);
  if (!strcmp(n, "cuGraphInstantiateWithFlags")) return cuGraphInstantiateWithFlags(&x, graph, 0);
  if (!strcmp(n, "cuGraphLaunch (other stream)")) return cuGraphLaunch(exec, other);
  if (!strcmp(n, "cuGraphExecDestroy")) return cuGraphExecDestroy(made_exec);
  if (!strcmp(n, "cuGraphDestroy")) return cuGraphDestroy(made_graph);
  if (!strcmp(n, "cuStreamBeginCapture + EndCapture (other, relaxed)")) {
    r = cuStreamBeginCapture(other, CU_STREAM_CAPTURE_MODE_RELAXED);
    if (r) return r;
    r = cuMemsetD32Async(buffer, 0, 1024, other);
    CUresult end = cuStreamEndCapture(other, &g);
    if (g) cuGraphDestroy(g);
    return r ? r : end;
  }
  if (!strcmp(n, "cuMemsetD32Async (legacy stream)")) return cuMemsetD32Async(buffer, 0, 1024, CU_STREAM_LEGACY);
  if (!strcmp(n, "cuCtxSynchronize")) return cuCtxSynchronize();
  return CUDA_ERROR_INVALID_VALUE;
}

/* One (call, mode) in this process: prints its rounds on one line. */
static void child(int which, CUstreamCaptureMode asked) {
  void *word_host;
  alarm(10);
  if (posix_memalign(&registered_page, 4096, 4096)) { printf(" no page"); fflush(stdout); _exit(1); }
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  /* Blocking streams, as Stream::new makes them (the legacy stream's row depends on it). */
  CK(cuStreamCreate(&captured, CU_STREAM_DEFAULT)); CK(cuStreamCreate(&other, CU_STREAM_DEFAULT));
  CK(cuMemAlloc(&node_buffer, 4096)); CK(cuMemAlloc(&buffer, 4096)); CK(cuMemAlloc(&buffer2, 4096));
  CK(cuMemHostAlloc(&word_host, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  memset(word_host, 0, 4096);
  CK(cuMemHostGetDevicePointer(&word_dev, word_host, 0));
  CK(cuModuleLoadData(&module, PTX)); CK(cuModuleGetFunction(&empty, module, "empty"));
  CK(cuEventCreate(&e1, CU_EVENT_DEFAULT)); CK(cuEventCreate(&e2, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&ipc_event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  CK(cuEventRecord(e1, other)); CK(cuEventRecord(e2, other)); CK(cuEventRecord(ipc_event, other));
  CK(cuStreamBeginCapture(other, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CK(cuMemsetD32Async(buffer, 0, 1024, other));
  CK(cuStreamEndCapture(other, &graph)); CK(cuGraphInstantiateWithFlags(&exec, graph, 0));
  CK(cuStreamSynchronize(other));
  for (int round = 0; round < 3; round++) {
    prepare(which);
    CUstreamCaptureMode mode = asked;
    CK(cuThreadExchangeStreamCaptureMode(&mode));
    atomic_store(&step, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, capturer, NULL)) { printf(" no thread"); fflush(stdout); _exit(1); }
    while (atomic_load(&step) != 1) {
    }
    printf(" ");
    fflush(stdout); /* what ran before a hang reaches the parent's output */
    CUresult r = call(which);
    atomic_store(&step, 2);
    while (atomic_load(&step) != 3) {
    }
    pthread_join(t, NULL);
    CK(cuThreadExchangeStreamCaptureMode(&mode));
    if (begin_code || node_code) printf("capture not begun (%d, %d);", (int)begin_code, (int)node_code);
    else printf("%d -> %d;", (int)r, (int)end_code);
    fflush(stdout);
    /* Between rounds: what the call queued has run. */
    cuStreamSynchronize(other); cuCtxSynchronize();
  }
  _exit(0);
}

int main(void) {
  const CUstreamCaptureMode modes[] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                       CU_STREAM_CAPTURE_MODE_RELAXED};
  const char *const mode_names[] = {"global", "thread-local", "relaxed"};
  printf("%-52s %-12s %s\n", "call", "mode", "rounds: call's result -> cuStreamEndCapture's");
  for (int which = 0; which < CALLS; which++) {
    for (int m = 0; m < 3; m++) {
      printf("%-52s %-12s", NAMES[which], mode_names[m]);
      fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) child(which, modes[m]);
      int status = 0;
      waitpid(pid, &status, 0);
      if (WIFSIGNALED(status)) printf(" hang or crash (signal %d)", WTERMSIG(status));
      printf("\n");
      fflush(stdout);
    }
  }
  printf("done\n");
  return 0;
}
