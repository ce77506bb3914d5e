/* The C runtime API only: cuda_runtime.h would pull in C++ templates that bindgen cannot use. */
#include <cuda_runtime_api.h>
/* The driver functions' types (PFN_cuEventRecord_v2000...), each with the ABI version it names, for
   the entry points that cudaGetDriverEntryPointByVersion hands out. Includes cuda.h. */
#include <cudaTypedefs.h>
