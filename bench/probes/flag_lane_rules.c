/* Probe for issue 43's flag lane, before it is built: the rules its design leans on, one line each.
 * The lane writes a 64-bit ticket (cuStreamWriteValue64) into a slot of a page the crate owns and
 * registers (cuMemHostRegister, device-mapped), right behind an event record; a scanner thread
 * spins on the slots; a ticket seen is confirmed by a query of the event before anyone is woken.
 *   registered   a write into a registered page reaches the host (cuMemHostAlloc memory is unmapped
 *                by a device reset, review-3's P3; a registered page stays the crate's)
 *   order        the write lands behind the event: after the host sees the ticket, how often does
 *                cuEventQuery still answer not-ready (TRIALS trials, a short kernel before each)
 *   captured     a write made into a stream under capture (relaxed mode): its result, the node it
 *                adds (its type), the host word before and after the graph's launch
 *   reset        cuDevicePrimaryCtxReset with the page registered: the host word still readable; in
 *                the new context the page registers again (or answers already-registered) and a
 *                write reaches it
 *   legacy       a write on the legacy default stream reaches the host
 * gcc -O2 flag_lane_rules.c -I/usr/local/cuda/include -lcuda -o flag_lane_rules && ./flag_lane_rules */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { printf("%s: %d\n", #x, (int)r_); fflush(stdout); exit(1); } } while (0)
#define TRIALS 20000
#define PAGE 4096

static const char PTX[] =
    ".version 7.0\n.target sm_52\n.address_size 64\n"
    ".visible .entry spin(.param .u64 ns) {\n"
    "  .reg .u64 %t0, %t1, %d, %n; .reg .pred %p;\n"
    "  ld.param.u64 %n, [ns]; mov.u64 %t0, %globaltimer;\n"
    "L: mov.u64 %t1, %globaltimer; sub.u64 %d, %t1, %t0; setp.lt.u64 %p, %d, %n; @%p bra L;\n"
    "  ret;\n}\n";

static CUdevice dev;
static CUcontext ctx;
static CUfunction spin;
static CUmodule module;

static void open_context(void) {
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuModuleLoadData(&module, PTX));
  CK(cuModuleGetFunction(&spin, module, "spin"));
}

static CUdeviceptr device_address(void *host) {
  CUdeviceptr d;
  CK(cuMemHostGetDevicePointer(&d, host, 0));
  return d;
}

static int wait_for(volatile uint64_t *word, uint64_t value) {
  for (long i = 0; i < 2000000000L; i++)
    if (*word == value) return 1;
  return 0;
}

int main(void) {
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  char name[256]; int driver, ops64 = 0;
  CK(cuDeviceGetName(name, sizeof name, dev)); CK(cuDriverGetVersion(&driver));
  cuDeviceGetAttribute(&ops64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev);
  printf("%s, driver API %d, 64-bit stream memory ops attribute %d\n", name, driver, ops64);
  open_context();

  void *page;
  if (posix_memalign(&page, PAGE, PAGE)) return 1;
  memset(page, 0, PAGE);
  volatile uint64_t *slots = page;
  CUresult reg = cuMemHostRegister(page, PAGE, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
  printf("registered: cuMemHostRegister %d", (int)reg);
  if (reg) { printf("\n"); return 1; }
  CUdeviceptr dslots = device_address(page);
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamWriteValue64(s, dslots, 7, CU_STREAM_WRITE_VALUE_DEFAULT));
  printf(", write %s\n", wait_for(&slots[0], 7) ? "seen" : "NOT SEEN");

  /* order: a short kernel, the event, the ticket; the host spins on the ticket, then queries */
  CUevent e;
  CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  long not_ready = 0, other = 0, unseen = 0;
  for (uint64_t t = 1; t <= TRIALS; t++) {
    uint64_t ns = 2000;
    void *args[] = {&ns};
    CK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CK(cuEventRecord(e, s));
    CK(cuStreamWriteValue64(s, dslots + 8, t, CU_STREAM_WRITE_VALUE_DEFAULT));
    if (!wait_for(&slots[1], t)) { unseen++; CK(cuStreamSynchronize(s)); continue; }
    CUresult q = cuEventQuery(e);
    if (q == CUDA_ERROR_NOT_READY) not_ready++;
    else if (q) other++;
  }
  printf("order: %d trials; ticket never seen %ld; query not ready after the ticket %ld; other errors %ld\n",
         TRIALS, unseen, not_ready, other);
  CK(cuStreamSynchronize(s));

  /* captured: relaxed mode, the write inside the capture */
  CUstream cs;
  CUgraph g = NULL;
  CK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  slots[2] = 0;
  CK(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUresult w = cuStreamWriteValue64(cs, dslots + 16, 42, CU_STREAM_WRITE_VALUE_DEFAULT);
  CUresult end = cuStreamEndCapture(cs, &g);
  printf("captured: write %d, end %d", (int)w, (int)end);
  if (g) {
    size_t n = 0;
    CK(cuGraphGetNodes(g, NULL, &n));
    CUgraphNode nodes[8];
    if (n > 8) n = 8;
    CK(cuGraphGetNodes(g, nodes, &n));
    printf(", %zu node(s):", n);
    for (size_t i = 0; i < n; i++) {
      CUgraphNodeType type;
      CK(cuGraphNodeGetType(nodes[i], &type));
      printf(" type %d%s", (int)type, type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP ? " (batch mem op)" : "");
    }
    printf(", host word before launch %llu", (unsigned long long)slots[2]);
    CUgraphExec x;
    CUresult inst = cuGraphInstantiateWithFlags(&x, g, 0);
    if (inst) printf(", instantiate %d", (int)inst);
    else {
      CK(cuGraphLaunch(x, s));
      CK(cuStreamSynchronize(s));
      printf(", after launch %llu", (unsigned long long)slots[2]);
      CK(cuGraphExecDestroy(x));
    }
    CK(cuGraphDestroy(g));
  }
  printf("\n");

  /* legacy: the legacy default stream */
  CK(cuStreamWriteValue64(CU_STREAM_LEGACY, dslots + 24, 5, CU_STREAM_WRITE_VALUE_DEFAULT));
  printf("legacy: write %s\n", wait_for(&slots[3], 5) ? "seen" : "NOT SEEN");

  /* reset: the page registered, the context reset under it */
  CK(cuStreamDestroy(cs));
  CK(cuStreamDestroy(s));
  CK(cuEventDestroy(e));
  CK(cuCtxSetCurrent(NULL));
  CK(cuDevicePrimaryCtxReset(dev));
  printf("reset: host word after the reset %llu (readable)", (unsigned long long)slots[1]);
  CK(cuDevicePrimaryCtxRelease(dev));
  open_context();
  CUresult again = cuMemHostRegister(page, PAGE, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
  printf(", registers again %d", (int)again);
  if (!again || again == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
    CUdeviceptr d2;
    CUresult dp = cuMemHostGetDevicePointer(&d2, page, 0);
    printf(", device pointer %d", (int)dp);
    if (!dp) {
      CUstream s2;
      CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
      CK(cuStreamWriteValue64(s2, d2 + 32, 9, CU_STREAM_WRITE_VALUE_DEFAULT));
      printf(", write %s", wait_for(&slots[4], 9) ? "seen" : "NOT SEEN");
      CK(cuStreamDestroy(s2));
    }
  }
  printf("\n");
  CK(cuMemHostUnregister(page));
  printf("done\n");
  return 0;
}
