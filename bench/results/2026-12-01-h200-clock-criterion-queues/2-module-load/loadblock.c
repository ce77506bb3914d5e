// While one thread's cuModuleLoadData waits for a held stream, do another thread's calls on an idle
// stream (record, memset, launch of a loaded kernel, stream wait value, sync) go on?
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static const char *PTX = ".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry stamp(.param .u64 out)\n{\n ret;\n}\n";
static const char *PTX2 = ".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry other(.param .u64 out)\n{\n ret;\n}\n";
static volatile unsigned *flag;
static CUcontext ctx;
static double t_start;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9 - t_start; }
#define CK(x) do { CUresult r = (x); if (r) { printf("%s -> %d\n", #x, r); exit(1); } } while (0)
static void *release(void *arg) { sleep(3); *flag = 1; return NULL; }
static void *loader(void *arg) { CK(cuCtxSetCurrent(ctx)); CUmodule m; double a = now(); CK(cuModuleLoadData(&m, PTX2)); printf("loader: load %.3f..%.3f s\n", a, now()); return NULL; }
int main(void) {
  t_start = 0; t_start = now();
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CK(cuMemHostAlloc((void **)&flag, 8, CU_MEMHOSTALLOC_DEVICEMAP)); *flag = 0; CUdeviceptr dflag; CK(cuMemHostGetDevicePointer(&dflag, (void *)flag, 0));
  CUmodule mod; CUfunction f; CK(cuModuleLoadData(&mod, PTX)); CK(cuModuleGetFunction(&f, mod, "stamp"));
  CUdeviceptr buf; CK(cuMemAlloc(&buf, 1 << 20));
  CUstream held, s[8]; CK(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 8; i++) CK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
  CK(cuStreamWaitValue32(held, dflag, 1, CU_STREAM_WAIT_VALUE_GEQ));
  CUevent e; CK(cuEventCreate(&e, 0));
  CUstream mine = 0;
  for (int i = 0; i < 8 && !mine; i++) { CK(cuEventRecord(e, s[i])); usleep(20000); if (cuEventQuery(e) == CUDA_SUCCESS) mine = s[i]; }
  if (!mine) { printf("no idle stream\n"); return 1; }
  pthread_t t, l; pthread_create(&t, NULL, release, NULL); pthread_create(&l, NULL, loader, NULL);
  usleep(200000);
  double a = now(); CK(cuEventRecord(e, mine)); double b = now(); CK(cuMemsetD32Async(buf, 0, 1 << 18, mine)); double c = now();
  CUdeviceptr out = 0; void *params[] = {&out}; CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, mine, params, NULL)); double d = now();
  CUevent e2; CK(cuEventCreate(&e2, 0)); double e0 = now(); CK(cuEventRecord(e2, mine)); CK(cuEventSynchronize(e2)); double g = now();
  CUdeviceptr p2; CK(cuMemAlloc(&p2, 1 << 20)); double h = now();
  printf("main at %.3f: record %.3f, memset %.3f, launch %.3f, event create %.3f, record+sync %.3f, alloc %.3f s (released at 3 s)\n", a, b - a, c - b, d - c, e0 - d, g - e0, h - g);
  pthread_join(l, NULL); pthread_join(t, NULL); CK(cuStreamSynchronize(held));
  return 0;
}
