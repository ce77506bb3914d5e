/* Compiled by cc against the same CUDA headers as the bindings. Two jobs:
 * 1. report the ABI facts the Rust side relies on (sizes, alignments, offsets, constant values), as a
 *    table that the Rust tests compare with the bindings, entry by entry;
 * 2. take and hand out raw cudaEvent_t handles, so the safe crate's GPU tests show C interop both ways. */
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

struct abi_entry {
    const char *name;
    uint64_t value;
};

#define SIZE_ALIGN(T) {"sizeof " #T, sizeof(T)}, {"alignof " #T, _Alignof(T)}
#define VALUE(X) {#X, (uint64_t)(X)}

static const struct abi_entry ABI[] = {
    SIZE_ALIGN(cudaIpcEventHandle_t),
    {"offsetof cudaIpcEventHandle_t.reserved", offsetof(cudaIpcEventHandle_t, reserved)},
    SIZE_ALIGN(cudaEvent_t),
    SIZE_ALIGN(cudaStream_t),
    SIZE_ALIGN(cudaGraph_t),
    SIZE_ALIGN(cudaGraphExec_t),
    SIZE_ALIGN(cudaHostFn_t),
    SIZE_ALIGN(cudaError_t),
    SIZE_ALIGN(enum cudaDeviceAttr),
    SIZE_ALIGN(enum cudaStreamCaptureStatus),
    VALUE(CUDA_IPC_HANDLE_SIZE),
    VALUE(CUDART_VERSION),
    VALUE(cudaEventDefault),
    VALUE(cudaEventBlockingSync),
    VALUE(cudaEventDisableTiming),
    VALUE(cudaEventInterprocess),
    VALUE(cudaEventRecordDefault),
    VALUE(cudaEventRecordExternal),
    VALUE(cudaEventWaitDefault),
    VALUE(cudaEventWaitExternal),
    VALUE(cudaStreamDefault),
    VALUE(cudaStreamNonBlocking),
    {"cudaStreamLegacy", (uint64_t)(uintptr_t)cudaStreamLegacy},
    {"cudaStreamPerThread", (uint64_t)(uintptr_t)cudaStreamPerThread},
    VALUE(cudaDevAttrIpcEventSupport),
    VALUE(cudaStreamCaptureStatusNone),
    VALUE(cudaStreamCaptureStatusActive),
    VALUE(cudaStreamCaptureStatusInvalidated),
    VALUE(cudaStreamCaptureModeGlobal),
    VALUE(cudaStreamCaptureModeThreadLocal),
    VALUE(cudaStreamCaptureModeRelaxed),
    VALUE(cudaMemcpyDeviceToHost),
    VALUE(cudaMemcpyHostToDevice),
    /* the codes the safe crate names */
    VALUE(cudaSuccess),
    VALUE(cudaErrorInvalidValue),
    VALUE(cudaErrorMemoryAllocation),
    VALUE(cudaErrorCudartUnloading),
    VALUE(cudaErrorInsufficientDriver),
    VALUE(cudaErrorNoDevice),
    VALUE(cudaErrorInvalidDevice),
    VALUE(cudaErrorDeviceUninitialized),
    VALUE(cudaErrorContextIsDestroyed),
    VALUE(cudaErrorInvalidResourceHandle),
    VALUE(cudaErrorIllegalState),
    VALUE(cudaErrorNotReady),
    VALUE(cudaErrorNotSupported),
    VALUE(cudaErrorStreamCaptureUnsupported),
    VALUE(cudaErrorUnknown),
};

const struct abi_entry *cuda_event_abi_table(size_t *len) {
    *len = sizeof ABI / sizeof ABI[0];
    return ABI;
}

/* C interop: a C library that records, queries and waits on events it is handed, and creates events
 * that a Rust caller takes over. Each returns the cudaError_t as an int. */
int cuda_event_c_create(cudaEvent_t *event, unsigned int flags) {
    return (int)cudaEventCreateWithFlags(event, flags);
}

int cuda_event_c_record(cudaEvent_t event, cudaStream_t stream) {
    return (int)cudaEventRecord(event, stream);
}

int cuda_event_c_query(cudaEvent_t event) {
    return (int)cudaEventQuery(event);
}

int cuda_event_c_stream_wait(cudaStream_t stream, cudaEvent_t event) {
    return (int)cudaStreamWaitEvent(stream, event, 0);
}
