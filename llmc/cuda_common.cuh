// cuda_common.cuh: the GPU context passed to every launcher (device, stream, cuBLASLt handle and
// workspace), the bf16 type, and small device helpers shared by the kernels.
// No mutable globals: everything a launcher needs travels in a GpuContext.
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include "check.h"

typedef __nv_bfloat16 bf16;

#define CUBLASLT_WORKSPACE_BYTES (32u << 20)  // what cuBLASLt's Hopper kernels ask for at most

typedef struct {
    int device;
    int sm_count;
    size_t l2_bytes;
    cudaStream_t stream;     // non-blocking: a plain cudaMemcpy or cudaMemset (legacy stream) neither waits
                             // for it nor is waited for; synchronise before reading back, and after uploads
    cublasLtHandle_t lt;
    void* lt_workspace;      // (CUBLASLT_WORKSPACE_BYTES) scratch for cuBLASLt
    size_t lt_workspace_bytes;
} GpuContext;

static inline void gpu_context_build(GpuContext* ctx, int device) {
    int count = 0;
    cuda_check(cudaGetDeviceCount(&count));
    if (device < 0 || device >= count) {
        fprintf(stderr, "error: GPU %d requested, but %d GPU(s) are visible\n  hint: check CUDA_VISIBLE_DEVICES\n", device, count);
        exit(EXIT_FAILURE);
    }
    cuda_check(cudaSetDevice(device));
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, device));
    ctx->device = device;
    ctx->sm_count = prop.multiProcessorCount;
    ctx->l2_bytes = (size_t)prop.l2CacheSize;
    cuda_check(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    cublas_check(cublasLtCreate(&ctx->lt));
    ctx->lt_workspace_bytes = CUBLASLT_WORKSPACE_BYTES;
    cuda_check(cudaMalloc(&ctx->lt_workspace, ctx->lt_workspace_bytes));
}

static inline void gpu_context_free(GpuContext* ctx) {
    cuda_check(cudaFree(ctx->lt_workspace));
    cublas_check(cublasLtDestroy(ctx->lt));
    cuda_check(cudaStreamDestroy(ctx->stream));
}

__host__ __device__ static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// --- device helpers --------------------------------------------------------------------------

__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
