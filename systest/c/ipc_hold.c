/* The IPC hold case in plain C, with no Rust in the way: an exporter whose stream is held by a host
 * function, and an importer that opens, queries and synchronizes the exporter's event while it is
 * held. The test harness (systest/tests/ipc_hold.rs) runs each side in its own process, relays their
 * lines, and says whether a call of the importer waited for the exporter's host function.
 *
 * hold: 0 = the host function blocks until a line arrives on the exporter's stdin (the importer's
 * "queried", relayed by the harness); 1 = it sleeps 2 s and needs nobody. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                     \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            printf("%s failed: %s (%d)\n", #call, cudaGetErrorName(e_), (int)e_);       \
            fflush(stdout);                                                             \
            return (int)e_;                                                             \
        }                                                                               \
    } while (0)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void CUDART_CB wait_for_a_line(void *unused) {
    (void)unused;
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL) line[0] = 0;
}

static void CUDART_CB sleep_2s(void *unused) {
    (void)unused;
    struct timespec t = {2, 0};
    nanosleep(&t, NULL);
}

int ipc_hold_exporter(int hold) {
    cudaStream_t stream;
    cudaEvent_t event;
    cudaIpcEventHandle_t handle;
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamCreate(&stream));
    CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess));
    CHECK(cudaLaunchHostFunc(stream, hold ? sleep_2s : wait_for_a_line, NULL));
    CHECK(cudaEventRecord(event, stream));
    CHECK(cudaIpcGetEventHandle(&handle, event));
    printf("handle ");
    for (size_t i = 0; i < sizeof handle.reserved; i++) printf("%02x", (unsigned char)handle.reserved[i]);
    printf("\n");
    fflush(stdout);
    double t0 = now_ms();
    CHECK(cudaStreamSynchronize(stream));
    printf("exporter: stream released after %.1f ms\n", now_ms() - t0);
    fflush(stdout);
    CHECK(cudaEventDestroy(event));
    CHECK(cudaStreamDestroy(stream));
    return 0;
}

int ipc_hold_importer(const char *hex) {
    cudaIpcEventHandle_t handle;
    cudaEvent_t event;
    if (strlen(hex) != 2 * sizeof handle.reserved) return -1;
    for (size_t i = 0; i < sizeof handle.reserved; i++) {
        unsigned int byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1) return -1;
        handle.reserved[i] = (char)byte;
    }
    CHECK(cudaSetDevice(0));
    double t0 = now_ms();
    CHECK(cudaIpcOpenEventHandle(&event, handle));
    printf("importer: opened in %.1f ms\n", now_ms() - t0);
    fflush(stdout);
    t0 = now_ms();
    cudaError_t queried = cudaEventQuery(event);
    printf("importer: query returned %s after %.1f ms\n", cudaGetErrorName(queried), now_ms() - t0);
    printf("queried\n");
    fflush(stdout);
    t0 = now_ms();
    CHECK(cudaEventSynchronize(event));
    printf("importer: synchronized after %.1f ms\n", now_ms() - t0);
    fflush(stdout);
    CHECK(cudaEventDestroy(event));
    return 0;
}
