// How many commands a stream takes behind a closed gate before a launch blocks.
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static volatile unsigned *gate;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void *opener(void *a){sleep(4);*gate=1;return 0;}
#define CK(x) do{CUresult r=(x); if(r){const char*s;cuGetErrorName(r,&s);printf("%s: %s\n",#x,s);exit(1);}}while(0)
int main(int argc,char**argv){
  const char*mode=argv[1]; int streams=atoi(argv[2]); int n=atoi(argv[3]);
  CUdevice dev; CUcontext ctx; CK(cuInit(0)); CK(cuDeviceGet(&dev,0)); CK(cuDevicePrimaryCtxRetain(&ctx,dev)); CK(cuCtxSetCurrent(ctx));
  void*host; CK(cuMemHostAlloc(&host,64,CU_MEMHOSTALLOC_DEVICEMAP)); gate=host; *gate=0; CUdeviceptr dgate; CK(cuMemHostGetDevicePointer(&dgate,host,0));
  CUstream *s=malloc(sizeof(CUstream)*streams); for(int i=0;i<streams;i++){CK(cuStreamCreate(&s[i],CU_STREAM_NON_BLOCKING)); CK(cuStreamWaitValue32(s[i],dgate,1,CU_STREAM_WAIT_VALUE_GEQ));}
  CUevent *ev=malloc(sizeof(CUevent)*n); unsigned flags=strchr(mode,'t')?CU_EVENT_BLOCKING_SYNC:CU_EVENT_DISABLE_TIMING;
  for(int i=0;i<n;i++) CK(cuEventCreate(&ev[i],flags));
  pthread_t th; pthread_create(&th,0,opener,0);
  double start=now(); int blocked=-1; double worst=0;
  for(int i=0;i<n;i++){ CUstream st=s[i%streams]; double t0=now();
    if(strchr(mode,'w')) CK(cuStreamWaitValue32(st,dgate,1,CU_STREAM_WAIT_VALUE_GEQ));
    if(strchr(mode,'r')) CK(cuEventRecord(ev[i],st));
    if(strchr(mode,'R')) { CK(cuEventRecord(ev[i],st)); CK(cuEventRecord(ev[(i+1)%n],st)); }
    double d=now()-t0; if(d>worst)worst=d; if(d>0.5&&blocked<0){blocked=i;}
  }
  printf("mode %s streams %d n %d: first call over 0.5 s at %d (per stream %d), worst %.3f s, all in %.3f s\n",mode,streams,n,blocked,blocked<0?-1:blocked/streams,worst,now()-start);
  return 0;
}
