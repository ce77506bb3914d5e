/* The benchmark's raw C side: each function makes n calls of one CUDA runtime operation in a loop,
 * as a C program would, and returns the loop's wall time in nanoseconds (negative: -error code). */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <cuda_runtime_api.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

#define LOOP(n, call)                                      \
    do {                                                   \
        double loop_start = now_ns();                      \
        for (int i = 0; i < (n); i++) {                    \
            cudaError_t err = (call);                      \
            if (err != cudaSuccess) return -(double)err;   \
        }                                                  \
        return now_ns() - loop_start;                      \
    } while (0)

static cudaError_t create_destroy(unsigned int flags) {
    cudaEvent_t event;
    cudaError_t err = cudaEventCreateWithFlags(&event, flags);
    return err != cudaSuccess ? err : cudaEventDestroy(event);
}

static cudaError_t create_record_destroy(cudaStream_t stream, unsigned int flags) {
    cudaEvent_t event;
    cudaError_t err = cudaEventCreateWithFlags(&event, flags);
    if (err != cudaSuccess) return err;
    err = cudaEventRecord(event, stream);
    return err != cudaSuccess ? err : cudaEventDestroy(event);
}

static cudaError_t elapsed(cudaEvent_t start, cudaEvent_t end) {
    float ms;
    return cudaEventElapsedTime(&ms, start, end);
}

static cudaError_t ipc_handle(cudaEvent_t event) {
    cudaIpcEventHandle_t handle;
    return cudaIpcGetEventHandle(&handle, event);
}

double bench_c_create_destroy(unsigned int flags, int n) { LOOP(n, create_destroy(flags)); }
double bench_c_lazy(cudaStream_t stream, unsigned int flags, int n) { LOOP(n, create_record_destroy(stream, flags)); }
double bench_c_record(cudaEvent_t event, cudaStream_t stream, int n) { LOOP(n, cudaEventRecord(event, stream)); }
double bench_c_query(cudaEvent_t event, int n) { LOOP(n, cudaEventQuery(event)); }
double bench_c_wait(cudaStream_t stream, cudaEvent_t event, int n) { LOOP(n, cudaStreamWaitEvent(stream, event, 0)); }
double bench_c_synchronize(cudaEvent_t event, int n) { LOOP(n, cudaEventSynchronize(event)); }
double bench_c_elapsed(cudaEvent_t start, cudaEvent_t end, int n) { LOOP(n, elapsed(start, end)); }
double bench_c_ipc_handle(cudaEvent_t event, int n) { LOOP(n, ipc_handle(event)); }
