// Does loading a module, getting/loading its function or its first launch wait for a held stream?
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static const char *PTX = ".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry stamp(.param .u64 out)\n{\n ret;\n}\n";
static volatile unsigned *flag;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void *release(void *arg) { sleep(3); *flag = 1; return NULL; }
#define CK(x) do { CUresult r = (x); if (r) { printf("%s -> %d\n", #x, r); exit(1); } } while (0)
int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "launch";
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, 0)); CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CK(cuMemHostAlloc((void **)&flag, 4, CU_MEMHOSTALLOC_DEVICEMAP)); *flag = 0; CUdeviceptr dflag; CK(cuMemHostGetDevicePointer(&dflag, (void *)flag, 0));
  CUstream held, s[8]; CK(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 8; i++) CK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
  CK(cuStreamWaitValue32(held, dflag, 1, CU_STREAM_WAIT_VALUE_GEQ));
  CUevent e; CK(cuEventCreate(&e, 0));
  CUstream mine = 0;
  for (int i = 0; i < 8 && !mine; i++) { CK(cuEventRecord(e, s[i])); usleep(20000); if (cuEventQuery(e) == CUDA_SUCCESS) mine = s[i]; }
  if (!mine) { printf("no idle stream\n"); return 1; }
  pthread_t t; pthread_create(&t, NULL, release, NULL);
  double t0 = now(); CUmodule mod; CK(cuModuleLoadData(&mod, PTX));
  double t1 = now(); CUfunction f; CK(cuModuleGetFunction(&f, mod, "stamp"));
  double t2 = now(); int regs; CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
  double t3 = now(); CUresult fl = cuFuncLoad(f);
  double t4 = now(); CUdeviceptr out = 0; void *params[] = {&out}; CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, mine, params, NULL));
  double t5 = now(); CK(cuStreamSynchronize(mine));
  double t6 = now();
  printf("%s CUDA_MODULE_LOADING=%s: load %.3f s, get %.3f, attr %.3f, cuFuncLoad(rc %d) %.3f, launch %.3f, sync %.3f; released at 3 s\n", mode,
         getenv("CUDA_MODULE_LOADING") ? getenv("CUDA_MODULE_LOADING") : "(default)", t1 - t0, t2 - t1, t3 - t2, fl, t4 - t3, t5 - t4, t6 - t5);
  pthread_join(t, NULL); CK(cuStreamSynchronize(held));
  return 0;
}
