/* Host-side helpers shared by the .cu files: CUDA error codes to tide_status,
 * and the check after a launch. Private to src/backend/cuda (C++ only). */
#ifndef TIDE_BACKEND_CUDA_CUDA_UTIL_CUH
#define TIDE_BACKEND_CUDA_CUDA_UTIL_CUH

#include <cuda_runtime.h>

extern "C" {
#include "base/status.h"
}

/* 0 when e is cudaSuccess, else -1 with "cuda: WHAT: <CUDA's message>". */
static inline int tide_cuda_check(cudaError_t e, const char *what, tide_status *st) {
    if (e == cudaSuccess) return 0;
    return tide_fail(st, TIDE_ERR_INTERNAL, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* After a <<<>>> launch: a bad configuration or a missing kernel image shows
 * up here; faults during execution show up at the next synchronisation. */
static inline int tide_cuda_launched(const char *kernel, tide_status *st) {
    return tide_cuda_check(cudaGetLastError(), kernel, st);
}

#endif
