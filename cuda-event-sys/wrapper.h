/* The C runtime API only: cuda_runtime.h would pull in C++ templates that bindgen cannot use. */
#include <cuda_runtime_api.h>
