/* Device and memory helpers of the CUDA C ABI (cuda_kernels.h): thin
 * wrappers over the CUDA runtime that turn its error codes into tide_status
 * messages naming the call that failed. */
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#include "backend/cuda/cuda_util.cuh"

extern "C" int tide_cuda_device_count(int *n, tide_status *st) {
    *n = 0;
    cudaError_t e = cudaGetDeviceCount(n);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
        *n = 0;
        return 0;
    }
    return tide_cuda_check(e, "cudaGetDeviceCount", st);
}

extern "C" int tide_cuda_describe(char *buf, size_t size, tide_status *st) {
    cudaDeviceProp p;
    if (tide_cuda_check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties", st) != 0) return -1;
    int drv = 0, rt = 0;
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    snprintf(buf, size, "%s, compute capability %d.%d, %d SMs, %.1f GiB, L2 %d MiB, driver %d, runtime %d",
             p.name, p.major, p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1u << 30),
             p.l2CacheSize >> 20, drv, rt);
    return 0;
}

extern "C" int tide_cuda_malloc(void **p, size_t bytes, tide_status *st) {
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        return tide_fail(st, TIDE_ERR_NOMEM, "cuda: cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
    }
    return 0;
}

extern "C" void tide_cuda_free(void *p) {
    if (p) (void)cudaFree(p);
}

extern "C" int tide_cuda_upload(void *dev, const void *host, size_t bytes, tide_status *st) {
    return tide_cuda_check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device", st);
}

extern "C" int tide_cuda_download(void *host, const void *dev, size_t bytes, tide_status *st) {
    return tide_cuda_check(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host", st);
}

extern "C" int tide_cuda_memset(void *dev, int byte, size_t bytes, tide_status *st) {
    return tide_cuda_check(cudaMemset(dev, byte, bytes), "cudaMemset", st);
}

extern "C" int tide_cuda_sync(tide_status *st) {
    return tide_cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", st);
}
